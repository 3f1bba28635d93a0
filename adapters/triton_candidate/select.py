"""Deterministic top-R selection: the R largest 64-bit keys of a segment, ties to the lowest index.

Both places where the design picks "the largest, ties by lowest global token ID"
use it: the tickets of the largest-remainder allocation (R06; the keys are the
FP64 bit patterns of the remainders, which order like the remainders since they
are nonnegative) and the top-k support (R07, R30; the keys are the weights' FP64
bit patterns plus one). Nothing is sorted:

1. :func:`radix_select_kernel` finds the threshold key ``t`` (the R-th largest key)
   with an MSD radix select, one 256-bin ``tl.histogram`` pass per byte of the
   key, and ``need``: how many of the keys equal to ``t`` are still to be taken;
2. a consumer takes ``key > t``, and of the keys equal to ``t`` the first ``need``
   in index order (:func:`take_block`, an exclusive prefix count of the ties
   carried across blocks), so ties go to the lowest index exactly.

For R = 0 the threshold ends at 2^64 - 1 with ``need = 0`` and nothing is taken.
:func:`compact_kernel` writes the taken entries of each segment, in index order, to
an output segment: that is how the top-k support comes out in ascending ID order.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .launch import LAUNCH, block_for
from .reductions import ADD, MAX

#: bits of a selection key
KEY_BITS = 64


@triton.jit
def radix_select_kernel(
    keys_ptr, starts_ptr, lengths_ptr, want_ptr, thresh_ptr, need_ptr, KEY_BITS: tl.constexpr, BLOCK: tl.constexpr
):
    """Per segment: threshold key and tie count of its ``want`` largest keys (int64 storage)."""
    seg = tl.program_id(0)
    start = tl.load(starts_ptr + seg)
    n = tl.load(lengths_ptr + seg)
    need = tl.load(want_ptr + seg)
    prefix = tl.full((), 0, tl.uint64)
    bins = tl.arange(0, 256)
    for p in tl.static_range(KEY_BITS // 8):  # pyright: ignore[reportGeneralTypeIssues]  # Triton: tl.static_range is unrolled at compile time, typed as not iterable
        shift = KEY_BITS - 8 * (p + 1)  # a compile-time value: the loop is unrolled
        hist = tl.full([256], 0, tl.int32)
        for off in range(0, n, BLOCK):
            i = off + tl.arange(0, BLOCK)
            live = i < n
            key = tl.load(keys_ptr + start + i, mask=live, other=0).to(tl.uint64, bitcast=True)
            if p == 0:
                match = live
            else:
                match = live & ((key >> (shift + 8)) == (prefix >> (shift + 8)))
            digit = ((key >> shift) & 255).to(tl.int32)
            hist += tl.histogram(digit, 256, mask=match)
        count = hist.to(tl.int64)
        at_least = tl.reduce(count, 0, ADD) - tl.associative_scan(count, 0, ADD) + count  # keys whose digit is >= b
        chosen = tl.reduce(tl.where(at_least >= need, bins, 0), 0, MAX)
        above = tl.reduce(tl.where(bins == chosen, at_least - count, 0), 0, ADD)
        need = need - above
        prefix = prefix | (chosen.to(tl.uint64) << shift)
    tl.store(thresh_ptr + seg, prefix.to(tl.int64, bitcast=True))
    tl.store(need_ptr + seg, need)


@triton.jit
def selection(seg, starts_ptr, lengths_ptr, thresh_ptr, need_ptr):
    """(start, length, threshold key, ties still to take) of segment ``seg``."""
    thresh = tl.load(thresh_ptr + seg).to(tl.uint64, bitcast=True)
    return tl.load(starts_ptr + seg), tl.load(lengths_ptr + seg), thresh, tl.load(need_ptr + seg)


@triton.jit
def take_block(keys_ptr, at, live, thresh, need, ties_before):
    """(raw keys, which are selected, running tie count) of the block of keys at ``at``."""
    raw = tl.load(keys_ptr + at, mask=live, other=0)
    key = raw.to(tl.uint64, bitcast=True)
    tie = live & (key == thresh)
    ties = tie.to(tl.int64)
    rank = ties_before + tl.associative_scan(ties, 0, ADD) - ties
    taken = (live & (key > thresh)) | (tie & (rank < need))
    return raw, taken, ties_before + tl.reduce(ties, 0, ADD)


@triton.jit
def compact_kernel(
    keys_ptr,
    ids_ptr,
    starts_ptr,
    lengths_ptr,
    id_base_ptr,
    thresh_ptr,
    need_ptr,
    want_ptr,
    out_starts_ptr,
    out_keys_ptr,
    out_ids_ptr,
    HAS_IDS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Write the selected entries of each segment (key, global ID), in index order; never
    more than the segment's ``want`` slots, whatever the selection says."""
    seg = tl.program_id(0)
    start, n, thresh, need = selection(seg, starts_ptr, lengths_ptr, thresh_ptr, need_ptr)
    want = tl.load(want_ptr + seg)
    out = tl.load(out_starts_ptr + seg)
    id_base = tl.load(id_base_ptr + seg)
    ties = tl.full((), 0, tl.int64)
    written = tl.full((), 0, tl.int64)
    for off in range(0, n, BLOCK):
        i = off + tl.arange(0, BLOCK)
        raw, taken, ties = take_block(keys_ptr, start + i, i < n, thresh, need, ties)
        step = taken.to(tl.int64)
        rank = written + tl.associative_scan(step, 0, ADD) - step
        taken = taken & (rank < want)
        slot = out + rank
        if HAS_IDS:
            gid = tl.load(ids_ptr + start + i, mask=taken, other=0)
        else:
            gid = id_base + i
        tl.store(out_keys_ptr + slot, raw, mask=taken)
        tl.store(out_ids_ptr + slot, gid, mask=taken)
        written += tl.reduce(step, 0, ADD)


