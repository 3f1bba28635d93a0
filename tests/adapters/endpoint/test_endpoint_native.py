"""The endpoint's native dense-row check (adapters/endpoint/_dense_row.c) against its NumPy path.

The reference endpoint validates a dense q row in one native pass when the module
is built, else with NumPy (validation.py). Both must give the same verdict, the
same reason code and detail (the first failing check, in the order of
validation.py) and the same counts on every input: every ``wire_frames`` and
``wire_sessions`` vector, structure-aware fuzz inputs (``qconform.generators.wire_fuzz``),
random dense rows with special values, and hand-made rows that hold two failing
classes at once (which one is named is the order). Each comparison is shown to
catch a seeded bug of the native path. Without the module (not built, or
``QCONFORM_ENDPOINT_NATIVE=0``) the native side is skipped.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Iterable
from types import SimpleNamespace

import numpy as np
import pytest
from endpoint_vectors import cases, played_session, raw
from hypothesis import given, settings
from hypothesis import strategies as st

from qconform.adapters.endpoint import answers, layout
from qconform.adapters.endpoint.codec import Message, Refusal
from qconform.adapters.endpoint.receiver import Receiver
from qconform.adapters.endpoint.replies import dense_tail, reply_frame
from qconform.adapters.endpoint.validation import Validator, native_module
from qconform.generators import wire_fuzz
from qconform.generators.families.wire_frames import fields_to_json
from qconform.spec.wire.negotiation import example_config

pytestmark = pytest.mark.rules("R03", "R19", "R20")

NATIVE = native_module()
needs_native = pytest.mark.skipif(NATIVE is None, reason="the native module is not built or is switched off")
#: both builds of the native pass: the one this CPU runs (``build``: AVX2 where it has it) and the
#: baseline one, which runs on every CPU
BUILDS = (
    []
    if NATIVE is None
    else [
        pytest.param(NATIVE, id=f"native-{NATIVE.build}"),
        pytest.param(SimpleNamespace(dense_row=NATIVE.dense_row_baseline), id="native-baseline"),
    ]
)

NAN, POS_INF, NEG_INF, NEG_ZERO, NEG_ONE, ONE = 0x7FC00000, 0x7F800000, 0xFF800000, 0x80000000, 0xBF800000, 0x3F800000
SPECIAL = (NAN, POS_INF, NEG_INF, NEG_ZERO, NEG_ONE, ONE, 0x33000000, 1, 0x40000000, 0x7F7FFFFF, 0x00800000)
DEV = answers.hello_fields(fields_to_json(example_config(vocab=40, dense_stride=48, max_support=12)))


def receiver_with(native) -> Receiver:
    """A receiver whose validator uses ``native`` (a module, a seeded-bug stand-in, or None: NumPy)."""
    receiver = Receiver(DEV)
    receiver.validator.native = native
    return receiver


def outcome(receiver: Receiver, data: bytes, params: dict | None) -> tuple:
    """What the stateless checks make of one frame: the refusal (code and message) or the row's counts."""
    receiver.links.clear()
    if params is not None:
        receiver.links[0] = params
    try:
        _, row = receiver.check(data)
    except Refusal as refusal:
        return ("reject", refusal.code, str(refusal))
    if row is None:
        return ("accept",)
    return ("accept", row.counts.dtype.str, row.counts.tolist(), None if row.ids is None else row.ids.tolist())


def vector_inputs() -> list[tuple[dict | None, bytes]]:
    """Every frame of the wire vectors, with the HELLO it is checked under (None: before the HELLO)."""
    out = []
    for case in cases("wire_frames"):
        inp = case["input"]
        if "frame" in inp:
            out.append((answers.hello_fields(inp["hello"]) if inp["negotiated"] else None, raw(inp["frame"])))
    for case in cases("wire_sessions"):
        config = answers.hello_fields(case["input"]["config"])
        out += [(config, raw(event["frame"])) for event in case["input"]["events"] if "frame" in event]
    return out


def fuzz_inputs(count: int, seed: int = 1) -> list[tuple[dict | None, bytes]]:
    """Structure-aware fuzz frames (mutated values, IDs, fields, bytes; resealed), with their HELLO."""
    chooser, params = wire_fuzz.RandomChooser(random.Random(seed)), {}
    out = []
    for _ in range(count):
        item = wire_fuzz.make_input(chooser)
        hello = item.state.negotiated
        if hello is not None and id(hello) not in params:
            params[id(hello)] = answers.hello_fields(fields_to_json(hello))
        out.append((None if hello is None else params[id(hello)], item.frame))
    return out


STEP = Message(
    layout.STEP,
    {
        "session_id": DEV["session_id"],
        "generation": 3,
        "round": 9,
        "anchor": 4100,
        "support_policy": 0,
        "context_version": 2,
        "temperature": ONE,
        "slot": 1,
        "depth": 5,
        "prefix_digest": bytes(32),
    },
)


