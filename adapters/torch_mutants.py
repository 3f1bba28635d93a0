"""Seeded-bug variants ("mutants") of the torch candidate: proof that the corpus can fail.

Each :class:`Mutant` replaces ONE function of the candidate
(:mod:`qconform.adapters.torch_candidate`) or of its adapter glue
(:mod:`qconform.adapters.torch_adapter`) with a buggy version, modelled on a bug
class that serving engines shipped (docs/mutants.md). A bug is a small function
``bug(original) -> buggy``: most wrap the original and bend one input or output,
a few rewrite one comparison. The candidate itself stays bug-free: a mutant is
applied only inside the process that serves ``torch-mutant:<name>``
(:class:`MutantTorchAdapter`), and :meth:`Mutant.apply` returns its own undo.

``qconform mutants`` (qconform.cli.mutants) runs the corpus against
every mutant and fails unless each one is killed. The one-line descriptions live
in :data:`qconform.adapters.catalog.TORCH_MUTANTS`, so that listing adapters
never imports torch.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass, replace
from typing import Callable

import torch

from qconform.adapters import torch_adapter
from qconform.adapters.catalog import TORCH_MUTANTS
from qconform.adapters.torch_candidate import allocation, philox
from qconform.adapters.torch_candidate.verification import TWO56

#: package whose modules a patch rebinds
ADAPTERS_PACKAGE = "qconform.adapters"

Bug = Callable[[Callable], Callable]


@dataclass(frozen=True)
class Mutant:
    """One seeded bug.

    ``target`` is ``module:function`` (or ``module:Class.method``), the module relative to
    :data:`ADAPTERS_PACKAGE`; ``bug(original)`` returns its buggy replacement. ``rules`` are
    the rules the bug breaks, ``bug_class`` the serving-engine bug it models, ``families``
    the vector families that own the behaviour (the ones ``qconform mutants`` runs).
    """

    name: str
    target: str
    bug: Bug
    rules: tuple[str, ...]
    families: tuple[str, ...]
    bug_class: str = ""

    @property
    def description(self) -> str:
        return TORCH_MUTANTS[self.name]

    def apply(self) -> Callable[[], None]:
        """Replace the target by its buggy version wherever the adapter modules bound it
        (``from .sampling import sample_counts`` makes a second binding); return the undo."""
        module_name, _, attribute = self.target.partition(":")
        module = importlib.import_module(f"{ADAPTERS_PACKAGE}.{module_name}")
        owner_name, _, method = attribute.rpartition(".")
        if owner_name:
            owner = getattr(module, owner_name)
            bindings = [(owner, method)]
        else:
            owner, method = module, attribute
            bindings = [(m, method) for m in adapter_modules() if getattr(m, method, None) is getattr(owner, method)]
        original = getattr(owner, method)
        buggy = self.bug(original)
        for where, name in bindings:
            setattr(where, name, buggy)

        def undo() -> None:
            for where, name in bindings:
                setattr(where, name, original)

        return undo


def adapter_modules() -> list:
    """The loaded modules of the adapters package (every place a candidate function may be bound)."""
    return [
        m
        for name, m in list(sys.modules.items())
        if m is not None and (name == ADAPTERS_PACKAGE or name.startswith(ADAPTERS_PACKAGE + "."))
    ]


# --- the bugs -----------------------------------------------------------------------------
# Each takes the original function and returns the buggy one with the same signature.


def remap_domain(mapping: dict[int, int]) -> Bug:
    """Draws of a domain taken under another domain's code in counter word 3."""

    def bug(counter_words: Callable) -> Callable:
        def buggy(position, round_id, generation, domain, draw_counter=0):
            return counter_words(position, round_id, generation, mapping.get(domain, domain), draw_counter)

        return buggy

    return bug


def shift_position(domains: tuple[int, ...]) -> Bug:
    """Draws of ``domains`` keyed one position too far (counter word 0 = position + 1)."""

    def bug(counter_words: Callable) -> Callable:
        def buggy(position, round_id, generation, domain, draw_counter=0):
            shifted = position + 1 if domain in domains else position
            return counter_words(shifted, round_id, generation, domain, draw_counter)

        return buggy

    return bug


def accept_le(accepts: Callable) -> Callable:
    def buggy(u32, c_x, w_x, w_total):
        lhs = (u32.to(torch.int64) * c_x.to(torch.int64)).to(torch.float64) * w_total.to(torch.float64)
        return lhs <= w_x.to(torch.float64) * TWO56

    return buggy


def q_point_mass(accepts: Callable) -> Callable:
    def buggy(u32, c_x, w_x, w_total):
        return accepts(u32, torch.full_like(c_x, allocation.M), w_x, w_total)

    return buggy


