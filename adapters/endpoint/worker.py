"""The worker endpoint: the drafter leader, serving proposals over wire v2 (R01, R12, R15-R17, R22, R24, R25, R28).

:class:`Worker` is its state machine (mutable, like the receiver's), in the
rules of docs/wire-v2.md ("Worker state machine"); :class:`WorkerEndpoint` puts
it on TCP. Every event names its connection and returns an :class:`Outcome`:
the verdict, the frames the worker sends in answer (in order), whether it ends
the connection, and the draws it made.

* ``Connect``: the worker sends its HELLO (its configuration under that
  connection's session ID) and nothing else until that HELLO is accepted.
* The first frame it reads on a connection must be the HELLO_ANSWER accepting
  that HELLO (framing and checksum verified, its session ID, status 0). Anything
  else ends the connection with nothing served and no slot touched: a frame
  refused while decoding, an answer for another session (SESSION_MISMATCH), of
  unknown status (UNKNOWN_STATUS), a refusal (status 1: accepted as an answer,
  counted ``hello_refused``), a command before the answer (V2_BEFORE_HELLO).
  The negotiation watchdog (``answer_timeout``) closes a connection still
  awaiting its answer (R12).
* Slots belong to the worker process: generations only grow per slot, across
  connections (R24). A generation is live only on the connection whose RESET
  opened it; a disconnect ends that connection's generations. A RESET is
  refused at the last generation (SLOT_EXHAUSTED), on a slot live on another
  open connection (SLOT_HELD, R28), at or below the slot's generation
  (DUPLICATE_GENERATION, STALE_GENERATION). A RESET's token -1 (an empty prefix)
  conditions the next round on the draft model's start token.
* STEP samples the round's fixed-depth chain with the torch candidate under the
  RNG ABI (the worker leader owns the PROPOSAL draws, R22), its first row
  conditioned on the committed token, and sends one REPLY per position, dense or
  sparse as the STEP's support policy asks, then the COMPLETION. The round stays
  open until its COMMIT; an identical STEP meanwhile gets the identical frames
  again (R24), never a redraw. A STEP refused statelessly for its session or
  slot gets nothing; refused otherwise, one COMPLETION with status FAILED
  (reply_bytes 0, reply_checksum 0, row_count = the negotiated depth).
* COMMIT moves the committed position and the committed token; CANCEL ends the
  generation; neither is ever answered.

After negotiation a frame that addresses no round (a HELLO_ANSWER, a HELLO, the
worker's own message types, v1) is UNEXPECTED_MESSAGE and a refused frame is
refused, none answered; the endpoint closes a connection whose frame header it
refused, since the stream is then out of step (that close is a Disconnect).

With control allowed the endpoint also answers the test-control envelopes of
``control.py`` (``about``, ``configure``, ``connection``, ``sync``,
``answer_timeout``, ``closed``, ``disconnect_status``, ``state``, ``model``,
``trace``; docs/endpoint.md, "The control protocol").
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from qconform.adapters.torch_candidate.errors import CandidateError
from qconform.adapters.torch_candidate.proposal import Proposal, propose

from . import control, layout, stream
from .answers import hello_fields
from .codec import Decoder, Message, Refusal, encode
from .deployment import ANSWER_TIMEOUT_S
from .model import DraftModel
from .replies import completion_frame, row_reply
from .server import Endpoint
from .validation import Validator

log = logging.getLogger("qconform.endpoint.worker")

#: the torch candidate's declared numerics (its precision profile)
PRECISION = {
    "fp64_allocation": True,
    "exp_ulp": "1/1048576",
    "notes": "torch candidate: FP64 allocation, FP64 exp rounded once to FP32",
}

ACCEPT, REJECT, DUPLICATE, IGNORE = "accept", "reject", "duplicate", "ignore"
#: seconds ``closed`` and ``disconnect_status`` wait for a connection to end
STATUS_WAIT_S = 5.0
#: the phases of an open connection (an ended one is forgotten)
AWAITING_ANSWER, NEGOTIATED = "awaiting_answer", "negotiated"
#: a slot at this generation has no higher one: it is retired, never reused (R24)
LAST_GENERATION = (1 << 32) - 1
#: STEP refusals that cannot be answered under the STEP's session and slot: nothing is sent
UNANSWERABLE = ("SESSION_MISMATCH", "TOO_MANY_SLOTS")


@dataclass(frozen=True)
class Outcome:
    """What one event did: its verdict (and reason), the frames sent in answer, whether the
    connection ends, and the PROPOSAL draws made (one per REPLY row)."""

    verdict: str
    reason: str | None = None
    frames: tuple[bytes, ...] = ()
    close: bool = False
    draws: tuple[dict, ...] = ()


@dataclass
class Link:
    """One connection: its phase and the worker's HELLO on it (its session ID included)."""

    params: dict
    phase: str = AWAITING_ANSWER
    #: the outcome of the last event of this connection (``sync`` answers its verdict)
    last: Outcome | None = None


