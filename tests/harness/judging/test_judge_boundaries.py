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
from qconform.generators.families.verification_round import decode_request
from qconform.harness.adapter import AdapterConfig, Capabilities, PrecisionProfile
from qconform.harness.judging.judge import judge
from qconform.harness.judging.sharding import SUM_FIELDS
from qconform.harness.judging.verification import support_text
from qconform.harness.verdicts import VerdictClass, brief
from qconform.spec.verification import residual_row

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


@pytest.mark.rules("R05")
def test_a_nan_exp_weight_is_garbage_not_a_divergence():
    """A logits row answered with a NaN weight is malformed (``error``), not a weight within or
    beyond the exp margin: even a profile that excuses every ulp does not judge it."""
    case = next(
        (c for c in family_cases("allocation_dense") if c["result"] == "valid" and "weights" in c["expected"]), None
    )
    if case is None:
        pytest.skip("no logits row in allocation_dense")
    weights, shape = decode_blob(case["expected"]["weights"])
    answer = dict(copy.deepcopy(case["expected"]), weights=encode_blob("f32", [0x7FC00000, *weights[1:]], shape))
    verdict = judge(case, answer, adapter_config(["allocation_dense"], exp_ulp="1000000/1"))
    assert verdict.cls is ERROR and "NaN" in verdict.message and "weights[0]" in verdict.message


@pytest.mark.rules("R11")
def test_emitted_tokens_that_are_not_a_list_are_garbage():
    case = next(c for c in family_cases("verification_round") if c["result"] == "valid")
    answer = copy.deepcopy(case["expected"])
    answer["requests"][0]["emitted"] = {"0": answer["requests"][0]["emitted"][0]}
    verdict = judge(case, answer, adapter_config(["verification_round"]))
    assert verdict.cls is ERROR and "emitted" in verdict.message and "list" in verdict.message


@pytest.mark.rules("R30")
def test_an_answer_with_a_shard_missing_is_judged_not_raised():
    case = sharding_case()
    answer = copy.deepcopy(case["expected"])
    answer["shards"].pop()
    verdict = judge(case, answer, adapter_config(["sharding"]))
    assert verdict.cls in (FAIL, ERROR) and verdict.message


@pytest.mark.rules("R30", "R33")
def test_a_precision_verdict_names_the_first_differing_sum():
    """With several sums off within sum_rel, the verdict's diff is the first in answer order
    (the shards before the merge), as a person reads the answer."""
    case = sharding_case()
    sum_rel = Fraction(1, 1 << 40)
    answer = copy.deepcopy(case["expected"])
    paths = []
    for where, obj in [(f"shards[{i}]", shard) for i, shard in enumerate(answer["shards"])] + [
        ("merged", answer["merged"])
    ]:
        for key in SUM_FIELDS:
            if key in obj and decode_rational(obj[key]) != 0:
                obj[key] = encode_rational(decode_rational(obj[key]) * (1 + sum_rel / 2))
                paths.append(f"{where}.{key}")
    assert len(paths) >= 2
    verdict = judge(case, answer, adapter_config(["sharding"], sum_rel=encode_rational(sum_rel)))
    assert verdict.cls is PRECISION and verdict.diff is not None and verdict.diff.path == paths[0]
    assert f"{len(paths)} sum(s) differ" in verdict.message


PC, VR = "proposal_chain", "verification_round"


