"""Ranks of `qconform accumulate`: 1 rank against 2 ranks, forked and torchrun's, measured side by side.

    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_accumulate_ranks.py --repeat 5          # 10^6, torch
    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_accumulate_ranks.py --repeat 5 --phases # where start-up goes
    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_accumulate_ranks.py --family rng_abi --simulate 4
    # before and after a change: the other tree's rows in the same rotation
    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_accumulate_ranks.py --repeat 5 --phases --tree /tmp/before

Issue #24's goals: 2 ranks on 2 cores at least 1.6x one rank at N = 10^6, 4 ranks on 4 cores at
least 3x, and the same hash at every world size. A rank takes a contiguous 1/W of the cases
(docs/accumulated.md, "Under torchrun"), so the shares are equal at any N.

* **measured**: ``qconform accumulate --adapter torch --count N`` as each of the ``--mode`` rows,
  the rows of one repeat run one after the other, repeats interleaved: ``1`` (one rank),
  ``forked`` (``--ranks 2``: the command forks its second rank, no torch in the harness,
  docs/distributed.md "Without torchrun"), ``torchrun`` (``torchrun --standalone
  --nproc-per-node 2``, each rank with its own torch child and a gloo process group), and
  ``proxy4`` (``--ranks 2 --count N/2``, the simulation below), and ``4`` (``--ranks 4``: only
  meaningful on a machine with 4 cores for it, e.g. a lent device machine under ``taskset -c 0-3``;
  bench/README.md). For each: the wall clock of the
  whole command, the command's own seconds (first block to verdict, as it prints them), start-up
  and end (the difference), the CPU seconds of the whole process tree (the ranks, their keepers
  and adapters; ``RUSAGE_CHILDREN``, every process of the command being waited for by its parent)
  with the cores that makes on average, the hash, and the load average after the run. Against the
  1-rank row: the wall and own ratios, and the CPU seconds the rows spend beyond 1 rank's (each
  further rank's torch import, its harness, cores contended). On a 2-core machine
  shared with other work, two ranks and their two torch children compete with that work for the
  cores: the speedup then measures the queue as much as the code.
* ``--phases``: each command runs through bench/accumulate_timeline.py, which marks when each
  rank's interpreter is up (torchrun's own launch before it), its adapter's start began, its
  imports are done, its ranks are ready (torchrun: torch imported and the process group up), its
  adapter answered ``get_config``, its first block was answered, it entered the gather, the
  gather, the adapter closed; the latest
  rank's time at each mark is printed, medians over the repeats, and the first rank's arrival at
  the gather (the first rank waits there for the last); and, for a row with forked ranks, what the
  adapter zygote decided (its trace, ``QCONFORM_ZYGOTE_TRACE``: ready and with how many threads, or
  why it did not serve, then ``forked`` or ``refused: REASON`` per start; docs/distributed.md).
* ``--tree DIR``: every row also runs with the command of the source tree DIR (first on
  ``PYTHONPATH``, e.g. ``git archive`` of the commit before a change with its built extensions
  copied in), each row of the two trees back to back in the same rotation; ratios within each
  tree, and each row of DIR against this tree's, run by run.
* **4 ranks on 4 cores, simulated** (mode ``proxy4``): a 4-rank run at N gives each rank N/4
  cases and one core for it and its torch child. ``--ranks 2 --count N/2`` on 2 cores is that
  run's rank twice over: the same share per rank, one core per rank and child, the same start-up
  per rank (each rank's adapter imports torch on its own core). Its wall clock, against the one-rank
  run at N, is the predicted 4-core speedup. Not in it: the 4-way gather (a few digests and at
  most 3 cut shards of records) and 4 ranks sharing the memory bandwidth and caches of one host.
* **simulated one share at a time** (``--simulate W``): what W ranks on W idle cores would take, on
  one core. In this process, the W ranks of one run are run one after the other, each on its own
  share through the same torch child, and their gather (the ``all_gather_object`` of
  docs/distributed.md) is a rendezvous that starts the next rank when one arrives: rank r's time
  is from its start to its arrival. The W-rank run is then the slowest share (ranks run at once on
  W cores) plus the gather and the verdict, after the last arrival; against the one-rank run of the
  same cases in the same process. Not simulated: start-up (torchrun, W adapters), and W children
  competing for memory bandwidth. Every rank's hash must equal the one-rank hash.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from qconform.generators.accumulated import FAMILIES
from qconform.harness.transport.zygote import TRACE_ENV

ROOT = Path(__file__).resolve().parents[1]
GOALS = {2: 1.6, 4: 3.0}
SECONDS = re.compile(r": \d+ cases in ([0-9.]+) s")
HASH = re.compile(r"^hash\s+([0-9a-f]{64})", re.MULTILINE)


#: the measured rows: (label, ranks, count divisor); the world size a row stands for, whose goal it
#: is judged by (:data:`GOALS`), is ranks x divisor
MODES = {
    "1": ("1 rank", 1, 1),
    "forked": ("2 ranks, --ranks 2 (forked)", 2, 1),
    "torchrun": ("2 ranks, torchrun", 2, 1),
    "proxy4": ("4 ranks on 4 cores, SIMULATED: --ranks 2 at N/2", 2, 2),
    "4": ("4 ranks, --ranks 4 (forked)", 4, 1),
}
TIMELINE = ROOT / "bench" / "accumulate_timeline.py"
#: the timeline's marks, in order (bench/accumulate_timeline.py)
MARKS = (
    "up",
    "started",
    "ranks",
    "ranks ready",
    "adapter ready",
    "begin",
    "block 1",
    "at gather (first rank)",
    "at gather",
    "gathered",
    "closed",
    "done",
)


@dataclass
class Run:
    wall: float
    own: float
    digest: str
    load: float
    marks: dict[str, float]  # the latest rank's seconds at each mark (--phases)
    cpu: float = 0.0  # CPU seconds of the whole process tree: the ranks, their adapters and keepers
    zygote: tuple[str, ...] = ()  # the adapter zygote's decisions (--phases), times and pids left out


def cpu_of_children() -> float:
    """User and system seconds of this process's ended (waited-for) descendants: every process of a
    command is waited for by its parent (each adapter by its keeper, each forked rank by rank 0)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def command(mode: str, family: str, count: int, batch: int, phases: bool, tree: Path | None = None) -> Run:
    """One run of the command as ``mode`` (:data:`MODES`): wall seconds, its own, its CPU seconds, its
    hash; with ``tree``, the command of that source tree (first on ``PYTHONPATH``, its working
    directory; the timeline script is this tree's, which only wraps what both have)."""
    _, ranks, divisor = MODES[mode]
    bin_dir = Path(sys.executable).parent
    accumulate = ["accumulate", "--adapter", "torch", "--family", family]
    accumulate += ["--count", str(count // divisor), "--batch", str(batch)]
    qconform = [sys.executable, str(TIMELINE)] if phases else [str(bin_dir / "qconform")]
    if mode == "torchrun":
        torchrun = shutil.which("torchrun", path=str(bin_dir)) or "torchrun"
        line = [torchrun, "--standalone", f"--nproc-per-node={ranks}", "--no-python", *qconform, *accumulate]
    else:
        line = [*qconform, *accumulate, *(["--ranks", str(ranks)] if ranks > 1 else [])]
    with tempfile.TemporaryDirectory() as scratch:
        timeline = Path(scratch) / "marks"
        decisions = Path(scratch) / "zygote"
        env = {**os.environ, "BENCH_TIMELINE": str(timeline), TRACE_ENV: str(decisions)}
        if tree is not None:
            env["PYTHONPATH"] = str(tree)
        cpu = cpu_of_children()
        began = time.time()
        env["BENCH_T0"] = repr(began)
        done = subprocess.run(line, cwd=tree or ROOT, capture_output=True, text=True, check=False, env=env)
        wall = time.time() - began
        cpu = cpu_of_children() - cpu
        marks: dict[str, float] = {}
        if timeline.exists():
            for entry in timeline.read_text().splitlines():
                _rank, seconds, what = entry.split(" ", 2)
                marks[what] = max(marks.get(what, 0.0), float(seconds))
                if what == "at gather":  # the ranks' spread: the first one waits for the last
                    first = f"{what} (first rank)"
                    marks[first] = min(marks.get(first, float(seconds)), float(seconds))
        zygote = zygote_decisions(decisions.read_text()) if decisions.exists() else ()
    own, digest = SECONDS.search(done.stdout), HASH.search(done.stdout)
    if own is None or digest is None or done.returncode != 0:
        raise SystemExit(f"{' '.join(line)} failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr}")
    marks["end"] = wall
    return Run(wall, float(own.group(1)), digest.group(1), os.getloadavg()[0], marks, cpu, zygote)


def zygote_decisions(trace: str) -> tuple[str, ...]:
    """The adapter zygote's decisions in its trace (docs/distributed.md, "the adapter zygote", rule 7),
    with the pids and the import's seconds left out, so that runs compare."""
    decisions = []
    for line in trace.splitlines():
        decision = line.split(": ", 1)[-1]
        if decision.startswith("forked "):
            decision = "forked"
        elif decision.startswith("ready: imports "):
            decision = "ready, " + decision.split(", ", 1)[-1]  # the threads, and the CUDA driver's state
        decisions.append(decision)
    return tuple(decisions)


def spread(values: list[float], digits: int = 1) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def start_up_bound(one: list[Run], world: int) -> float:
    """The most a row standing for ``world`` ranks can gain on the 1-rank runs ``one`` while each rank
    still pays 1 rank's start-up and end: 1 rank's wall over that start-up and end plus its own seconds
    / ``world`` (the cases shared perfectly, nothing else added), the median over the runs. A goal above
    it cannot be met at this N on this machine, whatever the ranks' own work costs."""
    return statistics.median(r.wall / ((r.wall - r.own) + r.own / world) for r in one)


def report(runs: dict[tuple[str, str], list[Run]], phases: bool) -> None:
    """Each row (``(tree, mode)``: tree "" is this one), then each row against the 1-rank row of its
    tree: wall, own seconds and CPU seconds, ratios run by run."""

    def label(tree: str, mode: str) -> str:
        return MODES[mode][0] + (f" [{tree}]" if tree else "")

    for (tree, mode), results in runs.items():
        walls, owns, cpus = [r.wall for r in results], [r.own for r in results], [r.cpu for r in results]
        print(
            f"{label(tree, mode)}: wall {spread(walls)} s, own {spread(owns)} s, start-up and end "
            f"{spread([r.wall - r.own for r in results])} s; CPU {spread(cpus)} s "
            f"({spread([r.cpu / r.wall for r in results], 2)} cores); load {spread([r.load for r in results])}; "
            f"hash {results[0].digest}"
        )
        if phases:
            steps = []
            for name in (*MARKS, "end"):
                at = [r.marks[name] for r in results if name in r.marks]
                if at:
                    steps.append(f"{name} {statistics.median(at):.2f}")
            print("    timeline, the latest rank, median s since the command began: " + ", ".join(steps))
            kinds = statistics.multimode(r.zygote for r in results)  # a row's zygote decides alike run to run
            if any(kinds[0]):
                print("    adapter zygote: " + "; ".join(kinds[0]) + ("" if len(kinds) == 1 else " (runs differ)"))
    for (tree, mode), results in runs.items():
        one = runs.get((tree, "1"))
        if mode == "1" or one is None:
            continue
        ratios = [a.wall / b.wall for a, b in zip(one, results)]
        own_ratios = [a.own / b.own for a, b in zip(one, results)]
        world = MODES[mode][1] * MODES[mode][2]
        goal = GOALS[world]
        wall = statistics.median(r.wall for r in one) / statistics.median(r.wall for r in results)
        extra = statistics.median(b.cpu - a.cpu for a, b in zip(one, results))
        reach = start_up_bound(one, world)
        verdict = "met" if wall >= goal else "NOT met" + (" (out of reach: above the bound)" if goal > reach else "")
        print(
            f"{label(tree, mode)} against 1 rank: wall {wall:.2f}x (run by run {spread(ratios, 2)}), own seconds "
            f"{spread(own_ratios, 2)}x, CPU seconds more than 1 rank {extra:.1f}; at most {reach:.2f}x with 1 "
            f"rank's start-up and end and its own seconds / {world}; goal {goal}x: {verdict}"
        )
    if len({tree for tree, _mode in runs}) > 1:
        for (tree, mode), results in runs.items():
            here = runs.get(("", mode))
            if tree and here is not None:
                ratios = [b.wall / a.wall for a, b in zip(here, results)]
                print(f"{label(tree, mode)} wall / this tree's: run by run {spread(ratios, 2)}x")
    hashes = {r.digest for (_tree, mode), results in runs.items() if MODES[mode][2] == 1 for r in results}
    print(f"hashes identical at N across the rows: {len(hashes) == 1}")


def simulated(family: str, count: int, batch: int, world: int) -> tuple[float, list[float], float, set[str]]:
    """(one rank's seconds, each of ``world`` shares' seconds, the gather and verdict after the last
    arrival, the hashes every rank computed), all in this process, one share at a time."""
    from qconform.harness.run.accumulate import accumulate, load_expected
    from qconform.harness.run.distributed import SINGLE, Ranks
    from qconform.harness.transport.client import open_adapter

    expected = load_expected(ROOT / "vectors")
    with open_adapter("torch", timeout_s=3600) as client:

        def run(ranks: Ranks):
            return accumulate(
                lambda name, inputs: client.run_batch(name, inputs, schema_check=False),
                family,
                count,
                expected,
                batch,
                ranks,
                run_block=client.run_block,
            )

        accumulate(  # warm: the child's first blocks of every shape
            lambda name, inputs: client.run_batch(name, inputs, schema_check=False),
            family,
            batch,
            expected,
            batch,
            run_block=client.run_block,
        )
        began = time.perf_counter()
        single = run(SINGLE)
        one = time.perf_counter() - began
        slots: list = [None] * world
        arrived = [threading.Event() for _ in range(world)]
        started = [0.0] * world
        arrival = [0.0] * world
        everyone = threading.Barrier(world)

        def ranks(rank: int) -> Ranks:
            def gather(obj):
                arrival[rank] = time.perf_counter()
                slots[rank] = obj
                arrived[rank].set()  # the next rank starts now
                everyone.wait()
                return list(slots)

            return Ranks(rank, world, gather)

        results: list = [None] * world

        def one_rank(rank: int) -> None:
            started[rank] = time.perf_counter()
            results[rank] = run(ranks(rank))

        threads = []
        for rank in range(world):
            threads.append(threading.Thread(target=one_rank, args=(rank,)))
            threads[-1].start()
            arrived[rank].wait()
        for thread in threads:
            thread.join()
        after = time.perf_counter() - arrival[-1]
    hashes = {single.hash} | {r.hash for r in results}
    return one, [arrival[r] - started[r] for r in range(world)], after, hashes


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--family", default="verification_round", choices=sorted(FAMILIES))
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=16384)
    parser.add_argument("--repeat", type=int, default=1, help="measured runs of each row (median)")
    parser.add_argument(
        "--mode", action="append", choices=sorted(MODES), help="measured rows (default: all); 1 always runs"
    )
    parser.add_argument("--phases", action="store_true", help="time each phase (bench/accumulate_timeline.py)")
    parser.add_argument(
        "--tree",
        type=Path,
        help="also run every row with the command of this source tree, in the same rotation (e.g. `git "
        "archive` of the commit before a change, its extensions copied in); ratios within each tree",
    )
    parser.add_argument("--simulate", type=int, action="append", default=[], help="world sizes to simulate")
    parser.add_argument("--skip-measured", action="store_true")
    args = parser.parse_args()

    def load() -> str:
        return ", ".join(f"{x:.1f}" for x in os.getloadavg())

    print(f"{args.family}, N = {args.count:,}, torch candidate; {os.cpu_count()} CPUs; load {load()}")
    if not args.skip_measured:
        modes = ["1", *[m for m in MODES if m != "1" and (not args.mode or m in args.mode)]]
        trees = [("", None)] + ([(str(args.tree), args.tree)] if args.tree is not None else [])
        runs: dict[tuple[str, str], list[Run]] = {(label, mode): [] for label, _ in trees for mode in modes}
        for _ in range(args.repeat):
            for mode in modes:
                for label, tree in trees:  # the two trees' rows of a mode back to back
                    runs[label, mode].append(command(mode, args.family, args.count, args.batch, args.phases, tree))
        report(runs, args.phases)
        print(f"load {load()}")
    for world in args.simulate:
        one, shares, after, hashes = simulated(args.family, args.count, args.batch, world)
        wall = max(shares) + after
        print(
            f"simulated, {world} ranks: one rank {one:.1f} s; shares {', '.join(f'{s:.1f}' for s in shares)} s; "
            f"gather and verdict {after:.2f} s; {world} ranks {wall:.1f} s: {one / wall:.2f}x "
            f"(goal {GOALS.get(world, world * 0.75)}x); hashes identical: {len(hashes) == 1}; load {load()}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
