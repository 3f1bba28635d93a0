"""judge(): every class on every family's real vectors, result-first branching, precision rules."""

from __future__ import annotations

import copy
from fractions import Fraction

import pytest
from harness_stubs import adapter_config, available_families, family_cases

from qconform.generators.encoding import decode_blob, encode_blob, encode_f32, encode_rational
from qconform.generators.registry import load_family
from qconform.harness.adapter import AdapterError, Unimplemented
from qconform.harness.judging.judge import judge
from qconform.harness.judging.value_diff import Malformed, first_difference
from qconform.harness.transport.shim_protocol import check_output, entry_to_outcome, to_raw_blobs
from qconform.harness.verdicts import Diff, VerdictClass
from qconform.spec.allocation_fp64 import allocate_dense_fp64
from qconform.spec.sampling import sample_sparse

FAMILIES = available_families()
PASS, FAIL, PRECISION, ERROR, UNSUPPORTED = (
    VerdictClass.PASS,
    VerdictClass.FAIL,
    VerdictClass.PRECISION,
    VerdictClass.ERROR,
    VerdictClass.UNSUPPORTED,
)


def differs(expected: object, got: object) -> Diff:
    """first_difference() where the test expects a difference: None fails the test here."""
    diff = first_difference(expected, got)
    assert diff is not None, f"no difference between {expected!r} and {got!r}"
    return diff


def first_case(family: str, result: str) -> dict:
    found = [c for c in family_cases(family) if c["result"] == result]
    if not found:
        pytest.skip(f"{family} has no {result} case")
    return found[0]


# --- every family ---------------------------------------------------------------------------


@pytest.mark.rules()
@pytest.mark.parametrize("family", FAMILIES)
def test_the_expected_answer_passes_every_case(family):
    config = adapter_config([family])
    verdicts = [judge(case, copy.deepcopy(case["expected"]), config) for case in family_cases(family)]
    assert [v for v in verdicts if v.cls is not PASS] == []


@pytest.mark.parametrize("family", FAMILIES)
def test_the_expected_answer_in_the_raw_blob_form_passes_every_case(family):
    """The judge reads an answer's blobs raw (a binary reply's sections, docs/adapters.md) as in base64."""
    config = adapter_config([family])
    for case in family_cases(family):
        raw = to_raw_blobs(copy.deepcopy(case["expected"]))
        assert check_output(family, raw) is None and check_output(family, raw, strict_schema=True) is None
        assert judge(case, raw, config).cls is PASS, case["id"]


@pytest.mark.rules()
@pytest.mark.parametrize("family", FAMILIES)
def test_refusing_a_valid_case_fails(family):
    case = first_case(family, "valid")
    verdict = judge(case, {"error": "ZERO_MASS"}, adapter_config([family]))
    assert verdict.cls is FAIL and "refused a valid case with ZERO_MASS" in verdict.message
    assert verdict.diff is not None
    assert (verdict.diff.path, verdict.diff.got) == ("error", "ZERO_MASS")


@pytest.mark.rules()
@pytest.mark.parametrize("family", FAMILIES)
def test_invalid_case_branches_on_result_first(family):
    case = first_case(family, "invalid")
    code = case["expected"]["error"]
    config = adapter_config([family])
    assert judge(case, {"error": code}, config).cls is PASS
    wrong = judge(case, {"error": "SOME_OTHER_CODE"}, config)
    assert (
        wrong.cls is FAIL
        and wrong.diff is not None
        and (wrong.diff.expected, wrong.diff.got) == (code, "SOME_OTHER_CODE")
    )
    # a normal output for an invalid input is a fail, whatever it holds (never compared)
    answered = judge(case, {"counts": encode_blob("u32", [1 << 24])}, config)
    assert answered.cls is FAIL and f"expected refusal {code}" in answered.message
    assert judge(case, {"error": code, "detail": "x"}, config).cls is ERROR


@pytest.mark.rules()
@pytest.mark.parametrize("family", FAMILIES)
def test_outcome_kinds_and_capabilities(family):
    case = first_case(family, "valid")
    config = adapter_config([family])
    assert judge(case, Unimplemented("no kernel"), config).cls is UNSUPPORTED
    crashed = judge(case, AdapterError("child exited with status 3"), config)
    assert crashed.cls is ERROR and crashed.message == "child exited with status 3"
    assert judge(case, ["not", "an", "object"], config).cls is ERROR
    undeclared = judge(case, copy.deepcopy(case["expected"]), adapter_config(["some_other_family"]))
    assert undeclared.cls is UNSUPPORTED and "does not declare" in undeclared.message


