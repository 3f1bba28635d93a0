"""The ``triton`` adapter: the harness's view of the independent Triton candidate.

Glue only: it decodes a case ``input`` (docs/formats/) into device tensors, launches
the kernels of :mod:`qconform.adapters.triton_candidate` and encodes their answer.
Like the kernels it never imports the executable spec, the generators or the torch
candidate; its JSON codec is its own.

On a machine without CUDA the kernels run in Triton's interpreter: importing this
module sets ``TRITON_INTERPRET=1`` unless the environment already says otherwise
(Triton reads it when the kernels are defined). ``--device cuda`` runs them natively.
"""

from __future__ import annotations

import base64
import os
from fractions import Fraction
from typing import Callable, Sequence

import numpy as np
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from qconform.adapters.triton_candidate import (  # noqa: E402
    ACCEPT,
    CORRECTION,
    PROPOSAL,
    Identity,
    QRows,
    TritonCandidateError,
    abi_draws,
    allocate_rows,
    logits_to_weights,
    philox_blocks,
    propose,
    raise_flags,
    request_seed,
    sample,
    top_k_support,
    verify_batch,
    weight_scan,
)
from qconform.adapters.triton_candidate.launch import check_device, interpreting  # noqa: E402
from qconform.adapters.triton_candidate.verification import MAX_REQUESTS, RoundOutcome  # noqa: E402
from qconform.adapters.verification_inputs import verification_refusal  # noqa: E402
from qconform.harness.adapter import (  # noqa: E402
    Adapter,
    AdapterError,
    Capabilities,
    Outcome,
    PrecisionProfile,
)

DOMAINS = {"PROPOSAL": PROPOSAL, "ACCEPT": ACCEPT, "CORRECTION": CORRECTION}
DOMAIN_NAMES = {code: name for name, code in DOMAINS.items()}
NUMPY_DTYPES = {"f32": "<f4", "f64": "<f8", "i32": "<i4", "u32": "<u4", "u64": "<u8", "u8": "u1"}


# --- the adapter's own codec (docs/vector-format.md) --------------------------------------


def blob_array(blob: dict) -> np.ndarray:
    """A typed blob as a numpy array of its shape (little-endian, exact)."""
    raw = np.frombuffer(base64.b64decode(blob["b64"]), dtype=NUMPY_DTYPES[blob["dtype"]])
    return raw.reshape(blob["shape"])


def blob_tensor(blob: dict, device: str) -> torch.Tensor:
    """A blob as a tensor: floats keep their width, integers become int64."""
    array = blob_array(blob)
    if array.dtype.kind in "iu":
        array = array.astype(np.int64)
    return torch.from_numpy(array.copy()).to(device)


def encode_blob(dtype: str, values: torch.Tensor | np.ndarray) -> dict:
    """Values (integers, or floats of the blob's width) as a little-endian blob of ``dtype``."""
    array = values.detach().to("cpu").numpy() if isinstance(values, torch.Tensor) else values
    data = np.ascontiguousarray(array).astype(NUMPY_DTYPES[dtype]).tobytes()
    return {"dtype": dtype, "shape": list(array.shape), "b64": base64.b64encode(data).decode("ascii")}


def word(value: int) -> str:
    return f"0x{value & 0xFFFFFFFF:08x}"


def f32_value(obj: dict) -> float:
    """The FP32 value of ``{"f32": "0x........"}`` (exact, as a Python float)."""
    return float(np.array([int(obj["f32"], 16)], dtype=np.uint32).view(np.float32)[0])


def q_row(obj: dict) -> tuple[torch.Tensor | None, torch.Tensor]:
    """A qRow as ``(ids or None, counts)`` int64 CPU tensors (validated by the kernels)."""
    counts = blob_tensor(obj["counts"], "cpu")
    if obj["representation"] == "dense":
        return None, counts
    return blob_tensor(obj["ids"], "cpu"), counts


