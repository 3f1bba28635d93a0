"""The exact NumPy engine of the accumulated families against the Fraction spec (docs/accumulated.md).

    .venv/bin/python bench/bench_accumulated.py                  # 2^16 engine cases, 2000 spec cases
    .venv/bin/python bench/bench_accumulated.py --engine-cases 262144 --spec-cases 5000

Measures, in the same run and in process CPU time (one core: NumPy runs these
single-threaded), the **verification decisions per second**
of ``verification_round``: a decision is one consumed draw (an acceptance test, a
correction or a bonus draw), counted from the records. Both sides get their inputs
ready before the clock starts:

* spec: ``qconform.spec.verification.verify_round`` over decoded ``RoundInput`` objects
  (Fractions, ints);
* engine: ``accumulated_engine.verification_records`` over the stream's arrays;
* also: the engine with the stream's input generation (``verification_arrays``) timed in,
  which is what an expected hash costs.

Goal (issue #11): at least 10^6 decisions per second per core for the engine. The last
line gives the engine's rate over the spec's. The records of the cases both sides
ran are compared first.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from qconform.generators.accumulated import FAMILIES, KMAX, record_of
from qconform.generators.accumulated_engine import verification_records
from qconform.generators.families.verification_round import decode_request, solve
from qconform.spec.verification import verify_round


def decisions(records: np.ndarray) -> int:
    """Consumed draws of verification records (word ``3 + KMAX`` is the draw count)."""
    return int(records[:, 3 + KMAX].sum())


def best(run, repeat: int) -> float:
    """Median (or, under 3 repeats, least) process CPU time of ``run``: on a shared machine the
    CPU seconds, not the wall time, say what one core does (bench/README.md)."""
    times = []
    for _ in range(repeat):
        began = time.process_time()
        run()
        times.append(time.process_time() - began)
    return min(times) if repeat < 3 else statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine-cases", type=int, default=1 << 16)
    parser.add_argument("--spec-cases", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    family = FAMILIES["verification_round"]

    small = family.arrays(0, args.spec_cases)
    inputs = [family.case_input(small, k) for k in range(args.spec_cases)]
    engine_small = verification_records(small)
    spec_small = np.array([record_of(family, inp, solve(inp)) for inp in inputs], dtype=np.uint64)
    assert (engine_small == spec_small).all(), "engine and spec disagree"
    rounds = [decode_request(inp["requests"][0], inp["vocab"]) for inp in inputs]
    spec_s = best(lambda: [verify_round(r) for r in rounds], max(1, args.repeat // 2))
    spec_rate = decisions(spec_small) / spec_s

    arrays = family.arrays(0, args.engine_cases)
    records = verification_records(arrays)
    engine_s = best(lambda: verification_records(arrays), args.repeat)
    with_inputs_s = best(lambda: verification_records(family.arrays(0, args.engine_cases)), max(1, args.repeat // 2))
    count = decisions(records)

    print(f"verification decisions per case: {count / args.engine_cases:.2f}")
    print(f"{'row (process CPU time)':44} {'cases':>8} {'seconds':>9} {'decisions/s':>13}")
    print(
        f"{'spec verify_round (Fractions), inputs decoded':44} {args.spec_cases:>8} {spec_s:>9.3f} {spec_rate:>13,.0f}"
    )
    print(f"{'engine verification_records':44} {args.engine_cases:>8} {engine_s:>9.3f} {count / engine_s:>13,.0f}")
    print(
        f"{'engine + stream inputs (an expected hash)':44} {args.engine_cases:>8} {with_inputs_s:>9.3f} "
        f"{count / with_inputs_s:>13,.0f}"
    )
    print(
        f"engine / spec: {count / engine_s / spec_rate:,.0f}x; goal 1e6 decisions/s per core: "
        f"{'met' if count / engine_s >= 1e6 else 'NOT met'} ({count / engine_s / 1e6:.2f}e6)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