def q_renormalized_on_target(acceptance_tests: Callable) -> Callable:
    def buggy(u32, counts, drafts, p, row_mass):
        kept = torch.where(p[:, : drafts.shape[1]] > 0, counts, 0)
        renormalized = kept * allocation.M // kept.sum(dim=-1, keepdim=True).clamp(min=1)
        return acceptance_tests(u32, renormalized, drafts, p, row_mass)

    return buggy


def residual_drafted_token_only(final_mass: Callable) -> Callable:
    def buggy(p, counts, row_mass, drafts, accepted_run, has_final):
        at_draft = drafts[:, :, None]
        drafted_only = torch.zeros_like(counts).scatter_(2, at_draft, counts.gather(2, at_draft))
        return final_mass(p, drafted_only, row_mass, drafts, accepted_run, has_final)

    return buggy


def residual_support_only(residual_rows: Callable) -> Callable:
    def buggy(target, q_counts, target_mass):
        return torch.where(q_counts > 0, residual_rows(target, q_counts, target_mass), 0.0)

    return buggy


def bonus_from_previous_row(final_mass: Callable) -> Callable:
    def buggy(p, counts, row_mass, drafts, accepted_run, has_final):
        p, row_mass = p.clone(), row_mass.clone()
        p[:, -1], row_mass[:, -1] = p[:, -2], row_mass[:, -2]
        return final_mass(p, counts, row_mass, drafts, accepted_run, has_final)

    return buggy


def residual_pad_token(sample_mass: Callable) -> Callable:
    def buggy(mass, u32, code="ZERO_RESIDUAL_MASS"):
        cumulative = torch.cumsum(mass.to(torch.float64), dim=-1)
        uniform = (u32.to(torch.float64) / 2**32).to(torch.float32).to(torch.float64)  # may round to 1.0
        target = (uniform * cumulative[..., -1]).unsqueeze(-1).contiguous()
        return torch.searchsorted(cumulative, target, right=True).squeeze(-1)  # V past the row: no refusal

    return buggy


def ties_to_highest_id(served_tickets: Callable) -> Callable:
    def buggy(remainder, remaining):
        return served_tickets(remainder.flip(1), remaining).flip(1)

    return buggy


def cumulative_ge(sample_counts: Callable) -> Callable:
    def buggy(counts, u24):
        return sample_counts(counts, u24 - 1)  # first C_v > u24 - 1, i.e. first C_v >= u24

    return buggy


def topk_selected_after_allocation(top_k_support: Callable) -> Callable:
    def buggy(weights, k):
        return top_k_support(allocation.largest_remainder_counts(weights), k)

    return buggy


def keyed_by_batch_row(seed_keys: Callable) -> Callable:
    def buggy(seeds, device="cpu"):
        key = seed_keys([seeds[0]] * len(seeds), device)
        key[:, 1] = (key[:, 1] + torch.arange(len(seeds), device=key.device)) & philox.MASK32
        return key

    return buggy


def key_words_swapped(seed_keys: Callable) -> Callable:
    def buggy(seeds, device="cpu"):
        return seed_keys(seeds, device).flip(-1)

    return buggy


def u24_low_bits(u24_of: Callable) -> Callable:
    def buggy(word0):
        return word0 & 0xFFFFFF

    return buggy


def emits_extra_token(outcomes: Callable) -> Callable:
    def buggy(self):
        return [replace(out, emitted=out.emitted + out.emitted[-1:]) for out in outcomes(self)]

    return buggy


def budget_off_by_one(verify_round: Callable) -> Callable:
    def buggy(seeds, generation, round_id, anchor, draft_tokens, q, p_weights, stop_tokens=None, budget=None):
        if budget is not None:
            budget = [None if b is None else b + 1 for b in budget]
        return verify_round(seeds, generation, round_id, anchor, draft_tokens, q, p_weights, stop_tokens, budget)

    return buggy


def stop_token_ignored(stop_mask: Callable) -> Callable:
    def buggy(drafts, stop_tokens):
        return stop_mask(drafts, None)

    return buggy


def sampled_from_bf16(sample_counts: Callable) -> Callable:
    def buggy(counts, u24):
        rows = counts.reshape(-1, counts.shape[-1])
        bf16 = rows.to(torch.float32).to(torch.bfloat16).to(torch.float32)  # the q the sampler saw
        requantized = allocation.largest_remainder_counts(bf16).reshape(counts.shape)
        return sample_counts(requantized, u24)  # while the exact counts are the ones sent

    return buggy


def draft_temperature_ignored(logits_to_weights: Callable) -> Callable:
    def buggy(logits, temperature, bias=None):
        return logits_to_weights(logits, 1.0, bias)

    return buggy


