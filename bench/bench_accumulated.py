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
  process, which answers a block at once (every case refused): the arrays travel through the
  block window (docs/shim-protocol.md, "Block window"), only two lines cross the pipe;
* ``block, noop child, pipe``: the same with no block window (``block_window=False``): the
  arrays cross the pipe as sections, as for a child that does not take the window;
* ``per case, noop child``: the same through ``run_batch``, one input object per case, the
  path every case took before blocks (``--by-case``).

Goal (issue #24): at least 10^6 cases per second per core for the harness.

``--part engine``: ``verification_round`` decisions (consumed draws) per second of the exact
engine, every draw it needs (acceptance and final) computed inside the timed region from the
request's key and counters (the stream's inputs made before), each engine against a plain
Philox4x32-10 over as many counters in the same technology (blocks per second), timed round-robin:

* NumPy: ``verification_records_numpy`` against ``philox_lanes`` (vectorized NumPy);
* C (``_verification_engine``, where it is built): ``verification_records_native`` against the
  module's ``philox_floor``, compiled with the same flags: the goal is judged against the
  vectorized floor in registers (``philox_x4``, four lanes held in registers through the ten rounds,
  SSE2: the kernel of the engine's own draws); printed after it, to compare, the vectorized floor in
  lanes (``philox_lanes`` over 256 counters a pass, which gcc vectorizes at -O3: the goal's floor
  before 2026-12-04, as fast at one place in the order, but after the first floor it finds its
  output buffer warm) and the scalar floor (one block after the other). Each floor writes into a
  buffer made before the clock starts;

each in three conditions: the whole batch of ``--engine-cases`` made before (about 760 bytes of
inputs a case: 50 MB at 2^16, out of every cache); in pieces of ``--piece`` cases, each made just
before the engines and floors run on it (as when the stream feeds the engine piece by piece); and
the first piece over and over (its inputs hot in cache: the engine's compute alone, a bound, not
the goal's condition). Then the harness's own path, where the native stream is built: the engine
fused with the stream (``verification_arrays_native``: each group of cases verified as soon as it
is made, in cache), timed as the difference between the stream with and without its records, each
piece in turn with the C floor over the piece's decisions. Then the NumPy engine's stages and the
Fraction spec (``verify_round`` over decoded inputs). The records of the spec, the NumPy engine and
the C engine are compared first (the fused records by tests/generators/test_verification_engine_native.py).
Goal (issue #24): the engine at least 50% of its floor.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from types import ModuleType
from typing import TypeVar

import numpy as np

from qconform.generators.accumulated import (
    FAMILIES,
    KMAX,
    NATIVE_STREAM,
    STREAM_KEY,
    U64,
    WORD_MASK,
    Batch,
    philox_lanes,
    record_of,
    verification_arrays_native,
)
from qconform.generators.accumulated_engine import (
    ENGINES,
    STAGES,
    native_engine,
    verification_records_native,
    verification_records_numpy,
)


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
    with (
        open_adapter("noop", timeout_s=600) as client,
        open_adapter("noop", timeout_s=600, block_window=False) as piped,
    ):
        assert client.window_attached and not piped.window_attached

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
                    "block, noop child, pipe",
                    count,
                    lambda: accumulate(by_block, family, count, expected, args.batch, run_block=piped.run_block),
                ),
                (
                    "per case, noop child",
                    per_case,
                    lambda: accumulate(by_block, family, per_case, expected, args.batch),
                ),
            ]
            for _path, _n, run in rows:
                run()  # untimed: the window's growth, the stream's memory, first-use costs
            # the rows in turn, run after run, so that a load that comes and goes weighs on each alike
            times = round_robin(
                [(path, lambda _piece, _n, run=run: run()) for path, _n, run in rows], one_piece, args.repeat
            )
            for path, n, _run in rows:
                print(f"{family:22} {path:28} {n:>8} {rate_cells(n, spread_of(times[path])):>32}")
            window, piped_times, inproc = (
                times[p] for p in ("block, noop child", "block, noop child, pipe", "block, in process")
            )
            over_pipe = [p / w for p, w in zip(piped_times, window)]
            of_inproc = [i / w for i, w in zip(inproc, window)]
            rate = count / statistics.median(window)
            print(
                f"{family:22} run by run, median (min-max): window / pipe {ratio_cells(over_pipe)}, "
                f"child (window) / in process {ratio_cells(of_inproc)}; goal 1e6 cases/s per core: "
                f"{'met' if rate >= 1e6 else 'NOT met'} in the child path, "
                f"{'met' if count / statistics.median(inproc) >= 1e6 else 'NOT met'} in process"
            )


def one_piece() -> Iterable[tuple[None, int]]:
    return [(None, 0)]


def ratio_cells(ratios: list[float]) -> str:
    return f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"


# --- the engine against its RNG floor ---------------------------------------------------


def decisions(records: np.ndarray) -> int:
    """Consumed draws of verification records (word ``3 + KMAX`` is the draw count)."""
    return int(records[:, 3 + KMAX].sum())


def philox_floor(blocks: int) -> Callable[[], object]:
    """A plain vectorized Philox4x32-10 over ``blocks`` counters under one key: the RNG floor."""
    counter = np.arange(blocks, dtype=U64)
    return lambda: philox_lanes(counter & WORD_MASK, counter >> U64(32), U64(0), U64(4), *STREAM_KEY)


Row = tuple[str, Callable[[Batch, int], object]]
#: what a round-robin piece starts from: a batch, or a case index
P = TypeVar("P")


#: the C floors: (row name, ``philox_floor``'s form), in the order they run on a piece; the goal is judged against
#: the first: the vectorized Philox in the form of the engine's own draws (four lanes held in registers through
#: the ten rounds); the others to compare: the vectorized floor before 2026-12-04 (``philox_lanes``: the rounds
#: outside, the lanes inside; as fast at one place, but second it finds its output buffer warm: bench/README.md)
#: and the scalar loop (the floor before 2026-12-03's night)
C_FLOORS = (
    ("C Philox floor (vectorized, in registers)", 2),
    ("C Philox floor (vectorized, lanes)", 0),
    ("C Philox floor (scalar)", 1),
)


def c_floor_rows(native: ModuleType, most: int) -> list[tuple[str, Callable[[object, int], object]]]:
    """(name, run(_, blocks)): the module's floors over ``blocks`` counters (at most ``most``), into
    one buffer made here, before any clock starts."""
    words = np.empty((most, 4), np.uint32)
    return [
        (name, lambda _piece, blocks, form=form: native.philox_floor(blocks, words[:blocks], form))
        for name, form in C_FLOORS
    ]


def engine_rows(native: ModuleType | None, most: int) -> list[Row]:
    """(name, run(batch, blocks)): each engine on a batch and its floors over ``blocks`` counters (at
    most ``most``)."""
    rows: list[Row] = []
    if native is not None:
        rows += [("C engine", lambda batch, _blocks: verification_records_native(native, batch))]
        rows += c_floor_rows(native, most)
    rows += [
        ("NumPy engine", lambda batch, _blocks: verification_records_numpy(batch)),
        ("NumPy Philox floor", lambda _batch, blocks: philox_floor(blocks)()),
    ]
    return rows


def round_robin(
    rows: Sequence[tuple[str, Callable[[P, int], object]]], pieces: Callable[[], Iterable[tuple[P, int]]], repeat: int
) -> dict[str, list[float]]:
    """Process CPU seconds of each row per run: a run takes every piece in turn and times each row
    on it, one after the other, so that every row sees the same machine and the same cache."""
    times: dict[str, list[float]] = {name: [] for name, _ in rows}
    for _ in range(repeat):
        spent = dict.fromkeys(times, 0.0)
        for batch, blocks in pieces():
            for name, run in rows:
                began = time.process_time()
                run(batch, blocks)
                spent[name] += time.process_time() - began
        for name in times:
            times[name].append(spent[name])
    return times


def engine_part(args: argparse.Namespace) -> None:
    from qconform.generators.families.verification_round import decode_request, solve
    from qconform.spec.verification import verify_round

    family = FAMILIES["verification_round"]
    native = native_engine()
    print(f"## engine against its RNG floor ({load()}; C engine {'built' if native else 'NOT built'})")
    small = family.arrays(0, args.spec_cases)
    inputs = [family.case_input(small, k) for k in range(args.spec_cases)]
    spec_small = np.array([record_of(family, inp, solve(inp)) for inp in inputs], dtype=np.uint64)
    assert (verification_records_numpy(small) == spec_small).all(), "NumPy engine and spec disagree"
    rounds = [decode_request(inp["requests"][0], inp["vocab"]) for inp in inputs]
    spec_s = spread(lambda: [verify_round(r) for r in rounds], max(1, args.repeat // 2))

    cases = args.engine_cases
    arrays = family.arrays(0, cases)
    records = verification_records_numpy(arrays)
    if native is not None:
        assert (verification_records_native(native, arrays) == records).all(), "C and NumPy engines disagree"
    count = decisions(records)
    print(f"verification decisions per case: {count / cases:.2f}; {cases} cases, {count} decisions")
    print(f"{'row (process CPU time)':44} {'decisions (blocks)/s median (min-max)':>40}")
    print(f"{'spec verify_round (Fractions), inputs decoded':44} {rate_cells(decisions(spec_small), spec_s):>40}")
    rows = engine_rows(native, count)

    def whole() -> Iterable[tuple[Batch, int]]:
        return [(arrays, count)]

    starts = range(0, cases, args.piece)
    piece_decisions = [decisions(records[lo : lo + args.piece]) for lo in starts]

    def pieces() -> Iterable[tuple[Batch, int]]:
        for lo, blocks in zip(starts, piece_decisions):
            yield family.arrays(lo, min(lo + args.piece, cases)), blocks

    first = family.arrays(0, args.piece)

    def hot() -> Iterable[tuple[Batch, int]]:
        return [(first, piece_decisions[0])] * len(piece_decisions)

    for condition, source in (
        (f"whole batch, inputs made before ({cases} cases)", whole),
        (f"pieces of {args.piece} cases, each made just before", pieces),
        (f"one piece of {args.piece} cases again and again (hot in cache: the compute alone)", hot),
    ):
        # hot: each engine with its floor alone, so that no other row's arrays evict its inputs
        pairs = [[row for row in rows if row[0].startswith(tech)] for tech in ("C ", "NumPy ")]
        times = {}
        for pair in pairs if source is hot else [rows]:
            times |= round_robin(pair, source, args.repeat)
        print(f"# {condition}")
        done = count if source is not hot else piece_decisions[0] * len(piece_decisions)
        for name, _ in rows:
            print(f"{name:44} {rate_cells(done, spread_of(times[name])):>40}")
        pairs = [("C engine", name) for name, _ in C_FLOORS] + [("NumPy engine", "NumPy Philox floor")]
        for engine, floor in pairs:
            if engine in times:
                print_ratio(engine, floor, times[engine], times[floor])
    if NATIVE_STREAM is not None and native is not None:
        fused_condition(native, NATIVE_STREAM, cases, args.piece, starts, piece_decisions, count, args.repeat)
    inputs_s = spread(lambda: family.arrays(0, cases), max(1, args.repeat // 2))
    print(f"{'the stream inputs (verification_arrays), cases/s':44} {rate_cells(cases, inputs_s):>40}")
    stage_s = {name: 0.0 for name in STAGES}
    for _ in range(args.repeat):
        verification_records_numpy(arrays, stage_s)
    total = sum(stage_s.values())
    print("NumPy engine stages: " + ", ".join(f"{name} {100 * s / total:.0f}%" for name, s in stage_s.items()))


def fused_condition(
    native: ModuleType,
    stream: ModuleType,
    cases: int,
    piece: int,
    starts: range,
    piece_decisions: list[int],
    count: int,
    repeat: int,
) -> None:
    """The engine fused with the stream, the harness's path: each piece of ``piece`` cases made by the
    native stream alone, then again with its records (each group of cases verified as it is made), then
    the C floor over as many blocks, round-robin; the engine's time is the difference of the first two."""
    rows: list[tuple[str, Callable[[int, int], object]]] = [
        ("C stream alone", lambda lo, _blocks: verification_arrays_native(stream, lo, min(lo + piece, cases), False)),
        (
            "C stream with the engine fused",
            lambda lo, _blocks: verification_arrays_native(stream, lo, min(lo + piece, cases)),
        ),
    ]
    rows += c_floor_rows(native, max(piece_decisions))
    times = round_robin(rows, lambda: zip(starts, piece_decisions), repeat)
    engine = [fused - alone for alone, fused in zip(times["C stream alone"], times["C stream with the engine fused"])]
    print(f"# fused: pieces of {piece} cases, the stream alone and with the engine's records in the same pass")
    for name, _ in rows:
        print(f"{name:44} {rate_cells(cases if 'stream' in name else count, spread_of(times[name])):>40}")
    print(f"{'C engine in the fused pass (the difference)':44} {rate_cells(count, spread_of(engine)):>40}")
    for floor, _ in C_FLOORS:
        print_ratio("C engine fused", floor, engine, times[floor])


def print_ratio(engine: str, floor: str, engine_s: list[float], floor_s: list[float]) -> None:
    """The engine's rate over its floor's, run by run (the floor's seconds over the engine's, the same
    count of decisions and blocks): median (min-max), against the goal where the floor is the one it names
    (the first C floor, vectorized, or NumPy's)."""
    ratios = [f / e for e, f in zip(engine_s, floor_s)]
    median = statistics.median(ratios)
    judged = floor in (C_FLOORS[0][0], "NumPy Philox floor")
    verdict = f"goal 0.5: {'met' if median >= 0.5 else 'NOT met'}" if judged else "(to compare; not the goal's floor)"
    print(f"{engine} / {floor}: {median:.2f} ({min(ratios):.2f}-{max(ratios):.2f}) per run; {verdict}")


def spread_of(times: list[float]) -> tuple[float, float, float]:
    return statistics.median(times), min(times), max(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--part", choices=("harness", "engine"), action="append")
    parser.add_argument("--family", action="append", choices=sorted(FAMILIES))
    parser.add_argument("--cases", type=int, default=1 << 17, help="cases of a block run (harness part)")
    parser.add_argument("--per-case-cases", type=int, default=4096, help="cases of a per-case run (harness part)")
    parser.add_argument("--batch", type=int, default=16384, help="cases per block or run_batch call")
    parser.add_argument("--engine-cases", type=int, default=1 << 16)
    parser.add_argument("--spec-cases", type=int, default=2000)
    parser.add_argument(
        "--piece", type=int, default=2048, help="cases per piece of the in-cache condition (engine part)"
    )
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
