"""Hypothesis strategies of valid case inputs, for the differential fuzzer (docs/fuzzing.md).

Each fuzzable family names its strategy in its :class:`~qconform.generators.registry.FuzzHooks`
(``inputs``); the harness's fuzzer (:mod:`qconform.harness.fuzz.driver`) draws from it,
asks the family's ``solve`` for the spec's answer and the adapter for its own. The inputs
lean on the edges the spec cares about: exact ties, cumulative boundaries, acceptance
draws exactly on the boundary.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Sequence

from hypothesis import strategies as st

from qconform.generators.encoding import encode_blob, encode_u64, encode_word, f32_bits
from qconform.generators.families import categorical_sampling, verification_round
from qconform.spec.constants import DEPTH, MAX_REQUESTS, M
from qconform.spec.floats import F32_MAX
from qconform.spec.qrow import QRow
from qconform.spec.rng_abi import Domain, RngIdentity, accept_key, uniform32_draw
from qconform.spec.verification import RoundInput

U32 = (1 << 32) - 1
NEG_ZERO = 0x80000000
SMALL_VOCAB = 8


# --- values ---------------------------------------------------------------------------------
#
# Strategies are built once and reused (``lru_cache``): hypothesis validates every new
# strategy object, which would dominate the run if rows built their own on each draw.
# The ``draw_*`` helpers take a composite's ``draw`` and build nothing.


@lru_cache(maxsize=None)
def integers(low: int, high: int) -> st.SearchStrategy[int]:
    return st.integers(low, high)


@lru_cache(maxsize=None)
def choices(options: tuple) -> st.SearchStrategy:
    return st.sampled_from(options)


u32s = integers(0, U32)
u64_texts = integers(0, (1 << 64) - 1).map(encode_u64)
words = u32s.map(encode_word)

#: FP32 weight bit patterns of the tokens a row gives weight: a few values that repeat (exact
#: ties), small integers (exact arithmetic everywhere), any positive finite FP32 value, and
#: -0.0 (a zero weight, R05). Tokens a row does not list weigh +0.0.
TIE_POOL = tuple(f32_bits(x) for x in (1.0, 0.5, 3.0, 2.0**-30))
f32_weight_bits = st.one_of(
    st.sampled_from(TIE_POOL),
    st.integers(1, 1 << 24).map(lambda n: f32_bits(float(n))),
    st.integers(1, F32_MAX),
    st.just(NEG_ZERO),
)


def is_zero_bits(bits: int) -> bool:
    return bits in (0, NEG_ZERO)


@lru_cache(maxsize=None)
def weight_maps(vocab: int) -> st.SearchStrategy[dict[int, int]]:
    return st.dictionaries(st.integers(0, vocab - 1), f32_weight_bits, min_size=1, max_size=vocab)


def draw_weight_row(draw: st.DrawFn, vocab: int) -> list[int]:
    """FP32 weight bits of one row with at least one positive weight."""
    weights = draw(weight_maps(vocab))
    bits = [weights.get(v, 0) for v in range(vocab)]
    if all(is_zero_bits(b) for b in bits):
        bits[min(weights)] = TIE_POOL[0]
    return bits


def cuts_to_parts(total: int, cuts: list[int]) -> list[int]:
    cuts = sorted(cuts)
    return [b - a for a, b in zip([0] + cuts, cuts + [total])]


@lru_cache(maxsize=None)
def count_splits(total: int, parts: int) -> st.SearchStrategy[list[int]]:
    """``parts`` positive integers summing to ``total`` (needs ``total >= parts``)."""
    cuts = st.lists(st.integers(1, total - 1), min_size=parts - 1, max_size=parts - 1, unique=True)
    return cuts.map(lambda c: cuts_to_parts(total, c))


@lru_cache(maxsize=None)
def supports(free: tuple[int, ...]) -> st.SearchStrategy[list[int]]:
    """Nonempty sets of tokens among ``free``."""
    return st.lists(st.sampled_from(free), min_size=1, max_size=len(free), unique=True)


def row_of(vocab: int, counts: dict[int, int], sparse: bool) -> QRow:
    """The dyadic24 row with ``counts`` on its support, dense or sparse."""
    if sparse:
        ids = sorted(counts)
        return QRow.sparse(vocab, ids, [counts[v] for v in ids])
    return QRow.dense([counts.get(v, 0) for v in range(vocab)])


def draw_q_row(draw: st.DrawFn, vocab: int, fixed: tuple[int, int] | None = None) -> QRow:
    """A legal dyadic24 q row over ``vocab`` (dense or sparse, R03/R07). ``fixed = (token,
    count)`` pins one count below M; the rest of M goes to at least one other token."""
    counts = dict([fixed]) if fixed else {}
    free = tuple(v for v in range(vocab) if v not in counts)
    support = draw(supports(free))
    counts.update(zip(support, draw(count_splits(M - sum(counts.values()), len(support)))))
    return row_of(vocab, counts, draw(st.booleans()))


def draw_token_of(draw: st.DrawFn, row: QRow) -> int:
    """A token of the row's support."""
    return draw(choices(tuple(v for v, _ in row.support())))


