"""The `qconform rules` coverage report: test-mark scanning, joining, the covered definition."""

from __future__ import annotations

import dataclasses
import io
import json
import re
import textwrap
from pathlib import Path

import pytest
import vector_fakes
from rich.console import Console

from qconform import rules_report
from qconform.spec.rules import LISTING_RULES, ROLE_RULES, ROLES, RULES, SPEC_DEFINITIONS

pytestmark = pytest.mark.rules()

TEST_SOURCE = textwrap.dedent(
    """
    import pytest
    from pytest import mark

    pytestmark = [pytest.mark.rules("R01", "R02"), pytest.mark.slow]

    @pytest.mark.rules("R06")
    def test_plain():
        pytest.mark.rules("R30")  # inside a body: not a mark on anything

    @mark.rules("R07", "R07")
    @pytest.mark.parametrize("x", [pytest.param(1, marks=pytest.mark.rules("R08"))])
    def test_params(x):
        pass

    @pytest.mark.rules("R11")
    class TestGroup:
        pytestmark = pytest.mark.rules("R12")

        @pytest.mark.rules("R13")
        def test_method(self):
            pass

    def test_unmarked():
        pass

    helper = pytest.mark.rules("R20")
    """
)


def test_marked_tests_reads_every_mark_form():
    pairs = rules_report.marked_tests(TEST_SOURCE, "test_x.py")
    assert pairs == [
        ("R01", "test_x.py"),
        ("R02", "test_x.py"),
        ("R06", "test_x.py::test_plain"),
        ("R07", "test_x.py::test_params"),
        ("R08", "test_x.py::test_params"),
        ("R11", "test_x.py::TestGroup"),
        ("R12", "test_x.py::TestGroup"),
        ("R13", "test_x.py::TestGroup"),
    ]


def test_scan_tests_collects_per_rule_and_warns(tmp_path):
    (tmp_path / "test_a.py").write_text(TEST_SOURCE)
    (tmp_path / "test_b.py").write_text('import pytest\n@pytest.mark.rules("R06", "R99")\ndef test_b():\n    pass\n')
    (tmp_path / "test_c.py").write_text("def broken(:\n")
    tests, warnings = rules_report.scan_tests(tmp_path)
    assert tests["R06"] == ["test_a.py::test_plain", "test_b.py::test_b"]
    assert tests["R38"] == []
    assert "test_b.py::test_b cites unknown rule R99" in warnings
    assert any(w.startswith("test_c.py could not be parsed") for w in warnings)


