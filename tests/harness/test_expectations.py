"""Expectations files: format, disabled globs, strict xfail (xpass), stale entries, completeness."""

from __future__ import annotations

import pytest

from qconform.harness.expectations import Expectations, ExpectationsError
from qconform.harness.run.summary import account
from qconform.harness.verdicts import Diff, Verdict, VerdictClass

pytestmark = pytest.mark.rules()

CORPUS = [
    "allocation_dense/near_ties/fp64-flip-1",
    "allocation_dense/near_ties/fp64-flip-2",
    "allocation_dense/exact_ties/uniform-v3",
    "verification_round/production_vocab/residual-1",
    "verification_round/production_vocab/residual-2",
    "rng_abi/philox_kat/zeros",
]

EXAMPLE = """
[disabled]
"verification_round/production_vocab/*" = "too slow under the interpreter"

[xfail]
"allocation_dense/near_ties/fp64-flip-1" = "FP64 allocation flips this near-tie"
"""


def test_parse_reads_both_tables():
    exp = Expectations.parse(EXAMPLE, "x.toml")
    assert exp.disabled == {"verification_round/production_vocab/*": "too slow under the interpreter"}
    assert exp.xfail == {"allocation_dense/near_ties/fp64-flip-1": "FP64 allocation flips this near-tie"}
    assert exp.disabled_reason("verification_round/production_vocab/residual-2") == "too slow under the interpreter"
    assert exp.disabled_reason("verification_round/batches/b1") is None
    reason = exp.xfail_reason("allocation_dense/near_ties/fp64-flip-1")
    assert reason is not None and reason.startswith("FP64")
    assert exp.xfail_reason("allocation_dense/near_ties/fp64-flip-2") is None


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("[disabled\n", "not valid TOML"),
        ("[skip]\n'a' = 'b'\n", "unknown key(s) ['skip']"),
        ("disabled = 'x'\n", "[disabled] must be a table"),
        ("[xfail]\n'a/b/c' = ''\n", "non-empty reason"),
        ("[xfail]\n'a/b/c' = 3\n", "non-empty reason"),
    ],
)
def test_malformed_files_are_refused_with_the_source_named(text, fragment):
    with pytest.raises(ExpectationsError) as info:
        Expectations.parse(text, "bad.toml")
    assert fragment in str(info.value) and "bad.toml" in str(info.value)


def test_missing_file_is_an_expectations_error(tmp_path):
    with pytest.raises(ExpectationsError, match="cannot read"):
        Expectations.load(tmp_path / "nope.toml")


def test_load_reads_a_file(tmp_path):
    path = tmp_path / "torch.toml"
    path.write_text(EXAMPLE)
    assert Expectations.load(path).source == str(path)


@pytest.mark.parametrize(
    "cls, result",
    [
        (VerdictClass.PASS, VerdictClass.XPASS),
        (VerdictClass.PRECISION, VerdictClass.XPASS),
        (VerdictClass.FAIL, VerdictClass.XFAIL),
        (VerdictClass.ERROR, VerdictClass.XFAIL),
        (VerdictClass.UNSUPPORTED, VerdictClass.UNSUPPORTED),
    ],
)
def test_strict_xfail(cls, result):
    exp = Expectations.parse(EXAMPLE, "x.toml")
    diff = Diff("counts[1]", "5", "6")
    verdict = exp.apply(Verdict(cls, "allocation_dense/near_ties/fp64-flip-1", "inner", diff))
    assert verdict.cls is result
    assert verdict.diff == diff
    if result is VerdictClass.XPASS:
        assert verdict.unexpected and "remove the entry" in verdict.message
    if result is VerdictClass.XFAIL:
        assert not verdict.unexpected and "inner" in verdict.message


def test_unlisted_cases_are_untouched():
    exp = Expectations.parse(EXAMPLE, "x.toml")
    verdict = Verdict(VerdictClass.FAIL, "allocation_dense/near_ties/fp64-flip-2", "m")
    assert exp.apply(verdict) is verdict


def test_no_stale_entries_when_every_entry_matches():
    assert Expectations.parse(EXAMPLE, "x.toml").stale_entries(CORPUS) == []


def test_stale_entries_are_named():
    text = (
        '[disabled]\n"verification_round/production_vocab/*" = "slow"\n"proposal_chain/*" = "not yet"\n'
        '[xfail]\n"allocation_dense/near_ties/fp64-flip-9" = "renamed case"\n'
        '"verification_round/production_vocab/residual-1" = "also disabled"\n'
    )
    problems = Expectations.parse(text, "t.toml").stale_entries(CORPUS)
    assert len(problems) == 3
    assert any("[disabled] entry 'proposal_chain/*'" in p and "matches no case" in p for p in problems)
    assert any("'allocation_dense/near_ties/fp64-flip-9'" in p and "matches no case" in p for p in problems)
    assert any("residual-1" in p and "disabled" in p for p in problems)
    assert all("t.toml" in p for p in problems)


def test_disabled_wins_over_xfail():
    exp = Expectations.parse('[disabled]\n"a/*" = "off"\n[xfail]\n"a/b/c" = "x"\n', "t.toml")
    assert exp.xfail_reason("a/b/c") is None
    assert exp.apply(Verdict(VerdictClass.PASS, "a/b/c")).cls is VerdictClass.PASS


def test_completeness_accounts_for_every_case():
    result = account(
        CORPUS,
        families=["allocation_dense", "verification_round"],
        collected=[
            "allocation_dense/near_ties/fp64-flip-1",
            "allocation_dense/exact_ties/uniform-v3",
            "verification_round/production_vocab/residual-1",
            "verification_round/production_vocab/residual-2",
        ],
        deselected=["allocation_dense/near_ties/fp64-flip-2"],
        judged=[
            "allocation_dense/near_ties/fp64-flip-1",
            "allocation_dense/exact_ties/uniform-v3",
            "verification_round/production_vocab/residual-1",
            "verification_round/production_vocab/residual-2",
        ],
    )
    assert result.not_run == {"family filter": 1, "deselected": 1}
    assert result.problems == []


def test_completeness_flags_uncollected_and_unjudged_cases():
    result = account(
        CORPUS,
        families=["allocation_dense", "rng_abi"],
        collected=["allocation_dense/near_ties/fp64-flip-1", "allocation_dense/near_ties/fp64-flip-2"],
        deselected=[],
        judged=["allocation_dense/near_ties/fp64-flip-1"],
    )
    assert result.not_run == {"family filter": 2, "not collected": 2, "interrupted": 1}
    assert len(result.problems) == 2
    assert "never collected" in result.problems[0] and "rng_abi/philox_kat/zeros" in result.problems[0]
    assert "fp64-flip-2" in result.problems[1]
