"""CRC-32C of the wire (R15, R16, R21): catalogue check values and an independent bitwise CRC."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qconform.spec.wire.checksum import CRC32C_CHECK, CRC32C_INIT, CRC32C_XOROUT, crc32c, crc32c_update

pytestmark = pytest.mark.rules("R15", "R16", "R21")


def bitwise_crc32c(data: bytes) -> int:
    """CRC-32C one bit at a time from the unreflected polynomial 0x1EDC6F41 (no table)."""
    poly = int("{:032b}".format(0x1EDC6F41)[::-1], 2)  # reflect the catalogue polynomial here
    register = 0xFFFFFFFF
    for byte in data:
        register ^= byte
        for _ in range(8):
            register = (register >> 1) ^ (poly if register & 1 else 0)
    return register ^ 0xFFFFFFFF


def test_catalogue_check_value():
    assert crc32c(b"123456789") == CRC32C_CHECK == 0xE3069283
    assert bitwise_crc32c(b"123456789") == 0xE3069283


@pytest.mark.parametrize(
    "data, expected",
    [
        (b"", 0x00000000),
        (bytes(32), 0x8A9136AA),  # RFC 3720 B.4: 32 bytes of zeros
        (b"\xff" * 32, 0x62A8AB43),  # 32 bytes of ones
        (bytes(range(32)), 0x46DD794E),  # incrementing
        (bytes(range(31, -1, -1)), 0x113FDB5C),  # decrementing
    ],
)
def test_rfc3720_iscsi_vectors(data, expected):
    assert crc32c(data) == expected


@given(st.binary(max_size=300))
@settings(max_examples=150, deadline=None)
def test_table_matches_bitwise(data):
    assert crc32c(data) == bitwise_crc32c(data)


@given(st.binary(max_size=200), st.binary(max_size=200))
@settings(max_examples=100, deadline=None)
def test_update_chains_over_concatenation(a, b):
    chained = crc32c_update(crc32c_update(CRC32C_INIT, a), b) ^ CRC32C_XOROUT
    assert chained == crc32c(a + b)


@given(st.binary(min_size=1, max_size=200), st.data())
@settings(max_examples=100, deadline=None)
def test_every_single_bit_error_is_detected(data, draw):
    bit = draw.draw(st.integers(0, 8 * len(data) - 1))
    flipped = bytearray(data)
    flipped[bit // 8] ^= 1 << (bit % 8)
    assert crc32c(bytes(flipped)) != crc32c(data)
