"""The worker state machine of wire v2: the drafter leader's side of the link (R01, R12, R13, R16, R17, R22, R24, R25, R28).

``step(state, event) -> (state, output)`` is a pure function over frozen
dataclasses, the twin of :mod:`qconform.spec.wire.receiver`. The worker listens;
a target connects (:class:`Connect`), and the worker sends its HELLO first. The
target answers it (HELLO_ANSWER) and sends RESET, STEP, COMMIT and CANCEL
(:class:`FrameIn`); the worker's negotiation watchdog may fire
(:class:`AnswerTimeout`) and a link may end (:class:`Disconnect`). The output of
an event is the worker's verdict, the frames it sends back, whether it ends the
connection, and the PROPOSAL draws it made. docs/wire-v2.md, "Worker state
machine", is the same machine as a decision table, with the reason of each
choice. Rules, in brief:

* Nothing is served before the HELLO is accepted: the first frame on a
  connection must be the HELLO_ANSWER accepting the worker's HELLO; anything
  else ends the connection, nothing sent and no slot touched (R12, R13).
* The slots are the worker's, from its start, never dropped. A RESET opens a
  higher generation than any ever opened on the slot, live on its own
  connection; a slot live on another connection is SLOT_HELD until that link
  ends or CANCELs it (R24, R28).
* A STEP is served only for the slot's live generation on its own connection,
  a fresh round and the committed position: K REPLY rows sampled under the
  PROPOSAL keys of the RNG ABI, conditioned on the committed token, then a
  COMPLETION with status OK; a refused STEP gets one FAILED COMPLETION (or
  nothing, when it names another session or no slot) (R01, R16, R22, R25).
* An identical STEP retry gets the identical frames again, never a redraw;
  rounds only grow within a generation, so no key is drawn twice (R24).
* COMMIT moves the committed position and token; CANCEL and a disconnect end
  the generation and discard the open round (R17, R24).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence, Union

from qconform.spec.errors import SpecError, refuse
from qconform.spec.markov import check_factors
from qconform.spec.proposal import ProposalInput, ProposalResult, SupportPolicy, proposal_chain
from qconform.spec.rng_abi import DrawKey, RngIdentity, proposal_key
from qconform.spec.rules import defines
from qconform.spec.wire import layout
from qconform.spec.wire.codec import completion_for, decode_frame, encode_frame, reply_from_row
from qconform.spec.wire.header import parse_header
from qconform.spec.wire.layout import HEADER_SIZE
from qconform.spec.wire.messages import (
    Cancel,
    Commit,
    Hello,
    HelloAnswer,
    Message,
    Reset,
    Step,
    V1Greedy,
)
from qconform.spec.wire.negotiation import check_config
from qconform.spec.wire.reasons import WireReject
from qconform.spec.wire.receiver import (
    ACCEPT,
    DUPLICATE,
    IGNORE,
    LAST_GENERATION,
    REJECT,
    Disconnect,
    FrameIn,
    commit_target,
)
from qconform.spec.wire.validation import validate_message

AWAITING_ANSWER, NEGOTIATED = "awaiting_answer", "negotiated"
PHASES: tuple[str, ...] = (AWAITING_ANSWER, NEGOTIATED)
VERDICT_KINDS: tuple[str, ...] = (ACCEPT, REJECT, DUPLICATE, IGNORE)

#: Counters other than the per-reason rejection counters.
EVENT_COUNTERS: tuple[str, ...] = (
    "accepted",
    "connections",
    "duplicate_retries",
    "rounds_served",
    "rounds_failed",
    "hello_refused",
    "answer_timeouts",
    "ignored_timers",
    "disconnects",
)

#: STEP refusals that name no round the target could be waiting for: nothing is sent (docs/wire-v2.md, decision 10).
UNANSWERED_STEP_REASONS: tuple[str, ...] = ("SESSION_MISMATCH", "TOO_MANY_SLOTS")


@dataclass(frozen=True)
class DraftModel:
    """What the worker drafts from: the K rows of base logits (one per draft position, the same
    every round), the Markov factors ``left`` [V, r] and ``right`` [r, V] (FP32 bit patterns),
    and the start token, ``x_0`` of an empty prefix (R01, R05)."""

    base_logits: tuple[tuple[int, ...], ...]
    markov_left: tuple[tuple[int, ...], ...]
    markov_right: tuple[tuple[int, ...], ...]
    start_token: int


@dataclass(frozen=True)
class Link:
    """One connection: its phase, and the HELLO the worker sent on it (its session ID)."""

    phase: str
    hello: Hello

    @property
    def session_id(self) -> int:
        return self.hello.session_id


@dataclass(frozen=True)
class ServedRound:
    """A round served and not yet committed: its STEP frame (to tell an identical retry), the
    frames sent (K REPLY and the COMPLETION, resent on a retry) and the K draft tokens."""

    step: Step
    step_frame: bytes
    frames: tuple[bytes, ...]
    tokens: tuple[int, ...]


@dataclass(frozen=True)
class WorkerSlot:
    """One slot of the worker. ``generation`` is the highest ever opened (0: never; it is never
    live); ``owner`` the connection whose RESET opened the live generation (None when not live);
    ``committed_token`` is ``x_0`` of the next round."""

    committed_token: int
    generation: int = 0
    live: bool = False
    owner: int | None = None
    seed: int = 0
    committed: int = 0
    last_round: int | None = None
    open: ServedRound | None = None


@dataclass(frozen=True)
class WorkerState:
    """The whole worker (one process): its configuration and draft model, its open connections,
    its slots (never dropped) and its counters."""

    config: Hello
    model: DraftModel
    #: (connection, link) pairs of the open connections, sorted by connection
    links: tuple[tuple[int, Link], ...] = ()
    slots: tuple[WorkerSlot, ...] = ()
    #: (name, count) pairs, sorted by name, zero counts left out
    counters: tuple[tuple[str, int], ...] = field(default=())

    def link(self, connection: int) -> Link | None:
        return dict(self.links).get(connection)


@dataclass(frozen=True)
class Connect:
    """A target connected; the worker's HELLO on this connection carries ``session_id``."""

    connection: int
    session_id: int


