"""Dyadic24 count allocation: the normative, exact largest-remainder rule (R03, R04, R06, R07, R09).

Given nonnegative weights ``w_v`` with total ``W > 0``, each token's quota is the
exact rational ``Q_v = M * w_v / W`` (M = 2^24). Every token first gets
``floor(Q_v)`` counts; the ``remaining = M - sum_v floor(Q_v)`` tickets go one
each to the tokens with the largest fractional parts ``f_v = Q_v - floor(Q_v)``,
ties to the lowest global token ID (R06). The counts are nonnegative integers
summing exactly to M, and q(v) = c_v / M (R03) is the semantic
``dyadic24-standard-v1`` (R09). A token may get count 0 (R04): that changes the
proposal only.

The design recommends FP64 arithmetic for kernels (R06); the spec computes the
same rule exactly, and :mod:`qconform.spec.allocation_fp64` bounds when FP64 can
differ from it (only at near-ties, measured by ``tie_gap``).

Computation: the allocation depends only on the ratios of the weights, so the
weights are first expressed as integers ``n_v`` in one common unit (for FP32 and
FP64 weights a power of two). Then ``Q_v = M * n_v / N`` with one denominator
``N = sum n_v``: each floor is one integer division, and comparing fractional
parts is comparing the integer remainders ``(M * n_v) mod N``. Only the few
tokens near the ticket threshold need their exact remainders
(:func:`largest_remainders`).

The fast paths live apart, in :mod:`qconform.spec.allocation_certified`, and
are not normative: ``allocate_dense_f32_bits`` (integers ``n_v`` straight from
FP32 bits, exactly equal to ``allocate_dense(weights_from_f32(bits))``) and a
certified FP64 evaluation. No vector's answer is computed with them, so the
vectors cannot pin them; tests prove them equal to the normative path.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from itertools import compress, repeat
from operator import add, and_, floordiv, gt, lshift, rshift
from typing import Callable, Sequence

from qconform.spec.constants import M_BITS, M
from qconform.spec.errors import refuse
from qconform.spec.rules import defines


@dataclass(frozen=True)
class DenseAllocation:
    """Counts over the whole row (R03, R06).

    ``counts[v]`` is c_v (sum M); ``remaining`` is the number of tickets handed
    out after the floors; ``tie_gap`` is how far the ticket decision is from a
    tie (see :func:`allocate_units`).
    """

    counts: list[int]
    remaining: int
    tie_gap: Fraction


def checked_units(weights: Sequence[Fraction]) -> list[int]:
    """:func:`common_units` of the weights, refusing an empty row, a negative
    weight (the lowest such ID) or zero total mass (R05)."""
    if len(weights) == 0:
        raise refuse("EMPTY_ROW")
    units = common_units(weights)
    if min(units) < 0:
        raise refuse("NEGATIVE_WEIGHT", f"token {next(v for v, n in enumerate(units) if n < 0)}")
    if not any(units):
        raise refuse("ZERO_MASS", f"all {len(units)} weights are zero")
    return units


def common_units(weights: Sequence[Fraction]) -> list[int]:
    """Integers ``n_v = w_v * D`` for the least common denominator D of the weights.

    FP32 / FP64 weights have power-of-two denominators: there are few distinct
    ones, and D is the largest.
    """
    denominators = set(w.denominator for w in weights)
    common = math.lcm(*denominators)
    scale = {d: common // d for d in denominators}
    return [w.numerator * scale[w.denominator] for w in weights]


#: The fractional parts are first bucketed by their top COARSE_BITS bits; only
#: the buckets at the ticket threshold are ranked by exact remainders.
COARSE_BITS: int = 12


@dataclass(frozen=True)
class Tickets:
    """Who gets the ``remaining`` tickets: every token whose bucket is above ``level``,
    plus ``contested_winners``; and the exact remainders of the last winner in rank
    order and of the best token without a ticket."""

    level: int
    contested_winners: list[int]
    last_winner_remainder: int
    best_loser_remainder: int


def threshold(histogram: Counter, needed: int) -> tuple[int, int]:
    """The key holding the ``needed``-th largest item, and how many items lie strictly above it."""
    above = 0
    for key in sorted(histogram, reverse=True):
        if above + histogram[key] >= needed:
            return key, above
        above += histogram[key]
    raise ValueError(f"fewer than {needed} items")


def largest_remainders(coarse: Sequence[int], remaining: int, remainder: Callable[[int], int]) -> Tickets:
    """The ``remaining`` largest fractional parts, ties to the lowest ID.

    Rank order is decreasing fractional part, then increasing ID. ``coarse[v]``
    is ``floor(f_v * 2^COARSE_BITS)``, a monotone key: a higher bucket holds larger
    fractional parts. Buckets above the threshold bucket win outright; only the
    threshold bucket and the next lower one are ranked by their exact remainders
    ``remainder(v)``. Requires ``0 < remaining < len(coarse)``.
    """
    histogram = Counter(coarse)
    level, above = threshold(histogram, remaining)
    lowest = max((c for c in histogram if c < level), default=level)
    # No bucket lies strictly between ``lowest`` and ``level``: those two are contested.
    contested = list(compress(range(len(coarse)), map({lowest, level}.__contains__, coarse)))
    exact = {v: remainder(v) for v in contested}
    needed = remaining - above
    value, above_value = threshold(Counter(exact.values()), needed)
    winners = [v for v in contested if exact[v] > value]
    tied = [v for v in contested if exact[v] == value]  # ascending IDs
    taken = needed - above_value
    winners.extend(tied[:taken])
    if taken < len(tied):
        best_loser = value
    else:
        best_loser = max(r for r in exact.values() if r < value)
    return Tickets(level, winners, value, best_loser)


@defines("R04", "R06")
def allocate_units(units: Sequence[int]) -> DenseAllocation:
    """Largest-remainder allocation of M counts for integer weights ``n_v`` (R06).

    ``Q_v = M * n_v / N`` with ``N = sum n_v > 0``: ``floor(Q_v) = (M * n_v) // N``
    and the fractional part is ``f_v = r_v / N`` with ``r_v = (M * n_v) mod N``.
    ``remaining = M - sum floor(Q_v)`` tickets go to the largest ``r_v``, ties to
    the lowest ID.

    Tie gap: let *admitted* be the tokens given a ticket. ``tie_gap`` =
    (min f_v over admitted, or 1 if none) - (max f_v over tokens not admitted
    with positive weight, or 0 if none). It is 0 exactly when a tie was decided
    by ID, and any arithmetic that computes every quota within less than
    tie_gap / 2 gets the same counts (see :mod:`qconform.spec.allocation_fp64`).
    Since the fractional parts sum to ``remaining`` and each is below 1, when
    remaining > 0 more than ``remaining`` tokens have a positive fractional part,
    so the best token without a ticket has positive weight.

    Computation: one integer division per token gives
    ``floor(Q_v * 2^COARSE_BITS)``, whose high part is ``floor(Q_v)`` and whose low
    COARSE_BITS bits are ``floor(f_v * 2^COARSE_BITS)``, the bucket of ``f_v``.
    """
    total = sum(units)
    if total <= 0 or min(units) < 0:
        raise refuse("ZERO_MASS" if total == 0 else "NEGATIVE_WEIGHT", "integer weights")
    fine = list(map(floordiv, map(lshift, units, repeat(M_BITS + COARSE_BITS)), repeat(total)))
    counts = list(map(rshift, fine, repeat(COARSE_BITS)))
    remaining = M - sum(counts)
    if remaining == 0:
        return DenseAllocation(counts, 0, Fraction(1))
    coarse = list(map(and_, fine, repeat((1 << COARSE_BITS) - 1)))

    def remainder(v: int) -> int:
        return (units[v] << M_BITS) - counts[v] * total

    tickets = largest_remainders(coarse, remaining, remainder)
    counts = list(map(add, counts, map(gt, coarse, repeat(tickets.level))))
    for v in tickets.contested_winners:
        counts[v] += 1
    tie_gap = Fraction(tickets.last_winner_remainder - tickets.best_loser_remainder, total)
    return DenseAllocation(counts, remaining, tie_gap)


@defines("R03", "R04", "R06", "R09")
def allocate_dense(weights: Sequence[Fraction]) -> DenseAllocation:
    """Dense dyadic24 counts of a row of nonnegative weights (R06).

    Exact floor plus largest remainders of ``Q_v = M * w_v / W``, ties to the
    lowest ID; the counts sum to M. Refuses an empty row, a negative weight or
    zero mass (R05).
    """
    return allocate_units(checked_units(weights))


@dataclass(frozen=True)
class TopKSelection:
    """The top-k support (R07): ``support`` in ascending ID order.

    ``selection_gap`` is how far the support decision is from a tie, in the units
    of the weights: (the smallest positive selected weight) - (the largest
    excluded weight, or 0 if nothing is excluded). It is 0 exactly when a tie at
    the k-th place was decided by ID. When fewer than k weights are positive,
    every positive weight is selected and the gap is the smallest positive
    weight.
    """

    support: list[int]
    selection_gap: Fraction


@defines("R07")
def select_top_k(weights: Sequence[Fraction], k: int) -> TopKSelection:
    """Select the global top-k support on the weights, ties to the lowest ID (R07).

    Refuses k outside 1..V (``BAD_SUPPORT_SIZE``). Zero-weight tokens are selected
    only when fewer than k weights are positive (lowest IDs first); they then get
    count 0 and are dropped from the sparse row.
    """
    units = checked_units(weights)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= len(units):
        raise refuse("BAD_SUPPORT_SIZE", f"k={k!r} not in 1..{len(units)}")
    # Rank order: decreasing weight, ties to the lowest ID (nlargest is stable).
    ranked = heapq.nlargest(min(k + 1, len(units)), range(len(units)), key=units.__getitem__)
    selected = ranked[:k]
    positive = [v for v in selected if units[v] > 0]
    smallest_selected = weights[positive[-1]]
    best_excluded = weights[ranked[k]] if k < len(units) else 0
    return TopKSelection(sorted(selected), Fraction(smallest_selected - best_excluded))


@dataclass(frozen=True)
class SparseAllocation:
    """A sparse dyadic24 row (R07).

    ``ids`` (ascending) and ``counts`` list only positive counts (sum M);
    ``support`` is the selected top-k support, including tokens whose count
    floored to zero; ``remaining`` and ``tie_gap`` are those of the allocation on
    the support; ``selection_gap`` that of :class:`TopKSelection`.
    """

    ids: list[int]
    counts: list[int]
    support: list[int]
    remaining: int
    tie_gap: Fraction
    selection_gap: Fraction


@defines("R04", "R06", "R07")
def allocate_sparse(weights: Sequence[Fraction], k: int) -> SparseAllocation:
    """Sparse top-k dyadic24 counts (R07).

    Select the global support first (:func:`select_top_k`), normalize within it
    (the allocation depends only on the support's weights), allocate M counts on
    it with :func:`allocate_dense` (support in ascending ID order, so ties still
    go to the lowest global ID), drop zero counts, declare zero everywhere else.
    """
    selection = select_top_k(weights, k)
    inner = allocate_dense([weights[v] for v in selection.support])
    kept = [(v, c) for v, c in zip(selection.support, inner.counts) if c > 0]
    return SparseAllocation(
        ids=[v for v, _ in kept],
        counts=[c for _, c in kept],
        support=selection.support,
        remaining=inner.remaining,
        tie_gap=inner.tie_gap,
        selection_gap=selection.selection_gap,
    )
