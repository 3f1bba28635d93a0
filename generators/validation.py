"""Loading and validating committed vector files (used by ``generate --check`` and the harness).

A vector file ``<dir>/<family>.json`` is checked in three steps: it parses as
JSON, it validates against ``<dir>/schemas/<family>.schema.json``, and it passes
the lint of :mod:`qconform.generators.lint`. Any failure raises
:class:`VectorFileError`, whose one-line message names the file and the JSON
path, e.g. ``vectors/allocation_dense.json: $.testGroups[2].tests[5].input: ...``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match, relevance

from qconform.generators.cache import record_validated, validation_key, was_validated
from qconform.generators.lint import lint_vector_file
from qconform.generators.schemas import INDEX_SCHEMA, schema_file_name

INDEX_FILE = "index.json"
SCHEMA_DIR = "schemas"
_MESSAGE_LIMIT = 160


class VectorFileError(ValueError):
    """A committed vector, schema or index file is unreadable, malformed or inconsistent."""

    def __init__(self, path: Path | str, json_path: str, detail: str) -> None:
        self.path = str(path)
        self.json_path = json_path
        self.detail = detail
        super().__init__(f"{self.path}: {json_path}: {detail}")


def shorten(text: str) -> str:
    """One line, short: schema messages quote whole instances (base64 rows)."""
    text = " ".join(text.split())
    return text if len(text) <= _MESSAGE_LIMIT else text[: _MESSAGE_LIMIT - 3] + "..."


def read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise VectorFileError(path, "$", f"cannot read: {exc.strerror or exc}") from None


def parse_json(path: Path, data: bytes) -> Any:
    """Parse ``data`` (the bytes of ``path``); bad JSON names its line and column."""
    try:
        return json.loads(data)
    except UnicodeDecodeError as exc:
        raise VectorFileError(path, "$", f"not UTF-8 text: {exc.reason}") from None
    except json.JSONDecodeError as exc:
        raise VectorFileError(path, "$", f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None


#: Keywords whose failure right at a oneOf branch's object says "not this branch".
_DISCRIMINATORS = ("const", "enum", "type")


def _most_relevant(errors: Iterable[ValidationError]) -> ValidationError | None:
    """The error to report: inside a ``oneOf``/``anyOf``, the one branch the instance
    was evidently meant for (no discriminator such as ``representation`` failed),
    else jsonschema's own best match."""
    error = max(errors, key=relevance, default=None)
    while error is not None and error.context:
        branches: dict[Any, list[ValidationError]] = {}
        for sub in error.context:
            branches.setdefault(sub.relative_schema_path[0], []).append(sub)
        plausible = [
            subs
            for subs in branches.values()
            if not any(e.validator in _DISCRIMINATORS and len(e.relative_path) <= 1 for e in subs)
        ]
        if len(plausible) != 1:
            return best_match([error])
        error = max(plausible[0], key=relevance)
    return error


def first_violation(obj: Any, schema: dict) -> ValidationError | None:
    """The most relevant violation of ``schema`` by ``obj``, or None when it validates."""
    return _most_relevant(Draft202012Validator(schema).iter_errors(obj))


def validate_against(path: Path, obj: Any, schema: dict) -> None:
    """Raise :class:`VectorFileError` at the most relevant schema violation, if any."""
    error = first_violation(obj, schema)
    if error is not None:
        raise VectorFileError(path, error.json_path, shorten(error.message))


def load_json_file(path: Path) -> Any:
    return parse_json(path, read_bytes(path))


def check_vector_object(path: Path, obj: Any, schema: dict) -> dict:
    """Schema-validate and lint a parsed vector file; return it."""
    validate_against(path, obj, schema)
    problems = lint_vector_file(obj)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise VectorFileError(path, problems[0].path, shorten(problems[0].message) + more)
    return obj


def schema_path(vector_path: Path) -> Path:
    """``<dir>/schemas/<family>.schema.json`` for ``<dir>/<family>.json``."""
    return vector_path.parent / SCHEMA_DIR / schema_file_name(vector_path.stem)


def load_vector_file(path: Path | str, schema: dict | None = None, data: bytes | None = None) -> dict:
    """Read, parse, schema-validate and lint one vector file.

    ``schema`` defaults to the committed schema beside the file; ``data`` may
    carry the file's bytes when the caller has already read them. Bytes that passed
    against the same schema and checks before are not checked again
    (:mod:`qconform.generators.cache`).
    """
    path = Path(path)
    data = read_bytes(path) if data is None else data
    obj = parse_json(path, data)
    against = load_json_file(schema_path(path)) if schema is None else schema
    key = validation_key(data, against)
    if not was_validated(key):  # the same bytes against the same schema and checks pass again
        check_vector_object(path, obj, against)
        record_validated(key)
    return obj


def load_index(root: Path | str) -> dict:
    """Read and schema-validate ``<root>/index.json``."""
    path = Path(root) / INDEX_FILE
    obj = load_json_file(path)
    validate_against(path, obj, INDEX_SCHEMA)
    return obj


@dataclass(frozen=True)
class VectorCase:
    """One case of the corpus, with the names of its family and group."""

    family: str
    group: str
    id: str
    comment: str
    result: str
    flags: tuple[str, ...]
    rules: tuple[str, ...]
    input: dict
    expected: dict
    #: the file's notes entries for this case's flags
    notes: dict


def _cases_of(obj: dict) -> Iterator[VectorCase]:
    for group in obj["testGroups"]:
        for case in group["tests"]:
            yield VectorCase(
                family=obj["family"],
                group=group["group"],
                id=case["id"],
                comment=case["comment"],
                result=case["result"],
                flags=tuple(case["flags"]),
                rules=tuple(case["rules"]),
                input=case["input"],
                expected=case["expected"],
                notes={flag: obj["notes"][flag] for flag in case["flags"]},
            )


def iter_cases(root_dir: Path | str, families: Sequence[str] | None = None) -> Iterator[VectorCase]:
    """Every case of the committed corpus under ``root_dir``, validated.

    ``families`` defaults to the families listed in ``index.json``. When the index
    lists a family, the file's bytes must match its recorded sha256, so a file
    edited after generation is refused rather than silently run.
    """
    root = Path(root_dir)
    index_path = root / INDEX_FILE
    index = load_index(root) if index_path.exists() or families is None else None
    if families is None:
        assert index is not None  # loaded above whenever no families are named
        names = list(index["families"])
    else:
        names = list(families)
    for name in names:
        path = root / f"{name}.json"
        data = read_bytes(path)
        entry = index["families"].get(name) if index else None
        if entry is not None and hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise VectorFileError(path, "$", f"file bytes do not match the sha256 recorded in {index_path}")
        yield from _cases_of(load_vector_file(path, data=data))
