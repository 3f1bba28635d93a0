"""`qconform adequacy`: the mutator, the import graph, the worker oracle and the equivalents file.

Each check is shown to catch its bug: the mutator's sites are asserted operator by
operator on a module written here, the oracle kills the known boundary mutant
(issue #11 §2) on the new draw-boundary vectors, and stale or malformed
equivalents entries are refused.
"""

from __future__ import annotations

import ast
import json
import os
import textwrap
import time
from fractions import Fraction
from pathlib import Path

import pytest
from click.testing import CliRunner

from qconform.cli.group import cli
from qconform.generators import registry
from qconform.generators.adequacy import analysis, equivalents, imports, oracle, runner
from qconform.generators.adequacy.analysis import MutantReport
from qconform.generators.adequacy.mutate import Site, mutated_tree, sites

SOURCE = '''
"""A docstring: nothing here is mutated 1 < 2."""
from __future__ import annotations

LIMIT = 1 << 4


@defines("R08")
def pick(counts: list[int], u: int = 3) -> int:
    """Another docstring."""
    assert u >= 0, "internal"
    total = 0
    for index, count in enumerate(counts):
        total += count
        if total > u:
            return index
    if u is None or u in counts:
        raise refuse("WRONG_TOTAL_MASS", f"{u + 1} past the total")
    raise AssertionError("unreachable")


class Box:
    def size(self, a: int, b: int) -> int:
        return min(a, b) * 2 - max(a, b) // 3
'''

BOUNDARY_MUTANT = "sampling:first_above:Gt->GtE:cumulative * U32_LIMIT > threshold"


def write_module(tmp_path: Path, text: str = SOURCE) -> Path:
    path = tmp_path / "toy.py"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_sites_cover_every_operator_and_skip_what_holds_no_behaviour(tmp_path: Path) -> None:
    found = {site.id for site in sites("toy", write_module(tmp_path))}
    assert found == {
        "toy:<module>:LShift->RShift:1 << 4",
        "toy:<module>:int+1:1 << 4",
        "toy:<module>:int-1:1 << 4",
        "toy:<module>:int+1:1 << 4#1",
        "toy:<module>:int-1:1 << 4#1",
        "toy:pick:int+1:u=3",
        "toy:pick:int-1:u=3",
        "toy:pick:int+1:total = 0",
        "toy:pick:int-1:total = 0",
        "toy:pick:Add->Sub:total += count",
        "toy:pick:Gt->GtE:total > u",
        "toy:pick:Is->IsNot:u is None",
        "toy:pick:In->NotIn:u in counts",
        "toy:pick:drop-raise:raise refuse('WRONG_TOTAL_MASS', f'{u + 1} past the total')",
        "toy:Box.size:min->max:min(a, b)",
        "toy:Box.size:max->min:max(a, b)",
        "toy:Box.size:Sub->Add:min(a, b) * 2 - max(a, b) // 3",
        "toy:Box.size:Mult->FloorDiv:min(a, b) * 2",
        "toy:Box.size:int+1:min(a, b) * 2",
        "toy:Box.size:int-1:min(a, b) * 2",
        "toy:Box.size:FloorDiv->Mult:max(a, b) // 3",
        "toy:Box.size:int+1:max(a, b) // 3",
        "toy:Box.size:int-1:max(a, b) // 3",
    }  # no site in docstrings, annotations, the decorator, the assert, the f-string or raise AssertionError


def run_toy(path: Path, site: Site, *args: object) -> object:
    namespace: dict = {"defines": lambda *_: lambda f: f, "refuse": ValueError}
    exec(compile(mutated_tree(path, site), str(path), "exec"), namespace)  # noqa: S102
    return namespace["pick"](*args)


def test_each_mutation_changes_the_code_it_names(tmp_path: Path) -> None:
    path = write_module(tmp_path)
    by_id = {site.id: site for site in sites("toy", path)}
    assert run_toy(path, by_id["toy:pick:Gt->GtE:total > u"], [2, 2], 2) == 0  # the original picks 1
    assert run_toy(path, by_id["toy:pick:int+1:total = 0"], [2, 2], 2) == 0
    with pytest.raises(ValueError):
        run_toy(path, by_id["toy:pick:Add->Sub:total += count"], [2, 2], 2)
    dropped = by_id["toy:pick:drop-raise:raise refuse('WRONG_TOTAL_MASS', f'{u + 1} past the total')"]
    original = by_id["toy:Box.size:min->max:min(a, b)"]
    with pytest.raises(ValueError):  # any other mutant still refuses
        run_toy(path, original, [2], 2)
    with pytest.raises(AssertionError):  # the refusal is gone: the invariant behind it fires
        run_toy(path, dropped, [2], 2)


