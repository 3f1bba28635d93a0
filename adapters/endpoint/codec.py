"""Frames to messages and back: the endpoint's own wire v2 codec (R12, R18, R21).

:class:`Decoder` checks a frame in the order of docs/wire-v2.md ("Decoding
order") and never allocates a payload buffer before the declared length has
passed the negotiated bounds and the bytes present have been counted (R18).
Every payload buffer it does allocate is counted in ``allocated``, so a harness
can see that a frame refused on its bounds cost no memory.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import google_crc32c

from . import layout
from .crc32c import INIT, MASK, as_bytes, crc32c_update, extend, finish, raw, shift_register


class Refusal(ValueError):
    """A refused frame or event, with its stable reason code and, once the frame's
    fixed fields passed the checksum, the round it addressed (``route``). ``v1``:
    the frame had the v1 magic, so its refusal leaves v2 state alone (R12)."""

    def __init__(self, code: str, detail: str = "", route: "Route | None" = None) -> None:
        super().__init__(f"{code}: {detail}" if detail else code)
        self.code = code
        self.detail = detail
        self.route = route
        self.v1 = False


@dataclass(frozen=True)
class Route:
    """Which slot, generation and round a message names (None: a RESET or CANCEL has no round)."""

    type: int
    session_id: int
    slot: int
    generation: int
    round: int | None


@dataclass
class Message:
    """A decoded message: its type code (0 for v1), fixed fields by name, a REPLY's raw tail."""

    type: int
    fields: dict = field(default_factory=dict)
    tail: bytes | memoryview = b""
    tokens: tuple[int, ...] = ()
    #: raw CRC registers (crc32c.raw) of the REPLY tail and of the whole frame, kept from decoding
    tail_raw: int | None = None
    frame_raw: int | None = None
    #: :attr:`route`, once made
    routed: "Route | None" = field(default=None, repr=False, compare=False)

    def __getitem__(self, name: str):
        return self.fields[name]

    @property
    def name(self) -> str:
        return layout.TYPE_NAMES.get(self.type, layout.V1_NAME)

    @property
    def route(self) -> Route | None:
        """Made once per message (the decoder and every check name it; the fields are not changed
        once decoded)."""
        if self.routed is None and self.type not in (0, layout.HELLO, layout.HELLO_ANSWER):
            f = self.fields
            self.routed = Route(self.type, f["session_id"], f["slot"], f["generation"], f.get("round"))
        return self.routed


@dataclass(frozen=True)
class Sealed:
    """A frame and the raw CRC register of all its bytes: a COMPLETION checksums it without reading it again."""

    data: bytes
    raw: int


def seal(message_type: int, fixed: bytes, tail: bytes = b"", tail_raw: int | None = None) -> Sealed:
    """A v2 frame: the 20-byte header (lengths, CRC-32C of header bytes 0..15 and the payload) and the payload.

    Every byte is read once: the tail's raw register (given, or computed here) is
    extended into the payload's, the header checksum's and the whole frame's.
    """
    length = len(fixed) + len(tail)
    prefix = struct.pack("<4sHHII", layout.V2_MAGIC, layout.WIRE_VERSION, message_type, layout.HEADER_SIZE, length)
    payload_raw = extend(raw(fixed), len(tail), raw(tail) if tail_raw is None else tail_raw)
    checksum = struct.pack("<I", finish(extend(crc32c_update(INIT, prefix), length, payload_raw)))
    return Sealed(prefix + checksum + fixed + tail, extend(raw(prefix + checksum), length, payload_raw))


def pack_fields(message_type: int, fields: dict) -> bytes:
    spec = layout.FIELDS[message_type]
    return spec.codec.pack(*(fields[name] for name in spec.names))


def encode(message_type: int, fields: dict, tail: bytes = b"") -> bytes:
    """The frame of a message given its fixed fields by name (and a REPLY's tail)."""
    return seal(message_type, pack_fields(message_type, fields), tail).data


