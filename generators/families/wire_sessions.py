"""Vector family ``wire_sessions``: event sequences through the wire v2 receiver (R12, R16, R17, R24, R25, R27, R28).

Each case hands an implementation the receiver's configuration and a list of
events: frames (either direction: the worker's HELLO, REPLY and COMPLETION, the
target's STEP, COMMIT, RESET and CANCEL as it sends them), slot watchdog
timeouts and disconnects, each frame and disconnect on a numbered connection
(0 unless several connections share the endpoint). The answer is the verdict on
every event, the final state (connection 0's negotiated session, and per slot
the generation, liveness, committed position, last round, seed and open round
with its rows and whether they are consumable) and the counters, from
``qconform.spec.wire.receiver.step``.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Iterator

from qconform.generators.encoding import decode_blob, encode_blob, encode_u64
from qconform.generators.families.wire_frames import (
    DEV,
    DIGEST,
    HELLO_SCHEMA,
    ONE_F32,
    PROD,
    REASON_SCHEMA,
    fields_to_json,
    hello_from_json,
    q_bits,
    resealed_reply,
)
from qconform.generators.registry import Case, Family, Group, Note
from qconform.generators.schemas import blob_schema
from qconform.generators.schemas import closed_object as closed
from qconform.spec.constants import M
from qconform.spec.errors import SpecError
from qconform.spec.qrow import QRow
from qconform.spec.wire import layout
from qconform.spec.wire.codec import completion_for, encode_frame, encode_v1, reply_from_row
from qconform.spec.wire.messages import Cancel, Commit, Hello, HelloAnswer, Message, Reset, Step, ascii_field
from qconform.spec.wire.reasons import REASONS
from qconform.spec.wire.receiver import (
    EVENT_COUNTERS,
    VERDICT_KINDS,
    Disconnect,
    Disposition,
    Event,
    FrameIn,
    ReceiverState,
    Timeout,
    consumable_rows,
    counter,
    initial_state,
    step,
)

FAMILY_RULES = ("R01", "R11", "R12", "R14", "R16", "R17", "R19", "R22", "R24", "R25", "R27", "R28", "R35")

NOTES = {
    "HAPPY_PATH": Note(
        "BASIC",
        "Rounds that open, fill, complete and commit without a fault.",
        "Catches a receiver that refuses legal traffic or miscounts positions.",
    ),
    "CONSUME_AFTER_COMPLETION": Note(
        "FUNCTIONALITY",
        "Rows are consumed (COMMIT) before, or without, a valid COMPLETION.",
        "Catches rows published as q-ready before every transfer and check completed (R16, R28).",
    ),
    "STALE_OR_DUPLICATE": Note(
        "FUNCTIONALITY",
        "Stale or duplicate generations and rounds (R19).",
        "Catches a receiver that reuses an old key or accepts a round twice.",
    ),
    "LATE_REPLY": Note(
        "FUNCTIONALITY",
        "Replies that arrive after RESET, CANCEL, a timeout or a disconnect (R28).",
        "Catches late q consumed into a newer generation.",
    ),
    "RETRY": Note(
        "FUNCTIONALITY",
        "A reply or completion sent twice, with identical or different bytes (R24).",
        "Catches a redraw under a reused key, or an identical retry treated as a fault.",
    ),
    "DISCARD": Note(
        "FUNCTIONALITY",
        "Missing, corrupt or timed-out q: the whole unverified proposal is discarded (R25).",
        "Catches a partial commit, or q=None alongside sampled IDs.",
    ),
    "RECONNECTION": Note(
        "FUNCTIONALITY", "A disconnect and a new HELLO (R24).", "Catches in-flight keys surviving a reconnection."
    ),
    "LIMITS": Note(
        "EDGE_CASE",
        "Negotiated slot, request, depth and position bounds (R27).",
        "Catches a receiver that serves more than it negotiated.",
    ),
    "V1_COEXISTENCE": Note(
        "FUNCTIONALITY",
        "v1 greedy frames between v2 traffic, before and after HELLO (R12).",
        "Catches v1 treated as sampled, or v2 honoured before HELLO.",
    ),
    "V1_ISOLATION": Note(
        "FUNCTIONALITY",
        "A refused v1 frame (or a second HELLO) while a v2 round is open: "
        "it is counted under its reason and discards nothing (docs/wire-v2.md, Coexistence with v1).",
        "Catches a receiver that lets v1 traffic, good or bad, end a sampled round.",
    ),
    "DEV_PROFILE": Note(
        "EDGE_CASE",
        "The development configuration (vocabulary 60, dense stride 64) for dense rows.",
        "Small dense rows keep the vectors small.",
    ),
    "KEY_REUSE": Note(
        "FUNCTIONALITY",
        "Sequences that would accept a (seed, generation, round, position) key twice (R22, R24).",
        "Catches slots dropped and re-created at generation 0, or a generation reused after exhaustion.",
    ),
    "CONSUMABLE_KEPT": Note(
        "FUNCTIONALITY",
        "Worker-side faults after a round's COMPLETION validated (R28).",
        "Catches a consumable round thrown away while the target may be verifying it.",
    ),
    "CONNECTIONS": Note(
        "FUNCTIONALITY",
        "Several connections sharing one endpoint.",
        "Catches a stranger connection that changes another connection's link or rounds.",
    ),
    "RANDOM_SEQUENCE": Note(
        "FUNCTIONALITY",
        "A random mix of legal and faulty events (fixed generator seed).",
        "Catches state-machine paths no hand-written sequence visits.",
    ),
}

POSITION_MODULUS = 1 << 32
#: The answer's counter names: the reason codes and the event counters (R25), sorted.
COUNTER_NAMES: tuple[str, ...] = tuple(sorted((*REASONS, *EVENT_COUNTERS)))


# ---------------------------------------------------------------- solve


def event_from_json(obj: dict) -> Event:
    """The event of one input item; without ``connection`` it is on the spec's default connection."""
    on = {"connection": obj["connection"]} if "connection" in obj else {}
    if "frame" in obj:
        return FrameIn(bytes(decode_blob(obj["frame"], "u8")[0]), **on)
    if "timeout" in obj:
        return Timeout(obj["timeout"])
    return Disconnect(**on)


def verdict_json(verdict: Disposition) -> dict:
    out: dict = {"verdict": verdict.kind, "discarded": list(verdict.discarded)}
    if verdict.reason is not None:
        out["reason"] = verdict.reason
    if verdict.answer is not None:
        out["answer"] = encode_blob("u8", list(verdict.answer))
    return out


def state_json(state: ReceiverState) -> dict:
    """The final state as the answer shows it."""
    slots = []
    for index, slot in enumerate(state.slots):
        current = slot.open
        slots.append(
            {
                "slot": index,
                "generation": slot.generation,
                "live": slot.live,
                "committed": slot.committed,
                "last_round": slot.last_round,
                "seed": encode_u64(slot.seed),
                "open": None
                if current is None
                else {
                    "round": current.step.round,
                    "anchor": current.step.anchor,
                    "rows": len(current.replies),
                    "consumable": consumable_rows(state, index) is not None,
                },
            }
        )
    negotiated = state.negotiated
    return {
        "negotiated": negotiated is not None,
        "session_id": None if negotiated is None else encode_u64(negotiated.session_id),
        "slots": slots,
    }


def solve(case_input: dict) -> dict:
    """Run the receiver over the events: every verdict, the final state, the nonzero counters; or
    ``{"error": "BAD_SHAPE"}`` for a receiver configuration the design forbids (no event is run)."""
    try:
        state = initial_state(hello_from_json(case_input["config"]))
    except SpecError as refused:
        return {"error": refused.code}
    verdicts = []
    for obj in case_input["events"]:
        state, verdict = step(state, event_from_json(obj))
        verdicts.append(verdict_json(verdict))
    return {"verdicts": verdicts, "final": state_json(state), "counters": counters_json(state)}


