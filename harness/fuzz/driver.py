"""Differential fuzzing: hypothesis inputs, the spec's answer, the adapter's answer, ``judge``.

Each hypothesis example is one family and one to four valid case inputs of it
(the family's ``fuzz.inputs``, :mod:`qconform.generators.fuzz_inputs`); the spec answers them (:func:`spec_case`: the family's
``solve``), the adapter answers them in one ``run_batch``
call, and :func:`qconform.harness.judging.judge.judge` decides. ``fail`` and ``error``
are findings; ``precision`` is not. On a finding hypothesis shrinks the example
while the same adapter process keeps answering, and :func:`fuzz` returns the
minimal failing case as a ready-to-commit vector (:func:`vector_of`), which
:func:`record_vector` files among the family's found inputs
(``generators/found/<family>.json``) for ``qconform generate`` to add to the corpus.

Runs are reproducible: a fixed hypothesis seed, no example database, no
deadline. See docs/fuzzing.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable, Sequence

from hypothesis import HealthCheck, Phase, Verbosity, given, seed, settings
from hypothesis import strategies as st
from hypothesis.errors import Flaky

from qconform.generators import registry
from qconform.generators.corpus import assemble_file, write_atomically
from qconform.generators.findings import entry_of, with_entry
from qconform.generators.lint import lint_vector_file
from qconform.generators.registry import load_family
from qconform.generators.schemas import build_family_schema
from qconform.generators.validation import VectorFileError, validate_against
from qconform.harness.fuzz.spec_cases import fuzz_hooks, spec_case
from qconform.harness.judging.judge import judge
from qconform.harness.run.case_runner import Client
from qconform.harness.verdicts import Verdict, VerdictClass

#: verdicts that are findings (``precision`` lies inside declared margins: not one)
FINDINGS = frozenset({VerdictClass.FAIL, VerdictClass.ERROR})
#: case inputs per example, sent in one ``run_batch`` call
CASES_PER_EXAMPLE = 4
#: the fields of a test object of the corpus, in file order
VECTOR_KEYS = ("id", "comment", "flags", "rules", "result", "input", "expected")


def fuzz_families() -> tuple[str, ...]:
    """The families the fuzzer draws inputs for (those whose :class:`Family` has ``fuzz``
    hooks and a ``solve``), in name order."""
    return tuple(
        name for name in registry.family_names() if (f := load_family(name)).fuzz is not None and f.solve is not None
    )


@lru_cache(maxsize=None)
def family_examples(name: str) -> st.SearchStrategy[tuple[str, list[dict]]]:
    return st.tuples(st.just(name), st.lists(fuzz_hooks(name).inputs(), min_size=1, max_size=CASES_PER_EXAMPLE))


def examples(families: Sequence[str]) -> st.SearchStrategy[tuple[str, list[dict]]]:
    """(family, one to :data:`CASES_PER_EXAMPLE` case inputs of it)."""
    return st.sampled_from(list(families)).flatmap(family_examples)


# --- the driver ---------------------------------------------------------------------------------


class Finding(Exception):
    """The adapter's answer to ``case`` was judged ``fail`` or ``error``."""

    def __init__(self, case: dict, verdict: Verdict, batch_size: int) -> None:
        super().__init__(verdict.line())
        self.case = case
        self.verdict = verdict
        self.batch_size = batch_size
        #: whether the case fails when sent alone (filled in by :func:`fuzz`)
        self.alone: bool | None = None


@dataclass
class FuzzReport:
    """What one fuzz run did: examples tried (shrinking included), cases sent, the finding."""

    adapter: str
    families: tuple[str, ...]
    seed: int
    max_examples: int
    #: whether a finding was shrunk to a minimal case
    shrunk: bool = True
    examples: int = 0
    cases: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    finding: Finding | None = None
    #: hypothesis found the adapter nondeterministic: the same input failed, then passed
    flaky: str | None = None
    #: the signal that cut the run short ("SIGINT", "SIGTERM"), or "" for a finished run
    interrupted: str = ""

    def summary(self) -> str:
        counts = ", ".join(f"{n} {cls}" for cls, n in sorted(self.counts.items()))
        head = (
            f"fuzz: {self.examples} examples, {self.cases} cases ({counts or 'none'}) on adapter {self.adapter}, "
            f"families {', '.join(self.families)}, seed {self.seed}"
        )
        if self.finding is not None:
            return f"{head}: FINDING {self.finding.verdict.cls} in {self.finding.case['family']}"
        if self.flaky is not None:
            return f"{head}: FINDING nondeterministic adapter"
        if self.interrupted:
            return f"{head}: INTERRUPTED by {self.interrupted} after {self.examples} of {self.max_examples} examples"
        return f"{head}: no finding"


def judged(client: Client, family: str, inputs: list[dict], report: FuzzReport) -> list[tuple[dict, Verdict]]:
    """Send one example's inputs in one batch; every case with its verdict."""
    cases = [spec_case(family, case_input) for case_input in inputs]
    outcomes = client.run_batch(family, [case["input"] for case in cases])
    verdicts = [judge(case, outcome, client.config) for case, outcome in zip(cases, outcomes)]
    report.cases += len(cases)
    for verdict in verdicts:
        report.counts[verdict.cls.value] = report.counts.get(verdict.cls.value, 0) + 1
    return list(zip(cases, verdicts))


