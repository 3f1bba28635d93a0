"""Accumulated vectors: millions of cases pinned by one hash (docs/accumulated.md).

Case ``i`` of an accumulated family is built from the **input stream**, Philox4x32-10
blocks keyed by :data:`STREAM_KEY` at counter ``(i mod 2^32, i >> 32, j, tag)``
(``j`` the block index within the case, ``tag`` the family's code). Every case is
then an ordinary input object of its vector family (docs/formats/), so a divergent
case prints as an ordinary vector. The answers of the spec (each family's ``solve``)
are reduced to a fixed-width canonical **record** of little-endian u32 words, hashed
in fixed shards of :data:`SHARD_CASES` cases; the published hash is the SHA-256 of
the concatenated shard digests. That combination does not depend on how many
processes computed the shards (docs/accumulated.md, "Sharding").

This module is the definition: the stream, the inputs, the records and the hash.
:mod:`qconform.generators.accumulated_engine` computes the same records exactly with
vectorised NumPy integers; tests/generators/test_accumulated.py proves the two equal.
Candidates never import this module (tests/adapters/test_candidate_independence.py).
"""

from __future__ import annotations

import hashlib
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from types import ModuleType

import numpy as np
from numpy.typing import ArrayLike

from qconform.generators.encoding import EncodingError, decode_blob, encode_blob, encode_u64
from qconform.generators.encoding import f32_bits as float_bits
from qconform.generators.native_extensions import optional_extension

U64 = np.uint64
WORD_MASK = U64(0xFFFFFFFF)
M = 1 << 24

#: key words of the input stream: ASCII "qcon" and "acc1" read as little-endian u32
STREAM_KEY: tuple[int, int] = (0x6E6F6371, 0x31636361)

#: cases per shard: shard ``s`` holds cases ``[s * SHARD_CASES, (s + 1) * SHARD_CASES)``
SHARD_CASES: int = 1 << 16

#: most tokens of a row in the accumulated families (small V keeps the engine in uint64)
VMAX: int = 8
#: most drafts of a verification case
KMAX: int = 5
#: draws of one categorical_sampling case
DRAWS: int = 4
#: padding word of a record
PAD: int = 0xFFFFFFFF

PHILOX_M0, PHILOX_M1 = U64(0xD2511F53), U64(0xCD9E8D57)
PHILOX_W0, PHILOX_W1 = U64(0x9E3779B9), U64(0xBB67AE85)

#: domain codes of the RNG ABI (docs/rng-abi.md) and decision codes of a verification record
DOMAIN_CODES = {"PROPOSAL": 1, "ACCEPT": 2, "CORRECTION": 3}
DOMAIN_NAMES = {code: name for name, code in DOMAIN_CODES.items()}
DECISION_CODES = {"accept": 0, "reject": 1, "correction": 2, "bonus": 3}


class AccumulatedError(ValueError):
    """An answer that cannot be reduced to its family's record (malformed output)."""


# --- Philox4x32-10 over NumPy lanes ---------------------------------------------------------


#: lanes per pass of :func:`philox_lanes`: the working arrays stay in a core's cache
PHILOX_CHUNK: int = 1 << 14