@dataclass(frozen=True)
class AnswerTimeout:
    """The worker's negotiation watchdog fired on ``connection``."""

    connection: int


Event = Union[Connect, FrameIn, AnswerTimeout, Disconnect]


@dataclass(frozen=True)
class Draw:
    """One PROPOSAL draw: its full key (key and counter words) and the 24-bit value (R22)."""

    key: DrawKey
    u24: int


@dataclass(frozen=True)
class Output:
    """What the worker does on one event: its verdict (and the reason of a rejection), the frames
    it sends in order, whether it then ends the connection, and the draws it made.

    ``proposal`` is the served round's chain with its numerical margins (tie gaps, exp
    margins), which describe the round rather than answer it."""

    kind: str
    reason: str | None = None
    frames: tuple[bytes, ...] = ()
    close: bool = False
    draws: tuple[Draw, ...] = ()
    proposal: ProposalResult | None = None


# ---------------------------------------------------------------- state helpers


@defines("R01", "R05", "R27")
def check_model(model: DraftModel, config: Hello) -> None:
    """Refuse (BAD_SHAPE, TOKEN_OUT_OF_RANGE) a draft model that does not fit the configuration:
    K rows of V logits, factors [V, r] and [r, V], a start token in 0..V-1."""
    if len(model.base_logits) != config.depth or any(len(row) != config.vocab for row in model.base_logits):
        raise refuse("BAD_SHAPE", f"base logits must be [{config.depth}, {config.vocab}] (depth, vocab)")
    if len(model.markov_left) != config.vocab:
        raise refuse("BAD_SHAPE", f"the left Markov factor must have {config.vocab} rows")
    check_factors(model.start_token, model.markov_left, model.markov_right)