@pytest.mark.rules()
@pytest.mark.parametrize("strict_schema", [False, True], ids=["structure-only", "strict-schema"])
@pytest.mark.parametrize("family", FAMILIES)
def test_missing_and_extra_fields_are_errors(family, strict_schema):
    case = first_case(family, "valid")
    extra = dict(copy.deepcopy(case["expected"]), surplus=1)
    assert through_the_checks(case, extra, strict_schema).cls is ERROR
    key = sorted(case["expected"])[0]
    missing = {k: v for k, v in copy.deepcopy(case["expected"]).items() if k != key}
    verdict = through_the_checks(case, missing, strict_schema)
    assert verdict.cls is ERROR and "malformed" in verdict.message


# --- exact decoding (no tolerance) ----------------------------------------------------------


@pytest.mark.rules()
def test_rationals_compare_as_fractions_not_text():
    assert first_difference({"p": "1/2"}, {"p": "2/4"}) is None
    diff = differs({"p": "1/2"}, {"p": "3/4"})
    assert (diff.path, diff.expected, diff.got) == ("p", "1/2", "3/4")
    with pytest.raises(Malformed):
        first_difference({"p": "1/2"}, {"p": 0.5})


@pytest.mark.rules()
def test_words_and_u64_compare_as_integers():
    assert first_difference(["0x0000000a"], ["0x0000000A"]) is None
    assert differs(["0x0000000a"], ["0x0000000b"]).path == "[0]"
    assert differs({"seed": "18446744073709551615"}, {"seed": "18446744073709551614"}).got == "18446744073709551614"
    with pytest.raises(Malformed):
        first_difference({"seed": "5"}, {"seed": 5})


@pytest.mark.rules()
def test_blobs_compare_decoded_values_at_the_first_index():
    want = encode_blob("u32", [1, 2, 3, 4, 5, 6], [2, 3])
    diff = differs({"c": want}, {"c": encode_blob("u32", [1, 2, 3, 4, 9, 6], [2, 3])})
    assert (diff.path, diff.expected, diff.got) == ("c[1,1]", "5", "9")
    raw_diff = first_difference({"c": want}, to_raw_blobs({"c": encode_blob("u32", [1, 2, 3, 4, 9, 6], [2, 3])}))
    assert raw_diff == diff
    for bad in (
        encode_blob("i32", [1, 2, 3, 4, 5, 6], [2, 3]),
        encode_blob("u32", [1, 2, 3, 4, 5, 6], [6]),
        {"dtype": "u32", "shape": [2, 3], "b64": "AAAA"},
        {"dtype": "u32", "shape": [2, 3], "raw": b"\0" * 23},
        {"dtype": "u32", "shape": [2, 3], "raw": "AAAA"},
        "AQAAAA==",
    ):
        with pytest.raises(Malformed):
            first_difference({"c": want}, {"c": bad})
        with pytest.raises(Malformed):
            first_difference({"c": want}, {"c": to_raw_blobs(bad)})


@pytest.mark.rules()
def test_one_ulp_is_a_difference_and_nan_is_garbage():
    one, next_up, nan = 0x3F800000, 0x3F800001, 0x7FC00000
    assert differs(encode_f32(one), encode_f32(next_up)).got == "0x3f800001"
    assert differs(encode_blob("f32", [one]), encode_blob("f32", [next_up])).path == "[0]"
    with pytest.raises(Malformed, match="NaN"):
        first_difference(encode_blob("f32", [one, one]), encode_blob("f32", [one, nan]))
    with pytest.raises(Malformed, match="NaN"):
        first_difference(encode_blob("f32", [one, one]), to_raw_blobs(encode_blob("f32", [one, nan])))
    with pytest.raises(Malformed, match="NaN"):
        first_difference(encode_f32(one), encode_f32(nan))


@pytest.mark.rules()
def test_list_length_difference_is_reported_after_common_prefix():
    assert differs([1, 2], [1, 3, 4]).path == "[1]"
    diff = differs([1, 2], [1, 2, 4])
    assert (diff.path, diff.expected, diff.got) == ("len()", "2", "3")


# --- verification_round: draw for draw --------------------------------------------------------

