"""Full corpus regeneration time, per family, against JSON serialization of the corpus, in one run.

Run from the repository root: ``.venv/bin/python bench/bench_generate.py``. It builds
every registered family in process with ``qconform.generators.corpus.plan`` (build,
lint, schema validation, serialization, index), exactly what ``qconform generate``
does before writing, and writes nothing. The per-family times come from the plan's
progress callback. The baseline, measured in the same run, is serializing the
built corpus to its JSON bytes again (``corpus.serialize`` of every vector file
object). It also says whether the built bytes equal the committed corpus.
``--clock cpu`` times with the process's CPU clock instead of the wall clock (the
build runs on one thread), which other jobs on a shared machine disturb much less.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from typing import Callable

from qconform.generators import corpus
from qconform.generators.registry import all_families

GOAL_SECONDS = 60.0
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}


def timed_plan(clock: Callable[[], float]) -> tuple[corpus.Plan, list[tuple[str, float]], float]:
    """Build the whole corpus once: the plan, (family, seconds) in build order, total seconds."""
    marks: list[tuple[str, float]] = []
    start = clock()
    built = corpus.plan(
        corpus.default_vectors_dir(), all_families(), partial=False, progress=lambda name: marks.append((name, clock()))
    )
    end = clock()
    previous, per_family = start, []
    for name, mark in marks:
        per_family.append((name, mark - previous))
        previous = mark
    per_family.append(("(index and file layout)", end - previous))
    return built, per_family, end - start


def serialize_seconds(built: corpus.Plan, repeat: int, clock: Callable[[], float]) -> float:
    """Median time to serialize every built vector file object to its bytes (the baseline)."""
    objects = [json.loads(output.file_bytes) for output in built.outputs]
    times = []
    for _ in range(repeat):
        start = clock()
        for obj in objects:
            corpus.serialize(obj)
        times.append(clock() - start)
    return statistics.median(times)


def matches_committed(built: corpus.Plan) -> bool:
    """Whether every file the plan would write already has those bytes on disk."""
    return all(path.is_file() and path.read_bytes() == data for path, data in built.files.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="full builds (the median total is reported)")
    parser.add_argument("--clock", choices=tuple(CLOCKS), default="wall", help="wall time or process CPU time")
    args = parser.parse_args()
    clock = CLOCKS[args.clock]

    runs = [timed_plan(clock) for _ in range(args.repeat)]
    built, per_family, _ = runs[-1]
    total = statistics.median(seconds for _, _, seconds in runs)
    baseline = serialize_seconds(built, 5, clock)
    size = sum(len(output.file_bytes) for output in built.outputs)

    print(
        f"corpus regeneration in process: {len(built.outputs)} families, {built.cases} cases, "
        f"{size / 1e6:.1f} MB of vectors ({platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, one process)"
    )
    print(f"{'family':28s} {'seconds':>8s} {'/ serialize':>12s}   ({args.clock} clock)")
    for name, seconds in per_family:
        print(f"{name:28s} {seconds:8.2f} {seconds / baseline:11.1f}x")
    print(f"{'total (median of ' + str(args.repeat) + ')':28s} {total:8.2f} {total / baseline:11.1f}x")
    print(f"baseline: serializing the built corpus to JSON, {baseline:.3f} s (median of 5)")
    verdict = "meets" if total <= GOAL_SECONDS else "misses"
    print(
        f"total {total:.1f} s {verdict} the goal of {GOAL_SECONDS:.0f} s; "
        f"built bytes {'equal' if matches_committed(built) else 'DIFFER from'} the committed corpus"
    )


if __name__ == "__main__":
    main()
