"""One case of each family, run by every rank of the TP emulator in lockstep.

A case input reaches every rank whole (the leader broadcast the batch); each rank
decodes it, keeps the rows of the tokens it owns and runs the sharded kernels.
Checks on replicated data (shapes, the q row that the wire sent every target
rank, seeds) raise on every rank alike; checks on owned data are agreed through
a collective. Every function returns the answer on the leader (rank 0) and None
elsewhere; the per-shard partial results an answer reports are all-gathered at
the end, a report only (the algorithm never gathers a full row).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Callable

import torch

from qconform.adapters.torch_adapter import p_rows_f64, q_row_counts, q_row_json, q_rows_dense
from qconform.adapters.torch_candidate.allocation import M
from qconform.adapters.torch_candidate.errors import CandidateError
from qconform.adapters.torch_candidate.philox import ACCEPT, CORRECTION, draw_word0, request_seed, seed_keys, u32_of
from qconform.adapters.torch_candidate.verification import accepts, check_shapes, residual_rows
from qconform.adapters.torch_codec import DOMAIN_NAMES, encode_ints
from qconform.adapters.verification_inputs import verification_refusal

from . import kernels
from .rank import Rank, Span, checked_spans, even_spans, fp64

MASK32 = 0xFFFFFFFF


def rational(x: Fraction) -> str:
    return f"{x.numerator}/{x.denominator}"


def f32_json(value: torch.Tensor) -> dict:
    """``{"f32": "0x........"}`` of a scalar FP32 tensor."""
    bits = int(value.reshape(1).to(torch.float32).view(torch.int32)[0]) & MASK32
    return {"f32": f"0x{bits:08x}"}


def f32_blob(values: torch.Tensor) -> dict:
    return encode_ints("f32", values.to(torch.float32).view(torch.int32))


def row_vocab(inp: dict) -> int:
    return (inp["weights"] if "weights" in inp else inp["logits"])["shape"][0]


def owned_ids(rank: Rank, span: Span) -> torch.Tensor:
    return torch.arange(span.start, span.end, dtype=torch.int64, device=rank.device)


def gathered(rank: Rank, tensor: torch.Tensor, fill: float | int = 0) -> torch.Tensor:
    """The concatenation of every rank's 1-D tensor (for the leader's answer)."""
    return torch.cat(rank.all_gather_ragged(tensor, fill))


# --- allocation_dense, allocation_sparse --------------------------------------------------------


def check_mass_then_k(rank: Rank, weights: torch.Tensor, k: int | None, vocab: int) -> None:
    """ZERO_MASS when the all-reduced W is 0, then BAD_SUPPORT_SIZE for k outside 1..V: the row's
    refusals before the request's (docs/formats/allocation_invalid.md, "Refusal precedence")."""
    if rank.exact_sum(weights)[0] == 0:
        raise CandidateError("ZERO_MASS", "the all-reduced weight sum is zero")
    if k is not None and not 1 <= k <= vocab:
        raise CandidateError("BAD_SUPPORT_SIZE", f"k = {k}")


@dataclass(frozen=True)
class RowCounts:
    """A rank's allocation of one row: its counts over its whole span (zero outside the support),
    which of its tokens are in the allocation domain, the top-k merge (or None) and the allocation."""

    counts: torch.Tensor
    owned: torch.Tensor
    top: kernels.TopK | None
    allocation: kernels.Allocation


def allocate_row(rank: Rank, span: Span, weights: torch.Tensor, k: int | None) -> RowCounts:
    """Dense or global top-k counts of the owned weights: merge (top-k), then the global allocation."""
    ids = owned_ids(rank, span)
    owned, top = torch.ones_like(ids, dtype=torch.bool), None
    if k is not None:
        top = kernels.merge_top_k(rank, ids, weights, k)
        owned = top.owned
    allocation = kernels.allocate(rank, ids[owned], weights[owned])
    counts = torch.zeros_like(ids)
    counts[owned] = allocation.counts
    return RowCounts(counts, owned, top, allocation)


def allocation_row(rank: Rank, inp: dict, k: int | None) -> tuple[torch.Tensor, torch.Tensor | None, kernels.LocalRow]:
    """(full counts, global support or None, the rank's row) of an allocation case, sharded evenly."""
    vocab = row_vocab(inp)
    if vocab == 0:
        raise CandidateError("EMPTY_ROW", "weight row has no entries")
    span = even_spans(vocab, rank.world)[rank.rank]
    row = kernels.load_row(rank, inp, span)
    check_mass_then_k(rank, row.weights, k, vocab)
    result = allocate_row(rank, span, row.weights, k)
    return gathered(rank, result.counts), None if result.top is None else result.top.support, row