def test_ids_survive_unrelated_edits(tmp_path: Path) -> None:
    before = {site.id for site in sites("toy", write_module(tmp_path))}
    edited = SOURCE.replace("class Box:", "def helper(x):\n    return x\n\n\nclass Box:").replace(
        '"""Another docstring."""', '"""Another docstring,\n    longer now."""'
    )
    after = {site.id for site in sites("toy", write_module(tmp_path, edited))}
    assert after == before


def test_import_graph_selects_the_families_that_import_a_module() -> None:
    from qconform.generators.registry import family_names

    FAMILY_MODULES = family_names()

    assert imports.dependent_families("qconform.spec.sharding", FAMILY_MODULES) == ("sharding",)
    assert imports.dependent_families("qconform.spec.admission.audit", FAMILY_MODULES) == ("admission",)
    sampling = imports.dependent_families("qconform.spec.sampling", FAMILY_MODULES)
    assert "verification_round" in sampling and "wire_frames" not in sampling and "rng_abi" not in sampling


def test_the_boundary_mutant_drifts_on_the_draw_boundary_vectors() -> None:
    """Issue #11 §2: '>=' in the mass rule passed the whole corpus; the draw_boundaries group kills it."""
    (site,) = analysis.select(["sampling"], None, 0, frozenset({BOUNDARY_MUTANT}))
    cases = analysis.committed_cases(Path(os.environ.get("QCONFORM_VECTORS", "") or _vectors()), ["verification_round"])
    (result,) = runner.run([runner.Job(site, ("verification_round",), 300)], cases, 1)
    assert result.outcome.kind == oracle.DRIFT
    assert result.outcome.case == "verification_round/draw_boundaries/correction-on-boundary"
    assert result.outcome.detail.startswith("$.requests[0].draws[1].token: expected 3, got 2")


TOP_K_REFUSAL = "allocation:select_top_k:drop-raise:raise refuse('BAD_SUPPORT_SIZE', f'k={k!r} not in 1..{len(units)}')"


def test_a_family_imported_as_a_package_attribute_sees_the_mutant() -> None:
    """allocation_invalid reaches allocation_sparse by ``from qconform.generators.families import
    allocation_sparse``; the re-import must bind the mutated module, not the package's stale
    attribute (which made this mutant survive although allocation_invalid/support_size/k-zero kills it)."""
    from qconform.generators.families import allocation_invalid  # the parent has the families loaded, as a run does

    assert allocation_invalid.allocation_sparse is not None
    (site,) = analysis.select(["allocation"], None, 0, frozenset({TOP_K_REFUSAL}))
    cases = analysis.committed_cases(Path(os.environ.get("QCONFORM_VECTORS", "") or _vectors()), ["allocation_invalid"])
    (result,) = runner.run([runner.Job(site, ("allocation_invalid",), 300)], cases, 1)
    assert result.outcome.kind in (oracle.DRIFT, oracle.CRASH)
    # the first case that kills it: a k-only refusal (precedence/r10 comes before support_size in the corpus)
    assert result.outcome.case is not None
    assert result.outcome.case.startswith(("allocation_invalid/support_size/k-", "allocation_invalid/precedence/r10-"))


def _vectors() -> Path:
    from qconform.generators.corpus import default_vectors_dir

    return default_vectors_dir()


def _sleep_forever(families, cases):  # a mutant that loops
    time.sleep(60)


def _die(families, cases):  # a mutant that takes its interpreter down
    os._exit(3)


@pytest.mark.parametrize(
    ("patch", "kind", "detail"),
    [
        (_sleep_forever, runner.TIMEOUT, "no answer within 1 s"),
        (_die, oracle.CRASH, "worker died with exit code 3"),
    ],
)
def test_a_hanging_or_dying_worker_kills_the_mutant(monkeypatch, patch, kind, detail) -> None:
    monkeypatch.setattr(oracle, "solve_all", patch)
    started = time.monotonic()
    (result,) = runner.run([runner.Job(None, (), 1.0)], {}, 1)
    assert (result.outcome.kind, result.outcome.detail) == (kind, detail)
    assert time.monotonic() - started < 30


def report(ident: str, status: str) -> MutantReport:
    module, qualname, operator, anchor = ident.split(":", 3)
    return MutantReport(Site(module, qualname, operator, anchor, 0, 1, 1), (), status)


