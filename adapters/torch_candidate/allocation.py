"""dyadic24 count allocation (R03, R06, R07) in FP64, batched over rows.

Dense rows (R06), for each row of FP32 weights ``w``:

* ``W = sum(w)`` in FP64 (torch's reduction order: the sum is rounded, not exact);
* ``quota_v = (w_v / W) * M`` in FP64, ``floor_v = floor(quota_v)``,
  ``remainder_v = quota_v - floor_v`` (exact in FP64);
* ``remaining = M - sum(floor)`` as an integer; the allocation is refused as
  INCONSISTENT_ALLOCATION unless ``0 <= remaining < M`` and ``remaining`` is at most
  the number of entries with a positive remainder (in exact arithmetic both always
  hold; an FP64 row that breaks them would have to clip or hand counts to entries
  whose quota is already whole);
* the ``remaining`` largest remainders get one extra count, ties to the lowest
  token ID (a stable descending sort of the remainders);
* the final sum must be exactly ``M``.

FP64 can disagree with the exact-rational largest remainder only where two
remainders (or a remainder and the cut) are within FP64 rounding of each other.

Sparse top-k (R07): select the global support first (the k largest weights, ties to
the lowest ID), normalize within the support, allocate ``M`` on it as above (with the
support in ascending ID order, so ties still go to the lowest global ID), and drop
zero-count entries from the canonical form.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .errors import CandidateError, refuse_where
from .weights import validate_weights

#: total dyadic mass
M: int = 1 << 24


#: rows at least this wide find their tickets by selection (one row at a time), narrower ones by a batched sort
SELECT_WIDTH: int = 1 << 12


def remainder_ranks(remainder: torch.Tensor) -> torch.Tensor:
    """Rank ``[N, V]`` (int64, 0 = first served) of each remainder in its row: largest first,
    ties to the lowest token ID (a stable descending sort)."""
    order = torch.sort(remainder, dim=1, descending=True, stable=True).indices
    rank = torch.empty_like(order)
    positions = torch.arange(order.shape[1], device=order.device).expand_as(order)
    return rank.scatter_(1, order, positions)


def served_by_selection(remainder: torch.Tensor, remaining: torch.Tensor) -> torch.Tensor:
    """The entries of rank below ``remaining`` (as :func:`remainder_ranks` ranks them), without a sort: the
    ``remaining``-th largest remainder of each row is the cut; every remainder above it is served, and of
    those equal to it the lowest IDs, as many as are left (the same set, integers only, in O(V) a row)."""
    served = torch.zeros(remainder.shape, dtype=torch.bool, device=remainder.device)
    width = remainder.shape[1]
    for row, take in enumerate(remaining.tolist()):
        if take <= 0:
            continue
        values = remainder[row]
        cut = torch.kthvalue(values, width - take + 1).values
        above = values > cut
        at_cut = values == cut
        left = take - int(above.sum())
        served[row] = above | (at_cut & (torch.cumsum(at_cut, 0) <= left))
    return served


def served_tickets(remainder: torch.Tensor, remaining: torch.Tensor) -> torch.Tensor:
    """Whether each entry ``[N, V]`` gets one of its row's ``remaining`` extra counts: the ``remaining``
    largest remainders, ties to the lowest token ID (R06). Wide rows (production vocabularies) by
    selection, narrow ones by the stable sort's ranks: both give the same set (tests/adapters/
    test_allocation_selection.py), selection in a fifth of the sort's time at V = 129280."""
    if remainder.shape[1] >= SELECT_WIDTH:
        return served_by_selection(remainder, remaining)
    return remainder_ranks(remainder) < remaining[:, None]


def largest_remainder_counts(weights: torch.Tensor) -> torch.Tensor:
    """int64 counts ``[N, V]`` summing to ``M`` per row, for validated weight rows ``[N, V]``."""
    w = weights.to(torch.float64)
    total = w.sum(dim=1, keepdim=True)
    quota = (w / total) * M
    floors = torch.floor(quota)
    remainder = quota - floors
    floors = floors.to(torch.int64)
    remaining = M - floors.sum(dim=1)
    fractional = (remainder > 0).sum(dim=1)
    refuse_where(
        (remaining < 0) | (remaining >= M) | (remaining > fractional),
        "INCONSISTENT_ALLOCATION",
        "FP64 remaining count out of range in row",
    )
    counts = floors + served_tickets(remainder, remaining).to(torch.int64)
    refuse_where(counts.sum(dim=1) != M, "INCONSISTENT_ALLOCATION", "final count sum in row")
    return counts


