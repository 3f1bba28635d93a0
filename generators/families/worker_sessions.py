"""Vector family ``worker_sessions``: event sequences through the wire v2 worker (R01, R12, R13, R16, R17, R22, R24, R25, R28).

Each case hands an implementation the worker's configuration (the HELLO it
offers, without a session ID), its draft model (``proposal_chain``'s: base
logits, Markov factors, and the start token) and a list of events, each on a
numbered connection: a target connects (with the session ID of the worker's
HELLO there), sends a frame, the worker's answer watchdog fires, the link ends.
The answer is, per event, the worker's verdict, the frames it sends back byte
for byte, whether it ends the connection and the PROPOSAL draws it made; then
the open connections, every slot and the counters, from
``qconform.spec.wire.worker.step`` (docs/formats/worker_sessions.md).
"""

from __future__ import annotations

import random
from dataclasses import replace
from fractions import Fraction
from typing import Iterator

from qconform.generators.encoding import decode_blob, decode_u64, encode_blob, encode_u64, encode_word, f32_bits
from qconform.generators.families.proposal_chain import matrix_blob, matrix_rows, random_matrix
from qconform.generators.families.wire_frames import REASON_SCHEMA, fields_schema, fields_to_json, hello_from_json
from qconform.generators.registry import Case, Family, Group, Note
from qconform.generators.schemas import blob_schema
from qconform.generators.schemas import closed_object as closed
from qconform.spec.constants import M
from qconform.spec.floats import F32_NEG_INF
from qconform.spec.qrow import QRow
from qconform.spec.wire import layout
from qconform.spec.wire.codec import completion_for, encode_frame, encode_v1, reply_from_row
from qconform.spec.wire.header import seal
from qconform.spec.wire.messages import Cancel, Commit, Hello, HelloAnswer, Message, Reset, Step, ascii_field
from qconform.spec.wire.negotiation import example_config
from qconform.spec.wire.reasons import REASONS
from qconform.spec.wire.receiver import LAST_GENERATION, Disconnect, FrameIn
from qconform.spec.wire.worker import (
    EVENT_COUNTERS,
    PHASES,
    VERDICT_KINDS,
    AnswerTimeout,
    Connect,
    DraftModel,
    Event,
    Output,
    WorkerState,
    counter,
    initial_state,
    run,
)

FAMILY_RULES = ("R01", "R12", "R13", "R16", "R17", "R22", "R24", "R25", "R28")

NOTES = {
    "NEGOTIATION": Note(
        "FUNCTIONALITY",
        "The first frame on a connection must be the HELLO_ANSWER accepting the worker's HELLO; anything else "
        "ends the connection with nothing sent (R12, R13).",
        "Catches a worker that serves before its HELLO is accepted (issue #20, breach 1).",
    ),
    "GENERATIONS": Note(
        "FUNCTIONALITY",
        "RESET above, at and below the slot's generation, from the same link or another, after a reconnection, "
        "at exhaustion (R17, R24, R28).",
        "Catches a generation reused across links, a slot taken over from its live link, or a RESET ignored.",
    ),
    "SERVED": Note(
        "BASIC",
        "A STEP is served: K REPLY rows drawn under the PROPOSAL keys, conditioned on the committed token, and "
        "a COMPLETION with status OK (R01, R16, R22).",
        "Catches rows drawn under another key or conditioned on another token.",
    ),
    "FAILED_STEP": Note(
        "FUNCTIONALITY",
        "A STEP the worker cannot serve: one FAILED COMPLETION, or nothing for another session or slot (R16, R25).",
        "Catches a worker that serves a stale STEP, or leaves the target waiting for a round.",
    ),
    "RETRY": Note(
        "FUNCTIONALITY",
        "A STEP retried identically (the identical frames, no draw) or differently (busy slot) (R24).",
        "Catches a redraw under a used key, or a retry answered with other bytes.",
    ),
    "COMMITTED_TOKEN": Note(
        "FUNCTIONALITY",
        "The token the next round's first row conditions on: the COMMIT's token, the last accepted draft for "
        "token -1, the RESET's token or the start token (R01).",
        "Catches a round conditioned on a stale committed token.",
    ),
    "ISSUE_20": Note(
        "FUNCTIONALITY",
        "A sequence of issue #20 verbatim.",
        "Catches the two breaches a user found in the bundled worker endpoint.",
    ),
    "DENSE": Note("BASIC", "Dense rows, padded with zero entries to the dense stride (R20).", "Catches padding."),
    "SPARSE": Note("BASIC", "Sparse top-k rows (R07).", "Catches a support other than the top k."),
    "RANDOM_SEQUENCE": Note(
        "FUNCTIONALITY",
        "A random mix of commands and faults over two slots and two links (fixed generator seed).",
        "Catches state-machine paths no hand-written sequence visits.",
    ),
}

#: The answer's counter names: the reason codes and the event counters, sorted.
COUNTER_NAMES: tuple[str, ...] = tuple(sorted((*REASONS, *EVENT_COUNTERS)))
#: The least exp margin (ulps) of a served row: the torch candidate's declared exp error is 2^-20 ulp.
LEAST_EXP_MARGIN = Fraction(1, 1 << 20)


# ---------------------------------------------------------------- solve


def config_from_json(obj: dict) -> Hello:
    """The worker's configuration (a HELLO without its session ID; each connection's HELLO gets its own)."""
    return hello_from_json({**obj, "session_id": "0"})


def config_to_json(config: Hello) -> dict:
    out = fields_to_json(config)
    del out["session_id"]
    return out


