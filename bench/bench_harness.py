"""Harness overhead: the full corpus through the runner with noop, reference and torch, in one run.

Run from the repository root: ``.venv/bin/python bench/bench_harness.py [--repeat 5]``.
Every case of the corpus goes through :class:`qconform.harness.run.case_runner.CaseRunner`
(chunks of 64 cases per ``run_batch``, the shim protocol to the adapter's child
process, output checks, ``judge``) once per repeat, for each adapter:

* ``noop`` answers every case with a well-formed refusal and does no work, so its
  time is the harness's own: encoding the inputs, the protocol both ways,
  decoding and judging (the refusal path of ``judge``);
* ``reference`` is the executable spec (exact Python integers and rationals);
* ``torch`` is the bundled candidate.

The corpus is loaded first, as ``qconform run`` loads it: parsed, validated, and its blobs
decoded once into the shared arena (docs/shim-protocol.md, "Shared arena") that every
child is offered; that load is printed apart and not counted.

In the same run the torch candidate's own time is measured in process:
``TorchAdapter.run_batch`` on the same chunks, no protocol, no judging, on the inputs the
child gets (raw blobs: views of the same arena), so neither side decodes base64. The goal is a
harness overhead (noop) of at most 3% of that time over the cases torch runs. A
second estimate, which includes the answer path (large output blobs, the
comparators), is ``torch through the harness - torch in process``.

Times are on the wall clock, or with ``--clock cpu`` on the CPU clock of this process plus
the adapter's child (its process CPU-time clock, Linux, nanoseconds), which other jobs on a
shared machine disturb far less; torch's intra-op threads count in both torch columns alike,
and both run as many of them (``OMP_NUM_THREADS``, inherited by the child, sets both). The
runs alternate chunk by chunk (the runner's ``run_batch`` calls of 64 cases of a family): a
chunk's noop run, its torch run through the harness and its torch run in process follow one
another, so that a load that comes and goes weighs on the columns compared alike (the reference
passes, the slowest, come after). Adapter start-up is excluded and printed apart, and so are
``--warmup`` passes (one by default: the first pass pays each side's first calls).

The torch run in process comes right after the torch run through the harness on one chunk, right
before it on the next, and the other way round on the next pass (the second run of the same
kernels finds them warm).

The verdict on the torch goal is one measure, the **paired ratio** (bench/README.md, "The
verdict of bench_harness.py"): each pass's torch time through the harness over the torch
families, divided by the in-process time of the same pass over the same families; its median
over the passes decides, quoted with min and max. The **pooled ratio** (the sum over the
families of each column's median, one over the other) is printed beside it, not judged: it
takes each family's median from whichever pass gives it, on each side apart, so it pairs
nothing and moves with the family whose time swings most (``categorical_sampling``'s is
mostly page faults, in the kernel). The table holds per-family medians.
``--markdown`` prints the results as a section of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import time
from collections import defaultdict
from typing import Callable, Sequence

from qconform.generators.corpus import default_vectors_dir
from qconform.generators.validation import iter_cases
from qconform.harness.run.case_runner import CHUNK, CaseRunner
from qconform.harness.transport.arena import BlobArena
from qconform.harness.transport.client import open_adapter

#: issue #14's goals: noop overhead over torch's own time, and torch through the harness over torch in process
GOAL = 0.03
GOAL_TORCH = 1.10
ADAPTERS = ("noop", "reference", "torch")
#: the label of the torch pass with the full JSON Schema walk (``--strict-schema``)
STRICT = "torch --strict-schema"
#: the labels of the passes in the JSON payload form (``--json-payload``)
NOOP_JSON, TORCH_JSON = "noop json", "torch json"


def live_children(pid: int | str = "self") -> list[int]:
    """Process ids of the running children of process ``pid`` (Linux ``/proc``)."""
    pids = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as handle:
            pids += [int(child) for child in handle.read().split()]
    return pids


def with_descendants(pids: Sequence[int]) -> list[int]:
    """``pids`` and every running descendant of theirs: an adapter's child is the subreaper, and the
    host that runs the adapter is its child (harness/transport/subreaper.py)."""
    found, todo = [], list(pids)
    while todo:
        pid = todo.pop()
        found.append(pid)
        try:
            todo += live_children(pid)
        except OSError:
            pass  # it ended
    return found


def process_cpu(pids: Sequence[int]) -> float:
    """CPU seconds (user + system) of running processes ``pids``, all their threads: their
    process CPU-time clocks (Linux, nanoseconds; ``clock_getcpuclockid``), or where that clock
    cannot be read, ``/proc/<pid>/stat`` (10 ms ticks)."""
    seconds = 0.0
    for pid in pids:
        try:
            seconds += time.clock_gettime(((~pid) << 3) | 2)  # MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)
        except OSError:
            with open(f"/proc/{pid}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            seconds += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return seconds


def corpus_by_family() -> dict[str, list[dict]]:
    """Every case of the committed corpus as a case object, by family."""
    cases: dict[str, list[dict]] = defaultdict(list)
    for case in iter_cases(default_vectors_dir()):
        cases[case.family].append(
            {
                "id": case.id,
                "family": case.family,
                "result": case.result,
                "flags": list(case.flags),
                "input": case.input,
                "expected": case.expected,
            }
        )
    return dict(cases)


def start_seconds(adapter: str) -> float:
    """Wall seconds to start and stop the adapter's child with nothing run."""
    began = time.perf_counter()
    open_adapter(adapter, timeout_s=600).close()
    return time.perf_counter() - began


