"""Batched standard verification of one round (R11, R23), vectorized across requests.

For request ``b`` with anchor ``a`` and drafts ``x_1..x_K``:

* for i = 1..K: ``u32`` = ACCEPT draw at position ``a + i - 1``; accept ``x_i`` iff
  ``u32 * q(x_i) < p_i(x_i) * 2^32``. With ``q = c / M`` and ``p_i = w / W`` this is
  ``u32 * c * W < w * 2^56``, evaluated as ``fp64(u32 * c) * W < w * 2^56``
  (``u32 * c`` is an exact int64, ``w * 2^56`` is exact, ``W`` is the FP64 sum of
  the row): FP64, not exact, except that ``p(x) = 0`` never accepts, not even at
  ``u32 = 0``;
* at the first rejection, after ``j`` accepted drafts: ``u32`` = CORRECTION draw at
  ``a + j`` and the token from the residual ``max(p_{j+1} - q_{j+1}, 0)`` over the
  FULL vocabulary (``q`` is zero outside a sparse support), evaluated as the FP64
  row ``max(w_v * M - c_v * W, 0)`` (a positive multiple of the residual);
* after K accepts: ``u32`` = CORRECTION draw at ``a + K`` and the bonus token from
  ``p_{K+1}`` (its FP32 weights as FP64 mass).

Stop tokens and budget: emission ends at the first emitted stop token, or when the
number of emitted tokens reaches the budget; no further draw is consumed. A budget
of 0 emits nothing and consumes nothing.

The K acceptance tests of every request are evaluated at once; masks decide which
of them were consumed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from .allocation import M, SparseCounts
from .errors import CandidateError, refuse_where
from .philox import ACCEPT, CORRECTION, draw_word0, per_request, seed_keys, u32_of
from .sampling import sample_mass

#: 2^56 = 2^32 (the draw) * M (the count scale)
TWO56 = float(1 << 56)

#: decision names of a consumed draw
ACCEPTED, REJECTED, CORRECTED, BONUS = "accept", "reject", "correction", "bonus"


@dataclass(frozen=True)
class Draw:
    """One consumed draw of the target-side sampler."""

    domain: int
    position: int
    draw_counter: int
    u32: int
    decision: str
    token: int


@dataclass(frozen=True)
class RoundOutcome:
    """What one request's round produced."""

    accepted: int
    emitted: list[int]
    draws: list[Draw]


@dataclass(frozen=True)
class VerifiedRound:
    """Batched result tensors (all int64 unless noted; B requests, depth K).

    * ``accepted [B]``: accepted draft count;
    * ``accept_u32 [B, K]`` and ``accept_ok [B, K]`` (bool): every acceptance test,
      consumed or not; ``accept_draws [B]``: how many of them were consumed;
    * ``final_kind [B]``: 0 none, 1 correction, 2 bonus; ``final_position [B]``,
      ``final_u32 [B]``, ``final_token [B]`` (-1 where ``final_kind`` is 0);
    * ``emitted [B, K + 1]`` padded with -1, ``emitted_count [B]``.
    """

    anchor: torch.Tensor
    draft_tokens: torch.Tensor
    accepted: torch.Tensor
    accept_u32: torch.Tensor
    accept_ok: torch.Tensor
    accept_draws: torch.Tensor
    final_kind: torch.Tensor
    final_position: torch.Tensor
    final_u32: torch.Tensor
    final_token: torch.Tensor
    emitted: torch.Tensor
    emitted_count: torch.Tensor

    def outcomes(self) -> list[RoundOutcome]:
        """Per-request outcomes with every consumed draw, in draw order."""
        fields = [
            t.tolist()
            for t in (
                self.anchor,
                self.draft_tokens,
                self.accepted,
                self.accept_u32,
                self.accept_ok,
                self.accept_draws,
                self.final_kind,
                self.final_position,
                self.final_u32,
                self.final_token,
                self.emitted,
                self.emitted_count,
            )
        ]
        result = []
        for anchor, drafts, accepted, u32s, oks, n_acc, kind, pos, u32, tok, emitted, n_emit in zip(*fields):
            draws = [
                Draw(ACCEPT, (anchor + i) & 0xFFFFFFFF, 0, u32s[i], ACCEPTED if oks[i] else REJECTED, drafts[i])
                for i in range(n_acc)
            ]
            if kind:
                draws.append(Draw(CORRECTION, pos, 0, u32, CORRECTED if kind == 1 else BONUS, tok))
            result.append(RoundOutcome(accepted, emitted[:n_emit], draws))
        return result


def accepts(u32: torch.Tensor, c_x: torch.Tensor, w_x: torch.Tensor, w_total: torch.Tensor) -> torch.Tensor:
    """Acceptance tests (bool, broadcast shape): ``u32 * c_x * w_total < w_x * 2^56`` in FP64.

    ``c_x`` are the dyadic24 counts of the drafts, ``w_x`` their target weights and
    ``w_total`` the FP64 masses of their target rows. ``w_x = 0`` never accepts.
    """
    lhs = (u32.to(torch.int64) * c_x.to(torch.int64)).to(torch.float64) * w_total.to(torch.float64)
    return lhs < w_x.to(torch.float64) * TWO56