VR = "verification_round"
needs_vr = pytest.mark.skipif(VR not in FAMILIES, reason="verification_round not generated yet")


def vr_case(first_decision: str, depth: int = 1) -> dict:
    """A single-request case of depth ``depth`` whose first draw is ``first_decision`` with margin > 0."""
    for case in family_cases(VR):
        if case["result"] != "valid" or len(case["input"]["requests"]) != 1:
            continue
        request = case["expected"]["requests"][0]
        draw = request["draws"][0]
        if (
            len(case["input"]["requests"][0]["draft_tokens"]) == depth
            and draw["decision"] == first_decision
            and Fraction(draw["margin"]) > 0
            and len(request["draws"]) == 2
        ):
            return case
    pytest.skip(f"no depth-{depth} case starting with {first_decision}")


def flipped(case: dict) -> dict:
    """A self-consistent answer whose first acceptance decision is the other one."""
    request = copy.deepcopy(case["expected"]["requests"][0])
    draft = case["input"]["requests"][0]["draft_tokens"][0]
    first, final = request["draws"]
    vocab = case["input"]["vocab"]
    other = (final["token"] + 1) % vocab
    if first["decision"] == "accept":  # now rejected: a correction follows
        first["decision"] = "reject"
        final.update(domain="CORRECTION", decision="correction", token=other)
        request.update(accepted=0, emitted=[other])
    else:  # now accepted: the bonus follows (depth 1)
        first["decision"] = "accept"
        final.update(decision="bonus", token=other)
        request.update(accepted=1, emitted=[draft, other])
    return {"requests": [request]}


def margin_of(case: dict, draw: int) -> Fraction:
    return Fraction(case["expected"]["requests"][0]["draws"][draw]["margin"])


@needs_vr
@pytest.mark.rules("R11")
@pytest.mark.parametrize("decision", ["accept", "reject"])
def test_acceptance_flip_is_precision_only_inside_both_margins(decision):
    case = vr_case(decision)
    margin = margin_of(case, 0)
    answer = flipped(case)
    above, equal, below = margin * 2, margin, margin / 2
    inside = judge(case, answer, adapter_config([VR], ratio_margin=encode_rational(above)))
    assert inside.cls is PRECISION
    assert inside.diff is not None
    assert inside.diff.path == "requests[0].draws[0].decision" and "ratio_margin" in inside.message
    for limit in (equal, below, Fraction(0)):  # strict: a margin equal to the profile's is not inside
        verdict = judge(case, answer, adapter_config([VR], ratio_margin=encode_rational(limit)))
        assert verdict.cls is FAIL, limit
    # the residual margin does not cover acceptance decisions
    assert judge(case, answer, adapter_config([VR], residual_margin="1/1")).cls is FAIL


@needs_vr
@pytest.mark.rules("R11")
def test_a_flip_inconsistent_with_its_own_draws_fails_even_inside_the_margin():
    case = vr_case("accept")
    answer = copy.deepcopy(case["expected"])
    answer["requests"][0]["draws"][0]["decision"] = "reject"  # accepted count and emission unchanged
    verdict = judge(case, answer, adapter_config([VR], ratio_margin="1/1"))
    assert verdict.cls is FAIL and verdict.diff is not None and verdict.diff.path == "requests[0].draws[0].decision"


@needs_vr
@pytest.mark.rules("R11", "R33")
def test_correction_token_divergence_uses_the_residual_margin():
    case = vr_case("reject")
    margin = margin_of(case, 1)
    answer = copy.deepcopy(case["expected"])
    request = answer["requests"][0]
    other = (request["draws"][1]["token"] + 1) % case["input"]["vocab"]
    request["draws"][1]["token"] = other
    request["emitted"][-1] = other
    inside = judge(case, answer, adapter_config([VR], residual_margin=encode_rational(margin * 2)))
    assert inside.cls is PRECISION and inside.diff is not None and inside.diff.path == "requests[0].draws[1].token"
    assert judge(case, answer, adapter_config([VR], residual_margin=encode_rational(margin))).cls is FAIL
    assert judge(case, answer, adapter_config([VR], ratio_margin="1/1")).cls is FAIL


