"""The worker state machine (spec/wire/worker.py): each rule of docs/wire-v2.md, "Worker state machine".

Each test checks one rule of the decision table against the spec's own
components (the codec, the proposal chain), never against
hard-coded bytes; each was seen to fail with the rule's code flipped in
``worker.py`` (see the commit message).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from qconform.generators.families.worker_sessions import MODELS, SESSION_BASE, V32, event_from_json, random_script
from qconform.spec.proposal import ProposalInput, SupportPolicy, proposal_chain
from qconform.spec.rng_abi import RngIdentity
from qconform.spec.wire import layout
from qconform.spec.wire.codec import decode_frame, encode_frame, reply_from_row
from qconform.spec.wire.messages import Commit, Completion, HelloAnswer, Reply, Reset, Step, ascii_field
from qconform.spec.wire.worker import (
    ACCEPT,
    DUPLICATE,
    REJECT,
    AnswerTimeout,
    Connect,
    Disconnect,
    FrameIn,
    Output,
    WorkerState,
    initial_state,
    run,
)

SID = SESSION_BASE + 1
ACCEPTING = encode_frame(HelloAnswer(SID, layout.HELLO_ACCEPTED, ascii_field("")))


def fresh() -> WorkerState:
    return initial_state(V32, MODELS[32])


def negotiated() -> WorkerState:
    state, _ = run(fresh(), [Connect(1, SID), FrameIn(ACCEPTING, 1)])
    return state


def command(state: WorkerState, *messages, connection: int = 1) -> tuple[WorkerState, list[Output]]:
    return run(state, [FrameIn(encode_frame(m), connection) for m in messages])


def a_step(round_id: int = 1, anchor: int = 100, generation: int = 1, session: int = SID, **changes) -> Step:
    return replace(Step(session, generation, round_id, anchor, 0, 1, 0x3F800000, 0, 5, bytes(32)), **changes)


def a_reset(generation: int = 1, committed: int = 100, seed: int = 0x5EED, token: int = -1, session: int = SID):
    return Reset(session, seed, generation, committed, 0, token)


def served_rows(output: Output) -> list[Reply]:
    replies = [decode_frame(f, V32) for f in output.frames[:-1]]
    assert all(isinstance(r, Reply) for r in replies)
    return replies  # type: ignore[return-value]


def chain(seed: int, step_message: Step, x0: int):
    model = MODELS[32]
    identity = RngIdentity(seed, step_message.generation, step_message.round, step_message.anchor)
    inp = ProposalInput(
        model.base_logits, model.markov_left, model.markov_right, x0, step_message.temperature,
        SupportPolicy.dense(), identity,
    )  # fmt: skip
    return proposal_chain(inp)


def replies_of(seed: int, step_message: Step, x0: int) -> tuple[bytes, ...]:
    """The REPLY frames of the proposal chain from ``x0`` under the slot's seed, as the codec encodes them."""
    rows = chain(seed, step_message, x0).rows
    return tuple(
        encode_frame(
            reply_from_row(
                SID, 0, step_message.generation, step_message.round, r.draw.position, r.token, r.q, V32.dense_stride
            )
        )
        for r in rows
    )


@pytest.mark.rules("R12", "R13")
@pytest.mark.parametrize(
    "first",
    [
        encode_frame(a_reset()),
        encode_frame(a_step()),
        encode_frame(HelloAnswer(SID + 1, layout.HELLO_ACCEPTED, ascii_field(""))),
        encode_frame(HelloAnswer(SID, 2, ascii_field(""))),
        ACCEPTING[:-1] + bytes([ACCEPTING[-1] ^ 1]),
        encode_frame(replace(V32, session_id=SID)),
    ],
    ids=["reset", "step", "other-session", "status-2", "bad-checksum", "hello"],
)
def test_anything_but_the_accepting_answer_first_ends_the_connection(first):
    state, outputs = run(fresh(), [Connect(1, SID), FrameIn(first, 1)])
    assert outputs[1].kind == REJECT and outputs[1].close and outputs[1].frames == ()
    assert state.links == () and state.slots == fresh().slots


@pytest.mark.rules("R12")
def test_a_refusal_is_accepted_and_closes_and_the_timeout_only_while_awaiting():
    refusal = encode_frame(HelloAnswer(SID, layout.HELLO_REFUSED, ascii_field("VOCAB_MISMATCH")))
    state, outputs = run(fresh(), [Connect(1, SID), FrameIn(refusal, 1), AnswerTimeout(1), Connect(2, SID + 1)])
    assert (outputs[1].kind, outputs[1].close, outputs[2].kind) == (ACCEPT, True, "ignore")
    state, (fired, late) = run(state, [AnswerTimeout(2), AnswerTimeout(2)])
    assert fired.close and not late.close and late.kind == "ignore" and state.links == ()


@pytest.mark.rules("R12")
def test_the_answer_session_is_checked_before_its_status():
    both = encode_frame(HelloAnswer(SID + 1, 2, ascii_field("")))
    _, outputs = run(fresh(), [Connect(1, SID), FrameIn(both, 1)])
    assert outputs[1].reason == "SESSION_MISMATCH"


@pytest.mark.rules("R12", "R18")
def test_a_command_before_the_answer_is_refused_ahead_of_its_size():
    """Step 3 of the worker's decoding order (V2_BEFORE_HELLO) precedes step 4 (the payload bounds)."""
    data = encode_frame(a_step())
    bad_size = data[:12] + (99).to_bytes(4, "little") + data[16:]
    _, outputs = run(fresh(), [Connect(1, SID), FrameIn(bad_size, 1)])
    assert outputs[1].reason == "V2_BEFORE_HELLO"


