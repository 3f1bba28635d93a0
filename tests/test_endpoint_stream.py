"""The endpoint's receive path: zero-copy framing (stream.FrameReader) and the one-pass q-row check.

``FrameReader`` is held to asyncio's ``StreamReader`` on real loopback sockets: the
same items for whole frames of every size (a payload read straight into its own
buffer or through the staging buffer), and the same ``broken`` prefix for a frame
cut short. ``Validator.well_formed_counts`` (the fast path of a well-formed row) is
held to the element-by-element checks: it returns counts exactly when every check
passes, and they are the same counts; a fast path without the dyadic round trip is
shown to accept what the checks refuse.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from qconform.adapters.endpoint import layout, stream
from qconform.adapters.endpoint.codec import Decoder, Refusal
from qconform.adapters.endpoint.validation import Validator, scaled_f32

ONE = 0x3F800000


class AnyLength(Decoder):
    """Frames the v1 header of any payload length (the framing alone is under test here)."""

    def check_bounds(self, length: int, limits: tuple[int, int]) -> None:
        return None


def chunks_of(frames: list[bytes], cut: int) -> bytes:
    return b"".join(frames)[:cut]


def read_all(payload: bytes, reader_kind: str) -> list[tuple[str, bytes]]:
    """Serve ``payload`` (in uneven writes, then close) and read every item with ``reader_kind``."""

    async def scenario():
        async def handle(reader, writer):
            for start in range(0, len(payload), 70001):
                writer.write(payload[start : start + 70001])
                await writer.drain()
                await asyncio.sleep(0)
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        address = server.sockets[0].getsockname()[:2]
        if reader_kind == "frame":
            reader, writer = await stream.open_connection(*address)
        else:
            reader, writer = await asyncio.open_connection(*address)
        items = []
        while (item := await asyncio.wait_for(stream.read_item(reader, AnyLength(), None, False), 30)) is not None:
            items.append((item.kind, bytes(item.data)))
            if item.kind == stream.BROKEN:
                break
        writer.close()
        server.close()
        return items

    return asyncio.run(scenario())


def hello_like(length: int, fill: int) -> bytes:
    """A v1 header and ``length`` payload bytes: framed by the header, never judged here."""
    return (
        layout.V1_HEADER.pack(layout.V1_MAGIC, layout.V1_VERSION, layout.V1_GREEDY_TYPE, length)
        + bytes([fill % 256]) * length
    )


@pytest.mark.parametrize("cut", [None, 5, 700_000, 1_300_000])
def test_frame_reader_reads_what_a_stream_reader_reads(cut):
    sizes = [4, 4 * 100, 4 + 4 * 4096, 517_000, 36, 600_000, 8, 300_000]
    frames = [hello_like(size, i) for i, size in enumerate(sizes)]
    payload = b"".join(frames) if cut is None else chunks_of(frames, cut)
    ours, theirs = read_all(payload, "frame"), read_all(payload, "stream")
    assert ours == theirs
    if cut is None:
        assert [data for _, data in ours] == frames
    else:
        assert ours[-1][0] == stream.BROKEN and b"".join(data for _, data in ours) == payload


def fast_and_ordered(bits: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | str]:
    validator = Validator()
    fast = validator.well_formed_counts(bits)
    try:
        validator.value_classes(bits, None)
        ordered = validator.counts(bits, None)
    except Refusal as refusal:
        return fast, refusal.code
    return fast, ordered


def dyadic_row(rng: np.random.Generator, size: int) -> np.ndarray:
    counts = rng.multinomial(layout.M, rng.dirichlet(np.full(size, 0.3)))
    return (counts.astype(np.float64) / layout.M).astype(np.float32).view(np.uint32)


def test_the_one_pass_check_accepts_exactly_the_rows_the_ordered_checks_accept():
    rng = np.random.default_rng(14)
    rows = []
    for size in (1, 2, 7, 129280):
        good = dyadic_row(rng, size)
        rows.append(good)
        for damage in (
            lambda r: r.__setitem__(0, r[0] + 1),  # one ulp: non-dyadic (or mass off)
            lambda r: r.__setitem__(-1, 0x33000000),  # 2^-25: non-dyadic, below every count
            lambda r: r.__setitem__(0, 0x00000001),  # a subnormal
            lambda r: r.__setitem__(0, 0x80000000),  # -0.0
            lambda r: r.__setitem__(0, 0x7FC00000),  # NaN
            lambda r: r.__setitem__(0, 0x40000000),  # 2.0: dyadic, above M
            lambda r: r.__setitem__(0, ONE),  # 1.0 alone: mass off unless the row is one entry
            lambda r: r.__setitem__(0, 0x33800000 if r[0] != 0x33800000 else 0),  # one count moved
        ):
            bad = good.copy()
            damage(bad)
            rows.append(bad)
    rows.append(np.array([ONE], dtype=np.uint32))
    rows.append(np.zeros(3, dtype=np.uint32))
    for bits in rows:
        fast, ordered = fast_and_ordered(bits)
        if isinstance(ordered, str):
            assert fast is None, (ordered, bits[:4])
        elif fast is not None:
            assert fast.dtype == np.int64 and np.array_equal(fast, ordered)
    assert fast_and_ordered(rows[0])[0] is not None  # a well-formed row takes the fast path


def test_a_fast_path_without_the_dyadic_round_trip_is_caught():
    class Truncating(Validator):
        def well_formed_counts(self, values):
            if int(values.max()) > ONE:
                return None
            counts = scaled_f32(values).astype(np.int32).astype(np.int64)
            return counts if int(counts.sum()) == layout.M else None

    bits = np.array([ONE - 1, 0x33C00000], dtype=np.uint32)  # 1 - 2^-24 and 1.5 * 2^-24: counts M - 1 and 1.5
    truncated = scaled_f32(bits).astype(np.int64)
    assert truncated.sum() == layout.M  # truncation hides the fraction
    assert Truncating().well_formed_counts(bits) is not None
    assert fast_and_ordered(bits) == (None, "NON_DYADIC_VALUE")