@pytest.mark.rules("R05", "R08")
def test_a_token_that_differs_because_its_row_is_excused_is_precision_not_a_fail():
    """Row 0 answered inside the exp margin, and its own draw picks another token from it: the token
    differs as a consequence of an excused row, so the chain is ``precision`` (a token that differs
    under an equal row cannot pick itself, R08, and fails). Without the margin the row fails."""
    case = next(c for c in family_cases(PC) if c["result"] == "valid" and "ids" not in c["expected"]["rows"][0])
    answer = copy.deepcopy(case["expected"])
    counts = decode_blob(answer["rows"][0]["counts"])[0]
    other = next(v for v in range(len(counts)) if v != answer["tokens"][0])
    # every ticket on one other token: still a dyadic24 row, and any draw picks that token from it
    answer["rows"][0]["counts"] = encode_blob("u32", [sum(counts) if v == other else 0 for v in range(len(counts))])
    answer["tokens"][0] = other
    verdict = judge(case, answer, adapter_config([PC], exp_ulp="1000000/1"))
    assert verdict.cls is PRECISION and verdict.diff is not None and verdict.diff.path.startswith("rows[0].counts[")
    assert judge(case, answer, adapter_config([PC])).cls is FAIL


def rejected_then_corrected() -> tuple[dict, int]:
    """A single-request verification case whose draw j rejects with margin > 0 and a correction follows."""
    for case in family_cases(VR):
        if case["result"] != "valid" or len(case["input"]["requests"]) != 1:
            continue
        decisions = [d["decision"] for d in case["expected"]["requests"][0]["draws"]]
        if "reject" in decisions and decisions[-1] == "correction":
            j = decisions.index("reject")
            if decode_rational(case["expected"]["requests"][0]["draws"][j]["margin"]) > 0:
                return case, j
    pytest.skip("no verification case that rejects with a margin and corrects")


@pytest.mark.rules("R11")
def test_a_flip_to_accept_where_the_answer_ends_with_no_final_draw_is_precision():
    """The answer accepts draft j where the spec rejects it, then ends its round there with no
    correction or bonus draw (as a stop token or the budget would end it): it is consistent with
    its own draws (accepted = its leading accepts, emitted = exactly those drafts), so the flip is
    ``precision`` inside ``ratio_margin`` and ``fail`` at it."""
    case, j = rejected_then_corrected()
    answer = copy.deepcopy(case["expected"])
    request = answer["requests"][0]
    request["draws"] = request["draws"][: j + 1]
    request["draws"][j]["decision"] = "accept"
    request["accepted"] = j + 1
    request["emitted"] = case["input"]["requests"][0]["draft_tokens"][: j + 1]
    margin = decode_rational(case["expected"]["requests"][0]["draws"][j]["margin"])
    inside = judge(case, answer, adapter_config([VR], ratio_margin=encode_rational(margin * 2)))
    assert inside.cls is PRECISION and inside.diff is not None
    assert inside.diff.path == f"requests[0].draws[{j}].decision"
    assert judge(case, answer, adapter_config([VR], ratio_margin=encode_rational(margin))).cls is FAIL


@pytest.mark.rules("R11", "R33")
@pytest.mark.parametrize("size", [1, 8, 9, 10])
def test_a_residual_support_is_named_by_its_eight_smallest_tokens_and_how_many_more(size):
    """Partial injection names the support a token outside it misses (a support of thousands of
    tokens is not printed whole): up to 8 tokens in full, then the 8 smallest and the count of
    the rest; 8 and 9 tokens are the two sides of the cut."""
    support = {3 * v + 1 for v in range(size)}
    text = support_text(support)
    shown = sorted(support)[:8]
    assert text.split(" and ")[0] == ", ".join(map(str, shown))
    if size > 8:
        assert text.endswith(f" and {size - 8} more")
    else:
        assert " and " not in text


PB = "proposal_batch"


def batch_case(requests: int) -> dict:
    return next(c for c in family_cases(PB) if c["result"] == "valid" and len(c["input"]["requests"]) >= requests)


@pytest.mark.rules("R08")
def test_a_batch_fails_at_its_first_failing_request_with_the_request_in_the_path():
    """Request 1's token changed (request 0 right): ``fail`` names request 1 and its path is prefixed
    ``requests[1].``, not the chain's own path."""
    case = batch_case(2)
    answer = copy.deepcopy(case["expected"])
    chain = answer["requests"][1]
    vocab = case["input"]["requests"][1]["base_logits"]["shape"][1]
    chain["tokens"][0] = (chain["tokens"][0] + 1) % vocab
    verdict = judge(case, answer, adapter_config([PB]))
    assert verdict.cls is FAIL and verdict.message.startswith("request 1: ")
    assert verdict.diff is not None and verdict.diff.path == "requests[1].tokens[0]"


