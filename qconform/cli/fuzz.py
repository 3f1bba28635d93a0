"""``qconform fuzz``: differential fuzzing of an adapter against the spec (docs/fuzzing.md).

Exit status: 0 when no finding, 1 on a finding (the minimal failing case is
printed as a ready-to-commit vector; ``--record`` files its input among the
family's found inputs for ``qconform generate``) or a malformed found-inputs file,
2 for a usage error (unknown adapter or family, a family the adapter does not
declare, an adapter that cannot start).
"""

from __future__ import annotations

import json

import click

from qconform.cli.arguments import refuse_beyond_a_day, start_adapter, start_timeout_option
from qconform.cli.errors import UsageLineError

#: the fastest examples a second the fuzzer could try: hypothesis draws and the spec solves each one in
#: Python, about 10^2 to 10^3 a second on a CPU core; more than a day of it is refused before anything
#: starts (docs/fuzzing.md)
FASTEST_EXAMPLES = 10**4


def fuzz_families(requested: tuple[str, ...], declared: tuple[str, ...]) -> tuple[str, ...]:
    """The families to fuzz: those requested (default: every family the fuzzer draws inputs
    for and whose spec has a ``solve``) that the adapter declares."""
    from qconform.harness.fuzz.driver import fuzz_families as fuzzable_families

    fuzzable = fuzzable_families()
    unknown = [f for f in requested if f not in fuzzable]
    if unknown:
        raise UsageLineError(f"cannot fuzz family {', '.join(unknown)}; the fuzzer knows: {', '.join(fuzzable)}")
    undeclared = [f for f in requested if f not in declared]
    if undeclared:
        raise UsageLineError(f"the adapter does not declare family {', '.join(undeclared)}")
    families = tuple(f for f in (dict.fromkeys(requested) or fuzzable) if f in declared)
    if not families:
        raise UsageLineError(f"the adapter declares none of the fuzzed families ({', '.join(fuzzable)})")
    return families


def print_finding(report, vector_out: str | None) -> dict:
    """Print the finding and its case as a vector (also written to ``vector_out`` if given);
    return the vector."""
    from qconform.harness.fuzz.driver import vector_of, vector_problems

    finding = report.finding
    vector = vector_of(report)
    click.echo(f"finding: {finding.verdict.line()}")
    if finding.alone is False:
        click.echo(
            f"note: the case fails only beside its {finding.batch_size - 1} batch-mate(s) of the same "
            "run_batch call; alone it does not"
        )
    problems = vector_problems(vector)
    for problem in problems:
        click.echo(f"warning: the vector does not validate: {problem}")
    text = json.dumps(vector, indent=2)
    kind = "minimal failing case" if report.shrunk else "failing case (not shrunk)"
    click.echo(f"{kind}, a test object of vectors/{finding.case['family']}.json:")
    click.echo(text)
    if vector_out is not None:
        from qconform.cli.errors import write_output

        write_output(vector_out, text + "\n")
    return vector


def check_found_files(families: tuple[str, ...]) -> None:
    """Refuse to start a ``--record`` run whose found-inputs files could not take a finding
    (one ``Error:`` line, exit 1, as for any malformed or unwritable file)."""
    from qconform.cli.errors import user_errors
    from qconform.generators.findings import load_found
    from qconform.generators.registry import load_family

    with user_errors():
        for family in families:
            load_found(load_family(family))


def record_finding(vector: dict) -> None:
    """File ``vector``'s input among its family's found inputs and say what to run next."""
    from qconform.cli.errors import user_errors
    from qconform.harness.fuzz.driver import record_vector

    with user_errors():
        path, added = record_vector(vector)
    family = vector["id"].split("/", 1)[0]
    if added:
        click.echo(f"recorded {vector['id']} in {path}; run `qconform generate` to add it to vectors/{family}.json")
    else:
        click.echo(f"already recorded: {vector['id']} in {path} (nothing written)")


@click.command("fuzz")
@click.option(
    "--adapter",
    default="torch",
    show_default=True,
    metavar="A",
    help="Adapter to fuzz: a registered name or shim:<command line>.",
)
@click.option(
    "--examples",
    type=click.IntRange(min=1),
    default=100,
    show_default=True,
    metavar="N",
    help="Hypothesis examples to generate (each is 1 to 4 cases of one family).",
)
@click.option("--family", "families", multiple=True, metavar="F", help="Only family F (repeatable).")
@click.option(
    "--seed",
    "seed_value",
    type=int,
    default=0,
    show_default=True,
    metavar="S",
    help="Hypothesis seed: the same seed, adapter and N replay the same run.",
)
@click.option("--device", default="cpu", show_default=True, metavar="D", help="Device the adapter runs on.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=60.0,
    show_default=True,
    metavar="S",
    help="Seconds one batch may take before its cases are errors.",
)
@click.option("--vector-out", metavar="FILE", help="Also write the minimal failing vector (JSON) to FILE.")
@click.option(
    "--no-shrink",
    "no_shrink",
    is_flag=True,
    help="Report the first failing case as found, without shrinking it (faster, larger).",
)
@click.option(
    "--record",
    is_flag=True,
    help="On a finding, append its input to generators/found/<family>.json (once per id); "
    "then run `qconform generate`.",
)
@start_timeout_option
@click.pass_context
def fuzz(
    ctx: click.Context,
    adapter: str,
    examples: int,
    families: tuple[str, ...],
    seed_value: int,
    device: str,
    timeout: float,
    vector_out: str | None,
    no_shrink: bool,
    record: bool,
    start_timeout: float | None = None,
) -> None:
    """Differential fuzzing: random valid inputs, the spec's answer vs the adapter's."""
    from qconform.cli.console import rounds_progress
    from qconform.cli.errors import command_guard, interrupted_line
    from qconform.harness.fuzz.driver import fuzz as run_fuzz

    refuse_beyond_a_day(examples, FASTEST_EXAMPLES, "--examples", "the spec solving every example", "lower --examples")
    guard = command_guard()  # a signal: what was tried, and 130 or 143 (docs/harness.md, "Exit codes")
    with start_adapter(adapter, device, timeout, start_timeout, guard, "nothing fuzzed") as client:
        chosen = fuzz_families(families, client.config.capabilities.families)
        if record:
            check_found_files(chosen)
        with rounds_progress(examples, "fuzzing", "examples") as advance:
            try:
                with guard.interrupting():
                    report = run_fuzz(client, adapter, chosen, examples, seed_value, not no_shrink, advance)
            except KeyboardInterrupt:  # remembered before the run began
                interrupted_line(guard, "before the first example; nothing fuzzed")
        if report.interrupted:
            client.abort()  # the batch in flight is abandoned with its child
    if report.finding is not None:
        vector = print_finding(report, vector_out)
        if record:
            record_finding(vector)
    elif report.flaky is not None:
        click.echo(f"finding: the adapter is nondeterministic: {report.flaky}")
    click.echo(report.summary())
    if guard.signum is not None:  # a signal is never lost: once the report is out, its status
        ctx.exit(guard.status)
    ctx.exit(0 if report.finding is None and report.flaky is None else 1)
