"""The shim examples of docs/formats/<family>.md (qconform/shim_examples.py) are generated from the
corpus, and each one is true: its request holds real case inputs, its reply the spec's answers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from qconform import shim_examples
from qconform.generators.corpus import default_vectors_dir
from qconform.generators.registry import load_family
from qconform.harness.transport.shim_protocol import decode_line

DOCS = Path(__file__).resolve().parents[2] / "docs" / "formats"
FAMILIES = shim_examples.families(default_vectors_dir())


def example_problems(text: str, family: str) -> list[str]:
    """What is untrue in a page's example: not one request line and one reply line, a request that is
    not a run of ``family``, or a reply output that is not what the spec answers for its input."""
    block = text.partition(shim_examples.BEGIN)[2].partition(shim_examples.END)[0]
    lines = re.findall(r"```json\n(.*?)\n```", block, re.DOTALL)
    if len(lines) != 1 or len(lines[0].splitlines()) != 2:
        return ["the section must hold one json block of two lines"]
    request, reply = (
        decode_line(line.encode(), what) for line, what in zip(lines[0].splitlines(), ("request", "reply"))
    )
    if request["op"] != "run" or request["family"] != family or reply["id"] != request["id"]:
        return [f"not a run request of {family} and its reply"]
    if len(reply["outputs"]) != len(request["inputs"]):
        return ["the reply has not one output per input"]
    solve = load_family(family).solve
    assert solve is not None, family
    return [
        f"input {i}: the spec answers otherwise"
        for i, (given, entry) in enumerate(zip(request["inputs"], reply["outputs"]))
        if entry != {"status": "ok", "output": solve(given)}
    ]


@pytest.mark.rules()
def test_every_family_page_holds_its_generated_example():
    assert shim_examples.main([]) == 0, "run `python -m qconform.shim_examples --write`"


@pytest.mark.rules()
@pytest.mark.parametrize("family", FAMILIES)
def test_each_example_is_true(family):
    text = (DOCS / f"{family}.md").read_text()
    assert example_problems(text, family) == []
    assert "[shared table](README.md#shared-definitions-defs-of-every-family-schema)" in text
    assert "## Shared definitions (`$defs` of every family schema)" in (DOCS / "README.md").read_text()


@pytest.mark.rules()
def test_a_tampered_example_is_caught_and_a_stale_page_named():
    text = (DOCS / "categorical_sampling.md").read_text()
    tampered = text.replace('"output":{"tokens":[', '"output":{"tokens":[7,', 1)
    assert tampered != text and example_problems(tampered, "categorical_sampling") == [
        "input 0: the spec answers otherwise"
    ]
    assert shim_examples.updated(tampered, shim_examples.section(default_vectors_dir(), "categorical_sampling")) == text


@pytest.mark.rules()
def test_the_encodings_are_read_from_the_schema():
    schema = json.loads((default_vectors_dir() / "schemas" / "categorical_sampling.schema.json").read_text())
    assert shim_examples.encodings(schema) == ["`blob` (i32, u32)", "`qRow`"]
    schema = json.loads((default_vectors_dir() / "schemas" / "rng_abi.schema.json").read_text())
    assert shim_examples.encodings(schema) == ["`word32`", "`u64`"]
