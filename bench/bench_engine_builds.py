"""The fused engine of two builds side by side: before and after a change to the C engine, in one process.

    git archive BASE | tar x -C /tmp/before && (cd /tmp/before && python -c "from setuptools import setup; setup()" build_ext --inplace)
    .venv/bin/python bench/bench_engine_builds.py --before /tmp/before --repeat 9

The harness's path (``bench_accumulated.py --part engine``'s fused condition) for each build: each piece of
``--piece`` cases made by the build's native stream alone and with the engine fused (each group of cases
verified as it is made), the engine's time being the difference; then the C floors (this
tree's ``philox_floor``) over the piece's decisions. Every row runs on every piece in turn (round-robin), so
both builds see the same machine; each ratio is taken run by run. The two builds' records are compared first
(they must be equal: a change to the engine changes no record). ``--before`` is a source tree with its
extensions built in place (``generators/_accumulated_stream*.so`` and ``generators/_verification_engine*.so``);
this tree's own built modules are the after.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import statistics
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
from bench_accumulated import load, round_robin

from qconform.generators.accumulated import KMAX, NATIVE_STREAM, verification_arrays_native
from qconform.generators.accumulated_engine import native_engine


def built_module(tree: Path, name: str) -> ModuleType:
    """The extension ``name`` built in ``tree/generators``, loaded under its own name beside this tree's."""
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    path = tree / "generators" / f"{name}{suffix}"
    if not path.is_file():
        raise SystemExit(f"--before: no {path} (build it there: build_ext --inplace)")
    spec = importlib.util.spec_from_file_location(f"qconform.generators.{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="a source tree with its extensions built")
    parser.add_argument("--cases", type=int, default=1 << 16)
    parser.add_argument("--piece", type=int, default=2048)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args(argv)
    engine_module = native_engine()
    if NATIVE_STREAM is None or engine_module is None:
        raise SystemExit("this tree's native stream or engine is not built (pip install -e .) or is switched off")
    streams = {"before": built_module(args.before, "_accumulated_stream"), "after": NATIVE_STREAM}
    starts = range(0, args.cases, args.piece)
    blocks = []
    for lo in starts:
        records = {
            build: verification_arrays_native(stream, lo, min(lo + args.piece, args.cases)).records
            for build, stream in streams.items()
        }
        assert records["before"] is not None and records["after"] is not None
        if not np.array_equal(records["before"], records["after"]):
            raise SystemExit(f"the builds' records differ in the piece from case {lo}")
        blocks.append(int(records["after"][:, 3 + KMAX].sum()))
    words = np.empty((max(blocks), 4), np.uint32)
    rows = []
    for build, stream in streams.items():
        for fused in (False, True):
            rows.append(
                (
                    f"{build} {'fused' if fused else 'alone'}",
                    lambda lo, _blocks, stream=stream, fused=fused: verification_arrays_native(
                        stream, lo, min(lo + args.piece, args.cases), fused
                    ),
                )
            )
    # the goal's floor first (vectorized, in registers: bench/README.md), then the two before it, to compare
    floors = (("floor vectorized", 2), ("floor vectorized, lanes", 0), ("floor scalar", 1))
    for name, form in floors:
        rows.append((name, lambda _lo, n, form=form: engine_module.philox_floor(n, words[:n], form)))
    times = round_robin(rows, lambda: zip(starts, blocks), args.repeat)
    total = sum(blocks)
    print(f"# {load()}; {args.repeat} runs of {args.cases} cases in pieces of {args.piece}, {total} decisions;")
    print("# records of both builds equal; the engine's time is fused - alone, each ratio run by run")
    engine = {}
    for build in streams:
        engine[build] = [f - a for a, f in zip(times[f"{build} alone"], times[f"{build} fused"])]
        rates = [total / s for s in engine[build]]
        print(f"{build} engine: {statistics.median(rates):,.0f} decisions/s ({min(rates):,.0f}-{max(rates):,.0f})")
        for floor, _ in floors:
            ratios = [f / e for e, f in zip(engine[build], times[floor])]
            goal = "the goal's floor" if floor == "floor vectorized" else "to compare"
            print(f"  / {floor}: {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) ({goal})")
    speed = [b / a for b, a in zip(engine["before"], engine["after"])]
    print(f"after / before, engine speed: {statistics.median(speed):.2f}x ({min(speed):.2f}-{max(speed):.2f})")
    for floor, _ in floors:
        print(f"{floor}: {total / statistics.median(times[floor]):,.0f} blocks/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
