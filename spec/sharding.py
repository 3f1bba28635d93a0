"""Vocabulary-sharded q and target sampling over S ranks, in exact arithmetic (R30, R31, R32, R33).

The vocabulary ``0..V-1`` is split into S contiguous shards: rank s owns the
global IDs ``start_s <= v < end_s``, and the header stores these **global shard
ranges** (R31). A rank holds only the rows of the tokens it owns; everything it
needs from the others is a small per-shard partial result combined by one
collective: an all-reduce (max or sum), an all-gather of a few candidates or of
S scalars, or the broadcast of one drawn global ID. This module writes every
partial and every reduction out explicitly, and the tests prove that each
sharded computation equals the unsharded one of :mod:`qconform.spec.weights`,
:mod:`qconform.spec.allocation`, :mod:`qconform.spec.sampling` and
:mod:`qconform.spec.verification`:

1. **Global normalization** (R31): each rank's logit max, all-reduced with max;
   then each rank's weights ``RN_f32(exp(s_v - m))`` relative to the *global* max
   m and their exact **shifted sum**, all-reduced with sum. (Shifting by the
   local max and rescaling by ``exp(m_s - m)`` afterwards would round twice and
   define another q, R02.)
2. **Global top-k merge** (R30): each rank's local top-k, merged with global IDs
   and ties to the lowest global ID, is the exact global top-k. It is never an
   independent local normalization: one global support/count vector results.
3. **Global tickets** (R31): the floors ``floor(M w_v / W)`` are local; their sum is
   all-reduced into the ``remaining`` tickets; each rank offers its ``remaining``
   largest fractional parts and the merged ``remaining`` largest (ties to the
   lowest global ID) get one ticket each. That is the unsharded largest-remainder
   rule, not a per-shard rounding of each shard's share.
4. **Sharded proposal sampler** (R32): one leader-owned 24-bit draw chooses the
   shard by its global count mass, then the token within it by the shard's own
   cumulative counts; the owner broadcasts the global ID, before the next
   Markov-conditioned row is computed (R30). A zero-mass shard is never chosen.
5. **Sharded residual sampler** (R33): every rank builds ``max(p - q, 0)`` for every
   token it owns, tokens outside a sparse q support included; the global
   residual mass chooses the shard with one 32-bit draw, the shard's local
   residual CDF the token. The target is normalized globally (an all-reduced
   sum), so the target-only sampler's p, masks included, is unchanged (R10).

Kernels come in the dependency order of R34: global logsumexp and counts, the
global top-k merge, the integer categorical proposal, sparse q lookup by global
ID, full-target residual mass and sampling.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Sequence

from qconform.spec.constants import M
from qconform.spec.errors import refuse
from qconform.spec.floats import F32_NEG_INF, decode_f32, f32_exp, f32_sub, parts_value
from qconform.spec.rules import defines
from qconform.spec.sampling import U24_LIMIT, U32_LIMIT, check_draw, exact_total, sample_counts
from qconform.spec.weights import (
    LOGIT_REFUSALS,
    UNPACKERS,
    WEIGHT_REFUSALS,
    check_temperature,
    logit_problem,
    scaled_logit,
    weight_problem,
)

#: ``(global ID, weight)``: one token of a shard's allocation domain.
Entry = tuple[int, Fraction]


# --- the split --------------------------------------------------------------------------


@dataclass(frozen=True)
class ShardRange:
    """The global token IDs ``start <= v < end`` that one rank owns (R31)."""

    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start

    def ids(self) -> range:
        return range(self.start, self.end)


@defines("R31")
def check_shard_ranges(ranges: Sequence[ShardRange], vocab: int) -> None:
    """Refuse (BAD_SHARD_RANGES) global shard ranges that are not S >= 1 nonempty,
    contiguous ranges covering ``0..V-1`` in rank order: every token has exactly one owner."""
    if not ranges:
        raise refuse("BAD_SHARD_RANGES", "no shards")
    expected_start = 0
    for s, shard in enumerate(ranges):
        if shard.start != expected_start or shard.end <= shard.start:
            raise refuse(
                "BAD_SHARD_RANGES",
                f"shard {s} is [{shard.start}, {shard.end}), must start at {expected_start} and be nonempty",
            )
        expected_start = shard.end
    if expected_start != vocab:
        raise refuse("BAD_SHARD_RANGES", f"the shards cover 0..{expected_start - 1}, not 0..{vocab - 1}")


@defines("R31")
def split_row(row: Sequence, ranges: Sequence[ShardRange]) -> list[list]:
    """Each rank's slice of a full row: the entries of the tokens it owns."""
    return [list(row[shard.start : shard.end]) for shard in ranges]


