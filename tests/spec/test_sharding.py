"""The sharded decomposition (spec/sharding.py) against the unsharded spec, exactly (R30-R33).

Every sharded computation is compared with the unsharded function of the spec on
the concatenated row, for random rows and random (uneven) contiguous splits; the
samplers are compared for every draw at small masses and at every token's draw
interval endpoints at full mass.
"""

from __future__ import annotations

import random
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qconform.generators.encoding import f32_bits
from qconform.generators.families.sharding import even_shard_ranges
from qconform.spec.allocation import allocate_dense, allocate_sparse, select_top_k
from qconform.spec.constants import VOCAB, M
from qconform.spec.errors import SpecError
from qconform.spec.floats import F32_NEG_INF
from qconform.spec.qrow import QRow
from qconform.spec.sampling import U32_LIMIT, mass_draw, sample_counts
from qconform.spec.sharding import (
    ShardRange,
    agreed_weights,
    allocate_sharded,
    check_shard_ranges,
    kernel_oracles,
    local_top_k,
    merge_top_k,
    sample_sharded_counts,
    sample_sharded_mass,
    shard_entries,
    shard_residual,
    shard_target_probabilities,
    shard_weight_partial,
    sharded_q,
    sharded_weights_from_logits,
    split_row,
)
from qconform.spec.verification import residual_row
from qconform.spec.weights import weights_from_f32, weights_from_logits

pytestmark = pytest.mark.rules("R30", "R31", "R32", "R33")

FEW = settings(max_examples=40, deadline=None)
SOME = settings(max_examples=15, deadline=None)


@st.composite
def splits(draw, min_vocab: int = 1, max_vocab: int = 12, max_shards: int = 4) -> list[ShardRange]:
    """Random contiguous splits of a random vocabulary into 1..max_shards nonempty shards."""
    vocab = draw(st.integers(min_vocab, max_vocab))
    shards = draw(st.integers(1, min(max_shards, vocab)))
    cuts = (
        sorted(draw(st.lists(st.integers(1, vocab - 1), min_size=shards - 1, max_size=shards - 1, unique=True)))
        if shards > 1
        else []
    )
    bounds = [0] + cuts + [vocab]
    return [ShardRange(a, b) for a, b in zip(bounds, bounds[1:])]


#: small FP32-exact weights with many exact ties (so ties by global ID are exercised)
TIED_WEIGHTS = st.sampled_from([0.0, 0.5, 1.0, 1.0, 3.0, 2.0**-30, 7.0])


@st.composite
def weight_rows(draw, ranges: list[ShardRange]) -> list[Fraction]:
    row = draw(st.lists(TIED_WEIGHTS, min_size=ranges[-1].end, max_size=ranges[-1].end))
    if not any(row):
        row[draw(st.integers(0, len(row) - 1))] = 1.0
    return weights_from_f32([f32_bits(x) for x in row])


def rows_and_split(max_vocab: int = 12):
    return splits(max_vocab=max_vocab).flatmap(lambda r: st.tuples(st.just(r), weight_rows(r)))


def counts_with_total(rng: random.Random, vocab: int, total: int, zero_share: float) -> list[int]:
    """Random nonnegative counts summing to ``total``, about ``zero_share`` of them zero."""
    live = [v for v in range(vocab) if rng.random() >= zero_share] or [rng.randrange(vocab)]
    cuts = sorted(rng.randint(0, total) for _ in range(len(live) - 1))
    counts = [0] * vocab
    for v, a, b in zip(live, [0] + cuts, cuts + [total]):
        counts[v] = b - a
    return counts


# --- the split ------------------------------------------------------------------------------


def test_even_split_of_the_production_vocabulary():
    assert even_shard_ranges(VOCAB, 2) == [ShardRange(0, 64640), ShardRange(64640, VOCAB)]
    four = even_shard_ranges(VOCAB, 4)
    assert [r.size for r in four] == [32320] * 4
    assert [r.size for r in even_shard_ranges(10, 4)] == [3, 3, 2, 2]


