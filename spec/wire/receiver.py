"""The receiver state machine of wire v2 (R12, R16, R17, R19, R24, R25, R27, R28).

``step(state, event) -> (state, verdict)`` is a pure function over frozen
dataclasses. Events are frames received (:class:`FrameIn`), a slot's watchdog
firing (:class:`Timeout`) and the connection dropping (:class:`Disconnect`).
The frames of both directions pass through it: the worker's HELLO, REPLY and
COMPLETION, and the target's own STEP, COMMIT, RESET and CANCEL as it sends them.

The state is the negotiated HELLO (None until HELLO, R12), and per probability
slot: the generation and whether it is live, the committed position, the last
round ID of the generation, the request seed, and the open round: its STEP,
the REPLY frames received in position order, and the COMPLETION that made its
rows consumable (R16). Rules, in brief:

* A round's rows become consumable only after its COMPLETION validates (exact
  byte count and CRC-32C of the replies, matching context); a COMMIT before
  that is CONSUMED_BEFORE_COMPLETION (R16, R28).
* Generations and rounds: a STEP, COMMIT or CANCEL names the slot's live
  generation (STALE_GENERATION); round IDs strictly increase within a generation
  (DUPLICATE_ROUND, STALE_ROUND); a RESET moves to a higher generation
  (DUPLICATE_GENERATION, STALE_GENERATION) with an explicit committed position
  and seed (R17, R19, R24).
* A REPLY or COMPLETION for a generation ended by RESET, CANCEL, a timeout, a
  discard or a disconnect is LATE_REPLY (R28); one for a committed round is
  STALE_ROUND.
* A retried REPLY or COMPLETION must repeat the first one byte for byte (then
  it is a ``duplicate`` and changes nothing), else RETRY_MISMATCH (R24).
* Missing, corrupt or timed-out q discards the **entire** unverified proposal
  of its slot and invalidates the generation: the outcome is target-only from
  the committed prefix, never a partial commit (R25). A frame that fails
  before its checksum is verified cannot be attributed to a slot, so it
  discards every open round. A rejected REPLY or COMPLETION whose verified
  fields address the open round discards that round; one addressed elsewhere
  (stale, late, another session) changes nothing.
* A round whose COMPLETION validated is consumable and kept: only its COMMIT,
  the target's RESET or CANCEL, or the end of its connection drop it; worker
  faults and the watchdog no longer do (R28).
* Connections: each frame and disconnect names its connection; each
  connection negotiates its own HELLO, a generation is live only on the
  connection whose RESET opened it, and an unattributable frame or a
  disconnect touches only its own connection's rounds. The slots are the
  receiver's and are never dropped; generations only grow, and a slot at
  generation 2^32 - 1 is retired (SLOT_EXHAUSTED), so no key is accepted twice
  (R22, R24). A disconnect forgets the connection's HELLO and ends its
  generations; every slot needs a RESET to a higher generation.
* Every HELLO whose checksum verified is answered (HELLO_ANSWER: accepted, or
  refused with its reason code, R12, R13).
* Every rejection is counted under its reason code, and every discard,
  timeout, disconnect, worker failure and duplicate has its own counter (R25).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Union

from qconform.spec.qrow import QRow
from qconform.spec.rules import defines
from qconform.spec.wire import layout
from qconform.spec.wire.checksum import crc32c
from qconform.spec.wire.codec import decode_frame, encode_frame
from qconform.spec.wire.messages import (
    Cancel,
    Commit,
    Completion,
    Hello,
    HelloAnswer,
    Message,
    Reply,
    Reset,
    Step,
    V1Greedy,
    ascii_field,
)
from qconform.spec.wire.negotiation import check_config, check_hello
from qconform.spec.wire.reasons import Route, WireReject
from qconform.spec.wire.validation import validate_message, validate_reply

POSITION_MODULUS: int = 1 << 32
#: The largest generation a u32 field can name: a slot whose generation reached it is exhausted (R24).
LAST_GENERATION: int = (1 << 32) - 1

ACCEPT, REJECT, DUPLICATE, IGNORE, GREEDY_V1 = "accept", "reject", "duplicate", "ignore", "greedy_v1"
VERDICT_KINDS: tuple[str, ...] = (ACCEPT, REJECT, DUPLICATE, IGNORE, GREEDY_V1)

#: Counters other than the per-reason rejection counters.
EVENT_COUNTERS: tuple[str, ...] = (
    "accepted",
    "duplicate_retries",
    "discarded_proposals",
    "timeouts",
    "ignored_timers",
    "disconnects",
    "worker_failed",
    "v1_greedy_frames",
)

WORKER_TYPES: tuple[int, ...] = (layout.REPLY.code, layout.COMPLETION.code)


@dataclass(frozen=True)
class OpenRound:
    """A round opened by STEP: the REPLY frames received so far and the validated COMPLETION."""

    step: Step
    replies: tuple[bytes, ...] = ()
    completion: bytes | None = None
    #: the STEP frame's bytes, so that an identical retry is told from a second STEP (R24)
    step_frame: bytes = b""

    @property
    def consumable(self) -> bool:
        return self.completion is not None


@dataclass(frozen=True)
class SlotState:
    """One probability slot. Generation 0 is never live: the first RESET opens a generation.

    A slot lives as long as the receiver (the endpoint), not a connection: its
    generation only ever grows, so no (seed, generation, round, position) key is
    accepted twice (R24). ``owner`` is the connection whose RESET opened the live
    generation; the generation is live only for frames of that connection.
    """

    generation: int = 0
    live: bool = False
    committed: int = 0
    last_round: int | None = None
    seed: int = 0
    open: OpenRound | None = None
    owner: int = 0


@dataclass(frozen=True)
class ReceiverState:
    """The whole receiver (one endpoint): its configuration, the HELLO negotiated on each
    connection, the slots (shared by every connection, never dropped), the counters."""

    config: Hello
    #: (connection, negotiated HELLO) pairs, sorted by connection; a connection without HELLO is absent
    links: tuple[tuple[int, Hello], ...] = ()
    slots: tuple[SlotState, ...] = ()
    #: (name, count) pairs, sorted by name, zero counts left out
    counters: tuple[tuple[str, int], ...] = field(default=())

    def link(self, connection: int) -> Hello | None:
        """The HELLO negotiated on ``connection`` (None before its HELLO)."""
        return dict(self.links).get(connection)

    @property
    def negotiated(self) -> Hello | None:
        """The HELLO negotiated on connection 0 (the one link of a single-connection receiver)."""
        return self.link(0)


@dataclass(frozen=True)
class FrameIn:
    """A frame received (or, for STEP, COMMIT, RESET and CANCEL, sent by the target), as bytes,
    on ``connection`` (0 unless several connections share the endpoint)."""

    data: bytes
    connection: int = 0


@dataclass(frozen=True)
class Timeout:
    """A slot's watchdog fired."""

    slot: int