# --- rng_abi ----------------------------------------------------------------------------------

rng_abi_inputs = st.one_of(
    st.fixed_dictionaries(
        {
            "counter": st.lists(words, min_size=4, max_size=4),
            "key": st.lists(words, min_size=2, max_size=2),
            "rounds": st.just(10),
        }
    ),
    st.fixed_dictionaries(
        {
            "seed": u64_texts,
            "generation": u32s,
            "round": u32s,
            "position": u32s,
            "domain": st.sampled_from([d.name for d in Domain]),
            "draw_counter": st.integers(0, (1 << 24) - 1),
        }
    ),
    st.fixed_dictionaries(
        {
            "seed": u64_texts,
            "generation": u32s,
            "round": u32s,
            "anchor": u32s,
            "depth": st.integers(1, DEPTH + 3),
        }
    ),
)


# --- categorical_sampling -----------------------------------------------------------------------

#: (on a cumulative boundary?, which boundary or which draw) per draw
draw_picks = st.lists(st.tuples(st.booleans(), st.integers(0, M - 1)), min_size=1, max_size=8)


@st.composite
def categorical_inputs(draw: st.DrawFn) -> dict:
    """A q row over a small vocabulary and draws, many of them on cumulative boundaries."""
    vocab = draw(integers(1, 16))
    row = draw_q_row(draw, vocab)
    boundaries = categorical_sampling.boundary_draws(row.dense_counts())
    draws = [boundaries[n % len(boundaries)] if on_boundary else n for on_boundary, n in draw(draw_picks)]
    return {"vocab": vocab, "row": categorical_sampling.encode_qrow(row), "draws": draws}


# --- allocation ---------------------------------------------------------------------------------


@st.composite
def allocation_dense_inputs(draw: st.DrawFn) -> dict:
    return {"weights": encode_blob("f32", draw_weight_row(draw, draw(integers(1, 16))))}


@st.composite
def allocation_sparse_inputs(draw: st.DrawFn) -> dict:
    bits = draw_weight_row(draw, draw(integers(1, 16)))
    return {"weights": encode_blob("f32", bits), "k": draw(integers(1, len(bits)))}


# --- verification_round -------------------------------------------------------------------------

TARGET_MODES = ("random", "copy", "perturbed")
REQUEST_KINDS = ("free", "free", "boundary")


def copy_of_q(row: QRow) -> list[int]:
    """FP32 weights equal to the q counts (exact: counts <= 2^24): p = q, always accepted."""
    return [f32_bits(float(c)) for c in row.dense_counts()]


def draw_target_row(draw: st.DrawFn, vocab: int, q_row: QRow) -> list[int]:
    """A target row: q itself, q with one weight redrawn, or unrelated weights."""
    mode = draw(choices(TARGET_MODES))
    if mode == "random":
        return draw_weight_row(draw, vocab)
    bits = copy_of_q(q_row)
    if mode == "perturbed":
        bits[draw(integers(0, vocab - 1))] = f32_bits(float(draw(integers(0, 1 << 24))))
        if all(is_zero_bits(b) for b in bits):
            bits[draw(integers(0, vocab - 1))] = f32_bits(1.0)
    return bits


def odd_part(value: int) -> tuple[int, int]:
    """``(o, t)`` with ``value = o * 2^t`` and ``o`` odd; ``(0, 0)`` for 0."""
    shift = (value & -value).bit_length() - 1 if value else 0
    return value >> shift, shift


@lru_cache(maxsize=4096)
def boundary_identity(ident: RngIdentity, position: int) -> RngIdentity:
    """The first identity, counting the seed up from ``ident``'s, whose acceptance draw at
    ``position`` has an odd part below 2^24 (an exact FP32 weight; about 1 seed in 128)."""
    for step in range(1 << 16):
        candidate = RngIdentity((ident.seed + step) % (1 << 64), ident.generation, ident.round, ident.anchor)
        if odd_part(uniform32_draw(accept_key(candidate, position)))[0] < 1 << 24:
            return candidate
    raise AssertionError("no seed with a 24-bit acceptance draw within 2^16 steps")


def boundary_exponents(u32: int) -> tuple[int, int]:
    """The range of ``a`` (``q(x) = 2^a / M``) for which :func:`boundary_target` can place
    ``u32`` on the boundary: ``24 <= 56 - a - t <= 48`` and ``0 <= a <= 23``."""
    shift = odd_part(u32)[1]
    return max(0, 8 - shift), min(23, 32 - shift)


