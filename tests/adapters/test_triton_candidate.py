"""The Triton candidate's kernels against pure-Python references, its draws against
Random123 through ``tl.philox``, its native compile for sm_90, and its corpus run.

Without a CUDA device the kernels run in Triton's interpreter: TRITON_INTERPRET=1 is
set below before anything defines a kernel. The references here are written from
the design and docs/rng-abi.md; nothing imports the spec or the torch candidate.
"""

from __future__ import annotations

import bisect
import math
import os
import random
import subprocess
import sys
from collections import Counter
from fractions import Fraction
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # the modules themselves are imported below, each skipping the file when absent
    from numpy.typing import NDArray
    from torch import Tensor

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
triton = pytest.importorskip("triton")

import triton.language as tl  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from qconform.adapters import triton_candidate as xc  # noqa: E402
from qconform.adapters.triton_candidate import errors, ptx_audit, topk  # noqa: E402
from qconform.adapters.triton_candidate.launch import segments  # noqa: E402
from qconform.adapters.triton_candidate.philox import ACCEPT, CORRECTION, PROPOSAL  # noqa: E402

pytestmark = [
    pytest.mark.rules("R03", "R06", "R07", "R08", "R11", "R22", "R30", "R33", "R34"),
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),  # the interpreter's numpy overflows to inf, as IEEE says
]

M = 1 << 24
WORD = (1 << 32) - 1
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
FEW = settings(max_examples=12, deadline=None)


# ------------------------------------------------------------------ references


def philox_ref(counter: list[int], key: list[int]) -> list[int]:
    """Random123 philox4x32_R(10, counter, key) on Python integers."""
    x0, x1, x2, x3 = counter
    k0, k1 = key
    for _ in range(10):
        lo_hi0, lo_hi1 = 0xD2511F53 * x0, 0xCD9E8D57 * x2
        x0, x1, x2, x3 = (lo_hi1 >> 32) ^ x1 ^ k0, lo_hi1 & WORD, (lo_hi0 >> 32) ^ x3 ^ k1, lo_hi0 & WORD
        k0, k1 = (k0 + 0x9E3779B9) & WORD, (k1 + 0xBB67AE85) & WORD
    return [x0, x1, x2, x3]


def draw_ref(seed: int, position: int, round_id: int, generation: int, domain: int) -> int:
    """Output word 0 of the ABI draw (draw counter 0)."""
    return philox_ref([position & WORD, round_id, generation, domain << 24], [seed & WORD, seed >> 32])[0]


def largest_remainder_ref(weights: list) -> tuple[list[int], Fraction]:
    """Exact dyadic24 counts (floors, then one ticket each to the largest remainders, ties to
    the lowest ID) and the gap between the last remainder served and the first left out."""
    exact = [Fraction(w) for w in weights]
    quotas = [w * M / sum(exact) for w in exact]
    counts = [math.floor(q) for q in quotas]
    ranked = sorted(range(len(quotas)), key=lambda v: (counts[v] - quotas[v], v))
    tickets = M - sum(counts)
    for v in ranked[:tickets]:
        counts[v] += 1
    served = [quotas[v] - math.floor(quotas[v]) for v in ranked]
    gap = served[tickets - 1] - served[tickets] if 0 < tickets < len(served) else Fraction(1)
    return counts, gap


def top_k_ref(weights: list[float], k: int) -> list[int]:
    """The k largest weights' IDs (ties to the lowest ID), ascending."""
    return sorted(sorted(range(len(weights)), key=lambda v: (-weights[v], v))[:k])


def f32_weights_ref(logits, temperature, left=None, right=None, prev=None) -> NDArray:
    """FP32 weights in the design's order with numpy FP32 scalars (exp in FP64, rounded once)."""
    z = np.asarray(logits, dtype=np.float32)
    if left is not None:
        assert right is not None  # the factors come as a pair
        bias = np.zeros_like(z)
        for j in range(left.shape[1]):
            bias = (bias + (np.float32(left[prev, j]) * right[j]).astype(np.float32)).astype(np.float32)
        z = (z + bias).astype(np.float32)
    s = (z / np.float32(temperature)).astype(np.float32)
    d = (s - s[s != -np.inf].max()).astype(np.float32)
    return np.exp(d.astype(np.float64)).astype(np.float32)