@defines("R05", "R31")
def agreed_refusal(problems: Sequence[str | None], priority: Sequence[str]) -> str | None:
    """The highest-priority refusal code among ``problems``, or None.

    A rank reduces its own tokens' problems with this rule, then the ranks
    all-reduce their codes with it (a MIN over priority positions), so every rank
    refuses with the code the unsharded row gets (R05's priority by class).
    """
    for code in priority:
        if code in problems:
            return code
    return None


# --- global normalization (R31) ---------------------------------------------------------


@dataclass(frozen=True)
class LogitPartial:
    """One rank's first partial: its scaled logits ``s_v`` (FP32 bits), their max over the
    unmasked tokens (``F32_NEG_INF`` when the shard is all masked), and its refusal."""

    scaled: list[int]
    max_bits: int
    refusal: str | None


@defines("R05", "R31")
def shard_logit_partial(logit_bits: Sequence[int], temperature_bits: int) -> LogitPartial:
    """``s_v = f32(logit_v / T)`` for the owned tokens and their local max (R31).

    -inf is a mask; a NaN or +inf ``s_v`` is the shard's refusal (NAN_LOGIT before
    POS_INF_LOGIT), agreed globally by :func:`global_logit_max`.
    """
    check_temperature(temperature_bits)
    scaled = [scaled_logit(bits, None, temperature_bits) for bits in logit_bits]
    refusal = agreed_refusal([logit_problem(s) for s in scaled], LOGIT_REFUSALS)
    unmasked = [s for s in scaled if s != F32_NEG_INF]
    local_max = F32_NEG_INF if refusal or not unmasked else max(unmasked, key=decode_f32)
    return LogitPartial(scaled, local_max, refusal)


@defines("R05", "R31")
def global_logit_max(partials: Sequence[LogitPartial]) -> int:
    """The all-reduced max ``m`` (FP32 bits) of the shards' local maxes (R31).

    Refuses first with the agreed logit refusal, then ALL_MASKED when every shard
    is all masked.
    """
    refusal = agreed_refusal([p.refusal for p in partials], LOGIT_REFUSALS)
    if refusal:
        raise refuse(refusal, "agreed over the shards")
    maxes = [p.max_bits for p in partials if p.max_bits != F32_NEG_INF]
    if not maxes:
        raise refuse("ALL_MASKED", f"all {len(partials)} shards are masked")
    return max(maxes, key=decode_f32)


@defines("R02", "R05", "R31")
def shard_weights_from_logits(partial: LogitPartial, global_max: int) -> list[int]:
    """The owned weights ``w_v = RN_f32(exp(f32(s_v - m)))`` (FP32 bits), masked tokens 0.

    The only row-wide quantity of :func:`qconform.spec.weights.weights_from_logits`
    is the max m; with the all-reduced global m every rank computes exactly the
    weights of the unsharded row.
    """
    return [0 if s == F32_NEG_INF else f32_exp(f32_sub(s, global_max)).bits for s in partial.scaled]


@dataclass(frozen=True)
class WeightPartial:
    """One rank's weights (exact values) and its refusal (R05), before any reduction."""

    weights: list[Fraction]
    refusal: str | None


