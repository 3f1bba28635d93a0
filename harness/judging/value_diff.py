"""Exact comparison of an encoded answer with an encoded ``expected`` value.

Values are compared *decoded* (docs/vector-format.md): blobs as their typed
integers (float blobs as bit patterns), rationals as ``Fraction`` (``"2/4"``
equals ``"1/2"``), 32-bit words and 64-bit decimal strings as integers. There is
no float tolerance anywhere: precision is decided by the family comparators from
the margins a case records, never by an epsilon.

The kind of each value is read off the *expected* value. An answer that does not
have that kind (a missing or extra field, a string where a blob belongs, a blob of
another dtype or shape, a NaN) is :class:`Malformed` and becomes ``error``; an
answer of the right kind holding other values yields a :class:`Diff` at the first
divergent field or index, which becomes ``fail`` (or ``precision``).
"""

from __future__ import annotations

import marshal
import re
from typing import Any

import orjson

from qconform.generators.encoding import (
    EncodingError,
    b64_data,
    blob_view,
    decode_f32,
    decode_rational,
    decode_u64,
    decode_word,
    u32_values,
    unpack_view,
)
from qconform.harness.adapter import RAW_BLOB_KEYS
from qconform.harness.transport.arena import arena_bytes
from qconform.harness.verdicts import Diff

_WORD = re.compile(r"0x[0-9a-f]{8}\Z")
_RATIONAL = re.compile(r"-?[0-9]+/[0-9]+\Z")
_U64 = re.compile(r"[0-9]+\Z")
_BLOB_KEYS = {"dtype", "shape", "b64"}

#: exponent-all-ones masks: a float bit pattern with the mask set and a nonzero
#: fraction is a NaN
_NAN = {"f32": (0x7F800000, 0x007FFFFF), "f64": (0x7FF0000000000000, 0x000FFFFFFFFFFFFF)}


class Malformed(ValueError):
    """The answer does not have the structure of ``expected``: the adapter answered garbage."""

    def __init__(self, path: str, detail: str) -> None:
        self.path = path
        self.detail = detail
        super().__init__(f"{path or 'output'}: {detail}")


def is_nan(dtype: str, bits: int) -> bool:
    exponent, fraction = _NAN.get(dtype, (0, 0))
    return bool(exponent) and bits & exponent == exponent and bits & fraction != 0


def may_hold_f32_nan(data: memoryview) -> bool:
    """Whether the little-endian ``f32`` items of ``data`` (flat bytes) may hold a NaN: False only
    when no item's high byte has the exponent's seven bits all set (``0x7f`` or ``0xff``), which
    every NaN's does; one C-level look at every fourth byte, so a caller may skip unpacking the
    items, and must look item by item (:func:`is_nan`) when it returns True."""
    high = data[3::4].tobytes()
    return b"\x7f" in high or b"\xff" in high


#: from this many items on, :func:`u32_total` sums in NumPy (imported then): below it, the Python
#: sum is as quick as NumPy's call
NUMPY_SUM_ITEMS = 1024


def u32_total(view: memoryview) -> int:
    """The exact sum of the little-endian ``u32`` items of ``view`` (flat bytes already checked by
    :func:`~qconform.generators.encoding.blob_view`). A long row (a vocabulary of 129,280 counts:
    about 2 ms summed item by item in Python, the most of judging ``allocation_dense``, issue #24) is
    summed in NumPy's ``uint64``, which cannot overflow below 2^32 items."""
    if view.nbytes < 4 * NUMPY_SUM_ITEMS:
        return sum(u32_values(view))
    import numpy as np  # here: a run whose rows are all short never loads it

    return int(np.frombuffer(view, dtype="<u4").sum(dtype=np.uint64))


def show(dtype: str, value: int) -> str:
    """A decoded blob item for a person: float bit patterns in hex, integers in decimal."""
    if dtype == "f32":
        return f"0x{value:08x}"
    if dtype == "f64":
        return f"0x{value:016x}"
    return str(value)


def index_path(path: str, flat: int, shape: list[int]) -> str:
    """``path[i,j]`` for the flat index ``flat`` of an array of ``shape``."""
    indices = []
    for dim in reversed(shape):
        indices.append(flat % dim if dim else 0)
        flat = flat // dim if dim else 0
    return f"{path}[{','.join(str(i) for i in reversed(indices))}]"