@needs_vr
@pytest.mark.rules("R11", "R22", "R23")
@pytest.mark.parametrize("field", ["u32", "position", "draw_counter", "domain"])
def test_a_wrong_draw_key_is_always_a_fail(field):
    case = vr_case("accept")
    answer = copy.deepcopy(case["expected"])
    draw = answer["requests"][0]["draws"][0]
    draw[field] = "CORRECTION" if field == "domain" else draw[field] + 1
    verdict = judge(case, answer, adapter_config([VR], ratio_margin="1/1", residual_margin="1/1"))
    assert verdict.cls is FAIL and verdict.diff is not None and verdict.diff.path == f"requests[0].draws[0].{field}"


@needs_vr
@pytest.mark.rules("R11")
def test_emitted_and_accepted_must_match_when_the_draws_do():
    case = vr_case("accept")
    answer = copy.deepcopy(case["expected"])
    answer["requests"][0]["emitted"][-1] = (answer["requests"][0]["emitted"][-1] + 1) % case["input"]["vocab"]
    verdict = judge(case, answer, adapter_config([VR], residual_margin="1/1"))
    assert verdict.cls is FAIL and verdict.diff is not None and verdict.diff.path == "requests[0].emitted[1]"


@needs_vr
@pytest.mark.rules("R11")
def test_an_adapter_margin_is_not_compared():
    case = vr_case("accept")
    answer = copy.deepcopy(case["expected"])
    answer["requests"][0]["draws"][0]["margin"] = "0/1"
    assert judge(case, answer, adapter_config([VR])).cls is PASS
    del answer["requests"][0]["draws"][0]["margin"]
    assert judge(case, answer, adapter_config([VR])).cls is PASS


@needs_vr
@pytest.mark.rules("R11", "R27")
def test_malformed_verification_answers_are_errors():
    case = vr_case("accept")
    config = adapter_config([VR])
    too_many = copy.deepcopy(case["expected"])
    too_many["requests"][0]["emitted"] += [0, 0, 0]
    assert "more than K + 1" in judge(case, too_many, config).message
    assert judge(case, {"requests": []}, config).cls is ERROR
    wrong_type = copy.deepcopy(case["expected"])
    wrong_type["requests"][0]["draws"][0]["u32"] = "0x00000001"
    assert judge(case, wrong_type, config).cls is ERROR
    out_of_range = copy.deepcopy(case["expected"])
    out_of_range["requests"][0]["emitted"][-1] = case["input"]["vocab"]
    verdict = judge(case, out_of_range, config)
    assert verdict.cls is FAIL and "outside the vocabulary" in verdict.message


# --- allocation_dense / allocation_sparse: FP64 near-ties and exp margins ---------------------

AD, AS = "allocation_dense", "allocation_sparse"
needs_alloc = pytest.mark.skipif(AD not in FAMILIES or AS not in FAMILIES, reason="allocation not generated yet")


def flagged(family: str, flag: str) -> dict:
    found = [c for c in family_cases(family) if flag in c["flags"]]
    if not found:
        pytest.skip(f"{family} has no {flag} case")
    return found[0]


def moved_ticket(expected: dict) -> dict:
    """The expected dense answer with one count moved from the largest entry to the next token."""
    counts, shape = decode_blob(expected["counts"])
    src = counts.index(max(counts))
    counts[src] -= 1
    counts[(src + 1) % len(counts)] += 1
    return dict(copy.deepcopy(expected), counts=encode_blob("u32", counts, shape))


@needs_alloc
@pytest.mark.rules("R06")
def test_the_fp64_recipe_answer_is_precision_only_for_an_fp64_profile():
    case = flagged(AD, "FP64_DIFFERS")
    assert case["expected"]["fp64_may_differ"] is True
    weights = case["input"]["weights"]
    fp64_counts = allocate_dense_fp64(decode_blob(weights)[0], weights["dtype"])
    answer = dict(copy.deepcopy(case["expected"]), counts=encode_blob("u32", fp64_counts))
    exact = judge(case, answer, adapter_config([AD]))
    assert exact.cls is FAIL and exact.diff is not None and exact.diff.path.startswith("counts[")
    fp64 = judge(case, answer, adapter_config([AD], fp64_allocation=True))
    assert fp64.cls is PRECISION and fp64.diff == exact.diff and "fp64_may_differ" in fp64.message


@needs_alloc
@pytest.mark.rules("R06")
def test_a_wrong_allocation_far_from_a_tie_fails_even_for_an_fp64_profile():
    case = next(c for c in family_cases(AD) if not c["expected"]["fp64_may_differ"] and "logits" not in c["input"])
    verdict = judge(case, moved_ticket(case["expected"]), adapter_config([AD], fp64_allocation=True))
    assert verdict.cls is FAIL and verdict.diff is not None and verdict.diff.path.startswith("counts[")


