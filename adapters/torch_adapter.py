"""The ``torch`` adapter: the harness's view of the independent torch candidate.

This module is glue only: it decodes a case ``input`` (docs/formats/) into tensors,
calls the kernels of :mod:`qconform.adapters.torch_candidate`, and encodes their
answer. Like the kernels, it never imports the spec package or the generators
(tests/adapters/test_candidate_independence.py checks it, transitively): the candidate
must be an independent implementation, and even its JSON codec is its own.

Mutants (:mod:`qconform.adapters.torch_mutants`) reuse this adapter with one
kernel function replaced by a seeded bug.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Callable, Sequence

import torch

from qconform.adapters import torch_batched
from qconform.adapters.torch_candidate import allocation, philox, proposal, qrow, sampling, verification, weights
from qconform.adapters.torch_candidate.errors import CandidateError
from qconform.adapters.torch_codec import (
    DOMAINS,
    blob_tensor,
    draw_answer,
    encode_ints,
    request_answers,
    word,
)
from qconform.adapters.verification_inputs import verification_refusal
from qconform.harness.adapter import Adapter, AdapterError, Capabilities, Outcome, PrecisionProfile, Unimplemented

MAX_REQUESTS = 4


# --- the adapter's own codec (docs/vector-format.md; blobs, words: torch_codec) -------------


def f32_scalar(obj: dict) -> float:
    """The FP32 value of ``{"f32": "0x........"}``."""
    return torch.tensor([int(obj["f32"], 16)], dtype=torch.int64).to(torch.int32).view(torch.float32).item()


def q_row_counts(row: dict, vocab: int, device: str | torch.device) -> torch.Tensor:
    """One q row (dense or sparse dyadic24 counts) as int64 dense counts ``[V]``,
    refused unless legal (:func:`qrow.legal_q_row`: R03, R07, R19)."""
    ids = blob_tensor(row["ids"], device) if row["representation"] == "sparse" else None
    return qrow.legal_q_row(blob_tensor(row["counts"], device), ids, vocab)


def q_rows_dense(rows: Sequence[dict], vocab: int, device: str | torch.device) -> torch.Tensor:
    """q rows as int64 dense counts ``[n, V]``."""
    return torch.stack([q_row_counts(row, vocab, device) for row in rows])


def p_rows_f64(obj: dict, device: str | torch.device, vocab: int | None = None) -> torch.Tensor:
    """Target rows as FP64 weights ``[R, V]`` (rational rows are rounded: not exact); BAD_SHAPE for a
    rational row without ``vocab`` entries (when given), BAD_TARGET_ROW for one that does not sum to 1."""
    if "weights" in obj:
        return blob_tensor(obj["weights"], device).to(torch.float64)
    rows = [[Fraction(*map(int, v.split("/"))) for v in row] for row in obj["probabilities"]]
    if vocab is not None and any(len(row) != vocab for row in rows):
        raise CandidateError("BAD_SHAPE", f"a target row does not have {vocab} entries")
    if any(sum(row) != 1 for row in rows):
        raise CandidateError("BAD_TARGET_ROW", "a target row does not sum to exactly 1")
    return torch.tensor([[float(v) for v in row] for row in rows], dtype=torch.float64, device=device)


def q_row_json(counts: torch.Tensor, ids: torch.Tensor | None) -> dict:
    if ids is None:
        return {"representation": "dense", "counts": encode_ints("u32", counts)}
    keep = counts > 0
    return {
        "representation": "sparse",
        "ids": encode_ints("i32", ids[keep]),
        "counts": encode_ints("u32", counts[keep]),
    }


# --- one function per family ---------------------------------------------------------------


def rng_abi(inp: dict, device: str) -> dict:
    if "counter" in inp:
        counter = torch.tensor([[int(w, 16) for w in inp["counter"]]], dtype=torch.int64, device=device)
        key = torch.tensor([[int(w, 16) for w in inp["key"]]], dtype=torch.int64, device=device)
        return {"output": [word(w) for w in philox.philox4x32_10(counter, key)[0].tolist()]}
    if "request_id" in inp:
        return {"seed": str(philox.request_seed(inp))}
    key = philox.seed_keys([int(inp["seed"])], device)
    if "depth" in inp:
        return rng_schedule(inp, key, device)
    fields = [inp["position"], inp["round"], inp["generation"]]
    if any(not 0 <= f < 1 << 32 for f in fields):
        raise CandidateError("BAD_RNG_FIELD", "position, round and generation are 32-bit words")
    pos, rnd, gen = (torch.tensor([f], dtype=torch.int64, device=device) for f in fields)
    counter = philox.counter_words(pos, rnd, gen, DOMAINS[inp["domain"]], inp["draw_counter"])
    return draw_answer(key[0].tolist(), counter[0].tolist(), philox.philox4x32_10(counter, key)[0].tolist())


def rng_schedule(inp: dict, key: torch.Tensor, device: str) -> dict:
    """Every draw key of a round: K proposal, K acceptance and K + 1 correction positions."""
    depth, anchor = inp["depth"], inp["anchor"]
    rnd = torch.tensor([[inp["round"]]], dtype=torch.int64, device=device)
    gen = torch.tensor([[inp["generation"]]], dtype=torch.int64, device=device)

    def draws(domain: int, count: int, value: Callable[[torch.Tensor], torch.Tensor]) -> list[dict]:
        pos = (anchor + torch.arange(count, device=device, dtype=torch.int64)[None, :]) & 0xFFFFFFFF
        counters, word0 = philox.draw_word0(key, pos, rnd, gen, domain)
        return [
            {
                "position": int(pos[0, i]),
                "counter": [word(w) for w in counters[0, i].tolist()],
                "value": int(value(word0)[0, i]),
            }
            for i in range(count)
        ]

    return {
        "proposal": draws(philox.PROPOSAL, depth, philox.u24_of),
        "accept": draws(philox.ACCEPT, depth, philox.u32_of),
        "correction": draws(philox.CORRECTION, depth + 1, philox.u32_of),
    }


def categorical_sampling(inp: dict, device: str) -> dict:
    counts = q_row_counts(inp["row"], inp["vocab"], device)
    draws = torch.tensor(inp["draws"], dtype=torch.int64, device=device)
    return {"tokens": sampling.sample_counts(counts.expand(len(inp["draws"]), -1), draws).tolist()}


def row_weights(inp: dict, device: str) -> tuple[torch.Tensor, dict]:
    """Validated weights ``[1, V]`` of an allocation input, and the answer fields they add
    (the FP32 weights computed from a logits row)."""
    if "weights" in inp:
        w = blob_tensor(inp["weights"], device)[None, :]
        if w.shape[-1] == 0:
            raise CandidateError("EMPTY_ROW", "weight row has no entries")
        weights.validate_weights(w)
        return w, {}
    logits = blob_tensor(inp["logits"], device)[None, :]
    w = weights.logits_to_weights(logits, f32_scalar(inp["temperature"]), None)
    return w, {"weights": encode_ints("f32", w[0].view(torch.int32))}


def allocation_dense(inp: dict, device: str) -> dict:
    w, extra = row_weights(inp, device)
    counts = allocation.largest_remainder_counts(w)
    return {"counts": encode_ints("u32", counts[0]), **extra}


def allocation_sparse(inp: dict, device: str) -> dict:
    k = inp["k"]
    w, extra = row_weights(inp, device)  # the row's refusals come before k's (docs/formats/allocation_invalid.md)
    if not 1 <= k <= w.shape[-1]:
        raise CandidateError("BAD_SUPPORT_SIZE", f"k = {k}")
    support = allocation.top_k_support(w, k)
    counts = allocation.largest_remainder_counts(w.gather(1, support))
    row = q_row_json(counts[0], support[0])
    return {"ids": row["ids"], "counts": row["counts"], "support": encode_ints("i32", support[0]), **extra}


def allocation_invalid(inp: dict, device: str) -> dict:
    return allocation_sparse(inp, device) if "k" in inp else allocation_dense(inp, device)


def propose_batch(requests: Sequence[dict], device: str) -> list[dict]:
    """Proposal chains of one batch of requests of one draft model, in ONE batched
    ``propose`` call: each request keeps its own identity, last token, temperature
    and base logits (R22); more than four requests, or requests of different
    depths, support policies or Markov heads are BAD_SHAPE (R27)."""
    if not 1 <= len(requests) <= MAX_REQUESTS:
        raise CandidateError("BAD_SHAPE", f"{len(requests)} requests; a batch holds 1 to {MAX_REQUESTS} (R27)")
    first = requests[0]
    if any(
        r["support"] != first["support"]
        or r["markov"] != first["markov"]
        or r["base_logits"]["shape"][0] != first["base_logits"]["shape"][0]  # the rows, not the depth field
        for r in requests
    ):
        raise CandidateError("BAD_SHAPE", "a batch has one depth, one support policy and one Markov head")
    base = torch.stack([blob_tensor(r["base_logits"], device) for r in requests])
    if base.shape[1] != first["depth"]:
        raise CandidateError("BAD_SHAPE", f"depth {first['depth']} with {base.shape[1]} base logit rows")
    left = blob_tensor(first["markov"]["left"], device)
    right = blob_tensor(first["markov"]["right"], device)
    top_k = first["support"]["k"] if first["support"]["policy"] == "top_k" else None
    field = lambda name: [r[name] for r in requests]  # noqa: E731
    result = proposal.propose(
        [int(r["seed"]) for r in requests],
        field("generation"),
        field("round"),
        field("anchor"),
        field("last_committed_token"),
        base,
        [f32_scalar(r["temperature"]) for r in requests],
        (left, right),
        top_k,
    )
    answers = []
    for b in range(len(requests)):
        if result.sparse is None:
            assert result.counts is not None  # a dense proposal (no top-k) carries its counts
            rows = [q_row_json(result.counts[b, i], None) for i in range(base.shape[1])]
        else:
            rows = [q_row_json(result.sparse.counts[b, i], result.sparse.ids[b, i]) for i in range(base.shape[1])]
        draws = [
            {
                "position": int(result.counters[b, i, 0]),
                "counter": [word(w) for w in result.counters[b, i].tolist()],
                "u24": int(result.u24[b, i]),
            }
            for i in range(base.shape[1])
        ]
        answers.append({"tokens": result.tokens[b].tolist(), "rows": rows, "draws": draws})
    return answers


def proposal_chain(inp: dict, device: str) -> dict:
    return propose_batch([inp], device)[0]


def proposal_batch(inp: dict, device: str) -> dict:
    return {"requests": propose_batch(inp["requests"], device)}


def verification_round(inp: dict, device: str) -> dict:
    vocab, requests = inp["vocab"], inp["requests"]
    refusal = verification_refusal(inp)  # the documented order, request by request (verification_inputs)
    if refusal is not None:
        raise CandidateError(refusal, "refused before any kernel runs")
    q = torch.stack([q_rows_dense(r["q_rows"], vocab, device) for r in requests])
    p = torch.stack([p_rows_f64(r["p_rows"], device, vocab) for r in requests])
    drafts = torch.tensor([r["draft_tokens"] for r in requests], dtype=torch.int64, device=device)
    result = verification.verify_round(
        [philox.request_seed(r) for r in requests],
        [r["generation"] for r in requests],
        [r["round"] for r in requests],
        [r["anchor"] for r in requests],
        drafts,
        q,
        p,
        [r.get("stop_tokens", []) for r in requests],
        [r.get("budget") for r in requests],
    )
    return {"requests": request_answers(result)}


FAMILIES: dict[str, Callable[[dict, str], dict]] = {
    "rng_abi": rng_abi,
    "categorical_sampling": categorical_sampling,
    "allocation_dense": allocation_dense,
    "allocation_sparse": allocation_sparse,
    "allocation_invalid": allocation_invalid,
    "proposal_chain": proposal_chain,
    "proposal_batch": proposal_batch,
    "verification_round": verification_round,
}


class TorchAdapter(Adapter):
    """The torch candidate: FP64 allocation, FP64 ratios and residuals, Philox in torch."""

    name = "torch"
    #: its codec (torch_codec) reads blobs in both forms and answers raw ones
    raw_blobs = True

    def capabilities(self) -> Capabilities:
        return Capabilities(families=tuple(FAMILIES), injected_draws=True, devices=("cpu", "cuda"))

    def precision(self) -> PrecisionProfile:
        return PrecisionProfile(
            fp64_allocation=True,
            exp_ulp="1/1048576",  # FP64 exp rounded once to FP32: double rounding within 2^-20 ulp
            ratio_margin="1/1099511627776",  # 2^-40: FP64 row sums and products
            residual_margin="1/1099511627776",
            notes="FP64 allocation (R06), FP64 exp rounded to FP32, FP64 acceptance ratio and residual CDF.",
        )

    def run_block(self, family: str, block: dict[str, Any]) -> Any:
        """A block of accumulated cases, answered as records (docs/accumulated.md, "Blocks"), by the
        torch candidate itself only: a variant (a mutant, tensor parallel, partial, native draws)
        answers its own way in ``run_batch``, which its block answer would bypass, so it is asked
        case by case."""
        if type(self) is not TorchAdapter:
            return Unimplemented(f"{self.name} answers case by case")
        return torch_batched.run_block(family, block, self.device)

    def run_batch(self, family: str, inputs: Sequence[dict]) -> list[Outcome]:
        solve = FAMILIES[family]
        outcomes: list[Outcome] = []
        batched = torch_batched.run_many(family, inputs, self.device) if len(inputs) > 1 else [None] * len(inputs)
        for inp, answer in zip(inputs, batched):
            if answer is not None:
                outcomes.append(answer)
                continue
            try:
                outcomes.append(solve(inp, self.device))
            except CandidateError as refusal:
                outcomes.append({"error": refusal.code})
            except (KeyError, ValueError, IndexError, RuntimeError) as exc:
                outcomes.append(AdapterError(f"torch candidate could not run the case: {type(exc).__name__}: {exc}"))
        return outcomes
