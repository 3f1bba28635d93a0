"""What every engine shim shares (adapters/vllm/shim.py, adapters/transformers/shim.py).

An engine shim runs in the engine's own virtual environment and imports nothing from
qconform (docs/shim-protocol.md): this module is the standard-library glue they share,
loaded by path from the checkout. It holds

* the RNG ABI's acceptance draw (Philox4x32-10, docs/rng-abi.md), its own copy so that
  a shim never imports the spec;
* the decoding of a ``verification_round`` case into float probabilities;
* the scheduler's stop rule (an engine's sampler leaves stop tokens and the budget to its
  caller) and the family's answer built from an engine's output tokens;
* the protocol stream (file descriptor 1 moved to stderr before the engine is imported)
  and the request loop.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import struct
import sys
from fractions import Fraction
from typing import Callable, TextIO

M = 1 << 24
MASK32 = 0xFFFFFFFF
ACCEPT_DOMAIN = 2
UNSEEDED_TAG = b"qconform-unseeded-seed-v1"
FAMILIES = ("verification_round",)
#: the family's batch bound (R27) and the deepest fixed-depth arm (docs/wire-v2.md, "Fixed-depth arms")
MAX_REQUESTS, MAX_DEPTH = 4, 8


class Refusal(Exception):
    """The round is refused with the family's error ``code`` (before any draw)."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


# --- the protocol's stdout, kept apart before the engine is imported ----------------------------


def protocol_stream() -> TextIO:
    """The original stdout as a private stream; fd 1 becomes a copy of stderr."""
    sys.stdout.flush()
    private = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return private


# --- Philox4x32-10 and the RNG ABI's acceptance draw (docs/rng-abi.md) ---------------------


def philox4x32(counter: list[int], key: list[int], rounds: int = 10) -> list[int]:
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for index in range(rounds):
        if index:
            k0, k1 = (k0 + 0x9E3779B9) & MASK32, (k1 + 0xBB67AE85) & MASK32
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & MASK32, (p0 >> 32) ^ c3 ^ k1, p0 & MASK32
    return [c0, c1, c2, c3]


def request_seed(request: dict) -> int:
    """The request's seed: ``seed`` as given, or, for a request without one, the first 8 bytes
    (little-endian) of SHA-256 of the tag, a zero byte and its ``request_id`` (docs/rng-abi.md)."""
    if "seed" in request:
        return int(request["seed"])
    digest = hashlib.sha256(UNSEEDED_TAG + b"\0" + request["request_id"].encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "little")


def accept_u32(seed: int, generation: int, round_id: int, position: int) -> int:
    counter = [position & MASK32, round_id, generation, ACCEPT_DOMAIN << 24]
    return philox4x32(counter, [seed & MASK32, seed >> 32])[0]


def request_accept_u32s(request: dict) -> list[int]:
    """The ACCEPT draw of each draft ``x_i`` (position ``anchor + i - 1``) of one request."""
    seed = request_seed(request)
    return [
        accept_u32(seed, request["generation"], request["round"], request["anchor"] + i)
        for i in range(len(request["draft_tokens"]))
    ]


def generator_seed(request: dict) -> int:
    """A seed for the engine's own generator, from the request's identity (reproducible, not the ABI)."""
    return (request_seed(request) * 0x9E3779B97F4A7C15 + request["round"] * 0x632BE5AB + request["anchor"]) % (1 << 63)


# --- case decoding ------------------------------------------------------------------------


def unpack(blob: dict, dtype: str) -> list:
    data = base64.b64decode(blob["b64"])
    if blob["dtype"] != dtype:
        raise ValueError(f"blob dtype {blob['dtype']} is not {dtype}")
    code = {"u32": "I", "i32": "i", "f32": "f"}[dtype]
    return list(struct.unpack(f"<{len(data) // 4}{code}", data))


def q_dense(row: dict, vocab: int) -> list[float]:
    """The q row as float32-exact probabilities ``c / 2^24`` over the vocabulary."""
    counts = unpack(row["counts"], "u32")
    ids = range(vocab) if row["representation"] == "dense" else unpack(row["ids"], "i32")
    dense = [0.0] * vocab
    for token, count in zip(ids, counts):
        dense[token] = count / M
    return dense


