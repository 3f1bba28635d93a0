"""Exact laws of one round (R09, R11): p preserved with a real uniform, a bounded deviation
with 32-bit draws, depth-2 conditionals, and agreement with sampled rounds of verify_round."""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction
from itertools import product

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qconform.generators.families.distribution import FAMILY, decode_law_input
from qconform.spec.constants import M
from qconform.spec.distribution import (
    Prefix,
    first_token_deviation_bound,
    first_token_law,
    first_token_law_real_uniform,
    quantization_deviation,
    round_deviation,
    round_law,
    round_law_real_uniform,
)
from qconform.spec.qrow import QRow
from qconform.spec.refusal_order import DISTRIBUTION_REFUSALS
from qconform.spec.rng_abi import RngIdentity, proposal_draw, proposal_key
from qconform.spec.sampling import sample_qrow
from qconform.spec.verification import RoundInput, verify_round

pytestmark = pytest.mark.rules("R09", "R11")


def all_prefixes(vocab: int, max_length: int):
    return [p for n in range(max_length + 1) for p in product(range(vocab), repeat=n)]


@st.composite
def q_rows(draw, vocab: int) -> QRow:
    """A dyadic24 row, often with zeros and often far from any p."""
    shares = [draw(st.integers(0, 4)) for _ in range(vocab)]
    if not any(shares):
        shares[draw(st.integers(0, vocab - 1))] = 1
    counts = [M * s // sum(shares) for s in shares]
    counts[next(v for v, s in enumerate(shares) if s)] += M - sum(counts)
    return QRow.dense(counts)


@st.composite
def p_rows(draw, vocab: int) -> list[Fraction]:
    weights = [draw(st.integers(0, 6)) for _ in range(vocab)]
    if not any(weights):
        weights[draw(st.integers(0, vocab - 1))] = 1
    return [Fraction(w, sum(weights)) for w in weights]


@st.composite
def rounds(draw, max_depth: int = 2):
    vocab = draw(st.integers(2, 4))
    depth = draw(st.integers(1, max_depth))
    q = {prefix: draw(q_rows(vocab)) for prefix in all_prefixes(vocab, depth - 1)}
    p = {prefix: draw(p_rows(vocab)) for prefix in all_prefixes(vocab, depth)}
    return vocab, depth, q, p


@settings(max_examples=40, deadline=None)
@given(rounds())
def test_real_uniform_first_token_is_exactly_p(case):
    vocab, depth, q, p = case
    assert first_token_law_real_uniform(vocab, depth, q, p) == p[()]


@settings(max_examples=40, deadline=None)
@given(rounds())
def test_laws_are_distributions_over_legal_sequences(case):
    vocab, depth, q, p = case
    for law in (round_law(vocab, depth, q, p), round_law_real_uniform(vocab, depth, q, p)):
        assert sum(law.values()) == 1
        assert all(prob > 0 and 1 <= len(seq) <= depth + 1 for seq, prob in law.items())


@settings(max_examples=40, deadline=None)
@given(rounds())
def test_quantized_first_token_deviation_within_the_bound(case):
    vocab, depth, q, p = case
    deviation = quantization_deviation(vocab, depth, q, p)
    law = first_token_law(vocab, depth, q, p)
    assert deviation.tv == sum(abs(a - b) for a, b in zip(law, p[()])) / 2
    assert deviation.tv <= deviation.bound <= Fraction(vocab + 2, 2**33)
    # Per token: |P(v) - p(v)| < 2^-32 (q(v) + beta + Q_minus) <= 3 * 2^-32.
    assert all(abs(a - b) < Fraction(3, 2**32) for a, b in zip(law, p[()]))


@settings(max_examples=40, deadline=None)
@given(rounds())
def test_round_deviation_within_the_bound(case):
    vocab, depth, q, p = case
    deviation = round_deviation(vocab, depth, q, p)
    assert 0 <= deviation.tv <= deviation.bound


@settings(max_examples=30, deadline=None)
@given(rounds(max_depth=2).filter(lambda c: c[1] == 2))
def test_depth2_second_token_follows_p_of_the_first(case):
    # Given that the first emitted token y was an accepted draft, the rest is a
    # fresh round from prefix (y,): with a real uniform its first token is p((y,)).
    vocab, depth, q, p = case
    law = round_law_real_uniform(vocab, depth, q, p)
    for y in range(vocab):
        continued = {seq: prob for seq, prob in law.items() if len(seq) >= 2 and seq[0] == y}
        reach = sum(continued.values())
        if reach:
            second = [sum(prob for seq, prob in continued.items() if seq[1] == z) / reach for z in range(vocab)]
            assert second == p[(y,)]


def test_poor_q_with_zeros_where_p_is_positive():
    q = {(): QRow.dense([0, 0, 0, M])}
    p: dict[Prefix, list[Fraction]] = {(): [Fraction(1, 3), Fraction(1, 3), Fraction(1, 3), Fraction(0)]}
    p.update({(v,): [Fraction(1, 4)] * 4 for v in range(4)})
    assert first_token_law_real_uniform(4, 1, q, p) == p[()]
    law = round_law(4, 1, q, p)
    assert set(law) == {(0,), (1,), (2,)}  # x = 3 is never accepted (p = 0)
    deviation = quantization_deviation(4, 1, q, p)
    assert 0 < deviation.tv <= deviation.bound  # thirds are not 32-bit dyadic: a real, bounded deviation


def test_q_equal_to_dyadic_p_has_no_deviation():
    q = {(): QRow.dense([M // 2, M // 4, M // 4])}
    p: dict[Prefix, list[Fraction]] = {(): [Fraction(1, 2), Fraction(1, 4), Fraction(1, 4)]}
    p.update({(v,): [Fraction(1, 2), Fraction(1, 2), Fraction(0)] for v in range(3)})
    assert quantization_deviation(3, 1, q, p).tv == 0
    assert first_token_deviation_bound(p[()], q[()]) == 0
    assert round_law(3, 1, q, p) == round_law_real_uniform(3, 1, q, p)
    assert round_law(3, 1, q, p)[(0, 1)] == Fraction(1, 4)


def test_law_matches_sampled_rounds_of_the_verifier():
    """Draw N rounds with the ABI (drafts from their q rows by proposal draws) and compare with the law."""
    vocab, depth = 3, 2
    q = {
        (): QRow.dense([M // 2, M // 4, M // 4]),
        (0,): QRow.dense([0, M // 2, M // 2]),
        (1,): QRow.dense([3 * M // 4, M // 4, 0]),
        (2,): QRow.dense([M // 4, M // 4, M // 2]),
    }
    p = {
        (): [Fraction(1, 3), Fraction(1, 2), Fraction(1, 6)],
        (0,): [Fraction(1, 5), Fraction(2, 5), Fraction(2, 5)],
        (1,): [Fraction(1, 7), Fraction(4, 7), Fraction(2, 7)],
        (2,): [Fraction(0), Fraction(1, 2), Fraction(1, 2)],
    }
    p.update({pre: [Fraction(1, 6), Fraction(1, 3), Fraction(1, 2)] for pre in product(range(vocab), repeat=2)})
    law = round_law(vocab, depth, q, p)
    n = 2000
    seen: Counter = Counter()
    for seed in range(n):
        ident = RngIdentity(seed, 1, 1, 0)
        drafts: list[int] = []
        for i in range(1, depth + 1):
            drafts.append(sample_qrow(q[tuple(drafts)], proposal_draw(proposal_key(ident, i))))
        result = verify_round(
            RoundInput(ident, drafts, [q[()], q[tuple(drafts[:1])]], [p[()], p[tuple(drafts[:1])], p[tuple(drafts)]])
        )
        seen[tuple(result.emitted)] += 1
    assert set(seen) <= set(law)
    for seq, prob in law.items():
        spread = 5 * math.sqrt(float(prob * (1 - prob)) / n) + 2 / n
        assert abs(seen[seq] / n - float(prob)) <= spread, (seq, seen[seq], prob)


@pytest.mark.rules("R01", "R08", "R09", "R11")
def test_distribution_vectors():
    assert FAMILY.solve is not None
    for group in FAMILY.build():
        for case in group.tests:
            expected = case.expected
            if case.result == "invalid":  # its code: docs/formats/distribution.md, "Refusal precedence"
                assert FAMILY.solve(case.input) == expected
                assert expected["error"] in {row.code for row in DISTRIBUTION_REFUSALS}
                continue
            vocab, depth, q, p = decode_law_input(case.input)
            assert first_token_law_real_uniform(vocab, depth, q, p) == p[()]
            assert [Fraction(x) for x in expected["first_token_law_real_uniform"]] == p[()]
            assert Fraction(expected["tv_deviation"]) <= Fraction(expected["deviation_bound"])
            assert sum(Fraction(e["probability"]) for e in expected["emitted_law"]) == 1
            assert FAMILY.solve(case.input) == expected
