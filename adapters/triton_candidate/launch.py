"""How the candidate's kernels are launched: backend, block sizes, row segments.

Triton decides at ``@triton.jit`` decoration time whether kernels run natively
(CUDA) or in its interpreter (``TRITON_INTERPRET=1``, numpy on the CPU), so the
environment variable must be set before this package is imported. On CUDA every
vocabulary loop walks the row in blocks of :data:`GPU_BLOCK` elements; the
interpreter pays per operation, not per element, so it takes whole rows in blocks
of up to :data:`INTERPRETER_BLOCK`.

Rows of at most :data:`SHORT_ROW` elements (the accumulated streams' V <= 8,
docs/accumulated.md) share a program: the row-wise kernels take a ``ROWS``
constexpr, a case axis in the block, so one program handles a ``[ROWS, BLOCK]``
tile of rows (:func:`row_tile`). Each row is still computed on its own, by the same
operations in the same order, so the tile changes no result; it amortises the
interpreter's per-operation cost over thousands of rows (one program per batch), and
natively it fills a block with many short rows instead of one.

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
#: rows of at most this many elements share a program (a ``[ROWS, BLOCK]`` tile)
SHORT_ROW = 64
#: elements of one ``[ROWS, BLOCK]`` tile of short rows
INTERPRETER_TILE = 1 << 16
GPU_TILE = 1 << 11
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


def row_tile(length: int, rows: int, width: int = 1) -> tuple[int, int]:
    """(BLOCK, ROWS) of a row-wise kernel over ``rows`` rows of at most ``length`` elements:
    one row per program in blocks of :func:`block_for` for long rows; for short rows the
    row rounded up to a power of two, and as many rows per program as a tile holds
    (``width`` elements per row element: e.g. the draws compared with each count)."""
    if length > SHORT_ROW:
        return block_for(length), 1
    block = max(2, triton.next_power_of_2(max(int(length), 1)))
    cap = max(1, (INTERPRETER_TILE if interpreting() else GPU_TILE) // (block * width))
    return block, min(1 << (cap.bit_length() - 1), triton.next_power_of_2(max(int(rows), 1)))


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
