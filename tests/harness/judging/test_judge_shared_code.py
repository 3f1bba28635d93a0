"""The code every comparator calls (``judging/judge.py``, ``judging/value_diff.py``) at the places
a family's own tests never reach (issue #21, ``qconform adequacy --judges``).

Each comparator's tests go through this code only along their family's answers: a case with its
``family`` key, blobs of the dtypes the family uses. Here: a case identified by its ID alone,
NaN and infinity at the edges of the FP32 and FP64 bit masks, an integer blob that holds a NaN's
bit pattern, and the comparator's own words for an answer of another JSON type.
"""

from __future__ import annotations

import base64
import copy

import pytest
from harness_stubs import adapter_config, first_cases

from qconform.generators.encoding import EncodingError, encode_blob, encode_f32
from qconform.harness.judging.judge import judge
from qconform.harness.judging.value_diff import Malformed, expected_view, first_difference, same_bytes
from qconform.harness.transport.arena import BlobArena
from qconform.harness.verdicts import VerdictClass

AS = "allocation_sparse"
#: a family compared exactly (no comparator module)
CS = "categorical_sampling"

#: (dtype, a quiet NaN, the NaN with only the lowest fraction bit, +inf, one) as bit patterns
FLOATS = [
    ("f32", 0x7FC00000, 0x7F800001, 0x7F800000, 0x3F800000),
    ("f64", 0x7FF8000000000000, 0x7FF0000000000001, 0x7FF0000000000000, 0x3FF0000000000000),
]


def test_a_case_without_its_family_key_is_judged_by_the_family_its_id_names():
    """A case object as a vector file holds it has no ``family`` key: the family is the first part
    of its ID (``allocation_sparse/...``), so the adapter that declares it is asked and passes."""
    case = copy.deepcopy(next(c for c in first_cases(AS, 1) if c["result"] == "valid"))
    del case["family"]
    assert case["id"].count("/") >= 2  # family/group/name: the first part is not the last
    assert judge(case, copy.deepcopy(case["expected"]), adapter_config([AS])).cls is VerdictClass.PASS
    verdict = judge(case, copy.deepcopy(case["expected"]), adapter_config(["sharding"]))
    assert verdict.cls is VerdictClass.UNSUPPORTED and verdict.message.endswith(f"does not declare family {AS}")


@pytest.mark.parametrize(("dtype", "quiet", "lowest", "inf", "one"), FLOATS)
def test_a_nan_in_a_float_blob_is_garbage_at_either_end_of_the_fraction(dtype, quiet, lowest, inf, one):
    """Every pattern with the exponent all ones and a nonzero fraction is a NaN (the answer is
    garbage, ``Malformed`` naming the item and its bits); an infinity is a number that differs."""
    expected = encode_blob(dtype, [one, one])
    width = 8 if dtype == "f32" else 16
    for nan in (quiet, lowest):
        with pytest.raises(Malformed) as caught:
            first_difference(expected, encode_blob(dtype, [one, nan]), "w")
        assert (caught.value.path, caught.value.detail) == ("w[1]", f"NaN 0x{nan:0{width}x}")
    diff = first_difference(expected, encode_blob(dtype, [one, inf]), "w")
    assert diff is not None and (diff.path, diff.expected, diff.got) == (
        "w[1]",
        f"0x{one:0{width}x}",
        f"0x{inf:0{width}x}",
    )


def test_a_nan_in_a_scalar_f32_is_garbage_and_an_infinity_differs():
    """The scalar form ``{"f32": "0x........"}`` reads NaN by the same masks as an f32 blob."""
    dtype, quiet, lowest, inf, one = FLOATS[0]
    assert dtype == "f32"
    for nan in (quiet, lowest):
        with pytest.raises(Malformed, match=f"NaN 0x{nan:08x}"):
            first_difference(encode_f32(one), encode_f32(nan), "s")
    diff = first_difference(encode_f32(one), encode_f32(inf), "s")
    assert diff is not None and (diff.expected, diff.got) == ("0x3f800000", "0x7f800000")


