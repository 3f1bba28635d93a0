"""The torch candidate through `qconform accumulate` against torch's own time on the same block inputs.

    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_accumulate_torch.py                     # verification_round
    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_accumulate_torch.py --family rng_abi --cases 262144

A run is the family's :data:`RUN_CASES` unless ``--cases`` says otherwise: as many cases as take
torch about 0.6 to 0.8 s on this machine's cores, so that a run measures the rate the goal is about.
A run of four blocks of a light family (2^16 cases, 40 ms of torch) measures the pipeline's fill and
drain instead: the first block's inputs made and sent before torch has anything to do, the last
block's judging and hashing after it is done, each a fixed cost a 10^8-case run pays once.

Two rows per family, alternating, ``--repeat`` times each (issue #24's goal: the first at most 1.2x
the second):

* ``qconform accumulate --adapter torch``: the command itself, in a subprocess, ``--count`` cases by
  block (the default); its own printed rate (``N cases in S s``: from the first block to the verdict,
  adapter start-up excluded), so the harness's inputs, the pipe both ways, the torch child's work,
  the judging and the hashes are all in it. Its verdict must be ``PASS`` (or ``PRECISION`` for
  ``allocation_dense``, the candidate's declared FP64 ties);
* ``torch in process``: the torch adapter's ``run_block`` (the same code the child runs on each
  block) over the same blocks, made before the clock starts, in this process: torch's own time.

Both are wall clock (the command's rate is wall clock), medians with min and max. Give both sides
one intra-op thread (``OMP_NUM_THREADS=1``, which the subprocess inherits): on a shared machine
the default of one thread per core makes torch's own time swing with the load (bench/README.md).
``--device cuda`` runs both rows on the device; bench/gpu_check.py ``--accumulate-ratio`` reports
the same ratio (its :func:`measure`) on a lent GPU.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from qconform.generators.accumulated import FAMILIES

ROOT = Path(__file__).resolve().parents[1]
#: cases per run, by family: torch's own time about 0.6 to 0.8 s a run (this machine, one thread),
#: verification_round at about 9 us a case, the light families at 0.6 to 1 us
RUN_CASES = {"verification_round": 1 << 16}
#: cases per run on CUDA where they differ: the command's torch child pays its first use of the device
#: (kernels loaded on their first launch) inside its first block, 0.2 to 0.35 s on a lent H200, which
#: the in-process row paid before its clock. At 2^16 verification_round cases (1.3 s of torch there)
#: that fixed cost alone read 1.21x and 1.24x; at 2^18 the same command read 1.03x (bench/RESULTS.md,
#: "Issue #24 on a lent H200, second session"). A 10^8-case stream pays it once.
CUDA_RUN_CASES = {"verification_round": 1 << 18}
#: the light families' run
LIGHT_RUN_CASES = 1 << 20
#: issue #24's goal: the command's time per case at most this multiple of torch's own
GOAL = 1.2
#: the rate the command prints, from its exact seconds (the seconds it prints have one decimal)
RATE = re.compile(r"\(([0-9,]+) cases/s")


def run_cases(family: str, device: str = "cpu") -> int:
    """A run's cases for ``family`` on ``device`` when no count is asked for: :data:`CUDA_RUN_CASES` on
    a CUDA device, else :data:`RUN_CASES`, else the light run."""
    if device.startswith("cuda") and family in CUDA_RUN_CASES:
        return CUDA_RUN_CASES[family]
    return RUN_CASES.get(family, LIGHT_RUN_CASES)


def command_rate(
    family: str, count: int, batch: int, device: str = "cpu", tree: Path | None = None
) -> tuple[float, str]:
    """Cases per second of ``qconform accumulate --adapter torch`` as it prints it, and its verdict
    line; with ``tree``, the command of that source tree (its ``qconform`` first on the path)."""
    command = [sys.executable, "-m", "qconform", "accumulate", "--adapter", "torch", "--family", family]
    command += ["--count", str(count), "--batch", str(batch), "--device", device]
    env = None if tree is None else {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(command, cwd=tree or ROOT, env=env, capture_output=True, text=True, check=False)
    match = RATE.search(done.stdout)
    verdict = next((line for line in done.stdout.splitlines() if line.split(":")[0] in ("PASS", "PRECISION")), "")
    if match is None or not verdict:
        raise SystemExit(f"qconform accumulate failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr}")
    return float(match.group(1).replace(",", "")), verdict.split(":")[0]


def load() -> str:
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


@dataclass
class Ratio:
    """One family's two rows: cases per second of the command and of torch in process, one value per
    repeat, the command's verdicts, and the load average before and after."""

    family: str
    device: str
    command: list[float] = field(default_factory=list)
    torch: list[float] = field(default_factory=list)
    #: the command of another tree (``--tree``), when asked for
    other: list[float] = field(default_factory=list)
    verdicts: set[str] = field(default_factory=set)
    load: tuple[str, str] = ("", "")
    #: cases of each run
    cases: int = 0

    @property
    def value(self) -> float:
        """The command's time per case over torch's own (median rates)."""
        return statistics.median(self.torch) / statistics.median(self.command)


