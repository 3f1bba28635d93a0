"""The wire v2 byte layout as data: every field's name, type, offset, size, meaning and rule.

All integers are little-endian. ``f32`` fields carry an IEEE binary32 bit
pattern (R03: q values are exact dyadic FP32). ``char[32]`` is ASCII, NUL-padded
to 32 bytes and compared byte for byte; ``u8[32]`` is a raw 32-byte digest.
docs/wire-v2.md prints these tables; a test checks that the two agree.

A frame is a fixed 20-byte :data:`HEADER` followed by ``payload_length`` payload
bytes. Every payload starts with its message's fixed fields (the tables below);
only REPLY has a variable tail (:data:`REPLY_SPARSE_TAIL`, :data:`REPLY_DENSE_TAIL`).
A v1 greedy frame has its own 12-byte :data:`V1_HEADER` and no checksum (R12).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

#: struct format and size of each scalar field type (little-endian).
FIELD_TYPES: dict[str, tuple[str, int]] = {
    "u16": ("<H", 2),
    "u32": ("<I", 4),
    "u64": ("<Q", 8),
    "i32": ("<i", 4),
    "f32": ("<I", 4),  # the bit pattern: no float ever materializes
    "u8[4]": ("<4s", 4),
    "char[32]": ("<32s", 32),
    "u8[32]": ("<32s", 32),
}


@dataclass(frozen=True)
class Field:
    """One field: ``offset`` and ``size`` in bytes (symbolic text for a variable tail)."""

    name: str
    type: str
    offset: int | str
    size: int | str
    meaning: str
    rule: str


@dataclass(frozen=True)
class MessageLayout:
    """The fixed fields of one message, contiguous from offset 0 of its payload."""

    name: str
    code: int
    rules: tuple[str, ...]
    fields: tuple[Field, ...]

    @property
    def size(self) -> int:
        """Bytes of the fixed fields."""
        last = self.fields[-1]
        return int(last.offset) + int(last.size)

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)


def contiguous(*specs: tuple[str, str, str, str]) -> tuple[Field, ...]:
    """Fields ``(name, type, meaning, rule)`` laid out back to back from offset 0."""
    fields = []
    offset = 0
    for name, type_, meaning, rule in specs:
        size = FIELD_TYPES[type_][1]
        fields.append(Field(name, type_, offset, size, meaning, rule))
        offset += size
    return tuple(fields)


def struct_format(fields: tuple[Field, ...]) -> str:
    """The one struct format that packs ``fields`` back to back, little-endian."""
    return "<" + "".join(FIELD_TYPES[f.type][0][1:] for f in fields)


def check_contiguous(fields: tuple[Field, ...]) -> None:
    """Raise ValueError unless ``fields`` are back to back from 0 with their types' sizes."""
    offset = 0
    for f in fields:
        if f.offset != offset or f.size != FIELD_TYPES[f.type][1]:
            raise ValueError(f"field {f.name} at {f.offset}/{f.size}, expected {offset}/{FIELD_TYPES[f.type][1]}")
        offset += f.size
    if struct.calcsize(struct_format(fields)) != offset:
        raise ValueError("struct format size disagrees with the field sizes")


V2_MAGIC: bytes = b"QSMP"
V1_MAGIC: bytes = b"QGRD"
WIRE_VERSION: int = 2
V1_VERSION: int = 1

HEADER: tuple[Field, ...] = contiguous(
    ("magic", "u8[4]", 'frame magic, ASCII "QSMP"', "must be QSMP (a v1 frame has QGRD), else BAD_MAGIC"),
    ("version", "u16", "wire version", "must be 2, else UNKNOWN_VERSION"),
    (
        "message_type",
        "u16",
        "message type code (HELLO 1 ... HELLO_ANSWER 8)",
        "must be a defined code, else UNKNOWN_MESSAGE_TYPE",
    ),
    ("header_length", "u32", "bytes of this header", "must be 20, else LENGTH_MISMATCH"),
    (
        "payload_length",
        "u32",
        "bytes of the payload after the header",
        "checked against the negotiated bounds of the message type before the payload is read (UNEXPECTED_SIZE); then against the bytes present (TRUNCATED, LENGTH_MISMATCH)",
    ),
    ("checksum", "u32", "CRC-32C of header bytes 0..15 followed by the payload", "must match, else CHECKSUM_MISMATCH"),
)
HEADER_SIZE: int = 20
CHECKSUM_OFFSET: int = 16

