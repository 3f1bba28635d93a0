"""Standard verification of one round (R10, R11, R23, R33) for a batch of requests.

Request ``b`` has drafts ``x_1..x_K``, q rows (a :class:`QRows` table, row ``b*K + i``),
target weight rows ``p[b, 0..K]`` (FP64; row i is ``p_{i+1} = w / sum(w)``) and its RNG
identity. The kernels, in order:

* ``weights.weight_scan_kernel``: ``W`` = FP64 sum of every target row, and
  BAD_TARGET_ROW for a NaN, infinite or negative weight or a row without positive mass;
* :func:`qconform.adapters.triton_candidate.lookup.q_lookup_kernel`: ``c_x``, the
  count of each draft in its q row;
* :func:`acceptance_kernel`: for i = 1..K the ACCEPT draw ``u32`` at position
  ``anchor + i - 1`` (``tl.philox``) and the test ``u32 * q(x) < p(x) * 2^32``, i.e.
  ``u32 * c_x * W < w_x * 2^56``, evaluated as ``f64(u32 * c_x) * W < w_x * 2^56``
  (``u32 * c_x`` is an exact int64 and ``w_x * 2^56`` an exact FP64; ``W`` and the
  product round): FP64, not exact, except that ``w_x = 0`` never accepts. Writes the
  number ``j`` of leading acceptances;
* :func:`residual_kernel`: the CORRECTION draw at ``anchor + j`` and, if ``j < K``, the
  token from the residual ``max(p_{j+1} - q_{j+1}, 0)`` over the FULL vocabulary
  (tokens outside a sparse support have q = 0: sparse lookup by global ID),
  evaluated as the FP64 row ``max(w_v * M - c_v * W, 0)`` (a positive multiple of
  the residual); if ``j = K`` the bonus token from ``p_{K+1}``. The token is the first
  ``v`` with ``C_v * 2^32 > u32 * R``: FP64 prefix sums ``C`` carried across blocks,
  ``R`` the last of them, so the count of ``C_v * 2^32 <= u32 * R`` is the token.

The host then walks the K results of each request (stop tokens and budget end the
emission; no later draw is consumed). Each request is keyed by its own identity
only, so its result does not depend on its batch position (R22, R27).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Sequence

import torch
import triton
import triton.language as tl

from .allocation import M_FLOAT
from .errors import BAD_TARGET_ROW, ZERO_RESIDUAL_MASS, TritonCandidateError, raise_flags
from .launch import LAUNCH, row_tile
from .lookup import lookup_counts, q_count
from .philox import ACCEPT, CORRECTION, MASK32, abi_word0, key_table
from .qrows import QRows
from .reductions import ADD, MAX, MIN
from .weights import weight_scan

#: the batch bound (R27)
MAX_REQUESTS = 4
ACCEPT_DOMAIN = tl.constexpr(ACCEPT)
CORRECTION_DOMAIN = tl.constexpr(CORRECTION)
TWO32 = tl.constexpr(4294967296.0)
TWO56 = tl.constexpr(72057594037927936.0)

#: decision names of a consumed draw
ACCEPTED, REJECTED, CORRECTED, BONUS = "accept", "reject", "correction", "bonus"


@triton.jit(do_not_specialize=["V", "K", "n_requests"])
def acceptance_kernel(
    counts_x_ptr,
    drafts_ptr,
    p_ptr,
    mass_ptr,
    keys_ptr,
    ident_ptr,
    V,
    K,
    n_requests,
    u_ptr,
    ok_ptr,
    accepted_ptr,
    ROWS: tl.constexpr,
    KP: tl.constexpr,
):
    """Requests ``b`` of the program's tile: the K acceptance draws and tests, and the count
    of leading acceptances."""
    b = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    b_live = b < n_requests
    i = tl.arange(0, KP)[None, :]
    live = b_live[:, None] & (i < K)
    at = b[:, None] * K + i
    x = tl.load(drafts_ptr + at, mask=live, other=0)
    c = tl.load(counts_x_ptr + at, mask=live, other=0)
    p_row = b[:, None] * (K + 1) + i
    w = tl.load(p_ptr + p_row * V + x, mask=live, other=0.0)
    mass = tl.load(mass_ptr + p_row, mask=live, other=1.0)
    zero = i.to(tl.int64) * 0
    key_lo = tl.load(keys_ptr + b * 2, mask=b_live, other=0)[:, None] + zero
    key_hi = tl.load(keys_ptr + b * 2 + 1, mask=b_live, other=0)[:, None] + zero
    anchor = tl.load(ident_ptr + b * 3, mask=b_live, other=0)[:, None]
    round_id = tl.load(ident_ptr + b * 3 + 1, mask=b_live, other=0)[:, None] + zero
    generation = tl.load(ident_ptr + b * 3 + 2, mask=b_live, other=0)[:, None] + zero
    u = abi_word0(key_lo, key_hi, anchor + i, round_id, generation, ACCEPT_DOMAIN)
    ok = live & (((u * c).to(tl.float64) * mass) < (w * TWO56))
    tl.store(u_ptr + at, u, mask=live)
    tl.store(ok_ptr + at, ok.to(tl.int32), mask=live)
    tl.store(accepted_ptr + b, tl.reduce(tl.where(live & ~ok, i, K), 1, MIN).to(tl.int64), mask=b_live)


@triton.jit
def residual_mass(
    p_ptr, p_row, v, live, V, correction, mass, counts_ptr, ids_ptr, start, length, sparse, STEPS: tl.constexpr
):
    """FP64 masses of tokens ``v``: ``max(w * M - c * W, 0)`` for a correction, else ``w``."""
    w = tl.load(p_ptr + p_row * V + v, mask=live, other=0.0)
    c = q_count(counts_ptr, ids_ptr, start, length, sparse, v, STEPS)
    residual = tl.maximum(w * M_FLOAT - c.to(tl.float64) * mass, 0.0)
    return tl.where(live, tl.where(correction, residual, w), 0.0)


@triton.jit
def residual_scan(
    p_ptr,
    p_row,
    row_live,
    V,
    correction,
    mass,
    counts_ptr,
    ids_ptr,
    start,
    length,
    sparse,
    target,
    STEPS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Per row of a tile (every argument but the pointers, ``V`` and the constexprs a
    ``[ROWS]`` vector): (last FP64 prefix sum ``C_{V-1}``, count of ``v`` with
    ``C_v * 2^32 <= target``)."""
    carry = tl.full(target.shape, 0, tl.float64)
    index = tl.full(start.shape, 0, tl.int64)
    for off in range(0, V, BLOCK):
        v = off + tl.arange(0, BLOCK)[None, :]
        live = row_live[:, None] & (v < V)
        r = residual_mass(
            p_ptr,
            p_row[:, None],
            v,
            live,
            V,
            correction[:, None],
            mass[:, None],
            counts_ptr,
            ids_ptr,
            start[:, None],
            length[:, None],
            sparse[:, None],
            STEPS,
        )
        cumulative = carry[:, None] + tl.associative_scan(r, 1, ADD)  # pyright: ignore[reportArgumentType]  # Triton: a [:, None] index of a tl.reduce result, typed as possibly a tuple
        index += tl.reduce((live & (cumulative * TWO32 <= target[:, None])).to(tl.int64), 1, ADD)
        carry = tl.reduce(cumulative, 1, MAX)
    return carry, index


