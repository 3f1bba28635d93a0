"""Reading frames and control envelopes off an asyncio stream (R18).

A frame on a TCP stream is delimited by its own header: the reader takes the
magic, then the rest of the header, lets the decoder check the header and the
declared payload length against the negotiated bounds, and only then reads (and
allocates) the payload. A header that fails those checks leaves the stream out
of step, so it comes back as a ``broken`` item holding the bytes read: the
receiver judges them (the same reason code as any decoder would give) and the
connection is closed.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from . import control, layout
from .codec import Decoder, Refusal

FRAME, ENVELOPE, BROKEN = "frame", "envelope", "broken"


@dataclass(frozen=True)
class Item:
    """One thing read: a whole ``frame``, an ``envelope`` (kind and body), or a ``broken`` prefix."""

    kind: str
    data: bytes
    envelope_kind: int = 0


async def read_exactly(reader: asyncio.StreamReader, count: int, have: bytes) -> bytes:
    """``have`` plus ``count`` more bytes; IncompleteReadError carries everything read."""
    try:
        return have + await reader.readexactly(count)
    except asyncio.IncompleteReadError as exc:
        raise asyncio.IncompleteReadError(have + exc.partial, None) from None


async def read_item(
    reader: asyncio.StreamReader, decoder: Decoder, params: dict | None, control_allowed: bool = True
) -> Item | None:
    """The next item, or None at a clean end of stream (a partial item at EOF is ``broken``)."""
    try:
        magic = await read_exactly(reader, 4, b"")
    except asyncio.IncompleteReadError as exc:
        return Item(BROKEN, exc.partial) if exc.partial else None
    try:
        if magic == control.MAGIC and control_allowed:
            head = await read_exactly(reader, control.ENVELOPE_SIZE - 4, magic)
            try:
                kind, length = control.body_length(head)
            except control.ControlError:
                return Item(BROKEN, head)
            return Item(ENVELOPE, await reader.readexactly(length), kind)
        size = {layout.V1_MAGIC: layout.V1_HEADER_SIZE, layout.V2_MAGIC: layout.HEADER_SIZE}.get(magic)
        if size is None:
            return Item(BROKEN, magic)
        head = await read_exactly(reader, size - 4, magic)
        try:
            start, length, limits, _ = decoder.header(memoryview(head), params)
            if decoder.bounds_before_read:
                decoder.check_bounds(length, limits)
        except Refusal:
            return Item(BROKEN, head)
        return Item(FRAME, await read_exactly(reader, length, head))
    except asyncio.IncompleteReadError as exc:
        return Item(BROKEN, exc.partial)


async def send(writer: asyncio.StreamWriter, *chunks: bytes) -> None:
    for chunk in chunks:
        writer.write(chunk)
    await writer.drain()
