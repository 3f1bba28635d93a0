"""Build the golden vector corpus from the families and write it deterministically.

For each family: call ``family.build()``, add the ``fuzz`` group of its committed
found inputs (:mod:`qconform.generators.findings`), assemble the Wycheproof-style
file object (case ids ``family/group/name``), lint it, validate it against the
schema built by :func:`qconform.generators.schemas.build_family_schema`, and
serialize it with sorted keys, so the bytes depend on nothing but the spec, the
generators and the found inputs (not on dict order, hash seeds or the machine). ``index.json`` pins every case by the
sha256 of its canonical JSON, and a root hash pins the whole corpus.

All outputs of one run are first written to temporary files beside their targets
and then moved into place with ``os.replace``; a failure removes the temporary
files, so no half-written vector file is ever left behind.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

from qconform.generators import atomic_file, registry
from qconform.generators.encoding import canonical_json
from qconform.generators.findings import found_groups
from qconform.generators.lint import duplicate_ids, lint_vector_file
from qconform.generators.registry import FUZZ_GROUP, Case, Family, Group
from qconform.generators.schemas import (
    INDEX_SCHEMA,
    INDEX_SCHEMA_FILE,
    build_family_schema,
    loose_objects,
    schema_file_name,
)
from qconform.generators.validation import (
    INDEX_FILE,
    SCHEMA_DIR,
    VectorFileError,
    load_vector_file,
    read_bytes,
    validate_against,
)
from qconform.spec import SPEC_VERSION

#: Environment variable that overrides the default vectors directory.
VECTORS_ENV = "QCONFORM_VECTORS"


class CorpusError(Exception):
    """A generator produced output that fails the schema or the lint (a generator bug)."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


class OutputError(Exception):
    """An output path cannot be written."""

    def __init__(self, path: Path | str, reason: str) -> None:
        self.path = str(path)
        super().__init__(f"cannot write {path}: {reason}")


def default_vectors_dir() -> Path:
    """``$QCONFORM_VECTORS``, else the ``qconform.vectors`` package directory.

    In the editable development install that package directory is the checkout's
    ``vectors/``, so regenerating updates the committed corpus.
    """
    if os.environ.get(VECTORS_ENV):
        return Path(os.environ[VECTORS_ENV])
    import qconform.vectors

    return Path(qconform.vectors.__file__).parent


def serialize(obj: object) -> bytes:
    """The deterministic bytes of a corpus file: sorted keys, indent 1, ASCII, final newline."""
    return (json.dumps(obj, sort_keys=True, indent=1, ensure_ascii=True) + "\n").encode("ascii")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def case_hash(case: dict) -> str:
    """sha256 of a case's canonical JSON (docs/vector-format.md, "Index")."""
    return sha256_hex(canonical_json(case).encode("ascii"))


def root_hash(case_hashes: dict[str, str]) -> str:
    """sha256 over the lines ``"<id> <sha256>\\n"`` in sorted id order."""
    lines = "".join(f"{cid} {case_hashes[cid]}\n" for cid in sorted(case_hashes))
    return sha256_hex(lines.encode("ascii"))


def _case_json(family: str, group: Group, case: Case) -> dict:
    return {
        "id": f"{family}/{group.name}/{case.name}",
        "comment": case.comment,
        "flags": list(case.flags),
        "rules": list(case.rules),
        "result": case.result,
        "input": case.input,
        "expected": case.expected,
    }


def assemble_file(family: Family, groups: Iterable[Group]) -> dict:
    """The vector file object of ``family`` holding ``groups``."""
    test_groups = [
        {
            "group": group.name,
            "description": group.description,
            "rules": list(group.rules),
            "tests": [_case_json(family.name, group, case) for case in group.tests],
        }
        for group in groups
    ]
    return {
        "family": family.name,
        "schema": schema_file_name(family.name),
        "specVersion": SPEC_VERSION,
        "generator": f"qconform.generators.families.{family.name}",
        "rules": list(family.rules),
        "numberOfTests": sum(len(g["tests"]) for g in test_groups),
        "notes": {flag: note.to_json() for flag, note in family.notes.items()},
        "testGroups": test_groups,
    }


def cases_of(file_obj: dict) -> dict[str, dict]:
    """Case id -> case object of one vector file object."""
    return {case["id"]: case for group in file_obj["testGroups"] for case in group["tests"]}


@dataclass(frozen=True)
class FamilyOutput:
    """One family's generated (or committed) file, its schema and their hashes."""

    name: str
    file_bytes: bytes
    schema_bytes: bytes
    case_hashes: dict[str, str]

    def index_entry(self) -> dict:
        return {
            "file": f"{self.name}.json",
            "schema": f"{SCHEMA_DIR}/{schema_file_name(self.name)}",
            "count": len(self.case_hashes),
            "sha256": sha256_hex(self.file_bytes),
            "schemaSha256": sha256_hex(self.schema_bytes),
        }


def family_groups(family: Family) -> list[Group]:
    """The groups of ``family``'s file: those its ``build`` yields, then the ``fuzz`` group
    of its committed found inputs, if any (:mod:`qconform.generators.findings`).

    A malformed found-inputs file raises :class:`~qconform.generators.findings.FoundFileError`.
    """
    groups = list(family.build())
    if any(group.name == FUZZ_GROUP for group in groups):
        raise CorpusError([f"{family.name}: build() yields the group {FUZZ_GROUP!r}, which holds found inputs"])
    return groups + found_groups(family)


