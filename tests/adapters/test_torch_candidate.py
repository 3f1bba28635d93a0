"""The torch candidate's kernels against independent pure-Python computations.

Nothing here imports the spec: the references below (Philox, exact largest
remainder, exact verification) are written from docs/rng-abi.md and the design.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from qconform.adapters.torch_candidate import (  # noqa: E402
    ACCEPT,
    CORRECTION,
    PROPOSAL,
    CandidateError,
    SparseCounts,
    accepts,
    allocate_dense,
    allocate_top_k,
    legal_q_row,
    logits_to_weights,
    markov_bias,
    philox4x32_10,
    propose,
    sample_counts,
    sample_mass,
    validate_weights,
    verify_round,
)

M = 1 << 24
MASK = 0xFFFFFFFF
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
FEW = settings(max_examples=25, deadline=None)


# ---------------------------------------------------------------- references


def py_philox(ctr: list[int], key: list[int]) -> list[int]:
    """Philox4x32-10 on Python ints (Random123)."""
    c, (k0, k1) = list(ctr), key
    for r in range(10):
        if r:
            k0, k1 = (k0 + 0x9E3779B9) & MASK, (k1 + 0xBB67AE85) & MASK
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k0, p1 & MASK, (p0 >> 32) ^ c[3] ^ k1, p0 & MASK]
    return c


def py_word0(seed: int, position: int, round_id: int, generation: int, domain: int) -> int:
    ctr = [position & MASK, round_id & MASK, generation & MASK, domain << 24]
    return py_philox(ctr, [seed & MASK, seed >> 32])[0]


def exact_allocation(weights: list[float]) -> tuple[list[int], Fraction]:
    """Exact largest remainder (ties to lowest ID) and the remainder gap at the cut."""
    ws = [Fraction(w) for w in weights]
    total = sum(ws)
    quotas = [w * M / total for w in ws]
    floors = [math.floor(q) for q in quotas]
    rems = [q - f for q, f in zip(quotas, floors)]
    remaining = M - sum(floors)
    order = sorted(range(len(ws)), key=lambda v: (-rems[v], v))
    counts = list(floors)
    for v in order[:remaining]:
        counts[v] += 1
    gap = Fraction(1)
    if 0 < remaining < len(ws):
        gap = rems[order[remaining - 1]] - rems[order[remaining]]
    return counts, gap


def first_above(cumulative_scaled: list, threshold) -> int:
    return next(v for v, c in enumerate(cumulative_scaled) if c > threshold)


def exact_mass_token(mass: list[Fraction], u32: int) -> int:
    total, run, cum = sum(mass), Fraction(0), []
    for m in mass:
        run += m
        cum.append(run * (1 << 32))
    return first_above(cum, u32 * total)


def reference_round(seed, gen, rnd, anchor, drafts, q_rows, p_rows, stops=(), budget=None):
    """Exact standard verification, sequential, on Fractions: (accepted, emitted, draws)."""
    emitted, draws = [], []
    if budget is not None and budget <= 0:
        return 0, emitted, draws
    p = [[Fraction(w) / sum(Fraction(v) for v in row) for w in row] for row in p_rows]
    for i, x in enumerate(drafts):
        u = py_word0(seed, anchor + i, rnd, gen, ACCEPT)
        ok = u * Fraction(q_rows[i][x], M) < p[i][x] * (1 << 32)
        draws.append((ACCEPT, anchor + i, u, "accept" if ok else "reject", x))
        if not ok:
            break
        emitted.append(x)
        if x in stops or len(emitted) == budget:
            return len(emitted), emitted, draws
    j = len(emitted)
    if j < len(drafts):
        mass = [max(pv - Fraction(c, M), Fraction(0)) for pv, c in zip(p[j], q_rows[j])]
        kind = "correction"
    else:
        mass, kind = p[j], "bonus"
    u = py_word0(seed, anchor + j, rnd, gen, CORRECTION)
    token = exact_mass_token(mass, u)
    draws.append((CORRECTION, anchor + j, u, kind, token))
    return j, emitted + [token], draws


def outcome_tuple(outcome):
    draws = [(d.domain, d.position, d.u32, d.decision, d.token) for d in outcome.draws]
    assert all(d.draw_counter == 0 for d in outcome.draws)
    return outcome.accepted, outcome.emitted, draws


def random_case(rng: random.Random, batch: int, depth: int, vocab: int):
    """Random q counts (with sparse-ish zeros), drafts with q > 0 and FP32 p weights."""
    seeds = [rng.getrandbits(64) for _ in range(batch)]
    gens = [rng.getrandbits(32) for _ in range(batch)]
    rounds = [rng.getrandbits(32) for _ in range(batch)]
    anchors = [rng.getrandbits(32) for _ in range(batch)]
    q, drafts, p = [], [], []
    for _ in range(batch):
        q_req, d_req = [], []
        for _ in range(depth):
            w = [float(np.float32(rng.random())) if rng.random() < 0.7 else 0.0 for _ in range(vocab)]
            w[rng.randrange(vocab)] = 1.0
            counts, _ = exact_allocation(w)
            q_req.append(counts)
            d_req.append(rng.choice([v for v in range(vocab) if counts[v] > 0]))
        rows = []
        for _ in range(depth + 1):
            row = [float(np.float32(rng.random() ** 3)) if rng.random() < 0.8 else 0.0 for _ in range(vocab)]
            row[rng.randrange(vocab)] = 0.5
            rows.append(row)
        q.append(q_req)
        drafts.append(d_req)
        p.append(rows)
    return seeds, gens, rounds, anchors, drafts, q, p


def tensors(drafts, q, p, device):
    return (
        torch.tensor(drafts, dtype=torch.int64, device=device),
        torch.tensor(q, dtype=torch.int64, device=device),
        torch.tensor(p, dtype=torch.float32, device=device),
    )


# ---------------------------------------------------------------- Philox / RNG ABI

KAT = [
    ([0, 0, 0, 0], [0, 0], [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
    ([MASK] * 4, [MASK] * 2, [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
    (
        [0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344],
        [0xA4093822, 0x299F31D0],
        [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1],
    ),
]


@pytest.mark.rules("R22", "R23")
@pytest.mark.parametrize("device", DEVICES)
def test_philox_known_answers(device):
    ctr = torch.tensor([c for c, _, _ in KAT], device=device)
    key = torch.tensor([k for _, k, _ in KAT], device=device)
    assert philox4x32_10(ctr, key).tolist() == [out for _, _, out in KAT]
    assert [py_philox(c, k) for c, k, _ in KAT] == [out for _, _, out in KAT]


@pytest.mark.rules("R22", "R23")
@FEW
@given(
    st.lists(
        st.tuples(
            st.lists(st.integers(0, MASK), min_size=4, max_size=4),
            st.lists(st.integers(0, MASK), min_size=2, max_size=2),
        ),
        min_size=1,
        max_size=16,
    )
)
def test_philox_matches_python_on_random_words(cases):
    ctr = torch.tensor([c for c, _ in cases], dtype=torch.int64)
    key = torch.tensor([k for _, k in cases], dtype=torch.int64)
    assert philox4x32_10(ctr, key).tolist() == [py_philox(c, k) for c, k in cases]


# ---------------------------------------------------------------- weights (R05)


@pytest.mark.rules("R05")
def test_logits_to_weights_follows_the_fp32_order():
    rng = np.random.default_rng(1)
    logits = rng.normal(0, 4, size=(3, 9)).astype(np.float32)
    logits[1, 2] = -np.inf
    bias = rng.normal(0, 1, size=(3, 9)).astype(np.float32)
    temps = np.array([1.0, 0.7, 1.9], dtype=np.float32)
    got = logits_to_weights(torch.from_numpy(logits), torch.from_numpy(temps), torch.from_numpy(bias))
    for b in range(3):
        s = (logits[b] + bias[b]) / temps[b]
        d = s - s.max()
        want = [np.float32(math.exp(float(v))) if v != -np.inf else np.float32(0) for v in d]
        assert got[b].tolist() == [float(w) for w in want]
    assert got[1, 2].item() == 0.0 and got.max(dim=1).values.tolist() == [1.0, 1.0, 1.0]


@pytest.mark.rules("R05")
def test_markov_bias_accumulates_fp32_left_to_right():
    right = torch.ones(3, 2)
    left = torch.tensor([[1e8, 1.0, -1e8], [1e8, -1e8, 1.0]])
    bias = markov_bias(left, right, torch.tensor([0, 1, 0]))
    assert bias.tolist() == [[0.0, 0.0], [1.0, 1.0], [0.0, 0.0]]  # FP64 would give 1 for row 0
    rng = np.random.default_rng(2)
    left, right = rng.normal(size=(5, 4)).astype(np.float32), rng.normal(size=(4, 6)).astype(np.float32)
    got = markov_bias(torch.from_numpy(left), torch.from_numpy(right), torch.tensor([3]))[0]
    want = left[3, 0] * right[0]
    for j in range(1, 4):
        want = want + left[3, j] * right[j]
    assert got.tolist() == want.tolist()


BAD_LOGITS = [
    ([0.0, float("nan")], 1.0, "NAN_LOGIT"),
    ([0.0, float("inf")], 1.0, "POS_INF_LOGIT"),
    ([float("-inf"), float("-inf")], 1.0, "ALL_MASKED"),
    ([0.0, 1.0], 0.0, "BAD_TEMPERATURE"),
    ([0.0, 1.0], -1.0, "BAD_TEMPERATURE"),
    ([0.0, 1.0], float("nan"), "BAD_TEMPERATURE"),
    ([0.0, 1.0], float("inf"), "BAD_TEMPERATURE"),
    ([3e38, 0.0], 1e-3, "POS_INF_LOGIT"),
]


@pytest.mark.rules("R05")
@pytest.mark.parametrize("logits,temperature,code", BAD_LOGITS)
def test_bad_logits_are_refused(logits, temperature, code):
    with pytest.raises(CandidateError) as err:
        logits_to_weights(torch.tensor([logits]), temperature)
    assert err.value.code == code


@pytest.mark.rules("R05")
def test_a_nan_biased_logit_refuses_before_a_raw_plus_inf_logit():
    """z_0 = +inf + -inf is NaN, and the refusal tables put a NaN s_v before a +inf s_w: a +inf raw
    logit is not refused before the bias is added (proposal_chain/invalid_inputs/
    logit-plus-bias-inf-minus-inf, which CI's torch stage caught)."""
    logits = torch.tensor([[float("inf"), 0.0, 1.0]])
    bias = torch.tensor([[float("-inf"), float("inf"), 0.0]])
    with pytest.raises(CandidateError) as err:
        logits_to_weights(logits, 1.0, bias)
    assert err.value.code == "NAN_LOGIT"


BAD_WEIGHTS = [
    ([1.0, float("nan")], "NAN_WEIGHT"),
    ([1.0, float("inf")], "POS_INF_WEIGHT"),
    ([1.0, -0.5], "NEGATIVE_WEIGHT"),
    ([1.0, float("-inf")], "NEGATIVE_WEIGHT"),
    ([0.0, -0.0], "ZERO_MASS"),
]


@pytest.mark.rules("R05")
@pytest.mark.parametrize("weights,code", BAD_WEIGHTS)
def test_bad_weights_are_refused(weights, code):
    for call in (validate_weights, allocate_dense, lambda w: allocate_top_k(w, 1)):
        with pytest.raises(CandidateError) as err:
            call(torch.tensor([[0.5, 0.5], weights]))
        assert err.value.code == code


@pytest.mark.rules("R05", "R07")
def test_empty_rows_and_bad_support_sizes_are_refused():
    with pytest.raises(CandidateError, match="EMPTY_ROW"):
        allocate_dense(torch.zeros(2, 0))
    for k in (0, 4):
        with pytest.raises(CandidateError, match="BAD_SUPPORT_SIZE"):
            allocate_top_k(torch.ones(1, 3), k)


# ---------------------------------------------------------------- allocation (R03, R06, R07)

fp32_weight = st.one_of(st.just(0.0), st.floats(2.0**-100, 2.0**20, width=32), st.integers(1, 9).map(float))


@pytest.mark.rules("R03", "R06")
@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(fp32_weight, min_size=1, max_size=12), min_size=1, max_size=4).filter(
        lambda rows: all(any(w > 0 for w in r) for r in rows)
    )
)
def test_dense_allocation_matches_exact_largest_remainder(rows):
    for row in rows:
        got = allocate_dense(torch.tensor([row], dtype=torch.float32))[0].tolist()
        want, gap = exact_allocation(row)
        assert sum(got) == M
        assert all(c == 0 for c, w in zip(got, row) if w == 0)
        if gap > Fraction(1, 1 << 20):  # otherwise an FP64 near-tie may legitimately differ
            assert got == want
        else:
            assert all(abs(g - e) <= 1 for g, e in zip(got, want))


