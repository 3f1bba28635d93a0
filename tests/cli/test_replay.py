"""The float replay helper (qconform/replay.py): the spec's draws served, exactly, to an engine whose
only randomness is ``rng()`` in [0, 1), in the order it asks, the correction after a rejection."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from qconform import sdk
from qconform.generators.corpus import default_vectors_dir
from qconform.generators.validation import iter_cases
from qconform.harness.adapter import PrecisionProfile
from qconform.harness.judging.judge import judge
from qconform.harness.verdicts import VerdictClass
from qconform.replay import (
    FloatStream,
    ReplayError,
    RoundIdentity,
    as_float,
    proposal_stream,
    replay_round,
    verification_stream,
)

M = 1 << 24


# --- a small engine that knows nothing of Philox: floats and one rng() -----------------------


def float_round(rng, drafts, q_rows, p_rows, stop_tokens=(), budget=None) -> tuple[int, list[int]]:
    """Standard speculative verification in float64 (the way many engines write it)."""
    emitted: list[int] = []

    def done() -> bool:
        return emitted[-1] in stop_tokens or (budget is not None and len(emitted) >= budget)

    for i, x in enumerate(drafts):
        if rng() < p_rows[i][x] / q_rows[i][x]:
            emitted.append(x)
            if done():
                return i + 1, emitted
            continue
        residual = np.maximum(p_rows[i] - q_rows[i], 0.0)
        emitted.append(int(np.searchsorted(np.cumsum(residual), rng() * residual.sum(), side="right")))
        return i, emitted
    bonus = p_rows[len(drafts)]
    emitted.append(int(np.searchsorted(np.cumsum(bonus), rng() * bonus.sum(), side="right")))
    return len(drafts), emitted


def q_floats(row: dict, vocab: int) -> np.ndarray:
    q = np.zeros(vocab)
    ids = row["ids"] if row["representation"] == "sparse" else np.arange(vocab)
    q[ids] = row["counts"] / M  # dyadic24: exact in float64
    return q


def p_floats(rows: dict) -> list[np.ndarray]:
    if "weights" in rows:
        return [w.astype(np.float64) / w.astype(np.float64).sum() for w in rows["weights"]]
    return [np.array([float(Fraction(v)) for v in row]) for row in rows["probabilities"]]


class FloatEngine(sdk.EngineAdapter):
    """verification_round through replay_round; its float arithmetic is declared as margins."""

    name = "float-engine"
    profile = PrecisionProfile(ratio_margin="1/1099511627776", residual_margin="1/1099511627776")
    replay = staticmethod(replay_round)

    def verification_round(self, case: dict) -> dict:
        vocab, answers = case["vocab"], []
        for r in case["requests"]:
            ident = RoundIdentity(sdk.request_seed(r), r["generation"], r["round"], r["anchor"])
            drafts = r["draft_tokens"]
            q_rows, p_rows = [q_floats(q, vocab) for q in r["q_rows"]], p_floats(r["p_rows"])
            stops, budget = set(r.get("stop_tokens", ())), r.get("budget")

            def engine_round(rng, drafts=drafts, q_rows=q_rows, p_rows=p_rows, stops=stops, budget=budget):
                return float_round(rng, drafts, q_rows, p_rows, stops, budget)

            (accepted, emitted), served = self.replay(engine_round, lambda result: result[0], ident, len(drafts))
            draws = []
            for d in served:
                if d.domain == "ACCEPT":
                    k = len(draws)
                    decision, token = ("accept" if k < accepted else "reject"), drafts[k]
                else:
                    decision, token = ("bonus" if accepted == len(drafts) else "correction"), emitted[-1]
                draws.append(
                    {
                        "domain": d.domain,
                        "position": d.position,
                        "draw_counter": d.draw_counter,
                        "u32": d.draw,
                        "decision": decision,
                        "token": token,
                    }
                )
            answers.append({"accepted": accepted, "emitted": emitted, "draws": draws})
        return {"requests": answers}


def valid_cases() -> list[dict]:
    return [
        {"id": c.id, "result": c.result, "input": c.input, "expected": c.expected}
        for c in iter_cases(default_vectors_dir(), ["verification_round"])
        if c.result == "valid"
    ]


def verdicts(engine: FloatEngine) -> dict[str, VerdictClass]:
    config, cases = engine.config(), valid_cases()
    outcomes = engine.run_batch("verification_round", [c["input"] for c in cases])
    return {c["id"]: judge(c, o, config).cls for c, o in zip(cases, outcomes)}


@pytest.mark.rules("R11", "R23")
def test_a_float_rng_engine_passes_verification_through_the_replay():
    found = verdicts(FloatEngine())
    assert set(found.values()) <= {VerdictClass.PASS, VerdictClass.PRECISION}, found
    assert list(found.values()).count(VerdictClass.PASS) >= len(found) - 5
    rejected = [
        c["id"]
        for c in valid_cases()
        for r in c["expected"]["requests"]
        if any(d["decision"] == "correction" for d in r["draws"])
    ]
    assert len(rejected) >= 10  # the correction-after-rejection path is exercised


@pytest.mark.rules("R23")
def test_serving_the_draws_in_schedule_order_fails():
    """Without the rejection handling (accept draws, then the bonus, in one pass) an engine that
    rejects gets an acceptance draw as its correction: the corpus sees it."""

    def one_pass(engine_round, accepted_of, ident, depth):
        stream = verification_stream(ident, depth, depth)
        return engine_round(stream), stream.served

    class OnePass(FloatEngine):
        replay = staticmethod(one_pass)

    found = verdicts(OnePass())
    assert list(found.values()).count(VerdictClass.FAIL) >= 10


# --- the streams ----------------------------------------------------------------------------


@pytest.mark.rules()
@pytest.mark.parametrize("draw, bits", [(0, 24), (M - 1, 24), (1, 32), ((1 << 32) - 1, 32), (0x6627E8D5, 32)])
def test_draws_are_served_exactly(draw, bits):
    value = as_float(draw, bits)
    assert Fraction(value) == Fraction(draw, 1 << bits) and 0 <= value < 1


@pytest.mark.rules()
def test_a_dyadic24_cdf_in_float64_is_exact():
    """q = c / 2^24 and its cumulative sums are exact in float64, so inverse-CDF sampling with a
    served u24 / 2^24 picks exactly the spec's token."""
    rng = np.random.default_rng(7)
    counts = rng.multinomial(M, np.full(300, 1 / 300))
    cdf = np.cumsum(counts / M)
    assert [Fraction(v) for v in cdf] == [Fraction(int(c), M) for c in np.cumsum(counts)]


