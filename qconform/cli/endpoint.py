"""``qconform endpoint worker|verifier``: run the reference wire v2 endpoints on TCP (docs/endpoint.md).

Both log one line per event to stderr and stop cleanly on SIGINT or SIGTERM
(stop listening, end every connection, exit 0). ``--port 0`` listens on an
ephemeral port; the ``listening on HOST:PORT`` log line names it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
import sys
from dataclasses import dataclass, fields

import click

from qconform.adapters.endpoint.deployment import ANSWER_TIMEOUT_S

LOG_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"


def configure_logging(level: str) -> None:
    logging.basicConfig(stream=sys.stderr, level=getattr(logging, level.upper()), format=LOG_FORMAT, force=True)


class EndpointUsageError(click.ClickException):
    """A bad argument: one ``Error:`` line, exit status 2."""

    exit_code = 2


def require_torch(role: str) -> None:
    """The worker and the driving target sample with the torch candidate (a missing dependency: exit 3)."""
    from qconform.cli.errors import StartLineError

    try:
        import torch  # noqa: F401
    except ImportError:
        raise StartLineError(
            f"{role} samples with the torch candidate, and torch is not installed: pip install 'qconform[torch]'"
        ) from None


def parse_address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise click.BadParameter(f"{text!r} is not HOST:PORT")
    return host, int(port)


async def serve_until_signalled(endpoint, host: str, port: int, driver=None, exit_after_driver: bool = False) -> int:
    """Run ``endpoint`` (and an optional coroutine ``driver``) until SIGINT/SIGTERM; then close everything."""
    log = logging.getLogger("qconform.endpoint")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, lambda sig=sig: (log.info("received %s, shutting down", sig.name), stop.set()))
    try:
        port = await endpoint.start(host, port)
    except OSError as exc:  # a port in use or not ours to take: the endpoint cannot start (exit 3)
        import os

        from qconform.cli.errors import StartLineError

        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise StartLineError(
            f"{endpoint.role} cannot listen on {host}:{port}: {reason}; "
            "choose another --port (0: any free one), or stop the process that holds it"
        ) from None
    if not log.isEnabledFor(logging.INFO):  # the port must be known even when info lines are off
        print(f"{endpoint.role} listening on {host}:{port}", file=sys.stderr, flush=True)
    waits = [asyncio.ensure_future(stop.wait())]
    driving = None
    if driver is not None:
        driving = asyncio.ensure_future(driver)
        driving.add_done_callback(
            lambda task: (
                task.cancelled() or task.exception() is None or log.error("driving rounds failed: %s", task.exception())
            )
        )
        if exit_after_driver:
            waits.append(driving)
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    status = 0
    if driving is not None:
        if not driving.done():
            driving.cancel()
        try:
            await driving
        except asyncio.CancelledError:
            pass
        except Exception:  # noqa: BLE001 - logged when it happened; the endpoint still closes cleanly
            status = 1
    for task in waits:
        task.cancel()
    await endpoint.close()
    log.info("%s stopped", endpoint.role)
    return status


@dataclass(frozen=True)
class Deployment:
    """What both endpoints take (:func:`deployment_options`): where to listen, the HELLO shape, whether
    control envelopes are served, glibc's mmap threshold, the log level."""

    host: str
    port: int
    vocab: int
    dense_stride: int | None
    max_support: int
    no_control: bool
    return_large_buffers: bool
    log_level: str

    def config(self) -> dict:
        """The HELLO fields, refused as a usage error where the design forbids them (the check a
        receiver's ``configure`` makes: ``deployment.config_problem``)."""
        from qconform.adapters.endpoint.deployment import config_problem, hello_config

        config = hello_config(self.vocab, self.dense_stride, self.max_support)
        problem = config_problem(config)
        if problem is not None:
            raise EndpointUsageError(problem)
        return config

    def serve(self, endpoint, driver=None, exit_after_driver: bool = False) -> None:
        """Serve ``endpoint`` until a signal (or the driver's end), with glibc's large buffers returned
        when asked (docs/endpoint.md, "Large buffers returned"); exits with its status."""
        if self.return_large_buffers:
            from qconform.adapters.endpoint import memory

            memory.return_large_buffers()
        sys.exit(asyncio.run(serve_until_signalled(endpoint, self.host, self.port, driver, exit_after_driver)))