def model_from_json(obj: dict) -> DraftModel:
    rows = [tuple(row) for row in matrix_rows(obj["base_logits"])]
    left = [tuple(row) for row in matrix_rows(obj["markov"]["left"])]
    right = [tuple(row) for row in matrix_rows(obj["markov"]["right"])]
    return DraftModel(tuple(rows), tuple(left), tuple(right), obj["start_token"])


def model_to_json(model: DraftModel) -> dict:
    return {
        "base_logits": matrix_blob(model.base_logits),
        "markov": {"left": matrix_blob(model.markov_left), "right": matrix_blob(model.markov_right)},
        "start_token": model.start_token,
    }


def event_from_json(obj: dict) -> Event:
    connection = obj["connection"]
    if "connect" in obj:
        return Connect(connection, decode_u64(obj["session_id"]))
    if "frame" in obj:
        return FrameIn(bytes(decode_blob(obj["frame"], "u8")[0]), connection)
    if "answer_timeout" in obj:
        return AnswerTimeout(connection)
    return Disconnect(connection)


def output_json(output: Output) -> dict:
    out: dict = {"verdict": output.kind}
    if output.reason is not None:
        out["reason"] = output.reason
    out["frames"] = [encode_blob("u8", list(frame)) for frame in output.frames]
    out["close"] = output.close
    out["draws"] = [
        {
            "position": draw.key.position,
            "key": [encode_word(w) for w in draw.key.key_words()],
            "counter": [encode_word(w) for w in draw.key.counter_words()],
            "u24": draw.u24,
        }
        for draw in output.draws
    ]
    return out


def state_json(state: WorkerState) -> dict:
    connections = [
        {"connection": number, "phase": link.phase, "session_id": encode_u64(link.session_id)}
        for number, link in state.links
    ]
    slots = [
        {
            "slot": index,
            "generation": slot.generation,
            "live": slot.live,
            "owner": slot.owner,
            "seed": encode_u64(slot.seed),
            "committed": slot.committed,
            "committed_token": slot.committed_token,
            "last_round": slot.last_round,
            "open": None
            if slot.open is None
            else {"round": slot.open.step.round, "anchor": slot.open.step.anchor, "tokens": list(slot.open.tokens)},
        }
        for index, slot in enumerate(state.slots)
    ]
    return {"connections": connections, "slots": slots}


def counters_json(state: WorkerState) -> dict:
    assert set(dict(state.counters)) <= set(COUNTER_NAMES), state.counters
    return {name: counter(state, name) for name in COUNTER_NAMES if counter(state, name)}


def play(case_input: dict) -> tuple[WorkerState, list[Output]]:
    """Run the worker over the case's events from its initial state."""
    state = initial_state(config_from_json(case_input["config"]), model_from_json(case_input["model"]))
    return run(state, [event_from_json(obj) for obj in case_input["events"]])


def solve(case_input: dict) -> dict:
    """Every event's output, the final connections and slots, the nonzero counters."""
    state, outputs = play(case_input)
    return {"outputs": [output_json(o) for o in outputs], "final": state_json(state), "counters": counters_json(state)}


# ---------------------------------------------------------------- building sequences

#: The development configurations: small vocabularies so that dense rows stay small.
V32 = example_config(vocab=32, dense_stride=40, max_support=8, max_slots=2, max_requests=2)
V64 = example_config(vocab=64, max_support=16, max_slots=2, max_requests=2)
V256 = example_config(vocab=256, max_support=16, max_slots=1, max_requests=1)
SESSION_BASE = 0x5E55_1010_0000_0000
DIGEST = bytes(range(32))
ONE = f32_bits(1.0)


def draft_model(seed: int, vocab: int, rank: int = 2, depth: int = 5) -> DraftModel:
    """A deterministic draft model: logits on a 2^-16 grid in [-4, 4), factors in [-2, 2)."""
    rng = random.Random(seed)
    logits = random_matrix(rng, depth, vocab, 2.0)
    left = random_matrix(rng, vocab, rank, 1.0)
    right = random_matrix(rng, rank, vocab, 1.0)
    return DraftModel(
        tuple(map(tuple, logits)), tuple(map(tuple, left)), tuple(map(tuple, right)), rng.randrange(vocab)
    )


MODELS: dict[int, DraftModel] = {
    32: draft_model(0x3017, 32),
    64: draft_model(0x3018, 64, 3),
    256: draft_model(0x3019, 256, 4),
}


