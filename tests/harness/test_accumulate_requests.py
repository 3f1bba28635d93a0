"""How an accumulated run cuts its cases into requests and feeds them (docs/accumulated.md,
"Feeding"): every piece is covered in order, one pipeline spans the pieces, and where the requests
are cut changes no record, hash or verdict."""

from __future__ import annotations

import sys

import pytest
from harness_stubs import spec_run_batch
from test_accumulate_blocks import in_process_blocks, summary

from qconform.harness.adapter import AdapterError
from qconform.harness.run import accumulate as run_accumulate
from qconform.harness.run.accumulate import SWITCH_S, accumulate, request_ranges

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