@given(st.integers(1, 200), st.integers(1, 8))
@FEW
def test_even_split_covers_the_vocabulary(vocab, shards):
    if shards > vocab:
        with pytest.raises(SpecError) as info:
            even_shard_ranges(vocab, shards)
        assert info.value.code == "BAD_SHARD_RANGES"
        return
    ranges = even_shard_ranges(vocab, shards)
    check_shard_ranges(ranges, vocab)
    sizes = [r.size for r in ranges]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


@pytest.mark.parametrize(
    "ranges",
    [
        [],
        [ShardRange(0, 3), ShardRange(4, 8)],  # gap
        [ShardRange(0, 5), ShardRange(4, 8)],  # overlap
        [ShardRange(0, 4), ShardRange(4, 4), ShardRange(4, 8)],  # empty shard
        [ShardRange(0, 4), ShardRange(4, 7)],  # does not cover V = 8
        [ShardRange(1, 8)],  # does not start at 0
    ],
)
def test_bad_shard_ranges_are_refused(ranges):
    with pytest.raises(SpecError) as info:
        check_shard_ranges(ranges, 8)
    assert info.value.code == "BAD_SHARD_RANGES"


# --- global normalization (R31) -------------------------------------------------------------


LOGIT = st.one_of(st.integers(-64, 64).map(lambda n: n / 8), st.just(float("-inf")))


@given(splits(max_vocab=8), st.data(), st.sampled_from([1.0, 0.7, 2.5]))
@SOME
def test_two_phase_normalization_equals_the_unsharded_weights(ranges, data, temperature):
    vocab = ranges[-1].end
    logits = data.draw(st.lists(LOGIT, min_size=vocab, max_size=vocab))
    logits[data.draw(st.integers(0, vocab - 1))] = 0.25  # at least one unmasked token
    bits = [f32_bits(x) for x in logits]
    shards, maxes, global_max = sharded_weights_from_logits(bits, f32_bits(temperature), ranges)
    whole = weights_from_logits(bits, f32_bits(temperature))
    assert [b for shard in shards for b in shard] == whole.weights_f32
    unmasked = [m for m in maxes if m != F32_NEG_INF]
    assert global_max in unmasked
    for shard, local_max in zip(split_row(logits, ranges), maxes):
        finite = [x for x in shard if x != float("-inf")]
        assert (local_max == F32_NEG_INF) == (not finite)


def test_refusals_are_agreed_by_class_priority_over_the_shards():
    """+inf on shard 0 and NaN on shard 1: the unsharded row refuses NAN_LOGIT, so must every rank."""
    bits = [f32_bits(float("inf")), f32_bits(1.0), f32_bits(float("nan")), f32_bits(0.0)]
    ranges = [ShardRange(0, 2), ShardRange(2, 4)]
    with pytest.raises(SpecError) as whole:
        weights_from_logits(bits, f32_bits(1.0))
    with pytest.raises(SpecError) as sharded:
        sharded_weights_from_logits(bits, f32_bits(1.0), ranges)
    assert sharded.value.code == whole.value.code == "NAN_LOGIT"
    weights = [f32_bits(-1.0), f32_bits(1.0), f32_bits(float("inf")), f32_bits(1.0)]
    with pytest.raises(SpecError) as info:
        agreed_weights([shard_weight_partial(part, "f32") for part in split_row(weights, ranges)])
    assert info.value.code == "POS_INF_WEIGHT"  # the class priority, though NEGATIVE_WEIGHT has the lower ID
    masked = [F32_NEG_INF] * 4
    with pytest.raises(SpecError) as info:
        sharded_weights_from_logits(masked, f32_bits(1.0), ranges)
    assert info.value.code == "ALL_MASKED"


# --- top-k merge (R30) and global tickets (R31) ---------------------------------------------


@given(rows_and_split(), st.data())
@FEW
def test_merged_local_top_k_is_the_global_top_k(split_and_row, data):
    ranges, row = split_and_row
    k = data.draw(st.integers(1, len(row)))
    candidates = [local_top_k(shard_entries(w, r), k) for w, r in zip(split_row(row, ranges), ranges)]
    for shard, found in zip(ranges, candidates):
        assert len(found) == min(k, shard.size)
    merged = merge_top_k(candidates, k)
    assert [v for v, _ in merged] == select_top_k(row, k).support
    assert all(w == row[v] for v, w in merged)


