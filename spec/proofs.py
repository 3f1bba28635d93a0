"""Symbolic proofs, in sympy, of fixed-depth losslessness and of the admission counterexamples' bias.

The exact enumerators (:mod:`qconform.spec.distribution`,
:mod:`qconform.spec.admission`) check given rows. The proofs here hold for
*every* p and q on small vocabularies (R09, R11, R35) and give the bias of the
two counterexamples in closed form (R37, R38). sympy is used here only.

**Method.** Rows are polynomials over QQ in free symbols: a row over V tokens
has V - 1 free symbols and its last entry is 1 minus their sum (sum-to-one).
The piecewise ``min(1, p/q)`` and ``max(p - q, 0)`` are split by the *region* of
the row, the set S of tokens with ``p(v) > q(v)``: in region S,
``min(1, p(x)/q(x))`` is 1 on S and ``p(x)/q(x)`` off it, ``max(p(v) - q(v), 0)``
is ``p(v) - q(v)`` on S and 0 off it. So the mass of drafting and accepting x is
``q(x)`` on S and ``q(x) * p(x)/q(x) = p(x)`` off it (positivity: ``q(x) > 0``).
S = V is empty (p > q everywhere contradicts ``sum p = sum q = 1``); the
``2^V - 1`` other regions are not. The only denominator left is the residual
mass ``beta = sum_S (p - q)``, positive when S is nonempty; each identity is
multiplied through by the betas of its rows and checked as an identity of
polynomials in each region of each row, so it holds on the whole simplex.

**Stream form of losslessness.** A round emits 1 to K + 1 tokens; the stream
continues with the next round. By induction on the number of tokens, later
rounds emit the target law (each emits at least one token), so a round is
lossless iff for every sequence ``s`` of ``K + 1`` tokens::

    sum_j P(round emits s_1..s_j and ends) * T(s_(j+1).. | s_1..s_j) + P(round emits s) = T(s)

where ``T(s | c) = prod_j p(s_j | c, s_1..s_(j-1))``, the target law.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field as dataclass_field
from itertools import product
from typing import Sequence

from sympy import QQ, Expr, Rational, solve, symbols
from sympy.polys.fields import field
from sympy.polys.rings import PolyElement, PolyRing, ring

from qconform.spec.rules import defines

Context = tuple[int, ...]
Row = list  # of sympy PolyElement or FracElement
Region = frozenset[int]


@dataclass(frozen=True)
class SymbolicRows:
    """Target rows ``p[c]`` and draft rows ``q[c]`` by context, polynomials of one ring."""

    vocab: int
    depth: int
    domain: PolyRing
    p: dict[Context, Row]
    q: dict[Context, Row]


def contexts_up_to(vocab: int, length: int) -> list[Context]:
    """Every context of length ``0..length``, shortest first."""
    return [c for n in range(length + 1) for c in product(range(vocab), repeat=n)]


def symbol_name(kind: str, context: Context, token: int) -> str:
    return f"{kind}_{''.join(map(str, context)) or 'e'}_{token}"


@defines("R11")
def symbolic_rows(vocab: int, depth: int) -> SymbolicRows:
    """Free rows for a depth-``depth`` round: q at contexts shorter than ``depth``, p up to ``depth``.

    Each row is ``(s_0, ..., s_(V-2), 1 - s_0 - ... - s_(V-2))``.
    """
    q_contexts = contexts_up_to(vocab, depth - 1)
    p_contexts = contexts_up_to(vocab, depth)
    names = [symbol_name("q", c, v) for c in q_contexts for v in range(vocab - 1)]
    names += [symbol_name("p", c, v) for c in p_contexts for v in range(vocab - 1)]
    domain, *gens = ring(",".join(names), QQ)
    free = iter(gens)

    def simplex_row() -> Row:
        row = [next(free) for _ in range(vocab - 1)]
        return row + [domain.one - sum(row, domain.zero)]

    q = {c: simplex_row() for c in q_contexts}
    p = {c: simplex_row() for c in p_contexts}
    return SymbolicRows(vocab, depth, domain, p, q)


@defines("R11")
def regions(vocab: int) -> list[Region]:
    """The nonempty regions of a row: every set S of tokens with ``p > q`` except S = V."""
    return [
        frozenset(v for v in range(vocab) if bits[v]) for bits in product((False, True), repeat=vocab) if not all(bits)
    ]


@dataclass(frozen=True)
class Verification:
    """Standard verification of one draft row in one region (R11).

    ``accepted[x] = q(x) min(1, p(x)/q(x))``: x is drafted and accepted;
    ``rejected[x] = q(x) - accepted[x]``: x is drafted and rejected;
    ``excess[v] = max(p(v) - q(v), 0)``, of total ``beta``. The correction is
    drawn from ``excess / beta``; ``scale`` is that denominator (1 in region S = {},
    where ``excess`` is zero and, by the residual lemma, so is the rejected mass).
    """

    accepted: Row
    rejected: Row
    excess: Row
    beta: PolyElement
    scale: PolyElement

    def scaled_correction(self, token: int) -> PolyElement:
        """``scale * P(a draft is rejected and the correction is token)``."""
        return sum(self.rejected, self.beta * 0) * self.excess[token]


@defines("R11")
def verification_in_region(p_row: Row, q_row: Row, region: Region) -> Verification:
    """Accepted and rejected masses and the residual of one row in ``region``."""
    zero, one = p_row[0] * 0, p_row[0] * 0 + 1
    tokens = range(len(p_row))
    accepted = [q_row[x] if x in region else p_row[x] for x in tokens]
    rejected = [q_row[x] - accepted[x] for x in tokens]
    excess = [p_row[v] - q_row[v] if v in region else zero for v in tokens]
    beta = sum(excess, zero)
    return Verification(accepted, rejected, excess, beta, beta if region else one)


@defines("R11")
def target_mass(rows: SymbolicRows, sequence: Sequence[int], context: Context = ()) -> PolyElement:
    """``T(sequence | context)``: the product of the target rows along the sequence."""
    mass = rows.domain.one
    for token in sequence:
        mass *= rows.p[context][token]
        context = context + (token,)
    return mass


def product_of(values: Sequence[PolyElement], one: PolyElement) -> PolyElement:
    total = one
    for value in values:
        total *= value
    return total


@defines("R09", "R11", "R35")
def stream_identity(rows: SymbolicRows, sequence: Sequence[int], path: Sequence[Verification]) -> PolyElement:
    """The stream form for one sequence of ``K + 1`` tokens, left side minus right side, times the scales.

    ``path[j]`` verifies the draft row at context ``s_1..s_j``. Accepting
    ``s_1..s_j`` and correcting to ``s_(j+1)`` ends the round and the target law
    continues; accepting all K drafts, the bonus ``s_(K+1)`` comes from the next
    target row. Zero iff the identity holds (the scales are positive).
    """
    depth, one = rows.depth, rows.domain.one
    scales = [kernel.scale for kernel in path]
    left = rows.domain.zero
    reach = one
    for j in range(depth):
        prefix = tuple(sequence[:j])
        others = product_of(scales[:j] + scales[j + 1 :], one)
        ended = reach * path[j].scaled_correction(sequence[j]) * others
        left += ended * target_mass(rows, sequence[j + 1 :], prefix + (sequence[j],))
        reach *= path[j].accepted[sequence[j]]
    all_scales = product_of(scales, one)
    left += reach * rows.p[tuple(sequence[:depth])][sequence[depth]] * all_scales
    return left - target_mass(rows, sequence) * all_scales


@dataclass
class LosslessnessProof:
    """What was checked: the identities (every sequence, every region of every row on its path)."""

    vocab: int
    depth: int
    regions_per_row: int
    identities: int = 0
    residual_lemmas: int = 0
    failures: list[str] = dataclass_field(default_factory=list)

    @property
    def holds(self) -> bool:
        return self.identities > 0 and not self.failures


@defines("R09", "R11", "R35")
def prove_fixed_depth_lossless(vocab: int, depth: int) -> LosslessnessProof:
    """Fixed-depth standard verification is lossless for symbolic p and q (stream form).

    Also checks the residual lemma in every region: the rejected mass
    ``sum_(x not in S) (q(x) - p(x))`` equals the residual mass ``beta`` (both sums
    differ by ``sum p - sum q = 0``), so ``rejected * residual = max(p - q, 0)``.
    """
    rows = symbolic_rows(vocab, depth)
    row_regions = regions(vocab)
    proof = LosslessnessProof(vocab, depth, len(row_regions))
    verified = {(c, s): verification_in_region(rows.p[c], rows.q[c], s) for c in rows.q for s in row_regions}
    for (context, region), kernel in verified.items():
        proof.residual_lemmas += 1
        if sum(kernel.rejected, rows.domain.zero) != kernel.beta:
            proof.failures.append(f"residual lemma at context {context}, region {sorted(region)}")
    for sequence in product(range(vocab), repeat=depth + 1):
        contexts = [tuple(sequence[:j]) for j in range(depth)]
        for choice in product(row_regions, repeat=depth):
            path = [verified[(context, region)] for context, region in zip(contexts, choice)]
            proof.identities += 1
            if stream_identity(rows, sequence, path) != 0:
                proof.failures.append(f"sequence {sequence}, regions {[sorted(r) for r in choice]}")
    return proof


@defines("R36", "R38")
def selection_first_token_law(p_row: Row, q_row: Row, region: Region, admitted: frozenset[int]) -> Row:
    """The first emitted token's law when ``x_1`` is verified iff ``x_1`` is in ``admitted``.

    Otherwise the round is target-only (one token from p). The first token only
    depends on position 1, so this holds for any depth >= 1. Rows are elements
    of a field of fractions (the residual law divides by beta)::

        P(y_1 = t) = sum_(x in A) [accepted(x) [t = x] + rejected(x) excess(t) / beta] + q(not A) p(t)
    """
    kernel = verification_in_region(p_row, q_row, region)
    zero = p_row[0] * 0
    skipped = sum((q_row[x] for x in range(len(q_row)) if x not in admitted), zero)
    law = []
    for token in range(len(p_row)):
        mass = skipped * p_row[token]
        for x in admitted:
            mass += kernel.rejected[x] * kernel.excess[token] / kernel.scale + (
                kernel.accepted[x] if x == token else zero
            )
        law.append(mass)
    return law


@dataclass(frozen=True)
class ClosedForm:
    """The first token's mass at token 0 under a selection, and its bias ``P(y_1 = 0) - p(0)``."""

    region: str
    token0: Expr
    bias: Expr


