"""What a conformance run found: its header, every verdict, what was not run and why.

:func:`account` is the completeness check: every case of the corpus index is
either judged (a verdict, ``disabled`` included) or counted as not run by a
reason. ``family filter`` and ``deselected`` (``-k``/``-m``) are legitimate
reasons; a case of a selected family that was never collected (a collection
error) or collected but never judged (an interrupted run) is a *problem*, and a
problem fails the run like an unexpected verdict or a stale expectations entry.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

from qconform.harness.run.triage import CaseInfo
from qconform.harness.verdicts import CLASS_ORDER, Verdict, VerdictClass

FAMILY_FILTER = "family filter"
DESELECTED = "deselected"
DISABLED = "disabled"
NOT_COLLECTED = "not collected"
INTERRUPTED = "interrupted"
#: cases left after ``-x`` stopped the run at its first unexpected result (not a problem)
STOPPED = "stopped by -x"


@dataclass(frozen=True)
class RunHeader:
    adapter: str
    device: str
    corpus_root: str
    vectors: str
    qconform_version: str
    expectations: str = ""
    families: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {
            "adapter": self.adapter,
            "device": self.device,
            "corpusRoot": self.corpus_root,
            "vectors": self.vectors,
            "qconformVersion": self.qconform_version,
            "expectations": self.expectations,
            "families": list(self.families),
        }


@dataclass
class RunSummary:
    header: RunHeader
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    #: reason -> number of corpus cases not run for it
    not_run: dict[str, int] = field(default_factory=dict)
    #: stale expectations entries, incomplete runs, collection errors
    problems: list[str] = field(default_factory=list)
    #: filled in by the adapter when known (its declared name and profile)
    adapter_config: dict = field(default_factory=dict)
    #: case id -> flags, rules, comment and reproducer (harness/run/triage.py)
    case_info: dict[str, CaseInfo] = field(default_factory=dict)

    def add(self, verdict: Verdict) -> None:
        self.verdicts[verdict.case_id] = verdict

    def unexpected(self) -> list[Verdict]:
        return [v for v in self.verdicts.values() if v.unexpected]

    @property
    def ok(self) -> bool:
        return not self.problems and not self.unexpected()

    def counts(self) -> Counter:
        return Counter(v.cls for v in self.verdicts.values())

    def counts_by_family(self) -> dict[str, Counter]:
        table: dict[str, Counter] = {}
        for verdict in self.verdicts.values():
            table.setdefault(verdict.family, Counter())[verdict.cls] += 1
        return dict(sorted(table.items()))

    def not_run_line(self) -> str:
        """``not run: 12 (family filter 10, disabled 2)``, or ``not run: 0``."""
        counts = dict(self.not_run)
        disabled = self.counts()[VerdictClass.DISABLED]
        if disabled:
            counts[DISABLED] = disabled
        total = sum(counts.values())
        if not total:
            return "not run: 0"
        parts = ", ".join(f"{reason} {n}" for reason, n in counts.items() if n)
        return f"not run: {total} ({parts})"

    def class_line(self) -> str:
        counts = self.counts()
        return ", ".join(f"{counts[c]} {c.value}" for c in CLASS_ORDER if counts[c])


@dataclass(frozen=True)
class Accounting:
    not_run: dict[str, int]
    problems: list[str]


def _shown(ids: list[str], limit: int = 5) -> str:
    more = f" and {len(ids) - limit} more" if len(ids) > limit else ""
    return ", ".join(ids[:limit]) + more


def account(
    corpus_ids: Iterable[str],
    families: Iterable[str],
    collected: Iterable[str],
    deselected: Iterable[str],
    judged: Iterable[str],
    stop_reason: str | None = None,
) -> Accounting:
    """Account for every case of the corpus (see the module docstring).

    ``families`` are the selected families, ``collected`` the case ids that became
    items (after deselection), ``deselected`` those ``-k``/``-m`` removed, ``judged``
    those with a verdict. ``stop_reason`` (``-x``): collected cases without a verdict
    were not run for that reason rather than lost by an interrupted run.
    """
    selected, collected_set = set(families), set(collected)
    deselected_set, judged_set = set(deselected), set(judged)
    reasons: dict[str, list[str]] = {r: [] for r in (FAMILY_FILTER, DESELECTED, NOT_COLLECTED, INTERRUPTED)}
    if stop_reason is not None:
        reasons[stop_reason] = []
    for case_id in corpus_ids:
        if case_id.split("/", 1)[0] not in selected:
            reasons[FAMILY_FILTER].append(case_id)
        elif case_id in deselected_set:
            reasons[DESELECTED].append(case_id)
        elif case_id not in collected_set:
            reasons[NOT_COLLECTED].append(case_id)
        elif case_id not in judged_set:
            reasons[stop_reason or INTERRUPTED].append(case_id)
    problems = []
    if reasons[NOT_COLLECTED]:
        ids = sorted(reasons[NOT_COLLECTED])
        problems.append(f"{len(ids)} case(s) of the index were never collected: {_shown(ids)}")
    if reasons[INTERRUPTED]:
        ids = sorted(reasons[INTERRUPTED])
        problems.append(f"{len(ids)} collected case(s) got no verdict (run interrupted): {_shown(ids)}")
    return Accounting({r: len(ids) for r, ids in reasons.items() if ids}, problems)
