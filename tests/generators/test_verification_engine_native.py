"""The C engine of ``verification_round`` (generators/_verification_engine.c) against the NumPy engine.

tests/generators/test_accumulated.py holds the engine (the C one where it is built) to the spec's records;
here the C engine is held to the NumPy engine on 2^15 stream cases (and so are the records of the native
stream's fused path: the same C rules, run on each group of cases as it is made), and on stream cases rewritten
so that acceptance tests and final picks sit exactly on their boundaries (``u32 q(x) = p(x) 2^32``
rejects; ``C_v 2^32 = u32 R`` is not above). Each comparison was shown to fail with the C engine's
acceptance test written ``<=`` and its pick counting ``<`` (rebuilt, run, restored). Without the
module (not built, or ``QCONFORM_ENGINE_NATIVE=0``) these tests are skipped.
"""

from __future__ import annotations

import numpy as np
import pytest

from qconform.generators import accumulated_engine
from qconform.generators.accumulated import (
    DECISION_CODES,
    DOMAIN_CODES,
    FAMILIES,
    KMAX,
    NATIVE_STREAM,
    STREAM_KEY,
    U64,
    WORD_MASK,
    Batch,
    M,
    draw_word0,
    philox_lanes,
    verification_arrays_native,
)
from qconform.generators.accumulated_engine import verification_records_native, verification_records_numpy

pytestmark = pytest.mark.rules("R11", "R22", "R23")

NATIVE = accumulated_engine.native_engine()
needs_native = pytest.mark.skipif(NATIVE is None, reason="the C engine is not built or is switched off")
#: the first word of a verification record's draws, five words each: (domain, position, u32, decision, token)
DRAWS_AT = 4 + KMAX


def native(batch: Batch) -> np.ndarray:
    assert NATIVE is not None
    return verification_records_native(NATIVE, batch)


@needs_native
def test_native_engine_equals_numpy_on_the_stream():
    batch = FAMILIES["verification_round"].arrays(1000, 1000 + (1 << 15))
    assert (native(batch) == verification_records_numpy(batch)).all()


@needs_native
@pytest.mark.skipif(NATIVE_STREAM is None, reason="the native stream is not built or is switched off")
@pytest.mark.parametrize("start", [1000, 2**32 - 5000])
def test_the_fused_records_are_the_engines(start):
    """The native stream's fused path (each group of cases verified as soon as it is made, the same
    verify_chunk as the engine module's) gives the NumPy engine's records, over groups cut at any case
    and across 2^32; ``verification_records`` hands them on. Shown to fail with the fused loop writing
    each group's records over the previous group's (rebuilt, run, restored)."""
    assert NATIVE_STREAM is not None
    count = (1 << 14) + 37  # a last group shorter than the others
    batch = verification_arrays_native(NATIVE_STREAM, start, start + count)
    assert batch.records is not None
    expected = verification_records_numpy(batch)
    assert np.array_equal(batch.records, expected)
    assert accumulated_engine.verification_records(batch) is batch.records
    assert verification_arrays_native(NATIVE_STREAM, start, start + count, fused=False).records is None


def first_draws(batch: Batch) -> np.ndarray:
    """The acceptance draw at position 0 of each case."""
    f = batch.fields
    return draw_word0(f["seed"], f["anchor"] & WORD_MASK, f["round"], f["generation"], DOMAIN_CODES["ACCEPT"])


@needs_native
def test_acceptance_exactly_on_its_boundary_rejects():
    """``u32 q(x) = p(x) 2^32`` rejects and one count more accepts: q(x) = M at the first draft, p(x) =
    u32 / 2^8 on cases whose first draw has eight low zero bits (their other entries unchanged)."""
    batch = FAMILIES["verification_round"].arrays(0, 1 << 16)
    f = {name: array.copy() for name, array in batch.fields.items()}
    u32 = first_draws(batch)
    cases = np.flatnonzero(u32 & U64(0xFF) == 0)
    assert len(cases) > 100
    x = f["drafts"][cases, 0]
    f["q"][cases, 0] = 0
    f["q"][cases, 0, x] = M
    on_boundary = np.arange(len(cases)) % 2 == 0  # the others: one count above it
    f["p"][cases, 0, x] = (u32[cases] >> U64(8)) + np.where(on_boundary, U64(0), U64(1))
    edited = Batch(batch.start, batch.stop, f)
    records = native(edited)
    assert (records == verification_records_numpy(edited)).all()
    decisions = records[cases, DRAWS_AT + 3]
    assert (decisions[on_boundary] == DECISION_CODES["reject"]).all()
    assert (decisions[~on_boundary] == DECISION_CODES["accept"]).all()