def allocate_dense(weights: torch.Tensor) -> torch.Tensor:
    """Dense dyadic24 counts (int64, same shape) of FP32 weight rows ``[..., V]`` (R05, R06)."""
    validate_weights(weights)
    flat = weights.reshape(-1, weights.shape[-1])
    return largest_remainder_counts(flat).reshape(weights.shape)


def top_k_support(weights: torch.Tensor, k: int) -> torch.Tensor:
    """IDs ``[N, k]`` (int64, ascending) of the k largest weights per row, ties to the lowest ID."""
    by_weight = torch.sort(weights, dim=1, descending=True, stable=True).indices[:, :k]
    return torch.sort(by_weight, dim=1).values


@dataclass(frozen=True)
class SparseCounts:
    """Sparse q rows: ``ids`` and ``counts`` of shape ``[..., n]`` (int64).

    Within a row the positive-count entries have strictly ascending, in-range IDs;
    entries with count 0 are padding (the allocation keeps its zero-count support
    entries in place; :meth:`canonical` drops them).
    """

    ids: torch.Tensor
    counts: torch.Tensor

    def to_dense(self, vocab: int) -> torch.Tensor:
        """Dense counts ``[..., vocab]`` (int64): zero everywhere outside the support."""
        shape = self.ids.shape[:-1] + (vocab,)
        dense = torch.zeros(shape, dtype=torch.int64, device=self.ids.device)
        live = self.counts > 0
        ids = torch.where(live, self.ids, torch.zeros_like(self.ids))
        return dense.scatter_add_(-1, ids, torch.where(live, self.counts, 0))

    def canonical(self) -> list:
        """Nested lists of ``(ids, counts)`` per row, zero-count entries dropped."""
        ids = self.ids.reshape(-1, self.ids.shape[-1]).tolist()
        counts = self.counts.reshape(-1, self.counts.shape[-1]).tolist()
        rows = [
            ([i for i, c in zip(r_ids, r_counts) if c > 0], [c for c in r_counts if c > 0])
            for r_ids, r_counts in zip(ids, counts)
        ]
        for size in reversed(self.ids.shape[:-1][1:]):
            rows = [rows[s : s + size] for s in range(0, len(rows), size)]
        return rows

    @staticmethod
    def from_rows(rows: list, device: torch.device | str = "cpu") -> "SparseCounts":
        """Pad canonical ``[B][K] -> (ids, counts)`` rows into ``[B, K, n]`` tensors (pad: id 0, count 0)."""
        width = max((len(ids) for request in rows for ids, _ in request), default=0)
        width = max(width, 1)
        ids_out, counts_out = [], []
        for request in rows:
            ids_out.append([list(ids) + [0] * (width - len(ids)) for ids, _ in request])
            counts_out.append([list(c) + [0] * (width - len(c)) for _, c in request])
        as_tensor = lambda x: torch.tensor(x, dtype=torch.int64, device=device)  # noqa: E731
        return SparseCounts(as_tensor(ids_out), as_tensor(counts_out))


def allocate_top_k(weights: torch.Tensor, k: int) -> SparseCounts:
    """Sparse top-k dyadic24 counts of FP32 weight rows ``[..., V]`` (R07).

    Returns ``SparseCounts`` of shape ``[..., k]``: ascending IDs of the support and
    their counts (zero-count support entries kept in place; see ``canonical()``).
    Refusals: EMPTY_ROW, those of the weights, then BAD_SUPPORT_SIZE (k not in 1..V): the row
    before the request on it (docs/formats/allocation_invalid.md, "Refusal precedence").
    """
    vocab = weights.shape[-1]
    if vocab == 0:
        raise CandidateError("EMPTY_ROW", "weight row has no entries")
    validate_weights(weights)
    if not 1 <= int(k) <= vocab:
        raise CandidateError("BAD_SUPPORT_SIZE", f"k={k} for a vocabulary of {vocab}")
    flat = weights.reshape(-1, vocab)
    ids = top_k_support(flat, int(k))
    counts = largest_remainder_counts(flat.gather(1, ids))
    shape = weights.shape[:-1] + (int(k),)
    return SparseCounts(ids.reshape(shape), counts.reshape(shape))
