#!/usr/bin/env python3
"""A complete qconform engine in NumPy through the SDK (docs/sdk.md): categorical sampling (R08)
and the RNG ABI's draw keys. Run it against the corpus with its absolute interpreter path:

    qconform run --adapter "shim:$(command -v python) examples/sdk/numpy_engine.py"
"""

import numpy as np

from qconform.sdk import EngineAdapter, Refusal, Unsupported, draw_key, serve, u64

M = 1 << 24


class NumpyEngine(EngineAdapter):
    name = "numpy-engine"
    error_map = {IndexError: "TOKEN_OUT_OF_RANGE"}  # noqa: RUF012 - read only

    def categorical_sampling(self, case: dict) -> dict:
        row, vocab = case["row"], case["vocab"]
        counts = row["counts"].astype(np.int64)
        ids = row["ids"] if row["representation"] == "sparse" else np.arange(vocab)
        if len(ids) != len(counts) or (row["representation"] == "dense" and len(counts) != vocab):
            raise Refusal("BAD_SHAPE")
        if row["representation"] == "sparse":
            if np.any(ids < 0) or np.any(ids >= vocab):
                raise IndexError("a sparse id is outside the vocabulary")  # mapped by error_map
            if np.any(np.diff(ids) <= 0) or np.any(counts == 0):
                raise Refusal("BAD_SPARSE_SUPPORT")
        if counts.sum() != M:
            raise Refusal("WRONG_TOTAL_MASS")
        # the first token whose cumulative count is strictly greater than the draw
        return {"tokens": ids[np.searchsorted(np.cumsum(counts), case["draws"], side="right")]}

    def rng_abi(self, case: dict) -> dict:
        if "position" not in case:
            raise Unsupported("only single draws (group draw_keys)")
        key = draw_key(
            u64(case["seed"]), case["generation"], case["round"], case["position"], case["domain"], case["draw_counter"]
        )
        return {
            "key": [f"0x{w:08x}" for w in key.key],
            "counter": [f"0x{w:08x}" for w in key.counter],
            "output": [f"0x{w:08x}" for w in key.output],
            "u24": key.u24,
            "u32": key.u32,
        }


if __name__ == "__main__":
    raise SystemExit(serve(NumpyEngine()))
