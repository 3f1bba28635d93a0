"""The wire v2 messages as frozen dataclasses, field for field as in ``layout`` (R13-R17).

HELLO (R13), STEP (R14), the per-position REPLY, dense or sparse (R15),
COMPLETION (R16), COMMIT, RESET and CANCEL (R17), and the v1 greedy frame that
v2 leaves intact (R12). Field names are the layout's; ``f32`` fields hold bit
patterns, ``char[32]`` and ``u8[32]`` fields hold exactly 32 bytes. A REPLY also
holds its tail: ``ids`` (sparse only) and ``values`` (FP32 bit patterns).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar, Union

from qconform.spec.rules import defines
from qconform.spec.wire import layout
from qconform.spec.wire.layout import MessageLayout

ID_FIELD_BYTES: int = 32


@defines("R13")
def ascii_field(text: str) -> bytes:
    """A ``char[32]`` field: the ASCII text, NUL-padded to 32 bytes."""
    data = text.encode("ascii")
    if len(data) > ID_FIELD_BYTES or b"\0" in data:
        raise ValueError(f"{text!r} does not fit a NUL-padded 32-byte ASCII field")
    return data.ljust(ID_FIELD_BYTES, b"\0")


@defines("R13")
def ascii_text(field: bytes) -> str:
    """The JSON form of a ``char[32]`` field: its bytes before the first NUL, one character per byte.

    A field is a NUL-terminated string: what follows the first NUL is padding and is not shown,
    and each byte before it is the character of the same code (U+0000-U+00FF), so every 32 bytes
    have exactly one JSON form, the ASCII text itself for a canonical field (docs/wire-v2.md,
    "char[32] in JSON"). Only a HELLO_ANSWER's ``reason`` (rule: any) can reach a JSON answer
    with other bytes; a HELLO's identity fields are compared byte for byte.
    """
    return field.split(b"\0", 1)[0].decode("latin-1")


@dataclass(frozen=True)
class Hello:
    """HELLO (R13): what the sender offers; the receiver's own configuration has the same shape."""

    LAYOUT: ClassVar[MessageLayout] = layout.HELLO
    session_id: int
    vocab: int
    max_support: int
    dense_stride: int
    max_reply_bytes: int
    wire_version: int
    precision: int
    id_bytes: int
    q_bytes: int
    max_slots: int
    max_requests: int
    depth: int
    draft_adapted: int
    semantic_id: bytes
    verifier_id: bytes
    rng_abi_id: bytes
    id_map_hash: bytes
    draft_identity: bytes
    target_identity: bytes


@dataclass(frozen=True)
class Step:
    """STEP request (R14): open one round of a slot's fixed-depth proposal."""

    LAYOUT: ClassVar[MessageLayout] = layout.STEP
    session_id: int
    generation: int
    round: int
    anchor: int
    support_policy: int
    context_version: int
    temperature: int
    slot: int
    depth: int
    prefix_digest: bytes


@dataclass(frozen=True)
class Reply:
    """Per-position REPLY (R15): the sampled token and the exact q row that sampled it."""

    LAYOUT: ClassVar[MessageLayout] = layout.REPLY
    session_id: int
    generation: int
    round: int
    position: int
    token: int
    entry_count: int
    q_checksum: int
    slot: int
    representation: int
    ids: tuple[int, ...] = ()
    values: tuple[int, ...] = ()


@dataclass(frozen=True)
class Completion:
    """COMPLETION (R16): closes a round's replies; the rows become consumable once it validates."""

    LAYOUT: ClassVar[MessageLayout] = layout.COMPLETION
    session_id: int
    generation: int
    round: int
    anchor: int
    context_version: int
    reply_bytes: int
    reply_checksum: int
    slot: int
    row_count: int
    status: int
    prefix_digest: bytes


@dataclass(frozen=True)
class Commit:
    """COMMIT (R17): the accepted draft count, the correction or bonus token, the new committed position."""

    LAYOUT: ClassVar[MessageLayout] = layout.COMMIT
    session_id: int
    generation: int
    round: int
    new_committed: int
    token: int
    slot: int
    accepted: int


@dataclass(frozen=True)
class Reset:
    """RESET (R17, R24): a new generation, committed position and request seed for a slot."""

    LAYOUT: ClassVar[MessageLayout] = layout.RESET
    session_id: int
    seed: int
    generation: int
    committed: int
    slot: int
    #: the committed token at position ``committed - 1`` (R01, R22); -1: none
    token: int = -1


@dataclass(frozen=True)
class Cancel:
    """CANCEL (R17): invalidate a slot's generation and every speculative state of it."""

    LAYOUT: ClassVar[MessageLayout] = layout.CANCEL
    session_id: int
    generation: int
    slot: int


@dataclass(frozen=True)
class V1Greedy:
    """A v1 greedy frame (R12): token IDs only, never sampled, never carries q."""

    tokens: tuple[int, ...]


@dataclass(frozen=True)
class HelloAnswer:
    """HELLO_ANSWER (R12, R13): the receiver's verdict on a HELLO, accepted or refused with its reason code."""

    LAYOUT: ClassVar[MessageLayout] = layout.HELLO_ANSWER
    session_id: int
    status: int
    reason: bytes


Message = Union[Hello, Step, Reply, Completion, Commit, Reset, Cancel, HelloAnswer]

#: The dataclass of every v2 message type code.
MESSAGE_CLASSES: dict[int, type] = {
    cls.LAYOUT.code: cls for cls in (Hello, Step, Reply, Completion, Commit, Reset, Cancel, HelloAnswer)
}

#: Messages sent by the worker to the target (the receiver validates their q).
WORKER_MESSAGES: tuple[type, ...] = (Reply, Completion)


@defines("R15")
def reply_tail(reply: Reply) -> bytes:
    """The REPLY tail as sent: sparse IDs as int32, then the q values' FP32 bit patterns."""
    return struct.pack(f"<{len(reply.ids)}i{len(reply.values)}I", *reply.ids, *reply.values)
