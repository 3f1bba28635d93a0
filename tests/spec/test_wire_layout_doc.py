"""docs/wire-v2.md agrees with the codec's own field definitions and reason codes (R12-R20)."""

from __future__ import annotations

import dataclasses
import re
import struct
from pathlib import Path

import pytest

from qconform.spec.wire import layout
from qconform.spec.wire.messages import MESSAGE_CLASSES
from qconform.spec.wire.reasons import REASONS

pytestmark = pytest.mark.rules("R12", "R13", "R14", "R15", "R16", "R17", "R18", "R19", "R20")

DOC = Path(__file__).resolve().parents[2] / "docs" / "wire-v2.md"

#: heading in the document -> the layout's fields its first table must list
DOC_TABLES = {
    "### Header": layout.HEADER,
    "### v1 greedy header": layout.V1_HEADER,
    "### v1 greedy payload": layout.V1_GREEDY.fields,
    "### v1 greedy tokens": layout.V1_TOKENS_TAIL,
    **{f"### {m.name} (type {m.code})": m.fields for m in layout.MESSAGES.values()},
    "#### REPLY sparse tail": layout.REPLY_SPARSE_TAIL,
    "#### REPLY dense tail": layout.REPLY_DENSE_TAIL,
}


def table_after(text: str, heading: str) -> list[list[str]]:
    """The rows (cells stripped, header and rule lines dropped) of the first table after ``heading``."""
    lines = text.splitlines()
    start = lines.index(heading)
    rows: list[list[str]] = []
    for line in lines[start + 1 :]:
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif rows:
            break
    return [row for row in rows[2:]]


def unquote(cell: str) -> str:
    return cell[1:-1] if cell.startswith("`") and cell.endswith("`") else cell


@pytest.mark.parametrize("heading", sorted(DOC_TABLES))
def test_document_table_matches_layout(heading):
    rows = table_after(DOC.read_text(encoding="utf-8"), heading)
    documented = [(unquote(r[0]), r[1], unquote(r[2]), r[3], r[4], r[5]) for r in rows]
    defined = [(f.name, str(f.offset), f.type, str(f.size), f.meaning, f.rule) for f in DOC_TABLES[heading]]
    assert documented == defined


def test_every_message_has_a_table():
    text = DOC.read_text(encoding="utf-8")
    for message in layout.MESSAGES.values():
        assert f"### {message.name} (type {message.code})" in text.splitlines()


def test_reason_table_matches_registry():
    rows = table_after(DOC.read_text(encoding="utf-8"), "## Reason codes")
    assert [(unquote(r[0]), r[1], r[2]) for r in rows] == [(c, rule, text) for c, (rule, text) in REASONS.items()]


def test_reason_codes_are_stable_identifiers():
    for code, (rule, meaning) in REASONS.items():
        assert re.fullmatch(r"[A-Z][A-Z0-9_]*", code) and re.fullmatch(r"R[0-3][0-9]", rule) and meaning


def test_codes_named_in_rules_are_registered():
    """Every UPPER_CASE code that a field rule names is a registered reason code."""
    named = set()
    for fields in DOC_TABLES.values():
        for f in fields:
            named |= set(re.findall(r"\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b", f.rule))
    assert named - {"GREEDY_TOKENS"} <= set(REASONS)


@pytest.mark.parametrize("fields", [layout.HEADER, layout.V1_HEADER, *[m.fields for m in layout.MESSAGES.values()]])
def test_fields_are_contiguous_and_pack(fields):
    layout.check_contiguous(fields)
    size = fields[-1].offset + fields[-1].size
    assert struct.calcsize(layout.struct_format(fields)) == size


def test_header_and_fixed_sizes():
    assert layout.HEADER_SIZE == 20 and layout.CHECKSUM_OFFSET == layout.HEADER[-1].offset
    assert {m.name: m.size for m in layout.MESSAGES.values()} == {
        "HELLO": 232,
        "STEP": 68,
        "REPLY": 36,
        "COMPLETION": 70,
        "COMMIT": 28,
        "RESET": 30,
        "CANCEL": 14,
        "HELLO_ANSWER": 42,
    }


def test_message_classes_mirror_layouts():
    for code, cls in MESSAGE_CLASSES.items():
        names = [f.name for f in cls.LAYOUT.fields]
        declared = [f.name for f in dataclasses.fields(cls) if f.name not in ("ids", "values")]
        assert cls.LAYOUT.code == code and declared == names