def keep(passes: list[float], seconds: float, first: bool) -> None:
    """Add ``seconds`` to a family's times: a new pass when ``first``, else its last."""
    if first:
        passes.append(seconds)
    else:
        passes[-1] += seconds


class Harnessed:
    """One adapter started through the runner, timed pass by pass (:meth:`one_pass`)."""

    def __init__(
        self,
        adapter: str,
        cpu_clock: bool,
        arena: BlobArena | None,
        strict_schema: bool = False,
        binary_payload: bool = True,
    ) -> None:
        self.start = start_seconds(adapter)
        running = set(live_children())
        # as in ``qconform run``: the judge reads a binary reply's blobs raw (docs/adapters.md, "Raw
        # blobs"), and the child is offered the corpus's arena (docs/shim-protocol.md, "Shared arena")
        self.client = open_adapter(
            adapter,
            timeout_s=600,
            strict_schema=strict_schema,
            binary_payload=binary_payload,
            raw_blobs=binary_payload,
            arena=arena,
        )
        # this adapter's processes alone: the subreaper and, below it, the host (until issue #24 only the
        # subreaper was counted, so the torch column missed the adapter's own CPU time)
        child = with_descendants([pid for pid in live_children() if pid not in running])
        self.clock = (lambda: time.process_time() + process_cpu(child)) if cpu_clock else time.perf_counter
        self.child_clock = lambda: process_cpu(child)
        self.runner = CaseRunner(lambda: self.client)
        self.passes: dict[str, list[float]] = defaultdict(list)
        #: the adapter's processes' CPU seconds of each pass, by family (this process's is the rest)
        self.child_passes: dict[str, list[float]] = defaultdict(list)

    def one_pass(self, corpus: dict[str, list[dict]]) -> None:
        for family, cases in corpus.items():
            self.one_family(family, cases)

    def one_family(self, family: str, cases: list[dict], timed: bool = True, first: bool = True) -> None:
        """Run cases of one family through the runner; when ``timed``, their times start the family's
        next pass (``first``) or add to its last (a pass is run a chunk at a time)."""
        began, child_began = self.clock(), self.child_clock()
        verdicts = self.runner.run(cases)
        if timed:
            keep(self.passes[family], self.clock() - began, first)
            keep(self.child_passes[family], self.child_clock() - child_began, first)
        errors = [v.line() for v in verdicts if v.cls.value == "error"]
        assert len(verdicts) == len(cases) and not errors, errors[:3]

    def result(self) -> tuple[dict[str, float], tuple[str, ...], float]:
        """Median seconds per family, the families the adapter declares, its start-up seconds; closes it."""
        declared = self.client.config.capabilities.families
        self.runner.close()
        return {family: statistics.median(times) for family, times in self.passes.items()}, declared, self.start


