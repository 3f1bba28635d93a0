"""A fault-injecting TCP proxy between a target (verifier) and a worker endpoint (R24, R25, R28).

The proxy relays both directions frame by frame (each frame delimited by its
v2 header) and applies each :class:`Fault` once, to the frame of the
worker-to-target direction it names: a round ID and the index of a REPLY in
that round (0-based), or :data:`COMPLETION` for the round's COMPLETION. Kinds:

* ``drop``: the frame is never delivered (a missing row);
* ``delay``: the frame, and everything after it, is held until the target has
  given the round up: past its watchdog, once its RESET went by (or
  ``hold_s`` passed);
* ``corrupt``: one payload byte of the frame is flipped (its frame checksum fails);
* ``duplicate``: the frame is delivered twice, byte for byte (an identical retry);
* ``redraw``: the frame is delivered, then again with another token of the same
  q row, re-sealed: a retry that redrew under a reused key;
* ``reorder``: the frame is delivered after the next one;
* ``late_after_reset``: the frame, and everything after it, is held (the
  ``holding`` event is set) until the target's RESET of the slot went by, then
  delivered: late replies of an ended generation;
* ``disconnect``: both connections are closed when the frame arrives; the
  target reconnects through the proxy to a new upstream connection.

Every applied fault is listed in :attr:`FaultProxy.applied`. The proxy never
reads a payload longer than :data:`MAX_FRAME`; beyond it, or after bytes that
are not a v2 frame, it relays raw bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from dataclasses import dataclass

from qconform.adapters.endpoint import codec, layout

log = logging.getLogger("qconform.fault_proxy")

COMPLETION = "completion"
FAULT_KINDS: dict[str, str] = {
    "drop": "the frame is never delivered",
    "delay": "the frame and all after it are held past the target's watchdog",
    "corrupt": "one payload byte is flipped",
    "duplicate": "the frame is delivered twice, byte for byte",
    "redraw": "the frame is delivered again with another token of its q row (re-sealed)",
    "reorder": "the frame is delivered after the next one",
    "late_after_reset": "the frame and all after it are held until the target's RESET went by",
    "disconnect": "both connections close when the frame arrives",
}
MAX_FRAME = 64 << 20
#: longest hold of ``delay`` and ``late_after_reset`` (seconds): every run ends by itself
HOLD_S = 10.0


def fixed_fields(frame: bytes) -> dict:
    """The fixed fields of a REPLY or COMPLETION frame by name (the reference endpoint's layout)."""
    spec = layout.FIELDS[frame_type(frame)]
    return dict(zip(spec.names, spec.codec.unpack_from(frame, layout.HEADER_SIZE)))


def round_field(frame: bytes) -> tuple[int, int, int]:
    """(slot, generation, round) of a REPLY or COMPLETION frame."""
    fields = fixed_fields(frame)
    return fields["slot"], fields["generation"], fields["round"]


def frame_type(frame: bytes) -> int:
    return struct.unpack_from("<H", frame, 6)[0]


def redrawn(frame: bytes) -> bytes:
    """The REPLY ``frame`` with another token of positive q in its row, re-sealed (a redraw)."""
    fields = fixed_fields(frame)
    token, count = fields["token"], fields["entry_count"]
    tail = frame[layout.HEADER_SIZE + layout.REPLY_FIXED :]
    if fields["representation"] == layout.REPR_SPARSE:
        ids = struct.unpack_from(f"<{count}i", tail)
        values = struct.unpack_from(f"<{count}I", tail, 4 * count)
    else:
        values = struct.unpack_from(f"<{count}I", tail)
        ids = tuple(range(count))
    fields["token"] = next((v for v, bits in zip(ids, values) if v != token and bits), token)
    return codec.encode(layout.REPLY, fields, tail)


@dataclass(frozen=True)
class Fault:
    """One fault: ``kind`` applied to REPLY ``index`` (or the COMPLETION) of round ``round``."""

    kind: str
    round: int
    index: int | str = 0

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {self.kind!r}; known: {', '.join(FAULT_KINDS)}")


class FaultProxy:
    """Relays target <-> worker through one listening port (see the module docstring)."""

    def __init__(self, upstream_host: str, upstream_port: int, faults: list[Fault] | tuple[Fault, ...] = ()) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.pending = list(faults)
        self.applied: list[Fault] = []
        self.holding = asyncio.Event()
        self.reset_seen = asyncio.Event()
        self.server: asyncio.Server | None = None
        self.tasks: set[asyncio.Task] = set()

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        self.server = await asyncio.start_server(self.connection, host, port)
        port = self.server.sockets[0].getsockname()[1]
        log.info(
            "fault proxy on %s:%d -> %s:%d, faults %s",
            host,
            port,
            *self.upstream,
            [f"{f.kind}@{f.round}/{f.index}" for f in self.pending],
        )
        return port

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for task in list(self.tasks):
            task.cancel()
        for task in list(self.tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.server is not None:
            with contextlib.suppress(Exception):
                await self.server.wait_closed()

    async def connection(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None  # asyncio runs each connection handler as a task
        self.tasks.add(task)
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.upstream)
        except OSError as exc:
            log.warning("upstream %s:%d unreachable: %s", *self.upstream, exc)
            client_writer.close()
            self.tasks.discard(task)
            return
        pumps = [
            asyncio.ensure_future(self.pump_up(client_reader, upstream_writer)),
            asyncio.ensure_future(self.pump_down(upstream_reader, client_writer)),
        ]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            pass
        finally:
            for pump in pumps:
                pump.cancel()
            for writer in (client_writer, upstream_writer):
                writer.close()
            for pump in pumps:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await pump
            self.tasks.discard(task)

    @staticmethod
    async def read_frame(reader: asyncio.StreamReader) -> tuple[bytes, bool]:
        """(bytes, is a whole v2 frame); empty bytes at end of stream."""
        try:
            head = await reader.readexactly(layout.HEADER_SIZE)
        except asyncio.IncompleteReadError as exc:
            return exc.partial, False
        payload_length = layout.HEADER.unpack(head)[4]
        if head[:4] != layout.V2_MAGIC or payload_length > MAX_FRAME:
            return head, False
        try:
            return head + await reader.readexactly(payload_length), True
        except asyncio.IncompleteReadError as exc:
            return head + exc.partial, False

    async def next_chunk(self, reader: asyncio.StreamReader, framed: bool) -> tuple[bytes, bool]:
        """The next whole frame while the stream is still framed, else the next raw bytes."""
        if framed:
            return await self.read_frame(reader)
        return await reader.read(1 << 16), False

    async def pump_up(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Target -> worker, untouched; a RESET going by releases held frames."""
        framed = True
        while True:
            data, framed = await self.next_chunk(reader, framed)
            if not data:
                return
            writer.write(data)
            await writer.drain()
            if framed and frame_type(data) == layout.RESET:
                self.reset_seen.set()

    def take_fault(self, data: bytes, seen: dict) -> Fault | None:
        kind = frame_type(data)
        if kind not in (layout.REPLY, layout.COMPLETION):
            return None
        key = round_field(data)
        if kind == layout.REPLY:
            index = seen.get(key, 0)
            seen[key] = index + 1
        else:
            index = COMPLETION
        for fault in self.pending:
            if fault.round == key[2] and fault.index == index:
                self.pending.remove(fault)
                self.applied.append(fault)
                log.info("applying %s to round %d, %s", fault.kind, key[2], index)
                return fault
        return None

    async def hold_until_reset(self) -> None:
        self.reset_seen.clear()
        self.holding.set()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.reset_seen.wait(), HOLD_S)

    async def pump_down(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Worker -> target, with the faults applied."""
        seen: dict = {}
        held: bytes | None = None
        framed = True
        while True:
            data, framed = await self.next_chunk(reader, framed)
            if not data:
                return
            fault = self.take_fault(data, seen) if framed else None
            out = await self.apply(fault, data)
            if held is not None and fault is None:
                out, held = out + [held], None
            if fault is not None and fault.kind == "reorder":
                held, out = data, []
            for chunk in out:
                writer.write(chunk)
            await writer.drain()

    async def apply(self, fault: Fault | None, data: bytes) -> list[bytes]:
        """The bytes to deliver for ``data`` under ``fault``."""
        if fault is None or fault.kind == "reorder":
            return [data]
        if fault.kind == "drop":
            return []
        if fault.kind in ("delay", "late_after_reset"):
            await self.hold_until_reset()
            return [data]
        if fault.kind == "corrupt":
            flipped = bytearray(data)
            flipped[-1] ^= 0x01
            return [bytes(flipped)]
        if fault.kind == "duplicate":
            return [data, data]
        if fault.kind == "redraw":
            return [data, redrawn(data)]
        raise ConnectionAbortedError("disconnect fault")