@dataclass(frozen=True)
class Disconnect:
    """The connection dropped (a later frame on the same number is a new connection)."""

    connection: int = 0


Event = Union[FrameIn, Timeout, Disconnect]


@dataclass(frozen=True)
class Disposition:
    """What became of one event: ``kind`` (accept, reject, duplicate, ignore, greedy_v1),
    the reason code of a rejection, and the slots whose unverified proposal it discarded."""

    kind: str
    reason: str | None = None
    discarded: tuple[int, ...] = ()
    #: the HELLO_ANSWER frame the receiver sends back, for a HELLO frame whose checksum verified
    answer: bytes | None = None


@defines("R12", "R27")
def initial_state(config: Hello) -> ReceiverState:
    """A receiver awaiting HELLO under its own ``config`` (refused unless the design allows it)."""
    check_config(config)
    return ReceiverState(config=config)


@defines("R25")
def counter(state: ReceiverState, name: str) -> int:
    """The count of a reason code or an event counter (0 when it never happened)."""
    return dict(state.counters).get(name, 0)


def counted(state: ReceiverState, name: str) -> ReceiverState:
    counts = dict(state.counters)
    counts[name] = counts.get(name, 0) + 1
    return replace(state, counters=tuple(sorted(counts.items())))


def with_slot(state: ReceiverState, index: int, slot: SlotState) -> ReceiverState:
    slots = list(state.slots)
    slots[index] = slot
    return replace(state, slots=tuple(slots))


def live_on(slot: SlotState, connection: int) -> bool:
    """Whether the slot's generation is live for frames of ``connection`` (the one whose RESET opened it)."""
    return slot.live and slot.owner == connection


