"""The sharded kernels of the TP emulator, in R34's dependency order, run by every rank.

* :func:`load_row`: the global normalization (R31). Weights from logits take two
  phases: each rank's max of its scaled logits, all-reduced with MAX, then
  ``w = fp32(exp(fp64(s - m)))`` against the *global* max (the candidate's
  weights recipe). Refusals are agreed over the ranks (:meth:`Rank.agree`).
* :func:`merge_top_k`: each rank's local top-k (weight descending, ties to the
  lowest ID), all-gathered and merged into the one global support (R30).
* :func:`allocate`: the FP64 largest remainder with W the exact all-reduced
  weight sum (correctly rounded once), local floors, the floor sum all-reduced
  into the remaining tickets, and the tickets handed out globally: each rank
  offers its ``remaining`` largest fractional parts, all-gathered, the largest
  ``remaining`` of all win, ties to the lowest global ID (R31).
* :func:`sample_proposal`: one leader-owned 24-bit draw, broadcast; the
  all-gathered count masses choose the shard; the owner finds the token with
  its cumulative counts and broadcasts the global ID (R32).
* :func:`sample_mass`: the same for a 32-bit draw over FP64 masses (residual or
  bonus rows), the mass rule ``C * 2^32 > u * R`` with the global total R (R33).

The seeded bugs of :mod:`.mutants` are switched on by ``rank.mutant``.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import torch
import torch.distributed as dist

from qconform.adapters.torch_adapter import f32_scalar
from qconform.adapters.torch_candidate.allocation import M
from qconform.adapters.torch_candidate.errors import CandidateError
from qconform.adapters.torch_candidate.sampling import sample_counts
from qconform.adapters.torch_candidate.weights import fp32_temperatures
from qconform.adapters.torch_codec import blob_tensor

from .rank import Rank, Span, fp64

TWO32 = float(1 << 32)
WEIGHT_CODES = ("NAN_WEIGHT", "POS_INF_WEIGHT", "NEGATIVE_WEIGHT")
LOGIT_CODES = ("NAN_LOGIT", "POS_INF_LOGIT")


def first_problem(checks: list[tuple[str, torch.Tensor]]) -> str | None:
    """The first code whose boolean tensor has a set entry (checks in priority order)."""
    return next((code for code, bad in checks if bool(bad.any())), None)


@dataclass(frozen=True)
class LocalRow:
    """A rank's owned draft weights (FP64 values), and for a logits row the FP32 weights
    the answer reports, the rank's local max and the all-reduced global max (FP32)."""

    weights: torch.Tensor
    weights_f32: torch.Tensor | None = None
    local_max: torch.Tensor | None = None
    global_max: torch.Tensor | None = None


def load_row(rank: Rank, inp: dict, span: Span) -> LocalRow:
    """The owned weights of a case row (``weights``, or ``logits`` and ``temperature``), refused as
    the unsharded row is (R05), globally normalized (R31)."""
    if "weights" in inp:
        local = blob_tensor(inp["weights"], rank.device)[span.start : span.end]
        rank.agree(
            first_problem(
                [
                    ("NAN_WEIGHT", torch.isnan(local)),
                    ("POS_INF_WEIGHT", local == float("inf")),
                    ("NEGATIVE_WEIGHT", local < 0),
                ]
            ),
            WEIGHT_CODES,
        )
        weights = local.to(torch.float64)
        if rank.mutant == "local-normalization":
            weights = weights / weights.sum().clamp(min=float(2.0**-1074))
        return LocalRow(weights)
    temperature = fp32_temperatures(f32_scalar(inp["temperature"]), 1, rank.device)
    scaled = blob_tensor(inp["logits"], rank.device)[span.start : span.end] / temperature
    rank.agree(
        first_problem([("NAN_LOGIT", torch.isnan(scaled)), ("POS_INF_LOGIT", scaled == float("inf"))]), LOGIT_CODES
    )
    local_max = scaled.max() if scaled.numel() else torch.tensor(float("-inf"), device=rank.device)
    global_max = rank.all_reduce(local_max.reshape(1), dist.ReduceOp.MAX)[0]
    if global_max == float("-inf"):
        raise CandidateError("ALL_MASKED", "every rank's logits are masked")
    shift = global_max
    if rank.mutant == "local-normalization" and local_max > float("-inf"):
        shift = local_max
    weights_f32 = torch.exp((scaled - shift).to(torch.float64)).to(torch.float32)
    return LocalRow(weights_f32.to(torch.float64), weights_f32, local_max, global_max)


