"""Hugging Face transformers' speculative sampling driven as a qconform shim
(docs/engines/transformers.md).

Runs in its own virtual environment, the one ``adapters/transformers/install.sh`` makes,
and imports nothing from qconform (its Philox, codecs and protocol loop are
``adapters/engine_shared/engine_shim.py``, loaded by path). Per request it calls the library's own
``transformers.generation.utils._speculative_sampling`` unmodified, as
``GenerationMixin._assisted_decoding`` calls it with ``do_sample=True``:

* ``candidate_input_ids`` ``[1, K]`` (the drafts; the function reads the last K),
  ``candidate_logits`` ``[1, K, V]`` = ``log q`` and ``new_logits`` ``[1, K + 1, V]`` =
  ``log p``, both float32 (``-inf`` where the probability is 0): ``_assisted_decoding``
  hands it the target logits after the logits processors, cast to float32, and the
  assistant's processed logits; the function takes their softmax. R10's target is p
  after the processors, so the processors are the identity here.
* The acceptance draws are injected through ``torch.rand_like``, the one call that draws
  them (``r_i = torch.rand_like(probability_ratio)``): while the function runs,
  ``torch.rand_like`` answers a float32 ``[K]`` tensor (the ratio's dtype, shape and
  device) holding, for draft ``x_i``, the top 24 bits of the RNG ABI's ACCEPT draw over
  2^24: a value torch's own float32 ``rand`` can return, never above ``u32 / 2^32`` and
  less than 2^-24 below it, so the order of draws is kept (docs/engines/transformers.md,
  "The seam"). Any other call, or a call of another shape, stops the shim.
* The correction or bonus token is drawn by the library, ``torch.multinomial`` on torch's
  global generator, seeded per request from its identity: partial injection
  (docs/harness.md); ``qconform stat`` judges its law.
* Stop tokens and the budget are ``_assisted_decoding``'s, not the function's: it crops
  the returned tokens to the remaining budget, then after the first EOS (kept). That is
  :func:`engine_shim.scheduler_stop`.
* ``sample`` (statistical mode) calls the function ``samples`` times per request, every
  draw from torch's global generator, seeded from the request.

``--patch strict-accept`` runs the function with ``r_i <= probability_ratio`` read as
``r_i < probability_ratio`` (the library's source, one operator changed, compiled from
the installed file): the fix proposed in docs/engines/transformers.md.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import math
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # torch is imported when the sampler starts, after file descriptor 1 is moved
    import torch


# the glue every engine shim shares (Philox, codecs, stop rule, protocol loop), from its own
# folder: adapters/ itself on sys.path would let adapters/transformers hide the library of that name
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine_shared"))
import engine_shim as es  # noqa: E402  # pyright: ignore[reportMissingImports]

#: float32 softmax of log q and log p, the ratio p_i / q_i in float32 and the draw truncated to
#: 24 bits: every acceptance flip lies within 2^-20 of the boundary (docs/engines/transformers.md)
RATIO_MARGIN = "1/1048576"
INJECTED_BITS = 24
PATCHES = ("strict-accept",)


class InjectedRand:
    """``torch.rand_like`` while one call of the function runs: the injected acceptance draws."""

    def __init__(self, torch_module: Any) -> None:
        self.torch = torch_module
        self.native = torch_module.rand_like
        self.pending: list[int] | None = None

    def __call__(self, like: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        pending, self.pending = self.pending, None
        if pending is None or args or kwargs or tuple(like.shape) != (len(pending),):
            raise RuntimeError(
                f"transformers shim: unexpected torch.rand_like({tuple(like.shape)}) (injecting {pending!r})"
            )
        values = [(u32 >> (32 - INJECTED_BITS)) / (1 << INJECTED_BITS) for u32 in pending]
        return self.torch.tensor(values, dtype=like.dtype, device=like.device)


def strict_accept_variant(function: Callable) -> Callable:
    """The library's ``_speculative_sampling`` compiled from its installed source with the one
    comparison ``r_i <= probability_ratio`` as ``r_i < probability_ratio``, in its module's globals."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    changed = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.LtE):
            left, right = node.left, node.comparators[0]
            if isinstance(left, ast.Name) and left.id == "r_i" and isinstance(right, ast.Name):
                node.ops = [ast.Lt()]
                changed += 1
    if changed != 1:
        raise SystemExit(f"transformers shim: --patch strict-accept found {changed} `r_i <= ...` comparisons, not 1")
    namespace: dict[str, Any] = {}
    exec(compile(tree, inspect.getsourcefile(function) or "<transformers>", "exec"), function.__globals__, namespace)
    return namespace[function.__name__]


