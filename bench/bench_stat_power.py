"""Samples statistical mode needs to catch the stat mutants, against today's fixed-N distance tests.

Run from the repository root: ``.venv/bin/python bench/bench_stat_power.py``. For
each stat mutant (harness/stat/mutant_laws.py: the correction reusing the acceptance
draw, and the residual tilted by 1% TV in the direction a chi-square sees worst)
it prints the rounds per case that reach power 0.99 at family-wise level
``alpha = 1e-6``:

* **qconform stat** on the corpus: for every ``verification_round`` case the exact
  law and the exact mutant law (rationals), Pearson's chi-square with rare
  outcomes merged at the N considered, per-case level ``alpha / m`` (Holm's first
  step, ``m`` = the cases a full run tests), power from the noncentral chi-square
  with ``lambda = N sum (a - e)^2 / e``. The best case is the one a run needs.
* **the same chi-square on an engine-style case**: draft and target rows
  ``softmax(U[0,1)^V)`` (as vLLM's test draws them) at ``V = 10``, the law of the
  first emitted token, ``alpha = 1e-6`` (float64 laws, real-valued draws);
* **TV threshold at V = 10** (the kind of test vLLM runs, with 10..100,000 samples):
  reject when ``TV(empirical, p) > tau``. Since ``TV = max_A (p^(A) - p(A))`` over the
  ``2^V - 2`` proper nonempty token sets, ``tau`` is calibrated to ``alpha`` by the
  union bound over them with normal tails (nearly tight: confirmed below at level
  ``1e-3``); its power has no closed form, so the rounds it needs are found by
  simulation (multinomial draws from the mutant's first-token law, 2000 per N,
  bisection to 2%);
* **10-sigma chi-square at V = 4096** (the other test vLLM runs): the unmerged
  chi-square over 4096 first-token bins, rejecting above ``df + 10 sqrt(2 df)``;
  also with its threshold set at ``alpha = 1e-6``.

The ratio column is baseline rounds over qconform stat's rounds (best corpus case).

Then it confirms the computations by simulation at a smaller scale (level
``1e-3``, power 0.9): the native-RNG mutant adapter sampled ``--reps`` times on the
best case (the real sampler, in process), and the exact law's rejection rate
under the correct native adapter; the TV-threshold calibration by multinomial draws
from the exact first-token law. Needs torch and NumPy. ``--quick`` skips the
simulations.
"""

from __future__ import annotations

import argparse
import math
import platform
import time
from itertools import product
from statistics import NormalDist

import numpy as np
import torch

from qconform.adapters.stat_mutants import STAT_MUTANTS, TILT
from qconform.adapters.torch_native import TorchNativeAdapter, tilted
from qconform.generators.corpus import default_vectors_dir
from qconform.generators.families.verification_round import decode_request
from qconform.harness.stat.chisquare import (
    bin_counts,
    chi2_isf,
    chi2_sf,
    merge_bins,
    noncentrality,
    noncentrality_for_power,
    noncentrality_reaching,
    pearson,
    power_at,
)
from qconform.harness.stat.mutant_laws import MUTANT_CORRECTIONS
from qconform.harness.stat.runner import StatOptions, final_df, load_cases
from qconform.spec.outcome_law import request_outcome_law

ALPHA = 1e-6
POWER = 0.99
SIM_ALPHA = 1e-3
SIM_POWER = 0.9
NORMAL = NormalDist()