@needs_alloc
@pytest.mark.rules("R03", "R06")
def test_counts_that_do_not_sum_to_m_fail_and_case_margins_are_not_compared():
    case = flagged(AD, "FP64_DIFFERS")
    counts, shape = decode_blob(case["expected"]["counts"])
    counts[0] += 1
    answer = dict(copy.deepcopy(case["expected"]), counts=encode_blob("u32", counts, shape))
    verdict = judge(case, answer, adapter_config([AD], fp64_allocation=True))
    assert verdict.cls is FAIL and verdict.diff is not None and verdict.diff.path == "sum(counts)"
    slim = {k: v for k, v in case["expected"].items() if k in ("counts", "remaining")}
    assert judge(case, slim, adapter_config([AD])).cls is PASS
    assert judge(case, dict(slim, tie_gap="5/1"), adapter_config([AD])).cls is PASS
    wrong_length = dict(slim, counts=encode_blob("u32", counts[:-1] + [0] * 0))
    assert judge(case, wrong_length, adapter_config([AD])).cls is ERROR


@needs_alloc
@pytest.mark.rules("R06")
def test_an_fp64_refusal_of_an_overflowing_sum_is_precision_only_for_an_fp64_profile():
    case = flagged(AD, "FP64_SUM_OVERFLOW")
    refusal = {"error": "INCONSISTENT_ALLOCATION"}
    assert judge(case, refusal, adapter_config([AD])).cls is FAIL
    assert judge(case, refusal, adapter_config([AD], fp64_allocation=True)).cls is PRECISION
    assert judge(case, {"error": "ZERO_MASS"}, adapter_config([AD], fp64_allocation=True)).cls is FAIL


@needs_alloc
@pytest.mark.rules("R05", "R06")
@pytest.mark.parametrize("family", [AD, AS])
def test_an_exp_weight_one_ulp_off_is_precision_only_inside_the_exp_margin(family):
    case = next(
        (c for c in family_cases(family) if "logits" in c["input"] and Fraction(c["expected"]["exp_margin_ulp"]) > 0),
        None,
    )
    if case is None:
        pytest.skip(f"{family} has no logits case with a positive exp margin")
    margin = Fraction(case["expected"]["exp_margin_ulp"])
    weights, shape = decode_blob(case["expected"]["weights"])
    index = next(i for i, w in enumerate(weights) if w not in (0, 0x80000000))
    one_ulp = dict(
        copy.deepcopy(case["expected"]),
        weights=encode_blob("f32", weights[:index] + [weights[index] + 1] + weights[index + 1 :], shape),
    )
    inside = judge(case, one_ulp, adapter_config([family], exp_ulp=encode_rational(margin * 2)))
    assert inside.cls is PRECISION and inside.diff is not None and inside.diff.path == f"weights[{index}]"
    assert judge(case, one_ulp, adapter_config([family], exp_ulp=encode_rational(margin))).cls is FAIL
    assert judge(case, one_ulp, adapter_config([family], fp64_allocation=True)).cls is FAIL
    two_ulp = dict(
        one_ulp, weights=encode_blob("f32", weights[:index] + [weights[index] + 2] + weights[index + 1 :], shape)
    )
    assert judge(case, two_ulp, adapter_config([family], exp_ulp=encode_rational(margin * 2))).cls is FAIL


@pytest.mark.parametrize("family", [AD, AS])
def test_exp_weights_equal_to_the_expected_ones_pass_unless_one_is_a_nan(family):
    """The comparator passes equal weights after one look at their bytes, but a NaN weight is
    garbage even where the expected weights hold the same NaN (their bytes equal), and so is one
    that differs: an answer is never judged by bytes alone when a NaN may hide in it."""
    case = next((c for c in family_cases(family) if "logits" in c["input"]), None)
    if case is None:
        pytest.skip(f"{family} has no logits case")
    weights, shape = decode_blob(case["expected"]["weights"])
    config = adapter_config([family])
    assert judge(case, copy.deepcopy(case["expected"]), config).cls is VerdictClass.PASS
    for nan in (0x7FC00000, 0xFF800001):  # a quiet NaN, a negative signalling one
        with_nan = dict(copy.deepcopy(case["expected"]), weights=encode_blob("f32", [nan, *weights[1:]], shape))
        same = dict(case, expected=with_nan)
        verdict = judge(same, copy.deepcopy(with_nan), config)
        assert verdict.cls is VerdictClass.ERROR and "NaN" in verdict.message, verdict.line()


