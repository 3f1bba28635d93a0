"""``qconform mutants``: the kill table, proof that the corpus fails a wrong implementation.

Every seeded-bug variant of the torch candidate (adapters/torch_mutants.py,
docs/mutants.md) is run against the committed corpus: by default the families
that own the mutant's behaviour, or the whole corpus with ``--all-families``. The
harness's own machinery judges it, in-process: a :class:`CaseRunner` over
``open_adapter("torch-mutant:<name>")``, with the torch candidate's expectations
file, so no fuzzing and no pytest. A ``fail`` (a wrong answer) or an ``error`` (a
crash or garbage) kills the mutant; they are counted apart, and a mutant that
only ``error`` kills is flagged, since a good mutant is caught by a wrong answer.
Mutants run in parallel worker processes (``-n``). The exit status is 1 when any
mutant survives, 2 for a usage error.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import click

from qconform.cli.arguments import check_corpus, checkout_expectations
from qconform.cli.errors import UsageLineError
from qconform.harness.verdicts import Verdict, VerdictClass

#: verdict classes that kill a mutant
KILLING = (VerdictClass.FAIL, VerdictClass.ERROR)
#: JSON report format
FORMAT = "qconform-mutants-v1"
#: longest first-kill message shown in the table
MESSAGE_LIMIT = 240


def mutant_adapter(name: str) -> str:
    """The registered adapter that serves mutant ``name`` (qconform.adapters.catalog)."""
    return f"torch-mutant:{name}"


@dataclass(frozen=True)
class MutantJob:
    """One mutant to run (plain data, so it crosses to a worker process): the adapter spec
    that serves it and the families to run."""

    name: str
    adapter: str
    families: tuple[str, ...]
    vectors: str
    timeout_s: float | None = None


@dataclass(frozen=True)
class MutantResult:
    """What the corpus did to one mutant: the killing verdicts (``fail`` and ``error``) in corpus order."""

    name: str
    families: tuple[str, ...]
    cases: int
    kills: tuple[Verdict, ...] = field(default_factory=tuple)

    @property
    def fails(self) -> int:
        return sum(v.cls is VerdictClass.FAIL for v in self.kills)

    @property
    def errors(self) -> int:
        return sum(v.cls is VerdictClass.ERROR for v in self.kills)

    @property
    def killed(self) -> bool:
        return bool(self.kills)

    @property
    def error_only(self) -> bool:
        """Killed, but only by crashes or garbage: no vector caught it giving a wrong answer."""
        return self.killed and not self.fails

    @property
    def first_kill(self) -> Verdict | None:
        """The first ``fail`` (the first ``error`` when no case failed)."""
        fails = [v for v in self.kills if v.cls is VerdictClass.FAIL]
        return (fails or list(self.kills) or [None])[0]

    def to_json(self) -> dict:
        first = self.first_kill
        return {
            "name": self.name,
            "families": list(self.families),
            "cases": self.cases,
            "killed": self.killed,
            "fail": self.fails,
            "error": self.errors,
            "errorOnly": self.error_only,
            "firstKill": None if first is None else first.to_json(),
            "kills": [{"id": v.case_id, "class": v.cls.value} for v in self.kills],
        }


@lru_cache(maxsize=None)
def family_cases(vectors: str, family: str) -> tuple[dict, ...]:
    """The case objects of one family of the corpus, as the harness judges them (cached per process)."""
    from qconform.generators.validation import iter_cases

    return tuple(
        {
            "id": c.id,
            "family": c.family,
            "result": c.result,
            "flags": list(c.flags),
            "input": c.input,
            "expected": c.expected,
        }
        for c in iter_cases(vectors, [family])
    )


def run_mutant(job: MutantJob) -> MutantResult:
    """Run one mutant over its families; never raises for a misbehaving adapter (those are errors)."""
    from qconform.harness.expectations import Expectations
    from qconform.harness.run.case_runner import CaseRunner, open_client

    expectations_path = checkout_expectations("torch")
    expectations = Expectations.load(expectations_path) if expectations_path else None
    runner = CaseRunner(lambda: open_client(job.adapter, "cpu", job.timeout_s), expectations, job.timeout_s)
    verdicts: list[Verdict] = []
    try:
        for family in job.families:
            verdicts += runner.run(family_cases(job.vectors, family))
    finally:
        runner.close()
    return MutantResult(job.name, job.families, len(verdicts), tuple(v for v in verdicts if v.cls in KILLING))


def run_jobs(jobs: Sequence[MutantJob], workers: int) -> list[MutantResult]:
    """Results of ``jobs``, in order, on ``workers`` processes (1: in this process)."""
    if workers <= 1 or len(jobs) <= 1:
        return [run_mutant(job) for job in jobs]
    for job in jobs:  # load (and validate) each family once, here: forked workers inherit the cache
        for family in job.families:
            family_cases(job.vectors, family)
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs))) as pool:
        return list(pool.map(run_mutant, jobs))


# --- the report -------------------------------------------------------------------------------


def kill_cell(result: MutantResult) -> str:
    if not result.killed:
        return "[bold red]SURVIVED[/]"
    if result.error_only:
        return "[yellow]killed, error only[/]"
    return "[green]killed[/]"


def first_kill_cell(result: MutantResult) -> str:
    first = result.first_kill
    if first is None:
        return f"no fail or error in {result.cases} cases"
    text = first.line()  # "FAIL <id>: <message> [<diff>]"
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 3] + "..."


def kill_table(results: Sequence[MutantResult], mutants: dict):
    """One row per mutant: its name, bug, class and rules; killed or not; fail and error counts; the
    first killing case with its message."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="mutants of the torch candidate", title_justify="left", show_lines=True, expand=True)
    table.add_column("mutant / bug / class; rules", ratio=4)
    table.add_column("killed", no_wrap=True)
    table.add_column("fail", justify="right")
    table.add_column("error", justify="right")
    table.add_column("first killing case", ratio=5, overflow="fold")
    for result in results:
        mutant = mutants[result.name]
        about = (
            f"[bold]{escape(result.name)}[/]\n{escape(mutant.description)}\n[dim]{escape(mutant.bug_class)}; "
            f"{', '.join(mutant.rules)}[/]"
        )
        table.add_row(about, kill_cell(result), str(result.fails), str(result.errors), escape(first_kill_cell(result)))
    return table


