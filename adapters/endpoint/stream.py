"""Reading frames and control envelopes off a TCP connection (R18), with zero-copy framing.

A frame on a TCP stream is delimited by its own header: the reader takes the
magic, then the rest of the header, lets the decoder check the header and the
declared payload length against the negotiated bounds, and only then allocates
the frame's buffer and reads the payload. A header that fails those checks
leaves the stream out of step, so it comes back as a ``broken`` item holding the
bytes read: the receiver judges them (the same reason code as any decoder would
give) and the connection is closed.

The endpoints' own connections (:func:`start_server`, :func:`open_connection`)
read through :class:`FrameReader`, an :class:`asyncio.BufferedProtocol`: the
socket's bytes go into a small staging buffer while headers are read, and a
frame's payload, once its length passed the bounds, is read by the socket
straight into the frame's own buffer (:meth:`FrameReader.readinto`): no byte
of a q row is copied between the kernel and the validator (a frame's first
bytes may already sit in the staging buffer; they are copied once). Every
connection has its own reader, buffers and state. :func:`read_item` also reads
from a plain :class:`asyncio.StreamReader` (tests, third-party clients), then
with the copies that ``readexactly`` makes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import cast

from . import control, layout
from .codec import Decoder, Refusal

FRAME, ENVELOPE, BROKEN = "frame", "envelope", "broken"
#: bytes the staging buffer holds: headers, envelopes and small frames pass through it
STAGING_BYTES = 1 << 16
#: a read at least this long goes from the socket straight into its own buffer; a shorter one
#: waits for the staging buffer (so that the socket is never read a few bytes at a time)
DIRECT_BYTES = STAGING_BYTES // 4


@dataclass(frozen=True)
class Item:
    """One thing read: a whole ``frame``, an ``envelope`` (kind and body), or a ``broken`` prefix.

    A frame read by :func:`read_frame` is its own ``bytearray`` (the buffer the socket read it
    into), typed as ``bytes``: nothing writes it once read, and every consumer only reads it
    (decodes, slices, compares, keeps it for a retry's comparison); never hash it.
    """

    kind: str
    data: bytes
    envelope_kind: int = 0


class FrameReader(asyncio.BufferedProtocol):
    """One connection's reading side: the socket reads into :attr:`staging`, or straight into the
    payload buffer a pending :meth:`readinto` names. The reader pauses the transport while its
    staging buffer is full and nothing waits for bytes (TCP flow control does the rest)."""

    def __init__(self, on_connect: Callable[[FrameReader, FrameWriter], Awaitable[None]] | None = None) -> None:
        self.on_connect = on_connect
        self.transport: asyncio.Transport | None = None
        self.staging = bytearray(STAGING_BYTES)
        self.view = memoryview(self.staging)
        #: unread bytes are ``staging[start:end]``
        self.start = self.end = 0
        #: the rest of a payload the socket reads into directly, and how much of it arrived
        self.target: memoryview | None = None
        self.filled = 0
        self.eof = False
        self.error: BaseException | None = None
        self.waiter: asyncio.Future | None = None
        self.paused = False
        self.lost = False
        self.write_paused = False
        self.drained: asyncio.Future | None = None
        self.task: asyncio.Task | None = None
        self.closed: asyncio.Future = asyncio.get_running_loop().create_future()

    # -- the transport's side ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if self.on_connect is not None:
            self.task = asyncio.ensure_future(self.on_connect(self, FrameWriter(transport, self)))

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.target is not None:
            return self.target[self.filled :]
        if self.start == self.end:
            self.start = self.end = 0
        elif self.start and len(self.staging) - self.end < STAGING_BYTES // 4:
            self.compact()
        return self.view[self.end :]

    def buffer_updated(self, nbytes: int) -> None:
        if self.target is not None:
            self.filled += nbytes
            if self.filled == len(self.target):
                self.target = None
                self.wake()
            return
        self.end += nbytes
        if self.end == len(self.staging) and self.start == 0 and self.waiter is None:
            self.pause()
        self.wake()

    def eof_received(self) -> bool:
        self.eof = True
        self.wake()
        return True  # half-closed: answers may still go out

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if exc is None:
            self.eof = True
        else:
            self.error = exc
        self.wake()
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)
        if not self.closed.done():
            self.closed.set_result(None)

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)

    # -- bookkeeping -----------------------------------------------------------------------

    def compact(self) -> None:
        """Move the unread bytes to the front of the staging buffer (at most its size, once per refill)."""
        unread = self.end - self.start
        self.staging[:unread] = self.staging[self.start : self.end]
        self.start, self.end = 0, unread

    def pause(self) -> None:
        if not self.paused and self.transport is not None and not self.lost:
            self.paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self.paused and self.transport is not None and not self.lost:
            self.paused = False
            self.transport.resume_reading()

    def wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    async def wait(self) -> None:
        if self.error is not None:
            raise self.error
        self.resume()
        self.waiter = asyncio.get_running_loop().create_future()
        try:
            await self.waiter
        finally:
            self.waiter = None
        if self.error is not None:
            raise self.error

    def take(self, view: memoryview) -> int:
        """Copy unread staged bytes to the front of ``view``; how many."""
        count = min(len(view), self.end - self.start)
        view[:count] = self.view[self.start : self.start + count]
        self.start += count
        return count

    # -- the reading side --------------------------------------------------------------------

    async def readexactly(self, count: int) -> bytes:
        """``count`` bytes; IncompleteReadError (with the bytes read) at the end of the stream."""
        if count >= DIRECT_BYTES:
            buffer = bytearray(count)
            await self.readinto(memoryview(buffer))
            return bytes(buffer)
        await self.staged(count)
        out = bytes(self.view[self.start : self.start + count])
        self.start += count
        return out

    async def staged(self, count: int) -> None:
        """Wait until ``count`` unread bytes (fewer than the staging buffer holds) are staged; at the
        end of the stream, IncompleteReadError with every unread byte."""
        if self.error is not None:
            raise self.error
        while self.end - self.start < count:
            if self.eof:
                partial = bytes(self.view[self.start : self.end])
                self.start = self.end
                raise asyncio.IncompleteReadError(partial, count)
            await self.wait()

    async def readinto(self, view: memoryview) -> None:
        """Fill ``view``: staged bytes first; the rest of a long read goes from the socket straight into it."""
        if self.error is not None:
            raise self.error
        got = self.take(view)
        rest = len(view) - got
        if rest and rest < DIRECT_BYTES:
            try:
                await self.staged(rest)
            except asyncio.IncompleteReadError as exc:
                raise asyncio.IncompleteReadError(bytes(view[:got]) + exc.partial, len(view)) from None
            self.take(view[got:])
            return
        if rest and not self.eof:
            self.target, self.filled = view[got:], 0
            try:
                while self.target is not None and not self.eof:
                    await self.wait()
            finally:
                got += self.filled
                self.target, self.filled = None, 0
        if got < len(view):
            raise asyncio.IncompleteReadError(bytes(view[:got]), len(view))


class FrameWriter:
    """The writing side of a :class:`FrameReader`'s connection (the part of asyncio's StreamWriter the endpoints use)."""

    def __init__(self, transport: asyncio.Transport, protocol: FrameReader) -> None:
        self.transport = transport
        self.protocol = protocol

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.transport.write(data)

    async def drain(self) -> None:
        protocol = self.protocol
        if protocol.error is not None:
            raise protocol.error
        if self.transport.is_closing():
            await asyncio.sleep(0)  # let connection_lost run, as asyncio's StreamWriter does
        if protocol.lost:
            raise ConnectionResetError("Connection lost")
        if protocol.write_paused:
            protocol.drained = asyncio.get_running_loop().create_future()
            await protocol.drained
            if protocol.lost:
                raise ConnectionResetError("Connection lost")

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def close(self) -> None:
        self.transport.close()

    async def wait_closed(self) -> None:
        await self.protocol.closed

    def get_extra_info(self, name: str, default=None):
        return self.transport.get_extra_info(name, default)


async def start_server(
    on_connect: Callable[[FrameReader, FrameWriter], Awaitable[None]], host: str, port: int
) -> asyncio.Server:
    """A TCP server whose every connection gets its own :class:`FrameReader` and runs ``on_connect`` in a task."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: FrameReader(on_connect), host, port)