class Script:
    """Builds one case's events: connections, the target's frames, watchdogs, disconnects."""

    def __init__(self, config: Hello = V32, model: DraftModel | None = None) -> None:
        self.config = config
        self.model = MODELS[config.vocab] if model is None else model
        self.events: list[dict] = []
        #: connection -> the session ID of the worker's HELLO on it
        self.sessions: dict[int, int] = {}
        self.connection = 1

    @property
    def session_id(self) -> int:
        return self.sessions[self.connection]

    def on(self, connection: int) -> Script:
        self.connection = connection
        return self

    def connect(self, connection: int, session_id: int | None = None) -> Script:
        """Connection ``connection`` opens (session ``SESSION_BASE + connection`` unless told)."""
        self.connection = connection
        sid = SESSION_BASE + connection if session_id is None else session_id
        self.sessions[connection] = sid
        self.events.append({"connect": True, "connection": connection, "session_id": encode_u64(sid)})
        return self

    def raw(self, data: bytes) -> bytes:
        self.events.append({"frame": encode_blob("u8", list(data)), "connection": self.connection})
        return data

    def send(self, message: Message) -> bytes:
        return self.raw(encode_frame(message))

    def answer(self, status: int = layout.HELLO_ACCEPTED, session_id: int | None = None, reason: str = "") -> bytes:
        sid = self.session_id if session_id is None else session_id
        return self.send(HelloAnswer(sid, status, ascii_field(reason)))

    def negotiated(self, connection: int, session_id: int | None = None) -> Script:
        self.connect(connection, session_id)
        self.answer()
        return self

    def reset(self, slot: int, generation: int, committed: int, seed: int = 0x5EED, token: int = -1) -> bytes:
        return self.send(Reset(self.session_id, seed, generation, committed, slot, token))

    def step(
        self, slot: int, generation: int, round_id: int, anchor: int, policy: int = 0, send: bool = True, **changes
    ) -> Step:
        message = Step(self.session_id, generation, round_id, anchor, policy, 1, ONE, slot, self.config.depth, DIGEST)
        message = replace(message, **changes)
        if send:
            self.send(message)
        return message

    def commit(self, step: Step, accepted: int, token: int = 7, new_committed: int | None = None, **changes) -> bytes:
        if new_committed is None:
            new_committed = (step.anchor + accepted + (token != layout.NO_TOKEN)) % (1 << 32)
        message = Commit(self.session_id, step.generation, step.round, new_committed, token, step.slot, accepted)
        return self.send(replace(message, **changes))

    def cancel(self, slot: int, generation: int) -> bytes:
        return self.send(Cancel(self.session_id, generation, slot))

    def timeout(self, connection: int | None = None) -> None:
        self.events.append(
            {"answer_timeout": True, "connection": self.connection if connection is None else connection}
        )

    def disconnect(self, connection: int | None = None) -> None:
        self.events.append({"disconnect": True, "connection": self.connection if connection is None else connection})


def corrupt(data: bytes) -> bytes:
    """``data`` with its last byte flipped (the checksum no longer matches)."""
    return data[:-1] + bytes([data[-1] ^ 0x01])


def served_rows_far_from_ties(outputs: list[Output]) -> str | None:
    """Why a served row of these outputs could be allocated otherwise by an FP64 worker, or None."""
    for index, output in enumerate(outputs):
        for row in [] if output.proposal is None else output.proposal.rows:
            if row.fp64_may_differ or row.exp_margin_ulp < LEAST_EXP_MARGIN:
                return f"event {index}, row {row.index}: fp64_may_differ or exp margin {row.exp_margin_ulp}"
    return None


def session_case(name: str, comment: str, flags: tuple[str, ...], script: Script, rules: tuple[str, ...]) -> Case:
    case_input = {
        "config": config_to_json(script.config),
        "model": model_to_json(script.model),
        "events": script.events,
    }
    state, outputs = play(case_input)
    problem = served_rows_far_from_ties(outputs)
    if problem is not None:
        raise AssertionError(f"worker_sessions/{name}: a served row is near a tie ({problem}); choose another model")
    rows = [row for o in outputs if o.proposal is not None for row in o.proposal.rows]
    flags += tuple(
        flag for flag, dense in (("DENSE", True), ("SPARSE", False)) if any((r.q.ids is None) == dense for r in rows)
    )
    expected = {
        "outputs": [output_json(o) for o in outputs],
        "final": state_json(state),
        "counters": counters_json(state),
    }
    return Case(
        name=name, comment=comment, rules=rules, flags=tuple(dict.fromkeys(flags)), input=case_input, expected=expected
    )


def ready(config: Hello = V32, slot: int = 0, generation: int = 1, committed: int = 100, **reset) -> Script:
    """A script whose connection 1 is negotiated and has RESET ``slot`` to ``generation`` at ``committed``."""
    s = Script(config)
    s.negotiated(1)
    s.reset(slot, generation, committed, **reset)
    return s


Scenario = tuple[str, str, tuple[str, ...], Script]


# ---------------------------------------------------------------- scenarios