def final_picks_on_their_boundary() -> tuple[Batch, np.ndarray, np.ndarray]:
    """Stream cases rewritten so that the final pick is exactly on its boundary (``C_0 2^32 = u32 R``) on
    every other one of them and one count above it on the others: a depth-1 round rejected at once (p(x) = 0),
    its residual p - q put on two tokens with ``C_0 = u32 / 2^8`` of R = M, on the cases whose final draw has
    eight low zero bits. Returns the batch, the rewritten cases' indices, and which of them are above."""
    batch = FAMILIES["verification_round"].arrays(0, 1 << 16)
    f = {name: array.copy() for name, array in batch.fields.items()}
    position = f["anchor"] & WORD_MASK  # rejected at position 0: the final draw is at the anchor
    u32 = draw_word0(f["seed"], position, f["round"], f["generation"], DOMAIN_CODES["CORRECTION"])
    cases = np.flatnonzero((u32 & U64(0xFF) == 0) & (u32 >> U64(8) > 0) & (u32 >> U64(8) < U64(M)))
    assert len(cases) > 100
    f["depth"][cases] = 1
    f["drafts"][cases, 0] = 7
    f["q"][cases, 0] = 0
    f["q"][cases, 0, 7] = M  # the draft takes all of q, p none of it: rejected, the residual is p
    above = np.arange(len(cases)) % 2 == 1
    f["p"][cases, 0] = 0
    f["p"][cases, 0, 0] = (u32[cases] >> U64(8)) + np.where(above, U64(1), U64(0))
    f["p"][cases, 0, 1] = U64(M) - f["p"][cases, 0, 0]
    return Batch(batch.start, batch.stop, f), cases, above


@needs_native
def test_final_pick_exactly_on_its_boundary_is_not_above():
    """``C_v 2^32 = u32 R`` is not above: the pick is token 1 on the boundary, token 0 one count above
    (``final_picks_on_their_boundary``)."""
    edited, cases, above = final_picks_on_their_boundary()
    records = native(edited)
    assert (records == verification_records_numpy(edited)).all()
    final = records[cases, DRAWS_AT + 5 : DRAWS_AT + 10]
    assert (final[:, 0] == DOMAIN_CODES["CORRECTION"]).all() and (final[:, 3] == DECISION_CODES["correction"]).all()
    assert (final[~above, 4] == 1).all() and (final[above, 4] == 0).all()


def spread_rows(fields: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The same fields with the q and p rows as views whose counts are 16 bytes apart (every other u64 of a
    wider array), so that the C engine takes its portable pick (``pick_portable``) where the stream's rows of
    consecutive counts take the SSE2 one (``pick_sse2``, verification_engine.h)."""
    spread = dict(fields)
    for name in ("q", "p"):
        wide = np.full(fields[name].shape[:2] + (2 * fields[name].shape[2],), U64(0xDEAD), dtype=U64)
        wide[..., ::2] = fields[name]
        spread[name] = wide[..., ::2]
        assert spread[name].strides[2] == 16 and np.array_equal(spread[name], fields[name])
    return spread


@needs_native
def test_both_picks_give_the_numpy_engines_records():
    """The SSE2 pick (rows of consecutive counts) and the portable one (rows of another stride) give the
    NumPy engine's records on the stream and on picks exactly on their boundary, written into a buffer that
    holds no padding beforehand. Shown to fail with ``pick_portable`` counting ``<`` (rebuilt, run, restored;
    ``pick_sse2`` with its compare's operands swapped fails here and in the boundary test)."""
    assert NATIVE is not None
    stream = FAMILIES["verification_round"].arrays(5000, 5000 + (1 << 13))
    boundary = final_picks_on_their_boundary()[0]
    fields = ("seed", "generation", "round", "anchor", "depth", "q", "p", "drafts")
    for batch in (stream, boundary):
        expected = verification_records_numpy(batch)
        for inputs in (batch.fields, spread_rows(batch.fields)):
            records = np.full(expected.shape, 0x5A5A5A5A, dtype=np.uint32)
            NATIVE.verification_records(*(inputs[name] for name in fields), records)
            assert np.array_equal(records, expected)


@needs_native
@pytest.mark.parametrize("field, value", [("depth", 0), ("depth", KMAX + 1), ("drafts", 8), ("drafts", -1)])
def test_native_engine_refuses_indices_out_of_bounds(field, value):
    """A depth outside 1..K or a draft outside the row is one ValueError, never a read out of bounds."""
    batch = FAMILIES["verification_round"].arrays(0, 64)
    f = {name: array.copy() for name, array in batch.fields.items()}
    f[field][17] = value
    with pytest.raises(ValueError, match="case 17"):
        native(Batch(0, 64, f))


@needs_native
@pytest.mark.parametrize("form", [0, 1, 2])
def test_the_c_floor_is_philox_at_the_stream_key(form):
    """The C floors (vectorized, scalar, vectorized in registers) compute real blocks: Philox4x32-10 at
    counters (i mod 2^32, i >> 32, 0, 4) under the stream key, equal to ``philox_lanes`` (the NumPy floor),
    so the ratio against them is honest; the vectorized ones over a count that is neither a multiple of 256
    (a pass) nor of 4 (the floor in registers leaves the last count mod 4 to the vectorized one). Shown to
    fail with the vectorized floor's last partial pass skipped, and with the floor in registers writing its
    second and third blocks' words swapped (rebuilt, run, restored)."""
    assert NATIVE is not None
    count = 3001
    words = np.zeros((count, 4), dtype=np.uint32)
    NATIVE.philox_floor(count, words, form)
    counter = np.arange(count, dtype=U64)
    lanes = philox_lanes(counter & WORD_MASK, counter >> U64(32), U64(0), U64(4), *STREAM_KEY)
    assert all((words[:, j] == lanes[j]).all() for j in range(4))
