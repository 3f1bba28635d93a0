"""The accumulated streams in C (generators/_accumulated_stream.c) against their NumPy path.

``verification_arrays`` makes a range's fields and block with the native module where it is
built, else with NumPy (``verification_arrays_numpy`` and ``verification_block``, the
definition). Both must give the same arrays, bit for bit and dtype for dtype, at the start of the
stream, past 2^32 (the counter's high word) and at the end of the u64 case range, in every mode
(acceptance boundary, bonus boundary, coarse rows, wrapping anchors); and the same records from the
engine. Each comparison is shown to catch a seeded bug of the native path (the bug stand-ins below).
The light families use it too: rng_abi, categorical_sampling and allocation_dense take their
fields and their engine records from it (``rng_cases``, ``categorical_cases``, ``allocation_cases``),
held to the NumPy arrays and engine (pure NumPy, Philox included) the same way. Without the
module (not built, or ``QCONFORM_ACCUMULATED_NATIVE=0``) the native side is skipped.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from qconform.generators import accumulated, accumulated_engine
from qconform.generators.accumulated import (
    FAMILIES,
    NATIVE_STREAM,
    verification_arrays,
    verification_arrays_native,
    verification_arrays_numpy,
    verification_block,
)
from qconform.generators.accumulated_engine import (
    ENGINES,
    allocation_records_numpy,
    categorical_records_numpy,
    rng_records_numpy,
    verification_records,
)

pytestmark = pytest.mark.rules("R08", "R11", "R22", "R23")

#: the native module (the tests that use it are skipped when it is None)
NATIVE: Any = NATIVE_STREAM
needs_native = pytest.mark.skipif(NATIVE is None, reason="the native stream is not built or is switched off")

#: case ranges: the start, past 2^32, and the last cases of the u64 range
RANGES = ((0, 3000), (2**32 - 500, 2**32 + 500), (2**64 - 300, 2**64))


def same_arrays(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> list[str]:
    """The names whose arrays differ in dtype, shape or any bit."""
    assert set(got) == set(want)
    return [
        name
        for name in want
        if got[name].dtype != want[name].dtype
        or got[name].shape != want[name].shape
        or got[name].tobytes() != np.ascontiguousarray(want[name]).tobytes()
    ]


def differences(native, start: int, stop: int) -> list[str]:
    """The fields and block arrays where the native stream differs from the NumPy path."""
    got = verification_arrays_native(native, start, stop)
    want = verification_arrays_numpy(start, stop)
    assert got.block is not None and want.block is None
    return same_arrays(got.fields, want.fields) + [
        f"block {n}" for n in same_arrays(got.block, verification_block(want))
    ]


@needs_native
@pytest.mark.parametrize("start, stop", RANGES)
def test_the_native_stream_makes_the_numpy_arrays(start, stop):
    assert differences(NATIVE, start, stop) == []


@needs_native
def test_the_sample_reaches_every_mode():
    """The ranges above hold every mode, coarse rows, wrapping anchors and every depth and vocab."""
    batch = verification_arrays_numpy(0, 3000)
    head = accumulated.stream_words(4, np.arange(3000, dtype=np.uint64), 2)[:, 4:8]
    assert set((head[:, 3] & 3).tolist()) == {0, 1, 2, 3}
    assert ((head[:, 3] >> 2) & 1).any() and (((head[:, 3] >> 3) & 7) == 0).any()
    assert (batch.fields["anchor"] >= 2**32 - 8).any()
    assert set(batch.fields["depth"].tolist()) == {1, 2, 3, 4, 5} and set(batch.fields["vocab"].tolist()) == set(
        range(2, 9)
    )


@needs_native
def test_the_engine_records_are_the_same_on_both_paths():
    native = verification_arrays_native(NATIVE, 10**10, 10**10 + 2000)
    assert np.array_equal(
        verification_records(native), verification_records(verification_arrays_numpy(10**10, 10**10 + 2000))
    )


def bugged(edit):
    """A stand-in for the native module whose output is edited after the call (a seeded bug)."""

    def verification_cases(first, *arrays):
        NATIVE.verification_cases(first, *arrays)
        edit(first, arrays)

    return SimpleNamespace(verification_cases=verification_cases)


def off_by_one_bonus_row(_first, arrays):
    """The bonus row of the last case one count off (mode 3's cut moved)."""
    depth, p = arrays[4], arrays[8]
    p[-1, depth[-1], 0] ^= 1


def high_counter_word_dropped(first, arrays):
    """Cases past 2^32 built as if their counter's high word were 0 (a truncated case index)."""
    if first >= 2**32:
        again = verification_arrays_native(NATIVE, first % 2**32, first % 2**32 + len(arrays[0]))
        arrays[0][:] = again.fields["seed"]


def block_q_row_beyond_k(_first, arrays):
    """A q row of the block at K not zeroed for a case with K < 5."""
    depth, block_q = arrays[4], arrays[15]
    k = int(np.flatnonzero(depth < accumulated.KMAX)[0])
    block_q[k, depth[k], 0] += 1


@needs_native
@pytest.mark.parametrize("bug", [off_by_one_bonus_row, high_counter_word_dropped, block_q_row_beyond_k])
def test_the_comparison_catches_a_seeded_native_bug(bug):
    assert any(differences(bugged(bug), start, stop) for start, stop in RANGES)


def test_verification_arrays_takes_the_numpy_path_without_the_module(monkeypatch):
    """With no native module the family's arrays are the NumPy path's, and its block is made from them."""
    monkeypatch.setattr(accumulated, "NATIVE_STREAM", None)
    batch = verification_arrays(5, 50)
    assert batch.block is None
    assert same_arrays(batch.fields, verification_arrays_numpy(5, 50).fields) == []
    assert FAMILIES["verification_round"].block(batch)["q"].dtype == np.dtype("<u4")


@needs_native
def test_a_live_batch_is_never_written_over_and_an_idle_one_is_reused():
    """The stream's allocations are reused (no zeroed pages per block), but only once no array of
    them is alive: a batch kept, or only its records or one block array kept, holds its memory;
    dropped, the next batch of that size takes it. Shown to fail with the idle test dropped
    (every held allocation reused, the kept arrays written over)."""
    pool = accumulated.MemoryPool(keep=2)
    original = accumulated.STREAM_MEMORY
    accumulated.STREAM_MEMORY = pool
    try:
        kept = verification_arrays_native(NATIVE, 0, 4096)
        snapshot = {name: array.copy() for name, array in kept.fields.items()}
        records = verification_arrays_native(NATIVE, 5000, 9096).records
        assert records is not None
        records_before = records.copy()
        block_q = verification_arrays_native(NATIVE, 10000, 14096).block["q"]  # type: ignore[index]
        block_before = block_q.copy()
        for start in (20000, 30000, 40000):  # more batches than the pool keeps, each dropped at once
            verification_arrays_native(NATIVE, start, start + 4096)
        assert same_arrays(kept.fields, snapshot) == []
        assert np.array_equal(records, records_before) and np.array_equal(block_q, block_before)
        del kept
        again = verification_arrays_native(NATIVE, 50000, 54096)
        assert again.fields["seed"].base is pool.held[0]  # the allocation kept's arrays were made from, reused
        assert same_arrays(again.fields, verification_arrays_numpy(50000, 54096).fields) == []
    finally:
        accumulated.STREAM_MEMORY = original


#: the light families made whole by the native stream: its function, the NumPy arrays and engine
LIGHT_CASES = {
    "rng_abi": ("rng_cases", accumulated.rng_arrays_numpy, rng_records_numpy),
    "categorical_sampling": ("categorical_cases", accumulated.categorical_arrays_numpy, categorical_records_numpy),
    "allocation_dense": ("allocation_cases", accumulated.allocation_arrays_numpy, allocation_records_numpy),
}


def light_differences(native, family: str) -> list[str]:
    """Where the native stream's fields or engine records of ``family`` differ from NumPy's."""
    function, numpy_arrays, numpy_records = LIGHT_CASES[family]
    found = []
    for start, stop in RANGES:
        monkey = pytest.MonkeyPatch()
        monkey.setattr(accumulated, "NATIVE_STREAM", native)
        try:
            got = FAMILIES[family].arrays(start, stop)
        finally:
            monkey.undo()
        want = numpy_arrays(start, stop)
        assert got.records is not None and want.records is None
        found += [f"{name} at {start}" for name in same_arrays(got.fields, want.fields)]
        if not np.array_equal(got.records, numpy_records(want)):
            found.append(f"records at {start}")
    return found


@needs_native
@pytest.mark.parametrize("family", sorted(LIGHT_CASES))
def test_the_native_light_cases_are_the_numpy_cases(family):
    """The light families' fields and engine records from the native
    stream equal the NumPy path's, bit for bit and dtype for dtype (the records as u32 words, the
    canonical form every record is hashed in), and the engine hands back the native records
    unless the C engine is switched off."""
    assert light_differences(NATIVE, family) == []
    batch = FAMILIES[family].arrays(0, 10)
    assert (ENGINES[family](batch) is batch.records) == (accumulated_engine.NATIVE is not None)


def last_record_word_off(function: str):
    """A stand-in for the native module whose last case's last record word is one off."""

    def cases(first, *arrays):
        getattr(NATIVE, function)(first, *arrays)
        arrays[-1][-1, -1] ^= 1

    return cases


def weight_of_a_short_row_past_vocab(first, vocab, weights, records):
    """A stand-in that leaves a weight beyond V of a short row (not zeroed)."""
    NATIVE.allocation_cases(first, vocab, weights, records)
    k = int(np.flatnonzero(vocab < accumulated.VMAX)[0])
    weights[k, -1] = 1


def count_moved_to_the_next_token(first, vocab, counts, draws, records):
    """A stand-in that moves one count of each case's first token to its second (the row still
    sums to M: only the comparison of the fields sees it)."""
    NATIVE.categorical_cases(first, vocab, counts, draws, records)
    moved = counts[:, 0] > 0
    counts[moved, 0] -= np.uint64(1)
    counts[moved, 1] += np.uint64(1)


def domain_off_by_one(first, seed, generation, rnd, position, domain, draw_counter, records):
    """A stand-in whose domain codes are 0..2 instead of 1..3 (the records left as they are)."""
    NATIVE.rng_cases(first, seed, generation, rnd, position, domain, draw_counter, records)
    domain -= np.uint64(1)


@needs_native
@pytest.mark.parametrize(
    "family, bug",
    [
        ("categorical_sampling", last_record_word_off("categorical_cases")),
        ("categorical_sampling", count_moved_to_the_next_token),
        ("allocation_dense", last_record_word_off("allocation_cases")),
        ("allocation_dense", weight_of_a_short_row_past_vocab),
        ("rng_abi", last_record_word_off("rng_cases")),
        ("rng_abi", domain_off_by_one),
    ],
)
def test_the_light_cases_comparison_catches_a_seeded_bug(family, bug):
    function = LIGHT_CASES[family][0]
    assert light_differences(SimpleNamespace(**{function: bug}), family)


@pytest.mark.parametrize("family", sorted(LIGHT_CASES))
def test_the_light_families_take_the_numpy_path_without_the_module(monkeypatch, family):
    """With no native module the fields are NumPy's and the engine computes its records itself."""
    monkeypatch.setattr(accumulated, "NATIVE_STREAM", None)
    batch = FAMILIES[family].arrays(5, 50)
    assert batch.records is None
    assert same_arrays(batch.fields, LIGHT_CASES[family][1](5, 50).fields) == []
    assert np.array_equal(ENGINES[family](batch), LIGHT_CASES[family][2](batch))
