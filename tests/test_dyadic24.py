"""dyadic24 q values as little-endian FP32: exact round trips and receiver refusals (R03, R04)."""

from __future__ import annotations

import struct
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qconform.spec.constants import M
from qconform.spec.dyadic24 import counts_from_f32_bits, counts_from_f32_le, counts_to_f32_le, q_values_f32_bits
from qconform.spec.errors import SpecError

pytestmark = pytest.mark.rules("R03", "R04")


@st.composite
def count_rows(draw) -> list[int]:
    """Counts summing to M: cut points in [0, M], zeros allowed."""
    cuts = sorted(draw(st.lists(st.integers(0, M), min_size=0, max_size=40)))
    return [b - a for a, b in zip([0] + cuts, cuts + [M])]


@given(count_rows())
@settings(max_examples=150, deadline=None)
def test_round_trip_is_exact(counts):
    data = counts_to_f32_le(counts)
    assert len(data) == 4 * len(counts)
    floats = struct.unpack(f"<{len(counts)}f", data)
    assert [Fraction(x) for x in floats] == [Fraction(c, M) for c in counts]  # q = c / M exactly in FP32
    assert counts_from_f32_le(data) == counts
    assert counts_from_f32_bits(q_values_f32_bits(counts)) == counts


def test_extreme_counts():
    assert q_values_f32_bits([M]) == [0x3F800000]
    assert q_values_f32_bits([1, M - 1]) == [0x33800000, 0x3F7FFFFF]
    assert counts_from_f32_bits([0x80000000, 0x3F800000]) == [0, M]  # -0.0 has value zero


def code_of(call, *args) -> str:
    with pytest.raises(SpecError) as info:
        call(*args)
    return info.value.code


@pytest.mark.parametrize(
    "bits, code",
    [
        ([0x7FC00000, 0x3F800000], "NOT_DYADIC24"),  # NaN
        ([0x7F800000], "NOT_DYADIC24"),  # +inf
        ([0xBF800000, 0x40000000], "NOT_DYADIC24"),  # negative
        ([0x3F800000, 0x00000001], "NOT_DYADIC24"),  # 2^-149 * M is not an integer
        ([0x3EAAAAAB, 0x3F2AAAAB], "NOT_DYADIC24"),  # roundings of 1/3 and 2/3
        ([0x3F000000, 0x3EFFFFFE], "WRONG_TOTAL_MASS"),  # (M/2) + (M/2 - 2)
        ([0x40000000, 0xBF800000], "NOT_DYADIC24"),
        ([0x4B800000], "WRONG_TOTAL_MASS"),  # a single count of 2^24 * 2^24, far above M
    ],
)
def test_receiver_refusals(bits, code):
    assert code_of(counts_from_f32_bits, bits) == code


def test_sender_refusals_and_byte_length():
    assert code_of(q_values_f32_bits, [M, 1]) == "WRONG_TOTAL_MASS"
    assert code_of(q_values_f32_bits, [M + 1, -1]) == "NOT_DYADIC24"
    assert code_of(counts_from_f32_le, b"\x00\x00\x80") == "BAD_SHAPE"
