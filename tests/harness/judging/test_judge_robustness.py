"""A malformed answer of any shape that reaches a judge gives ``fail`` or ``error`` naming the
problem, never an exception out of the judge (issue #21).

A structure-aware fuzzer: hypothesis takes committed cases of every family (valid and
invalid) and derives answers from their ``expected`` objects: one edit at a random place of
the tree (a key dropped or added, a value of another JSON type, a list cut short or
reversed, a typed blob with a wrong dtype, shape or base64 or in the raw form of a binary
reply with bytes of the wrong length or type, its values reversed or
overflowing), or an answer of a random JSON shape. Each goes through
:func:`qconform.harness.judging.judge.judge` with a profile that declares every margin, so
that the precision paths of the comparators run too. A family whose comparator has a
partial-injection mode (docs/harness.md, "Partial injection") is fuzzed in that mode too, from
its answer as a partial adapter reports it.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from harness_stubs import distinct_cases, first_cases
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qconform.generators.registry import family_names
from qconform.harness.adapter import AdapterConfig, Capabilities, PrecisionProfile
from qconform.harness.judging.judge import judge, partial_mode
from qconform.harness.verdicts import VerdictClass

#: cases per family and result: enough to reach every comparator's branches, few enough to load fast
PER_RESULT = 3
PROFILE = PrecisionProfile(
    fp64_allocation=True, exp_ulp="2/1", ratio_margin="1/1024", residual_margin="1/1024", sum_rel="1/1024"
)
CONFIG = AdapterConfig("fuzz", Capabilities(families=family_names()), PROFILE)
JUDGED = {VerdictClass.PASS, VerdictClass.FAIL, VerdictClass.ERROR, VerdictClass.PRECISION}


def sampled_cases() -> dict[str, list[dict]]:
    """Up to PER_RESULT committed cases of each result (valid, invalid, acceptable) per family (the
    committed files, read once: validating the whole corpus again would triple this module's cost,
    which every judge mutant pays under ``qconform adequacy --judges``)."""
    return {family: first_cases(family, PER_RESULT) for family in family_names()}


CASES = sampled_cases()

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=6)
    | st.sampled_from(["1/0", "0/1", "-1/3", "x/y", "0x", "0xffffffff", "NaN"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
DTYPES = ["f32", "f64", "i32", "u32", "u64", "u8", "i8", "bogus"]


def places(value: Any, path: tuple = ()) -> list[tuple]:
    """Every path into a JSON tree (the root included)."""
    out = [path]
    if isinstance(value, dict):
        for key, child in value.items():
            out += places(child, path + (key,))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            out += places(child, path + (index,))
    return out


def edited(tree: Any, path: tuple, edit) -> Any:
    if not path:
        return edit(tree)
    copy = json.loads(json.dumps(tree))
    parent = copy
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = edit(parent[path[-1]])
    return copy


def blob_edits(draw, blob: dict) -> dict:
    """A typed blob made wrong: another dtype or shape, broken base64, raw bytes of the wrong length
    or type, values reversed or overflowing."""
    data = base64.b64decode(blob["b64"])
    kind = draw(st.sampled_from(["dtype", "shape", "b64", "raw", "reverse", "overflow", "short"]))
    if kind == "dtype":
        return {**blob, "dtype": draw(st.sampled_from(DTYPES))}
    if kind == "shape":
        return {**blob, "shape": draw(st.lists(st.integers(-1, 9), max_size=3))}
    if kind == "raw":  # the raw form of a binary reply (docs/adapters.md, "Raw blobs"), right or wrong
        raw = draw(st.sampled_from([data, data[:-1], data + b"\0", bytearray(data), blob["b64"], 7, None]))
        return {"dtype": blob["dtype"], "shape": blob["shape"], "raw": raw}
    if kind == "b64":
        return {**blob, "b64": draw(st.sampled_from(["", "!!!", "AAA", "AAAA", blob["b64"][:-4]]))}
    width = {"u8": 1, "f64": 8, "u64": 8}.get(blob["dtype"], 4)
    words = [data[i : i + width] for i in range(0, len(data), width)]
    if kind == "reverse":  # IDs out of order, counts moved to other tokens
        return {**blob, "b64": base64.b64encode(b"".join(reversed(words))).decode()}
    if kind == "overflow":
        return {**blob, "b64": base64.b64encode(b"\xff" * len(data)).decode()}
    return {**blob, "b64": base64.b64encode(b"".join(words[:-1])).decode(), "shape": blob.get("shape", [])}


@st.composite
def malformed(draw, expected: dict) -> Any:
    """One malformed answer derived from ``expected`` (or a random JSON shape)."""
    if draw(st.integers(0, 9)) == 0:
        return draw(JSON)
    path = draw(st.sampled_from(places(expected)))
    kind = draw(st.sampled_from(["replace", "drop", "add", "list", "blob"]))

    def edit(value: Any) -> Any:
        if kind == "blob" and isinstance(value, dict) and {"dtype", "b64"} <= set(value):
            return blob_edits(draw, value)
        if kind == "drop" and isinstance(value, dict) and value:
            key = draw(st.sampled_from(sorted(value)))
            return {k: v for k, v in value.items() if k != key}
        if kind == "add" and isinstance(value, dict):
            return {**value, draw(st.text(min_size=1, max_size=6)): draw(JSON)}
        if kind == "list" and isinstance(value, list):
            return draw(st.sampled_from([value[::-1], value[:-1], value + value[-1:], []]))
        return draw(JSON)

    return edited(expected, path, edit)


@pytest.mark.parametrize("family", sorted(CASES))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_malformed_answer_is_judged_never_raised(family: str, data) -> None:
    case = data.draw(st.sampled_from(CASES[family]), label="case")
    answer = data.draw(malformed(case["expected"]), label="answer")
    verdict = judge(case, answer, CONFIG)  # an exception here is the bug
    assert verdict.cls in JUDGED
    if verdict.cls in (VerdictClass.FAIL, VerdictClass.ERROR):
        assert verdict.message, verdict  # it names the problem


#: the families judged in a partial-injection mode too, each with only its required domain injected
PARTIAL = {family: mode for family in sorted(CASES) if (mode := partial_mode(family)) is not None}


#: valid cases per partial family: the first of each pattern of its requests' decisions, so that
#: every way a round ends (rejections at each depth, full acceptance, stops) is fuzzed
PARTIAL_CASES = 12


def decision_pattern(case: dict) -> tuple | None:
    """The decisions of each request of a valid case (None for another result)."""
    if case["result"] != "valid":
        return None
    return tuple(tuple(d["decision"] for d in request["draws"]) for request in case["expected"]["requests"])


def partial_cases(family: str) -> list[dict]:
    return distinct_cases(family, decision_pattern, PARTIAL_CASES)


def partial_config(family: str) -> AdapterConfig:
    injected = ((family, (PARTIAL[family].required,)),)
    return AdapterConfig("fuzz-partial", Capabilities(families=family_names(), injected_domains=injected), PROFILE)


def partial_answer(value: Any, injected: tuple[str, ...]) -> Any:
    """``value`` as a partial adapter reports it: without the draws (objects with a ``domain``) of
    the domains it draws itself."""
    if isinstance(value, dict):
        return {key: partial_answer(item, injected) for key, item in value.items()}
    if isinstance(value, list):
        return [
            partial_answer(item, injected)
            for item in value
            if not (isinstance(item, dict) and item.get("domain", injected[0]) not in injected)
        ]
    return value


DECISIONS = ["accept", "reject", "correction", "bonus", "x"]


@st.composite
def inconsistent_requests(draw, case: dict, base: dict) -> dict:
    """A well-formed answer of a round's requests that need not follow from its own draws: each
    request's ``accepted`` its own or any count in 0..K, ``emitted`` its own cut or extended, the
    drafts cut anywhere or any token IDs (one past the vocabulary too) up to K + 2 of them, its draws the base draws cut, repeated or with other decisions and
    tokens. A schema-valid answer is where an exception would escape the judge (``judge`` names a
    schema problem in place of the exception it causes), so these are drawn directly rather than
    by one random edit."""
    vocab = case["input"]["vocab"]
    requests = []
    for want, inp in zip(base["requests"], case["input"]["requests"]):
        depth = len(inp["draft_tokens"])
        draws = draw(st.sampled_from([want["draws"], want["draws"][:-1], want["draws"] + want["draws"][-1:], []]))
        draws = [
            dict(d, decision=draw(st.sampled_from(DECISIONS)), token=draw(st.integers(-1, vocab)))
            if draw(st.booleans())
            else d
            for d in draws
        ]
        requests.append(
            {
                "accepted": draw(st.just(want["accepted"]) | st.integers(0, depth)),
                "emitted": draw(
                    st.sampled_from([want["emitted"], want["emitted"][:-1], want["emitted"] + [0]])
                    | st.integers(0, depth).map(lambda n: inp["draft_tokens"][:n])
                    | st.lists(st.integers(-1, vocab), max_size=depth + 2)
                ),
                "draws": draws,
            }
        )
    return {"requests": requests}


PARTIAL_VALID = {family: partial_cases(family) for family in PARTIAL}


@pytest.mark.parametrize("family", sorted(PARTIAL))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_malformed_answer_in_partial_mode_is_judged_never_raised(family: str, data) -> None:
    config = partial_config(family)
    injected = config.capabilities.domains_of(family)
    assert injected is not None
    case = data.draw(st.sampled_from(PARTIAL_VALID[family]), label="case")
    base = partial_answer(case["expected"], injected)
    answer = data.draw(malformed(base) | inconsistent_requests(case, base), label="answer")
    verdict = judge(case, answer, config)  # an exception here is the bug
    assert verdict.cls in JUDGED
    if verdict.cls in (VerdictClass.FAIL, VerdictClass.ERROR):
        assert verdict.message, verdict


def test_the_partial_answer_of_a_valid_case_passes_in_partial_mode() -> None:
    """The fuzzer's partial base answer is right: unedited, each valid case passes in partial mode
    (so the edits, not the base, make the answers malformed)."""
    assert PARTIAL, "no comparator has a partial-injection mode"
    for family in PARTIAL:
        config = partial_config(family)
        injected = config.capabilities.domains_of(family)
        assert injected is not None
        assert len(PARTIAL_VALID[family]) > 1
        for case in PARTIAL_VALID[family]:
            verdict = judge(case, partial_answer(case["expected"], injected), config)
            assert verdict.cls is VerdictClass.PASS, verdict


def test_every_family_is_fuzzed() -> None:
    """The fuzzer reaches every registered family, with at least one case each."""
    assert sorted(CASES) == sorted(family_names())