def build_family(family: Family) -> tuple[FamilyOutput, dict]:
    """Build, lint, validate and serialize one family; return its output and file object.

    Raises :class:`CorpusError` listing every problem of the generated file.
    """
    schema = build_family_schema(family)
    obj = assemble_file(family, family_groups(family))
    problems = [f"schema {path} accepts unknown properties" for path in loose_objects(schema)]
    try:
        validate_against(Path(f"{family.name}.json"), obj, schema)
    except VectorFileError as exc:
        problems.append(str(exc))
    else:
        problems += [f"{family.name}.json: {p}" for p in lint_vector_file(obj)]
    if problems:
        raise CorpusError(problems)
    output = FamilyOutput(
        name=family.name,
        file_bytes=serialize(obj),
        schema_bytes=serialize(schema),
        case_hashes={cid: case_hash(case) for cid, case in cases_of(obj).items()},
    )
    return output, obj


def build_families(families: Sequence[Family], progress: Callable[[str], None] | None = None) -> list[FamilyOutput]:
    """Build ``families`` in order; check case ids are unique across them."""
    outputs, objects = [], []
    for family in families:
        output, obj = build_family(family)
        outputs.append(output)
        objects.append((f"{family.name}.json", obj))
        if progress is not None:
            progress(family.name)
    duplicates = duplicate_ids(objects)
    if duplicates:
        raise CorpusError(duplicates)
    return outputs


def committed_output(root: Path, name: str) -> FamilyOutput | None:
    """The committed file of family ``name`` under ``root`` (validated), or None if absent."""
    path = root / f"{name}.json"
    if not path.exists():
        return None
    data = read_bytes(path)
    obj = load_vector_file(path, data=data)
    schema = root / SCHEMA_DIR / schema_file_name(name)
    return FamilyOutput(
        name=name,
        file_bytes=data,
        schema_bytes=read_bytes(schema),
        case_hashes={cid: case_hash(case) for cid, case in cases_of(obj).items()},
    )


def build_index(outputs: Iterable[FamilyOutput]) -> dict:
    """The ``index.json`` object over ``outputs``."""
    outputs = sorted(outputs, key=lambda o: o.name)
    cases = {cid: h for output in outputs for cid, h in output.case_hashes.items()}
    index = {
        "specVersion": SPEC_VERSION,
        "families": {output.name: output.index_entry() for output in outputs},
        "cases": cases,
        "root": root_hash(cases),
    }
    validate_against(Path(INDEX_FILE), index, INDEX_SCHEMA)
    return index


def corpus_files(root: Path, outputs: Sequence[FamilyOutput], index: dict) -> dict[Path, bytes]:
    """Path -> bytes of everything a run writes: the built families, their schemas and the index."""
    files: dict[Path, bytes] = {}
    for output in outputs:
        files[root / f"{output.name}.json"] = output.file_bytes
        files[root / SCHEMA_DIR / schema_file_name(output.name)] = output.schema_bytes
    files[root / SCHEMA_DIR / INDEX_SCHEMA_FILE] = serialize(INDEX_SCHEMA)
    files[root / INDEX_FILE] = serialize(index)
    return files


@dataclass(frozen=True)
class Plan:
    """What a generation run produces: the built families and every file it writes."""

    outputs: list[FamilyOutput]
    #: the index over the built families and, for a partial run, the committed others
    index: dict
    files: dict[Path, bytes]

    @property
    def cases(self) -> int:
        return sum(len(output.case_hashes) for output in self.outputs)


def plan(
    root: Path,
    families: Sequence[Family],
    partial: bool,
    progress: Callable[[str], None] | None = None,
) -> Plan:
    """Build ``families`` and lay out the files a generation into ``root`` writes.

    When ``partial``, the index also lists the other registered families from their
    committed files under ``root``; a full run lists only ``families``.
    """
    outputs = build_families(families, progress)
    others: list[FamilyOutput] = []
    if partial:
        built = {f.name for f in families}
        for name in registry.family_names():
            if name not in built and (committed := committed_output(root, name)) is not None:
                others.append(committed)
    index = build_index([*outputs, *others])
    return Plan(outputs, index, corpus_files(root, outputs, index))


def write_atomically(files: dict[Path, bytes]) -> list[Path]:
    """Write every file with :func:`qconform.generators.atomic_file.write_files`; return the changed paths.

    Files whose bytes are already right are left alone. On failure every temporary
    file is removed and :class:`OutputError` names the path that failed.
    """
    try:
        return atomic_file.write_files(files, skip_unchanged=True)
    except atomic_file.WriteError as exc:
        raise OutputError(exc.path, exc.reason) from None


def generate(
    root: Path,
    families: Sequence[Family] | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[Plan, list[Path]]:
    """Generate ``families`` (default: all registered) into ``root``.

    Returns the plan that was written and the paths whose bytes changed. A subset
    regenerates only those families' files and schemas and updates the index:
    cases the generators no longer yield vanish from both, and the other
    families' files are left untouched.
    """
    partial = families is not None
    if families is None:
        families = registry.all_families()
    written = plan(Path(root), families, partial, progress)
    atomic_file.remove_stale_temporaries([Path(root), Path(root) / SCHEMA_DIR])  # left by a killed run
    return written, write_atomically(written.files)