def test_stale_equivalents_fail(tmp_path: Path) -> None:
    path = tmp_path / "eq.toml"
    path.write_text(
        f'[[mutant]]\nid = "{BOUNDARY_MUTANT}"\nreason = "r"\n\n'
        '[[mutant]]\nid = "sampling:gone:Lt->LtE:a < b"\nreason = "r"\n',
        encoding="utf-8",
    )
    listed = equivalents.load(path)
    assert analysis.stale_entries(listed, [report(BOUNDARY_MUTANT, "survived")]) == [
        ("sampling:gone:Lt->LtE:a < b", "no longer generated (the code under it changed)")
    ]
    assert analysis.stale_entries(listed, [report(BOUNDARY_MUTANT, "killed-drift")])[0] == (
        BOUNDARY_MUTANT,
        "now killed-drift: not equivalent",
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[mutant]]\nid = 'x'\n", "exactly the keys id and reason"),
        ("[[mutant]]\nid = 'x'\nreason = ' '\n", "non-empty reason"),
        ("[[mutant]]\nid = 'x'\nreason = 'r'\n[[mutant]]\nid = 'x'\nreason = 'r'\n", "listed twice"),
        ("[other]\n", "unknown top-level key"),
        ("[[mutant]\n", "eq.toml"),
    ],
)
def test_malformed_equivalents_are_one_line_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "eq.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(equivalents.EquivalentsError, match=message):
        equivalents.load(path)


def test_the_committed_equivalents_file_is_well_formed_and_current() -> None:
    listed = equivalents.load(equivalents.default_path())
    assert analysis.stale_entries(listed, []) == []  # every entry's mutant is still generated


def test_usage_errors_are_one_line_with_exit_status_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["adequacy", "--module", "spec/nope.py"])
    assert result.exit_code == 2 and "unknown spec module 'spec/nope.py'" in result.output
    result = CliRunner().invoke(cli, ["adequacy", "--mutant", "sampling:nope:Lt->LtE:a"])
    assert result.exit_code == 2 and "no such mutant" in result.output
    bad = tmp_path / "eq.toml"
    bad.write_text("[[mutant]\n", encoding="utf-8")
    result = CliRunner().invoke(cli, ["adequacy", "--mutant", BOUNDARY_MUTANT, "--equivalents", str(bad)])
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_sample_is_deterministic() -> None:
    first = CliRunner().invoke(cli, ["adequacy", "--module", "sampling", "--sample", "5", "--seed", "3", "--list"])
    again = CliRunner().invoke(
        cli, ["adequacy", "--module", "spec/sampling.py", "--sample", "5", "--seed", "3", "--list"]
    )
    other = CliRunner().invoke(cli, ["adequacy", "--module", "sampling", "--sample", "5", "--seed", "4", "--list"])
    assert first.exit_code == 0 and first.output == again.output != other.output
    assert len(first.output.splitlines()) == 5


def test_every_core_module_has_sites_with_unique_ids_that_compile() -> None:
    for module in analysis.CORE_MODULES:
        path = imports.module_files()[oracle.module_name(module)]
        found = sites(module, path)
        assert found and len({s.id for s in found}) == len(found), module
        for site in found[::7]:  # every operator kind occurs; compiling all 1000+ takes a minute
            mutated = mutated_tree(path, site)
            assert ast.unparse(mutated) != ast.unparse(ast.parse(path.read_text())), site.id
            compile(mutated, str(path), "exec")


def test_the_traced_baseline_records_the_spec_functions_the_corpus_calls() -> None:
    """A mutant inside a function that no committed case calls is reported unreached, not run."""
    cases = analysis.committed_cases(_vectors(), ["categorical_sampling"])
    (result,) = runner.run([runner.Job(None, ("categorical_sampling",), 300, trace=True)], cases, 1)
    sampling = str(imports.module_files()["qconform.spec.sampling"].resolve())
    called = {name for file, name in result.outcome.reached if str(Path(file).resolve()) == sampling}
    assert result.outcome.kind == oracle.SURVIVED
    assert {"sample_counts", "sample_qrow", "check_draw"} <= called
    assert "mass_draw" not in called  # the mass rule is not this family's


