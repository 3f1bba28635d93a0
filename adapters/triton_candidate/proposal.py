"""The worker leader's proposal chain (R01, R05-R08, R22), batched over requests.

For i = 1..K, for every request at once, all on the device: the Markov bias of
``x_{i-1}`` (``x_0`` = the last committed token) and the FP32 weights of
``base_logits[:, i-1]`` (weights.py), the dyadic24 counts (dense, or the top-k
support and its counts), and the token the PROPOSAL draw at ``anchor + i - 1``
picks (``u24`` = top 24 bits of Philox word 0). Row i+1 is conditioned on the
sampled ``x_i``: the sampling kernel writes the tokens where the next step's weight
kernel reads them, so the depth loop never waits for the host. Every step's refusal
flags are read once, at the end; the first flagged step is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from .allocation import allocate_rows
from .errors import TritonCandidateError, raise_flags
from .philox import MASK32, PROPOSAL, abi_draws
from .qrows import QRows
from .sampling import sample_rows
from .topk import top_k_support
from .weights import logits_to_weights


@dataclass(frozen=True)
class Proposal:
    """A batch of proposal chains (B requests, depth K).

    * ``tokens [B, K]``: the sampled drafts;
    * ``rows``: per request, per position, ``(ids or None for dense, counts)`` int64
      tensors (a sparse row keeps its zero-count support entries);
    * ``counters [B, K, 4]``: the Philox counter words of each proposal draw;
    * ``u24 [B, K]``: the 24-bit draws.
    """

    tokens: torch.Tensor
    rows: list[list[tuple[torch.Tensor | None, torch.Tensor]]]
    counters: torch.Tensor
    u24: torch.Tensor


def proposal_draws(
    seeds: Sequence[int],
    generations: Sequence[int],
    rounds: Sequence[int],
    anchors: Sequence[int],
    depth: int,
    device: torch.device | str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(counter words ``[B, K, 4]``, ``u24 [B, K]``) of every proposal draw of the batch."""
    fields = [
        (seeds[b], (anchors[b] + i) & MASK32, rounds[b], generations[b], PROPOSAL, 0)
        for b in range(len(seeds))
        for i in range(depth)
    ]
    words = abi_draws(fields, device).reshape(len(seeds), depth, 8)
    return words[..., :4], words[..., 4] >> 8


def propose(
    seeds: Sequence[int],
    generations: Sequence[int],
    rounds: Sequence[int],
    anchors: Sequence[int],
    last_tokens: Sequence[int],
    base_logits: torch.Tensor,
    temperature: float | Sequence[float],
    markov: tuple[torch.Tensor, torch.Tensor] | None,
    top_k: int | None,
) -> Proposal:
    """Sample B proposal chains (see the module docstring).

    ``base_logits``: FP32 ``[B, K, V]``; ``temperature``: the FP32 draft temperature, or one
    per request;
    ``markov``: FP32 ``(left [V, r], right [r, V])`` or None; ``top_k``: None for dense
    q rows, else the support size k.
    """
    batch, depth, vocab = base_logits.shape
    device = base_logits.device
    if depth == 0:
        raise TritonCandidateError("BAD_SHAPE", "a chain drafts K >= 1 tokens (R35)")
    if markov is not None:
        left, right = markov
        if left.dim() != 2 or right.dim() != 2:
            raise TritonCandidateError("BAD_SHAPE", "Markov factors must be matrices [V, r] and [r, V]")
        if left.shape[0] != vocab or left.shape[1] != right.shape[0] or right.shape[1] != vocab:
            raise TritonCandidateError(
                "BAD_SHAPE",
                f"Markov factors {list(left.shape)} and {list(right.shape)} for base logits over V = {vocab}",
            )
    counters, u24 = proposal_draws(seeds, generations, rounds, anchors, depth, device)
    per_request = list(temperature) if isinstance(temperature, (list, tuple)) else [temperature] * batch
    if len(per_request) != batch:
        raise TritonCandidateError("BAD_SHAPE", f"{len(per_request)} temperatures for {batch} requests")
    temperatures = torch.tensor(per_request, dtype=torch.float32, device=device)
    prev = torch.tensor(list(last_tokens), dtype=torch.int64, device=device)
    if bool(((prev < 0) | (prev >= vocab)).any()):
        raise TritonCandidateError("TOKEN_OUT_OF_RANGE", "last committed token")
    tokens = torch.empty((depth, batch), dtype=torch.int64, device=device)
    step_flags, rows = [], []
    for i in range(depth):
        weights, flags = logits_to_weights(base_logits[:, i], temperatures, markov, prev)
        if top_k is not None and not 1 <= top_k <= vocab:
            # rows are refused in order, each for its weights first, then for k: row 1 decides
            raise_flags(flags[None], "proposal step")
            raise TritonCandidateError("BAD_SUPPORT_SIZE", f"k = {top_k} for V = {vocab}")
        if top_k is None:
            counts = allocate_rows(weights, flags)
            q = QRows.of_segments(vocab, counts, None, batch, vocab)
            rows.append([(None, counts[b]) for b in range(batch)])
        else:
            ids, support_weights = top_k_support(weights, top_k)
            counts = allocate_rows(support_weights, flags)
            q = QRows.of_segments(vocab, counts, ids, batch, top_k)
            rows.append([(ids[b], counts[b]) for b in range(batch)])
        step_flags.append(flags)
        tokens[i] = sample_rows(q, u24[:, i : i + 1])[:, 0]
        prev = tokens[i]
    raise_flags(torch.stack(step_flags), "proposal step")
    if bool((tokens < 0).any()):
        raise TritonCandidateError("INCONSISTENT_ALLOCATION", "a proposal draw beyond its row's total")
    return Proposal(tokens.T.contiguous(), [list(r) for r in zip(*rows)], counters, u24)