def logit_weights(rank: Rank, row: kernels.LocalRow) -> dict:
    """``{"weights": f32[V]}`` for a logits row (gathered), else nothing."""
    if row.weights_f32 is None:
        return {}
    return {"weights": f32_blob(gathered(rank, row.weights_f32))}


def allocation_dense(rank: Rank, inp: dict) -> dict | None:
    counts, _, row = allocation_row(rank, inp, None)
    weights = logit_weights(rank, row)
    return {"counts": encode_ints("u32", counts), **weights} if rank.is_leader else None


def allocation_sparse(rank: Rank, inp: dict) -> dict | None:
    counts, support, row = allocation_row(rank, inp, inp["k"])
    assert support is not None  # a k was given: the row has a global top-k support
    weights = logit_weights(rank, row)
    if not rank.is_leader:
        return None
    sparse = q_row_json(counts[support], support)
    return {"ids": sparse["ids"], "counts": sparse["counts"], "support": encode_ints("i32", support), **weights}


# --- sharding ------------------------------------------------------------------------------------


def sharding(rank: Rank, inp: dict) -> dict | None:
    return residual_case(rank, inp) if "q_row" in inp else proposal_case(rank, inp)


def proposal_case(rank: Rank, inp: dict) -> dict | None:
    """Per-shard partials, the merged result and the sharded proposal draws of one row (R30-R32)."""
    vocab = row_vocab(inp)
    spans = checked_spans(inp["shard_ranges"], vocab, rank.world)
    k = inp["support"]["k"] if inp["support"]["policy"] == "top_k" else None
    row = kernels.load_row(rank, inp, spans[rank.rank])
    check_mass_then_k(rank, row.weights, k, vocab)
    result = allocate_row(rank, spans[rank.rank], row.weights, k)
    draws = [kernels.sample_proposal(rank, result.counts, spans, u) for u in inp["proposal_draws"]]
    report = shard_report(rank, row, result)
    if not rank.is_leader:
        return None
    return {
        "shards": shard_partials(report, result),
        "merged": merged_result(report, row, result),
        "draws": [draw_json(d, "u24", u) for d, u in zip(draws, inp["proposal_draws"])],
    }


def shard_report(rank: Rank, row: kernels.LocalRow, result: RowCounts) -> dict:
    """Every shard's partial results and the full counts, all-gathered for the leader's answer
    (a report: the algorithm above never needed them)."""
    allocation = result.allocation
    return {
        "shifted": rank.gather_exact_sums(row.weights),
        "domain_sums": rank.gather_exact_sums(row.weights[result.owned]),
        "parts": rank.all_gather(
            rank.ints([allocation.floor_sum, allocation.tickets, int(result.counts.sum())])
        ).tolist(),
        "maxes": None if row.local_max is None else rank.all_gather(row.local_max.reshape(1)),
        "candidates": None if result.top is None else rank.all_gather_ragged(result.top.candidates, -1),
        "counts": gathered(rank, result.counts),
    }


def shard_partials(report: dict, result: RowCounts) -> list[dict]:
    """The ``shards`` answer: each shard's max, sums, candidates, floors, remainders, tickets, count mass."""
    shards = []
    for s, (floor_sum, tickets, mass) in enumerate(report["parts"]):
        remainder_sum = M * report["domain_sums"][s] / result.allocation.total - floor_sum
        shard = {
            "shifted_sum": rational(report["shifted"][s]),
            "floor_sum": floor_sum,
            "tickets": tickets,
            "count_mass": mass,
            "remainder_sum": rational(remainder_sum),
        }
        if report["maxes"] is not None:
            shard["max"] = f32_json(report["maxes"][s])
        if report["candidates"] is not None:
            shard["candidates"] = encode_ints("i32", report["candidates"][s])
            shard["support_sum"] = rational(report["domain_sums"][s])
        shards.append(shard)
    return shards


def merged_result(report: dict, row: kernels.LocalRow, result: RowCounts) -> dict:
    """The ``merged`` answer: global max and sum, support, remaining tickets, the one q row."""
    merged = {"shifted_sum": rational(sum(report["shifted"], Fraction(0))), "remaining": result.allocation.remaining}
    if row.global_max is not None:
        merged["max"] = f32_json(row.global_max)
    if result.top is None:
        merged["row"] = q_row_json(report["counts"], None)
    else:
        support = result.top.support
        merged.update(
            support=encode_ints("i32", support),
            support_sum=rational(result.allocation.total),
            row=q_row_json(report["counts"][support], support),
        )
    return merged