def dense_frame(values: Iterable[int], padding: Iterable[int] = (), token: int = 0) -> bytes:
    """A checksummed dense REPLY of DEV carrying FP32 bit patterns ``values`` and then ``padding``."""
    words = [*values, *padding]
    words += [0] * (DEV["dense_stride"] - len(words))
    tail = struct.pack(f"<{len(words)}I", *words)
    return reply_frame(STEP, 0, token, tail, DEV["dense_stride"], layout.REPR_DENSE).data


def good_row(seed: int = 3) -> list[int]:
    """The FP32 bit patterns of a dyadic row of DEV summing to M, positive at token 0."""
    rng = np.random.default_rng(seed)
    counts = np.zeros(DEV["vocab"], dtype=np.int64)
    cuts = np.sort(rng.choice(np.arange(1, layout.M), size=9, replace=False))
    counts[np.sort(rng.choice(DEV["vocab"], size=10, replace=False))] = np.diff([0, *cuts, layout.M])
    counts[0] += 1
    counts[counts.argmax()] -= 1
    return list(np.frombuffer(dense_tail(counts, DEV["vocab"]), dtype="<u4").tolist())


def with_values(row: list[int], changes: dict[int, int]) -> list[int]:
    out = list(row)
    for index, bits in changes.items():
        out[index] = bits
    return out


def order_inputs() -> list[tuple[dict | None, bytes]]:
    """Rows failing two checks at once (which reason wins is the order), and one failing each alone."""
    row, quarter = good_row(), 0x3E800000  # 0.25: moving it breaks the total
    subnormal, offgrid, above = 1, 0x33000000, 0x40000000  # 2^-149 and 2^-25: off the grid; 2.0
    rows = [
        ([*row], [5]),  # padding alone
        (with_values(row, {3: NAN}), [5]),  # padding before non-finite
        (with_values(row, {3: NAN, 4: NEG_ONE}), []),  # non-finite before negative
        (with_values(row, {4: NEG_ONE, 3: POS_INF}), []),
        (with_values(row, {3: NEG_ZERO, 4: offgrid}), []),  # negative (-0.0 too) before non-dyadic
        (with_values(row, {3: subnormal, 4: above}), []),  # non-dyadic before a count above M
        (with_values(row, {3: above}), []),  # a count above M before the total
        (with_values(row, {3: quarter}), []),  # the total alone
        (with_values(row, {3: NEG_INF}), []),
        (with_values(row, {3: offgrid}), []),
        ([0] * DEV["vocab"], []),  # all zero: the total
        ([ONE] + [0] * (DEV["vocab"] - 1), []),  # the one-hot row: accepted
        (row, []),  # well formed
    ]
    return [(DEV, dense_frame(values, padding)) for values, padding in rows]


def mismatches(native, inputs: list[tuple[dict | None, bytes]]) -> list[str]:
    """Inputs on which the validator with ``native`` and the NumPy one disagree."""
    with_native, with_numpy = receiver_with(native), receiver_with(None)
    out = []
    for params, data in inputs:
        left, right = outcome(with_native, data, params), outcome(with_numpy, data, params)
        if left != right:
            out.append(f"{data[:24].hex()}: native {left[:2]} / NumPy {right[:2]}")
    return out


def session_verdicts(native) -> list[dict]:
    """Every wire_sessions vector through a full receiver, its verdicts, state and counters."""
    out = []
    for case in cases("wire_sessions"):
        receiver = Receiver(answers.hello_fields(case["input"]["config"]))
        receiver.validator.native = native
        got = played_session(case, receiver)
        assert got == case["expected"], case["id"]
        out.append(got)
    return out


# -- the two paths agree -------------------------------------------------------------------------


@needs_native
@pytest.mark.parametrize("native", BUILDS)
def test_native_and_numpy_agree_on_every_wire_vector(native):
    inputs = vector_inputs()
    assert sum(data[6:8] == struct.pack("<H", layout.REPLY) for _, data in inputs) >= 20
    assert mismatches(native, inputs) == []
    assert session_verdicts(native) == session_verdicts(None)


@needs_native
@pytest.mark.parametrize("native", BUILDS)
def test_native_and_numpy_agree_on_fuzz_inputs(native):
    assert mismatches(native, fuzz_inputs(4000)) == []


