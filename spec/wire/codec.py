"""Encode and decode wire frames: pure functions from messages to bytes and back (R12-R18).

:func:`decode_frame` is structured so that every length is checked before the
bytes it covers are read (R18): the magic and the fixed header first, then the
declared payload length against the negotiated bounds of its message type
(before the payload is touched), then the bytes present, then the checksum,
then the fixed fields, and for a REPLY its representation and entry count
before its tail is read. The first failing check is the frame's reason.

A v1 greedy frame (magic ``QGRD``) is decoded by its own decoder into a
:class:`V1Greedy` and never treated as sampled (R12); its refusals are marked
``v1`` and never touch v2 state. A v2 frame other than
HELLO before HELLO has negotiated v2 is refused (V2_BEFORE_HELLO).
"""

from __future__ import annotations

import struct
from dataclasses import replace

from qconform.spec.dyadic24 import q_values_f32_bits
from qconform.spec.qrow import QRow
from qconform.spec.rules import defines
from qconform.spec.wire import layout
from qconform.spec.wire.checks import V1_CHECKS, V1Subject, first_failure
from qconform.spec.wire.checksum import crc32c
from qconform.spec.wire.header import check_header, frame, frame_checksum, parse_header
from qconform.spec.wire.layout import (
    CHECKSUM_OFFSET,
    HEADER_SIZE,
    MESSAGES,
    V1_HEADER,
    V1_MAGIC,
    V1_VERSION,
    V2_MAGIC,
    struct_format,
)
from qconform.spec.wire.messages import (
    MESSAGE_CLASSES,
    Completion,
    Hello,
    Message,
    Reply,
    Step,
    V1Greedy,
    reply_tail,
)
from qconform.spec.wire.reasons import reject
from qconform.spec.wire.validation import check_payload_length, check_reply_fixed

MAGIC_BYTES: int = 4
V1_HEADER_FORMAT: str = struct_format(V1_HEADER)
V1_GREEDY_TYPE: int = layout.V1_GREEDY.code


@defines("R13", "R14", "R15", "R16", "R17")
def encode_payload(message: Message) -> bytes:
    """The payload of ``message``: its fixed fields in layout order, then a REPLY's tail."""
    fields = type(message).LAYOUT.fields
    payload = struct.pack(struct_format(fields), *(getattr(message, f.name) for f in fields))
    if isinstance(message, Reply):
        payload += reply_tail(message)
    return payload


@defines("R12", "R21")
def encode_frame(message: Message) -> bytes:
    """The complete v2 frame of ``message`` (header, payload, checksum). Fields are written as given."""
    return frame(type(message).LAYOUT.code, encode_payload(message))


@defines("R12")
def encode_v1(tokens: tuple[int, ...] | list[int]) -> bytes:
    """A v1 greedy frame carrying ``tokens`` (no q, no checksum)."""
    payload = struct.pack(f"<I{len(tokens)}i", len(tokens), *tokens)
    return struct.pack(V1_HEADER_FORMAT, V1_MAGIC, V1_VERSION, V1_GREEDY_TYPE, len(payload)) + payload


@defines("R15")
def reply_from_row(
    session_id: int, slot: int, generation: int, round_id: int, position: int, token: int, row: QRow, dense_stride: int
) -> Reply:
    """The REPLY a worker sends for one sampled row: q as exact FP32, its probability checksum.

    A dense row is padded with zero entries up to ``dense_stride`` (R20).
    """
    values = tuple(q_values_f32_bits(list(row.counts)))
    if row.ids is None:
        representation, ids = layout.REPR_DENSE, ()
        values += (0,) * (dense_stride - len(values))
    else:
        representation, ids = layout.REPR_SPARSE, row.ids
    unsealed = Reply(
        session_id, generation, round_id, position, token, len(values), 0, slot, representation, ids, values
    )
    return replace(unsealed, q_checksum=crc32c(reply_tail(unsealed)))


@defines("R16")
def completion_for(
    step: Step, reply_frames: list[bytes] | tuple[bytes, ...], status: int = layout.STATUS_OK
) -> Completion:
    """The COMPLETION of ``step``'s round: its fixed depth, the exact bytes and CRC-32C of its REPLY frames."""
    joined = b"".join(reply_frames)
    return Completion(
        step.session_id,
        step.generation,
        step.round,
        step.anchor,
        step.context_version,
        len(joined),
        crc32c(joined),
        step.slot,
        step.depth,
        status,
        step.prefix_digest,
    )