@defines("R12", "R24", "R27")
def initial_state(config: Hello, model: DraftModel) -> WorkerState:
    """A worker with no connection yet: slots 0..max_slots-1 at generation 0, ``x_0`` the start token."""
    check_config(config)
    check_model(model, config)
    slots = tuple(WorkerSlot(committed_token=model.start_token) for _ in range(config.max_slots))
    return WorkerState(config=config, model=model, slots=slots)


@defines("R25")
def counter(state: WorkerState, name: str) -> int:
    """The count of a reason code or an event counter (0 when it never happened)."""
    return dict(state.counters).get(name, 0)


def counted(state: WorkerState, *names: str) -> WorkerState:
    counts = dict(state.counters)
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return replace(state, counters=tuple(sorted(counts.items())))


def with_slot(state: WorkerState, index: int, slot: WorkerSlot) -> WorkerState:
    slots = list(state.slots)
    slots[index] = slot
    return replace(state, slots=tuple(slots))


def with_link(state: WorkerState, connection: int, link: Link | None) -> WorkerState:
    """``state`` with ``connection``'s link set, or removed when ``link`` is None (the connection ended)."""
    links = dict(state.links)
    links.pop(connection, None)
    if link is not None:
        links[connection] = link
    return replace(state, links=tuple(sorted(links.items())))


def open_link(state: WorkerState, connection: int) -> Link:
    """The open connection ``connection`` (ValueError: the event list names a connection that is not open)."""
    link = state.link(connection)
    if link is None:
        raise ValueError(f"connection {connection} is not open")
    return link


@defines("R17", "R24", "R28")
def live_here(slot: WorkerSlot, connection: int) -> bool:
    """Whether the slot's generation is live on ``connection`` (the one whose RESET opened it)."""
    return slot.live and slot.owner == connection


def refused(
    state: WorkerState, code: str, frames: tuple[bytes, ...] = (), close: bool = False
) -> tuple[WorkerState, Output]:
    return counted(state, code), Output(REJECT, code, frames, close)


def accepted(state: WorkerState, *also: str) -> tuple[WorkerState, Output]:
    return counted(state, "accepted", *also), Output(ACCEPT)


# ---------------------------------------------------------------- connections and negotiation


@defines("R12", "R13")
def connect(state: WorkerState, connection: int, session_id: int) -> tuple[WorkerState, Output]:
    """A target connected: the worker sends its HELLO (its configuration, this session ID) and awaits the answer."""
    if state.link(connection) is not None:
        raise ValueError(f"connection {connection} is already open")
    hello = replace(state.config, session_id=session_id)
    state = counted(with_link(state, connection, Link(AWAITING_ANSWER, hello)), "connections")
    return state, Output(ACCEPT, frames=(encode_frame(hello),))


@defines("R12", "R18")
def decode_before_answer(data: bytes, hello: Hello) -> Message | V1Greedy:
    """Decode the first frame of a connection: step 3 of the decoding order is the worker's.

    Before its HELLO is accepted only a HELLO_ANSWER is decoded under the worker's HELLO;
    any other v2 type but HELLO is V2_BEFORE_HELLO before its payload is looked at.
    """
    try:
        return decode_frame(data, None)
    except WireReject as error:
        if (
            error.code == "V2_BEFORE_HELLO"
            and parse_header(data[:HEADER_SIZE]).message_type == layout.HELLO_ANSWER.code
        ):
            return decode_frame(data, hello)
        raise


@defines("R12", "R13", "R16")
def await_answer(state: WorkerState, data: bytes, connection: int, link: Link) -> tuple[WorkerState, Output]:
    """The first frame on a connection: only the HELLO_ANSWER accepting the worker's HELLO turns v2 on.

    Anything else ends the connection (``close``) with nothing sent and no slot touched:
    a frame refused while decoding, a frame other than a HELLO_ANSWER, an answer for
    another session (checked before the status) or with an unknown status. A refusal
    (status 1) is a valid answer: ``accept``, then ``close``.
    """
    ended = with_link(state, connection, None)
    try:
        message = decode_before_answer(data, link.hello)
        if not isinstance(message, HelloAnswer):
            return refused(ended, "UNEXPECTED_MESSAGE", close=True)
        if message.session_id != link.session_id:
            return refused(ended, "SESSION_MISMATCH", close=True)
        validate_message(message, link.hello)
    except WireReject as error:
        return refused(ended, error.code, close=True)
    if message.status == layout.HELLO_REFUSED:
        state, _ = accepted(ended, "hello_refused")
        return state, Output(ACCEPT, close=True)
    return accepted(with_link(state, connection, replace(link, phase=NEGOTIATED)))


