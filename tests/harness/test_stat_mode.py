"""Statistical conformance mode: exact laws, the chi-square machinery, Holm, the sequential
option, the ``sample`` op, and the native-RNG candidate and its mutants (docs/stat-mode.md)."""

from __future__ import annotations

import csv
import io
import json
import math
import random
from collections import Counter
from dataclasses import replace
from fractions import Fraction

import mpmath
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from qconform.generators.corpus import default_vectors_dir
from qconform.generators.families.verification_round import decode_request
from qconform.harness.adapter import Adapter, AdapterError, Capabilities, PrecisionProfile, Unimplemented
from qconform.harness.stat.chisquare import (
    Bin,
    chi2_isf,
    chi2_sf,
    detectable_tv,
    holm,
    merge_bins,
    ncx2_sf,
    power_at,
)
from qconform.harness.stat.mutant_laws import MUTANT_CORRECTIONS, tilted_masses
from qconform.harness.stat.runner import FAIL, PASS, InProcess, StatOptions, load_cases, run_stat
from qconform.harness.stat.sequential import sequential_p_value, spending_looks
from qconform.harness.transport.host import Host
from qconform.harness.transport.shim_protocol import check_sample_output, encode_message
from qconform.spec.constants import M
from qconform.spec.distribution import round_law, total_variation
from qconform.spec.outcome_law import RoundOutcome, request_outcome_law
from qconform.spec.qrow import QRow
from qconform.spec.rng_abi import RngIdentity
from qconform.spec.verification import RoundInput

pytestmark = pytest.mark.rules("R09", "R11")

VECTORS = default_vectors_dir()
#: cases both stat mutants change (and a refusal, and a distribution case)
CASES = (
    "verification_round/residual/outside-support-only",
    "verification_round/residual/correction-noise-separated-low",
    "verification_round/residual/correction-noise-separated-high",
    "verification_round/zero_target/sparse-zero-target",
    "verification_round/acceptance_boundary/depth1-on-boundary-rejects",
    "verification_round/invalid_requests/zero-q-at-draft",
    "distribution/depth1/poor-q-v4",
)


@pytest.fixture(scope="module")
def cases():
    return load_cases(VECTORS, patterns=CASES)


def native(mutant: str = ""):
    from qconform.adapters.torch_native import TorchNativeAdapter

    return InProcess(TorchNativeAdapter(mutant=mutant))


# --- the native-RNG candidate and its mutants ------------------------------------------------


def test_the_native_rng_candidate_passes(cases):
    pytest.importorskip("torch")
    run = run_stat(native(), cases, StatOptions(samples=150_000, alpha=1e-3))
    assert run.config.capabilities.injected_draws is False
    assert {r.id: r.verdict for r in run.results} == {c.id: PASS for c in cases}, [r.message for r in run.results]
    refusal = next(r for r in run.results if "invalid" in r.id)
    assert refusal.message == "refused with ZERO_Q_AT_TOKEN, as it must"
    assert all(r.samples == 150_000 for r in run.results if r.statistic is not None)


@pytest.mark.rules("R23")
def test_the_noise_reuse_mutant_fails_where_the_correction_law_changes(cases):
    pytest.importorskip("torch")
    run = run_stat(native("correction-reuses-accept-draw"), cases, StatOptions(samples=150_000, alpha=1e-3))
    verdicts = {r.id: r.verdict for r in run.results}
    # a one-token residual or a draw that is always rejected in full leaves the law unchanged
    assert verdicts == {**{c.id: PASS for c in cases}, CASES[0]: FAIL, CASES[4]: FAIL, CASES[6]: FAIL}
    failed = next(r for r in run.results if r.id == CASES[0])
    assert (
        failed.adjusted_p is not None and failed.adjusted_p <= 1e-3 and "differs from the exact law" in failed.message
    )


def test_the_one_percent_residual_tilt_fails(cases):
    pytest.importorskip("torch")
    run = run_stat(native("residual-tilt-1pct"), cases, StatOptions(samples=150_000, alpha=1e-3))
    failed = {r.id for r in run.results if r.verdict == FAIL}
    assert failed >= {CASES[1], CASES[2], CASES[3]}  # corrections every round, over two tokens
    assert all(r.verdict == PASS for r in run.results if "invalid" in r.id)


