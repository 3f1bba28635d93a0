"""The verifier endpoint in its driving role: the target side of rounds against a worker (R16, R17, R24, R25, R28).

:class:`Target` connects to a worker (directly, or through a fault-injecting
proxy), negotiates the worker's HELLO, and plays rounds on one slot: RESET when
no generation is live, STEP, then every frame through its receiver until the
round resolves:

* the COMPLETION validated: the K rows are consumed, verified against the
  target p with the torch candidate's standard verification (ACCEPT and
  CORRECTION draws, R11, R23), and committed (accepted count, correction or
  bonus token, new committed position);
* the receiver discarded the proposal (missing, corrupt, reordered, retried
  differently, worker FAILED), the watchdog fired, the link dropped, or the
  round was preempted by a RESET: nothing of it is consumed, the committed
  position stays, the outcome is target-only from the committed prefix (R25),
  and the next round RESETs to a new generation first.

Every round leaves a :class:`RoundRecord`; the receiver's journal and counters
say what was consumed and why anything was discarded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

import numpy as np
import torch

from qconform.adapters.torch_candidate.verification import verify_round

from . import layout, stream
from .answers import row_json
from .codec import encode
from .model import TargetModel
from .receiver import ACCEPT, Receiver
from .validation import QRow

log = logging.getLogger("qconform.endpoint.target")

#: how often a waiting round looks at a preemption request (seconds)
POLL_S = 0.02
ONE_F32 = 0x3F800000
_WAITING = object()


class TargetError(RuntimeError):
    """The target could not go on (its own command refused, no worker to connect to)."""


@dataclass
class RoundRecord:
    """One round as the target saw it; ``previous`` is the committed token before it (None: none yet)."""

    slot: int
    generation: int
    round: int
    anchor: int
    seed: int
    previous: int | None
    outcome: str = "open"
    reason: str | None = None
    tokens: list[int] = field(default_factory=list)
    rows: list[QRow] = field(default_factory=list)
    accepted: int | None = None
    token: int | None = None
    new_committed: int | None = None

    def to_json(self) -> dict:
        out = {k: getattr(self, k) for k in ("slot", "generation", "round", "anchor", "previous", "outcome",
                                              "reason", "tokens", "accepted", "token", "new_committed")}
        return {**out, "seed": str(self.seed), "rows": [row_json(row) for row in self.rows]}


class Target:
    """Drives rounds of one slot against a worker (see the module docstring)."""

    def __init__(self, config: dict, target: TargetModel, host: str, port: int, *, seed: int = 0x5EED,
                 support_policy: int = 0, temperature_bits: int = ONE_F32, watchdog_s: float = 1.0, slot: int = 0,
                 receiver_cls: type[Receiver] = Receiver, connect_timeout_s: float = 5.0) -> None:
        self.receiver = receiver_cls(config)
        self.target = target
        self.host, self.port = host, port
        self.seed, self.support_policy, self.temperature_bits = seed, support_policy, temperature_bits
        self.watchdog_s, self.slot, self.connect_timeout_s = watchdog_s, slot, connect_timeout_s
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.pending: asyncio.Task | None = None
        self.round_id = 0
        self.last_token: int | None = None
        self.preempt_requested = False
        self.records: list[RoundRecord] = []

    # -- the link ------------------------------------------------------------------------------

    async def connect(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.connect_timeout_s
        while True:
            try:
                self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
                break
            except OSError as exc:
                if loop.time() > deadline:
                    raise TargetError(f"no worker at {self.host}:{self.port}: {exc}") from None
                await asyncio.sleep(0.02)
        item = await self.next_item(self.connect_timeout_s)
        verdict = self.receiver.feed(item.data) if isinstance(item, stream.Item) else None
        if verdict is None or verdict.kind != ACCEPT or self.receiver.negotiated is None:
            await self.drop_link()
            raise TargetError(f"the worker's HELLO was not accepted: {verdict}")
        log.info("connected to %s:%d, negotiated session %#x", self.host, self.port,
                 self.receiver.negotiated["session_id"])

    async def next_item(self, timeout: float):
        """The next item read (None at EOF), or ``_WAITING`` when ``timeout`` passed first.

        A read in progress survives a timeout, so a frame is never cut in two.
        """
        if self.pending is None:
            self.pending = asyncio.ensure_future(stream.read_item(
                self.reader, self.receiver.decoder, self.receiver.negotiated, control_allowed=False))
        done, _ = await asyncio.wait({self.pending}, timeout=timeout)
        if not done:
            return _WAITING
        task, self.pending = self.pending, None
        try:
            return task.result()
        except (ConnectionError, OSError):
            return None

    async def drop_link(self) -> None:
        if self.pending is not None:
            self.pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.pending
            self.pending = None
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await self.writer.wait_closed()
        self.reader = self.writer = None

    async def send_own(self, message_type: int, fields: dict) -> tuple[int, ...]:
        """Feed the target's own command to its receiver (it must accept), then send it."""
        data = encode(message_type, {"session_id": self.receiver.negotiated["session_id"], "slot": self.slot, **fields})
        verdict = self.receiver.feed(data)
        if verdict.kind != ACCEPT:
            raise TargetError(f"own {layout.TYPE_NAMES[message_type]} refused: {verdict.reason}")
        await stream.send(self.writer, data)
        return verdict.discarded

    async def ensure_ready(self) -> None:
        if self.writer is None:
            await self.connect()
        slot = self.receiver.slots[self.slot]
        if not slot.live:
            await self.reset()

    async def reset(self) -> tuple[int, ...]:
        slot = self.receiver.slots[self.slot]
        generation = slot.generation + 1
        discarded = await self.send_own(layout.RESET, {"seed": self.seed, "generation": generation,
                                                       "committed": slot.committed})
        log.info("slot %d RESET generation=%d committed=%d", self.slot, generation, slot.committed)
        return discarded

    # -- rounds ------------------------------------------------------------------------------

    def preempt(self) -> None:
        """Ask the round in flight to be given up by a RESET (the scheduler preempted the request)."""
        self.preempt_requested = True

    async def run(self, rounds: int) -> list[RoundRecord]:
        for _ in range(rounds):
            await self.play_round()
        return self.records

    async def play_round(self) -> RoundRecord:
        try:
            await self.ensure_ready()
            slot = self.receiver.slots[self.slot]
            self.round_id += 1
            record = RoundRecord(self.slot, slot.generation, self.round_id, slot.committed, self.seed, self.last_token)
            self.records.append(record)
            await self.send_own(layout.STEP, {
                "generation": slot.generation, "round": self.round_id, "anchor": slot.committed,
                "support_policy": self.support_policy, "context_version": 1, "temperature": self.temperature_bits,
                "depth": self.receiver.negotiated["depth"], "prefix_digest": bytes(32)})
            await self.resolve(record)
        except (ConnectionError, OSError) as exc:
            record = self.records[-1] if self.records else None
            verdict = self.receiver.disconnect()
            await self.drop_link()
            if record is not None and record.outcome == "open":
                self.discarded(record, "disconnect")
            log.warning("link lost (%s): %s", exc, verdict)
        return self.records[-1]

    def discarded(self, record: RoundRecord, reason: str) -> None:
        record.outcome, record.reason = "discarded", reason
        log.warning("slot %d round %d (generation %d) discarded: %s; target-only from committed position %d",
                    record.slot, record.round, record.generation, reason, record.anchor)

    async def resolve(self, record: RoundRecord) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.watchdog_s
        while True:
            if self.preempt_requested:
                self.preempt_requested = False
                await self.reset()
                return self.discarded(record, "reset")
            remaining = deadline - loop.time()
            if remaining <= 0:
                self.receiver.timeout(self.slot)
                return self.discarded(record, "timeout")
            item = await self.next_item(min(remaining, POLL_S))
            if item is _WAITING:
                continue
            if item is None or item.kind == stream.BROKEN:
                reason = "disconnect" if item is None else self.receiver.feed(item.data).reason
                await self.drop_link()
                self.receiver.disconnect()
                return self.discarded(record, reason)
            verdict = self.receiver.feed(item.data)
            log.debug("frame of %d bytes: %s %s", len(item.data), verdict.kind, verdict.reason or "")
            if self.slot in verdict.discarded:
                return self.discarded(record, verdict.reason or "worker_failed")
            ready = self.receiver.consumable_rows(self.slot)
            if ready is not None:
                return await self.commit(record, *ready)

    async def commit(self, record: RoundRecord, tokens: list[int], rows: list[QRow]) -> None:
        """Verify the consumed rows against p and commit the outcome (R11, R17)."""
        q = torch.from_numpy(np.stack([row.dense() for row in rows]))[None]
        result = verify_round([self.seed], record.generation, record.round, record.anchor,
                              torch.tensor([tokens]), q, self.target.weights[None])
        accepted, token = int(result.accepted[0]), int(result.final_token[0])
        new_committed = (record.anchor + accepted + 1) % layout.POSITIONS
        await self.send_own(layout.COMMIT, {"generation": record.generation, "round": record.round,
                                            "new_committed": new_committed, "token": token, "accepted": accepted})
        record.outcome, record.tokens, record.rows = "committed", tokens, rows
        record.accepted, record.token, record.new_committed = accepted, token, new_committed
        self.last_token = token
        log.info("slot %d round %d committed: drafts %s, accepted %d, token %d, committed position %d",
                 self.slot, record.round, tokens, accepted, token, new_committed)

    async def close(self) -> None:
        await self.drop_link()
