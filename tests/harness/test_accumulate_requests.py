"""How an accumulated run cuts its cases into requests and feeds them (docs/accumulated.md,
"Feeding"): every piece is covered in order, one pipeline spans the pieces, and where the requests
are cut changes no record, hash or verdict."""

from __future__ import annotations

import os
import sys
import threading

import pytest
from harness_stubs import spec_run_batch
from test_accumulate_blocks import in_process_blocks, summary

from qconform.harness.adapter import AdapterError
from qconform.harness.run import accumulate as run_accumulate
from qconform.harness.run.accumulate import FEEDING_POLICY, SWITCH_S, accumulate, request_ranges

pytestmark = pytest.mark.rules("R22", "R23")


def test_every_piece_is_cut_into_requests_in_order():
    pieces = [(0, 3000), (3000, 3010), (3010, 9000)]
    requests = request_ranges(pieces, 1024)
    assert max(stop - start for _piece, start, stop in requests) == 1024
    for index, (lo, hi) in enumerate(pieces):
        mine = [(start, stop) for piece, start, stop in requests if piece == index]
        assert mine[0][0] == lo and mine[-1][1] == hi
        assert all(a[1] == b[0] and a[0] < a[1] for a, b in zip(mine, mine[1:]))
    assert [piece for piece, _start, _stop in requests] == sorted(piece for piece, _start, _stop in requests)
    assert request_ranges([(5, 6)], 1) == [(0, 5, 6)] and request_ranges([], 16) == []


def broken(family, inputs):
    """A candidate that fails some rng_abi cases (AdapterError), on both paths."""
    outcomes = spec_run_batch(family, inputs)
    return [AdapterError("boom") if inp["position"] % 53 == 0 else out for inp, out in zip(inputs, outcomes)]


def test_where_the_requests_are_cut_changes_nothing(monkeypatch):
    """The same hash, verdict, judged divergences and unjudged count whatever ``--batch`` (one case
    a request, uneven cuts, a request larger than a shard), by block and case by case, with a
    judging budget that runs out inside a shard. Shown to fail with the requests not cut at the
    pieces' ends (a request across two shards is hashed into the first)."""
    monkeypatch.setattr(run_accumulate, "MAX_JUDGED", 4)
    expected = {"families": {}}
    results = [
        summary(accumulate(broken, "rng_abi", 900, expected, batch=batch, shard_cases=400, run_block=blocks))
        for batch in (1, 37, 300, 5000)
        for blocks in (None, in_process_blocks(broken))
    ]
    assert results[0][1] == "fail" and results[0][2] > 0
    assert all(result == results[0] for result in results)


def test_the_switch_interval_is_short_while_feeding_and_restored_after():
    """The main thread sends the next block without waiting 5 ms for the judging thread's lock."""
    seen, answer = [], in_process_blocks(spec_run_batch)

    def run_block(family, block):
        seen.append(sys.getswitchinterval())
        return answer(family, block)

    before = sys.getswitchinterval()
    accumulate(spec_run_batch, "rng_abi", 40, {"families": {}}, batch=16, run_block=run_block)
    assert seen and all(abs(s - SWITCH_S) < 1e-9 for s in seen) and sys.getswitchinterval() == before


def policy_of(thread: threading.Thread) -> int:
    assert thread.native_id is not None
    return os.sched_getscheduler(thread.native_id)


@pytest.mark.skipif(FEEDING_POLICY is None, reason="no SCHED_BATCH on this platform")
def test_the_harness_threads_yield_to_the_candidate_while_feeding_and_are_restored_after():
    """The thread that asks the blocks and the judging thread it starts run under
    ``FEEDING_POLICY`` while the run feeds the candidate; so does an ordinary thread that was
    already running, while one of another policy (idle) is left alone; afterwards each has its
    policy back, and a thread started during the run that outlives it has the ordinary one. Shown to
    fail with the policy not set, set on the calling thread alone, not restored, not taken from a
    thread started during the run, and an idle thread made batch."""
    seen: dict[str, set[int]] = {"ask": set(), "judge": set(), "ordinary": set(), "idle": set()}
    stop = threading.Event()

    def waiting(policy: int | None, ready: threading.Event) -> None:
        if policy is not None:
            os.sched_setscheduler(0, policy, os.sched_param(0))
        ready.set()
        stop.wait(30)

    def started(policy: int | None) -> threading.Thread:
        ready = threading.Event()
        thread = threading.Thread(target=waiting, args=(policy, ready), daemon=True)
        thread.start()
        ready.wait(10)
        return thread

    ordinary, idle = started(None), started(os.SCHED_IDLE)
    later: list[threading.Thread] = []
    answer = in_process_blocks(broken)

    def run_block(family, block):
        seen["ask"].add(os.sched_getscheduler(0))
        seen["ordinary"].add(policy_of(ordinary))
        seen["idle"].add(policy_of(idle))
        if not later:
            later.append(started(None))
        return answer(family, block)

    def judge(_case, _input, _outcome):
        seen["judge"].add(os.sched_getscheduler(0))
        return "fail", "judged"

    try:
        result = accumulate(broken, "rng_abi", 200, {"families": {}}, batch=50, run_block=run_block, judge=judge)
        assert result.verdict == "fail" and seen["judge"]
        assert seen == {
            "ask": {FEEDING_POLICY},
            "judge": {FEEDING_POLICY},
            "ordinary": {FEEDING_POLICY},
            "idle": {os.SCHED_IDLE},
        }
        assert os.sched_getscheduler(0) == policy_of(ordinary) == os.SCHED_OTHER
        assert policy_of(idle) == os.SCHED_IDLE
        assert policy_of(later[0]) == os.SCHED_OTHER
    finally:
        stop.set()
