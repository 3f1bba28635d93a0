"""The shim protocol's JSON codec (shim_protocol.loads/dumps): orjson on the fast path, the
standard ``json`` module wherever orjson refuses or would read a line differently. Every line
must decode to exactly the value (types included) or the error the standard module gives."""

from __future__ import annotations

import dataclasses
import datetime
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qconform.harness.transport import shim_protocol
from qconform.harness.transport.shim_protocol import NonFinite, ProtocolError, decode_line, dumps, loads


def typed(value: Any) -> Any:
    """``value`` with every scalar tagged by its exact type (``1 == 1.0`` and ``0.0 == -0.0`` in Python)."""
    if isinstance(value, dict):
        return ("dict", [(key, typed(item)) for key, item in value.items()])
    if isinstance(value, list):
        return ("list", [typed(item) for item in value])
    return (type(value).__name__, repr(value))


def reference(data: bytes) -> Any:
    """What the protocol read before orjson: the standard module, ``NaN``/``Infinity`` as markers."""
    try:
        return typed(json.loads(data.decode("utf-8"), parse_constant=NonFinite))
    except (ValueError, RecursionError) as exc:
        return type(exc).__name__


def decoded(data: bytes) -> Any:
    try:
        return typed(loads(data))
    except (ValueError, RecursionError) as exc:
        return type(exc).__name__


TRICKY_LINES = [
    b'{"a":1,"b":[1,2.5,-0.0,0,-0,true,false,null],"c":"x"}\n',
    b'{"a":NaN,"b":[Infinity,-Infinity]}',
    b"[18446744073709551615,18446744073709551616,-9223372036854775808,-9223372036854775809]",
    b'{"seed":"18446744073709551616","n": 123456789012345678901234567890}',
    b"[1,\t99999999999999999999]",
    b"99999999999999999999",
    b"-99999999999999999999",
    b"[1e400,-1e400,1.5e-400,1E5,0.1,5e-324,1.7976931348623157e308]",
    b"[0.12345678901234567890123456789,123456789012345678.5]",
    b'{"a":1,"a":2}',
    b'["\\ud800","\\udc00x","\\ud83d\\ude00","\\u00e9\xc3\xa9"]',
    b'"\xed\xa0\x80"',
    b'"\xff"',
    b'{"a":"\x01"}',
    b"\xef\xbb\xbf{}",
    b"\x0c{}",
    b"{} x",
    b"[1,]",
    b"[01]",
    b"",
    b"[" * 100 + b"]" * 100,
    b'{"a":' * 100 + b"1" + b"}" * 100,
    b"[" * 5000 + b"]" * 5000,
]


@pytest.mark.parametrize("line", TRICKY_LINES)
def test_orjson_and_the_standard_module_agree_on_tricky_lines(line):
    assert decoded(line) == reference(line)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(1 << 70), max_value=1 << 70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(json_values, st.booleans())
def test_orjson_and_the_standard_module_agree_on_any_json_value(value, ascii_only):
    line = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    assert decoded(line) == reference(line)
    assert typed(json.loads(dumps(value))) == typed(value)  # and dumps writes the same value back


def test_the_agreement_checks_catch_orjsons_long_integers(monkeypatch):
    """Seeded divergence: without the screen for long number tokens, orjson reads an integer beyond
    64 bits as a float, and the agreement check sees it."""
    line = b'{"n":18446744073709551616}'
    assert decoded(line) == reference(line)
    monkeypatch.setattr(shim_protocol, "_long_number", lambda data: False)
    assert decoded(line) != reference(line)


def test_ordinary_lines_take_orjson(monkeypatch):
    """The standard module is the fallback only: an ordinary line never reaches it."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the standard json module was used")

    monkeypatch.setattr(shim_protocol.json, "loads", refuse)
    monkeypatch.setattr(shim_protocol.json, "dumps", refuse)
    message = {"id": 3, "op": "run", "inputs": [{"p": ["1/2", "0/1"], "seed": "18446744073709551616", "x": 0.5}]}
    assert loads(shim_protocol.encode_message(message)) == message


@dataclasses.dataclass
class Point:
    x: int


@pytest.mark.parametrize(
    "value",
    [
        {"a": [1, 2.5, -0.0, None, True, "null", "x"]},
        {"e": 1e-05, "big": 1e16, "tiny": 5e-324},
        {"n": 1 << 64, "m": -(1 << 63) - 1},
        {"s": "\u00e9\U0001f600", "lone": "\ud800"},
        {1: "int key", None: "none key"},
        {"t": (1, 2)},
        {"nan": float("nan")},
        {"inf": [float("inf")]},
        {"point": Point(1)},
        {"when": datetime.date(2026, 1, 1)},
        {"bytes": b"x"},
    ],
)
def test_dumps_writes_what_the_standard_module_writes_or_refuses_alike(value):
    try:
        want = json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        with pytest.raises(type(exc)):
            dumps(value)
        return
    got = dumps(value)
    assert got.isascii() and typed(json.loads(got)) == typed(json.loads(want))


def test_a_line_nested_too_deep_is_a_protocol_error_not_a_crash():
    with pytest.raises(ProtocolError, match="not JSON"):
        decode_line(b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}\n")
