"""The two roles back to back: every frame the worker state machine sends is one the receiver state machine accepts.

The target's own commands (RESET, STEP, COMMIT) go through the receiver as it sends
them and through the worker as it reads them; the worker's frames (HELLO, REPLY,
COMPLETION) go through the receiver. A test of both roles (docs/wire-v2.md,
"Receiver state machine" and "Worker state machine").
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from qconform.generators.families.worker_sessions import MODELS, SESSION_BASE, V32
from qconform.spec.floats import F32_NEG_INF
from qconform.spec.wire import receiver
from qconform.spec.wire.codec import encode_frame
from qconform.spec.wire.messages import Commit, Message, Reset, Step
from qconform.spec.wire.worker import ACCEPT, Connect, DraftModel, FrameIn, WorkerState, initial_state, step

pytestmark = pytest.mark.rules("R12", "R16", "R17", "R25")

SID = SESSION_BASE + 1


def linked(model: DraftModel) -> tuple[WorkerState, receiver.ReceiverState]:
    """A worker and a receiver of one configuration, negotiated: the worker's HELLO answered by the receiver."""
    worker, hello = step(initial_state(V32, model), Connect(1, SID))
    target, verdict = receiver.step(receiver.initial_state(V32), FrameIn(hello.frames[0]))
    assert verdict.kind == ACCEPT and verdict.answer is not None
    worker, answered = step(worker, FrameIn(verdict.answer, 1))
    assert answered.kind == ACCEPT
    return worker, target


def exchange(
    worker: WorkerState, target: receiver.ReceiverState, message: Message
) -> tuple[WorkerState, receiver.ReceiverState, list[receiver.Disposition]]:
    """The target sends ``message`` (its receiver judges it first), the worker answers, the receiver judges each frame."""
    target, sent = receiver.step(target, FrameIn(encode_frame(message)))
    assert sent.kind == ACCEPT, sent
    worker, output = step(worker, FrameIn(encode_frame(message), 1))
    verdicts = []
    for frame in output.frames:
        target, verdict = receiver.step(target, FrameIn(frame))
        verdicts.append(verdict)
    return worker, target, verdicts


def a_step(round_id: int, anchor: int) -> Step:
    return Step(SID, 1, round_id, anchor, 0, 1, 0x3F800000, 0, V32.depth, bytes(32))


def test_served_rounds_become_consumable_and_commit_on_both_sides():
    worker, target = linked(MODELS[32])
    worker, target, _ = exchange(worker, target, Reset(SID, 0x5EED, 1, 100, 0, 9))
    worker, target, verdicts = exchange(worker, target, a_step(1, 100))
    assert [v.kind for v in verdicts] == [ACCEPT] * (V32.depth + 1)
    assert receiver.consumable_rows(target, 0) is not None
    worker, target, _ = exchange(worker, target, Commit(SID, 1, 1, 103, 7, 0, 2))
    assert (worker.slots[0].committed, target.slots[0].committed) == (103, 103)
    worker, target, verdicts = exchange(worker, target, a_step(2, 103))
    assert [v.kind for v in verdicts] == [ACCEPT] * (V32.depth + 1)
    assert receiver.consumable_rows(target, 0) is not None


def test_a_failed_completion_discards_the_round_at_the_receiver():
    """A draft model that cannot propose: the worker's FAILED COMPLETION is accepted and the
    receiver discards the round (target-only fallback, R25)."""
    model = MODELS[32]
    masked = replace(model, base_logits=model.base_logits[:1] + ((F32_NEG_INF,) * V32.vocab,) + model.base_logits[2:])
    worker, target = linked(masked)
    worker, target, _ = exchange(worker, target, Reset(SID, 0x5EED, 1, 100, 0, 9))
    worker, target, verdicts = exchange(worker, target, a_step(1, 100))
    assert [(v.kind, v.discarded) for v in verdicts] == [(ACCEPT, (0,))]
    assert receiver.counter(target, "worker_failed") == 1 and not target.slots[0].live