def deployment_options(fn):
    """The options of :class:`Deployment`, handed to the command as one ``deployment`` argument, its
    log level set."""
    options = [
        click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on."),
        click.option("--port", type=click.IntRange(0, 65535), required=True, help="TCP port (0: ephemeral)."),
        click.option("--vocab", type=click.IntRange(min=1), default=129280, show_default=True, help="Vocabulary V."),
        click.option("--dense-stride", type=click.IntRange(min=1), default=None, help="Dense row stride (default V)."),
        click.option(
            "--max-support",
            type=click.IntRange(min=1),
            default=256,
            show_default=True,
            help="Largest sparse support k.",
        ),
        click.option("--no-control", is_flag=True, help="Refuse test-control envelopes (production mode)."),
        click.option(
            "--return-large-buffers",
            is_flag=True,
            help="Pin glibc's mmap threshold at 256 KiB, as a soak does: a freed large buffer leaves RSS at once, "
            "at the cost of fresh pages for every one (docs/endpoint.md, 'Large buffers returned').",
        ),
        click.option(
            "--log-level", default="info", show_default=True, type=click.Choice(["debug", "info", "warning", "error"])
        ),
    ]

    @functools.wraps(fn)
    def with_deployment(**kwargs):
        deployment = Deployment(**{field.name: kwargs.pop(field.name) for field in fields(Deployment)})
        configure_logging(deployment.log_level)
        return fn(deployment, **kwargs)

    for option in reversed(options):
        with_deployment = option(with_deployment)
    return with_deployment


@click.group("endpoint")
def endpoint_group() -> None:
    """Run the reference wire v2 endpoints (asyncio, TCP)."""


@endpoint_group.command("worker")
@deployment_options
@click.option("--model-seed", type=int, default=1, show_default=True, help="Seed of the toy draft model.")
@click.option("--device", default="cpu", show_default=True, help="Torch device the proposals are sampled on.")
@click.option(
    "--answer-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=ANSWER_TIMEOUT_S,
    show_default=True,
    help="Seconds a connection may take to answer the worker's HELLO before the worker closes it.",
)
@click.option("--mutant", default=None, metavar="NAME", help="Serve a worker with a seeded bug (docs/endpoint.md).")
def worker(deployment: Deployment, model_seed, device, answer_timeout, mutant) -> None:
    """The drafter leader: sends HELLO, samples proposals under the RNG ABI, sends dense or sparse q rows."""
    config = deployment.config()
    require_torch("the worker")
    from qconform.adapters.endpoint.model import DraftModel
    from qconform.adapters.endpoint.worker import WorkerEndpoint
    from qconform.adapters.endpoint.worker_mutants import WORKER_MUTANTS

    if mutant is not None and mutant not in WORKER_MUTANTS:
        raise click.BadParameter(f"unknown mutant; known: {', '.join(WORKER_MUTANTS)}", param_hint="--mutant")
    endpoint = WorkerEndpoint(
        config,
        DraftModel.random(deployment.vocab, model_seed),
        control_allowed=not deployment.no_control,
        device=device,
        mutant=mutant,
        answer_timeout_s=answer_timeout,
    )
    deployment.serve(endpoint)


@endpoint_group.command("verifier")
@deployment_options
@click.option("--mutant", default=None, metavar="NAME", help="Serve a receiver with a seeded bug (docs/endpoint.md).")
@click.option(
    "--worker",
    "worker_address",
    default=None,
    metavar="HOST:PORT",
    help="Also drive rounds, as the target, against the worker at HOST:PORT.",
)
@click.option(
    "--rounds", type=click.IntRange(min=0), default=10, show_default=True, help="Rounds to drive on each slot."
)
@click.option(
    "--slots", type=int, default=None, help="Slots to drive concurrently, 1..the HELLO's slots (default: all of them)."
)
@click.option("--exit-after-rounds", is_flag=True, help="Stop once the rounds are driven (else wait for a signal).")
@click.option(
    "--support-policy",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="STEP support policy: 0 dense, k sparse top-k.",
)
@click.option(
    "--watchdog",
    type=click.FloatRange(min=0, min_open=True),
    default=2.0,
    show_default=True,
    help="Seconds a round may take before its proposal is discarded.",
)
@click.option(
    "--seed",
    type=click.IntRange(0, (1 << 64) - 1),
    default=0x5EED,
    show_default=True,
    help="Request seed of slot 0; slot s uses SEED + s (mod 2^64).",
)
@click.option("--target-seed", type=int, default=2, show_default=True, help="Seed of the toy target model.")
def verifier(
    deployment: Deployment,
    mutant,
    worker_address,
    rounds,
    slots,
    exit_after_rounds,
    support_policy,
    watchdog,
    seed,
    target_seed,
) -> None:
    """The receiving side: validates every frame through its own receiver; optionally drives rounds."""
    from qconform.adapters.endpoint.mutants import MUTANTS, receiver_class
    from qconform.adapters.endpoint.verifier import VerifierEndpoint

    if mutant is not None and mutant not in MUTANTS:
        raise click.BadParameter(f"unknown mutant; known: {', '.join(MUTANTS)}", param_hint="--mutant")
    config = deployment.config()
    if slots is not None and not 1 <= slots <= config["max_slots"]:
        raise EndpointUsageError(f"--slots {slots}: the deployment has slots 1..{config['max_slots']}")
    endpoint = VerifierEndpoint(config, mutant=mutant, control_allowed=not deployment.no_control)
    driver = None
    if worker_address is not None:
        require_torch("the driving target (--worker)")
        from qconform.adapters.endpoint.model import TargetModel
        from qconform.adapters.endpoint.target import Target

        worker_host, worker_port = parse_address(worker_address)
        target = Target(
            config,
            TargetModel.random(deployment.vocab, target_seed),
            worker_host,
            worker_port,
            seed=seed,
            support_policy=support_policy,
            watchdog_s=watchdog,
            slots=slots,
            receiver_cls=receiver_class(mutant),
        )
        endpoint.target = target
        driver = target.run(rounds)
    deployment.serve(endpoint, driver, exit_after_rounds)


