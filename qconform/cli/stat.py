"""``qconform stat``: statistical conformance mode on the command line (docs/stat-mode.md).

``qconform stat --adapter A [--family F] [--case GLOB] [--samples N] [--alpha A]
[-k EXPR] [--exclude GLOB] [--power P] [--sequential] [--looks L] [--seed S] [--plots DIR] [--json FILE]
[--html FILE]``

Samples ``N`` rounds of every ``verification_round`` and ``distribution`` case
from an adapter that draws with its own RNG (the ``sample`` op of the shim
protocol) and compares them with the spec's exact law (qconform.harness.stat.runner).
Exit status: 0 when every case passes (or is unsupported), 1 when any case fails
or errors, 2 for a usage error (among them an adapter that samples none of the
selected families), 3 when the adapter cannot start, 4 when the JSON report or the plots cannot be written (after
the summary, one ``Error:`` line), 5 when no case is selected. ``-k EXPR`` selects
as ``qconform run -k`` does (id, flags, rules); ``--exclude GLOB`` leaves cases out.
"""

from __future__ import annotations

from pathlib import Path

import click

from qconform.cli.arguments import (
    check_adapter,
    check_corpus,
    refuse_beyond_a_day,
    start_adapter,
    start_timeout_option,
    usable_corpus,
)
from qconform.cli.errors import UsageLineError
from qconform.harness.stat.runner import StatOptions, load_cases, run_stat, stat_families
from qconform.harness.stat.sequential import LOOKS

#: exit status when no case matches the selection (pytest's)
NO_CASES = 5
#: the fastest rounds a second statistical mode could sample at: a fast GPU engine (the torch candidate
#: on a CPU core: about 10^5); a run that needs more than a day at this rate is refused before anything
#: starts (docs/stat-mode.md)
FASTEST_ROUNDS = 10**7


def _stat_families(_ctx, param, values: tuple[str, ...]) -> tuple[str, ...]:
    """The ``--family`` values, each a family statistical mode samples (one with ``stat`` hooks)."""
    known = stat_families()
    for value in values:
        if value not in known:
            raise click.BadParameter(f"{value!r} is not one of {', '.join(map(repr, known))}.")
    return values


def _probability(_ctx, param, value: float) -> float:
    if not 0 < value < 1:
        raise click.BadParameter(f"{param.name} must lie strictly between 0 and 1")
    return value


