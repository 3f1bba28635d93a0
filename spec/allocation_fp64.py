"""NON-NORMATIVE: the design's recommended FP64 allocation, and when it can differ (R06).

**This module is not the spec of the allocation.** The normative rule is the
exact one of :mod:`qconform.spec.allocation`. This module reproduces, with
Python floats *on purpose*, what the design recommends a kernel compute (R06:
"Use FP64 allocation arithmetic and assert 0 <= remaining < M and exact final
count sum; refuse a numerically inconsistent allocation"), so that the corpus
can show where such a kernel really differs, and so that the harness can tell
an FP64 near-tie divergence (result class ``precision``) from a wrong
allocation (``fail``).

The FP64 recipe, for n weights ``w_v`` (FP32 or FP64, converted exactly):

1. ``W_hat`` = sequential FP64 sum in ID order;
2. ``quota_v = fl(w_v / W_hat) * M`` (the product by M = 2^24 is exact);
3. ``floor_v = floor(quota_v)``; ``remaining = M - sum floor_v``;
4. refuse (``INCONSISTENT_ALLOCATION``) unless ``0 <= remaining < M`` and
   ``remaining`` <= the number of positive weights;
5. one ticket each to the ``remaining`` largest ``quota_v - floor_v``, ties to the
   lowest ID; refuse unless the counts sum exactly to M.

**Theorem.** Let n <= 2^24, the FP64 sum not overflow (always true for FP32
weights), ``Delta = (n + 1) * M / 2^53`` and ``tie_gap`` as defined by
:func:`qconform.spec.allocation.allocate_units`. If ``tie_gap > 2 * Delta``, the
FP64 allocation equals the exact allocation, whatever the summation order.
The same holds with the tighter ``Delta = (n + 1) * max_v Q_v / 2^53``.

*Proof.* With u = 2^-53, any order's sum satisfies ``|W_hat - W| <= gamma_{n-1} W``
(gamma_k = k u / (1 - k u)); the division adds one more rounding (or, on
underflow, an absolute error below 2^-1075). Hence ``|quota_v - Q_v| <= Q_v * n u /
(1 - 2(n-1)u) + M 2^-1075 <= Delta`` for n <= 2^24 (Q_v <= M). Let the exact
fractional parts be f_v, A the admitted set, and take theta in the middle of
the gap interval ``(max f over not admitted, min f over A)``. Then every exact
count is ``c_v = ceil(Q_v - theta)``, and ``Q_v - theta`` is more than ``tie_gap / 2
> Delta`` away from every integer (theta is more than Delta from 0, from 1 and
from every f_v). Perturbing each Q_v by at most Delta therefore changes no
``ceil(quota_v - theta)``: they still equal c_v and still sum to M. So exactly
``remaining_hat = M - sum floor(quota_v)`` FP64 fractional parts lie above theta
and all others below it; the FP64 top-``remaining_hat`` set is that set, with
no tie, and FP64 gives every token c_v. QED.

**Equal weights.** Tokens with equal weights have equal exact quotas and, in any
FP64 evaluation, equal computed quotas, so FP64's own lowest-ID rule orders them
exactly as the spec does. A tie between equal weights is therefore no FP64
uncertainty: :func:`fp64_tie_gap` is the tie gap taken only between tokens of
*different* weights, and the theorem holds with it in place of ``tie_gap`` (take
theta at the tied block's fractional part: every token of another weight is more
than Delta away, and the block's tokens move together).

So a divergence of an FP64 kernel on a vector with ``fp64_tie_gap > 2 * Delta`` is a
real failure; with ``fp64_tie_gap <= 2 * Delta`` (:func:`fp64_may_differ`) it may
be a legitimate FP64 near-tie. The corpus carries cases where it really is.
:func:`fp64_row_may_differ` (and :func:`fp64_sparse_may_differ` for a top-k row)
is that verdict for one row, with the row's own ``Delta``
(:func:`fp64_row_error_bound`), as the ``allocation_dense``, ``allocation_sparse``
and ``proposal_chain`` vectors record it.
"""

from __future__ import annotations

import math
import struct
from fractions import Fraction
from typing import Sequence