def philox_lanes(
    c0: ArrayLike, c1: ArrayLike, c2: ArrayLike, c3: ArrayLike, k0: ArrayLike, k1: ArrayLike
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Philox4x32-10 (Random123) on uint64 lanes holding 32-bit words; every product of two
    32-bit words fits in 64 bits, so the arithmetic is exact. Equal to ``spec.philox.philox4x32``.
    The inputs broadcast together; a key that is the same for every lane may be a Python int.
    The lanes go in passes of :data:`PHILOX_CHUNK`, each round in place (ten array operations)."""
    keys: list[int | np.ndarray] = [k if isinstance(k, int) else np.asarray(k, dtype=U64) for k in (k0, k1)]
    words = [np.asarray(c, dtype=U64) for c in (c0, c1, c2, c3)]
    shape = np.broadcast_shapes(*(w.shape for w in words), *(k.shape for k in keys if not isinstance(k, int)))
    # fresh lanes of this call's own, worked on in place and returned
    x = [np.array(np.broadcast_to(w, shape), dtype=U64).reshape(-1) for w in words]
    flat_keys: list[int | np.ndarray] = [
        k if isinstance(k, int) else np.broadcast_to(k, shape).reshape(-1) for k in keys
    ]
    n = x[0].size
    p0, p1 = np.empty(min(n, PHILOX_CHUNK), dtype=U64), np.empty(min(n, PHILOX_CHUNK), dtype=U64)
    for lo in range(0, n, PHILOX_CHUNK):
        hi = min(lo + PHILOX_CHUNK, n)
        x0, x1, x2, x3 = (w[lo:hi] for w in x)
        key0, key1 = (k if isinstance(k, int) else k[lo:hi].copy() for k in flat_keys)
        a, b = p0[: hi - lo], p1[: hi - lo]
        for r in range(10):
            if r:
                key0 = bump(key0, PHILOX_W0)
                key1 = bump(key1, PHILOX_W1)
            np.multiply(x0, PHILOX_M0, out=a)
            np.multiply(x2, PHILOX_M1, out=b)
            np.right_shift(b, U64(32), out=x0)  # (hi(M1 c2) ^ c1 ^ k0, lo(M1 c2), hi(M0 c0) ^ c3 ^ k1, lo(M0 c0))
            x0 ^= x1
            x0 ^= key0
            np.bitwise_and(b, WORD_MASK, out=x1)
            np.right_shift(a, U64(32), out=x2)
            x2 ^= x3
            x2 ^= key1
            np.bitwise_and(a, WORD_MASK, out=x3)
    c0, c1, c2, c3 = (w.reshape(shape) for w in x)
    return c0, c1, c2, c3


def bump(key: int | np.ndarray, weyl: np.uint64) -> int | np.ndarray:
    """The next round's key word (Weyl sequence, mod 2^32): in place for a lane array."""
    if isinstance(key, int):
        return (key + int(weyl)) & 0xFFFFFFFF
    key += weyl
    key &= WORD_MASK
    return key


def stream_words(tag: int, cases: np.ndarray, blocks: int, needed: np.ndarray | None = None) -> np.ndarray:
    """Input-stream blocks ``0 .. blocks - 1`` of each case, as words ``[n, 4 * blocks]``: word
    ``4 j + k`` is word ``k`` of block ``j``, Philox4x32-10 at counter ``(i mod 2^32, i >> 32, j,
    tag)`` under :data:`STREAM_KEY`. One pass over all the blocks of all the cases, or with
    ``needed`` (bool ``[n, blocks]``) over those blocks only (the others' words are zero)."""
    i = np.asarray(cases, dtype=U64)
    if needed is None:
        j = np.arange(blocks, dtype=U64)[None, :]
        words = philox_lanes(i[:, None] & WORD_MASK, i[:, None] >> U64(32), j, U64(tag), *STREAM_KEY)
        return np.stack(words, axis=2).reshape(len(i), 4 * blocks)
    case, block = np.nonzero(needed)
    out = np.zeros((len(i), blocks, 4), dtype=U64)
    words = philox_lanes(i[case] & WORD_MASK, i[case] >> U64(32), block.astype(U64), U64(tag), *STREAM_KEY)
    out[needed] = np.stack(words, axis=1)  # a boolean mask walks the blocks in the order of nonzero
    return out.reshape(len(i), 4 * blocks)


def draw_word0(
    seed: np.ndarray, position: np.ndarray, rnd: np.ndarray, generation: np.ndarray, domain: int
) -> np.ndarray:
    """Output word 0 of the RNG ABI draw (docs/rng-abi.md) with draw counter 0: key = seed
    (low, high), counter = (position, round, generation, domain << 24)."""
    seed = np.asarray(seed, dtype=U64)
    position = np.asarray(position, dtype=U64)
    return philox_lanes(
        position,
        np.broadcast_to(rnd, position.shape),
        np.broadcast_to(generation, position.shape),
        np.full(position.shape, domain << 24, dtype=U64),
        np.broadcast_to(seed & WORD_MASK, position.shape),
        np.broadcast_to(seed >> U64(32), position.shape),
    )[0]


# --- shared row construction ---------------------------------------------------------------


#: a sorting network of the seven cut points (16 compare-exchanges, depth 6; Knuth, TAOCP 5.3.4):
#: on columns, it sorts every row at once (tests/generators/test_accumulated.py checks it on every 0/1 input)
SORT7: tuple[tuple[int, int], ...] = (
    (0, 6), (2, 3), (4, 5), (0, 2), (1, 4), (3, 6), (0, 1), (2, 5),
    (3, 4), (1, 2), (4, 6), (2, 3), (4, 5), (1, 2), (3, 4), (5, 6),
)  # fmt: skip


def counts_from_cuts(cuts: np.ndarray, vocab: np.ndarray) -> np.ndarray:
    """Dyadic24 counts ``[..., VMAX]`` from ``VMAX - 1`` cut points in [0, M] (``[..., VMAX - 1]``,
    ``vocab`` broadcasting to the rows): cuts at index ``>= V - 1`` are set to M, the cuts are
    sorted, and the counts are the gaps of ``0, cuts..., M``. Entries at and beyond V are
    zero; equal cuts give zero counts. The cuts are sorted by :data:`SORT7`, column by column."""
    last = np.broadcast_to(np.asarray(vocab, dtype=np.int64) - 1, cuts.shape[:-1])
    cols = [np.where(last <= c, np.uint32(M), cuts[..., c].astype(np.uint32)) for c in range(VMAX - 1)]
    for i, j in SORT7:
        low = np.minimum(cols[i], cols[j])
        np.maximum(cols[i], cols[j], out=cols[j])
        cols[i] = low
    counts = np.empty(cuts.shape[:-1] + (VMAX,), dtype=U64)
    counts[..., 0] = cols[0]
    for c in range(1, VMAX - 1):
        counts[..., c] = cols[c] - cols[c - 1]
    counts[..., VMAX - 1] = np.uint32(M) - cols[-1]
    return counts


def row_cuts(words: np.ndarray, coarse: np.ndarray) -> np.ndarray:
    """Cut points from words ``[..., k]``: the top 24 bits, or in coarse mode (``coarse``
    broadcasting to the rows) the top 4 (multiples of 2^20, so ties and zero counts are frequent):
    ``(w >> 28) << 20`` is ``(w >> 8) & 0xf00000``."""
    keep = np.where(np.asarray(coarse)[..., None], U64(0xF00000), U64(0xFFFFFF))
    return (words >> U64(8)) & keep


def sample_rows(counts: np.ndarray, u24: np.ndarray) -> np.ndarray:
    """R08 over count rows: the first index whose cumulative count is strictly greater than u24."""
    return np.argmax(np.cumsum(counts, axis=-1) > u24[..., None], axis=-1)


def blob_u32(values: Iterable[int]) -> dict:
    return encode_blob("u32", [int(v) for v in values])


def dense_row(counts: np.ndarray) -> dict:
    return {"representation": "dense", "counts": blob_u32(counts)}


def floor_log2(values: np.ndarray) -> np.ndarray:
    """``floor(log2 v)`` of integers ``1 <= v <= 2^24`` by comparisons (0 where ``v = 0``)."""
    v = np.asarray(values, dtype=np.int64)
    return sum((((v >> t) > 0).astype(np.int64) for t in range(1, 25)), np.zeros_like(v))


def f32_bits(values: np.ndarray, bias: int) -> np.ndarray:
    """FP32 bit patterns of ``v * 2^(bias - 127)`` for integers ``0 <= v <= 2^24`` (always exact),
    by integer arithmetic: ``v = m * 2^e`` with ``2^23 <= m < 2^24`` has exponent field ``e + bias``."""
    v = np.asarray(values, dtype=np.int64)
    e = floor_log2(v)
    mantissa = np.left_shift(v, np.maximum(23 - e, 0)) & 0x7FFFFF
    return np.where(v > 0, ((e + bias) << 23) | mantissa, 0).astype(U64)


def f32_bits_of_counts(counts: np.ndarray) -> np.ndarray:
    """FP32 bit patterns of ``c / M`` for counts ``0 <= c <= M``."""
    return f32_bits(counts, 127 - 24)


# --- the families ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    """The inputs of cases ``[start, stop)`` as arrays (family-specific fields), and their block
    when it was made with them (the native stream, :func:`verification_arrays`); else the
    family's ``block`` makes it from the fields. ``records``: the C engine's records of the cases,
    when the native stream computed them with the inputs (its fused path: ``verification_round``,
    ``categorical_sampling``, ``allocation_dense``); the engine returns them where it would run
    the C engine (accumulated_engine's ``verification_records`` and the others)."""

    start: int
    stop: int
    fields: dict[str, np.ndarray]
    block: dict[str, np.ndarray] | None = None
    records: np.ndarray | None = None


@dataclass(frozen=True)
class AccumulatedFamily:
    """An accumulated family: its stream tag, record width, arrays of a case range, one
    case's input object, the record of an answer object, and the block of a case range
    (the same inputs as arrays, docs/accumulated.md "Blocks"); where a record holds the whole
    answer, ``answer`` is its inverse: the answer object whose record it is (docs/accumulated.md,
    "Judging a block's divergent cases")."""

    name: str
    tag: int
    record_words: int
    arrays: Callable[[int, int], Batch]
    case_input: Callable[[Batch, int], dict]
    record: Callable[[dict, dict], list[int]]
    block: Callable[[Batch], dict[str, np.ndarray]]
    answer: Callable[[dict, Sequence[int]], dict] | None = None


def _cases(start: int, stop: int) -> np.ndarray:
    return np.arange(start, stop, dtype=U64)


def as_int(value: object) -> int:
    """An answer's integer field, strictly: a JSON integer, never a bool or a string."""
    if type(value) is not int:
        raise AccumulatedError(f"{value!r} is not an integer")
    return value


def as_ints(values: object) -> list[int]:
    if not isinstance(values, list):
        raise AccumulatedError(f"{values!r} is not a list")
    return [as_int(v) for v in values]


def as_word(text: object) -> int:
    """A ``"0x%08x"`` word of an answer (docs/vector-format.md), strictly."""
    if not isinstance(text, str) or len(text) != 10 or not text.startswith("0x"):
        raise AccumulatedError(f"{text!r} is not a 0x-prefixed 8-digit hex word")
    return int(text[2:], 16)


# rng_abi (tag 1) --------------------------------------------------------------------------


def rng_arrays(start: int, stop: int) -> Batch:
    """The cases' fields, with the engine's records where the native stream is built (its
    ``rng_cases``, the same fields bit for bit: tests/generators/test_accumulated_native.py), else
    by NumPy (:func:`rng_arrays_numpy`, the definition)."""
    if NATIVE_STREAM is None:
        return rng_arrays_numpy(start, stop)
    names = ("seed", "position", "round", "generation", "domain", "draw_counter")  # rng_arrays_numpy's order
    f = {name: np.empty(stop - start, dtype=U64) for name in names}
    records = np.empty((stop - start, 10), dtype="<u4")
    NATIVE_STREAM.rng_cases(
        start, f["seed"], f["generation"], f["round"], f["position"], f["domain"], f["draw_counter"], records
    )
    return Batch(start, stop, f, records=records)


def rng_arrays_numpy(start: int, stop: int) -> Batch:
    words = stream_words(1, _cases(start, stop), 2)
    b0, b1 = words[:, 0:4], words[:, 4:8]
    return Batch(
        start,
        stop,
        {
            "seed": b0[:, 0] | (b0[:, 1] << U64(32)),
            "position": b0[:, 2],
            "round": b0[:, 3],
            "generation": b1[:, 0],
            "domain": U64(1) + b1[:, 1] % U64(3),
            "draw_counter": b1[:, 2] >> U64(8),
        },
    )


def rng_input(batch: Batch, k: int) -> dict:
    f = batch.fields
    return {
        "seed": encode_u64(int(f["seed"][k])),
        "generation": int(f["generation"][k]),
        "round": int(f["round"][k]),
        "position": int(f["position"][k]),
        "domain": DOMAIN_NAMES[int(f["domain"][k])],
        "draw_counter": int(f["draw_counter"][k]),
    }


def rng_record(_inp: dict, answer: dict) -> list[int]:
    """counter words (4), output words (4), u24, u32."""
    counter, output = answer["counter"], answer["output"]
    if not isinstance(counter, list) or not isinstance(output, list) or len(counter) != 4 or len(output) != 4:
        raise AccumulatedError("rng_abi answer needs 4 counter and 4 output words")
    return [as_word(w) for w in counter + output] + [as_int(answer["u24"]), as_int(answer["u32"])]


# categorical_sampling (tag 2) -------------------------------------------------------------


def categorical_arrays(start: int, stop: int) -> Batch:
    """The cases' fields, with the engine's records where the native stream is built (its
    ``categorical_cases``, the same fields bit for bit: tests/generators/test_accumulated_native.py),
    else by NumPy (:func:`categorical_arrays_numpy`, the definition)."""
    if NATIVE_STREAM is None:
        return categorical_arrays_numpy(start, stop)
    n = stop - start
    vocab, counts = np.empty(n, dtype=U64), np.empty((n, VMAX), dtype=U64)
    draws, records = np.empty((n, DRAWS), dtype=U64), np.empty((n, DRAWS), dtype="<u4")
    NATIVE_STREAM.categorical_cases(start, vocab, counts, draws, records)
    return Batch(start, stop, {"vocab": vocab, "counts": counts, "draws": draws}, records=records)


def categorical_arrays_numpy(start: int, stop: int) -> Batch:
    words = stream_words(2, _cases(start, stop), 5)
    b = [words[:, 4 * j : 4 * j + 4] for j in range(5)]
    vocab = U64(1) + b[0][:, 0] % U64(VMAX)
    coarse = (b[0][:, 1] & U64(1)).astype(bool)
    cut_words = np.concatenate([b[1], b[2][:, :3]], axis=1)
    counts = counts_from_cuts(row_cuts(cut_words, coarse), vocab.astype(np.int64))
    cumulative = np.cumsum(counts, axis=1)
    select, value = b[3], b[4]
    index = ((select >> U64(2)) % vocab[:, None]).astype(np.int64)
    edge = np.take_along_axis(cumulative, index, axis=1)
    mode = select & U64(3)
    draws = np.where(mode == U64(2), edge, np.where(mode == U64(3), np.maximum(edge, U64(1)) - U64(1), value >> U64(8)))
    draws = np.minimum(draws, U64(M - 1))
    return Batch(start, stop, {"vocab": vocab, "counts": counts, "draws": draws})


def categorical_input(batch: Batch, k: int) -> dict:
    f = batch.fields
    vocab = int(f["vocab"][k])
    return {"vocab": vocab, "row": dense_row(f["counts"][k, :vocab]), "draws": [int(d) for d in f["draws"][k]]}


def categorical_record(_inp: dict, answer: dict) -> list[int]:
    """the DRAWS tokens."""
    tokens = as_ints(answer["tokens"])
    if len(tokens) != DRAWS:
        raise AccumulatedError(f"categorical_sampling answer needs {DRAWS} tokens")
    return tokens


# allocation_dense (tag 3) -----------------------------------------------------------------


def allocation_arrays(start: int, stop: int) -> Batch:
    """The cases' fields, with the engine's records where the native stream is built (its
    ``allocation_cases``, the same fields bit for bit: tests/generators/test_accumulated_native.py),
    else by NumPy (:func:`allocation_arrays_numpy`, the definition)."""
    if NATIVE_STREAM is None:
        return allocation_arrays_numpy(start, stop)
    n = stop - start
    vocab, weights, records = np.empty(n, dtype=U64), np.empty((n, VMAX), dtype=U64), np.empty((n, VMAX), dtype="<u4")
    NATIVE_STREAM.allocation_cases(start, vocab, weights, records)
    return Batch(start, stop, {"vocab": vocab, "weights": weights}, records=records)


def allocation_arrays_numpy(start: int, stop: int) -> Batch:
    stream = stream_words(3, _cases(start, stop), 3)
    b0, words = stream[:, 0:4], stream[:, 4:12]
    vocab = U64(1) + b0[:, 0] % U64(VMAX)
    shift = np.array([12, 28, 30, 9], dtype=U64)[(b0[:, 1] & U64(3)).astype(np.int64)]
    weights = words >> shift[:, None]
    weights = np.where(np.arange(VMAX)[None, :] < vocab[:, None].astype(np.int64), weights, U64(0))
    empty = weights.sum(axis=1) == 0
    last = (vocab - U64(1)).astype(np.int64)
    weights[np.flatnonzero(empty), last[empty]] = U64(1)
    return Batch(start, stop, {"vocab": vocab, "weights": weights})


def allocation_input(batch: Batch, k: int) -> dict:
    f = batch.fields
    vocab = int(f["vocab"][k])
    # one case's few weights, integers below 2^24, each exactly a Python float and an FP32 value (this
    # runs per divergent case of a block: 24 NumPy passes of ``f32_bits`` on a row of eight cost 0.1 ms)
    return {"weights": encode_blob("f32", [float_bits(float(w)) for w in f["weights"][k, :vocab].tolist()])}


def allocation_record(inp: dict, answer: dict) -> list[int]:
    """the V counts, padded with zeros to VMAX."""
    counts, _ = decode_blob(answer["counts"], "u32")
    if len(counts) != inp["weights"]["shape"][0]:
        raise AccumulatedError(
            f"allocation_dense answer has {len(counts)} counts for {inp['weights']['shape'][0]} weights"
        )
    return list(counts) + [0] * (VMAX - len(counts))


def allocation_answer(inp: dict, record: Sequence[int]) -> dict:
    """The answer whose record is ``record`` (:func:`allocation_record`'s inverse): its first V words
    as the counts; the padding is not read (the caller checks the answer's record is ``record``)."""
    return {"counts": blob_u32(record[: inp["weights"]["shape"][0]])}


# verification_round (tag 4) ---------------------------------------------------------------

#: verification record: accepted, emitted count, emitted (KMAX + 1), draw count, draws (KMAX + 1) x 5
VERIFY_WORDS: int = 3 + (KMAX + 1) + 5 * (KMAX + 1)
Q_BLOCK, P_BLOCK = 2, 2 + 2 * KMAX


def native_stream() -> ModuleType | None:
    """The verification_round stream in C (``_accumulated_stream.c``), or None: not built (no C
    compiler where it was installed), or switched off by ``QCONFORM_ACCUMULATED_NATIVE=0``."""
    return optional_extension("_accumulated_stream", "QCONFORM_ACCUMULATED_NATIVE")


NATIVE_STREAM: ModuleType | None = native_stream()


class MemoryPool:
    """The native stream's allocations, each kept for reuse once no array made from it is alive.

    Why: a block of 16384 cases is 22 MB, and fresh memory costs the kernel a zeroed page for
    every page the stream writes: a third of the harness's time on ``verification_round``
    (a sampling profile, bench/RESULTS.md, issue #24). Reused, the pages stay mapped. An
    allocation is idle when only the pool refers to it: every array made from it (a view, its
    views, a reshape) holds a reference to it, so a live batch, block or record array is never
    written over (``sys.getrefcount``, CPython's count; tests/generators/test_accumulated_native.py)."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.held: list[np.ndarray] = []
        self.lock = threading.Lock()

    def take(self, size: int) -> np.ndarray:
        """``size`` bytes: an idle allocation of at least that size and at most twice it, or a new one
        (kept while fewer than ``keep`` are held, or in the place of an idle one)."""
        with self.lock:
            idle = -1
            for index in range(len(self.held)):
                # referred to by the list and the call's argument only: no array of it is alive
                if sys.getrefcount(self.held[index]) == 2:
                    if size <= self.held[index].size <= 2 * size:
                        return self.held[index][:size]
                    idle = index
            fresh = np.empty(size, dtype=np.uint8)
            if len(self.held) < self.keep:
                self.held.append(fresh)
            elif idle >= 0:
                self.held[idle] = fresh
            return fresh


#: the allocations of :func:`verification_arrays_native`: the harness holds at most four batches at once
#: (the one judged, the one answered, with pipelined requests one more in flight, the next one made ahead)
STREAM_MEMORY = MemoryPool(keep=5)


def verification_arrays(start: int, stop: int) -> Batch:
    """The cases' fields and block: by the native stream where it is built, else by NumPy (the same
    arrays, bit for bit: tests/generators/test_accumulated_native.py)."""
    if NATIVE_STREAM is None:
        return verification_arrays_numpy(start, stop)
    return verification_arrays_native(NATIVE_STREAM, start, stop)


def verification_arrays_native(native: ModuleType, start: int, stop: int, fused: bool = True) -> Batch:
    """The fields of :func:`verification_arrays_numpy` and the block of :func:`verification_block`,
    made by ``native.verification_cases`` in one pass over the cases; ``fused``: with the C engine's
    records, each small group of cases verified as soon as it is made, while its rows are in cache
    (docs/accumulated.md, "The engine"). The arrays are views of one allocation: NumPy asks the
    kernel for huge pages on a large one, where seventeen arrays of their own cost a page fault per
    4 KiB written (half the time of the pass); and the allocation is reused once no array of it is
    alive (:class:`MemoryPool`). Every element of every array is written."""
    n = stop - start
    shapes: dict[str, tuple[str, tuple[int, ...]]] = {
        "seed": ("<u8", ()),
        "generation": ("<u8", ()),
        "round": ("<u8", ()),
        "anchor": ("<u8", ()),
        "depth": ("<i8", ()),
        "vocab": ("<i8", ()),
        "drafts": ("<i8", (KMAX,)),
        "q": ("<u8", (KMAX, VMAX)),
        "p": ("<u8", (KMAX + 1, VMAX)),
    }
    block_shapes = {name: ("<u4", shape) for name, (_, shape) in shapes.items() if name not in ("seed", "q", "p")}
    block_shapes |= {"q": ("<u4", (KMAX, VMAX)), "p": ("<f4", (KMAX + 1, VMAX))}
    layout = list(shapes.values()) + list(block_shapes.values()) + ([("<u4", (VERIFY_WORDS,))] if fused else [])
    sizes = [n * np.dtype(dtype).itemsize * int(np.prod(shape, dtype=np.int64)) for dtype, shape in layout]
    padded = [-(-size // 64) * 64 for size in sizes]  # each array on a cache line of its own
    memory = STREAM_MEMORY.take(sum(padded))
    arrays, offset = [], 0
    for (dtype, shape), size, room in zip(layout, sizes, padded):
        arrays.append(memory[offset : offset + size].view(dtype).reshape((n, *shape)))
        offset += room
    native.verification_cases(start, *arrays)
    fields = dict(zip(shapes, arrays))
    block = {"seed": fields["seed"]} | dict(zip(block_shapes, arrays[len(shapes) : len(shapes) + len(block_shapes)]))
    return Batch(start, stop, fields, block, arrays[-1] if fused else None)


def verification_arrays_numpy(start: int, stop: int) -> Batch:
    i = _cases(start, stop)
    n = len(i)
    head = stream_words(4, i, Q_BLOCK)  # blocks 0 and 1: the request's fields
    b0, b1 = head[:, 0:4], head[:, 4:8]
    seed = b0[:, 0] | (b0[:, 1] << U64(32))
    generation, rnd = b0[:, 2], b0[:, 3]
    depth = (U64(1) + b1[:, 1] % U64(KMAX)).astype(np.int64)
    vocab = (U64(2) + b1[:, 2] % U64(VMAX - 1)).astype(np.int64)
    mode = (b1[:, 3] & U64(3)).astype(np.int64)
    coarse = ((b1[:, 3] >> U64(2)) & U64(1)).astype(bool)
    wrap = ((b1[:, 3] >> U64(3)) & U64(7)) == 0
    anchor = np.where(wrap, WORD_MASK - (b1[:, 0] & U64(7)), b1[:, 0])

    # q row r from blocks Q_BLOCK + 2r, + 1; p row r from blocks P_BLOCK + 2r, + 1 (8 words each).
    # Only the rows a case reads are drawn, q and p rows up to K (q row K is the bonus row of
    # mode 1); the others are zero, and neither the input object, the block nor the engine reads them
    row = np.arange(2 * KMAX + 1)[None, :]
    read = (row <= depth[:, None]) | ((row >= KMAX) & (row <= KMAX + depth[:, None]))
    needed = np.repeat(np.concatenate([np.zeros((n, 1), bool), read], axis=1), 2, axis=1)
    row_words = stream_words(4, i, P_BLOCK + 2 * (KMAX + 1), needed)[:, 4 * Q_BLOCK :].reshape(n, 2 * KMAX + 1, 8)
    counts = counts_from_cuts(row_cuts(row_words[:, :, : VMAX - 1], coarse[:, None]), vocab[:, None])
    q, p = counts[:, :KMAX], counts[:, KMAX:]  # [n, KMAX, VMAX], [n, KMAX + 1, VMAX]
    p_words = row_words[:, KMAX:]
    drafts = sample_rows(q, row_words[:, :KMAX, 7] >> U64(8))
    within = np.arange(KMAX)[None, :] < depth[:, None]
    # mode 1: p = q at every draft position but one (the one chosen by word 7 of p_1)
    keep = (p_words[:, 0, 7] % depth.astype(U64)).astype(np.int64)
    same = (mode == 1)[:, None] & (np.arange(KMAX)[None, :] != keep[:, None])
    same |= (mode == 3)[:, None]  # mode 3: p = q at every draft position
    p[:, :KMAX] = np.where(same[:, :, None], q, p[:, :KMAX])
    # mode 2: p = q except at the draft: p(x) = ceil(u32 q(x) / 2^32) + delta, the difference at x + 1 mod V
    # (the acceptance draw a_r of the RNG ABI, drawn for these rows only)
    r_idx, k_idx = np.nonzero((mode == 2)[:, None] & within)
    x = drafts[r_idx, k_idx]
    qx = q[r_idx, k_idx, x].astype(np.int64)
    accept = DOMAIN_CODES["ACCEPT"]
    a = draw_word0(seed[r_idx], (anchor[r_idx] + k_idx.astype(U64)) & WORD_MASK, rnd[r_idx], generation[r_idx], accept)
    delta = (p_words[r_idx, k_idx, 7] % U64(3)).astype(np.int64) - 1
    target = np.clip(((a * qx.astype(U64) + U64((1 << 32) - 1)) >> U64(32)).astype(np.int64) + delta, 0, qx)
    moved = q[r_idx, k_idx].astype(np.int64)  # [m, VMAX]: the rows mode 2 rewrites
    m_idx = np.arange(len(r_idx))
    moved[m_idx, x] = target
    moved[m_idx, (x + 1) % vocab[r_idx]] += qx - target
    p[r_idx, k_idx] = moved.astype(U64)
    # mode 3: the bonus row p_{K+1} has a cumulative boundary at u32 >> 8 (+1 by a bit of its word 7),
    # b the CORRECTION draw at anchor + K (drawn for these cases only)
    bonus = np.flatnonzero(mode == 3)
    bonus_position = (anchor[bonus] + depth[bonus].astype(U64)) & WORD_MASK
    b = draw_word0(seed[bonus], bonus_position, rnd[bonus], generation[bonus], DOMAIN_CODES["CORRECTION"])
    bonus_words = p_words[bonus, depth[bonus]]  # [m, 8] words of p_{K+1}
    cuts = row_cuts(bonus_words[:, : VMAX - 1], coarse[bonus])
    cuts[:, 0] = np.minimum((b >> U64(8)) + (bonus_words[:, 7] & U64(1)), U64(M))
    p[bonus, depth[bonus]] = counts_from_cuts(cuts, vocab[bonus])
    return Batch(
        start,
        stop,
        {
            "seed": seed,
            "generation": generation,
            "round": rnd,
            "anchor": anchor,
            "depth": depth,
            "vocab": vocab,
            "q": q,
            "p": p,
            "drafts": drafts,
        },
    )


def verification_input(batch: Batch, k: int) -> dict:
    f = batch.fields
    vocab, depth = int(f["vocab"][k]), int(f["depth"][k])
    p_bits = f32_bits_of_counts(f["p"][k, : depth + 1, :vocab])
    return {
        "vocab": vocab,
        "requests": [
            {
                "seed": encode_u64(int(f["seed"][k])),
                "generation": int(f["generation"][k]),
                "round": int(f["round"][k]),
                "anchor": int(f["anchor"][k]),
                "draft_tokens": [int(x) for x in f["drafts"][k, :depth]],
                "q_rows": [dense_row(f["q"][k, r, :vocab]) for r in range(depth)],
                "p_rows": {"weights": encode_blob("f32", [int(b) for b in p_bits.reshape(-1)], [depth + 1, vocab])},
            }
        ],
    }


def verification_record(_inp: dict, answer: dict) -> list[int]:
    """accepted, emitted count, emitted tokens (padded), draw count, then per draw
    (domain, position, u32, decision, token) (padded)."""
    requests = answer["requests"]
    if len(requests) != 1:
        raise AccumulatedError("verification_round answer needs exactly one request")
    out = requests[0]
    emitted, draws = as_ints(out["emitted"]), out["draws"]
    if not isinstance(draws, list) or len(emitted) > KMAX + 1 or len(draws) > KMAX + 1:
        raise AccumulatedError("verification_round answer emits or draws more than K + 1")
    words = [as_int(out["accepted"]), len(emitted), *emitted, *[PAD] * (KMAX + 1 - len(emitted)), len(draws)]
    for d in draws:
        if d["domain"] not in DOMAIN_CODES or d["decision"] not in DECISION_CODES:
            raise AccumulatedError(f"unknown draw domain {d['domain']!r} or decision {d['decision']!r}")
        words += [
            DOMAIN_CODES[d["domain"]],
            as_int(d["position"]),
            as_int(d["u32"]),
            DECISION_CODES[d["decision"]],
            as_int(d["token"]),
        ]
    return words + [PAD] * (5 * (KMAX + 1 - len(draws)))


# --- blocks: the inputs of a case range as arrays (docs/accumulated.md, "Blocks") ---------


def u32s(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values, dtype="<u4")


def below(limit: np.ndarray, width: int) -> np.ndarray:
    """``[n, width]`` mask of the positions ``< limit`` of each case."""
    return np.arange(width)[None, :] < np.asarray(limit, dtype=np.int64)[:, None]


def rng_block(batch: Batch) -> dict[str, np.ndarray]:
    f = batch.fields
    block = {"seed": np.ascontiguousarray(f["seed"], dtype="<u8")}
    return block | {key: u32s(f[key]) for key in ("generation", "round", "position", "domain", "draw_counter")}


def categorical_block(batch: Batch) -> dict[str, np.ndarray]:
    f = batch.fields
    return {"vocab": u32s(f["vocab"]), "counts": u32s(f["counts"]), "draws": u32s(f["draws"])}


def allocation_block(batch: Batch) -> dict[str, np.ndarray]:
    """The weights as FP32 (exact: integers below 2^24), zero from V on."""
    f = batch.fields
    return {"vocab": u32s(f["vocab"]), "weights": np.ascontiguousarray(f["weights"], dtype="<f4")}


def verification_block(batch: Batch) -> dict[str, np.ndarray]:
    """The request as arrays: q rows and drafts beyond K and p rows beyond K + 1 are zero, the
    p rows are FP32 ``count / M`` (exact: a power-of-two scale of an integer up to 2^24). The native
    stream makes it with the fields."""
    if batch.block is not None:
        return batch.block
    f = batch.fields
    depth = f["depth"]
    drafts = np.where(below(depth, KMAX), f["drafts"], 0)
    q = np.where(below(depth, KMAX)[:, :, None], f["q"], U64(0))
    p = np.where(below(depth + 1, KMAX + 1)[:, :, None], f["p"], U64(0)).astype("<f4") * np.float32(1.0 / M)
    block = {"seed": np.ascontiguousarray(f["seed"], dtype="<u8")}
    block |= {key: u32s(f[key]) for key in ("generation", "round", "anchor", "depth", "vocab")}
    return block | {"drafts": u32s(drafts), "q": u32s(q), "p": np.ascontiguousarray(p)}


def wire_dtype(array: np.ndarray) -> str:
    """The blob dtype (docs/vector-format.md) of a block array."""
    return {np.dtype("<u4"): "u32", np.dtype("<u8"): "u64", np.dtype("<f4"): "f32"}[array.dtype]


FAMILIES: dict[str, AccumulatedFamily] = {
    "rng_abi": AccumulatedFamily("rng_abi", 1, 10, rng_arrays, rng_input, rng_record, rng_block),
    "categorical_sampling": AccumulatedFamily(
        "categorical_sampling", 2, DRAWS, categorical_arrays, categorical_input, categorical_record, categorical_block
    ),
    "allocation_dense": AccumulatedFamily(
        "allocation_dense",
        3,
        VMAX,
        allocation_arrays,
        allocation_input,
        allocation_record,
        allocation_block,
        allocation_answer,
    ),
    "verification_round": AccumulatedFamily(
        "verification_round",
        4,
        VERIFY_WORDS,
        verification_arrays,
        verification_input,
        verification_record,
        verification_block,
    ),
}


# --- records and hashes ---------------------------------------------------------------------


def record_of(family: AccumulatedFamily, inp: dict, answer: dict) -> list[int]:
    """The canonical record of one answer: ``record_words`` u32 words. A refusal
    (``{"error": CODE}``) or a malformed answer raises :class:`AccumulatedError`:
    every accumulated case is valid, so a refusal is a divergence."""
    if "error" in answer:
        raise AccumulatedError(f"refused a valid case: {answer['error']}")
    try:
        words = family.record(inp, answer)
    except (KeyError, TypeError, ValueError, EncodingError) as exc:
        raise AccumulatedError(f"malformed answer: {type(exc).__name__}: {exc}") from None
    if len(words) != family.record_words or any(not 0 <= w <= PAD for w in words):
        raise AccumulatedError(f"answer reduces to {len(words)} words, not {family.record_words} u32 words")
    return words


def record_bytes(records: np.ndarray) -> bytes:
    """Records ``[n, words]`` as their canonical bytes: little-endian u32, case after case."""
    return np.ascontiguousarray(records, dtype="<u4").tobytes()


def shard_ranges(count: int, shard_cases: int = SHARD_CASES) -> list[tuple[int, int]]:
    """The fixed shards of a run of ``count`` cases (the last may be shorter); the published
    hashes use :data:`SHARD_CASES`, tests use smaller shards."""
    return [(s, min(s + shard_cases, count)) for s in range(0, count, shard_cases)]


def shard_digest(records: np.ndarray) -> bytes:
    return hashlib.sha256(record_bytes(records)).digest()


def combine(digests: Sequence[bytes]) -> str:
    """The published hash: SHA-256 of the shard digests concatenated in shard order (hex)."""
    return hashlib.sha256(b"".join(digests)).hexdigest()


#: the committed expected hashes and their schema (docs/accumulated.md, "Committed hashes")
EXPECTED_FILE: str = "accumulated.json"
EXPECTED_SCHEMA_FILE: str = "accumulated.schema.json"

_HEX_WORD = {"type": "string", "pattern": "^0x[0-9a-f]{8}$"}
EXPECTED_SCHEMA: dict = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "qconform accumulated hashes",
    "type": "object",
    "additionalProperties": False,
    "required": ["format", "description", "streamKey", "shardCases", "families"],
    "properties": {
        "format": {"const": "qconform-accumulated-v1"},
        "description": {"type": "string"},
        "streamKey": {"type": "array", "items": _HEX_WORD, "minItems": 2, "maxItems": 2},
        "shardCases": {"type": "integer", "minimum": 1},
        "families": {
            "type": "object",
            "propertyNames": {"enum": sorted(FAMILIES)},
            "additionalProperties": {
                "type": "object",
                "additionalProperties": False,
                "required": ["tag", "recordWords", "hashes"],
                "properties": {
                    "tag": {"type": "integer", "minimum": 0, "maximum": 0xFFFFFFFF},
                    "recordWords": {"type": "integer", "minimum": 1},
                    "hashes": {
                        "type": "object",
                        "propertyNames": {"pattern": "^[1-9][0-9]*$"},
                        "additionalProperties": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                    },
                },
            },
        },
    },
}
