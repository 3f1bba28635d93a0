"""dyadic24 q rows (R03, R04, R07, R19): construction, lookup, refusals."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qconform.spec.constants import M
from qconform.spec.errors import SpecError
from qconform.spec.qrow import QRow

pytestmark = pytest.mark.rules("R03", "R04", "R07", "R19")


@st.composite
def sparse_rows(draw):
    """(vocab, ids, counts) of a legal sparse row."""
    vocab = draw(st.integers(1, 300))
    ids = sorted(draw(st.sets(st.integers(0, vocab - 1), min_size=1, max_size=min(vocab, 20))))
    cuts = sorted(draw(st.sets(st.integers(1, M - 1), min_size=len(ids) - 1, max_size=len(ids) - 1)))
    counts = [b - a for a, b in zip([0] + cuts, cuts + [M])]
    return vocab, ids, counts


@settings(max_examples=60, deadline=None)
@given(sparse_rows())
def test_sparse_row_lookup_is_zero_outside_support(row):
    vocab, ids, counts = row
    q = QRow.sparse(vocab, ids, counts)
    by_id = dict(zip(ids, counts))
    assert q.vocab == vocab and q.representation == "sparse"
    for v in range(vocab):
        assert q.count(v) == by_id.get(v, 0)
        assert q.q(v) == Fraction(by_id.get(v, 0), M)
    assert q.dense_counts() == [by_id.get(v, 0) for v in range(vocab)]
    assert list(q.support()) == list(zip(ids, counts))


@settings(max_examples=60, deadline=None)
@given(sparse_rows())
def test_dense_row_of_the_same_counts(row):
    vocab, ids, counts = row
    dense = [0] * vocab
    for token, count in zip(ids, counts):
        dense[token] = count
    q = QRow.dense(dense)
    assert q.representation == "dense" and q.vocab == vocab
    assert q.dense_counts() == dense
    assert sum(q.q(v) for v in range(vocab)) == 1
    assert list(q.support()) == list(zip(ids, counts))


@pytest.mark.parametrize(
    "build, code",
    [
        (lambda: QRow.dense([M // 2, M // 2 - 1]), "WRONG_TOTAL_MASS"),
        (lambda: QRow.dense([M // 2, M // 2 + 1]), "WRONG_TOTAL_MASS"),
        (lambda: QRow.dense([M + 1, -1]), "NOT_DYADIC24"),
        (lambda: QRow.dense([M - 1, Fraction(1)]), "NOT_DYADIC24"),  # pyright: ignore[reportArgumentType]  # a Fraction count is the garbage under test
        (lambda: QRow.dense([]), "EMPTY_ROW"),
        (lambda: QRow.sparse(8, [3, 1], [M // 2, M // 2]), "BAD_SPARSE_SUPPORT"),
        (lambda: QRow.sparse(8, [1, 1], [M // 2, M // 2]), "BAD_SPARSE_SUPPORT"),
        (lambda: QRow.sparse(8, [1, 1], [M, 0]), "BAD_SPARSE_SUPPORT"),
        (lambda: QRow.sparse(8, [1, 2], [M, 0]), "BAD_SPARSE_SUPPORT"),
        (lambda: QRow.sparse(8, [1, 8], [M // 2, M // 2]), "TOKEN_OUT_OF_RANGE"),
        (lambda: QRow.sparse(8, [-1, 2], [M // 2, M // 2]), "TOKEN_OUT_OF_RANGE"),
        (lambda: QRow.sparse(8, [1, 2], [M]), "BAD_SHAPE"),
        (lambda: QRow.sparse(0, [], []), "BAD_SHAPE"),
        (lambda: QRow.sparse(8, [], []), "WRONG_TOTAL_MASS"),
        (lambda: QRow(vocab=3, representation="dense", counts=(M, 0)), "BAD_SHAPE"),
        (lambda: QRow(vocab=3, representation="sparse", counts=(M,)), "BAD_SHAPE"),
        (lambda: QRow(vocab=3, representation="dense", counts=(M, 1, 0)), "WRONG_TOTAL_MASS"),
    ],
)
def test_illegal_rows_are_refused(build, code):
    with pytest.raises(SpecError) as err:
        build()
    assert err.value.code == code


@pytest.mark.parametrize("v", [-1, 8, 100])
def test_lookup_outside_vocabulary_is_refused(v):
    for q in (QRow.sparse(8, [2], [M]), QRow.dense([0, 0, M, 0, 0, 0, 0, 0])):
        with pytest.raises(SpecError) as err:
            q.count(v)
        assert err.value.code == "TOKEN_OUT_OF_RANGE"
