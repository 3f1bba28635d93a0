"""The torch adapter's own codec (docs/vector-format.md): typed blobs to tensors and back, and the
answer objects its one-case and batched paths share.

It reads a blob in either form the harness hands over (``b64``, or ``raw`` bytes:
:attr:`qconform.harness.adapter.Adapter.raw_blobs`, which the torch adapter declares) and
answers blobs in the raw form, which the host moves to a binary payload's sections as they
are. Like the candidate, it never imports the spec or the generators.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from qconform.adapters.torch_candidate import philox
from qconform.adapters.torch_candidate.verification import VerifiedRound
from qconform.harness.adapter import blob_bytes

DOMAINS = {"PROPOSAL": philox.PROPOSAL, "ACCEPT": philox.ACCEPT, "CORRECTION": philox.CORRECTION}
DOMAIN_NAMES = {code: name for name, code in DOMAINS.items()}
TORCH_DTYPES = {
    "f32": torch.float32,
    "f64": torch.float64,
    "i32": torch.int32,
    "u32": torch.int64,
    "u64": torch.int64,
    "u8": torch.uint8,
}


def blob_tensor(blob: dict, device: str | torch.device) -> torch.Tensor:
    """A typed blob as a tensor: floats keep their dtype, u32 widens to int64."""
    data = bytearray(blob_bytes(blob))
    dtype = blob["dtype"]
    if dtype == "u32":
        raw = (
            torch.frombuffer(data, dtype=torch.int32).to(torch.int64) & 0xFFFFFFFF
            if data
            else torch.zeros(0, dtype=torch.int64)
        )
    elif data:
        raw = torch.frombuffer(data, dtype=TORCH_DTYPES[dtype]).clone()
    else:
        raw = torch.zeros(0, dtype=TORCH_DTYPES[dtype])
    return raw.reshape(blob["shape"]).to(device)


def encode_ints(dtype: str, values: torch.Tensor) -> dict:
    """32-bit integers (or FP32 bit patterns) as a little-endian blob of ``dtype``, raw."""
    flat = values.detach().to("cpu", torch.int64).reshape(-1)
    data = flat.to(torch.int32).numpy().astype("<i4").tobytes()
    return {"dtype": dtype, "shape": list(values.shape), "raw": data}


def word(value: int) -> str:
    return f"0x{value & 0xFFFFFFFF:08x}"


def draw_answer(key: Sequence[int], counter: Sequence[int], output: Sequence[int]) -> dict:
    """The ``rng_abi`` answer of one draw: its key, counter and output words, and its u24 and u32."""
    return {
        "key": [word(w) for w in key],
        "counter": [word(w) for w in counter],
        "output": [word(w) for w in output],
        "u24": output[0] >> 8,
        "u32": output[0],
    }


def request_answers(result: VerifiedRound) -> list[dict]:
    """The ``verification_round`` answer of each request of one :func:`verification.verify_round` call."""
    return [
        {
            "accepted": out.accepted,
            "emitted": out.emitted,
            "draws": [
                {
                    "domain": DOMAIN_NAMES[d.domain],
                    "position": d.position,
                    "draw_counter": d.draw_counter,
                    "u32": d.u32,
                    "decision": d.decision,
                    "token": d.token,
                }
                for d in out.draws
            ],
        }
        for out in result.outcomes()
    ]