@pytest.mark.parametrize("mutant", sorted(MUTANT_CORRECTIONS))
def test_each_mutant_adapter_follows_its_exact_law(cases, mutant):
    """The mutant laws the benchmark computes with are the laws the mutant adapters sample."""
    pytest.importorskip("torch")
    case = next(c for c in cases if c.id == CASES[0])
    laws = [request_outcome_law(decode_request(r, 8), MUTANT_CORRECTIONS[mutant]) for r in case.input["requests"]]
    assert laws != case.laws
    run = run_stat(native(mutant), [replace(case, laws=laws)], StatOptions(samples=40_000, alpha=1e-3))
    assert run.results[0].verdict == PASS, run.results[0].message


def test_sequential_stops_a_strong_mutant_at_the_first_look(cases):
    pytest.importorskip("torch")
    options = StatOptions(samples=160_000, alpha=1e-3, sequential=True)
    case = [c for c in cases if c.id == CASES[0]]
    bad = run_stat(native("correction-reuses-accept-draw"), case, options).results[0]
    assert bad.verdict == FAIL and bad.samples == 20_000 and "look 1 of 4" in bad.stopped
    good = run_stat(native(), case, options).results[0]
    assert good.verdict == PASS and good.samples <= 160_000


def test_the_stat_command_end_to_end(tmp_path):
    """Through the shim protocol: exit 1, a JSON report, and plot data for each failing case."""
    pytest.importorskip("torch")
    from qconform.cli.group import cli

    report = tmp_path / "stat.json"
    result = CliRunner().invoke(
        cli,
        [
            "stat",
            "--adapter",
            "torch-native-mutant:correction-reuses-accept-draw",
            "--case",
            CASES[0],
            "--case",
            CASES[5],
            "--samples",
            "4000",
            "--alpha",
            "1e-3",
            "--json",
            str(report),
        ],
    )
    assert result.exit_code == 1, result.output
    data = json.loads(report.read_text())
    assert data["format"] == "qconform-stat-v1" and data["ok"] is False
    assert data["counts"] == {"fail": 1, "pass": 1}
    failed = next(c for c in data["cases"] if c["class"] == "fail")
    assert failed["id"] == CASES[0] and failed["samples"] == 4000 and failed["pValue"] < 1e-6
    assert sum(b["observed"] for b in failed["histograms"][0]["bins"]) == 4000
    plots = tmp_path / "stat-plots"
    assert (plots / "verification_round__residual__outside-support-only.csv").is_file()
    assert failed["plot"].startswith(str(plots))


def test_the_stat_command_exits_5_when_no_case_matches():
    from qconform.cli.group import cli

    result = CliRunner().invoke(cli, ["stat", "--case", "no/such/case"])
    assert result.exit_code == 5


def test_an_adapter_that_samples_nothing_is_a_usage_error():
    from qconform.cli.group import cli

    result = CliRunner().invoke(cli, ["stat", "--adapter", "reference", "--case", CASES[0]])
    assert result.exit_code == 2 and "samples none of" in result.output


# --- exact laws ------------------------------------------------------------------------------


def point_mass(vocab: int, token: int) -> QRow:
    return QRow.dense([M if v == token else 0 for v in range(vocab)])


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=3, max_size=3), st.integers(0, 2))
def test_a_point_mass_q_gives_the_spec_round_law(weights, draft):
    """With q a point mass on the draft the proposal is not random, so the round law of the
    spec (a different walk) must equal the law of the given-draft round."""
    if sum(weights) == 0:
        weights = [1, 1, 1]
    p = [Fraction(w, sum(weights)) for w in weights]
    q = point_mass(3, draft)
    inp = RoundInput(RngIdentity(1, 0, 0, 0), [draft], [q], [p, p])
    expected = {(len(e) - 1, e): pr for e, pr in round_law(3, 1, {(): q}, {(): p, (draft,): p}).items()}
    assert request_outcome_law(inp) == expected


