"""Vector family ``allocation_dense``: exact dyadic24 counts of a whole row (R03-R06, R09).

Each case hands the implementation one row, as FP32 / FP64 weights or as FP32
logits plus a draft temperature, and expects the exact largest-remainder
counts (ties to the lowest ID), the number of tickets after the floors, and how
near the ticket decision is to a tie: the expected object is :func:`solve` of the
input. ``fp64_may_differ`` says whether the design's FP64 recipe may
legitimately differ (a near-tie, result class ``precision``); the generator runs
that recipe on every case and flags the cases where it really does differ. Also
home of the row codec (:class:`RowSource`, :func:`row_source`) shared by
``allocation_sparse`` and ``allocation_invalid``.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Iterator, Sequence

from qconform.generators.encoding import (
    EncodingError,
    decode_blob,
    decode_f32,
    decode_rational,
    encode_blob,
    encode_f32,
    encode_rational,
    f32_bits,
    f64_bits,
)
from qconform.generators.registry import Case, Family, FuzzHooks, Group, Labels, Note
from qconform.generators.schemas import blob_schema
from qconform.generators.schemas import closed_object as closed
from qconform.spec.allocation import allocate_dense
from qconform.spec.allocation_fp64 import (
    allocate_dense_fp64,
    fp64_row_error_bound,
    fp64_row_may_differ,
    fp64_tie_gap,
)
from qconform.spec.constants import VOCAB, M
from qconform.spec.errors import SpecError, refuse
from qconform.spec.floats import F32_MAX, F32_NEG_INF, F32_SIGN, round_to_f32
from qconform.spec.weights import weights_from_f32, weights_from_f64, weights_from_logits

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

RULES = ("R03", "R04", "R05", "R06", "R09")

NOTES = {
    "EXACT_TIE": Note(
        "EDGE_CASE",
        "Fractional parts tie exactly at the ticket threshold (tie_gap = 0): the lowest token ID wins (R06).",
        "Catches ties broken by highest ID, by sort instability or by thread order.",
    ),
    "FP64_DIFFERS": Note(
        "NUMERICAL",
        "A near-tie that the design's FP64 recipe (sequential FP64 sum, fl(w/W)*M, largest FP64 remainders) "
        "decides differently from the exact rule. The exact counts are normative.",
        "An FP64 implementation that returns the FP64 counts here is classified 'precision', not 'fail' "
        "(fp64_may_differ is true).",
    ),
    "FP64_NEAR_TIE": Note(
        "NUMERICAL",
        "The tie gap between tokens of different weights is <= 2 * fp64_error_bound (fp64_may_differ), so FP64 "
        "arithmetic may legitimately differ; the FP64 recipe happens to agree.",
        "A divergence here is classified 'precision'; an exact implementation must match.",
    ),
    "FLOOR_TO_ZERO": Note(
        "EDGE_CASE",
        "Positive weights whose quota floors to zero; some get no ticket and end with count 0 (R04, R06).",
        "Catches implementations that force a minimum count of 1 or renormalize after dropping.",
    ),
    "SINGLE_SUPPORT": Note(
        "EDGE_CASE",
        "Exactly one token has positive weight: it gets all M counts.",
        "Catches degenerate-row handling and division by a zero remainder count.",
    ),
    "MASKED_LOGITS": Note(
        "FUNCTIONALITY",
        "-inf logits are masks before the softmax (R05): weight exactly 0, count 0.",
        "Catches NaN from -inf - max, or masks that still receive a ticket.",
    ),
    "OVERFLOW_TO_MASK": Note(
        "NUMERICAL",
        "A finite logit whose FP32 quotient by a tiny temperature overflows to -inf: IEEE gives weight 0.",
        "Catches implementations that compute (logit - max) / T in another order or in higher precision.",
    ),
    "SUBNORMAL_WEIGHTS": Note(
        "NUMERICAL",
        "Subnormal FP32 weights, taken at their exact values.",
        "Catches flush-to-zero (FTZ/DAZ) of weights, which changes q.",
    ),
    "FP32_MAX_WEIGHTS": Note(
        "NUMERICAL",
        "Weights near the FP32 maximum: their FP32 sum overflows to +inf.",
        "Catches an FP32 accumulator for W (FP64 or exact arithmetic is required).",
    ),
    "FP64_WEIGHTS": Note(
        "FUNCTIONALITY",
        "Weights given as FP64, taken at their exact values.",
        "Catches a silent rounding of FP64 weights to FP32 before allocation.",
    ),
    "FP64_SUM_OVERFLOW": Note(
        "NUMERICAL",
        "FP64 weights whose FP64 sum overflows: the FP64 recipe must refuse (INCONSISTENT_ALLOCATION); "
        "the exact counts are normative.",
        "An FP64 implementation that refuses here is classified 'precision' (fp64_may_differ is true).",
    ),
    "NEGATIVE_ZERO": Note(
        "EDGE_CASE",
        "-0.0 weights are zero weights, not negative ones (R05).",
        "Catches a sign-bit test that refuses -0.0 or a zero test that misses it.",
    ),
    "PRODUCTION_VOCAB": Note(
        "FUNCTIONALITY",
        "A row over the production vocabulary V = 129280.",
        "Catches index width, accumulation and partial-selection problems that small rows hide.",
    ),
    "UNIFORM": Note(
        "EDGE_CASE",
        "All weights equal: every fractional part ties, so the lowest IDs take the tickets.",
        "Catches tie breaking that is not by lowest ID.",
    ),
    "DOMINANT_TOKEN": Note(
        "EDGE_CASE",
        "One token holds almost all the mass; the others are far below one count.",
        "Catches precision loss when quotas differ by many orders of magnitude.",
    ),
    "LOGIT_PIPELINE": Note(
        "FUNCTIONALITY",
        "Weights from logits in the one stated FP32 order: z / T, minus the max, exp rounded once (R05).",
        "Catches a different order of operations, an unrounded or fast exp, or a missing max shift; "
        "exp_margin_ulp bounds how far a hardware exp may err and still round the same.",
    ),
    "RANDOM_ROW": Note(
        "BASIC",
        "A random row from a fixed generator seed.",
        "General agreement with the rule.",
    ),
}


@dataclass(frozen=True)
class RowSource:
    """A row as handed to the implementation: ``dtype`` "f32" / "f64" weights, or
    "logits" (FP32) with a temperature."""

    dtype: str
    bits: list[int]
    temperature: int | None = None

    @classmethod
    def f32(cls, values: Sequence[float]) -> "RowSource":
        return cls("f32", [f32_bits(x) for x in values])

    @classmethod
    def f64(cls, values: Sequence[float]) -> "RowSource":
        return cls("f64", [f64_bits(x) for x in values])

    @classmethod
    def logits(cls, values: Sequence[float], temperature: float) -> "RowSource":
        return cls("logits", [f32_bits(x) for x in values], f32_bits(temperature))

    def input_json(self) -> dict:
        if self.dtype == "logits":
            assert self.temperature is not None  # every "logits" row is built with its temperature
            return {"logits": encode_blob("f32", self.bits), "temperature": encode_f32(self.temperature)}
        return {"weights": encode_blob(self.dtype, self.bits)}


#: dtypes of a ``weights`` blob.
WEIGHT_DTYPES = ("f32", "f64")


def vector_bits(blob: dict, dtype: str) -> list[int]:
    """The bit patterns of a one-dimensional blob (``BAD_SHAPE`` for another shape)."""
    bits, shape = decode_blob(blob, dtype)
    if len(shape) != 1:
        raise refuse("BAD_SHAPE", f"a row blob has shape {shape}, need [V]")
    return bits


def row_source(case_input: dict) -> RowSource:
    """The row of a case input: a ``weights`` blob (f32 or f64), or ``logits`` (f32) and a ``temperature``."""
    if "weights" in case_input:
        blob = case_input["weights"]
        dtype = blob.get("dtype") if isinstance(blob, dict) else None
        if dtype not in WEIGHT_DTYPES:
            raise EncodingError(f"weights blob dtype {dtype!r} is not one of {WEIGHT_DTYPES}")
        return RowSource(dtype, vector_bits(blob, dtype))
    return RowSource("logits", vector_bits(case_input["logits"], "f32"), decode_f32(case_input["temperature"]))


@dataclass(frozen=True)
class ResolvedRow:
    """The exact weights of a row, the weight bits an FP64 recipe would see, and
    the extra expected fields of a logits row."""

    weights: list[Fraction]
    weight_bits: list[int]
    weight_dtype: str
    logit_fields: dict


def resolve(source: RowSource) -> ResolvedRow:
    """Exact weights of a row source (SpecError if the spec refuses it)."""
    if source.dtype == "f32":
        return ResolvedRow(weights_from_f32(source.bits), source.bits, "f32", {})
    if source.dtype == "f64":
        return ResolvedRow(weights_from_f64(source.bits), source.bits, "f64", {})
    assert source.temperature is not None  # every "logits" row is built with its temperature
    logit = weights_from_logits(source.bits, source.temperature)
    fields = {"weights": encode_blob("f32", logit.weights_f32), "exp_margin_ulp": encode_rational(logit.exp_margin_ulp)}
    return ResolvedRow(logit.weights, logit.weights_f32, "f32", fields)


def expected_weight_bits(source: RowSource, expected: dict) -> tuple[list[int], str]:
    """The weight bits (and their dtype) that the FP64 recipe sees for a solved row:
    the input weights, or the FP32 weights a logits row's answer carries."""
    if source.dtype == "logits":
        return decode_blob(expected["weights"], "f32")[0], "f32"
    return source.bits, source.dtype