@defines("R12", "R18")
def decode_v1(view: memoryview) -> V1Greedy:
    """A v1 greedy frame, checked row by row in the order of ``checks.V1_CHECKS`` (R12).

    Its refusals are v1 refusals (``WireReject.v1``): they never touch v2 state.
    """
    subject = V1Subject(view)
    failed = first_failure(V1_CHECKS, subject)
    if failed is not None:
        raise reject(failed.code, f"v1 frame: {failed.when}", v1=True)
    return V1Greedy(tuple(subject.tokens))


@defines("R18")
def check_frame_extent(view: memoryview, end: int) -> None:
    """The bytes present are exactly the declared frame: fewer is TRUNCATED, more is LENGTH_MISMATCH."""
    if len(view) < end:
        raise reject("TRUNCATED", f"{len(view)} bytes, the frame declares {end}")
    if len(view) > end:
        raise reject("LENGTH_MISMATCH", f"{len(view) - end} bytes beyond the declared frame")


@defines("R15", "R18", "R27")
def decode_reply_tail(reply: Reply, payload: memoryview, params: Hello) -> Reply:
    """Check a REPLY's representation and entry count against the negotiated bounds, then read its tail."""
    check_reply_fixed(reply, params, len(payload))
    n, fixed = reply.entry_count, layout.REPLY.size
    if reply.representation == layout.REPR_SPARSE:
        ids = struct.unpack_from(f"<{n}i", payload, fixed)
        values = struct.unpack_from(f"<{n}I", payload, fixed + 4 * n)
    else:
        ids, values = (), struct.unpack_from(f"<{n}I", payload, fixed)
    return replace(reply, ids=tuple(ids), values=tuple(values))


@defines("R13", "R14", "R15", "R16", "R17", "R18")
def decode_payload(message_type: int, payload: memoryview, params: Hello | None) -> Message:
    """The message of a checksum-verified payload: fixed fields, then a REPLY's bounded tail."""
    cls = MESSAGE_CLASSES[message_type]
    fields = cls.LAYOUT.fields
    values = struct.unpack_from(struct_format(fields), payload, 0)
    message = cls(**{f.name: value for f, value in zip(fields, values)})
    if isinstance(message, Reply):
        assert params is not None  # a REPLY before HELLO is refused earlier (V2_BEFORE_HELLO)
        return decode_reply_tail(message, payload, params)
    return message


@defines("R12", "R18", "R21")
def decode_frame(data: bytes, params: Hello | None) -> Message | V1Greedy:
    """Decode one frame under the negotiated HELLO ``params`` (None before negotiation).

    Raises :class:`~qconform.spec.wire.reasons.WireReject`; see the module
    docstring for the order of the checks.
    """
    view = memoryview(data)
    if len(view) < MAGIC_BYTES:
        raise reject("TRUNCATED", f"{len(view)} bytes, not even a magic")
    magic = bytes(view[:MAGIC_BYTES])
    if magic == V1_MAGIC:
        return decode_v1(view)
    if magic != V2_MAGIC:
        raise reject("BAD_MAGIC", f"magic {magic!r}")
    if len(view) < HEADER_SIZE:
        raise reject("TRUNCATED", f"{len(view)} bytes, a header needs {HEADER_SIZE}")
    header = parse_header(view[:HEADER_SIZE])
    check_header(header)
    message = MESSAGES[header.message_type]
    if params is None and message is not layout.HELLO:
        raise reject("V2_BEFORE_HELLO", f"{message.name} before HELLO")
    check_payload_length(message, header.payload_length, params)
    end = HEADER_SIZE + header.payload_length
    check_frame_extent(view, end)
    payload = view[HEADER_SIZE:end]
    if frame_checksum(view[:CHECKSUM_OFFSET], payload) != header.checksum:
        raise reject("CHECKSUM_MISMATCH", f"checksum field {header.checksum:#010x}")
    return decode_payload(header.message_type, payload, params)
