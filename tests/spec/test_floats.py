"""Exact FP32/FP64 decoding and correctly rounded FP32 arithmetic (R02, R05)."""

from __future__ import annotations

import math
import struct
from fractions import Fraction

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from qconform.spec import floats
from qconform.spec.floats import (
    EXP_MARGIN_DENOMINATOR,
    F32_NEG_INF,
    F32_ONE,
    F32_POS_INF,
    Special,
    decode_f32,
    decode_f64,
    f32_add,
    f32_div,
    f32_exp,
    f32_mul,
    f32_sub,
    round_to_f32,
)

pytestmark = pytest.mark.rules("R02", "R05")

f32_words = st.integers(min_value=0, max_value=2**32 - 1)
finite_floats = st.floats(allow_nan=False, allow_infinity=False)
SPECIAL_WORDS = [
    0,
    0x80000000,
    0x7F800000,
    0xFF800000,
    0x7FC00000,
    1,
    0x80000001,
    0x7F7FFFFF,
    0xFF7FFFFF,
    0x00800000,
    0x007FFFFF,
    0x3F800000,
    0xBF800000,
    0x34000000,
]
interesting_words = st.one_of(
    f32_words, st.sampled_from(SPECIAL_WORDS), st.floats(width=32, allow_nan=False).map(lambda x: pack_f32(x))
)