def fp64_fields(weight_bits: list[int], dtype: str, weights: Sequence[Fraction], counts: Sequence[int]) -> dict:
    """``fp64_error_bound`` (:func:`fp64_row_error_bound`) and ``fp64_may_differ``
    (:func:`fp64_row_may_differ`) of the exact allocation ``counts`` of ``weights``
    (with bit patterns ``weight_bits`` of ``dtype``)."""
    return {
        "fp64_error_bound": encode_rational(fp64_row_error_bound(weights)),
        "fp64_may_differ": fp64_row_may_differ(weight_bits, dtype, weights, counts),
    }


def numeric_flags(
    flags: tuple[str, ...], expected: dict, fp64_counts: list[int] | None, exact_counts: list[int]
) -> tuple[str, ...]:
    """``flags`` plus EXACT_TIE, FP64_DIFFERS or FP64_NEAR_TIE, from the answer's tie gap
    and ``fp64_may_differ`` and from running the FP64 recipe; a divergence outside the
    theorem's bound is a generator error."""
    if fp64_counts != exact_counts:
        if not expected["fp64_may_differ"]:
            raise AssertionError("FP64 recipe differs although fp64_may_differ is false")
        flags += ("FP64_DIFFERS",)
    elif expected["fp64_may_differ"]:
        flags += ("FP64_NEAR_TIE",)
    if decode_rational(expected["tie_gap"]) == 0:
        flags += ("EXACT_TIE",)
    return tuple(dict.fromkeys(flags))


def run_fp64(call, *args) -> list[int] | None:
    """The FP64 recipe's counts, or None when it refuses."""
    try:
        return call(*args)
    except SpecError:
        return None


def dense_answer(source: RowSource) -> dict:
    """The expected object of a dense row: exact counts, tickets, tie gap, FP64 bound (and logit fields)."""
    row = resolve(source)
    alloc = allocate_dense(row.weights)
    return {
        "counts": encode_blob("u32", alloc.counts),
        "remaining": alloc.remaining,
        "tie_gap": encode_rational(alloc.tie_gap),
        **fp64_fields(row.weight_bits, row.weight_dtype, row.weights, alloc.counts),
        **row.logit_fields,
    }


def solve(case_input: dict) -> dict:
    """The spec's answer to one dense row: its exact allocation, or the row's refusal code."""
    try:
        return dense_answer(row_source(case_input))
    except SpecError as error:
        return {"error": error.code}


def dense_case(name: str, comment: str, flags: tuple[str, ...], source: RowSource) -> Case:
    """A case whose expected answer is :func:`solve` of the row's input; the numeric flags
    come from that answer and from running the FP64 recipe on the same weights."""
    case_input = source.input_json()
    expected = solve(case_input)
    assert "error" not in expected, (name, expected)
    fp64_counts = run_fp64(allocate_dense_fp64, *expected_weight_bits(source, expected))
    flags = numeric_flags(flags, expected, fp64_counts, decode_blob(expected["counts"], "u32")[0])
    return Case(name=name, comment=comment, rules=RULES, flags=flags, input=case_input, expected=expected)


