"""The CUDA check of the torch and Triton candidates, prepared to run in one call.

Run from the repository root on a machine with a CUDA device::

    python bench/gpu_check.py                    # about 2-4 minutes; ends within 5
    python bench/gpu_check.py --out-dir "$OUT"   # the table in another folder
    python bench/gpu_check.py --smoke            # no GPU: the script itself, on CPU (V = 4096, one family)

(``bench/device_run.sh`` is the whole call for a lent device machine: it installs
the package there and runs this script; bench/README.md.)

It does, in one run:

1. conformance: ``qconform run --adapter torch --device cuda`` and
   ``qconform run --adapter triton --device cuda`` over the whole corpus, side by
   side in child processes, each with a time limit (the Triton kernels are compiled
   natively); with two or more GPUs also ``torch-tp2`` on NCCL (NCCL takes one GPU
   per rank, so on one GPU that run is listed as skipped, not failed); and every engine
   whose environment exists on the machine (``vllm:triton``, ``transformers``;
   adapters/engine_env.py), its JSON report kept in ``<table>-engines/`` for the engine
   matrix (docs/engines/README.md), the others listed as skipped with the place looked; the
   bundled candidates' JSON reports kept in ``<table>-reports/`` (every message whole: the table
   shows the first 120 characters of three);
2. the device-to-device copy bandwidth (``torch`` copy of a 1 GiB buffer: bytes
   read plus bytes written over the median time);
3. every stage of a round at batch 4 x depth 5 x V = 129280, Triton and torch, timed
   with CUDA events around the host call (median of repeats after a warm-up, launch
   and host-sync overhead included: it is the exposed cost), each against its
   memory-traffic floor: the bytes an ideal kernel must move (inputs read once,
   outputs written once, FP32 weights and u32 counts as on the wire) over the
   measured bandwidth; the two implementations' outputs of each stage are compared
   (the ``agree`` column), so a fast stage that computes something else shows;
4. with ``--accumulated N`` (N = 100000000 is the committed hash's count), the
   accumulated runs (docs/accumulated.md): ``qconform accumulate`` of the torch and
   Triton candidates on the device over every accumulated family, under ``torchrun``
   with one rank per CPU core (the answers' Python side is the bottleneck, not the
   device), each with its own time limit (``--accumulated-limit``); a run cut at its
   limit is listed with the rate it reached;
5. with ``--accumulate-ratio``, issue #24's ratio on the device: for every accumulated family,
   ``qconform accumulate --adapter torch --device cuda`` (one rank, its own printed rate) against
   torch's own time on the same block inputs (the torch adapter's ``run_block`` on the device, in
   this process), alternating, ``--ratio-repeat`` times each, each run the family's cases in
   bench/bench_accumulate_torch.py (2^16 for ``verification_round``, 2^20 for a light family) unless
   ``--ratio-cases`` says otherwise: that script's measurement, whose CPU figures are in
   bench/RESULTS.md (goal 1.2x); on a machine without a CUDA device it is skipped with a line that
   says so;
6. a markdown table in ``bench/results/gpu-<date>-<device>.md`` (``--out`` or
   ``--out-dir`` to choose), rewritten after every part so that a run cut short
   still leaves what it measured.

``--smoke`` rehearses every part on a CPU, Triton in its interpreter: the
conformance runs over ``categorical_sampling`` only, the stages at V = 4096, the
accumulated runs (when asked) over ``categorical_sampling`` with two ranks, the
accumulate ratio (when asked) over ``categorical_sampling`` at 4096 cases, once.

A part that raises is written into the table as an error and the run goes on.
Exit status: 0 when every conformance run is OK and nothing raised (and on a
machine without a CUDA device, where it says so), 1 otherwise, 2 when torch or
Triton is not installed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

BATCH, DEPTH, VOCAB, TOP_K, RANK = 4, 5, 129280, 32, 8
GIB = 1 << 30
#: seconds a conformance run may take (the Triton run compiles every kernel first)
RUN_LIMIT_S = {"torch": 100, "triton": 170, "torch-tp2": 120, "vllm:triton": 170, "transformers": 120}
#: the engines run on CUDA where their environments exist (docs/engines/README.md, "On a GPU"):
#: adapter -> (the engine module that finds its environment, the run's label in the table)
ENGINE_ADAPTERS = {
    "vllm:triton": ("vllm", "vLLM Triton kernels"),
    "transformers": ("transformers", "transformers _speculative_sampling"),
}
#: the conformance runs of ``--smoke`` (on CPU; the Triton one in the interpreter)
SMOKE_FAMILIES = ("categorical_sampling",)
#: the whole script's budget: stages that would start after it are skipped
BUDGET_S = 285
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Stage:
    """One timed operation: what it does, its floor in bytes, the two implementations,
    and how to compare their outputs (a short verdict such as ``yes`` or ``2/4 rows differ``)."""

    name: str
    floor_bytes: int
    triton: Callable[[], object]
    torch: Callable[[], object]
    agree: Callable[[Any, Any], str]  # the two outputs, whatever each implementation returns


@dataclass
class Timing:
    stage: Stage
    triton_us: float | None = None
    torch_us: float | None = None
    agree: str = "-"
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Accumulated:
    """One ``qconform accumulate`` run: its verdict line (PASS, PRECISION, FAIL...), wall time, rate."""

    adapter: str
    family: str
    count: int
    verdict: str
    wall_s: float
    note: str


#: the accumulated families, and the ones ``--smoke`` rehearses
ACCUMULATED_FAMILIES = ("rng_abi", "categorical_sampling", "allocation_dense", "verification_round")
SMOKE_ACCUMULATED = ("categorical_sampling",)
#: cases of the accumulate ratio's run, and the blocks it sends, in ``--smoke``
SMOKE_RATIO_CASES, SMOKE_RATIO_BATCH = 4096, 1024
#: the accumulate ratio's goal (issue #24)
RATIO_GOAL = 1.2


@dataclass(frozen=True)
class Conformance:
    adapter: str
    ok: bool
    counts: dict
    wall_s: float
    note: str


# ------------------------------------------------------------------ measurements


def elapsed_us(run: Callable[[], object], device: str, repeat: int) -> tuple[float, object]:
    """(median microseconds of ``run()`` after one warm-up call, which compiles; the warm-up's result)."""
    import torch

    result = run()
    samples = []
    for _ in range(repeat):
        if device == "cuda":
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            run()
            stop.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(stop) * 1e3)
        else:
            began = time.perf_counter()
            run()
            samples.append((time.perf_counter() - began) * 1e6)
    return statistics.median(samples), result


