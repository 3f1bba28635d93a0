"""The non-normative FP64 allocation and the theorem that bounds where it can differ (R06)."""

from __future__ import annotations

import math
import struct
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qconform.spec.allocation import allocate_dense, allocate_sparse
from qconform.spec.allocation_fp64 import (
    allocate_dense_fp64,
    allocate_sparse_fp64,
    fp64_error_bound,
    fp64_may_differ,
    fp64_row_error_bound,
    fp64_row_may_differ,
    fp64_sparse_may_differ,
    fp64_sum_overflows,
    fp64_tie_gap,
    max_quota,
)
from qconform.spec.constants import M
from qconform.spec.errors import SpecError
from qconform.spec.weights import weights_from_f32, weights_from_f64

pytestmark = pytest.mark.rules("R06", "R07")


def f32(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def f64(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def fp64_allocation_reversed_sum(weights: list[float]) -> list[int]:
    """Another FP64 kernel: the same recipe but W summed from the last ID down."""
    total = 0.0
    for w in reversed(weights):
        total += w
    quotas = [(w / total) * M for w in weights]
    counts = [math.floor(q) for q in quotas]
    fracs = [q - c for q, c in zip(quotas, counts)]
    for v in sorted(range(len(weights)), key=lambda v: (-fracs[v], v))[: M - sum(counts)]:
        counts[v] += 1
    return counts


def both_fp64_kernels_give(bits: list[int], counts: list[int]) -> bool:
    """Whether the FP64 recipe and its reversed-sum variant both return ``counts`` for FP32 ``bits``."""
    floats = [struct.unpack("<f", struct.pack("<I", b))[0] for b in bits]
    return allocate_dense_fp64(bits, "f32") == counts and fp64_allocation_reversed_sum(floats) == counts


f32_weights = st.lists(
    st.one_of(st.floats(min_value=0, max_value=1e6, width=32), st.just(0.0), st.integers(0, 9).map(float)),
    min_size=1,
    max_size=50,
).filter(lambda ws: sum(ws) > 0)


@given(f32_weights)
@settings(max_examples=150, deadline=None)
def test_theorem_fp64_equals_exact_outside_the_bound(values):
    bits = [f32(x) for x in values]
    weights = weights_from_f32(bits)
    exact = allocate_dense(weights)
    n = len(weights)
    assert fp64_error_bound(n, max_quota(weights)) <= fp64_error_bound(n)
    if not fp64_may_differ(exact.tie_gap, n, max_quota(weights)):
        assert both_fp64_kernels_give(bits, exact.counts)
    if not fp64_may_differ(exact.tie_gap, n):
        assert allocate_dense_fp64(bits, "f32") == exact.counts


def near_tie_row(a_int: int, b_int: int, tiny_exponent: int, larger_first: bool) -> list[int]:
    """Half-integer weights a > b, a whole-number filler to 2^24, and a tiny weight FP64's sum drops."""
    a, b = Fraction(a_int) + Fraction(1, 2), Fraction(b_int) + Fraction(1, 2)
    filler = (1 << 24) - a - b
    pair = [a, b] if larger_first else [b, a]
    row = [pair[0], filler, pair[1], Fraction(1, 2**tiny_exponent)]
    bits = [f32(float(x)) for x in row]
    assert weights_from_f32(bits) == row
    return bits


@given(st.integers(2**21, 2**22 - 1), st.integers(2**20, 2**21 - 1), st.integers(31, 80))
@settings(max_examples=40, deadline=None)
def test_constructed_near_ties_really_flip_and_are_flagged(a, b, tiny):
    flipped = near_tie_row(a, b, tiny, larger_first=True)
    exact = allocate_dense(weights_from_f32(flipped))
    assert exact.tie_gap > 0  # not an exact tie: exactly, the smaller half-integer weight wins
    assert allocate_dense_fp64(flipped, "f32") != exact.counts
    assert fp64_may_differ(exact.tie_gap, 4, max_quota(weights_from_f32(flipped)))
    agreeing = near_tie_row(a, b, tiny, larger_first=False)
    assert allocate_dense_fp64(agreeing, "f32") == allocate_dense(weights_from_f32(agreeing)).counts


def test_bound_values():
    assert fp64_error_bound(129280) == Fraction(129281 * M, 2**53)
    assert fp64_may_differ(2 * fp64_error_bound(10), 10)
    assert not fp64_may_differ(2 * fp64_error_bound(10) + Fraction(1, 2**80), 10)
    assert fp64_error_bound(3, Fraction(M, 3)) == Fraction(4 * M, 3 * 2**53)


def test_fp64_overflow_is_refused_and_flagged():
    bits = [f64(1.5e308), f64(1.0e308), f64(1.0)]
    assert fp64_sum_overflows(bits, "f64")
    with pytest.raises(SpecError) as info:
        allocate_dense_fp64(bits, "f64")
    assert info.value.code == "INCONSISTENT_ALLOCATION"
    assert not fp64_sum_overflows([f32(3e38)] * 4, "f32")
    assert allocate_dense_fp64([f32(3e38)] * 4, "f32") == [M // 4] * 4


def test_fp64_refuses_invalid_weights_like_the_spec():
    with pytest.raises(SpecError) as info:
        allocate_dense_fp64([f32(1.0), f32(-0.5)], "f32")
    assert info.value.code == "NEGATIVE_WEIGHT"


@given(f32_weights, st.data())
@settings(max_examples=60, deadline=None)
def test_sparse_fp64_equals_exact_outside_the_bound(values, data):
    bits = [f32(x) for x in values]
    k = data.draw(st.integers(1, len(bits)))
    exact = allocate_sparse(weights_from_f32(bits), k)
    support_weights = [weights_from_f32(bits)[v] for v in exact.support]
    if not fp64_may_differ(exact.tie_gap, len(exact.support), max_quota(support_weights)):
        assert allocate_sparse_fp64(bits, "f32", k) == (exact.ids, exact.counts)


# --- the per-row verdict that the vector families record ---------------------------------------

#: weights drawn from a few values, so that equal weights (and exact ties between them) are common
few_valued_weights = st.lists(st.sampled_from([0.0, 0.25, 1.0, 3.0, 7.5]), min_size=1, max_size=40).filter(
    lambda ws: sum(ws) > 0
)


@given(st.one_of(f32_weights, few_valued_weights))
@settings(max_examples=120, deadline=None)
def test_row_verdict_is_sound_and_never_wider_than_the_plain_tie_gap_bound(values):
    bits = [f32(x) for x in values]
    weights = weights_from_f32(bits)
    exact = allocate_dense(weights)
    n = len(weights)
    may_differ = fp64_row_may_differ(bits, "f32", weights, exact.counts)
    assert fp64_row_error_bound(weights) == fp64_error_bound(n, max(Fraction(M) * w / sum(weights) for w in weights))
    if not may_differ:  # the theorem, with ties between equal weights ignored
        assert both_fp64_kernels_give(bits, exact.counts)
    if may_differ:  # FP32 sums never overflow: only a near-tie can make FP64 differ
        assert fp64_may_differ(exact.tie_gap, n)


def test_an_exact_tie_between_equal_weights_is_no_fp64_uncertainty():
    bits = [f32(x) for x in (1.0, 3.0, 1.0, 1.0)]  # M/6 each for the 1s: two tickets among three equal weights
    weights = weights_from_f32(bits)
    exact = allocate_dense(weights)
    assert exact.tie_gap == 0 and exact.counts[0] > exact.counts[3]
    assert fp64_may_differ(exact.tie_gap, 4, max_quota(weights))  # the plain tie gap would excuse it
    assert not fp64_row_may_differ(bits, "f32", weights, exact.counts)
    assert allocate_dense_fp64(bits, "f32") == exact.counts


@given(st.integers(2**21, 2**22 - 1), st.integers(2**20, 2**21 - 1), st.integers(31, 80))
@settings(max_examples=20, deadline=None)
def test_rows_where_fp64_really_differs_are_flagged(a, b, tiny):
    flipped = near_tie_row(a, b, tiny, larger_first=True)
    weights = weights_from_f32(flipped)
    assert allocate_dense_fp64(flipped, "f32") != allocate_dense(weights).counts
    assert fp64_row_may_differ(flipped, "f32", weights, allocate_dense(weights).counts)


def test_an_overflowing_fp64_sum_is_flagged():
    bits = [f64(1.5e308), f64(1.0e308), f64(1.0)]
    weights = weights_from_f64(bits)
    assert fp64_row_may_differ(bits, "f64", weights, allocate_dense(weights).counts)


@given(st.one_of(f32_weights, few_valued_weights), st.data())
@settings(max_examples=60, deadline=None)
def test_sparse_verdict_is_the_row_verdict_on_the_support(values, data):
    bits = [f32(x) for x in values]
    weights = weights_from_f32(bits)
    k = data.draw(st.integers(1, len(bits)))
    sparse = allocate_sparse(weights, k)
    support_bits = [bits[v] for v in sparse.support]
    support_weights = [weights[v] for v in sparse.support]
    on_support = allocate_dense(support_weights)  # the sparse allocation is the dense one of the support
    may_differ = fp64_sparse_may_differ(bits, "f32", weights, sparse)
    assert may_differ == fp64_row_may_differ(support_bits, "f32", support_weights, on_support.counts)
    if not may_differ:
        assert allocate_sparse_fp64(bits, "f32", k) == (sparse.ids, sparse.counts)


def documented_fp64_tie_gap(weights: list[Fraction], counts: list[int]) -> Fraction:
    """``fp64_tie_gap`` exactly as docs/formats/allocation_dense.md (*Margins, as formulas*) states it."""
    total = sum(weights)
    frac = [M * w / total - (M * w // total) for w in weights]
    won = [v for v, w in enumerate(weights) if w and counts[v] > M * w // total]
    lost = [v for v, w in enumerate(weights) if w and counts[v] == M * w // total]
    low = min((frac[v] for v in won), default=Fraction(1))
    high = max((frac[v] for v in lost), default=Fraction(0))
    if low > high:
        return low - high
    tied = {weights[v] for v in won if frac[v] == low} | {weights[v] for v in lost if frac[v] == high}
    if len(tied) > 1:
        return Fraction(0)
    (b,) = tied
    return min(
        min((frac[v] for v in won if weights[v] != b), default=Fraction(1)) - high,
        low - max((frac[v] for v in lost if weights[v] != b), default=Fraction(0)),
    )


@pytest.mark.rules("R06")
@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([0, 1, 2, 3, 5, 7, 2**20, 3 * 2**21]), min_size=1, max_size=9).filter(any))
def test_fp64_tie_gap_is_the_documented_formula(units):
    weights = [Fraction(u) for u in units]
    counts = allocate_dense(weights).counts
    assert fp64_tie_gap(weights, counts) == documented_fp64_tie_gap(weights, counts)