def boundary_target(vocab: int, token: int, count_exponent: int, u32: int, others: Sequence[int]) -> list[int]:
    """FP32 weights with ``2^32 p(x) / q(x) = u32`` exactly, for ``q(x) = 2^a / M``.

    With ``u32 = o * 2^t``: ``w_x = o`` and the row total is ``W = 2^n``, ``n = 56 - a - t``,
    so ``u32 * q(x) = p(x) * 2^32``: the acceptance boundary, which rejects (R11). The rest
    ``2^n - o`` goes to ``others`` as ``2^n - 2^24`` and ``2^24 - o``, both exact FP32
    values for ``24 <= n <= 48`` (:func:`boundary_exponents`).
    """
    odd, shift = odd_part(u32)
    total = 1 << (56 - count_exponent - shift)
    bits = [0] * vocab
    bits[token] = f32_bits(float(odd))
    bits[others[0]] = f32_bits(float(total - (1 << 24)))
    bits[others[1]] = f32_bits(float((1 << 24) - odd))
    return bits


@lru_cache(maxsize=None)
def token_pairs(tokens: tuple[int, ...]) -> st.SearchStrategy[list[int]]:
    return st.lists(st.sampled_from(tokens), min_size=2, max_size=2, unique=True)


def draw_boundary_request(draw: st.DrawFn, vocab: int, depth: int, ident: RngIdentity) -> tuple:
    """(identity, drafts, q rows, p weight rows) where the test of ``x_b`` sits exactly on the
    acceptance boundary; earlier drafts have p = q (always accepted). Needs ``vocab >= 3``."""
    position = draw(integers(1, depth))
    ident = boundary_identity(ident, position)
    u32 = uniform32_draw(accept_key(ident, position))
    low, high = boundary_exponents(u32)
    exponent = low + draw(integers(0, 23)) % (high - low + 1)
    token = draw(integers(0, vocab - 1))
    q_rows = [draw_q_row(draw, vocab, (token, 1 << exponent) if i == position else None) for i in range(1, depth + 1)]
    drafts = [token if i == position else draw_token_of(draw, row) for i, row in enumerate(q_rows, 1)]
    others = draw(token_pairs(tuple(v for v in range(vocab) if v != token)))
    p_bits = [copy_of_q(row) for row in q_rows[: position - 1]]
    p_bits.append(boundary_target(vocab, token, exponent, u32, others))
    p_bits += [draw_target_row(draw, vocab, row) for row in q_rows[position:] + q_rows[-1:]]
    return ident, drafts, q_rows, p_bits


def draw_free_request(draw: st.DrawFn, vocab: int, depth: int, ident: RngIdentity) -> tuple:
    """(identity, drafts, q rows, p weight rows): drafts from each row's support, any targets."""
    q_rows = [draw_q_row(draw, vocab) for _ in range(depth)]
    drafts = [draw_token_of(draw, row) for row in q_rows]
    p_bits = [draw_target_row(draw, vocab, row) for row in q_rows + q_rows[-1:]]
    return ident, drafts, q_rows, p_bits


@lru_cache(maxsize=None)
def stop_lists(vocab: int) -> st.SearchStrategy[list[int]]:
    return st.one_of(st.just([]), st.lists(st.integers(0, vocab - 1), min_size=1, max_size=2, unique=True))


@lru_cache(maxsize=None)
def budgets(depth: int) -> st.SearchStrategy[int | None]:
    return st.one_of(st.none(), st.integers(1, depth + 1))


@lru_cache(maxsize=None)
def verification_requests(vocab: int, depth: int) -> st.SearchStrategy[list[dict]]:
    """1 to ``MAX_REQUESTS`` request objects: each its RNG identity, drafts, q rows, FP32
    target rows, and maybe stop tokens and a budget."""

    @st.composite
    def requests(draw: st.DrawFn) -> dict:
        ident = RngIdentity(int(draw(u64_texts)), draw(u32s), draw(u32s), draw(u32s))
        kind = draw(choices(REQUEST_KINDS if vocab >= 3 else REQUEST_KINDS[:1]))
        build = draw_boundary_request if kind == "boundary" else draw_free_request
        ident, drafts, q_rows, p_bits = build(draw, vocab, depth, ident)
        inp = RoundInput(ident, drafts, q_rows, [], frozenset(draw(stop_lists(vocab))), draw(budgets(depth)))
        return verification_round.request_json(inp, verification_round.encode_p_weights(p_bits))

    return st.lists(requests(), min_size=1, max_size=MAX_REQUESTS)


@st.composite
def verification_inputs(draw: st.DrawFn) -> dict:
    """A batch of one to four requests sharing one vocabulary and one depth (R27)."""
    vocab = draw(integers(2, SMALL_VOCAB))
    depth = draw(integers(1, DEPTH))
    return {"vocab": vocab, "requests": draw(verification_requests(vocab, depth))}