def exact_f32(x: Fraction) -> int:
    """FP32 bits of a value that must be exactly representable."""
    bits = round_to_f32(x)
    if weights_from_f32([bits])[0] != x:
        raise AssertionError(f"{x} is not an FP32 value")
    return bits


def fp64_near_tie_row(rng: random.Random, larger_first: bool) -> list[int]:
    """A row whose exact quotas of two tokens differ from a half-integer tie by
    about 1e-10, below FP64's resolution of the sum.

    Weights a > b are half-integers, whole-number fillers make a + b + fillers
    = 2^24 exactly, and one tiny weight c << 2^-29 makes W = 2^24 + c. FP64's sum
    rounds c away, so FP64 sees fractional parts exactly 1/2 for a and b and
    gives the ticket to the lower ID; exactly, Q = w * M / W = w (1 - c / W + ...),
    so the smaller weight keeps the larger fractional part and wins.
    """
    a = Fraction(rng.randrange(1 << 21, 1 << 22)) + Fraction(1, 2)
    b = Fraction(rng.randrange(1 << 20, 1 << 21)) + Fraction(1, 2)
    fillers = []
    rest = (1 << 24) - a - b
    while rest > 0:
        part = min(rest, Fraction(rng.randrange(1 << 20, 1 << 22)))
        fillers.append(part)
        rest -= part
    tiny = Fraction(rng.randrange(1, 1 << 10), 1 << rng.randrange(40, 60))
    row = fillers + [tiny]
    rng.shuffle(row)
    cut = rng.randrange(len(row) + 1)
    pair = [a, b] if larger_first else [b, a]
    row = row[:cut] + [pair[0]] + row[cut:]
    cut2 = rng.randrange(cut + 1, len(row) + 1)
    row = row[:cut2] + [pair[1]] + row[cut2:]
    return [exact_f32(x) for x in row]


def fp64_threshold_row(seed: int, gap_units: int) -> list[int]:
    """A row [2^27, a, b] whose FP64 tie gap is exactly ``gap_units / 2`` times ``2 * Delta``.

    With n = 3 tokens and the largest weight 2^27 in integer units (a, b < 2^24 integers, so
    all three are FP32), Delta = (n + 1) * max Q / 2^53 = 2^27 * 2^24 * 4 / (N * 2^53) = 1 / N
    for the total N = 2^27 + a + b: a tie gap of k / N is k * Delta. The fractional parts are
    r_v / N with r_v = (2^24 * u_v) mod N, so r_a - r_b = k exactly when
    a - b = k * 2^-24 (mod N), N odd. A deterministic search (``random.Random(seed)``) draws
    an odd a + b, solves for a - b, and keeps the first row whose tie gap, taken between a and
    b, is exactly k / N (token 0's fraction is farther away)."""
    rng = random.Random(seed)
    big = 1 << 27
    while True:
        total_ab = rng.randrange(1 << 23, 1 << 25) | 1
        total = big + total_ab
        wanted = gap_units * pow(1 << 24, -1, total) % total
        for diff in (wanted, wanted - total):
            if abs(diff) >= total_ab or (diff - total_ab) % 2:
                continue
            a, b = (total_ab + diff) // 2, (total_ab - diff) // 2
            if a == b or not (0 < a < 1 << 24 and 0 < b < 1 << 24):
                continue
            bits = [exact_f32(Fraction(u)) for u in (big, a, b)]
            weights = weights_from_f32(bits)
            if fp64_tie_gap(weights, allocate_dense(weights).counts) == Fraction(gap_units, total):
                return bits


