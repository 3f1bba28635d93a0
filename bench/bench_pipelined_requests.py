"""Two blocks in flight against one at a time, paired in one process, with torch's own time between.

    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_pipelined_requests.py --repeat 15
    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_pipelined_requests.py --family allocation_dense --cases 262144

The accumulate run (``harness.run.accumulate``, the command's comparator judge, blocks of
``--batch``) through two torch children started side by side: one that took pipelined requests
(docs/shim-protocol.md, "Pipelined requests"), its blocks sent ahead as ``qconform accumulate``
sends them, and one offered none (``open_adapter(..., pipeline=False)``), one block at a time. The
third row is torch's own time, the torch adapter's ``run_block`` over the same blocks in this
process (bench_accumulate_torch.py's second row). The three rows run in turn, ``--repeat`` times,
the order rotating each round; every run is timed as the command times itself (the run's seconds,
adapter start-up excluded) and its hash checked equal to the other row's.

Why next to bench_accumulate_torch.py: that script starts a fresh ``qconform accumulate`` for each
run (start-up and first-use costs in every child), and on a shared machine its rows move by up to
2x between rotations, so the difference one protocol feature makes is lost in the spread. Here the
same two children answer every round and the ratios are taken run by run (paired), so the spread
of the per-run ratio says what the feature does at the machine's load. A diagnosis, not the goal:
the goal's figure is bench_accumulate_torch.py's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from qconform.generators.accumulated import FAMILIES

LIGHT = ("rng_abi", "categorical_sampling", "allocation_dense")


def load() -> str:
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def spread(values: list[float], form: str = ",.0f") -> str:
    return f"{statistics.median(values):{form}} ({min(values):{form}}-{max(values):{form}})"


def measure(family: str, cases: int, batch: int, repeat: int) -> None:
    from qconform.adapters.torch_adapter import TorchAdapter
    from qconform.generators.corpus import default_vectors_dir
    from qconform.harness.judging.judge import family_module, judge
    from qconform.harness.run.accumulate import accumulate, case_vector, load_expected
    from qconform.harness.transport.client import open_adapter

    expected = load_expected(default_vectors_dir())
    fam = FAMILIES[family]
    family_module(family)
    adapter = TorchAdapter("cpu")
    blocks = [fam.block(fam.arrays(lo, min(lo + batch, cases))) for lo in range(0, cases, batch)]
    adapter.run_block(family, blocks[0])  # warm
    with open_adapter("torch", timeout_s=600) as piped, open_adapter("torch", timeout_s=600, pipeline=False) as alone:
        assert piped.depth > 1 and alone.depth == 1, "the torch host should take the offer"

        def run(client) -> tuple[float, str]:
            def judge_case(case: int, case_input: dict, outcome: object) -> tuple[str, str]:
                line = f"qconform accumulate --adapter torch --family {family}"
                verdict = judge(case_vector(family, case, line, case_input), outcome, client.config)
                return str(verdict.cls), verdict.line()

            result = accumulate(
                lambda name, inputs: client.run_batch(name, inputs, schema_check=False),
                family,
                cases,
                expected,
                batch,
                judge=judge_case,
                run_block=None if client is piped else client.run_block,
                send_block=(lambda name, block: client.send_block(name, block).result) if client is piped else None,
            )
            return result.seconds, result.hash

        def torch_own() -> float:
            began = time.perf_counter()
            for block in blocks:
                adapter.run_block(family, block)
            return time.perf_counter() - began

        rows = {"two in flight": lambda: run(piped), "one at a time": lambda: run(alone), "torch": torch_own}
        for name in ("two in flight", "one at a time"):
            rows[name]()  # warm: each child's first-use costs
        seconds: dict[str, list[float]] = {name: [] for name in rows}
        hashes: set[str] = set()
        before = load()
        for round_ in range(repeat):
            names = list(rows)
            for name in names[round_ % 3 :] + names[: round_ % 3]:
                outcome = rows[name]()
                if isinstance(outcome, tuple):
                    outcome, digest = outcome
                    hashes.add(digest)
                seconds[name].append(outcome)
        assert len(hashes) == 1, f"the two rows must hash alike, got {sorted(hashes)}"
    for name, values in seconds.items():
        print(f"{family:22} {name:16} {spread([cases / s for s in values])} cases/s")
    paired = {
        "one at a time / two in flight": [a / p for a, p in zip(seconds["one at a time"], seconds["two in flight"])],
        "two in flight / torch": [p / t for p, t in zip(seconds["two in flight"], seconds["torch"])],
        "one at a time / torch": [a / t for a, t in zip(seconds["one at a time"], seconds["torch"])],
    }
    for name, values in paired.items():
        print(f"{family:22} {name:30} {spread(values, '.2f')}x (time per case, run by run)")
    print(f"{family:22} {repeat} rounds, {cases} cases in blocks of {batch}; load {before} before, {load()} after")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--family", action="append", choices=sorted(FAMILIES))
    parser.add_argument("--cases", type=int, default=1 << 16)
    parser.add_argument("--batch", type=int, default=16384, help="cases per block (the command's default)")
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    import torch  # pyright: ignore[reportMissingImports]  # the torch extra

    print(f"torch {torch.__version__}, {torch.get_num_threads()} intra-op thread(s); load {load()}")
    for family in args.family or LIGHT:
        measure(family, args.cases, args.batch, args.repeat)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
