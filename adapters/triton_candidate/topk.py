"""Sparse top-k support (R07) as shard-local top-k plus the global top-k merge (R30).

The vocabulary of each row is cut into shards of consecutive global IDs (on one
device they stand in for the TP ranks' vocabulary shards). Every weight gets a key,
its FP64 bit pattern (-0.0 first made +0.0), which orders like the weight since the
weights are validated nonnegative. Then:

1. per shard, the ``min(k, shard size)`` largest keys, ties to the lowest ID, are
   written in ascending global ID order (``select.select_compact``): the shard's
   candidates;
2. :func:`merge_top_k`: the candidates of all shards of a row, concatenated in shard
   order (so in ascending global ID order), go through the same selection with
   ``want = k``. A global top-k member is in its shard's top-k, so this is exactly
   the global top-k, ties to the lowest global ID, and it comes out ascending.

Weights compare exactly as keys, so the support is exact; only the allocation on it
(FP64) can differ from the exact rule at a near-tie.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .launch import LAUNCH, block_for, interpreting, segments
from .select import select_compact

#: shard width on CUDA and under the interpreter
GPU_SHARD = 4096
INTERPRETER_SHARD = 1 << 15


@triton.jit(do_not_specialize=["V"])
def weight_keys_kernel(w_ptr, keys_ptr, V, BLOCK: tl.constexpr):
    """Row ``r``: keys ``bits(f64(w))`` of validated nonnegative weights (-0.0 as +0.0)."""
    row = tl.program_id(0)
    for off in range(0, V, BLOCK):
        v = off + tl.arange(0, BLOCK)
        live = v < V
        w = tl.load(w_ptr + row * V + v, mask=live, other=0.0).to(tl.float64)
        w = tl.where(w == 0, 0.0, w)
        tl.store(keys_ptr + row * V + v, w.to(tl.int64, bitcast=True), mask=live)


@triton.jit(do_not_specialize=["n"])
def key_weights_kernel(keys_ptr, w_ptr, n, BLOCK: tl.constexpr):
    """The FP64 weights of selection keys (the inverse of ``weight_keys_kernel``)."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = i < n
    key = tl.load(keys_ptr + i, mask=live, other=0)
    tl.store(w_ptr + i, key.to(tl.float64, bitcast=True), mask=live)


def shard_width(vocab: int) -> int:
    """Vocabulary shard width of the local top-k stage."""
    return min(vocab, INTERPRETER_SHARD if interpreting() else GPU_SHARD)


def shard_top_k(keys: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Per row of keys ``[R, V]``: every shard's local top-k, in ascending global ID order.

    Returns (candidate keys ``[R * C]``, their global IDs, C = candidates per row).
    """
    rows, vocab = keys.shape
    width = shard_width(vocab)
    shards = triton.cdiv(vocab, width)
    lengths = [min(width, vocab - s * width) for s in range(shards)]
    wants = [min(k, n) for n in lengths]
    per_row = sum(wants)
    starts, lengths_t = segments(
        [r * vocab + s * width for r in range(rows) for s in range(shards)], lengths * rows, keys.device
    )
    id_base = torch.tensor(
        [s * width for _ in range(rows) for s in range(shards)], dtype=torch.int64, device=keys.device
    )
    want = torch.tensor(wants * rows, dtype=torch.int64, device=keys.device)
    out_starts = torch.tensor(
        [r * per_row + sum(wants[:s]) for r in range(rows) for s in range(shards)],
        dtype=torch.int64,
        device=keys.device,
    )
    cand_keys, cand_ids = select_compact(
        keys, None, starts, lengths_t, width, id_base, want, out_starts, rows * per_row
    )
    return cand_keys, cand_ids, per_row


def merge_top_k(
    cand_keys: torch.Tensor, cand_ids: torch.Tensor, per_row: int, rows: int, k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The global top-k merge (R30): (keys, IDs) ``[R, k]`` in ascending ID order from the
    shard candidates (``per_row`` per row, ascending global IDs)."""
    device = cand_keys.device
    starts, lengths = segments([r * per_row for r in range(rows)], [per_row] * rows, device)
    want = torch.full((rows,), k, dtype=torch.int64, device=device)
    out_starts = torch.arange(rows, dtype=torch.int64, device=device) * k
    keys, ids = select_compact(
        cand_keys, cand_ids, starts, lengths, per_row, torch.zeros_like(want), want, out_starts, rows * k
    )
    return keys.reshape(rows, k), ids.reshape(rows, k)


def top_k_support(weights: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(support IDs int64 ``[R, k]`` ascending, their FP64 weights ``[R, k]``) of validated
    weight rows ``[R, V]`` (FP32 or FP64) with 1 <= k <= V."""
    rows, vocab = weights.shape
    keys = torch.empty((rows, vocab), dtype=torch.int64, device=weights.device)
    weight_keys_kernel[(rows,)](weights.contiguous(), keys, vocab, BLOCK=block_for(vocab), **LAUNCH)  # pyright: ignore[reportArgumentType]  # Triton: a plain int or bool fills a tl.constexpr parameter
    cand_keys, cand_ids, per_row = shard_top_k(keys, k)
    top_keys, ids = merge_top_k(cand_keys, cand_ids, per_row, rows, k)
    support_weights = torch.empty((rows, k), dtype=torch.float64, device=weights.device)
    block = block_for(rows * k)
    key_weights_kernel[(triton.cdiv(rows * k, block),)](top_keys, support_weights, rows * k, BLOCK=block, **LAUNCH)  # pyright: ignore[reportArgumentType]  # Triton: a plain int or bool fills a tl.constexpr parameter
    return ids, support_weights
