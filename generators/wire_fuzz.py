"""Structure-aware fuzzing of the wire v2 decoder and receiver (R12, R18-R21, R24, R25, R28).

A byte-level fuzzer spends most of its inputs on the magic, the lengths, the
checksum and "before HELLO": the q checks behind them are never reached. This
one starts from valid frames (``wire_frames``' pool), mutates them *as
messages* (a fixed field set to a boundary value, a q value set to NaN, -0.0, a
non-dyadic or off-by-one count, a sparse ID duplicated, out of range or out of
order, dense padding set, the entry count or representation changed), then
**reseals** the probability checksum and the frame checksum (most of the time)
so that the mutation reaches the check it aims at, and feeds the frame to the
spec receiver (``receiver.step``) in a **negotiated session**: one of four
states of an open round (no rows, every row, completed, committed) or, rarely,
before HELLO. A few inputs are also cut, extended, bit-flipped or replaced by
raw bytes, so framing stays covered.

The choices come from a :class:`Chooser`: ``random.Random`` for the plain engine,
or atheris' ``FuzzedDataProvider`` (bench/fuzz_wire_decoder.py), so a
coverage-guided engine steers the same mutations; choice 0 (what an exhausted
provider gives) is always the structured path, resealed. The outcome of each input is
``accept``, ``duplicate``, ``greedy_v1``, ``ignore`` or the reason code; any
exception is a finding.
"""

from __future__ import annotations

import json
import random
import struct
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from qconform.generators.corpus import default_vectors_dir
from qconform.generators.families.wire_frames import (
    COMMIT,
    DEV,
    DEV_DENSE_ROW,
    PROD,
    REPLY_FRAMES,
    STEP,
    base_frames,
    reply,
)
from qconform.spec.constants import M
from qconform.spec.qrow import QRow
from qconform.spec.wire import layout
from qconform.spec.wire.checksum import crc32c
from qconform.spec.wire.codec import (
    completion_for,
    decode_frame,
    encode_frame,
    encode_v1,
)
from qconform.spec.wire.header import seal
from qconform.spec.wire.layout import FIELD_TYPES, HEADER, HEADER_SIZE
from qconform.spec.wire.messages import Hello, Message, Reply, Reset, Step, V1Greedy, reply_tail
from qconform.spec.wire.receiver import FrameIn, ReceiverState, initial_state, step


class Chooser(Protocol):
    def below(self, n: int) -> int:
        """A choice in 0..n-1."""
        ...


@dataclass
class RandomChooser:
    """Choices from a seeded ``random.Random`` (the plain engine)."""

    rng: random.Random

    def below(self, n: int) -> int:
        return self.rng.randrange(n)


@dataclass
class ProviderChooser:
    """Choices from an atheris ``FuzzedDataProvider`` (0 once its bytes are used up)."""

    provider: object

    def below(self, n: int) -> int:
        return self.provider.ConsumeIntInRange(0, n - 1) if n > 1 else 0  # type: ignore[attr-defined]


# ---------------------------------------------------------------- seeds: valid frames in a live session

