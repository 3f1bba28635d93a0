"""Vector family ``sharding``: the vocabulary-sharded (TP) q and samplers, per shard (R30-R33).

Every case names its global shard ranges (contiguous, covering the vocabulary;
S = 2 or 4, even or uneven) and is one of two kinds:

* **proposal** (R30, R31, R32): a draft row (FP32 weights, or FP32 logits and a
  temperature), a support policy (dense, or global top-k) and leader-owned
  24-bit draws. Expected: each shard's partial results (its local logit max,
  exact shifted sum, local top-k candidates, floors, fractional parts and won
  tickets, count mass), the merged global result (global max and sum, global
  support, remaining tickets, the q row) and, per draw, the shard chosen, the
  index within its range and the global ID;
* **residual** (R33): a q row, an FP32 target weight row and 32-bit correction
  draws. Expected: each shard's exact target sum and how many of its tokens have
  a positive residual ``max(p - q, 0)``, the global target sum, and per draw the
  shard, index and global ID.

Draws sit at 0, at the top of the range and on both sides of every shard
boundary of the cumulative mass. The generator refuses to write a proposal case
whose quotas lie within the FP64 error bound of an integer or of the ticket
threshold (except exact ties between equal weights): every field is an exact
answer that an FP64 implementation computing W exactly also reaches.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import accumulate
from typing import Iterator, Sequence

from qconform.generators import precedence
from qconform.generators.encoding import (
    EncodingError,
    encode_blob,
    encode_f32,
    encode_rational,
    f32_bits,
)
from qconform.generators.families.allocation_dense import (
    PRODUCTION_SEED,
    ROW_INPUTS,
    RowSource,
    log_uniform,
    production_row,
    row_source,
    vector_bits,
)
from qconform.generators.families.allocation_invalid import (
    ALLOCATION_EXCLUSIVE,
    ALLOCATION_FAULTS,
    AllocationDraft,
    allocation_draft,
)
from qconform.generators.families.categorical_sampling import (
    ROW_BREAKS,
    RowDraft,
    decode_qrow,
    encode_draft,
    encode_qrow,
    row_draft,
)
from qconform.generators.registry import Case, Family, Group, Note
from qconform.generators.schemas import blob_schema
from qconform.generators.schemas import closed_object as closed
from qconform.spec.allocation_fp64 import fp64_error_bound
from qconform.spec.constants import VOCAB, M
from qconform.spec.errors import SpecError, refuse
from qconform.spec.floats import F32_QUIET_NAN
from qconform.spec.qrow import QRow
from qconform.spec.refusal_order import SHARDING_REFUSALS
from qconform.spec.sampling import U32_LIMIT
from qconform.spec.sharding import (
    ShardedDraw,
    ShardedQ,
    ShardRange,
    agreed_target_weights,
    agreed_weights,
    check_shard_ranges,
    sample_sharded_counts,
    sample_sharded_scaled,
    shard_residual,
    shard_target_probabilities,
    shard_weight_partial,
    sharded_integer_masses,
    sharded_q,
    sharded_weights_from_logits,
    shifted_sum,
    split_row,
)

RULES = ("R04", "R05", "R06", "R07", "R08", "R10", "R11", "R30", "R31", "R32", "R33", "R34")
PROPOSAL_RULES = ("R06", "R07", "R08", "R30", "R31", "R32", "R34")
RESIDUAL_RULES = ("R04", "R11", "R31", "R33", "R34")

NOTES = {
    precedence.FLAG: precedence.NOTE,
    "UNEVEN_SPLIT": Note(
        "EDGE_CASE",
        "Shard sizes differ by more than one token: the global shard ranges, not S, define ownership (R31).",
        "Catches ranks that assume V / S tokens each or derive their offset from the rank alone.",
    ),
    "DRAW_ON_BOUNDARY": Note(
        "EDGE_CASE",
        "Residual draws exactly on every interior cumulative boundary of the residual, u32 * R = C * 2^32 (at a "
        "shard boundary and inside a shard), and one step either side: the token is the first v with "
        "C_v * 2^32 > u32 * R, so a draw on a boundary picks the token after it (R33).",
        "Catches a '>=' (inclusive) search in the shard choice or in the local residual CDF.",
    ),
    "ZERO_MASS_SHARD": Note(
        "EDGE_CASE",
        "A shard whose count mass (proposal) or residual mass (correction) is zero; draws on both sides of its "
        "cumulative boundary show that it is never chosen (R32, R33).",
        "Catches shard selection by '>=' or by shard index, which can land on an empty shard.",
    ),
    "GLOBAL_TICKETS": Note(
        "FUNCTIONALITY",
        "The remaining tickets won by each shard differ from a per-shard rounding of its share (the floor of its "
        "fractional parts, the leader taking the rest): only the global largest remainders are right (R31).",
        "Catches count allocation that hands out remaining tickets per shard instead of globally.",
    ),
    "TIE_ACROSS_SHARDS": Note(
        "EDGE_CASE",
        "Equal weights (top-k) or equal fractional parts (tickets) on different shards straddle the cut: the "
        "lowest global ID wins (R30, R06).",
        "Catches ties broken by shard order, by local ID or by the rank that answers first.",
    ),
    "LOCAL_MAX_DIFFERS": Note(
        "FUNCTIONALITY",
        "The shards' local logit maxes differ: every weight is exp(s - m) with the all-reduced global max m (R31).",
        "Catches independent local normalization (a local max shift, or a per-shard softmax) before the merge.",
    ),
    "MASKED_SHARD": Note(
        "EDGE_CASE",
        "Every logit of one shard is -inf: its local max is -inf, its weights and counts are zero.",
        "Catches NaN from -inf - (-inf) on a fully masked rank, or a rank that refuses ALL_MASKED locally.",
    ),
    "TOP_K_SMALL_SHARD": Note(
        "EDGE_CASE",
        "A shard smaller than k offers all of its tokens as candidates.",
        "Catches a local top-k that pads with out-of-range IDs or refuses k above the shard size.",
    ),
    "ZERO_WEIGHT_SUPPORT": Note(
        "EDGE_CASE",
        "Fewer than k weights are positive: zero-weight tokens of several shards fill the support by lowest global ID.",
        "Catches a merge that orders zero weights by shard or local ID.",
    ),
    "RESIDUAL_OUTSIDE_SUPPORT": Note(
        "FUNCTIONALITY",
        "The residual lies only on tokens outside the sparse q support, owned by a non-leader shard (R33).",
        "Catches a rank whose residual covers only the sparse support, or a residual built by the leader alone.",
    ),
    "TARGET_MASK": Note(
        "FUNCTIONALITY",
        "Target weights of zero (a grammar mask) on both shards: the global target normalization is the "
        "target-only sampler's, and masked tokens are never drawn (R33).",
        "Catches per-shard target normalization and residuals that revive masked tokens.",
    ),
    "PRODUCTION_VOCAB": Note(
        "FUNCTIONALITY",
        "V = 129280 split into S = 2 or 4 shards (64640 or 32320 tokens each).",
        "Catches index width and offset problems that small vocabularies hide.",
    ),
    "R29_SUPPORT": Note(
        "FUNCTIONALITY",
        "k = 32 at V = 129280, the initial sparse candidate (R29), merged from four shards.",
        "Catches a merge that only works at small k or small V.",
    ),
    "K_BOUNDS": Note(
        "EDGE_CASE",
        "The top-k size at the ends of its range 1..V: k = 1 (one token, every count) and k = V (the dense row) (R07).",
        "Catches an off-by-one in the k range check or in the merge's candidate count.",
    ),
    "BAD_ROW": Note(
        "EDGE_CASE",
        "A row the unsharded spec refuses (NaN, all masked, zero mass, k outside 1..V, a target with no mass, "
        "a residual with no mass): every rank refuses with the unsharded row's code (R05, R07, R33).",
        "Catches a rank that answers from its own shard alone, or refuses with a local code.",
    ),
    "BAD_RANGES": Note(
        "EDGE_CASE",
        "Global shard ranges with a gap, an empty shard or short coverage: refused with BAD_SHARD_RANGES (R31).",
        "Catches ranks that trust a header whose ranges do not give every token exactly one owner.",
    ),
}


# --- codec ------------------------------------------------------------------------------------


def even_shard_ranges(vocab: int, shards: int) -> list[ShardRange]:
    """S contiguous shards whose sizes differ by at most one, the larger ones first: how the
    generator splits most case rows (R31). Not spec surface: every case carries its global
    shard ranges, so no answer depends on how they were chosen.

    V = 129280 and S = 2 give two shards of 64640 tokens (R26's TP2 dense shard).
    Refuses (BAD_SHARD_RANGES) unless ``1 <= S <= V``.
    """
    if not 1 <= shards <= vocab:
        raise refuse("BAD_SHARD_RANGES", f"{shards} shards for a vocabulary of {vocab}")
    base, extra = divmod(vocab, shards)
    ranges, start = [], 0
    for s in range(shards):
        end = start + base + (1 if s < extra else 0)
        ranges.append(ShardRange(start, end))
        start = end
    return ranges


def ranges_json(ranges: Sequence[ShardRange]) -> list[list[int]]:
    return [[shard.start, shard.end] for shard in ranges]


def decode_ranges(obj: list, vocab: int) -> list[ShardRange]:
    """The global shard ranges of a case input, refused (BAD_SHARD_RANGES) unless they partition ``0..V-1``."""
    if not isinstance(obj, list) or not all(isinstance(r, list) and len(r) == 2 for r in obj):
        raise EncodingError("shard_ranges must be a list of [start, end] pairs")
    ranges = [ShardRange(start, end) for start, end in obj]
    check_shard_ranges(ranges, vocab)
    return ranges


def draw_json(draw: ShardedDraw, key: str, value: int) -> dict:
    return {key: value, "shard": draw.shard, "local_token": draw.local_token, "token": draw.token}


# --- the proposal kind ------------------------------------------------------------------------


def sharded_proposal(case_input: dict) -> ShardedQ:
    """The spec's sharded proposal row of a case input (SpecError if the spec refuses it)."""
    source = row_source(case_input)
    ranges = decode_ranges(case_input["shard_ranges"], len(source.bits))
    support = case_input["support"]
    k = support["k"] if support["policy"] == "top_k" else None
    if source.dtype == "logits":
        assert source.temperature is not None  # every "logits" row is built with its temperature
        bit_shards, maxes, global_max = sharded_weights_from_logits(source.bits, source.temperature, ranges)
        weights = [shard_weight_partial(bits, "f32").weights for bits in bit_shards]
        return sharded_q(weights, ranges, k, maxes, global_max)
    partials = [shard_weight_partial(bits, source.dtype) for bits in split_row(source.bits, ranges)]
    return sharded_q(agreed_weights(partials), ranges, k)


def shard_fields(sq: ShardedQ, s: int) -> dict:
    """One shard's partial results."""
    part = sq.allocation.shards[s]
    fields: dict = {}
    if sq.logit_maxes is not None:
        fields["max"] = encode_f32(sq.logit_maxes[s])
    fields["shifted_sum"] = encode_rational(sq.shifted_sums[s])
    if sq.candidates is not None:
        fields["candidates"] = encode_blob("i32", [v for v, _ in sq.candidates[s]])
        fields["support_sum"] = encode_rational(part.domain_sum)
    fields.update(
        floor_sum=part.floor_sum,
        remainder_sum=encode_rational(part.remainder_sum),
        tickets=part.tickets,
        count_mass=part.count_mass,
    )
    return fields


def merged_fields(sq: ShardedQ) -> dict:
    """The merged global result: normalization, support, remaining tickets and the one q row."""
    counts = [c for shard in sq.shard_counts() for c in shard]
    fields: dict = {}
    if sq.global_max is not None:
        fields["max"] = encode_f32(sq.global_max)
    fields["shifted_sum"] = encode_rational(sum(sq.shifted_sums, Fraction(0)))
    if sq.support is None:
        row = QRow.dense(counts)
    else:
        fields["support"] = encode_blob("i32", sq.support)
        fields["support_sum"] = encode_rational(sq.allocation.total)
        row = QRow.sparse(len(counts), [v for v, c in enumerate(counts) if c], [c for c in counts if c])
    fields.update(remaining=sq.allocation.remaining, row=encode_qrow(row))
    return fields


def proposal_answer(case_input: dict, sq: ShardedQ | None = None) -> dict:
    """The expected object of a proposal case (``sq``: its row, when the caller has it)."""
    sq = sharded_proposal(case_input) if sq is None else sq
    shard_counts = sq.shard_counts()
    draws = [
        draw_json(sample_sharded_counts(shard_counts, sq.ranges, u), "u24", u) for u in case_input["proposal_draws"]
    ]
    return {"shards": [shard_fields(sq, s) for s in range(len(sq.ranges))], "merged": merged_fields(sq), "draws": draws}


# --- the residual kind ------------------------------------------------------------------------


#: (ranges, each shard's target weights, each shard's residual)
Residual = tuple[list[ShardRange], list[list[Fraction]], list[list[Fraction]]]


def sharded_residual(case_input: dict) -> Residual:
    """(ranges, each shard's target weights, each shard's residual) of a residual case input."""
    p_bits = vector_bits(case_input["p_weights"], "f32")
    ranges = decode_ranges(case_input["shard_ranges"], len(p_bits))
    q_row = decode_qrow(case_input["q_row"], len(p_bits))
    weights = agreed_target_weights([shard_weight_partial(bits, "f32") for bits in split_row(p_bits, ranges)])
    p_shards = shard_target_probabilities(weights)
    q_shards = split_row(q_row.dense_counts(), ranges)
    return ranges, weights, [shard_residual(p, q) for p, q in zip(p_shards, q_shards)]


def residual_answer(case_input: dict, residual: Residual | None = None) -> dict:
    """The expected object of a residual case (``residual``: its shards, when the caller has them)."""
    ranges, weights, residuals = sharded_residual(case_input) if residual is None else residual
    scaled = sharded_integer_masses(residuals)
    draws = [draw_json(sample_sharded_scaled(scaled, ranges, u), "u32", u) for u in case_input["residual_draws"]]
    shards = [
        {"target_sum": encode_rational(shifted_sum(w)), "residual_tokens": sum(1 for r in res if r)}
        for w, res in zip(weights, residuals)
    ]
    total = sum((shifted_sum(w) for w in weights), Fraction(0))
    return {"shards": shards, "merged": {"target_sum": encode_rational(total)}, "draws": draws}


def solve(case_input: dict) -> dict:
    """The spec's answer to one sharding case, or its refusal code."""
    try:
        if "q_row" in case_input:
            return residual_answer(case_input)
        return proposal_answer(case_input)
    except SpecError as error:
        return {"error": error.code}


# --- draws on both sides of every shard boundary ----------------------------------------------


def boundary_draws(masses: Sequence, limit: int, scale: int, rng: random.Random) -> list[int]:
    """0, ``limit - 1``, the draws on both sides of every interior cumulative shard boundary,
    and two random draws. With total mass R, a draw ``u`` reaches past the cumulative mass C
    iff ``u * R >= scale * C`` (``scale`` = R = M for counts, 2^32 for the mass rule), so the
    first draw past C is ``ceil(scale * C / R)``."""
    total = sum(masses)
    draws = [0, limit - 1]
    for cumulative in accumulate(masses[:-1]):
        first = -((-scale * cumulative) // total)
        draws += [d for d in (first - 1, first) if 0 <= d < limit]
    draws += [rng.randrange(limit) for _ in range(2)]
    return list(dict.fromkeys(draws))


# --- FP64 safety of a proposal case -----------------------------------------------------------


def fp64_representable(x: Fraction) -> bool:
    """Whether a dyadic rational has at most 53 significant bits."""
    numerator = x.numerator >> ((x.numerator & -x.numerator).bit_length() - 1) if x.numerator else 0
    return numerator.bit_length() <= 53 and x.denominator & (x.denominator - 1) == 0


def domain_weights(sq: ShardedQ) -> list[Fraction]:
    """The weights of the allocation domain (the whole row, or the top-k support), ascending IDs."""
    return [
        weights[v - shard.start]
        for shard, weights, part in zip(sq.ranges, sq.weights, sq.allocation.shards)
        for v in part.ids
    ]


def check_fp64_safe(sq: ShardedQ) -> None:
    """Refuse (AssertionError) a proposal case where FP64 arithmetic with a correctly rounded W
    could change a floor or a ticket (allocation_fp64's theorem): every positive fractional part
    ``r / N`` must be more than Delta from 0 and 1, the tie gap above 2 Delta unless it is an
    exact tie between equal weights, and whole quotas of positive weight need W exact in FP64."""
    weights = domain_weights(sq)
    parts = sq.allocation.shards
    unit_total = parts[0].quotas.unit_total
    delta = fp64_error_bound(len(weights), max(f for part in parts for f in part.quotas.floors) + 1)
    low, high = math.floor(delta * unit_total), math.ceil((1 - delta) * unit_total)
    remainders = [r for part in parts for r in part.quotas.remainder_numerators]
    won = [c - f for part in parts for c, f in zip(part.counts, part.quotas.floors)]
    for w, r in zip(weights, remainders):
        if r == 0 and w and not fp64_representable(sq.allocation.total):
            raise AssertionError("a whole quota with W not exact in FP64")
        if r and not low < r < high:
            raise AssertionError(f"a quota within the FP64 bound of an integer: {r}/{unit_total}")
    if not sq.allocation.remaining:
        return
    cut = min(r for r, t in zip(remainders, won) if t)
    best_loser = max((r for r, t in zip(remainders, won) if not t), default=0)
    if cut == best_loser:
        if len({w for w, r in zip(weights, remainders) if r == cut}) > 1:
            raise AssertionError("an exact ticket tie between different weights")
    elif Fraction(cut - best_loser, unit_total) <= 2 * delta:
        raise AssertionError("an FP64 near-tie")


def is_uneven(ranges: Sequence[ShardRange]) -> bool:
    return list(ranges) != even_shard_ranges(ranges[-1].end, len(ranges))


# --- cases ------------------------------------------------------------------------------------


def per_shard_rounding_differs(sq: ShardedQ) -> bool:
    """Whether handing each non-leader shard floor(its fractional parts) tickets, the leader the
    rest, differs from the global tickets (the GLOBAL_TICKETS note)."""
    parts = sq.allocation.shards
    others = [math.floor(p.remainder_sum) for p in parts[1:]]
    return [sq.allocation.remaining - sum(others)] + others != [p.tickets for p in parts]


def proposal_case(
    name: str,
    comment: str,
    flags: tuple[str, ...],
    source: RowSource,
    ranges: Sequence[ShardRange],
    k: int | None = None,
    seed: int = 0,
) -> Case:
    """A proposal case; its draws straddle every shard boundary of the count mass."""
    case_input = {
        **source.input_json(),
        "shard_ranges": ranges_json(ranges),
        "support": {"policy": "dense"} if k is None else {"policy": "top_k", "k": k},
        "proposal_draws": [],
    }
    sq = sharded_proposal(case_input)
    check_fp64_safe(sq)
    masses = [part.count_mass for part in sq.allocation.shards]
    case_input["proposal_draws"] = boundary_draws(masses, M, M, random.Random(seed))
    if 0 in masses:
        flags += ("ZERO_MASS_SHARD",)
    if per_shard_rounding_differs(sq):
        flags += ("GLOBAL_TICKETS",)
    if is_uneven(ranges):
        flags += ("UNEVEN_SPLIT",)
    rules = PROPOSAL_RULES + (("R29",) if "R29_SUPPORT" in flags else ())
    return Case(
        name=name,
        comment=comment,
        rules=rules,
        flags=tuple(dict.fromkeys(flags)),
        input=case_input,
        expected=proposal_answer(case_input, sq),
    )


def exact_boundary_draws(masses: Sequence[Fraction]) -> list[int]:
    """The draws on, one below and one above every interior cumulative boundary of ``masses``
    (token by token), each of which must be an exact 32-bit draw: ``2^32 C / R`` an integer."""
    total = sum(masses, Fraction(0))
    draws: list[int] = []
    for cumulative in dict.fromkeys(accumulate(masses[:-1])):
        edge = cumulative * U32_LIMIT / total
        if 0 < edge < U32_LIMIT:
            assert edge.denominator == 1, f"boundary {edge} is not an exact 32-bit draw"
            draws += [int(edge) - 1, int(edge), int(edge) + 1]
    return draws


def residual_case(
    name: str,
    comment: str,
    flags: tuple[str, ...],
    q_row: QRow,
    p_weights: Sequence[float],
    ranges: Sequence[ShardRange],
    seed: int = 0,
    on_boundaries: bool = False,
) -> Case:
    """A residual case over integer target weights; draws straddle every shard boundary of the residual mass
    (and, with ``on_boundaries``, land on and either side of every token boundary of it as well)."""
    if sum(p_weights) >= 1 << 29:
        raise AssertionError("target weights must sum below 2^29 so that FP64 residuals are exact")
    case_input = {
        "shard_ranges": ranges_json(ranges),
        "q_row": encode_qrow(q_row),
        "p_weights": encode_blob("f32", [f32_bits(float(w)) if w else 0 for w in p_weights]),
        "residual_draws": [],
    }
    residual = sharded_residual(case_input)
    masses = [sum(r, Fraction(0)) for r in residual[2]]
    case_input["residual_draws"] = boundary_draws(masses, U32_LIMIT, U32_LIMIT, random.Random(seed))
    if on_boundaries:
        tokens = [m for shard in residual[2] for m in shard]
        case_input["residual_draws"] = list(dict.fromkeys(case_input["residual_draws"] + exact_boundary_draws(tokens)))
        flags += ("DRAW_ON_BOUNDARY",)
    if 0 in masses:
        flags += ("ZERO_MASS_SHARD",)
    if is_uneven(ranges):
        flags += ("UNEVEN_SPLIT",)
    return Case(
        name=name,
        comment=comment,
        rules=RESIDUAL_RULES,
        flags=tuple(dict.fromkeys(flags)),
        input=case_input,
        expected=residual_answer(case_input, residual),
    )


def split(*bounds: int) -> list[ShardRange]:
    return [ShardRange(a, b) for a, b in zip(bounds, bounds[1:])]


def quota_row(quotas: Sequence[Fraction]) -> RowSource:
    """FP32 weights ``Q_v / M`` whose exact quotas (W = 1) are the given ones plus one whole quota."""
    rest = M - sum(quotas)
    return RowSource.f32([float(q / M) for q in list(quotas) + [rest]])


def dense_cases() -> Iterator[Case]:
    rng = random.Random(0x5A4D)
    yield proposal_case(
        "even-s2-v8",
        "Random weights over V = 8, two shards of 4.",
        (),
        RowSource.f32(log_uniform(rng, 8, 6)),
        even_shard_ranges(8, 2),
        seed=1,
    )
    yield proposal_case(
        "uneven-s2-v7",
        "Random weights over V = 7 split [0, 2) [2, 7).",
        (),
        RowSource.f32(log_uniform(rng, 7, 9)),
        split(0, 2, 7),
        seed=2,
    )
    yield proposal_case(
        "uneven-s4-v10",
        "Random weights over V = 10 split 1 + 4 + 1 + 4.",
        (),
        RowSource.f32(log_uniform(rng, 10, 12)),
        split(0, 1, 5, 6, 10),
        seed=3,
    )
    yield proposal_case(
        "zero-weight-shard-s4",
        "Shard 1 holds only zero weights: count mass 0, never drawn.",
        (),
        RowSource.f32([1.0, 2.0, 0.0, 0.0, 3.0, 1.0, 1.0, 0.5]),
        even_shard_ranges(8, 4),
        seed=4,
    )
    yield proposal_case(
        "floored-shard-s2",
        "Shard 1 has positive weights of 2^-40 beside weight 1: its quotas "
        "floor to zero, its count mass is 0 although its shifted sum is not.",
        (),
        RowSource.f32([1.0, 0.5, 0.25, 2.0**-40, 2.0**-41, 2.0**-40]),
        split(0, 3, 6),
        seed=5,
    )
    eighths = [Fraction(5) + Fraction(n, 8) for n in (1, 1, 1, 7, 3, 3)]
    yield proposal_case(
        "global-tickets-s2",
        "Fractional parts 1/8, 1/8, 1/8 | 7/8, 3/8, 3/8, 0: shard 1's share "
        "is 13/8 tickets, yet both tickets go to it (7/8, and 3/8 at the lower global ID).",
        ("TIE_ACROSS_SHARDS",),
        quota_row(eighths),
        split(0, 3, 7),
        seed=6,
    )
    yield proposal_case(
        "uniform-s2-v6",
        "Six equal weights: M/6 each, the four tickets go to IDs 0-3 across the shard boundary.",
        ("TIE_ACROSS_SHARDS",),
        RowSource.f32([1.0] * 6),
        even_shard_ranges(6, 2),
        seed=7,
    )
    yield proposal_case(
        "uniform-s4-v10",
        "Ten equal weights over 3 + 3 + 2 + 2 tokens.",
        ("TIE_ACROSS_SHARDS",),
        RowSource.f32([0.5] * 10),
        even_shard_ranges(10, 4),
        seed=8,
    )
    yield proposal_case(
        "one-hot-s2",
        "One weight 1 (ID 4, shard 1), the rest 0: W = 1 in the common unit, the whole quota M is a whole "
        "number, no tickets remain, shard 0 has count mass 0.",
        (),
        RowSource.f32([0.0, 0.0, 0.0, 0.0, 1.0, 0.0]),
        split(0, 3, 6),
        seed=9,
    )


def top_k_cases() -> Iterator[Case]:
    rng = random.Random(0x70B4)
    yield proposal_case(
        "top3-s2-v8",
        "Top-3 of random weights, two shards.",
        (),
        RowSource.f32(log_uniform(rng, 8, 5)),
        even_shard_ranges(8, 2),
        k=3,
        seed=11,
    )
    yield proposal_case(
        "selection-tie-across-shards",
        "Weights 5, 1, 3, 0.5 | 3, 3, 2, 1 with k = 3: of the three 3s the global IDs 2 and 4 are selected, 5 is not.",
        ("TIE_ACROSS_SHARDS",),
        RowSource.f32([5.0, 1.0, 3.0, 0.5, 3.0, 3.0, 2.0, 1.0]),
        even_shard_ranges(8, 2),
        k=3,
        seed=12,
    )
    yield proposal_case(
        "support-on-one-shard",
        "Shard 1 holds only light tokens: the whole top-4 support is on shard 0, shard 1 allocates nothing.",
        (),
        RowSource.f32([4.0, 3.0, 2.5, 2.0, 1.0, 0.25, 0.5, 0.125]),
        even_shard_ranges(8, 2),
        k=4,
        seed=13,
    )
    yield proposal_case(
        "k-above-shard-size-s4",
        "k = 5 over shards of 1, 4, 1 and 4 tokens: the small shards offer all they have.",
        ("TOP_K_SMALL_SHARD",),
        RowSource.f32(log_uniform(rng, 10, 7)),
        split(0, 1, 5, 6, 10),
        k=5,
        seed=14,
    )
    yield proposal_case(
        "zero-weights-fill-support",
        "Two positive weights, k = 4: zero-weight IDs 0 and 2 fill the support across the two shards.",
        ("ZERO_WEIGHT_SUPPORT",),
        RowSource.f32([0.0, 0.0, 0.0, 2.0, 0.0, 1.0]),
        split(0, 2, 6),
        k=4,
        seed=15,
    )
    yield proposal_case(
        "top1-s2",
        "k = 1: the support is the one heaviest token (ID 4, on shard 1), which gets all M counts; no tickets remain.",
        ("K_BOUNDS",),
        RowSource.f32([0.5, 1.0, 3.0, 2.0, 4.0, 0.25, 1.5, 2.5]),
        even_shard_ranges(8, 2),
        k=1,
        seed=16,
    )
    yield proposal_case(
        "k-equals-vocab-s2",
        "k = V = 6: the support is the whole row, the allocation is the dense one.",
        ("K_BOUNDS",),
        RowSource.f32([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
        split(0, 2, 6),
        k=6,
        seed=17,
    )


def logit_cases() -> Iterator[Case]:
    logits = [2.0, -1.0, 0.5, 1.25, -1.5, -2.0, -1.75, -3.0]
    yield proposal_case(
        "local-max-differs-s2",
        "Shard maxes 2.0 and -1.5 at T = 0.8: shard 1's weights are exp(s - m) with the global max, far below 1.",
        ("LOCAL_MAX_DIFFERS",),
        RowSource.logits(logits, 0.8),
        even_shard_ranges(8, 2),
        seed=21,
    )
    inf = float("-inf")
    yield proposal_case(
        "masked-shard-s4",
        "Every logit of shard 2 is -inf.",
        ("MASKED_SHARD", "LOCAL_MAX_DIFFERS"),
        RowSource.logits([0.5, -0.25, 1.5, 1.0, inf, inf, -2.0, 0.0], 1.3),
        even_shard_ranges(8, 4),
        seed=22,
    )
    yield proposal_case(
        "top4-logits-s2",
        "Top-4 from logits whose maxes differ per shard, T = 0.7.",
        ("LOCAL_MAX_DIFFERS",),
        RowSource.logits([-0.5, 1.0, -4.0, 0.75, 3.0, -2.5, 2.0, 0.25], 0.7),
        even_shard_ranges(8, 2),
        k=4,
        seed=23,
    )


def sparse_q(vocab: int, shares: dict[int, Fraction]) -> QRow:
    ids = sorted(shares)
    return QRow.sparse(vocab, ids, [int(shares[v] * M) for v in ids])


def residual_cases() -> Iterator[Case]:
    quarter = Fraction(1, 4)
    dense = QRow.dense([M // 8] * 8)
    yield residual_case(
        "dense-q-s2-v8",
        "Uniform dense q; the residual lies on tokens 1 and 6 of both shards.",
        (),
        dense,
        [1, 3, 1, 0, 0, 1, 2, 0],
        even_shard_ranges(8, 2),
        seed=31,
    )
    support = sparse_q(8, {0: Fraction(1, 2), 1: Fraction(1, 2)})
    yield residual_case(
        "outside-support-non-leader-s2",
        "q on {0, 1} (shard 0) with p <= q there; the residual is "
        "p on tokens 5 and 6, outside the support, on shard 1.",
        ("RESIDUAL_OUTSIDE_SUPPORT",),
        support,
        [2, 2, 0, 0, 0, 3, 1, 0],
        even_shard_ranges(8, 2),
        seed=32,
    )
    mixed = sparse_q(12, {1: quarter, 4: quarter, 9: Fraction(1, 2)})
    yield residual_case(
        "outside-support-s4",
        "Sparse q on {1, 4, 9}; shard 2 has no residual, shards 0, 1 and 3 "
        "have residual inside and outside the support.",
        ("RESIDUAL_OUTSIDE_SUPPORT",),
        mixed,
        [2, 3, 1, 0, 1, 2, 0, 0, 0, 1, 3, 1],
        even_shard_ranges(12, 4),
        seed=33,
    )
    yield residual_case(
        "target-mask-s2",
        "Target weights 0 (a grammar mask) on tokens 0, 2, 5 and 7; q covers token 0 and 1 only.",
        ("TARGET_MASK", "RESIDUAL_OUTSIDE_SUPPORT"),
        sparse_q(8, {0: Fraction(1, 2), 1: Fraction(1, 2)}),
        [0, 5, 0, 2, 1, 0, 4, 0],
        even_shard_ranges(8, 2),
        seed=34,
    )
    counts = [M // 16] * 8 + [M // 4] * 2
    yield residual_case(
        "uneven-s4-v10",
        "Dense q over V = 10 split 2 + 1 + 6 + 1.",
        (),
        QRow.dense(counts),
        [5, 0, 1, 1, 0, 2, 2, 1, 9, 3],
        split(0, 2, 3, 9, 10),
        seed=35,
    )
    yield residual_case(
        "exact-boundaries-s2-v8",
        "Uniform dense q, p = (4, 0, 2, 3, 0, 3, 2, 2) / 16: the residual "
        "(2, 0, 0, 1, 0, 1, 0, 0) / 16 has R = 1/4, so its boundaries 1/2 (inside shard 0) and 3/4 "
        "(between the shards) are exact draws; draws on and either side of each.",
        (),
        dense,
        [4, 0, 2, 3, 0, 3, 2, 2],
        even_shard_ranges(8, 2),
        seed=36,
        on_boundaries=True,
    )
    yield residual_case(
        "target-sum-one-s2",
        "Target weights (4, 0, 2, 2, 4, 2, 2, 0) / 16 sum to exactly W = 1 (not above it); uniform dense q; "
        "the residual is 1/8 on tokens 0 and 4.",
        (),
        dense,
        [0.25, 0.0, 0.125, 0.125, 0.25, 0.125, 0.125, 0.0],
        even_shard_ranges(8, 2),
        seed=37,
    )
    yield residual_case(
        "single-unit-residual-s2",
        "Uniform dense q, p = (3, 1, 2, 2, 2, 2, 2, 2) / 16: the whole residual is 1/16 on token 0, so its "
        "masses scaled to integers by their common denominator total 1.",
        (),
        dense,
        [3, 1, 2, 2, 2, 2, 2, 2],
        even_shard_ranges(8, 2),
        seed=38,
    )


def production_cases() -> Iterator[Case]:
    source = RowSource("f32", production_row(PRODUCTION_SEED))
    yield proposal_case(
        "v129280-dense-s2",
        "Softmax-like weights over V = 129280, two shards of 64640.",
        ("PRODUCTION_VOCAB",),
        source,
        even_shard_ranges(VOCAB, 2),
        seed=41,
    )
    yield proposal_case(
        "v129280-top32-s4",
        "Top-32 of the same row from four shards of 32320.",
        ("PRODUCTION_VOCAB", "R29_SUPPORT"),
        source,
        even_shard_ranges(VOCAB, 4),
        k=32,
        seed=42,
    )
    rng = random.Random(0x7E5D)
    ids = sorted(rng.sample(range(VOCAB), 32))
    q_row = QRow.sparse(VOCAB, ids, [M // 32] * 32)
    weights = [0] * VOCAB
    for v in rng.sample(range(VOCAB), 3000):
        weights[v] = rng.randint(1, 4095)
    for v in ids[:16]:
        weights[v] = 0  # half the support has no target mass: the residual lies mostly outside the support
    yield residual_case(
        "v129280-residual-s4",
        "Sparse k = 32 q and 3000 target tokens over V = 129280, four shards.",
        ("PRODUCTION_VOCAB", "RESIDUAL_OUTSIDE_SUPPORT"),
        q_row,
        weights,
        even_shard_ranges(VOCAB, 4),
        seed=43,
    )


def invalid_cases() -> Iterator[Case]:
    row = RowSource.f32([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    for name, comment, bounds in (
        ("gap", "Ranges [0, 2) and [3, 6) leave token 2 without an owner.", [[0, 2], [3, 6]]),
        ("empty-shard", "Ranges [0, 3), [3, 3), [3, 6): an empty shard.", [[0, 3], [3, 3], [3, 6]]),
        ("short-cover", "Ranges [0, 2) and [2, 5) over V = 6.", [[0, 2], [2, 5]]),
    ):
        case_input = {**row.input_json(), "shard_ranges": bounds, "support": {"policy": "dense"}, "proposal_draws": [0]}
        yield Case(
            name=name,
            comment=comment,
            rules=("R31",),
            flags=("BAD_RANGES",),
            input=case_input,
            expected=solve(case_input),
            result="invalid",
        )


def invalid_row_cases() -> Iterator[Case]:
    """Rows and supports that the spec refuses, each with the code the unsharded row gets (R05, R07, R33)."""
    nan, inf = float("nan"), float("-inf")
    proposals = (
        (
            "nan-weight-shard1",
            "A NaN weight on shard 1 only: every rank refuses NAN_WEIGHT.",
            ("R05", "R31"),
            RowSource.f32([1.0, 2.0, 3.0, nan, 1.0, 1.0]),
            {"policy": "dense"},
        ),
        (
            "nan-logit-shard0",
            "A NaN logit on shard 0 only: every rank refuses NAN_LOGIT before the max all-reduce.",
            ("R05", "R31"),
            RowSource.logits([nan, 0.5, 1.0, -1.0, 2.0, 0.0], 1.0),
            {"policy": "dense"},
        ),
        (
            "all-masked-logits",
            "Every logit of both shards is -inf: ALL_MASKED.",
            ("R05", "R31"),
            RowSource.logits([inf] * 6, 1.0),
            {"policy": "dense"},
        ),
        (
            "zero-weights",
            "Every weight of both shards is 0: W = 0, ZERO_MASS.",
            ("R06", "R31"),
            RowSource.f32([0.0] * 6),
            {"policy": "dense"},
        ),
        (
            "k-zero",
            "Top-k with k = 0: BAD_SUPPORT_SIZE.",
            ("R07", "R30"),
            RowSource.f32([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
            {"policy": "top_k", "k": 0},
        ),
        (
            "k-above-vocab",
            "Top-k with k = V + 1 = 7: BAD_SUPPORT_SIZE.",
            ("R07", "R30"),
            RowSource.f32([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
            {"policy": "top_k", "k": 7},
        ),
    )
    for name, comment, rules, row, support in proposals:
        case_input = {**row.input_json(), "shard_ranges": [[0, 3], [3, 6]], "support": support, "proposal_draws": [0]}
        yield Case(
            name=name,
            comment=comment,
            rules=rules,
            flags=("BAD_ROW",),
            input=case_input,
            expected=solve(case_input),
            result="invalid",
        )
    dense = encode_qrow(QRow.dense([M // 8] * 8))
    residuals = (
        (
            "zero-target",
            "Every target weight is 0: the all-reduced target sum is not positive, BAD_TARGET_ROW.",
            [0.0] * 8,
        ),
        (
            "p-equals-q",
            "Uniform q and uniform p: the residual max(p - q, 0) is 0 everywhere, so a correction draw "
            "has no mass to sample: ZERO_MASS.",
            [1.0] * 8,
        ),
    )
    for name, comment, p_weights in residuals:
        case_input = {
            "shard_ranges": [[0, 4], [4, 8]],
            "q_row": dense,
            "p_weights": encode_blob("f32", [f32_bits(w) if w else 0 for w in p_weights]),
            "residual_draws": [0],
        }
        yield Case(
            name=name,
            comment=comment,
            rules=("R10", "R11", "R33"),
            flags=("BAD_ROW",),
            input=case_input,
            expected=solve(case_input),
            result="invalid",
        )


@dataclass
class ShardDraft:
    """A sharded input being broken: a proposal row (``row``) or a residual (``q`` and target weights ``p``)."""

    ranges: list[list[int]]
    row: AllocationDraft | None = None
    q: RowDraft | None = None
    p: list[int] = field(default_factory=list)

    def input_json(self) -> dict:
        if self.row is not None:
            source = RowSource(self.row.dtype, self.row.bits, self.row.temperature)
            support = {"policy": "dense"} if self.row.k is None else {"policy": "top_k", "k": self.row.k}
            return {**source.input_json(), "shard_ranges": self.ranges, "support": support, "proposal_draws": [0]}
        assert self.q is not None
        q_row = encode_draft(self.q)["row"]
        return {
            "shard_ranges": self.ranges,
            "q_row": q_row,
            "p_weights": encode_blob("f32", self.p),
            "residual_draws": [0],
        }


#: Rows of ``refusal_order.SHARDING_REFUSALS``: the proposal's (allocation_invalid's 2..10) and the residual's.
PROPOSAL_ROWS, RESIDUAL_ROWS = set(range(2, 11)), set(range(11, 20))
QROW_OFFSET = 10


def shard_draft(rows: frozenset[int]) -> ShardDraft:
    """A valid input to break: a residual over a q row (row_draft's) with uniform p, else a proposal row."""
    if rows & RESIDUAL_ROWS:
        q = row_draft(frozenset(n - QROW_OFFSET for n in rows))
        return ShardDraft([[0, 2], [2, q.vocab]], q=q, p=[f32_bits(1.0)] * q.vocab)
    row = allocation_draft(rows)
    return ShardDraft([[0, 2], [2, len(row.bits)]], row=row)


def target_equals_q(d: ShardDraft) -> None:
    """Target weights proportional to q's counts: p = q, so every residual mass is 0."""
    assert d.q is not None
    dense = [0] * d.q.vocab
    for v, c in zip(d.q.ids if d.q.sparse else range(d.q.vocab), d.q.counts):
        dense[v] = c
    d.p = [f32_bits(float(c)) if c else 0 for c in dense]


def proposal_fault(n: int):
    return lambda d: ALLOCATION_FAULTS[n](d.row)


def residual_q_fault(n: int):
    return lambda d: ROW_BREAKS.faults[n - QROW_OFFSET](d.q)


SHARD_FAULTS = {
    1: lambda d: d.ranges[1].__setitem__(0, d.ranges[1][0] + 1),
    **{n: proposal_fault(n) for n in PROPOSAL_ROWS},
    **{n: residual_q_fault(n) for n in range(11, 17)},
    17: lambda d: d.p.__setitem__(0, F32_QUIET_NAN),
    18: lambda d: d.p.__setitem__(slice(None), [0] * len(d.p)),
    19: target_equals_q,
}
SHARD_BREAKS = precedence.Breaks[ShardDraft](
    family="sharding",
    base=shard_draft,
    faults=SHARD_FAULTS,
    encode=ShardDraft.input_json,
    exclusive=frozenset(
        precedence.exclusive_between(PROPOSAL_ROWS, RESIDUAL_ROWS)
        | {pair for pair in ALLOCATION_EXCLUSIVE if 1 not in pair}
        | {frozenset(n + QROW_OFFSET for n in pair) for pair in ROW_BREAKS.exclusive}
    ),
    why="an input is a proposal row or a residual; within each, as allocation_invalid and categorical_sampling say",
)


def build() -> Iterator[Group]:
    yield Group(
        "dense_split",
        "Dense rows: global normalization, global tickets, the sharded proposal draw.",
        PROPOSAL_RULES,
        list(dense_cases()),
    )
    yield Group("top_k", "Global top-k merged from local candidates (R30).", PROPOSAL_RULES, list(top_k_cases()))
    yield Group(
        "logits",
        "Two-phase normalization from logits: all-reduced max, then shifted sums (R31).",
        PROPOSAL_RULES,
        list(logit_cases()),
    )
    yield Group(
        "residual", "The sharded residual sampler over every owned token (R33).", RESIDUAL_RULES, list(residual_cases())
    )
    yield Group("production_vocab", "V = 129280 over two and four shards.", RULES + ("R29",), list(production_cases()))
    yield Group(
        "invalid_ranges", "Global shard ranges that do not partition the vocabulary.", ("R31",), list(invalid_cases())
    )
    yield Group(
        "precedence",
        "Every refusal row alone and every pair that can fail together: the earlier row's code.",
        ("R05", "R07", "R10", "R31", "R33"),
        list(precedence.precedence_cases(SHARD_BREAKS, solve, ("R05", "R07", "R10", "R31", "R33"))),
    )
    yield Group(
        "invalid_rows",
        "Rows, supports and residuals the spec refuses, with the unsharded row's code.",
        ("R05", "R07", "R10", "R11", "R30", "R31", "R33"),
        list(invalid_row_cases()),
    )


NONNEG = {"type": "integer", "minimum": 0}
RANGES = {"type": "array", "minItems": 1, "items": {"type": "array", "items": NONNEG, "minItems": 2, "maxItems": 2}}
RATIONAL = {"$ref": "#/$defs/rational"}
U24_DRAWS = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": M - 1}}
U32_DRAWS = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": U32_LIMIT - 1}}
SUPPORT = {
    "oneOf": [
        closed({"policy": {"const": "dense"}}),
        closed({"policy": {"const": "top_k"}, "k": {"type": "integer", "minimum": 0}}),
    ]
}

PROPOSAL_INPUTS = [
    closed({**fields, "shard_ranges": RANGES, "support": SUPPORT, "proposal_draws": U24_DRAWS}) for fields in ROW_INPUTS
]
RESIDUAL_INPUT = closed(
    {
        "shard_ranges": RANGES,
        "q_row": {"$ref": "#/$defs/qRow"},
        "p_weights": blob_schema("f32"),
        "residual_draws": U32_DRAWS,
    }
)

SHARD_PARTIAL = closed(
    {
        "max": {"$ref": "#/$defs/f32"},
        "shifted_sum": RATIONAL,
        "candidates": blob_schema("i32"),
        "support_sum": RATIONAL,
        "floor_sum": NONNEG,
        "remainder_sum": RATIONAL,
        "tickets": NONNEG,
        "count_mass": NONNEG,
    },
    required=["shifted_sum", "floor_sum", "remainder_sum", "tickets", "count_mass"],
)
MERGED = closed(
    {
        "max": {"$ref": "#/$defs/f32"},
        "shifted_sum": RATIONAL,
        "support": blob_schema("i32"),
        "support_sum": RATIONAL,
        "remaining": NONNEG,
        "row": {"$ref": "#/$defs/qRow"},
    },
    required=["shifted_sum", "remaining", "row"],
)


def draw_schema(key: str, limit: int) -> dict:
    return closed(
        {
            key: {"type": "integer", "minimum": 0, "maximum": limit - 1},
            "shard": NONNEG,
            "local_token": NONNEG,
            "token": NONNEG,
        }
    )


PROPOSAL_ANSWER = closed(
    {
        "shards": {"type": "array", "items": SHARD_PARTIAL, "minItems": 1},
        "merged": MERGED,
        "draws": {"type": "array", "items": draw_schema("u24", M)},
    }
)
RESIDUAL_ANSWER = closed(
    {
        "shards": {
            "type": "array",
            "minItems": 1,
            "items": closed({"target_sum": RATIONAL, "residual_tokens": NONNEG}),
        },
        "merged": closed({"target_sum": RATIONAL}),
        "draws": {"type": "array", "items": draw_schema("u32", U32_LIMIT)},
    }
)

FAMILY = Family(
    name="sharding",
    description="Vocabulary-sharded q (R30, R31) and the sharded proposal and residual samplers (R32, R33), "
    "per-shard partial results and the merged global result.",
    rules=RULES + ("R29",),
    notes=NOTES,
    build=build,
    solve=solve,
    input_schema={"oneOf": PROPOSAL_INPUTS + [RESIDUAL_INPUT]},
    expected_schema={
        "oneOf": [
            PROPOSAL_ANSWER,
            RESIDUAL_ANSWER,
            closed({"error": {"enum": sorted({row.code for row in SHARDING_REFUSALS})}}),
        ]
    },
    comparator="sharding",
    precedence=SHARD_BREAKS,
)
