"""Vector family ``proposal_chain``: the worker's side of a round, end to end (R01, R05-R08, R15, R22, R35).

Each case hands the RNG identity, the fixed depth K, the last committed token
``x_0``, the draft temperature, the support policy, K rows of base logits and
the low-rank Markov factors. The implementation must produce, position by
position: the Markov bias from the previous token, the weights
(``weights_from_logits``), the dyadic24 counts (dense or top-k), the proposal
draw at ``proposal_key(identity, i)``, and the sampled token that conditions
the next row. Expected (:func:`solve` of the input): the K tokens, the K q
rows, the draws (counter words and u24), and per row the exp margin, the tie
gap and ``fp64_may_differ`` (whether the design's FP64 allocation recipe may
legitimately allocate the row otherwise, exactly as ``allocation_dense`` /
``allocation_sparse`` record it for the same row).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from itertools import accumulate
from typing import Callable, Iterator, Sequence

from qconform.generators import precedence
from qconform.generators.encoding import (
    decode_blob,
    decode_f32,
    decode_rational,
    decode_u64,
    encode_blob,
    encode_f32,
    encode_rational,
    encode_u64,
    encode_word,
    f32_bits,
)
from qconform.generators.families.categorical_sampling import decode_qrow, encode_qrow
from qconform.generators.registry import Case, Family, Group, Note
from qconform.generators.schemas import blob_schema
from qconform.generators.schemas import closed_object as closed
from qconform.spec.constants import DEPTH, M
from qconform.spec.errors import SpecError, refuse
from qconform.spec.floats import F32_NEG_INF, F32_POS_INF, F32_QUIET_NAN
from qconform.spec.markov import markov_bias_f32
from qconform.spec.proposal import (
    ProposalInput,
    ProposalResult,
    SupportPolicy,
    proposal_chain,
    proposal_row,
)
from qconform.spec.qrow import QRow
from qconform.spec.refusal_order import PROPOSAL_CHAIN_REFUSALS
from qconform.spec.rng_abi import RngIdentity, proposal_draw, proposal_key

RULES = ("R01", "R05", "R06", "R08", "R15", "R22", "R35")

NOTES = {
    precedence.FLAG: precedence.NOTE,
    "PREFIX_CONDITIONED": Note(
        "FUNCTIONALITY",
        "Row 2 would have different counts had x_1 been another token of positive q: q depends on the sampled "
        "prefix through the Markov bias (R01, R15).",
        "Catches a q that is not conditioned on the sampled prefix (rows computed from the committed prefix only, "
        "or from a peer's own choice of token, R22).",
    ),
    "NO_MARKOV": Note(
        "BASIC",
        "All-zero Markov factors: every row depends only on its base logits.",
        "Control case separating logit/allocation errors from Markov errors.",
    ),
    "DENSE_CHAIN": Note("BASIC", "Dense q rows.", "General agreement with the chain."),
    "TOP_K_CHAIN": Note(
        "FUNCTIONALITY",
        "Top-k sparse q rows (R07); the support may change from row to row.",
        "Catches a support chosen once per round instead of per conditioned row.",
    ),
    "MASKED_LOGITS": Note(
        "FUNCTIONALITY",
        "Some base logits are -inf masks; the bias is added to them and they stay masked (R05).",
        "Catches -inf + bias turning into NaN or a finite logit.",
    ),
    "POSITION_WRAP": Note(
        "EDGE_CASE",
        "The anchor is 2^32 - 2: the draw positions anchor + i - 1 wrap modulo 2^32.",
        "Catches 64-bit or signed positions in counter word 0.",
    ),
    "SEED_HIGH_WORD": Note(
        "EDGE_CASE",
        "The 64-bit seed has high bits set (key word 1 nonzero).",
        "Catches a seed truncated to 32 bits.",
    ),
    "EXACT_TIE": Note(
        "EDGE_CASE",
        "A row's fractional parts tie exactly at the ticket threshold (tie_gap = 0): the lowest token ID wins "
        "(R06). Here the tied tokens have equal weights, which FP64 gives equal quotas, so fp64_may_differ is false.",
        "Catches ties broken by highest ID, by sort instability or by thread order, in an FP64 implementation too.",
    ),
    "DRAW_ON_BOUNDARY": Note(
        "EDGE_CASE",
        "Row 1's proposal draw is a cumulative count C_v of its own q row, or C_v - 1: the first draw of token "
        "v + 1, or the last of token v (R08). The seed was searched for it.",
        "Catches a chain that samples from another q than the one it sends (a bf16 softmax, a re-normalized or "
        "re-quantized row, DeepSpec #31) and an inclusive cumulative search, which random draws rarely expose.",
    ),
    "TEMPERATURE": Note(
        "FUNCTIONALITY",
        "Draft temperature other than 1.",
        "Catches the temperature applied after the bias shift, to the target instead, or not at all.",
    ),
    "SUBNORMAL_BIAS": Note(
        "EDGE_CASE",
        "The Markov products are FP32 subnormals (2^-100 times 2^-49 .. 2^-40) and the draft temperature is "
        "2^-126, so a bias of a few units of 2^-149 moves the scaled logits by up to 2^-14 and changes the counts.",
        "Catches subnormals flushed to zero in the bias, and an accumulator that does not start from +0.0.",
    ),
    "FP32_PRODUCT_EDGES": Note(
        "EDGE_CASE",
        "FP32 operands at the edges of their encodings, built so that each reaches the answer: Markov products "
        "of the smallest subnormal 2^-149 (significand 1) by 2^23 (exponent field of the last significand "
        "bit 0), in both orders, and base logits of one unit 2^-149 plus a +0 bias, all scaled to small s by a "
        "subnormal temperature.",
        "Catches a multiplier that treats a significand of 1 (the smallest subnormal) or an operand in "
        "[2^23, 2^24) as a zero, and an adder that turns a positive sum of one unit of its grid into +0.",
    ),
    "SHORTEST_CHAIN": Note(
        "EDGE_CASE",
        "Depth K = 1: one row, conditioned on the committed token only.",
        "Catches a chain that needs two rows, or refuses or pads a depth-1 round.",
    ),
    "INVALID_CHAIN": Note(
        "MALFORMED_INPUT",
        "A chain the worker must refuse: depth 0, base logits or Markov factors whose shapes disagree "
        "(BAD_SHAPE), a top-k support with k > V (BAD_SUPPORT_SIZE), or a last committed token outside 0..V-1 "
        "(TOKEN_OUT_OF_RANGE).",
        "Catches an empty answer to depth 0, factors read past (or short of) their rank or vocabulary, and a "
        "token -1 that indexes the last Markov row instead of being refused.",
    ),
}


def random_matrix(rng: random.Random, rows: int, cols: int, scale: float) -> list[list[int]]:
    """FP32 entries uniform on a 2^-16 grid in [-2 scale, 2 scale) (integer draws only, no libm)."""
    return [[f32_bits(scale * rng.randrange(-1 << 17, 1 << 17) / 65536) for _ in range(cols)] for _ in range(rows)]


def matrix_blob(rows: Sequence[Sequence[int]]) -> dict:
    """An ``f32[R, C]`` blob of R rows of FP32 bit patterns."""
    return encode_blob("f32", [b for row in rows for b in row], [len(rows), len(rows[0]) if rows else 0])


def matrix_rows(blob: dict) -> list[list[int]]:
    """The rows of an ``f32[R, C]`` blob (``BAD_SHAPE`` for another rank)."""
    flat, shape = decode_blob(blob, "f32")
    if len(shape) != 2:
        raise refuse("BAD_SHAPE", f"a matrix blob has shape {shape}, need [rows, columns]")
    columns = shape[1]
    return [flat[r * columns : (r + 1) * columns] for r in range(shape[0])]


def encode_input(inp: ProposalInput) -> dict:
    """The case input of a chain."""
    ident = inp.identity
    support = {"policy": "dense"} if inp.support.k is None else {"policy": "top_k", "k": inp.support.k}
    return {
        "seed": encode_u64(ident.seed),
        "generation": ident.generation,
        "round": ident.round,
        "anchor": ident.anchor,
        "depth": len(inp.base_logits),
        "last_committed_token": inp.last_committed_token,
        "temperature": encode_f32(inp.temperature_bits),
        "support": support,
        "base_logits": matrix_blob(inp.base_logits),
        "markov": {"left": matrix_blob(inp.markov_left), "right": matrix_blob(inp.markov_right)},
    }


def decode_input(case_input: dict) -> ProposalInput:
    """The spec's :class:`ProposalInput` of a case input; ``depth`` must be the number of logit rows."""
    base_logits = matrix_rows(case_input["base_logits"])
    if case_input["depth"] != len(base_logits):
        raise refuse("BAD_SHAPE", f"depth {case_input['depth']} with {len(base_logits)} base logit rows")
    support = case_input["support"]
    return ProposalInput(
        base_logits=base_logits,
        markov_left=matrix_rows(case_input["markov"]["left"]),
        markov_right=matrix_rows(case_input["markov"]["right"]),
        last_committed_token=case_input["last_committed_token"],
        temperature_bits=decode_f32(case_input["temperature"]),
        support=SupportPolicy(support["policy"], support.get("k")),
        identity=RngIdentity(
            decode_u64(case_input["seed"]), case_input["generation"], case_input["round"], case_input["anchor"]
        ),
    )