V1_HEADER: tuple[Field, ...] = contiguous(
    ("magic", "u8[4]", 'v1 greedy frame magic, ASCII "QGRD"', "selects the v1 decoder; never sampled"),
    ("version", "u16", "v1 wire version", "must be 1, else UNKNOWN_VERSION"),
    ("message_type", "u16", "v1 message type (GREEDY_TOKENS 1)", "must be 1, else UNKNOWN_MESSAGE_TYPE"),
    (
        "payload_length",
        "u32",
        "bytes of the payload",
        "4 to 4 + 4 * 64, else UNEXPECTED_SIZE (before the bytes present); then TRUNCATED / LENGTH_MISMATCH",
    ),
)
V1_HEADER_SIZE: int = 12
V1_MAX_TOKENS: int = 64

V1_GREEDY = MessageLayout(
    "V1_GREEDY_TOKENS",
    1,
    ("R12",),
    contiguous(
        (
            "token_count",
            "u32",
            "number of greedy tokens that follow",
            "at most 64, else UNEXPECTED_SIZE; payload_length must be 4 + 4 * token_count, else LENGTH_MISMATCH",
        ),
    ),
)
V1_TOKENS_TAIL: tuple[Field, ...] = (
    Field("tokens", "i32[token_count]", 4, "4 * token_count", "greedy token IDs", "each >= 0, else TOKEN_OUT_OF_RANGE"),
)

HELLO = MessageLayout(
    "HELLO",
    1,
    ("R12", "R13", "R18", "R27"),
    contiguous(
        ("session_id", "u64", "session chosen by the sender", "every later v2 message of the session carries it"),
        ("vocab", "u32", "vocabulary size V (129280 in production)", "equal to the receiver's, else VOCAB_MISMATCH"),
        ("max_support", "u32", "maximum sparse support k", "1..receiver's maximum, else SUPPORT_ABOVE_MAX"),
        (
            "dense_stride",
            "u32",
            "FP32 entries of a dense row (V plus zero padding)",
            "equal to the receiver's, else UNEXPECTED_SIZE",
        ),
        ("max_reply_bytes", "u32", "largest REPLY payload (bytes)", "1..receiver's maximum, else UNEXPECTED_SIZE"),
        ("wire_version", "u16", "negotiated wire version", "must be 2, else UNKNOWN_VERSION"),
        (
            "precision",
            "u16",
            "q value format: 1 = little-endian FP32",
            "equal to the receiver's, else PRECISION_MISMATCH",
        ),
        ("id_bytes", "u16", "bytes of a global token ID (4: int32)", "must be 4, else UNEXPECTED_SIZE"),
        ("q_bytes", "u16", "bytes of a q value (4: FP32)", "must be 4, else UNEXPECTED_SIZE"),
        (
            "max_slots",
            "u16",
            "probability slots (slot indices 0..max_slots-1)",
            "1..receiver's maximum, else TOO_MANY_SLOTS",
        ),
        (
            "max_requests",
            "u16",
            "requests in flight at once (at most 4)",
            "1..receiver's maximum, else TOO_MANY_REQUESTS",
        ),
        ("depth", "u16", "fixed proposal depth K (5)", "equal to the receiver's, else DEPTH_MISMATCH"),
        (
            "draft_adapted",
            "u16",
            "draft checkpoint is native (0) or adapted (1)",
            "equal to the receiver's, else IDENTITY_MISMATCH",
        ),
        (
            "semantic_id",
            "char[32]",
            "q semantic ID, dyadic24-standard-v1",
            "equal to the receiver's bytes, else SEMANTIC_ID_MISMATCH",
        ),
        ("verifier_id", "char[32]", "standard-verifier ID", "equal to the receiver's bytes, else VERIFIER_MISMATCH"),
        (
            "rng_abi_id",
            "char[32]",
            "RNG ABI ID, philox4x32-10-qconform-v1",
            "equal to the receiver's bytes, else RNG_ABI_MISMATCH",
        ),
        (
            "id_map_hash",
            "u8[32]",
            "SHA-256 of the global token ID map",
            "equal to the receiver's, else ID_MAP_MISMATCH",
        ),
        (
            "draft_identity",
            "u8[32]",
            "digest of the draft checkpoint",
            "equal to the receiver's, else IDENTITY_MISMATCH",
        ),
        (
            "target_identity",
            "u8[32]",
            "digest of the target model and processors",
            "equal to the receiver's, else IDENTITY_MISMATCH",
        ),
    ),
)