def request_zero_temperature(logits_to_weights: Callable) -> Callable:
    def buggy(logits, temperature, bias=None):
        if not isinstance(temperature, (int, float)):  # one temperature per row: all take row 0's
            temperature = [float(temperature[0])] * len(temperature)
        return logits_to_weights(logits, temperature, bias)

    return buggy


def request_zero_parameters(verify_round: Callable) -> Callable:
    def buggy(seeds, generation, round_id, anchor, draft_tokens, q, p_weights, stop_tokens=None, budget=None):
        batch = len(seeds)
        stop_tokens = None if stop_tokens is None else [stop_tokens[0]] * batch
        budget = None if budget is None else [budget[0]] * batch
        return verify_round(seeds, generation, round_id, anchor, draft_tokens, q, p_weights, stop_tokens, budget)

    return buggy


def markov_bias_fma(markov_bias: Callable) -> Callable:
    def buggy(left, right, prev):
        # acc + l * r with one rounding (an FMA, as CUDA's default --fmad=true contracts it): the FP32
        # product is exact in FP64, so only the final rounding to FP32 remains
        rows = left.to(torch.float64)[prev.to(torch.int64)]
        right64 = right.to(torch.float64)
        bias = torch.zeros((rows.shape[0], right.shape[1]), dtype=torch.float32, device=right.device)
        for j in range(left.shape[1]):
            bias = (bias.to(torch.float64) + rows[:, j : j + 1] * right64[j]).to(torch.float32)
        return bias

    return buggy


def unseeded_default_seed(request_seed: Callable) -> Callable:
    def buggy(request):
        return int(request["seed"]) if "seed" in request else 0  # every unseeded request gets seed 0

    return buggy


# --- the table ----------------------------------------------------------------------------

VERIFY = ("verification_round",)
RNG = ("rng_abi",)
CHAIN = ("proposal_chain", "proposal_batch")
ALLOCATION = ("allocation_dense", "allocation_sparse")