def parse_kinds(text: str) -> tuple[str, ...]:
    from qconform.adapters.fault_proxy import FAULT_KINDS

    kinds = tuple(kind.strip() for kind in text.split(",") if kind.strip())
    unknown = [kind for kind in kinds if kind not in FAULT_KINDS]
    if unknown or not kinds:
        raise click.BadParameter(f"unknown fault kinds {unknown}; known: {', '.join(FAULT_KINDS)}")
    return kinds


@endpoint_group.command("soak")
@click.option("--rounds", type=click.IntRange(min=1), default=100, show_default=True, help="Rounds on each slot.")
@click.option(
    "--duration",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Seconds after which no slot opens another round; the books audit the rounds played.",
)
@click.option("--slots", type=click.IntRange(1, 4), default=4, show_default=True, help="Slots driven concurrently.")
@click.option("--vocab", type=click.IntRange(min=2), default=32, show_default=True, help="Vocabulary V.")
@click.option("--max-support", type=click.IntRange(min=1), default=16, show_default=True, help="Largest sparse k.")
@click.option(
    "--support-policy", type=click.IntRange(min=0), default=8, show_default=True, help="0 dense, k sparse top-k."
)
@click.option(
    "--seed",
    type=click.IntRange(0, (1 << 64) - 1),
    default=0x5EED,
    show_default=True,
    help="The soak's seed: slot s's request seed is SEED + s (mod 2^64), and the fault mix draws from it.",
)
@click.option(
    "--fault-rate",
    type=click.FloatRange(0, 1),
    default=0.05,
    show_default=True,
    help="Probability that a round is planned a fault (applied one at a time).",
)
@click.option("--faults", "kinds", default=None, help="Comma-separated fault kinds (default: every kind of the mix).")
@click.option(
    "--watchdog",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="Seconds a round may take.",
)
@click.option(
    "--spec-every",
    type=click.IntRange(min=0),
    default=None,
    help="Spec-check every n-th committed round (default: every one for V <= 4096, every 1000th above; 0: none).",
)
@click.option("--rss-bound-mb", type=float, default=64.0, show_default=True, help="Growth allowed after warm-up.")
@click.option("--warmup", type=click.IntRange(min=0), default=None, help="Rounds before the RSS baseline.")
@click.option(
    "--progress", type=click.FloatRange(min=0.1), default=10.0, show_default=True, help="Seconds between lines."
)
@click.option("--in-process", is_flag=True, help="Run the worker in this process (default: a child process).")
@click.option("--rss-table", is_flag=True, help="Print RSS against rounds as a Markdown table.")
@click.option(
    "--log-level", default="error", show_default=True, type=click.Choice(["debug", "info", "warning", "error"])
)
def soak_command(
    rounds,
    duration,
    slots,
    vocab,
    max_support,
    support_policy,
    seed,
    fault_rate,
    kinds,
    watchdog,
    spec_every,
    rss_bound_mb,
    warmup,
    progress,
    in_process,
    rss_table,
    log_level,
) -> None:
    """A worker and a target over TCP through the fault proxy, faults from a seeded mix; then the books are audited.

    Exit 0 when the books balance, 1 with one line per breach (docs/endpoint.md, "The soak")."""
    configure_logging(log_level)
    require_torch("the soak")
    if support_policy > min(max_support, vocab):
        raise EndpointUsageError(
            f"--support-policy {support_policy}: at most the negotiated k, {min(max_support, vocab)}"
        )
    from qconform.adapters.fault_proxy import MIX_KINDS
    from qconform.soak import SoakSettings, soak, summary
    from qconform.soak import rss_table as table_of

    settings = SoakSettings(
        rounds=rounds,
        duration_s=duration,
        slots=slots,
        vocab=vocab,
        max_support=max_support,
        support_policy=support_policy,
        seed=seed,
        fault_rate=fault_rate,
        kinds=MIX_KINDS if kinds is None else parse_kinds(kinds),
        watchdog_s=watchdog,
        spec_every=(1 if vocab <= 4096 else 1000) if spec_every is None else spec_every,
        rss_bound_mb=rss_bound_mb,
        warmup=warmup,
        progress_s=progress,
        worker_process=not in_process,
    )
    report = asyncio.run(soak(settings, lambda line: click.echo(line, err=True)))
    for line in summary(report) + (table_of(report) if rss_table else []):
        click.echo(line)
    for line in report.breaches:
        click.echo(line)
    if report.breaches:
        click.echo(f"soak FAILED: {len(report.breaches)} breaches; reproduce with --seed {seed}")
        sys.exit(1)
    click.echo("soak passed: every round accounted once, counters equal the faults, no key reused, the spec agrees")