STEP = MessageLayout(
    "STEP",
    2,
    ("R14", "R19", "R27"),
    contiguous(
        ("session_id", "u64", "negotiated session", "else SESSION_MISMATCH"),
        ("generation", "u32", "request generation of the slot", "the slot's live generation, else STALE_GENERATION"),
        (
            "round",
            "u32",
            "round ID, strictly increasing within a generation",
            "equal to the last: DUPLICATE_ROUND; below it: STALE_ROUND",
        ),
        (
            "anchor",
            "u32",
            "absolute position of the first draft token",
            "the slot's committed position, else POSITION_MISMATCH",
        ),
        (
            "support_policy",
            "u32",
            "0 = dense q; k > 0 = sparse top-k",
            "k <= max_support, else SUPPORT_ABOVE_MAX; the reply fits max_reply_bytes, else UNEXPECTED_SIZE",
        ),
        ("context_version", "u32", "target processor / grammar / stop context version", "echoed by COMPLETION"),
        ("temperature", "f32", "proposal temperature", "finite (else NON_FINITE_VALUE) and > 0 (else NEGATIVE_VALUE)"),
        ("slot", "u16", "probability slot", "< max_slots, else TOO_MANY_SLOTS; no round open, else UNEXPECTED_MESSAGE"),
        ("depth", "u16", "fixed depth", "the negotiated depth, else DEPTH_MISMATCH"),
        ("prefix_digest", "u8[32]", "committed-prefix / state digest", "echoed by COMPLETION"),
    ),
)

REPLY = MessageLayout(
    "REPLY",
    3,
    ("R03", "R15", "R19", "R20"),
    contiguous(
        ("session_id", "u64", "negotiated session", "else SESSION_MISMATCH"),
        ("generation", "u32", "generation of the STEP", "see the receiver: LATE_REPLY, STALE_GENERATION"),
        ("round", "u32", "round of the STEP", "the open round, else STALE_ROUND / UNEXPECTED_MESSAGE"),
        (
            "position",
            "u32",
            "absolute position of this row's sampled token",
            "anchor + number of rows received, else POSITION_MISMATCH",
        ),
        (
            "token",
            "i32",
            "sampled global token ID",
            "in [0, vocab), else TOKEN_OUT_OF_RANGE; q(token) > 0, else ZERO_Q_AT_TOKEN",
        ),
        (
            "entry_count",
            "u32",
            "entries in the tail",
            "dense: = dense_stride, else UNEXPECTED_SIZE; sparse: 1..max_support, else SUPPORT_ABOVE_MAX; 0: MISSING_Q",
        ),
        ("q_checksum", "u32", "probability checksum: CRC-32C of the tail bytes", "else Q_CHECKSUM_MISMATCH"),
        ("slot", "u16", "probability slot", "< max_slots, else TOO_MANY_SLOTS"),
        (
            "representation",
            "u16",
            "0 = none, 1 = dense, 2 = sparse",
            "0: MISSING_Q; other: UNKNOWN_REPRESENTATION; must match the STEP policy, else REPRESENTATION_MISMATCH",
        ),
    ),
)
REPLY_SPARSE_TAIL: tuple[Field, ...] = (
    Field(
        "ids",
        "i32[n]",
        36,
        "4n",
        "sparse global token IDs, n = entry_count",
        "each in [0, vocab) (SPARSE_ID_OUT_OF_RANGE), no repeats (DUPLICATE_SPARSE_ID), strictly ascending (UNSORTED_SUPPORT)",
    ),
    Field(
        "values",
        "f32[n]",
        "36 + 4n",
        "4n",
        "q of each ID as FP32",
        "finite (NON_FINITE_VALUE), sign bit clear, -0.0 refused (NEGATIVE_VALUE), q * 2^24 an integer (NON_DYADIC_VALUE), nonzero (NONCANONICAL_SUPPORT), sum of counts = 2^24 (WRONG_TOTAL_MASS)",
    ),
)
REPLY_DENSE_TAIL: tuple[Field, ...] = (
    Field(
        "values",
        "f32[dense_stride]",
        36,
        "4 * dense_stride",
        "q of every token ID; entries >= vocab are padding",
        "padding all-zero bytes (NONZERO_DENSE_PADDING); then as the sparse values, +0.0 allowed",
    ),
)

