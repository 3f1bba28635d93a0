"""The soak under faults (issue #25): a worker and a target over real TCP through the fault proxy, then the books.

:func:`soak` starts a worker endpoint (in a child process by default, so its
resident memory is its own), a :class:`FaultProxy` with a seeded
:class:`FaultMix` in front of it, and a driving :class:`Target` that plays
``rounds`` rounds on each of ``slots`` slots through the proxy. It prints
progress, samples the resident memory of both endpoints, and hands every round,
fault and COMMIT to the :class:`Books` (``soak_audit.py``), which audit them at
the end. ``qconform endpoint soak`` is its command (docs/endpoint.md, "The soak").
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from qconform.adapters.endpoint.deployment import hello_config
from qconform.adapters.endpoint.memory import return_large_buffers
from qconform.adapters.endpoint.model import DraftModel, TargetModel
from qconform.adapters.endpoint.target import ROW_WINDOW, RoundRecord, Target
from qconform.adapters.endpoint.worker import WorkerEndpoint
from qconform.adapters.fault_proxy import MIX_KINDS, FaultMix, FaultProxy
from qconform.soak_audit import COMMITTED, TARGET_ONLY, Books
from qconform.spec.proposal import SupportPolicy

#: seconds the worker child may take to start (it imports torch)
WORKER_START_S = 180.0
#: seconds the soak waits at the end for the last COMMITs to go by the proxy
DRAIN_S = 5.0
#: RSS samples per soak (one every total/SAMPLES rounds)
SAMPLES = 100
#: torch's intra-op threads in both endpoints of a soak. One: a round's tensors (five rows of V = 129280)
#: are too small to share, and on a loaded machine the idle threads' spinning made a dense round six
#: times the CPU (issue #25's profile, bench/RESULTS.md "Soak"). It also pins the one thing the
#: thread count changes, the order torch sums a row's FP64 total in, so a seeded soak draws the same q
#: rows on any machine.
TORCH_THREADS = 1
#: the share of the watchdog the slowest committed round may take before the soak warns: a clean round
#: that outlives the watchdog is a breach (a timeout no fault explains), and at twice the slowest round
#: the load has room to double (docs/endpoint.md, "The watchdog")
WATCHDOG_HEADROOM = 0.5


@dataclass
class SoakSettings:
    """What a soak runs: ``rounds`` on each of ``slots`` slots, faults from a seeded mix at ``fault_rate`` per round."""

    rounds: int = 100
    #: seconds after which no slot opens another round (its round in flight resolves, then the books are
    #: audited over the rounds played); None: all ``rounds``
    duration_s: float | None = None
    slots: int = 4
    vocab: int = 32
    max_support: int = 16
    #: STEP support policy: 0 dense, k sparse top-k
    support_policy: int = 8
    seed: int = 0x5EED
    fault_rate: float = 0.05
    kinds: tuple[str, ...] = MIX_KINDS
    watchdog_s: float = 1.0
    model_seed: int = 3
    target_seed: int = 2
    #: the worker in a child process (its RSS apart); False: in this process and loop
    worker_process: bool = True
    #: spec-check every n-th committed round (by seq); 0: none (every target-only draw is checked)
    spec_every: int = 1
    rss_bound_mb: float = 64.0
    #: rounds (all slots) before the RSS baseline; None: a tenth of the soak, at least a row window per slot
    warmup: int | None = None
    progress_s: float = 5.0
    #: the driving target's class (the tests seed endpoint bugs in a subclass)
    target_class: type[Target] = Target

    @property
    def total(self) -> int:
        return self.rounds * self.slots

    @property
    def warmup_rounds(self) -> int:
        if self.warmup is not None:
            return self.warmup
        return max(self.total // 10, ROW_WINDOW * self.slots)


@dataclass
class SoakReport:
    """What a soak measured, and every breach the books found (empty: the books balance)."""

    settings: SoakSettings
    breaches: list[str]
    wall_s: float
    outcomes: Counter
    faults: Counter
    planned: int
    skipped: int
    counters: dict[str, int]
    latency_max_committed_s: float
    latency_median_committed_s: float
    latency_p99_committed_s: float
    latency_max_target_only_s: float
    #: (rounds resolved, target RSS bytes, worker RSS bytes)
    rss: list[tuple[int, int, int]] = field(default_factory=list)
    #: the soak reached ``duration_s`` before its rounds
    stopped: bool = False

    @property
    def rounds_per_s(self) -> float:
        return sum(self.outcomes.values()) / self.wall_s if self.wall_s else 0.0


def resident_bytes(pid: int | str = "self") -> int:
    """Resident memory of process ``pid`` (VmRSS of /proc/PID/status); 0 where there is none to read."""
    try:
        with open(f"/proc/{pid}/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def serve_worker(config: dict, vocab: int, model_seed: int, pipe: Any) -> None:
    """The worker endpoint in a child process: its port goes up the pipe; it serves until the pipe says stop."""
    torch.set_num_threads(TORCH_THREADS)
    return_large_buffers()

    def stop_said() -> None:
        try:
            pipe.recv()
        except EOFError:  # the soak ended without a word (a SIGTERM, a kill): stop all the same, quietly
            pass

    async def main() -> None:
        worker = WorkerEndpoint(config, DraftModel.random(vocab, seed=model_seed))
        pipe.send(await worker.start("127.0.0.1", 0))
        await asyncio.get_running_loop().run_in_executor(None, stop_said)
        await worker.close()

    asyncio.run(main())


class WorkerHandle:
    """The soak's worker: a child process (its own RSS) or an endpoint in this loop."""

    def __init__(self, settings: SoakSettings, config: dict) -> None:
        self.settings, self.config = settings, config
        self.process: Any = None
        self.pipe: Any = None
        self.endpoint: WorkerEndpoint | None = None

    async def start(self) -> int:
        if not self.settings.worker_process:
            model = DraftModel.random(self.settings.vocab, seed=self.settings.model_seed)
            self.endpoint = WorkerEndpoint(self.config, model)
            return await self.endpoint.start("127.0.0.1", 0)
        context = multiprocessing.get_context("spawn")
        self.pipe, child = context.Pipe()
        self.process = context.Process(
            target=serve_worker,
            args=(self.config, self.settings.vocab, self.settings.model_seed, child),
            daemon=True,
        )
        self.process.start()
        loop = asyncio.get_running_loop()
        ready = await loop.run_in_executor(None, self.pipe.poll, WORKER_START_S)
        if not ready:
            self.stop_process()
            raise RuntimeError(f"the worker child did not listen within {WORKER_START_S:.0f} s")
        return self.pipe.recv()

    def rss(self) -> int:
        return resident_bytes(self.process.pid) if self.process is not None else 0

    def stop_process(self) -> None:
        if self.process is None:
            return
        with contextlib.suppress(OSError, ValueError):
            self.pipe.send("stop")
        self.process.join(10)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(10)

    async def close(self) -> None:
        if self.endpoint is not None:
            await self.endpoint.close()
        await asyncio.get_running_loop().run_in_executor(None, self.stop_process)


