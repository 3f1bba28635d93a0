"""Exact IEEE 754 binary32 / binary64 values and correctly rounded FP32 arithmetic (R02, R05).

Every FP32 or FP64 value that enters the spec is a bit pattern. A finite bit
pattern is a dyadic rational and is decoded to exactly that rational; NaN and
the infinities decode to a :class:`Special`. FP32 arithmetic is reproduced
bit for bit: each operation computes its exact rational result and rounds it
once, to nearest with ties to even (IEEE 754 roundTiesToEven), with the IEEE
rules for signed zeros, infinities and NaN. No Python float is ever used.

A finite value is handled internally as ``(negative, significand, exponent)``
with value ``(-1)^negative * significand * 2^exponent``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from fractions import Fraction

import mpmath

from qconform.spec.rules import defines

#: Bit layouts: (exponent field width, fraction field width).
F32_EXPONENT_BITS, F32_FRACTION_BITS = 8, 23
F64_EXPONENT_BITS, F64_FRACTION_BITS = 11, 52

#: FP32 precision (significand bits, hidden bit included) and exponent range of
#: the last significand bit: the smallest subnormal is 2^F32_MIN_EXPONENT, the
#: largest finite value is (2^24 - 1) * 2^F32_MAX_EXPONENT.
F32_PRECISION: int = 24
F32_MIN_EXPONENT: int = -149
F32_MAX_EXPONENT: int = 104

F32_SIGN: int = 0x80000000
F32_POS_INF: int = 0x7F800000
F32_NEG_INF: int = 0xFF800000
#: The quiet NaN this module returns for invalid operations (the spec treats every NaN alike).
F32_QUIET_NAN: int = 0x7FC00000
F32_ONE: int = 0x3F800000
F32_MAX: int = 0x7F7FFFFF


class Special(enum.Enum):
    """A bit pattern that is not a real number."""

    NAN = "nan"
    POS_INF = "+inf"
    NEG_INF = "-inf"


#: A finite value as (negative, significand, exponent).
Parts = tuple[bool, int, int]


def unpack_bits(bits: int, exponent_bits: int, fraction_bits: int) -> Parts | Special:
    """Split an IEEE bit pattern into sign, integer significand and exponent."""
    width = 1 + exponent_bits + fraction_bits
    if not isinstance(bits, int) or not 0 <= bits < 1 << width:
        raise ValueError(f"{bits!r} is not a {width}-bit pattern")
    negative = bool(bits >> (width - 1))
    biased = (bits >> fraction_bits) & ((1 << exponent_bits) - 1)
    fraction = bits & ((1 << fraction_bits) - 1)
    bias = (1 << (exponent_bits - 1)) - 1
    if biased == (1 << exponent_bits) - 1:
        if fraction:
            return Special.NAN
        return Special.NEG_INF if negative else Special.POS_INF
    if biased == 0:  # zero or subnormal: no hidden bit
        return negative, fraction, 1 - bias - fraction_bits
    return negative, fraction | (1 << fraction_bits), biased - bias - fraction_bits


def unpack_f32(bits: int) -> Parts | Special:
    """Sign, significand and exponent of an FP32 bit pattern."""
    return unpack_bits(bits, F32_EXPONENT_BITS, F32_FRACTION_BITS)


def unpack_f64(bits: int) -> Parts | Special:
    """Sign, significand and exponent of an FP64 bit pattern."""
    return unpack_bits(bits, F64_EXPONENT_BITS, F64_FRACTION_BITS)


def parts_value(parts: Parts) -> Fraction:
    """The exact rational value of a finite (negative, significand, exponent)."""
    negative, significand, exponent = parts
    value = Fraction(significand << exponent) if exponent >= 0 else Fraction(significand, 1 << -exponent)
    return -value if negative else value


@defines("R02", "R05")
def decode_f32(bits: int) -> Fraction | Special:
    """The exact value of an FP32 bit pattern (-0.0 is ``Fraction(0)``; subnormals exact)."""
    parts = unpack_f32(bits)
    return parts if isinstance(parts, Special) else parts_value(parts)


@defines("R02", "R05")
def decode_f64(bits: int) -> Fraction | Special:
    """The exact value of an FP64 bit pattern (-0.0 is ``Fraction(0)``; subnormals exact)."""
    parts = unpack_f64(bits)
    return parts if isinstance(parts, Special) else parts_value(parts)


def round_ratio_f32(negative: bool, numerator: int, denominator: int, exponent: int) -> int:
    """FP32 bits of ``(-1)^negative * numerator / denominator * 2^exponent``, rounded once.

    Round to nearest, ties to even. ``numerator >= 0``, ``denominator > 0``. A
    result that rounds to zero keeps the sign (IEEE underflow); one beyond the
    largest finite magnitude becomes an infinity.
    """
    sign = F32_SIGN if negative else 0
    if numerator == 0:
        return sign
    # Choose e so that the quotient numerator / denominator * 2^(exponent - e)
    # has exactly F32_PRECISION integer bits, then clamp e to the subnormal grid.
    e = exponent + numerator.bit_length() - denominator.bit_length() - F32_PRECISION
    for _ in range(2):
        e_used = max(e, F32_MIN_EXPONENT)
        shift = exponent - e_used
        num = numerator << shift if shift >= 0 else numerator
        den = denominator if shift >= 0 else denominator << -shift
        q, r = divmod(num, den)
        if q < 1 << F32_PRECISION:
            break
        e += 1
    if 2 * r > den or (2 * r == den and q & 1):
        q += 1
    if q == 1 << F32_PRECISION:
        q >>= 1
        e_used += 1
    if e_used > F32_MAX_EXPONENT:
        return sign | F32_POS_INF
    # Normal: biased exponent e_used + 150 above the fraction bits, hidden bit
    # folded in; subnormal (e_used == -149, q < 2^23): the bits are q itself.
    return sign | (((e_used - F32_MIN_EXPONENT) << F32_FRACTION_BITS) + q)


@defines("R02", "R05")
def round_to_f32(x: Fraction) -> int:
    """FP32 bits of the rational ``x`` rounded to nearest, ties to even.

    Exact zero gives +0.0; a nonzero value too small for the smallest subnormal
    rounds to a zero of its own sign; a value beyond the FP32 range gives an
    infinity of its sign.
    """
    x = Fraction(x)
    return round_ratio_f32(x < 0, abs(x.numerator), x.denominator, 0)


def exact_zero_sign(a: Parts, b: Parts, subtract_b: bool) -> int:
    """Sign of an exactly zero sum: -0 only when both addends are negative zeros."""
    b_negative = b[0] != subtract_b
    return F32_SIGN if (a[0] and b_negative) else 0


def add_parts(a: Parts, b: Parts, subtract_b: bool) -> int:
    """FP32 bits of the correctly rounded sum ``a + b`` (or ``a - b``) of finite values."""
    b_negative = b[0] != subtract_b
    e = min(a[2], b[2])
    total = (-a[1] if a[0] else a[1]) << (a[2] - e)
    total += (-b[1] if b_negative else b[1]) << (b[2] - e)
    if total == 0:
        if a[1] == 0 and b[1] == 0:
            return exact_zero_sign(a, b, subtract_b)
        return 0  # x + (-x) is +0 under round to nearest
    return round_ratio_f32(total < 0, abs(total), 1, e)


def add_special(a: Parts | Special, b: Parts | Special, subtract_b: bool) -> int:
    """IEEE result of a sum with a NaN or infinite operand."""
    flip = {Special.POS_INF: Special.NEG_INF, Special.NEG_INF: Special.POS_INF}
    if subtract_b and isinstance(b, Special):
        b = flip.get(b, b)
    infinities = [x for x in (a, b) if x in (Special.POS_INF, Special.NEG_INF)]
    if Special.NAN in (a, b) or (len(infinities) == 2 and infinities[0] != infinities[1]):
        return F32_QUIET_NAN
    return F32_POS_INF if infinities[0] == Special.POS_INF else F32_NEG_INF


def f32_sum(a: int, b: int, subtract_b: bool) -> int:
    """FP32 ``a + b`` (or ``a - b``) on bit patterns, correctly rounded (IEEE 754)."""
    pa, pb = unpack_f32(a), unpack_f32(b)
    if isinstance(pa, Special) or isinstance(pb, Special):
        return add_special(pa, pb, subtract_b)
    return add_parts(pa, pb, subtract_b)


@defines("R05")
def f32_add(a: int, b: int) -> int:
    """FP32 ``a + b`` on bit patterns, correctly rounded (IEEE 754)."""
    return f32_sum(a, b, False)


@defines("R05")
def f32_sub(a: int, b: int) -> int:
    """FP32 ``a - b`` on bit patterns, correctly rounded (IEEE 754)."""
    return f32_sum(a, b, True)


def is_zero(x: Parts | Special) -> bool:
    return not isinstance(x, Special) and x[1] == 0


def product_operands(a: int, b: int) -> tuple[Parts | Special, Parts | Special, int] | None:
    """Unpacked operands of a product or quotient and its sign bit; None if either is NaN."""
    pa, pb = unpack_f32(a), unpack_f32(b)
    if Special.NAN in (pa, pb):
        return None
    return pa, pb, (a ^ b) & F32_SIGN


@defines("R05")
def f32_mul(a: int, b: int) -> int:
    """FP32 ``a * b`` on bit patterns, correctly rounded (IEEE 754)."""
    operands = product_operands(a, b)
    if operands is None:
        return F32_QUIET_NAN
    pa, pb, sign = operands
    if isinstance(pa, Special) or isinstance(pb, Special):
        if is_zero(pa) or is_zero(pb):
            return F32_QUIET_NAN  # inf * 0
        return sign | F32_POS_INF
    if pa[1] == 0 or pb[1] == 0:
        return sign
    return round_ratio_f32(bool(sign), pa[1] * pb[1], 1, pa[2] + pb[2])


@defines("R05")
def f32_div(a: int, b: int) -> int:
    """FP32 ``a / b`` on bit patterns, correctly rounded (IEEE 754)."""
    operands = product_operands(a, b)
    if operands is None:
        return F32_QUIET_NAN
    pa, pb, sign = operands
    a_inf, b_inf = isinstance(pa, Special), isinstance(pb, Special)
    if a_inf and b_inf:
        return F32_QUIET_NAN  # inf / inf
    if a_inf:
        return sign | F32_POS_INF
    if b_inf:
        return sign  # finite / inf is a signed zero
    if pb[1] == 0:
        return F32_QUIET_NAN if pa[1] == 0 else sign | F32_POS_INF
    if pa[1] == 0:
        return sign
    return round_ratio_f32(bool(sign), pa[1], pb[1], pa[2] - pb[2])


#: Exp margins are floored to this grid (units of the ulp of the rounded result).
EXP_MARGIN_BITS: int = 32
EXP_MARGIN_DENOMINATOR: int = 1 << EXP_MARGIN_BITS
#: First working precision (bits) of the exp enclosure; doubled until decided.
EXP_START_PRECISION: int = 96
#: The enclosure is widened by 2^(EXP_SAFETY_BITS - precision) relative to mpmath's
#: result, far more than mpmath's own error at its working precision.
EXP_SAFETY_BITS: int = 8
#: Below this argument exp(d) < 2^-1442 and rounds to +0.0 with margin just under 1/2.
EXP_FLUSH_BELOW: int = -1000


@dataclass(frozen=True)
class RoundedExp:
    """``bits`` = RN_f32(exp(d)); ``margin_ulp`` is None when exp(d) is exact (d = 0).

    ``margin_ulp`` is floor(2^32 * m) / 2^32 where m is the distance from the
    exact exp(d) to the nearest FP32 rounding boundary (a midpoint between two
    neighbouring FP32 values), in units of ulp(w): the gap from w to the next
    larger FP32 value (2^-149 for w = 0). A hardware exp that is off by less than
    ``margin_ulp`` ulps of w still rounds to the same w.
    """

    bits: int
    margin_ulp: Fraction | None


def exp_enclosure(d: Parts, precision: int) -> tuple[int, int, int]:
    """``(n_lo, n_hi, E)`` with ``n_lo * 2^E <= exp(d) <= n_hi * 2^E``.

    mpmath's exp at ``precision`` bits, widened by the relative safety slack
    ``2^(EXP_SAFETY_BITS - precision)`` on both sides.
    """
    negative, significand, exponent = d
    with mpmath.workprec(precision):
        y = mpmath.exp(mpmath.ldexp(mpmath.mpf(-significand if negative else significand), exponent))
        man, exp2 = (int(part) for part in y.man_exp)
    scale = 1 << (precision - EXP_SAFETY_BITS)
    return man * (scale - 1), man * (scale + 1), exp2 - (precision - EXP_SAFETY_BITS)


def rounding_margin(n_lo: int, n_hi: int, unit_exponent: int, bits: int) -> int | None:
    """floor(2^32 * distance to the nearest rounding boundary / ulp(w)), if it is the
    same for every x in [n_lo, n_hi] * 2^unit_exponent (all of which round to the
    FP32 value w of ``bits``), else None.

    The boundaries around w = s * 2^e are (s - 1/2) * 2^e and (s + 1/2) * 2^e,
    except that below a normal power of two the spacing halves: (s - 1/4) * 2^e.
    """
    _, significand, exponent = unpack_f32(bits)
    shift = exponent - unit_exponent - 2  # quarter ulps, in enclosure units
    if shift < 0:
        return None
    power_of_two_normal = significand == 1 << F32_FRACTION_BITS and exponent > F32_MIN_EXPONENT
    lower = (4 * significand - (1 if power_of_two_normal else 2)) << shift
    upper = (4 * significand + 2) << shift
    if 2 * n_lo <= lower + upper <= 2 * n_hi:
        return None  # the tent's peak lies inside the enclosure
    floors = {(min(n - lower, upper - n) << EXP_MARGIN_BITS) >> (shift + 2) for n in (n_lo, n_hi)}
    return floors.pop() if len(floors) == 1 else None


@defines("R05")
def f32_exp(d_bits: int) -> RoundedExp:
    """exp(d) rounded once to FP32 (nearest, ties to even), for an FP32 ``d <= 0``.

    exp(-inf) = +0 and exp(+-0) = 1 are exact. Otherwise exp(d) is irrational
    (Lindemann-Weierstrass), so it is never on a rounding boundary nor on the
    margin grid: the working precision is doubled until an enclosure decides
    both the rounded bits and the floored margin.
    """
    d = unpack_f32(d_bits)
    if d is Special.NEG_INF:
        return RoundedExp(0, None)
    if isinstance(d, Special) or (d[0] is False and d[1] != 0):
        raise ValueError(f"f32_exp is defined for d <= 0, got bits {d_bits:#010x}")
    if d[1] == 0:
        return RoundedExp(F32_ONE, None)
    if parts_value(d) < EXP_FLUSH_BELOW:
        return RoundedExp(0, Fraction(EXP_MARGIN_DENOMINATOR // 2 - 1, EXP_MARGIN_DENOMINATOR))
    precision = EXP_START_PRECISION
    while True:
        n_lo, n_hi, unit_exponent = exp_enclosure(d, precision)
        bits = round_ratio_f32(False, n_lo, 1, unit_exponent)
        if bits == round_ratio_f32(False, n_hi, 1, unit_exponent):
            margin = rounding_margin(n_lo, n_hi, unit_exponent, bits)
            if margin is not None:
                return RoundedExp(bits, Fraction(margin, EXP_MARGIN_DENOMINATOR))
        precision *= 2
