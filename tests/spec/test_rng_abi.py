"""The RNG ABI (R22, R23, R24): key and counter layout, domains, positions, draws, refusals."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qconform.spec.errors import SpecError
from qconform.spec.philox import philox4x32
from qconform.spec.rng_abi import (
    Domain,
    DrawKey,
    RngIdentity,
    accept_key,
    correction_key,
    draw_words,
    proposal_draw,
    proposal_key,
    uniform32_draw,
    unseeded_request_seed,
)

pytestmark = pytest.mark.rules("R22", "R23", "R24")

U32 = st.integers(0, 2**32 - 1)
U64 = st.integers(0, 2**64 - 1)
DOMAINS = st.sampled_from(list(Domain))
DOC = Path(__file__).resolve().parents[2] / "docs" / "rng-abi.md"


def test_layout_of_one_key():
    key = DrawKey(seed=0x0123456789ABCDEF, generation=7, round=3, position=1000, domain=Domain.ACCEPT, draw_counter=5)
    assert key.key_words() == (0x89ABCDEF, 0x01234567)
    assert key.counter_words() == (1000, 3, 7, 0x02000005)
    out = philox4x32((1000, 3, 7, 0x02000005), (0x89ABCDEF, 0x01234567))
    assert draw_words(key) == out
    assert uniform32_draw(key) == out[0]
    assert proposal_draw(key) == out[0] >> 8


def test_domain_codes_match_the_normative_table():
    rows = re.findall(r"^\| `(PROPOSAL|ACCEPT|CORRECTION)` \| `0x([0-9a-fA-F]{2})` \|", DOC.read_text(), re.M)
    assert {name: int(code, 16) for name, code in rows} == {d.name: d.value for d in Domain}


def test_readout_rows_match_the_normative_table():
    text = DOC.read_text()
    assert "| `out[0] >> 8` (top 24 bits of word 0) |" in text
    assert text.count("| `out[0]` |") == 2


@settings(max_examples=60, deadline=None)
@given(seed=U64, generation=U32, round_id=U32, position=U32, domain=DOMAINS, counter=st.integers(0, 2**24 - 1))
def test_words_are_the_fields(seed, generation, round_id, position, domain, counter):
    key = DrawKey(seed, generation, round_id, position, domain, counter)
    lo, hi = key.key_words()
    assert lo | hi << 32 == seed
    c0, c1, c2, c3 = key.counter_words()
    assert (c0, c1, c2) == (position, round_id, generation)
    assert (c3 >> 24, c3 & 0xFFFFFF) == (domain.value, counter)


@settings(max_examples=40, deadline=None)
@given(seed=U64, generation=U32, round_id=U32, position=U32, counter=st.integers(0, 2**24 - 1))
def test_domains_never_share_a_draw(seed, generation, round_id, position, counter):
    # Philox is a bijection per key, so distinct counters give distinct blocks (R23).
    blocks = {draw_words(DrawKey(seed, generation, round_id, position, d, counter)) for d in Domain}
    assert len(blocks) == len(Domain)


@settings(max_examples=40, deadline=None)
@given(seed=U64, generation=U32, round_id=U32, anchor=U32, depth=st.integers(1, 8))
def test_round_positions(seed, generation, round_id, anchor, depth):
    ident = RngIdentity(seed, generation, round_id, anchor)
    for i in range(1, depth + 1):
        for key, domain in ((proposal_key(ident, i), Domain.PROPOSAL), (accept_key(ident, i), Domain.ACCEPT)):
            assert key == DrawKey(seed, generation, round_id, (anchor + i - 1) % 2**32, domain, 0)
    for j in range(depth + 1):
        assert correction_key(ident, j) == DrawKey(
            seed, generation, round_id, (anchor + j) % 2**32, Domain.CORRECTION, 0
        )


def test_positions_wrap_modulo_2_pow_32():
    ident = RngIdentity(1, 0, 0, 2**32 - 1)
    assert proposal_key(ident, 1).position == 2**32 - 1
    assert accept_key(ident, 2).position == 0
    assert correction_key(ident, 3).position == 2


def test_seed_high_word_changes_the_draw():
    assert uniform32_draw(DrawKey(1, 0, 0, 0, Domain.ACCEPT)) != uniform32_draw(
        DrawKey(1 | 1 << 32, 0, 0, 0, Domain.ACCEPT)
    )


@pytest.mark.parametrize(
    "fields",
    [
        dict(seed=2**64),
        dict(seed=-1),
        dict(generation=2**32),
        dict(round=2**32),
        dict(position=2**32),
        dict(position=-1),
        dict(draw_counter=2**24),
        dict(domain=4),
        dict(position=True),
    ],
)
def test_out_of_range_fields_are_refused(fields):
    base = dict(seed=1, generation=0, round=0, position=0, domain=Domain.ACCEPT, draw_counter=0)
    key = DrawKey(**{**base, **fields})
    with pytest.raises(SpecError) as err:
        draw_words(key)
    assert err.value.code == "BAD_RNG_FIELD"


@pytest.mark.parametrize("fields", [dict(seed=2**64), dict(generation=-1), dict(round=2**32), dict(anchor=2**32)])
def test_identity_refuses_out_of_range_fields(fields):
    with pytest.raises(SpecError) as err:
        RngIdentity(**{**dict(seed=1, generation=0, round=0, anchor=0), **fields})
    assert err.value.code == "BAD_RNG_FIELD"


def test_draft_index_starts_at_1():
    with pytest.raises(SpecError):
        accept_key(RngIdentity(1, 0, 0, 0), 0)
    with pytest.raises(SpecError):
        correction_key(RngIdentity(1, 0, 0, 0), -1)


def test_rng_abi_vectors_follow_the_table():
    from qconform.generators.encoding import decode_u64, decode_word
    from qconform.generators.families.rng_abi import FAMILY

    codes = {"PROPOSAL": 1, "ACCEPT": 2, "CORRECTION": 3}
    seen = set()
    for group in FAMILY.build():
        for case in group.tests:
            inp, out = case.input, case.expected
            seen.add(group.name)
            if group.name == "draw_keys":
                seed = decode_u64(inp["seed"])
                key = (seed & 0xFFFFFFFF, seed >> 32)
                word3 = codes[inp["domain"]] << 24 | inp["draw_counter"]
                counter = (inp["position"], inp["round"], inp["generation"], word3)
                words = philox4x32(counter, key)
                assert [decode_word(w) for w in out["key"]] == list(key)
                assert [decode_word(w) for w in out["counter"]] == list(counter)
                assert [decode_word(w) for w in out["output"]] == list(words)
                assert (out["u24"], out["u32"]) == (words[0] >> 8, words[0])
            elif group.name == "round_schedule":
                anchor, depth = inp["anchor"], inp["depth"]
                assert [d["position"] for d in out["proposal"]] == [(anchor + i) % 2**32 for i in range(depth)]
                assert [d["position"] for d in out["accept"]] == [(anchor + i) % 2**32 for i in range(depth)]
                assert [d["position"] for d in out["correction"]] == [(anchor + j) % 2**32 for j in range(depth + 1)]
            elif group.name in ("invalid_fields", "precedence"):  # one code: every field and pair refused alike
                assert case.result == "invalid" and out == {"error": "BAD_RNG_FIELD"}
            elif group.name == "unseeded_requests":
                digest = hashlib.sha256(b"qconform-unseeded-seed-v1\0" + inp["request_id"].encode()).digest()
                assert decode_u64(out["seed"]) == int.from_bytes(digest[:8], "little")
            assert FAMILY.solve is not None and FAMILY.solve(inp) == out
    assert seen == {"philox_kat", "draw_keys", "round_schedule", "invalid_fields", "unseeded_requests", "precedence"}


@pytest.mark.rules("R24")
def test_unseeded_request_seed_is_the_documented_hash():
    """docs/rng-abi.md, *Request seeds*: a known answer, byte order, tag, and distinct IDs apart."""
    assert unseeded_request_seed("req-a") == 8555414942521934284
    digest = hashlib.sha256(b"qconform-unseeded-seed-v1\x00req-a").digest()
    assert unseeded_request_seed("req-a") == int.from_bytes(digest[:8], "little") != int.from_bytes(digest[:8], "big")
    assert unseeded_request_seed("req-a") != int.from_bytes(hashlib.sha256(b"req-a").digest()[:8], "little")
    assert len({unseeded_request_seed(f"request-{n}") for n in range(1000)}) == 1000
    with pytest.raises(SpecError) as err:
        unseeded_request_seed("\ud800")
    assert err.value.code == "BAD_REQUEST_ID"