@triton.jit(do_not_specialize=["V", "K", "n_requests"])
def residual_kernel(
    p_ptr,
    mass_ptr,
    counts_ptr,
    ids_ptr,
    starts_ptr,
    lengths_ptr,
    sparse_ptr,
    keys_ptr,
    ident_ptr,
    accepted_ptr,
    V,
    K,
    n_requests,
    token_ptr,
    u_ptr,
    flags_ptr,
    STEPS: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Requests ``b`` of the program's tile: the correction (after ``j < K`` acceptances) or
    bonus draw and its token.

    Two scans of the same prefix sums: the first finds the total ``R`` (the target -1
    counts nothing), the second counts the prefix sums at or below ``u32 * R``."""
    b = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    b_live = b < n_requests
    j = tl.load(accepted_ptr + b, mask=b_live, other=0)
    correction = j < K
    p_row = b * (K + 1) + j
    mass = tl.load(mass_ptr + p_row, mask=b_live, other=1.0)
    q_row = b * K + tl.minimum(j, K - 1)
    start = tl.load(starts_ptr + q_row, mask=b_live, other=0)
    length = tl.load(lengths_ptr + q_row, mask=b_live, other=0)
    sparse = tl.load(sparse_ptr + q_row, mask=b_live, other=0)
    u = abi_word0(
        tl.load(keys_ptr + b * 2, mask=b_live, other=0),
        tl.load(keys_ptr + b * 2 + 1, mask=b_live, other=0),
        tl.load(ident_ptr + b * 3, mask=b_live, other=0) + j,
        tl.load(ident_ptr + b * 3 + 1, mask=b_live, other=0),
        tl.load(ident_ptr + b * 3 + 2, mask=b_live, other=0),
        CORRECTION_DOMAIN,
    )
    total, _ = residual_scan(
        p_ptr,
        p_row,
        b_live,
        V,
        correction,
        mass,
        counts_ptr,
        ids_ptr,
        start,
        length,
        sparse,
        tl.full([ROWS], -1.0, tl.float64),
        STEPS,
        BLOCK,
    )
    _, index = residual_scan(
        p_ptr,
        p_row,
        b_live,
        V,
        correction,
        mass,
        counts_ptr,
        ids_ptr,
        start,
        length,
        sparse,
        u.to(tl.float64) * total,
        STEPS,
        BLOCK,
    )
    ok = (total > 0) & (total < float("inf")) & (index < V)  # pyright: ignore[reportOperatorIssue]  # Triton: tl.reduce returns a tensor here, typed as possibly a tuple
    tl.store(token_ptr + b, tl.where(ok, index, -1), mask=b_live)
    tl.store(u_ptr + b, u, mask=b_live)
    tl.store(flags_ptr + b, tl.where(ok, 0, ZERO_RESIDUAL_MASS), mask=b_live)


#: one consumed draw of the target-side sampler: domain code, position, u32, decision name, token
Draw = NamedTuple("Draw", [("domain", int), ("position", int), ("u32", int), ("decision", str), ("token", int)])
#: what one request's round produced: accepted drafts, emitted tokens, consumed draws in order
RoundOutcome = NamedTuple("RoundOutcome", [("accepted", int), ("emitted", list), ("draws", list)])


@dataclass(frozen=True)
class Identity:
    """A request's RNG identity (docs/rng-abi.md)."""

    seed: int
    generation: int
    round_id: int
    anchor: int


def target_masses(p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(FP64 masses ``[B, K + 1]``, BAD_TARGET_ROW flags ``[B, K + 1]``) of target rows
    ``[B, K + 1, V]``: a NaN, infinite or negative weight, no positive mass, or a mass
    that overflows FP64 makes a row unusable."""
    batch, rows, vocab = p.shape
    flags, mass = weight_scan(p.reshape(batch * rows, vocab))
    bad = (flags != 0) | ~torch.isfinite(mass)
    return mass.reshape(batch, rows), torch.where(bad, BAD_TARGET_ROW.value, 0).reshape(batch, rows)


def check_identity(ident: Identity) -> None:
    fields = {"generation": ident.generation, "round": ident.round_id, "anchor": ident.anchor}
    for name, value in fields.items():
        if not 0 <= value <= MASK32:
            raise TritonCandidateError("BAD_RNG_FIELD", f"{name} {value} is not a 32-bit word")


def check_inputs(
    q: QRows,
    p: torch.Tensor,
    drafts: torch.Tensor,
    stops: Sequence[Sequence[int]],
    budgets: Sequence[int | None],
    round_sizes: Sequence[int],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Refuse what R11/R19/R27 refuse before any draw; return (FP64 masses, draft counts ``c_x``)."""
    batch, depth = drafts.shape
    for size in round_sizes:
        if not 1 <= size <= MAX_REQUESTS:
            raise TritonCandidateError("BAD_SHAPE", f"a batch holds 1..{MAX_REQUESTS} requests, not {size}")
    if sum(round_sizes) != batch:
        raise TritonCandidateError("BAD_SHAPE", f"rounds of {sum(round_sizes)} requests for {batch} requests")
    if depth < 1 or q.rows != batch * depth or tuple(p.shape[:2]) != (batch, depth + 1) or p.shape[2] != q.vocab:
        raise TritonCandidateError("BAD_SHAPE", "K drafts need K q rows and K + 1 target rows over V")
    q.check()
    mass, mass_flags = target_masses(p)
    rows = torch.arange(batch * depth, dtype=torch.int64, device=p.device)
    counts_x, range_flags = lookup_counts(q, rows, drafts.reshape(-1))
    mass_flags, range_flags = mass_flags.tolist(), range_flags.reshape(batch, depth).tolist()
    zero = (counts_x == 0).reshape(batch, depth).tolist()
    flagged = any(map(any, mass_flags + range_flags + zero)) or any(stops) or any(b is not None for b in budgets)
    for b in range(batch) if flagged else ():  # each request in order, only when one can be refused
        raise_flags(mass_flags[b], f"request {b} target")
        for i in range(depth):
            raise_flags([range_flags[b][i]], f"request {b} draft {i + 1}")
            if zero[b][i]:
                raise TritonCandidateError("ZERO_Q_AT_TOKEN", f"request {b} draft {i + 1}")
        if any(not 0 <= s < q.vocab for s in stops[b]):
            raise TritonCandidateError("TOKEN_OUT_OF_RANGE", f"request {b} stop token")
        budget = budgets[b]
        if budget is not None and budget < 1:
            raise TritonCandidateError("BAD_SHAPE", f"request {b} budget {budget}")
    return mass, counts_x


def emission(
    depth: int,
    anchor: int,
    drafts: list[int],
    u: list[int],
    ok: list[int],
    final_u: int,
    final_token: int,
    stops: Sequence[int],
    budget: int | None,
) -> RoundOutcome:
    """Walk one request's kernel results in draw order: what was consumed and emitted."""
    draws, emitted = [], []
    for i in range(depth):
        position = (anchor + i) & MASK32
        draws.append(Draw(ACCEPT, position, u[i], ACCEPTED if ok[i] else REJECTED, drafts[i]))
        if not ok[i]:
            draws.append(Draw(CORRECTION, position, final_u, CORRECTED, final_token))
            return RoundOutcome(i, emitted + [final_token], draws)
        emitted.append(drafts[i])
        if drafts[i] in stops or (budget is not None and len(emitted) >= budget):
            return RoundOutcome(i + 1, emitted, draws)
    draws.append(Draw(CORRECTION, (anchor + depth) & MASK32, final_u, BONUS, final_token))
    return RoundOutcome(depth, emitted + [final_token], draws)


def verify_batch(
    idents: Sequence[Identity],
    drafts: torch.Tensor,
    q: QRows,
    p: torch.Tensor,
    stops: Sequence[Sequence[int]],
    budgets: Sequence[int | None],
) -> list[RoundOutcome]:
    """Verify one round of B requests (see the module docstring).

    ``drafts``: int64 ``[B, K]``; ``q``: B*K rows (request-major); ``p``: FP64 ``[B, K + 1, V]``;
    ``stops``/``budgets``: per request. All tensors on one device.
    """
    return verify_rounds(idents, drafts, q, p, stops, budgets, [len(idents)])


def verify_rounds(
    idents: Sequence[Identity],
    drafts: torch.Tensor,
    q: QRows,
    p: torch.Tensor,
    stops: Sequence[Sequence[int]],
    budgets: Sequence[int | None],
    round_sizes: Sequence[int],
) -> list[RoundOutcome]:
    """Verify many independent rounds in one launch of each kernel: the requests of
    :func:`verify_batch`, round after round, round ``r`` holding ``round_sizes[r]`` of them.
    R27 bounds each round (1..:data:`MAX_REQUESTS` requests), not the launch: a request is
    keyed by its own identity only, so its result does not depend on what else the launch
    holds. Short rows put a tile of requests in each program."""
    mass, counts_x = check_inputs(q, p, drafts, stops, budgets, round_sizes)
    for ident in idents:
        check_identity(ident)
    batch, depth = drafts.shape
    device = p.device
    p = p.contiguous()
    keys = key_table([ident.seed for ident in idents], device)
    table = torch.tensor(
        [[ident.anchor, ident.round_id, ident.generation] for ident in idents], dtype=torch.int64, device=device
    )
    u = torch.empty((batch, depth), dtype=torch.int64, device=device)
    ok = torch.empty((batch, depth), dtype=torch.int32, device=device)
    accepted = torch.empty(batch, dtype=torch.int64, device=device)
    kp = max(2, triton.next_power_of_2(depth))
    _, tile = row_tile(kp, batch)
    acceptance_kernel[(triton.cdiv(batch, tile),)](
        counts_x,
        drafts.contiguous(),
        p,
        mass,
        keys,
        table,
        q.vocab,
        depth,
        batch,
        u,
        ok,
        accepted,
        ROWS=tile,  # pyright: ignore[reportArgumentType]  # Triton: a plain int or bool fills a tl.constexpr parameter
        KP=kp,  # pyright: ignore[reportArgumentType]  # Triton: a plain int or bool fills a tl.constexpr parameter
        **LAUNCH,
    )
    token = torch.empty(batch, dtype=torch.int64, device=device)
    final_u = torch.empty(batch, dtype=torch.int64, device=device)
    flags = torch.zeros(batch, dtype=torch.int32, device=device)
    block, tile = row_tile(q.vocab, batch)
    residual_kernel[(triton.cdiv(batch, tile),)](
        p,
        mass,
        q.counts,
        q.ids,
        q.starts,
        q.lengths,
        q.sparse,
        keys,
        table,
        accepted,
        q.vocab,
        depth,
        batch,
        token,
        final_u,
        flags,
        STEPS=q.lookup_steps(),  # pyright: ignore[reportArgumentType]  # Triton: a plain int or bool fills a tl.constexpr parameter
        ROWS=tile,  # pyright: ignore[reportArgumentType]  # Triton: a plain int or bool fills a tl.constexpr parameter
        BLOCK=block,  # pyright: ignore[reportArgumentType]  # Triton: a plain int or bool fills a tl.constexpr parameter
        **LAUNCH,
    )
    rows = zip(drafts.tolist(), u.tolist(), ok.tolist(), final_u.tolist(), token.tolist(), flags.tolist())
    outcomes = []
    for b, (x, u_b, ok_b, fu, tok, flag) in enumerate(rows):
        outcome = emission(depth, idents[b].anchor, x, u_b, ok_b, fu, tok, stops[b], budgets[b])
        if flag and outcome.draws[-1].domain == CORRECTION:
            raise_flags([flag], f"request {b} residual")
        outcomes.append(outcome)
    return outcomes
