"""The endpoint's receiver state machine (R12, R16, R17, R19, R24, R25, R27, R28).

A mutable object rather than the spec's pure function: :meth:`Receiver.feed`
takes the bytes of one frame (the worker's HELLO, REPLY and COMPLETION, and the
target's own STEP, COMMIT, RESET and CANCEL as it sends them),
:meth:`Receiver.timeout` a slot's watchdog, :meth:`Receiver.disconnect` a
dropped link; each returns a :class:`Disposition`. The rules are those of
docs/wire-v2.md ("Receiver state machine"):

* a round's rows are consumable only once its COMPLETION validated (exact byte
  count and CRC-32C of the replies, matching anchor and context); a COMMIT
  before that is CONSUMED_BEFORE_COMPLETION;
* missing, corrupt or timed-out q discards the slot's whole open round and ends
  its generation (never a partial commit); a frame refused before its checksum
  verified cannot be attributed, so it discards every open round;
* replies for an ended generation are LATE_REPLY, a retry must repeat the first
  bytes exactly (else RETRY_MISMATCH; an identical STEP retry is a duplicate);
* a round whose COMPLETION validated is kept (the target may be verifying it):
  only COMMIT, the target's RESET or CANCEL, or the end of its connection drop it;
* the slots belong to the receiver (the endpoint), the links to the connections:
  every event names its connection, a HELLO negotiates for its connection only,
  a generation is live only on the connection whose RESET opened it, a frame
  that cannot be attributed and a disconnect touch only their connection's
  rounds. Slots are never dropped and generations only grow (a slot at
  generation 2^32 - 1 is retired, SLOT_EXHAUSTED), so no key comes back.

Every rejection is counted under its reason code, every event under its name,
and :attr:`Receiver.journal` records what was consumed, committed and discarded
(the newest ``JOURNAL_WINDOW`` events).
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

import numpy as np

from . import layout
from .codec import Decoder, Message, Refusal, Route, encode
from .control import RecentlyEnded
from .crc32c import crc32c_of_blocks
from .validation import QRow, Validator

ACCEPT, REJECT, DUPLICATE, IGNORE, GREEDY_V1 = "accept", "reject", "duplicate", "ignore", "greedy_v1"
WORKER_TYPES = (layout.REPLY, layout.COMPLETION)
#: a slot at this generation has no higher one: it is retired, never reused (R24)
LAST_GENERATION = (1 << 32) - 1
#: how many events :attr:`Receiver.journal` keeps, the newest
JOURNAL_WINDOW = 4096


@dataclass
class OpenRound:
    """A round opened by STEP: its REPLY frames and validated rows, and the COMPLETION once valid."""

    step: Message
    replies: list[layout.FrameBytes] = field(default_factory=list)
    #: (length, raw CRC register) of each REPLY frame, so the COMPLETION's checksum reads no byte again
    blocks: list[tuple[int, int]] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    rows: list[QRow] = field(default_factory=list)
    completion: layout.FrameBytes | None = None
    step_frame: layout.FrameBytes = b""
    #: a dense round's int32 counts [K, V], made at its first REPLY: row k is the k-th accepted
    #: row's counts, written there by the validator (:meth:`Receiver.row_slot`); rows from
    #: ``len(rows)`` on hold nothing meaningful. Never reused: rows consumed stay valid after the
    #: round closes. None: a sparse round (or a dense stride below V)
    counts: np.ndarray | None = None


@dataclass
class Slot:
    """One probability slot; generation 0 is never live."""

    generation: int = 0
    live: bool = False
    committed: int = 0
    last_round: int | None = None
    seed: int = 0
    open: OpenRound | None = None
    #: the connection whose RESET opened the live generation
    owner: int = 0


@dataclass(frozen=True)
class Disposition:
    """What became of one event, the slots whose proposal it discarded, and the payload bytes it allocated."""

    kind: str
    reason: str | None = None
    discarded: tuple[int, ...] = ()
    allocated: int = 0
    #: the HELLO_ANSWER frame owed to the sender of a HELLO whose checksum verified (R12, R13)
    answer: bytes | None = None


def negotiate(offer: dict, config: dict) -> dict:
    """The peer's HELLO offer against the receiver's own configuration (R13, R27)."""
    for name, code in layout.IDENTITIES:
        if offer[name] != config[name]:
            raise Refusal(code, f"{name} differs from the receiver's")
    for name, code in layout.BOUNDS:
        if not 1 <= offer[name] <= config[name]:
            raise Refusal(code, f"{name} = {offer[name]}, admitted 1..{config[name]}")
    return offer


class Receiver:
    """The target side's view of one worker link; see the module docstring."""

    decoder_class = Decoder
    validator_class = Validator

    def __init__(self, config: dict) -> None:
        self.config = config
        #: connection -> the HELLO negotiated on it
        self.links: dict[int, dict] = {}
        self.slots: list[Slot] = []
        self.counters: Counter = Counter()
        #: the newest JOURNAL_WINDOW events (a soak of any length holds memory flat, issue #25)
        self.journal: deque[dict] = deque(maxlen=JOURNAL_WINDOW)
        self.decoder = self.decoder_class()
        self.validator = self.validator_class()
        self.last_verdict: Disposition | None = None
        self.last_disconnect: Disposition | None = None
        #: connection -> the verdict of its disconnect, for the newest ENDED_KEPT connections
        self.disconnects: RecentlyEnded[Disposition] = RecentlyEnded()
        #: the connection of the event being handled
        self.connection = 0

    @property
    def negotiated(self) -> dict | None:
        """The HELLO negotiated on connection 0 (a one-connection receiver's link)."""
        return self.links.get(0)

    @negotiated.setter
    def negotiated(self, hello: dict | None) -> None:
        if hello is None:
            self.links.pop(0, None)
        else:
            self.links[0] = hello

    def link(self, connection: int) -> dict | None:
        """The HELLO negotiated on ``connection`` (None before its HELLO)."""
        return self.links.get(connection)

    def live_on(self, slot: Slot) -> bool:
        """Whether the slot's generation is live for the connection being handled."""
        return slot.live and slot.owner == self.connection

    # -- stateless ----------------------------------------------------------------------

    def check(
        self, data: layout.FrameBytes, connection: int = 0, reads_answers: bool = True
    ) -> tuple[Message, QRow | None]:
        """Decoding, then negotiation (a HELLO before HELLO) or the stateless validation.

        A HELLO_ANSWER's status is its reader's (a worker's) check: the receiver itself
        (``reads_answers`` False) stops at its verified checksum and refuses it when routing it."""
        negotiated = self.links.get(connection)
        message = self.decoder.decode(data, negotiated)
        if message.type == 0 or (message.type == layout.HELLO_ANSWER and not reads_answers):
            return message, None
        if message.type == layout.HELLO:
            if negotiated is None:
                negotiate(message.fields, self.config)
            return message, None
        assert negotiated is not None  # the decoder refuses any message but HELLO before HELLO (V2_BEFORE_HELLO)
        out = self.row_slot(message, negotiated) if message.type == layout.REPLY else None
        return message, self.validator.validate(message, negotiated, out)

    def row_slot(self, message: Message, params: dict) -> np.ndarray | None:
        """Where a dense REPLY's counts are written as it is validated: the first row not yet
        accepted of the open dense round it names on this connection (:attr:`OpenRound.counts`,
        made here at the round's first REPLY); None (the validator makes a new array) for any other
        REPLY: sparse, for no open round, a round whose K rows all arrived or that is consumable.

        The slot is written before the row is known good, and only rows below ``len(rows)`` are
        ever read: a refused REPLY (a retry of an earlier position included) leaves the accepted
        rows as they were, and whatever it wrote into the free row is overwritten by the next
        REPLY or never read (:meth:`on_reply` counts the row only once it accepts it)."""
        fields = message.fields
        index = fields["slot"]
        if index >= len(self.slots) or fields["representation"] != layout.REPR_DENSE:
            return None
        slot = self.slots[index]
        current = slot.open
        if current is None:
            return None
        step = current.step.fields
        if (
            current.completion is not None
            or step["support_policy"] != 0
            or not self.live_on(slot)
            or fields["generation"] != slot.generation
            or fields["round"] != step["round"]
            or params["dense_stride"] < params["vocab"]
        ):
            return None
        filled, depth = len(current.rows), step["depth"]
        if filled >= depth:
            return None
        if current.counts is None:
            current.counts = np.empty((depth, params["vocab"]), dtype=np.int32)
        return current.counts[filled]

    # -- events -------------------------------------------------------------------------

    def feed(self, data: layout.FrameBytes, connection: int = 0) -> Disposition:
        """One frame of ``connection`` through the state machine."""
        self.connection = connection
        try:
            message, row = self.check(data, connection, reads_answers=False)
        except Refusal as refusal:
            verdict = self.refuse_frame(refusal)
            answer = self.answer_of(data, verdict)
        else:
            verdict = self.route(message, row, data)
            answer = self.answer_of(data, verdict) if message.type == layout.HELLO else None
        allocated = self.decoder.allocated
        verdict = Disposition(verdict.kind, verdict.reason, verdict.discarded, allocated, answer)
        self.decoder.allocated = allocated
        self.last_verdict = verdict
        return verdict

    def answer_of(self, data: layout.FrameBytes, verdict: Disposition) -> bytes | None:
        """The HELLO_ANSWER of a frame that decodes as a HELLO (framing and checksum verified), else None."""
        if data[:4] != layout.V2_MAGIC or len(data) < layout.HEADER_SIZE or data[6:8] != b"\x01\x00":
            return None
        try:
            hello = self.decoder_class().decode(data, None)
        except Refusal:
            return None
        if verdict.kind == ACCEPT:
            status, reason = layout.HELLO_ACCEPTED, b""
        else:
            status, reason = layout.HELLO_REFUSED, (verdict.reason or "").encode("ascii")
        return encode(
            layout.HELLO_ANSWER,
            {"session_id": hello["session_id"], "status": status, "reason": reason.ljust(32, b"\0")},
        )

    #: the handler of each message type, by name (a subclass's override is the one called)
    HANDLERS = {
        layout.HELLO: "on_hello",
        layout.STEP: "on_step",
        layout.REPLY: "on_reply",
        layout.COMPLETION: "on_completion",
        layout.COMMIT: "on_commit",
        layout.RESET: "on_reset",
        layout.CANCEL: "on_cancel",
        layout.HELLO_ANSWER: "on_hello_answer",
    }

    def route(self, message: Message, row: QRow | None, data: layout.FrameBytes) -> Disposition:
        if message.type == 0:
            self.counters["v1_greedy_frames"] += 1
            return Disposition(GREEDY_V1)
        return getattr(self, self.HANDLERS[message.type])(message, row, data)

    def timeout(self, index: int) -> Disposition:
        """A slot's watchdog: discards its open round and ends its generation; idle or consumable, ignored."""
        current = self.slots[index].open if index < len(self.slots) else None
        if current is None or current.completion is not None:
            self.counters["ignored_timers"] += 1
            return Disposition(IGNORE)
        self.counters["timeouts"] += 1
        return Disposition(ACCEPT, None, self.discard((index,), "timeout"))

    def disconnect(self, connection: int = 0) -> Disposition:
        """A connection dropped: its open rounds discarded, its generations ended, its HELLO forgotten."""
        self.counters["disconnects"] += 1
        self.connection = connection
        discarded = self.discard(self.open_slots(), "disconnect", force=True)
        for slot in self.slots:
            if slot.owner == connection:
                slot.live = False
        self.links.pop(connection, None)
        self.last_disconnect = Disposition(ACCEPT, None, discarded)
        self.disconnects[connection] = self.last_disconnect
        return self.last_disconnect

    # -- bookkeeping ----------------------------------------------------------------------

    def open_slots(self) -> tuple[int, ...]:
        """The slots with an open round of the connection being handled."""
        return tuple(i for i, slot in enumerate(self.slots) if slot.open is not None and slot.owner == self.connection)

    def discard(self, indices: tuple[int, ...], reason: str, force: bool = False) -> tuple[int, ...]:
        """Drop each open round of ``indices`` whole and end its generation (R25); a consumable
        round only when ``force`` (the target's RESET or CANCEL, its link's end: R28)."""
        done = []
        for index in indices:
            slot = self.slots[index]
            if slot.open is None or (slot.open.completion is not None and not force):
                continue
            step = slot.open.step
            self.journal.append(
                {
                    "event": "discarded",
                    "slot": index,
                    "generation": slot.generation,
                    "round": step["round"],
                    "anchor": step["anchor"],
                    "rows": len(slot.open.replies),
                    "reason": reason,
                }
            )
            slot.open, slot.live = None, False
            self.counters["discarded_proposals"] += 1
            done.append(index)
        return tuple(done)

    def refuse(self, code: str, discard: tuple[int, ...] = ()) -> Disposition:
        discarded = self.discard(discard, code)
        self.counters[code] += 1
        return Disposition(REJECT, code, discarded)

    def accept(self, discarded: tuple[int, ...] = ()) -> Disposition:
        self.counters["accepted"] += 1
        return Disposition(ACCEPT, None, discarded)

    def addresses_open_round(self, route: Route) -> bool:
        params = self.links.get(self.connection)
        if route.type not in WORKER_TYPES or params is None or route.session_id != params["session_id"]:
            return False
        if route.slot >= len(self.slots):
            return False
        slot = self.slots[route.slot]
        return (
            self.live_on(slot)
            and slot.open is not None
            and route.generation == slot.generation
            and route.round == slot.open.step["round"]
        )

    def refuse_frame(self, refusal: Refusal) -> Disposition:
        """A frame refused statelessly: discard what it can be attributed to (a v1 frame: nothing)."""
        if refusal.v1:
            return self.refuse(refusal.code)
        if refusal.route is None:
            return self.refuse(refusal.code, self.open_slots())
        if self.addresses_open_round(refusal.route):
            return self.refuse(refusal.code, (refusal.route.slot,))
        return self.refuse(refusal.code)

    def worker_problem(self, slot: Slot, generation: int, round_id: int) -> str | None:
        """Why a REPLY or COMPLETION is not for the slot's open round, or None."""
        if generation < slot.generation or (generation == slot.generation and not self.live_on(slot)):
            return "LATE_REPLY"
        if generation > slot.generation:
            return "STALE_GENERATION"
        return self.round_problem(slot, round_id)

    @staticmethod
    def round_problem(slot: Slot, round_id: int) -> str | None:
        if slot.open is None or round_id != slot.open.step["round"]:
            if slot.last_round is not None and round_id <= slot.last_round:
                return "STALE_ROUND"
            return "UNEXPECTED_MESSAGE"
        return None

    def command_problem(self, slot: Slot, generation: int) -> str | None:
        """A STEP, COMMIT or CANCEL names the slot's live generation."""
        return "STALE_GENERATION" if not self.live_on(slot) or generation != slot.generation else None

    @staticmethod
    def is_consumable(current: OpenRound) -> bool:
        return current.completion is not None

    def retried(self, first: layout.FrameBytes, again: layout.FrameBytes, index: int) -> Disposition:
        if first == again:
            self.counters["duplicate_retries"] += 1
            return Disposition(DUPLICATE)
        return self.refuse("RETRY_MISMATCH", (index,))

    # -- handlers ---------------------------------------------------------------------------

    def on_hello(self, message: Message, row, data: layout.FrameBytes) -> Disposition:
        if self.connection in self.links:
            return self.refuse("UNEXPECTED_MESSAGE")
        self.links[self.connection] = message.fields
        self.slots += [Slot() for _ in range(len(self.slots), message["max_slots"])]
        return self.accept()

    def on_hello_answer(self, message: Message, row, data: layout.FrameBytes) -> Disposition:
        """A receiver sends HELLO answers and never receives one."""
        return self.refuse("UNEXPECTED_MESSAGE")

    def on_step(self, message: Message, row, data: layout.FrameBytes) -> Disposition:
        slot = self.slots[message["slot"]]
        problem = self.command_problem(slot, message["generation"])
        if problem:
            return self.refuse(problem)
        round_id = message["round"]
        if slot.open is not None:
            if data == slot.open.step_frame:
                self.counters["duplicate_retries"] += 1
                return Disposition(DUPLICATE)
            return self.refuse("UNEXPECTED_MESSAGE")
        if slot.last_round is not None and round_id == slot.last_round:
            return self.refuse("DUPLICATE_ROUND")
        if slot.last_round is not None and round_id < slot.last_round:
            return self.refuse("STALE_ROUND")
        if message["anchor"] != slot.committed:
            return self.refuse("POSITION_MISMATCH")
        if len(self.open_slots()) >= self.links[self.connection]["max_requests"]:
            return self.refuse("TOO_MANY_REQUESTS")
        slot.open, slot.last_round = OpenRound(message, step_frame=data), round_id
        return self.accept()

    def on_reply(self, message: Message, row: QRow, data: layout.FrameBytes) -> Disposition:
        fields = message.fields
        index = fields["slot"]
        slot = self.slots[index]
        problem = self.worker_problem(slot, fields["generation"], fields["round"])
        if problem:
            return self.refuse(problem)
        current = slot.open
        step = current.step.fields
        position = (fields["position"] - step["anchor"]) % layout.POSITIONS
        if position < len(current.replies):
            return self.retried(current.replies[position], data, index)
        if current.completion is not None or position != len(current.replies) or position >= step["depth"]:
            return self.refuse("POSITION_MISMATCH", (index,))
        policy = step["support_policy"]
        if (policy == 0) != (fields["representation"] == layout.REPR_DENSE):
            return self.refuse("REPRESENTATION_MISMATCH", (index,))
        if policy and fields["entry_count"] > policy:
            return self.refuse("SUPPORT_ABOVE_MAX", (index,))
        # a view of the round's counts is the row row_slot lent for this frame: the first not yet
        # accepted, i.e. ``position``; any other array (a subclass naming the round differently) is
        # copied into that row once
        if current.counts is not None and row.ids is None and row.counts.base is not current.counts:
            current.counts[position] = row.counts
            row = QRow(row.vocab, current.counts[position])
        current.replies.append(data)
        current.blocks.append((len(data), message.frame_raw))
        current.tokens.append(fields["token"])
        current.rows.append(row)
        return self.accept()

    def on_completion(self, message: Message, row, data: layout.FrameBytes) -> Disposition:
        index = message["slot"]
        slot = self.slots[index]
        problem = self.worker_problem(slot, message["generation"], message["round"])
        if problem:
            return self.refuse(problem)
        current, here = slot.open, (index,)
        if current.completion is not None:
            return self.retried(current.completion, data, index)
        step = current.step
        if message["anchor"] != step["anchor"]:
            return self.refuse("POSITION_MISMATCH", here)
        if (message["context_version"], message["prefix_digest"]) != (step["context_version"], step["prefix_digest"]):
            return self.refuse("CONTEXT_MISMATCH", here)
        failed = message["status"] == layout.STATUS_FAILED
        if not failed and len(current.replies) < message["row_count"]:
            return self.refuse("MISSING_Q", here)
        if message["reply_bytes"] != sum(length for length, _ in current.blocks):
            return self.refuse("REPLY_SIZE_MISMATCH", here)
        if message["reply_checksum"] != crc32c_of_blocks(current.blocks):
            return self.refuse("COMPLETION_CHECKSUM_MISMATCH", here)
        if failed:  # the worker gave up after the rows it sent: every rule but "every row received"
            self.counters["worker_failed"] += 1
            return self.accept(self.discard(here, "worker_failed"))
        current.completion = data
        return self.accept()

    def on_commit(self, message: Message, row, data: layout.FrameBytes) -> Disposition:
        index = message["slot"]
        slot = self.slots[index]
        problem = self.command_problem(slot, message["generation"])
        if problem:
            return self.refuse(problem)
        current = slot.open
        if current is None or message["round"] != current.step["round"]:
            stale = slot.last_round is not None and message["round"] <= slot.last_round
            return self.refuse("STALE_ROUND" if stale else "UNEXPECTED_MESSAGE")
        if not self.is_consumable(current):
            return self.refuse("CONSUMED_BEFORE_COMPLETION")
        # past every emitted token: the correction or bonus, or none (-1) after an early end at >= 1 accepted
        emitted = message["accepted"] + (0 if message["token"] == layout.NO_TOKEN else 1)
        if emitted == 0 or message["new_committed"] != (current.step["anchor"] + emitted) % layout.POSITIONS:
            return self.refuse("POSITION_MISMATCH")
        self.journal.append(
            {
                "event": "consumed",
                "slot": index,
                "generation": slot.generation,
                "round": message["round"],
                "anchor": current.step["anchor"],
                "rows": len(current.rows),
                "tokens": list(current.tokens),
                "accepted": message["accepted"],
                "token": message["token"],
                "new_committed": message["new_committed"],
                "completed": current.completion is not None,
            }
        )
        slot.committed, slot.open = message["new_committed"], None
        return self.accept()

    def on_reset(self, message: Message, row, data: layout.FrameBytes) -> Disposition:
        index = message["slot"]
        slot = self.slots[index]
        if slot.generation == LAST_GENERATION:
            return self.refuse("SLOT_EXHAUSTED")
        if message["generation"] < slot.generation:
            return self.refuse("STALE_GENERATION")
        if message["generation"] == slot.generation:
            return self.refuse("DUPLICATE_GENERATION")
        discarded = self.discard((index,), "reset", force=True)
        self.slots[index] = Slot(
            message["generation"], True, message["committed"], None, message["seed"], owner=self.connection
        )
        return self.accept(discarded)

    def on_cancel(self, message: Message, row, data: layout.FrameBytes) -> Disposition:
        index = message["slot"]
        problem = self.command_problem(self.slots[index], message["generation"])
        if problem:
            return self.refuse(problem)
        discarded = self.discard((index,), "cancel", force=True)
        self.slots[index].live = False
        return self.accept(discarded)

    # -- consumption ------------------------------------------------------------------------

    def consumable_rows(self, index: int) -> tuple[list[int], list[QRow]] | None:
        """The tokens and validated q rows of a slot's open round once consumable; None before (R16)."""
        if index >= len(self.slots) or self.slots[index].open is None:
            return None
        current = self.slots[index].open
        if not self.is_consumable(current):
            return None
        return list(current.tokens), list(current.rows)

    def consumable_counts(self, index: int) -> np.ndarray | None:
        """The int32 counts [K, V] of a slot's open dense round once consumable: row k is the k-th
        row of :meth:`consumable_rows`, the array the validator wrote them into (no copy; the
        verifier takes it as it is). None before it is consumable, and for a sparse round (the
        verifier stacks its rows' dense views)."""
        if self.consumable_rows(index) is None:
            return None
        current = self.slots[index].open
        assert current is not None
        if current.counts is None or len(current.rows) != len(current.counts):
            return None
        return current.counts
