"""Philox4x32-10 (Random123) and the qconform RNG ABI, as batched torch integer ops.

Every 32-bit word lives in an ``int64`` tensor holding a value in ``[0, 2^32)``.
The 32x32 -> 64-bit product of ``mulhilo`` is never formed as one int64 (it can
reach 2^64); it is split at 16 bits so every intermediate stays below 2^49.
Works on any device; all functions are vectorized over leading dimensions.

Keying (docs/rng-abi.md): key = (seed & 0xffffffff, seed >> 32); counter =
(position, round, generation, domain << 24 | draw_counter), each mod 2^32.
"""

from __future__ import annotations

import hashlib
from typing import Sequence

import torch

from .errors import CandidateError, refuse_where

MASK32 = 0xFFFFFFFF
PHILOX_M0 = 0xD2511F53
PHILOX_M1 = 0xCD9E8D57
PHILOX_W0 = 0x9E3779B9
PHILOX_W1 = 0xBB67AE85
ROUNDS = 10

#: RNG domains (docs/rng-abi.md); disjoint by construction of counter word 3.
PROPOSAL = 0x01
ACCEPT = 0x02
CORRECTION = 0x03


def mulhilo32(a: int, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(hi, lo) 32-bit halves of the 64-bit product of the constant ``a`` and words ``b``."""
    a_lo = a & 0xFFFF
    a_hi = a >> 16
    low_part = b * a_lo  # < 2^48
    high_part = b * a_hi  # < 2^48, weight 2^16
    mid = low_part + ((high_part & 0xFFFF) << 16)  # < 2^49
    lo = mid & MASK32
    hi = (high_part >> 16) + (mid >> 32)
    return hi & MASK32, lo


def philox4x32_10(counter: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """Random123 ``philox4x32_R(10, ctr, key)``: counter ``[..., 4]``, key ``[..., 2]`` -> ``[..., 4]``.

    Inputs are int64 tensors of 32-bit words; they broadcast against each other.
    """
    c0, c1, c2, c3 = (counter[..., i].to(torch.int64) & MASK32 for i in range(4))
    k0 = key[..., 0].to(torch.int64) & MASK32
    k1 = key[..., 1].to(torch.int64) & MASK32
    for r in range(ROUNDS):
        if r > 0:
            k0 = (k0 + PHILOX_W0) & MASK32
            k1 = (k1 + PHILOX_W1) & MASK32
        hi0, lo0 = mulhilo32(PHILOX_M0, c0)
        hi1, lo1 = mulhilo32(PHILOX_M1, c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return torch.stack((c0, c1, c2, c3), dim=-1)


def unseeded_request_seed(request_id: str) -> int:
    """The seed of a request that carries none (docs/rng-abi.md, *Request seeds*): the
    first 8 bytes, little-endian, of SHA-256 of the tag ``qconform-unseeded-seed-v1\\0``
    followed by the UTF-8 request ID."""
    digest = hashlib.sha256(b"qconform-unseeded-seed-v1\x00" + request_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "little")


def request_seed(request: dict) -> int:
    """A request object's seed: its ``seed``, or the unseeded seed of its ``request_id``."""
    return int(request["seed"]) if "seed" in request else unseeded_request_seed(request["request_id"])


def seed_keys(seeds: Sequence[int], device: torch.device | str = "cpu") -> torch.Tensor:
    """Key words ``[B, 2]`` (int64) of 64-bit request seeds: (low 32 bits, high 32 bits)."""
    rows = []
    for seed in seeds:
        seed = int(seed)
        if not 0 <= seed < 1 << 64:
            raise CandidateError("BAD_RNG_FIELD", f"seed {seed} is not a 64-bit unsigned integer")
        rows.append((seed & MASK32, seed >> 32))
    return torch.tensor(rows, dtype=torch.int64, device=device).reshape(len(rows), 2)


def per_request(values, batch: int, device: torch.device | str) -> torch.Tensor:
    """A per-request integer field (B ints, an int64 ``[B]`` tensor, or one int for all) as int64 ``[B]``."""
    tensor = torch.as_tensor(values, dtype=torch.int64, device=device).reshape(-1)
    if tensor.numel() not in (1, batch):
        raise CandidateError("BAD_SHAPE", f"{tensor.numel()} values for {batch} requests")
    return tensor.expand(batch)


def counter_words(
    position: torch.Tensor,
    round_id: torch.Tensor,
    generation: torch.Tensor,
    domain: int,
    draw_counter: int | torch.Tensor = 0,
) -> torch.Tensor:
    """Counter ``[..., 4]`` = (position, round, generation, domain << 24 | draw_counter) mod 2^32.

    ``position``, ``round_id`` and ``generation`` are int64 tensors that broadcast.
    """
    if not 0 <= domain < 1 << 8:
        raise CandidateError("BAD_RNG_FIELD", f"domain {domain} is not below 2^8")
    draw_counter = torch.as_tensor(draw_counter, dtype=torch.int64, device=position.device)
    refuse_where((draw_counter < 0) | (draw_counter >= 1 << 24), "BAD_RNG_FIELD", "draw counter")
    position, round_id, generation, draw_counter = torch.broadcast_tensors(
        position.to(torch.int64), round_id.to(torch.int64), generation.to(torch.int64), draw_counter
    )
    word3 = (domain << 24) | draw_counter
    return torch.stack((position & MASK32, round_id & MASK32, generation & MASK32, word3), dim=-1)


def draw_word0(
    key: torch.Tensor,
    position: torch.Tensor,
    round_id: torch.Tensor,
    generation: torch.Tensor,
    domain: int,
    draw_counter: int | torch.Tensor = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(counter words ``[..., 4]``, output word 0 ``[...]``) of the draws at the given keys.

    ``key`` is ``[B, 2]``; the other tensors are ``[B]`` or ``[B, K]`` (key broadcasts
    over the trailing depth dimension).
    """
    counter = counter_words(position, round_id, generation, domain, draw_counter)
    while key.dim() < counter.dim():
        key = key.unsqueeze(-2)
    return counter, philox4x32_10(counter, key)[..., 0]


def u24_of(word0: torch.Tensor) -> torch.Tensor:
    """The 24-bit proposal draw: the top 24 bits of output word 0."""
    return word0 >> 8


def u32_of(word0: torch.Tensor) -> torch.Tensor:
    """The 32-bit acceptance / correction draw: output word 0 itself."""
    return word0
