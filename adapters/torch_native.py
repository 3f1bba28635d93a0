"""The ``torch-native-rng`` adapter: the torch candidate drawing from its own ``torch.Generator``.

This is the candidate as a serving engine would ship it without the RNG ABI: the
same kernels (:mod:`qconform.adapters.torch_candidate`: FP64 acceptance test,
full-vocabulary FP64 residual, cumulative-mass sampling, integer proposal
sampling), but every random draw comes from a ``torch.Generator`` seeded per
``sample`` request and input, never from Philox. Its draws cannot be checked one
for one (``injected_draws`` is False), so it answers the ``sample`` op of
statistical mode (docs/stat-mode.md): ``n`` independent rounds of a case, as a
histogram of outcomes ``(accepted, emitted)``, which ``qconform stat`` compares
with the spec's exact law. ``run`` is answered only for the families whose cases
pin no random draw.

A round is walked over *prefixes* with sample counts, not per sample: at an
accepted prefix reached by ``m`` rounds, the ``m`` drafts are proposed (the
``distribution`` family samples them from q with 24-bit draws; ``verification_round``
gives them), tested with ``m`` fresh 32-bit acceptance draws, the rejected ones get
their correction from the residual, and the accepted ones move on, grouped by
token. After K acceptances the bonus is drawn from the next target row.

``torch-native-mutant:<name>`` serves the same sampler with one seeded bug
(:data:`qconform.adapters.stat_mutants.STAT_MUTANTS`).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from qconform.adapters import torch_adapter
from qconform.adapters.stat_mutants import STAT_MUTANTS, TILT
from qconform.adapters.torch_candidate.errors import CandidateError
from qconform.adapters.torch_candidate.sampling import sample_counts, sample_mass
from qconform.adapters.torch_candidate.verification import accepts, residual_rows
from qconform.harness.adapter import AdapterError, Capabilities, Outcome

#: ``run`` families: their cases give every draw, or need none
DRAW_FREE_FAMILIES = ("categorical_sampling", "allocation_dense", "allocation_sparse", "allocation_invalid")
#: ``sample`` families
SAMPLED_FAMILIES = ("verification_round", "distribution")

Prefix = tuple[int, ...]


def stream_seed(seed: int, index: int) -> int:
    """The generator seed of input ``index`` of a request seeded ``seed`` (63 bits)."""
    digest = hashlib.blake2b(f"{seed}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


class NativeDraws:
    """The adapter's own draws, from one ``torch.Generator``, and the correction step a
    stat mutant may bend (``mutant`` is a key of ``STAT_MUTANTS`` or empty)."""

    def __init__(self, seed: int, device: str, mutant: str = "") -> None:
        self.device = torch.device(device)
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.mutant = mutant

    def uniform(self, bits: int, count: int) -> torch.Tensor:
        """``count`` uniform integers in ``[0, 2^bits)`` (int64)."""
        return torch.randint(0, 1 << bits, (count,), generator=self.generator, device=self.device, dtype=torch.int64)

    def correction(self, residual: torch.Tensor, accept_u32: torch.Tensor) -> torch.Tensor:
        """Correction tokens from the FP64 residual row ``[V]`` for rejected drafts whose
        acceptance draws were ``accept_u32``: a fresh draw each (the spec's rule)."""
        u32 = accept_u32 if self.mutant == "correction-reuses-accept-draw" else self.uniform(32, len(accept_u32))
        mass = tilted(residual, float(TILT)) if self.mutant == "residual-tilt-1pct" else residual
        return sample_mass(mass, u32)

    def bonus(self, target: torch.Tensor, count: int) -> torch.Tensor:
        return sample_mass(target, self.uniform(32, count))


def tilted(mass: torch.Tensor, tilt: float) -> torch.Tensor:
    """The residual tilt of ``residual-tilt-1pct`` in FP64 (exactly:
    :func:`qconform.harness.stat.mutant_laws.tilted_masses`)."""
    positive = (mass > 0).nonzero().flatten()
    if positive.numel() < 2:
        return mass
    cumulative = torch.cumsum(mass, dim=0)
    total = cumulative[-1]
    candidates = positive[:-1]
    split = int(candidates[torch.argmin((cumulative[candidates] - total / 2).abs())])
    lower = cumulative[split]
    upper = total - lower
    shift = tilt * total
    factors = (1 - shift / lower, 1 + shift / upper) if lower >= upper else (1 + shift / lower, 1 - shift / upper)
    below = torch.arange(mass.numel(), device=mass.device) <= split
    return mass * torch.where(below, factors[0], factors[1])


@dataclass
class RoundRows:
    """What a round is walked over: per accepted prefix, the q counts and target weights
    at the next position, how drafts are proposed, and when emission ends."""

    depth: int
    q_counts: Callable[[Prefix], torch.Tensor]
    p_weights: Callable[[Prefix], torch.Tensor]
    propose: Callable[[Prefix, torch.Tensor, NativeDraws, int], torch.Tensor]
    ends: Callable[[Prefix], bool]


def add_tokens(histogram: Counter, accepted: int, prefix: Prefix, tokens: torch.Tensor) -> None:
    values, counts = torch.unique(tokens, return_counts=True)
    for token, count in zip(values.tolist(), counts.tolist()):
        histogram[(accepted, prefix + (token,))] += count


def sample_rounds(rows: RoundRows, samples: int, draws: NativeDraws) -> Counter:
    """Histogram of ``(accepted, emitted)`` over ``samples`` independent rounds."""
    histogram: Counter = Counter()
    frontier: list[tuple[Prefix, int]] = [((), samples)]
    while frontier:
        prefix, count = frontier.pop()
        weights = rows.p_weights(prefix)
        if len(prefix) == rows.depth:
            add_tokens(histogram, len(prefix), prefix, draws.bonus(weights, count))
            continue
        counts = rows.q_counts(prefix)
        drafts = rows.propose(prefix, counts, draws, count)
        u32 = draws.uniform(32, count)
        mass = weights.sum()
        ok = accepts(u32, counts[drafts], weights[drafts], mass)
        if not bool(ok.all()):
            residual = residual_rows(weights[None], counts[None], mass[None])[0]
            add_tokens(histogram, len(prefix), prefix, draws.correction(residual, u32[~ok]))
        tokens, hits = torch.unique(drafts[ok], return_counts=True)
        for token, hit in zip(tokens.tolist(), hits.tolist()):
            accepted = prefix + (token,)
            if rows.ends(accepted):
                histogram[(len(accepted), accepted)] += hit
            else:
                frontier.append((accepted, hit))
    return histogram


def given_drafts(drafts: Sequence[int], device: str) -> Callable:
    def propose(prefix: Prefix, counts: torch.Tensor, draws: NativeDraws, count: int) -> torch.Tensor:
        return torch.full((count,), drafts[len(prefix)], dtype=torch.int64, device=device)

    return propose


def sampled_drafts(prefix: Prefix, counts: torch.Tensor, draws: NativeDraws, count: int) -> torch.Tensor:
    """Drafts proposed from the q row's counts with 24-bit draws (exact, R08)."""
    return sample_counts(counts, draws.uniform(24, count))


def request_rows(request: dict, vocab: int, device: str) -> RoundRows:
    """The rows of one ``verification_round`` request: fixed drafts, stop tokens and budget."""
    drafts = list(request["draft_tokens"])
    counts = torch_adapter.q_rows_dense(request["q_rows"], vocab, device)
    weights = torch_adapter.p_rows_f64(request["p_rows"], device)
    stops = set(request.get("stop_tokens", ()))
    budget = request.get("budget")
    limit = len(drafts) + 1 if budget is None else budget
    return RoundRows(
        depth=len(drafts),
        q_counts=lambda prefix: counts[len(prefix)],
        p_weights=lambda prefix: weights[len(prefix)],
        propose=given_drafts(drafts, device),
        ends=lambda emitted: emitted[-1] in stops or len(emitted) >= limit,
    )


def chain_rows(inp: dict, device: str) -> RoundRows:
    """The rows of a ``distribution`` input: q and p looked up by the accepted prefix.
    Depth 0, or a prefix the round reaches without its row, is BAD_SHAPE."""
    vocab = inp["vocab"]
    if inp["depth"] < 1:
        raise CandidateError("BAD_SHAPE", f"depth {inp['depth']}: a round drafts K >= 1 tokens")

    def row(table: str, prefix: Prefix):
        key = ",".join(map(str, prefix))
        if key not in inp[table]:
            raise CandidateError("BAD_SHAPE", f"no {table} row for the prefix {key!r}")
        return inp[table][key]

    return RoundRows(
        depth=inp["depth"],
        q_counts=lambda prefix: torch_adapter.q_row_counts(row("q", prefix), vocab, device),
        p_weights=lambda prefix: torch_adapter.p_rows_f64({"probabilities": [row("p", prefix)]}, device)[0],
        propose=sampled_drafts,
        ends=lambda emitted: False,
    )


def histogram_json(histogram: Counter, with_accepted: bool) -> dict:
    outcomes = []
    for (accepted, emitted), count in sorted(histogram.items()):
        outcome = {"accepted": accepted} if with_accepted else {}
        outcomes.append({**outcome, "emitted": list(emitted), "count": count})
    return {"outcomes": outcomes}


def sample_verification_round(inp: dict, samples: int, draws: NativeDraws, device: str) -> dict:
    # The candidate's own checks refuse an invalid input exactly as `run` would: one
    # deterministic pass whose draws are discarded.
    torch_adapter.verification_round(inp, device)
    return {
        "requests": [
            histogram_json(sample_rounds(request_rows(request, inp["vocab"], device), samples, draws), True)
            for request in inp["requests"]
        ]
    }


def sample_distribution(inp: dict, samples: int, draws: NativeDraws, device: str) -> dict:
    return histogram_json(sample_rounds(chain_rows(inp, device), samples, draws), False)


SAMPLERS: dict[str, Callable[[dict, int, NativeDraws, str], dict]] = {
    "verification_round": sample_verification_round,
    "distribution": sample_distribution,
}


class TorchNativeAdapter(torch_adapter.TorchAdapter):
    """The torch candidate with its own RNG: ``sample`` for the sampled families, ``run``
    for the draw-free ones; ``mutant`` seeds one bug of ``STAT_MUTANTS``."""

    name = "torch-native-rng"

    def __init__(self, device: str = "cpu", mutant: str = "") -> None:
        if mutant and mutant not in STAT_MUTANTS:
            raise ValueError(f"unknown stat mutant {mutant!r}; mutants: {', '.join(STAT_MUTANTS)}")
        super().__init__(device)
        self.mutant = mutant
        if mutant:
            self.name = f"torch-native-mutant:{mutant}"

    def capabilities(self) -> Capabilities:
        return Capabilities(
            families=DRAW_FREE_FAMILIES, injected_draws=False, devices=("cpu", "cuda"), sampling=SAMPLED_FAMILIES
        )

    def sample_batch(self, family: str, inputs: Sequence[dict], samples: int, seed: int) -> list[Outcome]:
        sampler = SAMPLERS[family]
        outcomes: list[Outcome] = []
        for index, inp in enumerate(inputs):
            draws = NativeDraws(stream_seed(seed, index), self.device, self.mutant)
            try:
                outcomes.append(sampler(inp, samples, draws, self.device))
            except CandidateError as refusal:
                outcomes.append({"error": refusal.code})
            except (KeyError, ValueError, IndexError, RuntimeError) as exc:
                outcomes.append(AdapterError(f"torch candidate could not sample the case: {type(exc).__name__}: {exc}"))
        return outcomes
