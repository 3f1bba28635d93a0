"""The sharding comparator (harness/judging/sharding.py) on the real sharding vectors:
decisions exact, the exact sums within the declared ``sum_rel`` and nowhere else."""

from __future__ import annotations

import copy
from fractions import Fraction

import pytest
from harness_stubs import adapter_config, family_cases

from qconform.generators.encoding import decode_rational, encode_rational
from qconform.harness.judging.judge import judge
from qconform.harness.judging.sharding import SUM_FIELDS
from qconform.harness.verdicts import VerdictClass

pytestmark = pytest.mark.rules("R30", "R31", "R32", "R33")

PASS, FAIL, PRECISION, ERROR = (VerdictClass.PASS, VerdictClass.FAIL, VerdictClass.PRECISION, VerdictClass.ERROR)
FP64_REDUCTION = encode_rational(Fraction(1, 1 << 40))


def valid_case(kind: str) -> dict:
    """The first valid proposal case (it has ``merged.row``) or residual case."""
    for case in family_cases("sharding"):
        if case["result"] == "valid" and ("row" in case["expected"]["merged"]) == (kind == "proposal"):
            return case
    pytest.skip(f"no valid {kind} sharding case")


def nudged(value: str, relative: Fraction) -> str:
    """A sum moved by ``relative`` of itself, as an FP reduction's result would be."""
    exact = decode_rational(value)
    return encode_rational(exact + exact * relative)


def config(sum_rel: str = "0/1"):
    return adapter_config(["sharding"], sum_rel=sum_rel)


@pytest.mark.parametrize("kind", ["proposal", "residual"])
def test_a_sum_off_in_its_last_bits_is_precision_only_where_declared(kind):
    case = valid_case(kind)
    answer = copy.deepcopy(case["expected"])
    field = next(k for k in SUM_FIELDS if k in answer["merged"])
    answer["merged"][field] = nudged(answer["merged"][field], Fraction(1, 1 << 50))
    assert judge(case, copy.deepcopy(case["expected"]), config(FP64_REDUCTION)).cls is PASS
    inside = judge(case, answer, config(FP64_REDUCTION))
    assert inside.cls is PRECISION and inside.diff is not None and inside.diff.path == f"merged.{field}"
    exact_profile = judge(case, answer, config())
    assert exact_profile.cls is FAIL and "beyond the profile's sum_rel" in exact_profile.message


@pytest.mark.parametrize("kind", ["proposal", "residual"])
def test_a_sum_beyond_the_declared_margin_fails(kind):
    case = valid_case(kind)
    answer = copy.deepcopy(case["expected"])
    field = next(k for k in SUM_FIELDS if k in answer["shards"][0])
    answer["shards"][0][field] = nudged(answer["shards"][0][field], Fraction(1, 1 << 30))
    verdict = judge(case, answer, config(FP64_REDUCTION))
    assert verdict.cls is FAIL and verdict.diff is not None and verdict.diff.path == f"shards[0].{field}"


def test_a_wrong_decision_fails_even_with_every_sum_inside_the_margin():
    case = valid_case("proposal")
    answer = copy.deepcopy(case["expected"])
    answer["merged"]["shifted_sum"] = nudged(answer["merged"]["shifted_sum"], Fraction(1, 1 << 50))
    answer["shards"][0]["tickets"] += 1
    verdict = judge(case, answer, config("1/1"))
    assert verdict.cls is FAIL and verdict.diff is not None and verdict.diff.path == "shards[0].tickets"
    draw = copy.deepcopy(case["expected"])
    draw["draws"][0]["shard"] ^= 1
    assert judge(case, draw, config("1/1")).cls is FAIL


def test_a_malformed_sum_is_an_error_not_a_precision():
    case = valid_case("residual")
    answer = copy.deepcopy(case["expected"])
    answer["merged"]["target_sum"] = 0.5
    assert judge(case, answer, config("1/1")).cls is ERROR
    missing = copy.deepcopy(case["expected"])
    del missing["shards"][0]["target_sum"]
    assert judge(case, missing, config("1/1")).cls is ERROR