def negotiation_cases() -> Iterator[Scenario]:
    s = ready()
    s.step(0, 1, 1, 100)
    yield "accepted", "The accepting HELLO_ANSWER turns v2 on; RESET and STEP are then served.", ("NEGOTIATION",), s

    s = Script()
    s.connect(1)
    s.answer(layout.HELLO_REFUSED, reason="VOCAB_MISMATCH")
    s.negotiated(2)
    s.reset(0, 1, 100)
    s.step(0, 1, 1, 100)
    yield (
        "refused",
        "A refusal (status 1) is a valid answer: accept, then close; a new connection negotiates and is served.",
        ("NEGOTIATION",),
        s,
    )

    for name, comment, status, session_delta, reason in (
        ("another-session", "An answer to another session ID: SESSION_MISMATCH, close.", 0, 1, ""),
        ("unknown-status", "An answer with status 2: UNKNOWN_STATUS, close.", 2, 0, ""),
        (
            "session-before-status",
            "Another session and status 2 at once: the session is checked first (SESSION_MISMATCH).",
            2,
            1,
            "",
        ),
    ):
        s = Script()
        s.connect(1)
        s.answer(status, s.session_id + session_delta, reason)
        yield name, comment, ("NEGOTIATION",), s

    s = Script()
    s.connect(1)
    s.raw(corrupt(encode_frame(HelloAnswer(s.session_id, 0, ascii_field("")))))
    yield "bad-checksum", "An accepting answer whose checksum fails: CHECKSUM_MISMATCH, close.", ("NEGOTIATION",), s

    s = Script()
    s.connect(1)
    s.connect(2)
    s.on(1).answer(session_id=s.sessions[2])
    s.on(2).answer()
    s.reset(0, 1, 100)
    s.step(0, 1, 1, 100)
    yield (
        "answer-of-the-other-link",
        "Two connections awaiting: connection 2's answer sent on connection 1 is SESSION_MISMATCH there; "
        "connection 2 negotiates and is served.",
        ("NEGOTIATION",),
        s,
    )

    before = Script()
    before.sessions[1] = SESSION_BASE + 1
    commands: tuple[tuple[str, Message], ...] = (
        ("step", before.step(0, 1, 1, 100, send=False)),
        ("commit", Commit(SESSION_BASE + 1, 1, 1, 103, 7, 0, 2)),
        ("cancel", Cancel(SESSION_BASE + 1, 1, 0)),
        ("completion", completion_for(before.step(0, 1, 1, 100, send=False), [])),
    )
    for name, message in commands:
        s = Script()
        s.connect(1)
        s.send(message)
        yield (
            f"{name}-before-answer",
            f"A {name.upper()} before the answer: V2_BEFORE_HELLO, close.",
            ("NEGOTIATION",),
            s,
        )

    s = Script()
    s.connect(1)
    s.raw(seal(encode_frame(before.step(0, 1, 1, 100, send=False))[:12] + (99).to_bytes(4, "little") + bytes(4)))
    yield (
        "before-answer-ahead-of-size",
        "A STEP header declaring a 99-byte payload before the answer: V2_BEFORE_HELLO (step 3) before "
        "UNEXPECTED_SIZE (step 4).",
        ("NEGOTIATION",),
        s,
    )

    for name, comment, data in (
        (
            "hello-first",
            "A HELLO from the target: UNEXPECTED_MESSAGE, close.",
            encode_frame(replace(V32, session_id=9)),
        ),
        ("v1-first", "A v1 greedy frame: UNEXPECTED_MESSAGE (the worker serves no v1), close.", encode_v1([1, 2])),
        ("truncated-first", "Three bytes: TRUNCATED, close.", b"QSM"),
        ("bad-magic-first", "A bad magic: BAD_MAGIC, close.", b"JUNK" + bytes(16)),
    ):
        s = Script()
        s.connect(1)
        s.raw(data)
        yield name, comment, ("NEGOTIATION",), s

    s = Script()
    s.connect(1)
    s.timeout()
    s.timeout()
    s.negotiated(2)
    s.timeout()
    s.reset(0, 1, 100)
    s.step(0, 1, 1, 100)
    yield (
        "answer-timeout",
        "The watchdog closes a connection awaiting its answer; it is ignored once the connection ended and on "
        "a negotiated one, which is served.",
        ("NEGOTIATION",),
        s,
    )

    s = ready()
    s.answer()
    s.send(replace(V32, session_id=s.session_id))
    s.raw(encode_v1([3]))
    r1 = s.step(0, 1, 1, 100, send=False)
    one = QRow.dense([M] + [0] * (V32.vocab - 1))
    s.send(reply_from_row(s.session_id, 0, 1, 1, 100, 0, one, V32.dense_stride))
    s.send(completion_for(r1, []))
    s.send(r1)
    s.commit(r1, 2)
    yield (
        "after-negotiation",
        "A second HELLO_ANSWER, a HELLO, a v1 frame, a REPLY and a COMPLETION after negotiation: "
        "UNEXPECTED_MESSAGE, nothing sent, the link stays; the STEP is served.",
        ("NEGOTIATION", "SERVED"),
        s,
    )

    for name, comment, fault in (
        ("checksum", "a COMMIT whose checksum fails (CHECKSUM_MISMATCH)", corrupt),
        ("bad-magic", "a COMMIT with a bad magic (BAD_MAGIC)", lambda data: b"QSMQ" + data[4:]),
    ):
        s = ready()
        r1 = s.step(0, 1, 1, 100)
        s.raw(fault(encode_frame(Commit(s.session_id, 1, 1, 103, 7, 0, 2))))
        s.disconnect()
        s.negotiated(2)
        s.reset(0, 2, 103, token=7)
        s.step(0, 2, 1, 103)
        yield (
            f"refused-header-{name}",
            f"After negotiation, {comment}: refused, nothing sent, no close; the round stays open until the link "
            "ends, and a new link RESETs and is served.",
            ("NEGOTIATION", "GENERATIONS"),
            s,
        )


