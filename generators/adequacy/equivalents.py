"""``spec/equivalent_mutants.toml``: the surviving mutants that no committed vector can kill.

Two lists, each entry with the mutant's stable ``id`` (docs/adequacy.md) and a ``reason``:

* ``[[mutant]]``, **equivalent**: no input of the spec's domain can tell the mutant
  from the spec (an internal invariant, data no solve reads, a value overwritten);
* ``[[unreachable]]``, **unreachable through the corpus**: only an input that the
  vector formats cannot carry (the family schema excludes it, or no format has a field
  for it) tells it apart; the behaviour is real, but no vector can pin it. Shown
  apart in the rate (docs/adequacy.md, "Equivalent and unreachable mutants").

An entry of either list is *stale*, and fails the run like a stale expectations
entry, when its mutant is no longer generated (the code changed under it) or when a
run kills it (then it was not equivalent, or a vector now exercises it).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

EQUIVALENTS_FILE = "equivalent_mutants.toml"


class EquivalentsError(Exception):
    """The equivalents file is unreadable or malformed (one line, with the file's path)."""


#: the two lists: TOML table name -> the status a listed survivor gets
KINDS = {"mutant": "equivalent", "unreachable": "unreachable"}


@dataclass(frozen=True)
class Equivalent:
    id: str
    reason: str
    kind: str = "equivalent"  # or "unreachable" (through the corpus)


def default_path() -> Path:
    from qconform.generators.adequacy.imports import package_dir

    return package_dir("qconform.spec") / EQUIVALENTS_FILE


def load(path: Path) -> dict[str, Equivalent]:
    """Mutant id -> entry; EquivalentsError for a malformed file, a duplicate id or an empty reason."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise EquivalentsError(f"{path}: {error}") from None
    unknown = set(data) - set(KINDS)
    if unknown:
        raise EquivalentsError(f"{path}: unknown top-level key(s) {', '.join(sorted(unknown))}")
    out: dict[str, Equivalent] = {}
    for table, kind in KINDS.items():
        for number, entry in enumerate(data.get(table, []), start=1):
            if not isinstance(entry, dict) or set(entry) != {"id", "reason"}:
                raise EquivalentsError(f"{path}: {table} entry {number} must have exactly the keys id and reason")
            ident, reason = entry["id"], entry["reason"]
            if not isinstance(ident, str) or not isinstance(reason, str) or not reason.strip():
                raise EquivalentsError(f"{path}: {table} entry {number} needs a string id and a non-empty reason")
            if ident in out:
                raise EquivalentsError(f"{path}: mutant {ident!r} is listed twice")
            out[ident] = Equivalent(ident, reason.strip(), kind)
    return out


def module_of(ident: str) -> str:
    """The spec module an entry's id names (``"sampling"`` of ``"sampling:first_above:..."``)."""
    return ident.split(":", 1)[0]
