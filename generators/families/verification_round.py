"""Vector family ``verification_round``: standard verification, draw for draw (R10, R11, R23, R27, R33).

Each case is a batch of one to four requests over one vocabulary. Every request
carries its RNG identity, its drafts, the q row that sampled each draft and the
``K + 1`` target rows; the expected answer is each request's accepted count,
emitted tokens and every draw consumed (domain, position, u32, decision, token,
margin). Cases are built so that each bug class named in the notes changes the
accepted count or the emitted tokens, not only a recorded draw: where a case
needs a draw on one side of a threshold, its seed is the first one (counting up
from a fixed start) whose Philox draws satisfy that condition. Two conditions are
too rare to count up to here (a draw of exactly 0, a draw within 2^-25 of 1):
their start seeds come from an exhaustive offline search and are checked all the same.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

from qconform.generators import precedence
from qconform.generators.encoding import (
    EncodingError,
    decode_blob,
    decode_rational,
    decode_u64,
    encode_blob,
    encode_rational,
    encode_u64,
    f32_bits,
)
from qconform.generators.families.categorical_sampling import (
    ROW_BREAKS,
    RowDraft,
    decode_qrow,
    encode_draft,
    encode_qrow,
    raw_qrow,
)
from qconform.generators.registry import Case, Family, FuzzHooks, Group, Labels, Note, StatHooks
from qconform.generators.schemas import closed_object as closed
from qconform.spec.constants import MAX_REQUESTS, VOCAB, M
from qconform.spec.errors import SpecError
from qconform.spec.floats import F32_POS_INF, F32_SIGN
from qconform.spec.outcome_law import Law, request_outcome_law
from qconform.spec.qrow import QRow, check_q_rows
from qconform.spec.refusal_order import VERIFICATION_REFUSALS
from qconform.spec.rng_abi import (
    RngIdentity,
    accept_key,
    correction_key,
    draw_words,
    proposal_draw,
    proposal_key,
    request_seed,
    uniform32_draw,
    unseeded_request_seed,
)
from qconform.spec.sampling import sample_qrow
from qconform.spec.verification import (
    RoundInput,
    RoundResult,
    check_batch_shape,
    check_request_shape,
    check_round_input,
    check_target_shapes,
    target_rows_from_f32,
    verify_batch,
)

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

U32_LIMIT = 1 << 32
#: u32 >= 2^32 - FP32_ONE_GAP makes u32 / 2^32 round to 1.0 in FP32
FP32_ONE_GAP = 1 << 7
#: Smallest seeds below 2^32 (generation 1, round 1, anchor 100) whose acceptance draw of x_1 is 0,
#: and whose correction draw at the anchor is >= 2^32 - 2^7; found by an exhaustive offline search.
ZERO_DRAW_SEED = 4033942220
TOP_CORRECTION_SEED = 13379975
SMALL_VOCAB = 8
RULES = ("R10", "R11", "R23", "R33")


# --- codecs -------------------------------------------------------------------------------


def encode_p_probabilities(rows: Sequence[Sequence[Fraction]]) -> dict:
    """``{"probabilities": [[rational, ...], ...]}``: exact target rows."""
    return {"probabilities": [[encode_rational(value) for value in row] for row in rows]}


def encode_p_weights(bits_rows: Sequence[Sequence[int]]) -> dict:
    """``{"weights": f32[R, V]}``: FP32 weight rows, normalized exactly by the reader (R10)."""
    flat = [bits for row in bits_rows for bits in row]
    return {"weights": encode_blob("f32", flat, [len(bits_rows), len(bits_rows[0])])}


def decode_p_rows(obj: dict, vocab: int | None = None) -> list[list[Fraction]]:
    """Exact target rows of a pRows object; with ``vocab``, every row's length is checked before any value."""
    if "probabilities" in obj:
        if vocab is not None:
            check_target_shapes([len(row) for row in obj["probabilities"]], vocab)
        return [[decode_rational(value) for value in row] for row in obj["probabilities"]]
    flat, shape = decode_blob(obj["weights"], "f32")
    if len(shape) != 2:
        raise EncodingError(f"p weights have shape {shape}, need [rows, vocab]")
    rows, width = shape
    if vocab is not None:
        check_target_shapes([width] * rows, vocab)
    return target_rows_from_f32([flat[r * width : (r + 1) * width] for r in range(rows)])


def p_row_count(obj: dict) -> int:
    return len(obj["probabilities"]) if "probabilities" in obj else decode_blob(obj["weights"], "f32")[1][0]


def decode_request(obj: dict, vocab: int) -> RoundInput:
    """The spec's :class:`RoundInput` for one request object of a case input, refused in the order of
    ``refusal_order.VERIFICATION_REFUSALS`` rows 4-13: its seed identity, its row counts, its q rows
    (each condition over all of them), its target rows (every shape, then every value)."""
    seed = request_seed(decode_u64(obj["seed"]) if "seed" in obj else None, obj.get("request_id"))
    check_request_shape(len(obj["draft_tokens"]), len(obj["q_rows"]), p_row_count(obj["p_rows"]))
    check_q_rows(vocab, [raw_qrow(row) for row in obj["q_rows"]])
    return RoundInput(
        ident=RngIdentity(seed, obj["generation"], obj["round"], obj["anchor"]),
        draft_tokens=list(obj["draft_tokens"]),
        q_rows=[decode_qrow(row, vocab) for row in obj["q_rows"]],
        p_rows=decode_p_rows(obj["p_rows"], vocab),
        stop_tokens=frozenset(obj.get("stop_tokens", ())),
        budget=obj.get("budget"),
    )


def request_json(inp: RoundInput, p_rows: dict | None = None) -> dict:
    """A request object; ``p_rows`` overrides the exact rational encoding of ``inp.p_rows``."""
    obj = {
        "seed": encode_u64(inp.ident.seed),
        "generation": inp.ident.generation,
        "round": inp.ident.round,
        "anchor": inp.ident.anchor,
        "draft_tokens": list(inp.draft_tokens),
        "q_rows": [encode_qrow(row) for row in inp.q_rows],
        "p_rows": p_rows if p_rows is not None else encode_p_probabilities(inp.p_rows),
    }
    if inp.stop_tokens:
        obj["stop_tokens"] = sorted(inp.stop_tokens)
    if inp.budget is not None:
        obj["budget"] = inp.budget
    return obj


def encode_result(result: RoundResult) -> dict:
    """The expected object of one request's round."""
    return {
        "accepted": result.accepted,
        "emitted": list(result.emitted),
        "draws": [
            {
                "domain": draw.domain.name,
                "position": draw.position,
                "draw_counter": draw.draw_counter,
                "u32": draw.u32,
                "decision": draw.decision,
                "token": draw.token,
                "margin": encode_rational(draw.margin),
            }
            for draw in result.draws
        ],
    }


# --- notes --------------------------------------------------------------------------------

