"""What a worker leader sends for one round: a REPLY per draft position, then the COMPLETION (R15, R16, R20).

q travels as exact FP32: ``c / 2^24`` is exact in FP64 and again in FP32 for
every count ``c <= 2^24``. A dense row is padded with zero entries up to the
negotiated stride (R20); a sparse row lists its positive-count IDs in ascending
order (R07). Each REPLY carries the CRC-32C of its tail (the probability
checksum); the COMPLETION carries the byte count and CRC-32C of the round's
REPLY frames, in position order. Each byte of a tail is read by the checksum
once: its raw register is extended into the three checksums that cover it.
"""

from __future__ import annotations

import numpy as np

from . import layout
from .codec import Message, Sealed, encode, pack_fields, seal
from .crc32c import INIT, crc32c_of_blocks, extend, finish, raw


def q_values(counts: np.ndarray) -> bytes:
    """FP32 little-endian ``q = c / 2^24`` of int counts."""
    return (np.asarray(counts, dtype=np.float64) / float(layout.M)).astype("<f4").tobytes()


def dense_tail(counts: np.ndarray, stride: int) -> bytes:
    """A dense row: every token's q, then zero padding up to ``stride`` entries."""
    return q_values(counts) + bytes(4 * (stride - len(counts)))


def sparse_tail(ids: np.ndarray, counts: np.ndarray) -> tuple[bytes, int]:
    """A sparse row's canonical tail (positive counts, ascending IDs) and its entry count."""
    keep = np.asarray(counts) > 0
    ids, counts = np.asarray(ids)[keep], np.asarray(counts)[keep]
    order = np.argsort(ids, kind="stable")
    ids, counts = ids[order], counts[order]
    return ids.astype("<i4").tobytes() + q_values(counts), len(ids)


def reply_frame(step: Message, index: int, token: int, tail: bytes, entries: int, representation: int) -> Sealed:
    """The REPLY of draft ``index`` (0-based) of ``step``'s round; the tail's bytes are checksummed once."""
    tail_raw = raw(tail)
    return seal(
        layout.REPLY,
        pack_fields(
            layout.REPLY,
            {
                "session_id": step["session_id"],
                "generation": step["generation"],
                "round": step["round"],
                "position": (step["anchor"] + index) % layout.POSITIONS,
                "token": token,
                "entry_count": entries,
                "q_checksum": finish(extend(INIT, len(tail), tail_raw)),
                "slot": step["slot"],
                "representation": representation,
            },
        ),
        tail,
        tail_raw,
    )


def row_reply(step: Message, index: int, token: int, counts: np.ndarray, ids: np.ndarray | None, stride: int) -> Sealed:
    """The REPLY of draft ``index`` for one sampled row: dense (``ids`` None) padded to ``stride``, or sparse."""
    if ids is None:
        return reply_frame(step, index, token, dense_tail(counts, stride), stride, layout.REPR_DENSE)
    tail, entries = sparse_tail(ids, counts)
    return reply_frame(step, index, token, tail, entries, layout.REPR_SPARSE)


def completion_frame(
    step: Message, replies: list[Sealed], status: int = layout.STATUS_OK, row_count: int | None = None
) -> bytes:
    """The COMPLETION of ``step``'s round over its REPLY frames (FAILED: the worker gives the round up);
    ``row_count``: the negotiated depth (default the STEP's, which a served STEP has)."""
    return encode(
        layout.COMPLETION,
        {
            "session_id": step["session_id"],
            "generation": step["generation"],
            "round": step["round"],
            "anchor": step["anchor"],
            "context_version": step["context_version"],
            "reply_bytes": sum(len(r.data) for r in replies),
            "reply_checksum": crc32c_of_blocks([(len(r.data), r.raw) for r in replies]),
            "slot": step["slot"],
            "row_count": step["depth"] if row_count is None else row_count,
            "status": status,
            "prefix_digest": step["prefix_digest"],
        },
    )
