"""``qconform batch-invariance``: re-batch the corpus's verification requests; each must keep
its draws and tokens (:mod:`qconform.harness.run.batch_invariance`, docs/fuzzing.md)."""

from __future__ import annotations

import fnmatch
from pathlib import Path

import click

from qconform.cli.arguments import start_adapter, start_timeout_option
from qconform.cli.errors import UsageLineError
from qconform.harness.run.batch_invariance import FAMILY, Request, check_batch_invariance, corpus_requests


def load_requests(vectors: Path, patterns: tuple[str, ...]) -> list[Request]:
    """The corpus's requests, only from case ids matching one of ``patterns`` (globs) if given."""
    from qconform.generators.validation import VectorFileError, iter_cases

    try:
        cases = [
            c
            for c in iter_cases(vectors, [FAMILY])
            if not patterns or any(fnmatch.fnmatchcase(c.id, p) for p in patterns)
        ]
    except (VectorFileError, OSError) as exc:
        raise UsageLineError(f"no usable {FAMILY} vectors in {vectors}: {exc}") from None
    requests = corpus_requests(cases)
    if not requests:
        raise UsageLineError(f"no valid {FAMILY} case in {vectors} matches {', '.join(patterns) or 'anything'}")
    return requests


@click.command("batch-invariance")
@click.option(
    "--adapter",
    default="torch",
    show_default=True,
    metavar="A",
    help="Adapter to test: a registered name or shim:<command line>.",
)
@click.option(
    "--match",
    "patterns",
    multiple=True,
    metavar="GLOB",
    help="Only requests of verification_round cases whose id matches GLOB (repeatable).",
)
@click.option("--seed", type=int, default=0, show_default=True, metavar="S", help="Seed of the shuffled re-batching.")
@click.option("--device", default="cpu", show_default=True, metavar="D", help="Device the adapter runs on.")
@click.option("--vectors", metavar="DIR", help="Vector corpus (default: $QCONFORM_VECTORS or the installed corpus).")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=120.0,
    show_default=True,
    metavar="S",
    help="Seconds one run_batch call may take before its requests are errors.",
)
@start_timeout_option
@click.pass_context
def batch_invariance(
    ctx: click.Context,
    adapter: str,
    patterns: tuple[str, ...],
    seed: int,
    device: str,
    vectors: str | None,
    timeout: float,
    start_timeout: float | None = None,
) -> None:
    """Re-batch the corpus's verification requests; each must keep its draws and tokens."""
    from qconform.cli.errors import command_guard, interrupted_line
    from qconform.generators.corpus import default_vectors_dir

    root = Path(vectors).expanduser().resolve() if vectors else default_vectors_dir()
    requests = load_requests(root, patterns)
    guard = command_guard()  # a signal: one line and 130 or 143 (docs/harness.md, "Exit codes")
    with start_adapter(adapter, device, timeout, start_timeout, guard, "nothing checked") as client:
        if FAMILY not in client.config.capabilities.families:
            raise UsageLineError(f"adapter {adapter!r} does not declare {FAMILY}")
        try:
            with guard.interrupting():
                report = check_batch_invariance(client, requests, seed)
        except KeyboardInterrupt:
            client.abort()  # the batch in flight is abandoned with its child
            interrupted_line(guard, f"before the {len(requests)} requests were all checked; nothing compared")
    click.echo(f"batch invariance: adapter {adapter} on {device}, {len(requests)} distinct requests of {root}")
    for result in report.results:
        click.echo(result.line())
    click.echo(f"{'consistency':<11} {len(report.inconsistencies)} request(s) answered differently across re-batchings")
    for divergence in report.divergences:
        click.echo(f"DIVERGENT {divergence.line()}")
    verdict = "OK: every request kept its answer" if report.ok else f"FAILED: {len(report.divergences)} divergence(s)"
    click.echo(verdict)
    if guard.signum is not None:  # a signal is never lost: once the report is out, its status
        ctx.exit(guard.status)
    ctx.exit(0 if report.ok else 1)