def test_a_listed_mutant_that_the_corpus_kills_fails_the_run(tmp_path: Path) -> None:
    killed = "sharding:sample_sharded_scaled:Gt->GtE:cumulative * U32_LIMIT > threshold"
    listed = tmp_path / "eq.toml"
    listed.write_text(f'[[mutant]]\nid = "{killed}"\nreason = "wrongly claimed equivalent"\n', encoding="utf-8")
    report = tmp_path / "report.json"
    result = CliRunner().invoke(
        cli, ["adequacy", "--mutant", killed, "--equivalents", str(listed), "--json", str(report)]
    )
    assert result.exit_code == 1, result.output
    assert "stale equivalent" in result.output and "1 stale entr" in result.output
    data = json.loads(report.read_text())
    assert data["stale"] == [{"id": killed, "why": "now killed-drift: not equivalent"}]
    assert data["mutants"][0]["case"].startswith("sharding/residual/")


# --- issue #21: the unreachable list, the fast paths, the judges ---------------------------------


def test_unreachable_entries_are_their_own_list_and_count_apart(tmp_path: Path) -> None:
    path = tmp_path / "eq.toml"
    path.write_text(
        '[[mutant]]\nid = "a:f:Lt->LtE:x < 1"\nreason = "r"\n\n[[unreachable]]\nid = "a:f:int+1:x < 1"\nreason = "s"\n'
    )
    listed = equivalents.load(path)
    assert {i: e.kind for i, e in listed.items()} == {
        "a:f:Lt->LtE:x < 1": "equivalent",
        "a:f:int+1:x < 1": "unreachable",
    }
    tally = analysis.Tally(mutants=10, killed=6, equivalent=2, unreachable=2)
    assert tally.rate == 1 and tally.rate_with_unreachable == Fraction(6, 8)
    assert tally.to_json()["unreachable"] == 2 and tally.survived == 0


def test_every_normative_module_and_fast_path_is_selected_by_default() -> None:
    assert {"wire/negotiation", "wire/checks", "wire/header", "wire/fallback"} <= set(analysis.NORMATIVE_MODULES)
    assert {"arms", "floats", "outcome_law", "allocation_fp64"} <= set(analysis.NORMATIVE_MODULES)
    for module in (
        "constants",
        "errors",
        "wire/layout",
        "wire/messages",
        "wire/checksum",
        "wire/reasons",
        "admission/draws",
        "admission/table",
    ):
        assert module in analysis.DEFAULT_MODULES
    for module in ("admission/choices", "admission/policy", "admission/scenario", "admission/reveal"):
        assert module in analysis.DEFAULT_MODULES
    assert set(analysis.CORE_MODULES) < set(analysis.NORMATIVE_MODULES)
    assert "allocation_certified" in analysis.DEFAULT_MODULES


CERTIFIED_DROP = "allocation_certified:allocate_dense_f32_certified:drop-raise:raise refuse('ZERO_MASS', f'all {row.size} weights are zero')"


def test_a_fast_path_mutant_is_judged_by_the_committed_allocation_rows() -> None:
    """allocation_certified is no solve's, so the spec oracle cannot see its mutants; its own answers
    to the committed rows can: without its ZERO_MASS refusal it answers the all-zero row."""
    (site,) = analysis.select(["allocation_certified"], None, 0, frozenset({CERTIFIED_DROP}))
    families = analysis.FAST_PATHS["allocation_certified"].families
    cases = analysis.committed_cases(_vectors(), list(families))
    (result,) = runner.run([runner.Job(site, families, 300, fast_path="allocation_certified")], cases, 1)
    assert result.outcome.kind in (oracle.DRIFT, oracle.CRASH)
    # the first all-zero row of the committed cases: the precedence group's ZERO_MASS row, or weights/zero-mass
    assert result.outcome.case is not None and result.outcome.case.startswith("allocation_invalid/")
    assert "zero-mass" in result.outcome.case or "zero_mass" in result.outcome.case


def test_judges_and_spec_modules_are_not_mixed() -> None:
    result = CliRunner().invoke(cli, ["adequacy", "--judges", "--module", "sampling", "--list"])
    assert result.exit_code == 2 and "a spec module" in result.output
    result = CliRunner().invoke(cli, ["adequacy", "--module", "harness/judging/sharding.py", "--list"])
    assert result.exit_code == 2 and "--judges" in result.output
    listed = CliRunner().invoke(cli, ["adequacy", "--judges", "--module", "harness/judging/sharding.py", "--list"])
    assert listed.exit_code == 0 and all(line.startswith("judging/sharding:") for line in listed.output.splitlines())


