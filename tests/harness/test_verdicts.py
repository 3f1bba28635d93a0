"""Result classes: which are unexpected, the one-line message, the JSON round trip."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qconform.harness.verdicts import UNEXPECTED, Diff, Verdict, VerdictClass

pytestmark = pytest.mark.rules()


def test_the_brief_classes_and_the_expectation_classes_exist():
    assert [c.value for c in VerdictClass] == [
        "pass",
        "fail",
        "precision",
        "unsupported",
        "error",
        "xfail",
        "xpass",
        "disabled",
    ]


@pytest.mark.parametrize("cls", list(VerdictClass))
def test_only_fail_error_and_xpass_fail_a_run(cls):
    verdict = Verdict(cls, "fam/group/case", "m")
    assert verdict.unexpected == (cls.value in ("fail", "error", "xpass"))
    assert (cls in UNEXPECTED) == verdict.unexpected


def test_line_names_class_case_message_and_diff_once():
    diff = Diff("counts[3]", "7", "8")
    line = Verdict(VerdictClass.FAIL, "allocation_dense/g/c", "counts differ", diff).line()
    assert line == "FAIL allocation_dense/g/c: counts differ [counts[3]: expected 7, got 8]"
    # a message that already holds the diff does not repeat it
    repeated = Verdict(VerdictClass.FAIL, "a/b/c", f"first divergence at {diff}", diff).line()
    assert repeated.count("expected 7, got 8") == 1


def test_family_is_the_first_part_of_the_id():
    assert Verdict(VerdictClass.PASS, "verification_round/batches/b1").family == "verification_round"


def test_with_class_keeps_diff_and_duration():
    verdict = Verdict(VerdictClass.FAIL, "a/b/c", "m", Diff("x", "1", "2"), 0.5)
    changed = verdict.with_class(VerdictClass.XFAIL, "expected")
    assert (changed.cls, changed.message, changed.diff, changed.duration) == (
        VerdictClass.XFAIL,
        "expected",
        verdict.diff,
        0.5,
    )


texts = st.text(min_size=0, max_size=20)


@settings(max_examples=50, deadline=None)
@given(
    st.sampled_from(list(VerdictClass)),
    texts,
    st.one_of(st.none(), st.tuples(texts, texts, texts)),
    st.floats(min_value=0, max_value=100, allow_nan=False),
)
def test_json_round_trip(cls, message, diff, duration):
    verdict = Verdict(cls, "fam/g/c", message, None if diff is None else Diff(*diff), round(duration, 6))
    obj = json.loads(json.dumps(verdict.to_json()))
    assert obj["class"] == cls.value and obj["family"] == "fam"
    assert Verdict.from_json(obj) == verdict


def test_long_values_are_cut_short_in_lines_but_whole_in_json():
    long = "1" * 700 + "/3"
    verdict = Verdict(VerdictClass.FAIL, "a/b/c", "m", Diff("margin", long, "0/1"))
    assert len(verdict.line()) < 150 and "(702 chars)" in verdict.line()
    assert verdict.to_json()["diff"]["expected"] == long