@defines("R25", "R28")
def discard(
    state: ReceiverState, indices: tuple[int, ...], force: bool = False
) -> tuple[ReceiverState, tuple[int, ...]]:
    """Discard the open round of each slot in ``indices`` that has one and invalidate its generation.

    A round whose COMPLETION validated is consumable: the target may be
    verifying its rows, so a worker-side fault (a differing retry, a corrupt or
    unattributable frame) no longer discards it; only the target itself (RESET,
    CANCEL, ``force``) or the end of its connection does (R28). The slot keeps its
    committed position: the outcome is target-only from the committed prefix, and
    a RESET must open a new generation before the next STEP.
    """
    discarded = []
    for index in indices:
        slot = state.slots[index]
        if slot.open is not None and (force or not slot.open.consumable):
            state = counted(with_slot(state, index, replace(slot, open=None, live=False)), "discarded_proposals")
            discarded.append(index)
    return state, tuple(discarded)


def open_slots(state: ReceiverState, connection: int) -> tuple[int, ...]:
    """The slots with an open round opened on ``connection``."""
    return tuple(i for i, slot in enumerate(state.slots) if slot.open is not None and slot.owner == connection)


def refuse(state: ReceiverState, code: str, discard_slots: tuple[int, ...] = ()) -> tuple[ReceiverState, Disposition]:
    """Count the rejection ``code`` and discard the unconsumable open rounds of ``discard_slots``."""
    state, discarded = discard(state, discard_slots)
    return counted(state, code), Disposition(REJECT, code, discarded)


def accept(state: ReceiverState, discarded: tuple[int, ...] = ()) -> tuple[ReceiverState, Disposition]:
    return counted(state, "accepted"), Disposition(ACCEPT, None, discarded)


@defines("R25", "R28")
def addresses_open_round(state: ReceiverState, route: Route, connection: int) -> bool:
    """Whether a worker message's verified fields name a slot's open round of its live generation."""
    params = state.link(connection)
    if route.message_type not in WORKER_TYPES or params is None or route.session_id != params.session_id:
        return False
    if route.slot >= len(state.slots):
        return False
    slot = state.slots[route.slot]
    return (
        live_on(slot, connection)
        and slot.open is not None
        and route.generation == slot.generation
        and route.round == slot.open.step.round
    )


@defines("R18", "R25")
def refuse_frame(state: ReceiverState, error: WireReject, connection: int) -> tuple[ReceiverState, Disposition]:
    """A frame refused by decoding or stateless validation: discard what it can be attributed to.

    A refused v1 frame is v1 traffic and discards nothing (R12). An unattributable v2
    frame is attributed to its connection: it discards the open rounds of that
    connection only, never another connection's.
    """
    if error.v1:
        return refuse(state, error.code)
    if error.route is None:
        return refuse(state, error.code, open_slots(state, connection))
    if addresses_open_round(state, error.route, connection):
        return refuse(state, error.code, (error.route.slot,))
    return refuse(state, error.code)


@defines("R19", "R28")
def worker_route_problem(slot: SlotState, generation: int, round_id: int, connection: int) -> str | None:
    """Why a REPLY or COMPLETION does not belong to the slot's open round, or None."""
    if generation < slot.generation or (generation == slot.generation and not live_on(slot, connection)):
        return "LATE_REPLY"
    if generation > slot.generation:
        return "STALE_GENERATION"
    if slot.open is None or round_id != slot.open.step.round:
        if slot.last_round is not None and round_id <= slot.last_round:
            return "STALE_ROUND"
        return "UNEXPECTED_MESSAGE"
    return None


@defines("R16", "R19", "R28")
def routed_round(state: ReceiverState, message: Reply | Completion, connection: int) -> OpenRound | str:
    """The open round a REPLY or COMPLETION belongs to, or the reason it belongs to none."""
    slot = state.slots[message.slot]
    problem = worker_route_problem(slot, message.generation, message.round, connection)
    if problem is not None:
        return problem
    assert slot.open is not None
    return slot.open


@defines("R24", "R25")
def retried(
    state: ReceiverState, first: bytes, again: bytes, here: tuple[int, ...]
) -> tuple[ReceiverState, Disposition]:
    """A retry repeats the first frame byte for byte (a duplicate, nothing changes) or discards the round."""
    if again == first:
        return counted(state, "duplicate_retries"), Disposition(DUPLICATE)
    return refuse(state, "RETRY_MISMATCH", here)