def fp64_block_row(seed: int, admitted: bool) -> list[int]:
    """A row whose tie is split inside one block of equal weights (tokens 1 and 2, weight x: token 1
    gets the ticket, token 2 not), with token 3 (weight y) one remainder unit from the block: just
    above it and admitted, or just below it and excluded (``admitted``).

    Seven integer weights, the largest 2^27 / 2 = 2^26, so Delta = (7 + 1) * 2^26 * 2^24 / (N * 2^53)
    = 1 / N for the total N, and fp64_tie_gap, taken past the block, is 1 / N = Delta <= 2 * Delta.
    r_y - r_x = +-1 exactly when y - x = +-2^-24 (mod N), N odd: a deterministic search
    (``random.Random(seed)``) draws N, takes y - x as that residue when it is small, fills the total
    with the sixth weight, and keeps the first row with the wanted ticket pattern and tie gap."""
    rng = random.Random(seed)
    while True:
        total = (rng.randrange(1 << 26, 1 << 27) + (1 << 26)) | 1
        step = pow(1 << 24, -1, total)
        if step >= 1 << 23:
            continue
        x = rng.randrange(1, (1 << 24) - step) if admitted else rng.randrange(step + 1, 1 << 24)
        y = x + step if admitted else x - step
        z, q = rng.randrange(1, 1 << 24), rng.randrange(1, 1 << 24)
        p = total - ((1 << 26) + 2 * x + y + z + q)
        if not 0 < p < 1 << 24:
            continue
        units = [1 << 26, x, x, y, z, p, q]
        bits = [exact_f32(Fraction(u)) for u in units]
        weights = weights_from_f32(bits)
        counts = allocate_dense(weights).counts
        floors = [(u << 24) // total for u in units]
        pattern = (counts[1] - floors[1], counts[2] - floors[2], counts[3] - floors[3])
        if pattern == (1, 0, int(admitted)) and fp64_tie_gap(weights, counts) == Fraction(1, total):
            return bits


def fp64_block_edge_row() -> list[int]:
    """A row whose tie is split inside one block of equal weights, every token left without a ticket
    is in that block, and the block's remainder is exactly ``2 * Delta``: ``[2^28, F] + [x] * k``.

    ``fp64_tie_gap`` then takes the gap past the block on the excluded side against no token at
    all (its ``default``, 0): the gap is the block's own fraction, ``2 * Delta``, on the threshold.
    With B = 2^28 the largest of n = k + 2 weights in units N, ``2 * Delta * N = (n + 1) * B / 2^28 =
    n + 1`` (rho), so the block needs ``M * x = rho (mod N)``, i.e. ``N = (M * x - rho) / t``. The
    fractions sum to the tickets left, R = 3 (B, F and one block token), so the block's
    ``k * rho / N`` must exceed 1: ``k * (k + 3) > N > 2^28``, more than 2^14 tokens. A deterministic
    search takes the least k from 2^14 up (in steps of 16), then the least x and t, that give an odd N, a
    filler F below 2^24, and B and F fractions above ``2 * rho / N`` with R = 3."""
    big = 1 << 28
    for k in range(1 << 14, 1 << 15, 16):
        rho = k + 3
        for x in range(16, 1 << 12):
            low, high = big + k * x + 1, min(k * rho, big + k * x + (1 << 24))
            for t in range(max(1, -(-(M * x - rho) // high)), (M * x - rho) // low + 1):
                total, rest = divmod(M * x - rho, t)
                filler = total - big - k * x
                if rest or total % 2 == 0 or not low <= total <= high or not 0 < filler < 1 << 24:
                    continue
                r_big, r_filler = M * big % total, M * filler % total
                if min(r_big, r_filler) > 2 * rho and k * rho + r_big + r_filler == 3 * total:
                    return [exact_f32(Fraction(u)) for u in [big, filler] + [x] * k]
    raise AssertionError("no block-edge row below 2^15 tokens")


def fp64_flip_rows(seed: int, wanted: int, larger_first: bool) -> list[list[int]]:
    """Deterministic search over near-tie constructions: keep the first ``wanted``
    rows where the FP64 recipe differs (``larger_first``) or agrees (not)."""
    rng = random.Random(seed)
    found = []
    while len(found) < wanted:
        bits = fp64_near_tie_row(rng, larger_first)
        differs = allocate_dense(weights_from_f32(bits)).counts != allocate_dense_fp64(bits, "f32")
        if differs == larger_first:
            found.append(bits)
    return found


def log_uniform(rng: random.Random, size: int, octaves: int) -> list[float]:
    """Positive FP32-exact weights in (2^-octaves, 1]: a random 24-bit significand times a
    random power of two. Integer draws only, so no libm result enters a vector."""
    return [math.ldexp(rng.getrandbits(23) | 1 << 23, -23 - rng.randrange(octaves)) for _ in range(size)]


def uniform_logits(rng: random.Random, size: int, bound: int) -> list[float]:
    """FP32-exact logits uniform on the 2^-16 grid in [-bound, bound) (integer draws only)."""
    return [rng.randrange(-bound << 16, bound << 16) / 65536 for _ in range(size)]


def basic_cases() -> Iterator[Case]:
    rng = random.Random(0xA11D)
    yield dense_case(
        "uniform-v3",
        "Three equal weights: M/3 each, the single ticket goes to token 0.",
        ("UNIFORM",),
        RowSource.f32([1.0] * 3),
    )
    yield dense_case(
        "uniform-v6", "Six equal weights: four tickets go to tokens 0-3.", ("UNIFORM",), RowSource.f32([0.5] * 6)
    )
    yield dense_case("uniform-v1000", "1000 equal weights.", ("UNIFORM",), RowSource.f32([3.0] * 1000))
    yield dense_case(
        "dominant-v16",
        "One token has weight 1, fifteen have 2^-30.",
        ("DOMINANT_TOKEN", "FLOOR_TO_ZERO"),
        RowSource.f32([2.0**-30] * 7 + [1.0] + [2.0**-30] * 8),
    )
    yield dense_case("random-v64", "Random positive weights.", ("RANDOM_ROW",), RowSource.f32(log_uniform(rng, 64, 12)))
    yield dense_case(
        "random-v257-zeros",
        "Random weights, a third of them zero.",
        ("RANDOM_ROW",),
        RowSource.f32([0.0 if rng.random() < 1 / 3 else rng.uniform(0, 4) for _ in range(257)]),
    )
    yield dense_case(
        "negative-zero", "-0.0 weights are zero: count 0.", ("NEGATIVE_ZERO",), RowSource.f32([-0.0, 1.0, -0.0, 3.0])
    )


def tie_cases() -> Iterator[Case]:
    yield dense_case(
        "pair-tie",
        "Weights 1, 1, 1, 2, 2: the fractional parts of the equal pairs tie.",
        (),
        RowSource.f32([1.0, 1.0, 1.0, 2.0, 2.0]),
    )
    yield dense_case(
        "tie-high-ids",
        "Equal weights at the highest IDs compete with a lower-ID tie partner.",
        (),
        RowSource.f32([7.0, 5.0, 5.0, 1.0, 5.0, 5.0]),
    )
    rng = random.Random(0x71E)
    row = log_uniform(rng, 40, 9)
    row[31] = row[3]
    row[17] = row[9]
    yield dense_case(
        "random-with-duplicates", "Random weights with two duplicated values.", ("RANDOM_ROW",), RowSource.f32(row)
    )
    yield dense_case(
        "tie-below-winner-same-bucket",
        "Weights 2210, 3853, 2210: two tickets remain; token 1's fractional part is above the tied pair's, all "
        "three in the same 2^-12 bucket, so token 1 wins outright and the tie gives the last ticket to token 0.",
        (),
        RowSource.f32([2210.0, 3853.0, 2210.0]),
    )
    yield tie_across_weights_case()


def tie_across_weights_case() -> Case:
    """Weights 1, 3, 5, 7 and 2^25 - 16 (W = 2^25): every odd weight's fractional part is exactly 1/2 and
    the even one's 0, so the two tickets go to tokens 0 and 1 and tokens 2 and 3, of other weights, tie
    with them; a tie between different weights is an FP64 uncertainty (fp64_tie_gap 0)."""
    return dense_case(
        "tie-across-different-weights",
        "Weights 1, 3, 5, 7 and 2^25 - 16: W = 2^25, so the odd weights' fractional parts are all exactly 1/2; "
        "tokens 0 and 1 take the two tickets by ID, tying with tokens 2 and 3 of other weights "
        "(fp64_may_differ true: the tie is between different weights).",
        (),
        RowSource.f32([1.0, 3.0, 5.0, 7.0, float((1 << 25) - 16)]),
    )


def fp64_cases() -> Iterator[Case]:
    for index, bits in enumerate(fp64_flip_rows(0xF64F11, 3, larger_first=True)):
        yield dense_case(
            f"fp64-flip-{index}",
            "Near-tie below FP64 resolution: FP64 sees an exact tie and picks the lower ID; "
            "exactly, the higher-ID token has the larger fractional part.",
            (),
            RowSource("f32", bits),
        )
    for index, bits in enumerate(fp64_flip_rows(0xF64A6E, 2, larger_first=False)):
        yield dense_case(
            f"fp64-near-tie-agrees-{index}",
            "The same near-tie construction, ordered so that FP64's ID tie break agrees.",
            (),
            RowSource("f32", bits),
        )


def fp64_bound_cases() -> Iterator[Case]:
    """``fp64_may_differ`` is ``tie_gap <= 2 * Delta`` (spec/allocation_fp64.py): rows on that
    threshold and one Delta past it, where a bound of Delta or 3 Delta, or a strict test, answers
    otherwise (issue #21: allocation_fp64 under mutation)."""
    yield dense_case(
        "tie-gap-exactly-two-delta",
        "Three FP32 weights (2^27 and two integers below 2^24) whose tie gap is exactly 2 * Delta = 2 / N: "
        "on the threshold, so fp64_may_differ is true (the test is <=).",
        (),
        RowSource("f32", fp64_threshold_row(0xB0D2, 2)),
    )
    yield dense_case(
        "tie-gap-three-delta",
        "The same construction with tie gap 3 * Delta: past the threshold, so fp64_may_differ is false, and "
        "the FP64 recipe is proven to agree.",
        (),
        RowSource("f32", fp64_threshold_row(0xB0D3, 3)),
    )
    for admitted, where in ((True, "above the block, admitted"), (False, "below the block, excluded")):
        yield dense_case(
            f"block-tie-neighbour-{'admitted' if admitted else 'excluded'}",
            "Seven weights; tokens 1 and 2 have equal weight and split the last ticket (an equal-weight tie, no "
            f"FP64 uncertainty), and token 3 is one remainder unit {where}: fp64_tie_gap, taken past the "
            "block, is that unit, 1 / N = Delta, so fp64_may_differ is true.",
            (),
            RowSource("f32", fp64_block_row(0xB10C if admitted else 0xB10D, admitted)),
        )
    yield dense_case(
        "block-tie-every-loser-in-block",
        "2^28, a filler and 16768 equal weights x: the last ticket goes to the first of the block, every other "
        "block token is left without one, and so is no other token. The block's fraction is exactly 2 * Delta, "
        "so fp64_tie_gap, with no excluded token past the block, is 2 * Delta and fp64_may_differ is true "
        "(the gap against an absent token counts from 0; from -1 it would be past the threshold).",
        (),
        RowSource("f32", fp64_block_edge_row()),
    )


def edge_cases() -> Iterator[Case]:
    yield dense_case("support-1-v1", "A one-token row.", ("SINGLE_SUPPORT",), RowSource.f32([0.25]))
    yield dense_case(
        "support-1-v9",
        "One positive weight among zeros.",
        ("SINGLE_SUPPORT",),
        RowSource.f32([0.0] * 5 + [2.0**-100] + [0.0] * 3),
    )
    yield dense_case(
        "floor-to-zero",
        "Tiny weights beside large ones: quotas below 1, most get count 0.",
        ("FLOOR_TO_ZERO",),
        RowSource.f32([1.0, 2.0**-25, 3 * 2.0**-26, 2.0**-40, 0.5, 2.0**-24, 2.0**-23]),
    )
    yield dense_case(
        "subnormal-only",
        "Only subnormal weights (exact values, no flush to zero).",
        ("SUBNORMAL_WEIGHTS",),
        RowSource("f32", [0x00000001, 0x00000002, 0x00000003, 0x007FFFFF, 0x00400000]),
    )
    yield dense_case(
        "subnormal-beside-normal",
        "Subnormal weights beside normal ones floor to zero.",
        ("SUBNORMAL_WEIGHTS", "FLOOR_TO_ZERO"),
        RowSource("f32", [0x00000001, 0x3F800000, 0x007FFFFF, 0x00800000]),
    )
    yield dense_case(
        "fp32-max-uniform",
        "Four weights at the FP32 maximum: an FP32 sum overflows.",
        ("FP32_MAX_WEIGHTS", "UNIFORM"),
        RowSource("f32", [F32_MAX] * 4),
    )
    yield dense_case(
        "fp32-max-mixed",
        "Weights near the FP32 maximum with a small one.",
        ("FP32_MAX_WEIGHTS", "FLOOR_TO_ZERO"),
        RowSource.f32([3.0e38, 1.0, 2.5e38, 1.5e38]),
    )


def fp64_weight_cases() -> Iterator[Case]:
    rng = random.Random(0xF640)
    yield dense_case(
        "f64-random-v32",
        "Random FP64 weights with full 53-bit significands.",
        ("FP64_WEIGHTS", "RANDOM_ROW"),
        RowSource.f64([rng.uniform(0.0, 1.0) for _ in range(32)]),
    )
    yield dense_case(
        "f64-not-f32",
        "FP64 weights that differ from their FP32 roundings: 1 + 2^-40 vs 1.",
        ("FP64_WEIGHTS",),
        RowSource.f64([1.0 + 2.0**-40, 1.0, 1.0]),
    )
    yield dense_case(
        "f64-subnormal",
        "FP64 subnormal weights beside 2^-1000.",
        ("FP64_WEIGHTS", "SUBNORMAL_WEIGHTS"),
        RowSource.f64([5e-324, 2.0**-1000, 1e-310, 2.0**-1000]),
    )
    yield dense_case(
        "f64-sum-overflow",
        "FP64 weights near the FP64 maximum: the FP64 sum overflows.",
        ("FP64_WEIGHTS", "FP64_SUM_OVERFLOW"),
        RowSource.f64([1.5e308, 1.0e308, 1.0, 0.5e308]),
    )


def logit_cases() -> Iterator[Case]:
    rng = random.Random(0x1061)
    yield dense_case(
        "logits-v8-t1", "Random logits at T = 1.", ("LOGIT_PIPELINE",), RowSource.logits(uniform_logits(rng, 8, 4), 1.0)
    )
    yield dense_case(
        "logits-ties-t0.7",
        "Equal logits give equal weights: an exact tie at T = 0.7.",
        ("LOGIT_PIPELINE",),
        RowSource.logits([1.5, 0.25, 1.5, 1.5, -3.0], 0.7),
    )
    logits = uniform_logits(rng, 32, 6)
    for v in (0, 5, 6, 31):
        logits[v] = -math.inf
    yield dense_case(
        "logits-masked",
        "Four -inf masks, including the first and last IDs.",
        ("LOGIT_PIPELINE", "MASKED_LOGITS"),
        RowSource.logits(logits, 1.3),
    )
    yield dense_case(
        "logits-one-unmasked",
        "Every logit but one is -inf: that token gets M.",
        ("LOGIT_PIPELINE", "MASKED_LOGITS", "SINGLE_SUPPORT"),
        RowSource("logits", [F32_NEG_INF] * 6 + [f32_bits(-7.5)] + [F32_NEG_INF], f32_bits(1.0)),
    )
    yield dense_case(
        "logits-overflow-to-mask",
        "T = 2^-140: every negative logit / T overflows to -inf.",
        ("LOGIT_PIPELINE", "OVERFLOW_TO_MASK", "SINGLE_SUPPORT"),
        RowSource.logits([-1.0, 0.0, -0.5, -2.0], 2.0**-140),
    )
    yield dense_case(
        "logits-underflow",
        "Logits spread over 200 at T = 1: many weights round to 0 or subnormals.",
        ("LOGIT_PIPELINE", "FLOOR_TO_ZERO", "SUBNORMAL_WEIGHTS"),
        RowSource.logits([-float(i) * 1.7 for i in range(64)], 1.0),
    )
    yield dense_case(
        "logits-v4096",
        "4096 random logits at T = 0.9.",
        ("LOGIT_PIPELINE", "RANDOM_ROW"),
        RowSource.logits(uniform_logits(rng, 4096, 5), 0.9),
    )


#: (name, comment, d): rows [0, d] at T = 1, so d_1 = d exactly and token 1's exp is the row's only
#: inexact one: its rounded bits are the answer's weight 1 and its margin is ``exp_margin_ulp``
SINGLE_EXP_ROWS: tuple[tuple[str, str, str, int], ...] = (
    (
        "exp-rounds-up-to-power-of-two",
        "-0.69314718",
        "exp(d) just below 1/2 rounds up to 1/2 (the spacing halves below it)",
        0xBF317218,
    ),
    ("exp-just-below-power-of-two", "-0.69314724", "exp(d) rounds to the FP32 value just below 1/2", 0xBF317219),
    (
        "exp-smallest-normal-binade",
        "-87.3365",
        "exp(d) rounds into the smallest normal binade (biased exponent 1)",
        0xC2AEAC4A,
    ),
    ("exp-largest-subnormals", "-87.34", "exp(d) rounds to a subnormal just below 2^-126", 0xC2AEAE14),
    ("exp-rounds-to-smallest-subnormal", "-103.97", "exp(d) just above 2^-150 rounds up to 2^-149", 0xC2CFF0A4),
    ("exp-rounds-to-zero", "-104.5", "exp(d) below 2^-150 rounds to +0 (the token keeps count 0)", 0xC2D10000),
    ("exp-far-below-range", "-2000", "exp(d) < 2^-2885 rounds to +0 with a margin just under 1/2", 0xC4FA0000),
    (
        "exp-of-smallest-subnormal",
        "-2^-149",
        "exp(d) = 1 - 2^-149 + ... rounds to 1 with a margin just under 1/4, (2^30 - 1) / 2^32: 1 itself is a "
        "point of the margin grid, so an exp that is not decided past 2^-149 (more than the 96 bits the exact "
        "exp starts with) reads 1/4",
        0x80000001,
    ),
    (
        "exp-just-above-margin-grid",
        "-2^-50",
        "exp(d) = 1 - 2^-50 + 2^-101 - ... lies 2^-101 above the margin grid point 1 - 2^-50, so the margin "
        "is (2^30 - 32) / 2^32; an exp off by 2^-100 downward reads 2^30 - 33",
        0xA6800000,
    ),
)


def fp32_step_cases() -> Iterator[Case]:
    """Logit rows that drive each FP32 step of R05 (the division by T, the subtraction of the max,
    the exp) into one edge of spec/floats.py, each alone in its row so that the answer's weights and
    ``exp_margin_ulp`` show that step's result (issue #21: floats under mutation)."""
    for name, d_text, what, d_bits in SINGLE_EXP_ROWS:
        yield dense_case(
            name,
            f"Logits [0, d] at T = 1 with d = {d_text} (FP32 bits {d_bits:#010x}): {what}; the "
            "margin is that exp's alone.",
            ("LOGIT_PIPELINE",),
            RowSource("logits", [0, d_bits], f32_bits(1.0)),
        )
    yield dense_case(
        "difference-overflows-to-minus-inf",
        "Logits [3e38, -3e38] at T = 1: both finite, but d = -3e38 - 3e38 overflows to -inf in FP32, and "
        "exp(-inf) = +0 exactly (no margin): weight 0 for a token that is not masked.",
        ("LOGIT_PIPELINE", "SINGLE_SUPPORT"),
        RowSource.logits([3.0e38, -3.0e38], 1.0),
    )
    yield dense_case(
        "subtraction-tie-to-even",
        "Logits [1, 2^-25] at T = 1: d = 2^-25 - 1 = -(1 - 2^-25) lies exactly halfway between -(1 - 2^-24) "
        "and -1, and rounds to the even one, -1.",
        ("LOGIT_PIPELINE",),
        RowSource.logits([1.0, 2.0**-25], 1.0),
    )
    yield dense_case(
        "subtraction-one-unit",
        "Logits [1 + 2^-23, 1] at T = 1: d = 1 - (1 + 2^-23) = -2^-23, exactly one unit of the operands' "
        "grid; exp(d) rounds to 1 - 2^-23, not to 1.",
        ("LOGIT_PIPELINE",),
        RowSource.logits([1.0 + 2.0**-23, 1.0], 1.0),
    )
    yield dense_case(
        "subtraction-just-above-power-of-two",
        "Logits [3 * 2^-26, -1] at T = 1: d = -(1 + 3 * 2^-26), between 1/4 and 1/2 ulp beyond a power of "
        "two: rounds to -1 (the 25-bit quotient of the rounding is exactly 2^24 at its first estimate).",
        ("LOGIT_PIPELINE",),
        RowSource.logits([3 * 2.0**-26, -1.0], 1.0),
    )
    yield dense_case(
        "difference-negative-zero",
        "Logits [+0, -0] at T = 1: the max is +0 (the first of equal values), so d_1 = -0 - (+0) = -0, and "
        "exp(-0) = 1 exactly, like exp(+0) (had the max been -0, d_1 = +0: the same weights either way).",
        ("LOGIT_PIPELINE",),
        RowSource("logits", [0, F32_SIGN], f32_bits(1.0)),
    )
    yield dense_case(
        "division-of-exponent-zero-operands",
        "Logits [2^23, 0] at T = 2^23: the dividend 2^23 and the divisor T are both their 24-bit integer "
        "significand times 2^0 (values in [2^23, 2^24), the one binade whose exponent is 0, so a zero test "
        "of the exponent instead of the significand takes them for zeros); s = [1, 0], d = -1.",
        ("LOGIT_PIPELINE",),
        RowSource.logits([2.0**23, 0.0], 2.0**23),
    )
    yield dense_case(
        "weights-of-exponent-minus-one",
        "FP32 weights 5000000.5 and 2.5: the first has significand times 2^-1 (values in [2^22, 2^23)), "
        "the one exponent at which the exact decoding switches from a shift left to a denominator.",
        (),
        RowSource.f32([5000000.5, 2.5]),
    )


def production_row(seed: int) -> list[int]:
    """A softmax-like FP32 row over V = 129280, spread over 26 binades (shared with allocation_sparse)."""
    return [f32_bits(x) for x in log_uniform(random.Random(seed), VOCAB, 26)]


PRODUCTION_SEED = 0x129280


def production_cases() -> Iterator[Case]:
    yield dense_case(
        "v129280-softmax",
        "Softmax-like weights over the production vocabulary.",
        ("PRODUCTION_VOCAB", "RANDOM_ROW"),
        RowSource("f32", production_row(PRODUCTION_SEED)),
    )
    yield dense_case(
        "v129280-uniform",
        "Uniform weights over V = 129280: M mod V = 100096 tickets go to IDs 0..100095.",
        ("PRODUCTION_VOCAB", "UNIFORM"),
        RowSource.f32([1.0] * VOCAB),
    )


def build() -> Iterator[Group]:
    yield Group("basic", "Uniform, dominant and random rows.", RULES, list(basic_cases()))
    yield Group("exact_ties", "Fractional parts that tie exactly, decided by the lowest ID.", RULES, list(tie_cases()))
    yield Group(
        "fp64_near_ties",
        "Near-ties below FP64 resolution, found by a deterministic search; exact is normative.",
        RULES,
        list(fp64_cases()),
    )
    yield Group(
        "fp64_bound",
        "Tie gaps exactly on and past fp64_may_differ's threshold 2 * Delta, found by a deterministic search.",
        RULES,
        list(fp64_bound_cases()),
    )
    yield Group(
        "edges", "Single support, floors to zero, subnormal and FP32-maximum weights.", RULES, list(edge_cases())
    )
    yield Group("fp64_weights", "FP64 input weights.", RULES, list(fp64_weight_cases()))
    yield Group(
        "logits", "Weights from logits and a draft temperature (R05), masks included.", RULES, list(logit_cases())
    )
    yield Group("production_vocab", "Rows over V = 129280.", RULES, list(production_cases()))
    yield Group(
        "fp32_steps",
        "Logit rows that drive one FP32 step of R05 (division, subtraction, exp) into an edge of its rounding.",
        RULES,
        list(fp32_step_cases()),
    )
    yield Group(
        "fast_path_rows",
        "Rows on which an FP64 evaluation of the allocation must hand tokens to exact arithmetic.",
        RULES,
        list(fast_path_cases()),
    )


def fast_path_cases() -> Iterator[Case]:
    """Rows that a certified FP64 evaluation (spec/allocation_certified.py, measured as a candidate
    by ``qconform adequacy``, issue #21) gets wrong if it trusts FP64 where FP64 proves nothing."""
    yield dense_case(
        "quotas-exact-integers",
        "[196, 588]: the quotas are exactly M/4 and 3M/4, integers; an FP64 floor within its error of an "
        "integer is not certain, and no ticket is left to hand out.",
        (),
        RowSource.f32([196.0, 588.0]),
    )
    yield dense_case(
        "quotas-with-binary-fractions",
        "[3.5, 21, 171.5]: W = 196, quotas M/56, 3M/28 and 7M/8; the fractional parts decide the "
        "remaining tickets and the tie gap.",
        (),
        RowSource.f32([3.5, 21.0, 171.5]),
    )
    yield from certificate_cases()
    yield dense_case(
        "contested-2-15-plus-1-distinct-remainders",
        "2^41 and the 2^15 + 1 largest FP32 weights below 2 (2 - j * 2^-23), each twice, the largest 63 times "
        "more (65602 tokens): the cluster's quotas, about 2^-16 each, lie within D = 2^-25 below theta and sum "
        "past 1, so two tickets are left, 2^41 takes one and all 65601 cluster tokens contest the other, with "
        "2^15 + 1 distinct exact remainders. Probes first_ranked's rank levels: 2^15 of them or more do not "
        "fit int16 (about 2^16 tokens is the least row that can hold them: 2^15 distinct FP32 quotas within "
        "2^-25 are at most about 2^-16 each, and the tokens at or below theta must carry a fraction of at "
        "least 1 - theta).",
        (),
        RowSource("f32", contested_levels_row()),
    )


def contested_levels_row() -> list[int]:
    """``[2^41]`` and the cluster ``w_j = 2 - j * 2^-23`` (j = 1..2^15 + 1) twice, with 63 more ``w_1``.

    W = 2^41 + S with S (the cluster's sum) just above 2^17, so each quota ``M * w_j / W`` is below
    1 (its own fraction) and about 2^-16, the cluster spans ``M * 2^15 * 2^-23 / W < 2^-25`` below
    its top, the fractions of the cluster sum just past 1 and 2^41's quota is ``M - S * M / W``:
    R = 2, one ticket to 2^41, one contested by the whole cluster. A construction, no search."""
    cluster = [Fraction(2) - Fraction(j, 1 << 23) for j in range(1, (1 << 15) + 2)]
    weights = [Fraction(1 << 41)] + [w for w in cluster for _ in range(2)] + [cluster[0]] * 63
    return [exact_f32(w) for w in weights]


def f32_tail(top: Fraction, bottom: Fraction) -> list[Fraction]:
    """FP32 weights summing exactly to ``top - bottom`` (both powers of two, ``top > bottom``): the
    24-bit pieces ``2^e - 2^(e - 24)`` from ``top`` down, and the rest. A row that ends in such a
    tail has a total with more than 53 significant bits, which FP64 rounds away."""
    pieces, high = [], top
    while high / (1 << 24) > bottom:
        pieces.append(high - high / (1 << 24))
        high /= 1 << 24
    return pieces + [high - bottom]


def certificate_cases() -> Iterator[Case]:
    """Rows that probe each certificate of the certified FP64 evaluation
    (``allocate_dense_f32_certified``, proof steps 3 to 5): its FP64 quotas are exact or rounded
    once or twice, but a total W whose low bits FP64 drops moves a quota across an integer by far
    less than the error bound, so only the exact recomputation of that token decides it.
    Constructions, not a search: each row is made so that the certificate it names is the only
    thing that decides the answer (issue #21)."""
    yield dense_case(
        "total-one-unit-past-2-53",
        "Bit patterns 0x0F200000 twice and 0x00800001: in units of the least weight's binade the total is "
        "1.25 * 2^53 + 2^23 + 1, odd and above 2^53, so one FP64 sum of the units rounds it. Probes "
        "exact_total's bound: the one-sum total is exact only below 2^53 (a bound of 2^54 gives a wrong "
        "tie gap).",
        (),
        RowSource("f32", [0x0F200000, 0x0F200000, 0x00800001]),
    )
    yield dense_case(
        "floor-one-within-error",
        "Weights 2^-24, 1 - 2^-24 and 2^-80: W = 1 + 2^-80 rounds to 1 in FP64, so token 0's FP64 quota is "
        "exactly 1 while its exact quota is just below 1. Probes step 3's lower test: a floor of 1 (or any "
        "floor above 0) within the error bound of the FP64 quota is not certain; trusting it leaves one "
        "ticket too few (remaining 1, not 2).",
        ("FLOOR_TO_ZERO",),
        RowSource(
            "f32", [exact_f32(x) for x in [Fraction(1, 1 << 24), 1 - Fraction(1, 1 << 24), Fraction(1, 1 << 80)]]
        ),
    )
    yield dense_case(
        "uncertain-fraction-just-above-integer",
        "Weights 1/2 and a tail summing to 1/2 - 2^-80: W = 1 - 2^-80 rounds to 1, so token 0's FP64 quota is "
        "exactly 2^23 while its exact quota is 2^23 plus about 2^-57. Probes step 3's exact fraction of an "
        "uncertain token, r / N: that token must compete for the one ticket with its tiny fraction and lose it "
        "to token 1 (fraction about 1/2).",
        (),
        RowSource("f32", [exact_f32(x) for x in [Fraction(1, 2)] + f32_tail(Fraction(1, 2), Fraction(1, 1 << 80))]),
    )
    yield dense_case(
        "loser-exactly-at-theta-minus-margin",
        "W = 1, so every FP64 quota is exact: fractions 0, 0, 1/2, 1/2 - 2^-25 and 2^-25 with one ticket. "
        "theta = 1/2 and token 3's fraction is exactly theta - D (D = 2^-25). Probes step 4's contested band, "
        "closed at theta - D: token 3 is the best loser, so tie_gap = 2^-25; a band open at its lower end "
        "leaves token 3 in no set and takes token 4 as the best loser.",
        (),
        RowSource.f32([0.5, 0.5 - 2.0**-24, 2.0**-25, 2.0**-25 - 2.0**-49, 2.0**-49]),
    )


WEIGHTS_BLOB = {"$ref": "#/$defs/blob", "properties": {"dtype": {"enum": ["f32", "f64"]}}}
ROW_INPUTS = [
    {"weights": WEIGHTS_BLOB},
    {"logits": blob_schema("f32"), "temperature": {"$ref": "#/$defs/f32"}},
]
COUNT = {"type": "integer", "minimum": 0, "maximum": M}
FP64_FIELDS = {"fp64_error_bound": {"$ref": "#/$defs/rational"}, "fp64_may_differ": {"type": "boolean"}}
LOGIT_FIELDS = {"weights": blob_schema("f32"), "exp_margin_ulp": {"$ref": "#/$defs/rational"}}
DENSE_FIELDS = {
    "counts": blob_schema("u32"),
    "remaining": COUNT,
    "tie_gap": {"$ref": "#/$defs/rational"},
    **FP64_FIELDS,
}


# --- fuzzing ------------------------------------------------------------------------------------


def fuzz_strategy() -> SearchStrategy[dict]:
    from qconform.generators import fuzz_inputs

    return fuzz_inputs.allocation_dense_inputs()


def allocation_flags(expected: dict) -> tuple[str, ...]:
    """RANDOM_ROW, and the exact ties the answer records (``tie_gap``, ``selection_gap`` 0)."""
    flags = ("RANDOM_ROW",) + (("EXACT_TIE",) if expected.get("tie_gap") == "0/1" else ())
    return flags + (("SELECTION_TIE",) if expected.get("selection_gap") == "0/1" else ())


def fuzz_labels(case_input: dict, expected: dict) -> Labels:
    return RULES, allocation_flags(expected)


FAMILY = Family(
    name="allocation_dense",
    description="Exact dense dyadic24 allocation (R06): floor plus largest remainders of M*w/W, ties to the lowest ID.",
    rules=RULES,
    notes=NOTES,
    margins=("remaining", "tie_gap", "fp64_error_bound", "fp64_may_differ", "exp_margin_ulp"),
    build=build,
    solve=solve,
    input_schema={"oneOf": [closed(fields) for fields in ROW_INPUTS]},
    expected_schema={"oneOf": [closed(DENSE_FIELDS), closed({**DENSE_FIELDS, **LOGIT_FIELDS})]},
    comparator="allocation",
    fuzz=FuzzHooks(inputs=fuzz_strategy, labels=fuzz_labels),
)
