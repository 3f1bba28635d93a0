"""Comparator of ``allocation_dense`` and ``allocation_sparse``, with the FP64 and exp precision classes.

An answer holds the allocation's outputs: ``counts`` (dense: ``u32[V]``; sparse:
``ids`` ``i32[n]`` and ``counts`` ``u32[n]`` of the positive entries, plus the
selected ``support``) and, for a logits row, the FP32 ``weights`` after the exp.
The case's other expected fields (``remaining``, ``tie_gap``,
``selection_gap``, ``fp64_error_bound``, ``fp64_may_differ``, ``exp_margin_ulp``)
are the case's own margins: an answer may omit them and they are never compared.

Order of comparison, first divergence decides:

1. ``weights`` (logits rows): a divergence is ``precision`` when the case's
   ``exp_margin_ulp`` is below the profile's ``exp_ulp`` and every answered
   weight is within ``max(1, ceil(exp_ulp))`` units in the last place of the
   expected one; the counts then follow other weights and are only checked to
   sum to M;
2. ``support`` (sparse): exact;
3. counts, token by token (a sparse token absent from ``ids`` has count 0): a
   divergence is ``precision`` when the case says ``fp64_may_differ`` and the
   profile declares ``fp64_allocation``, and the answered counts still sum to
   exactly M.

``remaining`` (the tickets left after the floors) is a margin, not an answer: an
FP64 quota that lands on the other side of an integer changes it while the final
counts agree.

A refusal ``INCONSISTENT_ALLOCATION`` of a valid case is ``precision`` under the
same FP64 condition (the FP64 recipe must refuse where its sum overflows, R06).
A dense count vector of the wrong length, a weights blob of the wrong shape, or
``ids`` and ``counts`` of different lengths are malformed (``error``); a sparse
answer with unsorted ids or a zero count is a ``fail`` (R07: canonical, zero
counts dropped).
"""

from __future__ import annotations

from collections.abc import Sequence
from math import ceil

from qconform.generators.encoding import decode_rational, u32_values, unpack_view
from qconform.generators.registry import load_family
from qconform.harness.adapter import PrecisionProfile
from qconform.harness.judging.judge import profile_margin
from qconform.harness.judging.value_diff import (
    Malformed,
    answer_view,
    decode_blob_answer,
    expected_blob,
    expected_view,
    is_nan,
    may_hold_f32_nan,
    same_bytes,
    show,
    u32_total,
)
from qconform.harness.verdicts import Diff, Verdict, brief, failed, passed, precision
from qconform.spec.constants import M

#: expected fields that describe the case, not the answer (the families' declared margins)
CASE_MARGINS = tuple(dict.fromkeys(load_family("allocation_dense").margins + load_family("allocation_sparse").margins))
FP64_REFUSAL = "INCONSISTENT_ALLOCATION"


def answer_fields(expected: dict) -> list[str]:
    return [key for key in expected if key not in CASE_MARGINS]


def check_fields(expected: dict, output: dict) -> None:
    missing = sorted(set(answer_fields(expected)) - set(output))
    extra = sorted(set(output) - set(expected))
    if missing or extra:
        raise Malformed(
            "", f"missing field(s) {missing}, unexpected field(s) {extra}" if extra else f"missing field(s) {missing}"
        )


def answered_blob(output: dict, key: str, dtype: str, shape: Sequence[int | None] | None = None) -> list[int]:
    return unpack_view(dtype, answered_view(output, key, dtype, shape))


def answered_view(output: dict, key: str, dtype: str, shape: Sequence[int | None] | None = None) -> memoryview:
    """The bytes of the answer's blob ``key``, checked to be of ``dtype`` and ``shape`` (one-dimensional
    when None), or :class:`Malformed`."""
    got_dtype, data, got_shape = answer_view(output[key], key)
    if got_dtype != dtype:
        raise Malformed(key, f"wrong dtype: expected {dtype}, got {got_dtype}")
    if shape is not None and got_shape != list(shape):
        raise Malformed(key, f"wrong shape: expected {shape}, got {got_shape}")
    if shape is None and len(got_shape) != 1:
        raise Malformed(key, f"must be one-dimensional, has shape {got_shape}")
    return data


def dense_row_difference(want_blob: dict, got: memoryview) -> Diff | None:
    """:func:`dense_count_difference` of an expected dense counts blob and the bytes ``got`` of an
    answered one: one comparison of the bytes when they are equal, the common case."""
    want, _ = expected_view(want_blob)
    return None if same_bytes(want, got) else dense_count_difference(u32_values(want), u32_values(got))


def token_counts(row: dict, answered: bool) -> dict[int, int]:
    """token -> count of a sparse allocation object (its ``ids`` and ``counts``; an answer's blobs
    checked). A dense row is compared as its bytes (:func:`dense_row_difference`)."""
    if not answered:
        return dict(zip(expected_blob(row["ids"])[0], expected_blob(row["counts"])[0]))
    ids, counts = answered_blob(row, "ids", "i32"), answered_blob(row, "counts", "u32")
    if len(ids) != len(counts):
        raise Malformed("ids", f"{len(ids)} ids but {len(counts)} counts")
    return dict(zip(ids, counts))