def watchdog_hint(slowest_s: float, watchdog_s: float) -> str | None:
    """A warning when the slowest committed round took more than :data:`WATCHDOG_HEADROOM` of the watchdog."""
    if slowest_s <= watchdog_s * WATCHDOG_HEADROOM:
        return None
    return (
        f"soak: the slowest committed round took {slowest_s:.2f} s, over {WATCHDOG_HEADROOM:.0%} of the "
        f"{watchdog_s:g} s watchdog; at this load a clean round may time out, which the books count a breach "
        f"(raise --watchdog)"
    )


def support_of(settings: SoakSettings) -> SupportPolicy:
    return SupportPolicy.dense() if settings.support_policy == 0 else SupportPolicy.top_k(settings.support_policy)


async def soak(settings: SoakSettings, say: Callable[[str], None] = print) -> SoakReport:
    """Run the soak ``settings`` describe, printing progress through ``say``; the report, breaches included.
    Torch runs on :data:`TORCH_THREADS` threads meanwhile (the caller's count is restored); glibc's mmap
    threshold is pinned for this process (``memory.return_large_buffers``), so that RSS follows what the
    endpoints hold."""
    return_large_buffers()
    threads = torch.get_num_threads()
    torch.set_num_threads(TORCH_THREADS)
    try:
        return await soak_pinned(settings, say)
    finally:
        torch.set_num_threads(threads)


