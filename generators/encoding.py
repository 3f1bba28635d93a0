"""Exact value encodings of the vector corpus (docs/vector-format.md).

Every float is carried as its bit pattern, every array as a little-endian typed
blob, every rational as ``"num/den"`` and every 64-bit integer as a decimal string.
Decoders raise :class:`EncodingError` with a message naming what is wrong.
"""

from __future__ import annotations

import base64
import json
import struct
import sys
from fractions import Fraction
from typing import Any, Sequence

#: blob dtype -> (struct code, item size)
DTYPES: dict[str, tuple[str, int]] = {
    "u8": ("B", 1),
    "i32": ("i", 4),
    "u32": ("I", 4),
    "u64": ("Q", 8),
    "f32": ("I", 4),  # carried as raw bit patterns: no float ever materializes
    "f64": ("Q", 8),
}


class EncodingError(ValueError):
    """A value in a vector file does not follow docs/vector-format.md."""


def canonical_json(obj: Any) -> str:
    """The canonical JSON text used for hashing (sorted keys, no spaces, ASCII)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _shape_size(shape: Sequence[int]) -> int:
    size = 1
    for dim in shape:
        size *= dim
    return size


def encode_blob(dtype: str, values: Sequence[int], shape: Sequence[int] | None = None) -> dict:
    """Pack integers (or float *bit patterns* for f32/f64) as a typed blob."""
    if dtype not in DTYPES:
        raise EncodingError(f"unknown blob dtype {dtype!r}")
    code, _ = DTYPES[dtype]
    shape = [len(values)] if shape is None else list(shape)
    if _shape_size(shape) != len(values):
        raise EncodingError(f"blob shape {shape} does not hold {len(values)} values")
    data = struct.pack(f"<{len(values)}{code}", *values)
    return {"dtype": dtype, "shape": shape, "b64": base64.b64encode(data).decode("ascii")}


def decode_blob(blob: Any, dtype: str | None = None) -> tuple[list[int], list[int]]:
    """Unpack a typed blob into (flat values, shape). f32/f64 yield bit patterns."""
    data = b64_data(blob, dtype)  # first: it checks that ``blob`` is a blob at all
    return decode_blob_data(blob["dtype"], blob["shape"], data, dtype), blob["shape"]


def b64_data(blob: Any, dtype: str | None = None) -> bytes:
    """The bytes of a typed blob in the JSON form (keys and dtype checked, base64 decoded; the
    byte count is :func:`blob_view`'s to check)."""
    if not isinstance(blob, dict) or set(blob) != {"dtype", "shape", "b64"}:
        raise EncodingError("a blob must be an object with exactly dtype, shape and b64")
    _check_dtype(blob["dtype"], dtype)
    try:
        return base64.b64decode(blob["b64"], validate=True)
    except (ValueError, TypeError) as exc:
        raise EncodingError(f"blob b64 is not valid base64: {exc}") from None


def _check_dtype(blob_dtype: Any, dtype: str | None) -> None:
    if blob_dtype not in DTYPES:
        raise EncodingError(f"unknown blob dtype {blob_dtype!r}")
    if dtype is not None and blob_dtype != dtype:
        raise EncodingError(f"blob has dtype {blob_dtype!r}, expected {dtype!r}")


def decode_blob_data(blob_dtype: Any, shape: Any, data: Any, dtype: str | None = None) -> list[int]:
    """The flat values of a blob of ``blob_dtype`` and ``shape`` whose little-endian bytes are
    ``data`` (any contiguous buffer: decoded base64, or a binary payload's raw section)."""
    return unpack_view(blob_dtype, blob_view(blob_dtype, shape, data, dtype))


def unpack_view(blob_dtype: str, view: memoryview) -> list[int]:
    """The flat values of a blob's bytes already checked by :func:`blob_view`."""
    code, size = DTYPES[blob_dtype]
    return list(struct.unpack(f"<{view.nbytes // size}{code}", view))


#: whether this machine's native ``I`` is the blobs' ``u32``: 4 bytes, little-endian
NATIVE_U32 = sys.byteorder == "little" and struct.calcsize("I") == 4


def u32_values(view: memoryview) -> Sequence[int]:
    """The values of a ``u32`` blob's bytes already checked by :func:`blob_view`, as a sequence:
    a view of the bytes as they are where the machine's ``I`` is the blobs' ``u32`` (iterated,
    summed and indexed without a list of Python ints first), else unpacked."""
    return view.cast("I") if NATIVE_U32 else unpack_view("u32", view)


def blob_view(blob_dtype: Any, shape: Any, data: Any, dtype: str | None = None) -> memoryview:
    """``data`` as flat bytes, checked to be exactly a blob of ``blob_dtype`` and ``shape``
    (:func:`decode_blob_data` without unpacking the values)."""
    _check_dtype(blob_dtype, dtype)
    size = DTYPES[blob_dtype][1]
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise EncodingError(f"blob shape {shape!r} is not a list of nonnegative integers")
    try:
        data = memoryview(data).cast("B")
    except TypeError:
        raise EncodingError(f"blob bytes are a {type(data).__name__}, not contiguous bytes") from None
    count = _shape_size(shape)
    if data.nbytes != count * size:
        raise EncodingError(f"blob holds {data.nbytes} bytes, shape {shape} of {blob_dtype} needs {count * size}")
    return data


def encode_rational(x: Fraction | int) -> str:
    x = Fraction(x)
    return f"{x.numerator}/{x.denominator}"


def decode_rational(text: Any) -> Fraction:
    if not isinstance(text, str) or text.count("/") != 1:
        raise EncodingError(f"rational {text!r} is not a 'num/den' string")
    num, den = text.split("/")
    try:
        n, d = int(num), int(den)
    except ValueError:
        raise EncodingError(f"rational {text!r} has a non-integer part") from None
    if d <= 0:
        raise EncodingError(f"rational {text!r} has a nonpositive denominator")
    return Fraction(n, d)


def encode_word(word: int) -> str:
    if not 0 <= word < 1 << 32:
        raise EncodingError(f"{word} is not a 32-bit word")
    return f"0x{word:08x}"


def decode_word(text: Any) -> int:
    if not isinstance(text, str) or not text.startswith("0x") or len(text) != 10:
        raise EncodingError(f"32-bit word {text!r} is not an 0x-prefixed 8-digit hex string")
    try:
        return int(text, 16)
    except ValueError:
        raise EncodingError(f"32-bit word {text!r} is not hexadecimal") from None


def encode_u64(value: int) -> str:
    if not 0 <= value < 1 << 64:
        raise EncodingError(f"{value} is not a 64-bit unsigned integer")
    return str(value)


def decode_decimal(text: Any) -> int:
    """A ``u64`` field's nonnegative integer, range not checked: the pattern admits 20 digits, so
    2^64 and above can be written, and ``rng_abi`` lets the spec refuse such a seed (BAD_RNG_FIELD)."""
    if not isinstance(text, str) or not text.isdigit():
        raise EncodingError(f"64-bit integer {text!r} is not a decimal string")
    return int(text)


def decode_u64(text: Any) -> int:
    value = decode_decimal(text)
    if value >= 1 << 64:
        raise EncodingError(f"64-bit integer {text!r} is out of range")
    return value


def encode_f32(bits: int) -> dict:
    return {"f32": encode_word(bits)}


def decode_f32(obj: Any) -> int:
    """Return the FP32 bit pattern of a scalar ``{"f32": "0x........"}``."""
    if not isinstance(obj, dict) or set(obj) != {"f32"}:
        raise EncodingError(f"scalar float {obj!r} is not an object {{'f32': '0x........'}}")
    return decode_word(obj["f32"])


def f32_bits(value: float) -> int:
    """Bit pattern of a Python float rounded to FP32 (generator convenience only)."""
    return struct.unpack("<I", struct.pack("<f", value))[0]


def f64_bits(value: float) -> int:
    """Bit pattern of a Python float (generator convenience only)."""
    return struct.unpack("<Q", struct.pack("<d", value))[0]
