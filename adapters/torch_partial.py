"""The ``torch-partial`` adapter: the torch candidate taking only its ACCEPT draws injected.

This is how the harness sees a serving engine that owns part of its randomness (vLLM,
SGLang, FlashInfer, TensorRT-LLM: the acceptance uniforms can be injected, but the
correction and bonus tokens come from the engine's own generator). The acceptance
tests are the torch candidate's, on the RNG ABI's ACCEPT draws; the correction or
bonus token of each request is then drawn again from the same FP64 mass row with a
``torch.Generator`` seeded by the request's identity, and reported without an ABI
draw. It declares ``injected_domains = {verification_round: [ACCEPT]}``, so the harness
judges it in partial-injection mode (docs/harness.md): its acceptance draws one for
one, its own tokens for support.

``torch-partial-mutant:correction-from-p`` draws the correction from the target row
``p_{j+1}`` instead of the residual ``max(p_{j+1} - q_{j+1}, 0)``, the bug that the
partial mode must catch without knowing the engine's draws (docs/mutants.md).
"""

from __future__ import annotations

import hashlib
from typing import Sequence

import torch

from qconform.adapters import torch_adapter
from qconform.adapters.torch_candidate.errors import CandidateError
from qconform.adapters.torch_candidate.philox import request_seed
from qconform.adapters.torch_candidate.sampling import sample_mass
from qconform.adapters.torch_candidate.verification import residual_rows
from qconform.harness.adapter import AdapterError, Capabilities, Outcome

#: mutant name -> what it gets wrong
PARTIAL_MUTANTS = {
    "correction-from-p": "the engine-drawn correction comes from p_{j+1} instead of the residual max(p - q, 0)",
}


def generator_for(request: dict, device: str) -> torch.Generator:
    """The request's own generator, seeded by its identity (reproducible, not the ABI)."""
    identity = f"{request_seed(request)}:{request['generation']}:{request['round']}:{request['anchor']}"
    seed = int.from_bytes(hashlib.blake2b(identity.encode(), digest_size=8).digest(), "little") >> 1
    return torch.Generator(device=device).manual_seed(seed)


def own_final_token(request: dict, vocab: int, accepted: int, device: str, mutant: str) -> int:
    """The correction (after ``accepted < K`` drafts) or bonus token, from the engine's own draw."""
    weights = torch_adapter.p_rows_f64(request["p_rows"], device)
    counts = torch_adapter.q_rows_dense(request["q_rows"], vocab, device)
    if accepted < len(request["draft_tokens"]) and mutant != "correction-from-p":
        row = residual_rows(weights[accepted][None], counts[accepted][None], weights[accepted].sum()[None])[0]
    else:
        row = weights[accepted]
    u32 = torch.randint(0, 1 << 32, (1,), generator=generator_for(request, device), device=device)
    return int(sample_mass(row[None], u32)[0])


def verification_round(inp: dict, device: str, mutant: str) -> dict:
    answer = torch_adapter.verification_round(inp, device)
    for request, result in zip(inp["requests"], answer["requests"]):
        if result["draws"] and result["draws"][-1]["domain"] == "CORRECTION":
            result["draws"].pop()
            result["emitted"][-1] = own_final_token(request, inp["vocab"], result["accepted"], device, mutant)
    return answer


class TorchPartialAdapter(torch_adapter.TorchAdapter):
    """The torch candidate with ACCEPT injected and its own correction/bonus draws."""

    name = "torch-partial"

    def __init__(self, device: str = "cpu", mutant: str = "") -> None:
        if mutant and mutant not in PARTIAL_MUTANTS:
            raise ValueError(f"unknown partial mutant {mutant!r}; mutants: {', '.join(PARTIAL_MUTANTS)}")
        super().__init__(device)
        self.mutant = mutant
        if mutant:
            self.name = f"torch-partial-mutant:{mutant}"

    def capabilities(self) -> Capabilities:
        return Capabilities(
            families=("verification_round",),
            injected_draws=True,
            devices=("cpu", "cuda"),
            injected_domains=(("verification_round", ("ACCEPT",)),),
        )

    def run_batch(self, family: str, inputs: Sequence[dict]) -> list[Outcome]:
        outcomes: list[Outcome] = []
        for inp in inputs:
            try:
                outcomes.append(verification_round(inp, self.device, self.mutant))
            except CandidateError as refusal:
                outcomes.append({"error": refusal.code})
            except (KeyError, ValueError, IndexError, RuntimeError) as exc:
                outcomes.append(AdapterError(f"torch candidate could not run the case: {type(exc).__name__}: {exc}"))
        return outcomes
