"""Wire v2 framing: the fixed 20-byte header and the frame checksum (R12, R18, R21).

A frame is ``header || payload``. The header (``layout.HEADER``) carries the
magic ``QSMP``, the wire version 2, the message type, the header length 20,
the payload length and a CRC-32C over header bytes 0..15 followed by the
payload. The header is read and checked on its own, before a single payload
byte is touched (R18).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from qconform.spec.rules import defines
from qconform.spec.wire.checksum import CRC32C_INIT, CRC32C_XOROUT, crc32c_update
from qconform.spec.wire.layout import (
    CHECKSUM_OFFSET,
    HEADER,
    HEADER_SIZE,
    MESSAGES,
    V2_MAGIC,
    WIRE_VERSION,
    struct_format,
)
from qconform.spec.wire.reasons import reject

HEADER_FORMAT: str = struct_format(HEADER)


@dataclass(frozen=True)
class Header:
    """The decoded fixed header of a v2 frame."""

    magic: bytes
    version: int
    message_type: int
    header_length: int
    payload_length: int
    checksum: int


@defines("R12", "R18")
def parse_header(header_bytes: bytes | memoryview) -> Header:
    """Unpack exactly :data:`HEADER_SIZE` bytes into a :class:`Header` (no checks)."""
    return Header(*struct.unpack(HEADER_FORMAT, header_bytes))


@defines("R12", "R18")
def check_header(header: Header) -> None:
    """Refuse an unknown version (UNKNOWN_VERSION), type (UNKNOWN_MESSAGE_TYPE) or header length (LENGTH_MISMATCH)."""
    if header.version != WIRE_VERSION:
        raise reject("UNKNOWN_VERSION", f"version {header.version}")
    if header.message_type not in MESSAGES:
        raise reject("UNKNOWN_MESSAGE_TYPE", f"type {header.message_type}")
    if header.header_length != HEADER_SIZE:
        raise reject("LENGTH_MISMATCH", f"header length {header.header_length}, not {HEADER_SIZE}")


@defines("R21")
def frame_checksum(header_prefix: bytes | memoryview, payload: bytes | memoryview) -> int:
    """CRC-32C of the header's first 16 bytes (everything but the checksum) followed by the payload."""
    return crc32c_update(crc32c_update(CRC32C_INIT, header_prefix), payload) ^ CRC32C_XOROUT


@defines("R12", "R21")
def frame(message_type: int, payload: bytes) -> bytes:
    """A complete v2 frame: the header for ``payload`` (its length and checksum) and the payload."""
    prefix = struct.pack("<4sHHII", V2_MAGIC, WIRE_VERSION, message_type, HEADER_SIZE, len(payload))
    return prefix + struct.pack("<I", frame_checksum(prefix, payload)) + payload


@defines("R21")
def seal(data: bytes) -> bytes:
    """``data`` with its checksum field recomputed over bytes 0..15 and every byte after the header.

    Senders never need it; it builds frames whose only fault is elsewhere than the checksum.
    """
    prefix, payload = data[:CHECKSUM_OFFSET], data[HEADER_SIZE:]
    return prefix + struct.pack("<I", frame_checksum(prefix, payload)) + payload