def q_row_json(ids: torch.Tensor | None, counts: torch.Tensor) -> dict:
    """A qRow answer: dense counts, or the positive-count entries of a sparse row."""
    if ids is None:
        return {"representation": "dense", "counts": encode_blob("u32", counts)}
    keep = counts > 0
    return {
        "representation": "sparse",
        "ids": encode_blob("i32", ids[keep]),
        "counts": encode_blob("u32", counts[keep]),
    }


def p_rows(obj: dict, vocab: int, device: str) -> torch.Tensor:
    """Target rows as FP64 weights ``[R, V]``: FP32 weights exactly, rationals rounded
    (not exact: the precision profile declares it); BAD_TARGET_ROW unless a rational
    row sums to exactly 1."""
    if "weights" in obj:
        return blob_tensor(obj["weights"], device).to(torch.float64)
    rows = [[Fraction(*map(int, v.split("/"))) for v in row] for row in obj["probabilities"]]
    if any(len(row) != vocab for row in rows):
        raise TritonCandidateError("BAD_SHAPE", f"a target row does not have {vocab} entries")
    if any(sum(row) != 1 or min(row) < 0 for row in rows):
        raise TritonCandidateError("BAD_TARGET_ROW", "a target row is not an exact distribution")
    return torch.tensor([[float(v) for v in row] for row in rows], dtype=torch.float64, device=device)


# --- one function per family ---------------------------------------------------------------


def rng_abi(inp: dict, device: str) -> dict:
    if "counter" in inp:
        counter = torch.tensor([[int(w, 16) for w in inp["counter"]]], dtype=torch.int64, device=device)
        key = torch.tensor([[int(w, 16) for w in inp["key"]]], dtype=torch.int64, device=device)
        return {"output": [word(w) for w in philox_blocks(counter, key)[0].tolist()]}
    if "request_id" in inp:
        return {"seed": str(request_seed(inp))}
    seed = int(inp["seed"])
    if "depth" in inp:
        return rng_schedule(inp, seed, device)
    row = abi_draws(
        [(seed, inp["position"], inp["round"], inp["generation"], DOMAINS[inp["domain"]], inp["draw_counter"])], device
    )[0].tolist()
    return {
        "key": [word(seed), word(seed >> 32)],
        "counter": [word(w) for w in row[:4]],
        "output": [word(w) for w in row[4:]],
        "u24": row[4] >> 8,
        "u32": row[4],
    }


def rng_schedule(inp: dict, seed: int, device: str) -> dict:
    """Every draw key of a round: K proposal, K acceptance and K + 1 correction positions."""
    depth, anchor = inp["depth"], inp["anchor"]
    plan = [("proposal", PROPOSAL, depth, 8), ("accept", ACCEPT, depth, 0), ("correction", CORRECTION, depth + 1, 0)]
    rows = [
        (seed, (anchor + i) & 0xFFFFFFFF, inp["round"], inp["generation"], domain, 0)
        for _, domain, count, _ in plan
        for i in range(count)
    ]
    words = abi_draws(rows, device).tolist()
    answer, at = {}, 0
    for name, _, count, shift in plan:
        answer[name] = [
            {"position": w[0], "counter": [word(x) for x in w[:4]], "value": w[4] >> shift}
            for w in words[at : at + count]
        ]
        at += count
    return answer


def categorical_sampling(inp: dict, device: str) -> dict:
    ids, counts = q_row(inp["row"])
    q = QRows.build(inp["vocab"], [(ids, counts)], device)
    q.check()
    draws = torch.tensor([inp["draws"]], dtype=torch.int64, device=device)
    return {"tokens": sample(q, draws)[0].tolist()}


