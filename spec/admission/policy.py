"""Depth admission: the fixed-depth policy and the sequential stopping-rule interface (R35, R36).

A round admits positions one at a time. At step ``i`` the policy sees an
:class:`AdmissionView` and answers :data:`ADMIT` (position ``i`` will be
verified; ``x_i`` is sampled now) or :data:`STOP` (the proposal is
``x_1..x_(i-1)``). Once it stops it is never asked again, so a stopped prefix is
never reopened, and nothing is sampled for a position that was not admitted.
The round admits at most the scenario's maximum depth.

What the view offers that is fixed before ``x_i`` is drawn: the committed
history, the load measured before drawing, the prior rounds, and
``x_1..x_(i-1)`` with the confidences that encode them. The view also reveals
later values on request (``view.draft(i)``, a later confidence) so that a
scheduler that inspects them can be audited; each read is logged with the
drafts it encodes, and a premature one fails the audit (R36).

A policy must be a deterministic function of what it reads: the auditor runs
it again on every enumerated path.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Iterator, Sequence, overload

from qconform.spec.admission.reveal import (
    CONFIDENCE,
    DRAFT,
    TOKEN_CONFIDENCE,
    DraftBlock,
    ReadLog,
    reveal_depth,
)
from qconform.spec.errors import refuse
from qconform.spec.rules import defines

ADMIT = "admit"
STOP = "stop"


@dataclass(frozen=True)
class RoundRecord:
    """A finished round, as later rounds' policies may see it: its depth and what it emitted."""

    depth: int
    emitted: tuple[int, ...]


class LazyDrafts(Sequence[int]):
    """The round's drafts as a sequence: item ``k`` is ``x_(k+1)``, drawn and logged when read."""

    def __init__(self, view: "AdmissionView") -> None:
        self.view = view

    def __len__(self) -> int:
        return self.view.max_depth

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> list[int]: ...

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self.view.draft(k + 1) for k in range(*index.indices(len(self)))]
        if not -len(self) <= index < len(self):
            raise IndexError(index)
        return self.view.draft(index % len(self) + 1)

    def __iter__(self) -> Iterator[int]:
        for k in range(len(self)):
            yield self.view.draft(k + 1)


class AdmissionView:
    """What an admission policy may consult at step ``step`` of a round (R36).

    ``history`` is the committed context, ``load`` the load measured before
    drawing, ``prior_rounds`` the earlier rounds of the audited stream. Draft
    values are read through :meth:`draft`, :meth:`confidence`,
    :meth:`token_confidence`, :meth:`reveal` or :attr:`drafts`; each read is logged.
    """

    def __init__(self, step: int, block: DraftBlock, log: ReadLog, prior_rounds: tuple[RoundRecord, ...]) -> None:
        self.step = step
        self.max_depth = block.scenario.max_depth
        self.history = block.context
        self.load = block.scenario.load
        self.prior_rounds = prior_rounds
        self.drafts = LazyDrafts(self)
        self._block = block
        self._log = log

    def read(self, name: str) -> int | Fraction:
        """The value named ``x<j>``, ``c<j>`` or ``t<j>``, logged at this step."""
        value = self._block.value(name)
        self._log.record(self.step, name)
        return value

    def draft(self, j: int) -> int:
        """The draft token ``x_j`` (1-based)."""
        return self.read(f"{DRAFT}{j}")

    def confidence(self, j: int) -> Fraction:
        """The confidence ``c_j`` of position ``j``; it encodes ``x_1..x_(j-1)``."""
        return self.read(f"{CONFIDENCE}{j}")

    def token_confidence(self, j: int) -> Fraction:
        """``q_j(x_j)``, the confidence of the sampled token; it encodes ``x_1..x_j``."""
        return self.read(f"{TOKEN_CONFIDENCE}{j}")

    def reveal(self, names: Sequence[str]) -> tuple[int, ...]:
        """Read the named values (logged) and return the draft prefix that they encode.

        A decision table keyed by the drafts its inputs depend on uses this:
        the log names what was read, the prefix is the table's key.
        """
        for name in names:
            self.read(name)
        return self._block.prefix(reveal_depth(names))


Policy = Callable[[AdmissionView], object]


@defines("R36")
def decision_of(answer: object) -> str:
    """:data:`ADMIT` for ``ADMIT`` or ``True``, :data:`STOP` for ``STOP`` or ``False``; else BAD_POLICY."""
    if answer is True or answer == ADMIT:
        return ADMIT
    if answer is False or answer == STOP:
        return STOP
    raise refuse("BAD_POLICY", f"the policy answered {answer!r}, not admit or stop")


@defines("R35")
def fixed_depth(depth: int) -> Policy:
    """The reference policy: the depth is fixed before sampling (R35).

    It admits position ``i`` iff ``i <= depth`` and reads nothing. ``depth = 0``
    is target-only; the design's arm is depth five.
    """
    if not isinstance(depth, int) or isinstance(depth, bool) or depth < 0:
        raise refuse("BAD_POLICY", f"fixed depth {depth!r} is not a nonnegative integer")

    def policy(view: AdmissionView) -> str:
        return ADMIT if view.step <= depth else STOP

    policy.__qualname__ = f"fixed_depth({depth})"
    return policy


@defines("R36")
def block_policy(choose_depth: Callable[[AdmissionView], int]) -> Policy:
    """A scheduler that picks a whole depth, asked as a sequential policy: admit ``i`` iff its depth >= i.

    ``choose_depth`` is evaluated at every step on that step's view, so what it
    reads is logged against the step whose admission it decides; a scheduler
    that looks at the whole block before choosing is flagged at step 1.
    """

    def policy(view: AdmissionView) -> str:
        depth = choose_depth(view)
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 0:
            raise refuse("BAD_POLICY", f"the scheduler chose depth {depth!r}")
        return ADMIT if depth >= view.step else STOP

    policy.__qualname__ = f"block_policy({getattr(choose_depth, '__qualname__', 'scheduler')})"
    return policy