def test_stop_tokens_and_budget_end_the_law():
    half = [Fraction(1, 2), Fraction(1, 2)]
    q = QRow.dense([M // 2, M // 2])
    inp = RoundInput(RngIdentity(1, 0, 0, 0), [0, 1], [q, q], [half, half, half], frozenset({0}))
    assert request_outcome_law(inp) == {(1, (0,)): Fraction(1)}  # p = q: accepted, and a stop token
    inp.stop_tokens, inp.budget = frozenset(), 2
    assert request_outcome_law(inp) == {(2, (0, 1)): Fraction(1)}


def test_noise_reuse_confines_the_correction_to_the_top_of_the_residual():
    masses = [Fraction(1, 4), Fraction(3, 4)]
    assert MUTANT_CORRECTIONS["correction-reuses-accept-draw"](masses, Fraction(1, 2)) == [0, 1]
    assert MUTANT_CORRECTIONS["correction-reuses-accept-draw"](masses, Fraction(1, 8)) == [
        Fraction(1, 7),
        Fraction(6, 7),
    ]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 20), min_size=2, max_size=8))
def test_the_tilt_moves_one_percent(weights):
    masses = [Fraction(w) for w in weights]
    tilted = tilted_masses(masses)
    assert sum(tilted) == sum(masses) and min(tilted) >= 0
    if sum(1 for w in weights if w) >= 2:
        tv = total_variation(dict(enumerate(masses)), dict(enumerate(tilted))) / sum(masses)
        assert tv == Fraction(1, 100)
    else:
        assert tilted == masses


# --- bins, tails, power, Holm ----------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 50), min_size=1, max_size=30), st.integers(1, 2000))
def test_merged_bins_partition_the_law_with_expected_counts_of_five(weights, samples):
    law: dict[RoundOutcome, Fraction] = {(0, (v,)): Fraction(w, sum(weights)) for v, w in enumerate(weights)}
    bins = merge_bins(law, samples)
    pooled = [o for b in bins for o in b.outcomes]
    assert sorted(pooled) == sorted(law) and len(pooled) == len(set(pooled))
    assert all(b.probability == sum(law[o] for o in b.outcomes) for b in bins)
    if samples >= 5:
        assert all(samples * b.probability >= 5 for b in bins)
    rare = sum(p for p in law.values() if samples * p < 5)
    frequent = sorted((p, o) for o, p in law.items() if samples * p >= 5)
    for p, outcome in frequent:  # a frequent outcome keeps its own bin, unless the rare ones
        alone = Bin((outcome,), p) in bins  # are too few to pool and join the least frequent
        assert alone or (0 < samples * rare < 5 and (p, outcome) == frequent[0])


def test_merging_pools_the_rarest_outcomes_first():
    a, b, c, d, e = ((0, (token,)) for token in range(5))  # five outcomes in ascending order
    law = {
        a: Fraction(90, 100),
        b: Fraction(6, 100),
        c: Fraction(2, 100),
        d: Fraction(1, 100),
        e: Fraction(1, 100),
    }
    assert merge_bins(law, 200) == [
        Bin((a,), Fraction(9, 10)),
        Bin((b,), Fraction(6, 100)),
        Bin((d, e, c), Fraction(4, 100)),
    ]
    # too few rare outcomes to fill a pool: they join the least likely frequent one
    assert merge_bins(law, 100) == [Bin((a,), Fraction(9, 10)), Bin((b, d, e, c), Fraction(1, 10))]
    assert merge_bins(law, 1000) == [Bin((o,), p) for o, p in law.items()]


