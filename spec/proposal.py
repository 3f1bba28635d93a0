"""The worker's side of one round: the fixed-depth proposal chain (R01, R05, R07, R15, R22, R35).

For a request with RNG identity (seed, generation, round, anchor) and fixed
depth K (chosen before sampling, R35), the worker leader computes, for
i = 1..K in order:

1. the Markov bias from the previous token ``x_{i-1}`` (``x_0`` is the last
   committed token): :func:`qconform.spec.markov.markov_bias_f32`;
2. the draft weights from the base logits of row i, that bias and the draft
   temperature: :func:`qconform.spec.weights.weights_from_logits` (R05);
3. the dyadic24 counts, dense or top-k sparse:
   :func:`qconform.spec.allocation.allocate_dense` /
   :func:`qconform.spec.allocation.allocate_sparse` (R06, R07), and whether the
   design's FP64 recipe may legitimately allocate the row otherwise
   (:func:`qconform.spec.allocation_fp64.fp64_row_may_differ`, NON-NORMATIVE);
4. the proposal draw ``u24`` at ``proposal_key(ident, i)``, position
   ``anchor + i - 1``, domain PROPOSAL (R22), and ``x_i`` = the token it picks
   from the counts (R08).

Row i + 1 is conditioned on the sampled ``x_i``: the q sent for each position is
the exact categorical that sampled its token, given all earlier tokens of the
chain (R01, R15).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Hashable, Sequence

from qconform.spec.allocation import allocate_dense, allocate_sparse
from qconform.spec.allocation_fp64 import fp64_row_may_differ, fp64_sparse_may_differ
from qconform.spec.constants import MAX_REQUESTS
from qconform.spec.errors import refuse
from qconform.spec.markov import markov_bias_f32
from qconform.spec.qrow import QRow
from qconform.spec.rng_abi import RngIdentity, proposal_draw, proposal_key
from qconform.spec.rules import defines
from qconform.spec.sampling import sample_qrow
from qconform.spec.weights import weights_from_logits

DENSE_POLICY = "dense"
TOP_K_POLICY = "top_k"


@dataclass(frozen=True)
class SupportPolicy:
    """The proposal support policy (R14): ``dense``, or ``top_k`` with its ``k`` (R07)."""

    policy: str
    k: int | None = None

    def __post_init__(self) -> None:
        if self.policy == DENSE_POLICY and self.k is None:
            return
        if self.policy == TOP_K_POLICY and isinstance(self.k, int) and not isinstance(self.k, bool):
            return
        raise refuse("BAD_SUPPORT_SIZE", f"support policy {self.policy!r} with k={self.k!r}")

    @classmethod
    def dense(cls) -> "SupportPolicy":
        return cls(DENSE_POLICY)

    @classmethod
    def top_k(cls, k: int) -> "SupportPolicy":
        return cls(TOP_K_POLICY, k)


@dataclass(frozen=True)
class ProposalInput:
    """Everything the worker leader needs for one round of one request.

    ``base_logits`` is K x V (FP32 bits), one row per draft position;
    ``markov_left`` is V x r and ``markov_right`` r x V (FP32 bits);
    ``last_committed_token`` is ``x_0``; ``temperature_bits`` the FP32 draft
    temperature; ``support`` the support policy; ``identity`` the RNG identity.
    """

    base_logits: Sequence[Sequence[int]]
    markov_left: Sequence[Sequence[int]]
    markov_right: Sequence[Sequence[int]]
    last_committed_token: int
    temperature_bits: int
    support: SupportPolicy
    identity: RngIdentity


@dataclass(frozen=True)
class ProposalDraw:
    """The proposal draw of one position: its Philox counter words and the 24-bit value."""

    position: int
    counter: tuple[int, int, int, int]
    u24: int


@dataclass(frozen=True)
class ProposalRow:
    """One position of the chain: the q row that sampled ``token``, the draw, and
    the numerical margins of the row (``tie_gap`` of the allocation,
    ``exp_margin_ulp`` of the weights, ``selection_gap`` of a top-k support or
    None when dense, and ``fp64_may_differ``: whether the FP64 recipe may
    legitimately allocate the row otherwise, as the allocation vectors say it)."""

    index: int
    q: QRow
    token: int
    draw: ProposalDraw
    tie_gap: Fraction
    exp_margin_ulp: Fraction
    selection_gap: Fraction | None
    fp64_may_differ: bool


@dataclass(frozen=True)
class ProposalResult:
    """The K rows of the chain, in draft order."""

    rows: list[ProposalRow]

    @property
    def tokens(self) -> list[int]:
        return [row.token for row in self.rows]


def check_shapes(inp: ProposalInput) -> None:
    """Refuse an empty chain, ragged logits, or logits that do not match the factors' V."""
    vocab = len(inp.markov_left)
    if len(inp.base_logits) == 0:
        raise refuse("BAD_SHAPE", "the chain needs depth K >= 1")
    for i, row in enumerate(inp.base_logits, start=1):
        if len(row) != vocab:
            raise refuse("BAD_SHAPE", f"base logits row {i} has {len(row)} entries, V = {vocab}")