def counters_json(state: ReceiverState) -> dict:
    """Every counter the receiver defines (R25: one per reason code, one per event), zero ones left out."""
    assert set(dict(state.counters)) <= set(COUNTER_NAMES), state.counters
    return {name: counter(state, name) for name in COUNTER_NAMES if counter(state, name)}


# ---------------------------------------------------------------- building sequences


class Script:
    """Builds one case's events: frames from messages, timers, disconnects."""

    def __init__(self, config: Hello = PROD) -> None:
        self.config = config
        self.session_id = config.session_id
        #: the connection the next frames and disconnects happen on
        self.connection = 0
        self.events: list[dict] = []

    def on(self, connection: int) -> Script:
        self.connection = connection
        return self

    def raw(self, data: bytes) -> bytes:
        event: dict = {"frame": encode_blob("u8", list(data))}
        if self.connection:
            event["connection"] = self.connection
        self.events.append(event)
        return data

    def send(self, message: Message) -> bytes:
        return self.raw(encode_frame(message))

    def hello(self, **changes) -> None:
        self.send(replace(self.config, session_id=self.session_id, **changes))

    def reset(self, slot: int, generation: int, committed: int, seed: int = 0x5EED, token: int = -1) -> None:
        self.send(Reset(self.session_id, seed, generation, committed, slot, token))

    def step(
        self,
        slot: int,
        generation: int,
        round_id: int,
        anchor: int,
        policy: int | None = None,
        send: bool = True,
        **changes,
    ) -> Step:
        policy = (0 if self.config is DEV else 4) if policy is None else policy
        message = Step(
            self.session_id, generation, round_id, anchor, policy, 1, ONE_F32, slot, self.config.depth, DIGEST
        )
        message = replace(message, **changes)
        if send:
            self.send(message)
        return message

    def row(self, step_message: Step, index: int) -> tuple[QRow, int]:
        """The q row of draft ``index`` and its sampled token (deterministic in slot, round and index)."""
        vocab = self.config.vocab
        base = (step_message.slot * 7 + step_message.round * 3 + index) % (vocab - 8)
        if step_message.support_policy == 0:
            counts = [0] * vocab
            counts[base], counts[base + 1] = M // 2, M // 2
            return QRow.dense(counts), base
        ids = [base, base + 2, base + 5]
        return QRow.sparse(vocab, ids, [M // 2, M // 4, M // 4]), base + 2

    def reply_frame(self, step_message: Step, index: int, reseal: bool = True, **changes) -> bytes:
        """The honest REPLY of draft ``index``; ``changes`` alter it (probability checksum resealed unless told)."""
        row, token = self.row(step_message, index)
        reply = reply_from_row(
            self.session_id,
            step_message.slot,
            step_message.generation,
            step_message.round,
            (step_message.anchor + index) % POSITION_MODULUS,
            token,
            row,
            self.config.dense_stride,
        )
        return encode_frame(resealed_reply(reply, **changes) if reseal else replace(reply, **changes))

    def redrawn_frame(self, step_message: Step, index: int) -> bytes:
        """A valid REPLY of draft ``index`` that sampled another token of the same row (a redraw)."""
        row, token = self.row(step_message, index)
        other = next(v for v, _ in row.support() if v != token)
        return self.reply_frame(step_message, index, token=other)

    def replies(self, step_message: Step, indices: range | None = None) -> list[bytes]:
        indices = range(step_message.depth) if indices is None else indices
        return [self.raw(self.reply_frame(step_message, i)) for i in indices]

    def complete(self, step_message: Step, frames: list[bytes], **changes) -> bytes:
        return self.send(replace(completion_for(step_message, frames), **changes))

    def full_round(self, step_message: Step) -> list[bytes]:
        frames = self.replies(step_message)
        self.complete(step_message, frames)
        return frames

    def commit(self, step_message: Step, accepted: int, **changes) -> None:
        new = (step_message.anchor + accepted + 1) % POSITION_MODULUS
        self.send(
            replace(
                Commit(
                    self.session_id, step_message.generation, step_message.round, new, 1, step_message.slot, accepted
                ),
                **changes,
            )
        )

    def cancel(self, slot: int, generation: int) -> None:
        self.send(Cancel(self.session_id, generation, slot))

    def timeout(self, slot: int) -> None:
        self.events.append({"timeout": slot})

    def disconnect(self) -> None:
        self.events.append({"disconnect": True, **({"connection": self.connection} if self.connection else {})})

    def v1(self, tokens: list[int]) -> None:
        self.raw(encode_v1(tokens))


def session_case(name: str, comment: str, flags: tuple[str, ...], script: Script, rules: tuple[str, ...]) -> Case:
    case_input = {"config": fields_to_json(script.config), "events": script.events}
    expected = solve(case_input)
    result = "invalid" if "error" in expected else "valid"  # a refused receiver configuration
    return Case(
        name=name, comment=comment, rules=rules, flags=flags, input=case_input, expected=expected, result=result
    )


def opened(config: Hello = PROD, slot: int = 0, generation: int = 1, committed: int = 100) -> Script:
    """A script that has negotiated and reset ``slot`` to ``generation`` at ``committed``."""
    script = Script(config)
    script.hello()
    script.reset(slot, generation, committed)
    return script


# ---------------------------------------------------------------- scenarios


def happy_cases() -> Iterator[tuple[str, str, tuple[str, ...], Script]]:
    s = opened()
    r1 = s.step(0, 1, 1, 100)
    s.full_round(r1)
    s.commit(r1, 2)
    yield "sparse-round-commit", "One sparse round: 5 rows, COMPLETION, COMMIT of 2 accepted.", ("HAPPY_PATH",), s

    s = opened(DEV)
    r1 = s.step(0, 1, 1, 100)
    s.full_round(r1)
    s.commit(r1, 5)
    yield (
        "dense-round-bonus",
        "One dense round, all 5 accepted, the bonus commits anchor + 6.",
        ("HAPPY_PATH", "DEV_PROFILE"),
        s,
    )

    s = opened()
    r1 = s.step(0, 1, 1, 100)
    s.full_round(r1)
    s.commit(r1, 0)
    r2 = s.step(0, 1, 2, 101)
    s.full_round(r2)
    s.commit(r2, 3)
    r3 = s.step(0, 1, 3, 105)
    s.replies(r3, range(2))
    yield "three-rounds", "Rounds 1 and 2 commit; round 3 stays open with 2 rows, not consumable.", ("HAPPY_PATH",), s

    s = Script()
    s.hello()
    steps = []
    for slot in range(4):
        s.reset(slot, 1, 1000 * slot)
        steps.append(s.step(slot, 1, 1, 1000 * slot))
    frames = {slot: [] for slot in range(4)}
    for index in range(5):
        for slot in (2, 0, 3, 1):
            frames[slot].append(s.raw(s.reply_frame(steps[slot], index)))
    for slot in range(4):
        s.complete(steps[slot], frames[slot])
    s.commit(steps[1], 4)
    yield (
        "four-slots-interleaved",
        "Four requests in flight, rows interleaved across slots.",
        ("HAPPY_PATH", "LIMITS"),
        s,
    )

    s = Script()
    s.v1([1, 2, 3])
    s.hello()
    s.v1([4])
    s.reset(0, 1, 100)
    r1 = s.step(0, 1, 1, 100)
    s.replies(r1, range(2))
    s.v1([5, 6])
    yield (
        "v1-interleaved",
        "v1 greedy frames before HELLO and between v2 frames leave v2 state alone.",
        ("V1_COEXISTENCE",),
        s,
    )

    s = opened()
    r1 = s.step(0, 1, 1, 100)
    frames = s.replies(r1, range(2))
    v1 = encode_v1([4, 5])
    s.raw(v1[:14])
    s.raw(v1[:4] + b"\x07\x00" + v1[6:])
    s.raw(v1[:8] + b"\x03\x00\x00\x00" + v1[12:])
    frames += s.replies(r1, range(2, 5))
    s.complete(r1, frames)
    s.commit(r1, 4)
    yield (
        "v1-refused-leaves-v2-alone",
        "A truncated v1 frame, one of version 7 and one of a wrong length are refused "
        "and discard nothing: the open v2 round completes and commits.",
        ("V1_COEXISTENCE",),
        s,
    )

    s = Script()
    s.reset(0, 1, 100)
    s.hello()
    s.reset(0, 1, 100)
    yield "v2-before-hello", "A RESET before HELLO is refused; after HELLO it is accepted.", ("V1_COEXISTENCE",), s


def consumption_cases() -> Iterator[tuple[str, str, tuple[str, ...], Script]]:
    s = opened()
    r1 = s.step(0, 1, 1, 100)
    frames = s.replies(r1)
    s.commit(r1, 1)
    s.complete(r1, frames)
    s.commit(r1, 1)
    yield (
        "commit-before-completion",
        "COMMIT before COMPLETION is refused, after it accepted.",
        ("CONSUME_AFTER_COMPLETION",),
        s,
    )

    s = opened()
    r1 = s.step(0, 1, 1, 100)
    frames = s.replies(r1, range(3))
    s.commit(r1, 1)
    s.complete(r1, frames)
    s.replies(r1, range(3, 5))
    yield (
        "completion-missing-rows",
        "COMPLETION after 3 of 5 rows: MISSING_Q discards; later rows are late.",
        ("CONSUME_AFTER_COMPLETION", "DISCARD"),
        s,
    )

    for field, value, why in (
        ("reply_bytes", 1, "REPLY_SIZE_MISMATCH"),
        ("reply_checksum", 1, "COMPLETION_CHECKSUM_MISMATCH"),
        ("context_version", 9, "CONTEXT_MISMATCH"),
        ("prefix_digest", bytes(32), "CONTEXT_MISMATCH"),
        ("anchor", 101, "POSITION_MISMATCH"),
    ):
        s = opened()
        r1 = s.step(0, 1, 1, 100)
        frames = s.replies(r1)
        honest = completion_for(r1, frames)
        wrong = getattr(honest, field) ^ value if isinstance(value, int) else value
        s.send(replace(honest, **{field: wrong}))
        s.commit(r1, 1)
        yield (
            f"completion-{field.replace('_', '-')}",
            f"A COMPLETION with a wrong {field}: {why}, discarded; COMMIT refused.",
            ("CONSUME_AFTER_COMPLETION", "DISCARD"),
            s,
        )

    s = opened()
    r1 = s.step(0, 1, 1, 100)
    s.full_round(r1)
    s.commit(r1, 2, new_committed=104)
    yield (
        "commit-wrong-position",
        "COMMIT whose new position is not anchor + accepted + 1.",
        ("CONSUME_AFTER_COMPLETION",),
        s,
    )


def stale_cases() -> Iterator[tuple[str, str, tuple[str, ...], Script]]:
    s = Script()
    s.hello()
    s.step(0, 0, 1, 0)
    s.reset(0, 1, 100)
    s.step(0, 2, 1, 100)
    s.step(0, 1, 1, 100)
    yield (
        "step-stale-generation",
        "STEP on generation 0 (never live) and on a generation never opened.",
        ("STALE_OR_DUPLICATE",),
        s,
    )

    s = opened()
    s.reset(0, 1, 100)
    s.reset(0, 3, 100)
    s.reset(0, 2, 100)
    yield (
        "reset-duplicate-and-stale",
        "RESET to the current generation, then to a lower one.",
        ("STALE_OR_DUPLICATE",),
        s,
    )

    s = opened()
    r1 = s.step(0, 1, 5, 100)
    s.full_round(r1)
    s.commit(r1, 0)
    s.step(0, 1, 5, 101)
    s.step(0, 1, 4, 101)
    s.step(0, 1, 6, 101)
    yield (
        "step-duplicate-and-stale-round",
        "STEP reusing round 5, then round 4, then round 6.",
        ("STALE_OR_DUPLICATE",),
        s,
    )

    s = opened()
    r1 = s.step(0, 1, 1, 100)
    s.full_round(r1)
    s.commit(r1, 0)
    r2 = s.step(0, 1, 2, 101)
    s.raw(s.reply_frame(r1, 0))
    s.raw(s.reply_frame(replace(r2, round=3), 0))
    s.raw(s.reply_frame(replace(r2, generation=2), 0))
    s.commit(r1, 0)
    s.replies(r2)
    yield (
        "reply-stale-round-and-generation",
        "Replies for a committed round, a future round and a future generation change nothing.",
        ("STALE_OR_DUPLICATE",),
        s,
    )


def late_cases() -> Iterator[tuple[str, str, tuple[str, ...], Script]]:
    s = opened()
    r1 = s.step(0, 1, 1, 100)
    frames = s.replies(r1, range(2))
    s.reset(0, 2, 100)
    frames += s.replies(r1, range(2, 5))
    s.complete(r1, frames)
    r2 = s.step(0, 2, 1, 100)
    s.full_round(r2)
    yield (
        "late-after-reset",
        "RESET discards the open round; its remaining rows and COMPLETION are late.",
        ("LATE_REPLY", "DISCARD"),
        s,
    )

    s = opened()
    r1 = s.step(0, 1, 1, 100)
    s.replies(r1, range(3))
    s.cancel(0, 1)
    s.replies(r1, range(3, 5))
    s.step(0, 1, 2, 100)
    s.cancel(0, 1)
    s.reset(0, 2, 100)
    yield (
        "late-after-cancel",
        "CANCEL discards; later rows are late; STEP and CANCEL need a RESET.",
        ("LATE_REPLY", "DISCARD"),
        s,
    )

    s = opened()
    r1 = s.step(0, 1, 1, 100)
    frames = s.replies(r1, range(4))
    s.timeout(0)
    frames += s.replies(r1, range(4, 5))
    s.complete(r1, frames)
    s.commit(r1, 1)
    s.step(0, 1, 2, 100)
    s.reset(0, 2, 101)
    r2 = s.step(0, 2, 1, 101)
    s.full_round(r2)
    yield (
        "late-after-timeout",
        "A timeout discards and invalidates; late rows refused; target-only then RESET.",
        ("LATE_REPLY", "DISCARD"),
        s,
    )

    s = opened()
    s.timeout(0)
    s.timeout(3)
    yield "timeout-idle", "A watchdog with no open round is ignored.", ("LATE_REPLY",), s


def retry_cases() -> Iterator[tuple[str, str, tuple[str, ...], Script]]:
    s = opened()
    r1 = s.step(0, 1, 1, 100)
    frames = s.replies(r1)
    s.raw(frames[2])
    completion = s.complete(r1, frames)
    s.raw(completion)
    s.raw(frames[4])
    s.commit(r1, 5)
    yield (
        "identical-retries",
        "A retried row and a retried COMPLETION with identical bytes are duplicates.",
        ("RETRY",),
        s,
    )

    s = opened()
    r1 = s.step(0, 1, 1, 100)
    s.replies(r1, range(3))
    s.raw(s.redrawn_frame(r1, 1))
    s.replies(r1, range(3, 5))
    yield (
        "retry-different-row",
        "Row 1 resent with another token: RETRY_MISMATCH discards the proposal.",
        ("RETRY", "DISCARD"),
        s,
    )

    s = opened()
    r1 = s.step(0, 1, 1, 100)
    frames = s.replies(r1)
    s.complete(r1, frames)
    s.complete(r1, frames, status=layout.STATUS_FAILED)
    s.commit(r1, 0)
    yield (
        "retry-different-completion",
        "A second, different COMPLETION of a consumable round discards it.",
        ("RETRY", "DISCARD"),
        s,
    )


def failed_completion_cases() -> Iterator[tuple[str, str, tuple[str, ...], Script]]:
    """A FAILED COMPLETION is held to every COMPLETION rule but "every row received" (docs/wire-v2.md)."""
    s = opened()
    r1 = s.step(0, 1, 1, 100)
    s.complete(r1, [], status=layout.STATUS_FAILED)
    s.commit(r1, 0)
    yield (
        "worker-failed-no-rows",
        "A FAILED COMPLETION before any row, with 0 bytes and checksum 0 (the CRC-32C of no bytes), "
        "is accepted and discards the proposal.",
        ("DISCARD",),
        s,
    )

    for name, what, changes in (
        ("bytes", "a byte count of 0 after 2 rows", {"reply_bytes": 0, "reply_checksum": 0}),
        ("checksum", "a checksum off by one over its 2 rows", {}),
    ):
        s = opened()
        r1 = s.step(0, 1, 1, 100)
        frames = s.replies(r1, range(2))
        honest = completion_for(r1, frames)
        changes = changes or {"reply_checksum": honest.reply_checksum ^ 1}
        s.complete(r1, frames, status=layout.STATUS_FAILED, **changes)
        s.replies(r1, range(2, 3))
        yield (
            f"worker-failed-wrong-{name}",
            f"A FAILED COMPLETION with {what} is refused with that reason (it does not cover the rows "
            "received) and still discards the round it addresses: the next row is late.",
            ("DISCARD",),
            s,
        )

    s = opened()
    r1 = s.step(0, 1, 1, 100)
    s.replies(r1, range(2))
    s.complete(r1, [], status=layout.STATUS_FAILED, reply_bytes=0, reply_checksum=0)
    yield (
        "worker-failed-claims-no-rows",
        "A FAILED COMPLETION that claims no rows (0 bytes, checksum 0) after 2 were received is "
        "REPLY_SIZE_MISMATCH and discards the round.",
        ("DISCARD",),
        s,
    )


def discard_cases() -> Iterator[tuple[str, str, tuple[str, ...], Script]]:
    s = opened()
    r1 = s.step(0, 1, 1, 100)
    s.replies(r1, range(2))
    bad = s.reply_frame(r1, 2, values=(q_bits(M // 2), q_bits(M // 4), q_bits(M // 4 - 1)))
    s.raw(bad)
    s.replies(r1, range(3, 5))
    yield (
        "corrupt-q-mass",
        "Row 3 has total mass M - 1: the entire proposal is discarded, later rows late.",
        ("DISCARD",),
        s,
    )

    s = opened()
    s.reset(1, 1, 500)
    r0, r1 = s.step(0, 1, 1, 100), s.step(1, 1, 1, 500)
    s.replies(r0, range(2))
    s.replies(r1, range(3))
    corrupt = bytearray(s.reply_frame(r0, 2))
    corrupt[-1] ^= 0x10
    s.raw(bytes(corrupt))
    s.replies(r1, range(3, 5))
    yield (
        "checksum-corrupt-frame",
        "A frame failing its checksum cannot be attributed: every open round is discarded.",
        ("DISCARD",),
        s,
    )

    s = opened()
    r1 = s.step(0, 1, 1, 100)
    s.replies(r1, range(2))
    s.raw(s.reply_frame(r1, 2)[:30])
    yield "truncated-frame", "A truncated frame discards every open round.", ("DISCARD",), s

    s = opened()
    r1 = s.step(0, 1, 1, 100)
    frames = s.replies(r1, range(2))
    s.complete(r1, frames, status=layout.STATUS_FAILED)
    s.commit(r1, 0)
    yield (
        "worker-failed",
        "COMPLETION status FAILED is accepted and discards the proposal (target-only).",
        ("DISCARD",),
        s,
    )

    yield from failed_completion_cases()

    s = opened()
    r1 = s.step(0, 1, 1, 100)
    good = s.reply_frame(r1, 0)
    s.raw(s.reply_frame(r1, 0, reseal=False, q_checksum=1))
    s.raw(good)
    yield (
        "q-checksum-mismatch",
        "A row whose probability checksum is wrong discards; the honest resend is late.",
        ("DISCARD",),
        s,
    )

    s = opened()
    r1 = s.step(0, 1, 1, 100)
    s.full_round(r1)
    s.commit(r1, 0)
    r2 = s.step(0, 1, 2, 101)
    s.raw(s.reply_frame(r1, 0, token=r1.anchor))  # zero q at the token, but for a committed round
    s.full_round(r2)
    yield (
        "bad-stale-row-no-discard",
        "A faulty row addressed to a committed round is refused and discards nothing.",
        ("DISCARD", "STALE_OR_DUPLICATE"),
        s,
    )

    s = opened()
    r1 = s.step(0, 1, 1, 100)
    s.replies(r1, range(1))
    s.raw(s.reply_frame(r1, 2))
    yield "position-gap", "Row 3 arrives after row 1: POSITION_MISMATCH discards.", ("DISCARD",), s

    s = opened(DEV)
    r1 = s.step(0, 1, 1, 100, policy=2)
    s.raw(s.reply_frame(replace(r1, support_policy=0), 0))
    s.reset(0, 2, 100)
    r2 = s.step(0, 2, 1, 100, policy=2)
    s.raw(s.reply_frame(replace(r2, support_policy=3), 0))
    yield (
        "support-policy-violations",
        "A dense row for a sparse policy, then 3 entries for k = 2: both discard.",
        ("DISCARD", "LIMITS", "DEV_PROFILE"),
        s,
    )


def reconnection_cases() -> Iterator[tuple[str, str, tuple[str, ...], Script]]:
    s = opened()
    r1 = s.step(0, 1, 1, 100)
    s.replies(r1, range(3))
    s.disconnect()
    s.replies(r1, range(3, 4))
    old = s.session_id
    s.session_id = old + 1
    s.hello()
    s.session_id = old
    s.replies(r1, range(4, 5))
    s.session_id = old + 1
    s.step(0, 1, 2, 100)
    s.reset(0, 2, 100)
    r2 = s.step(0, 2, 1, 100)
    s.full_round(r2)
    s.commit(r2, 1)
    yield (
        "disconnect-mid-round",
        "Disconnect discards; frames before the new HELLO are refused; the old session's keys are dead.",
        ("RECONNECTION", "DISCARD", "LATE_REPLY"),
        s,
    )

    s = opened()
    s.hello()
    s.disconnect()
    s.disconnect()
    s.hello(max_slots=2)
    yield (
        "second-hello-and-shrink",
        "A second HELLO on one connection is refused; a reconnection may negotiate fewer slots.",
        ("RECONNECTION",),
        s,
    )

    s = Script()
    s.hello(semantic_id=ascii_field("unrounded-softmax"))
    s.hello(vocab=129279)
    s.hello(max_requests=5)
    s.hello()
    yield (
        "hello-mismatch-then-match",
        "Refused offers leave v2 off; a matching offer turns it on.",
        ("RECONNECTION", "LIMITS"),
        s,
    )


def limit_cases() -> Iterator[tuple[str, str, tuple[str, ...], Script]]:
    s = Script()
    s.hello(max_requests=2)
    for slot in range(3):
        s.reset(slot, 1, 10 * slot)
    r0, _ = s.step(0, 1, 1, 0), s.step(1, 1, 1, 10)
    s.step(2, 1, 1, 20)
    s.full_round(r0)
    s.commit(r0, 0)
    s.step(2, 1, 1, 20)
    yield (
        "too-many-requests",
        "Two requests negotiated: a third open round is refused until one commits.",
        ("LIMITS",),
        s,
    )

    s = Script()
    s.hello(max_slots=2)
    s.reset(2, 1, 0)
    s.step(3, 1, 1, 0)
    yield "slot-beyond-negotiated", "Two slots negotiated: slot 2 and 3 are refused.", ("LIMITS",), s

    s = opened()
    s.step(0, 1, 1, 100, depth=4)
    s.step(0, 1, 1, 99)
    r1 = s.step(0, 1, 1, 100)
    s.step(0, 1, 2, 100)
    s.raw(s.reply_frame(r1, 0, token=r1.anchor % 7))
    yield (
        "step-shape",
        "STEP of depth 4, a wrong anchor, a busy slot; a row with zero q at its token discards.",
        ("LIMITS", "DISCARD"),
        s,
    )


LAST_GENERATION = (1 << 32) - 1


def key_reuse_cases() -> Iterator[tuple[str, str, tuple[str, ...], Script]]:
    s = Script()
    s.hello()
    s.reset(3, 1, 100, seed=0x5EED)
    r0 = s.step(3, 1, 0, 100)
    old = s.reply_frame(r0, 0)
    s.disconnect()
    s.hello(max_slots=1)
    s.disconnect()
    s.hello()
    s.reset(3, 1, 100, seed=0x5EED)
    s.step(3, 1, 0, 100)
    s.raw(old)
    s.reset(3, 2, 100, seed=0x5EED)
    s.step(3, 2, 0, 100)
    s.raw(old)
    yield (
        "reconnect-shrink-grow-old-key",
        (
            "Issue #10: after a disconnect, HELLO with 1 slot, then 4, the RESET to "
            "generation 1, its STEP and the old REPLY are refused; generation 2 is a new key."
        ),
        ("KEY_REUSE", "RECONNECTION"),
        s,
    )

    s = Script()
    s.hello()
    s.reset(2, 5, 40)
    r1 = s.step(2, 5, 1, 40)
    s.full_round(r1)
    s.commit(r1, 1)
    s.disconnect()
    s.hello(max_slots=2)
    s.reset(2, 6, 42)
    s.disconnect()
    s.hello()
    s.reset(2, 5, 42)
    s.reset(2, 3, 42)
    s.reset(2, 6, 42)
    yield (
        "shrink-then-grow",
        (
            "Slot 2 survives a HELLO of 2 slots (unaddressable, TOO_MANY_SLOTS) and comes back "
            "at generation 5 with its position: RESET to 5 or 3 refused, to 6 accepted."
        ),
        ("KEY_REUSE", "RECONNECTION"),
        s,
    )

    s = opened()
    r1 = s.step(0, 1, 1, 100)
    frames = s.replies(r1, range(3))
    s.disconnect()
    s.hello()
    frames += s.replies(r1, range(3, 5))
    s.complete(r1, frames)
    s.commit(r1, 1)
    s.step(0, 1, 2, 100)
    s.reset(0, 1, 100)
    s.reset(0, 2, 100)
    r2 = s.step(0, 2, 1, 100)
    s.full_round(r2)
    s.commit(r2, 0)
    yield (
        "reconnect-same-session",
        (
            "A reconnection under the same session ID: the old generation's rows, COMPLETION, "
            "COMMIT and STEP are refused; only a RESET to a higher generation reopens the slot."
        ),
        ("KEY_REUSE", "RECONNECTION", "LATE_REPLY"),
        s,
    )

    s = opened(generation=LAST_GENERATION - 1)
    s.reset(0, LAST_GENERATION, 100)
    r1 = s.step(0, LAST_GENERATION, 1, 100)
    s.full_round(r1)
    s.commit(r1, 2)
    s.reset(0, LAST_GENERATION, 103)
    s.cancel(0, LAST_GENERATION)
    s.reset(0, 1, 103)
    s.step(0, LAST_GENERATION, 2, 103)
    s.reset(1, 1, 7)
    yield (
        "generation-exhaustion",
        (
            "Generation 2^32 - 1 is usable, but no RESET follows it (SLOT_EXHAUSTED): after "
            "its CANCEL the slot is retired; slot 1 is unaffected."
        ),
        ("KEY_REUSE", "LIMITS"),
        s,
    )


def consumable_cases() -> Iterator[tuple[str, str, tuple[str, ...], Script]]:
    s = opened()
    r1 = s.step(0, 1, 1, 100)
    s.full_round(r1)
    s.raw(s.redrawn_frame(r1, 1))
    s.commit(r1, 2)
    yield (
        "differing-reply-retry",
        "A different retry of row 1 after the COMPLETION validated is refused, not discarding; COMMIT succeeds.",
        ("CONSUMABLE_KEPT", "RETRY"),
        s,
    )

    s = opened()
    r1 = s.step(0, 1, 1, 100)
    frames = s.full_round(r1)
    s.complete(r1, frames, status=layout.STATUS_FAILED)
    s.commit(r1, 0)
    yield (
        "differing-completion-retry",
        "A second, FAILED COMPLETION of a consumable round is RETRY_MISMATCH and keeps it; COMMIT succeeds.",
        ("CONSUMABLE_KEPT", "RETRY"),
        s,
    )

    s = opened()
    s.reset(1, 1, 500)
    r0, r1 = s.step(0, 1, 1, 100), s.step(1, 1, 1, 500)
    s.full_round(r0)
    s.replies(r1, range(2))
    corrupt = bytearray(s.reply_frame(r1, 2))
    corrupt[-1] ^= 0x10
    s.raw(bytes(corrupt))
    s.commit(r0, 4)
    yield (
        "corrupt-frame-other-slot",
        "A checksum-corrupt frame discards slot 1's round in transfer but not slot 0's consumable one, which commits.",
        ("CONSUMABLE_KEPT", "DISCARD"),
        s,
    )

    s = opened()
    r1 = s.step(0, 1, 1, 100)
    s.full_round(r1)
    s.timeout(0)
    s.commit(r1, 5)
    yield (
        "timeout-after-completion",
        "The watchdog of a consumable round is ignored (it guards the arrival of q); COMMIT succeeds.",
        ("CONSUMABLE_KEPT",),
        s,
    )

    s = opened()
    r1 = s.step(0, 1, 1, 100)
    s.full_round(r1)
    s.raw(s.reply_frame(r1, 5))
    s.commit(r1, 3)
    yield (
        "sixth-reply-after-completion",
        "A sixth REPLY beyond depth after the COMPLETION is POSITION_MISMATCH without discard.",
        ("CONSUMABLE_KEPT", "LIMITS"),
        s,
    )

    s = opened()
    s.reset(1, 1, 500)
    r0, r1 = s.step(0, 1, 1, 100), s.step(1, 1, 1, 500)
    s.full_round(r0)
    s.full_round(r1)
    s.cancel(0, 1)
    s.reset(1, 2, 500)
    r2 = s.step(1, 2, 1, 500)
    s.full_round(r2)
    s.disconnect()
    yield (
        "released-by-target-or-link",
        "Only the target (CANCEL, RESET) or the end of the link discards a consumable round.",
        ("CONSUMABLE_KEPT", "DISCARD"),
        s,
    )


def hole_cases() -> Iterator[tuple[str, str, tuple[str, ...], Script]]:
    top = POSITION_MODULUS - 2
    s = opened(committed=top)
    r1 = s.step(0, 1, 1, top)
    s.full_round(r1)
    s.commit(r1, 3)
    r2 = s.step(0, 1, 2, 2)
    s.full_round(r2)
    s.commit(r2, 0)
    yield (
        "position-wraparound",
        "Anchor 2^32 - 2: rows at 2^32 - 2, 2^32 - 1, 0, 1, 2; COMMIT of 3 moves to 2.",
        ("LIMITS", "HAPPY_PATH"),
        s,
    )

    s = opened()
    r1 = s.step(0, 1, 1, 100)
    frames = s.replies(r1)
    s.raw(s.reply_frame(r1, 5))
    s.complete(r1, frames)
    yield (
        "sixth-reply-before-completion",
        "A sixth REPLY beyond depth 5 discards the proposal; its COMPLETION is late.",
        ("LIMITS", "DISCARD"),
        s,
    )

    s = opened()
    r1 = s.step(0, 1, 1, 100)
    s.full_round(r1)
    s.commit(r1, 0, new_committed=100)
    s.commit(r1, 0)
    s.step(0, 1, 2, 101)
    yield (
        "commit-accepted-zero",
        "COMMIT with 0 accepted: only anchor + 1 (the correction) is legal.",
        ("HAPPY_PATH",),
        s,
    )

    s = opened()
    r1 = s.step(0, 1, 1, 100)
    s.send(r1)
    s.step(0, 1, 2, 100)
    s.full_round(r1)
    s.send(r1)
    s.commit(r1, 1)
    s.send(r1)
    yield (
        "identical-step-retry",
        (
            "An identical STEP retry is a duplicate while its round is open, another STEP is refused; "
            "after the COMMIT the same STEP is DUPLICATE_ROUND."
        ),
        ("RETRY", "STALE_OR_DUPLICATE"),
        s,
    )


def boundary_cases() -> Iterator[tuple[str, str, tuple[str, ...], Script]]:
    """Each check of the receiver exactly at its boundary, where an off-by-one implementation differs."""
    high = POSITION_MODULUS - 8
    s = opened(committed=high)
    r1 = s.step(0, 1, 1, high)
    s.full_round(r1)
    s.commit(r1, 2)
    r2 = s.step(0, 1, 2, high + 3)
    s.full_round(r2)
    s.commit(r2, 4)
    r3 = s.step(0, 1, 3, 0)
    s.full_round(r3)
    yield (
        "position-high-half",
        "Positions at and above 2^31 are plain u32 values: anchor 2^32 - 8 commits 2^32 - 5, "
        "then the bonus of a round at 2^32 - 5 commits exactly 2^32 = position 0.",
        ("LIMITS", "HAPPY_PATH"),
        s,
    )

    s = opened()
    r1 = s.step(0, 1, 1, 100)
    frames = s.full_round(r1)
    s.commit(r1, 1)
    s.raw(frames[0])
    s.complete(r1, frames)
    s.commit(r1, 1)
    s.full_round(s.step(0, 1, 2, 102))
    yield (
        "retries-after-commit",
        "After round 1 committed (its round ID is the slot's last), an identical retry of its first REPLY, "
        "of its COMPLETION and of its COMMIT are STALE_ROUND and discard nothing; round 2 completes.",
        ("STALE_OR_DUPLICATE", "RETRY"),
        s,
    )

    s = opened()
    r1 = s.step(0, 1, 1, 100, policy=3)
    s.full_round(r1)
    s.commit(r1, 2)
    yield (
        "support-at-policy",
        "Rows of exactly 3 entries under support policy k = 3 are accepted (SUPPORT_ABOVE_MAX is above k).",
        ("LIMITS",),
        s,
    )

    s = Script()
    s.timeout(0)
    s.hello(max_slots=2)
    s.reset(0, 1, 100)
    r0 = s.step(0, 1, 1, 100)
    s.replies(r0, range(2))
    outside = s.step(2, 1, 1, 100, send=False)
    s.raw(s.reply_frame(outside, 0))
    s.timeout(2)
    s.reset(1, 1, 500)
    r1 = s.step(1, 1, 1, 500)
    s.replies(r1, range(2))
    s.timeout(1)
    s.replies(r0, range(2, 5))
    yield (
        "last-slot-and-beyond",
        "Two slots negotiated: a timeout before HELLO (no slot yet) and for slot 2 are ignored, a REPLY for "
        "slot 2 is TOO_MANY_SLOTS and discards nothing, the timeout of slot 1 (the last) discards its round.",
        ("LIMITS", "DISCARD"),
        s,
    )


def ending_cases() -> Iterator[tuple[str, str, tuple[str, ...], Script]]:
    for name, comment, accepted, token, wrong in (
        ("correction", "A rejection after 2 accepted: the correction commits anchor + 3.", 2, 7, 2),
        ("bonus", "All 5 accepted: the bonus commits anchor + 6.", 5, 7, 5),
        (
            "stop-token",
            "Emission ends at a stop token on draft 3: no correction, token -1 commits anchor + 3.",
            3,
            -1,
            4,
        ),
        ("budget-at-depth", "The budget ends emission on draft 5: no bonus, token -1 commits anchor + 5.", 5, -1, 6),
    ):
        s = opened()
        r1 = s.step(0, 1, 1, 100)
        s.full_round(r1)
        s.commit(r1, accepted, token=token, new_committed=100 + wrong)
        s.commit(r1, accepted, token=token, new_committed=100 + accepted + (token >= 0))
        s.step(0, 1, 2, 100 + accepted + (token >= 0))
        yield (
            f"ending-{name}",
            (comment + " The other position is POSITION_MISMATCH; the next STEP starts there."),
            ("HAPPY_PATH", "CONSUME_AFTER_COMPLETION"),
            s,
        )

    s = opened()
    r1 = s.step(0, 1, 1, 100)
    s.full_round(r1)
    s.commit(r1, 0, token=-1, new_committed=100)
    s.commit(r1, 0, token=-1, new_committed=101)
    s.commit(r1, 1, token=-2, new_committed=101)
    s.commit(r1, 0)
    yield (
        "no-token-needs-an-accepted-draft",
        "Token -1 with 0 accepted is no ending (POSITION_MISMATCH at either "
        "position); token -2 is TOKEN_OUT_OF_RANGE; the correction commits.",
        ("CONSUME_AFTER_COMPLETION",),
        s,
    )

    s = Script()
    s.hello()
    s.reset(0, 1, 100, token=PROD.vocab)
    s.reset(0, 1, 100, token=-2)
    s.reset(0, 1, 100, token=4242)
    s.reset(1, 1, 0)
    yield (
        "reset-committed-token",
        "RESET carries the committed token: a vocabulary ID or -1 (empty prefix); V and -2 are TOKEN_OUT_OF_RANGE.",
        ("HAPPY_PATH", "LIMITS"),
        s,
    )


def arm_cases() -> Iterator[tuple[str, str, tuple[str, ...], Script]]:
    arm7 = replace(DEV, depth=7)
    s = opened(arm7)
    r1 = s.step(0, 1, 1, 100)
    s.full_round(r1)
    s.commit(r1, 7)
    yield (
        "arm-depth-7",
        "A receiver configured for the separately named arm depth-7 negotiates it: 7 rows, "
        "COMPLETION of 7, all accepted and the bonus commit anchor + 8.",
        ("LIMITS", "DEV_PROFILE"),
        s,
    )

    s = Script(arm7)
    s.hello(depth=5)
    s.hello()
    s.reset(0, 1, 100)
    r1 = s.step(0, 1, 1, 100, depth=5)
    s.step(0, 1, 1, 100)
    yield (
        "design-arm-offered-to-depth-7",
        "An offer of depth-5 to a depth-7 receiver is DEPTH_MISMATCH, as is a STEP "
        "of depth 5 after depth-7 was negotiated.",
        ("LIMITS", "DEV_PROFILE"),
        s,
    )

    s = Script()
    s.hello(depth=7)
    s.hello()
    yield (
        "arm-offered-to-design-receiver",
        "An offer of depth-7 to the design's depth-5 receiver is DEPTH_MISMATCH.",
        ("LIMITS",),
        s,
    )


def config_cases() -> Iterator[tuple[str, str, tuple[str, ...], Script]]:
    """Every bound of check_config exactly at its edge (a full round under it), then one past it:
    a receiver that refuses a legal configuration, or runs under an illegal one, fails here."""
    bounds = (
        ("one-slot", "max_slots = 1", {"max_slots": 1}),
        ("support-one", "max_support = 1", {"max_support": 1}),
        ("support-equals-vocab", "max_support = V", {"max_support": DEV.vocab}),
        ("stride-equals-vocab", "dense_stride = V", {"dense_stride": DEV.vocab}),
        ("one-request", "max_requests = 1", {"max_requests": 1}),
        ("arm-depth-1", "the arm depth-1", {"depth": 1}),
        ("arm-depth-8", "the deepest arm, depth-8", {"depth": 8}),
    )
    for name, what, changes in bounds:
        s = opened(replace(DEV, **changes))
        r1 = s.step(0, 1, 1, 100)
        s.full_round(r1)
        s.commit(r1, s.config.depth)
        outcome = (
            "it negotiates; the two-token dense REPLY rows exceed that support (SUPPORT_ABOVE_MAX)"
            if changes == {"max_support": 1}
            else "it negotiates and verifies a round"
        )
        yield (name, f"A receiver configured with {what} is legal: {outcome}.", ("LIMITS", "DEV_PROFILE"), s)
    s = opened(replace(DEV, max_slots=1))
    s.reset(1, 1, 100)
    yield (
        "one-slot-second-slot",
        "Under max_slots = 1, a RESET of slot 1 is past the last slot.",
        ("LIMITS", "DEV_PROFILE"),
        s,
    )
    refused = (
        ("no-slot", "max_slots = 0", {"max_slots": 0}),
        ("support-zero", "max_support = 0", {"max_support": 0}),
        ("support-above-vocab", "max_support = V + 1", {"max_support": DEV.vocab + 1}),
        ("stride-below-vocab", "dense_stride = V - 1", {"dense_stride": DEV.vocab - 1}),
        ("no-request", "max_requests = 0", {"max_requests": 0}),
        ("five-requests", "max_requests = 5", {"max_requests": 5}),
        ("arm-depth-0", "depth 0", {"depth": 0}),
        ("arm-depth-9", "depth 9, past the deepest arm", {"depth": 9}),
        ("id-bytes-2", "2-byte IDs", {"id_bytes": 2}),
        ("q-bytes-2", "2-byte q values", {"q_bytes": 2}),
    )
    for name, what, changes in refused:
        s = Script(replace(DEV, **changes))
        s.hello()
        yield (
            f"refused-{name}",
            f"A receiver configuration with {what} is refused (BAD_SHAPE) before any event.",
            ("LIMITS", "DEV_PROFILE"),
            s,
        )


def connection_cases() -> Iterator[tuple[str, str, tuple[str, ...], Script]]:
    s = opened()
    r1 = s.step(0, 1, 1, 100)
    frames = s.replies(r1, range(2))
    s.on(1).raw(b"JUNK" + bytes(16))
    s.disconnect()
    s.on(0)
    frames += s.replies(r1, range(2, 5))
    s.complete(r1, frames)
    s.commit(r1, 2)
    yield (
        "stranger-bad-magic",
        "A connection without HELLO sends a bad magic and closes: connection 0's link and round are untouched.",
        ("CONNECTIONS", "DISCARD"),
        s,
    )

    s = opened()
    r1 = s.step(0, 1, 1, 100)
    s.replies(r1, range(2))
    s.on(1)
    s.reset(0, 9, 0)
    s.hello(vocab=7)
    s.raw(s.reply_frame(r1, 2)[:10])
    s.disconnect()
    s.on(0).replies(r1, range(2, 5))
    yield (
        "stranger-before-hello",
        "A stranger's RESET before HELLO, refused offer, truncated frame and close change nothing on connection 0.",
        ("CONNECTIONS",),
        s,
    )

    s = opened()
    r0 = s.step(0, 1, 1, 100)
    s.replies(r0, range(1))
    s.on(1)
    s.session_id = PROD.session_id + 7
    s.hello()
    s.reset(1, 1, 500)
    r1 = s.step(1, 1, 1, 500)
    s.replies(r1, range(3))
    s.step(0, 1, 2, 100)
    s.cancel(0, 1)
    s.disconnect()
    s.session_id = PROD.session_id
    s.on(0)
    s.replies(r0, range(1, 5))
    s.raw(s.reply_frame(r1, 3))
    yield (
        "two-links",
        "Two negotiated connections: connection 1 cannot command slot 0, and its disconnect discards only its own round.",
        ("CONNECTIONS", "RECONNECTION"),
        s,
    )


def random_script(seed: int) -> Script:
    """A random sequence over two slots mixing legal steps with faults (fixed seed)."""
    rng = random.Random(seed)
    s = Script()
    s.hello(max_slots=2)
    generation, committed, rounds, frames = [1, 1], [0, 500], [0, 0], [[], []]
    open_steps: list[Step | None] = [None, None]
    s.reset(0, 1, 0)
    s.reset(1, 1, 500)
    actions = (
        ["reply"] * 8
        + ["step"] * 3
        + ["complete"] * 2
        + ["commit"] * 2
        + ["reset", "timeout", "cancel", "retry", "corrupt", "disconnect"]
    )
    for _ in range(40):
        slot = rng.randrange(2)
        action = rng.choice(actions)
        current = open_steps[slot]
        if action == "reset":
            generation[slot] += rng.choice((1, 1, 1, 0))
            s.reset(slot, generation[slot], committed[slot])
            open_steps[slot], rounds[slot], frames[slot] = None, 0, []
        elif action == "step":
            rounds[slot] += rng.choice((1, 1, 0))
            open_steps[slot] = s.step(slot, generation[slot], rounds[slot], committed[slot])
            frames[slot] = []
        elif current is not None and action in ("reply", "retry", "corrupt") and len(frames[slot]) < 5:
            index = len(frames[slot]) if action != "retry" or not frames[slot] else rng.randrange(len(frames[slot]))
            frame = s.redrawn_frame(current, index) if action == "corrupt" else s.reply_frame(current, index)
            s.raw(frame)
            if action == "reply":
                frames[slot].append(frame)
        elif current is not None and action == "complete":
            s.complete(current, frames[slot])
        elif current is not None and action == "commit":
            accepted = rng.randrange(6)
            s.commit(current, accepted)
            committed[slot] = (current.anchor + accepted + 1) % POSITION_MODULUS
        elif action == "timeout":
            s.timeout(slot)
        elif action == "cancel":
            s.cancel(slot, generation[slot])
        elif action == "disconnect":
            s.disconnect()
            s.hello(max_slots=2)
    return s


def v1_isolation_cases() -> Iterator[tuple[str, str, tuple[str, ...], Script]]:
    """Refused v1 frames and a second HELLO in the middle of an open round: neither discards it."""
    v1_faults = (
        ("truncated", "a v1 frame one byte short (TRUNCATED)", encode_v1([1, 2])[:-1]),
        (
            "unknown-version",
            "a v1 frame of version 2 (UNKNOWN_VERSION)",
            encode_v1([1])[:4] + (2).to_bytes(2, "little") + encode_v1([1])[6:],
        ),
        (
            "short-payload",
            "a v1 payload of 2 bytes, shorter than its token count (UNEXPECTED_SIZE)",
            encode_v1([])[:8] + (2).to_bytes(4, "little") + b"\0\0",
        ),
        ("negative-token", "a v1 token -5 (TOKEN_OUT_OF_RANGE)", encode_v1([3, -5])),
    )
    for name, what, data in v1_faults:
        s = opened()
        r1 = s.step(0, 1, 1, 100)
        frames = s.replies(r1, range(2))
        s.raw(data)
        frames += s.replies(r1, range(2, 5))
        s.complete(r1, frames)
        s.commit(r1, 2)
        yield (
            f"v1-{name}-keeps-round",
            f"{what[0].upper()}{what[1:]} mid-round is refused and discards nothing: the round completes and commits.",
            ("V1_COEXISTENCE", "V1_ISOLATION"),
            s,
        )

    s = opened()
    r1 = s.step(0, 1, 1, 100)
    s.replies(r1, range(2))
    s.raw(b"QGR")
    yield (
        "three-bytes-discards",
        "Three bytes have no magic yet: a v2-level TRUNCATED that discards every open round.",
        ("V1_ISOLATION", "DISCARD"),
        s,
    )

    s = opened()
    r1 = s.step(0, 1, 1, 100)
    frames = s.replies(r1, range(2))
    s.hello()
    s.hello(vocab=s.config.vocab + 1)
    frames += s.replies(r1, range(2, 5))
    s.complete(r1, frames)
    yield (
        "second-hello-keeps-round",
        "A second HELLO, even one whose offer would not negotiate, is UNEXPECTED_MESSAGE and discards nothing.",
        ("V1_ISOLATION",),
        s,
    )

    for status in (layout.HELLO_ACCEPTED, layout.HELLO_REFUSED, 2, 0xFFFF):
        s = opened()
        r1 = s.step(0, 1, 1, 100)
        frames = s.replies(r1, range(2))
        s.send(HelloAnswer(s.session_id, status, ascii_field("")))
        frames += s.replies(r1, range(2, 5))
        s.complete(r1, frames)
        s.commit(r1, 2)
        yield (
            f"hello-answer-status-{status}-keeps-round",
            f"A HELLO_ANSWER of status {status} sent to the receiver is UNEXPECTED_MESSAGE whatever its status "
            "(its status row is the worker's to read): a verified frame that addresses no round discards nothing.",
            ("V1_ISOLATION",),
            s,
        )


def random_cases() -> Iterator[tuple[str, str, tuple[str, ...], Script]]:
    for seed in range(6):
        yield (
            f"seed-{seed}",
            f"Random sequence, generator seed {seed}.",
            ("RANDOM_SEQUENCE",),
            random_script(0x3A5E + seed),
        )


GROUPS = (
    ("happy_path", "Legal rounds, several slots, v1 frames alongside.", ("R12", "R16", "R17"), happy_cases),
    (
        "consumption",
        "Rows become consumable only after COMPLETION validates.",
        ("R16", "R25", "R28"),
        consumption_cases,
    ),
    ("stale_and_duplicate", "Stale or duplicate generations and rounds.", ("R17", "R19"), stale_cases),
    ("late_replies", "Replies after RESET, CANCEL or a timeout.", ("R17", "R25", "R28"), late_cases),
    ("retries", "Retries with identical or different bytes.", ("R24", "R25"), retry_cases),
    ("discard", "Missing, corrupt or timed-out q discards the whole proposal.", ("R25", "R19"), discard_cases),
    ("reconnection", "Disconnects, reconnections and HELLO negotiation.", ("R12", "R24", "R25"), reconnection_cases),
    ("limits", "Negotiated slot, request, depth and position bounds.", ("R27", "R19"), limit_cases),
    (
        "key_reuse",
        "No key is accepted twice however sessions come and go; generation exhaustion.",
        ("R22", "R24", "R28"),
        key_reuse_cases,
    ),
    (
        "consumable",
        "A round whose COMPLETION validated is kept until the target commits or releases it.",
        ("R16", "R25", "R28"),
        consumable_cases,
    ),
    (
        "holes",
        "Position wraparound, a sixth reply, COMMIT of 0, an identical STEP retry.",
        ("R14", "R16", "R24", "R27"),
        hole_cases,
    ),
    (
        "boundaries",
        "Each receiver check exactly at its boundary: positions above 2^31, the last round, support k, the last slot.",
        ("R14", "R19", "R24", "R25", "R27"),
        boundary_cases,
    ),
    ("connections", "Several connections sharing one endpoint.", ("R12", "R24", "R25"), connection_cases),
    ("arms", "Fixed-depth arms: negotiated by HELLO depth, refused when not negotiated.", ("R27", "R35"), arm_cases),
    (
        "configs",
        "Receiver configurations at each bound of check_config, and configurations it refuses (BAD_SHAPE).",
        ("R12", "R27", "R35"),
        config_cases,
    ),
    (
        "endings",
        "Every ending of a verified round has one legal COMMIT; RESET's committed token.",
        ("R01", "R11", "R16", "R17", "R22"),
        ending_cases,
    ),
    (
        "v1_isolation",
        "Refused v1 frames and a second HELLO leave open v2 rounds alone.",
        ("R12", "R25"),
        v1_isolation_cases,
    ),
    ("random", "Random mixes of legal and faulty events.", FAMILY_RULES, random_cases),
)


def build() -> Iterator[Group]:
    for name, description, rules, cases in GROUPS:
        yield Group(name, description, rules, [session_case(n, c, f, s, rules) for n, c, f, s in cases()])


# ---------------------------------------------------------------- schema

NONNEG = {"type": "integer", "minimum": 0}
VERDICT_SCHEMA = closed(
    {
        "verdict": {"enum": list(VERDICT_KINDS)},
        "reason": REASON_SCHEMA,
        "discarded": {"type": "array", "items": NONNEG, "uniqueItems": True},
        "answer": blob_schema("u8"),
    },
    required=["verdict", "discarded"],
)
SLOT_SCHEMA = closed(
    {
        "slot": NONNEG,
        "generation": NONNEG,
        "live": {"type": "boolean"},
        "committed": NONNEG,
        "last_round": {"oneOf": [{"type": "null"}, NONNEG]},
        "seed": {"$ref": "#/$defs/u64"},
        "open": {
            "oneOf": [
                {"type": "null"},
                closed({"round": NONNEG, "anchor": NONNEG, "rows": NONNEG, "consumable": {"type": "boolean"}}),
            ]
        },
    }
)
CONNECTION = {"type": "integer", "minimum": 1}
EVENT_SCHEMA = {
    "oneOf": [
        closed({"frame": blob_schema("u8"), "connection": CONNECTION}, required=["frame"]),
        closed({"timeout": NONNEG}),
        closed({"disconnect": {"const": True}, "connection": CONNECTION}, required=["disconnect"]),
    ]
}

INPUT_SCHEMA = {
    "$defs": {"helloParams": HELLO_SCHEMA},
    **closed(
        {"config": {"$ref": "#/$defs/helloParams"}, "events": {"type": "array", "minItems": 1, "items": EVENT_SCHEMA}}
    ),
}
#: the receiver's configuration refused (spec/wire/negotiation.py check_config): no event is run
CONFIG_REFUSED_SCHEMA = closed({"error": {"enum": ["BAD_SHAPE"]}})
SESSION_SCHEMA = closed(
    {
        "verdicts": {"type": "array", "items": VERDICT_SCHEMA},
        "final": closed(
            {
                "negotiated": {"type": "boolean"},
                "session_id": {"oneOf": [{"type": "null"}, {"$ref": "#/$defs/u64"}]},
                "slots": {"type": "array", "items": SLOT_SCHEMA},
            }
        ),
        "counters": {
            "type": "object",
            "propertyNames": {"enum": sorted(REASONS) + list(EVENT_COUNTERS)},
            "additionalProperties": {"type": "integer", "minimum": 1},
        },
    }
)
EXPECTED_SCHEMA = {"oneOf": [SESSION_SCHEMA, CONFIG_REFUSED_SCHEMA]}

FAMILY = Family(
    name="wire_sessions",
    description="Event sequences through the wire v2 receiver state machine: each event's verdict, the final "
    "state and the counters (docs/wire-v2.md, Receiver state machine).",
    rules=FAMILY_RULES,
    notes=NOTES,
    build=build,
    input_schema=INPUT_SCHEMA,
    expected_schema=EXPECTED_SCHEMA,
    solve=solve,
    comparator="wire",
)
