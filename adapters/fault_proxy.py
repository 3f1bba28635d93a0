"""A fault-injecting TCP proxy between a target (verifier) and a worker endpoint (R24, R25, R28).

The proxy relays both directions frame by frame (each frame delimited by its
v2 header) and applies each :class:`Fault` once, to the frame of the
worker-to-target direction it names: a round ID and the index of a REPLY in
that round (0-based), or :data:`COMPLETION` for the round's COMPLETION (and,
when it names them, a slot and a generation). Kinds (:data:`FAULT_KINDS`):

* ``drop``: the frame is never delivered (a missing row);
* ``delay``: the frame, and every later frame of its slot, is held until the
  target has given the round up: past its watchdog, once its RESET of that slot
  went by (or ``HOLD_S`` passed);
* ``corrupt``: one payload byte of the frame is flipped (its frame checksum fails);
* ``truncate``: the first half of the frame is delivered, then the stream to the
  target ends (a FIN) and both connections close once the target closed (a frame
  cut short by the link's end);
* ``fail``: a COMPLETION is delivered with status FAILED, re-sealed (the worker
  gave the round up);
* ``duplicate``: the frame is delivered twice, byte for byte (an identical retry);
* ``redraw``: the frame is delivered, then again with another token of the same
  q row, re-sealed: a retry that redrew under a reused key;
* ``reorder``: the frame is delivered after the next frame of its slot;
* ``late_after_reset``: the frame, and every later frame of its slot, is held
  (the ``holding`` event is set) until the target's RESET of the slot went by,
  then delivered: late replies of an ended generation;
* ``disconnect``: both connections are closed when the frame arrives; the
  target reconnects through the proxy to a new upstream connection.

Faults come from a list, or from a seeded :class:`FaultMix` (the soak, issue
#25): one fault at a time, each on a round no earlier fault touched, so every
fault's effect on the receiver's counters is its own (:func:`expected_counters`).

Every applied fault is listed in :attr:`FaultProxy.applied` (the newest
``APPLIED_LOG``) with its slot and generation, and counted by kind in
:attr:`FaultProxy.counts`; ``on_fault`` and ``on_commit`` (every COMMIT the target
sent, by field) let a caller keep its own books. The proxy never reads a payload
longer than :data:`MAX_FRAME`; beyond it, or after bytes that are not a v2 frame,
it relays raw bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import struct
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from qconform.adapters.endpoint import codec, layout

log = logging.getLogger("qconform.fault_proxy")

COMPLETION = "completion"
FAULT_KINDS: dict[str, str] = {
    "drop": "the frame is never delivered",
    "delay": "the frame and all later frames of its slot are held past the target's watchdog",
    "corrupt": "one payload byte is flipped",
    "truncate": "half the frame is delivered, then both connections close",
    "fail": "a COMPLETION is delivered with status FAILED (re-sealed)",
    "duplicate": "the frame is delivered twice, byte for byte",
    "redraw": "the frame is delivered again with another token of its q row (re-sealed)",
    "reorder": "the frame is delivered after the next frame of its slot",
    "late_after_reset": "the frame and all later frames of its slot are held until the target's RESET of it went by",
    "disconnect": "both connections close when the frame arrives",
}
#: the kinds a :class:`FaultMix` draws from by default: every kind whose outcome needs no help from the
#: target (``late_after_reset`` needs the target to preempt the held round)
MIX_KINDS = tuple(kind for kind in FAULT_KINDS if kind != "late_after_reset")
MAX_FRAME = 64 << 20
#: longest hold of ``delay`` and ``late_after_reset`` (seconds): every run ends by itself
HOLD_S = 10.0
#: how many applied faults :attr:`FaultProxy.applied` keeps
APPLIED_LOG = 4096


def fixed_fields(frame: bytes) -> dict:
    """The fixed fields of a frame with a slot (STEP, REPLY, COMPLETION, COMMIT, RESET) by name."""
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


def failed(frame: bytes) -> bytes:
    """The COMPLETION ``frame`` with status FAILED, re-sealed (the worker gave the round up)."""
    return codec.encode(layout.COMPLETION, {**fixed_fields(frame), "status": layout.STATUS_FAILED})


def truncated(frame: bytes) -> bytes:
    """The first half of ``frame`` (past its header: the frame is cut short, not its header)."""
    return frame[: max(layout.HEADER_SIZE + 1, len(frame) // 2)]


@dataclass(frozen=True)
class Fault:
    """One fault: ``kind`` applied to REPLY ``index`` (or the COMPLETION) of round ``round``.

    ``slot`` and ``generation`` None: the first slot (generation) whose frame of that round goes by.
    """

    kind: str
    round: int
    index: int | str = 0
    slot: int | None = None
    generation: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {self.kind!r}; known: {', '.join(FAULT_KINDS)}")


def fault_indices(kind: str, depth: int) -> tuple[int | str, ...]:
    """The frames of a round a fault of ``kind`` may hit so that its outcome is one counter (:func:`expected_counters`).

    A drop takes the last REPLY (the COMPLETION then finds a row missing) or the
    COMPLETION (the watchdog fires); a dropped earlier REPLY would be a position
    gap, a reorder's. A reorder takes a REPLY before the last (the next frame of its
    slot is a REPLY, so the gap is a position's). Worker FAILED is a COMPLETION's
    status. A duplicate or redraw is of a REPLY; the others hit any frame."""
    replies = tuple(range(depth))
    return {
        "drop": (depth - 1, COMPLETION),
        "reorder": replies[:-1],
        "fail": (COMPLETION,),
        "duplicate": replies,
        "redraw": replies,
    }.get(kind, (*replies, COMPLETION))


def expected_counters(fault: Fault) -> tuple[str, ...]:
    """The receiver counters one fault of a :class:`FaultMix` moves by one each (docs/endpoint.md, the fault table).

    The consequences every discarding fault has (``discarded_proposals``, and late
    or stale frames of the ended round) are not listed."""
    if fault.kind == "drop":
        return ("timeouts",) if fault.index == COMPLETION else ("MISSING_Q",)
    return {
        "delay": ("timeouts",),
        "corrupt": ("CHECKSUM_MISMATCH",),
        "truncate": ("TRUNCATED", "disconnects"),
        "fail": ("worker_failed",),
        "duplicate": ("duplicate_retries",),
        "redraw": ("RETRY_MISMATCH",),
        "reorder": ("POSITION_MISMATCH",),
        "late_after_reset": ("LATE_REPLY",),
        "disconnect": ("disconnects",),
    }[fault.kind]


@dataclass
class FaultMix:
    """A seeded mix of faults: each round, when its STEP goes by, is given a fault with probability ``rate``.

    The kind is drawn uniformly from ``kinds``, the frame from :func:`fault_indices`.
    The draw is a function of (``seed``, slot, generation, round) alone, so the same
    seed plans the same faults for the same rounds whatever the interleaving. A
    planned fault is applied only if no earlier fault is unresolved (one fault at a
    time: it is resolved once the target's RESET or COMMIT of its slot went by, which
    the target sends only after it read the fault's frame and ended the round) and
    its round's STEP went by after the last fault was resolved. So its round is
    untouched by an earlier fault's side effects (a corrupt frame or a dropped link
    discards every round open at the target when it reads it, and a STEP the target
    sent before that may reach the proxy after the faulty frame left it: only a STEP
    sent after the resolving RESET or COMMIT is surely later). Otherwise it is
    skipped (counted in ``skipped``).
    """

    seed: int
    rate: float
    kinds: tuple[str, ...] = MIX_KINDS
    skipped: int = 0
    planned: int = 0

    def __post_init__(self) -> None:
        unknown = [kind for kind in self.kinds if kind not in FAULT_KINDS]
        if unknown or not self.kinds:
            raise ValueError(f"unknown fault kinds {unknown}; known: {', '.join(FAULT_KINDS)}")

    def plan(self, slot: int, generation: int, round_id: int, depth: int) -> Fault | None:
        draws = random.Random(f"{self.seed}:{slot}:{generation}:{round_id}")
        if draws.random() >= self.rate:
            return None
        kind = draws.choice(self.kinds)
        self.planned += 1
        return Fault(kind, round_id, draws.choice(fault_indices(kind, depth)), slot, generation)


@dataclass
class Link:
    """One proxied connection: its client writer and the frames it holds back, per slot."""

    client: asyncio.StreamWriter
    #: slot -> frames held until its RESET (``delay``, ``late_after_reset``)
    held: dict[int, list[bytes]] = field(default_factory=dict)
    #: slot -> the time limit of its hold (``HOLD_S``)
    timers: dict[int, asyncio.TimerHandle] = field(default_factory=dict)
    #: slot -> a frame delivered after the slot's next one (``reorder``)
    reordered: dict[int, bytes] = field(default_factory=dict)
    #: (slot, generation, round) -> REPLY frames seen so far
    seen: Counter = field(default_factory=Counter)


class FaultProxy:
    """Relays target <-> worker through one listening port (see the module docstring)."""

    def __init__(
        self,
        upstream_host: str,
        upstream_port: int,
        faults: list[Fault] | tuple[Fault, ...] = (),
        mix: FaultMix | None = None,
        on_fault: Callable[[Fault], None] | None = None,
        on_commit: Callable[[dict], None] | None = None,
    ) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.pending = list(faults)
        self.mix, self.on_fault, self.on_commit = mix, on_fault, on_commit
        self.applied: deque[Fault] = deque(maxlen=APPLIED_LOG)
        self.counts: Counter = Counter()
        self.holding = asyncio.Event()
        self.server: asyncio.Server | None = None
        self.tasks: set[asyncio.Task] = set()
        #: faults resolved so far (a round whose STEP went by before the last resolution is not faulted by a mix)
        self.epoch = 0
        #: slot -> (generation, round, epoch) of its last STEP, and the mix's fault planned for that round
        self.steps: dict[int, tuple[int, int, int]] = {}
        self.plans: dict[int, Fault] = {}
        #: the slot of the applied fault not yet resolved (a mix applies one at a time)
        self.unresolved: int | None = None

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        self.server = await asyncio.start_server(self.connection, host, port)
        port = self.server.sockets[0].getsockname()[1]
        log.info(
            "fault proxy on %s:%d -> %s:%d, faults %s%s",
            host,
            port,
            *self.upstream,
            [f"{f.kind}@{f.round}/{f.index}" for f in self.pending],
            "" if self.mix is None else f", mix seed {self.mix.seed} rate {self.mix.rate}",
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
        link = Link(client_writer)
        pumps = [
            asyncio.ensure_future(self.pump_up(client_reader, upstream_writer, link)),
            asyncio.ensure_future(self.pump_down(upstream_reader, link)),
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
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait(pumps)
            self.link_ended(pumps, (client_reader, upstream_reader))
            self.tasks.discard(task)

    @staticmethod
    def link_ended(pumps: list[asyncio.Task[None]], readers: tuple[asyncio.StreamReader, ...]) -> None:
        """Let everything of an ended link be freed at once, not by the garbage collector (issue #25).

        A pump's error is taken, never raised here: raised, it would keep this handler's frame, whose
        ``pumps`` refer to it. A reader whose connection was lost keeps that error and raises the same
        object on every read, so its traceback holds the pumps' frames, which refer to the reader: a
        reference cycle, which CPython frees only in the collector's rare full passes, with the link and
        the frames it held; the traceback is dropped. (The endpoint's own reader never raises its stored
        error: ``stream.FrameReader.failure``; docs/endpoint.md, "The bound".)"""
        for pump in pumps:
            if pump.done() and not pump.cancelled():
                pump.exception()  # taken: asyncio logs an error never taken
        for reader in readers:
            error = reader.exception()
            if error is not None:
                error.__traceback__ = None

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

    async def pump_up(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, link: Link) -> None:
        """Target -> worker, untouched; a STEP plans a mix's fault, a RESET releases its slot's held frames."""
        framed = True
        while True:
            data, framed = await self.next_chunk(reader, framed)
            if not data:
                return
            writer.write(data)
            await writer.drain()
            if framed:
                self.seen_upstream(data, link)

    def seen_upstream(self, data: bytes, link: Link) -> None:
        kind = frame_type(data)
        if kind not in (layout.STEP, layout.RESET, layout.COMMIT):
            return
        fields = fixed_fields(data)
        slot = fields["slot"]
        if kind == layout.STEP:
            self.steps[slot] = (fields["generation"], fields["round"], self.epoch)
            self.plans.pop(slot, None)
            if self.mix is not None:
                plan = self.mix.plan(slot, fields["generation"], fields["round"], fields["depth"])
                if plan is not None:
                    self.plans[slot] = plan
        else:
            if self.unresolved == slot:  # the target read the fault's frame and ended its round
                self.unresolved = None
                self.epoch += 1
            if kind == layout.RESET:
                self.release(link, slot)
            elif self.on_commit is not None:
                self.on_commit(fields)

    def release(self, link: Link, slot: int) -> None:
        """Deliver the frames held for ``slot``, in order (and stop the hold's own time limit)."""
        timer = link.timers.pop(slot, None)
        if timer is not None:
            timer.cancel()
        for chunk in link.held.pop(slot, []):
            link.client.write(chunk)

    def take_fault(self, data: bytes, link: Link) -> Fault | None:
        kind = frame_type(data)
        if kind not in (layout.REPLY, layout.COMPLETION):
            return None
        key = round_field(data)
        if kind == layout.REPLY:
            index = link.seen[key]
            link.seen[key] = index + 1
        else:
            index = COMPLETION
            link.seen.pop(key, None)
        slot, generation, round_id = key
        fault = None
        for pending in self.pending:
            if (pending.round, pending.index) == (round_id, index) and pending.slot in (None, slot):
                if pending.generation in (None, generation):
                    self.pending.remove(pending)
                    fault = pending
                    break
        if fault is None and self.plans.get(slot) is not None:
            plan = self.plans[slot]
            if (plan.generation, plan.round, plan.index) == (generation, round_id, index):
                del self.plans[slot]
                if self.unresolved is None and self.steps.get(slot) == (generation, round_id, self.epoch):
                    fault = plan
                elif self.mix is not None:
                    self.mix.skipped += 1
        if fault is None:
            return None
        fault = replace(fault, slot=slot, generation=generation)
        self.unresolved = slot
        self.applied.append(fault)
        self.counts[fault.kind] += 1
        if self.on_fault is not None:
            self.on_fault(fault)
        log.info("applying %s to slot %d round %d (generation %d), %s", fault.kind, slot, round_id, generation, index)
        return fault

    def hold(self, link: Link, slot: int, data: bytes) -> None:
        """Hold ``data`` and the slot's later frames until its RESET (or ``HOLD_S``)."""
        link.held[slot] = [data]
        self.holding.set()
        # this hold's limit only: a limit left over from an earlier hold would release a later one early
        link.timers[slot] = asyncio.get_running_loop().call_later(HOLD_S, self.release, link, slot)

    async def pump_down(self, reader: asyncio.StreamReader, link: Link) -> None:
        """Worker -> target, with the faults applied."""
        writer = link.client
        framed = True
        while True:
            data, framed = await self.next_chunk(reader, framed)
            if not data:
                return
            if not framed or frame_type(data) not in (layout.REPLY, layout.COMPLETION):
                writer.write(data)
                await writer.drain()
                continue
            fault = self.take_fault(data, link)
            slot = round_field(data)[0]
            if slot in link.held and fault is None:
                link.held[slot].append(data)
                continue
            out = self.apply(fault, data, link, slot)
            if fault is None and slot in link.reordered:
                out.append(link.reordered.pop(slot))
            for chunk in out:
                writer.write(chunk)
            await writer.drain()
            if fault is not None and fault.kind == "truncate":
                # end the stream after the cut frame with a FIN, not a reset (which may purge the bytes
                # still unread at the target), and let the target close the link once it read them
                writer.write_eof()
                await asyncio.sleep(HOLD_S)
            if fault is not None and fault.kind in ("disconnect", "truncate"):
                raise ConnectionAbortedError(f"{fault.kind} fault")

    def apply(self, fault: Fault | None, data: bytes, link: Link, slot: int) -> list[bytes]:
        """The bytes to deliver now for ``data`` under ``fault``."""
        if fault is None:
            return [data]
        match fault.kind:
            case "drop" | "disconnect":
                return []
            case "delay" | "late_after_reset":
                self.hold(link, slot, data)
                return []
            case "reorder":
                link.reordered[slot] = data
                return []
            case "corrupt":
                flipped = bytearray(data)
                flipped[-1] ^= 0x01
                return [bytes(flipped)]
            case "truncate":
                return [truncated(data)]
            case "fail":
                return [failed(data)]
            case "duplicate":
                return [data, data]
            case "redraw":
                return [data, redrawn(data)]
        raise AssertionError(fault.kind)