NOTES = {
    precedence.FLAG: precedence.NOTE,
    "ACCEPT_BOUNDARY": Note(
        "EDGE_CASE",
        "p(x) is chosen so that 2^32 p(x)/q(x) equals the acceptance draw u32, or lies one step "
        "(1 or 1/2) either side: accept iff u32 * q(x) < p(x) * 2^32, so the boundary itself rejects.",
        "Catches '<=' acceptance, float ratio tests, and a draw read at the wrong key.",
    ),
    "ZERO_TARGET": Note(
        "KNOWN_BUG",
        "p(x) = 0 at a drafted token: it is never accepted, whatever the draw (here a small one).",
        "Catches 'coin <= cdf' accepting a zero-mass draft at coin = 0 (sglang #35771).",
    ),
    "DRAW_ON_BOUNDARY": Note(
        "EDGE_CASE",
        "The residual or bonus row is chosen so that the correction or bonus draw lands exactly on a cumulative "
        "boundary, u32 * R = C_v * 2^32, or one step either side of it: the token is the first v with "
        "C_v * 2^32 > u32 * R, so a draw on the boundary picks the token after it.",
        "Catches a '>=' (inclusive) cumulative search in the correction and bonus draw, and a draw rounded "
        "before the comparison.",
    ),
    "EXTREME_DRAW": Note(
        "EDGE_CASE",
        "A draw at an end of its range: the acceptance draw u32 = 0 at a draft with p(x) = 0, or a correction "
        "draw u32 >= 2^32 - 2^7 (u32 / 2^32 rounds to 1.0 in FP32) that picks the residual's last token.",
        "Catches '<=' acceptance of a zero-mass draft at u = 0 (sglang #35771), and a sampler whose uniform "
        "becomes 1.0 and runs past the row to an out-of-range token (GHSA-8wr5-jm2h-8r4f).",
    ),
    "RESIDUAL_OUTSIDE_SUPPORT": Note(
        "KNOWN_BUG",
        "Residual mass lies on tokens outside the sparse q support (q = 0 there, R33).",
        "Catches a residual built only over the sparse support (empty or wrong residual).",
    ),
    "RESIDUAL_FULL_SUBTRACTION": Note(
        "KNOWN_BUG",
        "A non-drafted token has 0 < p < q: the residual max(p - q, 0) is zero there.",
        "Catches subtracting only the drafted token's q from p (xllm #2175).",
    ),
    "NOISE_SEPARATION": Note(
        "KNOWN_BUG",
        "The seed puts the correction draw in a different residual token than the acceptance draw, "
        "the proposal draw and the correction draw at the next position would pick.",
        "Catches correction reusing acceptance or proposal noise (vLLM #47386) and a correction keyed off by one.",
    ),
    "POSITION_SEPARATION": Note(
        "FUNCTIONALITY",
        "The acceptance draws at anchor and anchor + 1 fall on opposite sides of p/q.",
        "Catches acceptance keyed at anchor + i instead of anchor + i - 1.",
    ),
    "POINT_MASS_Q": Note(
        "KNOWN_BUG",
        "The draw lies between p(x) and p(x)/q(x): accepted with the real q, rejected if q(x) is taken as 1.",
        "Catches treating q as a point mass on the drafted token (vLLM #40149).",
    ),
    "RENORMALIZED_Q": Note(
        "KNOWN_BUG",
        "q has mass where p = 0; the draw lies between p(x)/q(x) and p(x)/q'(x) for q renormalized over p's support.",
        "Catches a verifier that renormalizes a different q (R02).",
    ),
    "FULL_ACCEPTANCE": Note(
        "FUNCTIONALITY",
        "Every draft is accepted; the bonus comes from p_{K+1} at anchor + K, whose support is disjoint from p_K's.",
        "Catches a bonus from the wrong p row and more than K + 1 emitted tokens (flashinfer #879).",
    ),
    "STOP_TOKEN": Note(
        "FUNCTIONALITY",
        "A stop token is emitted (or drafted and rejected); emission ends at the first emitted stop token "
        "and no later draw is consumed.",
        "Catches emitting past a stop token and consuming the pending correction or bonus draw.",
    ),
    "OUTPUT_BUDGET": Note(
        "FUNCTIONALITY",
        "The output budget is reached inside the round; no later draw is consumed.",
        "Catches emitting past the budget, or drawing the bonus after it.",
    ),
    "BATCH_INVARIANCE": Note(
        "KNOWN_BUG",
        "The same request alone and at different batch positions gives the same result.",
        "Catches RNG keyed by batch row instead of by request (FlashInfer ChainSpeculativeSampling).",
    ),
    "PER_REQUEST_PARAMETERS": Note(
        "KNOWN_BUG",
        "A batch whose requests carry different stop tokens and output budgets: each request's own "
        "parameters end its own emission.",
        "Catches per-request parameters sliced wrongly, so that request 0's apply to the whole batch (TRT-LLM #12588).",
    ),
    "UNSEEDED_REQUESTS": Note(
        "KNOWN_BUG",
        "Requests without a seed carry a request ID; each is keyed by unseeded_request_seed(ID) (R24).",
        "Catches a constant default seed, under which two unseeded requests of a batch draw identical noise.",
    ),
    "SHARED_EXPLICIT_SEED": Note(
        "FUNCTIONALITY",
        "Two requests with one explicit seed and identity draw the same acceptance noise, by definition of a seed.",
        "Catches a verifier that salts the key with the batch row or a request index to avoid shared seeds.",
    ),
    "DEPTH5_BATCH": Note(
        "BASIC",
        "Four depth-5 requests with distinct seeds, generations, rounds and anchors (R27); drafts "
        "sampled from their q rows with the proposal draws.",
        "General agreement at the production depth and batch bound.",
    ),
    "PRODUCTION_VOCAB": Note(
        "FUNCTIONALITY",
        "V = 129280 with FP32 target weights normalized exactly (R10); the residual spans the full vocabulary.",
        "Catches residual sampling that is not over the full vocabulary, and index width problems.",
    ),
    "TARGET_WEIGHTS": Note(
        "EDGE_CASE",
        "An FP32 target weight row is the distribution p = w / sum(w) (R10): -0.0 is a zero weight; a NaN, an "
        "infinity, a negative weight (even -2^-149) or a row with no positive weight is no distribution and is "
        "refused BAD_TARGET_ROW, the one code of a bad target row whatever its encoding (R05's weight codes are "
        "the draft's).",
        "Catches -0.0 read as negative, a target row refused with a draft-weight code (ZERO_MASS, "
        "NEGATIVE_WEIGHT), NaN or infinity let through to the ratio test.",
    ),
    "INVALID_REQUEST": Note(
        "MALFORMED_INPUT",
        "A request the verifier must refuse before any draw.",
        "Catches verifying zero-q drafts, out-of-range tokens, non-normalized targets, wrong shapes.",
    ),
}


# --- building blocks ----------------------------------------------------------------------


def u_of(word: int) -> Fraction:
    """A 32-bit draw as a point of [0, 1)."""
    return Fraction(word, U32_LIMIT)


def u_accept(ident: RngIdentity, i: int) -> Fraction:
    return u_of(uniform32_draw(accept_key(ident, i)))


def u_correction(ident: RngIdentity, j: int) -> Fraction:
    return u_of(uniform32_draw(correction_key(ident, j)))


def u_proposal_word(ident: RngIdentity, i: int) -> Fraction:
    """Output word 0 of the proposal draw of x_i, read as a 32-bit draw."""
    return u_of(draw_words(proposal_key(ident, i))[0])


def find_ident(
    condition: Callable[[RngIdentity], bool], start: int, generation: int = 1, round_id: int = 1, anchor: int = 100
) -> RngIdentity:
    """The first identity, counting the seed up from ``start``, whose draws meet ``condition``."""
    for seed in range(start, start + 100_000):
        ident = RngIdentity(seed, generation, round_id, anchor)
        if condition(ident):
            return ident
    raise AssertionError(f"no seed from {start} meets the case's draw condition")


def dense_q(shares: dict[int, Fraction], vocab: int = SMALL_VOCAB) -> QRow:
    """A dense q row with ``c_v = M * shares[v]`` (shares dyadic, summing to 1)."""
    return QRow.dense([int(M * shares.get(v, 0)) for v in range(vocab)])