async def soak_pinned(settings: SoakSettings, say: Callable[[str], None]) -> SoakReport:
    config = hello_config(vocab=settings.vocab, max_support=settings.max_support)
    model = DraftModel.random(settings.vocab, seed=settings.model_seed)
    target_model = TargetModel.near(model, seed=settings.target_seed)
    books = Books(
        seed=settings.seed,
        slots=settings.slots,
        rounds=settings.rounds,
        depth=config["depth"],
        support=support_of(settings),
        model=model,
        target=target_model,
        spec_every=settings.spec_every,
        rss_bound_mb=settings.rss_bound_mb,
        warmup_rounds=settings.warmup_rounds,
    )
    worker = WorkerHandle(settings, config)
    mix = FaultMix(settings.seed, settings.fault_rate, settings.kinds)
    every = max(1, settings.total // SAMPLES)

    def sample() -> None:
        books.sample_rss(resident_bytes(), worker.rss())

    def on_round(record: RoundRecord) -> None:
        books.round(record)
        if books.resolved % every == 0 or books.resolved == settings.warmup_rounds:
            sample()

    proxy = FaultProxy("127.0.0.1", await worker.start(), mix=mix, on_fault=books.fault, on_commit=books.commit)
    target = settings.target_class(
        config,
        target_model,
        "127.0.0.1",
        await proxy.start(),
        seed=settings.seed,
        support_policy=settings.support_policy,
        watchdog_s=settings.watchdog_s,
        slots=settings.slots,
        on_round=on_round,
    )
    started = time.monotonic()
    warned = False

    async def progress() -> None:
        nonlocal warned
        while True:
            await asyncio.sleep(settings.progress_s)
            elapsed = time.monotonic() - started
            hint = watchdog_hint(books.latency_max[COMMITTED], settings.watchdog_s)
            if hint and not warned:
                say(hint)
                warned = True
            say(
                f"soak: {books.resolved}/{settings.total} rounds, {books.resolved / elapsed:.1f} rounds/s, "
                f"{books.outcomes[COMMITTED]} committed, {books.outcomes[TARGET_ONLY]} target-only, "
                f"faults {sum(books.fault_counts.values())} {dict(sorted(books.fault_counts.items()))}, "
                f"RSS target {resident_bytes() >> 20} MB, worker {worker.rss() >> 20} MB"
            )

    reporter = asyncio.ensure_future(progress())
    sample()
    duration = settings.duration_s

    def past_duration() -> bool:
        return duration is not None and time.monotonic() >= started + duration

    try:
        await target.run(settings.rounds, past_duration)
        wall = time.monotonic() - started
        sample()
        deadline = time.monotonic() + DRAIN_S
        while set(books.awaiting) - books.excused and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
    finally:
        reporter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reporter
        await target.close()
        await proxy.close()
        await worker.close()
    counters = dict(target.receiver.counters)
    played = [lane.round_id for lane in target.lanes]
    # audited over the rounds played only when the duration ended the soak: a slot that stopped early on its
    # own is a breach ("rounds accounted of N")
    stopped = past_duration() and sum(played) < settings.total
    breaches = books.close(Counter(counters), target.opened, played if stopped else None)
    clean = sorted(books.latency_clean)
    return SoakReport(
        settings,
        breaches,
        wall,
        books.outcomes,
        books.fault_counts,
        mix.planned,
        mix.skipped,
        counters,
        books.latency_max[COMMITTED],
        statistics.median(clean) if clean else 0.0,
        clean[min(len(clean) - 1, int(len(clean) * 0.99))] if clean else 0.0,
        books.latency_max[TARGET_ONLY],
        books.rss,
        stopped,
    )


def summary(report: SoakReport) -> list[str]:
    """The soak's closing lines: throughput, faults, latency, memory."""
    settings = report.settings
    lines = [
        f"soak seed {settings.seed}: {sum(report.outcomes.values())} rounds on {settings.slots} slots "
        f"({'dense' if settings.support_policy == 0 else f'top-{settings.support_policy}'}, V = {settings.vocab}) "
        f"in {report.wall_s:.1f} s: {report.rounds_per_s:.1f} rounds/s; {report.outcomes[COMMITTED]} committed, "
        f"{report.outcomes[TARGET_ONLY]} target-only"
        + (f"; stopped at --duration {settings.duration_s:g} s, of {settings.total}" if report.stopped else ""),
        f"faults applied {sum(report.faults.values())} {dict(sorted(report.faults.items()))}; planned "
        f"{report.planned}, skipped {report.skipped} (one at a time, on clean rounds)",
        f"latency of committed rounds: median {report.latency_median_committed_s * 1e3:.2f} ms, p99 "
        f"{report.latency_p99_committed_s * 1e3:.2f} ms, max {report.latency_max_committed_s * 1e3:.2f} ms "
        f"(design bound 0.517 ms a dense round); target-only max {report.latency_max_target_only_s * 1e3:.1f} ms",
    ]
    hint = watchdog_hint(report.latency_max_committed_s, settings.watchdog_s)
    if hint:
        lines.append(hint)
    if report.rss:
        first, last = report.rss[0], report.rss[-1]
        peak_target = max(sample[1] for sample in report.rss)
        peak_worker = max(sample[2] for sample in report.rss)
        lines.append(
            f"RSS target {first[1] >> 20} -> {last[1] >> 20} MB (peak {peak_target >> 20}), worker "
            f"{first[2] >> 20} -> {last[2] >> 20} MB (peak {peak_worker >> 20}); warm-up {settings.warmup_rounds} "
            f"rounds, bound {settings.rss_bound_mb:g} MB"
        )
    return lines


def rss_table(report: SoakReport, rows: int = 11) -> list[str]:
    """RSS against rounds, ``rows`` samples evenly spaced, as Markdown."""
    samples = report.rss
    if not samples:
        return []
    picks = sorted({round(i * (len(samples) - 1) / max(1, rows - 1)) for i in range(rows)})
    out = ["| rounds | target RSS (MB) | worker RSS (MB) |", "|---:|---:|---:|"]
    out += [f"| {samples[i][0]} | {samples[i][1] / (1 << 20):.1f} | {samples[i][2] / (1 << 20):.1f} |" for i in picks]
    return out