@click.command("stat")
@click.option(
    "--adapter", default="torch-native-rng", show_default=True, help="Registered adapter name or shim:<command line>."
)
@click.option(
    "--family",
    "families",
    multiple=True,
    callback=_stat_families,
    metavar="F",
    help="Only this family (repeatable): one with a law to sample against (verification_round, distribution).",
)
@click.option(
    "--case", "patterns", multiple=True, metavar="GLOB", help="Only cases whose id matches this glob (repeatable)."
)
@click.option(
    "-k", "keyword", metavar="EXPR", help="Only cases whose id, flags or rules match EXPR (pytest -k syntax)."
)
@click.option(
    "--exclude",
    "excludes",
    multiple=True,
    metavar="GLOB",
    help="Leave out cases whose id matches this glob (repeatable).",
)
@click.option(
    "--samples",
    type=click.IntRange(min=10),
    default=StatOptions.samples,
    show_default=True,
    help="Rounds per case (the most, with --sequential).",
)
@click.option(
    "--alpha",
    type=float,
    default=StatOptions.alpha,
    show_default=True,
    callback=_probability,
    help="Family-wise false-alarm probability (Holm).",
)
@click.option(
    "--power",
    type=float,
    default=StatOptions.power,
    show_default=True,
    callback=_probability,
    help="Power at which the detectable TV is reported.",
)
@click.option(
    "--sequential", is_flag=True, help="Stop a case early once the evidence is decisive (group-sequential looks)."
)
@click.option(
    "--looks", type=click.IntRange(min=2, max=12), default=LOOKS, show_default=True, help="Looks of a sequential run."
)
@click.option(
    "--seed",
    type=click.IntRange(min=0, max=(1 << 64) - 1),
    default=StatOptions.seed,
    show_default=True,
    help="Base seed of the sample requests.",
)
@click.option(
    "--chunk",
    type=click.IntRange(min=1),
    default=StatOptions.chunk,
    show_default=True,
    help="Most rounds per case in one sample request.",
)
@click.option(
    "--plots",
    "plots_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory for the plots of failing cases (default: beside --json).",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the JSON report (qconform-stat-v1) here.",
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the run, with plots of failing cases, as one self-contained HTML page here.",
)
@click.option("--device", default="cpu", show_default=True, help="Device the adapter runs on.")
@click.option(
    "--vectors",
    type=click.Path(file_okay=False, path_type=Path),
    help="Vectors directory (default: $QCONFORM_VECTORS or the installed corpus).",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0, min_open=True),
    default=600.0,
    show_default=True,
    help="Seconds one sample request may take.",
)
@start_timeout_option
def stat_command(
    adapter,
    families,
    patterns,
    keyword,
    excludes,
    samples,
    alpha,
    power,
    sequential,
    looks,
    seed,
    chunk,
    plots_dir,
    json_path,
    device,
    vectors,
    timeout_s,
    html_path=None,
    start_timeout=None,
) -> None:
    """Statistical conformance: sampled rounds against the exact law (for adapters with their own RNG)."""
    from qconform.cli.console import wide_console
    from qconform.cli.ranks import group_errors
    from qconform.generators.atomic_file import WriteError
    from qconform.generators.corpus import default_vectors_dir
    from qconform.harness.run.distributed import finish, torchrun_ranks
    from qconform.harness.stat.report import render, write_json, write_plots

    check_adapter(adapter)
    root = vectors or default_vectors_dir()
    selected = families or stat_families()
    check_corpus(root, tuple(selected))
    from qconform.cli.arguments import check_keyword

    check_keyword(keyword)
    with usable_corpus():
        cases = load_cases(root, selected, patterns, keyword, excludes)
    if not cases:
        click.echo("no case selected", err=True)
        raise SystemExit(NO_CASES)
    rounds = len(cases) * samples
    refuse_beyond_a_day(
        rounds,
        FASTEST_ROUNDS,
        f"{len(cases)} case(s) x --samples {samples} rounds",
        "a fast GPU engine",
        "lower --samples, or select fewer cases (--case, -k, --family)",
    )
    options = StatOptions(
        samples=samples, alpha=alpha, power=power, seed=seed, sequential=sequential, looks=looks, chunk=chunk
    )
    from qconform.cli.console import rounds_progress
    from qconform.cli.errors import command_guard, interrupted_line

    guard = command_guard()  # a signal: the partial run is still reported, and 130 or 143
    client = start_adapter(adapter, device, timeout_s, start_timeout, guard, "nothing sampled")
    with group_errors():
        with client:
            try:
                # under torchrun: this rank's share of the cases (docs/distributed.md)
                ranks = torchrun_ranks(device, guard)
            except KeyboardInterrupt:  # remembered while the ranks met
                interrupted_line(guard, "while the ranks met; nothing sampled")
            sampled = [family for family in selected if family in client.config.capabilities.sampling]
            if not sampled:
                raise UsageLineError(
                    f"adapter {adapter!r} samples none of {', '.join(selected)} "
                    f"(capabilities.sampling is {list(client.config.capabilities.sampling)}); "
                    "statistical mode needs the sample op (docs/stat-mode.md)"
                )
            with rounds_progress(rounds, "sampling") as advance:
                try:
                    with guard.interrupting():
                        run = run_stat(client, cases, options, ranks, advance)
                except KeyboardInterrupt:  # remembered before the sampling began
                    interrupted_line(guard, "before the first round; nothing sampled")
            if run.interrupted:
                client.abort()  # the request in flight is abandoned with its child
        finish(ranks, not run.interrupted, guard)  # after the adapter's close, as every rank's
    if ranks.rank != 0:
        raise SystemExit(0 if run.ok else 1)
    if plots_dir is None and json_path is not None:
        plots_dir = json_path.with_name(json_path.stem + "-plots")
    console = wide_console()
    errors: list[str] = []
    if plots_dir is not None and any(r.verdict == "fail" and r.histograms for r in run.results):
        from qconform.harness.stat.report import matplotlib_available

        try:
            write_plots(run, plots_dir)
        except WriteError as exc:
            errors.append(f"plots not written: {exc}")
        if not matplotlib_available():
            console.print(
                f"matplotlib is not installed (pip install 'qconform[stat]'): plot data written as CSV in {plots_dir}"
            )
    render(run, console)
    if json_path is not None:
        try:
            write_json(run, json_path)
        except WriteError as exc:
            errors.append(f"JSON report not written: {exc}")
    if html_path is not None:
        from qconform.harness.run.html_report import write_stat

        try:
            write_stat(html_path, run)
        except WriteError as exc:
            errors.append(f"HTML report not written: {exc}")
    for error in errors:  # after the summary, one line each (docs/harness.md, "Exit codes")
        click.echo(f"Error: {error}", err=True)
    if guard.signum is not None:  # the partial report is out: the status of the interruption
        raise SystemExit(guard.status)
    raise SystemExit(4 if errors else 0 if run.ok else 1)