def encode_result(result: ProposalResult) -> dict:
    """The expected object of a chain."""
    return {
        "tokens": result.tokens,
        "rows": [encode_qrow(row.q) for row in result.rows],
        "draws": [
            {"position": row.draw.position, "counter": [encode_word(w) for w in row.draw.counter], "u24": row.draw.u24}
            for row in result.rows
        ],
        "exp_margin_ulp": [encode_rational(row.exp_margin_ulp) for row in result.rows],
        "tie_gap": [encode_rational(row.tie_gap) for row in result.rows],
        "fp64_may_differ": [row.fp64_may_differ for row in result.rows],
    }


def solve(case_input: dict) -> dict:
    """The spec's answer to one chain input: tokens, q rows, draws and margins, or the refusal code."""
    try:
        return encode_result(proposal_chain(decode_input(case_input)))
    except SpecError as error:
        return {"error": error.code}


def prefix_conditioned(inp: ProposalInput, tokens: list[int], rows: list[QRow]) -> bool:
    """Whether row 2 would have other counts for some other token x_1 of positive q."""
    if len(rows) < 2:
        return False
    for token, _ in rows[0].support():
        if token == tokens[0]:
            continue
        bias = markov_bias_f32(token, inp.markov_left, inp.markov_right)
        alternative = proposal_row(inp.base_logits[1], bias, inp.temperature_bits, inp.support)[0]
        if alternative != rows[1]:
            return True
    return False


