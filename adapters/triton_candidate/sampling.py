"""The integer categorical proposal (R08): a 24-bit draw over exact cumulative counts.

The token is the first ``v`` whose cumulative count ``C_v`` is strictly greater than
the draw ``u``. Counts are int64 and nonnegative, so ``C`` is nondecreasing and the
index of that token is exactly the number of ``v`` with ``C_v <= u``:
:func:`categorical_kernel` counts them block by block (an int64 prefix sum carried
across blocks, compared against a block of draws at once). Everything is integer:
the draw samples q exactly. For a sparse row the index is mapped to its global ID.
A draw at or above the row's total (an illegal row) gives -1.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .errors import TritonCandidateError
from .launch import LAUNCH, block_for, interpreting
from .qrows import QRows
from .reductions import ADD

#: elements of one ``[DRAWS, BLOCK]`` comparison tile (Triton's tensor limit is 2^20)
MAX_TILE = 1 << 20 if interpreting() else 1 << 14


@triton.jit(do_not_specialize=["n_draws"])
def categorical_kernel(
    counts_ptr,
    ids_ptr,
    starts_ptr,
    lengths_ptr,
    sparse_ptr,
    draws_ptr,
    n_draws,
    tokens_ptr,
    BLOCK: tl.constexpr,
    DRAWS: tl.constexpr,
):
    """Row ``r``, draws ``draws[r, :]``: tokens ``[r, :]`` (global IDs, or -1 beyond the total)."""
    row = tl.program_id(0)
    d = tl.program_id(1) * DRAWS + tl.arange(0, DRAWS)
    d_live = d < n_draws
    u = tl.load(draws_ptr + row * n_draws + d, mask=d_live, other=0)
    start = tl.load(starts_ptr + row)
    n = tl.load(lengths_ptr + row)
    index = tl.full([DRAWS], 0, tl.int64)
    carry = tl.full((), 0, tl.int64)
    for off in range(0, n, BLOCK):
        i = off + tl.arange(0, BLOCK)
        live = i < n
        counts = tl.load(counts_ptr + start + i, mask=live, other=0)
        cumulative = carry + tl.associative_scan(counts, 0, ADD)
        below = (cumulative[None, :] <= u[:, None]) & live[None, :]
        index += tl.reduce(below.to(tl.int64), 1, ADD)
        carry += tl.reduce(counts, 0, ADD)
    inside = index < n
    global_id = tl.load(ids_ptr + start + index, mask=d_live & inside, other=-1)
    token = tl.where(tl.load(sparse_ptr + row) != 0, global_id, index)
    tl.store(tokens_ptr + row * n_draws + d, tl.where(inside, token, -1), mask=d_live)


def draws_per_program(n_draws: int) -> int:
    """Draws one program compares at once (a ``[DRAWS, BLOCK]`` tile)."""
    cap = 128 if interpreting() else 16
    return min(cap, max(2, triton.next_power_of_2(n_draws)))


def sample_rows(q: QRows, draws: torch.Tensor) -> torch.Tensor:
    """Tokens ``[rows, n]`` (int64 global IDs, -1 for a draw beyond the row's total) of
    24-bit draws ``[rows, n]`` (int64), one row of draws per q row. No host round trip."""
    rows, n_draws = draws.shape
    tokens = torch.empty((rows, n_draws), dtype=torch.int64, device=draws.device)
    per = draws_per_program(n_draws)
    block = min(block_for(q.max_length), MAX_TILE // per)
    categorical_kernel[(rows, triton.cdiv(n_draws, per))](
        q.counts,
        q.ids,
        q.starts,
        q.lengths,
        q.sparse,
        draws.contiguous(),
        n_draws,
        tokens,
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
