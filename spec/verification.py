"""One round of standard speculative verification, draw for draw (R10, R11, R23, R33).

The target-side sampler receives ``K`` draft tokens ``x_1..x_K``, the exact q row
that sampled each one, and ``K + 1`` exact target rows ``p_1..p_{K+1}`` (R10).
For ``i = 1..K`` it tests ``x_i`` with the acceptance draw at
``accept_key(ident, i)``: accept iff ``u32 * q(x_i) < p_i(x_i) * 2^32`` (R11).
On the first rejection it draws the correction at ``correction_key(ident, i - 1)``
from the residual ``max(p_i - q_i, 0)`` over the **full** vocabulary, tokens
outside a sparse q support included (R33), and the round ends. After ``K``
acceptances it draws the bonus at ``correction_key(ident, K)`` from ``p_{K+1}``.
Emission also ends at the first emitted stop token, or once the output budget is
reached; no further draw is consumed after that.

Each request is keyed only by its own :class:`RngIdentity`, never by its place in
a batch, so a batch's results are its requests' results (batch invariance).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from math import ceil
from typing import Sequence

from qconform.spec.arms import Arm, check_depth
from qconform.spec.constants import MAX_REQUESTS, U32_BITS, M
from qconform.spec.errors import refuse
from qconform.spec.floats import F32_POS_INF, F32_SIGN
from qconform.spec.qrow import QRow
from qconform.spec.rng_abi import (
    Domain,
    DrawKey,
    RngIdentity,
    accept_key,
    correction_key,
    uniform32_draw,
)
from qconform.spec.rules import defines
from qconform.spec.sampling import exact_total, mass_draw
from qconform.spec.weights import weights_from_f32

U32_LIMIT: int = 1 << U32_BITS
ZERO = Fraction(0)

ACCEPT = "accept"
REJECT = "reject"
CORRECTION = "correction"
BONUS = "bonus"


@dataclass
class RoundInput:
    """What the target-side sampler verifies for one request in one round.

    ``q_rows[i - 1]`` sampled ``draft_tokens[i - 1]``; ``p_rows[i - 1]`` is the
    exact target row at that position and ``p_rows[K]`` the bonus row. ``budget``
    is the remaining output budget (``None``: unbounded).
    """

    ident: RngIdentity
    draft_tokens: list[int]
    q_rows: list[QRow]
    p_rows: list[list[Fraction]]
    stop_tokens: frozenset[int] = frozenset()
    budget: int | None = None


@dataclass(frozen=True)
class DrawRecord:
    """One consumed draw: where it was keyed, its value, what it decided.

    ``token`` is the tested draft token for an accept/reject decision and the
    drawn token for a correction or bonus. ``margin`` is how far ``u32 / 2^32``
    lies from the decision's nearest boundary.
    """

    domain: Domain
    position: int
    draw_counter: int
    counter_words: tuple[int, int, int, int]
    u32: int
    decision: str
    token: int
    margin: Fraction


@dataclass
class RoundResult:
    """The accepted draft count, the emitted tokens, and every draw consumed, in order.

    ``accepted`` is the number of draft tokens *emitted*: the largest ``j`` with
    ``x_1..x_j`` accepted and emission not ended (stop token, budget) before ``x_j``
    (docs/formats/verification_round.md). A draft after the end is never tested.
    """

    accepted: int
    emitted: list[int] = field(default_factory=list)
    draws: list[DrawRecord] = field(default_factory=list)


@defines("R10", "R27")
def check_target_shapes(lengths: Sequence[int], vocab: int) -> None:
    """Refuse (BAD_SHAPE) target rows of other than ``vocab`` entries: every row's shape before any value."""
    for length in lengths:
        if length != vocab:
            raise refuse("BAD_SHAPE", f"target row has {length} entries, vocabulary is {vocab}")


@defines("R10")
def check_target_row(row: Sequence[Fraction], vocab: int) -> None:
    """Refuse a target row that is not an exact distribution over ``vocab`` tokens (R10)."""
    check_target_shapes([len(row)], vocab)
    for value in row:
        if not isinstance(value, (int, Fraction)) or isinstance(value, bool) or value.numerator < 0:
            raise refuse("BAD_TARGET_ROW", f"target probability {value!r} is not a nonnegative rational")
    total = exact_total(row)
    if total != 1:
        raise refuse("BAD_TARGET_ROW", f"target row sums to {total}, not exactly 1")


@defines("R19")
def check_token(token: int, vocab: int, what: str) -> None:
    if not isinstance(token, int) or isinstance(token, bool) or not 0 <= token < vocab:
        raise refuse("TOKEN_OUT_OF_RANGE", f"{what} {token!r} outside vocabulary {vocab}")


@defines("R27")
def check_request_shape(depth: int, q_rows: int, p_rows: int) -> None:
    """Refuse (BAD_SHAPE) a request without drafts, or without one q row per draft and one more p row."""
    if depth < 1 or q_rows != depth or p_rows != depth + 1:
        raise refuse(
            "BAD_SHAPE", f"{depth} drafts need as many q rows and one more p row; got {q_rows} q rows, {p_rows} p rows"
        )


