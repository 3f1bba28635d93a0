"""Compile every kernel specialization the Triton candidate launches over the corpus, natively, without a GPU.

Run from the repository root (any machine; no device is used)::

    python bench/triton_compile_check.py                  # sm_90, every case of the adapter's families
    python bench/triton_compile_check.py --sm 90 --sm 80  # also sm_80
    python bench/triton_compile_check.py --case 'allocation_sparse/*'

Under the interpreter the candidate never compiles a kernel, and natively it picks
other constexprs (``launch.block_for``, ``launch.row_tile``: a block of 1024 for long
rows, a tile of the row rounded up to a power of two for short ones), so a kernel that
Triton's compiler rejects for one block shape only shows on a device. This script finds
those before a device does, in two steps:

1. record (a child process): every case of the corpus (``--case`` globs narrow it), one at
   a time and then all of a family in one request, each through the adapter's own answer path
   (``triton_adapter.answers``, its ``run_batch``: same-shape groups in one launch, the rest
   by the family's function); then each accumulated stream the adapter
   declares (``qconform accumulate --adapter triton``), :func:`stream_sizes` cases from case
   0 in one request each (every tile a ``--batch`` can make), named ``accumulated/FAMILY/SIZE`` (the tiles of thousands of rows
   of V <= 8 that only a stream fills); all in the interpreter but with the candidate's
   *native* host logic (``launch.interpreting()`` false: native blocks, tiles and shard
   widths); every launch is recorded as Triton's native launcher would specialize it:
   argument types, 16-divisibility of pointers and integers, integers equal to 1 made
   constexpr (``do_not_specialize`` honoured), the constexprs, the launch options;
2. compile (this process, ``TRITON_INTERPRET`` unset): each distinct specialization with
   ``triton.compile`` for ``GPUTarget("cuda", sm, 32)`` (Triton's bundled ``ptxas`` needs no
   device), through ``ptx_audit.audit_kernel``, so the PTX audit applies to every one.

It prints one line per failing specialization (kernel, constexprs, the first cases that
launch it; the MLIR diagnostics are on stderr) and a summary, and exits 1 if any
specialization fails to compile or fails the audit, or any case raised anything but a
refusal in the interpreter (its later launches would go unchecked), 0 otherwise; 2 when the installed
Triton has no NVIDIA backend (nothing can be compiled). The check runs with the
installed Triton: the one pinned (3.9.0) in the development venv; for a device image's
Triton (3.6.0 on the lent H200), run it with a Python that has that Triton
(bench/README.md). docs/triton.md, "Native CUDA".
"""

from __future__ import annotations

import argparse
import fnmatch
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: cases named per specialization in the report
SHOWN_CASES = 3
#: the default --batch of `qconform accumulate`: a whole request of it
DEFAULT_BATCH = 16384


def stream_sizes(gpu_tile: int) -> tuple[int, ...]:
    """The requests of each accumulated stream recorded, from case 0, in one run_batch each, as
    `qconform accumulate --adapter triton --batch B` sends them: one case (a count of 1 is
    specialized as a constant), an odd count, every power of two up to the most rows a tile holds
    (``gpu_tile // 2``, rows of two elements), and a whole request of the default --batch. A
    short-row kernel's ROWS is the request's rows rounded up to a power of two, capped by its tile
    (``launch.row_tile``), and with ``c`` rows a case, the powers of two of cases reach every power of
    two of rows from ``c`` up ((x, 2x] holds one), so every ROWS that any --batch can make is compiled."""
    powers = [1 << k for k in range(1, gpu_tile.bit_length() - 1)]
    return tuple(sorted({1, 3, *powers, DEFAULT_BATCH}))


