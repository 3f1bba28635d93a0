"""How the candidate's kernels are launched: backend, block sizes, row segments.

Triton decides at ``@triton.jit`` decoration time whether kernels run natively
(CUDA) or in its interpreter (``TRITON_INTERPRET=1``, numpy on the CPU), so the
environment variable must be set before this package is imported. On CUDA every
vocabulary loop walks the row in blocks of :data:`GPU_BLOCK` elements; the
interpreter pays per operation, not per element, so it takes whole rows in blocks
of up to :data:`INTERPRETER_BLOCK`.

Every launch passes ``enable_fp_fusion=False``: the FP32 order of the design
(``f32(acc + f32(a * b))``) forbids contracting a multiply and an add into one FMA.
"""

from __future__ import annotations

import os

import torch
import triton

#: block of a vocabulary loop on CUDA
GPU_BLOCK = 1024
#: largest block of a vocabulary loop under the interpreter
INTERPRETER_BLOCK = 1 << 15
#: smallest block (the radix histogram has 256 bins)
MIN_BLOCK = 256
#: keyword arguments of every launch
LAUNCH = {"enable_fp_fusion": False}


def interpreting() -> bool:
    """Whether the kernels run in Triton's interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def block_for(length: int) -> int:
    """The block size of a loop over rows of ``length`` elements: always :data:`GPU_BLOCK`
    natively (one compiled variant per kernel, whatever the row), the row rounded up to a
    power of two (within bounds) in the interpreter."""
    if not interpreting():
        return GPU_BLOCK
    return max(MIN_BLOCK, min(INTERPRETER_BLOCK, triton.next_power_of_2(max(int(length), 1))))


def check_device(device: torch.device | str) -> None:
    """Refuse a device the kernels cannot run on in this process."""
    kind = torch.device(device).type
    if kind == "cpu" and not interpreting():
        raise RuntimeError("Triton runs CPU tensors only in its interpreter: set TRITON_INTERPRET=1")
    if kind == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("no CUDA device is available")
    if kind == "cuda" and interpreting():
        raise RuntimeError("TRITON_INTERPRET=1 would run the kernels in the interpreter, not natively: unset it")
    if kind not in ("cpu", "cuda"):
        raise RuntimeError(f"the Triton candidate runs on cpu (interpreter) or cuda, not {kind}")


def segments(starts: list[int], lengths: list[int], device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """Row segments of a flat buffer as int64 ``(starts, lengths)`` tensors."""
    as_tensor = lambda values: torch.tensor(values, dtype=torch.int64, device=device)  # noqa: E731
    return as_tensor(starts), as_tensor(lengths)


def uniform_segments(rows: int, length: int, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """``rows`` contiguous segments of ``length`` elements each."""
    return segments([r * length for r in range(rows)], [length] * rows, device)