def reset_cases() -> Iterator[Scenario]:
    s = ready()
    s.step(0, 1, 1, 100)
    s.reset(0, 3, 100, seed=0xABCD)
    s.step(0, 1, 2, 100)
    s.step(0, 3, 1, 100)
    yield (
        "above-same-link",
        "A RESET above the live generation on its own link: the open round is discarded; generation 1 is stale, "
        "generation 3 is served under the new seed.",
        ("GENERATIONS", "SERVED"),
        s,
    )

    s = ready(generation=4)
    s.reset(0, 4, 100, seed=0xBAD)
    s.reset(0, 2, 100, seed=0xBAD)
    s.step(0, 4, 1, 100)
    yield (
        "at-and-below",
        "A RESET to the slot's generation is DUPLICATE_GENERATION, one below STALE_GENERATION; the live "
        "generation keeps its seed.",
        ("GENERATIONS",),
        s,
    )

    s = ready()
    r1 = s.step(0, 1, 1, 100)
    s.negotiated(2)
    s.reset(0, 2, 0, seed=0xE71)
    s.on(1).commit(r1, 1)
    s.on(2).step(0, 2, 1, 0)
    s.on(1).cancel(0, 1)
    s.on(2).reset(0, 2, 0, seed=0xE71)
    s.step(0, 2, 1, 0)
    yield (
        "held-by-another-link",
        "A second link's RESET of a slot live on the first is SLOT_HELD (R28): the first link's COMMIT still "
        "lands, the second link's STEP is stale; after the first link CANCELs, the second RESETs and is served.",
        ("GENERATIONS", "FAILED_STEP"),
        s,
    )

    s = ready(generation=4)
    s.step(0, 4, 1, 100)
    s.disconnect()
    s.negotiated(1)
    s.reset(0, 4, 100)
    s.reset(0, 3, 100)
    s.reset(0, 5, 100)
    s.step(0, 5, 1, 100)
    yield (
        "after-reconnection",
        "After the link ends, a new connection under the same number must RESET above generation 4 "
        "(DUPLICATE_GENERATION, STALE_GENERATION, then 5 served).",
        ("GENERATIONS",),
        s,
    )

    s = ready(generation=LAST_GENERATION - 1)
    s.reset(0, LAST_GENERATION, 100)
    s.step(0, LAST_GENERATION, 1, 100)
    s.reset(0, LAST_GENERATION, 100)
    s.cancel(0, LAST_GENERATION)
    s.reset(0, LAST_GENERATION, 100)
    s.negotiated(2)
    s.reset(0, LAST_GENERATION, 100)
    s.reset(1, 1, 0)
    yield (
        "exhaustion",
        "Generation 2^32 - 1 opens and is served; then every RESET of the slot is SLOT_EXHAUSTED, live or not, "
        "from any link; slot 1 is unaffected.",
        ("GENERATIONS",),
        s,
    )

    s = ready(token=9)
    r1 = s.step(0, 1, 1, 100)
    s.commit(r1, 2, token=11)
    s.reset(0, 2, 103)
    s.step(0, 2, 1, 103)
    yield (
        "committed-token",
        "RESET with token 9 conditions round 1 on 9; after a COMMIT of token 11, a RESET with token -1 (empty "
        "prefix) conditions on the model's start token, not on 11.",
        ("COMMITTED_TOKEN", "SERVED"),
        s,
    )

    s = Script()
    s.negotiated(1)
    s.send(Reset(s.session_id + 5, 1, 1, 100, 0, -1))
    s.reset(2, 1, 100)
    s.reset(0, 1, 100, token=V32.vocab)
    s.reset(0, 1, 100, token=-2)
    s.step(0, 1, 1, 100)
    yield (
        "stateless-refusals",
        "RESETs under another session, for slot 2 of 2, and with tokens V and -2 are refused with no frame; the "
        "slot stays at generation 0 and its STEP is stale.",
        ("GENERATIONS", "FAILED_STEP"),
        s,
    )


def step_cases() -> Iterator[Scenario]:
    s = Script()
    s.negotiated(1)
    s.step(0, 0, 1, 0)
    s.step(0, 1, 1, 0)
    yield (
        "before-any-reset",
        "A STEP on a slot never RESET, for generation 0 or 1: STALE_GENERATION and a FAILED COMPLETION.",
        ("FAILED_STEP",),
        s,
    )

    s = ready(generation=2)
    s.step(0, 1, 1, 100)
    s.step(0, 3, 1, 100)
    yield (
        "stale-and-future-generation",
        "A STEP for a generation below or above the live one: STALE_GENERATION, FAILED.",
        ("FAILED_STEP",),
        s,
    )

    s = ready()
    r1 = s.step(0, 1, 1, 100)
    s.send(r1)
    s.step(0, 1, 1, 100, context_version=2)
    s.step(0, 1, 2, 100)
    s.send(r1)
    yield (
        "identical-and-differing-retry",
        "The open round's STEP again, byte for byte: duplicate, the identical frames, no draw. A STEP of the same "
        "round with another context version, or the next round, on the busy slot: UNEXPECTED_MESSAGE, FAILED.",
        ("RETRY", "FAILED_STEP"),
        s,
    )

    s = ready()
    s.step(2, 1, 1, 100)
    s.send(replace(s.step(0, 1, 1, 100, send=False), session_id=s.session_id + 1))
    s.step(0, 1, 1, 100)
    yield (
        "unknown-slot-and-session",
        "A STEP for slot 2 of 2 (TOO_MANY_SLOTS) or another session (SESSION_MISMATCH): nothing sent.",
        ("FAILED_STEP",),
        s,
    )

    s = ready()
    s.step(0, 1, 1, 99)
    s.step(0, 1, 1, 101)
    s.step(0, 1, 1, 100)
    yield (
        "wrong-anchor",
        "An anchor other than the committed position: POSITION_MISMATCH, FAILED; the round is not used.",
        ("FAILED_STEP",),
        s,
    )

    s = ready()
    r1 = s.step(0, 1, 5, 100)
    s.commit(r1, 5)
    s.send(r1)
    s.step(0, 1, 5, 106)
    s.step(0, 1, 4, 106)
    s.step(0, 1, 6, 106)
    yield (
        "round-after-commit",
        "After round 5 committed: the same STEP and round 5 again are DUPLICATE_ROUND, round 4 STALE_ROUND "
        "(FAILED); round 6 is served from the new committed position.",
        ("RETRY", "FAILED_STEP", "COMMITTED_TOKEN"),
        s,
    )

    s = ready()
    s.step(0, 1, 1, 100, depth=4)
    s.step(0, 1, 1, 100, policy=9)
    s.step(0, 1, 1, 100, temperature=0x7FC00000)
    s.step(0, 1, 1, 100, temperature=0x80000000)
    s.step(0, 1, 1, 100, temperature=0)
    s.step(0, 1, 1, 100)
    yield (
        "stateless-failed",
        "Depth 4 (DEPTH_MISMATCH), support 9 above 8 (SUPPORT_ABOVE_MAX), a NaN temperature (NON_FINITE_VALUE), "
        "-0.0 and +0.0 (NEGATIVE_VALUE): one FAILED COMPLETION each, row_count the negotiated 5; then served.",
        ("FAILED_STEP",),
        s,
    )

    tight = replace(example_config(vocab=32, max_support=32, max_slots=2, max_requests=2), max_reply_bytes=36 + 4 * 32)
    s = Script(tight, MODELS[32])
    s.negotiated(1)
    s.reset(0, 1, 100)
    s.step(0, 1, 1, 100, policy=17)
    s.step(0, 1, 1, 100, policy=16)
    yield (
        "reply-too-large",
        "max_reply_bytes = a dense row: top-17 asks for a larger reply (UNEXPECTED_SIZE, FAILED); top-16 fits.",
        ("FAILED_STEP",),
        s,
    )

    masked = MODELS[32]
    masked = replace(masked, base_logits=masked.base_logits[:2] + ((F32_NEG_INF,) * 32,) + masked.base_logits[3:])
    s = Script(V32, masked)
    s.negotiated(1)
    s.reset(0, 1, 100)
    r1 = s.step(0, 1, 1, 100)
    s.send(r1)
    s.step(0, 1, 2, 100)
    yield (
        "model-cannot-propose",
        "A draft model whose row 3 is all masked cannot propose (ALL_MASKED): the STEP is accepted and answered "
        "FAILED, no draw reported; its round ID is used (the retry is DUPLICATE_ROUND).",
        ("FAILED_STEP",),
        s,
    )

    s = ready()
    s.negotiated(2)
    s.step(0, 1, 1, 100)
    s.on(1).step(0, 1, 1, 100)
    yield (
        "another-links-generation",
        "A second link's STEP for the generation live on the first: STALE_GENERATION, FAILED; the first is served.",
        ("FAILED_STEP", "GENERATIONS"),
        s,
    )