def test_may_hold_f32_nan_is_false_only_without_a_nan_exponent():
    """Its boundary: a high byte of 0x7f or 0xff (every NaN's, and the largest finite values')
    says maybe; 0x7e, 0x80 and 0xfe say no."""
    from qconform.harness.judging.value_diff import may_hold_f32_nan

    def blob(*bits: int) -> memoryview:
        return memoryview(b"".join(b.to_bytes(4, "little") for b in bits))

    assert not may_hold_f32_nan(blob(0x3F800000, 0x7EFFFFFF, 0x80000000, 0xFE7FFFFF))
    for maybe in (0x7FC00000, 0x7F800001, 0xFFC00000, 0x7F7FFFFF, 0x7F800000):
        assert may_hold_f32_nan(blob(0x3F800000, maybe)), hex(maybe)
    assert not may_hold_f32_nan(blob(0x007F00FF))  # 0x7f and 0xff in the low bytes are not the high byte


@needs_alloc
@pytest.mark.rules("R07")
def test_sparse_answers_are_compared_token_by_token():
    case = next(
        c for c in family_cases(AS) if "weights" in c["input"] and len(decode_blob(c["expected"]["ids"])[0]) > 2
    )
    config = adapter_config([AS])
    expected = case["expected"]
    ids, counts = decode_blob(expected["ids"])[0], decode_blob(expected["counts"])[0]
    swapped = dict(
        copy.deepcopy(expected),
        ids=encode_blob("i32", [ids[1], ids[0], *ids[2:]]),
        counts=encode_blob("u32", [counts[1], counts[0], *counts[2:]]),
    )
    verdict = judge(case, swapped, config)
    assert verdict.cls is FAIL and "not canonical" in verdict.message
    with_zero = dict(
        copy.deepcopy(expected),
        ids=encode_blob("i32", [*ids, max(ids) + 1]) if max(ids) + 1 < 2**31 else expected["ids"],
        counts=encode_blob("u32", [*counts, 0]),
    )
    assert judge(case, with_zero, config).cls is FAIL
    lengths = dict(copy.deepcopy(expected), counts=encode_blob("u32", counts[:-1]))
    assert judge(case, lengths, config).cls is ERROR
    moved = list(counts)
    moved[0], moved[1] = moved[0] - 1, moved[1] + 1
    if moved[0] > 0:
        diff = judge(case, dict(copy.deepcopy(expected), counts=encode_blob("u32", moved)), config).diff
        assert diff is not None and diff.path == f"counts[token {ids[0]}]"
    support = decode_blob(expected["support"])[0]
    other = dict(copy.deepcopy(expected), support=encode_blob("i32", support[:-1] + [support[-1] + 1]))
    other_support = judge(case, other, config).diff
    assert other_support is not None and other_support.path == "support"


# --- proposal_chain: row by row ------------------------------------------------------------------

PC = "proposal_chain"
needs_pc = pytest.mark.skipif(PC not in FAMILIES, reason="proposal_chain not generated yet")


def pc_case(policy: str) -> dict:
    return next(c for c in family_cases(PC) if c["input"]["support"]["policy"] == policy)


def perturbed_first_row(case: dict) -> dict:
    """The expected answer with one ticket of row 0 moved, and token 0 resampled from it."""
    answer = copy.deepcopy(case["expected"])
    row = answer["rows"][0]
    counts = decode_blob(row["counts"])[0]
    src = counts.index(max(counts))
    dst = next(i for i in range(len(counts)) if i != src)
    counts[src], counts[dst] = counts[src] - 1, counts[dst] + 1
    row["counts"] = encode_blob("u32", counts)
    ids = decode_blob(row["ids"])[0] if "ids" in row else list(range(len(counts)))
    answer["tokens"][0] = sample_sparse(ids, counts, answer["draws"][0]["u24"])
    return answer


