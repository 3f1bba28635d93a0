"""dyadic24 count allocation in FP64 (R03, R06): one program per row, or per tile of short rows.

For each row (a segment of a flat weight buffer, FP32 or FP64):

1. :func:`quota_kernel`: ``W`` = FP64 sum of the weights (blocked: per-lane partial
   sums, then a tree; a fixed order for a given block size), ``quota_v = (w_v / W) * M``
   in FP64, ``floor_v``, ``remainder_v = quota_v - floor_v`` (exact in FP64), and
   ``remaining = M - sum(floor)`` in int64. The row is refused as
   INCONSISTENT_ALLOCATION unless ``W`` is finite and positive, ``0 <= remaining < M``
   and ``remaining`` is at most the number of positive remainders (an FP64 row that
   breaks these would have to clip, or hand a ticket to a whole quota: R06 says refuse);
2. :func:`qconform.adapters.triton_candidate.select.radix_select_kernel`: the
   threshold of the ``remaining`` largest remainders (keys: their FP64 bit patterns);
3. :func:`ticket_kernel`: ``count_v = floor_v + ticket_v``, tickets to the largest
   remainders with ties to the lowest ID, and the final sum checked to be exactly M.

FP64 differs from the exact-rational largest remainder only where two remainders,
or a remainder and the cut, lie within FP64 rounding of each other: the precision
profile declares ``fp64_allocation``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .errors import INCONSISTENT_ALLOCATION
from .launch import LAUNCH, row_tile
from .reductions import ADD, MAX
from .select import radix_select, selection, take_block

#: total dyadic mass
M: int = 1 << 24
M_FLOAT = tl.constexpr(16777216.0)
M_INT = tl.constexpr(1 << 24)


@triton.jit(do_not_specialize=["n_rows"])
def quota_kernel(
    w_ptr,
    starts_ptr,
    lengths_ptr,
    n_rows,
    floors_ptr,
    keys_ptr,
    remaining_ptr,
    flags_ptr,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Per row of the program's tile: FP64 floors and remainder keys of the quotas, the
    tickets left, the flags."""
    row = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    row_live = row < n_rows
    start = tl.load(starts_ptr + row, mask=row_live, other=0)[:, None]
    length = tl.load(lengths_ptr + row, mask=row_live, other=0)
    n = length[:, None]
    longest = tl.reduce(length, 0, MAX)
    lanes = tl.full([ROWS, BLOCK], 0, tl.float64)
    for off in range(0, longest, BLOCK):  # pyright: ignore[reportArgumentType]  # Triton: tl.reduce returns a tensor here, typed as possibly a tuple
        i = off + tl.arange(0, BLOCK)[None, :]
        lanes += tl.load(w_ptr + start + i, mask=i < n, other=0.0).to(tl.float64)
    total = tl.reduce(lanes, 1, ADD)
    floor_sum = tl.full([ROWS], 0, tl.int64)
    positive = tl.full([ROWS], 0, tl.int64)
    for off in range(0, longest, BLOCK):  # pyright: ignore[reportArgumentType]  # Triton: tl.reduce returns a tensor here, typed as possibly a tuple
        i = off + tl.arange(0, BLOCK)[None, :]
        live = i < n
        w = tl.load(w_ptr + start + i, mask=live, other=0.0).to(tl.float64)
        quota = (w / total[:, None]) * M_FLOAT  # pyright: ignore[reportArgumentType]  # Triton: a [:, None] index of a tl.reduce result, typed as possibly a tuple
        whole = tl.floor(quota)
        rest = quota - whole
        floors = tl.where(live, whole.to(tl.int64), 0)
        tl.store(floors_ptr + start + i, floors, mask=live)
        tl.store(keys_ptr + start + i, rest.to(tl.int64, bitcast=True), mask=live)
        floor_sum += tl.reduce(floors, 1, ADD)
        positive += tl.reduce((live & (rest > 0)).to(tl.int64), 1, ADD)
    remaining = M_INT - floor_sum
    ok = (total > 0) & (total < float("inf")) & (remaining >= 0) & (remaining < M_INT) & (remaining <= positive)  # pyright: ignore[reportOperatorIssue]  # Triton: tl.reduce returns a tensor here, typed as possibly a tuple
    tl.store(remaining_ptr + row, tl.where(ok, remaining, 0), mask=row_live)
    flags = tl.load(flags_ptr + row, mask=row_live, other=0)
    tl.store(flags_ptr + row, flags | tl.where(ok, 0, INCONSISTENT_ALLOCATION), mask=row_live)


