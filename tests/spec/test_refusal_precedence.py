"""Every family's format document decides the code of an input that breaks several rules (R05, R07, R10, R19, R27):
its "Refusal precedence" table is the spec's (``qconform.spec.refusal_order``), row for row, and the family's
``precedence`` vectors pin every row alone and every pair of rows that can fail together.

Reading the table from the document alone, the earlier row of each pair vector is its answer; so a reader who
swaps two adjacent rows of any table disagrees with some vector (the pair of those two rows is pinned).
"""

from __future__ import annotations

import json
import re
from itertools import combinations
from pathlib import Path

import pytest

from qconform.generators.corpus import default_vectors_dir
from qconform.generators.registry import load_family
from qconform.spec.refusal_order import REFUSAL_ORDER

pytestmark = pytest.mark.rules("R05", "R07", "R10", "R19", "R27")

DOCS = Path(__file__).resolve().parents[2] / "docs" / "formats"
HEADING = "## Refusal precedence"
PAIR = re.compile(r"^r(\d\d)-[a-z0-9_]+(?:-r(\d\d)-[a-z0-9_]+)?$")


def unquote(cell: str) -> str:
    return cell[1:-1] if cell.startswith("`") and cell.endswith("`") else cell


def document_table(family: str) -> list[tuple[int, str, str]]:
    """(number, failing condition, code) of each row of the family document's precedence table."""
    lines = (DOCS / f"{family}.md").read_text(encoding="utf-8").splitlines()
    assert HEADING in lines, f"docs/formats/{family}.md has no {HEADING!r} section"
    rows: list[list[str]] = []
    for line in lines[lines.index(HEADING) + 1 :]:
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif rows or line.startswith("#"):
            break
    return [(int(r[0]), r[1], unquote(r[2])) for r in rows[2:]]


def precedence_vectors(family: str) -> dict[str, dict]:
    document = json.loads((default_vectors_dir() / f"{family}.json").read_text(encoding="utf-8"))
    return {
        case["id"].split("/")[2]: case
        for group in document["testGroups"]
        for case in group["tests"]
        if case["id"].split("/")[1] == "precedence"
    }


@pytest.mark.parametrize("family", sorted(REFUSAL_ORDER))
def test_document_table_is_the_spec_table(family):
    spec = [(n, row.when, row.code) for n, row in enumerate(REFUSAL_ORDER[family], 1)]
    assert document_table(family) == spec


def families_with_refusals() -> set[str]:
    """Every family outside the wire whose corpus holds a refused case (the wire's families, the
    worker's included, follow the check-order tables of docs/wire-v2.md, held by test_wire_check_order)."""
    found = set()
    for path in default_vectors_dir().glob("*.json"):
        document = json.loads(path.read_text(encoding="utf-8"))
        if path.stem.startswith(("wire_", "worker_")) or "testGroups" not in document:
            continue
        if any(case.get("result") == "invalid" for g in document["testGroups"] for case in g["tests"]):
            found.add(path.stem)
    return found


#: Families with refusals whose table is not written yet, and why (issue #21); the list may only shrink.
PENDING: dict[str, str] = {}


def test_every_family_with_refusals_has_a_table():
    assert families_with_refusals() - set(PENDING) <= set(REFUSAL_ORDER)
    assert not set(PENDING) & set(REFUSAL_ORDER), "a family with a table is no longer pending"


@pytest.mark.parametrize("family", sorted(REFUSAL_ORDER))
def test_vectors_pin_every_row_and_every_pair_that_can_fail_together(family):
    """Every row alone answers its code; every pair its earlier row's; the pairs left out are the family's
    declared exclusive ones (``precedence.Breaks.exclusive``, with its reason)."""
    rows = REFUSAL_ORDER[family]
    breaks = load_family(family).precedence
    assert breaks is not None and breaks.family == family
    assert breaks.why or not breaks.exclusive, "the pairs left out need their reason"
    vectors = precedence_vectors(family)
    seen: set[tuple[int, ...]] = set()
    for name, case in vectors.items():
        m = PAIR.match(name)
        assert m, name
        numbers = tuple(int(g) for g in m.groups() if g)
        assert case["expected"] == {"error": rows[numbers[0] - 1].code}, case["id"]
        seen.add(numbers)
    everything = {(n,) for n in range(1, len(rows) + 1)}
    everything |= {pair for pair in combinations(range(1, len(rows) + 1), 2) if frozenset(pair) not in breaks.exclusive}
    assert seen == everything


@pytest.mark.parametrize("family", sorted(REFUSAL_ORDER))
def test_swapping_two_adjacent_rows_is_caught(family):
    """A reader with rows n and n + 1 swapped answers row n + 1's code on the pair vector of the two, which the
    corpus holds whenever the rows have different codes and can fail together."""
    rows = REFUSAL_ORDER[family]
    breaks = load_family(family).precedence
    assert breaks is not None
    exclusive = breaks.exclusive
    vectors = precedence_vectors(family)
    for n in range(1, len(rows)):
        if rows[n - 1].code == rows[n].code or frozenset((n, n + 1)) in exclusive:
            continue
        name = f"r{n:02d}-{rows[n - 1].code.lower()}-r{n + 1:02d}-{rows[n].code.lower()}"
        assert vectors[name]["expected"]["error"] != rows[n].code