@pytest.mark.parametrize("dtype", ["u32", "i32", "u64"])
def test_an_integer_blob_has_no_nan(dtype):
    """An integer blob holding a float NaN's bit pattern is a number that differs, never garbage."""
    nan = 0x7FC00000
    diff = first_difference(encode_blob(dtype, [0]), encode_blob(dtype, [nan]), "c")
    assert diff is not None and (diff.path, diff.expected, diff.got) == ("c[0]", "0", str(nan))


@pytest.mark.parametrize(
    ("expected", "got", "words"),
    [
        ("accept", 7, "x: expected a string, got int"),
        ({"a": 1}, [1], "x: expected an object, got list"),
        ({"a": 1}, 5, "x: expected an object, got int"),
    ],
)
def test_an_answer_of_another_json_type_is_named_by_the_comparator_itself(expected, got, words):
    """The comparator's own words, not whatever reading the wrong type happens to raise: ``judge``
    would name an exception's schema problem anyway, so only the message shows the check ran."""
    with pytest.raises(Malformed) as caught:
        first_difference(expected, got, "x")
    assert str(caught.value) == words


def test_an_expected_value_of_a_type_json_vectors_never_hold_is_a_judge_error():
    """A float in ``expected`` (the vector format has none: floats are bit patterns) is never
    compared as equal: the judge raises rather than pass what it cannot read."""
    with pytest.raises(TypeError, match="x: expected value of unsupported JSON type float"):
        first_difference(0.5, 0.5, "x")


def test_same_bytes_compares_whole_views_only():
    """Equal sizes first (a longer view that starts with the shorter is not the same bytes), and
    a view into part of a larger ``bytes`` object is compared by its own bytes, not the object's."""
    assert not same_bytes(memoryview(b"abc"), memoryview(b"ab"))
    assert not same_bytes(memoryview(b"ab"), memoryview(b"abc"))
    inner = memoryview(b"xxabc")[2:]
    assert same_bytes(inner, memoryview(b"abc")) and same_bytes(memoryview(b"abc"), inner)
    assert not same_bytes(inner, memoryview(b"xxa"))


def test_an_expected_blob_held_in_the_arena_is_read_in_place_and_checked_as_decode_blob_checks_it():
    """The judge reads a blob the run's arena holds in place, no base64 decoded (docs/shim-protocol.md,
    "Shared arena"); an object that is not exactly a blob is refused as ``decode_blob`` refuses
    it, whether or not the arena holds bytes for its ``b64``."""
    blob = encode_blob("u32", [7, 8, 9])
    arena = BlobArena.build([blob["b64"]])
    if arena is None:
        pytest.skip("no shared file for an arena on this system")
    try:
        data, shape = expected_view(blob)
        assert data.obj is arena.view.obj and shape == [3]
        assert data.tobytes() == base64.b64decode(blob["b64"])
        with pytest.raises(EncodingError, match="exactly dtype, shape and b64"):
            expected_view({**blob, "note": "x"})
    finally:
        arena.close()


def test_an_acceptable_case_passes_with_any_refusal_or_its_expected_output_and_a_valid_case_with_no_refusal():
    """``result`` is read first (docs/harness.md): an ``acceptable`` case passes refused with any
    code (its flags named) or answered with its expected output, and fails a wrong output; the same
    case as ``valid`` fails a refusal, naming the code."""
    valid = copy.deepcopy(next(c for c in first_cases(CS, 1) if c["result"] == "valid"))
    acceptable = dict(copy.deepcopy(valid), result="acceptable", flags=["SomeFlag"])
    config = adapter_config([CS])
    verdict = judge(acceptable, {"error": "ZERO_MASS"}, config)
    assert verdict.cls is VerdictClass.PASS
    assert verdict.message == "refused an acceptable case with ZERO_MASS (flags: SomeFlag)"
    unflagged = {key: value for key, value in acceptable.items() if key != "flags"}
    assert judge(unflagged, {"error": "X"}, config).message == "refused an acceptable case with X (flags: none)"
    assert judge(acceptable, copy.deepcopy(valid["expected"]), config).cls is VerdictClass.PASS
    wrong = copy.deepcopy(valid["expected"])
    wrong["tokens"][0] += 1
    verdict = judge(acceptable, wrong, config)
    assert verdict.cls is VerdictClass.FAIL and verdict.diff is not None and verdict.diff.path == "tokens[0]"
    verdict = judge(valid, {"error": "ZERO_MASS"}, config)
    assert verdict.cls is VerdictClass.FAIL and verdict.message == "refused a valid case with ZERO_MASS"
    assert verdict.diff is not None and (verdict.diff.path, verdict.diff.expected, verdict.diff.got) == (
        "error",
        "<an output>",
        "ZERO_MASS",
    )


