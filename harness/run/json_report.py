"""The machine-readable report of a conformance run (what CI gates on, beside JUnit).

Layout (``"format": "qconform-run-v1"``): the header, ``ok``, counts per class
and per family, ``notRun`` by reason, ``problems``, and one entry per judged
case: ``id``, ``family``, ``class``, ``message``, ``duration`` (seconds of
adapter time attributed to the case), ``unexpected`` and, for a divergence,
``diff`` {``path``, ``expected``, ``got``}.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

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
        "problems": list(summary.problems),
        "cases": [
            {**verdict.to_json(), "unexpected": verdict.unexpected}
            for verdict in sorted(summary.verdicts.values(), key=lambda v: v.case_id)
        ],
    }


def write(path: str | Path, summary: RunSummary) -> None:
    """Write the report to ``path`` atomically (a partial file is never left behind)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(build(summary), indent=1, sort_keys=False) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
