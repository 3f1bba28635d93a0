"""Statistical conformance mode: rounds sampled by an adapter with its own RNG, against the exact law.

An adapter that cannot take injected draws (``capabilities.injected_draws`` false)
cannot be checked draw for draw. Statistical mode asks it instead, through the
``sample`` op (docs/stat-mode.md), for ``N`` independent rounds of each case of the
``verification_round`` and ``distribution`` families, as histograms of outcomes
``(accepted, emitted)``, and compares them with the exact law of the spec
(:mod:`qconform.spec.outcome_law`) by Pearson's chi-square with rare outcomes
pooled (:mod:`qconform.harness.stat.chisquare`). Holm's procedure holds the
family-wise false-alarm probability at ``alpha`` across cases; every case reports
the total-variation deviation it would have detected with the requested power.
With ``sequential``, cases stop early once the evidence is decisive
(:mod:`qconform.harness.stat.sequential`).

Each case is sampled by its own requests, seeded by the case, so under ``torchrun``
the cases can be spread over ranks (:mod:`qconform.harness.run.distributed`) and the
verdicts do not depend on the world size.

Verdicts per case: ``pass``; ``fail`` (the law differs, an outcome the law
forbids was sampled, a valid case was refused, or an invalid one was sampled
instead of refused with its code); ``error`` (the adapter crashed or answered
garbage); ``unsupported`` (it does not sample the family, or answered
unimplemented).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path
from typing import Callable, Protocol, Sequence

from qconform.generators import registry
from qconform.harness.adapter import Adapter, AdapterConfig, AdapterError, Outcome, Unimplemented
from qconform.harness.run.distributed import SINGLE, Ranks
from qconform.harness.stat.chisquare import (
    Bin,
    bin_counts,
    chi2_sf,
    detectable_tv,
    holm,
    merge_bins,
    pearson,
)
from qconform.harness.stat.sequential import (
    LOOKS,
    Look,
    futile,
    procedure_tv,
    rejects,
    sequential_p_value,
    spending_looks,
)
from qconform.harness.transport.shim_protocol import check_sample_output, sample_per_request
from qconform.spec.outcome_law import Law, RoundOutcome


def stat_families() -> tuple[str, ...]:
    """The families statistical mode samples: those whose ``Family`` has ``stat`` hooks."""
    return tuple(name for name in registry.family_names() if registry.load_family(name).stat is not None)


def case_laws(family: str, case_input: dict) -> list[Law]:
    """The exact law of every independent histogram a ``sample`` answer holds for a case
    (the family's ``stat.laws``)."""
    hooks = registry.load_family(family).stat
    if hooks is None:
        raise ValueError(f"statistical mode has no law for family {family}")
    return hooks.laws(case_input)


PASS, FAIL, ERROR, UNSUPPORTED = "pass", "fail", "error", "unsupported"
#: a case whose sampling a SIGINT or SIGTERM cut short: judged nothing, fails the run
INTERRUPTED = "interrupted"


@dataclass(frozen=True)
class StatOptions:
    """``samples``: rounds per case (the most, when sequential); ``alpha``: family-wise
    false-alarm probability; ``power``: the power the detectable TV is stated at (and,
    sequential, the guaranteed power against that TV); ``seed``: base seed of the
    ``sample`` requests; ``chunk``: most rounds per case in one request."""

    samples: int = 200_000
    alpha: float = 1e-6
    power: float = 0.99
    seed: int = 0
    sequential: bool = False
    looks: int = LOOKS
    chunk: int = 1 << 16


@dataclass
class StatCase:
    """A corpus case as statistical mode uses it: ``laws`` holds the exact law of each
    histogram of its answer (none for an invalid case, whose answer must be ``error``)."""

    id: str
    family: str
    input: dict
    result: str
    error: str | None
    laws: list[Law] = field(default_factory=list)


class Sampler(Protocol):
    """What statistical mode needs of an adapter: :class:`qconform.harness.transport.client.AdapterClient`,
    or :class:`InProcess`."""

    config: AdapterConfig

    def sample_batch(self, family: str, inputs: Sequence[dict], samples: int, seed: int) -> list[Outcome]: ...


class InProcess:
    """An in-process adapter driven like a client: outputs checked as the client checks them."""

    def __init__(self, adapter: Adapter) -> None:
        self.adapter = adapter
        self.config = adapter.config()

    def sample_batch(self, family: str, inputs: Sequence[dict], samples: int, seed: int) -> list[Outcome]:
        if family not in self.config.capabilities.sampling:
            return [Unimplemented(f"{self.config.name} does not declare sampling of {family}")] * len(inputs)
        try:
            outcomes = self.adapter.sample_batch(family, inputs, samples, seed)
        except Exception as exc:  # noqa: BLE001 - the adapter's failure is the result, as in the host
            return [AdapterError(f"sample_batch raised {type(exc).__name__}: {exc}")] * len(inputs)
        if not isinstance(outcomes, list) or len(outcomes) != len(inputs):
            answered = f"{len(outcomes)} outcomes" if isinstance(outcomes, list) else f"a {type(outcomes).__name__}"
            return [AdapterError(f"sample_batch answered {answered} for {len(inputs)} inputs")] * len(inputs)
        checked: list[Outcome] = []
        for outcome in outcomes:
            problem = check_sample_output(family, outcome, samples) if isinstance(outcome, dict) else None
            checked.append(AdapterError(f"malformed output: {problem}") if problem else outcome)
        return checked


def load_cases(
    vectors: Path,
    families: Sequence[str] | None = None,
    patterns: Sequence[str] = (),
    keyword: str | None = None,
    excludes: Sequence[str] = (),
) -> list[StatCase]:
    """The cases of ``families`` whose id matches one of the ``fnmatch`` ``patterns`` (all
    when none), matches the ``-k`` expression ``keyword`` (pytest's syntax, over the id,
    flags and rules) and matches none of the ``excludes`` globs, with the exact laws of
    the valid ones."""
    from qconform.generators.validation import iter_cases

    selects = keyword_selector(keyword)
    cases = []
    for case in iter_cases(vectors, list(stat_families() if families is None else families)):
        if patterns and not any(fnmatch(case.id, pattern) for pattern in patterns):
            continue
        if any(fnmatch(case.id, pattern) for pattern in excludes):
            continue
        if not selects((case.id, *case.flags, *case.rules)):
            continue
        valid = case.result == "valid"
        cases.append(
            StatCase(
                case.id,
                case.family,
                case.input,
                case.result,
                None if valid else case.expected.get("error"),
                case_laws(case.family, case.input) if valid else [],
            )
        )
    return cases


def keyword_selector(keyword: str | None) -> Callable[[Sequence[str]], bool]:
    """pytest's ``-k`` matching: each name of the expression is a case-insensitive
    substring of one of the case's names (id, flags, rules)."""
    if not keyword:
        return lambda names: True
    from _pytest.mark.expression import Expression

    expression = Expression.compile(keyword)

    def selects(names: Sequence[str]) -> bool:
        lowered = [n.lower() for n in names]
        return expression.evaluate(lambda ident, /, **_: any(ident.lower() in n for n in lowered))

    return selects


# --- results -----------------------------------------------------------------------------


@dataclass
class Histogram:
    """One histogram of a case at its last look: the merged bins, their observed counts,
    and the outcomes the law forbids that were observed."""

    bins: list[Bin]
    counts: list[int]
    impossible: dict[RoundOutcome, int]


@dataclass
class CaseResult:
    """What statistical mode concluded about one case."""

    id: str
    family: str
    verdict: str = PASS
    message: str = ""
    samples: int = 0
    statistic: float | None = None
    df: int = 0
    p_value: float | None = None
    adjusted_p: float | None = None
    detectable_tv: float | None = None
    stopped: str = ""
    histograms: list[Histogram] = field(default_factory=list)
    plot: str | None = None
    #: what the adapter answered on an invalid case (a refusal, or what it sampled)
    answer: dict | None = None

    @property
    def tested(self) -> bool:
        """Whether the case takes part in Holm's procedure: it has a p-value."""
        return self.p_value is not None


@dataclass
class StatRun:
    """A statistical-mode run: its options, the adapter's config, one result per case."""

    options: StatOptions
    config: AdapterConfig
    results: list[CaseResult]
    tested: int = 0
    #: the signal that cut the run short ("SIGINT", "SIGTERM"), or "" for a finished run
    interrupted: str = ""

    @property
    def ok(self) -> bool:
        return all(r.verdict in (PASS, UNSUPPORTED) for r in self.results)

    def counts(self) -> dict[str, int]:
        return dict(Counter(r.verdict for r in self.results))


# --- sampling ----------------------------------------------------------------------------


def request_seed(base: int, stream: str, index: int) -> int:
    """The 64-bit seed of the ``index``-th ``sample`` request of ``stream`` (``<family>/<case id>``)."""
    digest = hashlib.blake2b(f"{base}:{stream}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def outcome_key(family: str, outcome: dict) -> tuple[int, tuple[int, ...]]:
    emitted = tuple(outcome["emitted"])
    return (outcome["accepted"] if sample_per_request(family) else len(emitted) - 1, emitted)


def histograms_of(case: StatCase, output: dict) -> list[dict] | str:
    """The histograms of an answer, one per law, or why the answer does not fit the case."""
    found = output["requests"] if sample_per_request(case.family) else [output]
    if len(found) != len(case.laws):
        return f"malformed answer: {len(found)} histograms for {len(case.laws)} requests"
    return found


@dataclass
class CaseState:
    """A case being sampled: observed counts per histogram, and the statistic at each look."""

    case: StatCase
    result: CaseResult
    observed: list[Counter]
    p_values: list[float] = field(default_factory=list)
    done: bool = False

    def refuse_or_fail(self, outcome: Outcome) -> None:
        """Decide the case from an answer that is not a histogram (or any answer to an invalid case)."""
        result, case = self.result, self.case
        self.done = True
        if isinstance(outcome, Unimplemented):
            result.verdict, result.message = UNSUPPORTED, f"unimplemented: {outcome.reason}"
        elif isinstance(outcome, AdapterError):
            result.verdict, result.message = ERROR, outcome.message
        elif case.result != "valid":
            result.answer = outcome
            code = outcome.get("error")
            if code == case.error:
                result.message = f"refused with {code}, as it must"
            else:
                result.verdict = FAIL
                result.message = (
                    f"refused with {code}, expected {case.error}"
                    if code
                    else f"sampled an invalid case; expected the refusal {case.error}"
                )
        else:
            result.verdict, result.message = FAIL, f"refused a valid case with {outcome['error']}"

    def add(self, outcome: Outcome) -> None:
        """Add one ``sample`` answer's histograms, or decide the case from a non-histogram answer."""
        if not isinstance(outcome, dict) or "error" in outcome or self.case.result != "valid":
            self.refuse_or_fail(outcome)
            return
        found = histograms_of(self.case, outcome)
        if isinstance(found, str):
            self.done = True
            self.result.verdict, self.result.message = ERROR, found
            return
        for counter, histogram in zip(self.observed, found):
            for entry in histogram["outcomes"]:
                counter[outcome_key(self.case.family, entry)] += entry["count"]


def evaluate(state: CaseState, samples: int) -> tuple[float, int, list[Histogram]]:
    """Pearson's statistic and degrees of freedom summed over the case's histograms at
    ``samples`` rounds, and the histograms' bins."""
    statistic, df, histograms = 0.0, 0, []
    for law, observed in zip(state.case.laws, state.observed):
        bins = merge_bins(law, samples)
        counts = bin_counts(bins, observed)
        impossible = {o: c for o, c in observed.items() if not law.get(o)}
        statistic += pearson(bins, counts, samples)
        df += len(bins) - 1
        histograms.append(Histogram(bins, counts, impossible))
    return statistic, df, histograms


def final_df(case: StatCase, samples: int) -> int:
    return sum(len(merge_bins(law, samples)) - 1 for law in case.laws)


class StatRunner:
    """Samples every case of a run and judges it (module docstring)."""

    def __init__(
        self,
        sampler: Sampler,
        cases: Sequence[StatCase],
        options: StatOptions,
        ranks: Ranks = SINGLE,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        self.sampler = sampler
        #: told the rounds of every answered request (a progress bar)
        self.progress = progress
        self.options = options
        self.ranks = ranks
        self.looks = spending_looks(options.samples, options.looks if options.sequential else 1)
        self.states = [CaseState(c, CaseResult(c.id, c.family), [Counter() for _ in c.laws]) for c in cases]
        dfs = {s.case.id: final_df(s.case, options.samples) for s in self.states if s.case.result == "valid"}
        self.tested = max(1, sum(1 for df in dfs.values() if df > 0))
        self.case_alpha = options.alpha / self.tested
        self.delta = {case_id: self.guaranteed_tv(df) for case_id, df in dfs.items()}
        self.requests = Counter()

    def guaranteed_tv(self, df: int) -> float | None:
        if df <= 0:
            return None
        options = self.options
        if options.sequential:
            return procedure_tv(df, options.samples, self.case_alpha, 1 - options.power, self.looks[-1])
        return detectable_tv(df, options.samples, self.case_alpha, options.power)

    def run(self) -> StatRun:
        """Sample this rank's cases (every case on one rank), gather every rank's, then judge
        them all together: each case's rounds depend only on the case, so the verdicts do not
        depend on the world size (docs/distributed.md)."""
        mine = self.ranks.mine(range(len(self.states)))
        try:
            for family in dict.fromkeys(s.case.family for s in self.states):
                self.run_family([self.states[i] for i in mine if self.states[i].case.family == family])
        except KeyboardInterrupt as stop:  # SIGINT, or SIGTERM turned into one: judge what was sampled
            return self.interrupt(str(stop) or "SIGINT")
        if self.ranks.world > 1:
            sampled = self.ranks.merged({i: (self.states[i].result, self.states[i].p_values) for i in mine})
            for i, (result, p_values) in sampled.items():
                self.states[i].result, self.states[i].p_values = result, p_values
        self.conclude()
        results = [s.result for s in self.states]
        return StatRun(self.options, self.sampler.config, results, self.tested)

    def interrupt(self, signal_name: str) -> StatRun:
        """The partial run: finished cases judged as always (Holm over them), every other case
        :data:`INTERRUPTED` with the rounds it had sampled."""
        for state in self.states:
            if not state.done:
                state.done = True
                result = state.result
                result.verdict = INTERRUPTED
                result.message = f"not judged: run interrupted by {signal_name} after {result.samples} rounds"
        self.conclude()
        results = [s.result for s in self.states]
        return StatRun(self.options, self.sampler.config, results, self.tested, signal_name)

    def run_family(self, states: list[CaseState]) -> None:
        """Sample the cases of one family look by look, each request for every live case."""
        drawn = 0
        for k, look in enumerate(self.looks):
            while drawn < look.samples:
                live = [s for s in states if not s.done]
                if not live:
                    return
                count = min(self.options.chunk, look.samples - drawn)
                self.sample(live, count)
                drawn += count
            for state in states:
                if not state.done:
                    self.look_at(state, k, look)

    def sample(self, live: list[CaseState], count: int) -> None:
        """One ``sample`` request per live case, seeded by the case and its request count (never
        by its batch-mates), so a case samples the same rounds on any rank."""
        for state in live:
            stream = f"{state.case.family}/{state.case.id}"
            seed = request_seed(self.options.seed, stream, self.requests[stream])
            self.requests[stream] += 1
            state.add(self.sampler.sample_batch(state.case.family, [state.case.input], count, seed)[0])
            state.result.samples += count
            if self.progress is not None:
                self.progress(count)

    def look_at(self, state: CaseState, k: int, look: Look) -> None:
        """Judge a live case at look ``k``: stop it when an outcome is impossible, when the
        evidence is decisive (sequential), or at the last look."""
        result = state.result
        statistic, df, histograms = evaluate(state, look.samples)
        impossible = any(h.impossible for h in histograms)
        p_value = 0.0 if impossible else chi2_sf(statistic, df)
        state.p_values.append(p_value)
        result.statistic, result.df, result.histograms = statistic, df, histograms
        last = k == len(self.looks) - 1
        delta = self.delta.get(state.case.id)
        if impossible or last:
            state.done = True
            if impossible and not last:
                result.stopped = f"forbidden outcome at look {k + 1} of {len(self.looks)}"
        elif rejects(p_value, self.case_alpha, look):
            state.done, result.stopped = True, f"decisive rejection at look {k + 1} of {len(self.looks)}"
        elif delta is not None and futile(statistic, df, look.samples, delta, 1 - self.options.power, look):
            state.done, result.stopped = True, f"decisive acceptance at look {k + 1} of {len(self.looks)}"

    def conclude(self) -> None:
        """Holm's procedure over the p-values of the sampled valid cases with a degree of
        freedom (or an impossible outcome); verdicts and messages."""
        sampled = [s for s in self.states if s.case.result == "valid" and s.p_values and s.result.verdict == PASS]
        tested = [s for s in sampled if s.result.df > 0 or s.p_values[-1] == 0.0]
        p_values = [sequential_p_value(s.p_values, self.looks) for s in tested]
        for state, p_value, adjusted in zip(tested, p_values, holm(p_values)):
            state.result.p_value = p_value
            state.result.adjusted_p = adjusted
        for state in sampled:
            self.describe(state)

    def describe(self, state: CaseState) -> None:
        result = state.result
        result.detectable_tv = self.delta.get(state.case.id)
        impossible = {o: c for h in result.histograms for o, c in h.impossible.items()}
        if impossible:
            shown = ", ".join(f"{outcome_label(o)} x{c}" for o, c in list(impossible.items())[:3])
            result.verdict = FAIL
            result.message = f"sampled {sum(impossible.values())} round(s) the exact law forbids: {shown}"
        elif result.adjusted_p is not None and result.adjusted_p <= self.options.alpha:
            result.verdict = FAIL
            result.message = (
                f"the sampled law differs from the exact law: X2 = {result.statistic:.1f} on "
                f"{result.df} df, p = {result.p_value:.3g}, Holm-adjusted {result.adjusted_p:.3g} "
                f"<= alpha = {self.options.alpha:g}"
            )
        elif result.df == 0:
            result.message = "one bin at this N: only an outcome the law forbids could fail it"
        else:
            result.message = (
                f"consistent with the exact law (p = {result.p_value:.3g}); detects TV >= "
                f"{result.detectable_tv:.3g} with power {self.options.power:g}"
            )
        if result.stopped:
            result.message += f" [stopped after {result.samples} rounds: {result.stopped}]"


def outcome_label(outcome: tuple[int, tuple[int, ...]]) -> str:
    accepted, emitted = outcome
    return f"a={accepted} [{' '.join(map(str, emitted))}]"


def run_stat(
    sampler: Sampler,
    cases: Sequence[StatCase],
    options: StatOptions = StatOptions(),
    ranks: Ranks = SINGLE,
    progress: Callable[[int], None] | None = None,
) -> StatRun:
    """Sample and judge ``cases`` (see the module docstring), this rank's share under torchrun;
    ``progress`` is told the rounds of each answered request. A KeyboardInterrupt (SIGINT, or
    SIGTERM under :class:`~qconform.harness.run.signals.SignalGuard`) ends the sampling: the
    run returned is partial (``interrupted``), its unfinished cases :data:`INTERRUPTED`."""
    return StatRunner(sampler, cases, options, ranks, progress).run()
