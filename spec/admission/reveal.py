"""Drafts revealed lazily, and the log of what a policy read at each step (R36).

A round's drafts ``x_1, x_2, ...`` are drawn in order from their q rows, each
conditioned on the context and the drafts before it (R01), and only when
something needs them: the admission of a position, or a policy that reads them.
Every value a policy can read from the drafts is named and tagged with the
drafts it encodes:

* ``x<j>``: the draft token ``x_j``; it encodes ``x_1..x_j``;
* ``c<j>``: the confidence of position ``j``, computed from the state after
  ``x_(j-1)``; it encodes ``x_1..x_(j-1)``;
* ``t<j>``: the confidence of the sampled token, ``q_j(x_j)``; it encodes
  ``x_1..x_j``.

Before deciding whether position ``i`` is verified, a policy may read a value
only if it encodes ``x_1..x_(i-1)`` at most; a read that encodes ``x_i`` or a
later draft is *premature* (R36).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Iterable

from qconform.spec.admission.choices import Choices
from qconform.spec.admission.draws import DrawOptions
from qconform.spec.admission.scenario import Context, Scenario
from qconform.spec.errors import refuse
from qconform.spec.rules import defines

DRAFT = "x"
CONFIDENCE = "c"
TOKEN_CONFIDENCE = "t"

READ_NAME = re.compile(r"^([xct])([1-9][0-9]*)$")


@defines("R36")
def parse_read(name: str) -> tuple[str, int]:
    """``(kind, j)`` of a read name ``x<j>``, ``c<j>`` or ``t<j>``; BAD_POLICY otherwise."""
    match = READ_NAME.match(name) if isinstance(name, str) else None
    if match is None:
        raise refuse("BAD_POLICY", f"{name!r} is not a read name x<j>, c<j> or t<j>")
    return match.group(1), int(match.group(2))


@defines("R36")
def encoded_drafts(name: str) -> int:
    """How many drafts a named value encodes: ``x<j>``, ``t<j>``: j; ``c<j>``: j - 1."""
    kind, j = parse_read(name)
    return j - 1 if kind == CONFIDENCE else j


@defines("R36")
def reveal_depth(names: Iterable[str]) -> int:
    """The longest draft prefix that the named values encode (0 for none)."""
    return max((encoded_drafts(name) for name in names), default=0)


@dataclass(frozen=True, order=True)
class Read:
    """A value a policy read at admission step ``step``; it encodes ``x_1..x_encodes``."""

    step: int
    name: str
    encodes: int

    @property
    def premature(self) -> bool:
        """Whether it encodes ``x_step`` or a later draft (R36)."""
        return self.encodes >= self.step


class ReadLog:
    """The distinct reads of one round, in the order they were first made."""

    def __init__(self) -> None:
        self.reads: dict[Read, None] = {}

    def record(self, step: int, name: str) -> None:
        self.reads.setdefault(Read(step, name, encoded_drafts(name)), None)

    def premature(self) -> tuple[Read, ...]:
        return tuple(read for read in self.reads if read.premature)

    def names(self) -> list[str]:
        return list(dict.fromkeys(read.name for read in self.reads))


class DraftBlock:
    """The drafts of one round, drawn lazily and in order from the scenario's q rows (R01, R08)."""

    def __init__(self, scenario: Scenario, context: Context, choices: Choices, options: DrawOptions) -> None:
        self.scenario = scenario
        self.context = context
        self.choices = choices
        self.options = options
        self.tokens: list[int] = []

    def check_position(self, j: int) -> None:
        if not isinstance(j, int) or isinstance(j, bool) or not 1 <= j <= self.scenario.max_depth:
            raise refuse("BAD_POLICY", f"position {j!r} outside 1..{self.scenario.max_depth}")

    def prefix(self, length: int) -> tuple[int, ...]:
        """``x_1..x_length``, drawing those not drawn yet."""
        while len(self.tokens) < length:
            self.tokens.append(self.choices.choose(self.options.proposal(self.context + tuple(self.tokens))))
        return tuple(self.tokens[:length])

    def value(self, name: str) -> int | Fraction:
        """The named value (see the module docstring)."""
        kind, j = parse_read(name)
        self.check_position(j)
        before = self.context + self.prefix(j - 1)
        if kind == CONFIDENCE:
            return self.scenario.confidence(before)
        token = self.prefix(j)[-1]
        if kind == DRAFT:
            return token
        return self.scenario.q(before).q(token)