@needs_native
@pytest.mark.parametrize("native", BUILDS)
def test_native_and_numpy_agree_on_rows_failing_two_checks(native):
    inputs = order_inputs()
    assert mismatches(native, inputs) == []
    reasons = [outcome(receiver_with(native), data, params)[1] for params, data in inputs]
    assert reasons == [
        "NONZERO_DENSE_PADDING",
        "NONZERO_DENSE_PADDING",
        "NON_FINITE_VALUE",
        "NON_FINITE_VALUE",
        "NEGATIVE_VALUE",
        "NON_DYADIC_VALUE",
        "WRONG_TOTAL_MASS",
        "WRONG_TOTAL_MASS",
        "NON_FINITE_VALUE",
        "NON_DYADIC_VALUE",
        "WRONG_TOTAL_MASS",
        "<i4",
        "<i4",
    ]


@needs_native
@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, DEV["vocab"] - 1), st.one_of(st.sampled_from(SPECIAL), st.integers(0, 2**32 - 1)))
    ),
    st.lists(st.integers(0, 2**32 - 1), max_size=2),
    st.integers(-2, 2),
)
def test_native_and_numpy_agree_on_random_rows(changes, padding, nudge):
    """A good row with values replaced (special patterns, random ones) and one value moved by ``nudge`` ulps."""
    row = with_values(good_row(), dict(changes))
    row[7] = (row[7] + nudge) % 2**32
    assert mismatches(NATIVE, [(DEV, dense_frame(row, [p for p in padding if p]))]) == []


@needs_native
def test_native_counts_are_the_rows_counts():
    """A production-size row: the same int32 counts as the NumPy path, written once."""
    vocab = 129280
    rng = np.random.default_rng(1)
    counts = np.floor(rng.dirichlet(np.ones(vocab)) * layout.M).astype(np.int64)
    counts[0] += layout.M - counts.sum()
    tail = dense_tail(counts, vocab + 128)
    out = np.empty(vocab, dtype=np.int32)
    assert NATIVE is not None
    assert NATIVE.dense_row(tail, vocab, out) == (0, layout.M)
    assert (out == counts).all()
    assert NATIVE.dense_row(memoryview(tail)[1 : 1 + 4 * vocab], vocab, out)[0] != 0  # unaligned: read anyway
    with pytest.raises(ValueError, match="shorter"):
        NATIVE.dense_row(tail, vocab, np.empty(vocab - 1, dtype=np.int32))


# -- each comparison catches a seeded bug of the native path ---------------------------------------


def seeded(change: Callable[[tuple[int, int], bytes, int, np.ndarray], tuple[int, int]]):
    """A stand-in for the native module whose ``dense_row`` changes the real one's answer."""
    assert NATIVE is not None
    real = NATIVE.dense_row

    def dense_row(tail, vocab, out):
        return change(real(tail, vocab, out), bytes(tail), vocab, out)

    return SimpleNamespace(dense_row=dense_row)


def negative_first(result, tail, vocab, out):
    """Checks negative values before non-finite ones."""
    bits = np.frombuffer(tail, dtype="<u4")[:vocab]
    finite = (bits & 0x7F800000) != 0x7F800000
    return (3, 0) if result[0] == 2 and ((bits >> 31).astype(bool) & finite).any() else result


def ignores_padding(result, tail, vocab, out):
    """Never looks at the padding."""
    return real_of(tail[: 4 * vocab], vocab, out) if result[0] == 1 else result


def real_of(tail, vocab, out):
    assert NATIVE is not None
    return NATIVE.dense_row(tail, vocab, out)


def counts_off_by_one(result, tail, vocab, out):
    """Writes one count wrong on an accepted row."""
    if result[0] == 0:
        out[out.argmax()] -= 1
    return result


def total_off(result, tail, vocab, out):
    """Reports the wrong total in a refusal's detail."""
    return (6, result[1] + 1) if result[0] == 6 else result


def refuses_the_total(result, tail, vocab, out):
    """Compares the total with the wrong constant: refuses every well-formed row."""
    return (6, result[1]) if result[0] == 0 else result


@needs_native
@pytest.mark.parametrize(
    ("bug", "inputs"),
    [
        (negative_first, order_inputs),
        (ignores_padding, order_inputs),
        (ignores_padding, vector_inputs),
        (counts_off_by_one, vector_inputs),
        (counts_off_by_one, order_inputs),
        (total_off, order_inputs),
        (refuses_the_total, vector_inputs),
    ],
)
def test_the_comparison_catches_a_seeded_native_bug(bug, inputs):
    assert mismatches(seeded(bug), inputs()) != []


@needs_native
def test_session_comparison_catches_a_seeded_native_bug():
    with pytest.raises(AssertionError):
        session_verdicts(seeded(refuses_the_total))


def test_the_switch_turns_the_native_path_off(monkeypatch):
    """``QCONFORM_ENDPOINT_NATIVE=0`` gives the NumPy path (how the suite is run without the module)."""
    assert Validator.native is NATIVE  # both read the environment when imported
    monkeypatch.setenv("QCONFORM_ENDPOINT_NATIVE", "0")
    assert native_module() is None