@pytest.mark.rules("R06")
@pytest.mark.parametrize("vocab", [1, 2, 3, 5, 7, 11, 63, 64])
def test_exact_ties_go_to_the_lowest_id(vocab):
    got = allocate_dense(torch.ones(2, vocab))
    want, _ = exact_allocation([1.0] * vocab)
    assert got.tolist() == [want, want]
    extra = M % vocab
    assert got[0, :extra].tolist() == [M // vocab + 1] * extra


@pytest.mark.rules("R07")
def test_top_k_selects_support_first_with_lowest_id_ties():
    weights = torch.tensor([[1.0, 3.0, 3.0, 3.0, 2.0], [0.0, 0.0, 5.0, 0.0, 0.0]])
    sparse = allocate_top_k(weights, 2)
    assert sparse.ids.tolist() == [[1, 2], [0, 2]]
    assert sparse.canonical() == [([1, 2], [M // 2, M // 2]), ([2], [M])]
    four = allocate_top_k(weights[:1], 4)
    assert four.ids.tolist() == [[1, 2, 3, 4]]
    assert four.counts[0].tolist() == exact_allocation([3.0, 3.0, 3.0, 2.0])[0]
    assert four.to_dense(5)[0, 0].item() == 0


@pytest.mark.rules("R07")
@FEW
@given(st.lists(fp32_weight, min_size=2, max_size=12).filter(lambda r: any(w > 0 for w in r)), st.integers(1, 12))
def test_top_k_matches_exact_reference(row, k):
    k = min(k, len(row))
    support = sorted(sorted(range(len(row)), key=lambda v: (-row[v], v))[:k])
    want, gap = exact_allocation([row[v] for v in support])
    sparse = allocate_top_k(torch.tensor([row]), k)
    assert sparse.ids[0].tolist() == support
    assert sum(sparse.counts[0].tolist()) == M
    if gap > Fraction(1, 1 << 20):
        assert sparse.counts[0].tolist() == want
    ids, counts = sparse.canonical()[0]
    assert all(c > 0 for c in counts) and ids == sorted(set(ids))


# ---------------------------------------------------------------- sampling (R08, R11)


@pytest.mark.rules("R08")
def test_proposal_sampling_boundaries():
    counts = torch.tensor([[3, 0, 5, M - 8]] * 7)
    u24 = torch.tensor([0, 2, 3, 7, 8, M - 1, M - 8])
    assert sample_counts(counts, u24).tolist() == [0, 0, 2, 2, 3, 3, 3]


@pytest.mark.rules("R11")
def test_mass_sampling_boundaries_and_zero_mass():
    mass = torch.tensor([[1.0, 0.0, 1.0]] * 4, dtype=torch.float64)
    u32 = torch.tensor([0, (1 << 31) - 1, 1 << 31, MASK])
    assert sample_mass(mass, u32).tolist() == [0, 0, 2, 2]
    with pytest.raises(CandidateError, match="ZERO_RESIDUAL_MASS"):
        sample_mass(torch.zeros(1, 3, dtype=torch.float64), torch.tensor([0]))


@pytest.mark.rules("R11")
def test_acceptance_boundary_and_zero_target():
    w_total = torch.tensor(2.0, dtype=torch.float64)  # p(x) = 1/2, q(x) = 1
    u = torch.tensor([0, (1 << 31) - 1, 1 << 31])
    assert accepts(u, torch.tensor(M), torch.tensor(1.0), w_total).tolist() == [True, True, False]
    zero = accepts(torch.tensor([0]), torch.tensor([M]), torch.tensor([0.0]), w_total)
    assert zero.tolist() == [False]  # p(x) = 0 is never accepted, not even at u32 = 0
    tiny = accepts(torch.tensor([0]), torch.tensor([M]), torch.tensor([1e-45]), w_total)
    assert tiny.tolist() == [True]


# ---------------------------------------------------------------- verification (R11, R23)


@pytest.mark.rules("R11", "R23")
@pytest.mark.parametrize("device", DEVICES)
@FEW
@given(st.integers(0, 2**32), st.integers(1, 4), st.integers(1, 5), st.integers(2, 6))
def test_verification_matches_exact_reference(device, case_seed, batch, depth, vocab):
    rng = random.Random(case_seed)
    seeds, gens, rounds, anchors, drafts, q, p = random_case(rng, batch, depth, vocab)
    stops = [[rng.randrange(vocab)] if rng.random() < 0.3 else [] for _ in range(batch)]
    budget = [rng.choice([None, 0, 1, 2, depth + 1]) for _ in range(batch)]
    result = verify_round(seeds, gens, rounds, anchors, *tensors(drafts, q, p, device), stops, budget)
    for b, outcome in enumerate(result.outcomes()):
        want = reference_round(seeds[b], gens[b], rounds[b], anchors[b], drafts[b], q[b], p[b], stops[b], budget[b])
        assert outcome_tuple(outcome) == want


@pytest.mark.rules("R11", "R04")
def test_zero_target_rejects_and_residual_covers_tokens_outside_sparse_support():
    # q: all mass on token 0; p gives token 0 nothing: reject at once, correct from {1, 2}.
    q = SparseCounts(torch.tensor([[[0]]]), torch.tensor([[[M]]]))
    p = torch.tensor([[[0.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]]])
    result = verify_round([9], [1], [2], [40], torch.tensor([[0]]), q, p)
    (outcome,) = result.outcomes()
    u_acc, u_cor = py_word0(9, 40, 2, 1, ACCEPT), py_word0(9, 40, 2, 1, CORRECTION)
    token = 1 if u_cor < 1 << 31 else 2
    assert outcome_tuple(outcome) == (
        0,
        [token],
        [(ACCEPT, 40, u_acc, "reject", 0), (CORRECTION, 40, u_cor, "correction", token)],
    )


def identical_case():
    """q = p exactly (weights equal to the counts), so every draft is accepted."""
    rng = random.Random(5)
    rows = [exact_allocation([rng.random() for _ in range(6)])[0] for _ in range(5)]
    drafts = [max(range(6), key=row.__getitem__) for row in rows]
    p = [[float(c) for c in row] for row in rows] + [[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]]
    return drafts, rows, p


@pytest.mark.rules("R11")
@pytest.mark.parametrize(
    "stops,budget,accepted,draw_count",
    [
        ([], None, 5, 6),
        ([], 6, 5, 6),
        ("x2", None, 2, 2),
        ([], 3, 3, 3),
        ([], 0, 0, 0),
        ([], 1, 1, 1),
    ],
)
def test_stop_tokens_and_budget_end_emission_without_further_draws(stops, budget, accepted, draw_count):
    drafts, rows, p = identical_case()
    stops = [drafts[1]] if stops == "x2" else stops
    assert drafts[1] not in drafts[:1]
    result = verify_round([3], [0], [0], [10], *tensors([drafts], [rows], [p], "cpu"), [stops], [budget])
    (outcome,) = result.outcomes()
    assert outcome.accepted == accepted and len(outcome.draws) == draw_count
    assert outcome.emitted[:accepted] == drafts[:accepted]
    if draw_count == 6:
        u = py_word0(3, 15, 0, 0, CORRECTION)
        bonus = exact_mass_token([Fraction(i) for i in range(1, 7)], u)
        assert outcome.draws[-1] == outcome.draws[-1].__class__(CORRECTION, 15, 0, u, "bonus", bonus)
        assert outcome.emitted == drafts + [bonus]
    else:
        assert all(d.domain == ACCEPT and d.decision == "accept" for d in outcome.draws)
        assert len(outcome.emitted) == accepted


@pytest.mark.rules("R11", "R27")
def test_batch_invariance_under_permutation_and_split():
    rng = random.Random(11)
    seeds, gens, rounds, anchors, drafts, q, p = random_case(rng, 4, 5, 5)
    whole = [
        outcome_tuple(o) for o in verify_round(seeds, gens, rounds, anchors, *tensors(drafts, q, p, "cpu")).outcomes()
    ]
    perm = [2, 0, 3, 1]
    pick = lambda xs: [xs[i] for i in perm]  # noqa: E731
    permuted = verify_round(
        pick(seeds), pick(gens), pick(rounds), pick(anchors), *tensors(pick(drafts), pick(q), pick(p), "cpu")
    ).outcomes()
    assert [outcome_tuple(o) for o in permuted] == pick(whole)
    for b in range(4):
        alone = verify_round(
            [seeds[b]], [gens[b]], [rounds[b]], [anchors[b]], *tensors([drafts[b]], [q[b]], [p[b]], "cpu")
        ).outcomes()
        assert outcome_tuple(alone[0]) == whole[b]


@pytest.mark.rules("R19")
def test_verification_refuses_malformed_q():
    drafts, rows, p = identical_case()
    d, q, pt = tensors([drafts], [rows], [p], "cpu")
    bad = q.clone()
    bad[0, 0, 0] += 1
    cases = [(d, bad, "WRONG_TOTAL_MASS"), (d.clamp(max=0) + 7, q, "TOKEN_OUT_OF_RANGE")]
    zero_at_token = q.clone()
    zero_at_token[0, 0] = 0
    zero_at_token[0, 0, (drafts[0] + 1) % 6] = M
    cases.append((d, zero_at_token, "ZERO_Q_AT_TOKEN"))
    cases.append(
        (d, SparseCounts(torch.tensor([[[2, 1]] * 5]), torch.tensor([[[1, M - 1]] * 5])), "BAD_SPARSE_SUPPORT")
    )
    for drafts_t, q_t, code in cases:
        with pytest.raises(CandidateError) as err:
            verify_round([3], [0], [0], [10], drafts_t, q_t, pt)
        assert err.value.code == code


# ---------------------------------------------------------------- proposal chain (R01, R08, R22)


def reference_chain(seed, gen, rnd, anchor, last, logits, temp, left, right, top_k):
    """Pure-Python proposal chain: numpy FP32 weights, exact allocation, Python Philox."""
    tokens, rows, prev = [], [], last
    for i, row in enumerate(logits):
        bias = left[prev, 0] * right[0]
        for j in range(1, left.shape[1]):
            bias = bias + left[prev, j] * right[j]
        s = (row + bias) / np.float32(temp)
        w = [float(np.float32(math.exp(float(v)))) for v in s - s.max()]
        support = list(range(len(w)))
        if top_k is not None:
            support = sorted(sorted(support, key=lambda v: (-w[v], v))[:top_k])
        counts, _ = exact_allocation([w[v] for v in support])
        u24 = py_word0(seed, anchor + i, rnd, gen, PROPOSAL) >> 8
        cumulative = np.cumsum(counts).tolist()
        prev = support[first_above(cumulative, u24)]
        tokens.append(prev)
        rows.append((support, counts))
    return tokens, rows


@pytest.mark.rules("R01", "R07", "R08", "R22")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("top_k", [None, 3])
def test_proposal_chain_matches_reference(device, top_k):
    gen = np.random.default_rng(7)
    batch, depth, vocab, rank = 4, 5, 8, 3
    logits = gen.normal(0, 2, size=(batch, depth, vocab)).astype(np.float32)
    left = gen.normal(0, 1, size=(vocab, rank)).astype(np.float32)
    right = gen.normal(0, 1, size=(rank, vocab)).astype(np.float32)
    seeds, gens, rounds = [1, 2**64 - 1, 77, 5], [4, 4, 5, 6], [8, 8, 8, 9]
    anchors, lasts, temps = [0, 9, MASK, 100], [0, 3, 7, 1], [1.0, 0.5, 2.0, 0.9]
    on = lambda a: torch.from_numpy(a).to(device)  # noqa: E731
    prop = propose(
        seeds, gens, rounds, anchors, lasts, on(logits), torch.tensor(temps), (on(left), on(right)), top_k=top_k
    )
    for b in range(batch):
        tokens, rows = reference_chain(
            seeds[b], gens[b], rounds[b], anchors[b], lasts[b], logits[b], np.float32(temps[b]), left, right, top_k
        )
        assert prop.tokens[b].tolist() == tokens
        for i, (support, counts) in enumerate(rows):
            if top_k is None:
                assert prop.counts is not None
                assert prop.counts[b, i].tolist() == counts
            else:
                assert prop.sparse is not None
                assert prop.sparse.ids[b, i].tolist() == support
                assert prop.sparse.counts[b, i].tolist() == counts
            position = anchors[b] + i
            assert prop.counters[b, i].tolist() == [position & MASK, rounds[b], gens[b], PROPOSAL << 24]
            assert prop.u24[b, i].item() == py_word0(seeds[b], position, rounds[b], gens[b], PROPOSAL) >> 8


@pytest.mark.rules("R03", "R06", "R07", "R29")
def test_production_vocabulary_rows():
    gen = torch.Generator().manual_seed(3)
    weights = torch.rand(2, 129280, generator=gen) ** 8
    weights[:, ::7] = 0.0
    counts = allocate_dense(weights)
    assert counts.sum(dim=1).tolist() == [M, M]
    assert int(counts[:, ::7].abs().sum()) == 0 and int(counts.min()) >= 0
    quota = weights.double() / weights.double().sum(dim=1, keepdim=True) * M
    assert bool(((counts - quota.floor().long()) >= 0).all() and ((counts - quota.floor().long()) <= 1).all())
    sparse = allocate_top_k(weights, 32)
    ids, top = sparse.canonical()[0]
    assert sum(top) == M and len(ids) <= 32 and ids == sorted(ids)
    assert min(weights[0, ids].tolist()) >= weights[0].sort(descending=True).values[31].item()


@pytest.mark.rules("R03", "R07", "R19")
def test_a_received_q_row_is_refused_unless_legal():
    t = lambda values: torch.tensor(values, dtype=torch.int64)  # noqa: E731
    assert legal_q_row(t([M - 5, 5, 0]), None, 3).tolist() == [M - 5, 5, 0]
    assert legal_q_row(t([M - 5, 5]), t([0, 2]), 3).tolist() == [M - 5, 0, 5]
    refused = [
        ((t([M, 0]), None, 3), "BAD_SHAPE"),
        ((t([M - 1, 0, 0]), None, 3), "WRONG_TOTAL_MASS"),
        ((t([M - 5, 5]), t([0]), 3), "BAD_SHAPE"),
        ((t([M - 5, 5]), t([0, 3]), 3), "TOKEN_OUT_OF_RANGE"),
        ((t([M - 5, 5]), t([-1, 2]), 3), "TOKEN_OUT_OF_RANGE"),
        ((t([M - 5, 5]), t([2, 0]), 3), "BAD_SPARSE_SUPPORT"),
        ((t([M - 5, 5]), t([1, 1]), 3), "BAD_SPARSE_SUPPORT"),
        ((t([M, 0]), t([0, 1]), 3), "BAD_SPARSE_SUPPORT"),
        ((t([M - 5, 4]), t([0, 1]), 3), "WRONG_TOTAL_MASS"),
    ]
    for args, code in refused:
        with pytest.raises(CandidateError) as refusal:
            legal_q_row(*args)
        assert refusal.value.code == code, args
