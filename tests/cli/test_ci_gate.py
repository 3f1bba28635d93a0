"""The release-gate recipe (docs/ci.md): examples/ci/gate.sh run against the bundled torch candidate."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from qconform.generators.corpus import default_vectors_dir
from qconform.generators.validation import load_index

REPO = Path(__file__).resolve().parents[2]
GATE = REPO / "examples" / "ci" / "gate.sh"
WORKFLOW = REPO / "examples" / "ci" / "qconform-gate.yml"
QCONFORM = Path(sys.executable).with_name("qconform")
FAMILIES = "rng_abi categorical_sampling"


def gate(tmp_path: Path, **settings: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "QCONFORM_BIN": str(QCONFORM),
        "QCONFORM_ADAPTER": "torch",
        "QCONFORM_CORPUS_ROOT": load_index(default_vectors_dir())["root"],
        "QCONFORM_REQUIRE": FAMILIES,
        "QCONFORM_FAMILIES": FAMILIES,
        "QCONFORM_REPORTS": str(tmp_path / "reports"),
        **settings,
    }
    return subprocess.run(
        ["bash", str(GATE)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False
    )


@pytest.mark.rules()
def test_the_gate_passes_the_torch_candidate_and_publishes_its_reports(tmp_path):
    pytest.importorskip("torch")
    done = gate(tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    reports = tmp_path / "reports"
    data = json.loads((reports / "qconform.json").read_text())
    assert data["ok"] is True and set(data["families"]) == set(FAMILIES.split())
    assert ET.parse(reports / "junit.xml").getroot().iter("testcase")
    assert "OK:" in (reports / "qconform.html").read_text()


@pytest.mark.rules()
@pytest.mark.parametrize(
    "settings, message",
    [
        ({"QCONFORM_ADAPTER": "torch-mutant:cumulative-ge"}, "FAILED"),
        ({"QCONFORM_CORPUS_ROOT": "0" * 64}, "root"),
        ({"QCONFORM_REQUIRE": "rng_abi wire_frames", "QCONFORM_FAMILIES": "rng_abi wire_frames"}, "wire_frames"),
    ],
    ids=["mutant", "corpus-root", "required-family"],
)
def test_the_gate_fails(tmp_path, settings, message):
    pytest.importorskip("torch")
    done = gate(tmp_path, **settings)
    assert done.returncode != 0 and message in done.stdout + done.stderr, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.mark.rules()
def test_the_gate_insists_on_its_pinned_version_and_settings(tmp_path):
    done = gate(tmp_path, QCONFORM_VERSION="9.9.9")
    assert done.returncode == 2 and "the gate is pinned to 9.9.9" in done.stderr
    env = {k: "" for k in ("QCONFORM_CORPUS_ROOT",)}
    done = gate(tmp_path, **env)
    assert done.returncode != 0 and "QCONFORM_CORPUS_ROOT" in done.stderr
    done = gate(tmp_path, QCONFORM_EXPECTATIONS="no-such.toml")
    assert done.returncode == 2 and "no-such.toml does not exist" in done.stderr


@pytest.mark.rules()
def test_the_documented_workflow_is_the_example_file():
    doc = (REPO / "docs" / "ci.md").read_text()
    block = re.search(r"```yaml\n(.*?)```", doc, re.DOTALL)
    assert block and block.group(1) == WORKFLOW.read_text()
    for setting in (
        "QCONFORM_VERSION",
        "QCONFORM_CORPUS_ROOT",
        "QCONFORM_REQUIRE",
        "QCONFORM_EXPECTATIONS",
        "QCONFORM_ADAPTER",
        "QCONFORM_BIN",
    ):
        assert setting in block.group(1) and setting in GATE.read_text()
    assert "examples/ci/gate.sh" in block.group(1) and "junit.xml" in block.group(1)


#: where the documents pin a corpus root for users to copy
PINNED_ROOT_FILES = ("README.md", "docs/ci.md", "examples/ci/qconform-gate.yml")


@pytest.mark.parametrize("name", PINNED_ROOT_FILES)
def test_the_pinned_roots_in_the_documents_are_this_corpus(name):
    """A root a user copies from the documents is the corpus this version ships: the gate it
    pins passes, instead of refusing every run (a stale example is a broken recipe)."""
    root = load_index(default_vectors_dir())["root"]
    pinned = set(re.findall(r"\b[0-9a-f]{64}\b", (REPO / name).read_text(encoding="utf-8")))
    assert pinned == {root}, f"{name} pins {sorted(pinned)}; the corpus root is {root} (run tests/../docs update)"
