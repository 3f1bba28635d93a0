"""``qconform rules``: which spec functions, vector families and tests cover each rule."""

from __future__ import annotations

from pathlib import Path

import click

from qconform.cli.console import wide_console
from qconform.cli.errors import user_errors


@click.command()
@click.option(
    "--missing",
    is_flag=True,
    help="List only uncovered rules and rule-role pairs; exit 1 while any remain.",
)
@click.option(
    "--tests",
    "tests_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Tests directory to scan (default: tests/ of the checkout).",
)
@click.option(
    "--vectors",
    "vectors_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Vectors directory (default: as for generate).",
)
def rules(missing: bool, tests_dir: Path | None, vectors_dir: Path | None) -> None:
    """Which spec functions, vector families and tests cover each rule R01-R38."""
    from qconform import rules_report
    from qconform.generators.corpus import default_vectors_dir

    with user_errors():
        report = rules_report.build_report(tests_dir, vectors_dir or default_vectors_dir())
    console = wide_console()
    rules_report.render(report, console, missing_only=missing)
    if missing and (report.uncovered() or report.uncovered_roles()):
        raise SystemExit(1)
