"""The host writes a batch's output entries in one encoding (host.entries_json, issue #24): the
same bytes and the same sections as entry by entry (host.entry_json), and where an outcome is not
strict JSON, entry by entry from the start, that outcome alone an error entry."""

from __future__ import annotations

import pytest

from qconform.harness.adapter import AdapterError, Unimplemented
from qconform.harness.transport.host import entries_json, entry_json


def blob(data: bytes) -> dict:
    return {"dtype": "u32", "shape": [len(data) // 4], "raw": data}


def outcomes() -> list:
    return [
        {"counts": blob(b"\x01\x00\x00\x00\x02\x00\x00\x00"), "tokens": [1, 2]},
        {"error": "BAD_SHAPE"},
        Unimplemented("not this family"),
        AdapterError("it raised"),
        {"rows": [{"ids": blob(b"\x07\x00\x00\x00"), "counts": blob(b"\x00\x00\x00\x01")}], "u32": 4294967295},
    ]


def one_by_one(batch: list, binary: bool, raw: bool) -> tuple[str, list | None]:
    sections: list | None = [] if binary else None
    return ",".join(entry_json(outcome, sections, raw) for outcome in batch), sections


@pytest.mark.parametrize(("binary", "raw"), [(True, True), (False, True), (False, False)])
@pytest.mark.parametrize(
    ("spoiler", "ok", "errors"),
    [
        (None, 3, 1),
        ({"weights": float("nan")}, 3, 2),
        ({"token": object()}, 3, 2),
        ("not an outcome", 3, 2),
        ({"rows": [blob(b"\x01\x00\x00\x00")], 1: 2}, 4, 1),  # an integer key is written as a string
    ],
)
def test_the_batch_is_written_as_entry_by_entry(binary, raw, spoiler, ok, errors):
    batch = outcomes() if spoiler is None else [*outcomes()[:2], spoiler, *outcomes()[2:]]
    want, want_sections = one_by_one(batch, binary, raw)
    sections: list | None = [] if binary else None
    assert entries_json(batch, sections, raw) == want
    if binary:
        assert sections is not None and want_sections is not None
        assert [bytes(s) for s in sections] == [bytes(s) for s in want_sections]
    if binary or raw:  # (a JSON host of an adapter that answers raw bytes refuses them all)
        assert (want.count('"status":"ok"'), want.count('"status":"error"')) == (ok, errors)


def test_sections_written_before_the_batch_are_kept():
    sections: list = [b"before"]
    entries_json([{"weights": float("nan")}, outcomes()[0]], sections)
    assert sections[0] == b"before" and [bytes(s) for s in sections[1:]] == [bytes(outcomes()[0]["counts"]["raw"])]