@needs_pc
@pytest.mark.rules("R05", "R08")
@pytest.mark.parametrize("policy", ["dense", "top_k"])
def test_a_row_inside_its_exp_margin_is_precision(policy):
    case = pc_case(policy)
    margin = Fraction(case["expected"]["exp_margin_ulp"][0])
    answer = perturbed_first_row(case)
    inside = judge(case, answer, adapter_config([PC], exp_ulp=encode_rational(margin * 2)))
    assert inside.cls is PRECISION and inside.diff is not None and inside.diff.path.startswith("rows[0].counts[")
    assert judge(case, answer, adapter_config([PC], exp_ulp=encode_rational(margin))).cls is FAIL
    assert judge(case, answer, adapter_config([PC], fp64_allocation=True)).cls is FAIL


@needs_pc
@pytest.mark.rules("R06")
@pytest.mark.parametrize("policy", ["dense", "top_k"])
def test_a_row_is_excused_for_fp64_only_where_the_case_says_fp64_may_differ(policy):
    case = copy.deepcopy(pc_case(policy))
    assert case["expected"]["fp64_may_differ"][0] is False
    answer = perturbed_first_row(case)
    fp64 = adapter_config([PC], fp64_allocation=True)
    assert judge(case, answer, fp64).cls is FAIL
    case["expected"]["fp64_may_differ"][0] = True  # constructed: row 0 is an FP64 near-tie
    excused = judge(case, answer, fp64)
    assert excused.cls is PRECISION and "row 0 fp64_may_differ" in excused.message
    assert judge(case, answer, adapter_config([PC])).cls is FAIL
    case["expected"]["fp64_may_differ"][1] = True  # a near-tie in another row excuses nothing in row 0
    case["expected"]["fp64_may_differ"][0] = False
    assert judge(case, answer, fp64).cls is FAIL


def tie_order_reversed(case: dict, i: int) -> dict:
    """The expected answer with row i's tied tickets given to the highest IDs of equal weight instead."""
    answer = copy.deepcopy(case["expected"])
    row = answer["rows"][i]
    counts = decode_blob(row["counts"])[0]
    ids = decode_blob(row["ids"])[0] if "ids" in row else list(range(len(counts)))
    weights = decode_blob(case["input"]["base_logits"])[0]  # no Markov bias: equal logits, equal weights
    vocab = decode_blob(case["input"]["base_logits"])[1][1]
    logit = {v: weights[i * vocab + v] for v in ids}
    for j, v in enumerate(ids):
        later = [w for w in ids[j + 1 :] if logit[w] == logit[v] and counts[ids.index(w)] == counts[j] - 1]
        if later:
            counts[j], counts[ids.index(later[-1])] = counts[j] - 1, counts[j]
            break
    else:
        raise AssertionError(f"row {i} has no tie between equal weights")
    row["counts"] = encode_blob("u32", counts)
    answer["tokens"][i] = sample_sparse(ids, counts, answer["draws"][i]["u24"])
    return answer


@needs_pc
@pytest.mark.rules("R06")
@pytest.mark.parametrize("name", ["dense-v7-equal-logits", "topk5-v12-equal-logits"])
def test_a_wrong_order_of_an_exact_tie_between_equal_weights_fails_an_fp64_profile(name):
    case = next(c for c in family_cases(PC) if c["id"] == f"{PC}/exact_ties/{name}")
    i = next(i for i, gap in enumerate(case["expected"]["tie_gap"]) if Fraction(gap) == 0)
    assert case["expected"]["fp64_may_differ"][i] is False
    answer = tie_order_reversed(case, i)
    verdict = judge(case, answer, adapter_config([PC], fp64_allocation=True))
    assert verdict.cls is FAIL and verdict.diff is not None and verdict.diff.path.startswith(f"rows[{i}].counts[")


@needs_pc
@pytest.mark.rules("R08", "R22")
def test_chain_draws_and_sampling_are_exact():
    case = pc_case("dense")
    config = adapter_config([PC], exp_ulp="1000000/1", fp64_allocation=True)
    wrong_draw = copy.deepcopy(case["expected"])
    wrong_draw["draws"][2]["u24"] ^= 1
    verdict = judge(case, wrong_draw, config)
    assert verdict.cls is FAIL and verdict.diff is not None and verdict.diff.path == "draws[2].u24"
    resampled = copy.deepcopy(case["expected"])
    resampled["tokens"][1] = (resampled["tokens"][1] + 1) % decode_blob(case["input"]["base_logits"])[1][1]
    verdict = judge(case, resampled, config)
    assert (
        verdict.cls is FAIL
        and verdict.diff is not None
        and verdict.diff.path == "tokens[1]"
        and "R08" in verdict.message
    )
    short = copy.deepcopy(case["expected"])
    short["tokens"].pop()
    assert judge(case, short, config).cls is ERROR
    slim = {k: case["expected"][k] for k in ("tokens", "rows", "draws")}
    assert judge(case, copy.deepcopy(slim), adapter_config([PC])).cls is PASS


