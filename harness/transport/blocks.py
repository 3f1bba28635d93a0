"""Blocks of accumulated cases on the shim protocol: NumPy arrays as typed blobs and back.

The ``run_block`` request (docs/shim-protocol.md, "run_block") carries a block of
accumulated cases (docs/accumulated.md, "Blocks") as one typed blob per field, and its
reply the cases' records as one ``u32`` blob. In the binary form each blob is one raw
section: the arrays' bytes are written once into the pipe and read once, with no
object per case on either side; with the block window (docs/shim-protocol.md, "Block
window"; :mod:`qconform.harness.transport.window`) each blob names a range of a shared file
instead, and only the request's and the reply's lines cross the pipe.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qconform.harness.adapter import blob_bytes
from qconform.harness.transport.window import WindowError, window_range

#: NumPy dtype (little-endian) of each blob dtype (docs/vector-format.md)
NUMPY_DTYPES: dict[str, str] = {"u8": "u1", "i32": "<i4", "u32": "<u4", "f32": "<f4", "u64": "<u8", "f64": "<f8"}
BLOB_DTYPES: dict[np.dtype, str] = {np.dtype(numpy): blob for blob, numpy in NUMPY_DTYPES.items()}


class BlockError(ValueError):
    """A block field or a records blob that is not a well-formed typed blob."""


def array_blob(array: np.ndarray) -> dict:
    """A C-contiguous little-endian array as a raw typed blob (its bytes are not copied)."""
    array = np.ascontiguousarray(array)
    if array.dtype not in BLOB_DTYPES:
        raise BlockError(f"no blob dtype holds {array.dtype}")
    return {"dtype": BLOB_DTYPES[array.dtype], "shape": list(array.shape), "raw": array}


def blob_array(blob: Any, where: str, window: memoryview | None = None) -> np.ndarray:
    """A typed blob (raw, base64, or naming a range of the attached block ``window``) as an array of
    its dtype and shape, in place (read-only unless the window is writable), or :class:`BlockError`."""
    if not isinstance(blob, dict) or blob.get("dtype") not in NUMPY_DTYPES or not isinstance(blob.get("shape"), list):
        raise BlockError(f"{where} is not a typed blob")
    shape = blob["shape"]
    if not all(type(n) is int and n >= 0 for n in shape):
        raise BlockError(f"{where} has shape {shape!r}")
    try:
        if "window" in blob:
            start, stop = window_range(blob["window"], -1 if window is None else window.nbytes, where)
            assert window is not None  # window_range refuses a range with no window
            data: bytes | memoryview = window[start:stop]
        else:
            data = blob_bytes(blob)
    except WindowError as exc:
        raise BlockError(str(exc)) from None
    except (KeyError, ValueError) as exc:
        raise BlockError(f"{where} holds no bytes: {exc}") from None
    dtype = np.dtype(NUMPY_DTYPES[blob["dtype"]])
    if len(data) != dtype.itemsize * int(np.prod(shape, dtype=np.int64)):
        raise BlockError(f"{where} holds {len(data)} bytes, not {blob['dtype']} of shape {shape}")
    return np.frombuffer(data, dtype=dtype).reshape(shape)


def records_bytes(family: str, cases: int) -> int:
    """The bytes of the records of ``cases`` cases of the accumulated ``family`` (``u32`` words,
    docs/accumulated.md "Records"): the answer range a block window sets aside; 0 for a family
    that is not accumulated (its records then come as a section)."""
    from qconform.generators.accumulated import FAMILIES

    family_spec = FAMILIES.get(family)
    return 0 if family_spec is None else 4 * family_spec.record_words * cases


def block_blobs(block: dict[str, np.ndarray]) -> dict[str, dict]:
    return {name: array_blob(array) for name, array in block.items()}


def block_arrays(blobs: Any, window: memoryview | None = None) -> dict[str, np.ndarray]:
    """The arrays of a ``run_block`` request's ``block`` object, each with the same case count
    (``window``: the child's read-only view of the block window, where the request names one)."""
    if not isinstance(blobs, dict) or not blobs:
        raise BlockError("run_block needs a block object of typed blobs")
    arrays = {str(name): blob_array(blob, f"block field {name!r}", window) for name, blob in blobs.items()}
    counts = {array.shape[0] if array.ndim else -1 for array in arrays.values()}
    if len(counts) != 1 or -1 in counts:
        raise BlockError("the block's fields do not hold the same number of cases")
    return arrays
