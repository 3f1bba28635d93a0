"""The CUDA check of the torch and Triton candidates, prepared to run in one call.

Run from the repository root on a machine with a CUDA device::

    .venv/bin/python bench/gpu_check.py              # about 2-4 minutes; must end within 5
    .venv/bin/python bench/gpu_check.py --smoke      # no GPU: the script itself, on CPU, V = 4096

It does, in one run:

1. conformance: ``qconform run --adapter torch --device cuda`` and
   ``qconform run --adapter triton --device cuda`` over the whole corpus (child
   processes, each with a time limit; the Triton kernels are compiled natively);
2. the device-to-device copy bandwidth (``torch`` copy of a 1 GiB buffer: bytes
   read plus bytes written over the median time);
3. every stage of a round at batch 4 x depth 5 x V = 129280, Triton and torch, timed
   with CUDA events around the host call (median of repeats after a warm-up, launch
   and host-sync overhead included: it is the exposed cost), each against its
   memory-traffic floor: the bytes an ideal kernel must move (inputs read once,
   outputs written once, FP32 weights and u32 counts as on the wire) over the
   measured bandwidth;
4. a markdown table in ``bench/results/gpu-<date>-<device>.md`` (``--out`` to choose).

Without a CUDA device it says so and exits 0 (``--smoke`` runs parts 3 and 4 on the
CPU, interpreter and all, at V = 4096, to check the script).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

BATCH, DEPTH, VOCAB, TOP_K, RANK = 4, 5, 129280, 32, 8
M = 1 << 24
GIB = 1 << 30
#: seconds a conformance run may take (the Triton run compiles every kernel first); with
#: the stages (well under a minute) the script ends within 5 minutes
RUN_LIMIT_S = {"torch": 80, "triton": 150}
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Stage:
    """One timed operation: what it does, its floor in bytes, and the two implementations."""

    name: str
    floor_bytes: int
    triton: Callable[[], object]
    torch: Callable[[], object]


@dataclass(frozen=True)
class Conformance:
    adapter: str
    ok: bool
    counts: dict
    wall_s: float
    note: str


# ------------------------------------------------------------------ measurements


def elapsed_us(run: Callable[[], object], device: str, repeat: int) -> float:
    """Median microseconds of ``run()`` after one warm-up call (which compiles)."""
    run()
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
    return statistics.median(samples)


def copy_bandwidth(device: str, size: int, repeat: int) -> float:
    """Device-to-device copy bandwidth in bytes per second (read + write)."""
    src = torch.empty(size, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return 2 * size / (elapsed_us(lambda: dst.copy_(src), device, repeat) * 1e-6)


def conformance(adapter: str, device: str) -> Conformance:
    """``qconform run`` of one adapter over the whole corpus, in a child process."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "run.json"
        command = [str(Path(sys.executable).with_name("qconform")), "run", "--adapter", adapter, "--device", device,
                   "--json", str(report), "--timeout", str(RUN_LIMIT_S[adapter])]
        began = time.perf_counter()
        try:
            done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=RUN_LIMIT_S[adapter],
                                  cwd=ROOT)
        except subprocess.TimeoutExpired:
            return Conformance(adapter, False, {}, time.perf_counter() - began, f"over {RUN_LIMIT_S[adapter]} s")
        wall = time.perf_counter() - began
        if not report.is_file():
            return Conformance(adapter, False, {}, wall, (done.stdout + done.stderr)[-300:])
        data = json.loads(report.read_text())
    bad = [f"{c['id']}: {c['class']} {c['message'][:120]}" for c in data["cases"] if c["unexpected"]]
    return Conformance(adapter, bool(data["ok"]), data["counts"], wall, "; ".join(bad[:3]))


# ------------------------------------------------------------------ the stages of a round