def commit_cases() -> Iterator[Scenario]:
    for name, comment, accepted, token in (
        ("correction", "Correction after 2 accepted: committed anchor + 3, the next round conditions on 7.", 2, 7),
        ("bonus", "All 5 accepted and the bonus 9: committed anchor + 6, the next round conditions on 9.", 5, 9),
        (
            "early-end",
            "An early end after 3 (token -1): committed anchor + 3, the next round conditions on draft 3.",
            3,
            -1,
        ),
    ):
        s = ready()
        r1 = s.step(0, 1, 1, 100)
        s.commit(r1, accepted, token=token)
        s.step(0, 1, 2, 100 + accepted + (token >= 0))
        yield name, comment, ("COMMITTED_TOKEN", "SERVED"), s

    s = ready()
    r1 = s.step(0, 1, 3, 100)
    s.commit(r1, 2, generation=2)
    s.commit(r1, 2, round=4)
    s.commit(r1, 2, round=2)
    s.commit(r1, 2, new_committed=102)
    s.commit(r1, 0, token=-1)
    s.commit(r1, 6)
    s.commit(r1, 2, token=32)
    s.negotiated(2)
    s.send(Commit(s.session_id, 1, 3, 103, 7, 0, 2))
    s.on(1).step(0, 1, 4, 100)
    s.commit(r1, 2)
    s.commit(r1, 2)
    yield (
        "refusals",
        "COMMITs of another generation (STALE_GENERATION), an unserved round (UNEXPECTED_MESSAGE), an older "
        "round (STALE_ROUND), a wrong position and token -1 with 0 accepted (POSITION_MISMATCH), 6 accepted, "
        "token V, another link's: the round stays open (the next STEP is busy, FAILED), then commits; "
        "again: STALE_ROUND.",
        ("FAILED_STEP",),
        s,
    )


def cancel_cases() -> Iterator[Scenario]:
    s = ready()
    s.step(0, 1, 1, 100)
    s.cancel(0, 1)
    s.step(0, 1, 2, 100)
    s.cancel(0, 1)
    s.reset(0, 2, 100)
    s.step(0, 2, 1, 100)
    yield (
        "cancel-open-round",
        "CANCEL ends the generation and discards its open round: the next STEP and CANCEL are STALE_GENERATION; "
        "a RESET to generation 2 is served.",
        ("GENERATIONS", "FAILED_STEP"),
        s,
    )

    s = ready(generation=2)
    s.cancel(0, 1)
    s.cancel(0, 3)
    s.cancel(1, 1)
    s.negotiated(2)
    s.cancel(0, 2)
    s.on(1).step(0, 2, 1, 100)
    yield (
        "stale-and-foreign",
        "CANCELs of an older or later generation, of a slot never RESET and from another link are "
        "STALE_GENERATION; the generation stays live and is served.",
        ("GENERATIONS",),
        s,
    )


def disconnect_cases() -> Iterator[Scenario]:
    s = ready(generation=3, seed=0x1111)
    r1 = s.step(0, 3, 1, 100)
    s.disconnect()
    s.negotiated(2)
    s.send(replace(r1, session_id=s.session_id))
    s.step(0, 3, 2, 100)
    s.reset(0, 3, 100, seed=0x2222)
    s.reset(0, 4, 100, seed=0x2222)
    s.step(0, 4, 1, 100)
    yield (
        "mid-round",
        "A link ends with its round open: the generation ends, the round is discarded. On a new link the same "
        "STEP (under the new session) is STALE_GENERATION; a RESET must go above 3; generation 4 is served under "
        "its own seed (the old keys are never drawn again).",
        ("GENERATIONS", "FAILED_STEP"),
        s,
    )

    s = ready()
    s.step(0, 1, 1, 100)
    s.negotiated(2)
    s.reset(1, 1, 500)
    s.disconnect()
    s.connect(3)
    s.disconnect()
    s.on(1).step(0, 1, 2, 100)
    s.send(s.step(0, 1, 1, 100, send=False))
    yield (
        "other-links-end",
        "Another link's end (negotiated, or still awaiting its answer) leaves this link's generation and open "
        "round alone: its STEP retry is a duplicate, its next round busy.",
        ("GENERATIONS", "RETRY"),
        s,
    )


