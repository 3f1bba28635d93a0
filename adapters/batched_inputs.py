"""Decoding many same-shape case inputs at once, for the adapters' vectorised ``run_batch`` paths.

Shared by :mod:`qconform.adapters.torch_batched` and :mod:`qconform.adapters.triton_batched`:
the input codec of docs/vector-format.md (blobs, words) and, per family, the shape key
that groups the inputs one batched call can take (None: answered one case at a time).
It holds no kernel; like the candidates, it never imports the spec or the generators.
"""

from __future__ import annotations

import base64
from typing import Hashable, Sequence

import numpy as np

M = 1 << 24
MASK32 = 0xFFFFFFFF
DOMAIN_NAMES = ("PROPOSAL", "ACCEPT", "CORRECTION")


def blobs(objs: Sequence[dict], dtype: str, np_dtype: str) -> np.ndarray:
    """The values of many blobs of one dtype, concatenated (checked by the caller's shapes)."""
    if any(obj["dtype"] != dtype for obj in objs):
        raise ValueError(f"a blob is not {dtype}")
    return np.frombuffer(b"".join(base64.b64decode(obj["b64"]) for obj in objs), dtype=np_dtype)


def encode_u32(values: np.ndarray) -> dict:
    data = np.ascontiguousarray(values, dtype="<u4").tobytes()
    return {"dtype": "u32", "shape": [len(values)], "b64": base64.b64encode(data).decode("ascii")}


def word(value: int) -> str:
    return f"0x{value & MASK32:08x}"


def legal_dense(counts: np.ndarray) -> bool:
    """Dense dyadic24 rows ``[..., V]`` with every count in [0, M] summing to M."""
    return bool(((counts >= 0) & (counts <= M)).all() and (counts.sum(axis=-1) == M).all())


# --- the shape keys ------------------------------------------------------------------------


def rng_key(inp: dict) -> Hashable | None:
    simple = "counter" not in inp and "depth" not in inp and inp.get("domain") in DOMAIN_NAMES
    return inp["domain"] if simple else None


def categorical_key(inp: dict) -> Hashable | None:
    row = inp["row"]
    return (inp["vocab"], len(inp["draws"])) if row["representation"] == "dense" and inp["draws"] else None


def allocation_key(inp: dict) -> Hashable | None:
    w = inp.get("weights")
    return ("f32", w["shape"][0]) if w is not None and w["dtype"] == "f32" and w["shape"][0] > 0 else None


def verification_key(inp: dict) -> Hashable | None:
    if len(inp["requests"]) != 1:
        return None
    r = inp["requests"][0]
    if "stop_tokens" in r or "budget" in r or "weights" not in r["p_rows"]:
        return None
    if any(row["representation"] != "dense" for row in r["q_rows"]):
        return None
    return inp["vocab"], len(r["draft_tokens"])