@pytest.mark.rules()
def test_a_chain_answer_that_is_not_an_object_is_named_by_the_batch_comparator():
    """``requests[0]`` answered as a number: ``error`` that says a chain answer is an object (the
    comparator's own words, not an exception caught further out)."""
    case = batch_case(1)
    answer = copy.deepcopy(case["expected"])
    answer["requests"][0] = 7
    verdict = judge(case, answer, adapter_config([PB]))
    assert verdict.cls is ERROR and "requests[0]" in verdict.message
    assert "a chain answer is an object, not int" in verdict.message


@pytest.mark.rules("R07")
@pytest.mark.parametrize("moved", ["first id one lower", "last id one higher"])
def test_a_sparse_answer_with_a_token_the_other_side_lacks_fails_at_that_token(moved):
    """The same counts on one ID moved to an ID the expected row lacks (support unchanged, still
    canonical and summing to M): ``fail`` at the first token by ID, the missing side counted 0."""
    case = next(
        c
        for c in family_cases(AS)
        if c["result"] == "valid" and decode_blob(c["expected"]["ids"])[0][0] >= 1 and "weights" not in c["expected"]
    )
    ids, counts = decode_blob(case["expected"]["ids"])[0], decode_blob(case["expected"]["counts"])[0]
    answer = copy.deepcopy(case["expected"])
    if moved == "first id one lower":
        answered_ids, token, want, got = [ids[0] - 1, *ids[1:]], ids[0] - 1, "0", str(counts[0])
    else:
        answered_ids, token, want, got = [*ids[:-1], ids[-1] + 1], ids[-1], str(counts[-1]), "0"
    answer["ids"] = encode_blob("i32", answered_ids)
    verdict = judge(case, answer, adapter_config([AS]))
    assert verdict.cls is FAIL and verdict.diff is not None
    assert (verdict.diff.path, verdict.diff.expected, verdict.diff.got) == (f"counts[token {token}]", want, got)


@pytest.mark.rules("R05")
def test_a_profile_may_excuse_any_number_of_exp_ulps_but_never_a_flipped_sign():
    """With exp_ulp = 2^32 every weight of the same sign is within reach (``precision``): 2.0 where
    at most 1.0 is expected too (the weights are exp outputs, at most 1.0). The same magnitude
    with the sign bit set is not: ``fail``."""
    case = next(c for c in family_cases("allocation_dense") if c["result"] == "valid" and "weights" in c["expected"])
    weights, shape = decode_blob(case["expected"]["weights"])
    config = adapter_config(["allocation_dense"], exp_ulp=encode_rational(Fraction(1 << 32)))
    two = dict(copy.deepcopy(case["expected"]), weights=encode_blob("f32", [0x40000000, *weights[1:]], shape))
    verdict = judge(case, two, config)
    assert verdict.cls is PRECISION and verdict.diff is not None and verdict.diff.path == "weights[0]"
    negated = dict(
        copy.deepcopy(case["expected"]), weights=encode_blob("f32", [weights[0] | 0x80000000, *weights[1:]], shape)
    )
    verdict = judge(case, negated, config)
    assert verdict.cls is FAIL and verdict.diff is not None and verdict.diff.path == "weights[0]"


@pytest.mark.rules("R08")
def test_a_chain_whose_tokens_are_not_integers_is_garbage():
    case = next(c for c in family_cases(PC) if c["result"] == "valid")
    answer = copy.deepcopy(case["expected"])
    answer["tokens"][0] = str(answer["tokens"][0])
    verdict = judge(case, answer, adapter_config([PC]))
    assert verdict.cls is ERROR and "tokens" in verdict.message and "integer" in verdict.message


