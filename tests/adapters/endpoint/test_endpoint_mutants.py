"""Seeded bugs of the verifier endpoint: the harness catches each one with a wrong answer (a ``fail``).

Each mutant (adapters/endpoint/mutants.py) is served on loopback and played
through the transport adapter. The fast tests run the cases documented to kill
it (docs/endpoint.md) and check that the correct endpoint passes the same
cases; the ``slow`` test runs both wire families in full for every mutant and
requires every kill to be a ``fail``, never an ``error``. A mutant that
consumes before the COMPLETION is also caught end to end: through the fault
proxy, with the round's COMPLETION dropped, it commits a round that was never
completed.
"""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("torch")

from endpoint_servers import LoopThread, serving  # noqa: E402

from qconform.adapters.endpoint.deployment import hello_config  # noqa: E402
from qconform.adapters.endpoint.model import DraftModel, TargetModel  # noqa: E402
from qconform.adapters.endpoint.mutants import MUTANTS, EarlyConsumingReceiver  # noqa: E402
from qconform.adapters.endpoint.target import Target  # noqa: E402
from qconform.adapters.endpoint.verifier import VerifierEndpoint  # noqa: E402
from qconform.adapters.endpoint.worker import WorkerEndpoint  # noqa: E402
from qconform.adapters.fault_proxy import COMPLETION, Fault, FaultProxy  # noqa: E402
from qconform.generators.corpus import default_vectors_dir  # noqa: E402
from qconform.harness.judging.judge import judge  # noqa: E402
from qconform.harness.transport.tcp_adapter import TcpAdapter  # noqa: E402
from qconform.harness.verdicts import Verdict  # noqa: E402

pytestmark = pytest.mark.rules("R02", "R03", "R16", "R18", "R19", "R28")

VECTORS = default_vectors_dir()
FAMILIES = ("wire_frames", "wire_sessions")

#: mutant -> cases that must fail (docs/endpoint.md, "Mutants")
KILLED_BY = {
    "accepts-unsorted-support": ["wire_frames/reason_classes/unsorted_support-descending-pair"],
    "renormalizes-q": [
        "wire_frames/reason_classes/wrong_total_mass-short-by-one",
        "wire_sessions/discard/corrupt-q-mass",
    ],
    "ignores-stale-generation": [
        "wire_sessions/stale_and_duplicate/step-stale-generation",
        "wire_sessions/late_replies/late-after-reset",
    ],
    "consumes-before-completion": ["wire_sessions/consumption/commit-before-completion"],
    "bounds-after-copy": [
        "wire_frames/reason_classes/unexpected_size-reply-length-2pow32-1",
        "wire_frames/reason_classes/unexpected_size-reply-above-max-reply-bytes",
    ],
    "recreates-dropped-slots": [
        "wire_sessions/key_reuse/reconnect-shrink-grow-old-key",
        "wire_sessions/key_reuse/shrink-then-grow",
    ],
    "discards-consumable": [
        "wire_sessions/consumable/differing-reply-retry",
        "wire_sessions/consumable/timeout-after-completion",
        "wire_sessions/consumable/corrupt-frame-other-slot",
    ],
    "shares-the-link": ["wire_sessions/connections/stranger-bad-magic", "wire_sessions/connections/two-links"],
}


def all_cases() -> dict[str, list[dict]]:
    out = {}
    for family in FAMILIES:
        document = json.loads((VECTORS / f"{family}.json").read_text(encoding="utf-8"))
        out[family] = [dict(case, family=family) for group in document["testGroups"] for case in group["tests"]]
    return out


CASES = all_cases()


def judged(url: str, cases: list[dict]) -> dict[str, Verdict]:
    """case id -> verdict, through the transport adapter."""
    adapter = TcpAdapter(url)
    config = adapter.config()
    out: dict[str, Verdict] = {}
    for family in FAMILIES:
        selected = [case for case in cases if case["family"] == family]
        outcomes = adapter.run_batch(family, [case["input"] for case in selected]) if selected else []
        out.update({case["id"]: judge(case, outcome, config) for case, outcome in zip(selected, outcomes)})
    return out


@pytest.fixture(scope="module")
def loop():
    thread = LoopThread()
    yield thread
    thread.close()


def test_every_mutant_has_documented_kills():
    assert set(KILLED_BY) == set(MUTANTS)


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_mutant_fails_the_cases_that_kill_it(loop, mutant):
    wanted = set(KILLED_BY[mutant])
    cases = [case for family in FAMILIES for case in CASES[family] if case["id"] in wanted]
    assert len(cases) == len(wanted)
    with serving(loop, VerifierEndpoint(hello_config(), mutant=mutant)) as url:
        results = judged(url, cases)
    assert {case_id: v.cls.value for case_id, v in results.items()} == dict.fromkeys(wanted, "fail")
    with serving(loop, VerifierEndpoint(hello_config())) as url:
        assert {v.cls.value for v in judged(url, cases).values()} == {"pass"}


def test_allocation_before_bounds_is_named_in_the_verdict(loop):
    case_id = KILLED_BY["bounds-after-copy"][0]
    case = next(c for c in CASES["wire_frames"] if c["id"] == case_id)
    with serving(loop, VerifierEndpoint(hello_config(), mutant="bounds-after-copy")) as url:
        verdict = judged(url, [case])[case_id]
    assert "ALLOCATED_BEFORE_BOUNDS" in verdict.message


@pytest.mark.slow
@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_full_families_kill_every_mutant_by_a_wrong_answer(loop, mutant):
    with serving(loop, VerifierEndpoint(hello_config(), mutant=mutant)) as url:
        results = judged(url, CASES["wire_frames"] + CASES["wire_sessions"])
    classes = {v.cls.value for v in results.values()}
    assert "fail" in classes and classes <= {"pass", "fail"}


def test_early_consumer_commits_a_round_whose_completion_never_came():
    async def scenario():
        config = hello_config(vocab=32, max_support=8)
        model = DraftModel.random(32, seed=3)
        worker = WorkerEndpoint(config, model)
        proxy = FaultProxy("127.0.0.1", await worker.start(), [Fault("drop", 2, COMPLETION)])
        target = Target(
            config,
            TargetModel.near(model),
            "127.0.0.1",
            await proxy.start(),
            watchdog_s=2.0,
            receiver_cls=EarlyConsumingReceiver,
        )
        try:
            await asyncio.wait_for(target.run(3), 30)
        finally:
            await target.close()
            await proxy.close()
            await worker.close()
        return target

    target = asyncio.run(scenario())
    faulted = target.records[1]
    assert faulted.outcome == "committed"  # the correct receiver times this round out (test_fault_proxy)
    consumed = {e["round"]: e["completed"] for e in target.receiver.journal if e["event"] == "consumed"}
    assert consumed[2] is False