def sparse_q(shares: dict[int, Fraction], vocab: int = SMALL_VOCAB) -> QRow:
    ids = sorted(shares)
    return QRow.sparse(vocab, ids, [int(M * shares[v]) for v in ids])


def p_row(masses: dict[int, Fraction], vocab: int = SMALL_VOCAB) -> list[Fraction]:
    row = [Fraction(masses.get(v, 0)) for v in range(vocab)]
    assert sum(row) == 1, row
    return row


def q_as_p(row: QRow) -> list[Fraction]:
    """The target row equal to q: every draft from it is accepted."""
    return [Fraction(c, M) for c in row.dense_counts()]


UNIFORM_P = p_row({v: Fraction(1, SMALL_VOCAB) for v in range(SMALL_VOCAB)})
HALF_Q = dense_q({0: Fraction(1, 2), 1: Fraction(1, 2)})


def solve(case_input: dict) -> dict:
    """The spec's answer to one input: each request's round, or the batch's refusal."""
    try:
        check_batch_shape([len(obj["draft_tokens"]) for obj in case_input["requests"]])
        requests = []
        for obj in case_input["requests"]:  # request by request, in batch order
            requests.append(decode_request(obj, case_input["vocab"]))
            check_round_input(requests[-1])
        return {"requests": [encode_result(result) for result in verify_batch(requests)]}
    except SpecError as error:
        return {"error": error.code}


def batch_case(
    name: str,
    comment: str,
    flags: tuple[str, ...],
    requests: list[dict],
    vocab: int = SMALL_VOCAB,
    rules: tuple[str, ...] = RULES,
    result: str = "valid",
) -> Case:
    """A case over request objects; its expected answer is :func:`solve` of its input."""
    case_input = {"vocab": vocab, "requests": requests}
    expected = solve(case_input)
    assert ("error" in expected) == (result == "invalid"), (name, expected)
    return Case(
        name=name, comment=comment, rules=rules, flags=flags, input=case_input, expected=expected, result=result
    )


def round_case(
    name: str, comment: str, flags: tuple[str, ...], requests: list[RoundInput], rules: tuple[str, ...] = RULES
) -> Case:
    """A valid case over spec inputs with exact rational target rows."""
    return batch_case(name, comment, flags, [request_json(r) for r in requests], requests[0].q_rows[0].vocab, rules)


# --- groups -------------------------------------------------------------------------------


def boundary_request(ident: RngIdentity, depth: int, offset: Fraction) -> RoundInput:
    """Drafts accepted with certainty before x_K; x_K = 0 has 2^32 p/q = u32 + offset."""
    u32 = uniform32_draw(accept_key(ident, depth))
    assert 1 <= u32 < U32_LIMIT - 1
    target = (u32 + offset) / (2 * U32_LIMIT)  # q(0) = 1/2, so 2^32 p/q = u32 + offset
    last = p_row({0: target, 1: Fraction(1, 4), 2: (Fraction(3, 4) - target) / 2, 5: (Fraction(3, 4) - target) / 2})
    return RoundInput(
        ident=ident,
        draft_tokens=[1] * (depth - 1) + [0],
        q_rows=[HALF_Q] * depth,
        p_rows=[q_as_p(HALF_Q)] * (depth - 1) + [last, UNIFORM_P],
    )


def boundary_cases() -> Iterator[Case]:
    offsets = {
        "on-boundary-rejects": (Fraction(0), "2^32 p/q = u32 exactly: rejected."),
        "one-below-boundary-accepts": (Fraction(1), "u32 = 2^32 p/q - 1: accepted."),
        "one-above-boundary-rejects": (Fraction(-1), "u32 = 2^32 p/q + 1: rejected."),
        "half-below-boundary-accepts": (Fraction(1, 2), "u32 = 2^32 p/q - 1/2: accepted."),
        "half-above-boundary-rejects": (Fraction(-1, 2), "u32 = 2^32 p/q + 1/2: rejected."),
    }
    for depth, ident in ((1, RngIdentity(0xB0DA, 1, 1, 100)), (3, RngIdentity(0xB0DB, 2, 5, 2048))):
        for name, (offset, comment) in offsets.items():
            yield round_case(
                f"depth{depth}-{name}",
                f"Depth {depth}, test of x_{depth}: {comment}",
                ("ACCEPT_BOUNDARY",),
                [boundary_request(ident, depth, offset)],
            )


def zero_target_cases() -> Iterator[Case]:
    last = p_row({1: Fraction(1, 2), 3: Fraction(1, 2)})
    ident = find_ident(lambda i: uniform32_draw(accept_key(i, 1)) < 1 << 22, start=0x2E40)
    yield round_case(
        "depth1-small-draw",
        "p(x_1) = 0 and the acceptance draw is below 2^22: rejected.",
        ("ZERO_TARGET",),
        [RoundInput(ident, [0], [HALF_Q], [last, UNIFORM_P])],
    )
    ident = find_ident(lambda i: uniform32_draw(accept_key(i, 2)) < 1 << 22, start=0x2E41)
    yield round_case(
        "depth2-small-draw",
        "x_1 accepted (p = q); p(x_2) = 0 with a draw below 2^22: rejected.",
        ("ZERO_TARGET",),
        [RoundInput(ident, [1, 0], [HALF_Q, HALF_Q], [q_as_p(HALF_Q), last, UNIFORM_P])],
    )
    # The smallest seed below 2^32 whose acceptance draw is exactly 0, found by an exhaustive offline
    # Philox search (2^32 draws are too many to count up to here); the condition is checked.
    ident = find_ident(lambda i: uniform32_draw(accept_key(i, 1)) == 0, start=ZERO_DRAW_SEED)
    yield round_case(
        "depth1-zero-draw",
        "p(x_1) = 0 and the acceptance draw is u32 = 0: rejected (0 < 0 is false).",
        ("ZERO_TARGET", "EXTREME_DRAW"),
        [RoundInput(ident, [0], [HALF_Q], [last, UNIFORM_P])],
    )
    sparse = sparse_q({0: Fraction(1, 4), 4: Fraction(1, 4), 6: Fraction(1, 2)})
    yield round_case(
        "sparse-zero-target",
        "p(x_1) = 0 for a sparse q; any draw rejects.",
        ("ZERO_TARGET",),
        [
            RoundInput(
                RngIdentity(77, 0, 0, 0), [6], [sparse], [p_row({0: Fraction(1, 2), 5: Fraction(1, 2)}), UNIFORM_P]
            )
        ],
    )