DEV_STEP = replace(STEP, support_policy=0)
#: a sparse row in the development vocabulary: its REPLY does not match the dense round (REPRESENTATION_MISMATCH)
DEV_SPARSE_ROW = QRow.sparse(DEV.vocab, [7, 20, 40], [M // 2, M // 4, M // 4])
DEV_REPLY_FRAMES = [encode_frame(reply(DEV_DENSE_ROW, DEV, token=0, position=4100 + i)) for i in range(5)]


def session_states(config: Hello, step_message: Step, reply_frames: list[bytes]) -> list[ReceiverState]:
    """HELLO; RESET slot 1 to generation 3 at 4100; STEP round 9: the round open with no rows, with every
    row, completed, and committed (accepted 2)."""
    state = initial_state(config)
    frames = [
        encode_frame(config),
        encode_frame(Reset(config.session_id, 0x5EED, 3, 4100, 1)),
        encode_frame(step_message),
    ]
    for data in frames:
        state, verdict = step(state, FrameIn(data))
        assert verdict.kind == "accept", verdict
    states = [state]
    for data in reply_frames:
        state, verdict = step(state, FrameIn(data))
        assert verdict.kind == "accept", verdict
    states.append(state)
    state, verdict = step(state, FrameIn(encode_frame(completion_for(step_message, reply_frames))))
    assert verdict.kind == "accept", verdict
    states.append(state)
    state, verdict = step(state, FrameIn(encode_frame(replace(COMMIT, session_id=config.session_id))))
    assert verdict.kind == "accept", verdict
    return states + [state]


@dataclass(frozen=True)
class Seed:
    """A valid frame, its decoded message (None for v1) and the session states it is fed in."""

    name: str
    frame: bytes
    message: Message | None
    states: tuple[ReceiverState, ...]
    before_hello: ReceiverState


def seeds() -> list[Seed]:
    prod_states = tuple(session_states(PROD, STEP, REPLY_FRAMES))
    dev_states = tuple(session_states(DEV, DEV_STEP, DEV_REPLY_FRAMES))
    out = []
    pool = [(name, config, data) for name, config, _, data in base_frames()]
    pool += [
        ("completion_dev", DEV, encode_frame(completion_for(DEV_STEP, DEV_REPLY_FRAMES))),
        ("reply_sparse_dev", DEV, encode_frame(reply(DEV_SPARSE_ROW, DEV, token=7))),
        ("v1", PROD, encode_v1([5, 6, 7])),
    ]
    for name, config, data in pool:
        message = None if name == "v1" else decode_frame(data, config)
        assert not isinstance(message, V1Greedy)  # only the "v1" seed is a v1 frame
        states = dev_states if config is DEV else prod_states
        fresh = initial_state(config)
        out.append(Seed(name, data, message, (fresh,) if name == "hello" else states, fresh))
    return out


SEEDS: list[Seed] = seeds()


# ---------------------------------------------------------------- mutations

NAN, POS_INF, NEG_INF, NEG_ZERO, NEG_ONE, ONE = 0x7FC00000, 0x7F800000, 0xFF800000, 0x80000000, 0xBF800000, 0x3F800000
TWO_POW_MINUS_25 = 0x33000000
SPECIAL_F32 = (NAN, POS_INF, NEG_INF, NEG_ZERO, NEG_ONE, ONE, TWO_POW_MINUS_25, 0, 1, 0x40000000)


def field_values(f: layout.Field, current: int | bytes, params: Hello) -> list[int | bytes]:
    """Interesting values of one fixed field: boundaries of its type and of the negotiated HELLO, and current +- 1."""
    if f.type in ("char[32]", "u8[32]"):
        assert isinstance(current, bytes)
        return [bytes(32), current[:-1] + bytes([current[-1] ^ 1]), b"\xff" * 32]
    assert isinstance(current, int)
    if f.type == "f32":
        return [*SPECIAL_F32, current ^ 0x80000000, current + 1]
    bits = 8 * FIELD_TYPES[f.type][1]
    bounds = [
        0,
        1,
        2,
        current - 1,
        current + 1,
        params.vocab - 1,
        params.vocab,
        params.max_support,
        params.max_support + 1,
        params.dense_stride,
        params.depth - 1,
        params.depth + 1,
        params.max_slots,
        params.max_requests + 1,
        3,
        4,
        8,
        45,
    ]
    if f.type == "i32":
        return [v for v in bounds + [-1, -(1 << 31), (1 << 31) - 1] if -(1 << 31) <= v < (1 << 31)]
    return [v % (1 << bits) for v in bounds + [(1 << bits) - 1, 1 << (bits - 1)]]


def pick(chooser: Chooser, items: list):
    return items[chooser.below(len(items))]


def mutate_field(message: Message, chooser: Chooser, params: Hello) -> Message:
    f = pick(chooser, list(type(message).LAYOUT.fields))
    return replace(message, **{f.name: pick(chooser, field_values(f, getattr(message, f.name), params))})


def q_bits_near(bits: int, chooser: Chooser) -> int:
    """A q value next to ``bits``: one ulp up or down (changes the mass or the dyadic grid), its negation, half."""
    return (
        pick(chooser, [bits + 1, max(bits - 1, 0), bits ^ 0x80000000, max(bits - (1 << 23), 0), bits + (1 << 23)])
        & 0xFFFFFFFF
    )


def mutate_values(message: Reply, chooser: Chooser, params: Hello) -> Reply:
    values = list(message.values)
    if not values:
        return message
    nonzero = [i for i, v in enumerate(values) if v]
    index = pick(chooser, nonzero) if nonzero and chooser.below(2) else chooser.below(len(values))
    if message.representation == layout.REPR_DENSE and chooser.below(4) == 0 and len(values) > params.vocab:
        index = params.vocab + chooser.below(len(values) - params.vocab)  # dense padding
    values[index] = pick(chooser, list(SPECIAL_F32)) if chooser.below(2) else q_bits_near(values[index], chooser)
    return replace(message, values=tuple(values))


def i32(value: int) -> int:
    """``value`` wrapped into the int32 range (a sparse ID is an int32 on the wire)."""
    return (value + (1 << 31)) % (1 << 32) - (1 << 31)


def mutate_ids(message: Reply, chooser: Chooser, params: Hello) -> Reply:
    ids = list(message.ids)
    if not ids:
        return message
    i = chooser.below(len(ids))
    kind = chooser.below(5)
    if kind == 0:
        ids[i] = pick(chooser, [-1, params.vocab, params.vocab + 1, -(1 << 31), params.dense_stride])
    elif kind == 1 and len(ids) > 1:
        ids[i] = ids[i - 1]  # a repeat
    elif kind == 2 and len(ids) > 1:
        j = (i + 1) % len(ids)
        ids[i], ids[j] = ids[j], ids[i]  # out of order
    elif kind == 3:
        ids[i] += pick(chooser, [1, -1])
    else:  # one entry more or fewer
        if chooser.below(2):
            return replace(message, ids=tuple(ids[:-1]), values=message.values[:-1], entry_count=len(ids) - 1)
        return replace(message, ids=(*ids, i32(ids[-1] + 1)), values=(*message.values, ONE), entry_count=len(ids) + 1)
    return replace(message, ids=tuple(i32(v) for v in ids))


def reseal_reply(before: Reply, after: Reply) -> Reply:
    """``after`` with its probability checksum recomputed, unless the mutation set the checksum itself."""
    if after.q_checksum != before.q_checksum:
        return after
    return replace(after, q_checksum=crc32c(reply_tail(after)))


def mutate_bytes(data: bytes, chooser: Chooser) -> bytes:
    """A framing mutation: cut, extend, flip a bit, or set a header field."""
    kind = chooser.below(4)
    if kind == 0 and data:
        return data[: chooser.below(len(data))]
    if kind == 1:
        return data + bytes(chooser.below(256) for _ in range(1 + chooser.below(8)))
    if kind == 2 and data:
        out = bytearray(data)
        out[chooser.below(len(out))] ^= 1 << chooser.below(8)
        return bytes(out)
    f = pick(chooser, list(HEADER[1:5]))
    if len(data) < f.offset + f.size:
        return data
    fmt = FIELD_TYPES[f.type][0]
    (current,) = struct.unpack_from(fmt, data, f.offset)
    out = bytearray(data)
    struct.pack_into(
        fmt,
        out,
        f.offset,
        pick(chooser, [0, 1, current - 1 if current else 1, current + 1, (1 << (8 * f.size)) - 1])
        % (1 << (8 * f.size)),
    )
    return bytes(out)


@dataclass(frozen=True)
class Input:
    """One fuzz input: the seed it came from, the state it is fed in, the frame bytes."""

    seed: str
    state: ReceiverState
    frame: bytes


def make_input(chooser: Chooser) -> Input:
    """Choose a seed and a session state, apply one to three mutations, reseal (usually)."""
    seed = pick(chooser, SEEDS)
    state = seed.before_hello if chooser.below(32) == 31 else pick(chooser, list(seed.states))
    params = state.negotiated or state.config
    if seed.message is None or chooser.below(16) == 15:  # v1 or raw bytes: byte-level only
        data = seed.frame if chooser.below(4) < 3 else bytes(chooser.below(256) for _ in range(chooser.below(40)))
        for _ in range(1 + chooser.below(3)):
            data = mutate_bytes(data, chooser)
        return Input(seed.name, state, data)
    message = seed.message
    for _ in range(1 + chooser.below(3)):
        if isinstance(message, Reply) and chooser.below(2):
            mutation = mutate_values if chooser.below(3) or not message.ids else mutate_ids
            message = mutation(message, chooser, params)
        else:
            message = mutate_field(message, chooser, params)
    if isinstance(message, Reply) and isinstance(seed.message, Reply) and chooser.below(8) < 7:
        message = reseal_reply(seed.message, message)
    data = encode_frame(message)
    if chooser.below(10) == 9:
        data = mutate_bytes(data, chooser)
        if chooser.below(2) and len(data) >= HEADER_SIZE:
            data = seal(data)
    return Input(seed.name, state, data)


@dataclass
class Tally:
    """Outcomes per code (``accept``, ``duplicate``, ``greedy_v1`` or a reason) and the findings."""

    outcomes: Counter[str] = field(default_factory=Counter)
    findings: list[str] = field(default_factory=list)
    inputs: int = 0


def run_input(item: Input, tally: Tally) -> None:
    """Feed one input to the receiver; any exception is a finding."""
    tally.inputs += 1
    try:
        _, verdict = step(item.state, FrameIn(item.frame))
    except Exception as error:  # noqa: BLE001 - every exception is a finding
        tally.findings.append(f"{type(error).__name__}: {error} (seed {item.seed}, frame {item.frame[:64].hex()})")
        return
    tally.outcomes[verdict.reason or verdict.kind] += 1


def fuzz(count: int, seed: int = 1, progress: Callable[[Tally], None] | None = None) -> Tally:
    """The plain engine: ``count`` inputs from ``random.Random(seed)``."""
    chooser, tally = RandomChooser(random.Random(seed)), Tally()
    for i in range(count):
        run_input(make_input(chooser), tally)
        if progress is not None and (i + 1) % 100_000 == 0:
            progress(tally)
    return tally


def single_frame_codes() -> frozenset[str]:
    """Every reason code that one frame can get on its own: the reasons of the ``wire_frames`` corpus."""
    document = json.loads((default_vectors_dir() / "wire_frames.json").read_text(encoding="utf-8"))
    return frozenset(
        case["expected"]["reason"]
        for group in document["testGroups"]
        for case in group["tests"]
        if "reason" in case["expected"]
    )
