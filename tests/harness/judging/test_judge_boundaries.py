"""Judge tests at the boundaries a mutated judge gets wrong (issue #21, `qconform adequacy --judges`).

Each test kills mutants of ``harness/judging`` that the older comparator tests let
survive: the judge must fail a wrong answer where a mutant would pass it, raise
where it must not, or move a margin by one step.
"""

from __future__ import annotations

import copy
from fractions import Fraction

import pytest
from harness_stubs import adapter_config, family_cases

from qconform.generators.encoding import decode_blob, decode_rational, encode_blob, encode_rational
from qconform.harness.judging.judge import judge
from qconform.harness.judging.sharding import SUM_FIELDS
from qconform.harness.verdicts import VerdictClass, brief

PASS, FAIL, PRECISION, ERROR = (VerdictClass.PASS, VerdictClass.FAIL, VerdictClass.PRECISION, VerdictClass.ERROR)
AS = "allocation_sparse"


def sparse_case(min_ids: int) -> dict:
    for case in family_cases(AS):
        if case["result"] == "valid" and len(decode_blob(case["expected"]["ids"])[0]) >= min_ids:
            return case
    pytest.skip(f"no allocation_sparse case with {min_ids} ids")


@pytest.mark.rules("R07")
def test_ids_out_of_order_after_an_ascending_pair_fail_and_never_raise():
    """IDs like [0, 5, 3]: the first pair ascends, the last does not. The answer is not canonical
    (R07): ``fail`` at ids[2], whatever the counts; a judge that indexes past the list raises."""
    case = sparse_case(3)
    expected = case["expected"]
    ids, counts = decode_blob(expected["ids"])[0], decode_blob(expected["counts"])[0]
    last = len(ids) - 1
    order = [*range(last - 1), last, last - 1]  # the last two swapped
    answer = dict(
        copy.deepcopy(expected),
        ids=encode_blob("i32", [ids[i] for i in order]),
        counts=encode_blob("u32", [counts[i] for i in order]),
    )
    verdict = judge(case, answer, adapter_config([AS]))
    assert verdict.cls is FAIL and "not canonical" in verdict.message
    assert verdict.diff is not None and verdict.diff.path == f"ids[{last}]"


@pytest.mark.rules("R07")
def test_a_repeated_id_is_not_canonical():
    """Strictly ascending: an ID equal to its predecessor fails like a smaller one (its counts
    chosen so that the answer's token counts still sum to M, the check before)."""
    case = sparse_case(2)
    expected = case["expected"]
    ids, counts = decode_blob(expected["ids"])[0], decode_blob(expected["counts"])[0]
    answer = dict(
        copy.deepcopy(expected),
        ids=encode_blob("i32", [ids[0], ids[0], *ids[2:]]),
        counts=encode_blob("u32", [counts[1], counts[0] + counts[1], *counts[2:]]),
    )
    verdict = judge(case, answer, adapter_config([AS]))
    assert verdict.cls is FAIL and verdict.diff is not None and verdict.diff.path == "ids[1]", verdict


def sharding_case() -> dict:
    for case in family_cases("sharding"):
        if case["result"] == "valid" and any(k in case["expected"]["merged"] for k in SUM_FIELDS):
            return case
    pytest.skip("no valid sharding case with a merged sum")


@pytest.mark.rules("R30", "R33")
def test_a_sum_exactly_at_the_declared_margin_is_precision_and_one_step_beyond_fails():
    """|got - want| = sum_rel * |want| is inside the margin (<=); the next rational beyond it is not."""
    case = sharding_case()
    field = next(k for k in SUM_FIELDS if k in case["expected"]["merged"])
    want = decode_rational(case["expected"]["merged"][field])
    assert want != 0
    sum_rel = Fraction(1, 1 << 40)
    config = adapter_config(["sharding"], sum_rel=encode_rational(sum_rel))
    for sign in (1, -1):
        at = copy.deepcopy(case["expected"])
        at["merged"][field] = encode_rational(want + sign * sum_rel * abs(want))
        assert judge(case, at, config).cls is PRECISION
        beyond = copy.deepcopy(case["expected"])
        beyond["merged"][field] = encode_rational(want + sign * sum_rel * abs(want) * (1 + Fraction(1, 1 << 20)))
        verdict = judge(case, beyond, config)
        assert verdict.cls is FAIL and "beyond the profile's sum_rel" in verdict.message
        relative = sum_rel * (1 + Fraction(1, 1 << 20))  # |got - want| / |want|, named in the message
        assert f"differs by {brief(relative)} relative" in verdict.message
