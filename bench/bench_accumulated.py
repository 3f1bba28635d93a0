"""The accumulated path: the harness's feeding rate, and the exact NumPy engine against its RNG floor.

    .venv/bin/python bench/bench_accumulated.py --part harness     # the feeding rate, block against per case
    .venv/bin/python bench/bench_accumulated.py --part engine      # the engine against the Philox floor and the spec
    .venv/bin/python bench/bench_accumulated.py                    # both

Every figure is process CPU time of this process (the harness side; an adapter child's
time is not in it), median of ``--repeat`` runs with min and max, and every ratio is
taken between rows of the same run (bench/README.md).

``--part harness``, per accumulated family (docs/accumulated.md, "Blocks"):

* ``block, in process``: ``accumulate`` with a candidate that answers every block at once
  with its records, made before the clock starts: what the harness itself costs per case
  (the stream's inputs, the block, the engine's records, the comparison, the hashes);
* ``block, noop child``: ``qconform accumulate``'s path against the ``noop`` adapter's child
  process, which answers a block at once (every case refused): the arrays cross the pipe;
* ``per case, noop child``: the same through ``run_batch``, one input object per case, the
  path every case took before blocks (``--by-case``).

Goal (issue #24): at least 10^6 cases per second per core for the harness.

``--part engine``: ``verification_round`` decisions (consumed draws) per second of the engine
(``accumulated_engine.verification_records``: every draw it needs, acceptance and final,
computed inside the timed region; the stream's inputs made before), against a plain
vectorized Philox4x32-10 over as many counters (``philox_lanes``; blocks per second), the
same engine's stages, and the Fraction spec (``verify_round`` over decoded inputs).
Goal (issue #24): the engine at least 50% of the Philox floor.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import numpy as np

from qconform.generators.accumulated import FAMILIES, KMAX, STREAM_KEY, U64, WORD_MASK, philox_lanes, record_of
from qconform.generators.accumulated_engine import ENGINES, STAGES, verification_records


def spread(run: Callable[[], object], repeat: int) -> tuple[float, float, float]:
    """(median, min, max) process CPU seconds of ``run`` over ``repeat`` runs."""
    times = []
    for _ in range(repeat):
        began = time.process_time()
        run()
        times.append(time.process_time() - began)
    return statistics.median(times), min(times), max(times)


def rate_cells(count: float, seconds: tuple[float, float, float]) -> str:
    """``median (min-max)`` of ``count / seconds``: the fastest run is the max rate."""
    median, low, high = seconds
    return f"{count / median:>12,.0f} ({count / high:,.0f}-{count / low:,.0f})"


def load() -> str:
    return "load average " + ", ".join(f"{x:.1f}" for x in os.getloadavg())


# --- the harness's feeding rate ----------------------------------------------------------


def oracle_blocks(family: str, count: int, batch: int) -> Callable[[str, dict], np.ndarray]:
    """A candidate that answers each block at once with its records, made beforehand (in order)."""
    records = [
        ENGINES[family](FAMILIES[family].arrays(lo, min(lo + batch, count))).astype("<u4")
        for lo in range(0, count, batch)
    ]
    answers = iter(records * 1000)
    return lambda _family, _block: next(answers)


def harness_part(args: argparse.Namespace) -> None:
    from qconform.harness.run.accumulate import accumulate
    from qconform.harness.transport.client import open_adapter

    print(f"## harness feeding rate (cases per CPU second of the harness; {load()})")
    print(f"{'family':22} {'path':28} {'cases':>8} {'cases/s median (min-max)':>32}")
    expected: dict = {"families": {}}
    with open_adapter("noop", timeout_s=600) as client:

        def by_block(name, inputs):
            return client.run_batch(name, inputs, schema_check=False)

        for family in args.family or sorted(FAMILIES):
            count, per_case = args.cases, args.per_case_cases
            oracle = oracle_blocks(family, count, args.batch)
            rows = [
                (
                    "block, in process",
                    count,
                    lambda: accumulate(by_block, family, count, expected, args.batch, run_block=oracle),
                ),
                (
                    "block, noop child",
                    count,
                    lambda: accumulate(by_block, family, count, expected, args.batch, run_block=client.run_block),
                ),
                (
                    "per case, noop child",
                    per_case,
                    lambda: accumulate(by_block, family, per_case, expected, args.batch),
                ),
            ]
            rates = {}
            for path, n, run in rows:
                seconds = spread(run, args.repeat)
                rates[path] = n / seconds[0]
                print(f"{family:22} {path:28} {n:>8} {rate_cells(n, seconds):>32}")
            print(
                f"{family:22} block (noop child) / per case (noop child): "
                f"{rates['block, noop child'] / rates['per case, noop child']:,.0f}x; goal 1e6 cases/s per core: "
                f"{'met' if rates['block, noop child'] >= 1e6 else 'NOT met'} in the child path, "
                f"{'met' if rates['block, in process'] >= 1e6 else 'NOT met'} in process"
            )


# --- the engine against its RNG floor ---------------------------------------------------


def decisions(records: np.ndarray) -> int:
    """Consumed draws of verification records (word ``3 + KMAX`` is the draw count)."""
    return int(records[:, 3 + KMAX].sum())


def philox_floor(blocks: int) -> Callable[[], object]:
    """A plain vectorized Philox4x32-10 over ``blocks`` counters under one key: the RNG floor."""
    counter = np.arange(blocks, dtype=U64)
    return lambda: philox_lanes(counter & WORD_MASK, counter >> U64(32), U64(0), U64(4), *STREAM_KEY)


def engine_part(args: argparse.Namespace) -> None:
    from qconform.generators.families.verification_round import decode_request, solve
    from qconform.spec.verification import verify_round

    family = FAMILIES["verification_round"]
    print(f"## engine against its RNG floor ({load()})")
    small = family.arrays(0, args.spec_cases)
    inputs = [family.case_input(small, k) for k in range(args.spec_cases)]
    spec_small = np.array([record_of(family, inp, solve(inp)) for inp in inputs], dtype=np.uint64)
    assert (verification_records(small) == spec_small).all(), "engine and spec disagree"
    rounds = [decode_request(inp["requests"][0], inp["vocab"]) for inp in inputs]
    spec_s = spread(lambda: [verify_round(r) for r in rounds], max(1, args.repeat // 2))

    arrays = family.arrays(0, args.engine_cases)
    records = verification_records(arrays)
    count = decisions(records)
    engine_s = spread(lambda: verification_records(arrays), args.repeat)
    floor_s = spread(philox_floor(count), args.repeat)
    inputs_s = spread(lambda: family.arrays(0, args.engine_cases), max(1, args.repeat // 2))
    print(f"verification decisions per case: {count / args.engine_cases:.2f}")
    print(f"{'row (process CPU time)':52} {'cases':>8} {'decisions (blocks)/s median (min-max)':>40}")
    print(
        f"{'spec verify_round (Fractions), inputs decoded':52} {args.spec_cases:>8} {rate_cells(decisions(spec_small), spec_s):>40}"
    )
    print(
        f"{'engine verification_records, every draw inside':52} {args.engine_cases:>8} {rate_cells(count, engine_s):>40}"
    )
    print(f"{'Philox4x32-10 floor, one block per decision':52} {count:>8} {rate_cells(count, floor_s):>40}")
    print(
        f"{'the stream inputs (verification_arrays), per case':52} {args.engine_cases:>8} {rate_cells(args.engine_cases, inputs_s):>40}"
    )
    stage_s = {name: 0.0 for name in STAGES}
    for _ in range(args.repeat):
        verification_records(arrays, stage_s)
    total = sum(stage_s.values())
    print("engine stages: " + ", ".join(f"{name} {100 * s / total:.0f}%" for name, s in stage_s.items()))
    ratio = (count / engine_s[0]) / (count / floor_s[0])
    print(
        f"engine / Philox floor: {ratio:.2f} (goal 0.5: {'met' if ratio >= 0.5 else 'NOT met'}); "
        f"engine / spec: {(count / engine_s[0]) / (decisions(spec_small) / spec_s[0]):,.0f}x"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--part", choices=("harness", "engine"), action="append")
    parser.add_argument("--family", action="append", choices=sorted(FAMILIES))
    parser.add_argument("--cases", type=int, default=1 << 17, help="cases of a block run (harness part)")
    parser.add_argument("--per-case-cases", type=int, default=4096, help="cases of a per-case run (harness part)")
    parser.add_argument("--batch", type=int, default=16384, help="cases per block or run_batch call")
    parser.add_argument("--engine-cases", type=int, default=1 << 16)
    parser.add_argument("--spec-cases", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    parts = args.part or ["harness", "engine"]
    if "harness" in parts:
        harness_part(args)
    if "engine" in parts:
        engine_part(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
