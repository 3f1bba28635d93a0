"""The toy models the endpoints serve: the worker's draft and the verifier's target.

The draft model is what the worker leader samples from: base logits ``[K, V]``
(one row per draft position, ``-inf`` masks allowed), low-rank Markov factors
``left [V, r]`` and ``right [r, V]`` (the bias of the previous token), and the
token ``x_0`` that conditions row 1 before anything was committed. The target
model is the verifier's p: FP32 weight rows ``[K + 1, V]``, row i normalized
exactly (``p_i = w / sum(w)``). Both are stationary across rounds; the Markov
bias makes every row depend on the sampled prefix (R01).

A harness loads a model through the control protocol with the blobs of the
``proposal_chain`` vector format (docs/formats/proposal_chain.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .blobs import array, blob

DEPTH = 5


def f32_blob(tensor: torch.Tensor) -> dict:
    return blob("f32", tensor.detach().to("cpu", torch.float32).numpy())


def blob_f32(obj: dict) -> torch.Tensor:
    return torch.from_numpy(array(obj, "f32").astype(np.float32))


@dataclass
class DraftModel:
    """The worker's draft: base logits, Markov factors and the initial previous token."""

    base_logits: torch.Tensor  # float32 [K, V]
    left: torch.Tensor  # float32 [V, r]
    right: torch.Tensor  # float32 [r, V]
    last_token: int = 0

    @property
    def vocab(self) -> int:
        return self.base_logits.shape[1]

    @classmethod
    def random(cls, vocab: int, seed: int = 1, rank: int = 2, depth: int = DEPTH, scale: float = 2.0) -> "DraftModel":
        generator = torch.Generator().manual_seed(seed)
        logits = torch.randn((depth, vocab), generator=generator) * scale
        left = torch.randn((vocab, rank), generator=generator) * 0.5
        right = torch.randn((rank, vocab), generator=generator) * 0.5
        return cls(logits, left, right, 0)

    def to_json(self) -> dict:
        return {
            "base_logits": f32_blob(self.base_logits),
            "markov": {"left": f32_blob(self.left), "right": f32_blob(self.right)},
            "last_committed_token": self.last_token,
        }

    @classmethod
    def from_json(cls, obj: dict) -> "DraftModel":
        logits = blob_f32(obj["base_logits"])
        left, right = blob_f32(obj["markov"]["left"]), blob_f32(obj["markov"]["right"])
        if logits.dim() != 2 or left.shape[0] != logits.shape[1] or right.shape[1] != logits.shape[1]:
            raise ValueError("base_logits [K, V], left [V, r] and right [r, V] must agree on V")
        return cls(logits, left, right, int(obj.get("last_committed_token", 0)))


@dataclass
class TargetModel:
    """The verifier's target p: nonnegative FP32 weight rows [K + 1, V]."""

    weights: torch.Tensor

    @classmethod
    def random(cls, vocab: int, seed: int = 2, depth: int = DEPTH, scale: float = 2.0) -> "TargetModel":
        generator = torch.Generator().manual_seed(seed)
        logits = torch.randn((depth + 1, vocab), generator=generator) * scale
        return cls(torch.softmax(logits, dim=-1).to(torch.float32))

    @classmethod
    def near(cls, draft: DraftModel, seed: int = 2, noise: float = 0.5) -> "TargetModel":
        """A target close to the draft's base rows (so that drafts are often accepted)."""
        generator = torch.Generator().manual_seed(seed)
        logits = torch.cat([draft.base_logits, draft.base_logits[-1:]])
        logits = logits + torch.randn(logits.shape, generator=generator) * noise
        return cls(torch.softmax(logits, dim=-1).to(torch.float32))