@dataclass
class OpenRound:
    """A served round awaiting its COMMIT: its STEP's bytes, the frames sent, the drafts, the draws."""

    step_frame: bytes
    round: int
    anchor: int
    frames: tuple[bytes, ...]
    tokens: list[int]
    draws: tuple[dict, ...]


@dataclass
class WorkerSlot:
    """One slot of the worker process; generation 0 is never live."""

    generation: int = 0
    live: bool = False
    #: the connection whose RESET opened the live generation
    owner: int | None = None
    seed: int = 0
    committed: int = 0
    #: x_0 of the next round: what its first row conditions on
    committed_token: int = 0
    last_round: int | None = None
    open: OpenRound | None = None
    #: the draws of the last round served (``trace``)
    draws: tuple[dict, ...] = ()


def f32_value(bits: int) -> float:
    return float(np.array([bits], dtype=np.uint32).view(np.float32)[0])


def word32(word: int) -> str:
    return f"0x{word & 0xFFFFFFFF:08x}"


def draws_json(seed: int, result: Proposal) -> tuple[dict, ...]:
    """Each PROPOSAL draw of a chain: its position, Philox key words (seed low, high), counter words and u24."""
    key = [word32(seed), word32(seed >> 32)]
    counters, u24 = result.counters[0].tolist(), result.u24[0].tolist()
    return tuple(
        {"position": c[0] & 0xFFFFFFFF, "key": key, "counter": [word32(w) for w in c], "u24": u}
        for c, u in zip(counters, u24)
    )