def record(out: Path, patterns: list[str]) -> None:
    """Run the cases in the interpreter with native host logic; write the launches' specializations."""
    os.environ["TRITON_INTERPRET"] = "1"
    import triton  # noqa: F401  (read TRITON_INTERPRET=1: kernels defined from now on are interpreted)
    from triton import knobs

    knobs.runtime.interpret = True  # kept when the environment says otherwise below
    os.environ["TRITON_INTERPRET"] = "0"  # the candidate's launch.interpreting(): native host logic
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend
    from triton.runtime.interpreter import InterpretedFunction

    seen: dict[str, set[str]] = {}
    current = ["-"]
    interpret_run = InterpretedFunction.run

    def recording_run(self, *args, grid, warmup, **kwargs):
        params = inspect.signature(self.fn).parameters
        bound = inspect.signature(self.fn).bind(*args, **{k: v for k, v in kwargs.items() if k in params})
        bound.apply_defaults()
        fixed = set(self.kwargs.get("do_not_specialize") or ())
        signature, constexprs, attrs = {}, {}, {}
        for index, (name, param) in enumerate(params.items()):
            value = bound.arguments[name]
            if "constexpr" in str(param.annotation):
                signature[name], constexprs[name] = "constexpr", getattr(value, "value", value)
                continue
            kind, key = native_specialize_impl(BaseBackend, value, False, not {name, index} & fixed, True)
            signature[name] = kind
            if kind == "constexpr":
                constexprs[name] = value
            elif key:
                attrs[name] = key
        spec = {
            "module": self.fn.__module__,
            "kernel": self.fn.__name__,
            "signature": signature,
            "constexprs": constexprs,
            "attrs": attrs,
            "options": {k: v for k, v in kwargs.items() if k not in params},
        }
        seen.setdefault(json.dumps(spec, sort_keys=True), set()).add(current[0])
        return interpret_run(self, *args, grid=grid, warmup=warmup, **kwargs)

    InterpretedFunction.run = recording_run

    from qconform.adapters.triton_adapter import FAMILIES, answers
    from qconform.adapters.triton_candidate import launch
    from qconform.generators.accumulated import FAMILIES as ACCUMULATED
    from qconform.generators.validation import iter_cases
    from qconform.harness.adapter import AdapterError

    assert not launch.interpreting(), "the host logic must be the native one"

    def selected(name: str) -> bool:
        return not patterns or any(fnmatch.fnmatch(name, p) for p in patterns)

    by_family: dict[str, list] = {}
    for case in iter_cases(ROOT / "vectors", sorted(FAMILIES)):
        if selected(case.id):
            by_family.setdefault(case.family, []).append(case)
    crashed = []

    def ask(name: str, family: str, inputs: list[dict]) -> None:
        """``inputs`` as the adapter answers them (``answers``, its ``run_batch``): a refusal is an
        answer and its launches before it are recorded; a crash is listed (its later launches would
        go unchecked; the corpus run judges the answers)."""
        current[0] = name
        try:
            outcomes = answers(family, inputs, "cpu")
        except Exception as exc:  # noqa: BLE001 - listed
            crashed.append(f"{name}: {type(exc).__name__}: {exc}")
            return
        crashed.extend(f"{name}: {o.message}" for o in outcomes if isinstance(o, AdapterError))

    for family, cases in by_family.items():
        for case in cases:  # one case a request: the family's own function
            ask(case.id, family, [case.input])
        ask(f"batched:{family}", family, [case.input for case in cases])  # same-shape groups in one launch
    for family in sorted(set(ACCUMULATED) & set(FAMILIES)):
        for size in stream_sizes(
            launch.GPU_TILE
        ):  # as `qconform accumulate --adapter triton` asks: a run_batch a request
            name = f"accumulated/{family}/{size}"
            if not selected(name):
                continue
            stream = ACCUMULATED[family]
            batch = stream.arrays(0, size)
            ask(name, family, [stream.case_input(batch, k) for k in range(size)])
    specs = [{**json.loads(key), "cases": sorted(cases)} for key, cases in seen.items()]
    out.write_text(json.dumps({"specializations": specs, "crashed": crashed}))


def label(spec: dict) -> str:
    return f"{spec['kernel']}[{', '.join(f'{k}={v}' for k, v in sorted(spec['constexprs'].items()))}]"


def compile_all(specs: list[dict], capabilities: list[int]) -> list[str]:
    """One line per specialization that does not compile or fails the PTX audit, per target."""
    import importlib

    from triton.backends.compiler import BaseBackend, GPUTarget

    from qconform.adapters.triton_candidate import ptx_audit

    failures = []
    for sm in capabilities:
        target = GPUTarget("cuda", sm, 32)
        for spec in specs:
            kernel = getattr(importlib.import_module(spec["module"]), spec["kernel"])
            kinds = [spec["signature"][name] for name in kernel.arg_names]  # the record's keys are sorted
            types = tuple(kind for kind in kinds if kind != "constexpr")
            attrs = {name: BaseBackend.parse_attr(key) for name, key in spec["attrs"].items()}
            audit = ptx_audit.audit_kernel(kernel, types, spec["constexprs"], target, spec["options"], attrs)
            if audit.problems:
                cases = ", ".join(spec["cases"][:SHOWN_CASES]) + (" ..." if len(spec["cases"]) > SHOWN_CASES else "")
                failures.append(f"sm_{sm} {label(spec)}: {'; '.join(audit.problems)} (cases: {cases})")
    return failures


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Compile every kernel specialization the Triton candidate launches.")
    parser.add_argument("--sm", type=int, action="append", help="CUDA compute capability (repeatable; default 90)")
    parser.add_argument("--case", action="append", default=[], help="fnmatch glob of case ids (repeatable)")
    parser.add_argument("--record", type=Path, help=argparse.SUPPRESS)  # the child's step 1
    args = parser.parse_args(argv)
    if args.record is not None:
        record(args.record, args.case)
        return 0
    os.environ.pop("TRITON_INTERPRET", None)
    import triton
    from triton.backends import backends

    if "nvidia" not in backends:
        print(f"skipped: Triton {triton.__version__} has no NVIDIA backend, nothing can be compiled for CUDA")
        return 2
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        recorded = Path(tmp) / "specializations.json"
        child = [sys.executable, __file__, "--record", str(recorded), *(f"--case={p}" for p in args.case)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        subprocess.run(child, check=True, env=env, cwd=ROOT)
        data = json.loads(recorded.read_text())
    specs, crashed = data["specializations"], data["crashed"]
    recorded_s = time.perf_counter() - started
    for line in crashed:
        print(f"raised in the interpreter: {line}")
    capabilities = args.sm or [90]
    failures = compile_all(specs, capabilities)
    for line in failures:
        print(line)
    targets = ", ".join(f"sm_{sm}" for sm in capabilities)
    streams_only = sum(all(case.startswith("accumulated/") for case in spec["cases"]) for spec in specs)
    print(
        f"Triton {triton.__version__}: {len(specs)} specializations from "
        f"{'the selected cases' if args.case else 'the corpus'} ({streams_only} only from the accumulated streams), "
        f"compiled for {targets}: "
        f"{len(failures)} failed (recorded in {recorded_s:.0f} s, compiled in {time.perf_counter() - started - recorded_s:.0f} s)"
    )
    if crashed:
        print(f"FAILED: {len(crashed)} cases raised in the interpreter, so their later launches are not checked")
    return 1 if failures or crashed or not specs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
