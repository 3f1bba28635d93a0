"""The torch candidate's tickets by selection (wide rows) are the tickets of the stable sort's ranks.

``allocation.served_tickets`` serves a row at least ``SELECT_WIDTH`` wide by
selection (a cut at the ``remaining``-th largest remainder, ties at the cut to the
lowest IDs) instead of ranking the whole row with a stable sort (issue #25: the
sort was most of a dense soak round at V = 129280). Both must give the same set
on every row: here on seeded rows with and without exact ties, at the cut and
away from it, for every ``remaining`` from 0 to the positive remainders, and
through the whole allocation at production vocabulary.
"""

from __future__ import annotations

import pytest
import torch

from qconform.adapters.torch_candidate import allocation
from qconform.adapters.torch_candidate.allocation import (
    SELECT_WIDTH,
    allocate_dense,
    remainder_ranks,
    served_by_selection,
    served_tickets,
)


def by_ranks(remainder: torch.Tensor, remaining: torch.Tensor) -> torch.Tensor:
    """The tickets as the candidate served them before selection: rank below ``remaining``."""
    return remainder_ranks(remainder) < remaining[:, None]


def remainder_rows(seed: int, width: int) -> torch.Tensor:
    """Rows of FP64 remainders in [0, 1): random, quantized to a few values (long runs of exact ties),
    all equal, and half zeros."""
    generator = torch.Generator().manual_seed(seed)
    random = torch.rand((1, width), generator=generator, dtype=torch.float64)
    coarse = torch.floor(torch.rand((1, width), generator=generator, dtype=torch.float64) * 7) / 8
    equal = torch.full((1, width), 0.5, dtype=torch.float64)
    halves = torch.where(torch.rand((1, width), generator=generator) < 0.5, 0.0, random)
    return torch.cat([random, coarse, equal, halves])


@pytest.mark.parametrize("seed", range(6))
def test_selection_serves_the_ranks_tickets(seed):
    rows = remainder_rows(seed, 999)
    positive = (rows > 0).sum(dim=1)
    generator = torch.Generator().manual_seed(100 + seed)
    for fraction in (0.0, 0.01, 0.5, 0.99, 1.0):
        remaining = torch.floor(positive.to(torch.float64) * fraction).to(torch.int64)
        remaining = torch.clamp(remaining + torch.randint(0, 2, remaining.shape, generator=generator), max=positive)
        expected = by_ranks(rows, remaining)
        assert torch.equal(served_by_selection(rows, remaining), expected), (seed, fraction)
        assert torch.equal(expected.sum(dim=1), remaining)


def test_wide_rows_take_the_selection_and_narrow_the_sort(monkeypatch):
    """``served_tickets`` dispatches by width (so the test above covers the path wide rows take)."""
    calls = []
    monkeypatch.setattr(allocation, "served_by_selection", lambda r, k: calls.append(r.shape[1]) or by_ranks(r, k))
    for width in (SELECT_WIDTH - 1, SELECT_WIDTH):
        rows = remainder_rows(7, width)
        served_tickets(rows, (rows > 0).sum(dim=1) // 2)
    assert calls == [SELECT_WIDTH]


@pytest.mark.parametrize("seed", range(3))
def test_production_vocab_counts_equal_the_sort_path(seed, monkeypatch):
    """Whole dense allocations at V = 129280 (softmax-like rows and rows of many equal weights)."""
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn((2, 129280), generator=generator) * 2
    logits[1] = torch.floor(logits[1])  # few distinct weights: exact remainder ties between equal weights
    weights = torch.exp(logits.to(torch.float64)).to(torch.float32)
    fast = allocate_dense(weights)
    monkeypatch.setattr(allocation, "SELECT_WIDTH", 1 << 30)
    assert torch.equal(fast, allocate_dense(weights))
