"""Exact dyadic24 allocation: largest remainders, ties to the lowest ID; top-k support (R04, R06, R07)."""

from __future__ import annotations

import random
from fractions import Fraction
from math import floor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qconform.spec.allocation import (
    allocate_dense,
    allocate_sparse,
    allocate_units,
    select_top_k,
)
from qconform.spec.allocation_certified import (
    CERTIFIED_RELATIVE_ERROR,
    ExactQuotas,
    allocate_dense_f32_bits,
    allocate_dense_f32_certified,
    certified_floors,
    certified_fp64_weights,
    certified_quotas,
    distinct_patterns,
    exact_total,
    f32_weight_units,
)
from qconform.spec.constants import M
from qconform.spec.errors import SpecError
from qconform.spec.weights import weights_from_f32

pytestmark = pytest.mark.rules("R04", "R06", "R07")


def reference_allocation(weights: list[Fraction]) -> tuple[list[int], int, Fraction]:
    """The rule written the slow obvious way: Fraction quotas, a full sort by (-frac, id)."""
    total = sum(weights)
    quotas = [M * Fraction(w) / total for w in weights]
    counts = [floor(q) for q in quotas]
    fracs = [q - c for q, c in zip(quotas, counts)]
    remaining = M - sum(counts)
    order = sorted(range(len(weights)), key=lambda v: (-fracs[v], v))
    admitted = set(order[:remaining])
    for v in admitted:
        counts[v] += 1
    low = min((fracs[v] for v in admitted), default=Fraction(1))
    high = max((fracs[v] for v in range(len(weights)) if v not in admitted and weights[v] > 0), default=Fraction(0))
    return counts, remaining, low - high


dyadic = st.builds(lambda n, e: Fraction(n) / Fraction(2) ** e, st.integers(0, 2**24), st.integers(-10, 60))
small_ints = st.integers(0, 12).map(Fraction)  # many exact ties
rationals = st.fractions(min_value=0, max_value=50, max_denominator=997)
weight_rows = st.lists(st.one_of(dyadic, small_ints, rationals), min_size=1, max_size=60).filter(any)


@given(weight_rows)
@settings(max_examples=150, deadline=None)
def test_matches_reference_and_sums_to_m(weights):
    alloc = allocate_dense(weights)
    counts, remaining, tie_gap = reference_allocation(weights)
    assert alloc.counts == counts
    assert alloc.remaining == remaining
    assert alloc.tie_gap == tie_gap
    assert sum(alloc.counts) == M
    assert all(c == 0 for c, w in zip(alloc.counts, weights) if w == 0)  # R04


@given(st.lists(st.integers(1, 3), min_size=200, max_size=3000), st.integers(0, 2**32))
@settings(max_examples=15, deadline=None)
def test_large_rows_with_massive_ties_match_reference(levels, seed):
    """Thousands of entries in few distinct values: exercises the bucketed threshold search."""
    rng = random.Random(seed)
    weights = [Fraction(level * (1 + rng.randrange(3)), 1 << rng.randrange(4)) for level in levels]
    alloc = allocate_dense(weights)
    counts, remaining, tie_gap = reference_allocation(weights)
    assert (alloc.counts, alloc.remaining, alloc.tie_gap) == (counts, remaining, tie_gap)


@given(st.lists(st.integers(0, 2**40), min_size=2, max_size=40).filter(any), st.randoms(use_true_random=False))
@settings(max_examples=100, deadline=None)
def test_permutation_equivariance_without_ties(units, rnd):
    alloc = allocate_units(units)
    perm = list(range(len(units)))
    rnd.shuffle(perm)
    permuted = allocate_units([units[p] for p in perm])
    if alloc.tie_gap > 0:
        assert permuted.counts == [alloc.counts[p] for p in perm]
    assert permuted.tie_gap == alloc.tie_gap


@pytest.mark.parametrize("size", [3, 6, 7, 1000, 129280])
def test_uniform_rows_give_tickets_to_the_lowest_ids(size):
    alloc = allocate_dense([Fraction(1)] * size)
    base, extra = divmod(M, size)
    assert alloc.counts == [base + 1] * extra + [base] * (size - extra)
    assert alloc.remaining == extra
    assert alloc.tie_gap == (0 if extra else 1)


def test_tie_lower_id_wins_wherever_the_tie_sits():
    # W = 7: quotas M/7 (fraction 1/7) and 2M/7 (fraction 2/7); one ticket, tied between the two 2s.
    alloc = allocate_dense([Fraction(x) for x in (1, 1, 1, 2, 2)])
    assert alloc.counts == [2396745, 2396745, 2396745, 4793491, 4793490]
    assert (alloc.remaining, alloc.tie_gap) == (1, 0)
    swapped = allocate_dense([Fraction(x) for x in (2, 2, 1, 1, 1)])
    assert swapped.counts == [4793491, 4793490, 2396745, 2396745, 2396745]