def least_samples(power_of, target: float, start: int = 64, precision: int = 100) -> int:
    """The least N (to ``1 / precision``) with ``power_of(N) >= target``: doubling, then bisection."""
    high = start
    while power_of(high) < target:
        high *= 2
    low = high // 2
    while high - low > max(1, high // precision):
        middle = (low + high) // 2
        low, high = (low, middle) if power_of(middle) >= target else (middle, high)
    return high


# --- qconform stat on the corpus -------------------------------------------------------------


def mutant_laws(case, mutant: str) -> list:
    """The exact laws of a verification_round case's requests under a stat mutant."""
    vocab = case.input["vocab"]
    return [request_outcome_law(decode_request(r, vocab), MUTANT_CORRECTIONS[mutant]) for r in case.input["requests"]]


def case_power(laws: list, mutated: list, samples: int, alpha: float) -> float:
    df, lam = 0, 0.0
    for law, alternative in zip(laws, mutated):
        bins = merge_bins(law, samples)
        df += len(bins) - 1
        lam += noncentrality(bins, alternative, samples)
    return power_at(df, alpha, lam)


# --- engine-style cases (float64, real-valued draws) -------------------------------------------


def softmax_rows(vocab: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(target p, draft q) as vLLM's test draws them: softmax of uniform logits."""
    rng = np.random.default_rng(seed)
    rows = [np.exp(rng.random(vocab)) for _ in range(2)]
    return rows[0] / rows[0].sum(), rows[1] / rows[1].sum()


def first_token_laws(p: np.ndarray, q: np.ndarray) -> dict[str, np.ndarray]:
    """Law of the first emitted token of one round: correct (= p), and under each mutant."""
    accept = np.minimum(1.0, p / q)
    residual = np.maximum(p - q, 0.0)
    beta = residual.sum()
    rho = residual / beta
    high = np.cumsum(rho)
    low = high - rho
    reuse = q * accept
    for start in range(0, len(p), 512):  # rejected draft x: u uniform on [a_x, 1), token v owns [low_v, high_v)
        a = accept[start : start + 512, None]
        reuse = reuse + (
            q[start : start + 512, None] * np.maximum(0.0, high[None, :] - np.maximum(low[None, :], a))
        ).sum(0)
    tilt = q * accept + tilted(torch.from_numpy(residual), float(TILT)).numpy()
    return {"exact": p, "correction-reuses-accept-draw": reuse, "residual-tilt-1pct": tilt}


def chi2_samples(p0: np.ndarray, p1: np.ndarray, df: int, critical: float, power: float) -> int:
    """Rounds an unmerged chi-square rejecting above ``critical`` needs: ``lambda / sum (p1 - p0)^2 / p0``."""
    per_sample = float(((p1 - p0) ** 2 / p0).sum())
    return math.ceil(noncentrality_reaching(df, critical, power) / per_sample)


def subset_masses(p: np.ndarray) -> np.ndarray:
    """``p(A)`` for every proper nonempty token set ``A``."""
    masks = np.array([m for m in product((0, 1), repeat=len(p)) if 0 < sum(m) < len(p)], dtype=float)
    return masks @ p


def tv_threshold(p0: np.ndarray, alpha: float) -> float:
    """``t`` with ``sum_A P(Z_A > t / sd_A) = alpha``: reject when ``sqrt(N) TV > t``."""
    sd = np.sqrt(subset_masses(p0) * (1 - subset_masses(p0)))
    low, high = 0.0, 10.0
    for _ in range(200):
        middle = (low + high) / 2
        tail = sum(NORMAL.cdf(-middle / s) for s in sd)
        low, high = (middle, high) if tail > alpha else (low, middle)
    return high


def tv_power(p0: np.ndarray, p1: np.ndarray, t: float, samples: int, reps: int, rng: np.random.Generator) -> float:
    """Simulated probability that ``sqrt(N) TV(empirical, p0) > t`` with draws from ``p1``."""
    counts = rng.multinomial(samples, p1, size=reps)
    tv = np.abs(counts / samples - p0).sum(axis=1) / 2
    return float((tv * math.sqrt(samples) > t).mean())


def tv_samples(p0: np.ndarray, p1: np.ndarray, alpha: float, power: float, seed: int, reps: int = 2000) -> int:
    """Rounds the TV-threshold test needs for ``power`` (simulated), threshold at ``alpha``."""
    t = tv_threshold(p0, alpha)
    rng = np.random.default_rng(seed)
    return least_samples(lambda n: tv_power(p0, p1, t, n, reps, rng), power, start=16, precision=50)


# --- simulations ----------------------------------------------------------------------------


def simulate_stat(case, mutant: str, samples: int, reps: int, seed: int) -> float:
    """Rejection rate at SIM_ALPHA of the chi-square on ``reps`` runs of the native adapter
    (with ``mutant``, or correct when empty) on one case."""
    adapter = TorchNativeAdapter(mutant=mutant)
    outcomes = adapter.sample_batch(case.family, [case.input] * reps, samples, seed)
    rejected = 0
    for output in outcomes:
        if not isinstance(output, dict):  # an error or Unimplemented: no rate can be taken from it
            raise SystemExit(f"the native adapter did not answer {case.id}: {output}")
        statistic, df = 0.0, 0
        for law, histogram in zip(case.laws, output["requests"]):
            observed = {(o["accepted"], tuple(o["emitted"])): o["count"] for o in histogram["outcomes"]}
            bins = merge_bins(law, samples)
            statistic += pearson(bins, bin_counts(bins, observed), samples)
            df += len(bins) - 1
        rejected += chi2_sf(statistic, df) <= SIM_ALPHA
    return rejected / reps


def confirm(cases: dict, best_cases: dict, laws10: dict, reps: int, seed: int) -> None:
    print(f"## confirmation by simulation (level {SIM_ALPHA:g}, power {SIM_POWER})")
    for mutant, case_id in best_cases.items():
        case = cases[case_id]
        mutated = mutant_laws(case, mutant)
        n = least_samples(lambda s: case_power(case.laws, mutated, s, SIM_ALPHA), SIM_POWER)
        computed = case_power(case.laws, mutated, n, SIM_ALPHA)
        hit = simulate_stat(case, mutant, n, reps, seed)
        null = simulate_stat(case, "", n, reps, seed + 1)
        print(
            f"   qconform stat, {mutant} on {case_id}, N = {n}: computed power {computed:.3f}, simulated "
            f"{hit:.3f} ({reps} runs of the mutant adapter); the correct adapter rejected {null:.3f}"
        )
    p0 = laws10["exact"]
    rng = np.random.default_rng(seed)
    t = tv_threshold(p0, SIM_ALPHA)
    for samples in (1000, 100_000):
        rate = tv_power(p0, p0, t, samples, 40 * reps, rng)
        print(
            f"   TV threshold V=10 calibrated to {SIM_ALPHA:g} by the union bound: false-alarm rate {rate:.4f} "
            f"at N = {samples} ({40 * reps} runs under p)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=200, help="Simulated runs per confirmation (default 200).")
    parser.add_argument("--seed", type=int, default=20261130)
    parser.add_argument("--quick", action="store_true", help="Skip the confirmations by simulation.")
    args = parser.parse_args()
    started = time.process_time()
    print(
        f"# qconform stat power, {platform.python_implementation()} {platform.python_version()}, "
        f"torch {torch.__version__}, NumPy {np.__version__}"
    )
    every_case = load_cases(default_vectors_dir())
    m = sum(1 for c in every_case if c.result == "valid" and final_df(c, StatOptions.samples) > 0)
    print(
        f"alpha = {ALPHA:g} family-wise, power {POWER}; a full run tests m = {m} of {len(every_case)} cases, "
        f"per-case level {ALPHA / m:.3g}"
    )
    for df in (1, 9):
        need = noncentrality_for_power(df, ALPHA / m, POWER) / (4 * float(TILT) ** 2)
        print(f"   any 1%-TV deviation of a case's law with {df} df, worst direction: {math.ceil(need)} rounds")
    laws10 = first_token_laws(*softmax_rows(10, args.seed))
    laws4096 = first_token_laws(*softmax_rows(4096, args.seed))
    df4096 = 4095
    ten_sigma = df4096 + 10 * math.sqrt(2 * df4096)
    print(
        f"10-sigma threshold at df {df4096}: {ten_sigma:.1f} (false-alarm probability {chi2_sf(ten_sigma, df4096):.2g})\n"
    )
    cases = {c.id: c for c in every_case if c.family == "verification_round" and c.result == "valid"}
    best_cases = {}
    for mutant in STAT_MUTANTS:
        per_case = []
        for case in cases.values():
            mutated = mutant_laws(case, mutant)
            if mutated != case.laws:
                n = least_samples(lambda s: case_power(case.laws, mutated, s, ALPHA / m), POWER)
                per_case.append((n, case.id))
        ours, best_cases[mutant] = min(per_case)
        p0, p1 = laws10["exact"], laws10[mutant]
        q0, q1 = laws4096["exact"], laws4096[mutant]
        baselines = {
            "chi-square (merged bins, alpha), engine case V=10, first token": chi2_samples(
                p0, p1, 9, chi2_isf(ALPHA, 9), POWER
            ),
            "TV threshold at alpha, engine case V=10, first token": tv_samples(p0, p1, ALPHA, POWER, args.seed),
            "10-sigma chi-square, engine case V=4096, first token": chi2_samples(q0, q1, df4096, ten_sigma, POWER),
            "chi-square at alpha, engine case V=4096, first token": chi2_samples(
                q0, q1, df4096, chi2_isf(ALPHA, df4096), POWER
            ),
        }
        print(f"## {mutant}: {STAT_MUTANTS[mutant]}")
        print(
            f"   TV of the engine cases' first-token law: V=10 {np.abs(p1 - p0).sum() / 2:.4f}, "
            f"V=4096 {np.abs(q1 - q0).sum() / 2:.4f}"
        )
        print(
            f"   qconform stat, best of the {len(per_case)} corpus cases it changes ({best_cases[mutant]}): "
            f"{ours} rounds per case ({ours * len(every_case)} for a full run of {len(every_case)} cases)"
        )
        for name, n in baselines.items():
            print(f"   {name}: {n} rounds ({n / ours:.3g}x)")
        print()
    if not args.quick:
        confirm(cases, best_cases, laws10, args.reps, args.seed)
    print(f"\n{time.process_time() - started:.1f} s CPU")


if __name__ == "__main__":
    main()