def rank_order(values: torch.Tensor, count: int) -> torch.Tensor:
    """Indices of the ``count`` largest values, largest first, ties to the lower index (a stable sort)."""
    return torch.sort(values, descending=True, stable=True).indices[:count]


def merged_largest(rank: Rank, values: torch.Tensor, ids: torch.Tensor, count: int) -> torch.Tensor:
    """The global IDs of the ``count`` largest values over all ranks, ties to the lowest global ID.

    Each rank offers its own ``count`` largest; the offers are all-gathered in rank
    order (ascending global IDs, since the shards are contiguous), and a stable sort
    keeps that order among equal values.
    """
    order = rank_order(values, count)
    offered_values = torch.cat(rank.all_gather_ragged(values[order], -1.0))
    offered_ids = torch.cat(rank.all_gather_ragged(ids[order], -1))
    return offered_ids[rank_order(offered_values, count)]


@dataclass(frozen=True)
class TopK:
    """A rank's local candidates (global IDs, rank order), the global support (ascending) and which of
    its own tokens are members."""

    candidates: torch.Tensor
    support: torch.Tensor
    owned: torch.Tensor


def merge_top_k(rank: Rank, ids: torch.Tensor, weights: torch.Tensor, k: int) -> TopK:
    """The global top-k support merged from every rank's local top-k (R30)."""
    candidates = ids[rank_order(weights, k)]
    support = torch.sort(merged_largest(rank, weights, ids, k)).values
    return TopK(candidates, support, torch.isin(ids, support))


@dataclass(frozen=True)
class Allocation:
    """A rank's counts over its allocation domain, with its floor sum and won tickets, and the
    global ``remaining`` tickets and exact weight total W."""

    counts: torch.Tensor
    floor_sum: int
    tickets: int
    remaining: int
    total: Fraction


def global_tickets(rank: Rank, ids: torch.Tensor, remainders: torch.Tensor, remaining: int) -> torch.Tensor:
    """0/1 per owned token: the ``remaining`` largest fractional parts over all ranks (R31)."""
    if rank.mutant == "per-shard-tickets":
        return per_shard_tickets(rank, remainders, remaining)
    return torch.isin(ids, merged_largest(rank, remainders, ids, remaining)).to(torch.int64)


def per_shard_tickets(rank: Rank, remainders: torch.Tensor, remaining: int) -> torch.Tensor:
    """The seeded bug: each non-leader rank takes floor(its share), the leader the rest, each by local largest remainders."""
    own = 0 if rank.is_leader else int(torch.floor(remainders.sum()))
    taken = int(rank.all_reduce(rank.ints([own]))[0])
    count = max(0, min(remaining - taken if rank.is_leader else own, remainders.numel()))
    tickets = torch.zeros_like(remainders, dtype=torch.int64)
    tickets[rank_order(remainders, count)] = 1
    return tickets


