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

from .launch import LAUNCH, row_tile
from .reductions import ADD, MAX

#: bits of a selection key
KEY_BITS = 64


@triton.jit(do_not_specialize=["n_segs"])
def radix_select_kernel(
    keys_ptr,
    starts_ptr,
    lengths_ptr,
    want_ptr,
    n_segs,
    thresh_ptr,
    need_ptr,
    KEY_BITS: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Per segment of the program's tile: threshold key and tie count of its ``want`` largest
    keys (int64 storage). The tile's ``ROWS`` histograms are one histogram of ``ROWS * 256``
    bins (segment ``s`` owns bins ``256 s ..``)."""
    seg = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    seg_live = seg < n_segs
    start = tl.load(starts_ptr + seg, mask=seg_live, other=0)[:, None]
    length = tl.load(lengths_ptr + seg, mask=seg_live, other=0)
    n = length[:, None]
    need = tl.load(want_ptr + seg, mask=seg_live, other=0)
    prefix = tl.full([ROWS], 0, tl.uint64)
    bins = tl.arange(0, 256)[None, :]
    own = tl.arange(0, ROWS)[:, None] * 256  # the segment's first bin
    for p in tl.static_range(KEY_BITS // 8):  # pyright: ignore[reportGeneralTypeIssues]  # Triton: tl.static_range is unrolled at compile time, typed as not iterable
        shift = KEY_BITS - 8 * (p + 1)  # a compile-time value: the loop is unrolled
        hist = tl.full([ROWS * 256], 0, tl.int32)
        for off in range(0, tl.reduce(length, 0, MAX), BLOCK):  # pyright: ignore[reportArgumentType]  # Triton: tl.reduce returns a tensor here, typed as possibly a tuple
            i = off + tl.arange(0, BLOCK)[None, :]
            live = i < n
            key = tl.load(keys_ptr + start + i, mask=live, other=0).to(tl.uint64, bitcast=True)
            if p == 0:
                match = live
            else:
                match = live & ((key >> (shift + 8)) == (prefix[:, None] >> (shift + 8)))
            digit = ((key >> shift) & 255).to(tl.int32) + own
            hist += tl.histogram(tl.reshape(digit, [ROWS * BLOCK]), ROWS * 256, mask=tl.reshape(match, [ROWS * BLOCK]))
        count = tl.reshape(hist, [ROWS, 256]).to(tl.int64)
        at_least = tl.reduce(count, 1, ADD, keep_dims=True) - tl.associative_scan(count, 1, ADD) + count  # digit >= b
        chosen = tl.reduce(tl.where(at_least >= need[:, None], bins, 0), 1, MAX)
        above = tl.reduce(tl.where(bins == chosen[:, None], at_least - count, 0), 1, ADD)  # pyright: ignore[reportArgumentType]  # Triton: a [:, None] index of a tl.reduce result, typed as possibly a tuple
        need = need - above
        prefix = prefix | (chosen.to(tl.uint64) << shift)
    tl.store(thresh_ptr + seg, prefix.to(tl.int64, bitcast=True), mask=seg_live)
    tl.store(need_ptr + seg, need, mask=seg_live)


@triton.jit
def selection(seg, seg_live, starts_ptr, lengths_ptr, thresh_ptr, need_ptr):
    """(start, length, threshold key, ties still to take) of segments ``seg`` (a vector)."""
    thresh = tl.load(thresh_ptr + seg, mask=seg_live, other=0).to(tl.uint64, bitcast=True)
    start = tl.load(starts_ptr + seg, mask=seg_live, other=0)
    length = tl.load(lengths_ptr + seg, mask=seg_live, other=0)
    return start, length, thresh, tl.load(need_ptr + seg, mask=seg_live, other=0)


@triton.jit
def take_block(keys_ptr, at, live, thresh, need, ties_before):
    """(raw keys, which are selected, running tie counts) of a ``[ROWS, BLOCK]`` block of keys
    at ``at``, one segment per row (``thresh``, ``need``, ``ties_before``: ``[ROWS]``)."""
    raw = tl.load(keys_ptr + at, mask=live, other=0)
    key = raw.to(tl.uint64, bitcast=True)
    tie = live & (key == thresh[:, None])
    ties = tie.to(tl.int64)
    rank = ties_before[:, None] + tl.associative_scan(ties, 1, ADD) - ties
    taken = (live & (key > thresh[:, None])) | (tie & (rank < need[:, None]))
    return raw, taken, ties_before + tl.reduce(ties, 1, ADD)


@triton.jit(do_not_specialize=["n_segs"])
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
    n_segs,
    out_keys_ptr,
    out_ids_ptr,
    HAS_IDS: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Write the selected entries of each segment of the tile (key, global ID), in index
    order; never more than the segment's ``want`` slots, whatever the selection says."""
    seg = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    seg_live = seg < n_segs
    start, length, thresh, need = selection(seg, seg_live, starts_ptr, lengths_ptr, thresh_ptr, need_ptr)
    want = tl.load(want_ptr + seg, mask=seg_live, other=0)[:, None]
    out = tl.load(out_starts_ptr + seg, mask=seg_live, other=0)[:, None]
    id_base = tl.load(id_base_ptr + seg, mask=seg_live, other=0)[:, None]
    ties = tl.full([ROWS], 0, tl.int64)
    written = tl.full([ROWS, 1], 0, tl.int64)
    for off in range(0, tl.reduce(length, 0, MAX), BLOCK):  # pyright: ignore[reportArgumentType]  # Triton: tl.reduce returns a tensor here, typed as possibly a tuple
        i = off + tl.arange(0, BLOCK)[None, :]
        raw, taken, ties = take_block(keys_ptr, start[:, None] + i, i < length[:, None], thresh, need, ties)
        step = taken.to(tl.int64)
        rank = written + tl.associative_scan(step, 1, ADD) - step
        taken = taken & (rank < want)
        slot = out + rank
        if HAS_IDS:
            # every live ID is read, as take_block reads every live key: masked by ``taken``,
            # Triton 3.6 fails to compile small tiles (docs/triton.md, "Native CUDA")
            gid = tl.load(ids_ptr + start[:, None] + i, mask=i < length[:, None], other=0)
        else:
            gid = id_base + i
        tl.store(out_keys_ptr + slot, raw, mask=taken)
        tl.store(out_ids_ptr + slot, gid, mask=taken)
        written += tl.reduce(step, 1, ADD, keep_dims=True)


def radix_select(
    keys: torch.Tensor, starts: torch.Tensor, lengths: torch.Tensor, want: torch.Tensor, max_length: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(threshold keys, tie counts) of the ``want`` largest keys of each segment of ``keys``
    (int64 storage of uint64 keys); ``0 <= want <= length <= max_length`` is the caller's
    invariant."""
    segs = starts.numel()
    thresh = torch.empty(segs, dtype=torch.int64, device=keys.device)
    need = torch.empty(segs, dtype=torch.int64, device=keys.device)
    if segs == 0:
        return thresh, need
    block, _ = row_tile(max_length, 1)
    _, tile = row_tile(max_length, segs, max(1, 256 // block))  # each segment also has 256 bins
    radix_select_kernel[(triton.cdiv(segs, tile),)](
        keys,
        starts,
        lengths,
        want,
        segs,
        thresh,
        need,
        KEY_BITS=KEY_BITS,  # pyright: ignore[reportArgumentType]  # Triton: a plain int or bool fills a tl.constexpr parameter
        ROWS=tile,  # pyright: ignore[reportArgumentType]  # Triton: a plain int or bool fills a tl.constexpr parameter
        BLOCK=block,  # pyright: ignore[reportArgumentType]  # Triton: a plain int or bool fills a tl.constexpr parameter
        **LAUNCH,
    )
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
    segs = starts.numel()
    if segs == 0:
        return out_keys, out_ids
    block, tile = row_tile(max_length, segs)
    compact_kernel[(triton.cdiv(segs, tile),)](
        keys,
        keys if ids is None else ids,
        starts,
        lengths,
        id_base,
        thresh,
        need,
        want,
        out_starts,
        segs,
        out_keys,
        out_ids,
        HAS_IDS=ids is not None,  # pyright: ignore[reportArgumentType]  # Triton: a plain int or bool fills a tl.constexpr parameter
        ROWS=tile,  # pyright: ignore[reportArgumentType]  # Triton: a plain int or bool fills a tl.constexpr parameter
        BLOCK=block,  # pyright: ignore[reportArgumentType]  # Triton: a plain int or bool fills a tl.constexpr parameter
        **LAUNCH,
    )
    return out_keys, out_ids
