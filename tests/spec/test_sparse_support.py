"""Sparse support sizes (R29): the candidate and screens, the bound on k, the production max_support."""

from __future__ import annotations

import pytest

from qconform.spec.errors import SpecError
from qconform.spec.sizes import TABLE_SPARSE_KS
from qconform.spec.sparse_support import CANDIDATE_K, SCREEN_KS, check_sparse_k, support_plan, support_role
from qconform.spec.wire.negotiation import example_config

pytestmark = pytest.mark.rules("R29")


def test_roles_follow_the_design():
    assert (CANDIDATE_K, SCREEN_KS) == (32, (16, 64))
    assert [support_role(k) for k in (16, 32, 64, 256, 8)] == ["screen", "candidate", "screen", "other", "other"]


@pytest.mark.rules("R07", "R18")
@pytest.mark.parametrize(
    "k, max_support, vocab", [(0, 256, 1000), (257, 256, 1000), (33, 32, 1000), (5, 10, 8), (True, 4, 8), (-1, 4, 8)]
)
def test_k_outside_the_negotiated_bound_is_refused(k, max_support, vocab):
    with pytest.raises(SpecError) as err:
        check_sparse_k(k, max_support, vocab)
    assert err.value.code == "BAD_SUPPORT_SIZE"


def test_k_within_the_bound_passes():
    for k in (1, 16, 32, 64, 256):
        check_sparse_k(k, 256, 129280)
    check_sparse_k(8, 8, 8)


@pytest.mark.rules("R13", "R26")
def test_production_max_support_admits_every_size_at_no_buffer_cost():
    plan = support_plan(example_config())
    assert plan.max_support == 256 == max(TABLE_SPARSE_KS)
    assert plan.candidate_admitted and plan.screens_admitted and all(plan.admitted.values())
    assert plan.largest_sparse_reply == 36 + 8 * 256 == 2084
    assert plan.dense_reply == plan.max_reply_bytes == 36 + 4 * 129280 == 517156
    assert plan.sparse_fits_dense_buffer


def test_a_narrow_session_admits_the_candidate_only():
    plan = support_plan(example_config(max_support=32))
    assert plan.candidate_admitted and not plan.screens_admitted
    assert plan.admitted == {16: True, 32: True, 64: False, 256: False}
