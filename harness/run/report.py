"""The human report of a conformance run (rich): header, progress, tables, unexpected results.

``qconform run`` turns pytest's own terminal output off and prints this report
instead; under plain ``pytest --qconform-adapter=...`` the same header and
summary appear inside pytest's output (:func:`render_to_text`).
"""

from __future__ import annotations

import io

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from qconform.harness.run.summary import RunHeader, RunSummary
from qconform.harness.verdicts import CLASS_ORDER, UNEXPECTED, VerdictClass

#: rich style of each class in tables
STYLES: dict[VerdictClass, str] = {
    VerdictClass.PASS: "green",
    VerdictClass.FAIL: "bold red",
    VerdictClass.PRECISION: "yellow",
    VerdictClass.UNSUPPORTED: "dim",
    VerdictClass.ERROR: "bold red",
    VerdictClass.XFAIL: "cyan",
    VerdictClass.XPASS: "bold red",
    VerdictClass.DISABLED: "dim",
}
#: at most this many unexpected results are listed one by one
LIST_LIMIT = 50


def header_lines(header: RunHeader) -> list[str]:
    lines = [
        f"qconform {header.qconform_version}: adapter {header.adapter} on {header.device}",
        f"corpus {header.vectors} root {header.corpus_root}",
        f"families: {', '.join(header.families) or 'none'}",
        f"expectations: {header.expectations or 'none'}",
    ]
    return lines


def render_header(console: Console, header: RunHeader) -> None:
    for line in header_lines(header):
        console.print(line, highlight=False, markup=False, soft_wrap=True)


def family_table(summary: RunSummary) -> Table:
    """One row per family: the number of cases in each class, and a total row."""
    by_family = summary.counts_by_family()
    shown = [c for c in CLASS_ORDER if summary.counts()[c]] or [VerdictClass.PASS]
    table = Table(title="verdicts per family", title_justify="left")
    table.add_column("family")
    for cls in shown:
        table.add_column(cls.value, justify="right", style=STYLES[cls])
    table.add_column("total", justify="right")
    for family, counts in by_family.items():
        table.add_row(family, *(str(counts[c]) for c in shown), str(sum(counts.values())))
    total = summary.counts()
    table.add_row("all", *(str(total[c]) for c in shown), str(sum(total.values())), style="bold")
    return table


def render_summary(console: Console, summary: RunSummary, json_report: str | None = None) -> None:
    """The tables, every unexpected result (with its flags, rules, comment and reproducer),
    the problems and the verdict line with the supported share (harness/run/gate.py)."""
    from qconform.harness.run.gate import share_text

    console.print(family_table(summary))
    unexpected = summary.unexpected()
    if unexpected:
        console.print(f"[bold red]unexpected results ({len(unexpected)}):[/]")
        for verdict in unexpected[:LIST_LIMIT]:
            console.print(f"  {verdict.line()}", highlight=False, markup=False, soft_wrap=True)
            info = summary.case_info.get(verdict.case_id)
            for line in info.lines() if info is not None else ():
                console.print(f"    {line}", highlight=False, markup=False, soft_wrap=True)
        if len(unexpected) > LIST_LIMIT:
            where = f"the JSON report {json_report} lists them all" if json_report else "--json FILE lists them all"
            console.print(f"  ... and {len(unexpected) - LIST_LIMIT} more ({where})", highlight=False, markup=False)
    for problem in summary.problems:
        console.print(f"[bold red]problem:[/] {escape(problem)}", highlight=False, soft_wrap=True)
    console.print(summary.not_run_line(), highlight=False)
    unexpected_total = len(unexpected) + len(summary.problems)
    if not summary.verdicts and summary.ok:
        console.print("[bold yellow]NO CASES[/]: no case selected; 0 judged", highlight=False)
        return
    verdict = "[bold green]OK[/]" if summary.ok else "[bold red]FAILED[/]"
    console.print(
        f"{verdict}: {summary.class_line() or 'no cases judged'}; {unexpected_total} unexpected; {share_text(summary)}",
        highlight=False,
    )


def render_to_text(summary: RunSummary, width: int = 100, color: bool = False) -> str:
    """The summary as text, for pytest's terminal summary."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, force_terminal=color, color_system="standard" if color else None)
    render_summary(console, summary)
    return buffer.getvalue()


class RunProgress:
    """A progress bar over judged cases, counting the unexpected ones.

    It never refreshes on a timer (pytest may be capturing output when a thread
    would fire); it redraws when a verdict arrives.
    """

    def __init__(self, console: Console) -> None:
        self.console = console
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("left"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[bad]}"),
            console=console,
            auto_refresh=False,
            transient=True,
            disable=not console.is_terminal,
        )
        self.task = self.progress.add_task("running", total=None, bad="")
        self.unexpected = 0
        self.started = False

    def start(self, total: int) -> None:
        self.progress.update(self.task, total=total)
        if not self.started:
            self.progress.start()
            self.started = True
        self.progress.refresh()

    def advance(self, cls: VerdictClass, family: str) -> None:
        if cls in UNEXPECTED:
            self.unexpected += 1
        bad = f"[red]{self.unexpected} unexpected[/]" if self.unexpected else ""
        self.progress.update(self.task, advance=1, description=family, bad=bad)
        self.progress.refresh()

    def stop(self) -> None:
        if self.started:
            self.progress.stop()
            self.started = False