def chain_case(name: str, comment: str, flags: tuple[str, ...], inp: ProposalInput) -> Case:
    """A case whose expected answer is :func:`solve` of the chain's input; PREFIX_CONDITIONED
    is computed from the answer's first two rows, EXACT_TIE from its tie gaps."""
    case_input = encode_input(inp)
    expected = solve(case_input)
    assert "error" not in expected, (name, expected)
    vocab = len(inp.markov_left)
    rows = [decode_qrow(row, vocab) for row in expected["rows"]]
    if prefix_conditioned(inp, expected["tokens"], rows):
        flags += ("PREFIX_CONDITIONED",)
    if any(decode_rational(gap) == 0 for gap in expected["tie_gap"]):
        flags += ("EXACT_TIE",)
    return Case(
        name=name,
        comment=comment,
        rules=RULES + (("R07",) if inp.support.k else ()),
        flags=tuple(dict.fromkeys(flags)),
        input=case_input,
        expected=expected,
    )


def make_input(
    seed: int,
    vocab: int,
    rank: int,
    markov_scale: float,
    temperature: float,
    support: SupportPolicy,
    identity: RngIdentity,
    masks: int = 0,
) -> ProposalInput:
    """A deterministic chain input: Gaussian base logits and Markov factors from ``seed``."""
    rng = random.Random(seed)
    logits = random_matrix(rng, DEPTH, vocab, 2.0)
    for row in logits:
        for v in rng.sample(range(vocab), masks):
            row[v] = F32_NEG_INF
    left = random_matrix(rng, vocab, rank, markov_scale)
    right = random_matrix(rng, rank, vocab, markov_scale)
    last = rng.randrange(vocab)
    return ProposalInput(logits, left, right, last, f32_bits(temperature), support, identity)


def tied_input(seed: int, vocab: int, support: SupportPolicy, identity: RngIdentity) -> ProposalInput:
    """A chain without Markov bias whose base logits take three values only: equal
    logits give equal weights, whose fractional parts tie exactly."""
    rng = random.Random(seed)
    values = [f32_bits(x) for x in (0.5, -1.25, 2.0)]
    logits = [[rng.choice(values) for _ in range(vocab)] for _ in range(DEPTH)]
    zero_left = [[f32_bits(0.0)] for _ in range(vocab)]
    zero_right = [[f32_bits(0.0)] * vocab]
    return ProposalInput(logits, zero_left, zero_right, rng.randrange(vocab), f32_bits(1.0), support, identity)


