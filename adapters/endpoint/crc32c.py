"""CRC-32C (Castagnoli) of the endpoint, written apart from the spec's (R15, R16, R21).

Parameters: reflected polynomial 0x82F63B78, initial register and final XOR
0xFFFFFFFF (the CRC catalogue's CRC-32/ISCSI; check value of b"123456789" is
0xE3069283).

Small buffers run the classic byte-at-a-time table loop. Large ones (a dense
row is half a megabyte) use the linearity of the CRC register over GF(2):
processing ``B`` starting from register ``R`` gives ``shift_len(B)(R) xor
reg(0, B)``, where ``shift_n`` is the linear map "feed n zero bytes". The buffer
is front-padded with zero bytes (which leave ``reg(0, .)`` unchanged) to
``LANE_BYTES * 2^m`` bytes, split into ``2^m`` lanes whose registers advance in
lockstep with numpy, and the lanes are folded pairwise: ``reg(0, A || B) =
shift_|B|(reg(0, A)) xor reg(0, B)``. Each linear map is held as four 256-entry
byte tables, so applying one is four lookups.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

POLY_REFLECTED = 0x82F63B78
INIT = 0xFFFFFFFF
XOROUT = 0xFFFFFFFF
#: bytes per lane of the parallel path; buffers shorter than SMALL use the byte loop
LANE_BYTES = 64
SMALL = 4096


def byte_step_table() -> list[int]:
    """The register after eight reflected shifts of each byte value."""
    table = []
    for byte in range(256):
        register = byte
        for _ in range(8):
            register = (register >> 1) ^ (POLY_REFLECTED if register & 1 else 0)
        table.append(register)
    return table


TABLE: list[int] = byte_step_table()
TABLE_NP = np.array(TABLE, dtype=np.uint32)


def update_bytes(register: int, data: bytes | bytearray | memoryview) -> int:
    """Advance a raw register over ``data`` one byte at a time."""
    table = TABLE
    for byte in bytes(data):
        register = table[(register ^ byte) & 0xFF] ^ (register >> 8)
    return register


def apply_map(tables: np.ndarray, register: int) -> int:
    """A linear map (four byte tables) applied to one 32-bit register."""
    return int(tables[0, register & 0xFF] ^ tables[1, (register >> 8) & 0xFF]
               ^ tables[2, (register >> 16) & 0xFF] ^ tables[3, register >> 24])


def apply_map_np(tables: np.ndarray, registers: np.ndarray) -> np.ndarray:
    """A linear map applied to every register of an array."""
    return (tables[0][registers & 0xFF] ^ tables[1][(registers >> 8) & 0xFF]
            ^ tables[2][(registers >> 16) & 0xFF] ^ tables[3][registers >> 24])


@lru_cache(maxsize=None)
def zero_shift(log2_bytes: int) -> np.ndarray:
    """Byte tables of ``shift_n`` for n = 2^log2_bytes zero bytes (by repeated squaring)."""
    if log2_bytes == 0:
        basis = np.array([[update_bytes(v << (8 * k), b"\0") for v in range(256)] for k in range(4)],
                         dtype=np.uint32)
        return basis
    half = zero_shift(log2_bytes - 1)
    return np.stack([apply_map_np(half, half[k]) for k in range(4)])


def shift_register(register: int, n_bytes: int) -> int:
    """``shift_n(register)``: the register after ``n_bytes`` zero bytes."""
    bit = 0
    while n_bytes:
        if n_bytes & 1:
            register = apply_map(zero_shift(bit), register)
        n_bytes >>= 1
        bit += 1
    return register


def lanes_register(data: memoryview) -> int:
    """``reg(0, data)`` by parallel lanes and a pairwise fold (see the module docstring)."""
    lanes = 1
    while lanes * LANE_BYTES < len(data):
        lanes *= 2
    padded = np.zeros(lanes * LANE_BYTES, dtype=np.uint8)
    padded[len(padded) - len(data):] = np.frombuffer(data, dtype=np.uint8)
    columns = np.ascontiguousarray(padded.reshape(lanes, LANE_BYTES).T).astype(np.uint32)
    registers = np.zeros(lanes, dtype=np.uint32)
    for column in columns:
        registers = TABLE_NP[(registers ^ column) & 0xFF] ^ (registers >> 8)
    block_log2 = LANE_BYTES.bit_length() - 1
    while len(registers) > 1:
        registers = apply_map_np(zero_shift(block_log2), registers[0::2]) ^ registers[1::2]
        block_log2 += 1
    return int(registers[0])


def raw(data: bytes | bytearray | memoryview) -> int:
    """``reg(0, data)``: the raw register of ``data`` alone, from which any CRC containing it is built."""
    view = memoryview(data).cast("B")
    if len(view) < SMALL:
        return update_bytes(0, view)
    return lanes_register(view)


def extend(register: int, length: int, raw_block: int) -> int:
    """The register after a block of ``length`` bytes whose :func:`raw` register is ``raw_block``."""
    return shift_register(register, length) ^ raw_block


def crc32c_update(register: int, data: bytes | bytearray | memoryview) -> int:
    """Advance a raw (not inverted) register over ``data``."""
    view = memoryview(data).cast("B")
    if len(view) < SMALL:
        return update_bytes(register, view)
    return extend(register, len(view), lanes_register(view))


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
    """CRC-32C of consecutive blocks given as ``(length, raw register)``: no byte is read again."""
    register = INIT
    for length, raw_block in blocks:
        register = extend(register, length, raw_block)
    return finish(register)