def allocate(rank: Rank, ids: torch.Tensor, weights: torch.Tensor) -> Allocation:
    """FP64 largest-remainder counts of the owned domain ``(ids, weights)``, coordinated globally (R06, R31).

    Refuses ZERO_MASS when W = 0 and INCONSISTENT_ALLOCATION (agreed, from
    all-reduced values) when the FP64 floors leave ``remaining`` outside
    ``[0, M)`` or above the number of positive fractional parts, or the final
    counts do not sum to M.
    """
    total = rank.exact_sum(weights)[0]
    if total == 0:
        raise CandidateError("ZERO_MASS", "the all-reduced weight sum is zero")
    quota = (weights / fp64(total)) * M
    floors = torch.floor(quota)
    remainders = quota - floors
    floors = floors.to(torch.int64)
    floor_sum = int(floors.sum())
    reduced = rank.all_reduce(rank.ints([floor_sum, int((remainders > 0).sum())])).tolist()
    remaining = M - reduced[0]
    if not 0 <= remaining < M or remaining > reduced[1]:
        raise CandidateError("INCONSISTENT_ALLOCATION", f"FP64 remaining {remaining}")
    tickets = global_tickets(rank, ids, remainders, remaining)
    counts = floors + tickets
    if int(rank.all_reduce(counts.sum().reshape(1))[0]) != M:
        raise CandidateError("INCONSISTENT_ALLOCATION", "the counts do not sum to M")
    return Allocation(counts, floor_sum, int(tickets.sum()), remaining, total)


@dataclass(frozen=True)
class Drawn:
    """One sharded draw: the shard chosen, the index within its range, the global ID."""

    shard: int
    local_token: int
    token: int


def owner_broadcast(rank: Rank, spans: list[Span], shard: int, local: int) -> Drawn:
    """The owner broadcasts the global ID it drew; every rank returns it (R30, R33)."""
    token = rank.ints([spans[shard].start + local if rank.rank == shard else -1])
    token = int(rank.broadcast(token, src=shard)[0])
    return Drawn(shard, token - spans[shard].start, token)


def sample_proposal(rank: Rank, counts: torch.Tensor, spans: list[Span], u24: int) -> Drawn:
    """The sharded exact proposal sampler (R32) over the owned counts ``[n]`` of every rank."""
    u = int(rank.broadcast(rank.ints([u24]), src=0)[0])  # the leader owns the draw
    masses = rank.all_gather(counts.sum().reshape(1)).reshape(-1)
    cumulative = torch.cumsum(masses, 0)
    if u >= int(cumulative[-1]):
        raise CandidateError("WRONG_TOTAL_MASS", f"draw {u} is not below the count mass")
    shard = int(torch.searchsorted(cumulative, rank.ints([u]), right=True)[0])
    local = -1
    if rank.rank == shard:
        local_draw = u - (int(cumulative[shard - 1]) if shard else 0)
        if rank.mutant == "independent-draws":
            local_draw = u * int(masses[shard]) // M
        local = int(sample_counts(counts, rank.ints(local_draw)))
    return owner_broadcast(rank, spans, shard, local)


def sample_mass(rank: Rank, mass: torch.Tensor, spans: list[Span], u32: int) -> Drawn:
    """The sharded mass rule (R33) over the owned FP64 masses ``[n]`` of every rank: the global
    total chooses the shard, the owner's cumulative mass (offset by the shards before it) the token."""
    u = float(rank.broadcast(rank.ints([u32]), src=0)[0])  # the target-side leader owns the draw
    masses = rank.all_gather(mass.sum().reshape(1)).reshape(-1)
    cumulative = torch.cumsum(masses, 0)
    total = float(cumulative[-1])
    if not total > 0:
        raise CandidateError("ZERO_RESIDUAL_MASS", "the all-gathered masses sum to zero")
    threshold = torch.tensor([u * total], dtype=torch.float64, device=rank.device)
    positive = (masses > 0).nonzero().reshape(-1)
    shard = min(int(torch.searchsorted(cumulative * TWO32, threshold, right=True)[0]), int(positive[-1]))
    local = -1
    if rank.rank == shard:
        below = float(cumulative[shard - 1]) if shard else 0.0
        if rank.mutant == "independent-draws":
            below, threshold = 0.0, threshold * float(masses[shard]) / total
        local_cumulative = (below + torch.cumsum(mass, 0)) * TWO32
        last = int((mass > 0).nonzero().reshape(-1)[-1])
        local = min(int(torch.searchsorted(local_cumulative, threshold, right=True)[0]), last)
    return owner_broadcast(rank, spans, shard, local)