def stages(device: str, vocab: int) -> list[Stage]:
    """The operations of one round at batch 4 x depth 5 x ``vocab``, on ``device``."""
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

    return [
        Stage("logits -> FP32 weights (Markov rank 8)", row_in + markov_in + row_out,
              lambda: xc.logits_to_weights(logits[:, 0].contiguous(), temps, (left, right), prev), torch_weights),
        Stage("dense dyadic24 counts (FP64 largest remainder)", row_in + row_out,
              lambda: xc.allocate_rows(weights, flags), lambda: tc.allocate_dense(weights)),
        Stage(f"top-{TOP_K} support and its counts", row_in + 8 * BATCH * TOP_K,
              lambda: xc.allocate_rows(xc.top_k_support(weights, TOP_K)[1], flags),
              lambda: tc.allocate_top_k(weights, TOP_K)),
        Stage("proposal draw over dense counts", row_in, lambda: xc.sample_rows(q_dense, u24),
              lambda: tc.sample_counts(counts, u24[:, 0])),
        Stage(f"proposal chain, K = {DEPTH}, dense", chain,
              lambda: xc.propose(seeds, gens, rounds, anchors, [1, 2, 3, 4], logits, 0.8, (left, right), None),
              lambda: tc.propose(seeds, gens, rounds, anchors, [1, 2, 3, 4], logits, 0.8, (left, right), None)),
        Stage("target row masses (B x (K+1) rows)", 4 * BATCH * (DEPTH + 1) * vocab,
              lambda: xc.verification.target_masses(p64), lambda: p32.double().sum(dim=-1)),
        Stage(f"verify round, K = {DEPTH} (masses, acceptance, residual)",
              4 * BATCH * (DEPTH + 1) * vocab + row_in,
              lambda: xc.verify_batch(idents, drafts, q_rows, p64, no_stops, no_budget),
              lambda: tc.verify_round(seeds, gens, rounds, anchors, drafts, q_torch, p32, None, None)),
    ]


# ------------------------------------------------------------------ report


def device_label(device: str) -> str:
    name = torch.cuda.get_device_name(0) if device == "cuda" else "cpu-smoke"
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-")


def markdown(label: str, device: str, vocab: int, bandwidth: float, runs: list[Conformance],
             rows: list[tuple[Stage, float, float]]) -> str:
    import triton

    lines = [
        f"# GPU check, {datetime.date.today().isoformat()}, {label}",
        "",
        f"torch {torch.__version__}, triton {triton.__version__}, device `{device}`; "
        f"batch {BATCH} x depth {DEPTH} x V = {vocab}.",
        f"Device-to-device copy bandwidth: **{bandwidth / 1e9:.1f} GB/s** (read + write, median).",
        "",
        "## Conformance (whole corpus)",
        "",
        "| adapter | ok | verdicts | wall s | unexpected (first 3) |",
        "|---|---|---|---:|---|",
    ]
    for run in runs:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(run.counts.items()) if v)
        lines.append(f"| {run.adapter} | {'yes' if run.ok else '**NO**'} | {counts} | {run.wall_s:.1f} | "
                     f"{run.note.replace('|', '/') or '-'} |")
    lines += [
        "",
        "## Stages against their memory-traffic floor",
        "",
        "Floor = essential bytes (inputs read once, outputs written once) / copy bandwidth. "
        "Times are medians of the host call (launches and host syncs included).",
        "",
        "| stage | floor bytes | floor µs | Triton µs | Triton / floor | torch µs | torch / floor |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for stage, triton_us, torch_us in rows:
        floor_us = stage.floor_bytes / bandwidth * 1e6
        lines.append(f"| {stage.name} | {stage.floor_bytes:,} | {floor_us:.2f} | {triton_us:.1f} | "
                     f"{triton_us / floor_us:.0f}x | {torch_us:.1f} | {torch_us / floor_us:.0f}x |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="run the timing part on CPU at V = 4096 (no GPU)")
    parser.add_argument("--repeat", type=int, default=20, help="timed repeats per stage")
    parser.add_argument("--out", help="markdown file (default bench/results/gpu-<date>-<device>.md)")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"
        device, vocab, runs = "cpu", 4096, []
    elif not torch.cuda.is_available():
        print("gpu_check: no CUDA device on this machine; nothing to check (use --smoke to test the script on CPU).")
        return 0
    else:
        os.environ.pop("TRITON_INTERPRET", None)
        device, vocab = "cuda", VOCAB
        runs = [conformance("torch", device), conformance("triton", device)]
        for run in runs:
            print(f"conformance {run.adapter}: ok={run.ok} {run.counts} {run.wall_s:.1f} s {run.note}", flush=True)
    bandwidth = copy_bandwidth(device, GIB if device == "cuda" else 64 << 20, 10 if device == "cuda" else 3)
    print(f"copy bandwidth {bandwidth / 1e9:.1f} GB/s", flush=True)
    rows = []
    for stage in stages(device, vocab):
        repeat = args.repeat if device == "cuda" else 2
        rows.append((stage, elapsed_us(stage.triton, device, repeat), elapsed_us(stage.torch, device, repeat)))
        print(f"{stage.name}: triton {rows[-1][1]:.1f} us, torch {rows[-1][2]:.1f} us", flush=True)
    label = device_label(device)
    out = Path(args.out) if args.out else ROOT / "bench" / "results" / f"gpu-{datetime.date.today()}-{label}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(markdown(label, device, vocab, bandwidth, runs, rows), encoding="utf-8")
    print(f"wrote {out} in {time.perf_counter() - began:.0f} s")
    return 0 if all(run.ok for run in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