def residual_cases() -> Iterator[Case]:
    half = Fraction(1, 2)
    sparse = sparse_q({1: half, 3: half})
    target = p_row({1: Fraction(1, 4), 3: half, 0: Fraction(1, 8), 6: Fraction(1, 8)})
    ident = find_ident(lambda i: u_accept(i, 1) >= half, start=0x5E51)  # p(1)/q(1) = 1/2: rejected
    yield round_case(
        "outside-support-only",
        "Sparse q on {1, 3}; the whole residual is on tokens 0 and 6, outside the support.",
        ("RESIDUAL_OUTSIDE_SUPPORT",),
        [RoundInput(ident, [1], [sparse], [target, UNIFORM_P])],
        rules=RULES + ("R04",),
    )

    sparse = sparse_q({2: Fraction(1, 4), 5: Fraction(3, 4)})
    target = p_row({2: Fraction(1, 2), 5: Fraction(1, 4), 7: Fraction(1, 4)})
    ident = find_ident(lambda i: u_accept(i, 1) >= Fraction(1, 3) and u_correction(i, 0) >= half, start=0x5E52)
    yield round_case(
        "inside-and-outside-support",
        "Residual halves on token 2 (in the support) and 7 (outside); the draw picks 7.",
        ("RESIDUAL_OUTSIDE_SUPPORT",),
        [RoundInput(ident, [5], [sparse], [target, UNIFORM_P])],
        rules=RULES + ("R04",),
    )

    target = p_row({0: Fraction(0), 1: Fraction(3, 8), 2: Fraction(5, 8)})
    ident = find_ident(lambda i: u_correction(i, 0) < Fraction(3, 8), start=0x5E53)
    yield round_case(
        "full-subtraction",
        "q = (1/2, 1/2) on {0, 1}, p(1) = 3/8 < q(1): the residual is token 2 alone.",
        ("RESIDUAL_FULL_SUBTRACTION",),
        [RoundInput(ident, [0], [HALF_Q], [target, UNIFORM_P])],
    )

    target = p_row({1: half, 2: Fraction(1, 4), 3: Fraction(1, 4)})  # residual: tokens 2 and 3, halves
    for name, low in (("noise-separated-low", True), ("noise-separated-high", False)):

        def separated(ident: RngIdentity, low: bool = low) -> bool:
            wrong = (u_accept(ident, 1), u_proposal_word(ident, 1), u_correction(ident, 1))
            side = u_correction(ident, 0) < half
            return side == low and all((w < half) != low for w in wrong)

        ident = find_ident(separated, start=0x5E54 if low else 0x5E55)
        yield round_case(
            f"correction-{name}",
            "p(x_1) = 0; residual halves on tokens 2 and 3; the correction draw picks "
            + ("2" if low else "3")
            + ", every reused or shifted draw the other.",
            ("NOISE_SEPARATION",),
            [RoundInput(ident, [0], [HALF_Q], [target, UNIFORM_P])],
        )
    yield extreme_correction_case()


def extreme_correction_case() -> Case:
    """A correction draw within 2^-25 of 1 picks the residual's last token, V - 1."""
    ident = find_ident(
        lambda i: uniform32_draw(correction_key(i, 0)) >= U32_LIMIT - FP32_ONE_GAP, start=TOP_CORRECTION_SEED
    )
    target = p_row({1: Fraction(1, 4), 3: Fraction(3, 8), SMALL_VOCAB - 1: Fraction(3, 8)})
    return round_case(
        "correction-top-draw",
        "p(x_1) = 0; the residual is 3/8 on tokens 3 and 7; the correction "
        f"draw is at least 2^32 - 2^7 and picks token {SMALL_VOCAB - 1}, the last.",
        ("EXTREME_DRAW",),
        [RoundInput(ident, [0], [HALF_Q], [target, UNIFORM_P])],
    )


#: a draw lands on its cumulative boundary (offset 0) or one step below or above it
DRAW_OFFSETS = {
    "on-boundary": (0, "u32 * R = C_v * 2^32: the draw picks the token after the boundary"),
    "one-below-boundary": (1, "u32 * R = C_v * 2^32 - R: the token before the boundary"),
    "one-above-boundary": (-1, "u32 * R = C_v * 2^32 + R: the token after the boundary"),
}


def draw_boundary_cases() -> Iterator[Case]:
    """Correction and bonus draws on a cumulative boundary of their row, and one step either side.

    The correction: q = (1/2, 1/2) on {0, 1}, p(0) = 0 rejects x_1 = 0 whatever the draw; p(1) = 1/4 < q(1),
    so the residual is ``a`` on token 2 and ``3/4 - a`` on token 3 (R = 3/4), and ``a = 3 (u32 + offset) / 2^34``
    puts the boundary C_2 / R at ``(u32 + offset) / 2^32``. The bonus: both drafts accepted (p = q) and
    ``p_3 = (b, 1 - b)`` on tokens 6 and 7 with ``b = (u32 + offset) / 2^32``.
    """
    ident = RngIdentity(0xB0E0, 3, 2, 512)
    u32 = uniform32_draw(correction_key(ident, 0))
    assert 2 <= u32 < U32_LIMIT - 2
    for name, (offset, comment) in DRAW_OFFSETS.items():
        share = Fraction(3 * (u32 + offset), 4 * U32_LIMIT)
        target = p_row({1: Fraction(1, 4), 2: share, 3: Fraction(3, 4) - share})
        yield round_case(
            f"correction-{name}",
            f"Residual 3/4 on tokens 2 and 3; {comment}.",
            ("DRAW_ON_BOUNDARY",),
            [RoundInput(ident, [0], [HALF_Q], [target, UNIFORM_P])],
        )
    ident = RngIdentity(0xB0E1, 1, 7, 64)
    u32 = uniform32_draw(correction_key(ident, 2))
    assert 2 <= u32 < U32_LIMIT - 2
    for name, (offset, comment) in DRAW_OFFSETS.items():
        share = Fraction(u32 + offset, U32_LIMIT)
        bonus = p_row({6: share, 7: 1 - share})
        drafts = [sample_qrow(HALF_Q, proposal_draw(proposal_key(ident, i))) for i in (1, 2)]
        yield round_case(
            f"bonus-{name}",
            f"Both drafts accepted; the bonus row is on tokens 6 and 7; {comment}.",
            ("DRAW_ON_BOUNDARY", "FULL_ACCEPTANCE"),
            [RoundInput(ident, drafts, [HALF_Q] * 2, [q_as_p(HALF_Q)] * 2 + [bonus])],
        )


def q_misuse_cases() -> Iterator[Case]:
    q_row = dense_q({0: Fraction(1, 4), 1: Fraction(3, 4)})
    target = p_row({0: Fraction(1, 5), 1: Fraction(3, 5), 2: Fraction(1, 5)})
    ident = find_ident(lambda i: Fraction(1, 5) <= u_accept(i, 1) < Fraction(4, 5), start=0x9A55)
    yield round_case(
        "point-mass-q",
        "q(x) = 1/4, p(x) = 1/5: accepted with ratio 4/5, rejected if q(x) were 1.",
        ("POINT_MASS_Q",),
        [RoundInput(ident, [0], [q_row], [target, UNIFORM_P])],
        rules=RULES + ("R01",),
    )

    target = p_row({0: Fraction(3, 10), 2: Fraction(7, 10)})
    ident = find_ident(lambda i: Fraction(3, 10) <= u_accept(i, 1) < Fraction(3, 5), start=0x4E02)
    yield round_case(
        "renormalized-q",
        "q = (1/2, 1/2) on {0, 1}, p(1) = 0: ratio 3/5, but 3/10 if q were renormalized over p's support.",
        ("RENORMALIZED_Q",),
        [RoundInput(ident, [0], [HALF_Q], [target, UNIFORM_P])],
        rules=RULES + ("R02",),
    )

    first = p_row({0: Fraction(1, 4), 1: Fraction(1, 2), 2: Fraction(1, 4)})
    second = p_row({0: Fraction(1, 2), 1: Fraction(1, 4), 3: Fraction(1, 4)})
    ident = find_ident(lambda i: u_accept(i, 1) < Fraction(1, 2) <= u_accept(i, 2), start=0x0FF1)
    yield round_case(
        "accept-position-separated",
        "Ratio 1/2 at both positions; the draw at anchor accepts x_1, the draw at anchor + 1 rejects.",
        ("POSITION_SEPARATION",),
        [RoundInput(ident, [0, 1], [HALF_Q, HALF_Q], [first, second, UNIFORM_P])],
        rules=RULES + ("R22",),
    )