# --- garbage is an error on both validation paths (docs/harness.md, "Structure-only validation") ---

#: a value of each JSON type, to put where another type belongs
OTHER_TYPES = ("garbage", 7, [], {}, None, True)


def first_blob(value: object, path: tuple = ()) -> tuple | None:
    """The key path of the first blob inside ``value``, or None."""
    if isinstance(value, dict):
        if set(value) == {"dtype", "shape", "b64"}:
            return path
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = first_blob(item, (*path, key))
        if found is not None:
            return found
    return None


def replaced(value: dict, path: tuple, new: object) -> dict:
    out = copy.deepcopy(value)
    holder = out
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = new
    return out


def garbage_answers(expected: dict, margins: tuple[str, ...] = ()) -> list[tuple[str, dict]]:
    """Malformed variants of a valid ``expected``: missing and surplus keys, every top-level
    value of every other JSON type, and its first blob with a NaN, another dtype or shape.
    The family's ``margins`` are left alone: an answer may omit them, and no comparator
    reads them (only ``--strict-schema`` types them when present)."""
    variants: list[tuple[str, dict]] = [("surplus key", dict(expected, surplus=1))]
    for key in sorted(set(expected) - set(margins)):
        variants.append((f"missing {key}", {k: v for k, v in expected.items() if k != key}))
        for other in OTHER_TYPES:
            if type(other) is not type(expected[key]):
                variants.append((f"{key} as {other!r}", dict(expected, **{key: other})))
    path = first_blob(expected)
    if path is not None:
        holder = expected
        for key in path:
            holder = holder[key]
        values, shape = decode_blob(holder)
        size = {"u8": 1, "i32": 4, "u32": 4, "f32": 4, "u64": 8, "f64": 8}[holder["dtype"]]
        swap = {1: ("u8", "u8"), 4: ("i32", "u32"), 8: ("u64", "f64")}[size]
        dtype = swap[0] if holder["dtype"] != swap[0] else swap[1]
        if dtype != holder["dtype"]:
            variants.append(("blob dtype", replaced(expected, path, {**holder, "dtype": dtype})))
        variants.append(("blob shape", replaced(expected, path, {**holder, "shape": [1, *shape]})))
        if holder["dtype"] == "f32" and values:
            nan = encode_blob("f32", [0x7FC00000, *values[1:]], shape)
            variants.append(("blob NaN", replaced(expected, path, nan)))
    return variants


def through_the_checks(case: dict, output: dict, strict_schema: bool):
    """The verdict on ``output`` after the client's output check, as a run gives it."""
    family = case["family"]
    outcome = entry_to_outcome(
        {"status": "ok", "output": output}, lambda out: check_output(family, out, strict_schema=strict_schema)
    )
    return judge(case, outcome, adapter_config([family]))


#: (comparator, variant) pairs that are a ``fail`` by design, on both paths: a wire answer shaped
#: differently from ``expected`` is a divergence the wire comparator names (harness/judging/wire.py)
FAIL_BY_DESIGN = {("wire", "blob shape")}


@pytest.mark.rules()
@pytest.mark.parametrize("strict_schema", [False, True], ids=["structure-only", "strict-schema"])
@pytest.mark.parametrize("family", FAMILIES)
def test_garbage_answers_are_errors_on_both_validation_paths(family, strict_schema):
    case = first_case(family, "valid")
    assert through_the_checks(case, copy.deepcopy(case["expected"]), strict_schema).cls is PASS
    spec = load_family(family)
    wrong = []
    for what, output in garbage_answers(case["expected"], spec.margins):
        try:
            verdict = through_the_checks(case, output, strict_schema)
        except Exception as exc:  # noqa: BLE001 - a comparator that crashes on garbage is the bug sought
            wrong.append((what, "raised", repr(exc)))
            continue
        if (spec.comparator, what) in FAIL_BY_DESIGN:
            assert verdict.cls is FAIL, (what, verdict)
        elif verdict.cls is not ERROR or "malformed" not in verdict.message:
            wrong.append((what, verdict.cls, verdict.message))
    assert wrong == []