def test_refusals():
    for weights, code in (
        ([], "EMPTY_ROW"),
        ([Fraction(0)] * 3, "ZERO_MASS"),
        ([Fraction(1), Fraction(-1, 3)], "NEGATIVE_WEIGHT"),
    ):
        with pytest.raises(SpecError) as info:
            allocate_dense(weights)
        assert info.value.code == code
    for k in (0, 4, -1, True):
        with pytest.raises(SpecError) as info:
            select_top_k([Fraction(1)] * 3, k)
        assert info.value.code == "BAD_SUPPORT_SIZE"


@given(weight_rows, st.data())
@settings(max_examples=120, deadline=None)
def test_top_k_selection_and_gap(weights, data):
    k = data.draw(st.integers(1, len(weights)))
    selection = select_top_k(weights, k)
    ranked = sorted(range(len(weights)), key=lambda v: (-weights[v], v))
    assert selection.support == sorted(ranked[:k])
    positive = [weights[v] for v in ranked[:k] if weights[v] > 0]
    excluded = weights[ranked[k]] if k < len(weights) else 0
    assert selection.selection_gap == min(positive) - excluded


@given(weight_rows, st.data())
@settings(max_examples=120, deadline=None)
def test_sparse_is_dense_on_the_renormalized_support(weights, data):
    k = data.draw(st.integers(1, len(weights)))
    sparse = allocate_sparse(weights, k)
    support = select_top_k(weights, k).support
    mass = sum(weights[v] for v in support)
    inner = allocate_dense([weights[v] / mass for v in support])
    assert sparse.support == support
    assert list(zip(sparse.ids, sparse.counts)) == [(v, c) for v, c in zip(support, inner.counts) if c > 0]
    assert (sparse.remaining, sparse.tie_gap) == (inner.remaining, inner.tie_gap)
    assert sum(sparse.counts) == M and all(c > 0 for c in sparse.counts)
    assert sparse.ids == sorted(set(sparse.ids))


@given(weight_rows)
@settings(max_examples=80, deadline=None)
def test_sparse_with_k_equal_to_positive_count_is_dense_restricted(weights):
    positive = sum(1 for w in weights if w > 0)
    sparse = allocate_sparse(weights, positive)
    dense = allocate_dense(weights)
    assert list(zip(sparse.ids, sparse.counts)) == [(v, c) for v, c in enumerate(dense.counts) if c > 0]
    assert sparse.tie_gap == dense.tie_gap


def test_zero_weights_fill_the_support_and_are_dropped():
    sparse = allocate_sparse([Fraction(0), Fraction(2), Fraction(0), Fraction(1), Fraction(0)], 4)
    assert sparse.support == [0, 1, 2, 3]
    assert sparse.ids == [1, 3]
    assert sparse.selection_gap == 1


def test_selection_tie_goes_to_the_lowest_id():
    selection = select_top_k([Fraction(x) for x in (5, 3, 3, 3, 1, 3)], 2)
    assert selection.support == [0, 1]
    assert selection.selection_gap == 0


# --- fast paths from FP32 bit patterns: exactly the plain path -----------------------------

try:
    import numpy
except ImportError:  # numpy is optional (the bench / torch extras)
    numpy = None

needs_numpy = pytest.mark.skipif(numpy is None, reason="numpy is not installed")


#: Values that tie, quotas that are integers (powers of two), subnormals, -0.0 and the FP32 maximum.
F32_PALETTE = [
    0,
    0x80000000,
    1,
    3,
    0x007FFFFF,
    0x00800000,
    0x3F800000,
    0x40000000,
    0x40400000,
    0x3F000000,
    0x3EAAAAAB,
    0x33800000,
    0x7F7FFFFF,
]
f32_patterns = st.one_of(
    st.sampled_from(F32_PALETTE),
    st.integers(0, 0x7F7FFFFF),
    st.integers(0x3E000000, 0x3F800000),  # [1/8, 1]: quotas of similar size
)
f32_rows = st.lists(f32_patterns, min_size=1, max_size=80).filter(lambda row: any(b & 0x7FFFFFFF for b in row))
refused_rows = st.lists(
    st.one_of(f32_patterns, st.sampled_from([0x7F800000, 0xFF800000, 0x7FC00000, 0xBF800000])), max_size=8
)


def plain(bits: list[int]):
    return allocate_dense(weights_from_f32(bits))


def outcome(call, bits):
    """The allocation, or the refusal code."""
    try:
        return call(bits)
    except SpecError as error:
        return error.code


@given(f32_rows)
@settings(max_examples=120, deadline=None)
def test_integer_path_is_the_plain_path(bits):
    assert allocate_dense_f32_bits(bits) == plain(bits)


@given(refused_rows)
@settings(max_examples=80, deadline=None)
def test_fast_paths_refuse_as_the_plain_path(bits):
    expected = outcome(plain, bits)
    assert outcome(allocate_dense_f32_bits, bits) == expected
    if numpy is not None:
        assert outcome(allocate_dense_f32_certified, bits) == expected