@defines("R02", "R05", "R31")
def shard_weight_partial(bits: Sequence[int], dtype: str) -> WeightPartial:
    """The exact owned weights of FP32 (``"f32"``) or FP64 bit patterns, and the shard's refusal."""
    parts = [UNPACKERS[dtype](b) for b in bits]
    refusal = agreed_refusal([weight_problem(p) for p in parts], WEIGHT_REFUSALS)
    weights = [] if refusal else [parts_value(p) for p in parts]
    return WeightPartial(weights, refusal)


@defines("R05", "R31")
def agreed_weights(partials: Sequence[WeightPartial]) -> list[list[Fraction]]:
    """Every shard's weights, once the ranks agree that no shard refuses (R05)."""
    refusal = agreed_refusal([p.refusal for p in partials], WEIGHT_REFUSALS)
    if refusal:
        raise refuse(refusal, "agreed over the shards")
    return [p.weights for p in partials]


@defines("R10", "R31")
def agreed_target_weights(partials: Sequence[WeightPartial]) -> list[list[Fraction]]:
    """Every shard's target weights, once the ranks agree that none is NaN, infinite or negative.

    A target row is the distribution p whatever its encoding: every way its weights fail to be one
    is R10's one code, BAD_TARGET_ROW, as in ``verification.check_target_weight_bits``; R05's weight
    codes belong to the draft's weights.
    """
    if any(p.refusal for p in partials):
        raise refuse("BAD_TARGET_ROW", "a target weight is NaN, infinite or negative, agreed over the shards")
    return [p.weights for p in partials]


@defines("R31")
def shifted_sum(weights: Sequence[Fraction]) -> Fraction:
    """A rank's shifted sum: the exact sum of its weights ``exp(s_v - m)`` (R31)."""
    return exact_total(weights)


@defines("R31")
def all_reduce_sum(partials: Sequence[Fraction]) -> Fraction:
    """The all-reduced sum of the shards' exact partials: the global normalization W (R31)."""
    return sum(partials, Fraction(0))


# --- global top-k merge (R30) -----------------------------------------------------------


def rank_key(entry: Entry) -> tuple[Fraction, int]:
    """Rank order of the top-k selection, as a key of :func:`heapq.nlargest`: heavier first,
    then the lower global ID."""
    return entry[1], -entry[0]


@defines("R07", "R30")
def shard_entries(weights: Sequence[Fraction], shard: ShardRange) -> list[Entry]:
    """The shard's tokens as (global ID, weight), in ascending global ID order."""
    return list(zip(shard.ids(), weights))


@defines("R07", "R30")
def local_top_k(entries: Sequence[Entry], k: int) -> list[Entry]:
    """A rank's local top-k candidates: its ``min(k, size)`` best entries in rank order
    (weight descending, global ID ascending)."""
    return heapq.nlargest(k, entries, key=rank_key)


@defines("R07", "R30")
def merge_top_k(candidates: Sequence[Sequence[Entry]], k: int) -> list[Entry]:
    """The global top-k support from the all-gathered local candidates, ascending global IDs (R30).

    Exact: a member of the global top-k has fewer than k entries ranked above it
    in the whole row, so fewer than k in its own shard, and is one of that
    shard's local top-k. Ties are decided by the global ID, as in
    :func:`qconform.spec.allocation.select_top_k`, whatever the shard order.
    """
    merged = heapq.nlargest(k, [entry for shard in candidates for entry in shard], key=rank_key)
    return sorted(merged)


@defines("R07", "R30")
def check_support_size(k: int, vocab: int) -> None:
    """Refuse (BAD_SUPPORT_SIZE) a top-k size outside ``1..V``."""
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= vocab:
        raise refuse("BAD_SUPPORT_SIZE", f"k={k!r} not in 1..{vocab}")


@defines("R07", "R30")
def owned_support(support: Sequence[Entry], shard: ShardRange) -> list[Entry]:
    """The members of the global support that one rank owns: its allocation domain."""
    return [entry for entry in support if shard.start <= entry[0] < shard.end]


# --- global tickets (R31) ---------------------------------------------------------------


@defines("R06", "R31")
def common_unit(domains: Sequence[Sequence[Entry]]) -> int:
    """The least common denominator D of every weight on every shard (an all-reduce:
    for FP32 / FP64 weights a max over powers of two). ``w_v * D`` are integers."""
    return math.lcm(*{w.denominator for domain in domains for _, w in domain}, 1)