@pytest.mark.parametrize("df", [2, 4, 10])
@pytest.mark.parametrize("x", [0.5, 7.0, 40.0])
def test_chi_square_tail_matches_the_closed_form_at_even_df(df, x):
    closed = math.exp(-x / 2) * sum((x / 2) ** j / math.factorial(j) for j in range(df // 2))
    assert chi2_sf(x, df) == pytest.approx(closed, rel=1e-12)
    assert chi2_sf(chi2_isf(1e-6, df), df) == pytest.approx(1e-6, rel=1e-9)


@pytest.mark.parametrize("x, df, lam", [(10.0, 3, 5.0), (100.0, 50, 30.0), (35.9, 5, 60.0), (4000.0, 4095, 400.0)])
def test_noncentral_tail_matches_its_poisson_series(x, df, lam):
    with mpmath.workdps(30):  # every term by its own incomplete gamma, far into the Poisson tail
        half = mpmath.mpf(lam) / 2
        series = sum(
            mpmath.exp(-half)
            * half**j
            / mpmath.factorial(j)
            * mpmath.gammainc(mpmath.mpf(df) / 2 + j, x / 2, mpmath.inf, regularized=True)
            for j in range(int(lam / 2 + 15 * math.sqrt(lam / 2) + 60))
        )
    assert ncx2_sf(x, df, lam) == pytest.approx(float(series), rel=1e-9)


def simulated_rejection_rate(
    expected: list[float], actual: list[float], samples: int, alpha: float, reps: int, seed: int
) -> float:
    rng = random.Random(seed)
    critical = chi2_isf(alpha, len(expected) - 1)
    rejected = 0
    for _ in range(reps):
        counts = Counter(rng.choices(range(len(actual)), weights=actual, k=samples))
        statistic = sum((counts[b] - samples * e) ** 2 / (samples * e) for b, e in enumerate(expected))
        rejected += statistic > critical
    return rejected / reps


def test_the_detectable_tv_is_detected_with_the_stated_power():
    """The least favourable alternative at the detectable TV (mass moved in proportion between
    two halves) is rejected at about the stated rate, seeded simulation."""
    samples, alpha, power = 1000, 0.01, 0.8
    delta = detectable_tv(3, samples, alpha, power)
    actual = [0.25 + delta / 2, 0.25 + delta / 2, 0.25 - delta / 2, 0.25 - delta / 2]
    rate = simulated_rejection_rate([0.25] * 4, actual, samples, alpha, reps=400, seed=7)
    assert abs(rate - power) < 4 * math.sqrt(power * (1 - power) / 400)


def test_the_power_formula_matches_simulation_and_the_level_holds():
    expected = [0.5, 0.3, 0.2]
    actual = [0.46, 0.33, 0.21]
    lam = 2000 * sum((a - e) ** 2 / e for a, e in zip(actual, expected))
    power = power_at(2, 0.01, lam)
    assert 0.5 < power < 0.95
    rate = simulated_rejection_rate(expected, actual, 2000, 0.01, reps=400, seed=11)
    assert abs(rate - power) < 4 * math.sqrt(power * (1 - power) / 400)
    assert simulated_rejection_rate(expected, expected, 2000, 0.01, reps=400, seed=12) <= 0.01 + 4 * math.sqrt(
        0.01 / 400
    )


def test_holm_adjusts_constructed_p_values():
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5]) == [0.5] and holm([]) == []


@settings(max_examples=80)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=12), st.floats(0.001, 0.2))
def test_holm_rejects_exactly_the_step_down_set(p_values, alpha):
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    rejected = set()
    for rank, i in enumerate(order):  # the step-down definition, independently
        if p_values[i] > alpha / (m - rank):
            break
        rejected.add(i)
    assert {i for i, a in enumerate(holm(p_values)) if a <= alpha} == rejected


def test_spending_looks_and_the_sequential_p_value():
    looks = spending_looks(800, 4)
    assert [look.samples for look in looks] == [100, 200, 400, 800]
    assert [look.weight for look in looks] == pytest.approx([1 / 64, 3 / 64, 12 / 64, 48 / 64])
    assert spending_looks(800, 1)[0].weight == 1
    assert sequential_p_value([0.001, 0.5], looks) == pytest.approx(0.064)
    assert sequential_p_value([0.9], looks) == 1.0


# --- the sample op ---------------------------------------------------------------------------


class Histograms(Adapter):
    """Answers every sampled distribution input with one fixed outcome."""

    name = "histograms"

    def capabilities(self) -> Capabilities:
        return Capabilities(families=(), injected_draws=False, sampling=("distribution",))

    def precision(self) -> PrecisionProfile:
        return PrecisionProfile()

    def run_batch(self, family, inputs):
        return []

    def sample_batch(self, family, inputs, samples, seed):
        if seed == 13:
            raise ValueError("unlucky seed")
        return [{"outcomes": [{"emitted": [1], "count": samples}]} for _ in inputs]


def serve(*requests: dict) -> list[dict]:
    out = io.BytesIO()
    Host(Histograms()).serve(io.BytesIO(b"".join(encode_message(r) for r in requests)), out)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_the_host_answers_sample_requests():
    replies = serve(
        {"id": 1, "op": "sample", "family": "distribution", "inputs": [{}, {}], "samples": 7, "seed": "5"},
        {"id": 2, "op": "sample", "family": "verification_round", "inputs": [{}], "samples": 7, "seed": "5"},
        {"id": 3, "op": "sample", "family": "distribution", "inputs": [{}], "samples": 7, "seed": 5},
        {"id": 4, "op": "sample", "family": "distribution", "inputs": [{}], "samples": 3, "seed": "13"},
    )
    assert replies[0] == {
        "id": 1,
        "status": "ok",
        "outputs": [{"status": "ok", "output": {"outcomes": [{"emitted": [1], "count": 7}]}}] * 2,
    }
    assert replies[1]["status"] == "unimplemented"
    assert replies[2]["status"] == "error" and "decimal string" in replies[2]["message"]
    assert replies[3]["outputs"][0]["status"] == "error" and "unlucky seed" in replies[3]["outputs"][0]["message"]


