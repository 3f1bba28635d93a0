"""The verifier's driving role on every slot at once, and its target-only token when a round is not consumed.

A worker endpoint and a target drive three rounds on each of the HELLO's four
slots, concurrently over one connection (through a fault proxy, a plain relay
when it holds no fault). Every slot's rounds must equal, draw for draw, those of
an independent single-slot target whose seed is that slot's (``seed + s``), and
the spec's. Frames of different slots interleave on the one connection.

When one slot's round is discarded (a REPLY dropped: MISSING_Q), that slot, and
no other, commits one target-only token (R25): the bonus draw of an empty
proposal, i.e. the CORRECTION draw at the round's anchor under the round's RNG
identity, sampled from the target row p_1. The test computes it apart from the
target's code path: the Philox words from the torch candidate's bare
``philox4x32_10`` on a hand-built counter (checked against the spec's key), the
token by an FP64 cumulative sum in NumPy (checked against the spec's exact
rule). The ``rounds`` control answer exposes it.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
from dataclasses import dataclass

import numpy as np
import pytest
from click.testing import CliRunner

pytest.importorskip("torch")

import torch  # noqa: E402
from endpoint_servers import check_committed_round  # noqa: E402

from qconform.adapters.endpoint import (
    control,
    stream,  # noqa: E402
)
from qconform.adapters.endpoint.codec import Decoder  # noqa: E402
from qconform.adapters.endpoint.deployment import hello_config  # noqa: E402
from qconform.adapters.endpoint.model import DraftModel, TargetModel  # noqa: E402
from qconform.adapters.endpoint.target import Target, TargetError  # noqa: E402
from qconform.adapters.endpoint.verifier import VerifierEndpoint  # noqa: E402
from qconform.adapters.endpoint.worker import WorkerEndpoint  # noqa: E402
from qconform.adapters.fault_proxy import Fault, FaultProxy  # noqa: E402
from qconform.adapters.torch_candidate.philox import philox4x32_10  # noqa: E402
from qconform.cli.endpoint import endpoint_group  # noqa: E402
from qconform.spec.proposal import SupportPolicy  # noqa: E402
from qconform.spec.rng_abi import RngIdentity, uniform32_draw  # noqa: E402
from qconform.spec.sampling import mass_draw  # noqa: E402
from qconform.spec.verification import target_rows_from_f32  # noqa: E402
from qconform.spec.wire.fallback import fallback_key  # noqa: E402

pytestmark = pytest.mark.rules("R11", "R16", "R22", "R23", "R24", "R25", "R27")

VOCAB = 32
DEPTH = 5
SLOTS = 4
ROUNDS = 3
SEED = (1 << 40) + 11
DROP = Fault("drop", 2, DEPTH - 1)
RUN_S = 30.0


@dataclass
class Run:
    target: Target
    model: DraftModel
    target_model: TargetModel
    answer: dict


async def ask_rounds(port: int) -> dict:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    await stream.send(writer, control.json_envelope(control.COMMAND, {"op": "rounds"}))
    item = await asyncio.wait_for(stream.read_item(reader, Decoder(), None), RUN_S)
    writer.close()
    assert item is not None
    return control.json_body(item.data)


async def drive(slots: int | None, seed: int, faults: tuple[Fault, ...]) -> Run:
    """ROUNDS rounds on ``slots`` slots through the proxy; the target is attached to a verifier for ``rounds``."""
    config = hello_config(vocab=VOCAB, max_support=8)
    model = DraftModel.random(VOCAB, seed=3)
    target_model = TargetModel.near(model)
    worker = WorkerEndpoint(config, model)
    proxy = FaultProxy("127.0.0.1", await worker.start(), list(faults))
    target = Target(config, target_model, "127.0.0.1", await proxy.start(), seed=seed, slots=slots, watchdog_s=5.0)
    verifier = VerifierEndpoint(config)
    verifier.target = target
    port = await verifier.start()
    try:
        await asyncio.wait_for(target.run(ROUNDS), RUN_S)
        answer = await ask_rounds(port)
    finally:
        for closing in (verifier, target, proxy, worker):
            await closing.close()
    return Run(target, model, target_model, answer)


@functools.cache
def run(slots: int | None, seed: int = SEED, faults: tuple[Fault, ...] = ()) -> Run:
    return asyncio.run(drive(slots, seed, faults))


def trace(records) -> list[tuple]:
    """Everything a round decided, draw for draw (but its slot)."""
    return [
        (
            r.generation,
            r.round,
            r.anchor,
            r.seed,
            r.previous,
            r.draft_previous,
            r.outcome,
            r.reason,
            r.tokens,
            [row.counts.tolist() for row in r.rows],
            [None if row.ids is None else row.ids.tolist() for row in r.rows],
            r.accepted,
            r.token,
            r.new_committed,
            r.draw,
        )
        for r in records
    ]


def expected_target_only(seed: int, generation: int, round_id: int, anchor: int, weights: torch.Tensor) -> tuple:
    """(u32, token) of the target-only draw (CORRECTION, ``anchor``, counter 1) from p_1, apart from target.py."""
    counter = torch.tensor([[anchor, round_id, generation, 0x03 << 24 | 1]], dtype=torch.int64)
    key = torch.tensor([[seed & 0xFFFFFFFF, seed >> 32]], dtype=torch.int64)
    u32 = int(philox4x32_10(counter, key)[0, 0])
    assert u32 == uniform32_draw(fallback_key(RngIdentity(seed, generation, round_id, anchor)))
    cumulative = np.cumsum(weights.double().numpy())
    token = int(np.searchsorted(cumulative * 2.0**32, u32 * cumulative[-1], side="right"))
    bits = weights.numpy().astype("<f4").view("<u4").tolist()
    exact, margin = mass_draw(target_rows_from_f32([bits])[0], u32)
    assert exact == token or margin < 2**-40  # FP64 agrees with the exact rule away from a boundary
    return u32, token


def test_every_slot_commits_and_replays_as_a_single_slot():
    everything = run(None)
    target = everything.target
    assert [(lane.slot, lane.seed) for lane in target.lanes] == [(s, SEED + s) for s in range(SLOTS)]
    assert len(target.records) == SLOTS * ROUNDS and target.receiver.counters["discarded_proposals"] == 0
    for lane in target.lanes:
        assert [r.outcome for r in lane.records] == ["committed"] * ROUNDS
        assert [r.round for r in lane.records] == list(range(1, ROUNDS + 1))
        for before, after in itertools.pairwise(lane.records):
            assert after.anchor == before.new_committed and after.previous == before.token == after.draft_previous
        for record in lane.records:
            check_committed_round(everything.model, everything.target_model, record, SupportPolicy.dense())
        alone = run(1, lane.seed).target
        assert [lane.slot for lane in alone.lanes] == [0]
        assert trace(lane.records) == trace(alone.records)
    assert len({tuple(r.token for r in lane.records) for lane in target.lanes}) > 1  # the seeds differ
    consumed = [(e["slot"], e["round"]) for e in target.receiver.journal if e["event"] == "consumed"]
    assert sorted(consumed) == [(s, r) for s in range(SLOTS) for r in range(1, ROUNDS + 1)]


def test_frames_of_different_slots_interleave_on_the_one_connection():
    target = run(None).target
    incoming = [slot for direction, _, slot in target.frames if direction == "in" and slot is not None]
    assert len(incoming) == SLOTS * ROUNDS * (DEPTH + 1)
    assert any(a != b for a, b in zip(incoming, incoming[1:]))
    open_rounds, most = set(), 0
    for direction, kind, slot in target.frames:
        if direction == "out" and kind == "STEP":
            open_rounds.add(slot)
            most = max(most, len(open_rounds))
        elif direction == "out" and kind == "COMMIT":
            open_rounds.discard(slot)
    assert most >= 2  # rounds of different slots were in flight together
    consumed = [e["slot"] for e in target.receiver.journal if e["event"] == "consumed"]
    assert consumed != sorted(consumed)  # not one slot after the other


def test_a_discarded_round_is_target_only_on_that_slot_alone():
    faulted_run, clean = run(None, SEED, (DROP,)), run(None)
    target = faulted_run.target
    target_only = [r for r in target.records if r.outcome == "target-only"]
    assert len(target_only) == 1
    faulted = target_only[0]
    assert (faulted.round, faulted.reason, faulted.tokens, faulted.accepted) == (DROP.round, "MISSING_Q", [], None)
    u32, token = expected_target_only(
        faulted.seed, faulted.generation, faulted.round, faulted.anchor, faulted_run.target_model.weights[0]
    )
    assert faulted.draw is not None  # a target-only round holds the draw its token came from
    assert (faulted.draw.domain, faulted.draw.position, faulted.draw.draw_counter) == (0x03, faulted.anchor, 1)
    assert (faulted.draw.u32, faulted.draw.token, faulted.token) == (u32, token, token)
    assert faulted.new_committed == faulted.anchor + 1
    # the receiver discarded that one proposal, nothing of it was consumed
    discards = [(e["slot"], e["round"], e["reason"]) for e in target.receiver.journal if e["event"] == "discarded"]
    assert discards == [(faulted.slot, DROP.round, "MISSING_Q")]
    assert (faulted.slot, DROP.round) not in [
        (e["slot"], e["round"]) for e in target.receiver.journal if e["event"] == "consumed"
    ]
    # the faulted slot goes on from the target-only token under a new generation, as a single slot would
    lane = target.lanes[faulted.slot]
    after = lane.records[DROP.round]
    assert (after.outcome, after.anchor, after.generation) == ("committed", faulted.anchor + 1, faulted.generation + 1)
    assert (after.previous, after.draft_previous) == (token, token)  # the RESET told the worker the token
    for record in lane.records:
        if record.outcome == "committed":
            check_committed_round(faulted_run.model, faulted_run.target_model, record, SupportPolicy.dense())
    assert trace(lane.records) == trace(run(1, lane.seed, (DROP,)).target.records)
    # every other slot is unaffected: the rounds of the run without a fault
    for other in target.lanes:
        if other.slot != faulted.slot:
            assert trace(other.records) == trace(clean.target.lanes[other.slot].records)
    # the rounds control answer exposes it
    answered = [r for r in faulted_run.answer["rounds"] if r["outcome"] == "target-only"]
    assert len(faulted_run.answer["rounds"]) == SLOTS * ROUNDS
    assert answered == [
        {
            **answered[0],
            "slot": faulted.slot,
            "round": DROP.round,
            "token": token,
            "new_committed": faulted.anchor + 1,
            "reason": "MISSING_Q",
            "draw": {
                "domain": 0x03,
                "position": faulted.anchor,
                "draw_counter": 1,
                "u32": u32,
                "decision": "bonus",
                "token": token,
            },
        }
    ]


@pytest.mark.parametrize("slots", ["0", "9", "-1"])
def test_slots_out_of_range_is_a_one_line_usage_error(slots):
    result = CliRunner().invoke(endpoint_group, ["verifier", "--port", "0", "--slots", slots])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [f"Error: --slots {slots}: the deployment has slots 1..4"]


def test_more_slots_than_the_hello_offers_is_refused():
    async def scenario():
        config = hello_config(vocab=VOCAB, max_support=8)
        worker = WorkerEndpoint(config, DraftModel.random(VOCAB))
        target = Target(config, TargetModel.random(VOCAB), "127.0.0.1", await worker.start(), slots=SLOTS + 1)
        try:
            with pytest.raises(TargetError, match="5 slots to drive; the HELLO has 4"):
                await asyncio.wait_for(target.run(1), RUN_S)
        finally:
            await target.close()
            await worker.close()

    asyncio.run(scenario())
