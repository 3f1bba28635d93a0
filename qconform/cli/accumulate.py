"""``qconform accumulate``: an adapter against millions of accumulated cases (docs/accumulated.md).

``qconform accumulate --adapter A --family F --count N [--batch B] [--record]``

Exit status: 0 when the adapter's hash equals the expected one; 1 on a mismatch (the
first divergent case is printed as an ordinary vector; ``--record`` files its input
among the family's found inputs, as ``qconform fuzz --record`` does), or when the
engine disagrees with the committed hash; 2 for a usage error (unknown adapter or
family, a family the adapter does not declare, an adapter that cannot start, an
unreadable ``vectors/accumulated.json``). Under ``torchrun`` the shards are spread
over the ranks (docs/distributed.md) and rank 0 prints.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from qconform.cli.arguments import start_timeout_option
from qconform.cli.errors import UsageLineError, command_guard
from qconform.cli.ranks import RANKS_HELP
from qconform.generators.accumulated import FAMILIES, SHARD_CASES

if TYPE_CHECKING:
    from qconform.harness.run.signals import SignalGuard

#: the fastest cases a second a run could be fed and answered at: the harness's block path feeds
#: about 10^6 a core (bench/RESULTS.md), so ten cores and a GPU; more than a day of it is refused
#: before anything starts (docs/accumulated.md)
FASTEST_CASES = 10**7


def interrupted(
    ctx: click.Context, guard: SignalGuard, adapter: str, family: str, count: int, answered: int
) -> NoReturn:
    """End the command stopped by SIGINT or SIGTERM (``guard`` caught it): how far this rank got, and
    128 + the signal's number (docs/harness.md, "Exit codes"). The hash covers all the cases, so
    nothing can be compared."""
    click.echo(
        f"INTERRUPTED by {guard.name or 'SIGINT'}: {family}: {answered} of {count} cases answered on this rank; "
        f"the hash covers all {count}, so nothing was compared. Rerun: {command_line(adapter, family, count)}"
    )
    ctx.exit(guard.status)


def command_line(adapter: str, family: str, count: int) -> str:
    return f"qconform accumulate --adapter '{adapter}' --family {family} --count {count}"


@click.command("accumulate")
@click.option(
    "--adapter",
    default="torch",
    show_default=True,
    metavar="A",
    help="Adapter: a registered name or shim:<command line>.",
)
@click.option("--family", required=True, type=click.Choice(sorted(FAMILIES)), help="Accumulated family.")
@click.option(
    "--count",
    type=click.IntRange(min=1),
    default=1_000_000,
    show_default=True,
    metavar="N",
    help="Cases 0..N-1 of the family's stream.",
)
@click.option(
    "--batch",
    type=click.IntRange(min=1),
    default=16384,
    show_default=True,
    metavar="B",
    help="Cases per request: per run_block call (a block of arrays), or per run_batch call.",
)
@click.option(
    "--by-case",
    is_flag=True,
    help="Send every case as an input object (run_batch), even to an adapter that answers blocks "
    '(docs/accumulated.md, "Blocks").',
)
@click.option(
    "--shard-cases",
    type=click.IntRange(min=1),
    default=SHARD_CASES,
    show_default=True,
    metavar="S",
    help="Cases per hashed shard; the committed hashes use the default (smaller shards: tests of "
    "torchrun sharding, compared with the engine).",
)
@click.option("--device", default="cpu", show_default=True, metavar="D", help="Device the adapter runs on.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=600.0,
    show_default=True,
    metavar="S",
    help="Seconds one batch may take.",
)
@click.option(
    "--vectors",
    type=click.Path(file_okay=False, path_type=Path),
    help="Vectors directory holding accumulated.json (default: the installed corpus).",
)
@click.option("--vector-out", metavar="FILE", help="Also write the divergent case's vector (JSON) to FILE.")
@click.option(
    "--record",
    is_flag=True,
    help="On a divergence, append its input to generators/found/<family>.json (once per id); "
    "then run `qconform generate`.",
)
@click.option(
    "--ranks", "rank_count", type=click.IntRange(min=1), default=1, show_default=True, metavar="N", help=RANKS_HELP
)
@start_timeout_option
@click.pass_context
def accumulate_command(
    ctx: click.Context,
    adapter: str,
    family: str,
    count: int,
    batch: int,
    by_case: bool,
    shard_cases: int,
    device: str,
    timeout: float,
    vectors: Path | None,
    vector_out: str | None,
    record: bool,
    rank_count: int = 1,
    start_timeout: float | None = None,
) -> None:
    """Run N accumulated cases through an adapter and compare the hash of its answers."""
    from qconform.cli.arguments import OpeningAdapter, check_adapter, refuse_beyond_a_day
    from qconform.cli.ranks import PreparedRanks, command_ranks, prepare_ranks

    refuse_beyond_a_day(count, FASTEST_CASES, "--count", "ten cores of block feeding and a GPU", "lower --count")
    check_adapter(adapter)
    # SIGINT and SIGTERM, from before the adapter starts to the last case, end the command with how far it
    # got and 130 or 143 (docs/harness.md, "Exit codes"); click's own answer would be 1, a FAIL's status.
    # Until the run begins, a signal is raised only at the checkpoints below (command_guard)
    guard = command_guard()
    early = None
    prepared = PreparedRanks(device, rank_count)
    try:
        # the adapter starts first (one rank: its child; forked ranks: their zygote), and its import runs
        # beside the command's own imports and checks (docs/accumulated.md, "Start-up")
        prepared = prepare_ranks(device, rank_count, adapter)
        early = OpeningAdapter(adapter, device, timeout, start_timeout) if rank_count == 1 else None
        from qconform.cli.console import rounds_progress
        from qconform.cli.fuzz import check_found_files, record_finding
        from qconform.cli.ranks import closing_at_gather, run_as_rank
        from qconform.generators.corpus import default_vectors_dir
        from qconform.harness.judging.judge import family_module, judge
        from qconform.harness.run.accumulate import (
            AccumulatedFileError,
            accumulate,
            case_vector,
            load_expected,
        )
        from qconform.harness.run.distributed import finish

        try:
            expected = load_expected(vectors or default_vectors_dir())
        except AccumulatedFileError as exc:
            raise UsageLineError(str(exc)) from None
        guard.checkpoint()
        ranks = command_ranks(prepared, guard)  # forked here for --ranks N: options checked once, above
    except BaseException as exc:
        if early is not None:
            early.close()
        prepared.close()
        if isinstance(exc, KeyboardInterrupt):
            interrupted(ctx, guard, adapter, family, count, 0)
        raise

    def run() -> None:
        line = command_line(adapter, family, count)
        completed = False
        answered = [0]
        result = None
        try:
            with early if early is not None else OpeningAdapter(adapter, device, timeout, start_timeout) as opening:
                if record:
                    check_found_files((family,))
                # while the adapter starts: the family's spec (its solve) and comparator, loaded as start-up,
                # not when the first divergent case is judged inside the timed run (docs/accumulated.md,
                # "Feeding")
                family_module(family)
                client = opening.client(guard)
                if family not in client.config.capabilities.families:
                    raise UsageLineError(f"the adapter does not declare family {family}")

                with rounds_progress(count // ranks.world, "accumulating", "cases") as advance:

                    def run_batch(name: str, inputs: list[dict]) -> list:
                        outcomes = client.run_batch(name, inputs, schema_check=False)
                        answered[0] += len(inputs)
                        advance(len(inputs))
                        return outcomes

                    def judge_case(case: int, case_input: dict, outcome: object) -> tuple[str, str]:
                        verdict = judge(case_vector(family, case, line, case_input), outcome, client.config)
                        return str(verdict.cls), verdict.line()

                    def counted(answer: object) -> object:
                        if hasattr(answer, "shape"):  # records: the block was answered (else it is asked case by case)
                            answered[0] += len(answer)  # type: ignore[arg-type]
                            advance(len(answer))  # type: ignore[arg-type]
                        return answer

                    def run_block(name: str, block: dict) -> object:
                        return counted(client.run_block(name, block))

                    def send_block(name: str, block: dict) -> Callable[[], object]:
                        waiting = client.send_block(name, block)
                        return lambda: counted(waiting.result())

                    # a child that takes pipelined requests gets the next block while it computes one
                    # (docs/shim-protocol.md, "Pipelined requests"); any other, one block at a time
                    pipelined = not by_case and client.depth > 1
                    try:
                        with guard.interrupting():  # the run: a signal stops it where it lands
                            result = accumulate(
                                run_batch,
                                family,
                                count,
                                expected,
                                batch,
                                closing_at_gather(ranks, opening.close),
                                judge_case,
                                shard_cases,
                                None if by_case or pipelined else run_block,
                                send_block if pipelined else None,
                            )
                    except KeyboardInterrupt:
                        client.abort()  # the batch in flight is abandoned with its child
            completed = result is not None
        except KeyboardInterrupt:  # before the first case: the adapter was starting (its start is abandoned)
            pass
        finally:
            finish(ranks, completed, guard)
        if result is None:
            interrupted(ctx, guard, adapter, family, count, answered[0])
        if ranks.rank != 0:
            ctx.exit(0 if result.verdict != "fail" else 1)
        rate = count / result.seconds if result.seconds > 0 else float("inf")
        click.echo(
            f"{family}: {count} cases in {result.seconds:.1f} s ({rate:,.0f} cases/s, {result.world} rank(s), "
            f"{result.shards} shard(s))"
        )
        click.echo(f"hash     {result.hash}")
        click.echo(f"expected {result.expected} ({result.expected_source})")
        if result.verdict == "pass":
            click.echo("PASS: the adapter's answers hash to the expected value")
            ctx.exit(0)
        if not result.divergences and not result.unjudged:
            click.echo(
                f"FAIL: the engine's hash {result.engine_hash} differs from the committed one, and the adapter "
                "agrees with the engine: regenerate vectors/accumulated.json (docs/accumulated.md)"
            )
            ctx.exit(1)
        excused = result.excused
        if excused:
            click.echo(
                f"{len(excused)} divergent case(s) excused as precision by the adapter's declared margins, "
                f"first: {excused[0].line}"
            )
        if result.verdict == "precision":
            click.echo(
                "PRECISION: the hash differs only at cases the adapter's declared margins excuse "
                '(docs/accumulated.md, "Verdicts")'
            )
            ctx.exit(0)
        failures = result.failures
        if not failures:
            click.echo(f"FAIL: {result.unjudged} divergent case(s) beyond the {len(result.divergences)} judged")
            ctx.exit(1)
        first = failures[0]
        from qconform.harness.fuzz.driver import VECTOR_KEYS, vector_problems

        case = case_vector(family, first.case, line)
        vector = {key: case[key] for key in VECTOR_KEYS}
        vector["comment"] += f" Verdict: {first.line}"
        reason = f" ({first.reason})" if first.reason else ""
        click.echo(
            f"FAIL: {len(failures)} failing case(s){' and more unjudged' if result.unjudged else ''}; "
            f"first divergent case: {first.case}{reason}"
        )
        click.echo(f"verdict: {first.line}")
        for problem in vector_problems(vector):
            click.echo(f"warning: the vector does not validate: {problem}")
        text = json.dumps(vector, indent=2)
        click.echo(f"divergent case, a test object of vectors/{family}.json:")
        click.echo(text)
        if vector_out is not None:
            from qconform.cli.errors import write_output

            write_output(vector_out, text + "\n")
        if record:
            record_finding(vector)
        else:
            click.echo(
                f"to commit it: {line} --record  (files its input under generators/found/{family}.json, "
                "as `qconform fuzz --record`), then `qconform generate`"
            )
        ctx.exit(1)

    try:
        run_as_rank(ranks, run)
    except click.exceptions.Exit as done:
        if guard.signum is not None and done.exit_code != guard.status:  # a signal is never lost: once
            ctx.exit(guard.status)  # the verdict is out, the status is the signal's (docs/harness.md)
        raise
