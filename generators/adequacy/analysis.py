"""One adequacy run: select the mutants, measure the baseline, run them, classify, check the equivalents.

Statuses (docs/adequacy.md): ``killed-drift`` (a committed case's answer changed;
the first such case is named), ``killed-crash`` (the mutated spec raised, or its
worker died), ``killed-timeout``, ``equivalent`` (survived and listed in the
equivalents file) and ``survived``. The kill rate is killed / (mutants - equivalent).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path

from qconform.generators import registry
from qconform.generators.adequacy import equivalents, imports, oracle, runner
from qconform.generators.adequacy.equivalents import Equivalent
from qconform.generators.adequacy.fast_paths import FAST_PATHS
from qconform.generators.adequacy.mutate import Site, sites
from qconform.generators.adequacy.oracle import (
    CRASH,
    DRIFT,
    JUDGING,
    SURVIVED,
    CommittedCase,
    module_name,
)

#: the modules whose kill rate is the goal of issue #11 (spec/<name>.py), and the worker state machine of issue #20
CORE_MODULES: tuple[str, ...] = (
    "sampling",
    "verification",
    "allocation",
    "dyadic24",
    "rng_abi",
    "philox",
    "weights",
    "proposal",
    "markov",
    "qrow",
    "distribution",
    "sharding",
    "wire/validation",
    "wire/receiver",
    "wire/worker",
    "wire/codec",
    "admission/audit",
)
#: the other normative modules a solve reaches, measured by default (issue #21, bench/RESULTS.md): the constants,
#: the refusal codes, the wire's layouts, messages, checksum and reason codes,
#: and the admission auditor's draws, exact enumeration, decision tables, policy interface, scenarios and lazy reveal
REACHED_MODULES: tuple[str, ...] = (
    "constants",
    "errors",
    "wire/layout",
    "wire/messages",
    "wire/checksum",
    "wire/reasons",
    "admission/draws",
    "admission/choices",
    "admission/table",
    "admission/policy",
    "admission/scenario",
    "admission/reveal",
)
#: every normative module measured by default (issue #21): the core ones and the wire's negotiation,
#: checks, header and fallback, the arms, the FP32 readers, the exact outcome law of ``stat``, and the
#: FP64 verdict and bound that every allocation answer carries
NORMATIVE_MODULES: tuple[str, ...] = CORE_MODULES + (
    "wire/negotiation",
    "wire/checks",
    "wire/header",
    "wire/fallback",
    "arms",
    "floats",
    "outcome_law",
    "allocation_fp64",
)
#: the judges' unit tests (under tests/), the oracle of ``--judges``; the boundary tests first, so
#: that most mutants die in the first second of their run
JUDGE_BOUNDARIES = "harness/judging/test_judge_boundaries.py"
#: the code every comparator calls (judge.py, value_diff.py) where no family's answers reach it
JUDGE_SHARED = "harness/judging/test_judge_shared_code.py"
#: the structure-aware fuzzer (every family's malformed answers, never an exception out of a judge)
JUDGE_FUZZER = "harness/judging/test_judge_robustness.py"
JUDGE_TESTS: tuple[str, ...] = (
    JUDGE_BOUNDARIES,
    JUDGE_SHARED,
    "test_compare.py",
    "test_compare_sharding.py",
    "test_compare_wire.py",
    "test_partial_injection.py",
    "harness/judging",
)
#: tests of those files that run a candidate, not a judge: left out of the oracle (pytest --deselect)
JUDGE_TESTS_DESELECTED: tuple[str, ...] = (
    "test_partial_injection.py::test_torch_partial_passes_and_its_mutant_is_killed",
)
#: a judge's oracle is the files of JUDGE_TESTS that reach it (a faster oracle: the others never call
#: it): each family comparator is reached by its own family's tests, the every-family ones of
#: test_compare.py and the fuzzer; ``judge`` and ``value_diff``, which every comparator calls, by all
JUDGE_TESTS_OF: dict[str, tuple[str, ...]] = {
    "judging/sharding": (JUDGE_BOUNDARIES, "test_compare_sharding.py"),
    "judging/wire": ("test_compare_wire.py", "test_compare.py", JUDGE_FUZZER),
    "judging/allocation": (JUDGE_BOUNDARIES, "test_compare.py", JUDGE_FUZZER),
    "judging/proposal": (JUDGE_BOUNDARIES, "test_compare.py", JUDGE_FUZZER),
    "judging/proposal_batch": (JUDGE_BOUNDARIES, "test_compare.py", JUDGE_FUZZER),
    "judging/verification": (JUDGE_BOUNDARIES, "test_compare.py", "test_partial_injection.py", JUDGE_FUZZER),
}
#: what a run without --module measures: the normative modules, the other modules a solve reaches, the fast paths
DEFAULT_MODULES: tuple[str, ...] = NORMATIVE_MODULES + REACHED_MODULES + tuple(FAST_PATHS)
FORMAT = "qconform-adequacy-v1"
KILLED = ("killed-drift", "killed-crash", "killed-timeout")
#: a mutant that survived ``--prescreen``'s smaller oracle: to be judged by the full one (``--candidates-of``)
CANDIDATE = "candidate"
#: ``--prescreen``: besides the N smallest cases of each family, every case under these ID prefixes is kept,
#: per mutated module: the cases that exercise it where the smallest cases do not (docs/adequacy.md,
#: "The pre-screen"). For ``floats``: every FP32 logit row, every Markov coefficient (each proposal_chain
#: case carries base logits and Markov terms), the FP32 step rows built for it, and the wire's encoded frames
#: (the sender's FP32 q values, dyadic24 through ``round_ratio_f32``).
PRESCREEN_ALWAYS: dict[str, tuple[str, ...]] = {
    "floats": (
        "allocation_dense/logits/",
        "allocation_dense/fp32_steps/",
        "allocation_invalid/logits/",
        "allocation_invalid/temperature/",
        "allocation_sparse/logits/",
        "sharding/logits/",
        "proposal_chain/",
        "wire_frames/encoding/",
    ),
}
#: a mutant's timeout: this many times the unmutated run of its families, plus the slack
TIMEOUT_FACTOR, TIMEOUT_SLACK_S = 10, 30.0

STATUS_OF = {DRIFT: "killed-drift", CRASH: "killed-crash", runner.TIMEOUT: "killed-timeout"}


class AdequacyError(Exception):
    """A usage or corpus problem that stops the run before any mutant (one line)."""


def resolve_module(text: str) -> str:
    """``spec/wire/codec.py``, ``wire/codec.py`` or ``wire/codec`` -> ``"wire/codec"``; a judge
    ``harness/judging/wire.py`` or ``judging/wire`` -> ``"judging/wire"``; AdequacyError if unknown."""
    name = text.strip().removeprefix("./").removeprefix("spec/").removeprefix("harness/").removesuffix(".py")
    if module_name(name) not in imports.module_files() or name.endswith("__init__") or not name:
        known = sorted(
            m.removeprefix("qconform.spec.").replace(".", "/")
            for m, p in imports.module_files().items()
            if m.startswith("qconform.spec.") and p.name != "__init__.py"
        )
        raise AdequacyError(f"unknown spec module {text!r}; spec modules: {', '.join(known)}")
    return name


def judge_modules() -> tuple[str, ...]:
    """Every judge, ``harness/judging/<name>.py``, as ``"judging/<name>"`` (``--judges``'s default)."""
    prefix = module_name(JUDGING)
    return tuple(
        JUDGING + m.removeprefix(prefix).replace(".", "/")
        for m, p in imports.module_files().items()
        if m.startswith(prefix) and p.name != "__init__.py"
    )


def judge_tests(modules: Sequence[str] = ()) -> tuple[str, ...]:
    """The judges' own unit tests that judge ``modules`` (all of them for any judge not in
    JUDGE_TESTS_OF): their oracle under ``--judges`` (docs/adequacy.md)."""
    root = imports.package_dir("qconform").parent / "tests"
    if modules and all(m in JUDGE_TESTS_OF for m in modules):
        paths: tuple[str, ...] = tuple(dict.fromkeys(p for m in modules for p in JUDGE_TESTS_OF[m]))
    else:
        paths = JUDGE_TESTS
    deselected = tuple(
        f"--deselect={_test_file(root, file)}::{test}"
        for file, _, test in (node.partition("::") for node in JUDGE_TESTS_DESELECTED)
        if file in paths
    )
    files = (_test_file(root, path) for path in paths)
    return tuple(str(file) for file in files if file.exists()) + deselected


def _test_file(root: Path, path: str) -> Path:
    """A test file named by its path under ``tests/`` or, for a bare name, found in any of its
    folders (pytest requires test file names to be unique across the suite)."""
    if "/" in path:
        return root / path
    return next(iter(sorted(root.rglob(path))), root / path)


def module_sites(module: str) -> list[Site]:
    return sites(module, imports.module_files()[module_name(module)])


def select(modules: Sequence[str], sample: int | None, seed: int, ids: frozenset[str] = frozenset()) -> list[Site]:
    """Every mutant of ``modules`` in module and source order (only those of ``ids`` when given), or a
    deterministic sample of ``sample`` of them. AdequacyError for an id that no module generates."""
    chosen = [site for module in modules for site in module_sites(module)]
    if ids:
        unknown = ids - {site.id for site in chosen}
        if unknown:
            raise AdequacyError(f"no such mutant: {min(unknown)} (see qconform adequacy --list)")
        chosen = [site for site in chosen if site.id in ids]
    if sample is not None and sample < len(chosen):
        keep = set(random.Random(seed).sample(range(len(chosen)), sample))
        chosen = [site for i, site in enumerate(chosen) if i in keep]
    return chosen


@dataclass
class MutantReport:
    site: Site
    families: tuple[str, ...]
    status: str
    case: str | None = None
    detail: str = ""
    seconds: float = 0.0
    reached: bool = True  # False: no committed case calls its function (so it was not run)

    def to_json(self) -> dict:
        return {
            **self.site.to_json(),
            "families": list(self.families),
            "status": self.status,
            "case": self.case,
            "detail": self.detail,
            "seconds": round(self.seconds, 2),
            "reached": self.reached,
        }


@dataclass
class Tally:
    mutants: int = 0
    killed: int = 0
    equivalent: int = 0
    unreachable: int = 0  # listed as unreachable through the corpus (shown apart)
    candidates: int = 0  # survived --prescreen: not yet judged by the full oracle (counted as survivors)

    @property
    def survived(self) -> int:
        return self.mutants - self.killed - self.equivalent - self.unreachable - self.candidates

    @property
    def rate(self) -> Fraction | None:
        """killed / (mutants - equivalent - unreachable): what the corpus can pin, pinned."""
        judged = self.mutants - self.equivalent - self.unreachable
        return Fraction(self.killed, judged) if judged else None

    @property
    def rate_with_unreachable(self) -> Fraction | None:
        """killed / (mutants - equivalent): the unreachable counted as survivors."""
        judged = self.mutants - self.equivalent
        return Fraction(self.killed, judged) if judged else None

    def to_json(self) -> dict:
        rate, strict = self.rate, self.rate_with_unreachable
        return {
            "mutants": self.mutants,
            "killed": self.killed,
            "equivalent": self.equivalent,
            "unreachable": self.unreachable,
            "survived": self.survived,
            "candidates": self.candidates,
            "killRate": None if rate is None else round(float(rate), 4),
            "killRateWithUnreachable": None if strict is None else round(float(strict), 4),
        }


@dataclass
class Report:
    modules: tuple[str, ...]
    mutants: list[MutantReport]
    stale: list[tuple[str, str]] = field(default_factory=list)  # (id, why)
    sample: int | None = None
    seed: int = 0
    prescreen: int | None = None  # --prescreen N: the smaller oracle's N (its survivors are candidates)

    def tally(self, module: str | None = None) -> Tally:
        tally = Tally()
        for m in self.mutants:
            if module is None or m.site.module == module:
                tally.mutants += 1
                tally.killed += m.status in KILLED
                tally.equivalent += m.status == "equivalent"
                tally.unreachable += m.status == "unreachable"
                tally.candidates += m.status == CANDIDATE
        return tally

    @property
    def survivors(self) -> list[MutantReport]:
        return [m for m in self.mutants if m.status == "survived"]

    @property
    def candidates(self) -> list[MutantReport]:
        return [m for m in self.mutants if m.status == CANDIDATE]

    def to_json(self) -> dict:
        return {
            "format": FORMAT,
            "selection": {
                "modules": list(self.modules),
                "sample": self.sample,
                "seed": self.seed,
                "prescreen": self.prescreen,
            },
            "total": self.tally().to_json(),
            "modules": {module: self.tally(module).to_json() for module in self.modules},
            "survivors": [m.site.id for m in self.survivors],
            "candidates": [m.site.id for m in self.candidates],
            "stale": [{"id": ident, "why": why} for ident, why in self.stale],
            "mutants": [m.to_json() for m in self.mutants],
        }


def committed_cases(vectors: Path, families: Sequence[str]) -> dict[str, list[CommittedCase]]:
    """The committed, validated cases of ``families`` (VectorFileError when one is malformed), each
    family's smallest inputs first (by canonical JSON length, then id): a mutant usually drifts on
    a small case, so it is found sooner, and the case named is the smallest witness."""
    from qconform.generators.encoding import canonical_json
    from qconform.generators.validation import iter_cases

    out: dict[str, list[CommittedCase]] = {}
    for family in families:
        cases = [
            (len(canonical_json(c.input)), c.id, CommittedCase(c.id, c.input, c.expected))
            for c in iter_cases(vectors, [family])
        ]
        out[family] = [case for _size, _id, case in sorted(cases, key=lambda t: t[:2])]
    return out


def prescreen_cases(
    cases: Mapping[str, Sequence[CommittedCase]], families: Sequence[str], smallest: int, always: Sequence[str] = ()
) -> dict[str, list[CommittedCase]]:
    """``--prescreen``'s oracle: of each family, its ``smallest`` first committed cases (the smallest
    inputs) and every case whose ID starts with one of ``always``, in the full oracle's order.

    They are the committed cases with their committed answers, so a drift or crash here is one of
    the full oracle (which would meet the same case, or stop earlier): a kill. A survivor is only a
    candidate."""
    return {
        family: [
            case
            for rank, case in enumerate(cases[family])
            if rank < smallest or any(case.id.startswith(prefix) for prefix in always)
        ]
        for family in families
    }


def candidate_ids(report_path: Path) -> frozenset[str]:
    """The candidates of a ``--prescreen`` JSON report (``--candidates-of``); AdequacyError if unreadable."""
    try:
        data = json.loads(report_path.read_text(encoding="utf-8"))
        ids = data["candidates"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as error:
        raise AdequacyError(f"{report_path}: not a --prescreen report ({type(error).__name__}: {error})") from None
    if data.get("format") != FORMAT or not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise AdequacyError(f"{report_path}: not a {FORMAT} report with a candidates list")
    return frozenset(ids)


def stale_entries(listed: dict[str, Equivalent], mutants: Sequence[MutantReport]) -> list[tuple[str, str]]:
    """Entries whose mutant is no longer generated, or was killed in this run."""
    generated: dict[str, set[str]] = {}
    stale: list[tuple[str, str]] = []
    outcome = {m.site.id: m.status for m in mutants}
    for ident in listed:
        module = equivalents.module_of(ident)
        if module not in generated:
            try:
                generated[module] = {s.id for s in module_sites(resolve_module(module))}
            except AdequacyError:
                generated[module] = set()
        if ident not in generated[module]:
            stale.append((ident, "no longer generated (the code under it changed)"))
        elif outcome.get(ident) in KILLED:
            stale.append((ident, f"now {outcome[ident]}: not equivalent"))
    return stale


def analyse(
    modules: Sequence[str],
    sites_run: Sequence[Site],
    vectors: Path,
    equivalents_path: Path,
    workers: int,
    timeout_s: float | None,
    sample: int | None = None,
    seed: int = 0,
    progress: Callable[[str, int], None] | None = None,
    prescreen: int | None = None,
) -> Report:
    """Run ``sites_run`` (mutants of ``modules``) against the corpus under ``vectors``.

    ``progress(what, total)`` is called once with the total (what = "") and then after
    each mutant. AdequacyError when the unmutated spec already drifts from the corpus.
    With ``prescreen`` N the mutants meet :func:`prescreen_cases` only (the baseline still
    re-solves every case): a drift is a kill, a survivor a ``candidate``.
    """
    listed = equivalents.load(equivalents_path)
    family_names = registry.family_names()
    # a fast path's oracle is the committed cases of its families, answered by the fast path itself
    families_of = {
        m: FAST_PATHS[m].families if m in FAST_PATHS else imports.dependent_families(module_name(m), family_names)
        for m in modules
    }
    needed = sorted({f for m in modules for f in families_of[m]}, key=family_names.index)
    cases = committed_cases(vectors, needed)
    registry.all_families()  # imported once here, so every forked worker starts warm

    fast = [m for m in modules if m in FAST_PATHS]
    baseline = runner.run(
        [runner.Job(None, (f,), timeout_s or 3600.0, trace=True) for f in needed]
        + [runner.Job(None, families_of[m], timeout_s or 3600.0, trace=True, fast_path=m) for m in fast],
        cases,
        workers,
    )
    cost: dict[str, float] = {}
    reached: set[tuple[Path, str]] = set()
    for result in baseline:
        reached |= {(Path(file).resolve(), name) for file, name in result.outcome.reached}
        what = result.job.fast_path or result.job.families[0]
        if result.outcome.kind != SURVIVED:
            raise AdequacyError(
                f"the unmutated spec does not reproduce {what} ({result.outcome.kind} at "
                f"{result.outcome.case}: {result.outcome.detail}); run `qconform generate --check`"
            )
        cost[what] = result.seconds

    jobs, unreached = [], []
    for site in sites_run:
        families = families_of[site.module]  # corpus order: the first drifted case is deterministic
        if (
            site.in_function
            and (imports.module_files()[module_name(site.module)].resolve(), site.qualname) not in reached
        ):
            unreached.append(
                MutantReport(
                    site,
                    families,
                    listed[site.id].kind if site.id in listed else "survived",
                    None,
                    f"unreached: no committed case calls {site.qualname}",
                    reached=False,
                )
            )
            continue
        if site.module in FAST_PATHS:
            limit = timeout_s or TIMEOUT_FACTOR * cost[site.module] + TIMEOUT_SLACK_S
            jobs.append(runner.Job(site, families, limit, fast_path=site.module))
            continue
        limit = timeout_s or TIMEOUT_FACTOR * sum(cost[f] for f in families) + TIMEOUT_SLACK_S
        jobs.append(runner.Job(site, families, limit))
    if progress:
        progress("", len(jobs))  # the unreached ones are not run

    def done(result: runner.Finished) -> None:
        if progress and result.job.site is not None:
            progress(result.job.site.id, len(jobs))

    reports = list(unreached)
    if prescreen is None:
        finished = runner.run(jobs, cases, workers, done)
    else:  # one smaller oracle per module (each keeps its own PRESCREEN_ALWAYS cases)
        finished = []
        for module in modules:
            screened = prescreen_cases(cases, families_of[module], prescreen, PRESCREEN_ALWAYS.get(module, ()))
            own = [job for job in jobs if job.site is not None and job.site.module == module]
            if own and timeout_s is None:  # the timeout scales with the smaller oracle's own unmutated run
                fast = module if module in FAST_PATHS else None
                (base,) = runner.run([runner.Job(None, families_of[module], 3600.0, fast_path=fast)], screened, 1)
                limit = TIMEOUT_FACTOR * base.seconds + TIMEOUT_SLACK_S
                own = [replace(job, timeout_s=limit) for job in own]
            finished += runner.run(own, screened, workers, done)
    for result in finished:
        site, outcome = result.job.site, result.outcome
        assert site is not None
        status = STATUS_OF.get(outcome.kind, "survived")
        if status == "survived" and prescreen is not None:
            status = CANDIDATE  # even a listed one: only the full oracle can confirm an entry
        elif status == "survived" and site.id in listed:
            status = listed[site.id].kind
        reports.append(MutantReport(site, result.job.families, status, outcome.case, outcome.detail, result.seconds))
    order = {site.id: i for i, site in enumerate(sites_run)}
    reports.sort(key=lambda m: order[m.site.id])
    return Report(tuple(modules), reports, stale_entries(listed, reports), sample, seed, prescreen)


def analyse_judges(
    modules: Sequence[str],
    sites_run: Sequence[Site],
    equivalents_path: Path,
    workers: int,
    timeout_s: float | None,
    sample: int | None = None,
    seed: int = 0,
    progress: Callable[[str, int], None] | None = None,
) -> Report:
    """Run ``sites_run`` (mutants of judges) against the judges' own unit tests (:func:`judge_tests`).

    The same statuses as :func:`analyse`: a failing test kills a mutant (``killed-drift``, the test
    named), a collection error or a dead worker is ``killed-crash``. AdequacyError when the
    unmutated judges already fail their tests.
    """
    listed = equivalents.load(equivalents_path)
    tests = judge_tests(modules)
    oracle.prepare_tests()
    baseline = runner.run([runner.Job(None, (), timeout_s or 3600.0, trace=True, tests=tests)], {}, 1)[0]
    if baseline.outcome.kind != SURVIVED:
        raise AdequacyError(
            f"the unmutated judges fail their own tests ({baseline.outcome.kind} at "
            f"{baseline.outcome.case}: {baseline.outcome.detail})"
        )
    reached = {(Path(file).resolve(), name) for file, name in baseline.outcome.reached}
    limit = timeout_s or TIMEOUT_FACTOR * baseline.seconds + TIMEOUT_SLACK_S
    jobs, reports = [], []
    for site in sites_run:
        path = imports.module_files()[module_name(site.module)].resolve()
        if site.in_function and (path, site.qualname) not in reached:
            status = listed[site.id].kind if site.id in listed else "survived"
            detail = f"unreached: no judge test calls {site.qualname}"
            reports.append(MutantReport(site, (), status, None, detail, reached=False))
        else:
            jobs.append(runner.Job(site, (), limit, tests=tests))
    if progress:
        progress("", len(jobs))

    def done(result: runner.Finished) -> None:
        if progress and result.job.site is not None:
            progress(result.job.site.id, len(jobs))

    for result in runner.run(jobs, {}, workers, done):
        site, outcome = result.job.site, result.outcome
        assert site is not None
        status = STATUS_OF.get(outcome.kind, "survived")
        if status == "survived" and site.id in listed:
            status = listed[site.id].kind
        reports.append(MutantReport(site, (), status, outcome.case, outcome.detail, result.seconds))
    order = {site.id: i for i, site in enumerate(sites_run)}
    reports.sort(key=lambda m: order[m.site.id])
    return Report(tuple(modules), reports, stale_entries(listed, reports), sample, seed)