@defines("R17", "R19")
def command_generation_problem(slot: SlotState, generation: int, connection: int) -> str | None:
    """A STEP, COMMIT or CANCEL must name the slot's generation live on its connection."""
    if not live_on(slot, connection) or generation != slot.generation:
        return "STALE_GENERATION"
    return None


@defines("R12", "R13", "R24")
def receive_hello(state: ReceiverState, hello: Hello, connection: int) -> tuple[ReceiverState, Disposition]:
    """A HELLO that :func:`check_frame` negotiated turns v2 on for its connection, once per connection.

    The slots are the endpoint's, never the connection's: a HELLO with fewer
    slots leaves the others as they are (unaddressable on this connection), one
    with more adds fresh slots after them. A slot keeps its generation and
    committed position for the receiver's lifetime, so a reconnection can never
    bring back a generation, nor the keys drawn under it (R24).
    """
    if state.link(connection) is not None:
        return refuse(state, "UNEXPECTED_MESSAGE")
    slots = state.slots + tuple(SlotState() for _ in range(len(state.slots), hello.max_slots))
    links = tuple(sorted(state.links + ((connection, hello),), key=lambda pair: pair[0]))
    return accept(replace(state, links=links, slots=slots))


@defines("R14", "R19", "R24", "R27")
def receive_step(state: ReceiverState, step: Step, data: bytes, connection: int) -> tuple[ReceiverState, Disposition]:
    """Open a round: live generation, idle slot, a fresh round ID, anchored at the committed position.

    A STEP identical byte for byte to the open round's is a retry: a duplicate.
    """
    slot = state.slots[step.slot]
    problem = command_generation_problem(slot, step.generation, connection)
    if problem is not None:
        return refuse(state, problem)
    if slot.open is not None:
        if data == slot.open.step_frame:
            return counted(state, "duplicate_retries"), Disposition(DUPLICATE)
        return refuse(state, "UNEXPECTED_MESSAGE")
    if slot.last_round is not None and step.round <= slot.last_round:
        return refuse(state, "DUPLICATE_ROUND" if step.round == slot.last_round else "STALE_ROUND")
    if step.anchor != slot.committed:
        return refuse(state, "POSITION_MISMATCH")
    params = state.link(connection)
    assert params is not None
    if len(open_slots(state, connection)) >= params.max_requests:
        return refuse(state, "TOO_MANY_REQUESTS")
    opened = replace(slot, open=OpenRound(step, step_frame=data), last_round=step.round)
    return accept(with_slot(state, step.slot, opened))


@defines("R15", "R24", "R25", "R28")
def receive_reply(
    state: ReceiverState, reply: Reply, data: bytes, connection: int
) -> tuple[ReceiverState, Disposition]:
    """Append the next row of the open round; an identical retry is a duplicate, a different one discards."""
    current = routed_round(state, reply, connection)
    if isinstance(current, str):
        return refuse(state, current)
    here = (reply.slot,)
    index = (reply.position - current.step.anchor) % POSITION_MODULUS
    if index < len(current.replies):
        return retried(state, current.replies[index], data, here)
    if current.consumable or index != len(current.replies) or index >= current.step.depth:
        return refuse(state, "POSITION_MISMATCH", here)
    policy = current.step.support_policy
    if (policy == 0) != (reply.representation == layout.REPR_DENSE):
        return refuse(state, "REPRESENTATION_MISMATCH", here)
    if policy and reply.entry_count > policy:
        return refuse(state, "SUPPORT_ABOVE_MAX", here)
    grown = replace(current, replies=current.replies + (data,))
    return accept(with_slot(state, reply.slot, replace(state.slots[reply.slot], open=grown)))