async def open_connection(host: str, port: int) -> tuple[FrameReader, FrameWriter]:
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.create_connection(FrameReader, host, port)
    assert isinstance(transport, asyncio.Transport)
    return protocol, FrameWriter(transport, protocol)


Reader = FrameReader | asyncio.StreamReader


async def read_exactly(reader: Reader, count: int, have: bytes) -> bytes:
    """``have`` plus ``count`` more bytes; IncompleteReadError carries everything read."""
    try:
        return have + await reader.readexactly(count)
    except asyncio.IncompleteReadError as exc:
        raise asyncio.IncompleteReadError(have + exc.partial, None) from None


async def read_frame(reader: Reader, head: bytes, length: int) -> bytes:
    """The frame's own buffer (a ``bytearray``, see :class:`Item`): its header ``head``, then
    ``length`` payload bytes read into it."""
    frame = bytearray(len(head) + length)
    frame[: len(head)] = head
    payload = memoryview(frame)[len(head) :]
    try:
        if isinstance(reader, FrameReader):
            await reader.readinto(payload)
        else:
            payload[:] = await reader.readexactly(length)
    except asyncio.IncompleteReadError as exc:
        raise asyncio.IncompleteReadError(head + exc.partial, None) from None
    return cast(bytes, frame)


async def read_unbounded(reader: Reader, head: bytes, length: int) -> bytes:
    """A frame read by a decoder that checks bounds only after reading (a mutant's, mutants.py): nothing
    is allocated for the declared length up front; the payload accumulates as it arrives."""
    chunks = [head]
    try:
        for offset in range(0, length, DIRECT_BYTES - 1):
            chunks.append(await reader.readexactly(min(DIRECT_BYTES - 1, length - offset)))
    except asyncio.IncompleteReadError as exc:
        raise asyncio.IncompleteReadError(b"".join(chunks) + exc.partial, None) from None
    return b"".join(chunks)


async def read_item(reader: Reader, decoder: Decoder, params: dict | None, control_allowed: bool = True) -> Item | None:
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
        if not decoder.bounds_before_read:
            return Item(FRAME, await read_unbounded(reader, head, length))
        return Item(FRAME, await read_frame(reader, head, length))
    except asyncio.IncompleteReadError as exc:
        return Item(BROKEN, exc.partial)


async def send(writer: asyncio.StreamWriter | FrameWriter, *chunks: bytes) -> None:
    for chunk in chunks:
        writer.write(chunk)
    await writer.drain()
