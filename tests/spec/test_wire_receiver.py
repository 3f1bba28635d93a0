"""The wire v2 receiver state machine (R12, R16, R17, R24, R25, R27, R28)."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter

import pytest

from qconform.generators.corpus import default_vectors_dir
from qconform.generators.families import wire_sessions
from qconform.generators.families.wire_sessions import Script, event_from_json, opened
from qconform.spec.errors import SpecError
from qconform.spec.wire.codec import encode_frame
from qconform.spec.wire.messages import Commit
from qconform.spec.wire.negotiation import example_config
from qconform.spec.wire.reasons import REASONS
from qconform.spec.wire.receiver import (
    EVENT_COUNTERS,
    REJECT,
    Disposition,
    FrameIn,
    ReceiverState,
    commit_for_round,
    consumable_rows,
    counter,
    initial_state,
    step,
)

pytestmark = pytest.mark.rules("R12", "R16", "R17", "R24", "R25", "R27", "R28")


def run(script: Script) -> tuple[ReceiverState, list[Disposition], list[ReceiverState]]:
    state = initial_state(script.config)
    verdicts, states = [], []
    for obj in script.events:
        state, verdict = step(state, event_from_json(obj))
        verdicts.append(verdict)
        states.append(state)
    return state, verdicts, states


def without_counters(state: ReceiverState) -> ReceiverState:
    return dataclasses.replace(state, counters=())


def test_rows_become_consumable_only_after_completion():
    s = opened()
    r1 = s.step(0, 1, 1, 100)
    frames = s.replies(r1)
    state, verdicts, states = run(s)
    assert all(v.kind == "accept" for v in verdicts)
    assert consumable_rows(state, 0) is None  # five rows in, no COMPLETION yet
    s.commit(r1, 1)
    s.complete(r1, frames)
    state, verdicts, _ = run(s)
    assert verdicts[-2] == Disposition(REJECT, "CONSUMED_BEFORE_COMPLETION")
    rows = consumable_rows(state, 0)
    assert rows == tuple(s.row(r1, i)[0] for i in range(5))
    s.commit(r1, 1)
    state, verdicts, _ = run(s)
    assert verdicts[-1].kind == "accept" and state.slots[0].committed == 102 and state.slots[0].open is None


@pytest.mark.rules("R01")
@pytest.mark.parametrize("support_policy", [0, 3])
def test_consumed_rows_are_the_q_rows_that_sampled_each_token(support_policy):
    """R01 on the receiver: row i handed to the verifier is REPLY i's own q row, in position order."""
    s = opened()
    r1 = s.step(0, 1, 1, 100, support_policy)
    s.complete(r1, s.replies(r1))
    state, verdicts, _ = run(s)
    assert all(v.kind == "accept" for v in verdicts)
    rows = consumable_rows(state, 0)
    sent = [s.row(r1, i) for i in range(5)]
    assert rows is not None and rows == tuple(row for row, _ in sent)
    assert len(set(rows)) == 5  # distinct rows: a receiver that reorders or repeats one fails above


def test_corrupt_q_discards_the_entire_proposal():
    s = opened()
    r1 = s.step(0, 1, 1, 100)
    s.replies(r1, range(3))
    s.raw(s.reply_frame(r1, 3, values=(0x3F000000, 0x3F000000, 0x3E800000)))  # mass 5/4 M
    state, verdicts, _ = run(s)
    assert verdicts[-1] == Disposition(REJECT, "WRONG_TOTAL_MASS", (0,))
    slot = state.slots[0]
    assert slot.open is None and not slot.live and slot.committed == 100  # target-only from the committed prefix
    assert counter(state, "discarded_proposals") == 1 and counter(state, "WRONG_TOTAL_MASS") == 1
    s.replies(r1, range(4, 5))
    s.step(0, 1, 2, 100)
    state, verdicts, _ = run(s)
    assert [v.reason for v in verdicts[-2:]] == ["LATE_REPLY", "STALE_GENERATION"]


def test_an_unattributable_frame_discards_every_open_round():
    s = opened()
    s.reset(2, 5, 7)
    a, b = s.step(0, 1, 1, 100), s.step(2, 5, 1, 7)
    s.replies(a, range(2))
    s.replies(b, range(1))
    s.raw(b"QSMP\x02\x00")
    state, verdicts, _ = run(s)
    assert verdicts[-1] == Disposition(REJECT, "TRUNCATED", (0, 2))
    assert all(slot.open is None for slot in state.slots)


def test_stale_and_late_frames_change_nothing_but_counters():
    s = opened()
    r1 = s.step(0, 1, 1, 100)
    s.full_round(r1)
    s.commit(r1, 0)
    r2 = s.step(0, 1, 2, 101)
    s.replies(r2, range(2))
    s.raw(s.reply_frame(r1, 0))  # a committed round
    s.raw(s.reply_frame(dataclasses.replace(r2, generation=0), 0))  # an older generation
    s.raw(s.reply_frame(r2, 3, session_id=r2.session_id + 1))  # another session
    _, verdicts, states = run(s)
    assert [v.reason for v in verdicts[-3:]] == ["STALE_ROUND", "LATE_REPLY", "SESSION_MISMATCH"]
    assert all(v.discarded == () for v in verdicts[-3:])
    assert len({without_counters(st) for st in states[-4:]}) == 1


