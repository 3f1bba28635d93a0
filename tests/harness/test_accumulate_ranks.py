"""Ranks of an accumulated run (docs/distributed.md): each takes a contiguous ``1 / world`` of the
cases, whatever the shard size, and the shards cut between ranks are hashed from the gathered
records; the result is the one a single process computes, verdicts and judging caps included."""

from __future__ import annotations

import pytest
from harness_stubs import on_ranks, spec_run_batch

from qconform.generators.accumulated import SHARD_CASES, shard_ranges
from qconform.harness.adapter import AdapterError
from qconform.harness.run import accumulate as run_accumulate
from qconform.harness.run.accumulate import accumulate, rank_pieces
from qconform.harness.run.distributed import Ranks

pytestmark = pytest.mark.rules("R22", "R23")


@pytest.mark.parametrize("count, world", [(100_000, 2), (100_000, 4), (1_000_000, 3), (5, 4), (2 * SHARD_CASES, 2)])
def test_ranks_take_equal_contiguous_parts_cut_at_shard_bounds(count, world):
    shards = shard_ranges(count)
    parts = [rank_pieces(shards, count, Ranks(rank, world, lambda obj: [obj])) for rank in range(world)]
    sizes = [sum(hi - lo for _, lo, hi in pieces) for pieces in parts]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == count  # 10^5 on 2 ranks: 50,000 each
    covered = [case for pieces in parts for _, lo, hi in pieces for case in (lo, hi - 1)]
    assert covered == sorted(covered)  # in case order, rank after rank
    for pieces in parts:
        for index, lo, hi in pieces:
            assert shards[index][0] <= lo < hi <= shards[index][1]


def test_every_world_size_gives_the_single_process_result(monkeypatch):
    """A candidate with excused and failing divergences, and a judging budget that runs out inside
    a shard that the ranks cut: hash, verdict, judged cases and unjudged count are those of one
    process, on 1 to 4 ranks (threads standing for torchrun's processes)."""
    monkeypatch.setattr(run_accumulate, "MAX_JUDGED", 3)

    def wrong(family, inputs):
        outcomes = spec_run_batch(family, inputs)
        return [AdapterError("boom") if inp["position"] % 41 == 0 else out for inp, out in zip(inputs, outcomes)]

    def judge(case, _input, _outcome):  # excuse the cases of the first shard: its budget runs out, not a failure
        return ("precision", "excused") if case < 400 else ("fail", "wrong")

    def run(ranks):
        return accumulate(
            wrong, "rng_abi", 2100, {"families": {}}, batch=170, ranks=ranks, judge=judge, shard_cases=400
        )

    seen = set()
    for world in (1, 2, 3, 4):
        for result in on_ranks(world, run):
            summary = [(d.case, d.verdict) for d in result.divergences]
            seen.add((result.hash, result.verdict, result.unjudged, tuple(summary), result.world == world))
    assert len(seen) == 1
    ((_, verdict, unjudged, summary, _),) = seen
    assert verdict == "fail" and unjudged > 0 and [v for _, v in summary[:3]] == ["precision"] * 3
