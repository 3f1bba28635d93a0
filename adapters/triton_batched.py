"""Many cases of one family in one kernel launch: the Triton adapter's vectorised ``run_batch`` path.

As :mod:`qconform.adapters.torch_batched` for the torch candidate: same-shape cases
sent in one ``run_batch`` call (``qconform accumulate``, docs/accumulated.md) are
decoded together and launched once, instead of once per case. The kernels put short
rows in tiles (many cases per program, ``launch.row_tile``), so in the interpreter a
group costs about one program per kernel. Verification sends every case as its own
round of one request (R27 bounds a round, not a launch) to one ``verify_rounds``
call. A case outside the shapes handled here, and every case of a group whose launch
refuses, is answered by the adapter's one-case path. Never imports the spec or the
generators.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from qconform.adapters.batched_inputs import (
    Batched,
    allocation_key,
    blobs,
    categorical_key,
    encode_u32,
    legal_dense,
    rng_key,
    verification_key,
    word,
)
from qconform.adapters.batched_inputs import run_many as batched_run_many
from qconform.adapters.triton_adapter import DOMAINS, outcome_json
from qconform.adapters.triton_candidate import (
    Identity,
    QRows,
    TritonCandidateError,
    abi_draws,
    allocate_rows,
    raise_flags,
    sample,
    weight_scan,
)
from qconform.adapters.triton_candidate.verification import verify_rounds


def dense_rows(counts: np.ndarray, vocab: int, device: str) -> QRows:
    """Contiguous dense q rows ``[R, vocab]`` (int64) as a q-row table."""
    return QRows.of_segments(
        vocab, torch.from_numpy(counts.reshape(-1, vocab).copy()).to(device), None, len(counts), vocab
    )


def rng_many(inputs: Sequence[dict], device: str) -> list[dict]:
    rows = [
        (
            int(inp["seed"]),
            inp["position"],
            inp["round"],
            inp["generation"],
            DOMAINS[inp["domain"]],
            inp["draw_counter"],
        )
        for inp in inputs
    ]
    words = abi_draws(rows, device).tolist()
    return [
        {
            "key": [word(seed), word(seed >> 32)],
            "counter": [word(w) for w in row[:4]],
            "output": [word(w) for w in row[4:]],
            "u24": row[4] >> 8,
            "u32": row[4],
        }
        for (seed, *_), row in zip(rows, words)
    ]


def categorical_many(inputs: Sequence[dict], device: str) -> list[dict]:
    vocab = inputs[0]["vocab"]
    counts = blobs([inp["row"]["counts"] for inp in inputs], "u32", "<u4").astype(np.int64).reshape(-1, vocab)
    if not legal_dense(counts):
        raise TritonCandidateError("WRONG_TOTAL_MASS", "a q row is not a dyadic24 row")
    q = dense_rows(counts, vocab, device)
    q.check()
    draws = torch.tensor([inp["draws"] for inp in inputs], dtype=torch.int64, device=device)
    return [{"tokens": t} for t in sample(q, draws).tolist()]


def allocation_many(inputs: Sequence[dict], device: str) -> list[dict]:
    vocab = inputs[0]["weights"]["shape"][0]
    w = torch.from_numpy(blobs([inp["weights"] for inp in inputs], "f32", "<f4").reshape(-1, vocab).copy()).to(device)
    raise_flags(weight_scan(w)[0], "weights")
    flags = torch.zeros(len(inputs), dtype=torch.int32, device=device)
    counts = allocate_rows(w, flags)
    raise_flags(flags, "allocation")
    return [{"counts": encode_u32(row)} for row in counts.cpu().numpy()]


def verification_many(inputs: Sequence[dict], device: str) -> list[dict]:
    vocab, depth = inputs[0]["vocab"], len(inputs[0]["requests"][0]["draft_tokens"])
    requests = [inp["requests"][0] for inp in inputs]
    q = blobs([row["counts"] for r in requests for row in r["q_rows"]], "u32", "<u4").astype(np.int64)
    q = q.reshape(-1, vocab)
    if not legal_dense(q):
        raise TritonCandidateError("WRONG_TOTAL_MASS", "a q row is not a dyadic24 row")
    if any(r["p_rows"]["weights"]["shape"] != [depth + 1, vocab] for r in requests):
        raise ValueError("p rows of another shape")
    p = blobs([r["p_rows"]["weights"] for r in requests], "f32", "<f4").astype(np.float64)
    drafts = torch.tensor([r["draft_tokens"] for r in requests], dtype=torch.int64, device=device)
    idents = [Identity(int(r["seed"]), r["generation"], r["round"], r["anchor"]) for r in requests]
    outcomes = verify_rounds(
        idents,
        drafts,
        dense_rows(q, vocab, device),
        torch.from_numpy(p.reshape(len(requests), depth + 1, vocab)).to(device),
        [[] for _ in requests],
        [None for _ in requests],
        [1] * len(requests),  # each case is one round of one request
    )
    return [{"requests": [outcome_json(out)]} for out in outcomes]


BATCHED: dict[str, Batched] = {
    "rng_abi": (rng_key, rng_many),
    "categorical_sampling": (categorical_key, categorical_many),
    "allocation_dense": (allocation_key, allocation_many),
    "verification_round": (verification_key, verification_many),
}

#: a batched call that raises one of these is answered one case at a time, so each case gets its own refusal
REFUSALS = (TritonCandidateError, KeyError, ValueError, TypeError, IndexError, RuntimeError)


def run_many(family: str, inputs: Sequence[dict], device: str) -> list[dict | None]:
    """Answers of the inputs this path takes; None where the caller answers one case at a time."""
    with np.errstate(all="ignore"):
        return batched_run_many(BATCHED, family, inputs, device, REFUSALS)