COMPLETION = MessageLayout(
    "COMPLETION",
    4,
    ("R16", "R19", "R25", "R28"),
    contiguous(
        ("session_id", "u64", "negotiated session", "else SESSION_MISMATCH"),
        ("generation", "u32", "generation of the STEP", "as REPLY"),
        ("round", "u32", "round of the STEP", "as REPLY"),
        ("anchor", "u32", "anchor of the STEP", "else POSITION_MISMATCH"),
        ("context_version", "u32", "context version of the STEP", "else CONTEXT_MISMATCH"),
        ("reply_bytes", "u32", "exact bytes of the round's REPLY frames, headers included", "else REPLY_SIZE_MISMATCH"),
        (
            "reply_checksum",
            "u32",
            "CRC-32C of the round's REPLY frames concatenated in position order",
            "else COMPLETION_CHECKSUM_MISMATCH",
        ),
        ("slot", "u16", "probability slot", "< max_slots, else TOO_MANY_SLOTS"),
        (
            "row_count",
            "u16",
            "rows of the round",
            "the negotiated depth (DEPTH_MISMATCH) and every row received (MISSING_Q)",
        ),
        (
            "status",
            "u16",
            "0 = OK, 1 = FAILED (the worker gives up the round)",
            "other: UNKNOWN_STATUS; FAILED discards the proposal",
        ),
        ("prefix_digest", "u8[32]", "prefix digest of the STEP", "else CONTEXT_MISMATCH"),
    ),
)

COMMIT = MessageLayout(
    "COMMIT",
    5,
    ("R17", "R16"),
    contiguous(
        ("session_id", "u64", "negotiated session", "else SESSION_MISMATCH"),
        ("generation", "u32", "generation of the round", "the slot's live generation, else STALE_GENERATION"),
        (
            "round",
            "u32",
            "the round being committed",
            "the open round, else STALE_ROUND / UNEXPECTED_MESSAGE; completed, else CONSUMED_BEFORE_COMPLETION",
        ),
        (
            "new_committed",
            "u32",
            "new committed position",
            "anchor + accepted + 1 (token -1: anchor + accepted, accepted >= 1), else POSITION_MISMATCH",
        ),
        (
            "token",
            "i32",
            "correction or bonus token ID; -1: none (emission ended at the last accepted draft)",
            "-1 or in [0, vocab), else TOKEN_OUT_OF_RANGE",
        ),
        ("slot", "u16", "probability slot", "< max_slots, else TOO_MANY_SLOTS"),
        ("accepted", "u16", "accepted draft count", "<= depth, else POSITION_MISMATCH"),
    ),
)

RESET = MessageLayout(
    "RESET",
    6,
    ("R17", "R24"),
    contiguous(
        ("session_id", "u64", "negotiated session", "else SESSION_MISMATCH"),
        ("seed", "u64", "request seed of the new generation (explicit override, R24)", "any"),
        (
            "generation",
            "u32",
            "the slot's new generation",
            "above the current one, else DUPLICATE_GENERATION (equal) / STALE_GENERATION (below)",
        ),
        ("committed", "u32", "the slot's committed position from now on", "any"),
        ("slot", "u16", "probability slot", "< max_slots, else TOO_MANY_SLOTS"),
        (
            "token",
            "i32",
            "the committed token at position committed - 1 (R01, R22); -1: none (empty prefix)",
            "-1 or in [0, vocab), else TOKEN_OUT_OF_RANGE",
        ),
    ),
)

CANCEL = MessageLayout(
    "CANCEL",
    7,
    ("R17", "R28"),
    contiguous(
        ("session_id", "u64", "negotiated session", "else SESSION_MISMATCH"),
        ("generation", "u32", "the generation to invalidate", "the slot's live generation, else STALE_GENERATION"),
        ("slot", "u16", "probability slot", "< max_slots, else TOO_MANY_SLOTS"),
    ),
)

HELLO_ANSWER = MessageLayout(
    "HELLO_ANSWER",
    8,
    ("R12", "R13"),
    contiguous(
        ("session_id", "u64", "the session ID of the HELLO answered", "the offer's session ID"),
        ("status", "u16", "0 = accepted, 1 = refused", "other: UNKNOWN_STATUS"),
        ("reason", "char[32]", "the reason code of a refusal (ASCII); all zero bytes when accepted", "any"),
    ),
)

#: Every v2 message, by type code.
MESSAGES: dict[int, MessageLayout] = {
    m.code: m for m in (HELLO, STEP, REPLY, COMPLETION, COMMIT, RESET, CANCEL, HELLO_ANSWER)
}
MESSAGE_CODES: dict[str, int] = {m.name: code for code, m in MESSAGES.items()}

REPR_NONE, REPR_DENSE, REPR_SPARSE = 0, 1, 2
STATUS_OK, STATUS_FAILED = 0, 1
HELLO_ACCEPTED, HELLO_REFUSED = 0, 1
#: COMMIT: no correction or bonus token (emission ended early); RESET: no committed token (empty prefix)
NO_TOKEN: int = -1
PRECISION_FP32: int = 1
ID_BYTES: int = 4
Q_BYTES: int = 4
