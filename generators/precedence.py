"""A family's ``precedence`` group: every row of its refusal table alone, and every pair that can fail together.

The table is the spec's (``qconform.spec.refusal_order.REFUSAL_ORDER``); a family says how to break
each row of it (:class:`Breaks`): a fresh valid draft of an input, one in-place fault per row, and the
encoding of a draft as a case input. A pair's faults are applied from the later row to the earlier,
so each fault is written onto an input the later ones already broke (as ``wire_frame_faults`` does).
Pairs that cannot fail together (a dense and a sparse rule, a weights and a logits rule) are listed
in ``exclusive`` with the reason.

The generator checks the spec against its table here: a row alone must be refused with that row's
code, a pair with the earlier row's code; anything else stops generation. Case names say which rows
fail: ``r03-token_out_of_range-r05-bad_sparse_support``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import combinations
from typing import Any, Generic, TypeVar

from qconform.generators.registry import Case, Note
from qconform.spec.refusal_order import REFUSAL_ORDER, Refusal

D = TypeVar("D")

#: The flag (and note name) of every precedence case.
FLAG = "REFUSAL_PRECEDENCE"
NOTE = Note(
    "MALFORMED_INPUT",
    "One or two rows of the family's refusal precedence table broken at once (docs/formats/<family>.md, "
    "'Refusal precedence'): the answer is the earlier row's code.",
    "Catches an implementation that checks its refusals in another order, entry by entry instead of class by "
    "class, or that misses a refusal.",
)


@dataclass(frozen=True)
class Breaks(Generic[D]):
    """How to make each row of ``family``'s refusal table fail.

    ``base(rows)`` is a fresh valid draft for the rows about to be broken (a dense or a sparse
    row, weights or logits); ``faults[n]`` breaks row ``n`` (1-based) in place and nothing
    else; ``encode`` makes the case input of a draft. ``exclusive`` holds the pairs of rows that
    never fail together, and ``why`` says why.
    """

    family: str
    base: Callable[[frozenset[int]], D]
    faults: dict[int, Callable[[D], object]]
    encode: Callable[[D], dict]
    exclusive: frozenset[frozenset[int]] = frozenset()
    why: str = ""

    @property
    def rows(self) -> tuple[Refusal, ...]:
        return REFUSAL_ORDER[self.family]

    def pairs(self) -> Iterator[tuple[int, int]]:
        """Every pair of rows ``(a, b)``, ``a < b``, that can fail together."""
        for a, b in combinations(range(1, len(self.rows) + 1), 2):
            if frozenset((a, b)) not in self.exclusive:
                yield a, b

    def broken(self, rows: tuple[int, ...]) -> dict:
        """The case input with ``rows`` broken, the later row's fault first."""
        draft = copy.deepcopy(self.base(frozenset(rows)))
        for row in sorted(rows, reverse=True):
            self.faults[row](draft)
        return self.encode(draft)


def slug(refusal: Refusal) -> str:
    return refusal.code.lower()


def exclusive_between(first: set[int], second: set[int]) -> frozenset[frozenset[int]]:
    """Every pair of one row of ``first`` and one of ``second`` (two kinds of input that never meet)."""
    return frozenset(frozenset((a, b)) for a in first for b in second if a != b)


def precedence_cases(
    breaks: Breaks[Any], solve: Callable[[dict], dict], rules: tuple[str, ...], flags: tuple[str, ...] = (FLAG,)
) -> Iterator[Case]:
    """The cases of a ``precedence`` group; stops if the spec answers other than the table."""
    rows = breaks.rows
    if set(breaks.faults) != set(range(1, len(rows) + 1)):
        raise AssertionError(f"{breaks.family}: a fault for every row of its table, not {sorted(breaks.faults)}")
    singles = [((n,), f"r{n:02d}-{slug(rows[n - 1])}") for n in range(1, len(rows) + 1)]
    doubles = [((a, b), f"r{a:02d}-{slug(rows[a - 1])}-r{b:02d}-{slug(rows[b - 1])}") for a, b in breaks.pairs()]
    for broken_rows, name in singles + doubles:
        case_input = breaks.broken(broken_rows)
        expected = solve(case_input)
        first = rows[broken_rows[0] - 1]
        if expected != {"error": first.code}:
            raise AssertionError(f"{breaks.family}/precedence/{name}: the spec answers {expected}, its table {first}")
        described = " and ".join(f"row {n} ({rows[n - 1].when})" for n in broken_rows)
        yield Case(
            name=name,
            comment=f"Breaks {described}: {first.code}, the earlier row's code.",
            rules=rules,
            flags=flags,
            input=case_input,
            expected=expected,
            result="invalid",
        )
