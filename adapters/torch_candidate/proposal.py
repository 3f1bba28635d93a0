"""The worker leader's proposal chain (R01, R05-R08, R22), batched over requests.

For i = 1..K, for every request at once: the row's logits are ``base_logits[:, i-1]``
plus the Markov bias of ``x_{i-1}`` (``x_0`` = the last committed token), turned into
FP32 weights at the draft temperature (weights.py), allocated to dyadic24 counts
(dense, or sparse top-k), and sampled with the PROPOSAL draw at position
``anchor + i - 1`` (``u24`` = top 24 bits of word 0). Row i+1 is conditioned on the
sampled ``x_i``, so the loop over depth is sequential; everything else is batched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from .allocation import SparseCounts, allocate_dense, allocate_top_k
from .errors import CandidateError
from .philox import PROPOSAL, draw_word0, per_request, seed_keys, u24_of
from .sampling import sample_counts
from .weights import logits_to_weights, markov_bias


@dataclass(frozen=True)
class Proposal:
    """A batch of proposal chains (B requests, depth K, vocabulary V).

    * ``tokens [B, K]`` int64: the sampled drafts;
    * ``counts [B, K, V]`` int64 dense counts, or None for top-k;
    * ``sparse``: :class:`SparseCounts` ``[B, K, k]`` for top-k, or None for dense;
    * ``counters [B, K, 4]`` int64: the Philox counter words of each proposal draw;
    * ``u24 [B, K]`` int64: the 24-bit draws.
    """

    tokens: torch.Tensor
    counts: torch.Tensor | None
    sparse: SparseCounts | None
    counters: torch.Tensor
    u24: torch.Tensor


def propose(
    seeds: Sequence[int],
    generation,
    round_id,
    anchor,
    last_token,
    base_logits: torch.Tensor,
    temperature,
    markov: tuple[torch.Tensor, torch.Tensor] | None = None,
    top_k: int | None = None,
) -> Proposal:
    """Sample the proposal chains of B requests (see the module docstring).

    ``seeds``: B 64-bit ints; ``generation``, ``round_id``, ``anchor``, ``last_token``:
    B ints (or int64 ``[B]``); ``base_logits``: FP32 ``[B, K, V]``; ``temperature``: a
    float or B floats (rounded to FP32); ``markov``: ``(left [V, R], right [R, V])``
    FP32 low-rank factors, or None for no bias; ``top_k``: None for dense q, else the
    support size k. The device is that of ``base_logits``.
    """
    if base_logits.dim() != 3:
        raise CandidateError("BAD_SHAPE", f"base logits must be [B, K, V], got {list(base_logits.shape)}")
    device = base_logits.device
    batch, depth, vocab = base_logits.shape
    if depth == 0:
        raise CandidateError("BAD_SHAPE", "a chain drafts K >= 1 tokens (R35)")
    if markov is not None:
        left, right = markov
        if left.dim() != 2 or right.dim() != 2:
            raise CandidateError("BAD_SHAPE", "Markov factors must be matrices [V, r] and [r, V]")
        if left.shape[0] != vocab or left.shape[1] != right.shape[0] or right.shape[1] != vocab:
            raise CandidateError(
                "BAD_SHAPE",
                f"Markov factors {list(left.shape)} and {list(right.shape)} for base logits over V = {vocab}",
            )
    key = seed_keys(seeds, device)
    if key.shape[0] != batch:
        raise CandidateError("BAD_SHAPE", f"{key.shape[0]} seeds for {batch} requests")
    positions = per_request(anchor, batch, device)[:, None] + torch.arange(depth, device=device)
    round_id = per_request(round_id, batch, device)[:, None]
    generation = per_request(generation, batch, device)[:, None]
    counters, word0 = draw_word0(key, positions, round_id, generation, PROPOSAL)
    u24 = u24_of(word0)
    prev = per_request(last_token, batch, device)
    if bool(((prev < 0) | (prev >= vocab)).any()):
        raise CandidateError("TOKEN_OUT_OF_RANGE", f"a last committed token is not in 0..{vocab - 1}")
    if markov is not None:
        markov = (markov[0].to(device), markov[1].to(device))
    tokens, dense_rows, sparse_rows = [], [], []
    for i in range(depth):
        bias = None if markov is None else markov_bias(markov[0], markov[1], prev)
        weights = logits_to_weights(base_logits[:, i], temperature, bias)
        if top_k is None:
            counts = allocate_dense(weights)
            prev = sample_counts(counts, u24[:, i])
            dense_rows.append(counts)
        else:
            sparse = allocate_top_k(weights, top_k)
            index = sample_counts(sparse.counts, u24[:, i])
            prev = sparse.ids.gather(1, index[:, None]).squeeze(1)
            sparse_rows.append(sparse)
        tokens.append(prev)
    stacked_sparse = None
    if top_k is not None:
        stacked_sparse = SparseCounts(
            torch.stack([s.ids for s in sparse_rows], dim=1),
            torch.stack([s.counts for s in sparse_rows], dim=1),
        )
    return Proposal(
        torch.stack(tokens, dim=1),
        torch.stack(dense_rows, dim=1) if top_k is None else None,
        stacked_sparse,
        counters,
        u24,
    )