def test_identical_retries_are_idempotent_and_different_ones_discard():
    s = opened()
    r1 = s.step(0, 1, 1, 100)
    frames = s.replies(r1, range(3))
    s.raw(frames[1])
    _, verdicts, states = run(s)
    assert verdicts[-1].kind == "duplicate" and without_counters(states[-1]) == without_counters(states[-2])
    s.raw(s.redrawn_frame(r1, 2))
    state, verdicts, _ = run(s)
    assert verdicts[-1] == Disposition(REJECT, "RETRY_MISMATCH", (0,)) and state.slots[0].open is None


def test_reconnection_invalidates_keys_in_flight():
    s = opened()
    r1 = s.step(0, 1, 1, 100)
    s.replies(r1, range(2))
    s.disconnect()
    state, verdicts, _ = run(s)
    assert verdicts[-1].discarded == (0,) and state.negotiated is None and not state.slots[0].live
    s.session_id += 1
    s.hello()
    s.session_id -= 1
    s.replies(r1, range(2, 3))
    s.session_id += 1
    s.step(0, 1, 2, 100)
    s.reset(0, 2, 100)
    state, verdicts, _ = run(s)
    assert [v.reason for v in verdicts[-4:]] == [None, "SESSION_MISMATCH", "STALE_GENERATION", None]
    assert state.slots[0].committed == 100 and state.slots[0].generation == 2


def test_timeout_invalidates_the_generation_before_reuse():
    s = opened()
    r1 = s.step(0, 1, 1, 100)
    s.replies(r1, range(4))
    s.timeout(0)
    s.timeout(0)
    s.replies(r1, range(4, 5))
    state, verdicts, _ = run(s)
    assert [v.kind for v in verdicts[-3:]] == ["accept", "ignore", "reject"]
    assert verdicts[-3].discarded == (0,) and verdicts[-1].reason == "LATE_REPLY"
    assert counter(state, "timeouts") == 1 and counter(state, "ignored_timers") == 1


def test_configuration_must_have_the_fixed_shape():
    for depth in (0, 9):  # no fixed-depth arm (depth-1..depth-8, R35)
        with pytest.raises(SpecError):
            initial_state(dataclasses.replace(example_config(), depth=depth))
    with pytest.raises(SpecError):
        initial_state(example_config(max_requests=5))


def test_every_verdict_is_counted_in_the_session_vectors():
    for group in wire_sessions.build():
        for case in group.tests:
            if "error" in case.expected:  # a configuration the design forbids: no receiver to run
                continue
            state, verdicts, _ = run_json(case.input)
            rejected = Counter(v.reason for v in verdicts if v.kind == REJECT)
            assert {k: v for k, v in state.counters if k in REASONS} == dict(rejected), case.name
            assert set(dict(state.counters)) <= set(REASONS) | set(EVENT_COUNTERS)
            assert counter(state, "discarded_proposals") == sum(len(v.discarded) for v in verdicts)


def run_json(case_input: dict):
    script = Script(wire_sessions.hello_from_json(case_input["config"]))
    script.events = case_input["events"]
    return run(script)


def verification_endings() -> set[tuple[int, tuple[int, ...]]]:
    """Every (accepted, emitted) outcome of the verification_round vectors within the wire's depth."""
    document = json.loads((default_vectors_dir() / "verification_round.json").read_text(encoding="utf-8"))
    return {
        (request["accepted"], tuple(request["emitted"]))
        for group in document["testGroups"]
        for case in group["tests"]
        for request in case["expected"].get("requests", ())
        if request["accepted"] <= 5
    }


def test_every_verification_ending_has_exactly_one_legal_commit():
    endings = verification_endings()
    # the corpus holds all three endings: correction or bonus (accepted + 1 emitted) and an early end (accepted)
    assert {len(emitted) - accepted for accepted, emitted in endings} == {0, 1}
    s = opened()
    r1 = s.step(0, 1, 1, 100)
    s.full_round(r1)
    before, _, _ = run(s)
    for accepted, emitted in endings:
        legal = commit_for_round(100, accepted, emitted)
        # the COMMIT names the ending (its accepted count and token, -1 for none); one position is legal
        taken = [
            position
            for position in (100 + accepted, 100 + accepted + 1)
            if step(before, FrameIn(encode_frame(Commit(s.session_id, 1, 1, position, legal[1], 0, accepted))))[1].kind
            == "accept"
        ]
        assert taken == [legal[2]], (accepted, emitted, taken)
        assert legal[2] == 100 + len(emitted)


def test_commit_for_round_refuses_what_no_round_emits():
    with pytest.raises(ValueError):
        commit_for_round(100, 0, ())
    with pytest.raises(ValueError):
        commit_for_round(100, 2, (1, 2, 3, 4))