@pytest.mark.rules()
def test_too_many_draws_and_bad_counts_are_refused():
    stream = FloatStream([("ACCEPT", 5, 0, 7, 32)])
    assert stream() == math.ldexp(7, -32) and stream.calls == 1
    with pytest.raises(ReplayError, match="asked for draw 2; this schedule holds 1"):
        stream()
    ident = RoundIdentity(1, 0, 0, (1 << 32) - 1)
    with pytest.raises(ReplayError, match="outside 0..2"):
        verification_stream(ident, 2, 3)
    with pytest.raises(ValueError):
        as_float(1 << 24, 24)


@pytest.mark.rules("R22", "R23")
def test_the_streams_follow_the_rng_abi_schedule():
    ident = RoundIdentity(99, 3, 4, (1 << 32) - 2)  # wraps past 2^32 - 1
    keys = sdk.round_draws(99, 3, 4, (1 << 32) - 2, 3)
    proposal = proposal_stream(ident, 3)
    assert [proposal() for _ in range(3)] == [as_float(int(u), 24) for u in keys["proposal"]]
    assert [d.position for d in proposal.served] == [(1 << 32) - 2, (1 << 32) - 1, 0]
    rejected_at_2 = verification_stream(ident, 3, 1)  # x_1 accepted, x_2 rejected: a_1, a_2, c_1
    values = [rejected_at_2() for _ in range(3)]
    assert values == [
        as_float(int(keys["accept"][0]), 32),
        as_float(int(keys["accept"][1]), 32),
        as_float(int(keys["correction"][1]), 32),
    ]
    assert [(d.domain, d.position) for d in rejected_at_2.served] == [
        ("ACCEPT", (1 << 32) - 2),
        ("ACCEPT", (1 << 32) - 1),
        ("CORRECTION", (1 << 32) - 1),
    ]
    full = verification_stream(ident, 3, 3)
    assert [full() for _ in range(4)][-1] == as_float(int(keys["correction"][3]), 32)


@pytest.mark.rules()
def test_a_nondeterministic_engine_is_named():
    calls = []

    def engine(rng):
        rng()
        calls.append(1)
        return len(calls) % 2  # 1 accepted, then 0 on the same draws

    with pytest.raises(ReplayError, match="not deterministic"):
        replay_round(engine, lambda accepted: accepted, RoundIdentity(1, 0, 0, 0), 2)
