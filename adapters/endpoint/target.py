"""The verifier endpoint in its driving role: the target side of rounds against a worker (R16, R17, R24, R25, R28).

:class:`Target` connects to a worker (directly, or through a fault-injecting
proxy), negotiates the worker's HELLO, and plays rounds on slots 0..S-1 at once
(``slots``: 1 by default; None, the CLI's default, is every slot of the
negotiated HELLO), concurrently over the one connection: frames of different
slots interleave on the wire and all go through the one receiver. Each driven
slot is a :class:`Lane` with its own request seed, generation, committed
position, previous token, round counter and records. Slot ``s`` uses the seed
``(seed + s) mod 2^64``, so slot 0 keeps the target's seed and a one-slot target
with seed ``seed + s`` replays slot s draw for draw. At most the HELLO's
``max_requests`` rounds are open at once.

One reader task takes every frame off the connection, feeds it to the receiver
and dispatches it by its slot field: the round in flight on that slot wakes
when it became consumable, and every slot whose proposal the verdict discarded
wakes with the reason. A frame for a slot with no round in flight goes through
the receiver all the same (late and stale frames are the receiver's business).

A round RESETs its slot when no generation is live, sends STEP, then waits
until it resolves:

* the COMPLETION validated: the K rows are consumed, verified against the
  target p with the torch candidate's standard verification (ACCEPT and
  CORRECTION draws, R11, R23), and committed (accepted count, correction or
  bonus token, new committed position);
* the receiver discarded the proposal (missing, corrupt, reordered, retried
  differently, worker FAILED), the watchdog fired, the link dropped, or the
  round was preempted by a RESET: nothing of it is consumed, and the outcome is
  target-only from the committed prefix (R25). This endpoint's choice of that
  token: the bonus draw of an empty proposal (K = 0), i.e. the CORRECTION draw
  at the round's anchor under the round's RNG identity, sampled from the target
  row p_1 with the torch candidate's sampler (:func:`target_only_draw`). It is
  committed (committed position + 1, previous token = it) and the next round
  RESETs to a new generation at the new committed position first (a
  preemption's RESET carries it at once).

No wire message carries a target-only token to the worker (a RESET names only
the committed position), so the round after one records ``draft_previous``
None: the worker was told no token for its prefix. Every round leaves a
:class:`RoundRecord`; the receiver's journal and counters say what was consumed
and why anything was discarded, and :attr:`Target.frames` logs the last frames
that went through the receiver (direction, type, slot).

Memory is bounded whatever the number of rounds (issue #25): the target keeps
the records of the last ``record_window`` rounds opened (:attr:`Target.records`,
each numbered by ``seq``, the order opened; each lane keeps its own slot's last
``record_window``, so at most that many per slot), and the consumed q rows of only the
last ``row_window`` rounds resolved; an older record's ``rows`` is None (the rows
were released, about 2.6 MB per dense round at V = 129280). A caller that needs
every round sees each one as it resolves, rows included, through ``on_round``,
or asks the ``rounds`` control op by range before the window moves past it
(docs/endpoint.md, "The rounds answer").
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import struct
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from qconform.adapters.torch_candidate.philox import CORRECTION, draw_word0, seed_keys, u32_of
from qconform.adapters.torch_candidate.sampling import sample_mass
from qconform.adapters.torch_candidate.verification import BONUS, Draw, verify_round

from . import layout, stream
from .answers import row_json
from .codec import encode
from .commits import commit_fields
from .model import TargetModel
from .receiver import ACCEPT, Disposition, Receiver
from .validation import QRow

log = logging.getLogger("qconform.endpoint.target")

#: how often a waiting round looks at a preemption request (seconds)
POLL_S = 0.02
ONE_F32 = 0x3F800000
#: how many frames :attr:`Target.frames` keeps
FRAME_LOG = 4096
#: how many round records :attr:`Target.records` (and each lane's) keeps: the newest opened
RECORD_WINDOW = 4096
#: how many resolved rounds keep their consumed q rows (16 dense rounds at V = 129280: 41 MB)
ROW_WINDOW = 16
COMMITTED, TARGET_ONLY = "committed", "target-only"
#: a round in flight whose rows became consumable
_READY = "ready"


class TargetError(RuntimeError):
    """The target could not go on (its own command refused, no worker to connect to)."""


@dataclass
class RoundRecord:
    """One round as the target saw it.

    ``previous`` is the committed token before it (None: none yet);
    ``draft_previous`` the one the worker was told by a COMMIT for the committed
    position the round starts from (None: none, e.g. after a target-only token),
    which is what the worker's draft conditions on. A target-only round holds
    its ``token`` and the ``draw`` it came from. ``seq`` numbers the rounds of
    all slots in the order opened (0, 1, ...); ``rows`` is None once released
    (older than the target's row window).
    """

    slot: int
    generation: int
    round: int
    anchor: int
    seed: int
    previous: int | None
    draft_previous: int | None = None
    outcome: str = "open"
    reason: str | None = None
    tokens: list[int] = field(default_factory=list)
    rows: list[QRow] | None = field(default_factory=list)
    accepted: int | None = None
    token: int | None = None
    new_committed: int | None = None
    draw: Draw | None = None
    seq: int = 0
    #: ``time.monotonic()`` when the round was opened (its latency is measured from it)
    opened_at: float = 0.0

    def to_json(self) -> dict:
        out = {
            k: getattr(self, k)
            for k in (
                "seq",
                "slot",
                "generation",
                "round",
                "anchor",
                "previous",
                "draft_previous",
                "outcome",
                "reason",
                "tokens",
                "accepted",
                "token",
                "new_committed",
            )
        }
        return {
            **out,
            "seed": str(self.seed),
            "rows": None if self.rows is None else [row_json(row) for row in self.rows],
            "draw": None if self.draw is None else asdict(self.draw),
        }


@dataclass
class Lane:
    """One driven slot: its seed, committed position, previous tokens, round counter, records, round in flight."""

    slot: int
    seed: int
    committed: int = 0
    last_token: int | None = None
    #: the token the worker was told by the last COMMIT at ``committed`` (None: none)
    told_token: int | None = None
    round_id: int = 0
    #: the lane's newest records (at most the target's ``record_window``)
    records: deque[RoundRecord] = field(default_factory=deque)
    preempt_requested: bool = False
    #: while a round is in flight: ``_READY`` or the reason it was discarded, once known
    outcome: str | None = None
    woken: asyncio.Event = field(default_factory=asyncio.Event)
    in_flight: bool = False

    def wake(self, outcome: str) -> None:
        """The round in flight resolved; a discard overrides a readiness not yet acted on."""
        if self.in_flight and self.outcome in (None, _READY):
            self.outcome = outcome
            self.woken.set()


def slot_seed(seed: int, slot: int) -> int:
    """The request seed of driven slot ``slot``: ``(seed + slot) mod 2^64``."""
    return (seed + slot) % (1 << 64)


def frame_slot(data: layout.FrameBytes) -> int | None:
    """The slot field of a v2 frame (not yet verified: it only says whom to wake), None when it has none."""
    if len(data) < layout.HEADER_SIZE or data[:4] != layout.V2_MAGIC:
        return None
    fixed = layout.FIELDS.get(struct.unpack_from("<H", data, 6)[0])
    if fixed is None or "slot" not in fixed.names or len(data) < layout.HEADER_SIZE + fixed.codec.size:
        return None
    return fixed.codec.unpack_from(data, layout.HEADER_SIZE)[fixed.names.index("slot")]


def frame_type(data: layout.FrameBytes) -> str:
    if len(data) >= 8 and data[:4] == layout.V2_MAGIC:
        return layout.TYPE_NAMES.get(struct.unpack_from("<H", data, 6)[0], "?")
    return "?"


#: the draw counter of the target-only draw (docs/rng-abi.md, "Target-only fallback")
FALLBACK_COUNTER = 1


def target_only_draw(seed: int, generation: int, round_id: int, anchor: int, p_row: torch.Tensor) -> Draw:
    """The target-only token of a round not consumed (docs/rng-abi.md, "Target-only fallback").

    The CORRECTION draw at position ``anchor`` with draw counter 1 under the
    round's RNG identity (counter 0 there is the correction after zero accepted
    drafts, which this round may already have drawn), sampled from the FP32
    target weights ``p_row`` as FP64 mass, as the torch candidate samples a bonus (R11).
    """
    _, word0 = draw_word0(
        seed_keys([seed]),
        torch.tensor([anchor]),
        torch.tensor([round_id]),
        torch.tensor([generation]),
        CORRECTION,
        FALLBACK_COUNTER,
    )
    u32 = u32_of(word0)
    token = sample_mass(p_row.to(torch.float64)[None], u32)
    return Draw(CORRECTION, anchor, FALLBACK_COUNTER, int(u32[0]), BONUS, int(token[0]))


class Target:
    """Drives rounds on ``slots`` slots against a worker (see the module docstring)."""

    def __init__(
        self,
        config: dict,
        target: TargetModel,
        host: str,
        port: int,
        *,
        seed: int = 0x5EED,
        support_policy: int = 0,
        temperature_bits: int = ONE_F32,
        watchdog_s: float = 1.0,
        slots: int | None = 1,
        receiver_cls: type[Receiver] = Receiver,
        connect_timeout_s: float = 5.0,
        record_window: int = RECORD_WINDOW,
        row_window: int = ROW_WINDOW,
        on_round: Callable[[RoundRecord], None] | None = None,
    ) -> None:
        self.receiver = receiver_cls(config)
        self.target = target
        self.host, self.port = host, port
        self.seed, self.support_policy, self.temperature_bits = seed, support_policy, temperature_bits
        self.watchdog_s, self.slot_count, self.connect_timeout_s = watchdog_s, slots, connect_timeout_s
        self.reader: stream.FrameReader | None = None
        self.writer: stream.FrameWriter | None = None
        self.reading: asyncio.Task | None = None
        #: which connection is current (a link lost twice is handled once)
        self.link = 0
        self.connecting = asyncio.Lock()
        self.requests: asyncio.Semaphore | None = None
        self.lanes: list[Lane] = []
        #: the newest ``record_window`` rounds, all slots, in the order they were opened
        self.records: deque[RoundRecord] = deque(maxlen=record_window)
        self.record_window, self.row_window = record_window, row_window
        #: rounds opened so far (the next round's ``seq``)
        self.opened = 0
        #: the resolved rounds still holding their rows, oldest first (at most ``row_window``)
        self.holding_rows: deque[RoundRecord] = deque()
        #: called with every round as it resolves (committed or target-only), its rows still held
        self.on_round = on_round
        #: the last frames through the receiver: (``"in"`` or ``"out"``, type name, slot)
        self.frames: deque[tuple[str, str, int | None]] = deque(maxlen=FRAME_LOG)

    # -- the link ------------------------------------------------------------------------------

    async def connect(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.connect_timeout_s
        while True:
            try:
                self.reader, self.writer = await stream.open_connection(self.host, self.port)
                break
            except OSError as exc:
                if loop.time() > deadline:
                    raise TargetError(f"no worker at {self.host}:{self.port}: {exc}") from None
                await asyncio.sleep(0.02)
        self.link += 1
        try:
            item = await asyncio.wait_for(
                stream.read_item(self.reader, self.receiver.decoder, self.receiver.negotiated, control_allowed=False),
                self.connect_timeout_s,
            )
        except (asyncio.TimeoutError, ConnectionError, OSError):
            item = None
        verdict = self.receiver.feed(item.data) if isinstance(item, stream.Item) else None
        if verdict is not None and verdict.answer is not None:  # the worker learns its HELLO's outcome
            with contextlib.suppress(ConnectionError, OSError):
                await stream.send(self.writer, verdict.answer)
        if verdict is None or verdict.kind != ACCEPT or self.receiver.negotiated is None:
            await self.drop_link()
            raise TargetError(f"the worker's HELLO was not accepted: {verdict}")
        self.open_lanes(self.receiver.negotiated)
        self.reading = asyncio.ensure_future(self.read_frames(self.link))
        log.info(
            "connected to %s:%d, negotiated session %#x, driving %d slots",
            self.host,
            self.port,
            self.receiver.negotiated["session_id"],
            len(self.lanes),
        )

    def open_lanes(self, hello: dict) -> None:
        """The driven slots, once: ``slots`` of them (None: every slot of the HELLO), slot s with seed + s."""
        count = hello["max_slots"] if self.slot_count is None else self.slot_count
        if not 1 <= count <= hello["max_slots"]:
            raise TargetError(f"{count} slots to drive; the HELLO has {hello['max_slots']}")
        if not self.lanes:
            self.lanes = [
                Lane(s, slot_seed(self.seed, s), records=deque(maxlen=self.record_window)) for s in range(count)
            ]
            self.requests = asyncio.Semaphore(hello["max_requests"])

    async def read_frames(self, link: int) -> None:
        """The reader task of one connection: every frame through the receiver, dispatched by its slot."""
        while True:
            try:
                item = await stream.read_item(
                    self.reader, self.receiver.decoder, self.receiver.negotiated, control_allowed=False
                )
            except (ConnectionError, OSError):
                item = None
            if item is None:
                return await self.lose_link(link, "disconnect")
            verdict = self.receiver.feed(item.data)
            slot = frame_slot(item.data)
            self.frames.append(("in", frame_type(item.data), slot))
            log.debug("frame of %d bytes, slot %s: %s %s", len(item.data), slot, verdict.kind, verdict.reason or "")
            self.dispatch(verdict, slot)
            if item.kind == stream.BROKEN:
                return await self.lose_link(link, verdict.reason or "disconnect")

    def lane_of(self, slot: int | None) -> Lane | None:
        return next((lane for lane in self.lanes if lane.slot == slot), None)

    def dispatch(self, verdict: Disposition, slot: int | None) -> None:
        """Wake every round the verdict discarded, and the frame's own slot once its rows are consumable."""
        for index in verdict.discarded:
            if (lane := self.lane_of(index)) is not None:
                lane.wake(verdict.reason or "worker_failed")
        lane = self.lane_of(slot)
        if lane is not None and lane.in_flight and self.receiver.consumable_rows(slot) is not None:
            lane.wake(_READY)

    async def lose_link(self, link: int, reason: str) -> None:
        """The connection ``link`` dropped: a Disconnect event, every round in flight wakes discarded."""
        if link != self.link or self.writer is None:
            return
        verdict = self.receiver.disconnect()
        for lane in self.lanes:
            lane.wake(reason)
        await self.drop_link()
        log.warning("link lost (%s): %s", reason, verdict)

    async def drop_link(self) -> None:
        """Forget the connection at once (no command goes out on it any more), then end its reader and close it."""
        reading, writer = self.reading, self.writer
        self.reading, self.reader, self.writer = None, None, None
        if reading is not None and reading is not asyncio.current_task():
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reading
        if writer is not None:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    def own(self, slot: int, message_type: int, fields: dict) -> tuple[bytes, Disposition]:
        """The target's own command, fed to its receiver (it must accept); the frame to send."""
        if self.writer is None:
            raise ConnectionResetError("no link to the worker")
        data = encode(message_type, {"session_id": self.receiver.negotiated["session_id"], "slot": slot, **fields})
        verdict = self.receiver.feed(data)
        if verdict.kind != ACCEPT:
            raise TargetError(f"own {layout.TYPE_NAMES[message_type]} refused: {verdict.reason}")
        self.frames.append(("out", layout.TYPE_NAMES[message_type], slot))
        return data, verdict

    async def send_own(self, slot: int, message_type: int, fields: dict) -> tuple[int, ...]:
        """Feed the target's own command to its receiver (it must accept), then send it."""
        data, verdict = self.own(slot, message_type, fields)
        await self.transmit(data)
        return verdict.discarded

    async def transmit(self, data: bytes) -> None:
        """Send one own frame; a failure to send is the link lost."""
        link = self.link
        try:
            await stream.send(self.writer, data)
        except (ConnectionError, OSError):
            await self.lose_link(link, "disconnect")
            raise

    async def ensure_ready(self, lane: Lane | None = None) -> None:
        async with self.connecting:
            if self.writer is None:
                await self.connect()
        if lane is not None and not self.receiver.slots[lane.slot].live:
            await self.reset(lane)

    async def reset(self, lane: Lane) -> tuple[int, ...]:
        """A new generation of the lane's slot at its committed position."""
        generation = self.receiver.slots[lane.slot].generation + 1
        told = layout.NO_TOKEN if lane.last_token is None else lane.last_token
        discarded = await self.send_own(
            lane.slot,
            layout.RESET,
            {"seed": lane.seed, "generation": generation, "committed": lane.committed, "token": told},
        )
        lane.told_token = lane.last_token  # the RESET told the worker the committed token (R01, R22)
        log.info("slot %d RESET generation=%d committed=%d", lane.slot, generation, lane.committed)
        return discarded

    # -- rounds ------------------------------------------------------------------------------

    def preempt(self, slot: int | None = None) -> None:
        """Ask the round in flight on ``slot`` (None: on every slot) to be given up by a RESET."""
        for lane in self.lanes:
            if slot is None or lane.slot == slot:
                lane.preempt_requested = True

    async def run(self, rounds: int, stop: Callable[[], bool] | None = None) -> deque[RoundRecord]:
        """``rounds`` rounds on every driven slot, the slots concurrently; the records kept, in the order opened.
        With ``stop``, a slot opens no further round once ``stop()`` is true (its round in flight resolves)."""
        await self.ensure_ready()
        tasks = [asyncio.ensure_future(self.drive(lane, rounds, stop)) for lane in self.lanes]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return self.records

    async def drive(self, lane: Lane, rounds: int, stop: Callable[[], bool] | None = None) -> None:
        for _ in range(rounds):
            if stop is not None and stop():
                return
            await self.play_round(lane)

    async def play_round(self, lane: Lane | None = None) -> RoundRecord | None:
        """One round on ``lane`` (None: the first driven slot); None when the link dropped before its STEP."""
        if lane is None:
            await self.ensure_ready()
            lane = self.lanes[0]
        record = None
        async with self.requests:
            try:
                await self.ensure_ready(lane)
                slot = self.receiver.slots[lane.slot]
                lane.round_id += 1
                record = RoundRecord(
                    lane.slot,
                    slot.generation,
                    lane.round_id,
                    lane.committed,
                    lane.seed,
                    lane.last_token,
                    lane.told_token,
                    seq=self.opened,
                    opened_at=time.monotonic(),
                )
                self.opened += 1
                lane.records.append(record)
                self.records.append(record)
                lane.outcome, lane.in_flight = None, True
                lane.woken.clear()
                await self.send_own(
                    lane.slot,
                    layout.STEP,
                    {
                        "generation": slot.generation,
                        "round": lane.round_id,
                        "anchor": lane.committed,
                        "support_policy": self.support_policy,
                        "context_version": 1,
                        "temperature": self.temperature_bits,
                        "depth": self.receiver.negotiated["depth"],
                        "prefix_digest": bytes(32),
                    },
                )
                await self.resolve(lane, record)
            except (ConnectionError, OSError) as exc:  # the link was lost as it was written to
                log.warning("slot %d: link lost (%s)", lane.slot, exc)
                if record is not None and record.outcome == "open":
                    self.fall_back(lane, record, lane.outcome if lane.outcome not in (None, _READY) else "disconnect")
            finally:
                lane.in_flight = False
        return record

    async def resolve(self, lane: Lane, record: RoundRecord) -> None:
        """Wait until the round is consumable or discarded, its watchdog fires, or it is preempted."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.watchdog_s
        while not lane.woken.is_set():
            if lane.preempt_requested:
                lane.preempt_requested = False
                self.fall_back(lane, record, "reset")
                await self.reset(lane)  # at the new committed position; it discards the open round
                return
            remaining = deadline - loop.time()
            if remaining <= 0:
                self.receiver.timeout(lane.slot)
                return self.fall_back(lane, record, "timeout")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(lane.woken.wait(), min(remaining, POLL_S))
        ready = self.receiver.consumable_rows(lane.slot) if lane.outcome == _READY else None
        if ready is None:
            return self.fall_back(lane, record, lane.outcome if lane.outcome != _READY else "discarded")
        await self.commit(lane, record, *ready, self.receiver.consumable_counts(lane.slot))

    def fall_back(self, lane: Lane, record: RoundRecord, reason: str) -> None:
        """The round is not consumed: one token sampled target-only from the committed prefix, committed (R25)."""
        draw = target_only_draw(lane.seed, record.generation, record.round, record.anchor, self.target.weights[0])
        record.outcome, record.reason, record.draw, record.token = TARGET_ONLY, reason, draw, draw.token
        record.new_committed = (record.anchor + 1) % layout.POSITIONS
        lane.committed, lane.last_token, lane.told_token = record.new_committed, draw.token, None
        self.resolved(record)
        log.warning(
            "slot %d round %d (generation %d) discarded: %s; target-only token %d (u32 %#010x) at position "
            "%d, committed position %d",
            record.slot,
            record.round,
            record.generation,
            reason,
            draw.token,
            draw.u32,
            record.anchor,
            record.new_committed,
        )

    async def commit(
        self, lane: Lane, record: RoundRecord, tokens: list[int], rows: list[QRow], counts: np.ndarray | None = None
    ) -> None:
        """Verify the consumed rows against p and commit the outcome (R11, R17). ``counts``: a dense
        round's int32 counts [K, V] as the receiver validated them into it (taken as they are, no
        copy); None: the rows' dense views, stacked (sparse rows)."""
        # int32 counts (at most M); the verifier widens them on its device (dense_q)
        q = torch.from_numpy(np.stack([row.dense() for row in rows]) if counts is None else counts)[None]
        result = verify_round(
            [lane.seed],
            record.generation,
            record.round,
            record.anchor,
            torch.tensor([tokens]),
            q,
            self.target.weights[None],
        )
        accepted = int(result.accepted[0])
        emitted = [*tokens[:accepted], int(result.final_token[0])]
        accepted, token, new_committed = commit_fields(record.anchor, accepted, emitted)
        data, _ = self.own(
            lane.slot,
            layout.COMMIT,
            {
                "generation": record.generation,
                "round": record.round,
                "new_committed": new_committed,
                "token": token,
                "accepted": accepted,
            },
        )
        record.outcome, record.tokens, record.rows = COMMITTED, tokens, rows
        record.accepted, record.token, record.new_committed = accepted, token, new_committed
        lane.committed, lane.last_token, lane.told_token = new_committed, token, None
        self.resolved(record)
        await self.transmit(data)  # consumed once fed; the worker is told the token once it went out
        lane.told_token = token
        log.info(
            "slot %d round %d committed: drafts %s, accepted %d, token %d, committed position %d",
            lane.slot,
            record.round,
            tokens,
            accepted,
            token,
            new_committed,
        )

    def resolved(self, record: RoundRecord) -> None:
        """The round resolved: ``on_round`` sees it whole; rows older than the row window are released."""
        if self.on_round is not None:
            self.on_round(record)
        if record.rows:
            self.holding_rows.append(record)
            while len(self.holding_rows) > self.row_window:
                self.holding_rows.popleft().rows = None

    def rounds_from(self, first: int | None = None, limit: int | None = None) -> tuple[int, list[RoundRecord]]:
        """(``seq`` of the oldest record kept, the kept records from ``seq`` ``first`` on, at most ``limit``).

        A ``first`` older than the window starts at the oldest kept: the caller sees the gap."""
        oldest = self.opened - len(self.records)
        start = oldest if first is None else min(max(first, oldest), self.opened)
        stop = self.opened if limit is None else min(self.opened, start + limit)
        return oldest, list(itertools.islice(self.records, start - oldest, stop - oldest))

    async def close(self) -> None:
        await self.drop_link()