def acceptance_tests(
    u32: torch.Tensor, counts: torch.Tensor, drafts: torch.Tensor, p: torch.Tensor, row_mass: torch.Tensor
) -> torch.Tensor:
    """Every acceptance test of the round (bool ``[B, K]``): the draft's count in the q row that
    sampled it, against its target weight, through :func:`accepts`.

    ``counts`` are the dense counts ``[B, K, V]`` the verifier was sent, used as they are;
    ``p`` the FP64 target weights ``[B, K + 1, V]`` and ``row_mass`` their row sums.
    """
    depth = drafts.shape[1]
    c_x = counts.gather(2, drafts[:, :, None]).squeeze(2)
    p_x = p[:, :depth].gather(2, drafts[:, :, None]).squeeze(2)
    return accepts(u32, c_x, p_x, row_mass[:, :depth])


def residual_rows(target: torch.Tensor, q_counts: torch.Tensor, target_mass: torch.Tensor) -> torch.Tensor:
    """FP64 rows ``max(w_v * M - c_v * W, 0)`` ``[B, V]``: a positive multiple of the residual
    ``max(p - q, 0)`` over the FULL vocabulary (``q`` is zero outside a sparse support)."""
    return torch.clamp(target * M - q_counts.to(torch.float64) * target_mass[:, None], min=0)


def final_mass(
    p: torch.Tensor,
    counts: torch.Tensor,
    row_mass: torch.Tensor,
    drafts: torch.Tensor,
    accepted_run: torch.Tensor,
    has_final: torch.Tensor,
) -> torch.Tensor:
    """FP64 mass rows ``[B, V]`` of each request's final draw, after ``j = accepted_run`` accepted
    drafts: the residual of ``p_{j+1}`` and ``q_{j+1}`` (the row of the rejected draft) when
    ``j < K``, the bonus row ``p_{K+1}`` when ``j = K``. A request without a final draw
    (``has_final`` false) gets its target row, so that no empty residual is ever sampled.
    """
    depth = drafts.shape[1]
    rows = torch.arange(drafts.shape[0], device=drafts.device)
    target = p[rows, accepted_run]
    q_row = counts[rows, torch.clamp(accepted_run, max=depth - 1)]
    residual = residual_rows(target, q_row, row_mass[rows, accepted_run])
    return torch.where(((accepted_run < depth) & has_final)[:, None], residual, target)


def stop_mask(drafts: torch.Tensor, stop_tokens: Sequence[Sequence[int]] | None) -> torch.Tensor:
    """``[B, K]`` bool: whether each draft token is one of its request's stop tokens."""
    if stop_tokens is None:
        return torch.zeros_like(drafts, dtype=torch.bool)
    width = max([len(s) for s in stop_tokens] + [1])
    padded = [list(s) + [-1] * (width - len(s)) for s in stop_tokens]
    stops = torch.tensor(padded, dtype=torch.int64, device=drafts.device)
    return (drafts[:, :, None] == stops[:, None, :]).any(dim=-1)


def dense_q(q: torch.Tensor | SparseCounts, vocab: int, device: torch.device) -> torch.Tensor:
    """Validated dense counts ``[B, K, V]`` of dense or sparse q rows (R03, R19)."""
    if isinstance(q, SparseCounts):
        q = SparseCounts(*(t.to(device=device, dtype=torch.int64) for t in (q.ids, q.counts)))
        live = q.counts > 0
        refuse_where(q.counts < 0, "NOT_DYADIC24", "negative sparse count")
        refuse_where(live & ((q.ids < 0) | (q.ids >= vocab)), "BAD_SPARSE_SUPPORT", "sparse ID range")
        previous = torch.where(live, q.ids, torch.full_like(q.ids, -1)).cummax(dim=-1).values
        previous = torch.cat([torch.full_like(previous[..., :1], -1), previous[..., :-1]], dim=-1)
        refuse_where(live & (q.ids <= previous), "BAD_SPARSE_SUPPORT", "sparse IDs not ascending")
        q = q.to_dense(vocab)
    q = q.to(device=device, dtype=torch.int64)
    refuse_where(q < 0, "NOT_DYADIC24", "negative count")
    refuse_where(q.sum(dim=-1) != M, "WRONG_TOTAL_MASS", "q row")
    return q


def check_shapes(drafts: torch.Tensor, q: torch.Tensor | SparseCounts, p: torch.Tensor) -> None:
    """Refuse BAD_SHAPE unless drafts ``[B, K]``, p ``[B, K + 1, V]`` and q ``[B, K, *]`` agree."""
    batch, depth = drafts.shape if drafts.dim() == 2 else (-1, -1)
    q_lead = tuple((q.ids if isinstance(q, SparseCounts) else q).shape[:2])
    ok = (
        drafts.dim() == 2
        and depth >= 1
        and p.dim() == 3
        and tuple(p.shape[:2]) == (batch, depth + 1)
        and q_lead == (batch, depth)
        and (isinstance(q, SparseCounts) or q.shape[2] == p.shape[2])
        and (not isinstance(q, SparseCounts) or (q.ids.dim() == 3 and q.ids.shape == q.counts.shape))
    )
    if not ok:
        raise CandidateError("BAD_SHAPE", "drafts [B, K], q [B, K, *], p [B, K+1, V] required")