class Worker:
    """The worker's state machine (see the module docstring); mutants override one method each (worker_mutants.py)."""

    def __init__(self, hello: dict, model: DraftModel, device: str = "cpu") -> None:
        self.hello = hello
        self.model = model
        self.device = device
        self.slots = [WorkerSlot(committed_token=model.last_token) for _ in range(hello["max_slots"])]
        self.links: dict[int, Link] = {}
        self.counters: Counter = Counter()
        self.decoder = Decoder()
        self.validator = Validator()
        #: the connection of the event being handled
        self.connection = 0

    # -- events -------------------------------------------------------------------------------

    def connect(self, connection: int, session_id: int) -> Outcome:
        """A target connected; the worker offers its HELLO under ``session_id``."""
        params = {**self.hello, "session_id": session_id}
        self.counters["connections"] += 1
        link = self.links[connection] = Link(params)
        link.last = Outcome(ACCEPT, frames=(encode(layout.HELLO, params),))
        return link.last

    def feed(self, connection: int, data: layout.FrameBytes) -> Outcome:
        """One frame of ``connection`` through the state machine."""
        self.connection = connection
        link = self.links.get(connection)
        if link is None:  # never connected, or ended
            return Outcome(IGNORE)
        try:
            message = self.decode(link, data)
        except Refusal as refusal:
            outcome = self.refuse(refusal.code, close=link.phase == AWAITING_ANSWER)
        else:
            handle = self.on_answer if link.phase == AWAITING_ANSWER else self.route
            outcome = handle(link, message, data)
        link.last = outcome
        if outcome.close:  # the connection ends: forgotten (its close is no Disconnect of a live link)
            del self.links[connection]
        return outcome

    def answer_timeout(self, connection: int) -> Outcome:
        """The negotiation watchdog of ``connection`` fired: a connection still awaiting its answer ends."""
        link = self.links.get(connection)
        if link is None or link.phase != AWAITING_ANSWER:
            self.counters["ignored_timers"] += 1
            return Outcome(IGNORE)
        self.counters["answer_timeouts"] += 1
        del self.links[connection]
        return Outcome(ACCEPT, close=True)

    def disconnect(self, connection: int) -> Outcome:
        """The link ended: its generations end, their open rounds are discarded, its negotiation is forgotten."""
        if self.links.pop(connection, None) is None:
            return Outcome(IGNORE)
        self.counters["disconnects"] += 1
        for slot in self.slots:
            if slot.live and slot.owner == connection:
                slot.live, slot.open = False, None
        return Outcome(ACCEPT)

    # -- decoding and negotiation ----------------------------------------------------------------

    def decode(self, link: Link, data: layout.FrameBytes) -> Message:
        """The message of ``data`` under the connection's HELLO; before the answer, a command or
        a worker's message is refused once its header is read (V2_BEFORE_HELLO)."""
        _, _, _, message_type = self.decoder.header(memoryview(data), link.params)
        if link.phase == AWAITING_ANSWER and message_type not in (0, layout.HELLO, layout.HELLO_ANSWER):
            raise Refusal("V2_BEFORE_HELLO", layout.TYPE_NAMES[message_type])
        return self.decoder.decode(data, link.params)

    def on_answer(self, link: Link, message: Message, data: layout.FrameBytes) -> Outcome:
        """The first frame of a connection: only the HELLO_ANSWER accepting the HELLO negotiates v2."""
        if message.type != layout.HELLO_ANSWER:
            return self.refuse("UNEXPECTED_MESSAGE", close=True)
        if message["session_id"] != link.params["session_id"]:
            return self.refuse("SESSION_MISMATCH", close=True)
        if message["status"] not in (layout.HELLO_ACCEPTED, layout.HELLO_REFUSED):
            return self.refuse("UNKNOWN_STATUS", close=True)
        if message["status"] == layout.HELLO_REFUSED:  # a valid answer: accepted, and nothing left to do
            self.counters["hello_refused"] += 1
            self.counters["accepted"] += 1
            return Outcome(ACCEPT, close=True)
        link.phase = NEGOTIATED
        return self.accept()

    # -- bookkeeping -------------------------------------------------------------------------------

    def refuse(self, code: str, frames: tuple[bytes, ...] = (), close: bool = False) -> Outcome:
        self.counters[code] += 1
        return Outcome(REJECT, code, frames, close)

    def accept(self, frames: tuple[bytes, ...] = (), draws: tuple[dict, ...] = ()) -> Outcome:
        self.counters["accepted"] += 1
        return Outcome(ACCEPT, None, frames, False, draws)

    def failed(self, step: Message, code: str) -> Outcome:
        """A STEP refused: one COMPLETION with status FAILED (no REPLY)."""
        self.counters["rounds_failed"] += 1
        return self.refuse(code, (self.failed_completion(step),))

    def failed_completion(self, step: Message) -> bytes:
        """The COMPLETION of a round given up: status FAILED, no rows (reply_bytes 0, reply_checksum 0, the
        CRC-32C of no bytes), ``row_count`` the negotiated depth, the STEP's other fields echoed."""
        return completion_frame(step, [], layout.STATUS_FAILED, self.hello["depth"])

    def live_on(self, slot: WorkerSlot) -> bool:
        """Whether the slot's generation is live on the connection being handled."""
        return slot.live and slot.owner == self.connection

    #: the handler of each message type after negotiation, by name (a subclass's override is the one called)
    HANDLERS = {
        layout.STEP: "on_step",
        layout.RESET: "on_reset",
        layout.COMMIT: "on_commit",
        layout.CANCEL: "on_cancel",
    }

    def route(self, link: Link, message: Message, data: layout.FrameBytes) -> Outcome:
        if message.type not in self.HANDLERS:  # a HELLO_ANSWER or HELLO again, a worker's message, v1
            return self.refuse("UNEXPECTED_MESSAGE")
        try:
            self.validator.validate(message, link.params)
        except Refusal as refusal:
            if message.type == layout.STEP and refusal.code not in UNANSWERABLE:
                return self.failed(message, refusal.code)
            return self.refuse(refusal.code)
        return getattr(self, self.HANDLERS[message.type])(message, data)

    # -- handlers ----------------------------------------------------------------------------------

    def reset_problem(self, slot: WorkerSlot, generation: int) -> str | None:
        """Why a RESET may not open ``generation`` on the slot (R24, R28), or None."""
        if slot.generation == LAST_GENERATION:
            return "SLOT_EXHAUSTED"
        if slot.live and slot.owner != self.connection:
            return "SLOT_HELD"
        if generation == slot.generation:
            return "DUPLICATE_GENERATION"
        if generation < slot.generation:
            return "STALE_GENERATION"
        return None

    def start_token(self, slot: WorkerSlot, token: int) -> int:
        """The committed token a RESET opens ``slot`` with: its own, or for -1 (an empty prefix) the draft
        model's start token, never a token left from an earlier generation (R01)."""
        return self.model.last_token if token == layout.NO_TOKEN else token

    def on_reset(self, message: Message, data: layout.FrameBytes) -> Outcome:
        index = message["slot"]
        slot = self.slots[index]
        problem = self.reset_problem(slot, message["generation"])
        if problem:
            return self.refuse(problem)
        self.slots[index] = WorkerSlot(
            message["generation"],
            True,
            self.connection,
            message["seed"],
            message["committed"],
            self.start_token(slot, message["token"]),
        )
        return self.accept()

    def step_problem(self, slot: WorkerSlot, step: Message) -> str | None:
        """Why a STEP that is no retry of the open round cannot be served (stateful checks), or None."""
        if slot.open is not None:
            return "UNEXPECTED_MESSAGE"  # a busy slot
        if slot.last_round is not None and step["round"] == slot.last_round:
            return "DUPLICATE_ROUND"
        if slot.last_round is not None and step["round"] < slot.last_round:
            return "STALE_ROUND"
        if step["anchor"] != slot.committed:
            return "POSITION_MISMATCH"
        return None

    def on_step(self, step: Message, data: layout.FrameBytes) -> Outcome:
        slot = self.slots[step["slot"]]
        if not self.live_on(slot) or step["generation"] != slot.generation:
            return self.failed(step, "STALE_GENERATION")
        if slot.open is not None and data == slot.open.step_frame:
            return self.retried(step, slot, slot.open)
        problem = self.step_problem(slot, step)
        if problem:
            return self.failed(step, problem)
        try:
            frames, tokens, draws = self.sample(step, slot)
        except CandidateError as error:  # a valid STEP, its round ID used; no round open, no draw reported
            log.warning("slot %d round %d: the draft model cannot propose: %s", step["slot"], step["round"], error)
            slot.last_round = step["round"]
            self.counters["rounds_failed"] += 1
            return self.accept((self.failed_completion(step),))
        slot.open = OpenRound(bytes(data), step["round"], step["anchor"], frames, tokens, draws)
        slot.last_round, slot.draws = step["round"], draws
        self.counters["rounds_served"] += 1
        return self.accept(frames, draws)

    def retried(self, step: Message, slot: WorkerSlot, current: OpenRound) -> Outcome:
        """An identical STEP of the open round: the identical frames again, nothing drawn (R24)."""
        self.counters["duplicate_retries"] += 1
        return Outcome(DUPLICATE, None, current.frames)

    def on_commit(self, message: Message, data: layout.FrameBytes) -> Outcome:
        slot = self.slots[message["slot"]]
        if not self.live_on(slot) or message["generation"] != slot.generation:
            return self.refuse("STALE_GENERATION")
        current = slot.open
        if current is None or message["round"] != current.round:
            stale = slot.last_round is not None and message["round"] <= slot.last_round
            return self.refuse("STALE_ROUND" if stale else "UNEXPECTED_MESSAGE")
        # past every emitted token: the correction or bonus, or none (-1) after an early end at >= 1 accepted
        token, accepted = message["token"], message["accepted"]
        emitted = accepted + (0 if token == layout.NO_TOKEN else 1)
        if emitted == 0 or message["new_committed"] != (current.anchor + emitted) % layout.POSITIONS:
            return self.refuse("POSITION_MISMATCH")
        slot.committed = message["new_committed"]
        slot.committed_token = current.tokens[accepted - 1] if token == layout.NO_TOKEN else token
        slot.open = None
        return self.accept()

    def on_cancel(self, message: Message, data: layout.FrameBytes) -> Outcome:
        slot = self.slots[message["slot"]]
        if not self.live_on(slot) or message["generation"] != slot.generation:
            return self.refuse("STALE_GENERATION")
        slot.live, slot.open = False, None
        return self.accept()

    # -- sampling ------------------------------------------------------------------------------------

    def sample(self, step: Message, slot: WorkerSlot) -> tuple[tuple[bytes, ...], list[int], tuple[dict, ...]]:
        """The round's frames (K REPLY then the COMPLETION), its drafts and its PROPOSAL draws, sampled with
        the torch candidate under the keys (seed, generation, round, anchor + i, PROPOSAL)."""
        model, policy = self.model, step["support_policy"]
        if step["depth"] != model.base_logits.shape[0] or self.hello["vocab"] != model.vocab:
            raise CandidateError("BAD_SHAPE", "the draft model does not match the negotiated depth and vocabulary")
        result = propose(
            [slot.seed],
            step["generation"],
            step["round"],
            step["anchor"],
            slot.committed_token,
            model.base_logits[None].to(self.device),
            f32_value(step["temperature"]),
            (model.left, model.right),
            policy or None,
        )
        replies = []
        tokens = result.tokens[0].tolist()
        for i, token in enumerate(tokens):
            if result.sparse is None:
                assert result.counts is not None  # a dense proposal carries its counts
                counts, ids = result.counts[0, i].cpu().numpy(), None
            else:
                counts, ids = result.sparse.counts[0, i].cpu().numpy(), result.sparse.ids[0, i].cpu().numpy()
            replies.append(row_reply(step, i, token, counts, ids, self.hello["dense_stride"]))
        frames = (*(r.data for r in replies), completion_frame(step, replies))
        return frames, tokens, draws_json(slot.seed, result)


