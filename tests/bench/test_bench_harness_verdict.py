"""bench/bench_harness.py's verdict on the torch goal (bench/README.md, "The verdict of
bench_harness.py"): the paired ratio, pass by pass over the same families, its median judged;
the pooled ratio printed beside it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def bench_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_harness", ROOT / "bench" / "bench_harness.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_harness", module)
    spec.loader.exec_module(module)
    return module


BENCH = bench_module()

# two families, three passes: pass 1 of "b" is a spike through the harness, pass 2 of "a" in process
THROUGH = {"a": [1.0, 1.1, 1.0], "b": [2.0, 5.0, 2.2]}
OWN = {"a": [1.0, 1.0, 3.0], "b": [2.0, 2.0, 2.0]}


def test_each_pass_is_its_own_times_over_the_same_families_summed():
    ratios = BENCH.paired_ratios(THROUGH, OWN, ["a", "b"])
    assert ratios == [3.0 / 3.0, 6.1 / 3.0, 3.2 / 5.0]
    # only the families named count: the other side of a family torch does not run is never read
    assert BENCH.paired_ratios(THROUGH, OWN, ["a"]) == [1.0, 1.1, 1.0 / 3.0]


def test_the_pooled_ratio_sums_each_columns_family_medians():
    assert BENCH.pooled_ratio(THROUGH, OWN, ["a", "b"]) == (1.0 + 2.2) / (1.0 + 2.0)


def test_the_verdict_is_the_median_of_the_paired_ratios_with_min_and_max():
    line = BENCH.torch_verdict([1.2, 1.05, 1.08, 0.99, 1.3], pooled=1.16, goal=1.1)
    assert "median 1.080x (min 0.990x, max 1.300x) over 5 passes, meets the goal of 1.10x" in line
    assert "pooled ratio 1.160x (not judged)" in line
    assert "misses the goal of 1.10x" in BENCH.torch_verdict([1.2, 1.11, 1.05], pooled=1.0, goal=1.1)
    # at the goal exactly it is met (at most 1.1x)
    assert "meets" in BENCH.torch_verdict([1.1], pooled=1.2, goal=1.1)


def test_the_in_process_run_is_second_as_often_as_the_run_through_the_harness():
    runs = {"noop": "noop", "torch": "torch", "torch json": "torch json"}
    own = "own"
    assert BENCH.run_order(runs, own, 0) == ["noop", "torch", "own", "torch json"]
    assert BENCH.run_order(runs, own, 1) == ["noop", "own", "torch", "torch json"]
    seconds = [
        BENCH.run_order(runs, own, turn).index("own") > BENCH.run_order(runs, own, turn).index("torch")
        for turn in range(6)
    ]
    assert seconds.count(True) == seconds.count(False) == 3


def test_a_pass_run_chunk_by_chunk_is_the_sum_of_its_chunks():
    passes: list[float] = []
    for first, seconds in [(True, 1.0), (False, 0.5), (False, 0.25), (True, 2.0), (False, 1.0)]:
        BENCH.keep(passes, seconds, first)
    assert passes == [1.75, 3.0]