@defines("R27", "R35")
def check_batch_shape(depths: Sequence[int], arm: Arm | None = None) -> int:
    """Refuse (BAD_SHAPE) a batch of no request or more than four, of mixed depths, or of a depth
    that is not the negotiated ``arm`` (without one: no arm, above 8); return the depth.

    The batch's shape comes before any request is read (``refusal_order.VERIFICATION_REFUSALS``,
    rows 1-3): it bounds what is read, as the negotiated sizes do on the wire.
    """
    if not 1 <= len(depths) <= MAX_REQUESTS:
        raise refuse("BAD_SHAPE", f"a batch holds 1..{MAX_REQUESTS} requests, not {len(depths)}")
    if len(set(depths)) != 1:
        raise refuse("BAD_SHAPE", f"a batch has one fixed depth, not {sorted(set(depths))} (R27, R35)")
    depth = depths[0]
    check_depth(depth, Arm(depth) if arm is None else arm)
    return depth


@defines("R11", "R19", "R27")
def check_round_input(inp: RoundInput) -> int:
    """Validate one round's input before any draw; return its vocabulary size.

    In the order of ``refusal_order.VERIFICATION_REFUSALS`` (rows 5-17), each condition over
    the whole request: K = 0 or mismatched row counts (BAD_SHAPE), rows over different
    vocabularies (BAD_SHAPE), a target row of another length (BAD_SHAPE), one that is not an
    exact distribution (BAD_TARGET_ROW), an out-of-range draft (TOKEN_OUT_OF_RANGE), zero q at
    a drafted token (ZERO_Q_AT_TOKEN), an out-of-range stop token, a budget below 1 (BAD_SHAPE).
    """
    depth = len(inp.draft_tokens)
    check_request_shape(depth, len(inp.q_rows), len(inp.p_rows))
    vocab = inp.q_rows[0].vocab
    for row in inp.q_rows:
        if row.vocab != vocab:
            raise refuse("BAD_SHAPE", f"q rows over vocabularies {row.vocab} and {vocab}")
    check_target_shapes([len(row) for row in inp.p_rows], vocab)
    for row in inp.p_rows:
        check_target_row(row, vocab)
    for token in inp.draft_tokens:
        check_token(token, vocab, "draft token")
    for token, row in zip(inp.draft_tokens, inp.q_rows):
        if row.count(token) == 0:
            raise refuse("ZERO_Q_AT_TOKEN", f"draft token {token} has zero q")
    for token in inp.stop_tokens:
        check_token(token, vocab, "stop token")
    if inp.budget is not None and (not isinstance(inp.budget, int) or isinstance(inp.budget, bool) or inp.budget < 1):
        raise refuse("BAD_SHAPE", f"output budget {inp.budget!r} is not a positive integer")
    return vocab


@defines("R11")
def acceptance_test(u32: int, p: Fraction, q: Fraction) -> bool:
    """Accept iff ``u32 * q < p * 2^32``, exactly: the boundary rejects, ``p = 0`` never accepts."""
    return u32 * q < p * U32_LIMIT


@defines("R11")
def acceptance_margin(u32: int, p: Fraction, q: Fraction) -> Fraction:
    """``|u32 / 2^32 - p / q|``: how far the acceptance draw lies from its boundary.

    When ``p = 0`` the rejection is certain in any arithmetic (no rounding makes a
    zero target mass positive), so the margin is ``1``, the largest there is: an
    implementation that accepts such a token cannot be excused as imprecise.
    """
    if p == 0:
        return Fraction(1)
    return abs(Fraction(u32, U32_LIMIT) - Fraction(p) / q)


@defines("R11")
def acceptance_probability(p: Fraction, q: Fraction) -> Fraction:
    """``min(1, ceil(2^32 p / q) / 2^32)``: the share of the ``2^32`` draws that accept.

    ``u`` accepts iff ``u < 2^32 p / q``; there are ``ceil(2^32 p / q)`` such
    integers ``u >= 0``, at most ``2^32``. It exceeds ``min(1, p / q)`` by less
    than ``2^-32``.
    """
    if q <= 0:
        raise refuse("ZERO_Q_AT_TOKEN", "acceptance needs q(x) > 0")
    accepting = ceil(Fraction(p) * U32_LIMIT / q)
    return Fraction(min(accepting, U32_LIMIT), U32_LIMIT)


@defines("R11", "R33")
def residual_row(p_row: Sequence[Fraction], q_row: QRow) -> list[Fraction]:
    """``max(p_v - q(v), 0)`` for **every** token ``v`` of the vocabulary (R11, R33).

    A token outside a sparse q support has ``q(v) = 0`` (R04), so its whole
    target mass stays in the residual.
    """
    residual: list[Fraction] = []
    for p, count in zip(p_row, q_row.dense_counts()):
        residual.append(max(p - Fraction(count, M), Fraction(0)) if count else p)
    return residual