def example_check(
    client: Client, report: FuzzReport, progress: Callable[[int], None] | None = None
) -> Callable[[tuple[str, list[dict]]], None]:
    """The property hypothesis tests: no case of the example is a finding."""

    def check(example: tuple[str, list[dict]]) -> None:
        family, inputs = example
        report.examples += 1
        if progress is not None:
            progress(1)
        for case, verdict in judged(client, family, inputs, report):
            if verdict.cls in FINDINGS:
                raise Finding(case, verdict, len(inputs))

    return check


def fuzz(
    client: Client,
    adapter: str,
    families: Sequence[str],
    max_examples: int,
    seed_value: int = 0,
    shrink: bool = True,
    progress: Callable[[int], None] | None = None,
) -> FuzzReport:
    """Fuzz ``client`` (an open adapter) on ``families``; the report holds any finding,
    shrunk to a minimal case unless ``shrink`` is false (the first failing case as found).
    ``progress`` is told each example tried. A KeyboardInterrupt (SIGINT, or SIGTERM under
    :class:`~qconform.harness.run.signals.SignalGuard`) ends the run: the report is partial
    (``interrupted``), with what was tried so far."""
    report = FuzzReport(adapter, tuple(families), seed_value, max_examples, shrink)
    phases = (Phase.explicit, Phase.generate) + ((Phase.shrink,) if shrink else ())
    run_settings = settings(
        max_examples=max_examples,
        database=None,
        deadline=None,
        derandomize=False,
        print_blob=False,
        report_multiple_bugs=False,
        verbosity=Verbosity.quiet,
        suppress_health_check=list(HealthCheck),
        phases=phases,
    )
    test = seed(seed_value)(run_settings(given(examples(families))(example_check(client, report, progress))))
    try:
        test()
    except KeyboardInterrupt as stop:
        report.interrupted = str(stop) or "SIGINT"
    except Finding as finding:
        report.finding = finding
        alone = judged(client, finding.case["family"], [finding.case["input"]], report)
        finding.alone = alone[0][1].cls in FINDINGS
    except Flaky as exc:
        first = next((e for e in getattr(exc, "exceptions", ()) if isinstance(e, Finding)), None)
        report.flaky = "an input failed, then passed when replayed" + (f": {first.verdict.line()}" if first else "")
    return report


# --- the vector ---------------------------------------------------------------------------------


def command_line(report: FuzzReport) -> str:
    """The ``qconform fuzz`` command line that replays ``report``'s run."""
    families = "".join(f" --family {family}" for family in report.families)
    return (
        f"qconform fuzz --adapter '{report.adapter}' --examples {report.max_examples}{families} "
        f"--seed {report.seed}" + ("" if report.shrunk else " --no-shrink")
    )


def vector_of(report: FuzzReport) -> dict:
    """The run's (minimal) failing case as a test object of the corpus format, ready to paste
    into its family's file (its ``expected`` is the spec's)."""
    finding = report.finding
    assert finding is not None, "the run has no finding"
    verdict = finding.verdict
    comment = f"Found by `{command_line(report)}`: that adapter was judged {verdict.cls}: {verdict.message}"
    if verdict.diff is not None and str(verdict.diff) not in comment:
        comment += f" [{verdict.diff}]"
    return {key: comment if key == "comment" else finding.case[key] for key in VECTOR_KEYS}


def vector_problems(vector: dict) -> list[str]:
    """Why ``vector`` would not pass as a case of its family's file (empty: it would)."""
    family = load_family(vector["id"].split("/", 1)[0])
    group = vector["id"].split("/")[1]
    file_obj = assemble_file(family, [])
    file_obj["testGroups"] = [
        {"group": group, "description": "fuzz findings", "rules": vector["rules"], "tests": [vector]}
    ]
    file_obj["numberOfTests"] = 1
    try:
        validate_against(Path(f"{family.name}.json"), file_obj, build_family_schema(family))
    except VectorFileError as exc:
        return [str(exc)]
    return [str(p) for p in lint_vector_file(file_obj) if not p.path.startswith("$.notes.")]


def record_vector(vector: dict, found_dir: Path | None = None) -> tuple[Path, bool]:
    """Append ``vector``'s entry (id, comment, flags, rules, input) to its family's found-inputs
    file; return the file and whether it was added (False: that id is already there).

    ``qconform generate`` then writes it as a case of the family's ``fuzz`` group. A
    malformed file, or an entry it would not accept, raises ``FoundFileError`` and writes
    nothing; see :mod:`qconform.generators.findings`.
    """
    family = load_family(vector["id"].split("/", 1)[0])
    path, data = with_entry(family, entry_of(vector), found_dir)
    if data is not None:
        write_atomically({path: data})
    return path, data is not None
