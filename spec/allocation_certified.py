"""A certified FP64 evaluation of the exact dyadic24 allocation (R06) — NOT normative.

:func:`allocate_dense_f32_certified` computes the allocation of
:mod:`qconform.spec.allocation` in float64 with NumPy, keeps only what the FP64
error bound proves, and recomputes the uncertain tokens exactly with integers. Its
result is exactly ``allocate_dense(weights_from_f32(bits))`` (the proof is in its
docstring and tests check it), so it is a certified fast path for benchmarks and
large rows; the generators and the reference adapter use the plain exact path.
NumPy is optional: it is imported only when this module's functions run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from itertools import repeat
from typing import TYPE_CHECKING, Sequence

from qconform.spec.allocation import M_BITS, DenseAllocation, allocate_units
from qconform.spec.constants import M
from qconform.spec.errors import refuse
from qconform.spec.floats import F32_FRACTION_BITS, F32_MIN_EXPONENT, F32_POS_INF, F32_SIGN
from qconform.spec.rules import defines
from qconform.spec.weights import MAGNITUDE_MASKS, check_weight_bits

if TYPE_CHECKING:
    import numpy

# --- FP32 weights as integers in one unit: the exact fast path -----------------------------


@dataclass(frozen=True)
class WeightUnits:
    """A row of weights as integers in one power-of-two unit: ``w_v = units[v] * 2^unit_exponent``."""

    units: list[int]
    unit_exponent: int


F32_HIDDEN_BIT: int = 1 << F32_FRACTION_BITS


def f32_units(pattern: int, e0: int) -> int:
    """A nonnegative finite FP32 pattern as a multiple of ``2^(e0 - 150)``, for ``e0`` at most
    its exponent field and at least 1 (see :func:`f32_weight_units`)."""
    if pattern < F32_HIDDEN_BIT:
        return pattern
    return ((pattern & (F32_HIDDEN_BIT - 1)) | F32_HIDDEN_BIT) << ((pattern >> F32_FRACTION_BITS) - e0)


@defines("R02", "R05")
def f32_weight_units(bits: Sequence[int]) -> WeightUnits:
    """The weights of :func:`weights_from_f32` as integers in one unit, with no Fraction built.

    A finite FP32 pattern with exponent field ``E`` and fraction field ``F`` has
    the magnitude ``(F + 2^23) * 2^(E - 150)`` when ``E >= 1`` (normal) and
    ``F * 2^-149`` when ``E = 0`` (zero or subnormal). Let ``e0`` be the exponent
    field of the smallest positive weight, at least 1. Every weight is then an
    integer multiple of ``2^(e0 - 150)``: ``n_v = (F + 2^23) << (E - e0)`` when
    ``E >= 1``, and ``n_v`` = the pattern itself when ``E = 0`` (a subnormal's
    ``F``, which occurs only when ``e0 = 1``, or a zero). For nonnegative values
    the patterns are ordered as the values are, so the smallest positive weight
    has the least nonzero pattern. Refusals are those of ``weights_from_f32`` (R05);
    -0.0 is zero.
    """
    check_weight_bits(bits, "f32")
    magnitudes = [b & MAGNITUDE_MASKS["f32"] for b in bits] if F32_SIGN in bits else bits
    e0 = max(min(filter(None, magnitudes)) >> F32_FRACTION_BITS, 1)
    return WeightUnits(list(map(f32_units, magnitudes, repeat(e0))), e0 + F32_MIN_EXPONENT - 1)


@defines("R03", "R04", "R06", "R09")
def allocate_dense_f32_bits(bits: Sequence[int]) -> DenseAllocation:
    """``allocate_dense(weights_from_f32(bits))`` from the FP32 bit patterns, with no Fraction built.

    Fast path, exactly equal: :func:`qconform.spec.weights.f32_weight_units` gives
    integers ``n_v`` with ``w_v = n_v * 2^e`` for one exponent e, so
    ``Q_v = M * w_v / W = M * n_v / N``, which is all :func:`allocate_units` reads;
    ``allocate_dense`` runs the same function on other integers proportional to
    the same weights (:func:`common_units`), and the tie gap ``(r - r') / N`` is a
    ratio, unchanged when every ``n_v`` and N are scaled by one factor. The
    refusals are those of ``weights_from_f32`` (R05).
    """
    return allocate_units(f32_weight_units(bits).units)


# --- A certified FP64 evaluation of the same allocation (optional NumPy) ------------------

#: ``|Q_hat_v - Q_v| < CERTIFIED_RELATIVE_ERROR * Q_hat_v`` for the FP64 quotas of
#: :func:`allocate_dense_f32_certified`.
CERTIFIED_RELATIVE_ERROR: float = 2.0**-51
#: Its ranking margin D: more than twice the absolute quota error 2^-27 plus one rounding (2^-53).
CERTIFIED_MARGIN: float = 2.0**-25
#: Rows below this size keep the FP64 sums of 24-bit significands below 2^53 (exact).
CERTIFIED_MAX_ROW: int = 1 << 29


def certified_fp64_weights(row: "numpy.ndarray", least_positive: int | None = None) -> "numpy.ndarray":
    """The FP64 values of nonnegative finite FP32 patterns, exactly: the widening conversion,
    with subnormals decoded from their integer fields (immune to denormals-are-zero modes).
    ``least_positive``, the least positive pattern if the caller knows it, says whether any is one."""
    import numpy as np

    weights = row.view(np.float32).astype(np.float64)
    if least_positive is None:
        least_positive = least_positive_pattern(row)
    if least_positive < F32_HIDDEN_BIT:  # zeros need no decoding
        subnormal = row < F32_HIDDEN_BIT
        weights[subnormal] = np.ldexp(row[subnormal].astype(np.float64), F32_MIN_EXPONENT)
    return weights


def least_positive_pattern(row: "numpy.ndarray") -> int:
    """The least positive pattern of a uint32 row, or 2^32 if none is: one pass, with zeros
    wrapping to the largest uint32 when one is subtracted."""
    import numpy as np

    return int((row - np.uint32(1)).min(initial=0xFFFFFFFF)) + 1


def exact_total(row: "numpy.ndarray", weights: "numpy.ndarray", e0: int) -> int:
    """N = the sum of the weights in the unit ``2^(e0 - 150)``, exactly.

    The weights of one exponent field are integers times one power of two; their
    integer sum is below 2^53 (fewer than 2^29 tokens), so their FP64 sum is exact,
    and so is its scaling to the unit. When the largest weight's units times the token count
    are below 2^53, one FP64 sum of the row is exact, in any order: every partial sum is an
    integer multiple of the unit below 2^53 units, so no addition rounds.
    """
    import numpy as np

    if f32_units(int(row.max()), e0) * row.size < 1 << 53:
        return int(math.ldexp(float(weights.sum()), 1 - F32_MIN_EXPONENT - e0))
    per_exponent = np.bincount(row >> F32_FRACTION_BITS, weights=weights).tolist()
    return sum(int(math.ldexp(part, 1 - F32_MIN_EXPONENT - e0)) for part in per_exponent if part)


def certified_quotas(
    weights: "numpy.ndarray", total: int, e0: int, out: "numpy.ndarray | None" = None
) -> "numpy.ndarray":
    """``Q_hat_v = fl(w_v * fl(M / fl(W)))`` with ``W = N * 2^(e0 - 150)``: within ``2^-51 Q_hat_v``
    and 2^-27 of the exact quotas (step 2 of :func:`allocate_dense_f32_certified`); into ``out``
    if given (the weights themselves, when they are not needed after)."""
    import numpy as np

    return np.multiply(weights, M / math.ldexp(float(total), e0 + F32_MIN_EXPONENT - 1), out=out)


def distinct_patterns(patterns: "numpy.ndarray") -> tuple["numpy.ndarray", "numpy.ndarray"]:
    """``numpy.unique(patterns, return_inverse=True)``: with no sort where the patterns span no
    more values than there are patterns (a table over the span: ties and near-ties)."""
    import numpy as np

    low = int(patterns.min(initial=F32_POS_INF))
    span = int(patterns.max(initial=0)) - low + 1
    if not 0 < span <= patterns.size:
        return np.unique(patterns, return_inverse=True)
    if span == 1:  # one pattern: every token's index is 0
        return np.array([low], dtype=np.uint32), np.zeros(patterns.size, dtype=np.intp)
    offsets = patterns - np.uint32(low)
    distinct = np.flatnonzero(np.bincount(offsets, minlength=span))
    table = np.empty(span, dtype=np.intp)
    table[distinct] = np.arange(distinct.size)
    return distinct.astype(np.uint32) + np.uint32(low), table[offsets]


class ExactQuotas:
    """``divmod(M * n_v, N)`` of a row's weights, computed once per distinct bit pattern."""

    def __init__(self, row: "numpy.ndarray", e0: int, total: int) -> None:
        self.row, self.e0, self.total = row, e0, total
        self.known: dict[int, tuple[int, int]] = {}

    def of(self, tokens: "numpy.ndarray") -> tuple["numpy.ndarray", list[int], list[int]]:
        """For ``tokens``: each token's index among their distinct patterns, and the
        exact floors and remainders of those patterns."""
        patterns, inverse = distinct_patterns(self.row[tokens])
        for pattern in patterns.tolist():
            if pattern not in self.known:
                self.known[pattern] = divmod(f32_units(pattern, self.e0) << M_BITS, self.total)
        quotas = [self.known[pattern] for pattern in patterns.tolist()]
        return inverse, [q for q, _ in quotas], [r for _, r in quotas]

    def remainders(self, tokens: "numpy.ndarray") -> list[int]:
        """The exact remainders of the distinct patterns of ``tokens``."""
        return self.of(tokens)[2]


def certified_floors(quotas: "numpy.ndarray", exact: ExactQuotas) -> tuple["numpy.ndarray", "numpy.ndarray"]:
    """``(floor(Q_v), f_hat_v)``: FP64 floors where they are certain (step 3 of
    :func:`allocate_dense_f32_certified`), exact ones elsewhere, and fractional parts
    within 2^-27 of the exact ones."""
    import numpy as np

    floors = np.floor(quotas)
    fracs = quotas - floors
    errors = quotas * CERTIFIED_RELATIVE_ERROR
    # ``floors > 0`` is implied by ``f_hat < 2^-51 Q_hat``: below 1, ``f_hat = Q_hat`` exceeds it or both are 0
    low = fracs < errors
    uncertain = np.flatnonzero(np.logical_or(np.add(fracs, errors, out=errors) >= 1, low, out=low))
    if uncertain.size:
        inverse, exact_floors, remainders = exact.of(uncertain)
        floors[uncertain] = np.array(exact_floors, dtype=np.float64)[inverse]
        fracs[uncertain] = np.array([r / exact.total for r in remainders])[inverse]
    return floors, fracs


def first_ranked(contested: "numpy.ndarray", needed: int, exact: ExactQuotas) -> tuple["numpy.ndarray", int, list[int]]:
    """The ``needed`` first of ``contested`` (ascending IDs) in rank order, exact remainder
    descending then ID; the remainder of the last of them; and that of the next one, if any."""
    import numpy as np

    inverse, _, remainders = exact.of(contested)
    descending = sorted(set(remainders), reverse=True)
    if len(descending) == 1:  # one remainder: the rank order is the ID order
        return contested[:needed], descending[0], descending[: int(needed < contested.size)]
    level = {r: i for i, r in enumerate(descending)}
    # small levels sort by radix; ``contested`` is ascending: ties keep ID order
    small = np.int16 if len(level) < 1 << 15 else np.int64
    token_level = np.array([level[r] for r in remainders], dtype=small)[inverse]
    order = np.argsort(token_level, kind="stable")
    levels = token_level[order[needed - 1 : needed + 1]].tolist()
    return contested[order[:needed]], descending[levels[0]], [descending[i] for i in levels[1:]]


def certified_tickets(
    fracs: "numpy.ndarray", positive: "numpy.ndarray", remaining: int, exact: ExactQuotas
) -> tuple["numpy.ndarray", int, int]:
    """Who gets the ``remaining`` tickets, as a boolean mask, and the exact remainders of
    the last winner and of the best positive loser (steps 4 and 5)."""
    import numpy as np

    fracs = np.where(positive, fracs, -1.0)  # zero weights never win and do not count for the tie gap
    theta = float(np.partition(fracs, fracs.size - remaining)[fracs.size - remaining])
    admitted = fracs > theta + CERTIFIED_MARGIN
    sure_losers = (fracs < theta - CERTIFIED_MARGIN) & positive
    lowest = float(np.where(admitted, fracs, 2.0).min())  # the minimum over the admitted, or 2 (a masked
    highest = float(np.where(sure_losers, fracs, -1.0).max())  # np.min(where=) is several times slower)
    near_last = np.flatnonzero(admitted & (fracs <= lowest + CERTIFIED_MARGIN))
    near_best = np.flatnonzero(sure_losers & (fracs >= highest - CERTIFIED_MARGIN))
    contested = np.flatnonzero(~admitted & (fracs >= theta - CERTIFIED_MARGIN))
    winners, last_contested, next_contested = first_ranked(contested, remaining - int(admitted.sum()), exact)
    admitted[winners] = True
    last_winner = min([last_contested] + exact.remainders(near_last))
    best_loser = max(next_contested + exact.remainders(near_best))
    return admitted, last_winner, best_loser


@defines("R03", "R04", "R06", "R09")
def allocate_dense_f32_certified(bits: Sequence[int] | numpy.ndarray) -> DenseAllocation:
    """``allocate_dense(weights_from_f32(bits))``, evaluated in FP64 with NumPy where that is provably exact.

    ``bits`` is a sequence or a NumPy array of FP32 bit patterns. NumPy is an
    optional dependency (the ``bench`` and ``torch`` extras), imported when this is
    called. The result is always the exact allocation: FP64 decides only what it
    provably decides, and the tokens it cannot decide get exact integer
    remainders ``(M * n_v) mod N`` (once per distinct weight). Why it is equal:

    1. *Weights and total.* Every FP32 weight is exact in FP64
       (:func:`certified_fp64_weights`), and :func:`exact_total` gives the exact
       N in the unit ``2^(e0 - 150)`` of :func:`qconform.spec.weights.f32_weight_units`.
    2. *Quotas.* ``Q_hat_v = fl(w_v * fl(M / fl(W)))``: three roundings of
       relative error at most u = 2^-53, no overflow or underflow (all values lie
       in [2^-300, 2^320]). So ``|Q_hat_v - Q_v| < 3.01 u Q_v <= 2^-27``
       (``Q_v <= M``) and ``< 2^-51 Q_hat_v``.
    3. *Floors.* ``floor(Q_v) = floor(Q_hat_v)`` is certain when
       ``fl(f_hat + 2^-51 Q_hat) < 1`` (a sum that reaches 1 rounds to at least 1)
       and ``floor(Q_hat) = 0`` or ``f_hat >= 2^-51 Q_hat``; then
       ``|f_hat_v - f_v| < 2^-27``. Other tokens get their exact floor and
       ``f_hat_v = fl(r_v / N)``, within 2^-53 of ``f_v``.
    4. *Tickets.* Only positive weights can win (more than ``remaining`` of them
       have positive fractional parts). Let theta be the ``remaining``-th largest
       of their ``f_hat`` and D = 2^-25 > 2 * 2^-27 + 2^-53. A token with
       ``f_hat > theta + D`` has ``f > theta + 2^-27``, so every token ranked
       before it has ``f_hat > theta``, and fewer than ``remaining`` tokens do: it
       wins. A token with ``f_hat < theta - D`` has ``f < theta - 2^-27``, and the
       ``remaining`` or more tokens with ``f_hat >= theta`` rank before it: it
       loses. The tokens in between are ranked by their exact remainders, ties to
       the lowest ID, and take the tickets left.
    5. *Tie gap.* The smallest ``f`` among the sure winners belongs to one whose
       ``f_hat`` is within D of their smallest ``f_hat`` (errors below 2^-27 each
       way); likewise the largest ``f`` among the sure losers. Their exact
       remainders and the ranked ones give ``tie_gap = (r_last - r_best) / N``.

    Rows of CERTIFIED_MAX_ROW tokens or more go to :func:`allocate_dense_f32_bits`.
    Refusals are those of ``weights_from_f32`` (R05).
    """
    import numpy as np  # optional: only this evaluation needs it

    row = np.asarray(bits, dtype=np.uint32)
    if row.size == 0 or int(row.max()) >= F32_POS_INF:
        check_weight_bits(row.tolist(), "f32")  # refuses, or finds only -0.0
        row = row & np.uint32(MAGNITUDE_MASKS["f32"])
    least = least_positive_pattern(row)
    if least > F32_POS_INF:
        raise refuse("ZERO_MASS", f"all {row.size} weights are zero")
    if row.size >= CERTIFIED_MAX_ROW:
        return allocate_dense_f32_bits(row.tolist())
    e0 = max(least >> F32_FRACTION_BITS, 1)
    weights = certified_fp64_weights(row, least)
    total = exact_total(row, weights, e0)
    exact = ExactQuotas(row, e0, total)
    floors, fracs = certified_floors(certified_quotas(weights, total, e0, out=weights), exact)
    counts = floors.astype(np.int64)
    remaining = M - int(counts.sum())
    if remaining == 0:
        return DenseAllocation(counts.tolist(), 0, Fraction(1))
    admitted, last_winner, best_loser = certified_tickets(fracs, row > 0, remaining, exact)
    counts += admitted
    return DenseAllocation(counts.tolist(), remaining, Fraction(last_winner - best_loser, total))
