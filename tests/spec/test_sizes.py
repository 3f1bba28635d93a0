"""Sizes and the critical path (R26, R27): every number of the design's size table."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal, localcontext
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qconform.spec import sizes
from qconform.spec.errors import SpecError
from qconform.spec.rules import SPEC_DEFINITIONS

pytestmark = pytest.mark.rules("R26")

V, K, B = 129280, 5, 4
LINK = 40 * 10**9  # bits per second


def test_design_dense_row():
    assert sizes.dense_request_bytes(V, K) == 2_585_600
    assert sizes.batch_bytes(2_585_600, B) == 10_342_400
    assert sizes.rounded_decimal(Fraction(2_585_600, sizes.MB), 3) == "2.586"
    assert sizes.rounded_decimal(Fraction(10_342_400, sizes.MB), 3) == "10.342"


@pytest.mark.rules("R26", "R29")
@pytest.mark.parametrize(
    "k, per_request, per_batch", [(16, 640, 2_560), (32, 1_280, 5_120), (64, 2_560, 10_240), (256, 10_240, 40_960)]
)
def test_design_sparse_rows(k, per_request, per_batch):
    assert sizes.sparse_request_bytes(k, K) == per_request
    assert sizes.batch_bytes(per_request, B) == per_batch


@pytest.mark.rules("R26", "R31")
def test_design_tp2_shard_row():
    assert sizes.shard_tokens(V, 2) == 64_640
    assert sizes.dense_shard_request_bytes(V, 2, K) == 1_292_800
    assert sizes.batch_bytes(1_292_800, B) == 5_171_200


def test_design_serialization_bounds_at_40_gbps():
    request = sizes.serialization_seconds(2_585_600, LINK)
    batch = sizes.serialization_seconds(10_342_400, LINK)
    shard = sizes.serialization_seconds(1_292_800, LINK)
    assert request == Fraction(51712, 10**8)  # 0.51712 ms exactly
    assert batch == Fraction(206848, 10**8)
    assert shard == Fraction(25856, 10**8)
    assert sizes.rounded_decimal(request * 1000, 3) == "0.517"
    assert sizes.rounded_decimal(batch * 1000, 3) == "2.068"
    assert sizes.rounded_decimal(shard * 1000, 3) == "0.259"


def test_design_in_flight_slots():
    total = sizes.in_flight_bytes(2, 10_342_400)
    assert total == 20_684_800
    assert Fraction(total, 1 << 20) == Fraction(20_684_800, 1_048_576)
    assert sizes.rounded_decimal(Fraction(total, sizes.MIB), 2) == "19.73"


def test_default_table_reproduces_the_design():
    table = sizes.size_table(sizes.SizeParams())
    got = [(r.request_bytes, r.batch_bytes, r.per_rank) for r in table.rows]
    assert got == [
        (2_585_600, 10_342_400, False),
        (640, 2_560, False),
        (1_280, 5_120, False),
        (2_560, 10_240, False),
        (10_240, 40_960, False),
        (1_292_800, 5_171_200, True),
    ]
    assert table.rows[0].request_seconds * 1000 == Fraction(51712, 10**5)
    assert table.rows[0].batch_seconds * 1000 == Fraction(206848, 10**5)
    assert table.rows[-1].request_seconds * 1000 == Fraction(25856, 10**5)
    assert table.in_flight_bytes == 20_684_800
    assert table.shape_refusal == ""


def test_every_public_function_cites_its_rule():
    for name in (
        "dense_request_bytes",
        "sparse_request_bytes",
        "batch_bytes",
        "shard_tokens",
        "dense_shard_request_bytes",
        "serialization_seconds",
        "in_flight_bytes",
        "rounded_decimal",
    ):
        assert f"spec.sizes.{name}" in SPEC_DEFINITIONS["R26"], name
    for name in ("check_batch_shape", "preflight_slot"):
        assert f"spec.sizes.{name}" in SPEC_DEFINITIONS["R27"], name


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 300_000), st.integers(1, 16), st.integers(1, 8), st.integers(1, 1024))
def test_shape_arithmetic_counts_every_byte(vocab, depth, shards, k):
    # one FP32 per (token, position); an int32 ID plus an FP32 per sparse entry
    assert sizes.dense_request_bytes(vocab, depth) == sum(4 for _ in range(depth)) * vocab
    assert sizes.sparse_request_bytes(k, depth) == sizes.dense_request_bytes(k, depth) * 2
    tokens = sizes.shard_tokens(vocab, shards)
    assert tokens * shards >= vocab > (tokens - 1) * shards  # the largest of a contiguous split
    assert sizes.dense_shard_request_bytes(vocab, shards, depth) * shards >= sizes.dense_request_bytes(vocab, depth)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**12), st.fractions(min_value=Fraction(1, 1000), max_value=10**12))
def test_serialization_time_times_rate_is_the_bit_count(n_bytes, rate):
    assert sizes.serialization_seconds(n_bytes, rate) * rate == 8 * n_bytes


@settings(max_examples=100, deadline=None)
@given(st.fractions(min_value=-(10**6), max_value=10**6, max_denominator=10**7), st.integers(0, 6))
def test_rounded_decimal_matches_decimal_half_up(value, places):
    # 60 digits decide the rounding exactly: with denominators <= 10^7, a value that
    # is not on a half-way point is at least 10^-14 away from one
    with localcontext() as ctx:
        ctx.prec = 60
        exact = Decimal(value.numerator) / Decimal(value.denominator)
        want = exact.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
    got = sizes.rounded_decimal(value, places)
    assert Decimal(got) == want
    if want == 0:
        assert not got.startswith("-")


@pytest.mark.rules("R27")
def test_batch_shape_is_bounded_at_four_requests_and_depth_five():
    for requests in (1, 2, 3, 4):
        sizes.check_batch_shape(requests, 5)
    for requests, depth in [(0, 5), (5, 5), (4, 4), (4, 6), (1, 1)]:
        with pytest.raises(SpecError) as info:
            sizes.check_batch_shape(requests, depth)
        assert info.value.code == "BAD_SHAPE" and info.value.rule == "R27"


@pytest.mark.rules("R27")
def test_preflight_refuses_a_reply_larger_than_its_slot():
    sizes.preflight_slot(10_342_400, 10_342_400)
    with pytest.raises(SpecError) as info:
        sizes.preflight_slot(10_342_399, 10_342_400)
    assert info.value.code == "BAD_SHAPE"


@pytest.mark.rules("R26", "R27")
def test_overridden_table_follows_the_parameters_and_flags_refused_shapes():
    params = sizes.SizeParams.with_defaults(
        vocab=1000, depth=6, requests=8, ks=(8,), shards=4, link_gbps=Fraction(25, 2)
    )
    table = sizes.size_table(params)
    assert [(r.request_bytes, r.batch_bytes) for r in table.rows] == [(24_000, 192_000), (384, 3_072), (6_000, 48_000)]
    assert table.rows[0].request_seconds == Fraction(24_000 * 8, 12_500_000_000)
    assert "BAD_SHAPE" in table.shape_refusal
    assert sizes.SizeParams.with_defaults() == sizes.SizeParams()