def draw_json(draw: kernels.Drawn, key: str, value: int) -> dict:
    return {key: value, "shard": draw.shard, "local_token": draw.local_token, "token": draw.token}


def residual_mass(rank: Rank, target: torch.Tensor, q_counts: torch.Tensor, total: float) -> torch.Tensor:
    """FP64 ``max(w_v * M - c_v * W, 0)`` for EVERY owned token: the residual up to the factor ``1 / (M W)`` (R33)."""
    mass = residual_rows(
        target[None].to(torch.float64), q_counts[None], torch.tensor([total], dtype=torch.float64, device=rank.device)
    )[0]
    if rank.mutant == "residual-support-only" and not rank.is_leader:
        mass = torch.where(q_counts > 0, mass, 0.0)
    return mass


def residual_case(rank: Rank, inp: dict) -> dict | None:
    """Per-shard target sums and residual supports, and the sharded correction draws (R33)."""
    vocab = inp["p_weights"]["shape"][0]
    spans = checked_spans(inp["shard_ranges"], vocab, rank.world)
    span = spans[rank.rank]
    q_counts = q_row_counts(inp["q_row"], vocab, rank.device)[span.start : span.end]
    try:
        target = kernels.load_row(rank, {"weights": inp["p_weights"]}, span).weights
    except CandidateError as error:  # a target row is p: every way it fails to be one is R10's code
        if error.code not in kernels.WEIGHT_CODES:
            raise
        raise CandidateError("BAD_TARGET_ROW", f"target weights: {error.detail}") from None
    total = rank.exact_sum(target)[0]
    if total <= 0:
        raise CandidateError("BAD_TARGET_ROW", "the all-reduced target sum is not positive")
    mass = residual_mass(rank, target, q_counts, fp64(total, "BAD_TARGET_ROW"))
    if inp["residual_draws"] and not float(rank.all_reduce(mass.sum().reshape(1))[0]) > 0:
        raise CandidateError("ZERO_MASS", "the residual max(p - q, 0) is zero on every rank: nothing to draw")
    draws = [kernels.sample_mass(rank, mass, spans, u) for u in inp["residual_draws"]]
    target_sums = rank.gather_exact_sums(target)
    positive = rank.all_gather(rank.ints([int((mass > 0).sum())])).reshape(-1).tolist()
    if not rank.is_leader:
        return None
    return {
        "shards": [{"target_sum": rational(t), "residual_tokens": n} for t, n in zip(target_sums, positive)],
        "merged": {"target_sum": rational(total)},
        "draws": [draw_json(d, "u32", u) for d, u in zip(draws, inp["residual_draws"])],
    }


# --- verification_round --------------------------------------------------------------------------


def leader_words(
    rank: Rank, key: torch.Tensor, position: torch.Tensor, round_id: torch.Tensor, generation: torch.Tensor, domain: int
) -> torch.Tensor:
    """32-bit draws computed by the leader alone (the target-side RNG owner, R23) and broadcast."""
    if rank.is_leader:
        words = u32_of(draw_word0(key, position, round_id, generation, domain)[1])
    else:
        words = torch.zeros(
            torch.broadcast_shapes(position.shape, round_id.shape, generation.shape),
            dtype=torch.int64,
            device=rank.device,
        )
    return rank.broadcast(words, src=0)


def draft_probabilities(rank: Rank, p_local: torch.Tensor, drafts: torch.Tensor, span: Span) -> torch.Tensor:
    """Target weights ``w(x_i)`` ``[B, K]`` of every draft: the owner contributes, an all-reduced sum."""
    depth = drafts.shape[1]
    mine = (drafts >= span.start) & (drafts < span.end)
    local = torch.where(mine, drafts - span.start, 0)
    values = (
        p_local[:, :depth].gather(2, local[:, :, None]).squeeze(2)
        if span.size
        else torch.zeros_like(drafts, dtype=torch.float64)
    )
    return rank.all_reduce(torch.where(mine, values, 0.0))