@defines("R16", "R24", "R25", "R28")
def receive_completion(
    state: ReceiverState, completion: Completion, data: bytes, connection: int
) -> tuple[ReceiverState, Disposition]:
    """Close the open round's replies; only a COMPLETION that validates makes its rows consumable.

    A FAILED COMPLETION (the worker gives the round up, after any number of rows) is held to every
    rule but "every row received": its ``reply_bytes`` and ``reply_checksum`` cover exactly the REPLY
    frames received before it (none: 0 and 0, the CRC-32C of no bytes). Accepted, it discards the
    round; refused, it discards it too, as any refused frame that addresses the open round does.
    """
    current = routed_round(state, completion, connection)
    if isinstance(current, str):
        return refuse(state, current)
    here = (completion.slot,)
    if current.completion is not None:
        return retried(state, current.completion, data, here)
    step = current.step
    if completion.anchor != step.anchor:
        return refuse(state, "POSITION_MISMATCH", here)
    if (completion.context_version, completion.prefix_digest) != (step.context_version, step.prefix_digest):
        return refuse(state, "CONTEXT_MISMATCH", here)
    failed = completion.status == layout.STATUS_FAILED
    if not failed and len(current.replies) < completion.row_count:
        return refuse(state, "MISSING_Q", here)
    joined = b"".join(current.replies)
    if completion.reply_bytes != len(joined):
        return refuse(state, "REPLY_SIZE_MISMATCH", here)
    if completion.reply_checksum != crc32c(joined):
        return refuse(state, "COMPLETION_CHECKSUM_MISMATCH", here)
    if failed:
        state, discarded = discard(counted(state, "worker_failed"), here)
        return accept(state, discarded)
    done = replace(current, completion=data)
    return accept(with_slot(state, completion.slot, replace(state.slots[completion.slot], open=done)))


@defines("R11", "R16", "R17")
def committed_after(anchor: int, accepted: int, emitted: int) -> int | None:
    """The committed position after a round anchored at ``anchor`` that accepted ``accepted`` drafts
    and emitted ``emitted`` tokens, None when no round ends so.

    A round emits its accepted drafts, then a correction or bonus token unless
    emission ended early (a stop token or the output budget on the last accepted
    draft): ``accepted + 1`` or ``accepted`` tokens, never none. The committed
    position moves past every emitted token.
    """
    if emitted not in (accepted, accepted + 1) or emitted == 0:
        return None
    return (anchor + emitted) % POSITION_MODULUS


@defines("R11", "R16", "R17")
def commit_target(anchor: int, accepted: int, token: int) -> int | None:
    """The one committed position a COMMIT of ``accepted`` drafts and ``token`` may name, None if none.

    With a correction or bonus token: ``anchor + accepted + 1``. With no token
    (-1: emission ended at a stop token or the output budget on the last
    accepted draft, so at least one draft was accepted): ``anchor + accepted``.
    """
    return committed_after(anchor, accepted, accepted if token == layout.NO_TOKEN else accepted + 1)


@defines("R11", "R16", "R17")
def commit_for_round(anchor: int, accepted: int, emitted: tuple[int, ...]) -> tuple[int, int, int]:
    """The one legal COMMIT ``(accepted, token, new_committed)`` of a verified round's outcome.

    ``accepted`` and ``emitted`` are those of ``verification.verify_round``: a
    correction or bonus emits ``accepted + 1`` tokens, the last one the COMMIT's
    token; an early end (stop token, budget) emits ``accepted`` and the COMMIT
    names no token (-1). The position is :func:`committed_after`'s.
    """
    new_committed = committed_after(anchor, accepted, len(emitted))
    if new_committed is None:
        raise ValueError(f"{len(emitted)} tokens emitted with {accepted} accepted is no round outcome")
    token = emitted[-1] if len(emitted) == accepted + 1 else layout.NO_TOKEN
    return accepted, token, new_committed


@defines("R16", "R17")
def receive_commit(
    state: ReceiverState, commit: Commit, data: bytes, connection: int
) -> tuple[ReceiverState, Disposition]:
    """Consume a completed round: the committed position moves past every emitted token (:func:`commit_target`)."""
    slot = state.slots[commit.slot]
    problem = command_generation_problem(slot, commit.generation, connection)
    if problem is not None:
        return refuse(state, problem)
    current = slot.open
    if current is None or commit.round != current.step.round:
        stale = slot.last_round is not None and commit.round <= slot.last_round
        return refuse(state, "STALE_ROUND" if stale else "UNEXPECTED_MESSAGE")
    if not current.consumable:
        return refuse(state, "CONSUMED_BEFORE_COMPLETION")
    if commit.new_committed != commit_target(current.step.anchor, commit.accepted, commit.token):
        return refuse(state, "POSITION_MISMATCH")
    return accept(with_slot(state, commit.slot, replace(slot, committed=commit.new_committed, open=None)))


