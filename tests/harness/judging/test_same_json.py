"""value_diff.first_difference's shortcut (issue #24): an answer equal to ``expected`` value for
value and JSON type for type is not walked (``same_json``), and whatever the bytes cannot tell
apart is walked as before, so every verdict stays what the walk alone gives."""

from __future__ import annotations

import enum

import pytest
from harness_stubs import available_families, family_cases

from qconform.harness.judging.value_diff import Malformed, first_difference, same_json, walk_difference


class Small(enum.IntEnum):
    ONE = 1


EXPECTED = {"tokens": [3, 1], "accept": True, "key": ["0x0000abcd", "1/2", "18446744073709551615"]}


def outcome(expected: object, got: object) -> object:
    """What the walk alone says: None, a Diff, or the Malformed it raises (as its class and path)."""
    try:
        return walk_difference(expected, got)
    except Malformed as exc:
        return (Malformed, exc.path)


def test_an_equal_answer_is_not_walked_and_its_keys_may_come_in_any_order():
    got = {"key": list(EXPECTED["key"]), "accept": True, "tokens": [3, 1]}
    assert same_json(EXPECTED, got)
    assert first_difference(EXPECTED, got) is None


@pytest.mark.parametrize(
    "got",
    [
        {**EXPECTED, "accept": 1},  # an int where a bool belongs: the same under ==, malformed to the walk
        {**EXPECTED, "tokens": [3, True]},  # a bool where an int belongs
        {**EXPECTED, "tokens": [3, Small.ONE]},  # an int subclass: malformed to the walk
        {**EXPECTED, "tokens": [3, 1.0]},  # a float
        {**EXPECTED, "tokens": (3, 1)},  # a tuple where a list belongs
        {**EXPECTED, "key": ["0x0000abcd", "1/2", Small.ONE]},
        {**EXPECTED, "key": ["0x0000ABCD", "2/4", "18446744073709551615"]},  # other spellings of equal values
        {**EXPECTED, "tokens": [3, 1 << 70]},
        {**EXPECTED, "tokens": [3]},
        {**EXPECTED, "extra": 0},
    ],
)
def test_what_the_bytes_cannot_tell_is_walked_and_judged_as_before(got):
    assert not same_json(EXPECTED, got)
    try:
        assert first_difference(EXPECTED, got) == outcome(EXPECTED, got)
    except Malformed as exc:
        assert outcome(EXPECTED, got) == (Malformed, exc.path)


class Ambiguous:
    """A value whose ``==`` answers no bool (as a NumPy array's does)."""

    def __eq__(self, other: object) -> bool:
        raise ValueError("the truth value is ambiguous")

    __hash__ = None  # type: ignore[assignment]


def test_a_value_whose_equality_raises_is_left_to_the_walk():
    assert not same_json({"tokens": [1]}, {"tokens": [Ambiguous()]})
    with pytest.raises(Malformed):
        first_difference({"tokens": [1]}, {"tokens": [Ambiguous()]})


def test_a_nan_where_null_is_expected_is_a_difference():
    expected = {"token": None, "rows": [None]}
    got = {"token": float("nan"), "rows": [float("inf")]}
    assert not same_json(expected, got)
    diff = first_difference(expected, got)
    assert diff is not None and diff == outcome(expected, got)


@pytest.mark.parametrize("family", available_families())
def test_every_expected_value_of_the_corpus_is_equal_to_itself_and_to_its_copy(family):
    for case in family_cases(family)[:20]:
        expected = case["expected"]
        assert first_difference(expected, expected) is None
        assert walk_difference(expected, expected) is None