def verify_ref(ident: xc.Identity, drafts, q_dense, p_weights, stops=(), budget=None):
    """Exact standard verification on rationals: (accepted, emitted, draws, smallest margin)."""
    p = [[Fraction(w) / sum(Fraction(x) for x in row) for w in row] for row in p_weights]
    emitted, draws, margin = [], [], Fraction(1)
    for i, x in enumerate(drafts):
        u = draw_ref(ident.seed, ident.anchor + i, ident.round_id, ident.generation, ACCEPT)
        ratio = p[i][x] / Fraction(q_dense[i][x], M)
        margin = min(margin, abs(Fraction(u, 1 << 32) - ratio))
        accepted = u * Fraction(q_dense[i][x], M) < p[i][x] * (1 << 32)
        draws.append((ACCEPT, (ident.anchor + i) & WORD, u, "accept" if accepted else "reject", x))
        if not accepted:
            break
        emitted.append(x)
        if x in stops or (budget is not None and len(emitted) >= budget):
            return len(emitted), emitted, draws, margin
    j = len(emitted)
    rows = p[j] if j == len(drafts) else [max(pv - Fraction(c, M), Fraction(0)) for pv, c in zip(p[j], q_dense[j])]
    u = draw_ref(ident.seed, ident.anchor + j, ident.round_id, ident.generation, CORRECTION)
    total, running, token = sum(rows), Fraction(0), None
    for v, r in enumerate(rows):
        edge = running * (1 << 32) / total
        running += r
        if token is None and running * (1 << 32) > u * total:
            token = v
            margin = min(margin, Fraction(u) - edge, running * (1 << 32) / total - u)
    draws.append((CORRECTION, (ident.anchor + j) & WORD, u, "bonus" if j == len(drafts) else "correction", token))
    return j, emitted + [token], draws, margin


def on_device(values, dtype) -> Tensor:
    return torch.as_tensor(np.asarray(values), dtype=dtype).to(DEVICE)


def refusal(call) -> str:
    with pytest.raises(xc.TritonCandidateError) as info:
        call()
    return info.value.code


# ------------------------------------------------------------------ RNG ABI through tl.philox


@triton.jit
def randint_kernel(out_ptr, seed, N: tl.constexpr):
    offsets = tl.arange(0, N)
    tl.store(out_ptr + offsets, tl.randint(seed, offsets).to(tl.int64))


@pytest.mark.rules("R22")
@pytest.mark.parametrize("seed", [0, 0x0123456789ABCDEF])
def test_tl_randint_is_philox_keyed_by_seed_low_then_high_word(seed):
    out = torch.zeros(4, dtype=torch.int64, device=DEVICE)
    randint_kernel[(1,)](out, seed, N=4)
    words = [w & WORD for w in out.tolist()]
    assert words == [philox_ref([offset, 0, 0, 0], [seed & WORD, seed >> 32])[0] for offset in range(4)]
    if seed == 0:
        assert words[0] == 0x6627E8D5  # word 0 of Random123's all-zero philox4x32 10 line