@defines("R38")
def toy_selection_closed_form() -> ClosedForm:
    """R38 for ``q = p = (theta, 1 - theta)``: ``P(y_1 = 0) = 2 theta - theta^2``, bias ``theta (1 - theta)``.

    At ``theta = 1/2``: 3/4 against 1/2. Since q = p no draft is ever rejected
    (the region is S = {}: ``min(1, p/q) = 1``).
    """
    domain, theta = field("theta", QQ)
    row = [theta, 1 - theta]
    law = selection_first_token_law(row, row, frozenset(), frozenset({0}))
    return ClosedForm("q = p", law[0].as_expr(), (law[0] - theta).as_expr())


@defines("R37")
def dspark_closed_forms() -> list[ClosedForm]:
    """The appendix-A selection (x_1 = 0 verified, x_1 = 1 target-only) for ``p = (p0, 1 - p0)``, ``q = (q0, 1 - q0)``.

    Region ``p0 < q0`` (the reconstruction: 3/10 < 1/2): ``P(y_1 = 0) = p0 (2 - q0)``,
    bias ``p0 (1 - q0)``; region ``p0 > q0``: ``q0 + (1 - q0) p0``, bias ``q0 (1 - p0)``.
    Both biases are positive inside the simplex: the selection always favours token 0.
    """
    domain, p0, q0 = field("p0,q0", QQ)
    p_row, q_row = [p0, 1 - p0], [q0, 1 - q0]
    forms = []
    for name, region in (("p0 < q0", frozenset({1})), ("p0 > q0", frozenset({0}))):
        law = selection_first_token_law(p_row, q_row, region, frozenset({0}))
        forms.append(ClosedForm(name, law[0].as_expr(), (law[0] - p0).as_expr()))
    return forms


@defines("R37")
def dspark_admission_threshold(a1: Rational, sps: Sequence[Rational]) -> Expr:
    """The ``c_2`` above which the two-token score beats target-only: solve ``S(2) = S(0)`` for ``c_2``.

    ``S(2) = (1 + a1 + a1 c_2) SPS(3)``, ``S(0) = SPS(1)``. With the published
    numbers (a1 = 4/5, SPS = 1, 1/2, 9/20) it is 19/36: ``c_2 = 0.9`` selects
    depth 2, ``c_2 = 0`` target-only (``S(1) = 9/10`` never wins).
    """
    c2 = symbols("c2")
    (root,) = solve((1 + a1 + a1 * c2) * sps[2] - sps[0], c2)
    return root