from qconform.spec.allocation import SparseAllocation, common_units, select_top_k
from qconform.spec.constants import M
from qconform.spec.errors import refuse
from qconform.spec.rules import defines
from qconform.spec.weights import check_weight_bits, weights_from_f32, weights_from_f64

#: FP64 unit roundoff exponent: u = 2^-53.
FP64_UNIT_ROUNDOFF_BITS: int = 53
#: struct codes of the accepted weight dtypes.
WEIGHT_FORMATS: dict[str, str] = {"f32": "f", "f64": "d"}


def fp64_weights(weight_bits: Sequence[int], dtype: str) -> list[float]:
    """The weights as FP64 floats (exact conversion), refused as R05 says."""
    if dtype not in WEIGHT_FORMATS:
        raise ValueError(f"dtype must be 'f32' or 'f64', not {dtype!r}")
    check_weight_bits(weight_bits, dtype)
    code = WEIGHT_FORMATS[dtype]
    raw = struct.pack(f"<{len(weight_bits)}{'I' if code == 'f' else 'Q'}", *weight_bits)
    return list(struct.unpack(f"<{len(weight_bits)}{code}", raw))


def sequential_sum(weights: Sequence[float]) -> float:
    """FP64 sum in ID order, one rounding per addition."""
    total = 0.0
    for w in weights:
        total += w
    return total


@defines("R06")
def allocate_fp64(weights: Sequence[float]) -> list[int]:
    """The FP64 recipe of this module's docstring on FP64 weights (NON-NORMATIVE)."""
    total = sequential_sum(weights)
    quotas = [(w / total) * M for w in weights]
    floors = [math.floor(q) for q in quotas]
    remaining = M - sum(floors)
    positive = sum(1 for w in weights if w > 0)
    if not 0 <= remaining < M or remaining > positive:
        raise refuse("INCONSISTENT_ALLOCATION", f"remaining={remaining}, positive weights={positive}")
    fractions = [q - f for q, f in zip(quotas, floors)]
    # sorted() with reverse=True is stable: ties keep ascending ID order.
    ranked = sorted(range(len(weights)), key=fractions.__getitem__, reverse=True)
    counts = floors
    for v in ranked[:remaining]:
        counts[v] += 1
    if sum(counts) != M:
        raise refuse("INCONSISTENT_ALLOCATION", f"counts sum to {sum(counts)}")
    return counts


@defines("R06")
def allocate_dense_fp64(weight_bits: Sequence[int], dtype: str) -> list[int]:
    """Dense FP64 allocation of FP32 (``dtype="f32"``) or FP64 weight bits (NON-NORMATIVE)."""
    return allocate_fp64(fp64_weights(weight_bits, dtype))


@defines("R06", "R07")
def allocate_sparse_fp64(weight_bits: Sequence[int], dtype: str, k: int) -> tuple[list[int], list[int]]:
    """Sparse FP64 allocation (NON-NORMATIVE): ``(ids, counts)`` of the positive counts.

    The support is the exact top-k selection (selection compares weights, which
    FP64 represents exactly); the FP64 recipe then allocates M on it.
    """
    weights = fp64_weights(weight_bits, dtype)
    exact = weights_from_f32(weight_bits) if dtype == "f32" else weights_from_f64(weight_bits)
    support = select_top_k(exact, k).support
    counts = allocate_fp64([weights[v] for v in support])
    kept = [(v, c) for v, c in zip(support, counts) if c > 0]
    return [v for v, _ in kept], [c for _, c in kept]


@defines("R06")
def fp64_sum_overflows(weight_bits: Sequence[int], dtype: str) -> bool:
    """Whether the sequential FP64 sum of the weights overflows (then FP64 refuses)."""
    return math.isinf(sequential_sum(fp64_weights(weight_bits, dtype)))


@defines("R06")
def fp64_error_bound(n: int, max_quota: Fraction | int = M) -> Fraction:
    """``Delta = (n + 1) * max_quota / 2^53``: bounds |quota_v - Q_v| of the FP64 recipe over
    n weights, in any summation order.

    With the default ``max_quota = M`` this is the row-independent bound
    ``(n + 1) * M / 2^53``. Passing the row's largest exact quota ``max_v Q_v``
    (at least M / n) gives the tighter bound that the proof also yields, since
    each token's error is at most ``Q_v * n u / (1 - 2(n-1)u)`` plus an underflow
    term far below ``u * max_v Q_v / 2``.
    """
    return Fraction((n + 1) * max_quota, 1 << FP64_UNIT_ROUNDOFF_BITS)


