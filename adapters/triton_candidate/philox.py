"""The RNG ABI ``philox4x32-10-qconform-v1`` (docs/rng-abi.md) on Triton's ``tl.philox``.

``tl.philox(seed, c0, c1, c2, c3)`` is Random123's Philox4x32-10 with key word 0 the
low and key word 1 the high 32 bits of the 64-bit ``seed``: exactly the ABI's key.
The counter words are (position mod 2^32, round, generation, domain << 24 |
draw_counter). Kernels take these fields as int64 values below 2^32 and build the
words themselves (:func:`abi_block`), so every kernel that draws (proposal,
acceptance, correction) keys its draws the same way.
"""

from __future__ import annotations

import hashlib

import torch
import triton
import triton.language as tl

from .errors import TritonCandidateError
from .launch import LAUNCH, interpreting

MASK32 = 0xFFFFFFFF
#: Tag of the unseeded-request seed (docs/rng-abi.md, *Request seeds*).
UNSEEDED_TAG = b"qconform-unseeded-seed-v1\x00"


def request_seed(request: dict) -> int:
    """A request's 64-bit seed: ``seed`` as given, else the first 8 bytes (little-endian) of
    SHA-256(tag || UTF-8 request ID) for a request without one."""
    if "seed" in request:
        return int(request["seed"])
    digest = hashlib.sha256(UNSEEDED_TAG + request["request_id"].encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "little")


#: RNG domains (docs/rng-abi.md)
PROPOSAL = 0x01
ACCEPT = 0x02
CORRECTION = 0x03
#: draws per program of the draw kernels (the interpreter pays per operation: thousands at once)
DRAW_BLOCK = 1 << 14 if interpreting() else 128


@triton.jit
def seed_of(key_lo, key_hi):
    """The 64-bit ``tl.philox`` seed whose low/high words are the key words."""
    return (key_hi.to(tl.uint64) << 32) | key_lo.to(tl.uint64)


@triton.jit
def abi_block(key_lo, key_hi, position, round_id, generation, domain, draw_counter):
    """The four Philox output words (uint32) of the draws at the given ABI fields (int64)."""
    c0 = (position & 0xFFFFFFFF).to(tl.uint32)
    c1 = round_id.to(tl.uint32)
    c2 = generation.to(tl.uint32)
    c3 = (draw_counter | (domain << 24)).to(tl.uint32)  # the tensor first: domain may be a constexpr
    return tl.philox(seed_of(key_lo, key_hi), c0, c1, c2, c3)


@triton.jit
def abi_word0(key_lo, key_hi, position, round_id, generation, domain):
    """Output word 0 (as int64) of the first draw (draw counter 0) at each key."""
    w0, _, _, _ = abi_block(key_lo, key_hi, position, round_id, generation, domain, position * 0)
    return w0.to(tl.int64)