@triton.jit(do_not_specialize=["n_rows"])
def ticket_kernel(
    floors_ptr,
    keys_ptr,
    starts_ptr,
    lengths_ptr,
    thresh_ptr,
    need_ptr,
    n_rows,
    counts_ptr,
    flags_ptr,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Per row of the program's tile: counts = floors + one ticket for each selected
    remainder; the sum must be M."""
    row = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    row_live = row < n_rows
    start, length, thresh, need = selection(row, row_live, starts_ptr, lengths_ptr, thresh_ptr, need_ptr)
    ties = tl.full([ROWS], 0, tl.int64)
    total = tl.full([ROWS], 0, tl.int64)
    for off in range(0, tl.reduce(length, 0, MAX), BLOCK):  # pyright: ignore[reportArgumentType]  # Triton: tl.reduce returns a tensor here, typed as possibly a tuple
        i = off + tl.arange(0, BLOCK)[None, :]
        live = i < length[:, None]
        at = start[:, None] + i
        _, ticket, ties = take_block(keys_ptr, at, live, thresh, need, ties)
        counts = tl.load(floors_ptr + at, mask=live, other=0) + ticket.to(tl.int64)
        tl.store(counts_ptr + at, counts, mask=live)
        total += tl.reduce(counts, 1, ADD)
    flags = tl.load(flags_ptr + row, mask=row_live, other=0)
    tl.store(flags_ptr + row, flags | tl.where(total == M_INT, 0, INCONSISTENT_ALLOCATION), mask=row_live)


def allocate(
    weights: torch.Tensor, starts: torch.Tensor, lengths: torch.Tensor, max_length: int, flags: torch.Tensor
) -> torch.Tensor:
    """int64 dyadic24 counts (the layout of ``weights``) of each row segment of validated
    FP32 or FP64 weights; INCONSISTENT_ALLOCATION is ORed into ``flags`` (int32, one per row)."""
    rows = starts.numel()
    floors = torch.empty(weights.shape, dtype=torch.int64, device=weights.device)
    keys = torch.empty(weights.shape, dtype=torch.int64, device=weights.device)
    counts = torch.zeros(weights.shape, dtype=torch.int64, device=weights.device)
    remaining = torch.empty(rows, dtype=torch.int64, device=weights.device)
    if rows == 0:
        return counts
    block, tile = row_tile(max_length, rows)
    grid = (triton.cdiv(rows, tile),)
    quota_kernel[grid](
        weights,
        starts,
        lengths,
        rows,
        floors,
        keys,
        remaining,
        flags,
        ROWS=tile,  # pyright: ignore[reportArgumentType]  # Triton: a plain int or bool fills a tl.constexpr parameter
        BLOCK=block,  # pyright: ignore[reportArgumentType]  # Triton: a plain int or bool fills a tl.constexpr parameter
        **LAUNCH,
    )
    thresh, need = radix_select(keys, starts, lengths, remaining, max_length)
    ticket_kernel[grid](
        floors,
        keys,
        starts,
        lengths,
        thresh,
        need,
        rows,
        counts,
        flags,
        ROWS=tile,  # pyright: ignore[reportArgumentType]  # Triton: a plain int or bool fills a tl.constexpr parameter
        BLOCK=block,  # pyright: ignore[reportArgumentType]  # Triton: a plain int or bool fills a tl.constexpr parameter
        **LAUNCH,
    )
    return counts


def allocate_rows(weights: torch.Tensor, flags: torch.Tensor) -> torch.Tensor:
    """int64 counts ``[R, V]`` of contiguous weight rows ``[R, V]`` (see :func:`allocate`)."""
    rows, vocab = weights.shape
    starts = torch.arange(rows, dtype=torch.int64, device=weights.device) * vocab
    lengths = torch.full((rows,), vocab, dtype=torch.int64, device=weights.device)
    return allocate(weights.contiguous(), starts, lengths, vocab, flags)
