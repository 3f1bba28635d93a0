"""Faults injected between a worker and a verifier: the whole proposal is discarded, never partly committed.

A worker endpoint and a target (the verifier's driving role) run four rounds
through the fault proxy on loopback, with one fault in round 2. For every fault
the test asserts the four things the design requires (R25, R28): no partial
commit, no stale q consumed, the whole proposal discarded, the matching counter
incremented; and that the link recovers (rounds 3 and 4 commit under a new
generation). Every committed round is checked against the spec draw for draw.

An identical duplicate is the one fault that must *not* discard: R24 makes an
identical retry harmless, so it is a ``duplicate`` (counted, nothing consumed
twice); a duplicate that differs (``redraw``, a redraw under a reused key) is
RETRY_MISMATCH and discards.
"""

from __future__ import annotations

import asyncio
import functools

import pytest

pytest.importorskip("torch")

from endpoint_servers import check_committed_round  # noqa: E402

from qconform.adapters.endpoint.deployment import hello_config  # noqa: E402
from qconform.adapters.endpoint.model import DraftModel, TargetModel  # noqa: E402
from qconform.adapters.endpoint.target import Target  # noqa: E402
from qconform.adapters.endpoint.worker import WorkerEndpoint  # noqa: E402
from qconform.adapters.fault_proxy import (  # noqa: E402
    COMPLETION,
    FAULT_KINDS,
    MIX_KINDS,
    Fault,
    FaultMix,
    FaultProxy,
    fault_indices,
    redrawn,
)
from qconform.spec.proposal import SupportPolicy  # noqa: E402
from qconform.spec.qrow import QRow  # noqa: E402
from qconform.spec.wire.codec import decode_frame, encode_frame, reply_from_row  # noqa: E402
from qconform.spec.wire.messages import Reply  # noqa: E402
from qconform.spec.wire.negotiation import example_config  # noqa: E402

pytestmark = pytest.mark.rules("R16", "R19", "R24", "R25", "R28")

VOCAB = 32
DEPTH = 5
FAULTED_ROUND = 2
ROUNDS = 4
RUN_S = 30.0

#: fault -> (frame index it hits, the faulted round's discard reason, the counter that must move)
FAULTS = {
    "drop": (DEPTH - 1, "MISSING_Q", "MISSING_Q"),
    "delay": (2, "timeout", "timeouts"),
    "corrupt": (2, "CHECKSUM_MISMATCH", "CHECKSUM_MISMATCH"),
    "redraw": (2, "RETRY_MISMATCH", "RETRY_MISMATCH"),
    "reorder": (1, "POSITION_MISMATCH", "POSITION_MISMATCH"),
    "late_after_reset": (2, "reset", "LATE_REPLY"),
    "disconnect": (2, "disconnect", "disconnects"),
    "truncate": (2, "TRUNCATED", "TRUNCATED"),
    "fail": (COMPLETION, "worker_failed", "worker_failed"),
}


async def play(faults: list[Fault], support_policy: int = 0, watchdog_s: float = 2.0):
    """Four rounds through the proxy; (target, proxy, model, target model)."""
    config = hello_config(vocab=VOCAB, max_support=16)
    model = DraftModel.random(VOCAB, seed=3)
    target_model = TargetModel.near(model)
    worker = WorkerEndpoint(config, model)
    proxy = FaultProxy("127.0.0.1", await worker.start(), faults)
    target = Target(
        config, target_model, "127.0.0.1", await proxy.start(), support_policy=support_policy, watchdog_s=watchdog_s
    )

    async def preempt_when_held() -> None:
        await proxy.holding.wait()
        target.preempt()

    preempter = None
    if any(f.kind == "late_after_reset" for f in faults):
        preempter = asyncio.ensure_future(preempt_when_held())
    try:
        await asyncio.wait_for(target.run(ROUNDS), RUN_S)
    finally:
        if preempter is not None:
            preempter.cancel()
        await target.close()
        await proxy.close()
        await worker.close()
    return target, proxy, model, target_model


def consumed(target: Target) -> list[dict]:
    return [entry for entry in target.receiver.journal if entry["event"] == "consumed"]


def check_recovered_and_exact(target: Target, model, target_model, support: SupportPolicy) -> None:
    """Every committed round is the spec's, consumed whole after its COMPLETION; later rounds commit."""
    for record in target.records:
        if record.outcome == "committed":
            check_committed_round(model, target_model, record, support)
    for entry in consumed(target):
        assert entry["rows"] == DEPTH and entry["completed"], entry
    assert [r.outcome for r in list(target.records)[FAULTED_ROUND:]] == ["committed"] * (ROUNDS - FAULTED_ROUND)