def chain_cases() -> Iterator[Case]:
    ident = RngIdentity(seed=20240607, generation=1, round=3, anchor=1000)
    yield chain_case(
        "dense-v32-r2",
        "Dense rows over V = 32, rank-2 Markov head, T = 1.",
        ("DENSE_CHAIN",),
        make_input(0xC4A1, 32, 2, 1.5, 1.0, SupportPolicy.dense(), ident),
    )
    yield chain_case(
        "dense-v256-r4-t0.6",
        "Dense rows over V = 256, rank 4, T = 0.6.",
        ("DENSE_CHAIN", "TEMPERATURE"),
        make_input(0xC4A2, 256, 4, 1.0, 0.6, SupportPolicy.dense(), ident),
    )
    yield chain_case(
        "topk16-v512-r4",
        "Top-16 rows over V = 512.",
        ("TOP_K_CHAIN",),
        make_input(0xC4A3, 512, 4, 1.2, 1.0, SupportPolicy.top_k(16), ident),
    )
    yield chain_case(
        "topk32-v1024-r8-t1.7",
        "Top-32 rows (the initial sparse candidate) over V = 1024, T = 1.7.",
        ("TOP_K_CHAIN", "TEMPERATURE"),
        make_input(0xC4A4, 1024, 8, 0.8, 1.7, SupportPolicy.top_k(32), ident),
    )
    yield chain_case(
        "dense-v64-masked",
        "Dense rows with eight masked base logits per row.",
        ("DENSE_CHAIN", "MASKED_LOGITS"),
        make_input(0xC4A5, 64, 3, 1.5, 1.0, SupportPolicy.dense(), ident, masks=8),
    )
    yield chain_case(
        "dense-v48-no-markov",
        "Zero Markov factors: rows are independent of the prefix.",
        ("DENSE_CHAIN", "NO_MARKOV"),
        make_input(0xC4A6, 48, 2, 0.0, 1.0, SupportPolicy.dense(), ident),
    )
    one = make_input(0xC4A9, 32, 2, 1.5, 1.0, SupportPolicy.dense(), ident)
    yield chain_case(
        "dense-v32-depth1",
        "Depth K = 1 over V = 32: the shortest chain, one row conditioned on x_0.",
        ("DENSE_CHAIN", "SHORTEST_CHAIN"),
        replace(one, base_logits=one.base_logits[:1]),
    )


def identity_cases() -> Iterator[Case]:
    wrap = RngIdentity(seed=7, generation=2, round=9, anchor=(1 << 32) - 2)
    yield chain_case(
        "anchor-wraps",
        "Anchor 2^32 - 2: positions 2^32 - 2, 2^32 - 1, 0, 1, 2.",
        ("DENSE_CHAIN", "POSITION_WRAP"),
        make_input(0xC4B1, 16, 2, 2.0, 1.0, SupportPolicy.dense(), wrap),
    )
    high = RngIdentity(seed=0xFEDCBA9876543210, generation=0xFFFFFFFF, round=0, anchor=5)
    yield chain_case(
        "seed-high-word",
        "A seed above 2^32 and the largest generation.",
        ("TOP_K_CHAIN", "SEED_HIGH_WORD"),
        make_input(0xC4B2, 128, 2, 2.0, 1.0, SupportPolicy.top_k(8), high),
    )


def tie_cases() -> Iterator[Case]:
    ident = RngIdentity(seed=20240607, generation=1, round=3, anchor=1000)
    yield chain_case(
        "dense-v7-equal-logits",
        "Three logit values over V = 7: rows tie exactly between equal weights.",
        ("DENSE_CHAIN", "NO_MARKOV"),
        tied_input(0xC4A7, 7, SupportPolicy.dense(), ident),
    )
    yield chain_case(
        "topk5-v12-equal-logits",
        "Top-5 of three logit values over V = 12: selection and allocation ties.",
        ("TOP_K_CHAIN", "NO_MARKOV"),
        tied_input(0xC4A8, 12, SupportPolicy.top_k(5), ident),
    )


def subnormal_bias_input(identity: RngIdentity) -> ProposalInput:
    """A chain whose Markov bias is FP32 subnormal and matters: every left row is
    ``[2^-100]``, the right row holds 0 and +-2^-49 .. 2^-40, so the bias of every
    token is 0 or a product of at most 2^-140; the base logits are 0 and +-2^-126 ..
    3 * 2^-126 and the temperature 2^-126, which scales them (and the bias) to
    ``|s| <= 3``. Flushing the subnormal bias to zero, or starting the accumulator at
    another value than +0.0, changes the counts of row 1 (and of later rows)."""
    logits = [f32_bits(x * 2.0**-126) for x in (2, 2, -2, 0, 3, 2, -1, 3)]
    right = [[f32_bits(x) for x in (2.0**-40, 2.0**-49, -(2.0**-45), 0.0, -(2.0**-47), 0.0, 0.0, 0.0)]]
    left = [[f32_bits(2.0**-100)] for _ in logits]
    rows = [logits, logits[::-1], logits[2:] + logits[:2]]
    return ProposalInput(rows, left, right, 3, f32_bits(2.0**-126), SupportPolicy.dense(), identity)


def subnormal_cases() -> Iterator[Case]:
    yield chain_case(
        "dense-v8-subnormal-bias",
        "Subnormal Markov products and T = 2^-126 over V = 8, depth 3: the bias of a few 2^-149 units moves "
        "the counts.",
        ("DENSE_CHAIN", "SUBNORMAL_BIAS", "TEMPERATURE"),
        subnormal_bias_input(RngIdentity(seed=0x5AB, generation=1, round=1, anchor=0)),
    )


