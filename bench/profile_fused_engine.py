"""A workload for a sampling profile of the engine fused with the stream (issue #24's stage shares).

    perf record -e cpu-clock -F 2000 -o fused.data .venv/bin/python bench/profile_fused_engine.py
    perf report -i fused.data --stdio --sort sym | grep -E "fused_engine|verification_cases|philox_floor|floor_registers"
    perf annotate -i fused.data --stdio -l -s fused_engine

Each piece of ``--piece`` cases is made by the native stream with its records (the harness's path:
``verification_arrays_native``, each group of cases verified as it is made), then the C Philox floor
(``philox_floor``, vectorized in registers, the goal's floor: its passes are ``floor_registers``) runs over as many blocks as the piece's
decisions, into a buffer made before, one after the other in one process. The samples of the symbols
are the stages: ``verification_cases`` (the stream's inputs), ``fused_engine`` (the engine, every draw
it needs computed there) and the floor. Read it for the shares inside the engine, not for the engine
against its floor: sampling perturbs the engine (it reads rows the stream has just written) more than
the floor (registers only), and the ratio it gives reads low (bench/README.md; bench/RESULTS.md, issue
#24, "the engine against its floor, night"); the ratio is ``bench_accumulated.py --part engine``'s.
Prints the cases and decisions run.
"""

from __future__ import annotations

import argparse

import numpy as np

from qconform.generators.accumulated import KMAX, NATIVE_STREAM, verification_arrays_native
from qconform.generators.accumulated_engine import native_engine


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--piece", type=int, default=2048)
    parser.add_argument("--cases", type=int, default=1 << 16)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    engine = native_engine()
    if NATIVE_STREAM is None or engine is None:
        raise SystemExit("the native stream or engine is not built (pip install -e .) or is switched off")
    cases = decisions = 0
    words = np.empty(((KMAX + 1) * args.piece, 4), np.uint32)  # at most K + 1 draws a case
    for _ in range(args.repeat):
        for lo in range(0, args.cases, args.piece):
            batch = verification_arrays_native(NATIVE_STREAM, lo, min(lo + args.piece, args.cases))
            assert batch.records is not None
            blocks = int(batch.records[:, 3 + KMAX].sum())
            engine.philox_floor(blocks, words[:blocks], 2)
            cases, decisions = cases + batch.stop - batch.start, decisions + blocks
    print(f"{cases} cases, {decisions} decisions (floor blocks)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