@defines("R06")
def fp64_may_differ(tie_gap: Fraction, n: int, max_quota: Fraction | int = M) -> bool:
    """Whether an FP64 allocation over n weights may differ from the exact one:
    ``tie_gap <= 2 * Delta`` (the module's theorem says it cannot otherwise)."""
    return tie_gap <= 2 * fp64_error_bound(n, max_quota)


@defines("R06")
def fp64_tie_gap(weights: Sequence[Fraction], counts: Sequence[int]) -> Fraction:
    """The tie gap of the exact allocation ``counts`` of ``weights``, ignoring ties
    between tokens of equal weight (see the module docstring): the smallest
    distance ``f_a - f_e`` between an admitted token ``a`` and a positive-weight
    token ``e`` left without a ticket, over pairs with ``w_a != w_e``. It is 1 when
    no such pair exists."""
    units = common_units(weights)
    total = sum(units)
    admitted: list[tuple[int, int]] = []
    excluded: list[tuple[int, int]] = []
    for unit, count in zip(units, counts):
        if unit:
            floor, remainder = divmod(M * unit, total)
            (admitted if count > floor else excluded).append((remainder, unit))
    lowest = min((r for r, _ in admitted), default=total)
    highest = max((r for r, _ in excluded), default=0)
    if lowest > highest:
        return Fraction(lowest - highest, total)
    tied = {u for r, u in admitted if r == lowest} | {u for r, u in excluded if r == highest}
    if len(tied) > 1:
        return Fraction(0)
    block = tied.pop()
    next_admitted = min((r for r, u in admitted if u != block), default=total)
    next_excluded = max((r for r, u in excluded if u != block), default=0)
    return Fraction(min(next_admitted - highest, lowest - next_excluded), total)


@defines("R06")
def max_quota(weights: Sequence[Fraction]) -> Fraction:
    """The largest exact quota ``max_v M * w_v / W`` of a row (for :func:`fp64_error_bound`)."""
    return Fraction(M * max(weights), sum(weights))


@defines("R06")
def fp64_row_error_bound(weights: Sequence[Fraction]) -> Fraction:
    """``Delta`` of one row: :func:`fp64_error_bound` over its n weights with its largest
    quota (:func:`max_quota`, a ratio of weights, taken on their integer units so
    that no Fraction is summed)."""
    return fp64_error_bound(len(weights), max_quota(common_units(weights)))


@defines("R06")
def fp64_row_may_differ(
    weight_bits: Sequence[int], dtype: str, weights: Sequence[Fraction], counts: Sequence[int]
) -> bool:
    """Whether the FP64 recipe may legitimately give a row other counts than its exact
    allocation ``counts``: :func:`fp64_may_differ` of the row's :func:`fp64_tie_gap`
    (ties between equal weights are no FP64 uncertainty) with the row's own
    ``Delta`` (:func:`fp64_row_error_bound`), or the FP64 sum of the weights
    overflows (the recipe then refuses). ``weights`` are the exact values of
    ``weight_bits`` (``dtype`` "f32" or "f64")."""
    bound_quota = max_quota(common_units(weights))
    near_tie = fp64_may_differ(fp64_tie_gap(weights, counts), len(weights), bound_quota)
    return near_tie or fp64_sum_overflows(weight_bits, dtype)


@defines("R06", "R07")
def fp64_sparse_may_differ(
    weight_bits: Sequence[int], dtype: str, weights: Sequence[Fraction], alloc: SparseAllocation
) -> bool:
    """:func:`fp64_row_may_differ` of a top-k row, taken over its support: the FP64
    recipe selects the same support as the exact rule (selection compares weights,
    which FP64 represents exactly) and allocates M on it. A support token without
    an entry in ``alloc.ids`` has count 0."""
    counts_of = dict(zip(alloc.ids, alloc.counts))
    return fp64_row_may_differ(
        [weight_bits[v] for v in alloc.support],
        dtype,
        [weights[v] for v in alloc.support],
        [counts_of.get(v, 0) for v in alloc.support],
    )