def pack_f32(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def unpack_f32(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def test_decode_known_values():
    assert decode_f32(0x3F800000) == 1
    assert decode_f32(0x80000000) == 0
    assert decode_f32(0x00000001) == Fraction(1, 2**149)
    assert decode_f32(0x7F7FFFFF) == (2**24 - 1) * 2**104
    assert decode_f32(0xC0490FDB) == -Fraction(13176795, 2**22)
    assert decode_f32(0x7F800000) is Special.POS_INF
    assert decode_f32(0xFF800000) is Special.NEG_INF
    assert decode_f32(0x7FC00001) is Special.NAN
    assert decode_f64(0x0000000000000001) == Fraction(1, 2**1074)
    assert decode_f64(0xFFF0000000000000) is Special.NEG_INF


@given(f32_words)
@settings(deadline=None)
def test_decode_f32_matches_struct(bits):
    x = unpack_f32(bits)
    value = decode_f32(bits)
    if math.isnan(x):
        assert value is Special.NAN
    elif math.isinf(x):
        assert value is (Special.POS_INF if x > 0 else Special.NEG_INF)
    else:
        assert value == Fraction(x)


@given(st.integers(min_value=0, max_value=2**64 - 1))
@settings(deadline=None)
def test_decode_f64_matches_struct(bits):
    x = struct.unpack("<d", struct.pack("<Q", bits))[0]
    value = decode_f64(bits)
    if math.isnan(x):
        assert value is Special.NAN
    elif not math.isinf(x):
        assert value == Fraction(x)


@given(st.one_of(finite_floats, finite_floats.map(lambda x: math.ldexp(x, -140))))
@settings(max_examples=300, deadline=None)
def test_round_to_f32_matches_struct_packing(x):
    try:
        expected = pack_f32(x)
    except OverflowError:  # struct refuses values that round beyond the FP32 range
        assert round_to_f32(Fraction(x)) & 0x7FFFFFFF == F32_POS_INF
        return
    got = round_to_f32(Fraction(x))
    if x == 0:
        assert got == 0  # exact zero is +0 whatever the sign of the float
    else:
        assert got == expected


def test_round_to_f32_edges():
    assert round_to_f32(Fraction(1, 2**150)) == 0  # half the smallest subnormal: ties to even (zero)
    assert round_to_f32(Fraction(3, 2**151)) == 1  # three quarters: rounds up
    assert round_to_f32(-Fraction(1, 2**200)) == 0x80000000  # underflow keeps the sign
    assert round_to_f32(Fraction(2**128)) == F32_POS_INF
    assert round_to_f32(Fraction((2**25 - 1) * 2**103)) == F32_POS_INF  # halfway above FP32 max rounds to inf
    assert round_to_f32(Fraction((2**25 - 1) * 2**103) - 1) == 0x7F7FFFFF
    assert round_to_f32(1 + Fraction(1, 2**24)) == F32_ONE  # tie to even
    assert round_to_f32(1 + Fraction(3, 2**24)) == F32_ONE + 2


try:
    import numpy
except ImportError:  # numpy is optional (the bench / torch extras)
    numpy = None


@pytest.mark.skipif(numpy is None, reason="numpy is not installed")
@given(interesting_words, interesting_words)
@settings(max_examples=400, deadline=None)
def test_f32_ops_match_numpy_float32(a, b):
    np = numpy
    assert np is not None  # the skipif above
    x = np.array([a], dtype=np.uint32).view(np.float32)
    y = np.array([b], dtype=np.uint32).view(np.float32)
    with np.errstate(all="ignore"):
        results = {f32_add: x + y, f32_sub: x - y, f32_mul: x * y, f32_div: x / y}
    for op, reference in results.items():
        want = int(reference.view(np.uint32)[0])
        got = op(a, b)
        if math.isnan(float(reference[0])):
            assert decode_f32(got) is Special.NAN, op.__name__
        else:
            assert got == want, (op.__name__, hex(a), hex(b))


@given(interesting_words, interesting_words)
@settings(max_examples=300, deadline=None)
def test_f32_ops_are_the_rounded_exact_result(a, b):
    """Independent of numpy: finite results equal RN(exact), checked by Fractions."""
    x, y = decode_f32(a), decode_f32(b)
    assume(not isinstance(x, Special) and not isinstance(y, Special))
    assert isinstance(x, Fraction) and isinstance(y, Fraction)
    assert decode_f32(f32_add(a, b)) == decode_f32(round_to_f32(x + y)) or (x + y == 0)
    assert decode_f32(f32_sub(a, b)) == decode_f32(round_to_f32(x - y)) or (x - y == 0)
    assert decode_f32(f32_mul(a, b)) == decode_f32(round_to_f32(x * y)) or (x * y == 0)
    if y != 0:
        assert decode_f32(f32_div(a, b)) == decode_f32(round_to_f32(x / y)) or (x == 0)


def test_ieee_special_cases():
    assert f32_sub(F32_POS_INF, F32_POS_INF) & 0x7FC00000 == 0x7FC00000
    assert f32_add(F32_NEG_INF, pack_f32(3.0)) == F32_NEG_INF
    assert f32_mul(F32_POS_INF, 0) & 0x7FC00000 == 0x7FC00000
    assert f32_div(pack_f32(1.0), 0x80000000) == F32_NEG_INF
    assert f32_div(0, 0) & 0x7FC00000 == 0x7FC00000
    assert f32_add(0x80000000, 0x80000000) == 0x80000000  # -0 + -0 = -0
    assert f32_sub(0x80000000, 0) == 0x80000000  # -0 - +0 = -0
    assert f32_sub(pack_f32(2.5), pack_f32(2.5)) == 0  # x - x = +0


@given(st.floats(min_value=-120.0, max_value=0.0, width=32))
@settings(max_examples=60, deadline=None)
def test_f32_exp_agrees_with_libm_when_margin_is_large(d):
    bits = pack_f32(d)
    rounded = f32_exp(bits)
    if d == 0:
        assert rounded.bits == F32_ONE and rounded.margin_ulp is None
        return
    assert rounded.margin_ulp is not None
    assert 0 <= rounded.margin_ulp < Fraction(1, 2)
    assert rounded.margin_ulp.denominator <= EXP_MARGIN_DENOMINATOR
    # float64 exp errs by < 1 FP64 ulp, far below 2^-20 FP32 ulps.
    if rounded.margin_ulp > Fraction(1, 2**20):
        assert rounded.bits == pack_f32(math.exp(unpack_f32(bits)))


def test_f32_exp_margin_is_the_floored_distance():
    """exp(-1) = 0.36787944117144233...: check bits and margin against a 200-digit mpmath value."""
    import mpmath

    rounded = f32_exp(pack_f32(-1.0))
    with mpmath.workdps(200):
        exact = Fraction(mpmath.exp(-1).man) * Fraction(2) ** int(mpmath.exp(-1).exp)
        w = decode_f32(rounded.bits)
        assert isinstance(w, Fraction)
        ulp = Fraction(1, 2**25)  # w is in [0.25, 0.5)
        distance = min(exact - (w - ulp / 2), (w + ulp / 2) - exact) / ulp
        assert abs(w - exact) <= ulp / 2
        assert rounded.margin_ulp == Fraction(math.floor(distance * EXP_MARGIN_DENOMINATOR), EXP_MARGIN_DENOMINATOR)


def test_f32_exp_limits():
    assert f32_exp(F32_NEG_INF).bits == 0
    assert f32_exp(0x80000000).bits == F32_ONE
    assert f32_exp(pack_f32(-2000.0)).bits == 0
    assert f32_exp(pack_f32(-103.0)).bits == pack_f32(math.exp(-103.0))  # a subnormal result
    with pytest.raises(ValueError):
        f32_exp(pack_f32(0.5))


def test_no_fp32_exp_rounds_to_the_smallest_normal():
    """The argument for rounding_margin's `exponent > F32_MIN_EXPONENT` (spec/equivalent_mutants.toml):
    of two neighbouring FP32 d, one rounds above 2^-126 and the next one below it, so (exp being
    increasing) no FP32 d has RN_f32(exp(d)) = 2^-126 (bits 0x00800000)."""
    above, below = 0xC2AEAC4F, 0xC2AEAC50  # -87.33654022216797 and the next FP32 value below it
    assert decode_f32(above) == Fraction(-11447375, 2**17)
    assert below == above + 1  # a negative FP32 value's magnitude grows with its bits
    assert f32_exp(above).bits == 0x00800026
    assert f32_exp(below).bits == 0x007FFFE6


def test_the_exp_flush_is_the_computed_answer_at_its_threshold(monkeypatch):
    """The argument for `parts_value(d) <= EXP_FLUSH_BELOW` (spec/equivalent_mutants.toml): at
    d = -1000 the enclosure, with the flush moved out of its way, gives the flush's own answer."""
    flushed = f32_exp(0xC4FA0000)  # d = -2000, below the flush
    assert flushed.bits == 0 and flushed.margin_ulp == Fraction(2**31 - 1, 2**32)
    monkeypatch.setattr(floats, "EXP_FLUSH_BELOW", -1001)
    assert f32_exp(0xC47A0000) == flushed  # d = -1000 through mpmath's enclosure
