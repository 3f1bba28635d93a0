#!/usr/bin/env python3
"""An example qconform shim in plain Python: standard library only, no qconform import.

It speaks the shim protocol (docs/shim-protocol.md) on stdin/stdout and implements
two families from their documents alone: ``rng_abi`` (Philox4x32-10 and the key
layout of docs/rng-abi.md) and ``categorical_sampling`` (the R08 proposal rule over
a dyadic24 q row). Every other family is answered ``unimplemented``. Port it to
the language of your implementation, then run it with::

    qconform ... --adapter 'shim:python examples/shim/python_shim.py'
"""

from __future__ import annotations

import base64
import bisect
import hashlib
import json
import struct
import sys

M = 1 << 24
MASK32 = 0xFFFFFFFF
DOMAINS = {"PROPOSAL": 1, "ACCEPT": 2, "CORRECTION": 3}
FAMILIES = ("rng_abi", "categorical_sampling")


class Refusal(Exception):
    """The input is invalid: answered ``{"error": code}``."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


# --- Philox4x32-10 (Random123) -------------------------------------------------------


def philox4x32(counter: list[int], key: list[int], rounds: int = 10) -> list[int]:
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for index in range(rounds):
        if index:
            k0, k1 = (k0 + 0x9E3779B9) & MASK32, (k1 + 0xBB67AE85) & MASK32
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & MASK32, (p0 >> 32) ^ c3 ^ k1, p0 & MASK32
    return [c0, c1, c2, c3]


def word(text: str) -> int:
    return int(text, 16)


def hex_word(value: int) -> str:
    return f"0x{value:08x}"


def field(value: object, limit: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < limit:
        raise Refusal("BAD_RNG_FIELD")
    return value


def draw(seed: int, generation: int, round_id: int, position: int, domain: int, draw_counter: int) -> dict:
    """Key words, counter words and output words of one draw (docs/rng-abi.md)."""
    key = [seed & MASK32, seed >> 32]
    counter = [position, round_id, generation, domain << 24 | draw_counter]
    return {"key": key, "counter": counter, "output": philox4x32(counter, key)}


def schedule_draws(seed: int, generation: int, round_id: int, positions: list[int], domain: int, width: int) -> list:
    out = []
    for position in positions:
        one = draw(seed, generation, round_id, position, domain, 0)
        value = one["output"][0] >> 8 if width == 24 else one["output"][0]
        out.append({"position": position, "counter": [hex_word(w) for w in one["counter"]], "value": value})
    return out


def rng_abi(case: dict) -> dict:
    if "counter" in case:  # a known-answer line
        words = philox4x32([word(w) for w in case["counter"]], [word(w) for w in case["key"]], case["rounds"])
        return {"output": [hex_word(w) for w in words]}
    if "request_id" in case:  # the seed of an unseeded request (docs/rng-abi.md, Request seeds)
        digest = hashlib.sha256(b"qconform-unseeded-seed-v1\x00" + case["request_id"].encode("utf-8")).digest()
        return {"seed": str(int.from_bytes(digest[:8], "little"))}
    seed = field(int(case["seed"]), 1 << 64)
    generation = field(case["generation"], 1 << 32)
    round_id = field(case["round"], 1 << 32)
    if "anchor" in case:  # every draw of one round
        anchor, depth = field(case["anchor"], 1 << 32), case["depth"]
        at = [(anchor + offset) % (1 << 32) for offset in range(depth + 1)]
        return {
            "proposal": schedule_draws(seed, generation, round_id, at[:depth], DOMAINS["PROPOSAL"], 24),
            "accept": schedule_draws(seed, generation, round_id, at[:depth], DOMAINS["ACCEPT"], 32),
            "correction": schedule_draws(seed, generation, round_id, at, DOMAINS["CORRECTION"], 32),
        }
    position = field(case["position"], 1 << 32)
    draw_counter = field(case["draw_counter"], 1 << 24)
    one = draw(seed, generation, round_id, position, DOMAINS[case["domain"]], draw_counter)
    return {
        "key": [hex_word(w) for w in one["key"]],
        "counter": [hex_word(w) for w in one["counter"]],
        "output": [hex_word(w) for w in one["output"]],
        "u24": one["output"][0] >> 8,
        "u32": one["output"][0],
    }


# --- categorical sampling (R08) ---------------------------------------------------------


def unpack(blob: dict, dtype: str) -> list[int]:
    if blob["dtype"] != dtype:
        raise ValueError(f"blob dtype {blob['dtype']} is not {dtype}")
    data = base64.b64decode(blob["b64"])
    return list(struct.unpack(f"<{len(data) // 4}{'I' if dtype == 'u32' else 'i'}", data))


def q_row(row: dict, vocab: int) -> tuple[list[int], list[int]]:
    """(global ids, counts) of a legal row; refusals per R03, R07, R19."""
    counts = unpack(row["counts"], "u32")
    if row["representation"] == "dense":
        if len(counts) != vocab:
            raise Refusal("BAD_SHAPE")
        ids = list(range(vocab))
    else:
        ids = unpack(row["ids"], "i32")
        if len(ids) != len(counts):
            raise Refusal("BAD_SHAPE")
        # each class over the whole row (docs/formats/categorical_sampling.md, "Refusal precedence")
        if any(not 0 <= token < vocab for token in ids):
            raise Refusal("TOKEN_OUT_OF_RANGE")
        if any(b <= a for a, b in zip(ids, ids[1:])) or 0 in counts:
            raise Refusal("BAD_SPARSE_SUPPORT")
    if sum(counts) != M:
        raise Refusal("WRONG_TOTAL_MASS")
    return ids, counts


def categorical_sampling(case: dict) -> dict:
    ids, counts = q_row(case["row"], case["vocab"])
    cumulative, total = [], 0
    for count in counts:
        total += count
        cumulative.append(total)
    # the first entry whose cumulative count is strictly greater than the draw
    return {"tokens": [ids[bisect.bisect_right(cumulative, u)] for u in case["draws"]]}


SOLVERS = {"rng_abi": rng_abi, "categorical_sampling": categorical_sampling}


# --- the protocol ----------------------------------------------------------------------------


def answer_case(solve, case: dict) -> dict:
    try:
        return {"status": "ok", "output": solve(case)}
    except Refusal as refusal:
        return {"status": "ok", "output": {"error": refusal.code}}
    except Exception as exc:  # report, never die
        return {"status": "error", "message": f"{type(exc).__name__}: {exc}"}


def answer(request: dict) -> dict:
    reply = {"id": request.get("id")}
    op = request.get("op")
    if op == "get_config":
        capabilities = {"families": list(FAMILIES), "injected_draws": True, "devices": ["cpu"]}
        config = {"name": "python-shim", "protocol": 1, "capabilities": capabilities, "precision": {}, "device": "cpu"}
        return {**reply, "status": "ok", "config": config}
    if op == "run":
        solve = SOLVERS.get(request.get("family"))
        if solve is None:
            return {**reply, "status": "unimplemented", "reason": f"family {request.get('family')} is not implemented"}
        return {**reply, "status": "ok", "outputs": [answer_case(solve, case) for case in request["inputs"]]}
    if op == "shutdown":
        return {**reply, "status": "ok"}
    return {**reply, "status": "error", "message": f"unknown op {op!r}"}


def main() -> int:
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        sys.stdout.write(json.dumps(answer(request), separators=(",", ":")) + "\n")
        sys.stdout.flush()
        if request.get("op") == "shutdown":
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
