"""Decoding many same-shape case inputs at once, for the adapters' vectorised ``run_batch`` paths.

Shared by :mod:`qconform.adapters.torch_batched` and :mod:`qconform.adapters.triton_batched`:
the input codec of docs/vector-format.md (blobs, words) and, per family, the shape key
that groups the inputs one batched call can take (None: answered one case at a time).
It holds no kernel; like the candidates, it never imports the spec or the generators.
"""

from __future__ import annotations

import base64
from collections import defaultdict
from typing import Callable, Hashable, Mapping, Sequence

import numpy as np

from qconform.harness.adapter import blob_bytes

M = 1 << 24
MASK32 = 0xFFFFFFFF
DOMAIN_NAMES = ("PROPOSAL", "ACCEPT", "CORRECTION")


def blobs(objs: Sequence[dict], dtype: str, np_dtype: str) -> np.ndarray:
    """The values of many blobs of one dtype, concatenated; each blob's bytes must hold exactly
    its shape (so one malformed blob cannot shift its neighbours' values)."""
    width = np.dtype(np_dtype).itemsize
    parts = []
    for obj in objs:
        data = blob_bytes(obj)
        if obj["dtype"] != dtype or len(data) != width * int(np.prod(obj["shape"], dtype=np.int64)):
            raise ValueError(f"a blob is not {dtype} of its shape")
        parts.append(data)
    return np.frombuffer(b"".join(parts), dtype=np_dtype)


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


def dense_of(row: dict, vocab: int) -> bool:
    """A dense qRow of exactly ``vocab`` u32 counts (by its declared shape)."""
    return row["representation"] == "dense" and row["counts"]["shape"] == [vocab]


def categorical_key(inp: dict) -> Hashable | None:
    vocab, draws = inp["vocab"], inp["draws"]
    if type(vocab) is not int or not isinstance(draws, list) or not draws or not dense_of(inp["row"], vocab):
        return None
    return vocab, len(draws)


def allocation_key(inp: dict) -> Hashable | None:
    w = inp.get("weights")
    if w is None or "logits" in inp or w["dtype"] != "f32" or len(w["shape"]) != 1 or w["shape"][0] < 1:
        return None
    return w["shape"][0]


def verification_key(inp: dict) -> Hashable | None:
    """One request, dense q rows, FP32 target weights, no stop tokens, no budget."""
    vocab, requests = inp["vocab"], inp["requests"]
    if type(vocab) is not int or not isinstance(requests, list) or len(requests) != 1:
        return None
    r = requests[0]
    depth = len(r["draft_tokens"])
    if "stop_tokens" in r or "budget" in r or set(r["p_rows"]) != {"weights"} or len(r["q_rows"]) != depth:
        return None
    if r["p_rows"]["weights"]["shape"] != [depth + 1, vocab] or not all(dense_of(q, vocab) for q in r["q_rows"]):
        return None
    return vocab, depth


#: A family's batched path: (the shape key of one input, None when it has none; the solver of one
#: same-shape group of inputs on a device).
Batched = tuple[Callable[[dict], Hashable | None], Callable[[Sequence[dict], str], list[dict]]]


def run_many(
    batched: Mapping[str, Batched],
    family: str,
    inputs: Sequence[dict],
    device: str,
    refusals: tuple[type[BaseException], ...],
    min_group: int = 2,
) -> list[dict | None]:
    """Answers of the inputs a batched path takes, grouped by shape; None where the caller must
    answer one case at a time (another shape, a group smaller than ``min_group``, or a group
    whose batched call raised one of ``refusals``: each of its cases then gets its own answer)."""
    answers: list[dict | None] = [None] * len(inputs)
    if family not in batched:
        return answers
    shape_of, solve = batched[family]
    groups: dict[Hashable, list[int]] = defaultdict(list)
    for index, inp in enumerate(inputs):
        try:
            key = shape_of(inp)
        except (KeyError, TypeError, IndexError, AttributeError):
            key = None
        if key is not None:
            groups[key].append(index)
    for members in groups.values():
        if len(members) < min_group:
            continue
        try:
            solved = solve([inputs[i] for i in members], device)
        except refusals:
            continue
        for i, answer in zip(members, solved):
            answers[i] = answer
    return answers