def request_round(rank: Rank, request: dict, b: int, verdicts: dict) -> dict:
    """One request's accepted count, emitted tokens and consumed draws (control replicated on every rank)."""
    drafts, ok, u_accept = verdicts["drafts"][b], verdicts["ok"][b], verdicts["u_accept"][b]
    anchor, stops, budget = request["anchor"], set(request.get("stop_tokens", ())), request.get("budget")
    emitted, draws, final = [], [], None
    for i, token in enumerate(drafts):
        draws.append(
            {
                "domain": DOMAIN_NAMES[ACCEPT],
                "position": (anchor + i) & MASK32,
                "draw_counter": 0,
                "u32": u_accept[i],
                "decision": "accept" if ok[i] else "reject",
                "token": token,
            }
        )
        if not ok[i]:
            final = "correction"
            break
        emitted.append(token)
        if token in stops or (budget is not None and len(emitted) >= budget):
            break
    else:
        final = "bonus"
    accepted = len(emitted)
    if final is not None:
        token, u32 = final_draw(rank, verdicts, b, accepted, final == "correction")
        draws.append(
            {
                "domain": DOMAIN_NAMES[CORRECTION],
                "position": (anchor + accepted) & MASK32,
                "draw_counter": 0,
                "u32": u32,
                "decision": final,
                "token": token,
            }
        )
        emitted.append(token)
    return {"accepted": accepted, "emitted": emitted, "draws": draws}


def final_draw(rank: Rank, verdicts: dict, b: int, j: int, correction: bool) -> tuple[int, int]:
    """(token, u32) of the correction after ``j`` accepted drafts, or of the bonus, drawn sharded (R33)."""
    position = (verdicts["anchor"][b : b + 1] + j) & MASK32
    word = leader_words(
        rank,
        verdicts["key"][b : b + 1],
        position,
        verdicts["round"][b : b + 1],
        verdicts["generation"][b : b + 1],
        CORRECTION,
    )
    u32 = int(word[0])
    target = verdicts["p_local"][b, j]
    if correction:
        mass = residual_mass(rank, target, verdicts["q_local"][b, j], float(verdicts["total"][b, j]))
    else:
        mass = target
    return kernels.sample_mass(rank, mass, verdicts["spans"], u32).token, u32


def verification_round(rank: Rank, inp: dict) -> dict | None:
    """Standard verification of a batch, sharded over the vocabulary (R11, R33); draws owned by the leader."""
    vocab, requests = inp["vocab"], inp["requests"]
    refusal = verification_refusal(inp)  # the documented order, request by request (verification_inputs)
    if refusal is not None:
        raise CandidateError(refusal, "refused before any kernel runs")
    device = rank.device
    q = torch.stack([q_rows_dense(r["q_rows"], vocab, device) for r in requests])
    p = torch.stack([p_rows_f64(r["p_rows"], device, vocab) for r in requests])
    drafts = torch.tensor([r["draft_tokens"] for r in requests], dtype=torch.int64, device=device)
    check_shapes(drafts, q, p)
    spans = even_spans(vocab, rank.world)
    span = spans[rank.rank]
    p_local = p[:, :, span.start : span.end]
    rank.agree(
        "BAD_TARGET_ROW" if bool((~torch.isfinite(p_local) | (p_local < 0)).any()) else None, ("BAD_TARGET_ROW",)
    )
    totals = rank.exact_sum(p_local)
    if any(t <= 0 for t in totals):
        raise CandidateError("BAD_TARGET_ROW", "a target row has no mass")
    if bool(((drafts < 0) | (drafts >= vocab)).any()):
        raise CandidateError("TOKEN_OUT_OF_RANGE", "draft token")
    c_x = q.gather(2, drafts[:, :, None]).squeeze(2)
    if bool((c_x == 0).any()):
        raise CandidateError("ZERO_Q_AT_TOKEN", "draft token")
    key = seed_keys([request_seed(r) for r in requests], device)
    fields = {
        name: torch.tensor([r[name] for r in requests], dtype=torch.int64, device=device)
        for name in ("anchor", "round", "generation")
    }
    total = torch.tensor([fp64(t, "BAD_TARGET_ROW") for t in totals], dtype=torch.float64, device=device).reshape(
        p.shape[:2]
    )
    depth = drafts.shape[1]
    steps = torch.arange(depth, device=device)
    u_accept = leader_words(
        rank,
        key,
        (fields["anchor"][:, None] + steps) & MASK32,
        fields["round"][:, None],
        fields["generation"][:, None],
        ACCEPT,
    )
    ok = accepts(u_accept, c_x, draft_probabilities(rank, p_local, drafts, span), total[:, :depth])
    verdicts = {
        "drafts": drafts.tolist(),
        "ok": ok.tolist(),
        "u_accept": u_accept.tolist(),
        "key": key,
        "p_local": p_local,
        "q_local": q[:, :, span.start : span.end],
        "total": total,
        "spans": spans,
        **fields,
    }
    results = [request_round(rank, r, b, verdicts) for b, r in enumerate(requests)]
    return {"requests": results} if rank.is_leader else None


FAMILIES: dict[str, Callable[[Rank, dict], dict | None]] = {
    "sharding": sharding,
    "allocation_dense": allocation_dense,
    "allocation_sparse": allocation_sparse,
    "verification_round": verification_round,
}
