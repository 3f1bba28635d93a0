"""Ranks of `qconform accumulate`: 2 torchrun ranks measured, W ranks simulated one share at a time.

    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_accumulate_ranks.py                         # 10^6, torch
    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_accumulate_ranks.py --family rng_abi --simulate 4

Issue #24's goals: 2 ranks on 2 cores at least 1.6x one rank at N = 10^6, 4 ranks on 4 cores at
least 3x, and the same hash at every world size. A rank takes a contiguous 1/W of the cases
(docs/accumulated.md, "Under torchrun"), so the shares are equal at any N.

* **measured**: ``qconform accumulate --adapter torch --count N`` on one rank, then under
  ``torchrun --standalone --nproc-per-node 2`` (each rank with its own torch child), wall clock of
  the whole command (start-up included: torchrun's and each rank's adapter) and the command's own
  seconds (first block to verdict), and the hash each printed. On a 2-core machine shared with
  other work, two ranks and their two torch children compete with that work for the cores: the
  speedup then measures the queue as much as the code.
* **simulated** (``--simulate W``): what W ranks on W idle cores would take, on one core. In this
  process, the W ranks of one run are run one after the other, each on its own share through the
  same torch child, and their gather (the ``all_gather_object`` of docs/distributed.md) is a
  rendezvous that starts the next rank when one arrives: rank r's time is from its start to its
  arrival. The W-rank run is then the slowest share (ranks run at once on W cores) plus the
  gather and the verdict, after the last arrival; against the one-rank run of the same cases in
  the same process. Not simulated: start-up (torchrun, W adapters), and W children competing
  for memory bandwidth. Every rank's hash must equal the one-rank hash.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from qconform.generators.accumulated import FAMILIES

ROOT = Path(__file__).resolve().parents[1]
GOALS = {2: 1.6, 4: 3.0}
SECONDS = re.compile(r": \d+ cases in ([0-9.]+) s")
HASH = re.compile(r"^hash\s+([0-9a-f]{64})", re.MULTILINE)


def command(family: str, count: int, batch: int, ranks: int) -> tuple[float, float, str]:
    """(wall seconds of the whole command, its own seconds, its hash)."""
    accumulate = ["qconform", "accumulate", "--adapter", "torch", "--family", family]
    accumulate += ["--count", str(count), "--batch", str(batch)]
    bin_dir = Path(sys.executable).parent
    if ranks == 1:
        line = [str(bin_dir / "qconform"), *accumulate[1:]]
    else:
        torchrun = shutil.which("torchrun", path=str(bin_dir)) or "torchrun"
        line = [torchrun, "--standalone", f"--nproc-per-node={ranks}", "--no-python", str(bin_dir / "qconform")]
        line += accumulate[1:]
    began = time.perf_counter()
    done = subprocess.run(line, cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - began
    own, digest = SECONDS.search(done.stdout), HASH.search(done.stdout)
    if own is None or digest is None:
        raise SystemExit(f"{' '.join(line)} failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr}")
    return wall, float(own.group(1)), digest.group(1)


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
    parser.add_argument("--repeat", type=int, default=1, help="measured runs of each world size (median)")
    parser.add_argument("--simulate", type=int, action="append", default=[], help="world sizes to simulate")
    parser.add_argument("--skip-measured", action="store_true")
    args = parser.parse_args()

    def load() -> str:
        return ", ".join(f"{x:.1f}" for x in os.getloadavg())

    print(f"{args.family}, N = {args.count:,}, torch candidate; {os.cpu_count()} CPUs; load {load()}")
    if not args.skip_measured:
        runs: dict[int, list[tuple[float, float, str]]] = {1: [], 2: []}
        for _ in range(args.repeat):
            for world in runs:
                runs[world].append(command(args.family, args.count, args.batch, world))
        for world, results in runs.items():
            walls, owns = [r[0] for r in results], [r[1] for r in results]
            print(
                f"measured, {world} rank(s): wall {statistics.median(walls):.1f} s ({min(walls):.1f}-{max(walls):.1f}), "
                f"the command's own {statistics.median(owns):.1f} s; hash {results[0][2]}"
            )
        speed = statistics.median(r[0] for r in runs[1]) / statistics.median(r[0] for r in runs[2])
        own = statistics.median(r[1] for r in runs[1]) / statistics.median(r[1] for r in runs[2])
        same = len({r[2] for results in runs.values() for r in results}) == 1
        print(
            f"measured speedup, 2 ranks: {speed:.2f}x wall ({own:.2f}x the command's own seconds; goal "
            f"{GOALS[2]}x: {'met' if speed >= GOALS[2] else 'NOT met'}); hashes identical: {same}; load {load()}"
        )
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