def test_a_function_called_while_a_spec_module_is_imported_is_reached() -> None:
    """checksum.table_entry runs only while spec/wire/checksum.py is imported (it builds the CRC table), and
    layout.contiguous while spec/wire/layout.py places its fields: the traced baseline imports the spec again,
    so both are reached and their mutants are run, not reported unreached."""
    families = ("allocation_invalid",)  # the cheapest family that imports the wire's modules
    cases = analysis.committed_cases(_vectors(), list(families))
    registry.all_families()  # imported before the run, as analyse does: the child inherits them
    (result,) = runner.run([runner.Job(None, families, 300, trace=True)], cases, 1)
    assert result.outcome.kind == oracle.SURVIVED
    for module, function in (("wire/checksum", "table_entry"), ("wire/layout", "contiguous")):
        path = str(imports.module_files()[oracle.module_name(module)])
        assert (path, function) in result.outcome.reached


# --- the pre-screen (--prescreen N, --candidates-of) -------------------------------------------------

SHARDING_EQUIVALENT = "sharding:rank_key:int+1:entry[0]"
SHARDING_KILLED = "sharding:sample_sharded_scaled:Gt->GtE:cumulative * U32_LIMIT > threshold"


def test_the_prescreen_oracle_is_committed_cases_in_the_full_oracles_order() -> None:
    """A pre-screen kill is a kill only if its oracle is the full oracle's own cases, with their committed
    answers, in its order: each family's first N and every case under the module's always-kept prefixes."""
    families = ("allocation_dense", "sharding")
    cases = analysis.committed_cases(_vectors(), list(families))
    screened = analysis.prescreen_cases(cases, families, 5, ("allocation_dense/fp32_steps/",))
    for family in families:
        full = list(cases[family])
        kept = screened[family]
        assert all(case in full for case in kept)  # the same committed cases, answers included
        assert [full.index(case) for case in kept] == sorted(full.index(case) for case in kept)
        assert full[:5] == kept[:5]
    steps = [case for case in cases["allocation_dense"] if case.id.startswith("allocation_dense/fp32_steps/")]
    assert steps and all(case in screened["allocation_dense"] for case in steps)
    assert len(screened["sharding"]) == 5 < len(cases["sharding"])


def test_the_prescreen_calls_a_full_oracle_survivor_a_candidate_never_killed(tmp_path: Path, monkeypatch) -> None:
    """A listed equivalent survives the full oracle; under the pre-screen it must be a candidate (counted as a
    survivor), and a mutant the pre-screen's cases drift must be killed as by the full oracle, on the same case
    (the boundary mutant drifts on a residual case, past the 30 smallest: kept here as always-kept cases)."""
    monkeypatch.setitem(analysis.PRESCREEN_ALWAYS, "sharding", ("sharding/residual/",))
    ids = frozenset({SHARDING_EQUIVALENT, SHARDING_KILLED})
    chosen = analysis.select(["sharding"], None, 0, ids)
    eq = equivalents.default_path()
    full = analysis.analyse(["sharding"], chosen, _vectors(), eq, 2, None)
    screened = analysis.analyse(["sharding"], chosen, _vectors(), eq, 2, None, prescreen=30)
    full_of = {m.site.id: m for m in full.mutants}
    screened_of = {m.site.id: m for m in screened.mutants}
    assert full_of[SHARDING_EQUIVALENT].status == "equivalent"
    assert screened_of[SHARDING_EQUIVALENT].status == analysis.CANDIDATE
    assert full_of[SHARDING_KILLED].status == screened_of[SHARDING_KILLED].status == "killed-drift"
    assert full_of[SHARDING_KILLED].case == screened_of[SHARDING_KILLED].case
    tally = screened.tally()
    assert (tally.killed, tally.candidates, tally.survived, tally.rate) == (1, 1, 0, Fraction(1, 2))
    report = tmp_path / "pre.json"
    report.write_text(json.dumps(screened.to_json()))
    assert json.loads(report.read_text())["candidates"] == [SHARDING_EQUIVALENT]
    listed = CliRunner().invoke(cli, ["adequacy", "--candidates-of", str(report), "--list"])
    assert listed.exit_code == 0 and listed.output.startswith(SHARDING_EQUIVALENT + "  (line ")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not a --prescreen report"),
        ('{"format": "other", "candidates": []}', "with a candidates list"),
        ('{"format": "qconform-adequacy-v1", "candidates": []}', "has no candidates"),
    ],
)
def test_a_candidates_file_that_is_no_prescreen_report_is_a_usage_error(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "pre.json"
    path.write_text(text, encoding="utf-8")
    result = CliRunner().invoke(cli, ["adequacy", "--candidates-of", str(path), "--list"])
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output
