"""dyadic24 q rows on the device: a ragged table of dense and sparse rows (R03, R07, R19).

Row ``r`` lives at ``starts[r] .. starts[r] + lengths[r]`` of the flat int64 ``counts``
(and, for a sparse row, of ``ids``: its global IDs). A dense row has ``lengths[r] = V``
and its ``ids`` entries are unused. :func:`qrow_check_kernel` refuses a row that is not
legal, in the order of docs/formats/categorical_sampling.md ("Refusal precedence"), each
class over the whole row: any sparse ID outside [0, V) (TOKEN_OUT_OF_RANGE), then any ID
not above the previous one or zero count (BAD_SPARSE_SUPPORT); then the total, which must
be exactly M (WRONG_TOTAL_MASS).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .allocation import M_INT
from .errors import BAD_SPARSE_SUPPORT, TOKEN_OUT_OF_RANGE, WRONG_TOTAL_MASS, TritonCandidateError, raise_flags
from .launch import LAUNCH, row_tile
from .reductions import ADD, MAX, MIN


@triton.jit(do_not_specialize=["vocab", "n_rows"])
def qrow_check_kernel(
    counts_ptr,
    ids_ptr,
    starts_ptr,
    lengths_ptr,
    sparse_ptr,
    vocab,
    n_rows,
    flags_ptr,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Rows ``r`` of the program's tile: the refusal flag of the first problem of each row
    (see the module docstring)."""
    row = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    row_live = row < n_rows
    start = tl.load(starts_ptr + row, mask=row_live, other=0)[:, None]
    length = tl.load(lengths_ptr + row, mask=row_live, other=0)
    n = length[:, None]
    sparse = tl.load(sparse_ptr + row, mask=row_live, other=0)[:, None] != 0
    out_of_range = tl.full([ROWS, BLOCK], 0, tl.int64) + n
    unordered = tl.full([ROWS, BLOCK], 0, tl.int64) + n
    total = tl.full([ROWS], 0, tl.int64)
    for off in range(0, tl.reduce(length, 0, MAX), BLOCK):  # pyright: ignore[reportArgumentType]  # Triton: tl.reduce returns a tensor here, typed as possibly a tuple
        i = off + tl.arange(0, BLOCK)[None, :]
        live = i < n
        counts = tl.load(counts_ptr + start + i, mask=live, other=0)
        total += tl.reduce(counts, 1, ADD)
        check = live & sparse
        token = tl.load(ids_ptr + start + i, mask=check, other=0)
        previous = tl.load(ids_ptr + start + i - 1, mask=check & (i > 0), other=-1)
        out_of_range = tl.minimum(out_of_range, tl.where(check & ((token < 0) | (token >= vocab)), i, n))
        bad = check & ((token <= previous) | (counts == 0))
        unordered = tl.minimum(unordered, tl.where(bad, i, n))
    first_range = tl.reduce(out_of_range, 1, MIN)
    first_order = tl.reduce(unordered, 1, MIN)
    flags = tl.where(
        first_range < length,
        TOKEN_OUT_OF_RANGE,
        tl.where(first_order < length, BAD_SPARSE_SUPPORT, 0),  # pyright: ignore[reportOperatorIssue]  # Triton: tl.reduce returns a tensor here, typed as possibly a tuple
    )
    flags = tl.where(flags == 0, tl.where(total == M_INT, 0, WRONG_TOTAL_MASS), flags)
    tl.store(flags_ptr + row, flags, mask=row_live)


@dataclass(frozen=True)
class QRows:
    """A ragged table of q rows over one vocabulary (see the module docstring)."""

    vocab: int
    counts: torch.Tensor
    ids: torch.Tensor
    starts: torch.Tensor
    lengths: torch.Tensor
    sparse: torch.Tensor
    max_length: int
    max_sparse_length: int

    @property
    def rows(self) -> int:
        return self.starts.numel()

    @staticmethod
    def build(vocab: int, rows: list[tuple[torch.Tensor | None, torch.Tensor]], device: torch.device | str) -> "QRows":
        """From ``(ids or None for dense, counts)`` rows of int64 tensors; BAD_SHAPE when a
        dense row does not have V counts or a sparse row has unequal IDs and counts."""
        starts, lengths, sparse, flat_counts, flat_ids = [], [], [], [], []
        at = 0
        for ids, counts in rows:
            if ids is None and counts.numel() != vocab:
                raise TritonCandidateError("BAD_SHAPE", f"dense q row has {counts.numel()} counts for V = {vocab}")
            if ids is not None and ids.numel() != counts.numel():
                raise TritonCandidateError("BAD_SHAPE", "sparse q row has unequal ids and counts")
            starts.append(at)
            lengths.append(counts.numel())
            sparse.append(0 if ids is None else 1)
            flat_counts.append(counts.reshape(-1))
            flat_ids.append(torch.full_like(counts.reshape(-1), -1) if ids is None else ids.reshape(-1))
            at += counts.numel()
        as_tensor = lambda values: torch.tensor(values, dtype=torch.int64, device=device)  # noqa: E731
        empty = torch.zeros(1, dtype=torch.int64)
        return QRows(
            vocab,
            torch.cat(flat_counts + [empty]).to(device),
            torch.cat(flat_ids + [empty]).to(device),
            as_tensor(starts),
            as_tensor(lengths),
            as_tensor(sparse),
            max(lengths + [1]),
            max([n for n, s in zip(lengths, sparse) if s] + [0]),
        )

    @staticmethod
    def of_segments(vocab: int, counts: torch.Tensor, ids: torch.Tensor | None, rows: int, length: int) -> "QRows":
        """``rows`` contiguous rows of ``length`` entries: dense (``ids`` None) or sparse."""
        device = counts.device
        starts = torch.arange(rows, dtype=torch.int64, device=device) * length
        return QRows(
            vocab,
            counts.reshape(-1),
            counts.reshape(-1) if ids is None else ids.reshape(-1),
            starts,
            torch.full((rows,), length, dtype=torch.int64, device=device),
            torch.full((rows,), 0 if ids is None else 1, dtype=torch.int64, device=device),
            length,
            0 if ids is None else length,
        )

    def flags(self) -> torch.Tensor:
        """int32 refusal flags ``[rows]`` (R03, R07, R19)."""
        flags = torch.zeros(self.rows, dtype=torch.int32, device=self.counts.device)
        if self.rows:
            block, tile = row_tile(self.max_length, self.rows)
            qrow_check_kernel[(triton.cdiv(self.rows, tile),)](
                self.counts,
                self.ids,
                self.starts,
                self.lengths,
                self.sparse,
                self.vocab,
                self.rows,
                flags,
                ROWS=tile,  # pyright: ignore[reportArgumentType]  # Triton: a plain int or bool fills a tl.constexpr parameter
                BLOCK=block,  # pyright: ignore[reportArgumentType]  # Triton: a plain int or bool fills a tl.constexpr parameter
                **LAUNCH,
            )
        return flags

    def check(self) -> None:
        """Refuse the first illegal row."""
        raise_flags(self.flags(), "q row")

    def lookup_steps(self) -> int:
        """Binary search steps that cover the longest sparse row (dense rows are indexed)."""
        return max(1, (self.max_sparse_length + 1).bit_length())
