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
from collections import OrderedDict
from typing import TypeVar

from . import layout

_Outcome = TypeVar("_Outcome")

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
    "ENDED_KEPT",
    "ControlError",
    "RecentlyEnded",
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


#: how many ended connections' outcomes an endpoint's control still answers for (the newest ones): they
#: are asked about a connection as soon as it ended (docs/endpoint.md, "The control protocol")
ENDED_KEPT = 64


class RecentlyEnded(OrderedDict[int, _Outcome]):
    """Connection -> what its end did, for the newest :data:`ENDED_KEPT` connections recorded only: a
    served endpoint accepts connections without end (a soak's target reconnects after every lost link),
    and an outcome can hold the frames its event sent, so one entry per connection ever opened would
    grow without bound."""

    def __setitem__(self, number: int, outcome: _Outcome) -> None:
        super().__setitem__(number, outcome)
        self.move_to_end(number)
        while len(self) > ENDED_KEPT:
            self.popitem(last=False)


def forgotten(number: int) -> str:
    """The control answer's error for a connection whose end is not (or no longer) recorded."""
    return f"connection {number} did not end, or ended before the newest {ENDED_KEPT}, whose outcomes are kept"
