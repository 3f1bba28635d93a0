"""The machine-readable report of a conformance run (what CI gates on, beside JUnit).

Layout (``"format": "qconform-run-v1"``): the header, ``ok``, counts per class
and per family, ``notRun`` by reason, ``coverage`` (``supported`` of ``judged``
cases, harness/run/gate.py), ``problems``, and one entry per judged
case: ``id``, ``family``, ``class``, ``message``, ``duration`` (seconds of
adapter time attributed to the case), ``unexpected`` and, for a divergence,
``diff`` {``path``, ``expected``, ``got``}; and the case's ``flags``, ``rules``,
``comment`` and ``reproducer`` (harness/run/triage.py).
"""

from __future__ import annotations

import json
from pathlib import Path

from qconform.generators import atomic_file
from qconform.harness.run.gate import supported_share
from qconform.harness.run.summary import RunSummary
from qconform.harness.verdicts import CLASS_ORDER

FORMAT = "qconform-run-v1"


def build(summary: RunSummary) -> dict:
    counts = summary.counts()
    return {
        "format": FORMAT,
        **summary.header.to_json(),
        "adapterConfig": summary.adapter_config,
        "ok": summary.ok,
        "counts": {c.value: counts[c] for c in CLASS_ORDER},
        "families": {
            family: {c.value: fam_counts[c] for c in CLASS_ORDER if fam_counts[c]}
            for family, fam_counts in summary.counts_by_family().items()
        },
        "notRun": dict(summary.not_run),
        "coverage": dict(zip(("supported", "judged"), supported_share(summary))),
        "problems": list(summary.problems),
        "cases": [
            {
                **verdict.to_json(),
                "unexpected": verdict.unexpected,
                **(summary.case_info[verdict.case_id].to_json() if verdict.case_id in summary.case_info else {}),
            }
            for verdict in sorted(summary.verdicts.values(), key=lambda v: v.case_id)
        ],
    }


def write(path: str | Path, summary: RunSummary) -> None:
    """Write the report to ``path`` atomically (qconform.generators.atomic_file; WriteError on failure)."""
    atomic_file.write_text(path, json.dumps(build(summary), indent=1, sort_keys=False) + "\n")
