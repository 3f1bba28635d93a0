"""From a red line to the bug: what a failure line carries, and rerunning failures.

* :class:`CaseInfo`: a case's ``flags``, ``rules`` and ``comment``, carried by every
  verdict line and JSON entry, with the ``reproducer``: one ``qconform run``
  command line that reruns just that case (``--case ID``) against the same
  adapter, device, corpus, expectations file and timeout.
* :class:`LastFailed`: the cases of each adapter on each corpus that were
  unexpected when last judged, for ``qconform run --lf``. Kept in the kit's cache directory
  (``$QCONFORM_CACHE``, :func:`qconform.generators.cache.cache_dir`), never in the working
  directory.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from qconform.generators import atomic_file
from qconform.generators.cache import cache_dir

LAST_FAILED_FILE = "last-failed.json"


@dataclass(frozen=True)
class CaseInfo:
    """What a person needs beside the verdict: the case's flags, rules, comment, and how to rerun it."""

    flags: tuple[str, ...] = ()
    rules: tuple[str, ...] = ()
    comment: str = ""
    reproducer: str = ""

    def to_json(self) -> dict:
        return {
            "flags": list(self.flags),
            "rules": list(self.rules),
            "comment": self.comment,
            "reproducer": self.reproducer,
        }

    @classmethod
    def from_json(cls, obj: dict) -> "CaseInfo":
        return cls(
            tuple(obj.get("flags", ())), tuple(obj.get("rules", ())), obj.get("comment", ""), obj.get("reproducer", "")
        )

    def lines(self) -> list[str]:
        """The indented lines under a verdict line."""
        out = []
        meta = [
            f"flags: {', '.join(self.flags)}" if self.flags else "",
            f"rules: {', '.join(self.rules)}" if self.rules else "",
            f"comment: {self.comment}" if self.comment else "",
        ]
        if any(meta):
            out.append("; ".join(m for m in meta if m))
        if self.reproducer:
            out.append(f"rerun: {self.reproducer}")
        return out


@dataclass(frozen=True)
class RerunContext:
    """The options of a run that a reproducer repeats (None/empty: the default)."""

    adapter: str
    device: str = "cpu"
    vectors: str = ""
    expectations: str = ""
    timeout: float | None = None
    start_timeout: float | None = None

    def command(self, case_id: str) -> str:
        from qconform.generators.corpus import default_vectors_dir

        args = ["qconform", "run", "--adapter", self.adapter]
        if self.device != "cpu":
            args += ["--device", self.device]
        if self.vectors and Path(self.vectors).resolve() != default_vectors_dir().resolve():
            args += ["--vectors", self.vectors]
        if self.expectations:
            args += ["--expectations", self.expectations]
        if self.timeout is not None:
            args += ["--timeout", f"{self.timeout:g}"]
        if self.start_timeout is not None:
            args += ["--start-timeout", f"{self.start_timeout:g}"]
        return shlex.join([*args, "--case", case_id])


class LastFailed:
    """``{"<corpus dir>\\t<adapter>": [case ids]}`` in the cache directory."""

    def __init__(self, directory: Path | None = None) -> None:
        self.path = (directory or cache_dir()) / LAST_FAILED_FILE

    @staticmethod
    def key(vectors: str, adapter: str) -> str:
        return f"{vectors}\t{adapter}"

    def _load(self) -> dict:
        try:
            obj = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return obj if isinstance(obj, dict) else {}

    def get(self, vectors: str, adapter: str) -> list[str] | None:
        """The ids recorded for this adapter and corpus; None when no run was recorded."""
        ids = self._load().get(self.key(vectors, adapter))
        return [i for i in ids if isinstance(i, str)] if isinstance(ids, list) else None

    def record(self, vectors: str, adapter: str, judged: Iterable[str], unexpected: Iterable[str]) -> None:
        """Update the record with a finished run (as pytest's cache does): the cases it judged
        leave the record unless they were unexpected again; cases it did not run keep their
        entry, so a ``--lf`` or ``--case`` rerun forgets only what it fixed. Best effort: a
        cache that cannot be written is skipped."""
        obj = self._load()
        key = self.key(vectors, adapter)
        kept = set(self.get(vectors, adapter) or ()) - set(judged)
        obj[key] = sorted(kept | set(unexpected))
        try:
            atomic_file.write_text(self.path, json.dumps(obj, indent=1, sort_keys=True) + "\n")
        except atomic_file.WriteError:
            pass
