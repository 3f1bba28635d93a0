"""Drift check: compare the committed corpus with a fresh generation, case by case.

The fresh corpus is regenerated in memory (nothing is written). Each difference
is one :class:`Drift`: a case whose JSON changed (``drifted``), a case the
generators yield that is not committed (``missing``), a committed case they no
longer yield (``orphan``), and the same three kinds for whole files (schemas,
the index, vector files, and vector-file bytes outside the cases).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from qconform.generators import registry
from qconform.generators.accumulated import EXPECTED_FILE, EXPECTED_SCHEMA_FILE
from qconform.generators.corpus import FamilyOutput, case_hash, cases_of, plan
from qconform.generators.registry import Family
from qconform.generators.schemas import INDEX_SCHEMA_FILE, schema_file_name
from qconform.generators.validation import (
    INDEX_FILE,
    SCHEMA_DIR,
    check_vector_object,
    load_json_file,
    parse_json,
)


@dataclass(frozen=True)
class Drift:
    """One difference between the committed and the regenerated corpus."""

    kind: str  # "drifted" | "missing" | "orphan"
    what: str  # a case id, or a file path relative to the vectors directory
    #: for a drifted case, its first differing field with the committed and the regenerated value
    detail: str = ""

    def __str__(self) -> str:
        text = f"{self.kind:<8} {self.what}"
        return f"{text}: {self.detail}" if self.detail else text


@dataclass(frozen=True)
class CheckResult:
    drifts: list[Drift]
    families: int
    cases: int


def _committed_cases(root: Path, output: FamilyOutput, data: bytes) -> dict[str, dict]:
    """Case id -> case object of a committed vector file (validated, else VectorFileError).

    It is validated against its committed schema, or the fresh one when none is committed.
    """
    path = root / f"{output.name}.json"
    schema_path = root / SCHEMA_DIR / schema_file_name(output.name)
    if schema_path.exists():
        schema = load_json_file(schema_path)
    else:
        schema = parse_json(schema_path, output.schema_bytes)
    obj = check_vector_object(path, parse_json(path, data), schema)
    return cases_of(obj)


#: ``describe(committed case, regenerated case) -> str``: the one line that says how a drifted case changed
Describe = Callable[[dict, dict], str]


def _case_drift(committed: dict[str, str], fresh: dict[str, str]) -> list[Drift]:
    drifts = [Drift("missing", cid) for cid in fresh if cid not in committed]
    drifts += [Drift("orphan", cid) for cid in committed if cid not in fresh]
    drifts += [Drift("drifted", cid) for cid in fresh if cid in committed and committed[cid] != fresh[cid]]
    return sorted(drifts, key=lambda d: d.what)


def _family_drift(root: Path, output: FamilyOutput, describe: Describe | None) -> list[Drift]:
    """Per-case drift of one family's vector file."""
    rel = f"{output.name}.json"
    path = root / rel
    if not path.exists():
        return [Drift("missing", rel)] + _case_drift({}, output.case_hashes)
    data = path.read_bytes()
    if data == output.file_bytes:
        return []
    committed = _committed_cases(root, output, data)
    drifts = _case_drift({cid: case_hash(case) for cid, case in committed.items()}, output.case_hashes)
    if describe is not None and any(d.kind == "drifted" for d in drifts):
        fresh = cases_of(parse_json(path, output.file_bytes))
        drifts = [
            Drift(d.kind, d.what, describe(committed[d.what], fresh[d.what])) if d.kind == "drifted" else d
            for d in drifts
        ]
    return drifts or [Drift("drifted", f"{rel} (outside its cases: header, notes, groups or formatting)")]


def _file_drift(root: Path, path: Path, data: bytes) -> list[Drift]:
    rel = path.relative_to(root).as_posix()
    if not path.exists():
        return [Drift("missing", rel)]
    return [] if path.read_bytes() == data else [Drift("drifted", rel)]


def _orphan_files(root: Path, names: Sequence[str]) -> list[Drift]:
    """Vector and schema files under ``root`` that no registered family produces."""
    keep = {f"{n}.json" for n in names} | {INDEX_FILE, EXPECTED_FILE}
    keep_schemas = {schema_file_name(n) for n in names} | {INDEX_SCHEMA_FILE, EXPECTED_SCHEMA_FILE}
    drifts = [Drift("orphan", p.name) for p in sorted(root.glob("*.json")) if p.name not in keep]
    drifts += [
        Drift("orphan", f"{SCHEMA_DIR}/{p.name}")
        for p in sorted((root / SCHEMA_DIR).glob("*.json"))
        if p.name not in keep_schemas
    ]
    return drifts


def check(
    root: Path,
    families: Sequence[Family] | None = None,
    progress: Callable[[str], None] | None = None,
    describe: Describe | None = None,
) -> CheckResult:
    """Compare the corpus under ``root`` with a fresh generation of ``families``.

    With a subset of families only their files, their schemas and the index are
    compared; with all families (the default), files under ``root`` that no
    registered family produces are orphans too. A committed vector file that is
    not valid JSON, or violates its schema or the lint, raises VectorFileError.
    ``describe`` says how each drifted case changed (the command line passes the
    harness's decoded first difference); without it a drift names the case only.
    """
    root = Path(root)
    partial = families is not None
    if families is None:
        families = registry.all_families()
    fresh = plan(root, families, partial, progress)
    drifts: list[Drift] = []
    for output in fresh.outputs:
        drifts += _family_drift(root, output, describe)
    for path, data in fresh.files.items():
        if path.parent != root or path.name == INDEX_FILE:
            drifts += _file_drift(root, path, data)
    if not partial:
        drifts += _orphan_files(root, [f.name for f in families])
    return CheckResult(drifts, len(fresh.outputs), fresh.cases)