#: The FP32 smallest subnormal 2^-149 (significand 1) and 2^23 (significand 2^23, last-bit exponent 0).
SMALLEST_SUBNORMAL, TWO_TO_23 = 1, f32_bits(2.0**23)


def product_edges_input(identity: RngIdentity) -> ProposalInput:
    """A chain whose Markov bias is built from products at the FP32 encoding's edges.

    Every left row is ``[2^-149, 2^23]`` and the right factor's rows are ``2^23`` and
    ``2^-149`` on the tokens of ``BIASED`` (+0 elsewhere), so each such token's bias is
    ``f32(f32(+0 + 2^-149 * 2^23) + 2^23 * 2^-149) = 2^-126 + 2^-126 = 2^-125``: one product
    whose first operand has significand 1 (the smallest subnormal) and second an exponent
    of 0 (``[2^23, 2^24)``), and one the other way round, both exact. A multiplier that
    takes either operand for a zero drops one product: a bias of 2^-126. The base logits
    are small multiples of 2^-126 and T = 2^-126, so ``s_v = k_v + 2`` on a biased token
    (``k_v + 1`` with a product dropped): every row's counts move.
    """
    biased = (1, 4, 6)
    logits = [f32_bits(k * 2.0**-126) for k in (1, 0, -1, 2, 0, 1, -2, 0)]
    right = [
        [TWO_TO_23 if v in biased else 0 for v in range(len(logits))],
        [SMALLEST_SUBNORMAL if v in biased else 0 for v in range(len(logits))],
    ]
    left = [[SMALLEST_SUBNORMAL, TWO_TO_23] for _ in logits]
    rows = [logits, logits[::-1], logits[3:] + logits[:3]]
    return ProposalInput(rows, left, right, 2, f32_bits(2.0**-126), SupportPolicy.dense(), identity)


def one_unit_sum_input(identity: RngIdentity) -> ProposalInput:
    """A chain whose ``logit + bias`` sums are positive and one unit of their grid.

    No Markov bias (zero factors: every bias is +0) and base logits ``k * 2^-149`` with
    ``k`` in 0..3, so ``f32(logit + bias)`` on a logit of exactly 2^-149 is the exact sum of
    one unit of 2^-149 (the only sum of the spec that can be a positive single unit: every
    other sum is ``s_v - max <= 0`` or a Markov accumulation). T = 2^-149 scales it to
    ``s_v = k``: an adder that rounds that sum to +0 gives ``s_v = 0`` instead of 1.
    """
    logits = [SMALLEST_SUBNORMAL * k for k in (1, 0, 3, 1, 2, 0, 1, 2)]
    zero_left = [[0] for _ in logits]
    zero_right = [[0] * len(logits)]
    rows = [logits, logits[::-1], logits[2:] + logits[:2]]
    return ProposalInput(rows, zero_left, zero_right, 5, SMALLEST_SUBNORMAL, SupportPolicy.dense(), identity)


def product_edge_cases() -> Iterator[Case]:
    identity = RngIdentity(seed=0xF32E, generation=1, round=2, anchor=7)
    yield chain_case(
        "markov-products-smallest-subnormal-and-2-to-23",
        "Markov products 2^-149 x 2^23 and 2^23 x 2^-149 (exact, 2^-126 each) over V = 8, depth 3, T = 2^-126: "
        "s_v = k_v + 2 on tokens 1, 4 and 6.",
        ("DENSE_CHAIN", "FP32_PRODUCT_EDGES", "TEMPERATURE"),
        product_edges_input(identity),
    )
    yield chain_case(
        "logit-plus-bias-one-unit",
        "Base logits k x 2^-149 (k = 0..3) plus a +0 bias over V = 8, depth 3, T = 2^-149: a logit of 2^-149 "
        "is a one-unit sum, s_v = k_v.",
        ("DENSE_CHAIN", "FP32_PRODUCT_EDGES", "NO_MARKOV", "TEMPERATURE"),
        one_unit_sum_input(identity),
    )


def invalid_case(name: str, comment: str, inp: ProposalInput, code: str, vocab_of_logits: int | None = None) -> Case:
    """A chain the spec refuses with ``code``; ``vocab_of_logits`` gives the width of an
    empty (depth-0) base-logits blob."""
    case_input = encode_input(inp)
    if vocab_of_logits is not None:
        case_input["base_logits"] = encode_blob("f32", [], [0, vocab_of_logits])
    expected = solve(case_input)
    assert expected == {"error": code}, (name, expected)
    return Case(
        name=name,
        comment=comment,
        rules=("R01", "R05", "R35") + (("R07",) if inp.support.k else ()),
        flags=("INVALID_CHAIN",),
        input=case_input,
        expected=expected,
        result="invalid",
    )


