"""Standard verification (R10, R11, R23, R33): the rule, its boundaries, batch invariance,
and the ``verification_round`` vectors against an independent verifier with seeded bugs."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qconform.generators.encoding import decode_rational, f32_bits
from qconform.generators.families.verification_round import FAMILY, decode_request
from qconform.spec.constants import M
from qconform.spec.errors import SpecError
from qconform.spec.philox import philox4x32
from qconform.spec.qrow import QRow
from qconform.spec.rng_abi import Domain, RngIdentity, accept_key, correction_key
from qconform.spec.verification import (
    RoundInput,
    acceptance_probability,
    acceptance_test,
    residual_row,
    target_rows_from_f32,
    verify_batch,
    verify_round,
)

pytestmark = pytest.mark.rules("R10", "R11", "R23", "R33")

U32 = 2**32
V = 6


# --- the acceptance rule -------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(
    u32=st.integers(1, U32 - 2),
    count=st.integers(1, M),
    step=st.sampled_from([Fraction(-1), Fraction(-1, 2), Fraction(0), Fraction(1, 2), Fraction(1)]),
)
def test_acceptance_boundary(u32, count, step):
    # p chosen so that 2^32 p / q = u32 + step: accept iff the draw is strictly below.
    q = Fraction(count, M)
    p = (u32 + step) * q / U32
    assert acceptance_test(u32, p, q) == (step > 0)


@settings(max_examples=60, deadline=None)
@given(count=st.integers(1, M), u32=st.integers(0, U32 - 1))
def test_zero_target_is_never_accepted(count, u32):
    assert not acceptance_test(u32, Fraction(0), Fraction(count, M))
    assert not acceptance_test(0, Fraction(0), Fraction(count, M))
    assert acceptance_probability(Fraction(0), Fraction(count, M)) == 0


@settings(max_examples=60, deadline=None)
@given(p=st.fractions(0, 1, max_denominator=10**6), count=st.integers(1, M))
def test_acceptance_probability_counts_the_accepting_draws(p, count):
    q = Fraction(count, M)
    # Largest accepting draw by bisection over the monotone test, independent of the formula.
    lo, hi = -1, U32 - 1  # acceptance_test(lo) holds (or lo = -1), find last accepting u
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if acceptance_test(mid, p, q):
            lo = mid
        else:
            hi = mid - 1
    assert acceptance_probability(p, q) == Fraction(lo + 1, U32)
    assert 0 <= acceptance_probability(p, q) - min(1, p / q) < Fraction(1, U32)


# --- rounds ---------------------------------------------------------------------------------


def uniform(vocab: int = V) -> list[Fraction]:
    return [Fraction(1, vocab)] * vocab


def half_q(vocab: int = V) -> QRow:
    return QRow.dense([M // 2, M // 2] + [0] * (vocab - 2))


def test_residual_covers_the_full_vocabulary():
    q = QRow.sparse(V, [1, 3], [M // 2, M // 2])
    p = [Fraction(1, 8), Fraction(1, 4), Fraction(0), Fraction(1, 2), Fraction(0), Fraction(1, 8)]
    assert residual_row(p, q) == [Fraction(1, 8), 0, 0, 0, 0, Fraction(1, 8)]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(0, 9), min_size=V, max_size=V).filter(any),
    st.sets(st.integers(0, V - 1), min_size=1, max_size=V),
)
def test_residual_is_max_p_minus_q_everywhere(weights, support):
    ids = sorted(support)
    counts = [M // len(ids)] * len(ids)
    counts[0] += M - sum(counts)
    q = QRow.sparse(V, ids, counts)
    p = [Fraction(w, sum(weights)) for w in weights]
    dense_q = dict(zip(ids, counts))
    assert residual_row(p, q) == [max(p[v] - Fraction(dense_q.get(v, 0), M), 0) for v in range(V)]


def test_rejection_draws_the_correction_from_the_residual_at_its_own_key():
    ident = RngIdentity(3, 1, 1, 40)
    inp = RoundInput(
        ident,
        [0],
        [half_q()],
        [[Fraction(0), Fraction(1, 2), Fraction(1, 4), Fraction(1, 4), Fraction(0), Fraction(0)], uniform()],
    )
    result = verify_round(inp)
    reject, correction = result.draws
    assert (reject.decision, reject.domain, reject.position) == ("reject", Domain.ACCEPT, 40)
    assert reject.counter_words == accept_key(ident, 1).counter_words()
    assert (correction.decision, correction.domain, correction.position) == ("correction", Domain.CORRECTION, 40)
    assert correction.counter_words == correction_key(ident, 0).counter_words()
    assert correction.u32 == philox4x32(correction.counter_words, (3, 0))[0]
    assert correction.token == (2 if correction.u32 < U32 // 2 else 3)
    assert result.accepted == 0 and result.emitted == [correction.token]


def test_full_acceptance_draws_the_bonus_from_the_last_row():
    ident = RngIdentity(9, 0, 0, 7)
    q = half_q()
    p = [Fraction(c, M) for c in q.dense_counts()]
    bonus = [0, 0, 0, 0, 0, Fraction(1)]
    result = verify_round(RoundInput(ident, [0, 1, 1], [q] * 3, [p, p, p, bonus]))
    assert result.accepted == 3 and result.emitted == [0, 1, 1, 5]
    assert [d.decision for d in result.draws] == ["accept"] * 3 + ["bonus"]
    assert [d.position for d in result.draws] == [7, 8, 9, 10]


def test_stop_token_and_budget_end_emission_without_more_draws():
    ident = RngIdentity(9, 0, 0, 7)
    q = half_q()
    p = [Fraction(c, M) for c in q.dense_counts()]
    inp = RoundInput(ident, [0, 1, 0], [q] * 3, [p, p, p, uniform()])
    stopped = verify_round(replace(inp, stop_tokens=frozenset({1})))
    assert stopped.emitted == [0, 1] and len(stopped.draws) == 2
    budget = verify_round(replace(inp, budget=1))
    assert budget.emitted == [0] and len(budget.draws) == 1 and budget.accepted == 1
    assert len(verify_round(replace(inp, budget=4)).emitted) == 4


@st.composite
def requests(draw, depth: int | None = None):
    rng = random.Random(draw(st.integers(0, 2**32)))
    depth = rng.randint(1, 5) if depth is None else depth
    ident = RngIdentity(rng.getrandbits(64), rng.getrandbits(32), rng.getrandbits(32), rng.getrandbits(32))
    q_rows, drafts = [], []
    for _ in range(depth):
        ids = sorted(rng.sample(range(V), rng.randint(1, V)))
        counts = [M // len(ids)] * len(ids)
        counts[-1] += M - sum(counts)
        q_rows.append(QRow.sparse(V, ids, counts))
        drafts.append(rng.choice(ids))
    p_rows = []
    for _ in range(depth + 1):
        weights = [rng.randint(0, 4) for _ in range(V)]
        weights[0] += 1
        p_rows.append([Fraction(w, sum(weights)) for w in weights])
    return RoundInput(ident, drafts, q_rows, p_rows)


@settings(max_examples=30, deadline=None)
@given(
    st.integers(1, 5).flatmap(lambda depth: st.lists(requests(depth), min_size=1, max_size=4)),
    st.randoms(use_true_random=False),
)
def test_batch_invariance(batch, rnd):
    alone = [verify_round(r) for r in batch]
    order = list(range(len(batch)))
    rnd.shuffle(order)
    shuffled = verify_batch([batch[i] for i in order])
    assert [shuffled[k] for k in range(len(order))] == [alone[i] for i in order]


def test_a_batch_of_mixed_depths_is_refused():
    one, two = (
        RoundInput(
            RngIdentity(9, 0, 0, 7),
            [0] * k,
            [half_q()] * k,
            [[Fraction(c, M) for c in half_q().dense_counts()]] * (k + 1),
        )
        for k in (1, 2)
    )
    with pytest.raises(SpecError) as info:
        verify_batch([one, two])
    assert info.value.code == "BAD_SHAPE"


@settings(max_examples=30, deadline=None)
@given(requests())
def test_round_shape(inp):
    result = verify_round(inp)
    depth = len(inp.draft_tokens)
    assert 0 <= result.accepted <= depth
    assert result.emitted[: result.accepted] == inp.draft_tokens[: result.accepted]
    assert len(result.emitted) == result.accepted + 1 <= depth + 1
    rejected = result.draws[-1].decision == "correction"
    assert rejected == (result.accepted < depth)
    assert len(result.draws) == len(result.emitted) + rejected
    for draw in result.draws:
        assert draw.margin >= 0
    for i, draw in enumerate(result.draws[: result.accepted], start=1):
        assert draw.decision == "accept" and draw.position == (inp.ident.anchor + i - 1) % U32
        # p(x) = 0 is never accepted
        assert inp.p_rows[i - 1][inp.draft_tokens[i - 1]] > 0


@pytest.mark.rules("R19", "R27")
@pytest.mark.parametrize(
    "change, code",
    [
        (dict(draft_tokens=[2]), "ZERO_Q_AT_TOKEN"),
        (dict(draft_tokens=[V]), "TOKEN_OUT_OF_RANGE"),
        (dict(stop_tokens=frozenset({V})), "TOKEN_OUT_OF_RANGE"),
        (dict(p_rows=[uniform()]), "BAD_SHAPE"),
        (dict(p_rows=[uniform(), uniform(V + 1)]), "BAD_SHAPE"),
        (dict(p_rows=[uniform(), [Fraction(1, 2 * V)] * V]), "BAD_TARGET_ROW"),
        (dict(p_rows=[uniform(), [Fraction(-1, V)] + [Fraction(1, V)] * (V - 2) + [Fraction(3, V)]]), "BAD_TARGET_ROW"),
        (dict(draft_tokens=[], q_rows=[], p_rows=[uniform()]), "BAD_SHAPE"),
        (dict(budget=0), "BAD_SHAPE"),
    ],
)
def test_refusals(change, code):
    good = RoundInput(RngIdentity(1, 0, 0, 0), [1], [half_q()], [uniform(), uniform()])
    verify_round(good)
    with pytest.raises(SpecError) as err:
        verify_round(replace(good, **change))
    assert err.value.code == code


@pytest.mark.rules("R27")
def test_batch_bound():
    good = RoundInput(RngIdentity(1, 0, 0, 0), [1], [half_q()], [uniform(), uniform()])
    with pytest.raises(SpecError) as err:
        verify_batch([good] * 5)
    assert err.value.code == "BAD_SHAPE"


def test_target_rows_from_f32_normalize_exactly():
    bits = [[f32_bits(1.0), f32_bits(2.0), 0, f32_bits(0.5)], [f32_bits(3.0), 0, 0, 0]]
    assert target_rows_from_f32(bits) == [[Fraction(2, 7), Fraction(4, 7), 0, Fraction(1, 7)], [Fraction(1), 0, 0, 0]]
    # A target row that is no distribution is BAD_TARGET_ROW whatever its encoding (R10), never a
    # draft-weight code: all zeros, all -0.0, a negative weight (even -2^-149), an infinity, a NaN.
    for row in ([0, 0], [0x80000000, 0x80000000], [f32_bits(1.0), 0x80000001], [0x7F800000, 0], [0, 0x7FC00001]):
        with pytest.raises(SpecError) as err:
            target_rows_from_f32([row])
        assert err.value.code == "BAD_TARGET_ROW", row
    assert target_rows_from_f32([[0x80000000, f32_bits(2.0)]]) == [[0, Fraction(1)]]  # -0.0 is zero


# --- the vectors against an independent verifier with seeded bugs --------------------------

BUGS = (
    "le_acceptance",  # accept iff u q <= p 2^32
    "correction_reuses_accept_draw",
    "correction_reuses_proposal_draw",
    "residual_subtracts_drafted_only",
    "residual_support_only",
    "rng_keyed_by_batch_row",
    "bonus_from_last_draft_row",
    "accept_position_plus_one",
    "correction_position_plus_one",
    "emits_extra_token",
    "q_point_mass",
    "q_renormalized_over_target_support",
    "ignores_stop_tokens",
    "ignores_budget",
    "accepted_counts_trimmed_tests",  # tests all K drafts, trims emission, reports the untrimmed count
)


def draw32(inp: RoundInput, domain: int, position: int, row: int, bug: str | None) -> int:
    seed = inp.ident.seed ^ row if bug == "rng_keyed_by_batch_row" else inp.ident.seed
    counter = (position % U32, inp.ident.round, inp.ident.generation, domain << 24)
    return philox4x32(counter, (seed % U32, seed >> 32))[0]


def pick(masses: Sequence[Fraction | int], u32: int) -> int:
    total = sum(m for m in masses if m)
    if total == 0:
        raise ValueError("empty residual")
    cumulative = Fraction(0)
    for v, mass in enumerate(masses):
        if mass:
            cumulative += mass
            if cumulative * U32 > u32 * total:
                return v
    raise AssertionError


def leading_passes(inp: RoundInput, first: int, row: int, bug: str | None) -> int:
    """How many of the drafts x_first, x_first+1, ... pass their acceptance tests, in a row."""
    passes = 0
    for i in range(first, len(inp.draft_tokens) + 1):
        x, p = inp.draft_tokens[i - 1], inp.p_rows[i - 1][inp.draft_tokens[i - 1]]
        if not draw32(inp, 2, inp.ident.anchor + i - 1, row, bug) * inp.q_rows[i - 1].q(x) < p * U32:
            break
        passes += 1
    return passes


def seeded_verifier(inp: RoundInput, row: int, bug: str | None) -> tuple[int, list[int]]:
    """(accepted, emitted) of one request, written apart from the spec, with one optional bug."""
    anchor, depth = inp.ident.anchor, len(inp.draft_tokens)
    emitted: list[int] = []

    def done() -> bool:
        stop = emitted[-1] in inp.stop_tokens and bug != "ignores_stop_tokens"
        spent = inp.budget is not None and len(emitted) >= inp.budget and bug != "ignores_budget"
        return stop or spent

    for i in range(1, depth + 1):
        x, p_row = inp.draft_tokens[i - 1], inp.p_rows[i - 1]
        q_row = [Fraction(c, M) for c in inp.q_rows[i - 1].dense_counts()]
        if bug == "q_point_mass":
            q_row = [Fraction(v == x) for v in range(len(q_row))]
        if bug == "q_renormalized_over_target_support":
            kept = sum(q for q, p in zip(q_row, p_row) if p > 0)
            q_row = [q / kept if p > 0 else Fraction(0) for q, p in zip(q_row, p_row)]
        shift = 1 if bug == "accept_position_plus_one" else 0
        u = draw32(inp, 2, anchor + i - 1 + shift, row, bug)
        accepted = u * q_row[x] <= p_row[x] * U32 if bug == "le_acceptance" else u * q_row[x] < p_row[x] * U32
        if not accepted:
            if bug == "residual_subtracts_drafted_only":
                residual = [max(p - q_row[v], 0) if v == x else p for v, p in enumerate(p_row)]
            elif bug == "residual_support_only":
                residual = [max(p - q, 0) if q > 0 else Fraction(0) for p, q in zip(p_row, q_row)]
            else:
                residual = [max(p - q, 0) for p, q in zip(p_row, q_row)]
            position = anchor + i - 1 + (1 if bug == "correction_position_plus_one" else 0)
            uc = draw32(inp, 3, position, row, bug)
            if bug == "correction_reuses_accept_draw":
                uc = u
            if bug == "correction_reuses_proposal_draw":
                uc = draw32(inp, 1, anchor + i - 1, row, bug)
            emitted.append(pick(residual, uc))
            return i - 1, emitted
        emitted.append(x)
        if done():
            if bug == "accepted_counts_trimmed_tests":
                return i + leading_passes(inp, i + 1, row, bug), emitted
            return i, emitted
    bonus_row = inp.p_rows[depth - 1 if bug == "bonus_from_last_draft_row" else depth]
    emitted.append(pick(bonus_row, draw32(inp, 3, anchor + depth, row, bug)))
    if bug == "emits_extra_token":
        emitted.append(pick(inp.p_rows[depth], draw32(inp, 3, anchor + depth + 1, row, bug)))
    return depth, emitted


def batch_outcome(requests: list[RoundInput], bug: str | None):
    try:
        return [seeded_verifier(r, row, bug) for row, r in enumerate(requests)]
    except ValueError as exc:  # a buggy verifier that finds nothing to sample
        return f"error: {exc}"


@pytest.fixture(scope="module")
def vector_groups():
    return list(FAMILY.build())


@pytest.fixture(scope="module")
def vector_cases(vector_groups):
    """(name, decoded requests, expected (accepted, emitted) per request) of every valid case."""
    cases = []
    for group in vector_groups:
        for case in group.tests:
            if case.result != "valid":
                continue
            vocab = case.input["vocab"]
            requests = [decode_request(r, vocab) for r in case.input["requests"]]
            want = [(r["accepted"], r["emitted"]) for r in case.expected["requests"]]
            cases.append((f"{group.name}/{case.name}", requests, want))
    return cases


@pytest.mark.rules("R01", "R02", "R22", "R23", "R27", "R33")
def test_vectors_agree_with_the_independent_verifier(vector_cases):
    for name, requests, want in vector_cases:
        assert batch_outcome(requests, None) == want, name


@pytest.mark.rules("R01", "R02", "R22", "R23", "R27", "R33")
@pytest.mark.parametrize("bug", BUGS)
def test_every_seeded_bug_changes_some_vector_output(vector_cases, bug):
    small = [(n, r, w) for n, r, w in vector_cases if r[0].q_rows[0].vocab < 1000]
    killed = [name for name, requests, want in small if batch_outcome(requests, bug) != want]
    assert killed, f"no verification_round vector catches {bug}"


def test_invalid_vectors_are_refused(vector_groups):
    for group in vector_groups:
        for case in group.tests:
            if case.result == "invalid":
                assert FAMILY.solve is not None and FAMILY.solve(case.input) == case.expected
                with pytest.raises(SpecError):
                    verify_batch([decode_request(r, case.input["vocab"]) for r in case.input["requests"]])


@pytest.mark.rules("R11")
def test_accepted_counts_emitted_drafts_only(vector_cases):
    """``accepted`` is the number of drafts *emitted* (docs/formats/verification_round.md): these
    cases trim at a stop token or the budget before a draft that would also pass its test, so an
    engine that tests all K drafts and reports the untrimmed count fails exactly them."""
    trimmed = sorted(
        name
        for name, requests, want in vector_cases
        if batch_outcome(requests, "accepted_counts_trimmed_tests") != want
    )
    assert trimmed == [
        "stop_and_budget/budget-1-of-depth-5",
        "stop_and_budget/budget-3-of-depth-5",
        "stop_and_budget/per-request-parameters",
        "stop_and_budget/per-request-parameters-reversed",
        "stop_and_budget/stop-at-accepted-draft",
    ], trimmed
    for name, requests, want in vector_cases:
        for inp, (accepted, emitted) in zip(requests, want):
            assert emitted[:accepted] == inp.draft_tokens[:accepted], name


@pytest.mark.rules("R11")
def test_acceptance_margins_follow_the_documented_formula():
    """Every acceptance draw's margin in the committed corpus is ``1`` when p(x) = 0, else
    ``|u32/2^32 - p(x)/q(x)|`` (docs/formats/verification_round.md, *Margins*)."""
    corpus = json.loads((Path(__file__).parents[2] / "vectors" / "verification_round.json").read_text())
    zero_target = 0
    for group in corpus["testGroups"]:
        for case in group["tests"]:
            if case["result"] != "valid":
                continue
            vocab = case["input"]["vocab"]
            for raw, got in zip(case["input"]["requests"], case["expected"]["requests"]):
                inp = decode_request(raw, vocab)
                for draw in got["draws"]:
                    if draw["domain"] != "ACCEPT":
                        continue
                    i = (
                        draw["position"] - inp.ident.anchor + 1
                        if draw["position"] >= inp.ident.anchor
                        else draw["position"] + U32 - inp.ident.anchor + 1
                    )
                    x = inp.draft_tokens[i - 1]
                    p, q = inp.p_rows[i - 1][x], inp.q_rows[i - 1].q(x)
                    want = Fraction(1) if p == 0 else abs(Fraction(draw["u32"], U32) - p / q)
                    zero_target += p == 0
                    assert decode_rational(draw["margin"]) == want, case["id"]
    assert zero_target >= 11


@pytest.mark.rules("R22", "R24")
def test_unseeded_requests_are_keyed_by_their_ids_and_explicit_seeds_as_given(vector_groups):
    """``request_seeds``: two unseeded requests identical but for their IDs get different answers,
    so a constant default seed (one answer for both) fails; two requests with one explicit seed
    and identity draw the same acceptance noise (no batch row or request index in the key)."""
    cases = {case.name: case for group in vector_groups if group.name == "request_seeds" for case in group.tests}
    pair = cases["unseeded-pair"]
    first, second = pair.input["requests"]
    assert {k: v for k, v in first.items() if k != "request_id"} == {
        k: v for k, v in second.items() if k != "request_id"
    }
    assert "seed" not in first and first["request_id"] != second["request_id"]
    want = [(r["accepted"], r["emitted"]) for r in pair.expected["requests"]]
    assert want[0] != want[1]
    seeded = [{**{k: v for k, v in body.items() if k != "request_id"}, "seed": "0"} for body in (first, second)]
    defaulted = [decode_request(body, pair.input["vocab"]) for body in seeded]
    assert batch_outcome(defaulted, None) != want  # a default seed of 0 answers both alike
    shared = cases["explicit-seed-shared"].expected["requests"]
    accept = [[d["u32"] for d in r["draws"] if d["domain"] == "ACCEPT"] for r in shared]
    common = min(len(a) for a in accept)
    assert common >= 1 and accept[0][:common] == accept[1][:common]
