"""Typed blobs of the vector format (docs/vector-format.md): dtype, shape, little-endian bytes in base64."""

from __future__ import annotations

import base64

import numpy as np

DTYPES = {"u8": "u1", "u32": "<u4", "i32": "<i4", "f32": "<f4"}


def blob(dtype: str, values) -> dict:
    """A blob of ``values`` (any array-like) as ``dtype``, keeping its shape."""
    array = np.asarray(values).astype(DTYPES[dtype])
    return {"dtype": dtype, "shape": list(array.shape), "b64": base64.b64encode(array.tobytes()).decode("ascii")}


def array(obj: dict, dtype: str) -> np.ndarray:
    """The array of a blob, refused (ValueError) unless it has ``dtype`` and its bytes fit its shape."""
    if obj.get("dtype") != dtype:
        raise ValueError(f"expected a {dtype} blob, got {obj.get('dtype')!r}")
    return np.frombuffer(base64.b64decode(obj["b64"]), dtype=DTYPES[dtype]).reshape(obj["shape"])