def state_json(worker: Worker) -> dict:
    """The worker's state as ``worker_sessions``' ``final`` shows it (connections by the endpoint's numbers)."""
    slots = []
    for index, slot in enumerate(worker.slots):
        current = slot.open
        slots.append(
            {
                "slot": index,
                "generation": slot.generation,
                "live": slot.live,
                "owner": slot.owner if slot.live else None,
                "seed": str(slot.seed),
                "committed": slot.committed,
                "committed_token": slot.committed_token,
                "last_round": slot.last_round,
                "open": None
                if current is None
                else {"round": current.round, "anchor": current.anchor, "tokens": list(current.tokens)},
            }
        )
    connections = [
        {"connection": number, "phase": link.phase, "session_id": str(link.params["session_id"])}
        for number, link in sorted(worker.links.items())
    ]
    return {"connections": connections, "slots": slots}


def counters_json(worker: Worker) -> dict:
    return {name: count for name, count in sorted(worker.counters.items()) if count}


def outcome_json(outcome: Outcome) -> dict:
    """An event's verdict and draws as ``sync`` answers them (its frames went out on the stream before)."""
    out: dict = {"verdict": outcome.verdict, "draws": list(outcome.draws)}
    if outcome.reason is not None:
        out["reason"] = outcome.reason
    return out