@pytest.mark.rules("R07")
def test_a_q_row_with_a_field_its_representation_lacks_is_garbage():
    """A q row otherwise equal to the expected one but with a surplus field: ``error`` naming the
    row and the fields a row of its representation has, not a pass."""
    case = next(c for c in family_cases(PC) if c["result"] == "valid")
    answer = copy.deepcopy(case["expected"])
    answer["rows"][0]["surplus"] = 1
    verdict = judge(case, answer, adapter_config([PC]))
    assert verdict.cls is ERROR and "rows[0]" in verdict.message and "exactly the fields" in verdict.message


def one_request_case(decisions: list[str]) -> dict:
    for case in family_cases(VR):
        if case["result"] == "valid" and len(case["input"]["requests"]) == 1:
            if [d["decision"] for d in case["expected"]["requests"][0]["draws"]] == decisions:
                return case
    pytest.skip(f"no single-request verification case with draws {decisions}")


@pytest.mark.rules("R11")
@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (lambda r, k: r.pop("accepted"), "a request answer must be exactly {accepted, emitted, draws}"),
        (lambda r, k: r.update(accepted=-1), "-1 is not a count in 0.."),
        (lambda r, k: r.update(accepted=k + 1), "is not a count in 0.."),
        (lambda r, k: r.update(draws={"0": r["draws"][0]}), "draws: must be a list of draws"),
        (lambda r, k: r["draws"][0].update(surplus=1), "a draw has exactly the fields"),
    ],
    ids=["keys", "accepted-negative", "accepted-above-K", "draws-not-a-list", "draw-surplus-field"],
)
def test_a_malformed_request_answer_is_named_by_the_verification_comparator(edit, named):
    """Each structural check of a request answer says what is wrong in its own words (an
    exception caught further out would name only the schema)."""
    case = one_request_case(["accept", "reject", "correction"])
    answer = copy.deepcopy(case["expected"])
    edit(answer["requests"][0], len(case["input"]["requests"][0]["draft_tokens"]))
    verdict = judge(case, answer, adapter_config([VR]))
    assert verdict.cls is ERROR and named in verdict.message, verdict.message


@pytest.mark.rules("R11")
def test_k_plus_2_emitted_tokens_and_a_negative_token_are_named_as_such():
    """K + 2 emitted tokens fail as more than K + 1 (flashinfer #879), and an emitted token -1 as
    outside the vocabulary, before any draw is compared."""
    case = one_request_case(["accept", "reject", "correction"])
    depth = len(case["input"]["requests"][0]["draft_tokens"])
    long = copy.deepcopy(case["expected"])
    long["requests"][0]["emitted"] = [0] * (depth + 2)
    verdict = judge(case, long, adapter_config([VR]))
    assert verdict.cls is FAIL and "more than K + 1" in verdict.message
    negative = copy.deepcopy(case["expected"])
    negative["requests"][0]["emitted"][-1] = -1
    verdict = judge(case, negative, adapter_config([VR]))
    assert verdict.cls is FAIL and "outside the vocabulary" in verdict.message


PARTIAL = Capabilities(families=(VR,), injected_domains=((VR, ("ACCEPT",)),))


def partial_answer(case: dict) -> dict:
    answer = copy.deepcopy(case["expected"])
    for request in answer["requests"]:
        request["draws"] = [d for d in request["draws"] if d["domain"] == "ACCEPT"]
    return answer