@defines("R12", "R28")
def answer_timeout(state: WorkerState, connection: int) -> tuple[WorkerState, Output]:
    """The watchdog ends a connection still awaiting its answer; otherwise it is ignored."""
    link = state.link(connection)
    if link is None or link.phase != AWAITING_ANSWER:
        return counted(state, "ignored_timers"), Output(IGNORE)
    return counted(with_link(state, connection, None), "answer_timeouts"), Output(ACCEPT, close=True)


@defines("R17", "R24")
def disconnect(state: WorkerState, connection: int) -> tuple[WorkerState, Output]:
    """The link ended: its generations end (kept, never reopened), their open rounds are discarded,
    its negotiation is forgotten. Nothing is sent."""
    open_link(state, connection)
    slots = tuple(
        replace(slot, live=False, owner=None, open=None) if live_here(slot, connection) else slot
        for slot in state.slots
    )
    return counted(with_link(replace(state, slots=slots), connection, None), "disconnects"), Output(ACCEPT)


# ---------------------------------------------------------------- commands


@defines("R17", "R24", "R28")
def receive_reset(state: WorkerState, reset: Reset, data: bytes, connection: int) -> tuple[WorkerState, Output]:
    """Open a higher generation of the slot on this connection, with its seed, committed position and token.

    Refused in this order: the slot is exhausted (2^32 - 1), held by another
    connection's live generation (SLOT_HELD, R28), or the generation is not above
    the slot's (DUPLICATE_GENERATION, STALE_GENERATION, R24). Token -1 (an empty
    prefix) conditions the next round on the draft model's start token (R01).
    """
    slot = state.slots[reset.slot]
    if slot.generation == LAST_GENERATION:
        return refused(state, "SLOT_EXHAUSTED")
    if slot.live and slot.owner != connection:
        return refused(state, "SLOT_HELD")
    if reset.generation <= slot.generation:
        return refused(state, "DUPLICATE_GENERATION" if reset.generation == slot.generation else "STALE_GENERATION")
    token = state.model.start_token if reset.token == layout.NO_TOKEN else reset.token
    fresh = WorkerSlot(token, reset.generation, True, connection, reset.seed, reset.committed)
    return accepted(with_slot(state, reset.slot, fresh))


@defines("R16", "R25")
def failed_completion(state: WorkerState, step: Step) -> bytes:
    """The FAILED COMPLETION of a STEP: its route and context echoed, the negotiated depth as
    ``row_count``, no reply bytes (``reply_checksum`` = CRC-32C of nothing = 0)."""
    return encode_frame(replace(completion_for(step, (), layout.STATUS_FAILED), row_count=state.config.depth))


def fail_step(state: WorkerState, step: Step, code: str) -> tuple[WorkerState, Output]:
    """Refuse a STEP with ``code`` and answer it with one FAILED COMPLETION (R16, R25)."""
    return refused(counted(state, "rounds_failed"), code, (failed_completion(state, step),))


@defines("R16", "R17", "R19", "R24", "R28")
def step_problem(slot: WorkerSlot, step: Step, data: bytes, connection: int) -> str | None:
    """Why a stateless-valid STEP is not served, or None; ``DUPLICATE`` for the open round's own STEP.

    In order: the generation live on this connection (STALE_GENERATION), the open
    round (an identical retry, else UNEXPECTED_MESSAGE: busy), a fresh round ID
    (DUPLICATE_ROUND, STALE_ROUND), the committed position (POSITION_MISMATCH).
    """
    if not live_here(slot, connection) or step.generation != slot.generation:
        return "STALE_GENERATION"
    if slot.open is not None:
        return DUPLICATE if data == slot.open.step_frame else "UNEXPECTED_MESSAGE"
    if slot.last_round is not None and step.round <= slot.last_round:
        return "DUPLICATE_ROUND" if step.round == slot.last_round else "STALE_ROUND"
    if step.anchor != slot.committed:
        return "POSITION_MISMATCH"
    return None


