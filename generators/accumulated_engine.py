"""The fast exact engine of the accumulated families (docs/accumulated.md, "Engine").

An exact re-expression of the spec's answers, vectorised over many cases with NumPy
integers and never floats. The accumulated inputs keep every quantity small enough
for uint64: q and p are dyadic24 counts (at most 2^24), a draw is below 2^32, so
``u32 * count`` and ``C_v * 2^32`` stay below 2^56; allocation weights are integers
below 2^23 on at most 8 tokens, so ``M * w_v`` stays below 2^47.

* ``rng_abi``: Philox4x32-10 at the draw's counter and key (R22, R23);
* ``categorical_sampling``: the first cumulative count strictly greater than u24 (R08);
* ``allocation_dense``: floors of ``M w_v / W``, then one ticket per largest remainder,
  ties to the lowest ID (R06);
* ``verification_round``: accept iff ``u32 * Q(x) < P(x) * 2^32``; at the first rejection
  the residual ``max(P - Q, 0)``, after K accepts the bonus row ``P_{K+1}``, from which the
  draw at the correction key picks the first ``v`` with ``C_v * 2^32 > u32 * R`` (R11).

It produces the records of :mod:`qconform.generators.accumulated` directly; the
differential test (tests/generators/test_accumulated.py) proves them equal to the records of the
spec's ``solve`` answers. It lives among the generators, because it makes expected
hashes; candidates never import it.

``rng_abi``, ``categorical_sampling`` and ``allocation_dense`` take their records from the native stream, which
computes them in C with the inputs (``_accumulated_stream.c``, the same rules: ``Batch.records``),
where it is built and the C engine is not switched off; else NumPy.
``verification_round`` runs in C where the optional module ``_verification_engine``
(``_verification_engine.c``, built by ``pip install``) is built, the same integer rules over
chunks of cases (issue #24: the NumPy stages stay near a tenth of a vectorized Philox), or, where
the native stream made the batch, by the stream itself on each group of cases as it made them (the
same C rules, ``generators/verification_engine.h``: the batch's ``records``); else, or with
``QCONFORM_ENGINE_NATIVE=0``, in NumPy. The tests hold all three to each other and to the spec.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import ModuleType

import numpy as np

from qconform.generators.accumulated import (
    DECISION_CODES,
    DOMAIN_CODES,
    FAMILIES,
    KMAX,
    PAD,
    SHARD_CASES,
    U64,
    VERIFY_WORDS,
    VMAX,
    WORD_MASK,
    Batch,
    M,
    combine,
    philox_lanes,
    sample_rows,
    shard_digest,
    shard_ranges,
)
from qconform.generators.native_extensions import optional_extension

TWO32 = U64(1 << 32)


def rng_records(batch: Batch) -> np.ndarray:
    """The records: the native stream's, computed in C with the inputs (``batch.records``), unless
    the C engine is switched off (``QCONFORM_ENGINE_NATIVE=0``); else by NumPy."""
    if batch.records is not None and NATIVE is not None:
        return batch.records
    return rng_records_numpy(batch)


def rng_records_numpy(batch: Batch) -> np.ndarray:
    f = batch.fields
    counter = (f["position"], f["round"], f["generation"], (f["domain"] << U64(24)) | f["draw_counter"])
    out = philox_lanes(*counter, f["seed"] & WORD_MASK, f["seed"] >> U64(32))
    return np.stack([*counter, *out, out[0] >> U64(8), out[0]], axis=1)


def categorical_records(batch: Batch) -> np.ndarray:
    """The records: the native stream's, computed in C with the inputs (``batch.records``), unless
    the C engine is switched off (``QCONFORM_ENGINE_NATIVE=0``); else by NumPy."""
    if batch.records is not None and NATIVE is not None:
        return batch.records
    return categorical_records_numpy(batch)


def categorical_records_numpy(batch: Batch) -> np.ndarray:
    return sample_rows(batch.fields["counts"][:, None, :], batch.fields["draws"]).astype(U64)


def allocation_records(batch: Batch) -> np.ndarray:
    """The records: the native stream's, computed in C with the inputs (``batch.records``), unless
    the C engine is switched off (``QCONFORM_ENGINE_NATIVE=0``); else by NumPy."""
    if batch.records is not None and NATIVE is not None:
        return batch.records
    return allocation_records_numpy(batch)


def allocation_records_numpy(batch: Batch) -> np.ndarray:
    w = batch.fields["weights"]
    total = w.sum(axis=1, keepdims=True)
    scaled = w * U64(M)
    floors, remainders = scaled // total, scaled % total
    remaining = U64(M) - floors.sum(axis=1)
    # rank by (remainder descending, ID ascending): remainder < 2^26, so one integer key
    key = remainders * U64(VMAX) + (U64(VMAX - 1) - np.arange(VMAX, dtype=U64))[None, :]
    order = np.argsort(-key.astype(np.int64), axis=1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(VMAX)[None, :].repeat(len(w), axis=0), axis=1)
    return floors + (rank < remaining[:, None].astype(np.int64)).astype(U64)


def first_above(masses: np.ndarray, u32: np.ndarray) -> np.ndarray:
    """Per row, the first ``v`` with ``C_v * 2^32 > u32 * R`` (R11) over integer masses."""
    cumulative = np.cumsum(masses, axis=1)
    threshold = u32 * cumulative[:, -1]
    return np.argmax(cumulative * TWO32 > threshold[:, None], axis=1)


#: the stages of :func:`verification_records_numpy`, timed when it is handed a dict (bench/bench_accumulated.py)
STAGES: tuple[str, ...] = ("acceptance draws", "acceptance tests", "final draw and pick", "record assembly")


class Stopwatch:
    """Adds the process CPU time since the last mark to ``stages[name]`` (nothing without a dict)."""

    def __init__(self, stages: dict[str, float] | None) -> None:
        self.stages = stages
        self.last = time.process_time() if stages is not None else 0.0

    def mark(self, name: str) -> None:
        if self.stages is not None:
            now = time.process_time()
            self.stages[name] = self.stages.get(name, 0.0) + now - self.last
            self.last = now


def native_engine() -> ModuleType | None:
    """The C engine (``_verification_engine.c``), or None: not built (no C compiler where it was
    installed), or switched off by ``QCONFORM_ENGINE_NATIVE=0``."""
    return optional_extension("_verification_engine", "QCONFORM_ENGINE_NATIVE")


#: the C engine where it is built (:func:`native_engine`), read by :func:`verification_records` at each call
NATIVE: ModuleType | None = native_engine()


def verification_records(batch: Batch) -> np.ndarray:
    """Records ``uint32 [n, VERIFY_WORDS]``: by the C engine where it is built (the records the
    native stream computed with the inputs, its fused path, when the batch has them), else by NumPy
    (:func:`verification_records_numpy`); the three are equal (tests/generators/test_accumulated.py,
    tests/generators/test_verification_engine_native.py)."""
    if NATIVE is None:
        return verification_records_numpy(batch)
    if batch.records is not None:
        return batch.records
    return verification_records_native(NATIVE, batch)


def verification_records_native(native: ModuleType, batch: Batch) -> np.ndarray:
    """The C engine's records: it reads the stream's arrays in place (any strides) and writes
    every word of a preallocated array; every draw is computed there, as in NumPy."""
    f = batch.fields
    records = np.empty((batch.stop - batch.start, VERIFY_WORDS), dtype=np.uint32)
    fields = ("seed", "generation", "round", "anchor", "depth", "q", "p", "drafts")
    native.verification_records(*(f[name] for name in fields), records)
    return records


def verification_records_numpy(batch: Batch, stages: dict[str, float] | None = None) -> np.ndarray:
    """Records ``uint32 [n, VERIFY_WORDS]`` in NumPy. Every draw is computed here from the
    request's key and counters (the acceptance draws at the positions below K, the final draw),
    none taken from the stream's inputs."""
    clock = Stopwatch(stages)
    f = batch.fields
    n = batch.stop - batch.start
    rows = np.arange(n)
    depth, q, p, drafts = f["depth"], f["q"], f["p"], f["drafts"]
    anchor, rnd, generation, seed = f["anchor"], f["round"], f["generation"], f["seed"]
    key0, key1 = seed & WORD_MASK, seed >> U64(32)
    k = np.arange(KMAX)[None, :]
    within = k < depth[:, None]
    cases, steps = np.nonzero(within)
    accept_u32 = np.zeros((n, KMAX), dtype=U64)
    accept_u32[cases, steps] = philox_lanes(
        (anchor[cases] + steps.astype(U64)) & WORD_MASK,
        rnd[cases],
        generation[cases],
        U64(DOMAIN_CODES["ACCEPT"] << 24),
        key0[cases],
        key1[cases],
    )[0]
    clock.mark(STAGES[0])
    qx = np.take_along_axis(q, drafts[:, :, None], axis=2)[:, :, 0]
    px = np.take_along_axis(p[:, :KMAX], drafts[:, :, None], axis=2)[:, :, 0]
    ok = (accept_u32 * qx < px * TWO32) | ~within
    accepted = np.where(ok.all(axis=1), depth, np.argmin(ok, axis=1))
    full = accepted == depth
    clock.mark(STAGES[1])
    position = (anchor + accepted.astype(U64)) & WORD_MASK
    final_u32 = philox_lanes(position, rnd, generation, U64(DOMAIN_CODES["CORRECTION"] << 24), key0, key1)[0]
    p_at, q_at = p[rows, accepted], q[rows, np.minimum(accepted, KMAX - 1)]
    masses = np.where(full[:, None], p_at, np.where(p_at > q_at, p_at - q_at, U64(0)))
    final_token = first_above(masses, final_u32)
    clock.mark(STAGES[2])
    tested = np.minimum(accepted + 1, depth)  # acceptance draws consumed
    records = np.full((n, VERIFY_WORDS), PAD, dtype=np.uint32)
    records[:, 0] = accepted
    records[:, 1] = accepted + 1
    emitted = records[:, 2 : 3 + KMAX]
    emitted[:, :KMAX] = np.where(k < accepted[:, None], drafts, PAD)
    emitted[rows, accepted] = final_token
    records[:, 3 + KMAX] = tested + 1
    draws = records[:, 4 + KMAX :].reshape(n, KMAX + 1, 5)  # a view: per draw (domain, position, u32, decision, token)
    draws[:, :KMAX, 0] = DOMAIN_CODES["ACCEPT"]
    draws[:, :KMAX, 1] = (anchor[:, None] + k.astype(U64)) & WORD_MASK
    draws[:, :KMAX, 2] = accept_u32
    draws[:, :KMAX, 3] = np.where(k < accepted[:, None], DECISION_CODES["accept"], DECISION_CODES["reject"])
    draws[:, :KMAX, 4] = drafts
    final = draws[rows, tested]  # a copy: written back whole
    final[:, 0] = DOMAIN_CODES["CORRECTION"]
    final[:, 1] = position
    final[:, 2] = final_u32
    final[:, 3] = np.where(full, DECISION_CODES["bonus"], DECISION_CODES["correction"])
    final[:, 4] = final_token
    draws[rows, tested] = final
    draws[np.arange(KMAX + 1)[None, :] > tested[:, None]] = PAD
    clock.mark(STAGES[3])
    return records