def p_rows(obj: dict) -> list[list[float]]:
    """Target rows as probabilities (float64 of the exact rationals, or normalized weights)."""
    if "probabilities" in obj:
        return [
            [float(Fraction(*map(int, value.split("/")))) if "/" in value else float(value) for value in row]
            for row in obj["probabilities"]
        ]
    flat = unpack(obj["weights"], "f32")
    rows, vocab = obj["weights"]["shape"]
    out = []
    for r in range(rows):
        row = flat[r * vocab : (r + 1) * vocab]
        total = math.fsum(row)  # 0 for a row with no positive weight: every probability 0, log p = -inf
        out.append([w / total if total else 0.0 for w in row])
    return out


def p_row_widths(request: dict) -> list[int]:
    """The length of each target row of a request, as encoded."""
    p = request["p_rows"]
    if "probabilities" in p:
        return [len(row) for row in p["probabilities"]]
    return [p["weights"]["shape"][1]] * p["weights"]["shape"][0]


def capabilities(device: str) -> dict:
    """What an engine shim declares in ``get_config`` (docs/shim-protocol.md): verification_round, its
    ACCEPT draws injected (partial injection, docs/harness.md) and its law sampled for ``stat``."""
    return {
        "families": list(FAMILIES),
        "injected_draws": True,
        "devices": [device],
        "sampling": list(FAMILIES),
        "injected_domains": {"verification_round": ["ACCEPT"]},
    }


def q_row_refusal(rows: list[dict], vocab: int) -> str | None:
    """The q-row rows of docs/formats/verification_round.md ("Refusal precedence", rows 6-11),
    each over every q row of the request: a shim reads q into the engine's dense draft
    probabilities, which needs legal rows."""
    raw = [
        (unpack(r["ids"], "i32") if r["representation"] == "sparse" else None, unpack(r["counts"], "u32")) for r in rows
    ]
    if any((ids is None and len(c) != vocab) or (ids is not None and len(ids) != len(c)) for ids, c in raw):
        return "BAD_SHAPE"
    sparse = [(ids, c) for ids, c in raw if ids is not None]
    if any(not 0 <= t < vocab for ids, _ in sparse for t in ids):
        return "TOKEN_OUT_OF_RANGE"
    if any(b <= a for ids, _ in sparse for a, b in zip(ids, ids[1:])) or any(0 in c for _, c in sparse):
        return "BAD_SPARSE_SUPPORT"
    return "WRONG_TOTAL_MASS" if any(sum(c) != M for _, c in raw) else None


def check_batch(inp: dict) -> None:
    """A shim's own refusals, rows 1-12 of docs/formats/verification_round.md's "Refusal
    precedence" in its order (the batch's shape, then request by request: seed identity, row
    counts, q rows, target row widths): what an engine's tensors need. The engines validate
    nothing, so rows 13-17 (target values, draft and stop token ranges, zero q, budget) are
    never refused: their cases are listed in each engine's expectations file."""
    requests = inp["requests"]
    depths = {len(r["draft_tokens"]) for r in requests}
    if not 1 <= len(requests) <= MAX_REQUESTS or len(depths) != 1 or not 1 <= depths.pop() <= MAX_DEPTH:
        raise Refusal("BAD_SHAPE")
    for r in requests:  # K q rows and K + 1 target rows of V entries each
        if ("seed" in r) == ("request_id" in r):
            raise Refusal("BAD_REQUEST_ID")
        widths = p_row_widths(r)
        if len(r["q_rows"]) != len(r["draft_tokens"]) or len(widths) != len(r["draft_tokens"]) + 1:
            raise Refusal("BAD_SHAPE")
        code = q_row_refusal(r["q_rows"], inp["vocab"])
        if code:
            raise Refusal(code)
        if any(width != inp["vocab"] for width in widths):
            raise Refusal("BAD_SHAPE")


# --- the engine's output, read as its scheduler reads it -------------------------------------


