"""Wall time of the Triton candidate's conformance run in Triton's interpreter (CPU).

Run from the repository root: ``.venv/bin/python bench/bench_triton_cpu.py``. It runs
``qconform run --adapter triton`` over the families the adapter declares (its CI
subset: the whole of each, V = 129280 cases included, docs/triton.md) under
``TRITON_INTERPRET=1``, and in the same run, as baselines, the same command with the
``torch`` adapter (the torch candidate on CPU) and with ``noop`` (refuses every case:
the harness's own overhead). Each is a child process, timed ``--repeat`` times; the
script prints the median wall time, the child CPU time of that run, and the ratios,
then a markdown section for bench/RESULTS.md (``--markdown``).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ADAPTERS = ("triton", "torch", "noop")
#: the CI budget of the Triton run on 2 cores
GOAL_S = 180.0


def families() -> list[str]:
    """The families the Triton adapter declares (its CI subset)."""
    from qconform.adapters.triton_adapter import FAMILIES

    return list(FAMILIES)


def run_once(adapter: str, names: list[str]) -> tuple[float, float, int]:
    """(wall seconds, child CPU seconds, exit status) of one ``qconform run``."""
    command = [str(Path(sys.executable).with_name("qconform")), "run", "--adapter", adapter]
    for name in names:
        command += ["--family", name]
    env = dict(os.environ, TRITON_INTERPRET="1")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per adapter (median)")
    parser.add_argument("--markdown", action="store_true", help="also print a RESULTS.md section")
    args = parser.parse_args(argv)
    names = families()
    results = {}
    for adapter in ADAPTERS:
        runs = sorted(run_once(adapter, names) for _ in range(args.repeat))
        wall, cpu, code = runs[len(runs) // 2]
        results[adapter] = (wall, cpu, code)
        print(f"{adapter:7s} wall {wall:6.1f} s  cpu {cpu:6.1f} s  exit {code}", flush=True)
    triton_wall = results["triton"][0]
    verdict = "met" if triton_wall < GOAL_S else "MISSED"
    print(
        f"triton / torch wall: {triton_wall / results['torch'][0]:.1f}x; triton / noop: "
        f"{triton_wall / results['noop'][0]:.1f}x; goal {GOAL_S:.0f} s: {verdict}"
    )
    if args.markdown:
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        print(
            f"\n## Triton interpreter\n\n{datetime.date.today()}, {os.cpu_count()}-core CPU "
            f"({platform.processor() or platform.machine()}), load average {load} at the end; "
            f"`bench/bench_triton_cpu.py --repeat {args.repeat}`: `qconform run` over the Triton adapter's "
            f"{len(names)} families ({', '.join(names)}), every case, one child process each, median of "
            f"{args.repeat}.\n\n| adapter | wall s | child CPU s | exit | wall / torch |\n|---|---:|---:|---:|---:|"
        )
        for adapter, (wall, cpu, code) in results.items():
            print(f"| {adapter} | {wall:.1f} | {cpu:.1f} | {code} | {wall / results['torch'][0]:.2f} |")
        print(f"\nGoal: the Triton run under {GOAL_S:.0f} s on 2 cores ({verdict.lower()}).")
    return 0 if results["triton"][2] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