@given(rows_and_split(max_vocab=16))
@FEW
def test_global_tickets_give_the_unsharded_allocation(split_and_row):
    ranges, row = split_and_row
    domains = [shard_entries(w, r) for w, r in zip(split_row(row, ranges), ranges)]
    sharded = allocate_sharded(domains)
    whole = allocate_dense(row)
    assert [c for part in sharded.shards for c in part.counts] == whole.counts
    assert sharded.remaining == whole.remaining
    assert sharded.total == sum(row)
    assert sum(part.tickets for part in sharded.shards) == whole.remaining
    assert sum(part.remainder_sum for part in sharded.shards) == whole.remaining
    for part, weights in zip(sharded.shards, split_row(row, ranges)):
        assert part.domain_sum == sum(weights)
        assert part.count_mass == part.floor_sum + part.tickets
        assert part.floor_sum == sum(M * w // sum(row) for w in weights)


def test_tickets_are_global_not_a_rounding_of_each_shard_share():
    """Fractional parts 0.1, 0.1, 0.1 on shard 0 and 0.9, 0.4, 0.4 on shard 1: both tickets go to
    shard 1 (0.9 and the lower-ID 0.4), although shard 1's share of the tickets is only 1.7."""
    quotas = [5 + Fraction(n, 10) for n in (1, 1, 1, 9, 4, 4)]
    quotas.append(M - sum(quotas, Fraction(0)))  # a whole quota: f = 0
    row = [q / M for q in quotas]  # W = 1, so Q_v = M w_v
    ranges = [ShardRange(0, 3), ShardRange(3, 7)]
    sharded = allocate_sharded([shard_entries(w, r) for w, r in zip(split_row(row, ranges), ranges)])
    assert sharded.remaining == 2
    assert [part.tickets for part in sharded.shards] == [0, 2]
    assert sharded.shards[1].remainder_sum == Fraction(17, 10)
    assert [c for part in sharded.shards for c in part.counts] == allocate_dense(row).counts


@given(rows_and_split(), st.data())
@FEW
def test_sharded_top_k_is_the_unsharded_sparse_row(split_and_row, data):
    ranges, row = split_and_row
    k = data.draw(st.integers(1, len(row)))
    sharded = sharded_q(split_row(row, ranges), ranges, k)
    whole = allocate_sparse(row, k)
    assert sharded.support == whole.support
    counts = [c for shard in sharded.shard_counts() for c in shard]
    assert [v for v, c in enumerate(counts) if c] == whole.ids
    assert [c for c in counts if c] == whole.counts
    assert sharded.allocation.remaining == whole.remaining


# --- the sharded proposal sampler (R32) -----------------------------------------------------


@given(splits(max_vocab=10), st.integers(1, 64), st.randoms(use_true_random=False))
@FEW
def test_sharded_proposal_equals_the_unsharded_sampler_for_every_draw(ranges, total, rng):
    counts = counts_with_total(rng, ranges[-1].end, total, zero_share=0.4)
    shards = split_row(counts, ranges)
    for u in range(total):
        draw = sample_sharded_counts(shards, ranges, u)
        assert draw.token == sample_counts(counts, u)
        assert draw.token == ranges[draw.shard].start + draw.local_token
        assert sum(shards[draw.shard]) > 0  # a zero-mass shard is never chosen


@given(splits(max_vocab=10), st.randoms(use_true_random=False))
@FEW
def test_sharded_proposal_at_full_mass_by_interval_endpoints(ranges, rng):
    """Both samplers are nondecreasing step functions of u; they agree at both ends of every
    token's draw interval [C_{v-1}, C_v), so they agree on all 2^24 draws."""
    counts = counts_with_total(rng, ranges[-1].end, M, zero_share=0.3)
    shards = split_row(counts, ranges)
    below = 0
    for v, c in enumerate(counts):
        if c:
            for u in (below, below + c - 1):
                assert sample_sharded_counts(shards, ranges, u).token == v == sample_counts(counts, u)
        below += c


def test_zero_mass_shard_is_skipped_at_its_boundary():
    ranges = [ShardRange(0, 2), ShardRange(2, 4), ShardRange(4, 6)]
    shards = [[3, 1], [0, 0], [0, M - 4]]
    assert sample_sharded_counts(shards, ranges, 3).token == 1
    assert sample_sharded_counts(shards, ranges, 4).shard == 2
    assert {sample_sharded_counts(shards, ranges, u).shard for u in range(0, 64)} == {0, 2}


# --- the sharded residual sampler (R33) -----------------------------------------------------


@st.composite
def residual_inputs(draw):
    ranges = draw(splits(min_vocab=2, max_vocab=10))
    vocab = ranges[-1].end
    weights = draw(st.lists(st.integers(0, 9), min_size=vocab, max_size=vocab))
    weights[draw(st.integers(0, vocab - 1))] += 1
    rng = draw(st.randoms(use_true_random=False))
    counts = counts_with_total(rng, vocab, M, zero_share=0.5)
    if draw(st.booleans()):
        q_row = QRow.sparse(vocab, [v for v, c in enumerate(counts) if c], [c for c in counts if c])
    else:
        q_row = QRow.dense(counts)
    return ranges, [Fraction(w) for w in weights], q_row


@given(residual_inputs())
@FEW
def test_sharded_residual_equals_the_unsharded_residual_draw(inputs):
    ranges, weights, q_row = inputs
    p_shards = shard_target_probabilities(split_row(weights, ranges))
    total = sum(weights)
    p = [w / total for w in weights]
    assert [x for shard in p_shards for x in shard] == p
    residuals = [shard_residual(ps, qs) for ps, qs in zip(p_shards, split_row(q_row.dense_counts(), ranges))]
    whole = residual_row(p, q_row)
    assert [r for shard in residuals for r in shard] == whole
    if not any(whole):
        with pytest.raises(SpecError):
            sample_sharded_mass(residuals, ranges, 0)
        return
    mass = sum(whole)
    below = Fraction(0)
    for v, r in enumerate(whole):
        if r:
            first = -((-below * U32_LIMIT) // mass)  # ceil(2^32 C_{v-1} / R)
            last = -((-(below + r) * U32_LIMIT) // mass) - 1
            for u in (first, last) if first <= last else ():  # the token's first and last draw values
                draw = sample_sharded_mass(residuals, ranges, u)
                assert draw.token == v == mass_draw(whole, u)[0]
                assert sum(residuals[draw.shard]) > 0
        below += r


def test_residual_outside_the_sparse_support_on_a_non_leader_shard():
    """q = 1/2, 1/2 on {0, 1} (shard 0), p puts 1/2 on token 0 and 1/2 on token 6 (shard 1, outside the
    support): shard 0's residual is zero, every draw lands on token 6."""
    ranges = [ShardRange(0, 4), ShardRange(4, 8)]
    q_row = QRow.sparse(8, [0, 1], [M // 2, M // 2])
    p = [Fraction(1, 2), 0, 0, 0, 0, 0, Fraction(1, 2), 0]
    residuals = [
        shard_residual(ps, qs) for ps, qs in zip(split_row(p, ranges), split_row(q_row.dense_counts(), ranges))
    ]
    assert sum(residuals[0]) == 0 and sum(residuals[1]) == Fraction(1, 2)
    for u in (0, 1 << 31, U32_LIMIT - 1):
        draw = sample_sharded_mass(residuals, ranges, u)
        assert (draw.shard, draw.local_token, draw.token) == (1, 2, 6)


@pytest.mark.rules("R34")
def test_kernels_are_listed_in_dependency_order_with_their_oracles():
    kernels = kernel_oracles()
    assert [name for name, _ in kernels] == [
        "global logsumexp and counts",
        "global top-k merge",
        "integer categorical proposal",
        "sparse q lookup by global ID",
        "full-target residual mass and sampling",
    ]
    for _, oracles in kernels:
        assert oracles and all(getattr(f, "__rules__", None) for f in oracles)
