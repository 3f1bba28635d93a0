"""Where the time of ``qconform accumulate --adapter torch`` goes: the torch child's busy and idle time.

    OMP_NUM_THREADS=1 .venv/bin/python bench/accumulate_child_idle.py --family categorical_sampling --runs 3
    OMP_NUM_THREADS=1 PYTHONPATH=/tmp/before .venv/bin/python bench/accumulate_child_idle.py ...  # another tree

Each run is the command's run (``accumulate`` with the CLI's comparator judge, by block, the torch
adapter in a fresh child process, as ``qconform accumulate`` starts it), timed from the run's start
like the command's printed rate; this process's own first-use costs fall in its first run only.
The child is the same host with timestamps around the torch candidate's ``run_block`` (the clock
is CLOCK_MONOTONIC in both processes); the parent's second thread is timed around its tasks (the
next request's inputs, the engine, the judging of a request).
One line per run: the wall time; the child's torch time; its idle time, split into before its
first block (the first inputs, the first send, first-use costs), between blocks (the reply's way
back, the next request's way there, wake-ups) and after its last block (the last judging); and
the judging thread's busy time. ``--full`` prints every timed span. A diagnosis, not a goal: the
goal's ratio is bench_accumulate_torch.py's.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

#: the child's timestamps go to this file (a path in the environment, set by the parent)
EVENTS = "QCONFORM_TIMELINE_EVENTS"


def child_main(argv: list[str]) -> int:
    """The host (``qconform.harness.transport.host``), with the torch candidate's ``run_block`` timed."""
    import atexit

    from qconform.adapters import torch_batched
    from qconform.harness.transport import host

    spans: list[tuple[float, float]] = []
    run_block = torch_batched.run_block

    def timed(*args, **kwargs):
        began = time.perf_counter()
        try:
            return run_block(*args, **kwargs)
        finally:
            spans.append((began, time.perf_counter()))

    torch_batched.run_block = timed

    def dump() -> None:
        Path(os.environ[EVENTS]).write_text("".join(f"{a} {b}\n" for a, b in spans))

    atexit.register(dump)
    return host.main(argv)


def one_run(family: str, count: int, batch: int, events: Path) -> tuple[float, list[tuple[str, float, float]]]:
    """The run's seconds and its spans ``(name, start, end)`` relative to the run's start."""
    from qconform.generators.accumulated import FAMILIES
    from qconform.generators.accumulated_engine import ENGINES
    from qconform.generators.corpus import default_vectors_dir
    from qconform.harness.judging.judge import family_module, judge
    from qconform.harness.run import accumulate as run_accumulate
    from qconform.harness.transport import client as transport

    spans: list[tuple[str, float, float]] = []

    def timed(name, call):
        def wrapped(*args, **kwargs):
            began = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                if threading.current_thread() is not threading.main_thread():
                    spans.append((name, began, time.perf_counter()))

        return wrapped

    fam = FAMILIES[family]
    saved = (fam.arrays, ENGINES[family], run_accumulate.judge_batch, transport.host_command)
    object.__setattr__(fam, "arrays", timed("inputs", fam.arrays))
    ENGINES[family] = timed("engine", ENGINES[family])
    run_accumulate.judge_batch = timed("judging", run_accumulate.judge_batch)
    transport.host_command = lambda name, device: [sys.executable, __file__, "--child", "--adapter", name]
    try:
        expected = run_accumulate.load_expected(default_vectors_dir())
        with transport.open_adapter("torch", "cpu", 600) as client:
            family_module(family)
            line = f"qconform accumulate --adapter torch --family {family} --count {count}"

            def judge_case(case: int, case_input: dict, outcome: object) -> tuple[str, str]:
                verdict = judge(run_accumulate.case_vector(family, case, line, case_input), outcome, client.config)
                return str(verdict.cls), verdict.line()

            # as the command does: blocks sent ahead to a child that takes pipelined requests
            # (docs/shim-protocol.md); a tree without them, one at a time
            blocks: dict[str, Any] = {"run_block": client.run_block}
            if getattr(client, "depth", 1) > 1:
                blocks = {"send_block": lambda name, block: client.send_block(name, block).result}
            began = time.perf_counter()
            result = run_accumulate.accumulate(
                lambda name, inputs: client.run_batch(name, inputs, schema_check=False),
                family,
                count,
                expected,
                batch,
                judge=judge_case,
                **blocks,
            )
    finally:
        object.__setattr__(fam, "arrays", saved[0])
        ENGINES[family], run_accumulate.judge_batch, transport.host_command = saved[1:]
    child = [line.split() for line in events.read_text().splitlines()]
    spans += [("torch", float(a), float(b)) for a, b in child]
    return result.seconds, sorted(((n, a - began, b - began) for n, a, b in spans), key=lambda s: s[1])


def summary(family: str, seconds: float, spans: list[tuple[str, float, float]]) -> str:
    torch = [(a, b) for n, a, b in spans if n == "torch"]
    busy = sum(b - a for a, b in torch)
    first, last = torch[0][0], torch[-1][1]
    judging = sum(b - a for n, a, b in spans if n != "torch")
    return (
        f"{family}: {seconds * 1e3:.1f} ms; torch child busy {busy * 1e3:.1f} ms, idle "
        f"{(seconds - busy) * 1e3:.1f} (before its first block {first * 1e3:.1f}, between blocks "
        f"{(last - first - busy) * 1e3:.1f}, after its last {(seconds - last) * 1e3:.1f}); "
        f"the harness's second thread busy {judging * 1e3:.1f} ms; load {os.getloadavg()[0]:.1f}"
    )


def main() -> int:
    if sys.argv[1:2] == ["--child"]:
        return child_main(sys.argv[2:])
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--family", action="append", required=True)
    parser.add_argument("--count", type=int, default=1 << 16)
    parser.add_argument("--batch", type=int, default=16384)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--full", action="store_true", help="every timed span of every run")
    args = parser.parse_args()
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        events = Path(folder) / "child-events"
        os.environ[EVENTS] = str(events)
        for family in args.family:
            for _ in range(args.runs):
                seconds, spans = one_run(family, args.count, args.batch, events)
                print(summary(family, seconds, spans))
                for name, a, b in spans if args.full else ():
                    print(f"  {a * 1e3:8.1f} {b * 1e3:8.1f} {(b - a) * 1e3:7.1f}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
