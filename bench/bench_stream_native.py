"""verification_round's stream inputs: the C pass against the NumPy path, side by side in one run.

    .venv/bin/python bench/bench_stream_native.py                # 2^14 cases a block, 9 repeats

Rows, alternating, process CPU time, cases per second median (min-max), over blocks of ``--cases``:

* ``NumPy``: ``verification_arrays_numpy`` then ``verification_block`` (the definition, and the
  path without the extension);
* ``C``: ``verification_arrays_native`` without records (the fields and the block in one pass,
  generators/_accumulated_stream.c), the arrays checked equal to the NumPy path's first;
* ``C fused``: the same with the engine's records, each group of cases verified as it is made
  (the harness's path, docs/accumulated.md "The engine");
* ``engine``: the C engine's ``verification_records_native`` over the same cases as a second pass
  (where it is built; else the NumPy engine), for scale.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from qconform.generators.accumulated import (
    NATIVE_STREAM,
    verification_arrays_native,
    verification_arrays_numpy,
    verification_block,
)
from qconform.generators.accumulated_engine import NATIVE, verification_records_native, verification_records_numpy


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--cases", type=int, default=1 << 14)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    if NATIVE_STREAM is None:
        raise SystemExit("the native stream is not built (pip install -e .) or QCONFORM_ACCUMULATED_NATIVE=0")
    n = args.cases
    stream = NATIVE_STREAM
    native, numpy_batch = verification_arrays_native(stream, 0, n, fused=False), verification_arrays_numpy(0, n)
    assert native.block is not None
    for name, array in numpy_batch.fields.items():
        assert array.tobytes() == native.fields[name].tobytes(), name
    for name, array in verification_block(numpy_batch).items():
        assert array.tobytes() == native.block[name].tobytes(), name
    rows = {
        "NumPy (verification_arrays_numpy + verification_block)": lambda: verification_block(
            verification_arrays_numpy(0, n)
        ),
        "C (verification_arrays_native: fields and block)": lambda: verification_arrays_native(
            stream, 0, n, fused=False
        ),
        "C fused (fields, block and the engine's records)": lambda: verification_arrays_native(stream, 0, n),
        "engine, a second pass (for scale)": lambda: (
            verification_records_numpy(native) if NATIVE is None else verification_records_native(NATIVE, native)
        ),
    }
    times: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(args.repeat):
        for name, run in rows.items():
            began = time.process_time()
            run()
            times[name].append(time.process_time() - began)
    print(f"verification_round, {n} cases a block, process CPU time; load {os.getloadavg()[0]:.1f}")
    for name, values in times.items():
        rates = sorted(n / t for t in values)
        print(f"{name:58} {statistics.median(rates):>12,.0f} ({rates[0]:,.0f}-{rates[-1]:,.0f}) cases/s")
    numpy_s, native_s = (statistics.median(times[name]) for name in list(rows)[:2])
    print(f"C / NumPy: {numpy_s / native_s:.1f}x; load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