def problem_with(family: str, output: dict, samples: int) -> str:
    """check_sample_output() where the test expects a problem: None fails the test here."""
    problem = check_sample_output(family, output, samples)
    assert problem is not None, f"{output!r} passed the check"
    return problem


def test_sample_outputs_are_checked():
    good = {"requests": [{"outcomes": [{"accepted": 0, "emitted": [3], "count": 4}]}]}
    assert check_sample_output("verification_round", good, 4) is None
    assert check_sample_output("verification_round", {"error": "BAD_SHAPE"}, 4) is None
    assert "counts 4 rounds, not the 5" in problem_with("verification_round", good, 5)
    assert "exactly the keys" in problem_with("distribution", {"outcomes": [{"emitted": [3], "n": 4}]}, 4)
    assert "nonnegative integer" in problem_with("distribution", {"outcomes": [{"emitted": [-1], "count": 4}]}, 4)
    assert "must be positive" in problem_with("distribution", {"outcomes": [{"emitted": [], "count": 0}]}, 0)


def test_in_process_sampling_checks_and_declares_like_the_client():
    sampler = InProcess(Histograms())
    assert isinstance(sampler.sample_batch("verification_round", [{}], 3, 0)[0], Unimplemented)
    assert sampler.sample_batch("distribution", [{}], 3, 0) == [{"outcomes": [{"emitted": [1], "count": 3}]}]
    unlucky = sampler.sample_batch("distribution", [{}], 3, 13)[0]
    assert isinstance(unlucky, AdapterError) and "unlucky seed" in unlucky.message
    broken = Histograms()
    broken.sample_batch = lambda family, inputs, samples, seed: [{"outcomes": [{"emitted": [1], "count": 1}]}]
    assert isinstance(InProcess(broken).sample_batch("distribution", [{}], 3, 0)[0], AdapterError)


def test_a_forbidden_outcome_fails_its_case_at_once():
    case = load_cases(VECTORS, patterns=["distribution/depth1/q-equals-p-v2"])[0]

    class Forbidden(Histograms):
        def sample_batch(self, family, inputs, samples, seed):
            return [{"outcomes": [{"emitted": [0, 0, 0], "count": 1}, {"emitted": [1, 0], "count": samples - 1}]}]

    result = run_stat(InProcess(Forbidden()), [case], StatOptions(samples=50)).results[0]
    assert result.verdict == FAIL and result.p_value == 0.0 and "forbids: a=2 [0 0 0] x1" in result.message


@pytest.mark.parametrize("with_matplotlib", [False, True])
def test_plots_of_failing_cases_fall_back_to_csv(tmp_path, monkeypatch, with_matplotlib):
    from qconform.harness.stat import report as stat_report

    if with_matplotlib:
        pytest.importorskip("matplotlib")
    monkeypatch.setattr(stat_report, "matplotlib_available", lambda: with_matplotlib)
    case = load_cases(VECTORS, patterns=["distribution/depth1/q-equals-p-v2"])[0]

    class Skewed(Histograms):  # a possible outcome every round: a wrong law
        def sample_batch(self, family, inputs, samples, seed):
            return [{"outcomes": [{"emitted": [1, 1], "count": samples}]}]

    run = run_stat(InProcess(Skewed()), [case], StatOptions(samples=400))
    (result,) = run.results
    assert result.verdict == FAIL and "differs from the exact law" in result.message
    written = stat_report.write_plots(run, tmp_path)
    assert sorted(p.suffix for p in written) == ([".csv", ".png"] if with_matplotlib else [".csv"])
    with written[0].open() as handle:
        rows = list(csv.DictReader(handle))
    assert sum(int(row["observed_count"]) for row in rows) == 400
    assert sum(float(row["expected_probability"]) for row in rows) == pytest.approx(1.0)
    assert result.plot == str(written[-1])