def sparse_problem(output: dict) -> Diff | None:
    """Why a sparse answer is not canonical (ids strictly ascending, no zero count), if it is not."""
    ids, counts = decode_blob_answer(output["ids"], "ids")[1], decode_blob_answer(output["counts"], "counts")[1]
    for i in range(1, len(ids)):
        if ids[i] <= ids[i - 1]:
            return Diff(f"ids[{i}]", f"an id above {ids[i - 1]}", str(ids[i]))
    for i, count in enumerate(counts):
        if count == 0:
            return Diff(f"counts[{i}]", "a positive count (zero counts are dropped)", "0")
    return None


def dense_count_difference(want: Sequence[int], got: Sequence[int]) -> Diff | None:
    """The first token whose dense counts differ (both of V entries), as :func:`count_difference`
    finds it, without a dict of V entries."""
    if list(want) == list(got):
        return None
    token = next(i for i, (a, b) in enumerate(zip(want, got)) if a != b)
    return Diff(f"counts[{token}]", str(want[token]), str(got[token]))


def count_difference(want: dict[int, int], got: dict[int, int]) -> Diff | None:
    """The first token (by ID) whose sparse counts differ, a token absent on one side counting 0."""
    for token in sorted(set(want) | set(got)):
        a, b = want.get(token, 0), got.get(token, 0)
        if a != b:
            return Diff(f"counts[token {token}]", str(a), str(b))
    return None


def weights_divergence(expected: dict, output: dict, profile: PrecisionProfile) -> tuple[Diff, str | None] | None:
    """(first differing weight, precision reason or None) of a logits row; None when equal."""
    want_view, shape = expected_view(expected["weights"])
    got_view = answered_view(output, "weights", "f32", shape)
    exp_ulp = profile_margin(profile, "exp_ulp")
    if same_bytes(want_view, got_view) and not may_hold_f32_nan(got_view):
        return None  # what the walk below finds of equal weights without a NaN, without unpacking them
    want, got = unpack_view("f32", want_view), unpack_view("f32", got_view)
    first = None
    reach = max(1, ceil(exp_ulp))
    within = True
    for i, (a, b) in enumerate(zip(want, got)):
        if is_nan("f32", b):
            raise Malformed(f"weights[{i}]", f"NaN {show('f32', b)}")
        if a != b:
            first = first or Diff(f"weights[{i}]", show("f32", a), show("f32", b))
            within = within and (a >> 31) == (b >> 31) and abs(a - b) <= reach
    if first is None:
        return None
    margin = decode_rational(expected["exp_margin_ulp"])
    if not within:
        return first, None
    if margin < exp_ulp:
        return first, f"case exp_margin_ulp {brief(margin)} < profile exp_ulp {brief(exp_ulp)}"
    return first, None


def fp64_excuse(expected: dict, profile: PrecisionProfile) -> str | None:
    if expected.get("fp64_may_differ") and profile.fp64_allocation:
        return f"fp64_may_differ (tie_gap {brief(expected.get('tie_gap'))}) and the profile allocates in FP64"
    return None


def refusal_excuse(case: dict, code: str, profile: PrecisionProfile) -> str | None:
    """An FP64 allocator refusing where the case says FP64 may differ (e.g. an overflowing FP64 sum)."""
    return fp64_excuse(case["expected"], profile) if code == FP64_REFUSAL else None


def compare(case: dict, output: dict, profile: PrecisionProfile) -> Verdict:
    case_id, expected = case["id"], case["expected"]
    check_fields(expected, output)
    sparse = "ids" in expected
    shape = [] if sparse else expected_view(expected["counts"])[1]
    if sparse:
        got_counts = token_counts(output, True)
        total = sum(got_counts.values())
    else:
        got_view = answered_view(output, "counts", "u32", shape)
        total = u32_total(got_view)
    if total != M:
        return failed(case_id, f"answered counts sum to {total}, not M = {M}", Diff("sum(counts)", str(M), str(total)))
    problem = sparse_problem(output) if sparse else None
    if problem is not None:
        return failed(case_id, f"sparse answer is not canonical (R07): {problem}", problem)
    if "weights" in expected:
        divergence = weights_divergence(expected, output, profile)
        if divergence is not None:
            diff, reason = divergence
            if reason is None:
                return failed(case_id, f"exp weights differ at {diff}", diff)
            return precision(case_id, f"exp weights differ at {diff} within declared margins: {reason}", diff)
    if sparse:
        want_support, got_support = expected_blob(expected["support"])[0], answered_blob(output, "support", "i32")
        if want_support != got_support:
            diff = Diff("support", str(want_support), str(got_support))
            return failed(case_id, f"selected support differs: {diff}", diff)
    if sparse:
        diff = count_difference(token_counts(expected, False), got_counts)
    else:
        diff = dense_row_difference(expected["counts"], got_view)
    if diff is not None:
        reason = fp64_excuse(expected, profile)
        if reason is None:
            return failed(case_id, f"counts differ at {diff}", diff)
        return precision(case_id, f"counts differ at {diff} within declared margins: {reason}", diff)
    return passed(case_id)
