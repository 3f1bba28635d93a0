"""The `qconform` command line.

Each command parses its options and delegates to a module; user mistakes
(unknown names, malformed or unwritable files) end in one ``Error:`` line and a
nonzero exit status, never a traceback.
"""

from __future__ import annotations

import contextlib
from fractions import Fraction
from pathlib import Path
from typing import Iterator

import click
from rich.console import Console

from qconform import __version__


class UsageLineError(click.ClickException):
    """A one-line usage mistake (exit status 2, without click's usage banner)."""

    exit_code = 2


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn the pipeline's typed errors into one-line click errors (exit status 1)."""
    from qconform.generators.corpus import CorpusError, OutputError
    from qconform.generators.validation import VectorFileError

    try:
        yield
    except (VectorFileError, OutputError) as exc:
        raise click.ClickException(str(exc)) from None
    except CorpusError as exc:
        lines = "\n".join(f"  {p}" for p in exc.problems)
        raise click.ClickException(f"generated vectors fail their own checks (generator bug):\n{lines}") from None


@contextlib.contextmanager
def family_progress(total: int, verb: str) -> Iterator:
    """A rich progress bar over families on stderr (hidden when stderr is not a terminal)."""
    from rich.progress import Progress

    console = Console(stderr=True)
    with Progress(console=console, transient=True, disable=not console.is_terminal) as progress:
        task = progress.add_task(verb, total=total)

        def advance(name: str) -> None:
            progress.update(task, advance=1, description=f"{verb} {name}")

        yield advance


def wide_console() -> Console:
    """A stdout console; 132 columns when stdout is not a terminal (pipes, CI logs)."""
    console = Console()
    if not console.is_terminal:
        console.width = 132
    return console


def _load(name: str):
    from qconform.generators import registry

    try:
        return registry.load_family(name)
    except ImportError as exc:
        raise click.ClickException(f"family {name} cannot be loaded: {exc}") from None


def resolve_families(names: tuple[str, ...]) -> list | None:
    """The registered families named, in the order given; None (all) when no name is given.

    Every family that a run needs must load; an unknown name is a usage error.
    """
    from qconform.generators import registry

    unknown = [n for n in names if n not in registry.FAMILY_MODULES]
    if unknown:
        raise UsageLineError(
            f"unknown family {', '.join(unknown)}; known families: {', '.join(registry.FAMILY_MODULES)}"
        )
    families = [_load(n) for n in (dict.fromkeys(names) or registry.FAMILY_MODULES)]
    return families if names else None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="qconform")
def cli() -> None:
    """qconform: exact conformance kit for sampled-draft (q) speculative decoding."""


@cli.command()
@click.option("--family", "family_names", multiple=True, metavar="F", help="Only this family (repeatable).")
@click.option("--out", type=click.Path(path_type=Path), help="Vectors directory (default: $QCONFORM_VECTORS or the installed qconform/vectors).")
@click.option("--check", is_flag=True, help="Regenerate in memory and report drift from the committed corpus; write nothing.")
def generate(family_names: tuple[str, ...], out: Path | None, check: bool) -> None:
    """Generate the golden vectors, their schemas and index.json (or check them for drift)."""
    from qconform.generators.corpus import default_vectors_dir

    families = resolve_families(family_names)
    root = out or default_vectors_dir()
    (_check_corpus if check else _write_corpus)(root, families)


def _family_count(families: list | None) -> int:
    from qconform.generators import registry

    return len(registry.FAMILY_MODULES) if families is None else len(families)


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
        result = drift.check(root, families, advance)
    for item in result.drifts:
        click.echo(str(item))
    if result.drifts:
        raise click.ClickException(f"{len(result.drifts)} drift(s) in {root}; run `qconform generate` to update")
    click.echo(f"clean: {result.families} families, {result.cases} cases match {root}")


@cli.command()
@click.option("--missing", is_flag=True, help="List only uncovered rules; exit 1 while any remain.")
@click.option("--tests", "tests_dir", type=click.Path(file_okay=False, path_type=Path), help="Tests directory to scan (default: tests/ of the checkout).")
@click.option("--vectors", "vectors_dir", type=click.Path(file_okay=False, path_type=Path), help="Vectors directory (default: as for generate).")
def rules(missing: bool, tests_dir: Path | None, vectors_dir: Path | None) -> None:
    """Which spec functions, vector families and tests cover each rule R01-R38."""
    from qconform import rules_report
    from qconform.generators.corpus import default_vectors_dir

    with user_errors():
        report = rules_report.build_report(tests_dir, vectors_dir or default_vectors_dir())
    console = wide_console()
    rules_report.render(report, console, missing_only=missing)
    if missing and report.uncovered():
        raise SystemExit(1)


def _fraction(_ctx, _param, value: str) -> Fraction:
    try:
        rate = Fraction(value)
    except (ValueError, ZeroDivisionError):
        raise click.BadParameter(f"{value!r} is not a decimal or rational number") from None
    if rate <= 0:
        raise click.BadParameter("must be positive")
    return rate


@cli.command()
@click.option("--vocab", type=click.IntRange(min=1), default=None, help="Vocabulary size V (default 129280).")
@click.option("--depth", type=click.IntRange(min=1), default=None, help="Proposal depth K (default 5).")
@click.option("--requests", type=click.IntRange(min=1), default=None, help="Requests per batch (default 4).")
@click.option("--k", "ks", type=click.IntRange(min=1), multiple=True, help="Sparse support sizes (default 16 32 64 256).")
@click.option("--shards", type=click.IntRange(min=1), default=2, show_default=True, help="Vocabulary shards (TP).")
@click.option("--slots", type=click.IntRange(min=1), default=2, show_default=True, help="In-flight dense batch slots.")
@click.option("--link-gbps", default="40", show_default=True, callback=_fraction, help="Nominal link rate in Gb/s (decimal or p/q).")
def sizes(vocab, depth, requests, ks, shards, slots, link_gbps) -> None:
    """The design's size table (R26): exact bytes and ideal serialization bounds."""
    from qconform import sizes_report
    from qconform.spec import sizes as spec_sizes

    params = spec_sizes.SizeParams.with_defaults(vocab, depth, requests, ks, shards, slots, link_gbps)
    sizes_report.render(spec_sizes.size_table(params), wide_console())


def _register_harness_commands() -> None:
    from qconform.harness.accumulate_command import accumulate_command
    from qconform.harness.audit_command import audit_policy_command
    from qconform.harness.batch_invariance import batch_invariance
    from qconform.harness.fuzz_command import fuzz
    from qconform.harness.endpoint_command import endpoint_group
    from qconform.harness.mutants_command import mutants as mutants_command
    from qconform.harness.run_command import run as run_command
    from qconform.harness.stat_command import stat_command

    cli.add_command(run_command)
    cli.add_command(stat_command)
    cli.add_command(mutants_command)
    cli.add_command(audit_policy_command)
    cli.add_command(fuzz)
    cli.add_command(batch_invariance)
    cli.add_command(endpoint_group)
    cli.add_command(accumulate_command)


_register_harness_commands()


def main() -> None:
    cli()
