"""Draft logits -> FP32 weights (R05), and the validation of given weight rows.

:func:`logits_weights_kernel` follows the one stated FP32 order, each step one
correctly rounded FP32 operation (launched without FMA contraction):

1. Markov bias of the previous token ``x`` from low-rank factors:
   ``acc = +0.0``; for j = 0..r-1: ``acc = f32(acc + f32(left[x, j] * right[j, v]))``;
2. ``z = f32(logit + bias)`` (no add without a bias);
3. ``s = f32(z / T)`` with ``tl.math.div_rn`` (IEEE division; Triton's ``/`` on FP32
   may be approximate on a GPU);
4. ``m = max s`` over the unmasked tokens (``s != -inf``);
5. ``d = f32(s - m)``, ``w = f32(exp(f64(d)))``.

Step 5 is the one inexact step: ``tl.exp`` on FP64 (libdevice ``__nv_exp`` on CUDA,
numpy in the interpreter; both within about one FP64 ulp) rounded once to FP32. It
equals the correctly rounded FP32 exp unless the exact value lies within about
2^-28 FP32 ulps of a rounding midpoint; the adapter's precision profile declares
that margin (``exp_ulp``).

The row's refusal flags: NAN_LOGIT (some ``s`` is NaN), POS_INF_LOGIT (some ``s`` is
+inf), ALL_MASKED (every ``s`` is -inf).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .errors import (
    ALL_MASKED,
    NAN_LOGIT,
    NAN_WEIGHT,
    NEGATIVE_WEIGHT,
    POS_INF_LOGIT,
    POS_INF_WEIGHT,
    ZERO_MASS,
    TritonCandidateError,
)
from .launch import LAUNCH, block_for, row_tile
from .reductions import ADD, MAX


@triton.jit
def markov_bias(left_ptr, right_ptr, rank, prev, v, live, V, BLOCK: tl.constexpr):
    """FP32 bias of the previous token ``prev`` at tokens ``v``, accumulated in order of j."""
    acc = tl.full([BLOCK], 0, tl.float32)
    for j in range(0, rank):
        a = tl.load(left_ptr + prev * rank + j)
        b = tl.load(right_ptr + j * V + v, mask=live, other=0.0)
        acc = acc + a * b
    return acc


@triton.jit(do_not_specialize=["logit_stride", "rank", "V"])
def logits_weights_kernel(
    logits_ptr,
    logit_stride,
    left_ptr,
    right_ptr,
    rank,
    prev_ptr,
    temp_ptr,
    w_ptr,
    flags_ptr,
    V,
    HAS_BIAS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Row ``r``: FP32 weights ``w[r, :V]`` of ``logits[r]`` (see the module docstring)."""
    row = tl.program_id(0)
    t = tl.load(temp_ptr + row)
    logits = logits_ptr + row * logit_stride
    out = w_ptr + row * V
    prev = 0
    if HAS_BIAS:
        prev = tl.maximum(tl.load(prev_ptr + row), 0)  # -1 (no token: a refused step) reads row 0
    nan = tl.full([BLOCK], 0, tl.int32)
    pos_inf = tl.full([BLOCK], 0, tl.int32)
    top = tl.full([BLOCK], float("-inf"), tl.float32)
    for off in range(0, V, BLOCK):
        v = off + tl.arange(0, BLOCK)
        live = v < V
        z = tl.load(logits + v, mask=live, other=0.0)
        if HAS_BIAS:
            z = z + markov_bias(left_ptr, right_ptr, rank, prev, v, live, V, BLOCK)
        s = tl.math.div_rn(z, t)
        nan = nan | (live & (s != s)).to(tl.int32)
        pos_inf = pos_inf | (live & (s == float("inf"))).to(tl.int32)
        top = tl.maximum(top, tl.where(live & (s == s), s, float("-inf")))
        tl.store(out + v, s, mask=live)
    m = tl.reduce(top, 0, MAX)
    for off in range(0, V, BLOCK):
        v = off + tl.arange(0, BLOCK)
        live = v < V
        s = tl.load(out + v, mask=live, other=0.0)
        d = s - m
        w = tl.exp(d.to(tl.float64)).to(tl.float32)
        tl.store(out + v, w, mask=live)
    flags = tl.where(tl.reduce(nan, 0, MAX) != 0, NAN_LOGIT, 0)
    flags = flags | tl.where(tl.reduce(pos_inf, 0, MAX) != 0, POS_INF_LOGIT, 0)
    flags = flags | tl.where(m == float("-inf"), ALL_MASKED, 0)
    tl.store(flags_ptr + row, flags)


