"""``qconform adequacy``: mutation analysis of the spec against the committed corpus (docs/adequacy.md).

Exit status: 0 when the kill rate reaches ``--fail-under`` (default 100%) and no
equivalents entry is stale; 1 otherwise; 2 for a usage error (unknown module,
malformed equivalents file, unwritable report).
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import click

from qconform.cli.errors import UsageLineError


def _percent(_ctx, _param, value: str) -> Fraction:
    try:
        rate = Fraction(value)
    except (ValueError, ZeroDivisionError):
        raise click.BadParameter(f"{value!r} is not a number") from None
    if not 0 <= rate <= 100:
        raise click.BadParameter("must be between 0 and 100")
    return rate


@click.command("adequacy")
@click.option(
    "--module",
    "module_texts",
    multiple=True,
    metavar="PATH",
    help="A spec module, e.g. spec/sampling.py or wire/codec (repeatable; default: every normative module and fast path, docs/adequacy.md).",
)
@click.option(
    "--sample",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Run a deterministic sample of N of the selected mutants.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of --sample.")
@click.option(
    "--mutant",
    "mutant_ids",
    multiple=True,
    metavar="ID",
    help="Only the mutant with this ID (repeatable; its module is selected with it).",
)
@click.option(
    "--prescreen",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Judge each mutant by a smaller oracle first: the N smallest committed cases of each family (and the "
    "module's PRESCREEN_ALWAYS cases). Its kills are kills; its survivors are only candidates (docs/adequacy.md).",
)
@click.option(
    "--candidates-of",
    "candidates_of",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="FILE",
    help="Only the candidates of this --prescreen JSON report, against the full oracle.",
)
@click.option(
    "--judges",
    is_flag=True,
    help="Mutate the judges (harness/judging) instead of the spec; their own unit tests are the oracle.",
)
@click.option("--list", "list_only", is_flag=True, help="Print the selected mutant IDs and exit; run nothing.")
@click.option(
    "-n",
    "--workers",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="Mutants run at once, each in its own worker process.",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=1),
    default=None,
    help="Seconds per mutant (default: 10x the unmutated run of its families, plus 30 s).",
)
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), help="Write the JSON report.")
@click.option(
    "--equivalents",
    "equivalents_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Equivalent-mutants file (default: spec/equivalent_mutants.toml).",
)
@click.option(
    "--vectors",
    "vectors_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Vectors directory (default: as for generate).",
)
@click.option(
    "--fail-under",
    default="100",
    callback=_percent,
    show_default=True,
    metavar="PCT",
    help="Exit 1 when the kill rate is below PCT percent.",
)
def adequacy(
    module_texts,
    mutant_ids,
    prescreen,
    candidates_of,
    sample,
    seed,
    judges,
    list_only,
    workers,
    timeout_s,
    json_path,
    equivalents_path,
    vectors_dir,
    fail_under,
) -> None:
    """Mutate the spec and check that the committed corpus notices every mutant."""
    from qconform.generators.adequacy import analysis, equivalents, render
    from qconform.generators.adequacy.oracle import JUDGING
    from qconform.generators.corpus import default_vectors_dir

    try:
        if candidates_of is not None:
            mutant_ids = tuple(mutant_ids) + tuple(sorted(analysis.candidate_ids(candidates_of)))
            if not mutant_ids:
                raise analysis.AdequacyError(f"{candidates_of} has no candidates: nothing to judge")
        if judges and prescreen is not None:
            raise analysis.AdequacyError("--prescreen measures the spec against the corpus, not the judges")
        texts = module_texts + tuple(equivalents.module_of(i) for i in mutant_ids)
        modules = tuple(dict.fromkeys(analysis.resolve_module(t) for t in texts)) or (
            analysis.judge_modules() if judges else analysis.DEFAULT_MODULES
        )
        strays = [m for m in modules if m.startswith(JUDGING) != judges]
        if strays:
            kind = "a spec module" if judges else "a judge (use --judges)"
            raise analysis.AdequacyError(f"{strays[0]} is {kind}: one run mutates the spec or the judges")
        selected = analysis.select(modules, sample, seed, frozenset(mutant_ids))
    except analysis.AdequacyError as error:
        raise UsageLineError(str(error)) from None
    if list_only:
        for site in selected:
            click.echo(f"{site.id}  (line {site.line})")
        return
    from qconform.generators.validation import VectorFileError

    with render.progress_bar() as advance:
        try:
            if judges:
                report = analysis.analyse_judges(
                    modules,
                    selected,
                    equivalents_path or equivalents.default_path(),
                    workers,
                    timeout_s,
                    sample,
                    seed,
                    advance,
                )
            else:
                report = analysis.analyse(
                    modules,
                    selected,
                    vectors_dir or default_vectors_dir(),
                    equivalents_path or equivalents.default_path(),
                    workers,
                    timeout_s,
                    sample,
                    seed,
                    advance,
                    prescreen,
                )
        except equivalents.EquivalentsError as error:
            raise UsageLineError(str(error)) from None
        except (analysis.AdequacyError, VectorFileError) as error:
            raise click.ClickException(str(error)) from None
    render.render(report)
    if json_path is not None:
        from qconform.cli.errors import write_output

        write_output(json_path, json.dumps(report.to_json(), indent=1) + "\n")
    rate = report.tally().rate
    if report.stale:
        raise click.ClickException(f"{len(report.stale)} stale entr(y/ies) in the equivalents file")
    if rate is not None and rate * 100 < fail_under:
        raise click.ClickException(f"kill rate {float(rate):.2%} is below {float(fail_under)}%")
