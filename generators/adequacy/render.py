"""The terminal side of ``qconform adequacy``: a progress bar and the result tables (rich)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from qconform.generators.adequacy.analysis import Report, Tally
from qconform.generators.adequacy.oracle import JUDGING


@contextlib.contextmanager
def progress_bar() -> Iterator[Callable[[str, int], None]]:
    """A progress bar over mutants on stderr, hidden when stderr is not a terminal.

    It is refreshed by hand (no refresh thread), since the workers are forked.
    """
    from rich.progress import Progress

    console = Console(stderr=True)
    with Progress(console=console, transient=True, auto_refresh=False, disable=not console.is_terminal) as progress:
        task = progress.add_task("mutants", total=None)

        def advance(what: str, total: int) -> None:
            if what:
                progress.update(task, advance=1, description=f"mutants: {what[:60]}")
            else:
                progress.update(task, total=total)
            progress.refresh()

        yield advance


def _rate(value) -> str:
    return "-" if value is None else f"{float(value):.1%}"


def render(report: Report, console: Console | None = None) -> None:
    if console is None:
        console = Console()
        if not console.is_terminal:
            console.width = 160
    judges = any(m.startswith(JUDGING) for m in report.modules)
    title = "Judge mutants against the judges' unit tests" if judges else "Spec mutants against the committed corpus"
    columns = ("module", "mutants", "killed", "equivalent", "unreachable", "survived")
    if report.prescreen is not None:
        title += f" (pre-screen: the {report.prescreen} smallest cases of each family; survivors are candidates)"
        columns += ("candidates",)
    table = Table(title=title)
    columns += ("kill rate", "with unreachable")
    for column in columns:
        table.add_column(column, justify="left" if column == "module" else "right")

    def row(name: str, t: Tally, bold: bool = False) -> None:
        rate = f"[bold]{_rate(t.rate)}[/]" if bold else _rate(t.rate)
        counts: tuple[int, ...] = (t.mutants, t.killed, t.equivalent, t.unreachable, t.survived)
        if report.prescreen is not None:
            counts += (t.candidates,)
        table.add_row(name, *map(str, counts), rate, _rate(t.rate_with_unreachable))

    for module in report.modules:
        row(module, report.tally(module))
    row("[bold]total[/]", report.tally(), bold=True)
    console.print(table)
    if report.survivors:
        pinned_by = "no judge test" if judges else "no committed vector"
        survivors = Table(title=f"Survivors: behaviours {pinned_by} pins")
        survivors.add_column("line", justify="right")
        survivors.add_column("mutant")
        survivors.add_column("note")
        for m in report.survivors:
            survivors.add_row(str(m.site.line), escape(m.site.id), "" if m.reached else "nothing calls its function")
        console.print(survivors)
    if report.candidates:
        console.print(
            f"{len(report.candidates)} candidate(s) survived the pre-screen (counted as survivors above): judge them "
            "by the full oracle with `qconform adequacy --candidates-of REPORT.json` (docs/adequacy.md)"
        )
    for ident, why in report.stale:
        console.print(f"[bold red]stale equivalent[/] {escape(ident)}: {why}")
