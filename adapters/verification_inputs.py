"""The refusal of a ``verification_round`` input, in the order docs/formats/verification_round.md decides.

Shared by the torch, Triton and TP-emulator adapters, which check a batch with it before any kernel
runs, so their kernels (which reduce each refusal class over the whole batch at once) see only
legal batches. Written from the document's "Refusal precedence" table alone: the batch's shape,
then each request in batch order, the first refused request deciding by its earliest failing row.
Like the candidates, it never imports the spec or the generators.
"""

from __future__ import annotations

import struct
from fractions import Fraction
from typing import Sequence

from qconform.harness.adapter import blob_bytes

M = 1 << 24
MAX_REQUESTS = 4
MAX_DEPTH = 8
F32_MAGNITUDE = 0x7FFFFFFF
F32_INF = 0x7F800000


def words(blob: dict, signed: bool = False) -> list[int]:
    data = blob_bytes(blob)
    return list(struct.unpack(f"<{len(data) // 4}{'i' if signed else 'I'}", data))


def q_row_refusal(vocab: int, rows: Sequence[dict]) -> str | None:
    """The q-row classes over every row of a request: shape, ID range, ID order, zero count, sum."""
    raw = [(words(r["ids"], True) if r["representation"] == "sparse" else None, words(r["counts"])) for r in rows]
    for ids, counts in raw:
        if (ids is None and len(counts) != vocab) or (ids is not None and len(ids) != len(counts)):
            return "BAD_SHAPE"
    sparse = [(ids, counts) for ids, counts in raw if ids is not None]
    if any(not 0 <= t < vocab for ids, _ in sparse for t in ids):
        return "TOKEN_OUT_OF_RANGE"
    if any(b <= a for ids, _ in sparse for a, b in zip(ids, ids[1:])):
        return "BAD_SPARSE_SUPPORT"
    if any(0 in counts for _, counts in sparse):
        return "BAD_SPARSE_SUPPORT"
    if any(sum(counts) != M for _, counts in raw):
        return "WRONG_TOTAL_MASS"
    return None


def target_rows(p_rows: dict) -> tuple[list[int], list[bool]]:
    """(each target row's length, whether each row is a distribution)."""
    if "probabilities" in p_rows:
        rows = [[Fraction(v) for v in row] for row in p_rows["probabilities"]]
        return [len(r) for r in rows], [all(v >= 0 for v in r) and sum(r) == 1 for r in rows]
    n_rows, width = p_rows["weights"]["shape"]
    flat = words(p_rows["weights"])
    rows = [flat[i * width : (i + 1) * width] for i in range(n_rows)]
    good = [
        all((b & F32_MAGNITUDE) < F32_INF and not (b >> 31 and b & F32_MAGNITUDE) for b in r)
        and any(b & F32_MAGNITUDE for b in r)
        for r in rows
    ]
    return [width] * n_rows, good


def count_at(row: dict, token: int) -> int:
    counts = words(row["counts"])
    if row["representation"] == "dense":
        return counts[token]
    ids = words(row["ids"], True)
    return counts[ids.index(token)] if token in ids else 0


def request_refusal(request: dict, vocab: int) -> str | None:
    """Rows 4-17 of the table for one request."""
    if ("seed" in request) == ("request_id" in request):
        return "BAD_REQUEST_ID"
    depth = len(request["draft_tokens"])
    p_rows = request["p_rows"]
    p_count = len(p_rows["probabilities"]) if "probabilities" in p_rows else p_rows["weights"]["shape"][0]
    if len(request["q_rows"]) != depth or p_count != depth + 1:
        return "BAD_SHAPE"
    code = q_row_refusal(vocab, request["q_rows"])
    if code:
        return code
    lengths, good = target_rows(p_rows)
    if any(n != vocab for n in lengths):
        return "BAD_SHAPE"
    if not all(good):
        return "BAD_TARGET_ROW"
    if any(not 0 <= t < vocab for t in request["draft_tokens"]):
        return "TOKEN_OUT_OF_RANGE"
    if any(count_at(row, t) == 0 for row, t in zip(request["q_rows"], request["draft_tokens"])):
        return "ZERO_Q_AT_TOKEN"
    if any(not 0 <= t < vocab for t in request.get("stop_tokens", ())):
        return "TOKEN_OUT_OF_RANGE"
    if request.get("budget", 1) < 1:
        return "BAD_SHAPE"
    return None


def verification_refusal(inp: dict) -> str | None:
    """The code a ``verification_round`` input is refused with, or None for a legal batch."""
    requests = inp["requests"]
    depths = {len(r["draft_tokens"]) for r in requests}
    if not 1 <= len(requests) <= MAX_REQUESTS or len(depths) != 1 or not 1 <= depths.pop() <= MAX_DEPTH:
        return "BAD_SHAPE"
    for request in requests:
        code = request_refusal(request, inp["vocab"])
        if code:
            return code
    return None
