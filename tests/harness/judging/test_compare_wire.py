"""The comparator of the wire families: another verdict is a ``fail`` at its path, garbage is an ``error``."""

from __future__ import annotations

import copy
import json

import pytest

from qconform.generators.corpus import default_vectors_dir
from qconform.harness.adapter import AdapterConfig, Capabilities, PrecisionProfile
from qconform.harness.judging.judge import judge
from qconform.harness.judging.wire import structural_difference

pytestmark = pytest.mark.rules("R16", "R19")

VECTORS = default_vectors_dir()
CONFIG = AdapterConfig("endpoint", Capabilities(("wire_frames", "wire_sessions")), PrecisionProfile())


def case(family: str, case_id: str) -> dict:
    document = json.loads((VECTORS / f"{family}.json").read_text(encoding="utf-8"))
    found = next(c for g in document["testGroups"] for c in g["tests"] if c["id"] == case_id)
    return dict(found, family=family)


def test_an_accept_where_a_reject_is_expected_fails_at_the_verdict():
    rejected = case("wire_frames", "wire_frames/reason_classes/unsorted_support-descending-pair")
    accepted = case("wire_frames", "wire_frames/valid_frames/reply_sparse")
    verdict = judge(rejected, copy.deepcopy(accepted["expected"]), CONFIG)
    assert verdict.cls.value == "fail" and verdict.diff is not None and verdict.diff.path == "verdict"
    assert judge(rejected, copy.deepcopy(rejected["expected"]), CONFIG).cls.value == "pass"


def test_a_session_with_other_counters_fails_at_the_first_verdict_that_differs():
    session = case("wire_sessions", "wire_sessions/consumption/commit-before-completion")
    answer = copy.deepcopy(session["expected"])
    answer["verdicts"][8] = {"verdict": "accept", "discarded": []}
    answer["counters"]["accepted"] += 1
    del answer["counters"]["CONSUMED_BEFORE_COMPLETION"]
    verdict = judge(session, answer, CONFIG)
    assert verdict.cls.value == "fail" and verdict.diff is not None and verdict.diff.path == "verdicts[8].verdict"


def test_garbage_is_still_an_error():
    session = case("wire_sessions", "wire_sessions/consumption/commit-before-completion")
    answer = dict(copy.deepcopy(session["expected"]), surplus=1)
    assert judge(session, answer, CONFIG).cls.value == "error"


def test_structural_difference_paths():
    assert structural_difference({"a": [1, {"b": None}]}, {"a": [1, {"b": None}]}) is None
    for expected, got, path in (
        ({"a": [1, {"b": None}]}, {"a": [1, {"b": 3}]}, "a[1].b"),
        ({"a": 1}, {"a": 1, "z": 2}, "z"),
        ([1], [1, 2], "len()"),
    ):
        diff = structural_difference(expected, got)
        assert diff is not None and diff.path == path, (expected, got)


def test_of_several_extra_fields_the_first_in_answer_order_is_named():
    """A verdict with two fields the expected one lacks: the diff names the first of them, with
    its own value, as a person reads the answer (the corpus stores keys sorted, an answer need not)."""
    diff = structural_difference({"a": 1}, {"a": 1, "z": 2, "b": [3]})
    assert diff is not None and (diff.path, diff.expected, diff.got) == ("z", "<absent>", "2")
