"""Per-adapter expectations files (BoGo's shim config, with rustls' staleness check).

```toml
[disabled]                       # glob -> reason: never sent to the adapter
"verification_round/production_vocab/*" = "too slow on the CPU interpreter"

[xfail]                          # glob -> reason: known not to pass
"allocation_dense/near_ties/fp64-flip-1" = "FP64 allocation, issue #12"
```

Keys are ``fnmatch`` globs over case ids (an exact id is a glob that matches
itself). The file is strict:

* a listed case that passes (or diverges only inside its declared precision
  margins) is ``xpass``, and an ``xpass`` fails the run: delete the entry;
* an entry that matches no case of the corpus, or an ``xfail`` entry whose every
  case is also disabled, is *stale*, and a stale entry fails the run.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Iterable

from qconform.harness.verdicts import Verdict, VerdictClass

__all__ = [
    "SECTIONS",
    "Expectations",
    "ExpectationsError",
]

SECTIONS = ("disabled", "xfail")


class ExpectationsError(ValueError):
    """The expectations file is unreadable or does not follow the format."""


def _first_match(globs: dict[str, str], case_id: str) -> tuple[str, str] | None:
    for glob, reason in globs.items():
        if fnmatchcase(case_id, glob):
            return glob, reason
    return None


@dataclass(frozen=True)
class Expectations:
    disabled: dict[str, str] = field(default_factory=dict)
    xfail: dict[str, str] = field(default_factory=dict)
    #: where the entries came from, for messages ("" when there is no file)
    source: str = ""

    @classmethod
    def parse(cls, text: str, source: str = "<string>") -> "Expectations":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ExpectationsError(f"{source}: not valid TOML: {exc}") from None
        unknown = sorted(set(data) - set(SECTIONS))
        if unknown:
            raise ExpectationsError(f"{source}: unknown key(s) {unknown}; only tables {list(SECTIONS)} are allowed")
        sections: dict[str, dict[str, str]] = {}
        for name in SECTIONS:
            table = data.get(name, {})
            if not isinstance(table, dict):
                raise ExpectationsError(f"{source}: [{name}] must be a table of glob = reason")
            for glob, reason in table.items():
                if not isinstance(reason, str) or not reason.strip():
                    raise ExpectationsError(f"{source}: [{name}] {glob!r} needs a non-empty reason string")
            sections[name] = dict(table)
        return cls(sections["disabled"], sections["xfail"], source)

    @classmethod
    def load(cls, path: str | Path) -> "Expectations":
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ExpectationsError(f"cannot read expectations file {path}: {exc.strerror}") from None
        return cls.parse(text, str(path))

    def disabled_reason(self, case_id: str) -> str | None:
        """The reason a disabled glob gives for ``case_id``, else None."""
        if not self.disabled:  # no file, or no [disabled] table: asked per case, so no walk
            return None
        match = _first_match(self.disabled, case_id)
        return None if match is None else match[1]

    def xfail_reason(self, case_id: str) -> str | None:
        """The reason an xfail entry gives for ``case_id`` (None if disabled or unlisted)."""
        if not self.xfail:
            return None
        if self.disabled_reason(case_id) is not None:
            return None
        match = _first_match(self.xfail, case_id)
        return None if match is None else match[1]

    def apply(self, verdict: Verdict) -> Verdict:
        """Turn the verdict on an xfail-listed case into ``xfail`` or ``xpass``.

        ``pass`` and ``precision`` become ``xpass`` (the entry is out of date);
        ``fail`` and ``error`` become ``xfail``; ``unsupported`` stays as it is.
        """
        reason = self.xfail_reason(verdict.case_id)
        if reason is None:
            return verdict
        if verdict.cls in (VerdictClass.PASS, VerdictClass.PRECISION):
            how = "passed" if verdict.cls is VerdictClass.PASS else "diverged only within precision margins"
            return verdict.with_class(
                VerdictClass.XPASS,
                f"listed as xfail ({reason}) but {how}: remove the entry from {self.source or 'the expectations'}",
            )
        if verdict.cls in (VerdictClass.FAIL, VerdictClass.ERROR):
            return verdict.with_class(VerdictClass.XFAIL, f"expected {verdict.cls.value} ({reason}): {verdict.message}")
        return verdict

    def stale_entries(self, corpus_ids: Iterable[str]) -> list[str]:
        """One message per entry that can never apply to the corpus ``corpus_ids``."""
        ids = list(corpus_ids)
        problems = []
        for glob in self.disabled:
            if not any(fnmatchcase(case_id, glob) for case_id in ids):
                problems.append(f"stale [disabled] entry {glob!r} in {self.source}: matches no case")
        for glob in self.xfail:
            matched = [case_id for case_id in ids if fnmatchcase(case_id, glob)]
            if not matched:
                problems.append(f"stale [xfail] entry {glob!r} in {self.source}: matches no case")
            elif all(self.disabled_reason(case_id) is not None for case_id in matched):
                problems.append(f"stale [xfail] entry {glob!r} in {self.source}: every case it matches is disabled")
        return problems
