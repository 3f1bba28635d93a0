"""Categorical sampling from quantized draws (R08, R11), batched over rows.

* Proposal (R08, exact): over int64 counts summing to M, the token is the first
  index whose int64 cumulative count is strictly greater than the 24-bit draw
  (``searchsorted(..., right=True)``).
* Correction / bonus (R11, FP64, NOT exact): over a nonnegative mass row with total
  ``R``, the token is the first ``v`` with ``C_v * 2^32 > u32 * R``. ``C`` is an FP64
  cumulative sum (sequential on CPU, a parallel scan on CUDA) and ``u32 * R`` is
  rounded once, so the choice can differ from the exact rational rule when the
  draw lies within FP64 rounding of a cumulative boundary; a precision profile
  must declare this.
"""

from __future__ import annotations

import torch

from .errors import CandidateError, refuse_where

TWO32 = float(1 << 32)


def sample_counts(counts: torch.Tensor, u24: torch.Tensor) -> torch.Tensor:
    """Index ``[...]`` (int64) of the first cumulative count ``> u24``, for counts ``[..., n]``."""
    cumulative = torch.cumsum(counts.to(torch.int64), dim=-1)
    index = torch.searchsorted(cumulative, u24.to(torch.int64).unsqueeze(-1).contiguous(), right=True)
    index = index.squeeze(-1)
    if bool((index >= counts.shape[-1]).any()):
        raise CandidateError("WRONG_TOTAL_MASS", "a draw is not below the total count")
    return index


def sample_mass(mass: torch.Tensor, u32: torch.Tensor, code: str = "ZERO_RESIDUAL_MASS") -> torch.Tensor:
    """Index ``[...]`` of the first ``v`` with ``C_v * 2^32 > u32 * R`` over FP64 mass rows ``[..., V]``.

    A row whose FP64 total is not positive is refused with ``code``.
    """
    cumulative = torch.cumsum(mass.to(torch.float64), dim=-1)
    total = cumulative[..., -1]
    refuse_where(~(total > 0), code, "mass row total is not positive")
    target = u32.to(torch.float64) * total
    index = torch.searchsorted(cumulative * TWO32, target.unsqueeze(-1).contiguous(), right=True).squeeze(-1)
    if bool((index >= mass.shape[-1]).any()):
        raise CandidateError(code, "draw beyond the cumulative mass")
    return index
