"""Draft logits -> FP32 weights, in the design's order (R05), batched over rows.

Every step is an FP32 tensor op (IEEE correctly rounded on CPU and CUDA):

1. ``z = logits + bias``      (bias: the Markov bias of the previous token, if any)
2. ``s = z / T``              (T: the draft temperature, as FP32)
3. ``m = max(s)`` over the unmasked entries (``-inf`` is a mask)
4. ``d = s - m``
5. ``w = fp32(exp(fp64(d)))`` (masked entries give exactly 0)

Caveat on step 5: torch has no correctly rounded exp. The candidate evaluates exp
in FP64 (error below about one FP64 ulp) and rounds that once to FP32, so ``w``
equals the correctly rounded FP32 exp except when exp(d) lies within about 2^-52
relative of an FP32 rounding midpoint (double rounding). A precision profile must
declare this.

The Markov bias of the previous token ``x`` from low-rank factors is
``bias_v = fp32 sum over j = 0..R-1, left to right, of fp32(left[x, j] * right[j, v])``:
each product is rounded to FP32 and added to the FP32 accumulator in order of j.
"""

from __future__ import annotations

import torch

from .errors import CandidateError, refuse_where


def markov_bias(left: torch.Tensor, right: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
    """Bias rows ``[B, V]`` (float32) for previous tokens ``prev`` ``[B]``.

    ``left`` is ``[V_prev, R]`` and ``right`` is ``[R, V]``, both float32. The loop runs
    over the rank dimension so that the FP32 accumulation order is exactly j = 0, 1, ...
    """
    left = left.to(torch.float32)
    right = right.to(torch.float32)
    rows = left[prev.to(torch.int64)]  # [B, R]
    rank = left.shape[1]
    if rank == 0:
        return torch.zeros((prev.shape[0], right.shape[1]), dtype=torch.float32, device=right.device)
    bias = rows[:, 0:1] * right[0]
    for j in range(1, rank):
        bias = bias + rows[:, j : j + 1] * right[j]
    return bias


def fp32_temperatures(temperature, rows: int, device: torch.device) -> torch.Tensor:
    """Temperatures as a float32 ``[rows]`` tensor; refuse any that is not finite and > 0."""
    t = torch.as_tensor(temperature, device=device).to(torch.float32).reshape(-1)
    if t.numel() == 1:
        t = t.expand(rows)
    if t.numel() != rows:
        raise CandidateError("BAD_SHAPE", f"{t.numel()} temperatures for {rows} rows")
    refuse_where(~torch.isfinite(t) | (t <= 0), "BAD_TEMPERATURE", "temperature")
    return t


def refuse_bad_logits(values: torch.Tensor, stage: str) -> None:
    """Refuse NaN (NAN_LOGIT) and +inf (POS_INF_LOGIT) entries of a logit-like tensor."""
    refuse_where(torch.isnan(values), "NAN_LOGIT", f"{stage} NaN")
    refuse_where(values == float("inf"), "POS_INF_LOGIT", f"{stage} +inf")


def logits_to_weights(
    logits: torch.Tensor,
    temperature,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """FP32 weights ``[B, V]`` of FP32 logits ``[B, V]`` (see the module docstring for the order).

    ``temperature`` is a float, or one per row (``[B]``); it is rounded to FP32 first.
    Refusals, checked in this order: EMPTY_ROW, BAD_SHAPE, BAD_TEMPERATURE, NAN_LOGIT then
    POS_INF_LOGIT on ``s`` (where every NaN and +inf of the logits, of ``z`` (``-inf + inf``,
    overflow) and of ``z / T`` ends up), then ALL_MASKED when every ``s`` is ``-inf``.
    """
    if logits.dim() != 2:
        raise CandidateError("BAD_SHAPE", f"logits must be [B, V], got {list(logits.shape)}")
    if logits.shape[1] == 0:
        raise CandidateError("EMPTY_ROW", "logit row has no entries")
    logits = logits.to(torch.float32)
    if bias is not None and bias.shape != logits.shape:
        raise CandidateError("BAD_SHAPE", f"bias {list(bias.shape)} vs logits {list(logits.shape)}")
    t = fp32_temperatures(temperature, logits.shape[0], logits.device)
    z = logits if bias is None else logits + bias.to(torch.float32)
    s = z / t[:, None]
    # on s alone, as the refusal tables order them: a NaN anywhere on the way (a NaN logit,
    # -inf + inf in z) is a NaN s, and any +inf (a +inf logit, z's overflow, s's) a +inf s (T is a
    # finite positive FP32), so a NaN s_v refuses before a +inf s_w of another token
    refuse_bad_logits(s, "scaled logit")
    refuse_where((s == float("-inf")).all(dim=1), "ALL_MASKED", "row")
    m = s.amax(dim=1, keepdim=True)
    d = s - m
    return torch.exp(d.to(torch.float64)).to(torch.float32)


def validate_weights(weights: torch.Tensor) -> None:
    """Refuse a batch of weight rows ``[..., V]`` that is not a valid proposal input (R05).

    Order: EMPTY_ROW, NAN_WEIGHT, POS_INF_WEIGHT, NEGATIVE_WEIGHT (``-inf`` included;
    ``-0.0`` is zero, not negative), ZERO_MASS (every weight of a row is zero).
    """
    if weights.shape[-1] == 0:
        raise CandidateError("EMPTY_ROW", "weight row has no entries")
    refuse_where(torch.isnan(weights), "NAN_WEIGHT", "weight")
    refuse_where(weights == float("inf"), "POS_INF_WEIGHT", "weight")
    refuse_where(weights < 0, "NEGATIVE_WEIGHT", "weight")
    refuse_where((weights == 0).all(dim=-1), "ZERO_MASS", "row")