def encode_v1(tokens: list[int]) -> bytes:
    """A v1 greedy frame (no q, no checksum)."""
    payload = struct.pack(f"<I{len(tokens)}i", len(tokens), *tokens)
    return layout.V1_HEADER.pack(layout.V1_MAGIC, layout.V1_VERSION, layout.V1_GREEDY_TYPE, len(payload)) + payload


class Decoder:
    """Decodes one frame at a time under the negotiated HELLO (a dict of its fields, None before)."""

    #: a stream reader checks the declared length against the bounds before reading the payload
    bounds_before_read = True

    def __init__(self) -> None:
        #: payload bytes allocated for the last frame decoded
        self.allocated = 0

    def take(self, view: memoryview) -> memoryview:
        """The payload bytes, counted as allocated: a view of the frame's own buffer, read in place
        (nothing writes a frame once read: ``bytes``, or the buffer a stream read it into); no
        payload byte is copied, a REPLY's tail included (:meth:`decode`)."""
        self.allocated += len(view)
        return view

    @staticmethod
    def check_extent(view: memoryview, end: int) -> None:
        if len(view) < end:
            raise Refusal("TRUNCATED", f"{len(view)} bytes, the frame declares {end}")
        if len(view) > end:
            raise Refusal("LENGTH_MISMATCH", f"{len(view) - end} bytes beyond the declared frame")

    def check_bounds(self, length: int, limits: tuple[int, int]) -> None:
        least, greatest = limits
        if not least <= length <= greatest:
            raise Refusal("UNEXPECTED_SIZE", f"payload of {length} bytes, admitted {least}..{greatest}")

    def read_payload(self, view: memoryview, start: int, length: int, limits: tuple[int, int]) -> memoryview:
        """The payload, once its declared length passed the bounds and the bytes present were counted."""
        self.check_bounds(length, limits)
        self.check_extent(view, start + length)
        return self.take(view[start : start + length])

    def header(self, view: memoryview, params: dict | None) -> tuple[int, int, tuple[int, int], int]:
        """Checks of the header alone: (header size, declared payload length, admitted payload
        lengths, message type with 0 for a v1 frame)."""
        if len(view) < 4:
            raise Refusal("TRUNCATED", "not even a magic")
        magic = bytes(view[:4])
        if magic == layout.V1_MAGIC:
            if len(view) < layout.V1_HEADER_SIZE:
                raise Refusal("TRUNCATED", "short v1 header")
            _, version, message_type, length = layout.V1_HEADER.unpack_from(view)
            if version != layout.V1_VERSION:
                raise Refusal("UNKNOWN_VERSION", f"v1 version {version}")
            if message_type != layout.V1_GREEDY_TYPE:
                raise Refusal("UNKNOWN_MESSAGE_TYPE", f"v1 type {message_type}")
            return layout.V1_HEADER_SIZE, length, (4, 4 + 4 * layout.V1_MAX_TOKENS), 0
        if magic != layout.V2_MAGIC:
            raise Refusal("BAD_MAGIC", repr(magic))
        if len(view) < layout.HEADER_SIZE:
            raise Refusal("TRUNCATED", "short header")
        _, version, message_type, header_length, length, _ = layout.HEADER.unpack_from(view)
        if version != layout.WIRE_VERSION:
            raise Refusal("UNKNOWN_VERSION", f"version {version}")
        if message_type not in layout.FIELDS:
            raise Refusal("UNKNOWN_MESSAGE_TYPE", f"type {message_type}")
        if header_length != layout.HEADER_SIZE:
            raise Refusal("LENGTH_MISMATCH", f"header length {header_length}")
        if params is None and message_type != layout.HELLO:
            raise Refusal("V2_BEFORE_HELLO", layout.TYPE_NAMES[message_type])
        return layout.HEADER_SIZE, length, layout.payload_limits(message_type, params), message_type

    def decode(self, data: layout.FrameBytes, params: dict | None) -> Message:
        """The message of ``data``, or :class:`Refusal` with the first failing check."""
        self.allocated = 0
        view = memoryview(data)
        if view[:4] == layout.V1_MAGIC:
            try:
                start, length, limits, _ = self.header(view, params)
                return self.v1_message(self.read_payload(view, start, length, limits), length)
            except Refusal as refusal:
                refusal.v1 = True
                raise
        start, length, limits, message_type = self.header(view, params)
        payload = self.read_payload(view, start, length, limits)
        (checksum,) = struct.unpack_from("<I", view, layout.CHECKSUM_OFFSET)
        # the bytes before a REPLY's tail (the whole frame of any other type: a few dozen bytes) as
        # one short ``bytes``; the tail, a view, is read once (crc32c reads a buffer in place) and its
        # raw register extended into the checksum and the whole frame's register
        split = layout.REPLY_FIXED if message_type == layout.REPLY else length
        prefix = as_bytes(view[: start + split])
        # the checksum: from INIT over header bytes 0..15, then the payload (the library's running
        # value is the inverted register)
        fixed_raw = (
            google_crc32c.extend(google_crc32c.extend(0, prefix[: layout.CHECKSUM_OFFSET]), prefix[start:]) ^ MASK
        )
        prefix_raw = google_crc32c.extend(MASK, prefix) ^ MASK
        tail_length = length - split
        if tail_length:
            tail = payload[split:]  # a view: the q bytes are never copied
            tail_raw = raw(tail)
            fixed_raw = shift_register(fixed_raw, tail_length) ^ tail_raw
            prefix_raw = shift_register(prefix_raw, tail_length) ^ tail_raw
        else:
            tail, tail_raw = payload[split:], 0
        if finish(fixed_raw) != checksum:
            raise Refusal("CHECKSUM_MISMATCH", f"checksum field {checksum:#010x}")
        spec = layout.FIELDS[message_type]
        message = Message(message_type, dict(zip(spec.names, spec.codec.unpack_from(payload))))
        message.frame_raw = prefix_raw
        if message_type == layout.REPLY:
            assert params is not None  # the header refused a REPLY before the HELLO (V2_BEFORE_HELLO)
            message.tail = self.reply_tail(message, tail, params)
            message.tail_raw = tail_raw
        return message

    @staticmethod
    def reply_tail(message: Message, tail: memoryview, params: dict) -> memoryview:
        """A REPLY's representation and entry count against the bounds, before its tail is read."""
        fields = message.fields
        route, count, representation = message.route, fields["entry_count"], fields["representation"]
        if representation == layout.REPR_NONE or count == 0:
            raise Refusal("MISSING_Q", "a reply without q", route)
        if representation == layout.REPR_DENSE:
            if count != params["dense_stride"]:
                raise Refusal("UNEXPECTED_SIZE", f"dense row of {count} entries", route)
            entry = layout.DENSE_ENTRY
        elif representation == layout.REPR_SPARSE:
            if count > params["max_support"]:
                raise Refusal("SUPPORT_ABOVE_MAX", f"k = {count}", route)
            entry = layout.SPARSE_ENTRY
        else:
            raise Refusal("UNKNOWN_REPRESENTATION", f"representation {representation}", route)
        if len(tail) != entry * count:
            payload = layout.REPLY_FIXED + len(tail)
            raise Refusal("LENGTH_MISMATCH", f"{count} entries in {payload} payload bytes", route)
        return tail

    @staticmethod
    def v1_message(payload: bytes | memoryview, length: int) -> Message:
        """A v1 greedy frame's tokens: never sampled, never carries q (R12)."""
        (count,) = struct.unpack_from("<I", payload)
        if count > layout.V1_MAX_TOKENS:
            raise Refusal("UNEXPECTED_SIZE", f"{count} v1 tokens")
        if length != 4 + 4 * count:
            raise Refusal("LENGTH_MISMATCH", f"{count} v1 tokens in {length} bytes")
        tokens = struct.unpack_from(f"<{count}i", payload, 4)
        if any(t < 0 for t in tokens):
            raise Refusal("TOKEN_OUT_OF_RANGE", "a negative v1 token")
        return Message(0, tokens=tuple(tokens))
