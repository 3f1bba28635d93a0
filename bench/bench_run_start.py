"""``qconform run`` from its start to its verdict: this tree against another, alternating.

Run from the repository root::

    .venv/bin/python bench/bench_run_start.py --tree /tmp/before --adapter torch --repeat 7

``--tree`` is another source tree of the kit (``git archive`` of a commit, with its built
extensions copied in: generators/*.so, adapters/endpoint/*.so), run as ``python -m qconform``
with that tree first on ``PYTHONPATH`` and as its working directory. Each repeat runs both trees
once, in alternating order, after one untimed run of each (which also records the corpus's
files as validated: docs/vector-format.md, "Validated once"). It prints each tree's wall seconds,
median (min-max), and this tree's against the other's, of the medians and run by run. Built for
the early start of the adapter's child (docs/shim-protocol.md, "Starting early"): the
collection of the corpus and the adapter's own start overlap instead of adding up.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one_run(tree: Path, adapter: str, extra: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "qconform", "run", "--adapter", adapter, *extra],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(
            f"{tree}: qconform run failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        )
    return seconds


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--tree", type=Path, required=True, help="the other source tree (the baseline)")
    parser.add_argument("--adapter", default="torch")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("extra", nargs="*", help="more arguments of qconform run (after --)")
    args = parser.parse_args()
    trees = {"this tree": ROOT, "other tree": args.tree.resolve()}
    print(
        f"qconform run --adapter {args.adapter} {' '.join(args.extra)}; {os.cpu_count()} CPUs; load {os.getloadavg()[0]:.1f}"
    )
    for tree in trees.values():
        one_run(tree, args.adapter, args.extra)  # untimed: the validation record, the page cache
    times: dict[str, list[float]] = {name: [] for name in trees}
    for turn in range(args.repeat):
        order = list(trees.items()) if turn % 2 == 0 else list(reversed(trees.items()))
        for name, tree in order:
            times[name].append(one_run(tree, args.adapter, args.extra))
    for name, values in times.items():
        print(f"{name}: wall {spread(values)} s")
    pairs = [other / this for this, other in zip(times["this tree"], times["other tree"])]
    ratio = statistics.median(times["other tree"]) / statistics.median(times["this tree"])
    print(f"other tree / this tree: {ratio:.3f}x of the medians; run by run {spread(pairs)}")
    print(f"load {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
