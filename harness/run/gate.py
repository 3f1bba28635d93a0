"""What makes ``qconform run`` a release gate: exit codes, signals, coverage.

:class:`RunExit` is the one exit-status table of ``qconform run`` (docs/harness.md,
"Exit codes"); :func:`exit_code` is the only place a run's status is decided.
:class:`~qconform.harness.run.signals.SignalGuard`, in a module of its own, turns SIGTERM into
the same clean stop as SIGINT (a partial report, the adapter killed). :func:`coverage_problems` is the
``--require FAMILY`` / ``--max-unsupported N`` gate and :func:`supported_share`
the coverage figure of the summary line.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from enum import IntEnum
from fractions import Fraction
from typing import Iterable, Sequence

from qconform.harness.run.signals import interrupted_exit
from qconform.harness.run.summary import RunSummary
from qconform.harness.verdicts import VerdictClass


class RunExit(IntEnum):
    """Exit status of ``qconform run``, and the one table every command's statuses come from
    (docs/harness.md, "Exit codes"; tests/harness/test_run_gate.py and tests/robustness/test_exit_codes.py)."""

    #: nothing unexpected, every coverage requirement met
    OK = 0
    #: a ``fail``/``error``/``xpass``, a stale expectations entry, an incomplete run, or coverage below
    #: ``--require``/``--max-unsupported``
    FAILED = 1
    #: usage error: bad option or value, unknown family/adapter/case, a malformed adapter spec or ``-k``
    #: expression, unusable expectations file, a corpus that fails its integrity check or the pinned root
    USAGE = 2
    #: something the command needs cannot start here (AdapterStartError: missing program, failing or
    #: invalid ``get_config``, an undeclarable family; a device the machine or adapter lacks; a missing
    #: optional dependency; a port in use): one line, nothing was judged
    ADAPTER_START = 3
    #: an output (``--json``, ``--junit``, ...) could not be written (permission, a file in the way, a
    #: full disk); the summary was printed first
    REPORT_WRITE = 4
    #: no case selected (``-k``, ``--case``, ``--lf`` matched nothing)
    NO_CASES = 5
    #: stopped by SIGINT (Ctrl-C); 128 + the signal number, as a shell reports it
    SIGINT = 128 + signal.SIGINT
    #: stopped by SIGTERM (``timeout``, a CI runner cancelling the job)
    SIGTERM = 128 + signal.SIGTERM


@dataclass(frozen=True)
class RunState:
    """What :func:`exit_code` decides from (collected by the plugin at session end)."""

    ok: bool
    judged: int
    start_error: str | None = None
    signum: int | None = None
    write_errors: tuple[str, ...] = ()
    usage_error: bool = False


def exit_code(state: RunState) -> int:
    """The exit status of a finished run; earlier rows of this order win."""
    if state.start_error is not None:
        return RunExit.ADAPTER_START
    if state.signum is not None:
        return interrupted_exit(state.signum)
    if state.usage_error:
        return RunExit.USAGE
    if state.write_errors:
        return RunExit.REPORT_WRITE
    if not state.judged and state.ok:
        return RunExit.NO_CASES
    return RunExit.OK if state.ok else RunExit.FAILED


def supported_share(summary: RunSummary) -> tuple[int, int]:
    """(supported, judged): judged cases other than ``disabled``; supported ones are not ``unsupported``."""
    counts = summary.counts()
    judged = sum(counts.values()) - counts[VerdictClass.DISABLED]
    return judged - counts[VerdictClass.UNSUPPORTED], judged


def share_text(summary: RunSummary) -> str:
    """``supported 200/753 (26%)``: the percentage rounded down, so 99.9% never reads 100%."""
    supported, judged = supported_share(summary)
    if not judged:
        return "supported 0/0"
    percent = int(Fraction(100 * supported, judged))
    return f"supported {supported}/{judged} ({percent}%)"


def coverage_problems(
    summary: RunSummary,
    declared: Sequence[str] | None,
    require: Iterable[str],
    max_unsupported: int | None,
) -> list[str]:
    """The coverage gate (docs/harness.md, "Coverage"): one problem per unmet requirement.

    ``--require F``: the adapter declares F, at least one case of F ran (was judged and not
    ``disabled``: a family left out by ``--family``, ``-k`` or ``--case``, or wholly disabled, did
    not run, and a gate that requires it must not pass), and no case of F that ran was ``unsupported``.
    ``--max-unsupported N``: at most N judged cases are ``unsupported``. ``declared`` is
    None when the adapter never started (nothing to check: that is its own error).
    """
    problems: list[str] = []
    if declared is not None:
        by_family = summary.counts_by_family()
        for family in dict.fromkeys(require):
            if family not in declared:
                problems.append(
                    f"coverage: --require {family}, but the adapter does not declare {family} "
                    f"(it declares: {', '.join(declared) or 'nothing'})"
                )
            elif not sum(by_family.get(family, {}).values()) - by_family.get(family, {}).get(VerdictClass.DISABLED, 0):
                problems.append(
                    f"coverage: --require {family}, but no case of {family} ran "
                    f"(left out by --family, -k or --case, or every case disabled): run it"
                )
            elif by_family.get(family, {}).get(VerdictClass.UNSUPPORTED, 0):
                count = by_family[family][VerdictClass.UNSUPPORTED]
                problems.append(f"coverage: --require {family}, but {count} case(s) of {family} were unsupported")
    if max_unsupported is not None:
        count = summary.counts()[VerdictClass.UNSUPPORTED]
        if count > max_unsupported:
            problems.append(f"coverage: {count} unsupported case(s), more than --max-unsupported {max_unsupported}")
    return problems
