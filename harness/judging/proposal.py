"""Comparator of ``proposal_chain``: row by row, with the FP64 and exp precision classes.

An answer holds ``tokens`` (K), ``rows`` (K q rows) and ``draws`` (K proposal
draws: position, counter words, u24). The case's per-row ``exp_margin_ulp``,
``tie_gap`` and ``fp64_may_differ`` are its margins: an answer may omit them and
they are never compared.

A proposal draw depends only on the RNG identity and the position, never on
earlier tokens, so every answered draw must equal the expected one: a
difference is an RNG-ABI ``fail``. Rows are then compared in order. At the first
row whose counts differ, the divergence is ``precision`` when

* the profile declares ``fp64_allocation`` and the case's ``fp64_may_differ[i]``
  is true (the same per-row verdict as the allocation families': the tie gap
  between tokens of *different* weights within twice the row's FP64 error
  bound, so an exact tie between equal weights is never excused), or
* the row's ``exp_margin_ulp`` is below the profile's ``exp_ulp``;

and the answered row is still a dyadic24 row (counts summing to M, the
expected representation). Every answered token must be the one its own draw
picks from its own row (R08): a chain that samples wrongly fails even after a
precision divergence. Once a token differs from the expected one, later rows are
conditioned on another prefix and are checked only for that self-consistency.
Wrong lengths (not K tokens, rows or draws) are malformed (``error``).
"""

from __future__ import annotations

from qconform.generators.encoding import decode_rational, u32_values
from qconform.generators.registry import load_family
from qconform.harness.adapter import PrecisionProfile
from qconform.harness.judging.allocation import (
    answered_view,
    count_difference,
    dense_row_difference,
    sparse_problem,
    token_counts,
)
from qconform.harness.judging.judge import profile_margin
from qconform.harness.judging.value_diff import Malformed, first_difference, u32_total
from qconform.harness.verdicts import Diff, Verdict, brief, failed, passed, precision
from qconform.spec.constants import M
from qconform.spec.sampling import sample_counts, sample_sparse

CASE_MARGINS = load_family("proposal_chain").margins
ANSWER_FIELDS = ("tokens", "rows", "draws")


def check_answer(output: dict, depth: int) -> None:
    if not set(ANSWER_FIELDS) <= set(output) <= set(ANSWER_FIELDS + CASE_MARGINS):
        raise Malformed("", f"the answer must hold {list(ANSWER_FIELDS)} (and optionally {list(CASE_MARGINS)})")
    for key in ANSWER_FIELDS:
        if not isinstance(output[key], list) or len(output[key]) != depth:
            raise Malformed(key, f"must be a list of K = {depth} entries")
    if not all(type(t) is int for t in output["tokens"]):
        raise Malformed("tokens", "must be integer token ids")


def row_excuse(case: dict, i: int, profile: PrecisionProfile) -> str | None:
    """Why a divergent row ``i`` lies inside the declared margins, if it does."""
    expected = case["expected"]
    exp_margin = decode_rational(expected["exp_margin_ulp"][i])
    exp_ulp = profile_margin(profile, "exp_ulp")
    if profile.fp64_allocation and expected["fp64_may_differ"][i]:
        tie_gap = decode_rational(expected["tie_gap"][i])
        return f"row {i} fp64_may_differ (tie_gap {brief(tie_gap)}) and the profile allocates in FP64"
    if exp_margin < exp_ulp:
        return f"row {i} exp_margin_ulp {brief(exp_margin)} < profile exp_ulp {brief(exp_ulp)}"
    return None


def sampled_token(counts: dict[int, int], u24: int) -> int:
    ids = sorted(counts)
    return sample_sparse(ids, [counts[v] for v in ids], u24)


def compare(case: dict, output: dict, profile: PrecisionProfile) -> Verdict:
    case_id, expected, inp = case["id"], case["expected"], case["input"]
    depth, vocab = inp["base_logits"]["shape"]  # a corpus blob, validated at load: its shape, not its V x K values
    check_answer(output, depth)
    diff = first_difference(expected["draws"], output["draws"], "draws")
    if diff is not None:
        return failed(case_id, f"proposal draw differs (RNG ABI) at {diff}", diff)
    excused: tuple[Diff, str] | None = None
    same_prefix = True
    for i, (want_row, got_row) in enumerate(zip(expected["rows"], output["rows"])):
        path = f"rows[{i}]"
        if not isinstance(got_row, dict) or got_row.get("representation") != want_row["representation"]:
            got = got_row.get("representation") if isinstance(got_row, dict) else type(got_row).__name__
            return failed(
                case_id,
                f"{path} is not a {want_row['representation']} q row",
                Diff(f"{path}.representation", want_row["representation"], str(got)),
            )
        if set(got_row) != set(want_row):
            raise Malformed(path, f"a {want_row['representation']} q row has exactly the fields {sorted(want_row)}")
        # a dense row (V counts) is read as a list, a sparse one as a token -> count dict
        dense = "ids" not in got_row
        if dense:
            got_view = answered_view(got_row, "counts", "u32", [vocab])
            got_dense = u32_values(got_view)
            total = u32_total(got_view)
        else:
            got_counts = token_counts(got_row, True)
            total = sum(got_counts.values())
        problem = None if dense else sparse_problem(got_row)
        if problem is not None:
            diff = Diff(f"{path}.{problem.path}", problem.expected, problem.got)
            return failed(case_id, f"{path} is not canonical (R07): {diff}", diff)
        if total != M:
            diff = Diff(f"sum({path}.counts)", str(M), str(total))
            return failed(case_id, f"{path} is not a dyadic24 row: {diff}", diff)
        token, u24 = output["tokens"][i], output["draws"][i]["u24"]
        picked = sample_counts(got_dense, u24) if dense else sampled_token(got_counts, u24)  # ids 0..V-1 if dense
        if token != picked:
            diff = Diff(f"tokens[{i}]", str(picked), str(token))
            return failed(case_id, f"token {i} is not what its own draw picks from its own row (R08): {diff}", diff)
        if not same_prefix:
            continue
        if dense:
            row_diff = dense_row_difference(want_row["counts"], got_view)
        else:
            row_diff = count_difference(token_counts(want_row, False), got_counts)
        if row_diff is not None:
            row_diff = Diff(f"{path}.{row_diff.path}", row_diff.expected, row_diff.got)
            reason = row_excuse(case, i, profile)
            if reason is None:
                return failed(case_id, f"q row differs at {row_diff}", row_diff)
            excused = excused or (row_diff, reason)
        if token != expected["tokens"][i]:
            if row_diff is None:
                diff = Diff(f"tokens[{i}]", str(expected["tokens"][i]), str(token))
                return failed(case_id, f"token differs at {diff}", diff)
            same_prefix = False
    if excused is None:
        return passed(case_id)
    diff, reason = excused
    return precision(case_id, f"q row differs at {diff} within declared margins: {reason}", diff)