def copy_bandwidth(device: str, size: int, repeat: int) -> float:
    """Device-to-device copy bandwidth in bytes per second (read + write)."""
    import torch

    src = torch.empty(size, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return 2 * size / (elapsed_us(lambda: dst.copy_(src), device, repeat)[0] * 1e-6)


def start_conformance(
    adapter: str, device: str, report: Path, families: tuple[str, ...]
) -> tuple[subprocess.Popen, float]:
    """Start ``qconform run`` of one adapter over the whole corpus (or ``families``) in a child process."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    expectations = ROOT / "expectations" / f"{adapter.split(':')[0]}.toml"
    command = [
        sys.executable,
        "-m",
        "qconform",
        "run",
        "--adapter",
        adapter,
        "--device",
        device,
        "--json",
        str(report),
        "--timeout",
        str(RUN_LIMIT_S[adapter]),
    ]
    command += [arg for family in families for arg in ("--family", family)]
    if expectations.is_file():
        command += ["--expectations", str(expectations)]
    # run outside the checkout: its ``qconform/`` folder would shadow an installed (non-editable) package
    child = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=report.parent
    )
    return child, time.perf_counter()


def finish_conformance(adapter: str, child: subprocess.Popen, began: float, report: Path) -> Conformance:
    """Wait for a run started by :func:`start_conformance` (killing it at its limit) and read its report."""
    left = max(1.0, RUN_LIMIT_S[adapter] - (time.perf_counter() - began))
    try:
        output, _ = child.communicate(timeout=left)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        return Conformance(adapter, False, {}, time.perf_counter() - began, f"over {RUN_LIMIT_S[adapter]} s, killed")
    wall = time.perf_counter() - began
    if not report.is_file():
        return Conformance(adapter, False, {}, wall, f"exit {child.returncode}: {output[-300:].strip()}")
    data = json.loads(report.read_text())
    # one line a case in the table (a message may quote the adapter's stderr; the kept report has it whole)
    bad = [f"{c['id']}: {c['class']} {' '.join(c['message'].split())[:120]}" for c in data["cases"] if c["unexpected"]]
    return Conformance(adapter, bool(data["ok"]), data["counts"], wall, "; ".join(bad[:3]))


def engine_missing(engine: str) -> str | None:
    """Why an engine cannot run here (None when its environment exists): no engine
    environment is among the wheels carried to a device (docs/engines/README.md, "On a GPU")."""
    import importlib

    from qconform.adapters.engine_env import EngineSetupError

    try:
        importlib.import_module(f"qconform.adapters.{engine}").ENVIRONMENT.python()
    except EngineSetupError as exc:
        return str(exc)
    return None


def conformance_runs(
    device: str,
    gpus: int,
    families: tuple[str, ...] = (),
    engine_reports: Path | None = None,
    run_reports: Path | None = None,
) -> tuple[list[Conformance], list[str]]:
    """The conformance runs (every family, or ``families``), side by side; and the runs skipped, with why.
    The engines' JSON reports are kept in ``engine_reports``, the engine matrix's input
    (``python -m qconform.adapters.engine_matrix``; docs/engines/README.md), the bundled candidates'
    in ``run_reports`` (``run-<adapter>-<device>.json``: every case's message whole, with the
    adapter's stderr where an error quotes it, e.g. a kernel compiler's diagnostic)."""
    adapters = ["torch", "triton"] + (["torch-tp2"] if gpus >= 2 else [])
    skipped = (
        []
        if gpus >= 2
        else [f"torch-tp2 on NCCL: {gpus} GPU{'' if gpus == 1 else 's'} visible, and NCCL takes one GPU per rank"]
    )
    for adapter, (engine, label) in ENGINE_ADAPTERS.items():
        on_cpu = f"on cuda only (on a CPU: bash adapters/{engine}/ci.sh)"
        missing = engine_missing(engine) if device.startswith("cuda") else on_cpu
        if missing is None:
            adapters.append(adapter)
        else:
            skipped.append(f"{label}: {missing}")
    with tempfile.TemporaryDirectory() as tmp:
        reports = {a: Path(tmp) / f"{a}.json" for a in adapters}
        started = {a: start_conformance(a, device, reports[a], families) for a in adapters}
        runs = [finish_conformance(a, *started[a], reports[a]) for a in adapters]
        for adapter in adapters:
            kept = engine_reports if adapter in ENGINE_ADAPTERS else run_reports
            if kept is not None and reports[adapter].is_file():
                kept.mkdir(parents=True, exist_ok=True)
                shutil.copy(reports[adapter], kept / f"run-{adapter.replace(':', '-')}-{device}.json")
        return runs, skipped


def accumulated_run(
    adapter: str, family: str, count: int, device: str, ranks: int, limit_s: float, workdir: Path
) -> Accumulated:
    """``qconform accumulate`` under torchrun (one rank per CPU core), killed at ``limit_s``."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if adapter == "triton" and device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    env["OMP_NUM_THREADS"] = "1"
    launch = (
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}", "-m"]
        if ranks > 1
        else [sys.executable, "-m"]
    )
    command = launch + [
        "qconform",
        "accumulate",
        "--adapter",
        adapter,
        "--family",
        family,
        "--count",
        str(count),
        "--device",
        device,
    ]
    began = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=limit_s, env=env, cwd=workdir)
    except subprocess.TimeoutExpired:
        return Accumulated(adapter, family, count, "cut", time.perf_counter() - began, f"over {limit_s:.0f} s, killed")
    wall = time.perf_counter() - began
    verdicts = re.findall(r"^(PASS|PRECISION|FAIL)\b.*$", done.stdout, re.M)
    rate = re.search(r"\(([0-9,]+) cases/s", done.stdout)
    note = f"{rate.group(1)} cases/s" if rate else (done.stdout + done.stderr)[-300:].strip()
    return Accumulated(adapter, family, count, verdicts[0] if verdicts else f"exit {done.returncode}", wall, note)