def full_acceptance_request(ident: RngIdentity, depth: int) -> RoundInput:
    """Drafts with p = q (always accepted); p_K avoids tokens 6, 7 and p_{K+1} lives on them."""
    q_row = dense_q({0: Fraction(1, 4), 1: Fraction(1, 4), 2: Fraction(1, 2)})
    bonus = p_row({6: Fraction(1, 2), 7: Fraction(1, 2)})
    drafts = [sample_qrow(q_row, proposal_draw(proposal_key(ident, i))) for i in range(1, depth + 1)]
    return RoundInput(ident, drafts, [q_row] * depth, [q_as_p(q_row)] * depth + [bonus])


def full_acceptance_cases() -> Iterator[Case]:
    for depth, ident in ((1, RngIdentity(0xF011, 0, 9, 31)), (5, RngIdentity(0xF015, 4, 2, 640))):
        yield round_case(
            f"depth{depth}-bonus",
            f"All {depth} drafts accepted; bonus from p_{depth + 1} at anchor + {depth}.",
            ("FULL_ACCEPTANCE",),
            [full_acceptance_request(ident, depth)],
        )
    one = QRow.dense([M])
    yield round_case(
        "depth2-vocab1",
        "A vocabulary of one token: both drafts accepted, the bonus drawn from a one-entry row.",
        ("FULL_ACCEPTANCE",),
        [RoundInput(RngIdentity(0xF012, 2, 3, 4), [0, 0], [one, one], [[Fraction(1)]] * 3)],
    )


def per_request_parameter_cases() -> Iterator[Case]:
    """Four fully accepted depth-5 requests, each with its own stop tokens and budget; the same
    batch reversed, so that neither the first request's parameters nor the last's fit the others."""
    idents = [RngIdentity(0x5A0 + r, 1 + r, 3, 700 + 100 * r) for r in range(4)]
    requests = [full_acceptance_request(ident, 5) for ident in idents]
    free, budget_2, stopped, budget_4 = requests
    batch = [
        free,
        replace(budget_2, budget=2),
        replace(stopped, stop_tokens=frozenset({stopped.draft_tokens[1]})),
        replace(budget_4, budget=4, stop_tokens=frozenset({6, 7})),
    ]
    yield round_case(
        "per-request-parameters",
        "Four requests: no limit, budget 2, a stop token at x_2, budget 4 "
        "with the bonus tokens as stop tokens; each ends where its own parameters say.",
        ("PER_REQUEST_PARAMETERS", "STOP_TOKEN", "OUTPUT_BUDGET", "FULL_ACCEPTANCE"),
        batch,
    )
    yield round_case(
        "per-request-parameters-reversed",
        "The four requests of per-request-parameters in reverse "
        "order: the budget-4 request first, the unlimited one last.",
        ("PER_REQUEST_PARAMETERS", "STOP_TOKEN", "OUTPUT_BUDGET", "FULL_ACCEPTANCE"),
        batch[::-1],
    )


def stop_budget_cases() -> Iterator[Case]:
    base = full_acceptance_request(RngIdentity(0x570B, 1, 3, 500), 5)
    drafts = base.draft_tokens
    second = drafts[1]
    stop_at = drafts.index(second) + 1
    yield round_case(
        "stop-at-accepted-draft",
        f"Stop token {second}: emission ends after x_{stop_at}.",
        ("STOP_TOKEN",),
        [replace(base, stop_tokens=frozenset({second}))],
    )
    yield round_case(
        "stop-is-bonus",
        "The bonus tokens 6 and 7 are stop tokens: the round ends normally.",
        ("STOP_TOKEN",),
        [replace(base, stop_tokens=frozenset({6, 7}))],
    )
    for budget in (1, 3, 5):
        yield round_case(
            f"budget-{budget}-of-depth-5",
            f"Budget {budget}: {budget} drafts emitted, nothing drawn after.",
            ("OUTPUT_BUDGET",),
            [replace(base, budget=budget)],
        )
    yield round_case(
        "budget-6-bonus-fits",
        "Budget K + 1 = 6: the bonus is drawn and emitted.",
        ("OUTPUT_BUDGET", "FULL_ACCEPTANCE"),
        [replace(base, budget=6)],
    )
    yield from per_request_parameter_cases()
    target = p_row({1: Fraction(1, 2), 3: Fraction(1, 2)})
    ident = RngIdentity(0x570C, 1, 3, 9)
    yield round_case(
        "stop-token-drafted-and-rejected",
        "x_1 = 0 is a stop token but p(0) = 0: rejected, not emitted; the correction is emitted.",
        ("STOP_TOKEN", "ZERO_TARGET"),
        [RoundInput(ident, [0], [HALF_Q], [target, UNIFORM_P], stop_tokens=frozenset({0}))],
    )


def random_request(rng: random.Random, ident: RngIdentity, depth: int = 5) -> RoundInput:
    """A depth-5 request over V = 8: random q rows (dense or sparse), drafts sampled from them with
    the proposal draws, and p rows mixing 3/4 of q with 1/4 of a random row (most drafts accepted)."""
    q_rows, drafts = [], []
    for i in range(1, depth + 1):
        live = sorted(rng.sample(range(SMALL_VOCAB), rng.randint(2, SMALL_VOCAB)))
        cuts = sorted(rng.sample(range(1, M), len(live) - 1))
        shares = {v: Fraction(b - a, M) for v, a, b in zip(live, [0] + cuts, cuts + [M])}
        row = sparse_q(shares) if rng.random() < 0.5 else dense_q(shares)
        q_rows.append(row)
        drafts.append(sample_qrow(row, proposal_draw(proposal_key(ident, i))))
    p_rows = []
    for row in q_rows + [q_rows[-1]]:
        weights = [rng.choice((0, rng.randint(1, 12))) for _ in range(SMALL_VOCAB)]
        weights[rng.randrange(SMALL_VOCAB)] += 1
        p_rows.append([Fraction(3, 4) * q + Fraction(w, 4 * sum(weights)) for q, w in zip(q_as_p(row), weights)])
    return RoundInput(ident, drafts, q_rows, p_rows)


def batch_cases() -> Iterator[Case]:
    rng = random.Random(0xBA7C4)
    idents = [
        RngIdentity(0xA0, 1, 1, 10),
        RngIdentity(0xA1 | 1 << 63, 2, 7, 1000),
        RngIdentity(0xA2, 3, 1 << 31, 20),
        RngIdentity(0xA3, (1 << 32) - 1, 4, (1 << 32) - 3),
    ]
    a, b, c, d = (random_request(rng, ident) for ident in idents)
    yield round_case("four-requests", "Four depth-5 requests.", ("DEPTH5_BATCH",), [a, b, c, d], rules=RULES + ("R27",))
    yield round_case(
        "request-a-alone", "Request A of four-requests, alone.", ("BATCH_INVARIANCE",), [a], rules=RULES + ("R22",)
    )
    yield round_case(
        "request-a-twice",
        "Request A at batch positions 1 and 3.",
        ("BATCH_INVARIANCE",),
        [c, a, b, a],
        rules=RULES + ("R22",),
    )
    yield round_case(
        "request-a-last", "Request A at batch position 4.", ("BATCH_INVARIANCE",), [d, c, b, a], rules=RULES + ("R22",)
    )


def unseeded_json(inp: RoundInput, request_id: str) -> dict:
    """The request object of ``inp`` without a seed: it carries ``request_id`` instead, and the
    spec keys it by ``unseeded_request_seed(request_id)`` (docs/rng-abi.md, *Request seeds*)."""
    obj = request_json(replace(inp, ident=replace(inp.ident, seed=unseeded_request_seed(request_id))))
    del obj["seed"]
    return {"request_id": request_id, **obj}