ENGINES: dict[str, Callable[[Batch], np.ndarray]] = {
    "rng_abi": rng_records,
    "categorical_sampling": categorical_records,
    "allocation_dense": allocation_records,
    "verification_round": verification_records,
}


def engine_records(family: str, start: int, stop: int) -> np.ndarray:
    """The spec's records of cases ``[start, stop)`` of an accumulated family, ``[n, words]``."""
    records = ENGINES[family](FAMILIES[family].arrays(start, stop))
    assert records.shape == (stop - start, FAMILIES[family].record_words)
    return records


def engine_hash(family: str, count: int, shard_cases: int = SHARD_CASES) -> str:
    """The expected hash of cases ``0..count-1``: the engine's records, shard by shard."""
    return combine([shard_digest(engine_records(family, lo, hi)) for lo, hi in shard_ranges(count, shard_cases)])


#: the counts whose hashes are committed in vectors/accumulated.json
COMMITTED_COUNTS: tuple[int, ...] = (100_000, 1_000_000, 100_000_000)


def expected_file(hashes: dict[str, dict[int, str]]) -> dict:
    """The object of vectors/accumulated.json (schema: vectors/schemas/accumulated.schema.json)."""
    from qconform.generators.accumulated import SHARD_CASES, STREAM_KEY

    return {
        "format": "qconform-accumulated-v1",
        "description": "Expected hashes of the accumulated families (docs/accumulated.md): SHA-256 over the "
        "SHA-256 digests of fixed shards of canonical answer records.",
        "streamKey": [f"0x{w:08x}" for w in STREAM_KEY],
        "shardCases": SHARD_CASES,
        "families": {
            name: {
                "tag": FAMILIES[name].tag,
                "recordWords": FAMILIES[name].record_words,
                "hashes": {str(n): h for n, h in sorted(by_count.items())},
            }
            for name, by_count in sorted(hashes.items())
        },
    }


