"""Stateless checks of a decoded message against the negotiated HELLO (R03, R07, R15, R19, R20, R27).

A REPLY's q row is checked in the order of docs/wire-v2.md ("q validation"),
each value class over the whole row before the next: the probability checksum,
the sampled token's range, the sparse IDs (range, repeats, order) or the dense
padding (all-zero bytes), non-finite then negative then non-dyadic values, zero
sparse entries, the exact total M, and a positive count at the sampled token.
Counts are recovered exactly as ``q(v) * 2^24`` (every FP32 value and that
product are exact in FP64), as int32 (at most M = 2^24); there is no
renormalization (R03).

A dense row goes through the native module ``_dense_row`` (``_dense_row.c``,
built by ``pip install``): padding, value classes, the 2^-24 grid, the counts and
their total in one read of the row, hand-written because no library does that
check in one pass. Where the module is not built, or with
``QCONFORM_ENDPOINT_NATIVE=0`` in the environment, the NumPy path runs: a
well-formed row passes every value check in a few vectorized passes over its FP32
bit patterns (:meth:`Validator.well_formed_counts`); a row that fails one is
checked class by class. Both give the same verdict and reason on every input
(tests/adapters/endpoint/test_endpoint_native.py). Sparse rows always take the NumPy path.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import numpy as np

from qconform.native_sources import native_extension

from . import layout
from .codec import Message, Refusal
from .crc32c import crc32c_of_raw, raw


def native_module() -> ModuleType | None:
    """The native one-pass check of a dense row, or None: not built (no C compiler where it was
    installed), switched off by ``QCONFORM_ENDPOINT_NATIVE=0``, or stale: built from other sources
    than ``_dense_row.c`` beside it, so never called (one line on stderr says how to rebuild it;
    docs/architecture.md, "Native extensions")."""
    return native_extension(f"{__package__}._dense_row", "QCONFORM_ENDPOINT_NATIVE")


#: the native module's codes (``_dense_row.c``): reason and detail, as the NumPy path words them
NATIVE_REFUSALS = {
    1: ("NONZERO_DENSE_PADDING", "dense padding is not all-zero bytes"),
    2: ("NON_FINITE_VALUE", ""),
    3: ("NEGATIVE_VALUE", ""),
    4: ("NON_DYADIC_VALUE", ""),
    5: ("WRONG_TOTAL_MASS", "a count alone exceeds M"),
    6: ("WRONG_TOTAL_MASS", "counts sum to {total}"),
}


@dataclass
class QRow:
    """A validated q row: ``counts`` (int32, each at most M) over the vocabulary when ``ids`` is None,
    else over ``ids``."""

    vocab: int
    counts: np.ndarray
    ids: np.ndarray | None = None

    def count(self, token: int) -> int:
        if self.ids is None:
            return int(self.counts[token])
        hit = np.nonzero(self.ids == token)[0]
        return int(self.counts[hit[0]]) if len(hit) else 0

    def dense(self) -> np.ndarray:
        """The counts of every token ID (zero outside a sparse support)."""
        if self.ids is None:
            return self.counts
        out = np.zeros(self.vocab, dtype=self.counts.dtype)
        out[self.ids] = self.counts
        return out


def f32_fields(bits: np.ndarray | np.uint32) -> tuple:
    """(non-finite, sign bit set, nonzero magnitude) masks of FP32 bit patterns (an array, or one
    pattern as a NumPy scalar: then three booleans).

    A finite value with its sign bit set is negative, -0.0 included: a zero count
    is sent only as +0.0 (docs/wire-v2.md, "q validation").
    """
    magnitude = bits & np.uint32(0x7FFFFFFF)
    nonfinite = (magnitude >> np.uint32(23)) == 0xFF
    nonzero = magnitude != 0
    negative = (bits >> np.uint32(31)).astype(bool) & ~nonfinite
    return nonfinite, negative, nonzero


def scaled(bits: np.ndarray) -> np.ndarray:
    """``q * 2^24`` of finite FP32 values, exact in FP64."""
    return bits.view("<f4").astype(np.float64) * float(layout.M)


#: the smallest FP32 bit pattern that is non-finite or has its sign bit set: every pattern
#: below it is a finite nonnegative value (+0.0 included)
FIRST_NONFINITE_OR_NEGATIVE = 0x7F800000
#: the bit pattern of 1.0: every pattern at most this is a finite value in [0, 1]
ONE_BITS = 0x3F800000


def scaled_f32(bits: np.ndarray) -> np.ndarray:
    """``q * 2^24`` of finite nonnegative FP32 values, in FP32: exact, as a power-of-two scaling
    (a value above 2^104 becomes +inf, which no check below M lets through)."""
    with np.errstate(over="ignore"):
        return bits.view("<f4") * np.float32(layout.M)


class Validator:
    """The stateless checks; mutants override one method each (mutants.py)."""

    #: the native module that checks a dense row in one pass (:func:`native_module`), or None:
    #: the NumPy path
    native: ModuleType | None = native_module()

    def __init__(self) -> None:
        #: work arrays of :meth:`well_formed_counts` by name, reused from row to row (a fresh
        #: half-megabyte array costs its page faults every time)
        self.work: dict[str, np.ndarray] = {}

    def scratch(self, name: str, dtype: type, size: int) -> np.ndarray:
        array = self.work.get(name)
        if array is None or len(array) < size:
            array = self.work[name] = np.empty(size, dtype=dtype)
        return array[:size]

    def well_formed_counts(self, values: np.ndarray, out: np.ndarray | None = None) -> np.ndarray | None:
        """The int32 counts of a row that passes every value check at once (finite, nonnegative,
        dyadic, each at most M, summing to M), from a few vectorized passes over the whole row;
        None when any check fails, and the checks then run one by one, in order, to name the reason.

        One ``max`` over the bit patterns puts every value in [0, 1]; ``q * 2^24`` in FP32 is exact
        (a power-of-two scaling) and at most M, so its truncation to int32 is exact on integers and
        converts back to FP32 exactly: the row is dyadic iff that round trip returns every value.
        (FP32 to int32 is a vector conversion; FP32 to int64 is not.) The counts are written into
        ``out`` when given (int32, ``values.size`` long: the round's slot of the row), else into a
        new array; on None ``out`` holds no meaningful counts.
        """
        size = values.size
        if not size or int(values.max()) > ONE_BITS:
            return None
        count, back = self.scratch("count", np.float32, size), self.scratch("back", np.float32, size)
        counts = np.empty(size, dtype=np.int32) if out is None else out
        np.multiply(values.view("<f4"), np.float32(layout.M), out=count)
        np.copyto(counts, count, casting="unsafe")
        np.copyto(back, counts, casting="unsafe")
        if not np.array_equal(back, count):
            return None
        return counts if int(counts.sum(dtype=np.int64)) == layout.M else None

    def validate(self, message: Message, params: dict, out: np.ndarray | None = None) -> QRow | None:
        """Every stateless check of a decoded non-HELLO v2 message; a REPLY's validated row.

        ``out``: where a dense row's int32 counts go (the receiver's slot for the round's next row,
        ``vocab`` long; None: a new array). It is written before the row is known good, so it holds
        meaningful counts only once this returns the row (the receiver counts the slot only then)."""
        if message.type == layout.HELLO_ANSWER:
            if message["status"] not in (layout.HELLO_ACCEPTED, layout.HELLO_REFUSED):
                raise Refusal("UNKNOWN_STATUS", f"HELLO answer status {message['status']}")
            return None
        route, fields = message.route, message.fields
        if fields["session_id"] != params["session_id"]:
            raise Refusal("SESSION_MISMATCH", f"session {fields['session_id']}", route)
        if fields["slot"] >= params["max_slots"]:
            raise Refusal("TOO_MANY_SLOTS", f"slot {fields['slot']}", route)
        kind = message.type
        if kind == layout.STEP:
            self.step(message, params)
        elif kind == layout.REPLY:
            return self.reply(message, params, out)
        elif kind == layout.COMPLETION:
            if fields["row_count"] != params["depth"]:
                raise Refusal("DEPTH_MISMATCH", f"row count {fields['row_count']}", route)
            if fields["status"] not in (layout.STATUS_OK, layout.STATUS_FAILED):
                raise Refusal("UNKNOWN_STATUS", f"status {fields['status']}", route)
        elif kind == layout.COMMIT:
            if fields["accepted"] > params["depth"]:
                raise Refusal("POSITION_MISMATCH", f"accepted {fields['accepted']}", route)
            if fields["token"] != layout.NO_TOKEN and not 0 <= fields["token"] < params["vocab"]:
                raise Refusal("TOKEN_OUT_OF_RANGE", f"token {fields['token']}", route)
        elif kind == layout.RESET:
            if fields["token"] != layout.NO_TOKEN and not 0 <= fields["token"] < params["vocab"]:
                raise Refusal("TOKEN_OUT_OF_RANGE", f"committed token {fields['token']}", route)
        return None

    @staticmethod
    def step(message: Message, params: dict) -> None:
        route = message.route
        if message["depth"] != params["depth"]:
            raise Refusal("DEPTH_MISMATCH", f"depth {message['depth']}", route)
        if message["support_policy"] > params["max_support"]:
            raise Refusal("SUPPORT_ABOVE_MAX", f"k = {message['support_policy']}", route)
        if layout.reply_bytes(params, message["support_policy"]) > params["max_reply_bytes"]:
            raise Refusal("UNEXPECTED_SIZE", "the reply would exceed max_reply_bytes", route)
        nonfinite, negative, nonzero = f32_fields(np.uint32(message["temperature"]))  # a scalar: no array made
        if nonfinite:
            raise Refusal("NON_FINITE_VALUE", "temperature", route)
        if negative or not nonzero:
            raise Refusal("NEGATIVE_VALUE", "temperature is not positive", route)

    def reply(self, message: Message, params: dict, out: np.ndarray | None = None) -> QRow:
        """Validate a REPLY's q row (the order is the module docstring's) and return it; a dense
        row's counts are written into ``out`` when given (see :meth:`validate`)."""
        route, vocab, tail, fields = message.route, params["vocab"], message.tail, message.fields
        tail_raw = raw(tail) if message.tail_raw is None else message.tail_raw
        if crc32c_of_raw(len(tail), tail_raw) != fields["q_checksum"]:
            raise Refusal("Q_CHECKSUM_MISMATCH", f"q checksum {fields['q_checksum']:#010x}", route)
        token = fields["token"]
        if not 0 <= token < vocab:
            raise Refusal("TOKEN_OUT_OF_RANGE", f"token {token}", route)
        count = fields["entry_count"]
        ids = None
        if fields["representation"] == layout.REPR_SPARSE:
            ids = np.frombuffer(tail, dtype="<i4", count=count).astype(np.int64)
            values = np.frombuffer(tail, dtype="<u4", count=count, offset=4 * count)
            ids, values = self.sparse_ids(ids, values, vocab, route)
            counts = self.well_formed_counts(values)
        elif self.native is not None:
            return self.positive_at(QRow(vocab, self.native_dense(tail, vocab, route, out)), token, route)
        else:
            values = np.frombuffer(tail, dtype="<u4")
            if np.any(values[vocab:] != 0):
                raise Refusal("NONZERO_DENSE_PADDING", "dense padding is not all-zero bytes", route)
            values = values[:vocab]
            if out is not None:
                out = out[: values.size]
            counts = self.well_formed_counts(values, out)
        if counts is None:
            self.value_classes(values, route)
        if ids is not None and np.any((values & np.uint32(0x7FFFFFFF)) == 0):
            raise Refusal("NONCANONICAL_SUPPORT", "a sparse entry has zero q", route)
        if counts is None:
            counts = self.counts(values, route)
            if ids is None and out is not None:  # into the round's slot, as the passes above write it
                np.copyto(out, counts, casting="unsafe")
                counts = out
        return self.positive_at(QRow(vocab, counts, ids), token, route)

    @staticmethod
    def positive_at(row: QRow, token: int, route) -> QRow:
        """The row, refused unless the sampled token has a positive count (the last check)."""
        if row.count(token) == 0:
            raise Refusal("ZERO_Q_AT_TOKEN", f"q({token}) = 0", route)
        return row

    def native_dense(self, tail: bytes | memoryview, vocab: int, route, out: np.ndarray | None = None) -> np.ndarray:
        """A dense row's counts from the native module's one pass (padding, value classes, grid,
        counts, total), or its first failing check, in the order of :meth:`reply`; the counts are
        written into ``out`` when given (see :meth:`validate`)."""
        assert self.native is not None
        size = min(vocab, len(tail) // layout.DENSE_ENTRY)
        counts = np.empty(size, dtype=np.int32) if out is None else out[:size]
        code, total = self.native.dense_row(tail, vocab, counts)
        if code:
            reason, detail = NATIVE_REFUSALS[code]
            raise Refusal(reason, detail.format(total=total), route)
        return counts

    def sparse_ids(self, ids: np.ndarray, values: np.ndarray, vocab: int, route) -> tuple[np.ndarray, np.ndarray]:
        """Sparse IDs in [0, vocab), none repeated, strictly ascending (R19)."""
        if np.any((ids < 0) | (ids >= vocab)):
            raise Refusal("SPARSE_ID_OUT_OF_RANGE", "a sparse ID outside the vocabulary", route)
        if len(np.unique(ids)) != len(ids):
            raise Refusal("DUPLICATE_SPARSE_ID", "a sparse ID is listed twice", route)
        self.check_order(ids, route)
        return ids, values

    @staticmethod
    def check_order(ids: np.ndarray, route) -> None:
        if np.any(ids[1:] < ids[:-1]):
            raise Refusal("UNSORTED_SUPPORT", "sparse IDs are not ascending", route)

    @staticmethod
    def value_classes(values: np.ndarray, route) -> None:
        """Non-finite, then negative, then non-dyadic: the first class present anywhere is the reason.

        One reduction over the bit patterns rules out the first two classes for a well-formed
        row (every pattern below :data:`FIRST_NONFINITE_OR_NEGATIVE`); only a row that holds
        one is classified element by element. Dyadic means ``q * 2^24`` is an integer.
        """
        if values.size and int(values.max()) >= FIRST_NONFINITE_OR_NEGATIVE:
            nonfinite, negative, _ = f32_fields(values)
            if nonfinite.any():
                raise Refusal("NON_FINITE_VALUE", "", route)
            if negative.any():
                raise Refusal("NEGATIVE_VALUE", "", route)
        count = scaled_f32(values)
        if not np.array_equal(np.floor(count), count):
            raise Refusal("NON_DYADIC_VALUE", "", route)

    def counts(self, values: np.ndarray, route) -> np.ndarray:
        """``c_v = q(v) * 2^24``, refused unless each is at most M and they sum to exactly M (R03).
        Runs after :meth:`value_classes`: every value is finite, nonnegative and dyadic, so its
        count is an integer that FP32 holds exactly up to M = 2^24."""
        count = scaled_f32(values)
        if np.any(count > np.float32(layout.M)):
            raise Refusal("WRONG_TOTAL_MASS", "a count alone exceeds M", route)
        counts = count.astype(np.int32)
        total = int(counts.sum(dtype=np.int64))
        if total != layout.M:
            raise Refusal("WRONG_TOTAL_MASS", f"counts sum to {total}", route)
        return counts
