"""Target-only fallback (R22, R23, R24, R25, R28): its draw key, and the two target ranks deciding together.

When a round's proposal is not consumed (missing, corrupt, late or timed-out
q; a worker FAILED; a RESET, CANCEL or disconnect before the COMMIT), the
target samples one token target-only from the committed prefix with its
ordinary sampler (R25). Its draw is keyed like the bonus draw of an empty
proposal, at the round's anchor, but with **draw counter 1**: the CORRECTION
draw at ``anchor`` with counter 0 is the correction after zero accepted drafts
of the same round, which the target may already have drawn when the round was
lost after its COMPLETION validated (a disconnect before the COMMIT), and R24
forbids a second draw under one key. docs/rng-abi.md, "Target-only fallback".

The design's target has two ranks (TP2), each holding its copy of the round's
rows. They decide each round **together**: every rank commits the verified
proposal only when every rank holds the same validated rows; otherwise every
rank invalidates the proposal (a synchronized invalidation) and samples the
same target-only token at the same key. So a missing, corrupt or late q on any
rank discards the proposal on both, and no rank ever commits while another
falls back (:func:`decide_ranks`).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

from qconform.spec.rng_abi import Domain, DrawKey, RngIdentity
from qconform.spec.rules import defines
from qconform.spec.verification import DrawRecord, categorical_draw, check_target_row

#: The draw counter of the target-only draw (the round's own draws use 0).
FALLBACK_DRAW_COUNTER: int = 1
#: The decision name of the target-only draw in a :class:`DrawRecord`.
TARGET_ONLY: str = "target_only"
COMMIT: str = "commit"
#: Why every rank fell back when each rank held rows, but not the same ones.
RANKS_DISAGREE: str = "RANKS_DISAGREE"


@defines("R22", "R23", "R24", "R25")
def fallback_key(ident: RngIdentity) -> DrawKey:
    """The key of the target-only draw of round ``ident``: CORRECTION, position ``anchor``, counter 1."""
    return DrawKey(ident.seed, ident.generation, ident.round, ident.anchor, Domain.CORRECTION, FALLBACK_DRAW_COUNTER)


@defines("R11", "R25")
def target_only_draw(ident: RngIdentity, p_row: Sequence[Fraction]) -> DrawRecord:
    """The target-only token of round ``ident``: ``p_1`` (the target row at the anchor) drawn at :func:`fallback_key`.

    The token is the first ``v`` whose cumulative mass satisfies
    ``C_v * 2^32 > u32 * R`` (R11), as every correction and bonus draw.
    """
    check_target_row(p_row, len(p_row))
    return categorical_draw(fallback_key(ident), p_row, TARGET_ONLY)


@dataclass(frozen=True)
class RankView:
    """What one target rank holds of a round when the ranks decide.

    ``rows`` is a digest of the validated rows and tokens the rank would verify
    (None: it holds none), ``reason`` why it holds none (its receiver's reason
    code, ``timeout`` for q that arrived late or never).
    """

    rows: bytes | None
    reason: str | None = None


@dataclass(frozen=True)
class RankOutcome:
    """What one rank does with the round: ``commit`` the verified proposal, or ``target_only`` with its draw."""

    kind: str
    reason: str | None = None
    draw: DrawRecord | None = None


@defines("R25", "R28")
def decide_ranks(ident: RngIdentity, views: Sequence[RankView], p_row: Sequence[Fraction]) -> tuple[RankOutcome, ...]:
    """The one outcome every rank applies to round ``ident`` (a synchronized decision).

    Every rank commits when every rank holds validated rows and they are the
    same; otherwise every rank discards the whole proposal and commits the same
    target-only token (:func:`target_only_draw`). The reason is the first
    rank's (in rank order) that holds no rows, else ``RANKS_DISAGREE``.
    """
    if not views:
        raise ValueError("a round is decided by at least one rank")
    held = {view.rows for view in views}
    if None not in held and len(held) == 1:
        return tuple(RankOutcome(COMMIT) for _ in views)
    reason = next((view.reason for view in views if view.rows is None), RANKS_DISAGREE)
    draw = target_only_draw(ident, p_row)
    return tuple(RankOutcome(TARGET_ONLY, reason, draw) for _ in views)