MUTANTS: dict[str, Mutant] = {
    m.name: m
    for m in (
        Mutant(
            "correction-reuses-accept-draw",
            "torch_candidate.philox:counter_words",
            remap_domain({philox.CORRECTION: philox.ACCEPT}),
            ("R23", "R11"),
            VERIFY + RNG,
            "vLLM #47386",
        ),
        Mutant(
            "correction-from-proposal-domain",
            "torch_candidate.philox:counter_words",
            remap_domain({philox.CORRECTION: philox.PROPOSAL}),
            ("R23",),
            VERIFY + RNG,
            "vLLM #47386",
        ),
        Mutant(
            "accept-le",
            "torch_candidate.verification:accepts",
            accept_le,
            ("R11",),
            VERIFY,
            "sglang #35771 (coin <= cdf)",
        ),
        Mutant(
            "alloc-ties-highest-id",
            "torch_candidate.allocation:served_tickets",
            ties_to_highest_id,
            ("R06",),
            ALLOCATION + CHAIN,
            "largest-remainder tie order",
        ),
        Mutant(
            "cumulative-ge",
            "torch_candidate.sampling:sample_counts",
            cumulative_ge,
            ("R08",),
            ("categorical_sampling",) + CHAIN,
            "inclusive CDF search",
        ),
        Mutant(
            "q-renormalized-on-target",
            "torch_candidate.verification:acceptance_tests",
            q_renormalized_on_target,
            ("R02", "R11"),
            VERIFY,
            "verifier renormalizes q (R02)",
        ),
        Mutant(
            "q-point-mass", "torch_candidate.verification:accepts", q_point_mass, ("R01", "R11"), VERIFY, "vLLM #40149"
        ),
        Mutant(
            "residual-drafted-token-only",
            "torch_candidate.verification:final_mass",
            residual_drafted_token_only,
            ("R11",),
            VERIFY,
            "xllm #2175",
        ),
        Mutant(
            "residual-support-only",
            "torch_candidate.verification:residual_rows",
            residual_support_only,
            ("R11", "R33"),
            VERIFY,
            "sparse residual (R33)",
        ),
        Mutant(
            "rng-keyed-by-batch-row",
            "torch_candidate.philox:seed_keys",
            keyed_by_batch_row,
            ("R22", "R24"),
            VERIFY + CHAIN + RNG,
            "FlashInfer ChainSpeculativeSampling",
        ),
        Mutant(
            "counter-position-off-by-one",
            "torch_candidate.philox:counter_words",
            shift_position((philox.PROPOSAL, philox.ACCEPT, philox.CORRECTION)),
            ("R22",),
            RNG + CHAIN + VERIFY,
            "RNG counter offset",
        ),
        Mutant(
            "bonus-from-previous-row",
            "torch_candidate.verification:final_mass",
            bonus_from_previous_row,
            ("R11",),
            VERIFY,
            "bonus row index",
        ),
        Mutant(
            "emits-extra-token",
            "torch_candidate.verification:VerifiedRound.outcomes",
            emits_extra_token,
            ("R11", "R35"),
            VERIFY,
            "flashinfer #879",
        ),
        Mutant(
            "topk-selected-after-allocation",
            "torch_candidate.allocation:top_k_support",
            topk_selected_after_allocation,
            ("R07",),
            ("allocation_sparse",) + CHAIN,
            "normalize before top-k selection",
        ),
        Mutant(
            "residual-pad-token",
            "torch_candidate.sampling:sample_mass",
            residual_pad_token,
            ("R11", "R19"),
            VERIFY,
            "GHSA-8wr5-jm2h-8r4f",
        ),
        Mutant(
            "u24-low-bits",
            "torch_candidate.philox:u24_of",
            u24_low_bits,
            ("R08", "R22"),
            RNG + CHAIN,
            "draw word layout",
        ),
        Mutant(
            "domain-codes-swapped",
            "torch_candidate.philox:counter_words",
            remap_domain({philox.ACCEPT: philox.CORRECTION, philox.CORRECTION: philox.ACCEPT}),
            ("R23",),
            RNG + VERIFY,
            "domain layout",
        ),
        Mutant(
            "key-words-swapped",
            "torch_candidate.philox:seed_keys",
            key_words_swapped,
            ("R22",),
            RNG + CHAIN + VERIFY,
            "key word order",
        ),
        Mutant(
            "accept-position-off-by-one",
            "torch_candidate.philox:counter_words",
            shift_position((philox.ACCEPT,)),
            ("R11", "R22"),
            VERIFY,
            "acceptance keyed at the wrong position",
        ),
        Mutant(
            "correction-position-off-by-one",
            "torch_candidate.philox:counter_words",
            shift_position((philox.CORRECTION,)),
            ("R11", "R23"),
            VERIFY,
            "vLLM #47386 (shifted noise)",
        ),
        Mutant(
            "budget-off-by-one",
            "torch_candidate.verification:verify_round",
            budget_off_by_one,
            ("R11",),
            VERIFY,
            "max_tokens overrun",
        ),
        Mutant(
            "stop-token-ignored",
            "torch_candidate.verification:stop_mask",
            stop_token_ignored,
            ("R11",),
            VERIFY,
            "emitting past EOS",
        ),
        Mutant(
            "sampled-from-bf16-q",
            "torch_candidate.sampling:sample_counts",
            sampled_from_bf16,
            ("R01", "R08"),
            ("categorical_sampling",) + CHAIN,
            "DeepSpec #31 (bf16 draft, fp32 q verified)",
        ),
        Mutant(
            "draft-temperature-ignored",
            "torch_candidate.weights:logits_to_weights",
            draft_temperature_ignored,
            ("R05",),
            ("allocation_dense", "allocation_sparse") + CHAIN,
            "vLLM #9834 (params on the wrong side)",
        ),
        Mutant(
            "request-zero-parameters",
            "torch_candidate.verification:verify_round",
            request_zero_parameters,
            ("R11", "R24"),
            VERIFY,
            "TRT-LLM #12588 (request 0's parameters for the batch)",
        ),
        Mutant(
            "request-zero-temperature",
            "torch_candidate.weights:logits_to_weights",
            request_zero_temperature,
            ("R05", "R22"),
            ("proposal_batch",),
            "TRT-LLM #12588 (request 0's temperature for the batch)",
        ),
        Mutant(
            "markov-bias-fma",
            "torch_candidate.weights:markov_bias",
            markov_bias_fma,
            ("R01", "R05"),
            CHAIN,
            "CUDA --fmad=true contracting the Markov bias's multiply-add",
        ),
        Mutant(
            "unseeded-default-seed",
            "torch_candidate.philox:request_seed",
            unseeded_default_seed,
            ("R24",),
            RNG + VERIFY,
            "a constant default seed for requests without one",
        ),
    )
}

if set(MUTANTS) != set(TORCH_MUTANTS):
    raise ImportError(f"torch mutants and registry disagree: {sorted(set(MUTANTS) ^ set(TORCH_MUTANTS))}")


class MutantTorchAdapter(torch_adapter.TorchAdapter):
    """The torch adapter with one mutant applied for the life of this process."""

    def __init__(self, device: str = "cpu", mutant: str = "") -> None:
        if mutant not in MUTANTS:
            raise ValueError(f"unknown torch mutant {mutant!r}; mutants: {', '.join(MUTANTS)}")
        super().__init__(device)
        self.mutant = MUTANTS[mutant]
        self.name = f"torch-mutant:{mutant}"
        #: restores the candidate (the host never calls it: its process ends with the run)
        self.undo = self.mutant.apply()