def row_weights(inp: dict, device: str) -> tuple[torch.Tensor, dict]:
    """Validated weights ``[1, V]`` of an allocation input, and the answer fields they add
    (the FP32 weights computed from a logits row)."""
    if "weights" in inp:
        w = blob_tensor(inp["weights"], device).reshape(1, -1)
        raise_flags(weight_scan(w)[0], "weights")
        return w, {}
    logits = blob_tensor(inp["logits"], device).reshape(1, -1)
    temperature = torch.tensor([f32_value(inp["temperature"])], dtype=torch.float32, device=device)
    w, flags = logits_to_weights(logits, temperature)
    raise_flags(flags, "logits")
    return w, {"weights": encode_blob("f32", w[0])}


def allocation_dense(inp: dict, device: str) -> dict:
    w, extra = row_weights(inp, device)
    flags = torch.zeros(1, dtype=torch.int32, device=device)
    counts = allocate_rows(w, flags)
    raise_flags(flags, "allocation")
    return {"counts": encode_blob("u32", counts[0]), **extra}


def allocation_sparse(inp: dict, device: str) -> dict:
    w, extra = row_weights(inp, device)
    k, vocab = inp["k"], w.shape[1]
    if not 1 <= k <= vocab:
        raise TritonCandidateError("BAD_SUPPORT_SIZE", f"k = {k} for V = {vocab}")
    ids, support_weights = top_k_support(w, k)
    flags = torch.zeros(1, dtype=torch.int32, device=device)
    counts = allocate_rows(support_weights, flags)
    raise_flags(flags, "allocation")
    row = q_row_json(ids[0].cpu(), counts[0].cpu())
    return {"ids": row["ids"], "counts": row["counts"], "support": encode_blob("i32", ids[0]), **extra}


def allocation_invalid(inp: dict, device: str) -> dict:
    return allocation_sparse(inp, device) if "k" in inp else allocation_dense(inp, device)


