"""Many cases of one family in one kernel call: the torch adapter's vectorised ``run_batch`` path.

``qconform accumulate`` (docs/accumulated.md) sends thousands of independent cases in
one ``run_batch`` call. Cases of the same shape (for instance, every single-request
``verification_round`` case over the same V and depth) are decoded together and run
through the candidate's batched kernels once, instead of once per case; the answers
are the ones each case gets alone (every kernel is batch invariant, which
``qconform batch-invariance`` checks).

A case outside the simple shapes handled here (sparse rows, stop tokens, budgets,
logits, several requests), and every case of a group whose kernel call refuses, is
answered by the adapter's ordinary one-case path, so refusals stay per case.
Like the rest of the adapter, this module never imports the spec or the generators.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from qconform.adapters.batched_inputs import (
    Batched,
    allocation_key,
    blobs,
    categorical_key,
    legal_dense,
    rng_key,
    verification_key,
)
from qconform.adapters.batched_inputs import run_many as batched_run_many
from qconform.adapters.torch_candidate import allocation, philox, sampling, verification, weights
from qconform.adapters.torch_candidate.errors import CandidateError
from qconform.adapters.torch_codec import DOMAINS, draw_answer, encode_ints, request_answers

MASK32 = 0xFFFFFFFF


# --- one function per family: (inputs of one shape, device) -> answers ---------------------


def rng_many(inputs: Sequence[dict], device: str) -> list[dict]:
    key = philox.seed_keys([int(inp["seed"]) for inp in inputs], device)
    fields = torch.tensor(
        [[inp["position"], inp["round"], inp["generation"], inp["draw_counter"]] for inp in inputs],
        dtype=torch.int64,
        device=device,
    )
    if bool(((fields[:, :3] < 0) | (fields[:, :3] > MASK32)).any()):
        raise CandidateError("BAD_RNG_FIELD", "position, round and generation are 32-bit words")
    counter = philox.counter_words(fields[:, 0], fields[:, 1], fields[:, 2], DOMAINS[inputs[0]["domain"]], fields[:, 3])
    out = philox.philox4x32_10(counter, key).tolist()
    return [draw_answer(k, c, o) for k, c, o in zip(key.tolist(), counter.tolist(), out)]


def categorical_many(inputs: Sequence[dict], device: str) -> list[dict]:
    vocab, n_draws = inputs[0]["vocab"], len(inputs[0]["draws"])
    counts = blobs([inp["row"]["counts"] for inp in inputs], "u32", "<u4").astype(np.int64).reshape(len(inputs), vocab)
    if not legal_dense(counts):
        raise CandidateError("WRONG_TOTAL_MASS", "a q row is not a dyadic24 row")
    draws = torch.tensor([inp["draws"] for inp in inputs], dtype=torch.int64, device=device).reshape(-1)
    rows = torch.from_numpy(counts).to(device).repeat_interleave(n_draws, dim=0)
    tokens = sampling.sample_counts(rows, draws).reshape(len(inputs), n_draws).tolist()
    return [{"tokens": t} for t in tokens]


def allocation_many(inputs: Sequence[dict], device: str) -> list[dict]:
    vocab = inputs[0]["weights"]["shape"][0]
    bits = blobs([inp["weights"] for inp in inputs], "f32", "<f4").reshape(len(inputs), vocab)
    w = torch.from_numpy(bits.copy()).to(device)
    weights.validate_weights(w)
    counts = allocation.largest_remainder_counts(w)
    return [{"counts": encode_ints("u32", row)} for row in counts]


def verification_many(inputs: Sequence[dict], device: str) -> list[dict]:
    vocab, depth = inputs[0]["vocab"], len(inputs[0]["requests"][0]["draft_tokens"])
    requests = [inp["requests"][0] for inp in inputs]
    batch = len(requests)
    q = blobs([row["counts"] for r in requests for row in r["q_rows"]], "u32", "<u4").astype(np.int64)
    q = q.reshape(batch, depth, vocab)
    if not legal_dense(q):
        raise CandidateError("WRONG_TOTAL_MASS", "a q row is not a dyadic24 row")
    p_blobs = [r["p_rows"]["weights"] for r in requests]
    if any(b["shape"] != [depth + 1, vocab] for b in p_blobs):
        raise ValueError("p rows of another shape")
    p = torch.from_numpy(blobs(p_blobs, "f32", "<f4").astype(np.float64).reshape(batch, depth + 1, vocab)).to(device)
    drafts = torch.tensor([r["draft_tokens"] for r in requests], dtype=torch.int64, device=device)
    result = verification.verify_round(
        [int(r["seed"]) for r in requests],
        [r["generation"] for r in requests],
        [r["round"] for r in requests],
        [r["anchor"] for r in requests],
        drafts,
        torch.from_numpy(q).to(device),
        p,
        [[] for _ in requests],
        [None for _ in requests],
    )
    return [{"requests": [answer]} for answer in request_answers(result)]


#: family -> (shape key of an input, or None when this path does not take it; the batched solver)
BATCHED: dict[str, Batched] = {
    "rng_abi": (rng_key, rng_many),
    "categorical_sampling": (categorical_key, categorical_many),
    "allocation_dense": (allocation_key, allocation_many),
    "verification_round": (verification_key, verification_many),
}

#: a batched call that raises one of these is answered one case at a time, so each case gets its own refusal
REFUSALS = (CandidateError, KeyError, ValueError, TypeError, IndexError, RuntimeError)


def run_many(family: str, inputs: Sequence[dict], device: str) -> list[dict | None]:
    """Answers of the inputs this path takes, grouped by shape; None where the caller must
    answer one case at a time (another shape, or a group whose batched call refused)."""
    return batched_run_many(BATCHED, family, inputs, device, REFUSALS)
