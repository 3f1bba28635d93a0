"""The ``worker_sessions`` family: its committed file, its encodings, and how the judge names a difference."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from qconform.generators.corpus import default_vectors_dir
from qconform.generators.encoding import decode_blob
from qconform.generators.families.worker_sessions import (
    GROUPS,
    config_from_json,
    config_to_json,
    event_from_json,
    model_from_json,
    model_to_json,
    solve,
)
from qconform.generators.validation import load_vector_file
from qconform.harness.adapter import AdapterConfig, Capabilities, PrecisionProfile
from qconform.harness.judging.judge import judge
from qconform.spec.wire.reasons import REASONS
from qconform.spec.wire.worker import Connect, FrameIn

pytestmark = pytest.mark.rules("R12", "R16", "R17", "R24")

PATH = default_vectors_dir() / "worker_sessions.json"
CONFIG = AdapterConfig("endpoint", Capabilities(("worker_sessions",)), PrecisionProfile())


def document() -> dict:
    return load_vector_file(PATH)


def cases() -> list[dict]:
    return [dict(c, family="worker_sessions") for g in document()["testGroups"] for c in g["tests"]]


def test_the_committed_file_validates_and_has_every_group():
    groups = [g["group"] for g in document()["testGroups"]]
    assert groups == [name for name, *_ in GROUPS]
    assert all(g["tests"] for g in document()["testGroups"])


@pytest.mark.parametrize("case", cases(), ids=lambda c: c["id"])
def test_every_case_round_trips_and_solves_to_its_expected(case):
    case_input = case["input"]
    assert config_to_json(config_from_json(case_input["config"])) == case_input["config"]
    assert model_to_json(model_from_json(case_input["model"])) == case_input["model"]
    assert len(case["expected"]["outputs"]) == len(case_input["events"])
    assert solve(case_input) == case["expected"]


def test_events_decode_to_the_spec_events():
    case = next(c for c in cases() if c["id"] == "worker_sessions/negotiation/accepted")
    connect, answer = (event_from_json(e) for e in case["input"]["events"][:2])
    assert isinstance(connect, Connect)
    assert (connect.connection, connect.session_id) == (1, int(case["input"]["events"][0]["session_id"]))
    assert isinstance(answer, FrameIn)
    assert answer.data == bytes(decode_blob(case["input"]["events"][1]["frame"], "u8")[0])


def test_the_judge_names_the_first_event_and_field_that_differ():
    case = next(c for c in cases() if c["id"] == "worker_sessions/step/identical-and-differing-retry")
    served = next(i for i, o in enumerate(case["expected"]["outputs"]) if o["draws"])
    answer = copy.deepcopy(case["expected"])
    answer["outputs"][served]["frames"][2] = answer["outputs"][served]["frames"][1]
    answer["outputs"][served]["draws"][2]["u24"] ^= 1
    answer["final"]["slots"][0]["open"]["tokens"][2] += 1
    answer["counters"]["accepted"] += 1
    verdict = judge(case, answer, CONFIG)
    assert verdict.cls.value == "fail" and verdict.diff is not None
    assert verdict.diff.path.startswith(f"outputs[{served}].frames[2]")  # then the first differing byte
    assert judge(case, copy.deepcopy(case["expected"]), CONFIG).cls.value == "pass"


def test_a_missing_close_is_garbage_not_a_verdict():
    case = next(c for c in cases() if c["id"] == "worker_sessions/negotiation/another-session")
    answer = json.loads(json.dumps(case["expected"]))
    del answer["outputs"][1]["close"]
    assert judge(case, answer, CONFIG).cls.value == "error"


def worker_table_codes() -> set[str]:
    """The reason codes that the worker table of docs/wire-v2.md names in its rows."""
    text = (Path(__file__).parents[2] / "docs" / "wire-v2.md").read_text(encoding="utf-8")
    section = text.split("## Worker state machine", 1)[1].split("\n### ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| event")]
    return {code for row in rows for code in re.findall(r"`([A-Z0-9_]+)`", row) if code in REASONS}


def test_every_reason_of_the_worker_table_is_pinned_by_a_vector():
    codes = worker_table_codes()
    assert "SLOT_HELD" in codes and len(codes) > 15
    seen = {o.get("reason") for case in cases() for o in case["expected"]["outputs"]}
    assert codes - seen == set()