U32 = encode_blob("u32", [1, 2])


@pytest.mark.parametrize(
    ("expected", "got", "words"),
    [
        (U32, 5, "x: expected a blob (dtype, shape, b64), got int"),
        (U32, {"dtype": "u32", "shape": [2]}, "x: expected a blob (dtype, shape, b64), got dict"),
        (U32, {**U32, "b64": "!!!"}, "x: blob b64 is not valid base64"),
        (U32, encode_blob("i32", [1, 2]), "x: wrong dtype: expected u32, got i32"),
        (U32, encode_blob("u32", [1, 2], [1, 2]), "x: wrong shape: expected [2], got [1, 2]"),
        ("0x00000001", "zz", "x: expected a 32-bit word"),
        ("1/2", "half", "x: expected a rational"),
        ("18446744073709551615", 7, "x: expected a 64-bit decimal string"),
        (1, "1", "x: expected int, got str"),
        (True, 1, "x: expected bool, got int"),
        ({"a": 1, "b": 2}, {"a": 1}, "x: missing field(s) ['b']"),
        ({"a": 1}, {"a": 1, "c": 3}, "x: unexpected field(s) ['c']"),
        ([1, 2], {"0": 1}, "x: expected a list, got dict"),
    ],
)
def test_a_malformed_value_is_named_by_the_comparator_in_its_own_words(expected, got, words):
    """Each structural check of ``first_difference`` says what it expected, at the path: a dropped
    check would leave the answer to a later read that fails with other words, or none."""
    with pytest.raises(Malformed) as caught:
        first_difference(expected, got, "x")
    assert str(caught.value).startswith(words)


@pytest.mark.parametrize(
    ("expected", "got", "where"),
    [
        (encode_blob("u32", [0, 1, 2, 3, 4, 5], [2, 3]), encode_blob("u32", [0, 1, 2, 3, 9, 5], [2, 3]), "x[1,1]"),
        (encode_blob("u32", [0, 1, 2, 3, 4, 5], [3, 2]), encode_blob("u32", [0, 1, 2, 3, 4, 9], [3, 2]), "x[2,1]"),
        ([1, 2], [1, 2, 3], "len(x)"),
        ([1, 2], [1], "len(x)"),
        (None, 0, "x"),
        ({"a": [1, {"b": "1/2"}]}, {"a": [1, {"b": "1/3"}]}, "x.a[1].b"),
        (U32, {"dtype": "u32", "shape": [2], "raw": bytes([1, 0, 0, 0, 3, 0, 0, 0])}, "x[1]"),
    ],
)
def test_a_difference_is_named_at_its_place(expected, got, where):
    """The first differing item by its row-major index, a length by ``len(...)``, a null by its
    field, a nested field by its path; the raw form of a binary reply reads as its JSON form."""
    diff = first_difference(expected, got, "x")
    assert diff is not None and diff.path == where


def test_equal_values_have_no_difference():
    raw = {"dtype": "u32", "shape": [2], "raw": bytes([1, 0, 0, 0, 2, 0, 0, 0])}
    for expected, got in [(None, None), (U32, raw), ("2/4", "1/2"), ("0x0000000a", "0x0000000a"), ([], [])]:
        assert first_difference(expected, got, "x") is None


def test_a_refusal_with_more_than_its_code_is_garbage_even_with_the_right_code():
    """A refusal is exactly ``{"error": CODE}``: an invalid case answered with its expected code
    and another field is ``error``, naming the keys, not a pass."""
    invalid = next(c for c in first_cases(CS, 1) if c["result"] == "invalid")
    code = invalid["expected"]["error"]
    assert judge(invalid, {"error": code}, adapter_config([CS])).cls is VerdictClass.PASS
    verdict = judge(invalid, {"error": code, "note": 1}, adapter_config([CS]))
    assert verdict.cls is VerdictClass.ERROR
    assert verdict.message == (
        "malformed answer: error: a refusal must be exactly {'error': CODE}, got keys ['error', 'note']"
    )