def breach_cases() -> Iterator[Scenario]:
    s = Script()
    s.connect(1)
    s.reset(0, 1, 0)
    s.connect(2)
    s.step(0, 1, 1, 0)
    yield (
        "serve-without-answer",
        "Issue #20, breach 1: connect, read the HELLO, send RESET + STEP without answering. The RESET ends the "
        "connection (V2_BEFORE_HELLO); on another connection so does the STEP. Nothing is served.",
        ("ISSUE_20", "NEGOTIATION"),
        s,
    )

    s = Script()
    s.connect(1)
    s.timeout()
    s.connect(2)
    s.raw(corrupt(encode_frame(HelloAnswer(s.session_id, 0, ascii_field("")))))
    s.connect(3)
    s.answer(2)
    s.connect(4)
    s.answer(session_id=s.session_id + 100)
    s.connect(5)
    s.answer()
    s.reset(0, 1, 0)
    s.step(0, 1, 1, 0)
    yield (
        "untrusted-answers",
        "Issue #20, breach 1's four cases: no answer (the watchdog), a corrupt answer, status 2, another "
        "session: each ends its connection with nothing served; a fifth link negotiates and is served.",
        ("ISSUE_20", "NEGOTIATION"),
        s,
    )

    s = Script()
    s.negotiated(1)
    s.reset(0, 5, 40, seed=111, token=3)
    s.step(0, 5, 1, 40)
    s.disconnect()
    s.negotiated(2)
    s.reset(0, 5, 40, seed=222, token=9)
    s.step(0, 5, 2, 40)
    s.negotiated(3)
    s.step(0, 5, 3, 40)
    s.on(2).reset(0, 6, 40, seed=222, token=9)
    s.step(0, 6, 2, 40)
    yield (
        "generation-across-links",
        "Issue #20, breach 2: link A RESETs slot 0 to generation 5 (seed 111, token 3), STEPs and closes; link B's "
        "RESET to 5 (seed 222, token 9) is DUPLICATE_GENERATION and its STEP for round 2 STALE_GENERATION "
        "(FAILED); a third link's STEP for 5, round 3, without RESET is STALE_GENERATION (FAILED). B RESETs to 6 "
        "and is served under seed 222, conditioned on 9.",
        ("ISSUE_20", "GENERATIONS", "COMMITTED_TOKEN"),
        s,
    )


def representation_cases() -> Iterator[Scenario]:
    s = ready()
    r1 = s.step(0, 1, 1, 100)
    s.commit(r1, 1)
    r2 = s.step(0, 1, 2, 102, temperature=f32_bits(0.75))
    s.commit(r2, 4)
    yield (
        "dense-v32-stride-40",
        "Dense rows over V = 32 padded with zero entries to the stride 40; a second round at T = 0.75.",
        ("DENSE", "SERVED"),
        s,
    )

    s = ready(V64)
    r1 = s.step(0, 1, 1, 100, policy=4)
    s.commit(r1, 2)
    r2 = s.step(0, 1, 2, 103, policy=16)
    s.commit(r2, 5)
    s.step(0, 1, 3, 109, policy=1)
    yield (
        "sparse-v64",
        "Sparse rows over V = 64: top-4, top-16 (the maximum support) and top-1 (a one-entry row).",
        ("SPARSE", "SERVED"),
        s,
    )

    s = ready(V64, slot=1, generation=7, committed=(1 << 32) - 2, seed=(1 << 63) + 12345)
    s.step(1, 7, 1, (1 << 32) - 2, policy=8)
    yield (
        "positions-wrap",
        "Anchor 2^32 - 2: the draw positions wrap to 0, 1, 2; a seed above 2^63 (both key words).",
        ("SPARSE", "SERVED"),
        s,
    )

    s = ready(V256)
    s.step(0, 1, 1, 100)
    yield "dense-v256", "One dense round at V = 256.", ("DENSE", "SERVED"), s


def random_script(seed: int) -> Script:
    """Random commands and faults over two slots and two links (fixed seed): mostly from the link
    that owns the slot, sometimes from the other one; a slot without a live generation is RESET."""
    rng = random.Random(seed)
    s = Script()
    s.negotiated(1)
    s.negotiated(2)
    generation, committed, rounds = [0, 0], [0, 500], [0, 0]
    owner: list[int | None] = [None, None]
    last_step: list[Step | None] = [None, None]
    for _ in range(30):
        slot = rng.randrange(2)
        home = owner[slot] or rng.choice((1, 2))
        link = home if rng.random() < 0.8 else 3 - home
        s.on(link)
        action = rng.choice(("reset", "step", "step", "step", "commit", "commit", "retry", "cancel", "disconnect"))
        if action == "reset" or owner[slot] is None:
            generation[slot] += rng.choice((1, 1, 1, 0))
            s.reset(slot, generation[slot], committed[slot], seed=rng.randrange(1 << 64), token=rng.randrange(-1, 32))
            if owner[slot] in (None, link):
                owner[slot], rounds[slot], last_step[slot] = link, 0, None
        elif action == "step":
            rounds[slot] += rng.choice((1, 1, 0))
            last_step[slot] = s.step(slot, generation[slot], rounds[slot], committed[slot], policy=rng.choice((0, 4)))
        elif action == "retry" and (current := last_step[slot]) is not None:
            s.send(current)
        elif action == "commit" and (current := last_step[slot]) is not None:
            accepted = rng.randrange(6)
            token = rng.choice((7, 7, -1)) if accepted else 7
            s.commit(current, accepted, token=token)
            committed[slot] = (current.anchor + accepted + (token >= 0)) % (1 << 32)
        elif action == "cancel":
            s.cancel(slot, generation[slot])
            owner[slot] = None if owner[slot] == link else owner[slot]
        elif action == "disconnect":
            s.disconnect()
            owner = [None if o == link else o for o in owner]
            s.negotiated(link)
    return s


