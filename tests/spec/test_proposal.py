"""The worker's proposal chain: each row conditioned on the sampled prefix, drawn at its own key (R01, R05, R22)."""

from __future__ import annotations

import random
import struct
from fractions import Fraction
from itertools import accumulate

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qconform.generators.encoding import encode_blob
from qconform.generators.families import allocation_dense, allocation_sparse
from qconform.spec.allocation import allocate_dense
from qconform.spec.allocation_fp64 import allocate_dense_fp64, fp64_may_differ
from qconform.spec.errors import SpecError
from qconform.spec.markov import markov_bias_f32
from qconform.spec.philox import philox4x32
from qconform.spec.proposal import ProposalInput, SupportPolicy, proposal_chain, proposal_row
from qconform.spec.rng_abi import RngIdentity
from qconform.spec.weights import weights_from_logits

pytestmark = pytest.mark.rules("R01", "R05", "R06", "R07", "R08", "R15", "R22")


def f32(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def make_input(
    seed: int, vocab: int, rank: int, depth: int, scale: float, support: SupportPolicy, identity: RngIdentity
) -> ProposalInput:
    rng = random.Random(seed)
    logits = [[f32(rng.gauss(0, 2)) for _ in range(vocab)] for _ in range(depth)]
    left = [[f32(rng.gauss(0, scale)) for _ in range(rank)] for _ in range(vocab)]
    right = [[f32(rng.gauss(0, scale)) for _ in range(vocab)] for _ in range(rank)]
    return ProposalInput(logits, left, right, rng.randrange(vocab), f32(1.0), support, identity)


identities = st.builds(
    RngIdentity,
    st.integers(0, 2**64 - 1),
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**32 - 1),
)


