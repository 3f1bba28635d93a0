"""dyadic24 q values on the wire: counts <-> little-endian FP32 (R03, R04, R09).

q(v) = c_v / M with M = 2^24 and integer counts 0 <= c_v <= M. Every such value
is exactly an FP32 number (at most 24 significant bits, exponent >= -24), so
the sender transmits it as little-endian FP32 without rounding. The receiver
recovers ``c_v = q(v) * M``, requires a nonnegative integer (``NOT_DYADIC24``),
and checks that the counts sum to exactly M (``WRONG_TOTAL_MASS``). A count
above M alone exceeds the total and is refused as ``WRONG_TOTAL_MASS``, so a
receiver that checks each count against M and sums at most 2^32 counts in
uint64 can never wrap. -0.0 has value zero and decodes to count 0. There is no
receiver-side renormalization (R03); a zero count is exactly zero probability
(R04).
"""

from __future__ import annotations

import struct
from typing import Sequence

from qconform.spec.constants import M
from qconform.spec.errors import refuse
from qconform.spec.floats import Special, decode_f32, round_ratio_f32
from qconform.spec.rules import defines

M_BITS: int = M.bit_length() - 1


def check_total(counts: Sequence[int]) -> None:
    """Refuse counts that are not nonnegative integers (NOT_DYADIC24, checked first),
    then a count above M or a total other than M (WRONG_TOTAL_MASS)."""
    for v, c in enumerate(counts):
        if isinstance(c, bool) or not isinstance(c, int) or c < 0:
            raise refuse("NOT_DYADIC24", f"entry {v}: count {c!r} is not a nonnegative integer")
    for v, c in enumerate(counts):
        if c > M:
            raise refuse("WRONG_TOTAL_MASS", f"entry {v}: count {c} alone exceeds M")
    total = sum(counts)
    if total != M:
        raise refuse("WRONG_TOTAL_MASS", f"counts sum to {total}, not M = {M}")


@defines("R03", "R09")
def q_values_f32_bits(counts: Sequence[int]) -> list[int]:
    """FP32 bit patterns of ``q(v) = c_v / M`` (always exact), for counts summing to M."""
    check_total(counts)
    return [round_ratio_f32(False, c, 1, -M_BITS) for c in counts]


@defines("R03")
def counts_to_f32_le(counts: Sequence[int]) -> bytes:
    """The q row as little-endian FP32 bytes, as sent on the wire (R03)."""
    bits = q_values_f32_bits(counts)
    return struct.pack(f"<{len(bits)}I", *bits)


@defines("R03", "R04")
def count_from_f32_bits(v: int, bits: int) -> int:
    """``c_v = q(v) * M`` of one FP32 value, refused unless a nonnegative integer (R03)."""
    value = decode_f32(bits)
    if isinstance(value, Special):
        raise refuse("NOT_DYADIC24", f"entry {v}: q is {value.value}")
    count = value * M
    if count < 0 or count.denominator != 1:
        raise refuse("NOT_DYADIC24", f"entry {v}: q * M = {count} is not a nonnegative integer")
    return count.numerator


@defines("R03", "R04")
def counts_from_f32_bits(bits: Sequence[int]) -> list[int]:
    """Recover and validate the counts of a row of FP32 q values (R03).

    Refuses a non-finite, negative or non-integer ``q * M`` (``NOT_DYADIC24``) and
    counts that do not sum to exactly M (``WRONG_TOTAL_MASS``).
    """
    counts = [count_from_f32_bits(v, b) for v, b in enumerate(bits)]
    check_total(counts)
    return counts


@defines("R03", "R04")
def counts_from_f32_le(data: bytes) -> list[int]:
    """Recover and validate the counts of a little-endian FP32 q row (R03).

    A byte length that is not a multiple of 4 is refused (``BAD_SHAPE``).
    """
    if len(data) % 4:
        raise refuse("BAD_SHAPE", f"{len(data)} bytes is not a whole number of FP32 values")
    return counts_from_f32_bits(list(struct.unpack(f"<{len(data) // 4}I", data)))