#: The FP32 quiet NaN.
F32_NAN_BITS: int = 0x7FC00000


def with_logit(rows: Sequence[Sequence[int]], row: int, token: int, bits: int) -> list[list[int]]:
    """A copy of base logit ``rows`` with one logit replaced by ``bits``."""
    out = [list(r) for r in rows]
    out[row][token] = bits
    return out


def invalid_cases() -> Iterator[Case]:
    ident = RngIdentity(seed=20240607, generation=1, round=3, anchor=1000)
    base = make_input(0xC4D1, 16, 2, 1.0, 1.0, SupportPolicy.dense(), ident)
    yield invalid_case(
        "depth-zero",
        "Depth K = 0 (base logits f32[0, 16]): a round drafts K >= 1 tokens (R35).",
        replace(base, base_logits=[]),
        "BAD_SHAPE",
        vocab_of_logits=16,
    )
    wide = make_input(0xC4D2, 24, 2, 1.0, 1.0, SupportPolicy.dense(), ident)
    yield invalid_case(
        "logits-wider-than-markov",
        "Base logits over 24 tokens, Markov factors over 16, x_0 = 20: the shapes disagree (BAD_SHAPE), "
        "refused before x_0 is checked against the factors.",
        replace(base, base_logits=wide.base_logits, last_committed_token=20),
        "BAD_SHAPE",
    )
    yield invalid_case(
        "markov-rank-mismatch",
        "Left factor f32[16, 2], right factor f32[3, 16]: the ranks disagree.",
        replace(base, markov_right=[*base.markov_right, base.markov_right[0]]),
        "BAD_SHAPE",
    )
    yield invalid_case(
        "markov-right-wider",
        "Right factor f32[2, 17] for a vocabulary of 16 (the left factor's rows and the logits).",
        replace(base, markov_right=[[*row, row[0]] for row in base.markov_right]),
        "BAD_SHAPE",
    )
    yield invalid_case(
        "topk-k-above-vocab",
        "Top-17 support over V = 16: k must be in 1..V (R07).",
        replace(base, support=SupportPolicy.top_k(17)),
        "BAD_SUPPORT_SIZE",
    )
    yield invalid_case(
        "last-token-at-vocab",
        "x_0 = V = 16: one past the last token.",
        replace(base, last_committed_token=16),
        "TOKEN_OUT_OF_RANGE",
    )
    yield invalid_case(
        "last-token-negative",
        "x_0 = -1: refused, not read as the last Markov row.",
        replace(base, last_committed_token=-1),
        "TOKEN_OUT_OF_RANGE",
    )
    # Two faults at once: the refusal order of docs/formats/proposal_chain.md decides the code.
    top17 = SupportPolicy.top_k(17)
    yield invalid_case(
        "token-before-k",
        "x_0 = V = 16 and top-17 over V = 16: x_0 is checked before any row, so TOKEN_OUT_OF_RANGE, "
        "not BAD_SUPPORT_SIZE.",
        replace(base, last_committed_token=16, support=top17),
        "TOKEN_OUT_OF_RANGE",
    )
    yield invalid_case(
        "row1-weights-before-k",
        "Row 1 has a NaN logit (token 3) and the support is top-17 over V = 16: within a row the "
        "weights' refusals come before k, so NAN_LOGIT, not BAD_SUPPORT_SIZE.",
        replace(base, base_logits=with_logit(base.base_logits, 0, 3, F32_NAN_BITS), support=top17),
        "NAN_LOGIT",
    )
    yield invalid_case(
        "row1-k-before-row2-weights",
        "Row 2 has a NaN logit (token 3) and the support is top-17 over V = 16: row 1 is refused "
        "first, for its k (rows are checked one at a time, in order), so BAD_SUPPORT_SIZE, not NAN_LOGIT.",
        replace(base, base_logits=with_logit(base.base_logits, 1, 3, F32_NAN_BITS), support=top17),
        "BAD_SUPPORT_SIZE",
    )
    # A -inf Markov coefficient makes every bias of row 1 an infinity (the right factor has no zero):
    # -inf where right[0][v] > 0, +inf where it is < 0; a +inf logit at a -inf bias is +inf + -inf.
    minus_inf_left = [list(r) for r in base.markov_left]
    minus_inf_left[base.last_committed_token][0] = F32_NEG_INF
    plus_at = next(v for v, bits in enumerate(base.markov_right[0]) if 0 < bits < F32_POS_INF)
    yield invalid_case(
        "logit-plus-bias-inf-minus-inf",
        f"Left factor -inf at (x_0, 0), so row 1's biases are infinities; logit {plus_at} is +inf where "
        "its bias is -inf: z = +inf + -inf is NaN (IEEE), so NAN_LOGIT, which comes before the +inf "
        "logits of the other tokens whose bias is +inf (POS_INF_LOGIT).",
        replace(
            base,
            markov_left=minus_inf_left,
            base_logits=with_logit(base.base_logits, 0, plus_at, F32_POS_INF),
        ),
        "NAN_LOGIT",
    )
    yield invalid_case(
        "markov-bias-infinite",
        "Left factor -inf at (x_0, 0), finite logits: row 1's biases are -inf * right[0][v], infinities of "
        "the opposite sign of right[0][v] (no NaN: the right factor has no zero), so the tokens with a negative "
        "right[0][v] get z = +inf: POS_INF_LOGIT.",
        replace(base, markov_left=minus_inf_left),
        "POS_INF_LOGIT",
    )
    zero_right = [list(r) for r in base.markov_right]
    zero_right[0][plus_at] = 0
    yield invalid_case(
        "markov-inf-times-zero",
        f"As markov-bias-infinite, with right[0][{plus_at}] = +0: -inf * 0 is NaN (IEEE), so that bias and its "
        "z are NaN, and NAN_LOGIT comes before the +inf of the other tokens.",
        replace(base, markov_left=minus_inf_left, markov_right=zero_right),
        "NAN_LOGIT",
    )