@triton.jit(do_not_specialize=["n"])
def philox_kernel(counter_ptr, key_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """Raw Philox4x32-10 blocks: counter ``[n, 4]``, key ``[n, 2]`` -> ``[n, 4]`` (int64 words)."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = i < n
    c0 = tl.load(counter_ptr + i * 4, mask=live, other=0).to(tl.uint32)
    c1 = tl.load(counter_ptr + i * 4 + 1, mask=live, other=0).to(tl.uint32)
    c2 = tl.load(counter_ptr + i * 4 + 2, mask=live, other=0).to(tl.uint32)
    c3 = tl.load(counter_ptr + i * 4 + 3, mask=live, other=0).to(tl.uint32)
    k0 = tl.load(key_ptr + i * 2, mask=live, other=0)
    k1 = tl.load(key_ptr + i * 2 + 1, mask=live, other=0)
    o0, o1, o2, o3 = tl.philox(seed_of(k0, k1), c0, c1, c2, c3)
    tl.store(out_ptr + i * 4, o0.to(tl.int64), mask=live)
    tl.store(out_ptr + i * 4 + 1, o1.to(tl.int64), mask=live)
    tl.store(out_ptr + i * 4 + 2, o2.to(tl.int64), mask=live)
    tl.store(out_ptr + i * 4 + 3, o3.to(tl.int64), mask=live)


@triton.jit(do_not_specialize=["n"])
def abi_draw_kernel(fields_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """Draws at ABI fields ``[n, 7]`` = (key lo, key hi, position, round, generation,
    domain, draw counter) -> ``[n, 8]`` = (counter words c0..c3, output words o0..o3)."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = i < n
    f = fields_ptr + i * 7
    key_lo = tl.load(f, mask=live, other=0)
    key_hi = tl.load(f + 1, mask=live, other=0)
    position = tl.load(f + 2, mask=live, other=0) & 0xFFFFFFFF
    round_id = tl.load(f + 3, mask=live, other=0)
    generation = tl.load(f + 4, mask=live, other=0)
    domain = tl.load(f + 5, mask=live, other=0)
    draw_counter = tl.load(f + 6, mask=live, other=0)
    o0, o1, o2, o3 = abi_block(key_lo, key_hi, position, round_id, generation, domain, draw_counter)
    out = out_ptr + i * 8
    tl.store(out, position, mask=live)
    tl.store(out + 1, round_id, mask=live)
    tl.store(out + 2, generation, mask=live)
    tl.store(out + 3, (domain << 24) | draw_counter, mask=live)
    tl.store(out + 4, o0.to(tl.int64), mask=live)
    tl.store(out + 5, o1.to(tl.int64), mask=live)
    tl.store(out + 6, o2.to(tl.int64), mask=live)
    tl.store(out + 7, o3.to(tl.int64), mask=live)


def philox_blocks(counter: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """Philox4x32-10 of int64 words: counter ``[n, 4]`` and key ``[n, 2]`` -> ``[n, 4]``."""
    n = counter.shape[0]
    out = torch.empty((n, 4), dtype=torch.int64, device=counter.device)
    if n:
        philox_kernel[(triton.cdiv(n, DRAW_BLOCK),)](
            counter.contiguous(),
            key.contiguous(),
            out,
            n,
            BLOCK=DRAW_BLOCK,  # pyright: ignore[reportArgumentType]  # Triton: a plain int or bool fills a tl.constexpr parameter
            **LAUNCH,
        )
    return out


def key_words(seed: int) -> tuple[int, int]:
    """(key word 0, key word 1) of a 64-bit request seed; BAD_RNG_FIELD outside [0, 2^64)."""
    if not 0 <= seed < 1 << 64:
        raise TritonCandidateError("BAD_RNG_FIELD", f"seed {seed} is not a 64-bit unsigned integer")
    return seed & MASK32, seed >> 32


def check_fields(position: int, round_id: int, generation: int, domain: int, draw_counter: int) -> None:
    """Refuse (BAD_RNG_FIELD) a field beyond its width: never truncate (docs/rng-abi.md)."""
    words = {"position": position, "round": round_id, "generation": generation}
    for name, value in words.items():
        if not 0 <= value <= MASK32:
            raise TritonCandidateError("BAD_RNG_FIELD", f"{name} {value} is not a 32-bit word")
    if domain not in (PROPOSAL, ACCEPT, CORRECTION):
        raise TritonCandidateError("BAD_RNG_FIELD", f"domain {domain}")
    if not 0 <= draw_counter < 1 << 24:
        raise TritonCandidateError("BAD_RNG_FIELD", f"draw counter {draw_counter} is not below 2^24")


def abi_draws(rows: list[tuple[int, int, int, int, int, int]], device: torch.device | str) -> torch.Tensor:
    """Draws at ``(seed, position, round, generation, domain, draw_counter)`` rows -> int64
    ``[n, 8]``: counter words c0..c3 then output words o0..o3. Every field must fit its
    width (a caller drawing at ``anchor + i`` wraps that position mod 2^32 itself)."""
    fields = []
    for seed, position, round_id, generation, domain, draw_counter in rows:
        check_fields(position, round_id, generation, domain, draw_counter)
        fields.append([*key_words(seed), position, round_id, generation, domain, draw_counter])
    n = len(fields)
    out = torch.empty((n, 8), dtype=torch.int64, device=device)
    if n:
        table = torch.tensor(fields, dtype=torch.int64, device=device)
        abi_draw_kernel[(triton.cdiv(n, DRAW_BLOCK),)](table, out, n, BLOCK=DRAW_BLOCK, **LAUNCH)  # pyright: ignore[reportArgumentType]  # Triton: a plain int or bool fills a tl.constexpr parameter
    return out


def key_table(seeds: list[int], device: torch.device | str) -> torch.Tensor:
    """Key words ``[B, 2]`` (int64) of B request seeds."""
    return torch.tensor([key_words(int(s)) for s in seeds], dtype=torch.int64, device=device).reshape(-1, 2)
