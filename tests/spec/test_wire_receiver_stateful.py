"""The receiver against a simpler model of it, written here, under random event sequences (R16, R17, R24, R25, R28).

The model keeps, per slot, the generation, liveness, committed position, last
round and the open round's rows and completion, and predicts every verdict from
the design's rules directly; the machine checks the receiver's verdicts and
state against it after every event.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from qconform.generators.families.wire_sessions import Script
from qconform.spec.wire.codec import completion_for, encode_frame
from qconform.spec.wire.messages import Cancel, Commit, Reset, Step
from qconform.spec.wire.negotiation import example_config
from qconform.spec.wire.receiver import Disconnect, FrameIn, Timeout, counter, initial_state, step

pytestmark = pytest.mark.rules("R16", "R17", "R19", "R24", "R25", "R28")

CONFIG = example_config()
OFFER = replace(CONFIG, max_slots=3, max_requests=2)
SLOTS = st.integers(0, 2)
DEPTH = CONFIG.depth


@dataclass
class Open:
    step: Step
    rows: list[bytes] = field(default_factory=list)
    done: bytes | None = None


@dataclass
class Slot:
    generation: int = 0
    live: bool = False
    committed: int = 0
    last_round: int | None = None
    open: Open | None = None


class ReceiverMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.state = initial_state(CONFIG)
        self.script = Script(OFFER)
        self.negotiated = False
        self.slots: list[Slot] = []
        self.dead_steps: list[Step] = []
        self.discards = 0
        self.rejections = 0

    # -- the model's bookkeeping

    def open_count(self) -> int:
        return sum(1 for s in self.slots if s.open is not None)

    def kill(self, index: int, force: bool = False) -> tuple[int, ...]:
        """Discard the slot's open round; a consumable one only when ``force`` (RESET, CANCEL, disconnect: R28)."""
        slot = self.slots[index]
        if slot.open is None or (slot.open.done is not None and not force):
            return ()
        self.dead_steps.append(slot.open.step)
        slot.open, slot.live = None, False
        self.discards += 1
        return (index,)

    def expect(self, event, kind: str, reason: str | None = None, discarded: tuple[int, ...] = ()) -> None:
        self.state, verdict = step(self.state, event)
        assert (verdict.kind, verdict.reason, verdict.discarded) == (kind, reason, discarded)
        self.rejections += kind == "reject"

    def send(self, message, kind: str, reason: str | None = None, discarded: tuple[int, ...] = ()) -> None:
        data = message if isinstance(message, bytes) else encode_frame(message)
        self.expect(FrameIn(data), kind, reason, discarded)

    def before_hello(self, message) -> bool:
        if self.negotiated:
            return False
        self.send(message, "reject", "V2_BEFORE_HELLO")
        return True

    # -- rules

    @rule()
    def hello(self):
        if self.negotiated:
            return self.send(OFFER, "reject", "UNEXPECTED_MESSAGE")
        self.negotiated = True
        self.slots += [Slot() for _ in range(OFFER.max_slots - len(self.slots))]
        self.send(OFFER, "accept")

    @rule(index=SLOTS, delta=st.integers(-1, 2))
    def reset(self, index, delta):
        generation = max(0, (self.slots[index].generation if self.slots else 0) + delta)
        message = Reset(OFFER.session_id, 11, generation, 0, index)
        if self.before_hello(message):
            return
        slot = self.slots[index]
        if generation <= slot.generation:
            reason = "DUPLICATE_GENERATION" if generation == slot.generation else "STALE_GENERATION"
            return self.send(message, "reject", reason)
        discarded = self.kill(index, force=True)
        committed = slot.committed + 3
        self.slots[index] = Slot(generation, True, committed)
        self.send(replace(message, committed=committed), "accept", None, discarded)

    @rule(index=SLOTS, delta=st.integers(-1, 2))
    def open_round(self, index, delta):
        slot = self.slots[index] if self.slots else Slot()
        round_id = max(0, (slot.last_round or 0) + delta)
        message = self.script.step(index, slot.generation, round_id, slot.committed, send=False)
        if self.before_hello(message):
            return
        if not slot.live:
            return self.send(message, "reject", "STALE_GENERATION")
        if slot.open is not None:
            if message == slot.open.step:  # an identical retry of the open round's STEP
                return self.send(message, "duplicate")
            return self.send(message, "reject", "UNEXPECTED_MESSAGE")
        if slot.last_round is not None and round_id <= slot.last_round:
            return self.send(message, "reject", "DUPLICATE_ROUND" if round_id == slot.last_round else "STALE_ROUND")
        if self.open_count() >= OFFER.max_requests:
            return self.send(message, "reject", "TOO_MANY_REQUESTS")
        slot.open, slot.last_round = Open(message), round_id
        self.send(message, "accept")

    def open_slots(self) -> list[int]:
        return [i for i, s in enumerate(self.slots) if s.open is not None]

    @precondition(lambda self: any(s.open is not None for s in self.slots))
    @rule(data=st.data(), kind=st.sampled_from(["next", "next", "next", "same", "redraw", "corrupt"]))
    def reply(self, data, kind):
        index = data.draw(st.sampled_from(self.open_slots()))
        current = self.slots[index].open
        position = len(current.rows)
        if kind == "corrupt":
            frame = self.script.reply_frame(current.step, min(position, DEPTH - 1), values=(0x3F000000,) * 3)
            return self.send(frame, "reject", "WRONG_TOTAL_MASS", self.kill(index))
        if kind in ("same", "redraw") and current.rows:
            if kind == "same":
                return self.send(current.rows[0], "duplicate")
            return self.send(self.script.redrawn_frame(current.step, 0), "reject", "RETRY_MISMATCH", self.kill(index))
        frame = self.script.reply_frame(current.step, position)
        if current.done is not None or position >= DEPTH:
            return self.send(frame, "reject", "POSITION_MISMATCH", self.kill(index))
        current.rows.append(frame)
        self.send(frame, "accept")

    @precondition(lambda self: any(s.open is not None for s in self.slots))
    @rule(data=st.data(), honest=st.booleans())
    def complete(self, data, honest):
        index = data.draw(st.sampled_from(self.open_slots()))
        current = self.slots[index].open
        completion = completion_for(current.step, current.rows)
        frame = encode_frame(
            completion if honest else replace(completion, reply_checksum=completion.reply_checksum ^ 1)
        )
        if current.done is not None:
            if frame == current.done:
                return self.send(frame, "duplicate")
            return self.send(frame, "reject", "RETRY_MISMATCH", self.kill(index))
        if len(current.rows) < DEPTH:
            return self.send(frame, "reject", "MISSING_Q", self.kill(index))
        if not honest:
            return self.send(frame, "reject", "COMPLETION_CHECKSUM_MISMATCH", self.kill(index))
        current.done = frame
        self.send(frame, "accept")

    @precondition(lambda self: any(s.open is not None for s in self.slots))
    @rule(data=st.data(), accepted=st.integers(0, DEPTH))
    def commit(self, data, accepted):
        index = data.draw(st.sampled_from(self.open_slots()))
        slot = self.slots[index]
        s = slot.open.step
        message = Commit(s.session_id, s.generation, s.round, s.anchor + accepted + 1, 5, index, accepted)
        if slot.open.done is None:
            return self.send(message, "reject", "CONSUMED_BEFORE_COMPLETION")
        self.dead_steps.append(s)
        slot.open, slot.committed = None, s.anchor + accepted + 1
        self.send(message, "accept")

    @rule(index=SLOTS)
    def cancel(self, index):
        generation = self.slots[index].generation if self.slots else 0
        message = Cancel(OFFER.session_id, generation, index)
        if self.before_hello(message):
            return
        if not self.slots[index].live:
            return self.send(message, "reject", "STALE_GENERATION")
        discarded = self.kill(index, force=True)
        self.slots[index].live = False
        self.send(message, "accept", None, discarded)

    @rule(index=SLOTS)
    def timeout(self, index):
        if index >= len(self.slots) or self.slots[index].open is None or self.slots[index].open.done is not None:
            return self.expect(Timeout(index), "ignore")
        self.expect(Timeout(index), "accept", None, self.kill(index))

    @rule()
    def disconnect(self):
        discarded = tuple(i for i in range(len(self.slots)) if self.kill(i, force=True))
        for slot in self.slots:
            slot.live = False
        self.negotiated = False
        self.expect(Disconnect(), "accept", None, discarded)

    @precondition(lambda self: self.negotiated and self.dead_steps)
    @rule(data=st.data())
    def late_reply(self, data):
        old = data.draw(st.sampled_from(self.dead_steps))
        slot = self.slots[old.slot]
        if old.generation < slot.generation or not slot.live:
            reason = "LATE_REPLY"
        else:
            reason = "STALE_ROUND"  # a committed round of the live generation
        self.send(self.script.reply_frame(old, 0), "reject", reason)

    @rule(junk=st.binary(max_size=40))
    def garbage(self, junk):
        discarded = tuple(i for i in range(len(self.slots)) if self.kill(i))
        reason = "TRUNCATED" if len(junk) < 3 else "BAD_MAGIC"
        self.send(b"\0" + junk, "reject", reason, discarded)

    # -- the receiver's state is the model's

    @invariant()
    def states_agree(self):
        assert (self.state.negotiated is not None) == self.negotiated
        assert len(self.state.slots) == len(self.slots)
        for mine, theirs in zip(self.slots, self.state.slots):
            assert (theirs.generation, theirs.live, theirs.committed, theirs.last_round) == (
                mine.generation,
                mine.live,
                mine.committed,
                mine.last_round,
            )
            if mine.open is None:
                assert theirs.open is None
            else:
                assert theirs.open is not None
                assert theirs.open.step == mine.open.step and list(theirs.open.replies) == mine.open.rows
                assert theirs.open.completion == mine.open.done
        assert counter(self.state, "discarded_proposals") == self.discards
        assert sum(n for name, n in self.state.counters if name.isupper()) == self.rejections

    @invariant()
    def open_rounds_are_live_and_bounded(self):
        for slot in self.state.slots:
            if slot.open is not None:
                assert slot.live and len(slot.open.replies) <= DEPTH
                assert not slot.open.consumable or len(slot.open.replies) == DEPTH


ReceiverMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestReceiverAgainstModel = ReceiverMachine.TestCase