def describe(outcome: Outcome) -> str:
    text = outcome.verdict + (f" {outcome.reason}" if outcome.reason else "")
    return (
        text
        + (f", sent {len(outcome.frames)} frames" if outcome.frames else "")
        + (", closing" if outcome.close else "")
    )


class WorkerEndpoint(Endpoint):
    """The drafter leader on TCP (see the module docstring)."""

    role = "worker"

    def __init__(
        self,
        hello: dict,
        model: DraftModel,
        control_allowed: bool = True,
        device: str = "cpu",
        *,
        mutant: str | None = None,
        answer_timeout_s: float = ANSWER_TIMEOUT_S,
    ) -> None:
        super().__init__(control_allowed)
        self.hello = hello
        self.model = model
        self.device = device
        self.mutant = mutant
        self.answer_timeout_s = answer_timeout_s
        self.worker = self.fresh_worker()
        #: connection -> the worker state machine it talks to (``configure`` makes a new one for later connections)
        self.bound: dict[int, Worker] = {}
        #: the session IDs of the next connections, in the order accepted (``configure``)
        self.sessions: deque[int] = deque()
        #: one event at a time through the state machines (sampling runs in :attr:`sampler`'s thread)
        self.lock = asyncio.Lock()
        #: the one thread every frame is fed (and every round sampled) in. Not asyncio's default
        #: executor: its pool adds a thread whenever a call is submitted before the last one's thread
        #: has marked itself idle (a race the loop wins now and then), up to 6 threads here, and each
        #: thread gets its own glibc malloc arena, whose freed 2.6 MB dense rounds it keeps; the
        #: worker's RSS rose by about 80 MB that way over 10^4 dense rounds (issue #25,
        #: docs/endpoint.md "The bound").
        self.sampler = ThreadPoolExecutor(max_workers=1, thread_name_prefix="qconform-sampler")
        #: connection -> its writer, while open
        self.writers: dict[int, stream.FrameWriter] = {}
        #: connection -> the outcome of the event on which the worker ended it (``closed``), newest only
        self.ended: control.RecentlyEnded[Outcome] = control.RecentlyEnded()
        #: connection -> the outcome of its Disconnect (``disconnect_status``), newest only
        self.disconnects: control.RecentlyEnded[Outcome] = control.RecentlyEnded()

    def fresh_worker(self) -> Worker:
        from .worker_mutants import worker_class

        return worker_class(self.mutant)(self.hello, self.model, self.device)

    @property
    def slots(self) -> list[WorkerSlot]:
        return self.worker.slots

    def session_of(self, number: int) -> int:
        """The session ID of connection ``number``: the next configured one, else the HELLO's plus number - 1."""
        if self.sessions:
            return self.sessions.popleft()
        return (self.hello["session_id"] + number - 1) % (1 << 64)

    # -- one connection --------------------------------------------------------------------

    async def serve(self, reader: stream.FrameReader, writer: stream.FrameWriter, number: int) -> None:
        worker = self.bound[number] = self.worker
        async with self.lock:
            outcome = worker.connect(number, self.session_of(number))
        params = worker.links[number].params
        log.info("conn %d: sent HELLO session=%#x vocab=%d", number, params["session_id"], params["vocab"])
        await stream.send(writer, *outcome.frames)
        self.writers[number] = writer
        deadline = asyncio.get_running_loop().time() + self.answer_timeout_s
        while number in worker.links:  # until the worker ends the connection (or the peer does)
            item = await self.next_item(reader, worker, number, deadline)
            if item is None:
                return
            if item.kind == stream.ENVELOPE:
                await stream.send(writer, await self.answer(item, number))
                continue
            async with self.lock:
                outcome = await asyncio.get_running_loop().run_in_executor(self.sampler, worker.feed, number, item.data)
            log.info("conn %d: %d-byte frame: %s", number, len(item.data), describe(outcome))
            if outcome.frames:
                await stream.send(writer, *outcome.frames)
            if item.kind == stream.BROKEN:
                log.warning("conn %d: the stream is out of step after %s; closing", number, outcome.reason)
                self.ended[number] = outcome
                return
            if outcome.close:
                self.ended[number] = outcome

    async def next_item(self, reader: stream.FrameReader, worker: Worker, number: int, deadline: float):
        """The next item of the connection; while its HELLO awaits an answer, None once the watchdog fired."""
        link = worker.links.get(number)
        read = stream.read_item(reader, worker.decoder, link.params if link else None, self.control_allowed)
        if link is None or link.phase != AWAITING_ANSWER:
            return await read
        try:
            return await asyncio.wait_for(read, max(0.0, deadline - asyncio.get_running_loop().time()))
        except asyncio.TimeoutError:
            async with self.lock:
                outcome = self.ended[number] = worker.answer_timeout(number)
            log.warning(
                "conn %d: no answer to the HELLO within %.1f s: %s", number, self.answer_timeout_s, describe(outcome)
            )
            return None

    async def close(self) -> None:
        """Stop serving (:meth:`Endpoint.close`), then let the sampler's thread end after its event."""
        await super().close()
        self.sampler.shutdown(wait=False)

    def closed(self, number: int) -> None:
        worker = self.bound.pop(number, None)
        self.writers.pop(number, None)
        if worker is not None:
            outcome = self.disconnects[number] = worker.disconnect(number)
            log.info("conn %d: disconnect: %s", number, describe(outcome))

    # -- test control ------------------------------------------------------------------------

    def about(self) -> dict:
        return {
            "role": self.role,
            "families": ["proposal_chain", "worker_sessions"],
            "precision": PRECISION,
            "devices": [self.device],
            "mutant": self.mutant,
        }

    async def command(self, request: dict, number: int) -> dict:
        op = request.get("op")
        worker = self.bound.get(number, self.worker)
        if op == "sync":
            link = worker.links.get(number)
            if link is None or link.last is None:
                raise control.ControlError("no event of this connection to report")
            return outcome_json(link.last)
        if op == "answer_timeout":
            return await self.fire_watchdog(worker, number, request)
        if op == "connection":
            return {"connection": number}
        if op == "closed":
            outcome = await self.awaited(self.ended, int(request["connection"]))
            return {**outcome_json(outcome), "close": outcome.close}
        if op == "disconnect_status":
            return outcome_json(await self.awaited(self.disconnects, int(request["connection"])))
        if op == "state":
            async with self.lock:
                return {"final": state_json(self.worker), "counters": counters_json(self.worker)}
        if op == "configure":
            return self.configure(request)
        if op == "model":
            return {"model": self.model.to_json()}
        if op == "trace":
            index = int(request.get("slot", 0))
            draws = worker.slots[index].draws if 0 <= index < len(worker.slots) else ()
            return {"draws": [{k: v for k, v in draw.items() if k != "key"} for draw in draws]}  # proposal_chain's
        raise control.ControlError(f"unknown op {op!r}")

    async def fire_watchdog(self, worker: Worker, number: int, request: dict) -> dict:
        """The negotiation watchdog of this connection, or of connection ``request["connection"]`` of the
        current worker (one that ended, or another): a connection awaiting its answer is closed."""
        if "connection" in request:
            worker, number = self.worker, int(request["connection"])
        async with self.lock:
            outcome = worker.answer_timeout(number)
        log.info("conn %d: answer watchdog (control): %s", number, describe(outcome))
        if outcome.close:
            self.ended[number] = outcome
            if "connection" in request and number in self.writers:
                self.writers[number].close()
        return {**outcome_json(outcome), "close": outcome.close}

    @staticmethod
    async def awaited(outcomes: control.RecentlyEnded[Outcome], number: int) -> Outcome:
        """The outcome recorded for connection ``number``, once there (at most :data:`STATUS_WAIT_S`)."""
        deadline = asyncio.get_running_loop().time() + STATUS_WAIT_S
        while number not in outcomes and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.002)
        if number not in outcomes:
            raise control.ControlError(control.forgotten(number))
        return outcomes[number]

    def configure(self, request: dict) -> dict:
        """A fresh worker for later connections: its HELLO shape, draft model, the session IDs of the
        next connections, its answer timeout (each optional)."""
        hello = hello_fields(request["hello"]) if "hello" in request else self.hello
        model = DraftModel.from_json(request["model"]) if "model" in request else self.model
        sessions = [int(s) for s in request.get("sessions", ())]
        if not all(0 <= s < 1 << 64 for s in sessions):
            raise control.ControlError("a session ID is a u64")
        timeout = float(request.get("answer_timeout_s", self.answer_timeout_s))
        if not timeout > 0:
            raise control.ControlError("answer_timeout_s must be positive")
        self.hello, self.model, self.answer_timeout_s = hello, model, timeout
        self.sessions = deque(sessions)
        self.worker = self.fresh_worker()
        log.info(
            "configured: vocab=%d, model V=%d, %d session IDs", self.hello["vocab"], self.model.vocab, len(sessions)
        )
        return {"ok": True}
