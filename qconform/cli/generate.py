"""``qconform generate``: write the golden corpus, or check the committed one for drift."""

from __future__ import annotations

from pathlib import Path

import click

from qconform.cli.arguments import resolve_families
from qconform.cli.console import family_progress
from qconform.cli.errors import user_errors


@click.command()
@click.option("--family", "family_names", multiple=True, metavar="F", help="Only this family (repeatable).")
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    help="Vectors directory (default: $QCONFORM_VECTORS or the installed qconform/vectors).",
)
@click.option(
    "--check", is_flag=True, help="Regenerate in memory and report drift from the committed corpus; write nothing."
)
def generate(family_names: tuple[str, ...], out: Path | None, check: bool) -> None:
    """Generate the golden vectors, their schemas and index.json (or check them for drift)."""
    from qconform.generators.corpus import default_vectors_dir

    families = resolve_families(family_names)
    root = out or default_vectors_dir()
    (_check_corpus if check else _write_corpus)(root, families)


def _family_count(families: list | None) -> int:
    from qconform.generators import registry

    return len(registry.family_names()) if families is None else len(families)


def _write_corpus(root: Path, families: list | None) -> None:
    from qconform.generators import corpus

    with user_errors(), family_progress(_family_count(families), "generating") as advance:
        written, changed = corpus.generate(root, families, advance)
    click.echo(
        f"{len(changed)} file(s) updated in {root}: {len(written.outputs)} families, "
        f"{written.cases} cases, root {written.index['root'][:16]}"
    )


def _check_corpus(root: Path, families: list | None) -> None:
    from qconform.generators import drift

    with user_errors(), family_progress(_family_count(families), "checking") as advance:
        result = drift.check(root, families, advance, describe=case_change)
    for item in result.drifts:
        click.echo(str(item))
    if result.drifts:
        raise click.ClickException(f"{len(result.drifts)} drift(s) in {root}; run `qconform generate` to update")
    click.echo(f"clean: {result.families} families, {result.cases} cases match {root}")


def case_change(committed: dict, fresh: dict) -> str:
    """The first field where a regenerated case departs from the committed one, decoded as
    ``qconform run`` shows a failure (harness/judging/value_diff.py): ``path: committed X, regenerated Y``."""
    from qconform.harness.judging.value_diff import Malformed, first_difference
    from qconform.harness.verdicts import brief

    try:
        diff = first_difference(committed, fresh)
    except Malformed as exc:
        return f"{exc.path or 'case'}: {exc.detail} (regenerated vs committed)"
    if diff is None:
        return "same values, another encoding"
    return f"{diff.path or 'case'}: committed {brief(diff.expected, 60)}, regenerated {brief(diff.got, 60)}"