def scheduler_stop(tokens: list[int], request: dict) -> list[int]:
    """The caller's stop rule over one request's new tokens: append each, stop at the first
    stop token (kept) or when the budget is reached; the tokens after it are dropped."""
    stops, budget = set(request.get("stop_tokens", ())), request.get("budget")
    kept: list[int] = []
    for token in tokens:
        kept.append(token)
        if token in stops or (budget is not None and len(kept) >= budget):
            break
    return kept


def request_answer(request: dict, tokens: list[int], u32s: list[int]) -> dict:
    """The family's answer for one request: the engine's tokens (its accepted drafts, then its
    correction or bonus) after the stop rule, and the acceptance draws they consumed (the
    engine-drawn final token has no ABI draw)."""
    drafts = request["draft_tokens"]
    accepted_run = len(tokens) - 1
    emitted = scheduler_stop(tokens, request)
    truncated = len(emitted) <= accepted_run
    accepted = len(emitted) if truncated else accepted_run
    tests = accepted if truncated else min(accepted_run + 1, len(drafts))
    anchor = request["anchor"]
    draws = [
        {
            "domain": "ACCEPT",
            "position": (anchor + i) & MASK32,
            "draw_counter": 0,
            "u32": u32s[i],
            "decision": "accept" if i < accepted_run else "reject",
            "token": drafts[i],
        }
        for i in range(tests)
    ]
    return {"accepted": accepted, "emitted": emitted, "draws": draws}


def outcome_histogram(rows: list[list[int]], request: dict, histogram: dict[tuple, int]) -> None:
    """Count the engine's output rows of one request, after the stop rule, as ``stat`` counts them."""
    for row in rows:
        emitted = scheduler_stop(row, request)
        key = (min(len(row) - 1, len(emitted)), tuple(emitted))
        histogram[key] = histogram.get(key, 0) + 1


def histogram_outcomes(histogram: dict[tuple, int]) -> dict:
    return {"outcomes": [{"accepted": a, "emitted": list(e), "count": c} for (a, e), c in sorted(histogram.items())]}


# --- the protocol ------------------------------------------------------------------------------


def answer_case(solve: Callable[..., dict], *args) -> dict:
    try:
        return {"status": "ok", "output": solve(*args)}
    except Refusal as refusal:
        return {"status": "ok", "output": {"error": refusal.code}}
    except Exception as exc:  # report, never die
        return {"status": "error", "message": f"{type(exc).__name__}: {exc}"}


def answer(
    request: dict,
    config: Callable[[], dict],
    run_round: Callable[[dict], dict],
    sample_round: Callable[[dict, int, int], dict],
    engine: str,
) -> dict:
    """The reply to one protocol request (docs/shim-protocol.md)."""
    reply = {"id": request.get("id")}
    op, family = request.get("op"), request.get("family")
    if op == "get_config":
        return {**reply, "status": "ok", "config": config()}
    if op in ("run", "sample") and family not in FAMILIES:
        return {**reply, "status": "unimplemented", "reason": f"{engine} does not do {family}"}
    if op == "run":
        return {**reply, "status": "ok", "outputs": [answer_case(run_round, inp) for inp in request["inputs"]]}
    if op == "sample":
        samples, seed = request["samples"], int(request["seed"])
        outputs = [answer_case(sample_round, inp, samples, seed + index) for index, inp in enumerate(request["inputs"])]
        return {**reply, "status": "ok", "outputs": outputs}
    if op == "shutdown":
        return {**reply, "status": "ok"}
    return {**reply, "status": "error", "message": f"unknown op {op!r}"}


def serve(
    out: TextIO,
    config: Callable[[], dict],
    run_round: Callable[[dict], dict],
    sample_round: Callable[[dict, int, int], dict],
    engine: str,
) -> int:
    """Answer protocol requests from stdin on ``out`` until ``shutdown`` or end of input."""
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        out.write(json.dumps(answer(request, config, run_round, sample_round, engine), separators=(",", ":")) + "\n")
        out.flush()
        if request.get("op") == "shutdown":
            break
    return 0