@defines("R17", "R24")
def receive_reset(
    state: ReceiverState, reset: Reset, data: bytes, connection: int
) -> tuple[ReceiverState, Disposition]:
    """Move a slot to a higher generation with an explicit committed position and seed; discard its round.

    Generations only grow over the receiver's lifetime, whatever the connection:
    a slot whose generation reached 2^32 - 1 has no higher one and is retired
    (SLOT_EXHAUSTED) rather than ever reusing a generation (R24).
    """
    slot = state.slots[reset.slot]
    if slot.generation == LAST_GENERATION:
        return refuse(state, "SLOT_EXHAUSTED")
    if reset.generation < slot.generation:
        return refuse(state, "STALE_GENERATION")
    if reset.generation == slot.generation:
        return refuse(state, "DUPLICATE_GENERATION")
    state, discarded = discard(state, (reset.slot,), force=True)
    fresh = SlotState(
        generation=reset.generation, live=True, committed=reset.committed, seed=reset.seed, owner=connection
    )
    return accept(with_slot(state, reset.slot, fresh), discarded)


@defines("R12")
def receive_hello_answer(
    state: ReceiverState, answer: HelloAnswer, data: bytes, connection: int
) -> tuple[ReceiverState, Disposition]:
    """A receiver sends HELLO answers and never receives one: UNEXPECTED_MESSAGE whatever its status.

    Its checksum verified and it addresses no round, so it discards nothing (as a second HELLO).
    """
    return refuse(state, "UNEXPECTED_MESSAGE")


@defines("R12", "R13")
def hello_answer(hello: Hello, verdict: Disposition) -> bytes:
    """The HELLO_ANSWER frame of the receiver's ``verdict`` on ``hello``: accepted, or refused with its reason."""
    if verdict.kind == ACCEPT:
        return encode_frame(HelloAnswer(hello.session_id, layout.HELLO_ACCEPTED, ascii_field("")))
    assert verdict.reason is not None
    return encode_frame(HelloAnswer(hello.session_id, layout.HELLO_REFUSED, ascii_field(verdict.reason)))


def decoded_hello(data: bytes) -> Hello | None:
    """The HELLO a frame holds once its framing and checksum verified, else None (it gets no answer)."""
    try:
        message = decode_frame(data, None)
    except WireReject:
        return None
    return message if isinstance(message, Hello) else None


@defines("R17", "R28")
def receive_cancel(
    state: ReceiverState, cancel: Cancel, data: bytes, connection: int
) -> tuple[ReceiverState, Disposition]:
    """Invalidate the slot's live generation and discard its open round (consumable or not)."""
    problem = command_generation_problem(state.slots[cancel.slot], cancel.generation, connection)
    if problem is not None:
        return refuse(state, problem)
    state, discarded = discard(state, (cancel.slot,), force=True)
    return accept(with_slot(state, cancel.slot, replace(state.slots[cancel.slot], live=False)), discarded)


#: A handler takes the one message type that keys it in HANDLERS, which a union parameter cannot say: ``Any``.
Handler = Callable[[ReceiverState, Any, bytes, int], tuple[ReceiverState, Disposition]]
HANDLERS: dict[type, Handler] = {
    Step: receive_step,
    Reply: receive_reply,
    Completion: receive_completion,
    Commit: receive_commit,
    Reset: receive_reset,
    Cancel: receive_cancel,
    HelloAnswer: receive_hello_answer,
}


@defines("R12", "R13", "R18", "R19")
def check_frame(
    data: bytes, config: Hello, negotiated: Hello | None, *, reads_answers: bool = True
) -> tuple[Message | V1Greedy, QRow | None]:
    """Every check of one frame that needs no session state, and a REPLY's validated q row.

    Decoding (framing, bounds, checksum), then for a HELLO before negotiation the
    negotiation against ``config``, for another v2 message the stateless validation
    against the ``negotiated`` HELLO. A HELLO after negotiation is left to the caller.
    A HELLO_ANSWER's own rows (its status) are checked by its reader, a worker; the
    receiver (``reads_answers=False``) reads no answer, so its check stops at the
    verified checksum and step 9 refuses it (docs/wire-v2.md, "Check order: HELLO_ANSWER").
    """
    message = decode_frame(data, negotiated)
    if isinstance(message, V1Greedy):
        return message, None
    if isinstance(message, HelloAnswer) and not reads_answers:
        return message, None
    if isinstance(message, Hello):
        if negotiated is None:
            check_hello(message, config)
        return message, None
    assert negotiated is not None  # decode_frame refuses other v2 messages before HELLO
    return message, validate_message(message, negotiated)