@dataclass(frozen=True)
class ShardQuotas:
    """One rank's quotas ``Q_v = M * n_v / N`` in integer units (R06, R31).

    ``ids`` are its allocation domain (ascending global IDs), ``floors`` the
    ``floor(Q_v)``, ``remainder_numerators`` the ``r_v = M * n_v - floor(Q_v) * N``, so the
    fractional part is ``f_v = r_v / N`` with the all-reduced unit total ``N``.
    """

    ids: list[int]
    floors: list[int]
    remainder_numerators: list[int]
    unit_total: int

    @property
    def floor_sum(self) -> int:
        return sum(self.floors)

    @property
    def remainder_sum(self) -> Fraction:
        """The shard's share of the tickets in exact arithmetic: ``sum f_v``."""
        return Fraction(sum(self.remainder_numerators), self.unit_total)

    def remainders(self) -> list[Fraction]:
        return [Fraction(r, self.unit_total) for r in self.remainder_numerators]


@defines("R06", "R31")
def shard_units(domain: Sequence[Entry], unit: int) -> list[int]:
    """The shard's weights as integers ``n_v = w_v * D`` in the common unit."""
    return [w.numerator * (unit // w.denominator) for _, w in domain]


@defines("R06", "R31")
def shard_quotas(domain: Sequence[Entry], units: Sequence[int], unit_total: int) -> ShardQuotas:
    """Floors and fractional parts of the owned quotas, given the all-reduced unit total ``N``."""
    floors = [(M * n) // unit_total for n in units]
    remainders = [M * n - f * unit_total for n, f in zip(units, floors)]
    return ShardQuotas([v for v, _ in domain], floors, remainders, unit_total)


@defines("R06", "R31")
def all_reduce_remaining(floor_sums: Sequence[int]) -> int:
    """The remaining tickets ``M - sum of every shard's floors`` (an all-reduced sum); ``0 <= remaining < M``."""
    remaining = M - sum(floor_sums)
    if not 0 <= remaining < M:
        raise AssertionError(f"remaining {remaining} outside [0, M): the floors are not those of a distribution")
    return remaining


def ticket_key(candidate: tuple[int, int]) -> tuple[int, int]:
    """Ticket order: the larger fractional part first, then the lower global ID."""
    return -candidate[0], candidate[1]


@defines("R06", "R31")
def ticket_candidates(quotas: ShardQuotas, remaining: int) -> list[tuple[int, int]]:
    """A rank's offer: its ``min(remaining, size)`` largest fractional parts as
    ``(remainder numerator, global ID)``, in ticket order."""
    offers = zip(quotas.remainder_numerators, quotas.ids)
    return sorted(offers, key=ticket_key)[:remaining]


@defines("R06", "R31")
def merge_tickets(offers: Sequence[Sequence[tuple[int, int]]], remaining: int) -> set[int]:
    """The global IDs that get the ``remaining`` tickets: the largest fractional parts
    over all shards, ties to the lowest global ID (R06, R31).

    Exact for the same reason as :func:`merge_top_k`: a winner has fewer than
    ``remaining`` tokens ahead of it, so it is among its own shard's offers.
    """
    merged = sorted([offer for shard in offers for offer in shard], key=ticket_key)[:remaining]
    return {v for _, v in merged}


@dataclass(frozen=True)
class ShardAllocation:
    """One rank's part of the global allocation (R31).

    ``ids`` and ``counts`` cover its allocation domain (ascending global IDs);
    ``domain_sum`` is the exact weight sum it contributed to W; ``quotas`` its
    floors and fractional parts; ``tickets`` how many of the global remaining
    tickets it won.
    """

    ids: list[int]
    counts: list[int]
    domain_sum: Fraction
    quotas: ShardQuotas
    tickets: int

    @property
    def floor_sum(self) -> int:
        return self.quotas.floor_sum

    @property
    def remainder_sum(self) -> Fraction:
        return self.quotas.remainder_sum

    @property
    def count_mass(self) -> int:
        """The shard's global count mass: what the proposal sampler chooses shards by (R32)."""
        return sum(self.counts)


@dataclass(frozen=True)
class ShardedAllocation:
    """The global allocation as its shards hold it: ``total`` = W, ``remaining`` tickets."""

    shards: list[ShardAllocation]
    total: Fraction
    remaining: int


@defines("R04", "R06", "R31")
def allocate_sharded(domains: Sequence[Sequence[Entry]]) -> ShardedAllocation:
    """The largest-remainder allocation of M counts over the shards' domains, coordinated globally (R31).

    ``domains[s]`` lists rank s's tokens as (global ID, weight): all its tokens
    for a dense row, its members of the global support for top-k (R30). Refuses
    ZERO_MASS when W = 0. Equal to :func:`qconform.spec.allocation.allocate_dense`
    of the concatenated domains.
    """
    unit = common_unit(domains)
    units = [shard_units(domain, unit) for domain in domains]
    unit_total = sum(sum(u) for u in units)
    if unit_total == 0:
        raise refuse("ZERO_MASS", "the all-reduced weight sum is zero")
    quotas = [shard_quotas(domain, u, unit_total) for domain, u in zip(domains, units)]
    remaining = all_reduce_remaining([q.floor_sum for q in quotas])
    winners = merge_tickets([ticket_candidates(q, remaining) for q in quotas], remaining)
    shards = []
    for q, u in zip(quotas, units):
        won = [1 if v in winners else 0 for v in q.ids]
        counts = [f + t for f, t in zip(q.floors, won)]
        shards.append(ShardAllocation(q.ids, counts, Fraction(sum(u), unit), q, sum(won)))
    return ShardedAllocation(shards, Fraction(unit_total, unit), remaining)


# --- the sharded proposal row (R30, R31) ------------------------------------------------


@dataclass(frozen=True)
class ShardedQ:
    """A proposal row computed by S ranks: each per-shard partial and the merged result.

    ``logit_maxes`` / ``global_max`` exist for logit rows only; ``shifted_sums`` are the
    shards' full weight sums (the softmax partials); ``candidates`` (top-k only) are the
    local top-k lists in rank order and ``support`` the merged global support.
    """

    ranges: list[ShardRange]
    weights: list[list[Fraction]]
    logit_maxes: list[int] | None
    global_max: int | None
    shifted_sums: list[Fraction]
    candidates: list[list[Entry]] | None
    support: list[int] | None
    allocation: ShardedAllocation

    @defines("R07", "R30", "R31")
    def shard_counts(self) -> list[list[int]]:
        """Each rank's counts over its whole range (zero outside the support): its q shard."""
        rows = []
        for shard, part in zip(self.ranges, self.allocation.shards):
            row = [0] * shard.size
            for v, c in zip(part.ids, part.counts):
                row[v - shard.start] = c
            rows.append(row)
        return rows


@defines("R02", "R05", "R31")
def sharded_weights_from_logits(
    logit_bits: Sequence[int], temperature_bits: int, ranges: Sequence[ShardRange]
) -> tuple[list[list[int]], list[int], int]:
    """(each shard's FP32 weight bits, the local maxes, the global max): the two-phase
    normalization of R31 (all-reduce max, then local exps against the global max)."""
    partials = [shard_logit_partial(bits, temperature_bits) for bits in split_row(logit_bits, ranges)]
    global_max = global_logit_max(partials)
    return [shard_weights_from_logits(p, global_max) for p in partials], [p.max_bits for p in partials], global_max


@defines("R07", "R30", "R31")
def sharded_q(
    weights: Sequence[Sequence[Fraction]],
    ranges: Sequence[ShardRange],
    k: int | None,
    logit_maxes: list[int] | None = None,
    global_max: int | None = None,
) -> ShardedQ:
    """The sharded proposal row of owned weights: dense (``k`` None) or global top-k (R30, R31).

    Dense: every rank's domain is its whole shard. Top-k: each rank offers its
    local top-k, the merge gives one global support, and each rank allocates on
    the support members it owns; the normalization is within the support (R07).
    Refuses ZERO_MASS when the all-reduced W is 0, then BAD_SUPPORT_SIZE for k outside
    1..V: the unsharded row's order (docs/formats/allocation_invalid.md, "Refusal
    precedence"), the row before the request on it.
    """
    entries = [shard_entries(w, shard) for w, shard in zip(weights, ranges)]
    shifted = [shifted_sum(w) for w in weights]
    if all_reduce_sum(shifted) == 0:
        raise refuse("ZERO_MASS", "the all-reduced weight sum is zero")
    candidates, support = None, None
    domains = entries
    if k is not None:
        check_support_size(k, ranges[-1].end)
        candidates = [local_top_k(e, k) for e in entries]
        merged = merge_top_k(candidates, k)
        support = [v for v, _ in merged]
        domains = [owned_support(merged, shard) for shard in ranges]
    allocation = allocate_sharded(domains)
    return ShardedQ(
        list(ranges), [list(w) for w in weights], logit_maxes, global_max, shifted, candidates, support, allocation
    )


# --- sharded samplers (R32, R33) --------------------------------------------------------


@dataclass(frozen=True)
class ShardedDraw:
    """What one sharded draw chose: the shard, the token's index within the shard's
    range, and its global ID (what the owner broadcasts)."""

    shard: int
    local_token: int
    token: int


@defines("R08", "R32")
def choose_shard_by_counts(count_masses: Sequence[int], u24: int) -> tuple[int, int]:
    """(the shard, the count mass of the shards before it) for a 24-bit draw (R32).

    The shard is the first whose cumulative count mass is strictly greater than
    ``u24``: a zero-mass shard adds nothing to the cumulative mass and is never
    chosen. Refuses a draw outside ``[0, 2^24)`` and a draw not below the total mass.
    """
    check_draw(u24, U24_LIMIT, "24-bit")
    below = 0
    for s, mass in enumerate(count_masses):
        if below + mass > u24:
            return s, below
        below += mass
    raise refuse("WRONG_TOTAL_MASS", f"count masses sum to {below}, not above the draw {u24}")


@defines("R08", "R30", "R32")
def sample_sharded_counts(shard_counts: Sequence[Sequence[int]], ranges: Sequence[ShardRange], u24: int) -> ShardedDraw:
    """The sharded exact proposal sampler (R32): one leader-owned draw ``u24``.

    The ranks all-gather their count masses; the draw chooses the shard by
    them; the owner finds the token with its own cumulative counts and the draw
    less the mass before it, and broadcasts the global ID. For every draw this
    is :func:`qconform.spec.sampling.sample_counts` of the concatenated row: the
    token is the first whose *global* cumulative count exceeds ``u24``.
    """
    shard, below = choose_shard_by_counts([sum(c) for c in shard_counts], u24)
    local = sample_counts(shard_counts[shard], u24 - below)
    return ShardedDraw(shard, local, ranges[shard].start + local)


@defines("R10", "R31", "R33")
def shard_target_probabilities(weight_shards: Sequence[Sequence[Fraction]]) -> list[list[Fraction]]:
    """Each rank's exact target probabilities ``p_v = w_v / W`` with the all-reduced
    target sum W: the global normalization of the target-only sampler (R10, R33).
    A masked token has weight 0 and stays at probability 0."""
    total = all_reduce_sum([shifted_sum(w) for w in weight_shards])
    if total <= 0:
        raise refuse("BAD_TARGET_ROW", "the all-reduced target weight sum is not positive")
    return [[w / total if w else Fraction(0) for w in shard] for shard in weight_shards]


@defines("R04", "R11", "R33")
def shard_residual(p_shard: Sequence[Fraction], q_counts_shard: Sequence[int]) -> list[Fraction]:
    """``max(p_v - q(v), 0)`` for **every** token a rank owns (R33).

    ``q_counts_shard`` are the counts over the shard's whole range: zero outside
    a sparse support (R04), where the whole target mass stays in the residual.
    """
    return [max(p - Fraction(c, M), Fraction(0)) if c else p for p, c in zip(p_shard, q_counts_shard)]


@defines("R11", "R33")
def sharded_integer_masses(shard_masses: Sequence[Sequence[Fraction]]) -> list[list[int]]:
    """The masses of every shard scaled by one common denominator (an all-reduced lcm):
    integers in the same ratios, so the mass rule picks the same token with them.
    Refuses a negative mass (BAD_TARGET_ROW)."""
    if any(m < 0 for row in shard_masses for m in row):
        raise refuse("BAD_TARGET_ROW", "a residual mass is negative")
    unit = math.lcm(*{m.denominator for row in shard_masses for m in row}, 1)
    return [[m.numerator * (unit // m.denominator) for m in row] for row in shard_masses]


@defines("R11", "R33")
def choose_shard_by_mass(shard_totals: Sequence[int], u32: int) -> tuple[int, int]:
    """(the shard, the mass of the shards before it) for a 32-bit draw over the
    all-gathered shard masses: the first shard ``s`` with ``C_s * 2^32 > u32 * R``.
    A zero-mass shard is never chosen; a zero total refuses (ZERO_MASS)."""
    check_draw(u32, U32_LIMIT, "32-bit")
    total = sum(shard_totals)
    if total <= 0:
        raise refuse("ZERO_MASS", "the residual masses sum to zero")
    threshold = u32 * total
    below = 0
    for s, mass in enumerate(shard_totals):
        if (below + mass) * U32_LIMIT > threshold:
            return s, below
        below += mass
    raise AssertionError("unreachable: u32 < 2^32 makes the last cumulative mass exceed the draw")


@defines("R11", "R33")
def sample_sharded_scaled(scaled: Sequence[Sequence[int]], ranges: Sequence[ShardRange], u32: int) -> ShardedDraw:
    """The sharded mass rule over integer shard masses (see :func:`sample_sharded_mass`)."""
    totals = [sum(row) for row in scaled]
    shard, below = choose_shard_by_mass(totals, u32)
    threshold = u32 * sum(totals)
    cumulative = below
    for local, mass in enumerate(scaled[shard]):
        cumulative += mass
        if cumulative * U32_LIMIT > threshold:
            return ShardedDraw(shard, local, ranges[shard].start + local)
    raise AssertionError("unreachable: the chosen shard's mass reaches past the draw")


@defines("R11", "R33")
def sample_sharded_mass(
    shard_masses: Sequence[Sequence[Fraction]], ranges: Sequence[ShardRange], u32: int
) -> ShardedDraw:
    """The sharded mass-rule sampler (R33): global residual mass chooses the shard, the
    shard's local residual CDF the token.

    Rank s needs only the total R and the mass before it (an all-gather of S
    masses); its token is the first owned ``v`` with ``(C_{before} + C^local_v) * 2^32 >
    u32 * R``, which is the unsharded rule of
    :func:`qconform.spec.sampling.mass_draw` on the concatenated row.
    """
    return sample_sharded_scaled(sharded_integer_masses(shard_masses), ranges, u32)


# --- the kernels and their CPU oracles (R34) --------------------------------------------


@defines("R34")
def kernel_oracles() -> list[tuple[str, tuple[Callable, ...]]]:
    """R34's candidate kernels in dependency order, each with the spec functions that are its
    CPU oracle: a kernel is qualified against them (and against the small-vocabulary sharding
    emulator) before it enters a CUDA graph."""
    return [
        (
            "global logsumexp and counts",
            (global_logit_max, shard_weights_from_logits, all_reduce_sum, allocate_sharded),
        ),
        ("global top-k merge", (local_top_k, merge_top_k)),
        ("integer categorical proposal", (choose_shard_by_counts, sample_sharded_counts)),
        ("sparse q lookup by global ID", (owned_support, ShardedQ.shard_counts)),
        ("full-target residual mass and sampling", (shard_target_probabilities, shard_residual, sample_sharded_mass)),
    ]
