"""Committed fuzz findings: the inputs of ``generators/found/<family>.json``.

``qconform fuzz --record`` appends a finding's input to its family's file (one JSON
list of entries ``{id, comment, flags, rules?, input}``, no ``expected``), and
``qconform generate`` turns a family's entries into its ``fuzz`` group: each input
answered by the family's own ``solve``, so the drift check stays as honest for
found cases as for generated ones. A file is validated when it is loaded, against
:func:`qconform.generators.schemas.build_found_schema` and the value lint; a bad
one raises :class:`FoundFileError`, whose one-line message names the file and the
entry. See docs/fuzzing.md, "Committing a finding".
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

from qconform.generators.lint import lint_values
from qconform.generators.registry import FUZZ_GROUP, Case, Family, Group
from qconform.generators.schemas import build_found_schema
from qconform.generators.validation import (
    VectorFileError,
    first_violation,
    parse_json,
    read_bytes,
    shorten,
)

#: Environment variable that overrides the default found-inputs directory.
FOUND_ENV = "QCONFORM_FOUND"
#: The fields of an entry, in file order (``rules`` may be left out).
ENTRY_KEYS = ("id", "comment", "flags", "rules", "input")


class FoundFileError(VectorFileError):
    """A found-inputs file is unreadable, malformed, or names no answerable family."""


def default_found_dir() -> Path:
    """``$QCONFORM_FOUND``, else ``found/`` beside the generators package.

    In the editable development install that is the checkout's ``generators/found/``.
    """
    if os.environ.get(FOUND_ENV):
        return Path(os.environ[FOUND_ENV])
    return Path(__file__).parent / "found"


def found_path(family_name: str, found_dir: Path | None = None) -> Path:
    return (default_found_dir() if found_dir is None else Path(found_dir)) / f"{family_name}.json"


def _entry_label(entries: object, json_path: str) -> str:
    """`` (entry '<id>')`` for a path inside an entry that has a string id, else ''."""
    if not isinstance(entries, list) or not json_path.startswith("$["):
        return ""
    index = int(json_path[2 : json_path.index("]")])
    entry = entries[index] if index < len(entries) else None
    entry_id = entry.get("id") if isinstance(entry, dict) else None
    return f" (entry {entry_id!r})" if isinstance(entry_id, str) else ""


def check_entries(path: Path, family: Family, entries: object) -> list[dict]:
    """Validate parsed ``entries`` of ``path`` (schema, value lint, unique ids); return them."""
    error = first_violation(entries, build_found_schema(family))
    if error is not None:
        label = _entry_label(entries, error.json_path)
        raise FoundFileError(path, error.json_path, shorten(error.message) + label)
    assert isinstance(entries, list)  # the found-file schema admits only a list of entry objects
    first_at: dict[str, int] = {}
    for n, entry in enumerate(entries):
        problems = lint_values(entry["input"], f"$[{n}].input")
        if problems:
            raise FoundFileError(
                path, problems[0].path, shorten(problems[0].message) + _entry_label(entries, f"$[{n}]")
            )
        if entry["id"] in first_at:
            raise FoundFileError(
                path, f"$[{n}].id", f"duplicate id {entry['id']!r} (first at $[{first_at[entry['id']]}])"
            )
        first_at[entry["id"]] = n
    if entries and family.solve is None:
        raise FoundFileError(path, "$", f"family {family.name} has no solve(input) to answer its found inputs")
    return entries


def load_found(family: Family, found_dir: Path | None = None) -> list[dict]:
    """The validated entries of ``family``'s found-inputs file; [] when there is none."""
    path = found_path(family.name, found_dir)
    if not path.exists():
        return []
    try:
        entries = parse_json(path, read_bytes(path))
    except VectorFileError as exc:
        raise FoundFileError(exc.path, exc.json_path, exc.detail) from None
    return check_entries(path, family, entries)


def found_case(family: Family, entry: dict) -> Case:
    """The case of one entry: its input, and ``expected`` as the family's ``solve`` answers it.

    ``rules`` default to the family's rules; the result is ``invalid`` when the spec
    refuses the input, else ``valid``.
    """
    assert family.solve is not None  # check_entries refuses entries of a family without solve
    expected = family.solve(entry["input"])
    return Case(
        name=entry["id"].split("/", 2)[2],
        comment=entry["comment"],
        rules=tuple(entry.get("rules", family.rules)),
        input=entry["input"],
        expected=expected,
        flags=tuple(entry["flags"]),
        result="invalid" if "error" in expected else "valid",
    )


def found_group(family: Family, entries: Sequence[dict]) -> Group:
    """The ``fuzz`` group of ``entries``: one case each, in file order."""
    tests = [found_case(family, entry) for entry in entries]
    cited = {rule for case in tests for rule in case.rules}
    return Group(
        FUZZ_GROUP,
        f"Inputs found by `qconform fuzz` (generators/found/{family.name}.json); expected is the spec's solve.",
        tuple(rule for rule in family.rules if rule in cited),
        tests,
    )


def found_groups(family: Family, found_dir: Path | None = None) -> list[Group]:
    """``[the fuzz group]`` of a family with committed found inputs, else ``[]``."""
    entries = load_found(family, found_dir)
    return [found_group(family, entries)] if entries else []


def entry_of(vector: dict) -> dict:
    """The entry of a found test object (``qconform.harness.fuzz.driver.vector_of``): no result, no expected."""
    return {key: vector[key] for key in ENTRY_KEYS if key in vector}


def serialize_entries(entries: Sequence[dict]) -> bytes:
    """The bytes of a found-inputs file: indent 1, ASCII, entry keys in :data:`ENTRY_KEYS` order."""
    ordered = [{key: entry[key] for key in ENTRY_KEYS if key in entry} for entry in entries]
    return (json.dumps(ordered, indent=1, ensure_ascii=True) + "\n").encode("ascii")


def with_entry(family: Family, entry: dict, found_dir: Path | None = None) -> tuple[Path, bytes | None]:
    """The family's found-inputs file with ``entry`` appended: its path and new bytes,
    or None for the bytes when an entry with that id is already there (idempotent).

    The existing file and the result are both validated (:class:`FoundFileError`).
    """
    path = found_path(family.name, found_dir)
    entries = load_found(family, found_dir)
    if any(old["id"] == entry["id"] for old in entries):
        return path, None
    return path, serialize_entries(check_entries(path, family, [*entries, entry]))
