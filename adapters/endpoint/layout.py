"""The endpoint's own table of the wire v2 bytes (docs/wire-v2.md), as struct formats.

Written from the document, not imported from the executable spec: the endpoint is
a candidate the harness judges, so it must not share the spec's codec. Every
integer is little-endian and fields are packed with no padding; ``f32`` fields
are kept as their 32-bit patterns (``I``), 32-byte identities as ``32s``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import cached_property

#: a frame's bytes as read: ``bytes``, or a read-only ``memoryview`` of a reader's chunk for a long
#: frame (``stream.FrameReader``, "Item"): whatever reads a frame takes either and only reads it
FrameBytes = bytes | memoryview

V2_MAGIC = b"QSMP"
V1_MAGIC = b"QGRD"
WIRE_VERSION = 2
V1_VERSION = 1
V1_GREEDY_TYPE = 1
V1_MAX_TOKENS = 64

HEADER = struct.Struct("<4sHHIII")  # magic, version, type, header length, payload length, checksum
HEADER_SIZE = HEADER.size  # 20
CHECKSUM_OFFSET = 16
V1_HEADER = struct.Struct("<4sHHI")  # magic, version, type, payload length
V1_HEADER_SIZE = V1_HEADER.size  # 12

HELLO, STEP, REPLY, COMPLETION, COMMIT, RESET, CANCEL, HELLO_ANSWER = 1, 2, 3, 4, 5, 6, 7, 8
TYPE_NAMES = {
    HELLO: "HELLO",
    STEP: "STEP",
    REPLY: "REPLY",
    COMPLETION: "COMPLETION",
    COMMIT: "COMMIT",
    RESET: "RESET",
    CANCEL: "CANCEL",
    HELLO_ANSWER: "HELLO_ANSWER",
}
V1_NAME = "V1_GREEDY_TOKENS"

REPR_NONE, REPR_DENSE, REPR_SPARSE = 0, 1, 2
STATUS_OK, STATUS_FAILED = 0, 1
HELLO_ACCEPTED, HELLO_REFUSED = 0, 1
#: COMMIT: no correction or bonus (emission ended at the last accepted draft); RESET: no committed token
NO_TOKEN = -1
PRECISION_FP32 = 1
ID_BYTES = Q_BYTES = 4
SPARSE_ENTRY = ID_BYTES + Q_BYTES
DENSE_ENTRY = Q_BYTES
M = 1 << 24
POSITIONS = 1 << 32


@dataclass(frozen=True)
class Fixed:
    """The fixed fields of one message type: names, their kinds and one struct."""

    names: tuple[str, ...]
    kinds: tuple[str, ...]  # u16 u32 u64 i32 f32 text digest

    @cached_property  # read per frame decoded: built once
    def codec(self) -> struct.Struct:
        letters = {"u16": "H", "u32": "I", "u64": "Q", "i32": "i", "f32": "I", "text": "32s", "digest": "32s"}
        return struct.Struct("<" + "".join(letters[k] for k in self.kinds))


def fixed(*pairs: str) -> Fixed:
    """``fixed("name:kind", ...)`` in wire order."""
    names, kinds = zip(*(p.split(":") for p in pairs))
    return Fixed(tuple(names), tuple(kinds))


FIELDS: dict[int, Fixed] = {
    HELLO: fixed(
        "session_id:u64",
        "vocab:u32",
        "max_support:u32",
        "dense_stride:u32",
        "max_reply_bytes:u32",
        "wire_version:u16",
        "precision:u16",
        "id_bytes:u16",
        "q_bytes:u16",
        "max_slots:u16",
        "max_requests:u16",
        "depth:u16",
        "draft_adapted:u16",
        "semantic_id:text",
        "verifier_id:text",
        "rng_abi_id:text",
        "id_map_hash:digest",
        "draft_identity:digest",
        "target_identity:digest",
    ),
    STEP: fixed(
        "session_id:u64",
        "generation:u32",
        "round:u32",
        "anchor:u32",
        "support_policy:u32",
        "context_version:u32",
        "temperature:f32",
        "slot:u16",
        "depth:u16",
        "prefix_digest:digest",
    ),
    REPLY: fixed(
        "session_id:u64",
        "generation:u32",
        "round:u32",
        "position:u32",
        "token:i32",
        "entry_count:u32",
        "q_checksum:u32",
        "slot:u16",
        "representation:u16",
    ),
    COMPLETION: fixed(
        "session_id:u64",
        "generation:u32",
        "round:u32",
        "anchor:u32",
        "context_version:u32",
        "reply_bytes:u32",
        "reply_checksum:u32",
        "slot:u16",
        "row_count:u16",
        "status:u16",
        "prefix_digest:digest",
    ),
    COMMIT: fixed(
        "session_id:u64", "generation:u32", "round:u32", "new_committed:u32", "token:i32", "slot:u16", "accepted:u16"
    ),
    RESET: fixed("session_id:u64", "seed:u64", "generation:u32", "committed:u32", "slot:u16", "token:i32"),
    CANCEL: fixed("session_id:u64", "generation:u32", "slot:u16"),
    HELLO_ANSWER: fixed("session_id:u64", "status:u16", "reason:text"),
}
SIZES: dict[int, int] = {code: f.codec.size for code, f in FIELDS.items()}
REPLY_FIXED = SIZES[REPLY]  # 36

#: HELLO fields that must equal the receiver's, in checking order, with their reason codes
IDENTITIES: tuple[tuple[str, str], ...] = (
    ("wire_version", "UNKNOWN_VERSION"),
    ("semantic_id", "SEMANTIC_ID_MISMATCH"),
    ("verifier_id", "VERIFIER_MISMATCH"),
    ("rng_abi_id", "RNG_ABI_MISMATCH"),
    ("vocab", "VOCAB_MISMATCH"),
    ("id_map_hash", "ID_MAP_MISMATCH"),
    ("draft_identity", "IDENTITY_MISMATCH"),
    ("draft_adapted", "IDENTITY_MISMATCH"),
    ("target_identity", "IDENTITY_MISMATCH"),
    ("precision", "PRECISION_MISMATCH"),
    ("id_bytes", "UNEXPECTED_SIZE"),
    ("q_bytes", "UNEXPECTED_SIZE"),
    ("dense_stride", "UNEXPECTED_SIZE"),
    ("depth", "DEPTH_MISMATCH"),
)
#: HELLO bounds the offer may lower (each at least 1), with their reason codes
BOUNDS: tuple[tuple[str, str], ...] = (
    ("max_support", "SUPPORT_ABOVE_MAX"),
    ("max_reply_bytes", "UNEXPECTED_SIZE"),
    ("max_slots", "TOO_MANY_SLOTS"),
    ("max_requests", "TOO_MANY_REQUESTS"),
)


def reply_bytes(params: dict, support_policy: int) -> int:
    """Payload bytes of a REPLY under a support policy: dense (0) or sparse top-k."""
    if support_policy == 0:
        return REPLY_FIXED + DENSE_ENTRY * params["dense_stride"]
    return REPLY_FIXED + SPARSE_ENTRY * support_policy


def payload_limits(message_type: int, params: dict | None) -> tuple[int, int]:
    """The payload lengths a message type admits under the negotiated HELLO."""
    size = SIZES[message_type]
    if message_type != REPLY or params is None:
        return size, size
    largest = max(reply_bytes(params, 0), reply_bytes(params, params["max_support"]))
    return size, min(largest, params["max_reply_bytes"])
