"""CRC-32C (Castagnoli), the checksum of every wire v2 checksum field (R15, R16, R21).

CRC-32C rather than the IEEE CRC-32 of zlib/Ethernet: at the frame lengths of
this wire (tens of bytes to a few hundred kilobytes) the Castagnoli polynomial
keeps a larger Hamming distance than the IEEE polynomial (Castagnoli 1993,
Koopman 2002), it is the checksum of iSCSI, SCTP, ext4 and Btrfs, and x86
(SSE4.2 ``crc32``) and ARMv8 (``crc32c*``) compute it in hardware, so a 10 MB
dense batch costs little to check. A checksum detects corrupt transport only;
that the worker sampled correctly needs independent distribution and RNG tests
(R21).

Parameters (the CRC catalogue's CRC-32/ISCSI): reflected polynomial 0x82F63B78
(0x1EDC6F41 unreflected), initial value and final XOR 0xFFFFFFFF, reflected input
and output. Check value: CRC-32C(b"123456789") = 0xE3069283.
"""

from __future__ import annotations

from qconform.spec.rules import defines

#: The reflected Castagnoli polynomial.
CRC32C_POLY_REFLECTED: int = 0x82F63B78
CRC32C_INIT: int = 0xFFFFFFFF
CRC32C_XOROUT: int = 0xFFFFFFFF
#: CRC-32C of the ASCII bytes "123456789" (the catalogue's check value).
CRC32C_CHECK: int = 0xE3069283


def table_entry(byte: int) -> int:
    """The CRC register after shifting one byte value through eight reflected steps."""
    register = byte
    for _ in range(8):
        register = (register >> 1) ^ (CRC32C_POLY_REFLECTED if register & 1 else 0)
    return register


#: The 256-entry byte table of the reflected polynomial.
CRC32C_TABLE: tuple[int, ...] = tuple(table_entry(b) for b in range(256))


@defines("R15", "R16", "R21")
def crc32c_update(register: int, data: bytes | bytearray | memoryview) -> int:
    """Advance a raw (not yet inverted) CRC-32C register over ``data``, one table step a byte."""
    table = CRC32C_TABLE
    for byte in bytes(data):
        register = (register >> 8) ^ table[(register ^ byte) & 0xFF]
    return register


@defines("R15", "R16", "R21")
def crc32c(data: bytes | bytearray | memoryview) -> int:
    """CRC-32C of ``data``: initial register 0xFFFFFFFF, table steps, final XOR 0xFFFFFFFF."""
    return crc32c_update(CRC32C_INIT, data) ^ CRC32C_XOROUT
