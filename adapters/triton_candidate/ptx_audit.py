"""Compile every kernel for a CUDA target without a GPU, and audit its PTX.

``python -m qconform.adapters.triton_candidate.ptx_audit [sm]`` compiles each kernel
(Triton's bundled ``ptxas`` needs no device) with the launch options the candidate
uses, and checks what the design's FP32 order needs of the native code: FP32
division correctly rounded (``div.rn.f32``, never ``div.full``/``div.approx``), no
contracted FP32 multiply-add (``fma.rn.f32``: the Markov bias is
``f32(acc + f32(a * b))``), no approximate exp (``ex2.approx``), the FP64 -> FP32
rounding ``cvt.rn.f32.f64`` without flush-to-zero, and FP64 division ``div.rn.f64``.
It must run with ``TRITON_INTERPRET`` unset (the kernels must be JIT functions), so
the tests run it in a child process. Exit status 1 on any compile error or finding.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

import triton
from triton.backends.compiler import GPUTarget

from . import allocation, lookup, philox, qrows, sampling, select, topk, verification, weights
from .launch import LAUNCH

P64, P32, F32, F64, I32 = "*i64", "*i32", "*fp32", "*fp64", "i32"

#: a tile of short rows as the host launches it natively (``launch.row_tile``, V <= 8)
SHORT = {"ROWS": 256, "BLOCK": 8}

#: (kernel, runtime argument types in order, constexpr values); the row-wise kernels twice:
#: one long row per program, and a tile of short rows
KERNELS = (
    (philox.philox_kernel, (P64, P64, P64, I32), {"BLOCK": 128}),
    (philox.abi_draw_kernel, (P64, P64, I32), {"BLOCK": 128}),
    (
        weights.logits_weights_kernel,
        (F32, I32, F32, F32, I32, P64, F32, F32, P32, I32),
        {"HAS_BIAS": True, "BLOCK": 1024},
    ),
    (weights.weight_scan_kernel, (F64, I32, I32, P32, F64), {"ROWS": 1, "BLOCK": 1024}),
    (weights.weight_scan_kernel, (F64, I32, I32, P32, F64), SHORT),
    (allocation.quota_kernel, (F32, P64, P64, I32, P64, P64, P64, P32), {"ROWS": 1, "BLOCK": 1024}),
    (allocation.quota_kernel, (F32, P64, P64, I32, P64, P64, P64, P32), SHORT),
    (select.radix_select_kernel, (P64,) * 4 + (I32, P64, P64), {"KEY_BITS": 64, "ROWS": 1, "BLOCK": 1024}),
    (select.radix_select_kernel, (P64,) * 4 + (I32, P64, P64), {"KEY_BITS": 64, "ROWS": 8, "BLOCK": 8}),
    (allocation.ticket_kernel, (P64,) * 6 + (I32, P64, P32), {"ROWS": 1, "BLOCK": 1024}),
    (allocation.ticket_kernel, (P64,) * 6 + (I32, P64, P32), SHORT),
    (topk.weight_keys_kernel, (F32, P64, I32), {"BLOCK": 1024}),
    (select.compact_kernel, (P64,) * 9 + (I32, P64, P64), {"HAS_IDS": True, "ROWS": 1, "BLOCK": 1024}),
    (topk.key_weights_kernel, (P64, F64, I32), {"BLOCK": 1024}),
    (qrows.qrow_check_kernel, (P64,) * 5 + (I32, I32, P32), {"ROWS": 1, "BLOCK": 1024}),
    (qrows.qrow_check_kernel, (P64,) * 5 + (I32, I32, P32), SHORT),
    (sampling.categorical_kernel, (P64,) * 6 + (I32, I32, P64), {"ROWS": 1, "BLOCK": 1024, "DRAWS": 16}),
    (sampling.categorical_kernel, (P64,) * 6 + (I32, I32, P64), {"ROWS": 64, "BLOCK": 8, "DRAWS": 4}),
    (lookup.q_lookup_kernel, (P64,) * 7 + (I32, P64, P32, I32), {"STEPS": 7, "BLOCK": 128}),
    (
        verification.acceptance_kernel,
        (P64, P64, F64, F64, P64, P64, I32, I32, I32, P64, P32, P64),
        {"ROWS": 1, "KP": 8},
    ),
    (
        verification.acceptance_kernel,
        (P64, P64, F64, F64, P64, P64, I32, I32, I32, P64, P32, P64),
        {"ROWS": 256, "KP": 8},
    ),
    (
        verification.residual_kernel,
        (F64, F64) + (P64,) * 8 + (I32, I32, I32, P64, P64, P32),
        {"STEPS": 7, "ROWS": 1, "BLOCK": 1024},
    ),
    (
        verification.residual_kernel,
        (F64, F64) + (P64,) * 8 + (I32, I32, I32, P64, P64, P32),
        {"STEPS": 1, **SHORT},
    ),
)

#: PTX that breaks the design's arithmetic anywhere it appears
FORBIDDEN = {
    r"div\.(full|approx)\.f32": "approximate FP32 division",
    r"fma\.rn(\.ftz)?\.f32": "contracted FP32 multiply-add",
    r"ex2\.approx": "approximate exp",
    r"cvt\.rn\.ftz\.f32\.f64": "FP64 -> FP32 rounding that flushes subnormals",
    r"(add|sub|mul|div)\.rn\.ftz\.f32": "FP32 arithmetic that flushes subnormals",
}
#: PTX a kernel must contain (it does that step natively, correctly rounded)
REQUIRED = {
    "logits_weights_kernel": (r"div\.rn\.f32", r"cvt\.rn\.f32\.f64"),
    "quota_kernel": (r"div\.rn\.f64",),
}
#: PTX a kernel must contain when a constexpr switch is on: (kernel, switch) -> patterns
REQUIRED_WHEN = {("logits_weights_kernel", "HAS_BIAS"): (r"mul\.rn\.f32",)}  # the Markov bias f32(a * b)


@dataclass(frozen=True)
class KernelAudit:
    name: str
    problems: tuple[str, ...]


def signature(kernel, types: tuple[str, ...], constants: dict) -> dict[str, str]:
    runtime = iter(types)
    return {name: "constexpr" if name in constants else next(runtime) for name in kernel.arg_names}


def audit_kernel(
    kernel,
    types: tuple[str, ...],
    constants: dict,
    target: GPUTarget,
    options: dict | None = None,
    attrs: dict[str, list] | None = None,
) -> KernelAudit:
    """Compile one kernel for ``target`` and list what its PTX gets wrong. ``options``: the
    launch options (default :data:`LAUNCH`); ``attrs``: argument name -> Triton attributes
    (``[["tt.divisibility", 16]]``), as the native launcher specializes them."""
    name = kernel.__name__ + (f"[ROWS={constants['ROWS']}]" if constants.get("ROWS", 1) > 1 else "")
    arg_attrs = {(kernel.arg_names.index(arg),): value for arg, value in (attrs or {}).items()}
    source = triton.compiler.ASTSource(
        fn=kernel, signature=signature(kernel, types, constants), constexprs=constants, attrs=arg_attrs
    )
    try:
        ptx = triton.compile(source, target=target, options=dict(LAUNCH if options is None else options)).asm["ptx"]
    except Exception as exc:  # noqa: BLE001 - a compile error is a finding, reported with its text
        return KernelAudit(name, (f"does not compile: {str(exc)[:400]}",))
    problems = [f"{why} ({pattern})" for pattern, why in FORBIDDEN.items() if re.search(pattern, ptx)]
    required = REQUIRED.get(kernel.__name__, ()) + tuple(
        pattern
        for (kernel_name, switch), patterns in REQUIRED_WHEN.items()
        if kernel_name == kernel.__name__ and constants.get(switch)
        for pattern in patterns
    )
    problems += [f"missing {pattern}" for pattern in required if not re.search(pattern, ptx)]
    return KernelAudit(name, tuple(problems))


def audit(capability: int = 90) -> list[KernelAudit]:
    """Audits of every kernel compiled for CUDA compute capability ``capability``."""
    target = GPUTarget("cuda", capability, 32)
    return [audit_kernel(kernel, types, constants, target) for kernel, types, constants in KERNELS]


def main(argv: list[str]) -> int:
    audits = audit(int(argv[0]) if argv else 90)
    for result in audits:
        print(f"{result.name}: {'; '.join(result.problems) or 'ok'}")
    return 1 if any(result.problems for result in audits) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