@given(st.integers(0, 2**32), st.integers(2, 12), st.integers(1, 3), st.integers(1, 5), identities, st.booleans())
@settings(max_examples=40, deadline=None)
def test_chain_draws_are_keyed_and_sampled_as_the_abi_says(seed, vocab, rank, depth, ident, sparse):
    support = SupportPolicy.top_k(max(1, vocab // 2)) if sparse else SupportPolicy.dense()
    inp = make_input(seed, vocab, rank, depth, 1.0, support, ident)
    result = proposal_chain(inp)
    assert len(result.rows) == depth
    for i, row in enumerate(result.rows, start=1):
        position = (ident.anchor + i - 1) % 2**32
        counter = (position, ident.round, ident.generation, 1 << 24)  # PROPOSAL domain, draw counter 0
        assert row.draw.counter == counter and row.draw.position == position
        u24 = philox4x32(counter, (ident.seed & 0xFFFFFFFF, ident.seed >> 32))[0] >> 8
        assert row.draw.u24 == u24
        dense = row.q.dense_counts()
        assert row.token == next(v for v, c in enumerate(accumulate(dense)) if c > u24)
        assert dense[row.token] > 0
        if sparse:
            assert row.q.ids is not None and support.k is not None
            assert len(row.q.ids) <= support.k


@given(st.integers(0, 2**32), st.integers(2, 10), identities)
@settings(max_examples=25, deadline=None)
def test_each_row_is_conditioned_on_the_previous_sampled_token(seed, vocab, ident):
    inp = make_input(seed, vocab, 2, 4, 1.5, SupportPolicy.dense(), ident)
    result = proposal_chain(inp)
    previous = inp.last_committed_token
    for logits, row in zip(inp.base_logits, result.rows):
        weights = weights_from_logits(
            logits, inp.temperature_bits, markov_bias_f32(previous, inp.markov_left, inp.markov_right)
        )
        assert list(row.q.counts) == allocate_dense(weights.weights).counts
        assert row.exp_margin_ulp == weights.exp_margin_ulp
        previous = row.token


def test_a_different_first_token_changes_the_second_row():
    inp = make_input(11, 16, 2, 5, 2.0, SupportPolicy.dense(), RngIdentity(1, 2, 3, 4))
    result = proposal_chain(inp)
    others = [v for v, _ in result.rows[0].q.support() if v != result.tokens[0]]
    alternatives = [
        proposal_row(
            inp.base_logits[1], markov_bias_f32(v, inp.markov_left, inp.markov_right), inp.temperature_bits, inp.support
        )[0]
        for v in others
    ]
    assert any(row != result.rows[1].q for row in alternatives)


def test_without_markov_rows_ignore_the_prefix_and_the_seed_only_moves_draws():
    base = make_input(5, 12, 1, 5, 0.0, SupportPolicy.dense(), RngIdentity(1, 0, 0, 0))
    other = ProposalInput(
        base.base_logits,
        base.markov_left,
        base.markov_right,
        (base.last_committed_token + 1) % 12,
        base.temperature_bits,
        base.support,
        RngIdentity(99, 0, 0, 0),
    )
    rows_a = [row.q for row in proposal_chain(base).rows]
    rows_b = [row.q for row in proposal_chain(other).rows]
    assert rows_a == rows_b


def test_refusals():
    good = make_input(3, 6, 2, 2, 1.0, SupportPolicy.dense(), RngIdentity(0, 0, 0, 0))
    ragged = ProposalInput(
        [good.base_logits[0], good.base_logits[1][:5]],
        good.markov_left,
        good.markov_right,
        good.last_committed_token,
        good.temperature_bits,
        good.support,
        good.identity,
    )
    with pytest.raises(SpecError) as info:
        proposal_chain(ragged)
    assert info.value.code == "BAD_SHAPE"
    with pytest.raises(SpecError):
        SupportPolicy("top_k", None)
    outside = ProposalInput(
        good.base_logits, good.markov_left, good.markov_right, 6, good.temperature_bits, good.support, good.identity
    )
    with pytest.raises(SpecError) as info:
        proposal_chain(outside)
    assert info.value.code == "TOKEN_OUT_OF_RANGE"


# --- fp64_may_differ: the allocation families' per-row verdict -----------------------------------


@pytest.mark.parametrize("support", [SupportPolicy.dense(), SupportPolicy.top_k(5)])
def test_an_exact_tie_between_equal_weights_may_not_differ_in_fp64(support):
    values = (0.5, -1.25, 0.5, 2.0, 0.5, -1.25, 0.5, 0.5)  # the weights e^-1.5 tie at the ticket threshold
    logits = [f32(x) for x in values]
    q, tie_gap, _, _, may_differ = proposal_row(logits, [0] * len(values), f32(1.0), support)
    assert tie_gap == 0
    assert fp64_may_differ(tie_gap, len(q.counts))  # the plain tie gap bound would excuse any tie order
    assert may_differ is False
    dense = q.dense_counts()
    tied = [v for v, x in enumerate(values) if x == 0.5 and dense[v] > 0]
    assert len({dense[v] for v in tied}) == 2  # one ticket apart: the tie is at the threshold
    assert [dense[v] for v in tied] == sorted((dense[v] for v in tied), reverse=True)  # lowest IDs win


def few_valued_row(seed: int, vocab: int) -> list[int]:
    rng = random.Random(seed)
    return [f32(rng.choice([0.5, -1.25, 2.0, -3.0])) for _ in range(vocab)]


@given(st.integers(0, 2**32), st.integers(1, 24), st.booleans(), st.data())
@settings(max_examples=40, deadline=None)
def test_each_row_records_what_the_allocation_families_record(seed, vocab, equal_logits, data):
    """fp64_may_differ of a chain row equals the allocation_dense / allocation_sparse field of
    the same FP32 weights, and where it is false the FP64 recipe agrees with the exact counts."""
    logits = (
        few_valued_row(seed, vocab)
        if equal_logits
        else make_input(seed, vocab, 1, 1, 0.0, SupportPolicy.dense(), RngIdentity(0, 0, 0, 0)).base_logits[0]
    )
    k = data.draw(st.none() | st.integers(1, vocab))
    support = SupportPolicy.dense() if k is None else SupportPolicy.top_k(k)
    q, _, _, _, may_differ = proposal_row(logits, [0] * vocab, f32(1.0), support)
    weight_bits = weights_from_logits(logits, f32(1.0), [0] * vocab).weights_f32
    case_input = {"weights": encode_blob("f32", weight_bits)}
    if k is None:
        assert may_differ == allocation_dense.solve(case_input)["fp64_may_differ"]
        if not may_differ:
            assert allocate_dense_fp64(weight_bits, "f32") == list(q.counts)
    else:
        assert may_differ == allocation_sparse.solve({**case_input, "k": k})["fp64_may_differ"]


# --- the stated FP32 order forbids FMA contraction and flush-to-zero -----------------------------


def fma_markov_bias(prev_token: int, left_bits, right_bits) -> list[int]:
    """The Markov bias evaluated with fused multiply-adds: ``acc = RN(acc + l * r)``, one rounding
    per step instead of two (what ``--fmad=true`` or ``fma.rn.f32`` computes)."""
    from qconform.spec.floats import decode_f32, f32_add, f32_mul, round_to_f32

    def value(bits: int) -> Fraction:
        decoded = decode_f32(bits)
        assert isinstance(decoded, Fraction), f"{bits:#010x} is not finite"
        return decoded

    bias = []
    for v in range(len(right_bits[0])):
        acc = 0
        for j, coefficient in enumerate(left_bits[prev_token]):
            exact = value(acc) + value(coefficient) * value(right_bits[j][v])
            acc = round_to_f32(exact) if exact != 0 else f32_add(acc, f32_mul(coefficient, right_bits[j][v]))
        bias.append(acc)
    return bias


FMA_CAUGHT_BY = [
    "proposal_chain/chains/dense-v32-r2",
    "proposal_chain/chains/dense-v256-r4-t0.6",
    "proposal_chain/chains/topk16-v512-r4",
    "proposal_chain/chains/topk32-v1024-r8-t1.7",
    "proposal_chain/chains/dense-v64-masked",
    "proposal_chain/rng_identity/anchor-wraps",
    "proposal_chain/rng_identity/seed-high-word",
    "proposal_chain/draw_boundaries/dense-v1024-draw-below-boundary",
    "proposal_chain/draw_boundaries/dense-v1024-draw-at-boundary",
]


@pytest.mark.rules("R01", "R05")
def test_an_fma_evaluation_of_the_markov_bias_changes_committed_q_rows(monkeypatch):
    """docs/vector-format.md, *FP32 evaluation*: contracting ``acc + l * r`` into one FMA changes the
    bias bits, hence the weights and the dyadic24 counts, of these committed cases."""
    import json
    from pathlib import Path

    import qconform.spec.proposal as proposal_module
    from qconform.generators.registry import load_family

    family = load_family("proposal_chain")
    corpus = json.loads((Path(__file__).parents[2] / "vectors" / "proposal_chain.json").read_text())
    monkeypatch.setattr(proposal_module, "markov_bias_f32", fma_markov_bias)
    caught = []
    for group in corpus["testGroups"]:
        for case in group["tests"]:
            if "rows" not in case["expected"]:
                continue  # a refused chain: FMA is about the bias of an accepted one
            assert family.solve is not None
            got = family.solve(case["input"])
            if got.get("rows") != case["expected"]["rows"]:
                caught.append(case["id"])
    assert caught == FMA_CAUGHT_BY


@pytest.mark.rules("R05")
def test_flush_to_zero_of_subnormal_weights_is_caught():
    """``allocation_dense/edges/subnormal-only``: flushing its subnormal weights leaves no mass."""
    import json
    from pathlib import Path

    from qconform.generators.encoding import decode_blob

    corpus = json.loads((Path(__file__).parents[2] / "vectors" / "allocation_dense.json").read_text())
    case = next(c for g in corpus["testGroups"] for c in g["tests"] if c["id"].endswith("/edges/subnormal-only"))
    bits, _ = decode_blob(case["input"]["weights"], "f32")
    assert all(0 < b < 0x00800000 for b in bits if b)  # every positive weight is subnormal
    with pytest.raises(SpecError) as err:
        allocate_dense([Fraction(0) for _ in bits])  # FTZ: every weight flushed
    assert err.value.code == "ZERO_MASS"