@triton.jit(do_not_specialize=["V", "n_rows"])
def weight_scan_kernel(w_ptr, V, n_rows, flags_ptr, mass_ptr, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    """Rows ``r`` of the program's tile of given weights ``[R, V]`` (FP32 or FP64): their R05
    refusal flags and FP64 masses."""
    row = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    row_live = row < n_rows
    nan = tl.full([ROWS, BLOCK], 0, tl.int32)
    pos_inf = tl.full([ROWS, BLOCK], 0, tl.int32)
    negative = tl.full([ROWS, BLOCK], 0, tl.int32)
    lanes = tl.full([ROWS, BLOCK], 0, tl.float64)
    for off in range(0, V, BLOCK):
        v = off + tl.arange(0, BLOCK)
        live = row_live[:, None] & (v < V)[None, :]
        w = tl.load(w_ptr + row[:, None] * V + v[None, :], mask=live, other=0.0)
        nan = nan | (live & (w != w)).to(tl.int32)
        pos_inf = pos_inf | (live & (w == float("inf"))).to(tl.int32)
        negative = negative | (live & (w < 0)).to(tl.int32)
        lanes += tl.where(live & (w > 0), w.to(tl.float64), 0.0)
    mass = tl.reduce(lanes, 1, ADD)
    flags = tl.where(tl.reduce(nan, 1, MAX) != 0, NAN_WEIGHT, 0)
    flags = flags | tl.where(tl.reduce(pos_inf, 1, MAX) != 0, POS_INF_WEIGHT, 0)
    flags = flags | tl.where(tl.reduce(negative, 1, MAX) != 0, NEGATIVE_WEIGHT, 0)
    flags = flags | tl.where(mass == 0, ZERO_MASS, 0)
    tl.store(flags_ptr + row, flags, mask=row_live)
    tl.store(mass_ptr + row, mass, mask=row_live)


def check_temperatures(temperature: torch.Tensor) -> None:
    """Refuse (BAD_TEMPERATURE) a draft temperature that is not finite and positive."""
    if not bool((torch.isfinite(temperature) & (temperature > 0)).all()):
        raise TritonCandidateError("BAD_TEMPERATURE", f"temperature {temperature.tolist()}")


def logits_to_weights(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    markov: tuple[torch.Tensor, torch.Tensor] | None = None,
    prev: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(FP32 weights ``[R, V]``, int32 flags ``[R]``) of FP32 logit rows ``[R, V]``.

    ``temperature``: FP32 ``[R]`` (checked here: BAD_TEMPERATURE); ``markov``: FP32
    ``(left [V', r], right [r, V])`` with ``prev`` int64 ``[R]`` the previous tokens
    (device tensors, so a chain needs no host round trip), or None for no bias.
    The flags are not raised here: a chain checks every step's flags at its end.
    """
    rows, vocab = logits.shape
    if vocab == 0:
        raise TritonCandidateError("EMPTY_ROW", "logit row has no entries")
    check_temperatures(temperature)
    weights = torch.empty((rows, vocab), dtype=torch.float32, device=logits.device)
    flags = torch.zeros(rows, dtype=torch.int32, device=logits.device)
    left, right = markov if markov is not None else (logits, logits)
    rank = left.shape[1] if markov is not None else 0
    logits_weights_kernel[(rows,)](
        logits,
        logits.stride(0),
        left,
        right,
        rank,
        logits if prev is None else prev,
        temperature,
        weights,
        flags,
        vocab,
        HAS_BIAS=markov is not None,  # pyright: ignore[reportArgumentType]  # Triton: a plain int or bool fills a tl.constexpr parameter
        BLOCK=block_for(vocab),  # pyright: ignore[reportArgumentType]  # Triton: a plain int or bool fills a tl.constexpr parameter
        **LAUNCH,
    )
    return weights, flags


def weight_scan(weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(int32 refusal flags ``[R]``, FP64 masses ``[R]``) of given FP32 or FP64 weight rows
    ``[R, V]`` (EMPTY_ROW raised here). The mass sums the positive weights, so with the
    flags clear it is the row's FP64 total (+inf when that overflows)."""
    rows, vocab = weights.shape
    if vocab == 0:
        raise TritonCandidateError("EMPTY_ROW", "weight row has no entries")
    flags = torch.zeros(rows, dtype=torch.int32, device=weights.device)
    mass = torch.empty(rows, dtype=torch.float64, device=weights.device)
    block, tile = row_tile(vocab, rows)
    if rows:
        weight_scan_kernel[(triton.cdiv(rows, tile),)](
            weights.contiguous(),
            vocab,
            rows,
            flags,
            mass,
            ROWS=tile,  # pyright: ignore[reportArgumentType]  # Triton: a plain int or bool fills a tl.constexpr parameter
            BLOCK=block,  # pyright: ignore[reportArgumentType]  # Triton: a plain int or bool fills a tl.constexpr parameter
            **LAUNCH,
        )
    return flags, mass