class InProcessTorch:
    """``TorchAdapter.run_batch`` in this process on the runner's chunks, timed pass by pass.

    It gets the inputs the child gets: the adapter declares raw blobs, so each blob is its
    decoded bytes (a view of the arena, as the host hands them over; decoded apart when there is
    no arena), and neither side pays a base64 decode in its timed passes."""

    def __init__(self, families: Sequence[str], clock: Callable[[], float], arena: BlobArena | None) -> None:
        from qconform.adapters.torch_adapter import TorchAdapter
        from qconform.harness.transport.shim_protocol import to_raw_blobs

        self.adapter = TorchAdapter()
        assert self.adapter.raw_blobs
        self.families = families
        self.clock = clock
        self.to_raw = to_raw_blobs if arena is None else arena.to_raw
        self.passes: dict[str, list[float]] = defaultdict(list)

    def one_pass(self, corpus: dict[str, list[dict]]) -> None:
        for family in self.families:
            self.one_family(family, corpus.get(family, []))

    def one_family(self, family: str, cases: list[dict], timed: bool = True, first: bool = True) -> None:
        """``run_batch`` on cases of one family (none for a family torch does not declare), timed as
        :meth:`Harnessed.one_family` times them."""
        if family not in self.families:
            return
        inputs = [self.to_raw(case["input"]) for case in cases]
        began = self.clock()
        for start in range(0, len(inputs), CHUNK):
            self.adapter.run_batch(family, inputs[start : start + CHUNK])
        if timed:
            keep(self.passes[family], self.clock() - began, first)

    def result(self) -> dict[str, float]:
        return {family: statistics.median(times) for family, times in self.passes.items()}


def run_order(runs: dict[str, Harnessed], own: InProcessTorch, turn: int) -> list[Harnessed | InProcessTorch]:
    """The runs of one chunk, in the order of its ``turn``: the adapters' in their order, the
    in-process torch run right after the torch run through the harness on an even turn and right
    before it on an odd one. The second of two runs of the same kernels finds them warm in the
    shared caches (the library's pages are the same in both processes): turn by turn, each side
    is second as often as the other."""
    order: list[Harnessed | InProcessTorch] = list(runs.values())
    torch_at = order.index(runs["torch"])
    order.insert(torch_at + 1 if turn % 2 == 0 else torch_at, own)
    return order


def paired_ratios(through: dict[str, list[float]], own: dict[str, list[float]], families: Sequence[str]) -> list[float]:
    """The paired ratio of each pass: its time through the harness summed over ``families``, over
    the in-process time of the same pass summed over the same families (the verdict's measure)."""
    passes = len(own[families[0]])
    return [sum(through[f][i] for f in families) / sum(own[f][i] for f in families) for i in range(passes)]


def pooled_ratio(through: dict[str, list[float]], own: dict[str, list[float]], families: Sequence[str]) -> float:
    """The pooled ratio: each family's median through the harness, summed, over each family's
    in-process median, summed (printed beside the verdict, not judged)."""
    return sum(statistics.median(through[f]) for f in families) / sum(statistics.median(own[f]) for f in families)


def torch_verdict(ratios: Sequence[float], pooled: float, goal: float = GOAL_TORCH) -> str:
    """The one line that judges the torch goal: the paired ratios' median (with min and max)
    against ``goal``, the pooled ratio beside it."""
    median = statistics.median(ratios)
    return (
        f"torch through the harness / torch in process, paired ratio (the verdict): median {median:.3f}x "
        f"(min {min(ratios):.3f}x, max {max(ratios):.3f}x) over {len(ratios)} passes, "
        f"{'meets' if median <= goal else 'misses'} the goal of {goal:.2f}x; pooled ratio {pooled:.3f}x (not judged)"
    )


def ms(seconds: float, cases: int) -> str:
    return f"{1e3 * seconds / cases:9.3f}" if cases else f"{'-':>9s}"


def all_declared(seconds: dict[str, float], declared: Sequence[str], counts: dict[str, int]) -> str:
    """ms per case over the families an adapter declares."""
    families = [f for f in counts if f in declared]
    return ms(sum(seconds[f] for f in families), sum(counts[f] for f in families))


