"""Proposal weights from FP32/FP64 bits and from logits; the R05 refusals (R02, R05)."""

from __future__ import annotations

import math
import struct
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qconform.spec.allocation_certified import f32_weight_units
from qconform.spec.errors import SpecError
from qconform.spec.floats import F32_NEG_INF, F32_POS_INF, F32_QUIET_NAN, decode_f32
from qconform.spec.markov import markov_bias_f32
from qconform.spec.weights import (
    check_weight_bits,
    weights_from_f32,
    weights_from_f64,
    weights_from_logits,
)

pytestmark = pytest.mark.rules("R02", "R05")


def f32(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def f64(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def as_float(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def code_of(call, *args) -> str:
    with pytest.raises(SpecError) as info:
        call(*args)
    return info.value.code


def test_weights_are_exact_values():
    assert weights_from_f32([f32(0.1), 0, 0x80000000, 1]) == [Fraction(13421773, 2**27), 0, 0, Fraction(1, 2**149)]
    assert weights_from_f64([f64(0.1), f64(2.0)]) == [Fraction(0.1), Fraction(2)]


@pytest.mark.parametrize(
    "bits, code",
    [
        ([f32(1.0), F32_QUIET_NAN], "NAN_WEIGHT"),
        ([F32_POS_INF, f32(1.0)], "POS_INF_WEIGHT"),
        ([f32(1.0), f32(-2.0)], "NEGATIVE_WEIGHT"),
        ([f32(1.0), F32_NEG_INF], "NEGATIVE_WEIGHT"),
        ([0, 0x80000000], "ZERO_MASS"),
        ([], "EMPTY_ROW"),
        ([f32(-1.0), F32_POS_INF, F32_QUIET_NAN], "NAN_WEIGHT"),  # class priority, not ID order
        ([f32(-1.0), F32_POS_INF], "POS_INF_WEIGHT"),
    ],
)
def test_weight_refusals(bits, code):
    assert code_of(weights_from_f32, bits) == code


def test_f64_refusals():
    assert code_of(weights_from_f64, [f64(1.0), f64(math.nan)]) == "NAN_WEIGHT"
    assert code_of(weights_from_f64, [f64(-math.inf)]) == "NEGATIVE_WEIGHT"
    assert code_of(weights_from_f64, [f64(-0.0)]) == "ZERO_MASS"


#: FP32 patterns of every class: finite positives of all binades, zeros, subnormals, specials, negatives.
SPECIAL_F32 = [
    0,
    0x80000000,
    1,
    0x007FFFFF,
    0x00800000,
    0x3F800000,
    0x7F7FFFFF,
    F32_POS_INF,
    F32_NEG_INF,
    F32_QUIET_NAN,
    0x7F800001,
    0xFFC00000,
    0xBF800000,
    0x80000001,
]
any_f32 = st.one_of(st.integers(0, 2**32 - 1), st.sampled_from(SPECIAL_F32))
nonnegative_f32 = st.one_of(st.integers(0, 0x7F7FFFFF), st.sampled_from([0, 0x80000000, 1, 0x3F800000, 0x7F7FFFFF]))


def float_verdict(bits: list[int]) -> str | None:
    """The R05 code of a row from Python floats (independent of the spec's bit classification)."""
    values = [as_float(b) for b in bits]
    if not values:
        return "EMPTY_ROW"
    for code, bad in (
        ("NAN_WEIGHT", math.isnan),
        ("POS_INF_WEIGHT", lambda x: x == math.inf),
        ("NEGATIVE_WEIGHT", lambda x: x < 0),
    ):
        if any(bad(x) for x in values):
            return code
    return None if any(x > 0 for x in values) else "ZERO_MASS"


@given(st.lists(any_f32, max_size=12))
@settings(max_examples=200, deadline=None)
def test_weight_verdicts_match_a_float_classification(bits):
    """The fast path (every pattern in [0, +inf)) and the per-token path give the R05 verdicts."""
    expected = float_verdict(bits)
    if expected is None:
        check_weight_bits(bits, "f32")
        assert weights_from_f32(bits) == [Fraction(as_float(b)) for b in bits]
    else:
        assert code_of(check_weight_bits, bits, "f32") == expected
        assert code_of(weights_from_f32, bits) == expected
        assert code_of(f32_weight_units, bits) == expected


@given(st.lists(nonnegative_f32, min_size=1, max_size=40).filter(lambda row: any(b & 0x7FFFFFFF for b in row)))
@settings(max_examples=150, deadline=None)
def test_weight_units_are_the_weights_in_one_unit(bits):
    units = f32_weight_units(bits)
    unit = Fraction(2) ** units.unit_exponent
    assert [n * unit for n in units.units] == weights_from_f32(bits)
    assert all(isinstance(n, int) and n >= 0 for n in units.units)
    smallest = min(n for n in units.units if n)
    assert smallest < 2**24  # the unit is as coarse as the smallest positive weight allows


def test_zero_patterns_are_zero_without_decoding():
    row = [0x3F800000, 0, 0x3F800000, 0x80000000, 0x00000001] * 1000
    assert weights_from_f32(row) == [Fraction(1), 0, Fraction(1), 0, Fraction(1, 2**149)] * 1000
    assert weights_from_f64([f64(0.5), f64(-0.0), 0, f64(5e-324)]) == [Fraction(1, 2), 0, 0, Fraction(1, 2**1074)]


def float_reference(logits: list[int], temperature: int, bias: list[int] | None) -> list[int]:
    """The same order in numpy float32 with a float64 exp rounded once to FP32."""
    np = pytest.importorskip("numpy")
    z = np.array(logits, dtype=np.uint32).view(np.float32)
    if bias is not None:
        z = z + np.array(bias, dtype=np.uint32).view(np.float32)
    t = np.array([temperature], dtype=np.uint32).view(np.float32)[0]
    with np.errstate(over="ignore"):
        s = z / t
    m = s[s != -np.inf].max()
    d = s - m
    w = np.exp(d.astype(np.float64)).astype(np.float32)
    return [int(x) for x in w.view(np.uint32)]


logit_values = st.one_of(st.floats(min_value=-30, max_value=30, width=32), st.just(-math.inf))


@given(
    st.lists(logit_values, min_size=1, max_size=12), st.floats(min_value=0.0625, max_value=4.0, width=32), st.booleans()
)
@settings(max_examples=40, deadline=None)
def test_weights_from_logits_match_float_reference_when_margin_is_large(logits, temperature, with_bias):
    if all(x == -math.inf for x in logits):
        logits[0] = 0.0
    bits = [f32(x) for x in logits]
    bias = [f32(0.25 * i - 1.0) for i in range(len(bits))] if with_bias else None
    result = weights_from_logits(bits, f32(temperature), bias)
    reference = float_reference(bits, f32(temperature), bias)
    assert [decode_f32(b) for b in result.weights_f32] == result.weights
    assert max(result.weights) == 1
    if result.exp_margin_ulp > Fraction(1, 2**20):  # float64 exp is then certainly rounded the same
        assert result.weights_f32 == reference
    for v, x in enumerate(logits):
        if x == -math.inf:
            assert result.weights[v] == 0


@pytest.mark.parametrize(
    "logits, temperature, code",
    [
        ([f32(0.0), F32_QUIET_NAN], f32(1.0), "NAN_LOGIT"),
        ([F32_POS_INF, f32(0.0)], f32(1.0), "POS_INF_LOGIT"),
        ([f32(3e38), f32(0.0)], f32(0.5), "POS_INF_LOGIT"),  # overflow of z / T
        ([F32_NEG_INF, F32_NEG_INF], f32(1.0), "ALL_MASKED"),
        ([f32(0.0)], 0, "BAD_TEMPERATURE"),
        ([f32(0.0)], 0x80000000, "BAD_TEMPERATURE"),
        ([f32(0.0)], f32(-1.0), "BAD_TEMPERATURE"),
        ([f32(0.0)], F32_POS_INF, "BAD_TEMPERATURE"),
        ([f32(0.0)], F32_QUIET_NAN, "BAD_TEMPERATURE"),
        ([], f32(1.0), "EMPTY_ROW"),
        ([F32_POS_INF, F32_QUIET_NAN], f32(1.0), "NAN_LOGIT"),  # class priority
    ],
)
def test_logit_refusals(logits, temperature, code):
    assert code_of(weights_from_logits, logits, temperature) == code


@pytest.mark.rules("R05")
def test_all_masked_by_overflow_says_so():
    """[-3e38, -3e38] at T = 0.5: both quotients overflow to -inf, so the stated order refuses
    ALL_MASKED although the exact softmax is uniform; the message must say that, and only then."""
    with pytest.raises(SpecError) as overflow:
        weights_from_logits([f32(-3e38), f32(-3e38)], f32(0.5))
    assert overflow.value.code == "ALL_MASKED"
    assert "2 of 2 logits are finite" in overflow.value.detail and "overflowed" in overflow.value.detail
    with pytest.raises(SpecError) as masked:
        weights_from_logits([F32_NEG_INF, f32(-3e38)], f32(0.5), [f32(0.0), f32(-3e38)])
    assert "1 of 2 logits are finite" in masked.value.detail  # the -inf logit is a mask, not an overflow
    with pytest.raises(SpecError) as plain:
        weights_from_logits([F32_NEG_INF, F32_NEG_INF], f32(1.0))
    assert "overflow" not in plain.value.detail


def test_masks_and_overflow_to_minus_inf():
    result = weights_from_logits([F32_NEG_INF, f32(-1.0), f32(0.0)], f32(2.0**-140))
    assert result.weights == [0, 0, 1]  # -1 / 2^-140 overflows to -inf: masked
    assert result.exp_margin_ulp == Fraction(1, 2)
    biased = weights_from_logits([F32_NEG_INF, f32(0.0)], f32(1.0), [f32(5.0), f32(0.0)])
    assert biased.weights == [0, 1]
    assert code_of(weights_from_logits, [F32_NEG_INF, f32(0.0)], f32(1.0), [F32_POS_INF, 0]) == "NAN_LOGIT"


def test_markov_bias_is_sequential_fp32():
    left = [[f32(1.0), f32(2.0**-30)], [f32(3.0), f32(-1.0)]]
    right = [[f32(1.0), f32(2.0)], [f32(1.0), f32(0.5)]]
    assert markov_bias_f32(0, left, right) == [f32(1.0), f32(2.0)]  # 1 + 2^-30 rounds to 1 in FP32
    assert markov_bias_f32(1, left, right) == [f32(2.0), f32(5.5)]
    np = pytest.importorskip("numpy")
    rows = np.array(left, dtype=np.uint32).view(np.float32)
    cols = np.array(right, dtype=np.uint32).view(np.float32)
    acc = np.zeros(2, dtype=np.float32)
    for j in range(2):
        acc = (acc + rows[1, j] * cols[j]).astype(np.float32)
    assert markov_bias_f32(1, left, right) == [int(x) for x in acc.view(np.uint32)]
    assert code_of(markov_bias_f32, 2, left, right) == "TOKEN_OUT_OF_RANGE"
    assert code_of(markov_bias_f32, 0, left, [right[0]]) == "BAD_SHAPE"