@pytest.mark.rules("R11", "R33")
def test_partial_mode_names_the_bad_final_token_and_the_emitted_length_it_wants():
    """After two accepted drafts: a correction token outside the residual is named by its own value
    (the last emitted, not the first), and one token too many names the length it wants."""
    case = one_request_case(["accept", "accept", "reject", "correction"])
    config = AdapterConfig("partial", PARTIAL, PrecisionProfile())
    outside = partial_answer(case)
    request = outside["requests"][0]
    rejected = case["input"]["requests"][0]["draft_tokens"][2]
    request["emitted"][-1] = rejected  # a rejected draft has p < q: never in the residual
    verdict = judge(case, outside, config)
    assert verdict.cls is FAIL and verdict.diff is not None
    assert (verdict.diff.path, verdict.diff.got) == ("requests[0].emitted[2]", str(rejected))
    assert "ACCEPT draw for draw; CORRECTION tokens in support" in verdict.message
    longer = partial_answer(case)
    longer["requests"][0]["emitted"].append(0)
    verdict = judge(case, longer, config)
    assert verdict.cls is FAIL and verdict.diff is not None
    assert (verdict.diff.path, verdict.diff.expected) == ("len(requests[0].emitted)", "3")


@pytest.mark.rules("R11", "R33")
def test_an_excused_flip_in_partial_mode_still_needs_its_own_token_in_support():
    """Partial mode: a rejection flipped to accept inside ``ratio_margin`` is ``precision`` only if
    the adapter's own bonus token lies in p_2's support; outside it, ``fail`` at that token."""
    case = copy.deepcopy(next(c for c in family_cases(VR) if c["id"].endswith("depth1-on-boundary-rejects")))
    spec_request = case["input"]["requests"][0]
    # constructed: token 0's mass of p_2 moved to token 1 (the spec's answer, a rejection at draw 0,
    # does not read p_2), so that p_2 has a token outside its support
    p2 = spec_request["p_rows"]["probabilities"][1]
    p2[1], p2[0] = encode_rational(Fraction(p2[0]) + Fraction(p2[1])), "0/1"
    inside, outside = 1, 0
    answer = partial_answer(case)
    request = answer["requests"][0]
    request["draws"][0]["decision"] = "accept"
    request["accepted"] = 1
    config = AdapterConfig("partial", PARTIAL, PrecisionProfile(ratio_margin="1/1048576"))
    request["emitted"] = [spec_request["draft_tokens"][0], inside]
    assert judge(case, answer, config).cls is PRECISION
    request["emitted"] = [spec_request["draft_tokens"][0], outside]
    verdict = judge(case, answer, config)
    assert verdict.cls is FAIL and verdict.diff is not None and verdict.diff.path == "requests[0].emitted[1]"


@pytest.mark.rules("R11", "R22")
def test_partial_mode_reports_a_wrong_draw_key_before_what_follows_from_it():
    """A plain divergence (a draw's u32) is the verdict even when the emission after it is also
    wrong: the first difference is named, not a consequence."""
    case = one_request_case(["accept", "accept", "reject", "correction"])
    answer = partial_answer(case)
    answer["requests"][0]["draws"][0]["u32"] += 1
    answer["requests"][0]["emitted"].append(0)
    verdict = judge(case, answer, AdapterConfig("partial", PARTIAL, PrecisionProfile(ratio_margin="1/1")))
    assert verdict.cls is FAIL and verdict.diff is not None and verdict.diff.path == "requests[0].draws[0].u32"


@pytest.mark.rules("R11", "R33")
def test_a_precision_verdict_over_several_requests_names_the_first():
    """Two requests whose correction tokens both differ within ``residual_margin``: ``precision``,
    its diff in request 0 (the first divergence in batch order, as a person reads the answer)."""
    case = next(
        c
        for c in family_cases(VR)
        if c["result"] == "valid"
        and sum(r["draws"][-1]["decision"] == "correction" for r in c["expected"]["requests"]) >= 2
    )
    answer = copy.deepcopy(case["expected"])
    changed = []
    for r, request in enumerate(answer["requests"]):
        final = request["draws"][-1]
        if final["decision"] == "correction" and len(changed) < 2:
            final["token"] = request["emitted"][-1] = (final["token"] + 1) % case["input"]["vocab"]
            changed.append(f"requests[{r}].draws[{len(request['draws']) - 1}].token")
    verdict = judge(case, answer, adapter_config([VR], residual_margin="2/1"))
    assert verdict.cls is PRECISION and verdict.diff is not None and verdict.diff.path == changed[0]


