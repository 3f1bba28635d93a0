"""The integer categorical proposal (R08): a 24-bit draw over exact cumulative counts.

The token is the first ``v`` whose cumulative count ``C_v`` is strictly greater than
the draw ``u``. Counts are int64 and nonnegative, so ``C`` is nondecreasing and the
index of that token is exactly the number of ``v`` with ``C_v <= u``:
:func:`categorical_kernel` counts them block by block (an int64 prefix sum carried
across blocks, compared against a block of draws at once). Everything is integer:
the draw samples q exactly. For a sparse row the index is mapped to its global ID.
A draw at or above the row's total (an illegal row) gives -1. Short rows share a
program (a tile of rows, :func:`qconform.adapters.triton_candidate.launch.row_tile`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .errors import TritonCandidateError
from .launch import LAUNCH, interpreting, row_tile
from .qrows import QRows
from .reductions import ADD, MAX

#: elements of one ``[DRAWS, BLOCK]`` comparison tile (Triton's tensor limit is 2^20)
MAX_TILE = 1 << 20 if interpreting() else 1 << 14


@triton.jit(do_not_specialize=["n_rows", "n_draws"])
def categorical_kernel(
    counts_ptr,
    ids_ptr,
    starts_ptr,
    lengths_ptr,
    sparse_ptr,
    draws_ptr,
    n_rows,
    n_draws,
    tokens_ptr,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
    DRAWS: tl.constexpr,
):
    """Rows ``r`` of the program's tile, draws ``draws[r, :]``: tokens ``[r, :]`` (global IDs,
    or -1 beyond the total). A ``[ROWS, DRAWS, BLOCK]`` comparison per block of counts."""
    row = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    row_live = row < n_rows
    d = tl.program_id(1) * DRAWS + tl.arange(0, DRAWS)
    d_live = row_live[:, None] & (d < n_draws)[None, :]
    at = row[:, None] * n_draws + d[None, :]
    u = tl.load(draws_ptr + at, mask=d_live, other=0)
    start = tl.load(starts_ptr + row, mask=row_live, other=0)[:, None]
    length = tl.load(lengths_ptr + row, mask=row_live, other=0)
    n = length[:, None]
    index = tl.full([ROWS, DRAWS], 0, tl.int64)
    carry = tl.full([ROWS, 1], 0, tl.int64)
    for off in range(0, tl.reduce(length, 0, MAX), BLOCK):  # pyright: ignore[reportArgumentType]  # Triton: tl.reduce returns a tensor here, typed as possibly a tuple
        i = off + tl.arange(0, BLOCK)[None, :]
        live = i < n
        counts = tl.load(counts_ptr + start + i, mask=live, other=0)
        cumulative = carry + tl.associative_scan(counts, 1, ADD)
        below = (cumulative[:, None, :] <= u[:, :, None]) & live[:, None, :]
        index += tl.reduce(below.to(tl.int64), 2, ADD)
        carry += tl.reduce(counts, 1, ADD, keep_dims=True)
    inside = index < n
    global_id = tl.load(ids_ptr + start + index, mask=d_live & inside, other=-1)
    sparse = tl.load(sparse_ptr + row, mask=row_live, other=0)[:, None]
    token = tl.where(sparse != 0, global_id, index)
    tl.store(tokens_ptr + at, tl.where(inside, token, -1), mask=d_live)


def draws_per_program(n_draws: int) -> int:
    """Draws one program compares at once (a ``[ROWS, DRAWS, BLOCK]`` tile)."""
    cap = 128 if interpreting() else 16
    return min(cap, max(2, triton.next_power_of_2(n_draws)))


def sample_rows(q: QRows, draws: torch.Tensor) -> torch.Tensor:
    """Tokens ``[rows, n]`` (int64 global IDs, -1 for a draw beyond the row's total) of
    24-bit draws ``[rows, n]`` (int64), one row of draws per q row. No host round trip."""
    rows, n_draws = draws.shape
    tokens = torch.empty((rows, n_draws), dtype=torch.int64, device=draws.device)
    if rows == 0 or n_draws == 0:
        return tokens
    per = draws_per_program(n_draws)
    block, tile = row_tile(q.max_length, rows, per)
    block = min(block, MAX_TILE // per)
    categorical_kernel[(triton.cdiv(rows, tile), triton.cdiv(n_draws, per))](
        q.counts,
        q.ids,
        q.starts,
        q.lengths,
        q.sparse,
        draws.contiguous(),
        rows,
        n_draws,
        tokens,
        ROWS=tile,  # pyright: ignore[reportArgumentType]  # Triton: a plain int or bool fills a tl.constexpr parameter
        BLOCK=block,  # pyright: ignore[reportArgumentType]  # Triton: a plain int or bool fills a tl.constexpr parameter
        DRAWS=per,  # pyright: ignore[reportArgumentType]  # Triton: a plain int or bool fills a tl.constexpr parameter
        **LAUNCH,
    )
    return tokens


def sample(q: QRows, draws: torch.Tensor) -> torch.Tensor:
    """:func:`sample_rows`, refusing (WRONG_TOTAL_MASS) a draw that no token owns."""
    tokens = sample_rows(q, draws)
    if bool((tokens < 0).any()):
        raise TritonCandidateError("WRONG_TOTAL_MASS", "a draw is not below the row's total count")
    return tokens
