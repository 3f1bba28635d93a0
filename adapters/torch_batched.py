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


# --- blocks: the accumulated cases as arrays, answered as records (docs/accumulated.md, "Blocks") ---

PAD = MASK32
#: record words of each family's block answer (docs/accumulated.md, "Records")
RECORD_WORDS = {"rng_abi": 10, "categorical_sampling": 4, "allocation_dense": 8, "verification_round": 39}
DECISIONS = {"accept": 0, "reject": 1, "correction": 2, "bonus": 3}


def groups(*keys: np.ndarray) -> list[tuple[tuple[int, ...], np.ndarray]]:
    """The cases of a block by the values of ``keys`` (shape fields): (values, case indices)."""
    stacked = np.stack([np.asarray(k, dtype=np.int64) for k in keys], axis=1)
    values, inverse = np.unique(stacked, axis=0, return_inverse=True)
    order = np.argsort(inverse.reshape(-1), kind="stable")
    bounds = np.searchsorted(inverse.reshape(-1)[order], np.arange(len(values) + 1))
    return [(tuple(int(v) for v in values[g]), order[bounds[g] : bounds[g + 1]]) for g in range(len(values))]


def tensor(values: np.ndarray, device: str) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(values, dtype=np.int64)).to(device)


def rng_block(block: dict[str, np.ndarray], device: str, cases: int) -> np.ndarray:
    seed = block["seed"].astype(np.uint64)
    key = tensor(np.stack([seed & np.uint64(MASK32), seed >> np.uint64(32)], axis=1), device)
    position, rnd, generation, draw_counter = (
        tensor(block[name], device) for name in ("position", "round", "generation", "draw_counter")
    )
    out = np.empty((cases, 10), dtype=np.int64)
    for (domain,), members in groups(block["domain"]):
        index = torch.from_numpy(members).to(device)
        counter = philox.counter_words(position[index], rnd[index], generation[index], domain, draw_counter[index])
        words = philox.philox4x32_10(counter, key[index])
        out[members] = torch.cat([counter, words, (words[:, :1] >> 8), words[:, :1]], dim=1).cpu().numpy()
    return out


def categorical_block(block: dict[str, np.ndarray], device: str, cases: int) -> np.ndarray:
    out = np.full((cases, 4), PAD, dtype=np.int64)
    for (vocab,), members in groups(block["vocab"]):
        counts = block["counts"][members, :vocab].astype(np.int64)
        if not legal_dense(counts):
            continue  # refused: the harness asks these cases one by one
        draws = tensor(block["draws"][members], device)
        tokens = sampling.sample_counts(
            tensor(counts, device).repeat_interleave(draws.shape[1], dim=0), draws.reshape(-1)
        )
        out[members] = tokens.reshape(len(members), -1).cpu().numpy()
    return out


def allocation_block(block: dict[str, np.ndarray], device: str, cases: int) -> np.ndarray:
    out = np.zeros((cases, 8), dtype=np.int64)
    for (vocab,), members in groups(block["vocab"]):
        w = torch.from_numpy(np.ascontiguousarray(block["weights"][members, :vocab])).to(device)
        try:
            weights.validate_weights(w)
            out[members, :vocab] = allocation.largest_remainder_counts(w).cpu().numpy()
        except REFUSALS:
            out[members] = PAD
    return out


def verification_block(block: dict[str, np.ndarray], device: str, cases: int) -> np.ndarray:
    out = np.full((cases, 39), PAD, dtype=np.int64)
    for (vocab, depth), members in groups(block["vocab"], block["depth"]):
        q = block["q"][members, :depth, :vocab].astype(np.int64)
        if not legal_dense(q):
            continue
        p = block["p"][members, : depth + 1, :vocab].astype(np.float64)
        drafts = block["drafts"][members, :depth].astype(np.int64)
        try:
            result = verification.verify_round(
                block["seed"][members].tolist(),
                tensor(block["generation"][members], device),
                tensor(block["round"][members], device),
                tensor(block["anchor"][members], device),
                tensor(drafts, device),
                tensor(q, device),
                torch.from_numpy(p).to(device),
                [[] for _ in members],
                [None for _ in members],
            )
        except REFUSALS:
            continue
        out[members] = verification_records(result, depth)
    return out


def verification_records(result: verification.VerifiedRound, depth: int) -> np.ndarray:
    """Records ``[B, 39]`` of one verify_round call: accepted, emitted count, emitted tokens padded
    to 6, draw count, then per draw (domain, position, u32, decision, token) padded to 6 draws."""
    t = {
        name: getattr(result, name).cpu().numpy()
        for name in (
            "anchor",
            "draft_tokens",
            "accepted",
            "accept_u32",
            "accept_ok",
            "accept_draws",
            "final_kind",
            "final_position",
            "final_u32",
            "final_token",
            "emitted",
            "emitted_count",
        )
    }
    batch = len(t["accepted"])
    rows = np.arange(batch)
    has_final = t["final_kind"] > 0
    record = np.full((batch, 39), PAD, dtype=np.int64)
    record[:, 0] = t["accepted"]
    record[:, 1] = t["emitted_count"]
    record[:, 2 : 2 + depth + 1] = t["emitted"] & MASK32  # -1 (none) is the padding word
    record[:, 8] = t["accept_draws"] + has_final
    draws = np.full((batch, 6, 5), PAD, dtype=np.int64)
    steps = np.arange(depth)
    consumed = steps[None, :] < t["accept_draws"][:, None]
    accept = np.stack(
        [
            np.full((batch, depth), philox.ACCEPT),
            (t["anchor"][:, None] + steps[None, :]) & MASK32,
            t["accept_u32"],
            np.where(t["accept_ok"], DECISIONS["accept"], DECISIONS["reject"]),
            t["draft_tokens"],
        ],
        axis=2,
    )
    draws[:, :depth] = np.where(consumed[:, :, None], accept, PAD)
    final = np.stack(
        [
            np.full(batch, philox.CORRECTION),
            t["final_position"],
            t["final_u32"],
            np.where(t["final_kind"] == 1, DECISIONS["correction"], DECISIONS["bonus"]),
            t["final_token"],
        ],
        axis=1,
    )
    slot = t["accept_draws"]
    draws[rows[has_final], slot[has_final]] = final[has_final]
    record[:, 9:] = draws.reshape(batch, 30)
    return record


BLOCKS = {
    "rng_abi": rng_block,
    "categorical_sampling": categorical_block,
    "allocation_dense": allocation_block,
    "verification_round": verification_block,
}


def run_block(family: str, block: dict[str, np.ndarray], device: str) -> np.ndarray:
    """The records ``uint32 [cases, words]`` of a block; a group of cases the candidate refuses is
    all padding (the harness then asks those cases one by one and judges their refusals)."""
    cases = len(next(iter(block.values())))
    records = BLOCKS[family](block, device, cases)
    return np.ascontiguousarray(records & MASK32, dtype="<u4")