def radix_select(
    keys: torch.Tensor, starts: torch.Tensor, lengths: torch.Tensor, want: torch.Tensor, max_length: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(threshold keys, tie counts) of the ``want`` largest keys of each segment of ``keys``
    (int64 storage of uint64 keys); ``0 <= want <= length <= max_length`` is the caller's
    invariant."""
    segs = starts.numel()
    thresh = torch.empty(segs, dtype=torch.int64, device=keys.device)
    need = torch.empty(segs, dtype=torch.int64, device=keys.device)
    block = block_for(max_length)
    radix_select_kernel[(segs,)](keys, starts, lengths, want, thresh, need, KEY_BITS=KEY_BITS, BLOCK=block, **LAUNCH)  # pyright: ignore[reportArgumentType]  # Triton: a plain int or bool fills a tl.constexpr parameter
    return thresh, need


def select_compact(
    keys: torch.Tensor,
    ids: torch.Tensor | None,
    starts: torch.Tensor,
    lengths: torch.Tensor,
    max_length: int,
    id_base: torch.Tensor,
    want: torch.Tensor,
    out_starts: torch.Tensor,
    out_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``want`` largest keys of each segment and their global IDs (``ids``, or
    ``id_base + index`` when None), compacted in index order at ``out_starts``."""
    thresh, need = radix_select(keys, starts, lengths, want, max_length)
    out_keys = torch.zeros(out_size, dtype=torch.int64, device=keys.device)
    out_ids = torch.zeros(out_size, dtype=torch.int64, device=keys.device)
    block = block_for(max_length)
    compact_kernel[(starts.numel(),)](
        keys,
        keys if ids is None else ids,
        starts,
        lengths,
        id_base,
        thresh,
        need,
        want,
        out_starts,
        out_keys,
        out_ids,
        HAS_IDS=ids is not None,  # pyright: ignore[reportArgumentType]  # Triton: a plain int or bool fills a tl.constexpr parameter
        BLOCK=block,  # pyright: ignore[reportArgumentType]  # Triton: a plain int or bool fills a tl.constexpr parameter
        **LAUNCH,
    )
    return out_keys, out_ids