@pytest.mark.rules("R01", "R15", "R22")
def test_a_served_round_is_the_proposal_chain_under_the_slots_keys():
    state, (_, served) = command(negotiated(), a_reset(token=9), a_step())
    expected = chain(0x5EED, a_step(), 9)
    rows = served_rows(served)
    assert [r.token for r in rows] == expected.tokens
    assert [r.position for r in rows] == [row.draw.position for row in expected.rows]
    assert [(d.key.counter_words(), d.u24) for d in served.draws] == [
        (row.draw.counter, row.draw.u24) for row in expected.rows
    ]
    assert state.slots[0].open is not None and list(state.slots[0].open.tokens) == expected.tokens


@pytest.mark.rules("R01", "R17")
@pytest.mark.parametrize(("accepted", "token"), [(2, 7), (5, 9), (3, -1)], ids=["correction", "bonus", "early-end"])
def test_the_next_round_conditions_on_the_committed_token(accepted, token):
    state, (_, first) = command(negotiated(), a_reset(token=9), a_step())
    drafts = [r.token for r in served_rows(first)]
    new = 100 + accepted + (token >= 0)
    commit = layout.NO_TOKEN if token < 0 else token
    state, (done, second) = command(state, Commit(SID, 1, 1, new, commit, 0, accepted), a_step(2, new))
    x0 = drafts[accepted - 1] if token < 0 else token
    assert done.kind == ACCEPT and second.frames[:-1] == replies_of(0x5EED, a_step(2, new), x0)


@pytest.mark.rules("R01", "R17")
def test_a_reset_without_a_token_conditions_on_the_start_token():
    state, outputs = command(
        negotiated(), a_reset(token=9), a_step(), Commit(SID, 1, 1, 103, 11, 0, 2), a_reset(2, 103), a_step(1, 103, 2)
    )
    assert outputs[-1].frames[:-1] == replies_of(0x5EED, a_step(1, 103, 2), MODELS[32].start_token)


@pytest.mark.rules("R24")
def test_an_identical_retry_resends_the_frames_and_draws_nothing():
    state, (_, served, again, other) = command(negotiated(), a_reset(), a_step(), a_step(), a_step(context_version=2))
    assert again.kind == DUPLICATE and again.frames == served.frames and again.draws == ()
    assert other.reason == "UNEXPECTED_MESSAGE" and len(other.frames) == 1


@pytest.mark.rules("R16", "R25")
@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (a_step(generation=2), "STALE_GENERATION"),
        (a_step(anchor=99), "POSITION_MISMATCH"),
        (a_step(depth=4), "DEPTH_MISMATCH"),
        (a_step(temperature=0), "NEGATIVE_VALUE"),
    ],
)
def test_a_refused_step_gets_one_failed_completion_on_its_route(message, reason):
    _, (_, refused) = command(negotiated(), a_reset(), message)
    assert refused.reason == reason and len(refused.frames) == 1 and refused.draws == ()
    completion = decode_frame(refused.frames[0], V32)
    assert isinstance(completion, Completion)
    assert (completion.status, completion.row_count, completion.reply_bytes, completion.reply_checksum) == (
        layout.STATUS_FAILED,
        V32.depth,
        0,
        0,
    )
    assert (completion.generation, completion.round, completion.anchor) == (
        message.generation,
        message.round,
        message.anchor,
    )


@pytest.mark.rules("R16")
@pytest.mark.parametrize("message", [a_step(session=SID + 3), replace(a_step(), slot=2)], ids=["session", "slot"])
def test_a_step_that_names_no_round_of_this_link_gets_nothing(message):
    _, (_, refused) = command(negotiated(), a_reset(), message)
    assert refused.kind == REJECT and refused.frames == ()


@pytest.mark.rules("R24", "R28")
def test_a_slot_live_on_another_link_is_held_until_that_link_lets_it_go():
    state, _ = command(negotiated(), a_reset(), a_step())
    state, _ = run(state, [Connect(2, SID + 1), FrameIn(encode_frame(HelloAnswer(SID + 1, 0, ascii_field(""))), 2)])
    state, (held,) = command(state, a_reset(2, 0, session=SID + 1), connection=2)
    assert held.reason == "SLOT_HELD" and state.slots[0].owner == 1 and state.slots[0].open is not None
    state, _ = run(state, [Disconnect(1)])
    state, (again, taken) = command(state, a_reset(1, 0, session=SID + 1), a_reset(2, 0, session=SID + 1), connection=2)
    assert again.reason == "DUPLICATE_GENERATION" and taken.kind == ACCEPT and state.slots[0].owner == 2


@pytest.mark.rules("R17", "R24")
def test_a_disconnect_ends_the_links_generations_and_keeps_them():
    state, _ = command(negotiated(), a_reset(4), a_step(generation=4))
    state, _ = run(state, [Disconnect(1), Connect(1, SID), FrameIn(ACCEPTING, 1)])
    assert not state.slots[0].live and state.slots[0].open is None and state.slots[0].generation == 4
    state, (step_again, reset_again) = command(state, a_step(generation=4), a_reset(4))
    assert (step_again.reason, reset_again.reason) == ("STALE_GENERATION", "DUPLICATE_GENERATION")


@pytest.mark.rules("R22", "R24")
@pytest.mark.parametrize("seed", range(12))
def test_no_key_is_drawn_twice_in_a_random_sequence(seed):
    script = random_script(0x7700 + seed)
    state = initial_state(script.config, script.model)
    _, outputs = run(state, [event_from_json(e) for e in script.events])
    keys = [(d.key.key_words(), d.key.counter_words()) for o in outputs for d in o.draws]
    assert keys and len(keys) == len(set(keys))