def seed_cases() -> Iterator[Case]:
    rng = random.Random(0x5EED5)
    template = random_request(rng, RngIdentity(0, 1, 1, 50))
    rules = RULES + ("R22", "R24")
    # The first pair of request IDs whose derived seeds give the two otherwise identical requests
    # different accepted counts: any shared (default) seed gives them one answer.
    for n in range(1000):
        ids = (f"request-{2 * n}", f"request-{2 * n + 1}")
        bodies = [unseeded_json(template, rid) for rid in ids]
        answers = solve({"vocab": SMALL_VOCAB, "requests": bodies})["requests"]
        if answers[0]["accepted"] != answers[1]["accepted"]:
            break
    yield batch_case(
        "unseeded-pair",
        f"Two requests without a seed, identical but for their IDs {ids[0]!r} and "
        f"{ids[1]!r}: each is keyed by the seed its ID derives, so they draw different noise and "
        "accept different counts.",
        ("UNSEEDED_REQUESTS",),
        bodies,
        rules=rules,
    )
    yield batch_case(
        "unseeded-alone",
        f"Request {ids[1]!r} of unseeded-pair, alone.",
        ("UNSEEDED_REQUESTS",),
        [bodies[1]],
        rules=rules,
    )
    other = random_request(rng, RngIdentity(0x5EED, 1, 1, 50))
    shared = replace(template, ident=other.ident)
    yield round_case(
        "explicit-seed-shared",
        "Two different requests with one explicit seed and one generation, "
        "round and anchor: the seed is the request's, so their acceptance draws coincide "
        "(nothing about the request or its batch row enters the key).",
        ("SHARED_EXPLICIT_SEED",),
        [other, shared],
        rules=rules,
    )


def weight_bits(weights: Sequence[int]) -> list[int]:
    """FP32 bit patterns of small nonnegative integer weights (exact in FP32)."""
    return [f32_bits(float(w)) if w else 0 for w in weights]