@pytest.mark.rules("R11", "R33")
def test_an_answer_with_two_final_draws_is_not_consistent_even_inside_the_margin():
    """A correction token that differs within ``residual_margin``, then a bonus draw reported too:
    a round draws at most one correction or bonus, so the answer does not follow from its own
    draws and the divergence is ``fail``, whichever final token it emits (with one final draw it
    is ``precision``)."""
    for case in family_cases(VR):
        if case["result"] != "valid" or len(case["input"]["requests"]) != 1:
            continue
        draws = case["expected"]["requests"][0]["draws"]
        if draws[-1]["decision"] == "correction" and len(draws) < len(case["input"]["requests"][0]["draft_tokens"]):
            break
    else:
        pytest.skip("no verification case that corrects before its last draft")
    vocab = case["input"]["vocab"]
    answer = copy.deepcopy(case["expected"])
    request = answer["requests"][0]
    correction = request["draws"][-1]
    other = (correction["token"] + 1) % vocab
    correction["token"] = request["emitted"][-1] = other
    config = adapter_config([VR], residual_margin="2/1")
    assert judge(case, answer, config).cls is PRECISION
    bonus = dict(correction, decision="bonus", token=(other + 1) % vocab)
    request["draws"].append(bonus)
    for emitted in (other, bonus["token"]):
        request["emitted"][-1] = emitted
        verdict = judge(case, answer, config)
        assert verdict.cls is FAIL and verdict.diff is not None
        assert verdict.diff.path == f"requests[0].draws[{len(request['draws']) - 2}].token"


def accepted_first_with_a_residual() -> tuple[dict, list[Fraction]]:
    """A single-request case whose draw 0 accepts, with a second ACCEPT draw, and whose first
    residual max(p_1 - q_1, 0) is not empty (so a rejection at draw 0 has a token to emit)."""
    for case in family_cases(VR):
        if case["result"] != "valid" or len(case["input"]["requests"]) != 1:
            continue
        draws = case["expected"]["requests"][0]["draws"]
        if draws[0]["decision"] != "accept" or sum(d["domain"] == "ACCEPT" for d in draws) < 2:
            continue
        request = decode_request(case["input"]["requests"][0], case["input"]["vocab"])
        residual = residual_row(request.p_rows[0], request.q_rows[0])
        if any(mass > 0 for mass in residual):
            return case, residual
    pytest.skip("no verification case that accepts draw 0 with a nonempty first residual")


@pytest.mark.rules("R11", "R33")
def test_partial_mode_counts_the_accept_draws_only_when_nothing_diverged_before():
    """An answer whose ACCEPT draws agree with the spec's but stop short (its rejection left out,
    the correction token still in the residual) fails at the draw count; an early rejection
    excused by ``ratio_margin`` (draw 0 flipped, so fewer ACCEPT draws follow from it) is
    ``precision``, its count not compared: what follows a divergence follows from it."""
    case = one_request_case(["accept", "accept", "reject", "correction"])
    short = partial_answer(case)
    del short["requests"][0]["draws"][2]
    verdict = judge(case, short, AdapterConfig("partial", PARTIAL, PrecisionProfile()))
    assert verdict.cls is FAIL and verdict.diff is not None
    assert (verdict.diff.path, verdict.diff.expected, verdict.diff.got) == ("len(requests[0].draws)", "3", "2")
    case, residual = accepted_first_with_a_residual()
    early = partial_answer(case)
    request = early["requests"][0]
    request["draws"] = [dict(request["draws"][0], decision="reject")]
    request["accepted"] = 0
    request["emitted"] = [next(v for v, mass in enumerate(residual) if mass > 0)]
    verdict = judge(case, early, AdapterConfig("partial", PARTIAL, PrecisionProfile(ratio_margin="2/1")))
    assert verdict.cls is PRECISION and verdict.diff is not None
    assert verdict.diff.path == "requests[0].draws[0].decision" and "ratio_margin" in verdict.message