@defines("R14", "R22")
def support_policy(step: Step) -> SupportPolicy:
    """The STEP's support policy: 0 asks for dense rows, k > 0 for top-k rows (R07, R14)."""
    return SupportPolicy.dense() if step.support_policy == 0 else SupportPolicy.top_k(step.support_policy)


@defines("R01", "R22", "R24")
def round_proposal(model: DraftModel, slot: WorkerSlot, step: Step) -> tuple[ProposalResult, tuple[Draw, ...]]:
    """The round's proposal chain and its draws: the draft model's rows conditioned on the slot's
    committed token (``x_0``), drawn under (seed, generation, round, anchor + i - 1, PROPOSAL, 0)."""
    identity = RngIdentity(slot.seed, step.generation, step.round, step.anchor)
    inp = ProposalInput(
        model.base_logits,
        model.markov_left,
        model.markov_right,
        slot.committed_token,
        step.temperature,
        support_policy(step),
        identity,
    )
    result = proposal_chain(inp)
    return result, tuple(Draw(proposal_key(identity, row.index), row.draw.u24) for row in result.rows)


@defines("R01", "R15", "R16", "R20", "R22")
def round_frames(config: Hello, step: Step, result: ProposalResult) -> tuple[bytes, ...]:
    """The frames of a served round: one REPLY per draft (dense padded to the stride, or sparse),
    then the COMPLETION with status OK over their exact bytes."""
    replies = [
        encode_frame(
            reply_from_row(
                step.session_id,
                step.slot,
                step.generation,
                step.round,
                row.draw.position,
                row.token,
                row.q,
                config.dense_stride,
            )
        )
        for row in result.rows
    ]
    return (*replies, encode_frame(completion_for(step, replies)))


@defines("R01", "R16", "R22", "R24")
def serve(state: WorkerState, step: Step, data: bytes) -> tuple[WorkerState, Output]:
    """Sample and send the round; it stays open until its COMMIT. A draft model that cannot
    propose (the spec refuses its weights) is answered with a FAILED COMPLETION."""
    slot = state.slots[step.slot]
    used = replace(slot, last_round=step.round)
    try:
        result, draws = round_proposal(state.model, slot, step)
    except SpecError:
        state = counted(with_slot(state, step.slot, used), "accepted", "rounds_failed")
        return state, Output(ACCEPT, frames=(failed_completion(state, step),))
    frames = round_frames(state.config, step, result)
    served = ServedRound(step, data, frames, tuple(result.tokens))
    state = counted(with_slot(state, step.slot, replace(used, open=served)), "accepted", "rounds_served")
    return state, Output(ACCEPT, frames=frames, draws=draws, proposal=result)


@defines("R01", "R14", "R16", "R22", "R24", "R25")
def receive_step(
    state: WorkerState, step: Step, data: bytes, connection: int, link: Link
) -> tuple[WorkerState, Output]:
    """Serve a STEP, resend an identical retry's frames, or refuse it (FAILED COMPLETION, or nothing
    for another session or an unknown slot)."""
    try:
        validate_message(step, link.hello)
    except WireReject as error:
        if error.code in UNANSWERED_STEP_REASONS:
            return refused(state, error.code)
        return fail_step(state, step, error.code)
    slot = state.slots[step.slot]
    problem = step_problem(slot, step, data, connection)
    if problem == DUPLICATE:
        assert slot.open is not None
        return counted(state, "duplicate_retries"), Output(DUPLICATE, frames=slot.open.frames)
    if problem is not None:
        return fail_step(state, step, problem)
    return serve(state, step, data)