def accumulated_runs(
    device: str,
    count: int,
    families: tuple[str, ...],
    ranks: int,
    limit_s: float,
    report: Callable[[Accumulated], None],
) -> list[Accumulated]:
    """The torch and Triton candidates over ``families``, one run at a time (each uses every core)."""
    runs: list[Accumulated] = []
    with tempfile.TemporaryDirectory() as tmp:
        for adapter in ("torch", "triton"):
            for family in families:
                runs.append(accumulated_run(adapter, family, count, device, ranks, limit_s, Path(tmp)))
                report(runs[-1])
    return runs


def bench_module(name: str):
    """A sibling script of this folder, as a module (bench/ is not a package)."""
    import importlib.util

    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parent / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def accumulate_ratios(
    device: str,
    families: tuple[str, ...],
    cases: int | None,
    batch: int,
    repeat: int,
    report: Callable[[object], None],
) -> None:
    """Part 5: bench_accumulate_torch's :func:`measure` of each family on ``device``, ``cases`` cases a
    run (None: the family's own on ``device``, that script's ``run_cases``), reported one by one; a family whose
    command fails is reported as its error, and the others still run. Both rows run with one intra-op
    thread, as that script's CPU figures do (``OMP_NUM_THREADS=1``, which the command inherits, and
    ``torch.set_num_threads(1)`` here): at the default of one per core, the command's torch child
    and this process's torch spin threads against the harness (bench/README.md); both are restored
    after."""
    import torch

    bench = bench_module("bench_accumulate_torch")
    threads, omp = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
    torch.set_num_threads(1)
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        for family in families:
            try:
                report(bench.measure(family, cases or bench.run_cases(family, device), batch, repeat, device))
            except (Exception, SystemExit) as exc:  # noqa: BLE001 - the command's failure, kept in the table
                report((family, failure(exc) if isinstance(exc, Exception) else str(exc)[-300:]))
    finally:
        torch.set_num_threads(threads)
        if omp is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = omp