def measure(family: str, cases: int, batch: int, repeat: int, device: str = "cpu", tree: Path | None = None) -> Ratio:
    """The two rows of ``family``, alternating, ``repeat`` times each; torch's own time is the torch
    adapter's ``run_block`` on ``device`` (its records come back to the host, so a CUDA block has
    finished when it returns) over the same blocks, made before the clock starts. With ``tree``, a
    third row in the same rotation: the command of that tree (e.g. the commit before a change)."""
    from qconform.adapters.torch_adapter import TorchAdapter

    adapter = TorchAdapter(device)
    fam = FAMILIES[family]
    blocks = [fam.block(fam.arrays(lo, min(lo + batch, cases))) for lo in range(0, cases, batch)]
    adapter.run_block(family, blocks[0])  # warm
    ratio = Ratio(family, device, load=(load(), ""), cases=cases)
    for _ in range(repeat):
        rate, verdict = command_rate(family, cases, batch, device)
        ratio.command.append(rate)
        ratio.verdicts.add(verdict)
        began = time.perf_counter()
        for block in blocks:
            adapter.run_block(family, block)
        ratio.torch.append(cases / (time.perf_counter() - began))
        if tree is not None:
            rate, verdict = command_rate(family, cases, batch, device, tree)
            ratio.other.append(rate)
            ratio.verdicts.add(verdict)
    ratio.load = (ratio.load[0], load())
    return ratio


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--family", action="append", choices=sorted(FAMILIES))
    parser.add_argument(
        "--cases", type=int, default=None, help="cases per run (default: the family's RUN_CASES, else 2^20)"
    )
    parser.add_argument("--batch", type=int, default=16384, help="cases per block (the command's default)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--device", default="cpu", help="the torch candidate's device, both rows (bench/gpu_check.py: cuda)"
    )
    parser.add_argument(
        "--tree",
        type=Path,
        help="also time the command of this source tree in the same rotation (e.g. `git archive` of the "
        "commit before a change, with its built extensions): a before/after row measured side by side",
    )
    args = parser.parse_args()
    import torch

    print(f"torch {torch.__version__}, {torch.get_num_threads()} intra-op thread(s); load {load()}")
    print(f"{'family':22} {'row':44} {'cases/s median (min-max)':>32}")
    for family in args.family or ["verification_round"]:
        cases = args.cases or run_cases(family, args.device)
        ratio = measure(family, cases, args.batch, args.repeat, args.device, args.tree)
        rows = [("qconform accumulate --adapter torch", ratio.command), ("torch in process (run_block)", ratio.torch)]
        if ratio.other:
            rows.append((f"the command of {args.tree}"[:44], ratio.other))
        for row, values in rows:
            print(f"{family:22} {row:44} {spread(values):>32}")
        if ratio.other:
            other = statistics.median(ratio.torch) / statistics.median(ratio.other)
            print(f"{family:22} that tree's command time / torch's own time: {other:.2f}x")
        print(
            f"{family:22} command time / torch's own time: {ratio.value:.2f}x (goal {GOAL}x: "
            f"{'met' if ratio.value <= GOAL else 'NOT met'}); verdicts {sorted(ratio.verdicts)}; "
            f"load {ratio.load[0]} before, {ratio.load[1]} after"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