@defines("R01", "R16", "R17")
def receive_commit(state: WorkerState, commit: Commit, data: bytes, connection: int) -> tuple[WorkerState, Output]:
    """Close the open round: the committed position moves past the emitted tokens and the committed
    token becomes the correction or bonus, or with -1 the last accepted draft (R01)."""
    slot = state.slots[commit.slot]
    if not live_here(slot, connection) or commit.generation != slot.generation:
        return refused(state, "STALE_GENERATION")
    current = slot.open
    if current is None or commit.round != current.step.round:
        stale = slot.last_round is not None and commit.round <= slot.last_round
        return refused(state, "STALE_ROUND" if stale else "UNEXPECTED_MESSAGE")
    if commit.new_committed != commit_target(current.step.anchor, commit.accepted, commit.token):
        return refused(state, "POSITION_MISMATCH")
    token = current.tokens[commit.accepted - 1] if commit.token == layout.NO_TOKEN else commit.token
    return accepted(
        with_slot(state, commit.slot, replace(slot, committed=commit.new_committed, committed_token=token, open=None))
    )


@defines("R17", "R24")
def receive_cancel(state: WorkerState, cancel: Cancel, data: bytes, connection: int) -> tuple[WorkerState, Output]:
    """End the slot's generation live on this connection and discard its open round."""
    slot = state.slots[cancel.slot]
    if not live_here(slot, connection) or cancel.generation != slot.generation:
        return refused(state, "STALE_GENERATION")
    return accepted(with_slot(state, cancel.slot, replace(slot, live=False, owner=None, open=None)))


#: A handler takes the one message type that keys it in HANDLERS, which a union parameter cannot say: ``Any``.
Handler = Callable[[WorkerState, Any, bytes, int], tuple[WorkerState, Output]]
HANDLERS: dict[type, Handler] = {Reset: receive_reset, Commit: receive_commit, Cancel: receive_cancel}


@defines("R12", "R17", "R18", "R19")
def command(state: WorkerState, data: bytes, connection: int, link: Link) -> tuple[WorkerState, Output]:
    """A frame on a negotiated connection: decoded and checked under the worker's HELLO, then routed.

    A frame refused while decoding, and a message a target never sends (HELLO_ANSWER,
    HELLO, REPLY, COMPLETION, v1), change nothing and get no answer.
    """
    try:
        message = decode_frame(data, link.hello)
    except WireReject as error:
        return refused(state, error.code)
    if isinstance(message, Step):
        return receive_step(state, message, data, connection, link)
    if not isinstance(message, (Reset, Commit, Cancel)):  # HELLO_ANSWER, HELLO, REPLY, COMPLETION, v1
        return refused(state, "UNEXPECTED_MESSAGE")
    try:
        validate_message(message, link.hello)
    except WireReject as error:
        return refused(state, error.code)
    return HANDLERS[type(message)](state, message, data, connection)


@defines("R12", "R16")
def receive_frame(state: WorkerState, data: bytes, connection: int) -> tuple[WorkerState, Output]:
    """A frame from the target: the answer to the HELLO first, then commands."""
    link = open_link(state, connection)
    if link.phase == AWAITING_ANSWER:
        return await_answer(state, data, connection, link)
    return command(state, data, connection, link)


@defines("R01", "R12", "R13", "R16", "R17", "R22", "R24", "R25", "R28")
def step(state: WorkerState, event: Event) -> tuple[WorkerState, Output]:
    """The worker's transition: the new state and what it does on ``event``."""
    if isinstance(event, Connect):
        return connect(state, event.connection, event.session_id)
    if isinstance(event, FrameIn):
        return receive_frame(state, event.data, event.connection)
    if isinstance(event, AnswerTimeout):
        return answer_timeout(state, event.connection)
    if isinstance(event, Disconnect):
        return disconnect(state, event.connection)
    raise TypeError(f"not a worker event: {event!r}")


def run(state: WorkerState, events: Sequence[Event]) -> tuple[WorkerState, list[Output]]:
    """Fold :func:`step` over ``events``: the final state and every output."""
    outputs = []
    for event in events:
        state, output = step(state, event)
        outputs.append(output)
    return state, outputs