def answer_view(got: Any, path: str) -> tuple[str, memoryview, list[int]]:
    """(dtype, bytes, shape) of an answered blob, in the JSON form or the raw form of a binary
    reply (``{"dtype", "shape", "raw"}``, docs/adapters.md), its byte count checked, or
    :class:`Malformed`."""
    if not isinstance(got, dict) or set(got) not in (_BLOB_KEYS, RAW_BLOB_KEYS):
        raise Malformed(path, f"expected a blob (dtype, shape, b64), got {type(got).__name__}")
    try:
        data = got["raw"] if "raw" in got else b64_data(got)
        return got["dtype"], blob_view(got["dtype"], got["shape"], data), got["shape"]
    except EncodingError as exc:
        raise Malformed(path, str(exc)) from None


def decode_blob_answer(got: Any, path: str) -> tuple[str, list[int], list[int]]:
    """(dtype, values, shape) of an answered blob (:func:`answer_view`, unpacked), or :class:`Malformed`."""
    dtype, data, shape = answer_view(got, path)
    return dtype, unpack_view(dtype, data), shape


def expected_view(blob: Any, dtype: str | None = None) -> tuple[memoryview, list[int]]:
    """(bytes, shape) of a blob of the case (its ``expected`` or ``input``): read in place from the
    shared arena that holds it (harness/transport/arena.py: decoded once, when the run loaded its
    cases), else its base64 decoded; :class:`EncodingError` as :func:`decode_blob` raises it."""
    held = arena_bytes(blob["b64"]) if isinstance(blob, dict) and isinstance(blob.get("b64"), str) else None
    if held is None or set(blob) != _BLOB_KEYS:
        return blob_view(blob["dtype"], blob["shape"], b64_data(blob, dtype), dtype), blob["shape"]
    return blob_view(blob["dtype"], blob["shape"], held, dtype), blob["shape"]


def expected_blob(blob: Any, dtype: str | None = None) -> tuple[list[int], list[int]]:
    """:func:`decode_blob` of a blob of the case, its bytes from :func:`expected_view`."""
    data, shape = expected_view(blob, dtype)
    return unpack_view(blob["dtype"], data), shape


def same_bytes(a: memoryview, b: memoryview) -> bool:
    """Whether two flat byte views hold the same bytes: one ``memcmp`` where either views a whole
    ``bytes`` object (a memoryview compares item by item, 80 times slower)."""
    if a.nbytes != b.nbytes:
        return False
    for whole, other in ((a, b), (b, a)):
        if isinstance(whole.obj, bytes) and len(whole.obj) == whole.nbytes:
            return whole.obj.startswith(other)
    return a.tobytes().startswith(b)


def blob_difference(expected: dict, got: Any, path: str) -> Diff | None:
    dtype, (want_data, want_shape) = expected["dtype"], expected_view(expected)
    got_dtype, have_data, have_shape = answer_view(got, path)
    if got_dtype != dtype:
        raise Malformed(path, f"wrong dtype: expected {dtype}, got {got_dtype}")
    if have_shape != want_shape:
        raise Malformed(path, f"wrong shape: expected {want_shape}, got {have_shape}")
    if same_bytes(have_data, want_data):
        return None  # equal items: neither a difference nor a NaN the expected value lacks
    want, have = unpack_view(dtype, want_data), unpack_view(dtype, have_data)
    for flat, (a, b) in enumerate(zip(want, have)):
        if is_nan(dtype, b) and not is_nan(dtype, a):
            raise Malformed(index_path(path, flat, want_shape), f"NaN {show(dtype, b)}")
        if a != b:
            return Diff(index_path(path, flat, want_shape), show(dtype, a), show(dtype, b))
    return None


def _decode_as(decoder: Any, got: Any, path: str, kind: str) -> Any:
    try:
        return decoder(got)
    except EncodingError as exc:
        raise Malformed(path, f"expected {kind}: {exc}") from None


def string_difference(expected: str, got: Any, path: str) -> Diff | None:
    """Compare by the kind ``expected`` has: word, rational, 64-bit decimal or plain text."""
    if _WORD.match(expected):
        a, b = decode_word(expected), _decode_as(decode_word, got, path, "a 32-bit word")
        return None if a == b else Diff(path, expected, f"0x{b:08x}")
    if _RATIONAL.match(expected):
        a, b = decode_rational(expected), _decode_as(decode_rational, got, path, "a rational")
        return None if a == b else Diff(path, str(a), str(b))
    if _U64.match(expected):
        a, b = decode_u64(expected), _decode_as(decode_u64, got, path, "a 64-bit decimal string")
        return None if a == b else Diff(path, expected, str(b))
    if not isinstance(got, str):
        raise Malformed(path, f"expected a string, got {type(got).__name__}")
    return None if got == expected else Diff(path, repr(expected), repr(got))