def verify_round(
    seeds: Sequence[int],
    generation,
    round_id,
    anchor,
    draft_tokens: torch.Tensor,
    q: torch.Tensor | SparseCounts,
    p_weights: torch.Tensor,
    stop_tokens: Sequence[Sequence[int]] | None = None,
    budget: Sequence[int | None] | None = None,
) -> VerifiedRound:
    """Standard verification of one round for B requests (see the module docstring).

    ``seeds``: B 64-bit ints; ``generation``, ``round_id``, ``anchor``: B ints (or
    int64 ``[B]``); ``draft_tokens``: int ``[B, K]``; ``q``: int64 counts ``[B, K, V]``
    or :class:`SparseCounts` ``[B, K, n]``; ``p_weights``: float ``[B, K + 1, V]``
    (row ``i`` is ``p_{i+1} = w / sum(w)``); ``stop_tokens``: per-request lists;
    ``budget``: per-request maximum emitted count (None, for all or for one: unlimited). All tensors on
    one device, which the result uses.
    """
    device = p_weights.device
    drafts = draft_tokens.to(device=device, dtype=torch.int64)
    check_shapes(drafts, q, p_weights)
    batch, depth = drafts.shape
    vocab = p_weights.shape[2]
    p = p_weights.to(torch.float64)
    refuse_where(~torch.isfinite(p) | (p < 0), "BAD_TARGET_ROW", "target weight")
    refuse_where(~(p.sum(dim=-1) > 0), "BAD_TARGET_ROW", "target row mass")
    refuse_where((drafts < 0) | (drafts >= vocab), "TOKEN_OUT_OF_RANGE", "draft token")
    counts = dense_q(q, vocab, device)
    refuse_where(counts.gather(2, drafts[:, :, None]).squeeze(2) == 0, "ZERO_Q_AT_TOKEN", "draft token")

    key = seed_keys(seeds, device)
    if key.shape[0] != batch:
        raise CandidateError("BAD_SHAPE", f"{key.shape[0]} seeds for {batch} requests")
    anchor = per_request(anchor, batch, device)
    generation = per_request(generation, batch, device)[:, None]
    round_id = per_request(round_id, batch, device)[:, None]
    steps = torch.arange(depth, device=device)
    _, word0 = draw_word0(key, anchor[:, None] + steps, round_id, generation, ACCEPT)
    accept_u32 = u32_of(word0)

    row_mass = p.sum(dim=-1)  # [B, K + 1], shared by the ratio tests and the residual
    accept_ok = acceptance_tests(accept_u32, counts, drafts, p, row_mass)

    leading = torch.cumprod(accept_ok.to(torch.int64), dim=1)
    j = leading.sum(dim=1)
    limit = torch.full((batch,), depth + 1, dtype=torch.int64, device=device)
    if budget is not None:
        limit = per_request([depth + 1 if b is None else b for b in budget], batch, device)
    emitted_index = steps[None, :] + 1
    ends = leading.bool() & (stop_mask(drafts, stop_tokens) | (emitted_index >= limit[:, None]))
    stopped_early = ends.any(dim=1)
    first_end = torch.where(stopped_early, ends.to(torch.int64).argmax(dim=1) + 1, 0)
    silent = limit <= 0

    accepted = torch.where(stopped_early, first_end, j)
    accept_draws = torch.where(stopped_early, first_end, torch.clamp(j + 1, max=depth))
    has_final = ~stopped_early & ~silent
    accepted = torch.where(silent, 0, accepted)
    accept_draws = torch.where(silent, 0, accept_draws)

    final_position = (anchor + j) & 0xFFFFFFFF  # positions wrap modulo 2^32 (RNG ABI)
    _, final_word = draw_word0(key, final_position, round_id[:, 0], generation[:, 0], CORRECTION)
    final_u32 = u32_of(final_word)
    rows = torch.arange(batch, device=device)
    mass = final_mass(p, counts, row_mass, drafts, j, has_final)
    final_token = torch.where(has_final, sample_mass(mass, final_u32), -1)
    final_kind = torch.where(has_final, torch.where(j < depth, 1, 2), 0)

    emitted = torch.where(steps[None, :] < accepted[:, None], drafts, -1)
    emitted = torch.cat([emitted, torch.full_like(emitted[:, :1], -1)], dim=1)
    emitted[rows, accepted] = torch.where(has_final, final_token, emitted[rows, accepted])
    emitted_count = accepted + has_final.to(torch.int64)
    return VerifiedRound(
        anchor,
        drafts,
        accepted,
        accept_u32,
        accept_ok,
        accept_draws,
        final_kind,
        torch.where(has_final, final_position, -1),
        torch.where(has_final, final_u32, -1),
        final_token,
        emitted,
        emitted_count,
    )