@defines("R05", "R06", "R07")
def proposal_row(
    logits: Sequence[int], bias: Sequence[int], temperature_bits: int, support: SupportPolicy
) -> tuple[QRow, Fraction, Fraction, Fraction | None, bool]:
    """The q row of one position from its base logits and Markov bias:
    ``(q, tie_gap, exp_margin_ulp, selection_gap, fp64_may_differ)``.

    ``fp64_may_differ`` is taken on the FP32 weights of the row, over the whole
    row when dense and over the selected support when top-k."""
    weights = weights_from_logits(logits, temperature_bits, bias)
    if support.policy == DENSE_POLICY:
        dense = allocate_dense(weights.weights)
        may_differ = fp64_row_may_differ(weights.weights_f32, "f32", weights.weights, dense.counts)
        return QRow.dense(dense.counts), dense.tie_gap, weights.exp_margin_ulp, None, may_differ
    sparse = allocate_sparse(weights.weights, support.k)
    row = QRow.sparse(len(logits), sparse.ids, sparse.counts)
    may_differ = fp64_sparse_may_differ(weights.weights_f32, "f32", weights.weights, sparse)
    return row, sparse.tie_gap, weights.exp_margin_ulp, sparse.selection_gap, may_differ


@defines("R01", "R05", "R15", "R22", "R35")
def proposal_chain(inp: ProposalInput) -> ProposalResult:
    """Sample the fixed-depth chain ``x_1..x_K``, each row conditioned on the sampled prefix (R01).

    Row i uses the bias of ``x_{i-1}``, its own base logits and the draft
    temperature; its token is the proposal draw at ``proposal_key(identity, i)``
    over its counts (R08, R22). The next row's bias uses that token, so a
    different ``x_i`` changes every later q.
    """
    check_shapes(inp)
    previous = inp.last_committed_token
    rows = []
    for i, logits in enumerate(inp.base_logits, start=1):
        bias = markov_bias_f32(previous, inp.markov_left, inp.markov_right)
        q, tie_gap, exp_margin, selection_gap, may_differ = proposal_row(
            logits, bias, inp.temperature_bits, inp.support
        )
        key = proposal_key(inp.identity, i)
        u24 = proposal_draw(key)
        token = sample_qrow(q, u24)
        draw = ProposalDraw(key.position, key.counter_words(), u24)
        rows.append(ProposalRow(i, q, token, draw, tie_gap, exp_margin, selection_gap, may_differ))
        previous = token
    return ProposalResult(rows)


@defines("R22", "R27")
def proposal_batch(inputs: Sequence[ProposalInput]) -> list[ProposalResult]:
    """One round of proposals for a batch of requests of one draft model: at most
    four requests of one depth, one vocabulary, one support policy and one Markov
    head (R27), else BAD_SHAPE. Each request's chain is its own: its identity,
    last committed token, draft temperature and base logits, whatever the other
    requests of the batch hold (R22)."""
    check_proposal_batch(
        [len(inp.base_logits) for inp in inputs],
        [(inp.support, tuple(map(tuple, inp.markov_left)), tuple(map(tuple, inp.markov_right))) for inp in inputs],
    )
    return [proposal_chain(inp) for inp in inputs]


@defines("R27", "R35")
def check_proposal_batch(depths: Sequence[int], models: Sequence[Hashable]) -> None:
    """Refuse (BAD_SHAPE) a batch of no request or more than four, of mixed depths, or of more than
    one draft model (support policy and Markov head): the batch's shape, judged before any request
    (``refusal_order.PROPOSAL_BATCH_REFUSALS`` rows 1-3)."""
    if not 1 <= len(depths) <= MAX_REQUESTS:
        raise refuse("BAD_SHAPE", f"a batch holds 1..{MAX_REQUESTS} requests, not {len(depths)}")
    if len(set(depths)) != 1:
        raise refuse("BAD_SHAPE", "a batch has one fixed depth (R27, R35)")
    if len(set(models)) != 1:
        raise refuse("BAD_SHAPE", "a batch has one draft model: one support policy and one Markov head")