def report(
    corpus: dict[str, list[dict]],
    harness: dict[str, tuple[dict[str, float], tuple[str, ...], float]],
    torch_own: dict[str, float],
    args: argparse.Namespace,
    load: tuple[float, float, BlobArena | None],
) -> list[str]:
    """The result lines (markdown table rows when ``--markdown``)."""
    torch_families = harness["torch"][1]
    labels = tuple(harness)
    counts = {family: len(cases) for family, cases in corpus.items()}
    head = ["family", "cases", *labels, "torch in process"]
    rows = []
    for family in corpus:
        cells = [family, str(counts[family])]
        for adapter in labels:
            seconds, declared, _ = harness[adapter]
            cells.append(ms(seconds[family], counts[family]) if family in declared else f"{'unsupported':>9s}")
        cells.append(ms(torch_own[family], counts[family]) if family in torch_own else f"{'-':>9s}")
        rows.append(cells)
    total_cases = sum(counts.values())
    rows.append(
        ["all it runs", str(total_cases)]
        + [all_declared(harness[a][0], harness[a][1], counts) for a in labels]
        + [all_declared(torch_own, tuple(torch_own), counts)]
    )

    torch_cases = sum(counts[f] for f in torch_families if f in counts)
    noop_on_torch = sum(harness["noop"][0][f] for f in torch_families if f in counts)
    torch_harness = sum(harness["torch"][0][f] for f in torch_families if f in counts)
    own = sum(torch_own.values())
    ratio = noop_on_torch / own
    with_answers = (torch_harness - own) / own
    import torch

    lines = [
        f"torch intra-op threads {torch.get_num_threads()} in process, OMP_NUM_THREADS "
        f"{os.environ.get('OMP_NUM_THREADS', 'unset')} for both it and the adapter child (which inherits it)",
        f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs, {platform.python_implementation()} "
        f"{platform.python_version()}, {args.clock} clock, median of {args.repeat} passes after {args.warmup} "
        "untimed; adapter start-up " + ", ".join(f"{a} {harness[a][2]:.2f} s" for a in labels) + " (not counted)",
        f"corpus load (not counted): parse and validate {load[0]:.2f} s, decode every blob into the shared "
        f"arena {load[1]:.2f} s ("
        + (f"{load[2].size / 1e6:.1f} MB, {len(load[2].index)} blobs)" if load[2] else "none: blobs travel inline)"),
    ]
    if args.markdown:
        lines += ["", "ms per case:", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(c.strip() for c in cells) + " |" for cells in rows]
        lines.append("")
    else:
        lines.append(f"{head[0]:24s} {head[1]:>6s} " + " ".join(f"{h:>11s}" for h in head[2:]) + "   (ms per case)")
        lines += [f"{c[0]:24s} {c[1]:>6s} " + " ".join(f"{x:>11s}" for x in c[2:]) for c in rows]
    verdict = "meets" if ratio <= GOAL else "misses"
    lines += [
        f"harness overhead (noop): {1e3 * sum(harness['noop'][0].values()) / total_cases:.3f} ms per case over "
        f"{total_cases} cases; {1e3 * noop_on_torch / torch_cases:.3f} ms per case over the {torch_cases} "
        f"cases torch runs",
        f"overhead / torch's own time over those cases: {noop_on_torch:.3f} s / {own:.3f} s = {100 * ratio:.1f}% "
        f"({verdict} the goal of {100 * GOAL:.0f}%)",
        f"with the answer path, on the medians (torch through the harness - torch in process) / torch in "
        f"process: ({torch_harness:.3f} - {own:.3f}) / {own:.3f} = {100 * with_answers:.1f}% (the pooled ratio "
        f"{torch_harness / own:.3f}x; the verdict is the paired ratio, on the last line)",
    ]
    if STRICT in harness:
        strict = sum(harness[STRICT][0][f] for f in torch_families if f in counts)
        lines.append(f"torch with --strict-schema / torch in process: {strict / own:.2f}x")
    if TORCH_JSON in harness:
        noop_json = sum(harness[NOOP_JSON][0][f] for f in torch_families if f in counts)
        torch_json = sum(harness[TORCH_JSON][0][f] for f in torch_families if f in counts)
        lines.append(
            f"JSON payload form: noop overhead {100 * noop_json / own:.1f}% of torch's own time, "
            f"torch through the harness / in process {torch_json / own:.2f}x"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="passes over the corpus per adapter (median)")
    parser.add_argument(
        "--warmup", type=int, default=1, help="untimed passes first (default 1: the first calls of each side)"
    )
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="wall time, or CPU time of this process and the adapter child",
    )
    parser.add_argument("--markdown", action="store_true", help="print a section for bench/RESULTS.md")
    parser.add_argument(
        "--skip-reference", action="store_true", help="leave out the reference adapter (the slowest pass)"
    )
    parser.add_argument(
        "--strict-schema", action="store_true", help=f"add a {STRICT!r} pass: every answer walked by its JSON Schema"
    )
    parser.add_argument(
        "--json-payload",
        action="store_true",
        help=f"add {NOOP_JSON!r} and {TORCH_JSON!r} passes in the JSON payload form (the others are binary)",
    )
    args = parser.parse_args()
    cpu_clock = args.clock == "cpu"

    began = time.perf_counter()
    corpus = corpus_by_family()
    parsed = time.perf_counter()
    arena = BlobArena.of_cases(case for cases in corpus.values() for case in cases)
    load = (parsed - began, time.perf_counter() - parsed, arena)
    runs = {adapter: Harnessed(adapter, cpu_clock, arena) for adapter in ADAPTERS if adapter != "reference"}
    if args.strict_schema:
        runs[STRICT] = Harnessed("torch", cpu_clock, arena, strict_schema=True)
    if args.json_payload:
        runs[NOOP_JSON] = Harnessed("noop", cpu_clock, arena, binary_payload=False)
        runs[TORCH_JSON] = Harnessed("torch", cpu_clock, arena, binary_payload=False)
    torch_families = [f for f in corpus if f in runs["torch"].client.config.capabilities.families]
    own = InProcessTorch(torch_families, time.process_time if cpu_clock else time.perf_counter, arena)
    gc.freeze()  # as ``qconform run`` does once its cases are loaded (the adapter host too, once loaded)
    # the runs alternate chunk by chunk (noop, torch through the harness, torch in process, ...), so
    # that a load that comes and goes on a shared machine weighs on the columns compared alike
    # (chunk by chunk: the run_batch calls the runner makes, each side's right after the other's)
    for index in range(args.warmup + args.repeat):
        for turn, (family, cases) in enumerate(corpus.items()):
            for k, start in enumerate(range(0, len(cases), CHUNK)):
                for run in run_order(runs, own, index + turn + k):
                    run.one_family(family, cases[start : start + CHUNK], timed=index >= args.warmup, first=k == 0)
    paired = paired_ratios(runs["torch"].passes, own.passes, torch_families)
    pooled = pooled_ratio(runs["torch"].passes, own.passes, torch_families)
    if cpu_clock:  # where the torch passes' CPU goes: this process, the adapter's, torch's own
        torch_run = runs["torch"]
        child = [sum(torch_run.child_passes[f][i] for f in torch_families) for i in range(args.repeat)]
        whole = [sum(torch_run.passes[f][i] for f in torch_families) for i in range(args.repeat)]
        in_process = [sum(own.passes[f][i] for f in torch_families) for i in range(args.repeat)]
        split = [("the harness (this process)", [w - c for w, c in zip(whole, child)]), ("the torch child", child)]
        split.append(("torch in process", in_process))
    harness = {label: run.result() for label, run in runs.items()}
    if not args.skip_reference:  # the slowest pass by far, on its own
        reference = Harnessed("reference", cpu_clock, arena)
        for _ in range(args.repeat):
            reference.one_pass(corpus)
        harness = {"noop": harness["noop"], "reference": reference.result(), **harness}
    torch_own = own.result()
    print(
        f"harness overhead: {sum(len(c) for c in corpus.values())} cases of {len(corpus)} families "
        f"through the runner ({CHUNK} cases per run_batch)"
    )
    print("\n".join(report(corpus, harness, torch_own, args, load)))
    if cpu_clock:
        print(
            "CPU ms per pass over the torch families, median (min-max): "
            + "; ".join(
                f"{name} {1e3 * statistics.median(v):.1f} ({1e3 * min(v):.1f}-{1e3 * max(v):.1f})" for name, v in split
            )
        )
    print(f"{torch_verdict(paired, pooled)}; load average {', '.join(f'{x:.2f}' for x in os.getloadavg())} at the end")


if __name__ == "__main__":
    main()
