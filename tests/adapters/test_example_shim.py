"""examples/shim/python_shim.py: a standalone shim, written from the documents alone, passes its families."""

from __future__ import annotations

import ast
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from qconform.generators.corpus import default_vectors_dir
from qconform.generators.encoding import encode_word
from qconform.generators.registry import load_family
from qconform.generators.validation import iter_cases
from qconform.harness.adapter import Unimplemented
from qconform.harness.transport.client import open_adapter
from qconform.spec.philox import KNOWN_ANSWERS

SHIM = Path(__file__).resolve().parents[2] / "examples" / "shim" / "python_shim.py"
#: -I -S: isolated, without site-packages, so the shim cannot lean on qconform
COMMAND = [sys.executable, "-I", "-S", str(SHIM)]
FAMILIES = ("rng_abi", "categorical_sampling")


@pytest.fixture(scope="module")
def shim():
    with open_adapter("shim:" + shlex.join(COMMAND)) as client:
        yield client


def cases_of(family: str) -> list[tuple[str, dict, dict]]:
    """(id, input, expected): the committed vectors when present, else the generator's cases."""
    if (default_vectors_dir() / f"{family}.json").is_file():
        return [(c.id, c.input, c.expected) for c in iter_cases(default_vectors_dir(), [family])]
    return [(c.name, c.input, c.expected) for g in load_family(family).build() for c in g.tests]


@pytest.mark.rules()
def test_the_shim_imports_only_the_standard_library():
    tree = ast.parse(SHIM.read_text())
    modules = {
        alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    }
    modules |= {
        node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    assert modules <= set(sys.stdlib_module_names) | {"__future__"}, modules


@pytest.mark.rules()
def test_the_shim_declares_its_two_families(shim):
    assert shim.config.name == "python-shim"
    assert shim.config.capabilities.families == FAMILIES
    assert shim.config.capabilities.injected_draws is True
    assert shim.run_batch("allocation_dense", [{}]) == [
        Unimplemented("python-shim does not declare family allocation_dense")
    ]


@pytest.mark.rules("R22")
def test_the_shim_passes_the_random123_known_answers(shim):
    inputs = [
        {"counter": [encode_word(w) for w in ctr], "key": [encode_word(w) for w in key], "rounds": 10}
        for ctr, key, _ in KNOWN_ANSWERS
    ]
    outputs = shim.run_batch("rng_abi", inputs)
    assert outputs == [{"output": [encode_word(w) for w in out]} for _, _, out in KNOWN_ANSWERS]
    assert outputs[0]["output"][0] == "0x6627e8d5"  # tl.randint(seed=0, offset=0), per the anchors


@pytest.mark.parametrize(
    "family",
    [
        pytest.param("rng_abi", marks=pytest.mark.rules("R14", "R22", "R23", "R24")),
        pytest.param("categorical_sampling", marks=pytest.mark.rules("R03", "R04", "R07", "R08", "R19")),
    ],
)
def test_the_shim_reproduces_every_case(shim, family):
    cases = cases_of(family)
    outputs = shim.run_batch(family, [case_input for _, case_input, _ in cases])
    assert [(cid, out) for (cid, _, _), out in zip(cases, outputs)] == [(cid, exp) for cid, _, exp in cases]


@pytest.mark.rules()
def test_the_shim_answers_the_raw_protocol():
    requests = [
        {"id": 1, "op": "get_config"},
        {"id": 2, "op": "run", "family": "verification_round", "inputs": [{}]},
        {"id": 3, "op": "fly"},
        {"id": 4, "op": "shutdown"},
    ]
    done = subprocess.run(
        COMMAND, input="".join(json.dumps(r) + "\n" for r in requests), capture_output=True, text=True, timeout=30
    )
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert done.returncode == 0 and [r["id"] for r in replies] == [1, 2, 3, 4]
    assert replies[0]["config"]["protocol"] == 1
    assert replies[1]["status"] == "unimplemented"
    assert replies[2]["status"] == "error" and "fly" in replies[2]["message"]
    assert replies[3] == {"id": 4, "status": "ok"}