def ratio_markdown(ratios: list) -> list[str]:
    """The accumulate ratio's table: a row per family, or its error."""
    if not ratios:
        return []
    lines = [
        "",
        "## Accumulate ratio (issue #24, one rank)",
        "",
        "`qconform accumulate --adapter torch` (its own rate) against the torch adapter's `run_block` "
        "on the same blocks, on the device, alternating, one intra-op thread each; medians (min-max). "
        f"Goal {RATIO_GOAL}x.",
        "",
        "| family | cases a run | command cases/s | torch in process cases/s | ratio | verdicts | load |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    spread = bench_module("bench_accumulate_torch").spread
    for r in ratios:
        if isinstance(r, tuple):
            lines.append(f"| {r[0]} | - | error | - | - | {r[1].replace('|', '/')} | - |")
            continue
        lines.append(
            f"| {r.family} | {r.cases:,} | {spread(r.command)} | {spread(r.torch)} | **{r.value:.2f}x** | "
            f"{', '.join(sorted(r.verdicts))} | {r.load[0]} / {r.load[1]} |"
        )
    return lines


# ------------------------------------------------------------------ comparing the two outputs


def rows_differ(a, b) -> str:
    """``yes`` when two tensors are equal, else how many of their rows (first axis) differ."""
    a, b = a.cpu(), b.cpu()
    if a.shape != b.shape:
        return f"shapes {tuple(a.shape)} / {tuple(b.shape)}"
    if a.dtype.is_floating_point or b.dtype.is_floating_point:
        a, b = a.double(), b.double()
    differ = (a != b).reshape(a.shape[0], -1).any(dim=1) if a.dim() else (a != b).reshape(1)
    count = int(differ.sum())
    return "yes" if count == 0 else f"{count}/{differ.numel()} rows differ"


def relative_gap(a, b) -> str:
    """The largest relative difference of two float tensors (``0`` when equal)."""
    import torch

    a, b = a.cpu().double(), b.cpu().double()
    gap = float(((a - b).abs() / torch.clamp(b.abs(), min=1e-300)).max())
    return "yes" if gap == 0 else f"rel. gap {gap:.1e}"


def sparse_rows(ids, counts, vocab: int):
    """Dense ``[R, V]`` counts of sparse rows (for comparing two top-k allocations)."""
    import torch

    dense = torch.zeros((ids.shape[0], vocab), dtype=torch.int64)
    return dense.scatter_add_(1, ids.cpu().long(), counts.cpu().long())


# ------------------------------------------------------------------ the stages of a round


def stages(device: str, vocab: int) -> list[Stage]:
    """The operations of one round at batch 4 x depth 5 x ``vocab``, on ``device``."""
    import torch

    from qconform.adapters import torch_candidate as tc
    from qconform.adapters import triton_candidate as xc

    gen = torch.Generator().manual_seed(7)
    logits = (torch.randn(BATCH, DEPTH, vocab, generator=gen) * 3).to(device)
    left = (torch.randn(vocab, RANK, generator=gen) * 0.3).to(device)
    right = (torch.randn(RANK, vocab, generator=gen) * 0.3).to(device)
    prev = torch.tensor([1, 2, 3, 4], device=device)
    temps = torch.full((BATCH,), 0.8, device=device)
    weights, _ = xc.logits_to_weights(logits[:, 0].contiguous(), temps, (left, right), prev)
    flags = torch.zeros(BATCH, dtype=torch.int32, device=device)
    counts = xc.allocate_rows(weights, flags)
    u24 = (torch.arange(BATCH, device=device) * 4_000_000 + 12345)[:, None]
    q_dense = xc.QRows.of_segments(vocab, counts, None, BATCH, vocab)
    seeds, gens, rounds, anchors = [11, 12, 13, 14], [1, 1, 1, 1], [2, 2, 2, 2], [100, 200, 300, 400]
    p32 = torch.rand(BATCH, DEPTH + 1, vocab, generator=gen).to(device) ** 4
    p64 = p32.double()
    idents = [xc.Identity(s, g, r, a) for s, g, r, a in zip(seeds, gens, rounds, anchors)]
    drafts = torch.stack([torch.argmax(counts, dim=1)] * DEPTH, dim=1)
    q_rows = xc.QRows.of_segments(vocab, counts.repeat_interleave(DEPTH, dim=0), None, BATCH * DEPTH, vocab)
    q_torch = counts[:, None, :].expand(BATCH, DEPTH, vocab).contiguous()
    no_stops, no_budget = [[] for _ in range(BATCH)], [None] * BATCH
    row_in, row_out = 4 * BATCH * vocab, 4 * BATCH * vocab  # FP32 rows in, u32 counts out
    markov_in = 4 * RANK * vocab
    chain = DEPTH * (row_in + markov_in + row_out + row_in)

    def torch_weights():
        return tc.logits_to_weights(logits[:, 0], 0.8, tc.markov_bias(left, right, prev))

    def triton_top_k():
        ids, support = xc.top_k_support(weights, TOP_K)
        return ids, xc.allocate_rows(support, flags)

    def top_k_agree(x, t):
        ids, counts = x
        return rows_differ(sparse_rows(ids, counts, vocab), sparse_rows(t.ids, t.counts, vocab))

    def chain_agree(x, t):
        tokens, draws = rows_differ(x.tokens, t.tokens), rows_differ(x.u24, t.u24)
        return tokens if draws == "yes" else f"draws: {draws}"

    def emitted(outcomes):
        return [o.emitted for o in outcomes]

    return [
        Stage(
            "logits -> FP32 weights (Markov rank 8)",
            row_in + markov_in + row_out,
            lambda: xc.logits_to_weights(logits[:, 0].contiguous(), temps, (left, right), prev),
            torch_weights,
            lambda x, t: rows_differ(x[0], t),
        ),
        Stage(
            "dense dyadic24 counts (FP64 largest remainder)",
            row_in + row_out,
            lambda: xc.allocate_rows(weights, flags),
            lambda: tc.allocate_dense(weights),
            rows_differ,
        ),
        Stage(
            f"top-{TOP_K} support and its counts",
            row_in + 8 * BATCH * TOP_K,
            triton_top_k,
            lambda: tc.allocate_top_k(weights, TOP_K),
            top_k_agree,
        ),
        Stage(
            "proposal draw over dense counts",
            row_in,
            lambda: xc.sample_rows(q_dense, u24),
            lambda: tc.sample_counts(counts, u24[:, 0]),
            lambda x, t: rows_differ(x.reshape(-1), t.reshape(-1)),
        ),
        Stage(
            f"proposal chain, K = {DEPTH}, dense",
            chain,
            lambda: xc.propose(seeds, gens, rounds, anchors, [1, 2, 3, 4], logits, 0.8, (left, right), None),
            lambda: tc.propose(seeds, gens, rounds, anchors, [1, 2, 3, 4], logits, 0.8, (left, right), None),
            chain_agree,
        ),
        Stage(
            "target row masses (B x (K+1) rows)",
            4 * BATCH * (DEPTH + 1) * vocab,
            lambda: xc.verification.target_masses(p64),
            lambda: p32.double().sum(dim=-1),
            lambda x, t: relative_gap(x[0], t),
        ),
        Stage(
            f"verify round, K = {DEPTH} (masses, acceptance, residual)",
            4 * BATCH * (DEPTH + 1) * vocab + row_in,
            lambda: xc.verify_batch(idents, drafts, q_rows, p64, no_stops, no_budget),
            lambda: tc.verify_round(seeds, gens, rounds, anchors, drafts, q_torch, p32, None, None),
            lambda x, t: "yes" if emitted(x) == emitted(t.outcomes()) else "emitted tokens differ",
        ),
    ]


def failure(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"


def time_stage(stage: Stage, device: str, repeat: int) -> Timing:
    """Both implementations of a stage timed, and their outputs compared; an exception is recorded."""
    timing = Timing(stage)
    outputs = {}
    for which in ("triton", "torch"):
        try:
            micros, outputs[which] = elapsed_us(getattr(stage, which), device, repeat)
            setattr(timing, f"{which}_us", micros)
        except Exception as exc:  # noqa: BLE001 - one broken stage must not lose the others
            timing.errors.append(f"{which}: {failure(exc)}")
    if len(outputs) == 2:
        try:
            timing.agree = stage.agree(outputs["triton"], outputs["torch"])
        except Exception as exc:  # noqa: BLE001
            timing.errors.append(f"compare: {failure(exc)}")
    return timing


# ------------------------------------------------------------------ report


def environment(device: str) -> str:
    """torch, Triton, CUDA, driver and device, as one line."""
    import torch
    import triton

    parts = [f"torch {torch.__version__}", f"triton {triton.__version__}", f"Python {sys.version.split()[0]}"]
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        parts += [
            f"CUDA {torch.version.cuda}",
            f"{props.name} ({props.multi_processor_count} SMs, "
            f"{props.total_memory / GIB:.0f} GiB, sm_{props.major}{props.minor})",
            f"{torch.cuda.device_count()} GPU(s)",
        ]
        smi = shutil.which("nvidia-smi")
        if smi:
            try:
                driver = (
                    subprocess.run(
                        [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                        capture_output=True,
                        text=True,
                        timeout=20,
                    )
                    .stdout.split("\n")[0]
                    .strip()
                )
                parts.append(f"driver {driver}")
            except (OSError, subprocess.SubprocessError):
                pass
    return ", ".join(parts)


def device_label(device: str) -> str:
    import torch

    name = torch.cuda.get_device_name(0) if device == "cuda" else "cpu-smoke"
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-")


def cell(value: float | None, fmt: str) -> str:
    return "error" if value is None else format(value, fmt)


def accumulated_markdown(runs: list[Accumulated]) -> list[str]:
    if not runs:
        return []
    lines = [
        "",
        "## Accumulated runs (docs/accumulated.md)",
        "",
        "| adapter | family | N | verdict | wall s | rate or note |",
        "|---|---|---:|---|---:|---|",
    ]
    lines += [
        f"| {r.adapter} | {r.family} | {r.count:,} | {r.verdict} | {r.wall_s:.0f} | {r.note.replace('|', '/')} |"
        for r in runs
    ]
    return lines


def markdown(
    label: str,
    env: str,
    vocab: int,
    bandwidth: float | None,
    runs: list[Conformance],
    skipped: list[str],
    timings: list[Timing],
    notes: list[str],
    accumulated: list[Accumulated] | None = None,
    ratios: list | None = None,
) -> str:
    lines = [
        f"# GPU check, {datetime.date.today().isoformat()}, {label}",
        "",
        f"{env}; batch {BATCH} x depth {DEPTH} x V = {vocab}.",
        "Device-to-device copy bandwidth: "
        + ("**not measured**" if bandwidth is None else f"**{bandwidth / 1e9:.1f} GB/s** (read + write, median)")
        + ".",
        "",
        "## Conformance (" + ("whole corpus" if vocab == VOCAB else ", ".join(SMOKE_FAMILIES)) + ")",
        "",
        "| adapter | ok | verdicts | wall s | unexpected (first 3) |",
        "|---|---|---|---:|---|",
    ]
    for run in runs:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(run.counts.items()) if v)
        lines.append(
            f"| {run.adapter} | {'yes' if run.ok else '**NO**'} | {counts} | {run.wall_s:.1f} | "
            f"{run.note.replace('|', '/') or '-'} |"
        )
    lines += [f"| {why.split(':')[0]} | skipped | - | - | {why.split(':', 1)[1].strip()} |" for why in skipped]
    if not runs and not skipped:
        lines.append("| - | not run | - | - | - |")
    lines += [
        "",
        "## Stages against their memory-traffic floor",
        "",
        "Floor = essential bytes (inputs read once, outputs written once) / copy bandwidth. "
        "Times are medians of the host call (launches and host syncs included). "
        "`agree`: the Triton and torch outputs of the stage, compared.",
        "",
        "| stage | floor bytes | floor µs | Triton µs | Triton / floor | torch µs | torch / floor | agree |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for t in timings:
        floor_us = t.stage.floor_bytes / bandwidth * 1e6 if bandwidth else None

        def ratio(us: float | None, floor_us: float | None = floor_us) -> str:
            return "-" if us is None or floor_us is None else f"{us / floor_us:.0f}x"

        lines.append(
            f"| {t.stage.name} | {t.stage.floor_bytes:,} | {cell(floor_us, '.2f')} | "
            f"{cell(t.triton_us, '.1f')} | {ratio(t.triton_us)} | {cell(t.torch_us, '.1f')} | "
            f"{ratio(t.torch_us)} | {t.agree} |"
        )
    lines += accumulated_markdown(accumulated or [])
    lines += ratio_markdown(ratios or [])
    errors = [f"- {t.stage.name}: {e}" for t in timings for e in t.errors]
    if errors or notes:
        lines += ["", "## Errors and notes", ""] + errors + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def out_path(args: argparse.Namespace, label: str) -> Path:
    if args.out:
        return Path(args.out)
    name = f"gpu-{datetime.date.today()}-{label}.md"
    return Path(args.out_dir) / name if args.out_dir else ROOT / "bench" / "results" / name


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="run the timing part on CPU at V = 4096 (no GPU)")
    parser.add_argument("--repeat", type=int, default=20, help="timed repeats per stage (default 20; 2 in --smoke)")
    parser.add_argument("--no-conformance", action="store_true", help="skip part 1 (the corpus runs)")
    parser.add_argument(
        "--accumulated",
        type=int,
        default=0,
        metavar="N",
        help="also run part 4, the accumulated runs of N cases (100000000: the committed count)",
    )
    parser.add_argument(
        "--accumulated-limit",
        type=float,
        default=3600.0,
        metavar="S",
        help="seconds one accumulated run may take (default 3600)",
    )
    parser.add_argument(
        "--ranks",
        type=int,
        default=os.cpu_count() or 1,
        help="torchrun ranks of an accumulated run (default: one per CPU core; 2 in --smoke)",
    )
    parser.add_argument(
        "--accumulate-ratio",
        action="store_true",
        help="also run part 5: qconform accumulate --adapter torch against torch's own time, every family",
    )
    parser.add_argument(
        "--ratio-cases",
        type=int,
        default=None,
        help="cases of each ratio run (default: the family's, as bench_accumulate_torch.py runs it)",
    )
    parser.add_argument("--ratio-repeat", type=int, default=5, help="runs of each ratio row (default 5; 1 in --smoke)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--out", help="markdown file (default bench/results/gpu-<date>-<device>.md)")
    where.add_argument("--out-dir", help="folder for gpu-<date>-<device>.md")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, not {args.repeat}")
    if args.accumulated < 0 or args.ranks < 1:
        parser.error("--accumulated must be at least 0 and --ranks at least 1")
    if (args.ratio_cases is not None and args.ratio_cases < 1) or args.ratio_repeat < 1:
        parser.error("--ratio-cases and --ratio-repeat must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    began = time.perf_counter()
    # Triton reads TRITON_INTERPRET when it is imported: decide the device with torch first
    try:
        import torch
    except ImportError:
        print(
            "gpu_check: torch is not installed; install the candidates first: pip install -e '.[torch,triton]'",
            file=sys.stderr,
        )
        return 2
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"
        device, vocab, repeat = "cpu", 4096, min(args.repeat, 2)
    elif not torch.cuda.is_available():
        print("gpu_check: no CUDA device on this machine; nothing to check (use --smoke to test the script on CPU).")
        if args.accumulate_ratio:
            print(
                "gpu_check: accumulate ratio on CUDA: skipped, no CUDA device "
                "(bench/bench_accumulate_torch.py measures it on the CPU)."
            )
        return 0
    else:
        os.environ.pop("TRITON_INTERPRET", None)
        device, vocab, repeat = "cuda", VOCAB, args.repeat
    try:
        import triton  # noqa: F401 - the Triton candidate must be importable
    except ImportError:
        print(
            "gpu_check: triton is not installed; install the candidates first: pip install -e '.[torch,triton]'",
            file=sys.stderr,
        )
        return 2
    label, env = device_label(device), environment(device)
    out = out_path(args, label)
    out.parent.mkdir(parents=True, exist_ok=True)
    runs: list[Conformance] = []
    skipped: list[str] = []
    timings: list[Timing] = []
    notes: list[str] = []
    bandwidth: float | None = None
    accumulated: list[Accumulated] = []
    ratios: list = []
    ratio_cases = SMOKE_RATIO_CASES if args.smoke else args.ratio_cases

    def write() -> None:
        out.write_text(
            markdown(label, env, vocab, bandwidth, runs, skipped, timings, notes, accumulated, ratios),
            encoding="utf-8",
        )

    print(env, flush=True)
    if not args.no_conformance:
        write()
        gpus = torch.cuda.device_count() if device == "cuda" else 0
        runs, skipped = conformance_runs(
            device,
            gpus,
            () if device == "cuda" else SMOKE_FAMILIES,
            out.parent / f"{out.stem}-engines",
            out.parent / f"{out.stem}-reports",
        )
        for run in runs:
            print(f"conformance {run.adapter}: ok={run.ok} {run.counts} {run.wall_s:.1f} s {run.note}", flush=True)
        write()
    try:
        bandwidth = copy_bandwidth(device, GIB if device == "cuda" else 64 << 20, 10 if device == "cuda" else 3)
        print(f"copy bandwidth {bandwidth / 1e9:.1f} GB/s", flush=True)
    except Exception as exc:  # noqa: BLE001
        notes.append(f"copy bandwidth: {failure(exc)}")
    try:
        planned = stages(device, vocab)
    except Exception as exc:  # noqa: BLE001 - e.g. a kernel that does not compile while preparing inputs
        planned = []
        notes.append(f"preparing the stages' inputs: {failure(exc)}")
    for stage in planned:
        if time.perf_counter() - began > BUDGET_S:
            notes.append(f"{stage.name}: skipped, the {BUDGET_S} s budget was spent")
            continue
        timings.append(time_stage(stage, device, repeat))
        t = timings[-1]
        print(
            f"{stage.name}: triton {cell(t.triton_us, '.1f')} us, torch {cell(t.torch_us, '.1f')} us, "
            f"agree {t.agree} {'; '.join(t.errors)}",
            flush=True,
        )
        write()
    if args.accumulated:

        def report(run: Accumulated) -> None:
            accumulated.append(run)
            print(
                f"accumulated {run.adapter} {run.family} N={run.count}: {run.verdict} {run.wall_s:.0f} s {run.note}",
                flush=True,
            )
            write()

        accumulated_runs(
            device,
            args.accumulated,
            SMOKE_ACCUMULATED if args.smoke else ACCUMULATED_FAMILIES,
            min(args.ranks, 2) if args.smoke else args.ranks,
            args.accumulated_limit,
            report,
        )
    if args.accumulate_ratio:

        def report_ratio(ratio: Any) -> None:  # a bench_accumulate_torch.Ratio, or (family, error)
            ratios.append(ratio)
            if isinstance(ratio, tuple):
                print(f"accumulate ratio {ratio[0]}: error {ratio[1]}", flush=True)
            else:
                print(f"accumulate ratio {ratio.family}: {ratio.value:.2f}x {sorted(ratio.verdicts)}", flush=True)
            write()

        accumulate_ratios(
            device,
            SMOKE_ACCUMULATED if args.smoke else ACCUMULATED_FAMILIES,
            ratio_cases,
            SMOKE_RATIO_BATCH if args.smoke else 16384,
            1 if args.smoke else args.ratio_repeat,
            report_ratio,
        )
    write()
    print(f"wrote {out} in {time.perf_counter() - began:.0f} s")
    broken = (
        notes
        or any(t.errors for t in timings)
        or not all(run.ok for run in runs)
        or any(r.verdict not in ("PASS", "PRECISION") for r in accumulated)
        or any(isinstance(r, tuple) for r in ratios)
    )
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