def boundary_seed(inp: ProposalInput, offset: int) -> int:
    """The first seed from the input's own whose row-1 proposal draw is ``C_v + offset`` for
    an interior cumulative count ``C_v`` of row 1 (which no seed changes: it is conditioned on
    the committed token only)."""
    bias = markov_bias_f32(inp.last_committed_token, inp.markov_left, inp.markov_right)
    row = proposal_row(inp.base_logits[0], bias, inp.temperature_bits, inp.support)[0]
    boundaries = set(accumulate(count for _, count in row.support())) - {M}
    seed = inp.identity.seed
    while proposal_draw(proposal_key(replace(inp.identity, seed=seed), 1)) - offset not in boundaries:
        seed += 1
    return seed


def boundary_cases() -> Iterator[Case]:
    ident = RngIdentity(seed=0xB0B0, generation=1, round=4, anchor=77)
    for name, offset, where in (
        ("below", -1, "C_v - 1: the last draw of token v"),
        ("at", 0, "C_v: the first draw of token v + 1"),
    ):
        inp = make_input(0xC4C1, 1024, 2, 1.0, 1.0, SupportPolicy.dense(), ident)
        inp = replace(inp, identity=replace(ident, seed=boundary_seed(inp, offset)))
        yield chain_case(
            f"dense-v1024-draw-{name}-boundary",
            f"Dense rows over V = 1024; row 1's draw is {where}.",
            ("DENSE_CHAIN", "DRAW_ON_BOUNDARY"),
            inp,
        )


@dataclass
class ChainDraft:
    """A chain input being broken: the spec's input, and a ``depth`` field that may disagree with it."""

    inp: ProposalInput
    depth: int | None = None

    def change(self, **fields) -> None:
        self.inp = replace(self.inp, **fields)

    def input_json(self) -> dict:
        case_input = encode_input(self.inp)
        vocab = len(self.inp.markov_left)
        if not self.inp.base_logits:
            case_input["base_logits"] = encode_blob("f32", [], [0, vocab])
        if self.depth is not None:
            case_input["depth"] = self.depth
        return case_input


PRECEDENCE_IDENTITY = RngIdentity(seed=20240607, generation=1, round=3, anchor=1000)


def chain_draft(rows: frozenset[int]) -> ChainDraft:
    """A valid depth-5 chain over V = 16, rank 2, T = 1, dense support."""
    return ChainDraft(make_input(0xC4D1, 16, 2, 1.0, 1.0, SupportPolicy.dense(), PRECEDENCE_IDENTITY))


def set_logit(token: int, bits: int) -> Callable[[ChainDraft], None]:
    return lambda d: d.change(base_logits=with_logit(d.inp.base_logits, 0, token, bits))


CHAIN_BREAKS = precedence.Breaks[ChainDraft](
    family="proposal_chain",
    base=chain_draft,
    faults={
        1: lambda d: setattr(d, "depth", len(d.inp.base_logits) + 1),
        2: lambda d: d.change(base_logits=[]),
        3: lambda d: d.change(base_logits=[[*row, row[0]] for row in d.inp.base_logits]),
        4: lambda d: d.change(markov_right=[*d.inp.markov_right, d.inp.markov_right[0]]),
        5: lambda d: d.change(markov_right=[[*row, row[0]] for row in d.inp.markov_right]),
        6: lambda d: d.change(last_committed_token=len(d.inp.markov_left)),
        7: lambda d: d.change(temperature_bits=f32_bits(-1.0)),
        8: set_logit(3, F32_QUIET_NAN),
        9: set_logit(5, F32_POS_INF),
        10: lambda d: d.change(base_logits=[[F32_NEG_INF] * len(d.inp.base_logits[0]), *d.inp.base_logits[1:]]),
        11: lambda d: d.change(support=SupportPolicy.top_k(len(d.inp.markov_left) + 1)),
    },
    encode=ChainDraft.input_json,
    exclusive=frozenset({frozenset({2, n}) for n in (3, 8, 9, 10)} | {frozenset({8, 10}), frozenset({9, 10})}),
    why="with no base logit row there is no row to be wide or to hold a logit; a NaN or +inf s_v is not -inf",
)