def main(argv: list[str] | None = None) -> int:
    """``python -m qconform.generators.accumulated_engine [--count N]... [--family F]... [--out FILE]``:
    compute expected hashes with the engine and merge them into the expected file."""
    import argparse
    import json
    import time
    from pathlib import Path

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--count", type=int, action="append", help="case count (repeatable)")
    parser.add_argument("--family", action="append", choices=sorted(FAMILIES), help="family (repeatable)")
    parser.add_argument("--out", type=Path, default=Path("vectors/accumulated.json"))
    args = parser.parse_args(argv)
    from qconform.generators.accumulated import EXPECTED_SCHEMA, EXPECTED_SCHEMA_FILE

    schema_path = args.out.parent / "schemas" / EXPECTED_SCHEMA_FILE
    schema_path.parent.mkdir(parents=True, exist_ok=True)
    schema_path.write_text(json.dumps(EXPECTED_SCHEMA, indent=1) + "\n")
    current = json.loads(args.out.read_text()) if args.out.exists() else {"families": {}}
    hashes = {name: {int(n): h for n, h in fam["hashes"].items()} for name, fam in current["families"].items()}
    for name in args.family or sorted(FAMILIES):
        for count in args.count or COMMITTED_COUNTS:
            began = time.perf_counter()
            hashes.setdefault(name, {})[count] = engine_hash(name, count)
            print(f"{name} N={count}: {hashes[name][count]} ({time.perf_counter() - began:.1f} s)", flush=True)
            args.out.write_text(json.dumps(expected_file(hashes), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
