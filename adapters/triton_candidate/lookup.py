"""Sparse q lookup by global ID (R04, R07, R33): the count ``c_v`` of any token of a q row.

A dense row is indexed directly. A sparse row holds strictly ascending global IDs,
so :func:`sparse_count` binary-searches them (a fixed number of steps, every query
of a block in parallel); a token outside the support has count 0 (R04). The
residual kernel uses the same helper for every token of the vocabulary (R33: the
residual covers tokens outside the sparse support); :func:`q_lookup_kernel` answers
a list of (row, token) queries, e.g. the drafted tokens of a round, and flags a
token outside [0, V).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .errors import TOKEN_OUT_OF_RANGE
from .launch import LAUNCH, interpreting
from .qrows import QRows

#: queries per program (the interpreter pays per operation: thousands at once)
QUERY_BLOCK = 1 << 14 if interpreting() else 128


@triton.jit
def sparse_count(ids_ptr, counts_ptr, start, length, query, STEPS: tl.constexpr):
    """Counts at global IDs ``query`` in the sparse rows at ``start`` (0 outside the support)."""
    lo = query * 0
    hi = lo + length
    for _ in tl.static_range(STEPS):  # pyright: ignore[reportGeneralTypeIssues]  # Triton: tl.static_range is unrolled at compile time, typed as not iterable
        active = lo < hi
        mid = (lo + hi) // 2
        at = tl.load(ids_ptr + start + mid, mask=active, other=0)
        right = active & (at < query)
        lo = tl.where(right, mid + 1, lo)
        hi = tl.where(active & (at >= query), mid, hi)
    found = lo < length
    at = tl.load(ids_ptr + start + lo, mask=found, other=-1)
    hit = found & (at == query)
    return tl.load(counts_ptr + start + lo, mask=hit, other=0)


@triton.jit
def q_count(counts_ptr, ids_ptr, start, length, sparse, query, STEPS: tl.constexpr):
    """Counts at tokens ``query`` of dense (``sparse == 0``) or sparse rows; 0 outside [0, V)."""
    dense = (sparse + query * 0) == 0  # shaped like the queries (a scalar mask breaks the interpreter)
    direct = tl.load(counts_ptr + start + query, mask=dense & (query >= 0) & (query < length), other=0)
    searched = sparse_count(ids_ptr, counts_ptr, start, tl.where(dense, 0, length), query, STEPS)
    return tl.where(dense, direct, searched)


@triton.jit(do_not_specialize=["vocab", "n"])
def q_lookup_kernel(
    counts_ptr,
    ids_ptr,
    starts_ptr,
    lengths_ptr,
    sparse_ptr,
    rows_ptr,
    tokens_ptr,
    vocab,
    out_ptr,
    flags_ptr,
    n,
    STEPS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Query ``i``: ``out[i]`` = count of token ``tokens[i]`` in q row ``rows[i]``."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = i < n
    row = tl.load(rows_ptr + i, mask=live, other=0)
    token = tl.load(tokens_ptr + i, mask=live, other=0)
    start = tl.load(starts_ptr + row, mask=live, other=0)
    length = tl.load(lengths_ptr + row, mask=live, other=0)
    sparse = tl.load(sparse_ptr + row, mask=live, other=0)
    count = q_count(counts_ptr, ids_ptr, start, length, sparse, token, STEPS)
    tl.store(out_ptr + i, count, mask=live)
    tl.store(flags_ptr + i, tl.where((token < 0) | (token >= vocab), TOKEN_OUT_OF_RANGE, 0), mask=live)


def lookup_counts(q: QRows, rows: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(int64 counts, int32 flags) of the tokens ``tokens[i]`` in q rows ``rows[i]``."""
    n = tokens.numel()
    out = torch.empty(n, dtype=torch.int64, device=tokens.device)
    flags = torch.zeros(n, dtype=torch.int32, device=tokens.device)
    if n:
        q_lookup_kernel[(triton.cdiv(n, QUERY_BLOCK),)](
            q.counts,
            q.ids,
            q.starts,
            q.lengths,
            q.sparse,
            rows.contiguous(),
            tokens.contiguous(),
            q.vocab,
            out,
            flags,
            n,
            STEPS=q.lookup_steps(),  # pyright: ignore[reportArgumentType]  # Triton: a plain int or bool fills a tl.constexpr parameter
            BLOCK=QUERY_BLOCK,  # pyright: ignore[reportArgumentType]  # Triton: a plain int or bool fills a tl.constexpr parameter
            **LAUNCH,
        )
    return out, flags