@needs_numpy
@given(f32_rows)
@settings(max_examples=150, deadline=None)
def test_certified_path_is_the_plain_path(bits):
    assert numpy is not None  # needs_numpy
    assert allocate_dense_f32_certified(bits) == plain(bits)
    array = numpy.array(bits, dtype=numpy.uint32)
    assert allocate_dense_f32_certified(array) == plain(bits)


@needs_numpy
@given(st.lists(st.integers(1, 12), min_size=2, max_size=6), st.integers(100, 3000), st.integers(0, 2**32))
@settings(max_examples=20, deadline=None)
def test_certified_path_on_large_rows_with_many_ties(levels, size, seed):
    """Thousands of tokens over a few values (massive exact ties) plus a random tail."""
    rng = random.Random(seed)
    bits = [rng.choice(levels) << 23 for _ in range(size)] + [rng.randrange(1, 0x7F000000) for _ in range(size // 10)]
    assert allocate_dense_f32_certified(bits) == allocate_dense_f32_bits(bits)


@needs_numpy
@given(f32_rows)
@settings(max_examples=60, deadline=None)
def test_certified_quotas_floors_and_fractional_parts_are_within_their_bounds(bits):
    """Steps 1-3 against Fractions: the exact total, quotas within 2^-51 Q_hat and 2^-27,
    exact floors, and fractional parts within 2^-27."""
    assert numpy is not None  # needs_numpy
    weights = weights_from_f32(bits)
    total = sum(weights)
    row = numpy.array(bits, dtype=numpy.uint32) & numpy.uint32(0x7FFFFFFF)
    units = f32_weight_units(bits)
    e0 = units.unit_exponent + 150
    n_total = exact_total(row, certified_fp64_weights(row), e0)
    assert n_total == sum(units.units)
    quotas = certified_quotas(certified_fp64_weights(row), n_total, e0)
    floors, fracs = certified_floors(quotas, ExactQuotas(row, e0, n_total))
    for w, q_hat, f, f_hat in zip(weights, quotas.tolist(), floors.tolist(), fracs.tolist()):
        q = M * w / total
        assert abs(Fraction(q_hat) - q) <= min(Fraction(q_hat) * Fraction(CERTIFIED_RELATIVE_ERROR), Fraction(1, 2**27))
        assert f == floor(q)
        assert abs(Fraction(f_hat) - (q - floor(q))) < Fraction(1, 2**27)


@needs_numpy
def test_certified_path_where_fp64_alone_is_wrong():
    """Near-ties below FP64 resolution (the corpus's fp64-flip rows): FP64 picks the wrong token,
    the certified path re-ranks those tokens exactly."""
    from qconform.generators.families.allocation_dense import fp64_flip_rows
    from qconform.spec.allocation_fp64 import allocate_dense_fp64

    for bits in fp64_flip_rows(0xF64F11, 2, larger_first=True):
        exact = plain(bits)
        assert allocate_dense_fp64(bits, "f32") != exact.counts
        assert allocate_dense_f32_certified(bits) == exact


@needs_numpy
@pytest.mark.parametrize("size", [1, 4, 7, 129280])
def test_certified_uniform_rows(size):
    alloc = allocate_dense_f32_certified([0x3F800000] * size)
    base, extra = divmod(M, size)
    assert alloc.counts == [base + 1] * extra + [base] * (size - extra)
    assert (alloc.remaining, alloc.tie_gap) == (extra, 0 if extra else 1)


@needs_numpy
@pytest.mark.parametrize(
    "bits",
    [
        [1, 31 << 23],  # 1 + 2^53 units: two units apart at 2^53, one FP64 sum would round
        [1, 1, 30 << 23],  # 2^52 units times 3 tokens: past the one-sum bound
        [1, (29 << 23) | 0x7FFFFF],  # (2^24 - 1) 2^28 + 1 units, times 2 tokens below 2^53: one exact sum
        [0x3F800000] * 129280,
        [0, 0x3F800000, 0],
    ],
)
def test_exact_total_on_both_sides_of_the_one_sum_bound(bits):
    """The exact N in units, whether one FP64 sum proves it (largest units times the token
    count below 2^53) or it is summed per exponent field (shown to fail with the bound at 2^60)."""
    import numpy as np

    row = np.array(bits, dtype=np.uint32)
    units = f32_weight_units(bits)
    assert exact_total(row, certified_fp64_weights(row), units.unit_exponent + 150) == sum(units.units)


@needs_numpy
@given(st.lists(st.integers(0, 40), max_size=60), st.integers(0, 0x7F7FFF00))
@settings(max_examples=120, deadline=None)
def test_distinct_patterns_is_numpy_unique(offsets, low):
    """The table over a small span gives unique's values and inverse (spans below, at and above
    the pattern count; shown to fail with the table's indices reversed)."""
    import numpy as np

    patterns = np.array(offsets, dtype=np.uint32) + np.uint32(low)
    values, inverse = distinct_patterns(patterns)
    expected_values, expected_inverse = np.unique(patterns, return_inverse=True)
    assert values.dtype == np.uint32 and values.tolist() == expected_values.tolist()
    assert inverse.tolist() == expected_inverse.tolist()
