"""Lint of vector files: the checks a JSON Schema cannot state.

Run after schema validation (the lint trusts the layout the schema guarantees).
Each problem names the JSON path it is about, in the ``$.testGroups[2].tests[5]``
form that jsonschema uses, so a reader can find it in the file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

from qconform.generators.encoding import (
    EncodingError,
    decode_blob,
    decode_rational,
    encode_rational,
)
from qconform.generators.schemas import CASE_NAME_PATTERN, RATIONAL_PATTERN
from qconform.spec.errors import ERROR_CODES

_RATIONAL = re.compile(RATIONAL_PATTERN)
_CASE_NAME = re.compile(f"^{CASE_NAME_PATTERN}$")
_BLOB_KEYS = {"dtype", "shape", "b64"}


@dataclass(frozen=True)
class LintProblem:
    """One lint finding: where (a JSON path) and what."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def _walk(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    """Every (JSON path, value) pair below ``value``, ``value`` included."""
    yield path, value
    if isinstance(value, dict):
        for key, sub in value.items():
            yield from _walk(sub, f"{path}.{key}")
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            yield from _walk(sub, f"{path}[{i}]")


def lint_values(value: Any, path: str) -> list[LintProblem]:
    """Blobs whose bytes do not fill their shape, and rationals not in lowest terms."""
    problems = []
    for where, item in _walk(value, path):
        if isinstance(item, dict) and set(item) == _BLOB_KEYS:
            try:
                decode_blob(item)
            except EncodingError as exc:
                problems.append(LintProblem(where, str(exc)))
        elif isinstance(item, str) and _RATIONAL.match(item):
            canonical = encode_rational(decode_rational(item))
            if item != canonical:
                problems.append(LintProblem(where, f"rational {item!r} is not in lowest terms ({canonical})"))
    return problems


def _lint_result(case: dict, path: str) -> list[LintProblem]:
    """Branch-on-result rules: invalid cases hold only a known error code."""
    result, expected = case["result"], case["expected"]
    if result == "invalid":
        code = expected.get("error")
        if set(expected) != {"error"} or code not in ERROR_CODES:
            return [
                LintProblem(
                    f"{path}.expected",
                    'an invalid case\'s expected must be exactly {"error": <registered spec error code>}',
                )
            ]
    elif "error" in expected:
        return [LintProblem(f"{path}.expected.error", f"a {result} case must not expect an error")]
    if result == "acceptable" and not case["flags"]:
        return [LintProblem(f"{path}.flags", "an acceptable case needs flags naming the divergence it allows")]
    return []


def _lint_case(case: dict, path: str, family: str, group: str, notes: dict, rules: set) -> list[LintProblem]:
    problems = []
    prefix = f"{family}/{group}/"
    name = case["id"][len(prefix) :]
    if not case["id"].startswith(prefix) or not _CASE_NAME.match(name):
        problems.append(LintProblem(f"{path}.id", f"id {case['id']!r} is not {prefix}<name>"))
    for flag in case["flags"]:
        if flag not in notes:
            problems.append(LintProblem(f"{path}.flags", f"flag {flag} is not defined in notes"))
    extra = sorted(set(case["rules"]) - rules)
    if extra:
        problems.append(LintProblem(f"{path}.rules", f"rules {extra} are not among the file's rules"))
    problems += _lint_result(case, path)
    problems += lint_values(case["input"], f"{path}.input")
    problems += lint_values(case["expected"], f"{path}.expected")
    return problems


def lint_vector_file(obj: dict) -> list[LintProblem]:
    """All lint problems of one schema-valid vector file object."""
    problems: list[LintProblem] = []
    family, notes, rules = obj["family"], obj["notes"], set(obj["rules"])
    seen: set[str] = set()
    used: set[str] = set()
    total = 0
    for g, group in enumerate(obj["testGroups"]):
        gpath = f"$.testGroups[{g}]"
        extra = sorted(set(group["rules"]) - rules)
        if extra:
            problems.append(LintProblem(f"{gpath}.rules", f"rules {extra} are not among the file's rules"))
        for t, case in enumerate(group["tests"]):
            path = f"{gpath}.tests[{t}]"
            total += 1
            if case["id"] in seen:
                problems.append(LintProblem(f"{path}.id", f"duplicate id {case['id']!r}"))
            seen.add(case["id"])
            used.update(case["flags"])
            problems += _lint_case(case, path, family, group["group"], notes, rules)
    for flag in sorted(set(notes) - used):
        problems.append(LintProblem(f"$.notes.{flag}", "note is not used by any case"))
    if obj["numberOfTests"] != total:
        problems.append(LintProblem("$.numberOfTests", f"is {obj['numberOfTests']}, the file holds {total} tests"))
    return problems


def duplicate_ids(files: Iterable[tuple[str, dict]]) -> list[str]:
    """Case ids that occur more than once in a corpus of (label, vector file) pairs."""
    owner: dict[str, str] = {}
    found = []
    for label, obj in files:
        for group in obj["testGroups"]:
            for case in group["tests"]:
                if case["id"] in owner:
                    found.append(f"duplicate id {case['id']!r} in {owner[case['id']]} and {label}")
                owner.setdefault(case["id"], label)
    return found