class TransformersSampler:
    """``_speculative_sampling`` of the installed transformers, with injectable acceptance draws."""

    def __init__(self, patch: str | None, device: str) -> None:
        import torch

        # transformers lives only in the shim's own environment (install.sh): unresolved in the checker's
        import transformers  # pyright: ignore[reportMissingImports]
        import transformers.generation.utils as generation  # pyright: ignore[reportMissingImports]

        # one intra-op thread: each call is a handful of ops on [1, K + 1, V]; with a thread pool, every
        # softmax waited for pool threads (13 ms a call at V = 8 on a loaded 2-core machine, against 0.3 ms)
        torch.set_num_threads(1)
        self.torch = torch
        self.device = torch.device(device)
        # the checker, with no transformers installed, takes this folder (adapters/transformers) for it
        self.version = transformers.__version__  # pyright: ignore[reportAttributeAccessIssue]
        self.function = generation._speculative_sampling
        if patch == "strict-accept":
            self.function = strict_accept_variant(self.function)
        self.rand = InjectedRand(torch)

    def logits(self, rows: list[list[float]]) -> torch.Tensor:
        """``log`` of probability rows, float32, ``-inf`` where the probability is 0: ``[1, rows, V]``."""
        torch = self.torch
        probs = torch.tensor(rows, dtype=torch.float64)
        logs = torch.where(probs > 0, probs.log(), torch.tensor(-math.inf, dtype=torch.float64))
        return logs.to(torch.float32).to(self.device)[None]

    def call(self, drafts: torch.Tensor, q_logits: torch.Tensor, p_logits: torch.Tensor) -> list[int]:
        """One call of the library's function: its accepted drafts, then its correction or bonus."""
        with self.torch.no_grad():
            tokens, _ = self.function(drafts, q_logits, drafts.shape[1], p_logits)
        return [int(t) for t in tokens[0].tolist()]

    def inputs(self, request: dict, vocab: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        drafts = self.torch.tensor([request["draft_tokens"]], dtype=self.torch.long, device=self.device)
        q = self.logits([es.q_dense(row, vocab) for row in request["q_rows"]])
        return drafts, q, self.logits(es.p_rows(request["p_rows"]))

    def run(self, request: dict, vocab: int, u32s: list[int]) -> list[int]:
        torch = self.torch
        drafts, q, p = self.inputs(request, vocab)
        torch.manual_seed(es.generator_seed(request))
        self.rand.pending = list(u32s)
        torch.rand_like = self.rand
        try:
            tokens = self.call(drafts, q, p)
        finally:
            torch.rand_like = self.rand.native
        if self.rand.pending is not None:
            raise RuntimeError("transformers shim: the function drew no acceptance uniforms")
        return tokens

    def sample(self, request: dict, vocab: int, samples: int, seed: int) -> list[list[int]]:
        drafts, q, p = self.inputs(request, vocab)
        self.torch.manual_seed(seed % (1 << 63))
        return [self.call(drafts, q, p) for _ in range(samples)]


def run_verification_round(sampler: TransformersSampler, inp: dict) -> dict:
    """One call per request (``_assisted_decoding`` verifies a batch of one)."""
    es.check_batch(inp)
    answers = []
    for request in inp["requests"]:
        u32s = es.request_accept_u32s(request)
        answers.append(es.request_answer(request, sampler.run(request, inp["vocab"], u32s), u32s))
    return {"requests": answers}


def sample_verification_round(sampler: TransformersSampler, inp: dict, samples: int, seed: int) -> dict:
    es.check_batch(inp)
    out = []
    for index, request in enumerate(inp["requests"]):
        histogram: dict[tuple, int] = {}
        rows = sampler.sample(request, inp["vocab"], samples, seed * 1000003 + index)
        es.outcome_histogram(rows, request, histogram)
        out.append(es.histogram_outcomes(histogram))
    return {"requests": out}


def config(args: argparse.Namespace, sampler: TransformersSampler) -> dict:
    # engine-version-kernels[+patch-P]: the engine matrix reads its rows from it (docs/engines/README.md)
    name = f"transformers-{sampler.version}-torch" + (f"+patch-{args.patch}" if args.patch else "")
    return {
        "name": name,
        "protocol": 1,
        "device": args.device,
        "transformers": sampler.version,
        "torch": sampler.torch.__version__,
        "function": "transformers.generation.utils._speculative_sampling",
        "patch": args.patch or "none",
        "capabilities": es.capabilities(args.device),
        "precision": {
            "ratio_margin": RATIO_MARGIN,
            "notes": "float32 softmax of log q and log p; acceptance r_i <= p_i / q_i in float32 with r_i the "
            "ACCEPT draw truncated to 24 bits (torch.rand_like's float32); correction and bonus drawn by "
            "torch.multinomial on torch's global generator: partial injection",
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--patch", choices=PATCHES, default=None)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    out = es.protocol_stream()
    sampler = TransformersSampler(args.patch, args.device)
    return es.serve(
        out,
        lambda: config(args, sampler),
        lambda inp: run_verification_round(sampler, inp),
        lambda inp, samples, seed: sample_verification_round(sampler, inp, samples, seed),
        "transformers' _speculative_sampling",
    )


if __name__ == "__main__":
    sys.exit(main())