def propose_batch(requests: list[dict], device: str) -> list[dict]:
    """Proposal chains of one batch of requests of one draft model, in one batched launch
    sequence; each request keeps its own identity, last token, temperature and logits."""
    if not 1 <= len(requests) <= MAX_REQUESTS:
        raise TritonCandidateError("BAD_SHAPE", f"{len(requests)} requests; a batch holds 1 to {MAX_REQUESTS} (R27)")
    first = requests[0]
    if any(
        r["support"] != first["support"]
        or r["markov"] != first["markov"]
        or r["base_logits"]["shape"][0] != first["base_logits"]["shape"][0]  # the rows, not the depth field
        for r in requests
    ):
        raise TritonCandidateError("BAD_SHAPE", "a batch has one depth, one support policy and one Markov head")
    base = torch.stack([blob_tensor(r["base_logits"], device) for r in requests])
    if base.shape[1] != first["depth"]:
        raise TritonCandidateError("BAD_SHAPE", f"depth {first['depth']} with {base.shape[1]} base logit rows")
    markov = (blob_tensor(first["markov"]["left"], device), blob_tensor(first["markov"]["right"], device))
    top_k = first["support"]["k"] if first["support"]["policy"] == "top_k" else None
    field = lambda name: [r[name] for r in requests]  # noqa: E731
    result = propose(
        [int(r["seed"]) for r in requests],
        field("generation"),
        field("round"),
        field("anchor"),
        field("last_committed_token"),
        base,
        [f32_value(r["temperature"]) for r in requests],
        markov,
        top_k,
    )
    answers = []
    for b in range(len(requests)):
        rows = [q_row_json(None if ids is None else ids.cpu(), counts.cpu()) for ids, counts in result.rows[b]]
        draws = [
            {"position": c[0], "counter": [word(w) for w in c], "u24": u}
            for c, u in zip(result.counters[b].tolist(), result.u24[b].tolist())
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
        raise TritonCandidateError(refusal, "refused before any kernel runs")
    depth = len(requests[0]["draft_tokens"])
    q = QRows.build(vocab, [q_row(row) for r in requests for row in r["q_rows"]], device)
    targets = [p_rows(r["p_rows"], vocab, device) for r in requests]
    if any(t.shape != (depth + 1, vocab) for t in targets):
        raise TritonCandidateError("BAD_SHAPE", "K drafts need K + 1 target rows over V")
    drafts = torch.tensor([r["draft_tokens"] for r in requests], dtype=torch.int64, device=device)
    idents = [Identity(request_seed(r), r["generation"], r["round"], r["anchor"]) for r in requests]
    outcomes = verify_batch(
        idents,
        drafts,
        q,
        torch.stack(targets),
        [r.get("stop_tokens", []) for r in requests],
        [r.get("budget") for r in requests],
    )
    return {"requests": [outcome_json(out) for out in outcomes]}


def outcome_json(out: RoundOutcome) -> dict:
    """One request's answer (``verification_round``): its accepted count, emitted tokens and every draw."""
    return {
        "accepted": out.accepted,
        "emitted": out.emitted,
        "draws": [
            {
                "domain": DOMAIN_NAMES[d.domain],
                "position": d.position,
                "draw_counter": 0,
                "u32": d.u32,
                "decision": d.decision,
                "token": d.token,
            }
            for d in out.draws
        ],
    }


#: family name -> the function answering one of its inputs
FAMILIES: dict[str, Callable[[dict, str], dict]] = {
    solve.__name__: solve
    for solve in (
        rng_abi,
        categorical_sampling,
        allocation_dense,
        allocation_sparse,
        allocation_invalid,
        proposal_chain,
        proposal_batch,
        verification_round,
    )
}


def answers(family: str, inputs: Sequence[dict], device: str) -> list[Outcome]:
    """The candidate's answers to a batch (:meth:`TritonAdapter.run_batch`): same-shape cases in one
    launch (docs/accumulated.md), the cases the batched path leaves, one by one. Here once, so that
    bench/triton_compile_check.py records the launches of this very path."""
    from qconform.adapters import triton_batched

    batched = triton_batched.run_many(family, inputs, device) if len(inputs) > 1 else [None] * len(inputs)
    return [
        outcome(FAMILIES[family], inp, device) if answer is None else answer for inp, answer in zip(inputs, batched)
    ]


def outcome(solve: Callable[[dict, str], dict], inp: dict, device: str) -> Outcome:
    """One answer: the encoded output, a refusal, or an error for a crash of the candidate."""
    try:
        with np.errstate(all="ignore"):  # the interpreter's numpy follows IEEE: overflow to inf is meant
            return solve(inp, device)
    except TritonCandidateError as refusal:
        return {"error": refusal.code}
    except (KeyError, ValueError, IndexError, RuntimeError) as exc:
        return AdapterError(f"triton candidate could not run the case: {type(exc).__name__}: {exc}")


class TritonAdapter(Adapter):
    """The Triton candidate: FP64 allocation, FP64 exp rounded to FP32, FP64 ratios and
    residuals, ``tl.philox`` draws; natively on CUDA, in the interpreter on CPU."""

    name = "triton"

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        check_device(device)

    def capabilities(self) -> Capabilities:
        return Capabilities(families=tuple(FAMILIES), injected_draws=True, devices=("cpu", "cuda"))

    def precision(self) -> PrecisionProfile:
        return PrecisionProfile(
            fp64_allocation=True,
            exp_ulp="1/1048576",  # FP64 exp (about 1 FP64 ulp) rounded to FP32: within 2^-28 FP32 ulp
            ratio_margin="1/1099511627776",  # 2^-40: FP64 row sums, f64(u32 * c_x) * W
            residual_margin="1/1099511627776",  # 2^-40: FP64 residual masses and prefix sums
            notes=(
                "FP64 allocation (R06) with a radix-select ticket cut; FP64 exp rounded once to FP32; "
                "FP64 acceptance ratio and residual CDF; rational target rows rounded to FP64; "
                f"{'Triton interpreter' if interpreting() else 'native Triton'}."
            ),
        )

    def run_batch(self, family: str, inputs: Sequence[dict]) -> list[Outcome]:
        return answers(family, inputs, self.device)
