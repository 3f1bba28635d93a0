"""Proposal weights: what enters the allocation, and what is refused (R02, R05).

The allocation consumes nonnegative draft weights ``w_v`` (R05: "globally
normalized draft weights after draft temperature and Markov bias"). They enter
either as FP32 / FP64 weight bit patterns, taken at their exact values, or as
FP32 logits turned into weights by one stated sequence of correctly rounded
FP32 operations (:func:`weights_from_logits`). q is then the exact rational
normalization of these rounded weights (R02): the spec never renormalizes
anything else.

Refusals (R05) of a weight row, by priority: an empty row (``EMPTY_ROW``);
then, if any token has one, a NaN (``NAN_WEIGHT``), a +inf (``POS_INF_WEIGHT``)
or a negative value including -inf (``NEGATIVE_WEIGHT``), in that order
whatever the token IDs (the detail names the lowest offending ID); then zero
total (``ZERO_MASS``). -0.0 is zero. A priority by class, not by ID, is what a
parallel implementation computes: one flag per class, reduced over the row.

:func:`qconform.spec.allocation_certified.f32_weight_units` (a fast path, not
normative) gives FP32 weights as integers in one power-of-two unit, straight
from their bits.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from itertools import repeat
from typing import Callable, Sequence

from qconform.spec.errors import refuse
from qconform.spec.floats import (
    F32_NEG_INF,
    F32_POS_INF,
    F32_SIGN,
    F64_EXPONENT_BITS,
    F64_FRACTION_BITS,
    Parts,
    Special,
    decode_f32,
    f32_add,
    f32_div,
    f32_exp,
    f32_sub,
    parts_value,
    unpack_f32,
    unpack_f64,
)
from qconform.spec.rules import defines

#: Refusal codes of a weight row, in priority order.
WEIGHT_REFUSALS: tuple[str, ...] = ("NAN_WEIGHT", "POS_INF_WEIGHT", "NEGATIVE_WEIGHT")


def weight_problem(parts: Parts | Special) -> str | None:
    """The R05 refusal code of one weight, or None if it is finite and nonnegative."""
    if parts is Special.NAN:
        return "NAN_WEIGHT"
    if parts is Special.POS_INF:
        return "POS_INF_WEIGHT"
    if parts is Special.NEG_INF or (parts[0] and parts[1] != 0):
        return "NEGATIVE_WEIGHT"
    return None


def refuse_by_priority(problems: Sequence[str | None], priority: Sequence[str]) -> None:
    """Raise the highest-priority code present among per-token ``problems``, naming its lowest ID."""
    for code in priority:
        if code in problems:
            raise refuse(code, f"token {problems.index(code)}")


#: The bit pattern of +inf: a pattern is finite and nonnegative (sign bit clear) exactly when it is below it.
POSITIVE_INFINITY_BITS: dict[str, int] = {
    "f32": F32_POS_INF,
    "f64": ((1 << F64_EXPONENT_BITS) - 1) << F64_FRACTION_BITS,
}

UNPACKERS: dict[str, Callable[[int], Parts | Special]] = {"f32": unpack_f32, "f64": unpack_f64}


@defines("R05")
def check_weight_bits(bits: Sequence[int], dtype: str) -> None:
    """Refuse a row of FP32 (``dtype="f32"``) or FP64 weight bits as R05 says; return if valid.

    Fast path, same verdicts: when every pattern lies in ``[0, +inf)`` (sign bit
    clear, exponent field not all ones), every weight is finite and nonnegative,
    so of the refusals only zero mass remains, and a weight is zero exactly when
    its pattern is 0. Otherwise every weight is classified.
    """
    if len(bits) == 0:
        raise refuse("EMPTY_ROW")
    if 0 <= min(bits) and max(bits) < POSITIVE_INFINITY_BITS[dtype]:
        positive = any(bits)
    else:
        parts = [UNPACKERS[dtype](b) for b in bits]
        refuse_by_priority([weight_problem(p) for p in parts], WEIGHT_REFUSALS)
        positive = any(significand for _, significand, _ in parts)
    if not positive:
        raise refuse("ZERO_MASS", f"all {len(bits)} weights are zero")


#: Clears the sign bit: a pattern is a zero (+0.0 or -0.0) exactly when its magnitude bits are 0.
MAGNITUDE_MASKS: dict[str, int] = {"f32": F32_SIGN - 1, "f64": (1 << (F64_EXPONENT_BITS + F64_FRACTION_BITS)) - 1}
ZERO: Fraction = Fraction(0)


def exact_weights(bits: Sequence[int], dtype: str) -> list[Fraction]:
    """The exact values of a row of weight bits, refused as R05 says.

    Zeros (+0.0 and -0.0, most of a masked or sparse row) are 0 without decoding;
    every other pattern is decoded to its exact value.
    """
    check_weight_bits(bits, dtype)
    unpack, magnitude = UNPACKERS[dtype], MAGNITUDE_MASKS[dtype]
    return [parts_value(unpack(b)) if b & magnitude else ZERO for b in bits]


@defines("R02", "R05")
def weights_from_f32(bits: Sequence[int]) -> list[Fraction]:
    """The exact values of FP32 weights ``w_v`` (bit patterns), refused as R05 says."""
    return exact_weights(bits, "f32")


@defines("R02", "R05")
def weights_from_f64(bits: Sequence[int]) -> list[Fraction]:
    """The exact values of FP64 weights ``w_v`` (bit patterns), refused as R05 says."""
    return exact_weights(bits, "f64")


@dataclass(frozen=True)
class LogitWeights:
    """Weights computed from logits by :func:`weights_from_logits`.

    ``weights_f32`` are the FP32 bit patterns ``w_v``; ``weights`` their exact
    values; ``exp_margin_ulp`` the smallest rounding margin of the inexact exps
    (see :func:`weights_from_logits`).
    """

    weights_f32: list[int]
    weights: list[Fraction]
    exp_margin_ulp: Fraction


#: Refusal codes of a scaled logit row, in priority order.
LOGIT_REFUSALS: tuple[str, ...] = ("NAN_LOGIT", "POS_INF_LOGIT")


def logit_problem(s_bits: int) -> str | None:
    """The R05 refusal code of a scaled logit ``s_v``: NaN or +inf; -inf is a mask."""
    value = decode_f32(s_bits)
    if value is Special.NAN:
        return "NAN_LOGIT"
    if value is Special.POS_INF:
        return "POS_INF_LOGIT"
    return None


def check_temperature(bits: int) -> None:
    """Refuse a draft temperature that is not a finite positive FP32 number (R05)."""
    value = decode_f32(bits)
    if isinstance(value, Special) or value <= 0:
        raise refuse("BAD_TEMPERATURE", f"bits {bits:#010x}")


def scaled_logit(logit: int, bias: int | None, temperature: int) -> int:
    """``s_v = f32(f32(logit_v + bias_v) / T)``, with no add when there is no bias.

    IEEE arithmetic throughout: a -inf logit stays -inf with any finite bias (a
    mask); a finite logit whose FP32 sum or quotient overflows to -inf is masked
    too (its exp is exactly 0); NaN and +inf results are refused by the caller.
    """
    z = logit if bias is None else f32_add(logit, bias)
    return f32_div(z, temperature)


def all_masked_detail(logit_bits: Sequence[int], bias_bits: Sequence[int] | None, scaled: Sequence[int]) -> str:
    """The ALL_MASKED message: how many masks were given, and how many finite logits
    became -inf in the stated FP32 order (``f32(logit + bias)`` or ``f32(z / T)``
    overflowed), so that a refusal of a row whose exact softmax exists says why."""
    biases = repeat(0) if bias_bits is None else bias_bits
    finite = sum(
        1
        for bits, bias in zip(logit_bits, biases)
        if not isinstance(decode_f32(bits), Special) and not isinstance(decode_f32(bias), Special)
    )
    if finite == 0:
        return f"all {len(scaled)} logits are masked with -inf"
    return (
        f"{finite} of {len(scaled)} logits are finite but s_v = f32(f32(logit_v + bias_v) / T) overflowed "
        "to -inf; their exact softmax exists, the stated FP32 order masks them"
    )


@defines("R02", "R05")
def weights_from_logits(
    logit_bits: Sequence[int],
    temperature_bits: int,
    bias_bits: Sequence[int] | None = None,
) -> LogitWeights:
    """Draft weights from FP32 logits, draft temperature and (Markov) bias (R05).

    The one stated order, every step one correctly rounded FP32 operation:

    1. ``z_v = f32(logit_v + bias_v)`` (skipped when there is no bias);
    2. ``s_v = f32(z_v / T)``;
    3. ``m = max s_v`` over unmasked tokens (``s_v != -inf``);
    4. ``d_v = f32(s_v - m)``;
    5. ``w_v = RN_f32(exp(d_v))``: the exact exp rounded once; masked tokens get 0.

    q is the exact normalization of these ``w_v`` (R02). The max token has
    ``d = 0`` and ``w = 1``, so a row with any unmasked token has positive mass.

    ``exp_margin_ulp`` is the minimum over unmasked tokens with inexact exp
    (``d_v != 0``) of the floored rounding margin of :func:`f32_exp`: a lower
    bound, on the 2^-32 grid, of how far the exact exp lies from a rounding
    boundary, in ulps of ``w_v``. It is 1/2 when every exp is exact. An
    implementation whose exp errs by less than this many ulps computes the same
    weights.

    Refusals (R05), by priority: an empty row (``EMPTY_ROW``); a bias row of
    another length (``BAD_SHAPE``); a temperature that is not finite positive
    (``BAD_TEMPERATURE``); any NaN ``s_v`` (``NAN_LOGIT``: a NaN logit or bias, or
    -inf + +inf); any +inf ``s_v`` (``POS_INF_LOGIT``: a +inf logit, or an
    overflow of logit + bias or of the division by T); every token masked
    (``ALL_MASKED``), which includes finite logits whose ``s_v`` overflowed to
    -inf: the stated order divides by T before subtracting the max, so
    ``[-3e38, -3e38]`` at ``T = 0.5`` is ALL_MASKED although its exact softmax is
    uniform (docs/formats/allocation_dense.md says why the order is kept).
    """
    if len(logit_bits) == 0:
        raise refuse("EMPTY_ROW")
    if bias_bits is not None and len(bias_bits) != len(logit_bits):
        raise refuse("BAD_SHAPE", f"{len(bias_bits)} biases for {len(logit_bits)} logits")
    check_temperature(temperature_bits)
    scaled = [
        scaled_logit(bits, None if bias_bits is None else bias_bits[v], temperature_bits)
        for v, bits in enumerate(logit_bits)
    ]
    refuse_by_priority([logit_problem(s) for s in scaled], LOGIT_REFUSALS)
    unmasked = [v for v, s in enumerate(scaled) if s != F32_NEG_INF]
    if not unmasked:
        raise refuse("ALL_MASKED", all_masked_detail(logit_bits, bias_bits, scaled))
    m = max((scaled[v] for v in unmasked), key=decode_f32)
    weights_f32 = [0] * len(scaled)
    margin = Fraction(1, 2)
    for v in unmasked:
        rounded = f32_exp(f32_sub(scaled[v], m))
        weights_f32[v] = rounded.bits
        if rounded.margin_ulp is not None:
            margin = min(margin, rounded.margin_ulp)
    return LogitWeights(weights_f32, weights_from_f32(weights_f32), margin)
