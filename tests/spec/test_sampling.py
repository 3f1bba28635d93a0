"""Exact categorical sampling (R08, R11): each token owns exactly its share of the draws."""

from __future__ import annotations

from collections import Counter
from fractions import Fraction
from itertools import accumulate
from math import floor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qconform.spec.constants import M
from qconform.spec.errors import SpecError
from qconform.spec.qrow import QRow
from qconform.spec.sampling import (
    exact_total,
    mass_draw,
    mass_draw_counts,
    sample_counts,
    sample_qrow,
    sample_sparse,
)

pytestmark = pytest.mark.rules("R08", "R11")

U32 = 2**32
SMALL_COUNTS = st.lists(st.integers(0, 12), min_size=1, max_size=12).filter(lambda c: sum(c) > 0)


@st.composite
def dyadic_rows(draw, max_vocab: int = 40):
    vocab = draw(st.integers(1, max_vocab))
    counts = [0] * vocab
    live = sorted(draw(st.sets(st.integers(0, vocab - 1), min_size=1, max_size=vocab)))
    cuts = sorted(draw(st.sets(st.integers(1, M - 1), min_size=len(live) - 1, max_size=len(live) - 1)))
    for token, count in zip(live, [b - a for a, b in zip([0] + cuts, cuts + [M])]):
        counts[token] = count
    return counts


@settings(max_examples=80, deadline=None)
@given(SMALL_COUNTS)
def test_reduced_mass_each_token_gets_exactly_its_count_of_draws(counts):
    # Exhaustive over every draw of a reduced total: the rule is the same at any total.
    chosen = Counter(sample_counts(counts, u) for u in range(sum(counts)))
    assert [chosen[v] for v in range(len(counts))] == counts


@settings(max_examples=60, deadline=None)
@given(dyadic_rows())
def test_full_mass_intervals_are_exactly_the_counts(counts):
    # The token is nondecreasing in u, so checking both ends of each interval
    # [C_{v-1}, C_v) shows that token v is chosen by exactly c_v of the M draws.
    below = 0
    for v, count in enumerate(counts):
        if count:
            assert sample_counts(counts, below) == v
            assert sample_counts(counts, below + count - 1) == v
        below += count
    assert sample_counts(counts, 0) == next(v for v, c in enumerate(counts) if c)
    assert sample_counts(counts, M - 1) == max(v for v, c in enumerate(counts) if c)


@settings(max_examples=60, deadline=None)
@given(dyadic_rows(), st.lists(st.integers(0, M - 1), min_size=2, max_size=20))
def test_token_is_nondecreasing_in_the_draw(counts, draws):
    tokens = [sample_counts(counts, u) for u in sorted(draws)]
    assert tokens == sorted(tokens)
    assert all(counts[t] > 0 for t in tokens)


@settings(max_examples=60, deadline=None)
@given(dyadic_rows(max_vocab=60), st.lists(st.integers(0, M - 1), min_size=1, max_size=20))
def test_sparse_and_dense_rows_pick_the_same_global_id(counts, draws):
    ids = [v for v, c in enumerate(counts) if c]
    sparse = QRow.sparse(len(counts), ids, [counts[v] for v in ids])
    dense = QRow.dense(counts)
    for u in draws:
        assert sample_qrow(sparse, u) == sample_qrow(dense, u) == sample_sparse(ids, [counts[v] for v in ids], u)


def test_boundary_draw_goes_to_the_next_token():
    counts = [M // 4, 0, M // 2, M // 4]
    assert sample_counts(counts, M // 4 - 1) == 0
    assert sample_counts(counts, M // 4) == 2  # not the zero-count token 1
    assert sample_counts(counts, 3 * M // 4 - 1) == 2
    assert sample_counts(counts, 3 * M // 4) == 3


MASSES = st.lists(st.fractions(min_value=0, max_value=10, max_denominator=50), min_size=1, max_size=10).filter(
    lambda m: sum(m) > 0
)


@settings(max_examples=80, deadline=None)
@given(MASSES)
def test_mass_draw_counts_are_the_interval_sizes(masses):
    counts = mass_draw_counts(masses)
    total = sum(masses)
    assert sum(counts) == U32
    start = 0
    for v, (mass, count) in enumerate(zip(masses, counts)):
        assert abs(count - Fraction(U32) * mass / total) < 1
        if mass == 0:
            assert count == 0
        if count:
            assert mass_draw(masses, start)[0] == v
            assert mass_draw(masses, start + count - 1)[0] == v
            if start:
                assert mass_draw(masses, start - 1)[0] < v
        start += count


@settings(max_examples=80, deadline=None)
@given(MASSES, st.integers(0, U32 - 1))
def test_mass_rule_and_margin(masses, u32):
    total = sum(masses)
    edges = [Fraction(0)] + [c / total for c in accumulate(masses)]
    u = Fraction(u32, U32)
    v, margin = mass_draw(masses, u32)
    assert edges[v] <= u < edges[v + 1]
    assert margin == min(u - edges[v], edges[v + 1] - u)


def test_mass_boundary_draw_goes_to_the_next_token():
    masses = [Fraction(1, 4), Fraction(0), Fraction(3, 4)]
    assert mass_draw(masses, U32 // 4 - 1)[0] == 0
    assert mass_draw(masses, U32 // 4) == (2, 0)
    assert mass_draw([Fraction(1, 3), Fraction(2, 3)], floor(Fraction(U32, 3)))[0] == 0
    assert mass_draw([Fraction(1, 3), Fraction(2, 3)], floor(Fraction(U32, 3)) + 1)[0] == 1


@settings(max_examples=40, deadline=None)
@given(st.lists(st.fractions(min_value=0, max_value=5, max_denominator=1 << 20), max_size=30))
def test_exact_total(values):
    assert exact_total(values) == sum(values, Fraction(0))


@pytest.mark.parametrize(
    "call, code",
    [
        (lambda: sample_counts([M], M), "BAD_RNG_FIELD"),
        (lambda: sample_counts([M], -1), "BAD_RNG_FIELD"),
        (lambda: sample_counts([3, 4], 7), "WRONG_TOTAL_MASS"),
        (lambda: mass_draw([Fraction(1)], U32), "BAD_RNG_FIELD"),
        (lambda: mass_draw([Fraction(0), Fraction(0)], 0), "ZERO_MASS"),
        (lambda: mass_draw([Fraction(1), Fraction(-1, 2)], 0), "BAD_TARGET_ROW"),
        (lambda: mass_draw([], 0), "EMPTY_ROW"),
        (lambda: sample_sparse([1, 2], [M], 0), "BAD_SHAPE"),
    ],
)
def test_refusals(call, code):
    with pytest.raises(SpecError) as err:
        call()
    assert err.value.code == code


@pytest.mark.rules("R03", "R04", "R07", "R08", "R19")
def test_categorical_sampling_vectors_by_bisection():
    from bisect import bisect_right

    from qconform.generators.encoding import decode_blob
    from qconform.generators.families.categorical_sampling import FAMILY

    for group in FAMILY.build():
        for case in group.tests:
            row = case.input["row"]
            counts, _ = decode_blob(row["counts"])
            ids = decode_blob(row["ids"])[0] if row["representation"] == "sparse" else list(range(len(counts)))
            if case.result == "invalid":
                assert set(case.expected) == {"error"}
                continue
            cumulative = list(accumulate(counts))
            assert cumulative[-1] == M
            # first index whose cumulative count is strictly greater than u
            assert case.expected["tokens"] == [ids[bisect_right(cumulative, u)] for u in case.input["draws"]]
            assert all(counts[ids.index(t)] > 0 for t in case.expected["tokens"])