def draw_record(key: DrawKey, u32: int, decision: str, token: int, margin: Fraction) -> DrawRecord:
    return DrawRecord(
        domain=key.domain,
        position=key.position,
        draw_counter=key.draw_counter,
        counter_words=key.counter_words(),
        u32=u32,
        decision=decision,
        token=token,
        margin=margin,
    )


@defines("R11", "R23")
def categorical_draw(key: DrawKey, masses: Sequence[Fraction], decision: str) -> DrawRecord:
    """Draw a correction or bonus token from ``masses`` with the 32-bit draw at ``key``."""
    u32 = uniform32_draw(key)
    token, margin = mass_draw(masses, u32)
    return draw_record(key, u32, decision, token, margin)


@defines("R11")
def emission_ends(emitted: Sequence[int], inp: RoundInput) -> bool:
    """Whether the last emitted token is a stop token or the output budget is reached."""
    return emitted[-1] in inp.stop_tokens or (inp.budget is not None and len(emitted) >= inp.budget)


@defines("R10", "R11", "R23", "R33")
def verify_round(inp: RoundInput) -> RoundResult:
    """Verify one request's proposal for one round, consuming draws in order (R11).

    Acceptance of ``x_i`` draws at ``accept_key(ident, i)``; the correction after
    ``i - 1`` acceptances at ``correction_key(ident, i - 1)``; the bonus at
    ``correction_key(ident, K)``. Proposal noise is never touched (R23).
    """
    check_round_input(inp)
    depth = len(inp.draft_tokens)
    result = RoundResult(accepted=0)
    for i in range(1, depth + 1):
        token, p_row, q_row = inp.draft_tokens[i - 1], inp.p_rows[i - 1], inp.q_rows[i - 1]
        p, q = Fraction(p_row[token]), q_row.q(token)
        key = accept_key(inp.ident, i)
        u32 = uniform32_draw(key)
        accepted = acceptance_test(u32, p, q)
        margin = acceptance_margin(u32, p, q)
        result.draws.append(draw_record(key, u32, ACCEPT if accepted else REJECT, token, margin))
        if not accepted:
            residual = residual_row(p_row, q_row)
            correction = categorical_draw(correction_key(inp.ident, i - 1), residual, CORRECTION)
            result.draws.append(correction)
            result.emitted.append(correction.token)
            return result
        result.accepted = i
        result.emitted.append(token)
        if emission_ends(result.emitted, inp):
            return result
    bonus = categorical_draw(correction_key(inp.ident, depth), inp.p_rows[depth], BONUS)
    result.draws.append(bonus)
    result.emitted.append(bonus.token)
    return result


@defines("R11", "R27", "R35")
def verify_batch(requests: Sequence[RoundInput], arm: Arm | None = None) -> list[RoundResult]:
    """Verify up to four requests of one fixed depth; each depends only on its own
    input and identity (R27): a batch of mixed depths is an incompatible shape.

    The depth must be the negotiated ``arm`` (R35, :func:`~qconform.spec.arms.check_depth`);
    without one, the batch's depth names its arm, which must exist (depth-1..depth-8).
    """
    check_batch_shape([len(request.draft_tokens) for request in requests], arm)
    return [verify_round(request) for request in requests]


@defines("R10")
def check_target_weight_bits(bits: Sequence[int]) -> None:
    """Refuse an FP32 target weight row that is no distribution: BAD_TARGET_ROW (R10).

    A target row is the distribution p, whatever its encoding, so every way an FP32
    weight row fails to be one has R10's one code, as an exact rational row that does
    not sum to 1 has: a NaN, an infinity, a negative weight, or no positive weight.
    -0.0 is zero. R05's weight codes (NAN_WEIGHT, NEGATIVE_WEIGHT, ZERO_MASS, ...) belong to the
    draft's weights, which allocate q; they never answer for a target row
    (docs/formats/verification_round.md, "Target rows").
    """
    for b in bits:
        magnitude = b & ~F32_SIGN
        if magnitude >= F32_POS_INF or (b & F32_SIGN and magnitude):
            raise refuse("BAD_TARGET_ROW", f"target weight 0x{b:08x} is not a finite nonnegative number")
    if not any(b & ~F32_SIGN for b in bits):
        raise refuse("BAD_TARGET_ROW", f"all {len(bits)} target weights are zero")


@defines("R10")
def target_rows_from_f32(bits_rows: Sequence[Sequence[int]]) -> list[list[Fraction]]:
    """Exact target rows from FP32 weight bit patterns: ``p_v = w_v / sum(w)`` (R10).

    Each row is first checked by :func:`check_target_weight_bits`.
    """
    rows: list[list[Fraction]] = []
    for bits in bits_rows:
        check_target_weight_bits(bits)
        weights = weights_from_f32(bits)
        total = exact_total(weights)
        rows.append([w / total if w else ZERO for w in weights])
    return rows