def test_fault_kinds_are_all_exercised():
    assert set(FAULTS) | {"duplicate"} == set(FAULT_KINDS)


@pytest.mark.parametrize("kind", sorted(FAULTS))
def test_fault_discards_the_whole_proposal(kind):
    index, reason, counter = FAULTS[kind]
    watchdog = 0.3 if kind == "delay" else 5.0
    target, proxy, model, target_model = asyncio.run(play([Fault(kind, FAULTED_ROUND, index)], watchdog_s=watchdog))
    assert [f.kind for f in proxy.applied] == [kind]
    faulted = target.records[FAULTED_ROUND - 1]
    assert faulted.round == FAULTED_ROUND
    # 1. no partial commit: nothing of the proposal is committed, only the one target-only token (R25)
    assert (faulted.outcome, faulted.reason, faulted.accepted, faulted.tokens) == ("target-only", reason, None, [])
    assert FAULTED_ROUND not in [entry["round"] for entry in consumed(target)]
    assert faulted.draw is not None  # a target-only round holds the draw its token came from
    assert faulted.token == faulted.draw.token and target.records[FAULTED_ROUND].anchor == faulted.anchor + 1
    # 2. no stale q consumed: only whole, validated rounds of a live generation, each the spec's
    check_recovered_and_exact(target, model, target_model, SupportPolicy.dense())
    assert all(r.generation > faulted.generation for r in list(target.records)[FAULTED_ROUND:])
    # 3. the whole proposal discarded, exactly once
    discards = [e for e in target.receiver.journal if e["event"] == "discarded"]
    assert [(e["round"], e["generation"]) for e in discards] == [(FAULTED_ROUND, faulted.generation)]
    assert target.receiver.counters["discarded_proposals"] == 1
    # 4. the matching counter moved
    assert target.receiver.counters[counter] >= 1


def test_identical_duplicate_is_a_harmless_retry():
    target, proxy, model, target_model = asyncio.run(play([Fault("duplicate", FAULTED_ROUND, 2)]))
    assert [f.kind for f in proxy.applied] == ["duplicate"]
    assert target.receiver.counters["duplicate_retries"] == 1
    assert target.receiver.counters["discarded_proposals"] == 0
    check_recovered_and_exact(target, model, target_model, SupportPolicy.dense())
    assert [e["round"] for e in consumed(target)] == list(range(1, ROUNDS + 1))


def test_sparse_rounds_with_a_dropped_completion_time_out():
    target, proxy, model, target_model = asyncio.run(
        play([Fault("drop", FAULTED_ROUND, COMPLETION)], support_policy=8, watchdog_s=0.5)
    )
    faulted = target.records[FAULTED_ROUND - 1]
    assert (faulted.outcome, faulted.reason) == ("target-only", "timeout")
    assert target.receiver.counters["timeouts"] == 1
    check_recovered_and_exact(target, model, target_model, SupportPolicy.top_k(8))


def test_no_fault_all_rounds_commit_through_the_proxy():
    target, proxy, model, target_model = asyncio.run(play([]))
    assert not proxy.applied
    assert [r.outcome for r in target.records] == ["committed"] * ROUNDS
    check_recovered_and_exact(target, model, target_model, SupportPolicy.dense())
    assert target.receiver.counters["discarded_proposals"] == 0


def test_redrawn_copy_is_a_valid_frame_with_another_token():
    config = example_config(vocab=16, max_support=4)
    row = QRow.sparse(16, (2, 5, 9), (1 << 23, 1 << 22, 1 << 22))
    frame = encode_frame(reply_from_row(config.session_id, 0, 1, 1, 7, 5, row, 16))
    copy = decode_frame(redrawn(frame), config)
    assert isinstance(copy, Reply)
    assert copy.token == 2 and copy.ids == (2, 5, 9)


def test_unknown_fault_kind_is_refused():
    with pytest.raises(ValueError, match="unknown fault"):
        Fault("bitrot", 1)


def test_the_soak_books_expect_what_a_single_fault_does():
    """The soak's audit table (reason and counters of each fault) is the one these single-fault runs observe."""
    from qconform.adapters.fault_proxy import expected_counters
    from qconform.soak_audit import fault_reason

    for kind, (index, reason, counter) in FAULTS.items():
        fault = Fault(kind, FAULTED_ROUND, index)
        assert fault_reason(fault) == reason and counter in expected_counters(fault), kind
    assert expected_counters(Fault("drop", 1, COMPLETION)) == ("timeouts",)
    assert expected_counters(Fault("duplicate", 1, 0)) == ("duplicate_retries",)