KAT = [  # Random123 kat_vectors, philox4x32 10: counter, key, output
    ([0] * 4, [0] * 2, [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
    ([WORD] * 4, [WORD] * 2, [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
    (
        [0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344],
        [0xA4093822, 0x299F31D0],
        [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1],
    ),
]


@pytest.mark.rules("R22", "R24")
def test_philox_blocks_pass_random123_and_match_the_reference():
    rng = random.Random(5)
    cases = KAT + [
        ([rng.getrandbits(32) for _ in range(4)], [rng.getrandbits(32) for _ in range(2)], None) for _ in range(40)
    ]
    counters, keys = on_device([c for c, _, _ in cases], torch.int64), on_device([k for _, k, _ in cases], torch.int64)
    out = xc.philox_blocks(counters, keys).tolist()
    for (counter, key, known), got in zip(cases, out):
        assert got == philox_ref(counter, key)
        assert known is None or got == known


@pytest.mark.rules("R14", "R22", "R23", "R24")
def test_abi_draws_build_the_counter_in_the_kernel_and_refuse_wide_fields():
    rng = random.Random(9)
    fields = [
        (
            rng.getrandbits(64),
            rng.getrandbits(32),
            rng.getrandbits(32),
            rng.getrandbits(32),
            rng.choice([PROPOSAL, ACCEPT, CORRECTION]),
            rng.getrandbits(24),
        )
        for _ in range(30)
    ]
    for (seed, pos, rnd, gen, dom, ctr), row in zip(fields, xc.abi_draws(fields, DEVICE).tolist()):
        counter = [pos, rnd, gen, dom << 24 | ctr]
        assert row == counter + philox_ref(counter, [seed & WORD, seed >> 32])
    for bad in [
        (0, 1 << 32, 0, 0, ACCEPT, 0),
        (0, 0, 0, 0, ACCEPT, 1 << 24),
        (0, 0, 0, 0, 4, 0),
        (1 << 64, 0, 0, 0, ACCEPT, 0),
        (0, 0, -1, 0, ACCEPT, 0),
    ]:
        assert refusal(lambda: xc.abi_draws([bad], DEVICE)) == "BAD_RNG_FIELD"


# ------------------------------------------------------------------ selection, allocation, top-k


@pytest.mark.rules("R06", "R07")
@FEW
@given(st.lists(st.lists(st.integers(0, 6), min_size=1, max_size=40), min_size=1, max_size=3), st.data())
def test_radix_selection_takes_the_largest_keys_with_ties_to_the_lowest_index(rows, data):
    keys = [key << 61 | key for row in rows for key in row]  # ties; digits in the top and bottom bytes
    stored = [key - (1 << 64) if key >> 63 else key for key in keys]  # uint64 keys in int64 storage
    wants = [data.draw(st.integers(0, len(row))) for row in rows]
    starts = [sum(len(r) for r in rows[:i]) for i in range(len(rows))]
    seg_starts, lengths = segments(starts, [len(r) for r in rows], DEVICE)
    out_starts = on_device([sum(wants[:i]) for i in range(len(rows))], torch.int64)
    _, ids = xc.select_compact(
        on_device(stored, torch.int64),
        None,
        seg_starts,
        lengths,
        max(len(r) for r in rows),
        torch.zeros_like(lengths),
        on_device(wants, torch.int64),
        out_starts,
        max(sum(wants), 1),
    )
    got = ids.tolist()
    for row, want, at in zip(rows, wants, out_starts.tolist()):
        assert got[at : at + want] == top_k_ref(row, want)


@pytest.mark.rules("R03", "R06")
@FEW
@given(st.lists(st.one_of(st.just(0.0), st.floats(2.0**-20, 2.0**20, width=32)), min_size=1, max_size=48))
def test_dense_counts_are_the_exact_largest_remainder_away_from_near_ties(weights):
    if not any(weights):
        weights[0] = 1.0
    flags = torch.zeros(1, dtype=torch.int32, device=DEVICE)
    counts = xc.allocate_rows(on_device([weights], torch.float32), flags)[0].tolist()
    exact, gap = largest_remainder_ref(weights)
    assert flags.tolist() == [0] and sum(counts) == M
    if gap > Fraction(1, 1 << 20):  # far beyond FP64's quota error at these sizes
        assert counts == exact
    assert all(abs(c - e) <= 1 for c, e in zip(counts, exact))


@pytest.mark.rules("R04", "R06")
@pytest.mark.parametrize("vocab", [3, 7, 1000, 129280])
def test_uniform_rows_give_the_spare_tickets_to_the_lowest_ids(vocab):
    flags = torch.zeros(1, dtype=torch.int32, device=DEVICE)
    counts = xc.allocate_rows(torch.full((1, vocab), 0.25, device=DEVICE), flags)[0]
    spare = M % vocab
    assert counts[:spare].tolist() == [M // vocab + 1] * spare
    assert counts[spare:].tolist() == [M // vocab] * (vocab - spare)


@pytest.mark.rules("R06")
def test_an_fp64_sum_that_overflows_is_refused_not_clipped():
    flags = torch.zeros(1, dtype=torch.int32, device=DEVICE)
    xc.allocate_rows(on_device([[1.7e308, 1.7e308, 1.0]], torch.float64), flags)
    assert refusal(lambda: xc.raise_flags(flags, "row")) == "INCONSISTENT_ALLOCATION"


@pytest.mark.rules("R07", "R29", "R30")
@FEW
@given(st.lists(st.sampled_from([0.0, -0.0, 0.5, 1.0, 2.0, 3.0]), min_size=1, max_size=30), st.data())
def test_top_k_is_the_merge_of_shard_local_top_k(weights, data):
    k = data.draw(st.integers(1, len(weights)))
    with pytest.MonkeyPatch.context() as patch:  # shards of 4 tokens: every row crosses several
        patch.setattr(topk, "INTERPRETER_SHARD", 4)
        patch.setattr(topk, "GPU_SHARD", 4)
        ids, support_weights = xc.top_k_support(on_device([weights], torch.float32), k)
    assert ids[0].tolist() == top_k_ref([abs(w) for w in weights], k)
    assert support_weights[0].tolist() == [abs(weights[v]) for v in ids[0].tolist()]


# ------------------------------------------------------------------ weights and refusals


@pytest.mark.rules("R05")
def test_weights_follow_the_fp32_order_with_the_markov_bias_accumulated_left_to_right():
    gen = np.random.default_rng(4)
    vocab, rank = 40, 3
    logits = (gen.standard_normal((2, vocab)) * 4).astype(np.float32)
    logits[0, :5] = -np.inf
    left = gen.standard_normal((vocab, rank)).astype(np.float32)
    right = gen.standard_normal((rank, vocab)).astype(np.float32)
    prev, temperature = [3, 17], np.float32(0.7)
    got, flags = xc.logits_to_weights(
        on_device(logits, torch.float32),
        on_device([temperature] * 2, torch.float32),
        (on_device(left, torch.float32), on_device(right, torch.float32)),
        on_device(prev, torch.int64),
    )
    assert flags.tolist() == [0, 0]
    for row in range(2):
        want = f32_weights_ref(logits[row], temperature, left, right, prev[row])
        assert got[row].cpu().numpy().view(np.uint32).tolist() == want.view(np.uint32).tolist()
    plain, _ = xc.logits_to_weights(on_device(logits[:1], torch.float32), on_device([1.0], torch.float32))
    assert plain[0].cpu().numpy().view(np.uint32).tolist() == f32_weights_ref(logits[0], 1.0).view(np.uint32).tolist()


@pytest.mark.rules("R05")
@pytest.mark.parametrize(
    "row, code",
    [
        ([1.0, float("nan"), -1.0], "NAN_WEIGHT"),
        ([-1.0, float("inf")], "POS_INF_WEIGHT"),
        ([1.0, -1e-45], "NEGATIVE_WEIGHT"),
        ([float("-inf"), 1.0], "NEGATIVE_WEIGHT"),
        ([0.0, -0.0], "ZERO_MASS"),
    ],
)
def test_weight_rows_are_refused_by_class(row, code):
    assert refusal(lambda: xc.raise_flags(xc.weight_scan(on_device([row], torch.float32))[0], "w")) == code


@pytest.mark.rules("R05")
@pytest.mark.parametrize(
    "row, temperature, code",
    [
        ([float("inf"), float("nan")], 1.0, "NAN_LOGIT"),
        ([1.0, float("inf")], 1.0, "POS_INF_LOGIT"),
        ([3e38, 1.0], 0.5, "POS_INF_LOGIT"),
        ([float("-inf")] * 3, 1.0, "ALL_MASKED"),
        ([1.0], 0.0, "BAD_TEMPERATURE"),
        ([1.0], float("nan"), "BAD_TEMPERATURE"),
    ],
)
def test_logit_rows_are_refused_by_class(row, temperature, code):
    def run():
        w, flags = xc.logits_to_weights(on_device([row], torch.float32), on_device([temperature], torch.float32))
        xc.raise_flags(flags, "logits")

    assert refusal(run) == code


# ------------------------------------------------------------------ sampling and lookup


@pytest.mark.rules("R04", "R08")
@pytest.mark.parametrize("sparse", [False, True])
def test_each_draw_picks_the_first_cumulative_count_above_it(sparse):
    counts = [0, 5, 0, 1, M - 7, 0, 1, 0]
    ids = [2, 9, 11, 40, 41, 57, 60, 63]
    cumulative = [sum(counts[: v + 1]) for v in range(len(counts))]
    draws = sorted({0, M - 1} | {c - 1 for c in cumulative if c} | {c for c in cumulative if c < M})
    live = [v for v, c in enumerate(counts) if c or not sparse]  # a sparse row holds positive counts only
    row = (
        on_device([ids[v] for v in live], torch.int64) if sparse else None,
        on_device([counts[v] for v in live], torch.int64),
    )
    q = xc.QRows.build(64 if sparse else len(counts), [row], DEVICE)
    got = xc.sample(q, on_device([draws], torch.int64))[0].tolist()
    want = [bisect.bisect_right(cumulative, u) for u in draws]
    assert got == ([ids[v] for v in want] if sparse else want)


@pytest.mark.rules("R03", "R19")
@pytest.mark.parametrize(
    "ids, counts, code",
    [
        ([3, 1], [M - 1, 1], "BAD_SPARSE_SUPPORT"),
        ([1, 1], [M - 1, 1], "BAD_SPARSE_SUPPORT"),
        ([1, 2], [M, 0], "BAD_SPARSE_SUPPORT"),
        ([1, 8], [M - 1, 1], "TOKEN_OUT_OF_RANGE"),
        ([-1, 3], [M - 1, 1], "TOKEN_OUT_OF_RANGE"),
        ([9, 2], [M - 1, 1], "TOKEN_OUT_OF_RANGE"),  # the first problem in ID order decides
        ([1, 2], [M - 1, 2], "WRONG_TOTAL_MASS"),
        (None, [M - 1, 0, 0, 0, 0, 0, 0, 0], "WRONG_TOTAL_MASS"),
    ],
)
def test_illegal_q_rows_are_refused(ids, counts, code):
    row = (None if ids is None else on_device(ids, torch.int64), on_device(counts, torch.int64))
    assert refusal(xc.QRows.build(8, [row], DEVICE).check) == code


@pytest.mark.rules("R04", "R07", "R33")
def test_sparse_lookup_by_global_id_answers_every_token():
    rng = random.Random(2)
    vocab = 300
    rows = []
    for size in (1, 5, 32, 64):
        ids = sorted(rng.sample(range(vocab), size))
        rows.append((ids, [rng.randrange(1, 100) for _ in ids]))
    dense = [rng.randrange(0, 9) for _ in range(vocab)]
    q_rows: list[tuple[Tensor | None, Tensor]] = [
        (on_device(i, torch.int64), on_device(c, torch.int64)) for i, c in rows
    ]
    q = xc.QRows.build(vocab, q_rows + [(None, on_device(dense, torch.int64))], DEVICE)
    queries = [(r, v) for r in range(len(rows) + 1) for v in [-1, *range(vocab), vocab]]
    counts, flags = xc.lookup_counts(
        q, on_device([r for r, _ in queries], torch.int64), on_device([v for _, v in queries], torch.int64)
    )
    tables = [dict(zip(i, c)) for i, c in rows] + [dict(enumerate(dense))]
    assert counts.tolist() == [tables[r].get(v, 0) for r, v in queries]
    assert [f != 0 for f in flags.tolist()] == [not 0 <= v < vocab for _, v in queries]


# ------------------------------------------------------------------ verification


def random_round(rng: random.Random, depth: int, vocab: int):
    """One request: identity, drafts with q > 0, q rows (dense or sparse), FP32 p weights."""
    ident = xc.Identity(rng.getrandbits(64), rng.getrandbits(32), rng.getrandbits(32), rng.getrandbits(32))
    q_rows, q_dense, drafts = [], [], []
    for _ in range(depth):
        weights = [float(np.float32(rng.random())) if rng.random() < 0.6 else 0.0 for _ in range(vocab)]
        weights[rng.randrange(vocab)] = 2.0
        counts, _ = largest_remainder_ref(weights)
        live = [v for v in range(vocab) if counts[v]]
        q_dense.append(counts)
        drafts.append(rng.choice(live))
        sparse = rng.random() < 0.5
        q_rows.append(
            (
                on_device(live, torch.int64) if sparse else None,
                on_device([counts[v] for v in live] if sparse else counts, torch.int64),
            )
        )
    p = [
        [float(np.float32(rng.random() ** 2)) if rng.random() < 0.8 else 0.0 for _ in range(vocab)]
        for _ in range(depth + 1)
    ]
    for row in p:
        row[rng.randrange(vocab)] = 0.25
    return ident, drafts, q_rows, q_dense, p


def run_batch(requests, vocab, stops=None, budgets=None):
    stops = stops or [[] for _ in requests]
    budgets = budgets or [None for _ in requests]
    q = xc.QRows.build(vocab, [row for r in requests for row in r[2]], DEVICE)
    p = on_device([r[4] for r in requests], torch.float64)
    drafts = on_device([r[1] for r in requests], torch.int64)
    return xc.verify_batch([r[0] for r in requests], drafts, q, p, stops, budgets)


@pytest.mark.rules("R10", "R11", "R23", "R33")
@pytest.mark.parametrize("case_seed", range(6))
def test_verification_matches_the_exact_rule_draw_for_draw(case_seed):
    rng = random.Random(case_seed)
    vocab, depth = rng.choice([5, 9, 16]), rng.randrange(1, 5)
    requests = [random_round(rng, depth, vocab) for _ in range(rng.randrange(1, 5))]
    for request, got in zip(requests, run_batch(requests, vocab)):
        accepted, emitted, draws, margin = verify_ref(request[0], request[1], request[3], request[4])
        if margin < Fraction(1, 1 << 40):  # an FP64 divergence there is precision, not a bug
            continue
        assert (got.accepted, got.emitted) == (accepted, emitted)
        assert [tuple(d) for d in got.draws] == draws


@pytest.mark.rules("R22", "R27")
def test_a_request_verifies_the_same_alone_and_at_any_batch_position():
    rng = random.Random(11)
    requests = [random_round(rng, 3, 12) for _ in range(4)]
    alone = run_batch(requests[2:3], 12)[0]
    assert run_batch(requests, 12)[2] == alone
    assert run_batch(requests[::-1], 12)[1] == alone


@pytest.mark.rules("R11")
@pytest.mark.parametrize(
    "stops, budget, emitted_drafts, bonus",
    [
        ([], None, 4, True),
        ([1], None, 2, False),
        ([], 3, 3, False),
        ([], 4, 4, False),
        ([], 5, 4, True),
    ],
)
def test_stop_tokens_and_budget_end_emission_without_another_draw(stops, budget, emitted_drafts, bonus):
    vocab, drafts = 4, [0, 1, 2, 3]
    counts = [M // 4] * 4  # q = p: every draft is accepted
    request = (xc.Identity(7, 1, 2, 3), drafts, [(None, on_device(counts, torch.int64))] * 4, None, [[1.0] * vocab] * 5)
    got = run_batch([request], vocab, [stops], [budget])[0]
    assert got.accepted == emitted_drafts and got.emitted[:emitted_drafts] == drafts[:emitted_drafts]
    assert len(got.draws) == emitted_drafts + bonus and len(got.emitted) == emitted_drafts + bonus
    assert (got.draws[-1].decision == "bonus") == bonus


@pytest.mark.rules("R11", "R19", "R27")
def test_rounds_that_must_not_draw_are_refused():
    ident, drafts, q_rows, q_dense, p = random_round(random.Random(3), 1, 6)
    zero = [v for v in range(6) if q_dense[0][v] == 0]
    if zero:
        assert refusal(lambda: run_batch([(ident, zero[:1], q_rows, q_dense, p)], 6)) == "ZERO_Q_AT_TOKEN"
    assert refusal(lambda: run_batch([(ident, [6], q_rows, q_dense, p)], 6)) == "TOKEN_OUT_OF_RANGE"
    negative = [[-1.0] + row[1:] for row in p]
    assert refusal(lambda: run_batch([(ident, drafts, q_rows, q_dense, negative)], 6)) == "BAD_TARGET_ROW"
    assert refusal(lambda: run_batch([(ident, drafts, q_rows, q_dense, p)] * 5, 6)) == "BAD_SHAPE"


# ------------------------------------------------------------------ proposal chain


@pytest.mark.rules("R01", "R05", "R06", "R07", "R08", "R22")
@pytest.mark.parametrize("top_k", [None, 5])
def test_proposal_chain_conditions_each_row_on_the_sampled_token(top_k):
    gen = np.random.default_rng(8)
    batch, depth, vocab, rank = 2, 4, 24, 2
    logits = (gen.standard_normal((batch, depth, vocab)) * 3).astype(np.float32)
    left = (gen.standard_normal((vocab, rank)) * 2).astype(np.float32)
    right = (gen.standard_normal((rank, vocab)) * 2).astype(np.float32)
    seeds, gens, rounds, anchors, lasts = [3, (1 << 40) + 9], [1, WORD], [4, 5], [WORD - 1, 100], [0, 23]
    result = xc.propose(
        seeds,
        gens,
        rounds,
        anchors,
        lasts,
        on_device(logits, torch.float32),
        0.75,
        (on_device(left, torch.float32), on_device(right, torch.float32)),
        top_k,
    )
    for b in range(batch):
        prev = lasts[b]
        for i in range(depth):
            weights = f32_weights_ref(logits[b, i], np.float32(0.75), left, right, prev).astype(np.float64).tolist()
            support = list(range(vocab)) if top_k is None else top_k_ref(weights, top_k)
            counts, gap = largest_remainder_ref([weights[v] for v in support])
            ids, got = result.rows[b][i]
            assert (list(range(vocab)) if ids is None else ids.tolist()) == support
            assert gap < Fraction(1, 1 << 20) or got.tolist() == counts
            u24 = draw_ref(seeds[b], anchors[b] + i, rounds[b], gens[b], PROPOSAL) >> 8
            assert result.u24[b, i].item() == u24
            assert result.counters[b, i].tolist() == [(anchors[b] + i) & WORD, rounds[b], gens[b], PROPOSAL << 24]
            cumulative = np.cumsum(got.tolist()).tolist()
            prev = support[bisect.bisect_right(cumulative, u24)]
            assert result.tokens[b, i].item() == prev


# ------------------------------------------------------------------ native compile, harness run


@pytest.mark.rules("R05", "R06", "R34")
def test_every_kernel_compiles_for_sm90_with_correctly_rounded_fp32():
    """No GPU needed: Triton's bundled ptxas compiles each kernel; the PTX audit finds no
    approximate division or exp, no contracted FP32 multiply-add, no flushed subnormals."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, "-m", "qconform.adapters.triton_candidate.ptx_audit", "90"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(": ok") == len(done.stdout.strip().splitlines()) == len(ptx_audit.KERNELS)


def test_flag_constants_follow_the_priority_order():
    assert [getattr(errors, code).value for code in errors.FLAG_ORDER] == [
        1 << i for i in range(len(errors.FLAG_ORDER))
    ]
    assert errors.first_flag([0, 1 << 3 | 1 << 0]) == (1, "NAN_WEIGHT")


@pytest.mark.rules("R03", "R06", "R07", "R08", "R11", "R22")
def test_the_adapter_passes_the_corpus_through_the_harness():
    """The first three cases of every group of every family the adapter declares, through
    the real path (host child process, shim protocol, judge) with the checkout's
    expectations. The CI conformance run covers every case, V = 129280 included
    (docs/triton.md); this keeps the unit test short."""
    from qconform.cli.arguments import checkout_expectations
    from qconform.generators.corpus import default_vectors_dir
    from qconform.generators.validation import iter_cases
    from qconform.harness.expectations import Expectations
    from qconform.harness.run.case_runner import CaseRunner, open_client

    path = checkout_expectations("triton")
    runner = CaseRunner(lambda: open_client("triton", DEVICE, 300.0), Expectations.load(path) if path else None)
    verdicts, seen = [], Counter()
    try:
        client = runner.client()
        assert client is not None, runner.start_failure
        families = client.config.capabilities.families
        for family in families:
            cases = []
            for c in iter_cases(default_vectors_dir(), [family]):
                seen[c.family, c.group] += 1
                if c.group != "production_vocab" and seen[c.family, c.group] <= 3:
                    cases.append(
                        {
                            "id": c.id,
                            "family": c.family,
                            "result": c.result,
                            "flags": list(c.flags),
                            "input": c.input,
                            "expected": c.expected,
                        }
                    )
            verdicts += runner.run(cases)
    finally:
        runner.close()
    assert len(families) == 8 and len(verdicts) > 80
    assert [v.line() for v in verdicts if v.unexpected] == []
    assert {v.cls.value for v in verdicts} == {"pass", "precision"}  # the FP64 near-tie flips are precision
