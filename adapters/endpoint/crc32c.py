"""CRC-32C (Castagnoli) of the endpoint, apart from the spec's (R15, R16, R21).

Parameters: reflected polynomial 0x82F63B78, initial register and final XOR
0xFFFFFFFF (the CRC catalogue's CRC-32/ISCSI; check value of b"123456789" is
0xE3069283).

The bytes go through ``google-crc32c``, whose C core uses the hardware CRC-32C
instruction (SSE4.2 ``crc32``, ARMv8 ``crc32c``) that the wire's choice of
checksum assumes; the spec's own byte-at-a-time definition
(``spec/wire/checksum.py``) is what the tests hold it to.

The endpoint works on **raw registers** (not inverted): ``reg(R, B)`` is the
register after feeding ``B`` from register ``R``. The register is linear over
GF(2): ``reg(R, B) = shift_|B|(R) xor reg(0, B)``, where ``shift_n`` feeds n zero
bytes. So the raw register of a q tail (:func:`raw`), taken once, is extended
into every checksum that covers the tail (:func:`extend`) without reading the
tail again.

``shift_n`` itself reads no bytes either: feeding n zero bytes multiplies the
register by ``x^(8n)`` modulo the polynomial (zlib's ``crc32_combine``), so it is
one carry-less multiplication by an operator computed once per length
(:func:`shift_operator`) by repeated squaring, done as four table lookups
(:func:`shift_tables`, built once per length). Feeding ``bytes(n)`` instead would
be a second CRC pass over every tail at every checksum that extends it.
"""

from __future__ import annotations

from functools import lru_cache

import google_crc32c
import numpy as np

INIT = 0xFFFFFFFF
XOROUT = 0xFFFFFFFF
MASK = 0xFFFFFFFF
#: the reflected Castagnoli polynomial; in the reflected order bit 31 is x^0
POLY = 0x82F63B78
ONE = 1 << 31


#: a buffer at most this long is handed to the library as its own ``bytes`` (a copy of a header
#: or of fixed fields costs a third of a NumPy view's making); a longer one is read in place
SHORT_BLOCK = 256


def as_bytes(data: bytes | bytearray | memoryview) -> bytes | np.ndarray:
    """What the library reads: ``bytes``, or a NumPy view of any other buffer (it refuses a
    ``memoryview`` or ``bytearray`` but reads an array's buffer): no block longer than
    :data:`SHORT_BLOCK` is copied (a q tail never is)."""
    if type(data) is bytes:
        return data
    return bytes(data) if len(data) <= SHORT_BLOCK else np.frombuffer(data, dtype=np.uint8)


def crc32c_update(register: int, data: bytes | bytearray | memoryview) -> int:
    """Advance a raw register over ``data``. (The library's running value is the
    inverted register: ``value = register xor 0xFFFFFFFF``.)"""
    return google_crc32c.extend(register ^ MASK, as_bytes(data)) ^ MASK


def raw(data: bytes | bytearray | memoryview) -> int:
    """``reg(0, data)``: the raw register of ``data`` alone, from which any CRC containing it is built
    (:func:`crc32c_update` from 0, one call: a q tail's, per REPLY)."""
    return google_crc32c.extend(MASK, as_bytes(data)) ^ MASK


def multiply(a: int, b: int) -> int:
    """``a * b`` modulo the polynomial, both in the reflected bit order (zlib's ``multmodp``)."""
    product, bit = 0, ONE
    while a:
        if a & bit:
            product ^= b
            a ^= bit
        bit >>= 1
        b = (b >> 1) ^ POLY if b & 1 else b >> 1
    return product


@lru_cache(maxsize=256)
def shift_operator(n_bytes: int) -> int:
    """``x^(8 n_bytes)`` modulo the polynomial: feeding ``n_bytes`` zero bytes multiplies by it."""
    operator, square = ONE, ONE >> 8  # x^0, and x^8: one zero byte
    while n_bytes:
        if n_bytes & 1:
            operator = multiply(operator, square)
        n_bytes >>= 1
        square = multiply(square, square)
    return operator


@lru_cache(maxsize=256)
def shift_tables(n_bytes: int) -> tuple[tuple[int, ...], ...]:
    """``shift_n`` as four 256-entry tables, one per byte of the register: the map is linear over
    GF(2), so ``shift_n(r)`` is the XOR of the images of r's four bytes (32 multiplications per length)."""
    operator = shift_operator(n_bytes)
    tables = []
    for byte in range(4):
        table = [0] * 256
        for bit in range(8):
            table[1 << bit] = multiply(operator, 1 << (8 * byte + bit))
        for index in range(3, 256):
            low = index & -index
            if index != low:
                table[index] = table[low] ^ table[index ^ low]
        tables.append(tuple(table))
    return tuple(tables)


def shift_register(register: int, n_bytes: int) -> int:
    """``shift_n(register)``: the register after ``n_bytes`` zero bytes (``reg(0, zeros) = 0``), read from no byte."""
    if not register:
        return 0
    t0, t1, t2, t3 = shift_tables(n_bytes)
    return t0[register & 0xFF] ^ t1[(register >> 8) & 0xFF] ^ t2[(register >> 16) & 0xFF] ^ t3[register >> 24]


def extend(register: int, length: int, raw_block: int) -> int:
    """The register after a block of ``length`` bytes whose :func:`raw` register is ``raw_block``."""
    return shift_register(register, length) ^ raw_block


@lru_cache(maxsize=256)
def init_through(n_bytes: int) -> int:
    """``shift_n(INIT)``: the register from :data:`INIT` over ``n_bytes`` zero bytes, one constant per
    length (a q tail's length is the negotiated stride's)."""
    return shift_register(INIT, n_bytes)


def crc32c_of_raw(length: int, raw_block: int) -> int:
    """CRC-32C of a block of ``length`` bytes whose :func:`raw` register is ``raw_block``."""
    return init_through(length) ^ raw_block ^ XOROUT


def finish(register: int) -> int:
    """The CRC-32C value of a register started at :data:`INIT`."""
    return register ^ XOROUT


def crc32c(*parts: bytes | bytearray | memoryview) -> int:
    """CRC-32C of the concatenation of ``parts``."""
    register = INIT
    for part in parts:
        register = crc32c_update(register, part)
    return finish(register)


def crc32c_of_blocks(blocks: list[tuple[int, int]]) -> int:
    """CRC-32C of consecutive blocks given as ``(length, raw register)``: no block is read again."""
    register = INIT
    for length, raw_block in blocks:
        register = extend(register, length, raw_block)
    return finish(register)