def build() -> Iterator[Group]:
    yield Group(
        "chains",
        "Depth-5 chains, dense and top-k, Markov-conditioned, and one depth-1 chain.",
        RULES,
        list(chain_cases()),
    )
    yield Group(
        "exact_ties",
        "Rows that tie exactly between equal weights, decided by the lowest ID; no FP64 uncertainty.",
        RULES,
        list(tie_cases()),
    )
    yield Group("rng_identity", "Chains that pin the draw keys.", RULES, list(identity_cases()))
    yield Group(
        "subnormal_bias",
        "A Markov bias of FP32 subnormals that changes the counts at a tiny draft temperature.",
        RULES,
        list(subnormal_cases()),
    )
    yield Group(
        "fp32_edges",
        "Markov products and logit-plus-bias sums at the FP32 encoding's edges, scaled so that they reach the counts.",
        RULES,
        list(product_edge_cases()),
    )
    yield Group(
        "invalid_inputs",
        "Chains the worker must refuse: depth 0, disagreeing shapes, k > V, x_0 outside the vocabulary.",
        ("R01", "R05", "R07", "R35"),
        list(invalid_cases()),
    )
    yield Group(
        "precedence",
        "Every refusal row alone and every pair that can fail together: the earlier row's code.",
        ("R01", "R05", "R07", "R35"),
        list(precedence.precedence_cases(CHAIN_BREAKS, solve, ("R01", "R05", "R07", "R35"))),
    )
    yield Group(
        "draw_boundaries",
        "Row 1's draw on a cumulative boundary of its q row, from either side.",
        RULES,
        list(boundary_cases()),
    )


WORD = {"$ref": "#/$defs/word32"}
RATIONALS = {"type": "array", "items": {"$ref": "#/$defs/rational"}}
SUPPORT = {
    "oneOf": [
        closed({"policy": {"const": "dense"}}),
        closed({"policy": {"const": "top_k"}, "k": {"type": "integer", "minimum": 1}}),
    ]
}
DRAW = closed(
    {
        "position": {"type": "integer", "minimum": 0},
        "counter": {"type": "array", "items": WORD, "minItems": 4, "maxItems": 4},
        "u24": {"type": "integer", "minimum": 0, "maximum": M - 1},
    }
)
#: One chain's answer (also each request's answer in ``proposal_batch``).
ANSWER = closed(
    {
        "tokens": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        "rows": {"type": "array", "items": {"$ref": "#/$defs/qRow"}},
        "draws": {"type": "array", "items": DRAW},
        "exp_margin_ulp": RATIONALS,
        "tie_gap": RATIONALS,
        "fp64_may_differ": {"type": "array", "items": {"type": "boolean"}},
    }
)

#: The codes a chain may be refused with: shapes, x_0, then each row's weights (R05) and k (R07).
REFUSALS: list[str] = sorted({row.code for row in PROPOSAL_CHAIN_REFUSALS})

FAMILY = Family(
    name="proposal_chain",
    description="The worker's proposal chain: Markov bias, weights, counts and the PROPOSAL draw, row by row (R01).",
    rules=RULES + ("R07",),
    notes=NOTES,
    margins=("tie_gap", "exp_margin_ulp", "fp64_may_differ"),
    build=build,
    solve=solve,
    input_schema=closed(
        {
            "seed": {"$ref": "#/$defs/u64"},
            "generation": {"type": "integer", "minimum": 0},
            "round": {"type": "integer", "minimum": 0},
            "anchor": {"type": "integer", "minimum": 0},
            "depth": {"type": "integer", "minimum": 0},
            "last_committed_token": {"type": "integer"},
            "temperature": {"$ref": "#/$defs/f32"},
            "support": SUPPORT,
            "base_logits": blob_schema("f32"),
            "markov": closed({"left": blob_schema("f32"), "right": blob_schema("f32")}),
        }
    ),
    expected_schema={"oneOf": [ANSWER, closed({"error": {"enum": REFUSALS}})]},
    comparator="proposal",
    precedence=CHAIN_BREAKS,
)
