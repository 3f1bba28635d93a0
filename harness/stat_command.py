"""``qconform stat``: statistical conformance mode on the command line (docs/stat-mode.md).

``qconform stat --adapter A [--family F] [--case GLOB] [--samples N] [--alpha A]
[--power P] [--sequential] [--looks L] [--seed S] [--plots DIR] [--json FILE]``

Samples ``N`` rounds of every ``verification_round`` and ``distribution`` case
from an adapter that draws with its own RNG (the ``sample`` op of the shim
protocol) and compares them with the spec's exact law (qconform.harness.stat).
Exit status: 0 when every case passes (or is unsupported), 1 when any case fails
or errors, 2 for a usage error (among them an adapter that samples none of the
selected families), 5 when no case is selected.
"""

from __future__ import annotations

from pathlib import Path

import click

from qconform.harness.run_command import RunUsageError, check_adapter, check_corpus
from qconform.harness.stat import STAT_FAMILIES, StatOptions, load_cases, run_stat
from qconform.harness.stat_sequential import LOOKS

#: exit status when no case matches the selection (pytest's)
NO_CASES = 5


def _probability(_ctx, param, value: float) -> float:
    if not 0 < value < 1:
        raise click.BadParameter(f"{param.name} must lie strictly between 0 and 1")
    return value


@click.command("stat")
@click.option("--adapter", default="torch-native-rng", show_default=True, help="Registered adapter name or shim:<command line>.")
@click.option("--family", "families", multiple=True, type=click.Choice(STAT_FAMILIES), help="Only this family (repeatable).")
@click.option("--case", "patterns", multiple=True, metavar="GLOB", help="Only cases whose id matches this glob (repeatable).")
@click.option("--samples", type=click.IntRange(min=10), default=StatOptions.samples, show_default=True, help="Rounds per case (the most, with --sequential).")
@click.option("--alpha", type=float, default=StatOptions.alpha, show_default=True, callback=_probability, help="Family-wise false-alarm probability (Holm).")
@click.option("--power", type=float, default=StatOptions.power, show_default=True, callback=_probability, help="Power at which the detectable TV is reported.")
@click.option("--sequential", is_flag=True, help="Stop a case early once the evidence is decisive (group-sequential looks).")
@click.option("--looks", type=click.IntRange(min=2, max=12), default=LOOKS, show_default=True, help="Looks of a sequential run.")
@click.option("--seed", type=click.IntRange(min=0, max=(1 << 64) - 1), default=StatOptions.seed, show_default=True, help="Base seed of the sample requests.")
@click.option("--chunk", type=click.IntRange(min=1), default=StatOptions.chunk, show_default=True, help="Most rounds per case in one sample request.")
@click.option("--plots", "plots_dir", type=click.Path(file_okay=False, path_type=Path), help="Directory for the plots of failing cases (default: beside --json).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), help="Write the JSON report (qconform-stat-v1) here.")
@click.option("--device", default="cpu", show_default=True, help="Device the adapter runs on.")
@click.option("--vectors", type=click.Path(file_okay=False, path_type=Path), help="Vectors directory (default: $QCONFORM_VECTORS or the installed corpus).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True), default=600.0, show_default=True, help="Seconds one sample request may take.")
def stat_command(adapter, families, patterns, samples, alpha, power, sequential, looks, seed, chunk, plots_dir,
                 json_path, device, vectors, timeout_s) -> None:
    """Statistical conformance: sampled rounds against the exact law (for adapters with their own RNG)."""
    from qconform.generators.corpus import default_vectors_dir
    from qconform.harness.client import AdapterStartError, open_adapter
    from qconform.harness.distributed import finish, torchrun_ranks
    from qconform.harness.stat_report import render, write_json, write_plots
    from qconform.cli import wide_console

    check_adapter(adapter)
    root = vectors or default_vectors_dir()
    selected = families or STAT_FAMILIES
    check_corpus(root, tuple(selected))
    cases = load_cases(root, selected, patterns)
    if not cases:
        click.echo("no case selected", err=True)
        raise SystemExit(NO_CASES)
    options = StatOptions(samples=samples, alpha=alpha, power=power, seed=seed, sequential=sequential,
                          looks=looks, chunk=chunk)
    try:
        client = open_adapter(adapter, device, timeout_s)
    except AdapterStartError as exc:
        raise RunUsageError(str(exc)) from None
    ranks = torchrun_ranks(device)  # under torchrun: this rank's share of the cases (docs/distributed.md)
    try:
        with client:
            sampled = [family for family in selected if family in client.config.capabilities.sampling]
            if not sampled:
                raise RunUsageError(f"adapter {adapter!r} samples none of {', '.join(selected)} "
                                    f"(capabilities.sampling is {list(client.config.capabilities.sampling)}); "
                                    "statistical mode needs the sample op (docs/stat-mode.md)")
            run = run_stat(client, cases, options, ranks)
    finally:
        finish(ranks)
    if ranks.rank != 0:
        raise SystemExit(0 if run.ok else 1)
    if plots_dir is None and json_path is not None:
        plots_dir = json_path.with_name(json_path.stem + "-plots")
    console = wide_console()
    if plots_dir is not None and any(r.verdict == "fail" and r.histograms for r in run.results):
        from qconform.harness.stat_report import matplotlib_available

        write_plots(run, plots_dir)
        if not matplotlib_available():
            console.print(f"matplotlib is not installed (pip install 'qconform[stat]'): plot data written "
                          f"as CSV in {plots_dir}")
    render(run, console)
    if json_path is not None:
        write_json(run, json_path)
    raise SystemExit(0 if run.ok else 1)