def report_json(results: Sequence[MutantResult], mutants: dict, vectors: Path) -> dict:
    from qconform.generators.validation import load_index

    entries = []
    for result in results:
        mutant = mutants[result.name]
        entries.append(
            {
                **result.to_json(),
                "description": mutant.description,
                "bugClass": mutant.bug_class,
                "rules": list(mutant.rules),
                "target": mutant.target,
            }
        )
    return {
        "format": FORMAT,
        "vectors": str(vectors),
        "corpusRoot": load_index(vectors)["root"],
        "ok": all(r.killed for r in results),
        "survivors": [r.name for r in results if not r.killed],
        "errorOnly": [r.name for r in results if r.error_only],
        "mutants": entries,
    }


# --- the command ------------------------------------------------------------------------------


def select_jobs(
    mutants: dict,
    names: tuple[str, ...],
    families: tuple[str, ...],
    all_families: bool,
    corpus_families: Sequence[str],
    vectors: Path,
    timeout: float | None,
) -> tuple[list[MutantJob], list[str]]:
    """The jobs to run, and the mutants the family filter leaves without a family."""
    unknown = [n for n in names if n not in mutants]
    if unknown:
        raise UsageLineError(f"unknown mutant {', '.join(unknown)}; mutants: {', '.join(mutants)}")
    jobs, skipped = [], []
    for name in dict.fromkeys(names) or mutants:
        own = tuple(corpus_families) if all_families else mutants[name].families
        chosen = tuple(f for f in own if not families or f in families)
        if chosen:
            jobs.append(MutantJob(name, mutant_adapter(name), chosen, str(vectors), timeout))
        else:
            skipped.append(name)
    return jobs, skipped


def parse_workers(value: str) -> int:
    if value == "auto":
        return os.cpu_count() or 1
    if value.isdigit() and int(value) >= 1:
        return int(value)
    raise UsageLineError(f"-n takes a number of workers (1 or more) or 'auto', not {value!r}")


@click.command("mutants")
@click.option("--mutant", "names", multiple=True, metavar="NAME", help="Only mutant NAME (repeatable).")
@click.option(
    "--family",
    "families",
    multiple=True,
    metavar="F",
    help="Only family F's cases (repeatable); mutants owning none of them are not run.",
)
@click.option("--all-families", is_flag=True, help="Run every mutant on the whole corpus, not only its own families.")
@click.option(
    "-n",
    "workers",
    default="auto",
    show_default=True,
    metavar="N",
    help="Mutants run at once, each in its own process (a number or 'auto').",
)
@click.option("--json", "json_path", metavar="FILE", help="Write the kill table as JSON to FILE.")
@click.option("--vectors", metavar="DIR", help="Vector corpus (default: $QCONFORM_VECTORS or the installed corpus).")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    metavar="S",
    help="Seconds one batch of cases may take before its cases are errors.",
)
@click.pass_context
def mutants(
    ctx: click.Context,
    names: tuple[str, ...],
    families: tuple[str, ...],
    all_families: bool,
    workers: str,
    json_path: str | None,
    vectors: str | None,
    timeout: float | None,
) -> None:
    """Run the corpus against seeded-bug mutants of the torch candidate; fail if one survives."""
    from qconform.adapters.torch_mutants import MUTANTS
    from qconform.cli.console import wide_console
    from qconform.generators.corpus import default_vectors_dir
    from qconform.generators.validation import VectorFileError, load_index

    root = Path(vectors).expanduser().resolve() if vectors else default_vectors_dir().resolve()
    check_corpus(root, families)
    corpus_families = list(load_index(root)["families"])
    jobs, skipped = select_jobs(MUTANTS, names, families, all_families, corpus_families, root, timeout)
    missing = sorted({f for job in jobs for f in job.families} - set(corpus_families))
    if missing:
        raise UsageLineError(f"the corpus at {root} lacks the families {', '.join(missing)}")
    try:
        results = run_jobs(jobs, parse_workers(workers))
    except VectorFileError as exc:
        raise click.ClickException(str(exc)) from None
    console = wide_console()
    console.print(f"corpus {root}", highlight=False, markup=False)
    console.print(kill_table(results, MUTANTS))
    if skipped:
        console.print(f"not run (family filter): {', '.join(skipped)}", highlight=False)
    if json_path:
        from qconform.cli.errors import write_output

        write_output(json_path, json.dumps(report_json(results, MUTANTS, root), indent=2) + "\n")
    survivors = [r.name for r in results if not r.killed]
    flagged = [r.name for r in results if r.error_only]
    if flagged:
        console.print(f"[yellow]killed only by errors (no vector caught a wrong answer):[/] {', '.join(flagged)}")
    if survivors:
        console.print(
            f"[bold red]FAILED[/]: {len(survivors)} of {len(results)} mutants survived: {', '.join(survivors)}"
        )
        ctx.exit(1)
    console.print(f"[bold green]OK[/]: all {len(results)} mutants killed")