@defines("R12", "R13", "R18", "R19")
def receive_frame(state: ReceiverState, data: bytes, connection: int) -> tuple[ReceiverState, Disposition]:
    """Check a frame under its connection's HELLO, route it, and answer a HELLO (:func:`hello_answer`)."""
    state, verdict = judge_frame(state, data, connection)
    hello = decoded_hello(data)
    if hello is not None:
        verdict = replace(verdict, answer=hello_answer(hello, verdict))
    return state, verdict


@defines("R12", "R18", "R19")
def judge_frame(state: ReceiverState, data: bytes, connection: int) -> tuple[ReceiverState, Disposition]:
    """Check a frame statelessly (:func:`check_frame`) under its connection's HELLO, then route it."""
    try:
        message, _ = check_frame(data, state.config, state.link(connection), reads_answers=False)
    except WireReject as error:
        return refuse_frame(state, error, connection)
    if isinstance(message, V1Greedy):
        return counted(state, "v1_greedy_frames"), Disposition(GREEDY_V1)
    if isinstance(message, Hello):
        return receive_hello(state, message, connection)
    return HANDLERS[type(message)](state, message, data, connection)


@defines("R25", "R28")
def fire_timeout(state: ReceiverState, index: int) -> tuple[ReceiverState, Disposition]:
    """The watchdog discards the slot's open round and invalidates its generation.

    It guards the arrival of q: with no open round, or once the round is
    consumable (every row validated, R28), it is ignored.
    """
    open_round = state.slots[index].open if index < len(state.slots) else None
    if open_round is None or open_round.consumable:
        return counted(state, "ignored_timers"), Disposition(IGNORE)
    state, discarded = discard(counted(state, "timeouts"), (index,))
    return state, Disposition(ACCEPT, None, discarded)


@defines("R24", "R25")
def disconnect(state: ReceiverState, connection: int) -> tuple[ReceiverState, Disposition]:
    """Discard every open round of the connection, end its generations, forget its HELLO.

    Another connection's HELLO, slots and rounds are untouched.
    """
    state, discarded = discard(counted(state, "disconnects"), open_slots(state, connection), force=True)
    slots = tuple(replace(slot, live=False) if slot.owner == connection else slot for slot in state.slots)
    links = tuple(pair for pair in state.links if pair[0] != connection)
    return replace(state, links=links, slots=slots), Disposition(ACCEPT, None, discarded)


@defines("R12", "R16", "R17", "R24", "R25", "R28")
def step(state: ReceiverState, event: Event) -> tuple[ReceiverState, Disposition]:
    """The receiver's transition: the new state and the verdict on ``event``."""
    if isinstance(event, FrameIn):
        return receive_frame(state, event.data, event.connection)
    if isinstance(event, Timeout):
        return fire_timeout(state, event.slot)
    if isinstance(event, Disconnect):
        return disconnect(state, event.connection)
    raise TypeError(f"not a receiver event: {event!r}")


@defines("R01", "R16")
def consumable_rows(state: ReceiverState, index: int) -> tuple[QRow, ...] | None:
    """The validated q rows of a slot's open round once its COMPLETION validated; None before.

    Row i is exactly the q row REPLY i carried, the q that sampled that REPLY's
    token (R01), in position order: recovered from the frame's bytes, never
    rebuilt, renormalized or taken from another round.

    The rows were validated under the HELLO of the connection whose RESET opened
    the round (the slot's owner), which is negotiated while the round is open.
    """
    slot = state.slots[index]
    current = slot.open
    if current is None or not current.consumable:
        return None
    params = state.link(slot.owner)
    assert params is not None  # a disconnect discards its connection's open rounds
    rows = []
    for data in current.replies:
        reply = decode_frame(data, params)
        assert isinstance(reply, Reply)
        rows.append(validate_reply(reply, params))
    return tuple(rows)