def test_a_fault_mix_is_a_function_of_its_seed_and_the_round():
    """The same seed plans the same fault for the same round, on a frame its kind may hit; another seed differs."""
    mix, again, other = (FaultMix(seed, 0.5) for seed in (11, 11, 12))
    plans = [mix.plan(slot, 1, r, DEPTH) for slot in range(4) for r in range(1, 200)]
    assert plans == [again.plan(slot, 1, r, DEPTH) for slot in range(4) for r in range(1, 200)]
    assert plans != [other.plan(slot, 1, r, DEPTH) for slot in range(4) for r in range(1, 200)]
    faults = [p for p in plans if p is not None]
    assert 0.4 < len(faults) / len(plans) < 0.6 and {f.kind for f in faults} == set(MIX_KINDS)
    assert all(f.index in fault_indices(f.kind, DEPTH) for f in faults)
    assert {f.index for f in faults if f.kind == "drop"} == {DEPTH - 1, COMPLETION}
    assert all(f.index != DEPTH - 1 for f in faults if f.kind == "reorder")
    with pytest.raises(ValueError, match="unknown fault kinds"):
        FaultMix(1, 0.5, ("bitrot",))


def test_a_hold_ends_by_its_own_limit_not_an_earlier_one(monkeypatch):
    """Two delays on one slot: the first hold's time limit, still pending after its RESET released it, must not
    release the second hold early (the round would commit instead of timing out)."""
    monkeypatch.setattr("qconform.adapters.fault_proxy.HOLD_S", 1.5)
    target, proxy, *_ = asyncio.run(play([Fault("delay", 2, 2), Fault("delay", 3, 2)], watchdog_s=1.0))
    assert [f.kind for f in proxy.applied] == ["delay", "delay"]
    assert [(r.round, r.outcome, r.reason) for r in list(target.records)[1:3]] == [
        (2, "target-only", "timeout"),
        (3, "target-only", "timeout"),
    ]


class ScriptedMix(FaultMix):
    """A mix that plans the faults it is given, by (slot, round)."""

    def __init__(self, script: dict[tuple[int, int], tuple[str, int]]) -> None:
        super().__init__(seed=0, rate=1.0)
        self.script = script

    def plan(self, slot: int, generation: int, round_id: int, depth: int) -> Fault | None:
        kind, index = self.script.get((slot, round_id), (None, 0))
        return None if kind is None else Fault(kind, round_id, index, slot, generation)


def frame_of(message_type: int, **values) -> bytes:
    from qconform.adapters.endpoint import codec, layout

    spec = layout.FIELDS[message_type]
    fields = {n: bytes(32) if k in ("text", "digest") else 0 for n, k in zip(spec.names, spec.kinds)}
    return codec.encode(message_type, {**fields, "depth": DEPTH, **values})


def test_a_mix_faults_only_rounds_stepped_after_the_last_fault_resolved():
    """A STEP the target sent before it read a corrupt frame may reach the proxy after that frame left: its round
    may already be discarded at the target, so a fault on it would never be counted. Only a STEP that follows the
    resolving RESET is clean."""
    from qconform.adapters.endpoint import layout
    from qconform.adapters.fault_proxy import Link

    mix = ScriptedMix({(0, 1): ("corrupt", 0), (1, 2): ("duplicate", 0), (1, 3): ("duplicate", 0)})
    proxy = FaultProxy("127.0.0.1", 1, mix=mix)
    link = Link(client=None)  # type: ignore[arg-type]  # nothing is held, nothing written
    step = functools.partial(frame_of, layout.STEP, generation=1)
    reply = functools.partial(frame_of, layout.REPLY, generation=1)
    proxy.seen_upstream(step(slot=0, round=1), link)
    fault = proxy.take_fault(reply(slot=0, round=1), link)
    assert fault is not None and fault.kind == "corrupt"
    proxy.seen_upstream(step(slot=1, round=2), link)  # sent before the target read the corrupt frame, maybe
    proxy.seen_upstream(frame_of(layout.RESET, slot=0, generation=2), link)  # the corrupt fault resolved
    assert proxy.take_fault(reply(slot=1, round=2), link) is None and mix.skipped == 1
    proxy.seen_upstream(step(slot=1, round=3), link)
    fault = proxy.take_fault(reply(slot=1, round=3), link)
    assert fault is not None and fault.kind == "duplicate"