def random_cases() -> Iterator[Scenario]:
    for seed in range(4):
        yield (
            f"seed-{seed}",
            f"Random sequence, generator seed {seed}.",
            ("RANDOM_SEQUENCE",),
            random_script(0x3B00 + seed),
        )


GROUPS = (
    (
        "negotiation",
        "What the worker does before, during and after the answer to its HELLO.",
        ("R12", "R13"),
        negotiation_cases,
    ),
    (
        "reset",
        "RESET above, at and below the generation, across links, at exhaustion.",
        ("R17", "R24", "R28"),
        reset_cases,
    ),
    (
        "step",
        "STEP: served, stale, retried, busy, unknown slot, refused.",
        ("R01", "R16", "R22", "R24", "R25"),
        step_cases,
    ),
    ("commit", "COMMIT and the committed token the next round conditions on.", ("R01", "R16", "R17"), commit_cases),
    ("cancel", "CANCEL of the live generation; stale and foreign CANCELs.", ("R17", "R24"), cancel_cases),
    ("disconnect", "A link ends: its generations end and are never reopened.", ("R17", "R24", "R28"), disconnect_cases),
    ("breaches", "The two breach sequences of issue #20, verbatim.", ("R01", "R12", "R24"), breach_cases),
    (
        "representations",
        "Dense and sparse rows, positions that wrap, a dense round at V = 256.",
        ("R01", "R16", "R22"),
        representation_cases,
    ),
    ("random", "Random mixes of commands and faults.", FAMILY_RULES, random_cases),
)


def build() -> Iterator[Group]:
    for name, description, rules, cases in GROUPS:
        yield Group(name, description, rules, [session_case(n, c, f, s, rules) for n, c, f, s in cases()])


# ---------------------------------------------------------------- schema

NONNEG = {"type": "integer", "minimum": 0}
CONNECTION = {"type": "integer", "minimum": 1}
WORD = {"$ref": "#/$defs/word32"}
U64 = {"$ref": "#/$defs/u64"}
FRAME = blob_schema("u8")
CONFIG_SCHEMA = closed(fields_schema(tuple(f for f in layout.HELLO.fields if f.name != "session_id")))
MODEL_SCHEMA = closed(
    {
        "base_logits": blob_schema("f32"),
        "markov": closed({"left": blob_schema("f32"), "right": blob_schema("f32")}),
        "start_token": NONNEG,
    }
)
EVENT_SCHEMA = {
    "oneOf": [
        closed({"connect": {"const": True}, "connection": CONNECTION, "session_id": U64}),
        closed({"frame": FRAME, "connection": CONNECTION}),
        closed({"answer_timeout": {"const": True}, "connection": CONNECTION}),
        closed({"disconnect": {"const": True}, "connection": CONNECTION}),
    ]
}
DRAW_SCHEMA = closed(
    {
        "position": NONNEG,
        "key": {"type": "array", "items": WORD, "minItems": 2, "maxItems": 2},
        "counter": {"type": "array", "items": WORD, "minItems": 4, "maxItems": 4},
        "u24": {"type": "integer", "minimum": 0, "maximum": (1 << 24) - 1},
    }
)
OUTPUT_SCHEMA = closed(
    {
        "verdict": {"enum": list(VERDICT_KINDS)},
        "reason": REASON_SCHEMA,
        "frames": {"type": "array", "items": FRAME},
        "close": {"type": "boolean"},
        "draws": {"type": "array", "items": DRAW_SCHEMA},
    },
    required=["verdict", "frames", "close", "draws"],
)
NULLABLE = {"oneOf": [{"type": "null"}, NONNEG]}
SLOT_SCHEMA = closed(
    {
        "slot": NONNEG,
        "generation": NONNEG,
        "live": {"type": "boolean"},
        "owner": {"oneOf": [{"type": "null"}, CONNECTION]},
        "seed": U64,
        "committed": NONNEG,
        "committed_token": NONNEG,
        "last_round": NULLABLE,
        "open": {
            "oneOf": [
                {"type": "null"},
                closed({"round": NONNEG, "anchor": NONNEG, "tokens": {"type": "array", "items": NONNEG}}),
            ]
        },
    }
)
INPUT_SCHEMA = closed(
    {"config": CONFIG_SCHEMA, "model": MODEL_SCHEMA, "events": {"type": "array", "minItems": 1, "items": EVENT_SCHEMA}}
)
EXPECTED_SCHEMA = closed(
    {
        "outputs": {"type": "array", "items": OUTPUT_SCHEMA},
        "final": closed(
            {
                "connections": {
                    "type": "array",
                    "items": closed({"connection": CONNECTION, "phase": {"enum": list(PHASES)}, "session_id": U64}),
                },
                "slots": {"type": "array", "items": SLOT_SCHEMA},
            }
        ),
        "counters": {
            "type": "object",
            "propertyNames": {"enum": list(COUNTER_NAMES)},
            "additionalProperties": {"type": "integer", "minimum": 1},
        },
    }
)

FAMILY = Family(
    name="worker_sessions",
    description="Event sequences through the wire v2 worker state machine: each event's verdict, the frames the "
    "worker sends byte for byte, close and draws, the final state and the counters (docs/wire-v2.md, Worker state "
    "machine).",
    rules=FAMILY_RULES,
    notes=NOTES,
    build=build,
    input_schema=INPUT_SCHEMA,
    expected_schema=EXPECTED_SCHEMA,
    solve=solve,
    comparator="wire",
)
