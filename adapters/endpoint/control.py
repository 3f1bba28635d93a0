"""The test-control envelope of the endpoints (docs/endpoint.md, "Control protocol").

Wire v2 has no acknowledgement and a TCP stream cannot carry a truncated or
garbage frame as such, so a harness that wants a verdict per frame talks to an
endpoint through envelopes on the same connection, told apart from frames by
their magic ``QCTL`` (v2 frames start ``QSMP``, v1 frames ``QGRD``)::

    magic "QCTL" (4) | kind u16 | reserved u16 = 0 | body_length u32 | body

Kinds: CHECK (1, body = the bytes of one frame, judged statelessly), APPLY (2,
body = one frame, fed to the receiver state machine), COMMAND (3, body = a JSON
object with an ``op``), ANSWER (4, the endpoint's JSON answer to any of them).
The body length is checked against :data:`MAX_BODY` before the body is read.
"""

from __future__ import annotations

import json
import struct

from . import layout

__all__ = [
    "ANSWER",
    "APPLY",
    "CHECK",
    "COMMAND",
    "ENVELOPE",
    "ENVELOPE_SIZE",
    "KINDS",
    "MAGIC",
    "MAX_BODY",
    "ControlError",
    "body_length",
    "envelope",
    "json_body",
    "json_bytes",
    "json_envelope",
]

MAGIC = b"QCTL"
ENVELOPE = struct.Struct("<4sHHI")
ENVELOPE_SIZE = ENVELOPE.size  # 12
CHECK, APPLY, COMMAND, ANSWER = 1, 2, 3, 4
KINDS = (CHECK, APPLY, COMMAND, ANSWER)
#: largest body: a full-vocabulary dense frame or a model's logits fit easily
MAX_BODY = 64 << 20


class ControlError(ValueError):
    """A malformed envelope or command."""


def envelope(kind: int, body: bytes) -> bytes:
    return ENVELOPE.pack(MAGIC, kind, 0, len(body)) + body


def json_bytes(obj: dict) -> bytes:
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode("utf-8")


def json_envelope(kind: int, obj: dict) -> bytes:
    return envelope(kind, json_bytes(obj))


def body_length(head: bytes) -> tuple[int, int]:
    """(kind, body length) of an envelope header, refused when malformed or too long."""
    magic, kind, reserved, length = ENVELOPE.unpack(head)
    if magic != MAGIC or kind not in KINDS or reserved:
        raise ControlError(f"malformed envelope header {head!r}")
    if length > MAX_BODY:
        raise ControlError(f"envelope body of {length} bytes exceeds {MAX_BODY}")
    return kind, length


def json_body(body: layout.FrameBytes) -> dict:
    try:
        obj = json.loads(str(body, "utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ControlError(f"envelope body is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ControlError("envelope body is not a JSON object")
    return obj