def number_difference(expected: int | bool, got: Any, path: str) -> Diff | None:
    kind = bool if isinstance(expected, bool) else int
    if type(got) is not kind:
        raise Malformed(path, f"expected {kind.__name__}, got {type(got).__name__}")
    return None if got == expected else Diff(path, str(expected), str(got))


def mapping_difference(expected: dict, got: Any, path: str) -> Diff | None:
    if not isinstance(got, dict):
        raise Malformed(path, f"expected an object, got {type(got).__name__}")
    missing = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    if missing:
        raise Malformed(path, f"missing field(s) {missing}")
    if extra:
        raise Malformed(path, f"unexpected field(s) {extra}")
    for key in expected:
        diff = walk_difference(expected[key], got[key], f"{path}.{key}" if path else key)
        if diff is not None:
            return diff
    return None


def list_difference(expected: list, got: Any, path: str) -> Diff | None:
    if not isinstance(got, list):
        raise Malformed(path, f"expected a list, got {type(got).__name__}")
    for i, (a, b) in enumerate(zip(expected, got)):
        diff = walk_difference(a, b, f"{path}[{i}]")
        if diff is not None:
            return diff
    if len(got) != len(expected):
        return Diff(f"len({path})", str(len(expected)), str(len(got)))
    return None


#: the version of :mod:`marshal`'s format :func:`same_json` asks for (any would do: it only asks
#: whether every object is of an exact built-in type)
_MARSHAL_VERSION = 2
#: :func:`same_json`'s serialization: keys sorted (an answer may order its fields otherwise)
_CANONICAL = orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_SUBCLASS


def same_json(expected: Any, got: Any) -> bool:
    """Whether ``got`` is ``expected`` value for value and exact type for type, in three C-level
    passes: equal under ``==`` (a tuple is not a list, a NaN is not ``None``, bytes are not a
    string); every object of ``got`` of an exact built-in type (:mod:`marshal` writes them and
    refuses a subclass, an ``IntEnum``, a ``StrEnum``); and the same canonical JSON (keys sorted),
    which tells ``1``, ``True`` and ``1.0`` apart. On the JSON values an ``expected`` holds (no
    float: floats are bit patterns), :func:`walk_difference` then finds no difference and nothing
    malformed (an equal string decodes as the expected one does), so :func:`first_difference`
    need not walk. False whenever a pass cannot say (an integer beyond 64 bits, an object whose
    ``==`` does not answer a bool): the walk decides."""
    try:
        if got != expected:
            return False
        marshal.dumps(got, _MARSHAL_VERSION)
        return orjson.dumps(got, option=_CANONICAL) == orjson.dumps(expected, option=_CANONICAL)
    except (ValueError, TypeError):  # marshal's refusal; orjson's (orjson.JSONEncodeError is a TypeError)
        return False


def first_difference(expected: Any, got: Any, path: str = "") -> Diff | None:
    """The first place where ``got`` departs from ``expected`` (None if equal).

    Raises :class:`Malformed` when ``got`` does not have the structure of ``expected``. An object
    or list answered exactly as expected (:func:`same_json`, the common case) is not walked.
    """
    if type(expected) in _CONTAINERS and same_json(expected, got):
        return None
    return walk_difference(expected, got, path)


_CONTAINERS = (dict, list)


def walk_difference(expected: Any, got: Any, path: str = "") -> Diff | None:
    """:func:`first_difference` by walking both values, item by item."""
    if isinstance(expected, dict):
        # the keys are looked up, not gathered into a set: this runs for every object of every answer
        size = len(expected)
        if size == 3 and "b64" in expected and "dtype" in expected and "shape" in expected:
            return blob_difference(expected, got, path)
        if size == 1 and "f32" in expected:
            bits = _decode_as(decode_f32, got, path, "a scalar f32")
            if is_nan("f32", bits) and not is_nan("f32", decode_f32(expected)):
                raise Malformed(path, f"NaN 0x{bits:08x}")
            return None if bits == decode_f32(expected) else Diff(path, expected["f32"], f"0x{bits:08x}")
        return mapping_difference(expected, got, path)
    if isinstance(expected, list):
        return list_difference(expected, got, path)
    if isinstance(expected, str):
        return string_difference(expected, got, path)
    if isinstance(expected, (bool, int)):
        return number_difference(expected, got, path)
    if expected is None:
        return None if got is None else Diff(path, "null", repr(got))
    raise TypeError(f"{path}: expected value of unsupported JSON type {type(expected).__name__}")