def test_find_tests_dir_walks_up_to_the_qconform_checkout(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "qconform"\n')
    (tmp_path / "tests").mkdir()
    inner = tmp_path / "a" / "b"
    inner.mkdir(parents=True)
    (tmp_path / "a" / "pyproject.toml").write_text('[project]\nname = "other"\n')
    assert rules_report.find_tests_dir(inner) == tmp_path / "tests"
    assert rules_report.find_tests_dir(Path("/")) is None


def test_covered_needs_a_spec_function_and_a_test():
    rule = RULES["R05"]
    assert rules_report.RuleCoverage(rule, spec=["s"], tests=["t"]).lacking() == []
    # a family that mentions a rule does not define it (R29 was counted covered so)
    assert rules_report.RuleCoverage(rule, families=["f"], tests=["t"]).lacking() == ["spec function"]
    assert rules_report.RuleCoverage(rule, tests=["t"]).lacking() == ["spec function"]
    assert rules_report.RuleCoverage(rule, spec=["s"]).lacking() == ["test"]
    assert rules_report.RuleCoverage(rule).lacking() == ["spec function", "test"]


def test_listing_rules_are_excepted_by_name_with_a_reason():
    assert set(LISTING_RULES) == {"R34"} and all(LISTING_RULES.values())
    listing = RULES["R34"]
    assert rules_report.RuleCoverage(listing, families=["f"], tests=["t"]).lacking() == []
    assert rules_report.RuleCoverage(listing, tests=["t"]).lacking() == ["spec function or vector family"]
    report = rules_report.RulesReport([rules_report.RuleCoverage(listing, families=["f"], tests=["t"])], None, [])
    out = io.StringIO()
    rules_report.render(report, Console(file=out, width=400))
    assert "listing rule: lists the kernels" in out.getvalue()
    assert "R34 is excepted from needing a spec function of its own" in out.getvalue()
    out = io.StringIO()  # --missing with nothing missing: a summary that names no rule (CI greps rule ids)
    rules_report.render(report, Console(file=out, width=400), missing_only=True)
    assert re.findall(r"R\d\d", out.getvalue()) == [], out.getvalue()
    assert out.getvalue().startswith(f"{len(RULES)} of {len(RULES)} rules covered")


@pytest.mark.rules("R29")
def test_r29_is_covered_by_its_own_spec_function():
    rules_report.import_spec_modules()
    assert "spec.sparse_support.support_role" in SPEC_DEFINITIONS["R29"]
    report = rules_report.build_report(Path(__file__).parents[1], Path(__file__).parents[2] / "vectors")
    assert report.uncovered() == [], [c.rule.id for c in report.uncovered()]


def test_report_joins_families_committed_cases_and_tests(tmp_path, monkeypatch):
    vector_fakes.install(monkeypatch)
    # a committed file may cite rules beyond Family.rules (e.g. regenerated later)
    (tmp_path / "fake_beta.json").write_text(
        json.dumps({"testGroups": [{"rules": ["R33"], "tests": [{"rules": ["R34"]}]}]})
    )
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_y.py").write_text('import pytest\npytestmark = pytest.mark.rules("R05", "R33")\n')
    report = rules_report.build_report(tests, tmp_path)
    by_id = {c.rule.id: c for c in report.coverage}
    assert by_id["R05"].families == ["fake_alpha"] and by_id["R05"].tests == ["test_y.py"]
    assert by_id["R10"].families == ["fake_alpha", "fake_beta"]
    assert by_id["R33"].families == ["fake_beta"] and by_id["R34"].families == ["fake_beta"]
    assert by_id["R33"].lacking() == [] and by_id["R34"].lacking() == ["test"]
    assert by_id["R26"].spec == sorted(SPEC_DEFINITIONS["R26"]) and by_id["R26"].spec
    assert [c.rule.id for c in report.coverage] == list(RULES)


def test_report_warns_for_unimplemented_families_and_missing_tests(tmp_path, monkeypatch):
    from qconform.generators import registry

    monkeypatch.setattr(registry, "family_names", lambda: ("no_such_family",))
    monkeypatch.chdir(tmp_path)
    report = rules_report.build_report(None, tmp_path)
    assert "vector family no_such_family is registered but has no module yet" in report.warnings
    assert any(w.startswith("tests were not found") for w in report.warnings)
    assert report.tests_dir is None and all(not c.tests for c in report.coverage)


def test_render_missing_lists_only_uncovered_rules(tmp_path, monkeypatch):
    monkeypatch.setattr(rules_report, "ROLE_RULES", ())  # the role view has its own test below
    everything = dataclasses.replace(vector_fakes.FAKE_FAMILIES["fake_alpha"], rules=tuple(RULES))
    monkeypatch.setitem(vector_fakes.FAKE_FAMILIES, "fake_alpha", everything)
    vector_fakes.install(monkeypatch)
    tests = tmp_path / "tests"
    tests.mkdir()
    marks = ", ".join(f'"{r}"' for r in RULES if r != "R17")
    (tests / "test_all.py").write_text(f"import pytest\npytestmark = pytest.mark.rules({marks})\n")
    report = rules_report.build_report(tests, tmp_path)
    assert [c.rule.id for c in report.uncovered()] == ["R17"]
    out = io.StringIO()
    rules_report.render(report, Console(file=out, width=200), missing_only=True)
    text = out.getvalue()
    assert "R17" in text and "R16 " not in text and "37 of 38 rules covered" in text


def test_a_rule_is_covered_on_a_role_by_its_own_spec_function_family_and_test():
    rule, (receiver, worker) = RULES["R12"], ROLES
    assert rules_report.RoleCoverage(rule, worker, ["f"], ["worker_sessions"], ["t"]).lacking() == []
    assert rules_report.RoleCoverage(rule, receiver, [], ["wire_sessions"], ["t"]).lacking() == [
        "spec function of the receiver"
    ]
    assert rules_report.RoleCoverage(rule, worker).lacking() == [
        "spec function of the worker",
        "vector family of the worker",
        "test of the worker",
    ]


def test_a_test_belongs_to_the_roles_whose_spec_module_it_imports(tmp_path):
    (tmp_path / "test_w.py").write_text(
        'import pytest\nfrom qconform.spec.wire.worker import step\n@pytest.mark.rules("R12", "R06")\ndef test_w():\n    pass\n'
    )
    (tmp_path / "test_r.py").write_text(
        'import pytest\nfrom qconform.spec.wire import receiver\npytestmark = pytest.mark.rules("R12")\n'
    )
    (tmp_path / "test_both.py").write_text(
        "import pytest\nimport qconform.spec.wire.worker\n"
        "def test_b():\n    from qconform.spec.wire.receiver import step\n"
        '@pytest.mark.rules("R17")\ndef test_c():\n    pass\n'
    )
    (tmp_path / "test_neither.py").write_text(
        'import pytest\nfrom qconform.spec.wire import codec\npytestmark = pytest.mark.rules("R12")\n'
    )
    found = rules_report.scan_role_tests(tmp_path)
    assert found["R12", "worker"] == ["test_w.py::test_w"] and found["R12", "receiver"] == ["test_r.py"]
    assert found["R17", "worker"] == found["R17", "receiver"] == ["test_both.py::test_c"]
    assert ("R06", "worker") not in found  # only the rules of ROLE_RULES have role rows


def test_every_role_rule_is_covered_on_the_worker():
    """Issue #20: the worker state machine covers each rule of ROLE_RULES with its own spec
    function, the worker_sessions family and a test (the receiver's rows are its own)."""
    report = rules_report.build_report(Path(__file__).parents[1], Path(__file__).parents[2] / "vectors")
    worker = [c for c in report.roles if c.role.name == "worker"]
    assert [c.rule.id for c in worker] == list(ROLE_RULES)
    assert {c.rule.id: c.lacking() for c in worker if c.lacking()} == {}
    assert [c.rule.id for c in report.roles if c.role.name == "receiver"] == list(ROLE_RULES)
