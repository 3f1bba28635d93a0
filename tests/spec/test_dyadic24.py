"""dyadic24 q values as little-endian FP32 (R03, R04): the sender's encoding is exact, and the
receiver's one decoder (spec/wire/checks) recovers every count from it."""

from __future__ import annotations

import struct
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qconform.spec.constants import M
from qconform.spec.dyadic24 import q_values_f32_bits
from qconform.spec.errors import SpecError
from qconform.spec.wire.checks import f32_count, q_value_class

pytestmark = pytest.mark.rules("R03", "R04")


@st.composite
def count_rows(draw) -> list[int]:
    """Counts summing to M: cut points in [0, M], zeros allowed."""
    cuts = sorted(draw(st.lists(st.integers(0, M), min_size=0, max_size=40)))
    return [b - a for a, b in zip([0] + cuts, cuts + [M])]


@given(count_rows())
@settings(max_examples=150, deadline=None)
def test_round_trip_is_exact(counts):
    bits = q_values_f32_bits(counts)
    floats = struct.unpack(f"<{len(bits)}f", struct.pack(f"<{len(bits)}I", *bits))
    assert [Fraction(x) for x in floats] == [Fraction(c, M) for c in counts]  # q = c / M exactly in FP32
    assert all(q_value_class(b) is None for b in bits)  # the receiver accepts every value the sender writes
    assert [f32_count(b) for b in bits] == counts


def test_extreme_counts():
    assert q_values_f32_bits([M]) == [0x3F800000]
    assert q_values_f32_bits([1, M - 1]) == [0x33800000, 0x3F7FFFFF]
    assert q_values_f32_bits([0, M]) == [0x00000000, 0x3F800000]  # a zero count is +0.0, never -0.0


def code_of(call, *args) -> str:
    with pytest.raises(SpecError) as info:
        call(*args)
    return info.value.code


def test_sender_refusals():
    assert code_of(q_values_f32_bits, [M, 1]) == "WRONG_TOTAL_MASS"
    assert code_of(q_values_f32_bits, [M + 1, -1]) == "NOT_DYADIC24"