def production_cases() -> Iterator[Case]:
    rng = random.Random(0x129280)
    # Sparse k = 32 q; p(x) = 0 so x is rejected; p spreads over the support and 40 tokens outside it.
    ids = sorted(rng.sample(range(1, VOCAB - 1), 32))
    counts = [M // 32] * 32
    q_row = QRow.sparse(VOCAB, ids, counts)
    ident = RngIdentity(0x9129280, 6, 11, 123456)
    draft = sample_qrow(q_row, proposal_draw(proposal_key(ident, 1)))
    weights = [0] * VOCAB
    for token in ids:
        weights[token] = rng.choice((1, 2, 3)) * (M // 32)
    weights[draft] = 0
    for token in rng.sample(range(VOCAB), 40) + [VOCAB - 1]:
        if token not in ids:
            weights[token] = rng.randint(1, 1 << 20)
    bonus = [0] * VOCAB
    for token in rng.sample(range(VOCAB), 64):
        bonus[token] = rng.randint(1, 1000)
    bonus_bits = weight_bits(bonus)
    p_rows = encode_p_weights([weight_bits(weights), bonus_bits])
    request = request_json(RoundInput(ident, [draft], [q_row], []), p_rows)
    yield batch_case(
        "sparse-k32-residual-full-vocab",
        "V = 129280, sparse k = 32 q, p(x_1) = 0: the correction comes from the residual over all 129280 tokens.",
        ("PRODUCTION_VOCAB", "RESIDUAL_OUTSIDE_SUPPORT"),
        [request],
        VOCAB,
        RULES + ("R07",),
    )

    # Dense q over 400 tokens; p = q with x's weight removed, so the residual is proportional to q elsewhere.
    live = sorted(rng.sample(range(VOCAB), 400))
    cuts = sorted(rng.sample(range(1, M), len(live) - 1))
    dense = [0] * VOCAB
    for token, count in zip(live, [b - a for a, b in zip([0] + cuts, cuts + [M])]):
        dense[token] = count
    q_row = QRow.dense(dense)
    ident = RngIdentity(0x9129281, 7, 12, 654321)
    draft = sample_qrow(q_row, proposal_draw(proposal_key(ident, 1)))
    weights = list(dense)
    weights[draft] = 0
    p_rows = encode_p_weights([weight_bits(weights), bonus_bits])
    request = request_json(RoundInput(ident, [draft], [q_row], []), p_rows)
    yield batch_case(
        "dense-residual-full-vocab",
        "V = 129280, dense q, p = q without x_1: rejected, the residual is q's shape over the other 399 tokens.",
        ("PRODUCTION_VOCAB",),
        [request],
        VOCAB,
    )


def invalid_case(name: str, comment: str, requests: list[dict], vocab: int = SMALL_VOCAB) -> Case:
    return batch_case(
        name, comment, ("INVALID_REQUEST",), requests, vocab, rules=("R11", "R19", "R27"), result="invalid"
    )


def invalid_cases() -> Iterator[Case]:
    ident = RngIdentity(5, 0, 0, 0)
    sparse = sparse_q({1: Fraction(1, 2), 3: Fraction(1, 2)})
    good = RoundInput(ident, [1], [sparse], [UNIFORM_P, UNIFORM_P])
    request = request_json(good)
    yield invalid_case(
        "zero-q-at-draft", "The draft token 2 lies outside the sparse q support.", [{**request, "draft_tokens": [2]}]
    )
    yield invalid_case(
        "zero-q-above-support",
        "The draft token 5 lies above the whole sparse q support {1, 3}: q(5) = 0.",
        [{**request, "draft_tokens": [5]}],
    )
    yield invalid_case("draft-out-of-range", "Draft token 8 in a vocabulary of 8.", [{**request, "draft_tokens": [8]}])
    short = encode_p_probabilities([UNIFORM_P, [Fraction(1, 16)] * SMALL_VOCAB])
    yield invalid_case("target-row-not-normalized", "The bonus row sums to 1/2.", [{**request, "p_rows": short}])
    yield invalid_case(
        "missing-bonus-row", "K = 1 with one p row.", [{**request, "p_rows": encode_p_probabilities([UNIFORM_P])}]
    )
    yield invalid_case(
        "five-requests", "A batch of five requests exceeds the bound of four (R27).", [request] * (MAX_REQUESTS + 1)
    )
    yield invalid_case("draft-negative", "Draft token -1.", [{**request, "draft_tokens": [-1]}])
    yield invalid_case(
        "stop-token-at-vocab",
        "Stop token 8 in a vocabulary of 8 (the first ID past it).",
        [{**request, "stop_tokens": [SMALL_VOCAB]}],
    )
    yield invalid_case(
        "target-row-short",
        "The first target row has 7 entries in a vocabulary of 8.",
        [{**request, "p_rows": encode_p_probabilities([UNIFORM_P[1:], UNIFORM_P])}],
    )
    negative = [Fraction(-1, 8), Fraction(3, 8)] + UNIFORM_P[2:]  # sums to 1, with numerator -1 at token 0
    yield invalid_case(
        "target-negative-probability",
        "The first target row has p(0) = -1/8 and still sums to 1.",
        [{**request, "p_rows": encode_p_probabilities([negative, UNIFORM_P])}],
    )
    deeper = request_json(RoundInput(ident, [1, 3], [sparse, sparse], [UNIFORM_P] * 3))
    yield invalid_case(
        "mixed-depths", "A batch of a depth-1 and a depth-2 request: one batch, one depth (R27).", [request, deeper]
    )


#: FP32 target weight rows that are no distribution (R10: BAD_TARGET_ROW, whatever the encoding),
#: each the first row of a request whose bonus row is uniform weights.
INVALID_TARGET_WEIGHTS: tuple[tuple[str, str, list[int]], ...] = (
    ("target-weights-all-zero", "The first FP32 target row is all +0.0: no positive weight.", [0] * SMALL_VOCAB),
    (
        "target-weights-negative-zeros",
        "The first FP32 target row is all -0.0: -0.0 is zero, so no positive weight.",
        [F32_SIGN] * SMALL_VOCAB,
    ),
    (
        "target-weight-negative",
        "The first FP32 target row has w(0) = -1.0 among positive weights.",
        [f32_bits(-1.0)] + weight_bits([2] * (SMALL_VOCAB - 1)),
    ),
    (
        "target-weight-negative-subnormal",
        "The first FP32 target row has w(0) = -2^-149, the negative number nearest zero.",
        [F32_SIGN | 1] + weight_bits([1] * (SMALL_VOCAB - 1)),
    ),
    (
        "target-weight-infinity",
        "The first FP32 target row has w(2) = +inf.",
        weight_bits([1, 1]) + [F32_POS_INF] + weight_bits([1] * (SMALL_VOCAB - 3)),
    ),
    (
        "target-weight-nan",
        "The first FP32 target row has w(2) = NaN (the quiet NaN 0x7fc00000).",
        weight_bits([1, 1]) + [0x7FC00000] + weight_bits([1] * (SMALL_VOCAB - 3)),
    ),
    (
        "target-weight-largest-nan",
        "The first FP32 target row has w(2) = 0x7fffffff, the NaN with every fraction bit set.",
        weight_bits([1, 1]) + [0x7FFFFFFF] + weight_bits([1] * (SMALL_VOCAB - 3)),
    ),
)


def request_order_cases() -> Iterator[Case]:
    """A batch is judged request by request: the first refused request decides, by its own earliest row."""
    stop, mass = VERIFICATION_BREAKS.faults[16], VERIFICATION_BREAKS.faults[11]
    for name, faults in (("stop-token-then-q-mass", (stop, mass)), ("q-mass-then-stop-token", (mass, stop))):
        draft = batch_draft(frozenset())
        draft.requests.append(copy.deepcopy(draft.requests[0]))
        draft.requests[1].fields.update(seed="6")
        for index, fault in enumerate(faults):
            # each fault breaks request 0 of a one-request view, then the request moves to its place
            view = BatchDraft(draft.vocab, [draft.requests[index]], draft.unsupported)
            fault(view)
        first = "a stop token equal to V" if faults[0] is stop else "a q row summing to M - 1"
        yield invalid_case(
            f"request-order-{name}",
            f"Request 0 has {first}, request 1 the other fault: the batch is refused with request 0's code "
            "(request by request, in batch order; not the earlier row across the batch).",
            draft.input_json()["requests"],
        )
    draft = batch_draft(frozenset())
    draft.requests[0].fields.pop("seed")
    yield invalid_case(
        "neither-seed-nor-request-id",
        "A request with neither a seed nor a request ID: BAD_REQUEST_ID (R24), never a default seed.",
        draft.input_json()["requests"],
    )


def target_weight_cases() -> Iterator[Case]:
    """FP32 target weight rows: -0.0 is zero; rows that are no distribution refuse BAD_TARGET_ROW (R10)."""
    ident = RngIdentity(5, 0, 0, 0)
    sparse = sparse_q({1: Fraction(1, 2), 3: Fraction(1, 2)})
    uniform = weight_bits([1] * SMALL_VOCAB)
    weights = [F32_SIGN, f32_bits(1.0), F32_SIGN, f32_bits(3.0)] + [F32_SIGN] * (SMALL_VOCAB - 4)
    request = request_json(RoundInput(ident, [1], [sparse], []), encode_p_weights([weights, uniform]))
    yield batch_case(
        "negative-zero-weights",
        "The first FP32 target row is -0.0 everywhere but w(1) = 1 and w(3) = 3: p = (0, 1/4, 0, 3/4, 0, ...).",
        ("TARGET_WEIGHTS",),
        [request],
    )
    for name, comment, first in INVALID_TARGET_WEIGHTS:
        yield batch_case(
            name,
            comment,
            ("TARGET_WEIGHTS", "INVALID_REQUEST"),
            [{**request, "p_rows": encode_p_weights([first, uniform])}],
            rules=("R10", "R11"),
            result="invalid",
        )


def build() -> Iterator[Group]:
    yield Group(
        "acceptance_boundary",
        "Acceptance draws on, and one step either side of, 2^32 p/q.",
        RULES,
        list(boundary_cases()),
    )
    yield Group("zero_target", "Drafts with p(x) = 0.", RULES, list(zero_target_cases()))
    yield Group(
        "residual", "Correction draws from the full-vocabulary residual.", RULES + ("R04",), list(residual_cases())
    )
    yield Group(
        "draw_boundaries",
        "Correction and bonus draws on a cumulative boundary, and one step either side.",
        RULES,
        list(draw_boundary_cases()),
    )
    yield Group(
        "q_misuse",
        "The q that sampled, used exactly: no point mass, no renormalization.",
        RULES + ("R01", "R02", "R22"),
        list(q_misuse_cases()),
    )
    yield Group("full_acceptance", "Every draft accepted; the bonus.", RULES, list(full_acceptance_cases()))
    yield Group(
        "stop_and_budget",
        "Stop tokens and output budgets end emission without further draws.",
        RULES,
        list(stop_budget_cases()),
    )
    yield Group(
        "batches",
        "Depth-5 batches of up to four requests; batch invariance.",
        RULES + ("R22", "R27"),
        list(batch_cases()),
    )
    yield Group(
        "request_seeds",
        "Unseeded requests are keyed by the seed their IDs derive; an explicit seed "
        "is used as given, shared or not (docs/rng-abi.md, Request seeds).",
        RULES + ("R22", "R24"),
        list(seed_cases()),
    )
    yield Group(
        "production_vocab",
        "Residual sampling over V = 129280 with FP32 target weights.",
        RULES + ("R07",),
        list(production_cases()),
    )
    yield Group(
        "target_weights",
        "FP32 target weight rows: -0.0 is zero; a NaN, an infinity, a negative weight or no positive weight "
        "refuses BAD_TARGET_ROW (R10).",
        ("R10", "R11"),
        list(target_weight_cases()),
    )
    yield Group(
        "invalid_requests",
        "Requests refused before any draw.",
        ("R11", "R19", "R27"),
        list(invalid_cases()) + list(request_order_cases()),
    )
    yield Group(
        "precedence",
        "Every refusal row alone and every pair that can fail together: the earlier row's code.",
        ("R10", "R19", "R24", "R27"),
        list(precedence.precedence_cases(VERIFICATION_BREAKS, solve, ("R10", "R19", "R24", "R27"))),
    )


@dataclass
class RequestDraft:
    """One request being broken: its q rows as ``RowDraft``s and its target rows as exact rationals."""

    drafts: list[int]
    q_rows: list[RowDraft]
    p_rows: list[list[Fraction]]
    fields: dict = field(default_factory=lambda: {"seed": "5", "generation": 1, "round": 1, "anchor": 100})

    def to_json(self) -> dict:
        return {
            **self.fields,
            "draft_tokens": list(self.drafts),
            "q_rows": [encode_draft(row)["row"] for row in self.q_rows],
            "p_rows": encode_p_probabilities(self.p_rows),
        }


@dataclass
class BatchDraft:
    vocab: int
    requests: list[RequestDraft]
    #: a token of count 0 in every q row of the base
    unsupported: int

    def input_json(self) -> dict:
        return {"vocab": self.vocab, "requests": [r.to_json() for r in self.requests]}


#: ``refusal_order.VERIFICATION_REFUSALS`` rows 6-11 are ``QROW_REFUSALS`` rows 1-6 on a request's first q row.
QROW_ROW_OFFSET = 5


def batch_draft(rows: frozenset[int]) -> BatchDraft:
    """A valid one-request batch of depth 2: dense q rows at V = 4 when the dense-only row is broken, else sparse."""
    if 6 in rows:
        q, drafts, unsupported = RowDraft(4, False, [], [M // 2, M // 4, M // 4, 0]), [1, 0], 3
    else:
        q, drafts, unsupported = RowDraft(8, True, [1, 3, 5, 6], [M // 2, M // 4, M // 8, M // 8]), [1, 3], 2
    uniform = [Fraction(1, q.vocab)] * q.vocab
    request = RequestDraft(drafts, [copy.deepcopy(q) for _ in drafts], [list(uniform) for _ in range(3)])
    return BatchDraft(q.vocab, [request], unsupported)


def five_requests(d: BatchDraft) -> None:
    d.requests += [copy.deepcopy(d.requests[0]) for _ in range(MAX_REQUESTS + 1 - len(d.requests))]


def deeper_request(d: BatchDraft) -> None:
    """A second request with one more draft (valid on its own)."""
    other = copy.deepcopy(d.requests[0])
    other.drafts.append(other.drafts[-1])
    other.q_rows.append(copy.deepcopy(other.q_rows[-1]))
    other.p_rows.append(list(other.p_rows[-1]))
    d.requests.append(other)


def nine_drafts(d: BatchDraft) -> None:
    """Request 0 extended to K = 9 (each list by the same count, so a count mismatch stays)."""
    request, extra = d.requests[0], 9 - len(d.requests[0].drafts)
    request.drafts += [request.drafts[-1]] * extra
    request.q_rows += [copy.deepcopy(request.q_rows[-1]) for _ in range(extra)]
    request.p_rows += [list(request.p_rows[-1]) for _ in range(extra)]


def first_request(fault: Callable[[RequestDraft], object]) -> Callable[[BatchDraft], object]:
    return lambda d: fault(d.requests[0])


def qrow_fault(n: int) -> Callable[[BatchDraft], object]:
    return lambda d: ROW_BREAKS.faults[n - QROW_ROW_OFFSET](d.requests[0].q_rows[0])


def heavier_first_entry(request: RequestDraft) -> None:
    request.p_rows[0][0] += Fraction(1, 8)


VERIFICATION_BREAKS = precedence.Breaks[BatchDraft](
    family="verification_round",
    base=batch_draft,
    faults={
        1: five_requests,
        2: deeper_request,
        3: nine_drafts,
        4: first_request(lambda r: r.fields.update(request_id="r")),
        5: first_request(lambda r: r.p_rows.pop()),
        **{n: qrow_fault(n) for n in range(6, 12)},
        12: first_request(lambda r: r.p_rows[1].pop()),
        13: first_request(heavier_first_entry),
        14: lambda d: d.requests[0].drafts.__setitem__(1, d.vocab),
        15: lambda d: d.requests[0].drafts.__setitem__(0, d.unsupported),
        16: lambda d: d.requests[0].fields.update(stop_tokens=[d.vocab]),
        17: first_request(lambda r: r.fields.update(budget=0)),
    },
    encode=BatchDraft.input_json,
    exclusive=frozenset(frozenset(n + QROW_ROW_OFFSET for n in pair) for pair in ROW_BREAKS.exclusive),
    why="a q row is dense or sparse (categorical_sampling's exclusive pair)",
)


NONNEG = {"type": "integer", "minimum": 0}
TOKENS = {"type": "array", "items": NONNEG}

REQUEST_SCHEMA = closed(
    {
        "seed": {"$ref": "#/$defs/u64"},
        "request_id": {"type": "string"},
        "generation": NONNEG,
        "round": NONNEG,
        "anchor": NONNEG,
        "draft_tokens": {"type": "array", "items": {"type": "integer"}, "minItems": 1},
        "q_rows": {"type": "array", "items": {"$ref": "#/$defs/qRow"}, "minItems": 1},
        "p_rows": {"$ref": "#/$defs/pRows"},
        "stop_tokens": TOKENS,
        "budget": {"type": "integer", "minimum": 0},
    },
    required=["anchor", "draft_tokens", "generation", "p_rows", "q_rows", "round"],
)

DRAW_SCHEMA = closed(
    {
        "domain": {"enum": ["ACCEPT", "CORRECTION"]},
        "position": NONNEG,
        "draw_counter": NONNEG,
        "u32": {"type": "integer", "minimum": 0, "maximum": U32_LIMIT - 1},
        "decision": {"enum": ["accept", "reject", "correction", "bonus"]},
        "token": NONNEG,
        "margin": {"$ref": "#/$defs/rational"},
    }
)

RESULT_SCHEMA = closed({"accepted": NONNEG, "emitted": TOKENS, "draws": {"type": "array", "items": DRAW_SCHEMA}})


# --- fuzzing and statistical mode ---------------------------------------------------------------


def fuzz_strategy() -> SearchStrategy[dict]:
    from qconform.generators import fuzz_inputs

    return fuzz_inputs.verification_inputs()


def fuzz_labels(case_input: dict, expected: dict) -> Labels:
    """Rules, and the flags the answer shows: a reject exactly on the boundary, stops, budgets."""
    requests = case_input["requests"]
    draws = [d for r in expected.get("requests", ()) for d in r["draws"]]
    flags = ("ACCEPT_BOUNDARY",) if any(d["decision"] == "reject" and d["margin"] == "0/1" for d in draws) else ()
    flags += ("STOP_TOKEN",) if any("stop_tokens" in r for r in requests) else ()
    flags += ("OUTPUT_BUDGET",) if any("budget" in r for r in requests) else ()
    rules = RULES + (("R27",) if len(requests) > 1 else ())
    return rules, flags


def outcome_laws(case_input: dict) -> list[Law]:
    """The exact law of ``(accepted, emitted)`` of each request of a case, its drafts given
    (one histogram per request in a ``sample`` answer)."""
    vocab = case_input["vocab"]
    return [request_outcome_law(decode_request(request, vocab)) for request in case_input["requests"]]


FAMILY = Family(
    name="verification_round",
    description="Standard speculative verification of a batch of rounds, every draw pinned (R11, R23, R33).",
    rules=("R01", "R02", "R04", "R07", "R10", "R11", "R19", "R22", "R23", "R24", "R27", "R33"),
    notes=NOTES,
    build=build,
    solve=solve,
    margins=("margin",),
    input_schema=closed(
        {
            "vocab": {"type": "integer", "minimum": 1},
            "requests": {"type": "array", "items": REQUEST_SCHEMA, "minItems": 1},
        }
    ),
    expected_schema={
        "oneOf": [
            closed({"requests": {"type": "array", "items": RESULT_SCHEMA, "minItems": 1}}),
            closed({"error": {"enum": sorted({row.code for row in VERIFICATION_REFUSALS})}}),
        ]
    },
    comparator="verification",
    fuzz=FuzzHooks(inputs=fuzz_strategy, labels=fuzz_labels),
    stat=StatHooks(per_request=True, laws=outcome_laws),
    precedence=VERIFICATION_BREAKS,
)
