"""`qconform audit-policy`: exact verdicts on the example policies, exit codes, one-line errors (R35-R38)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from qconform.cli.group import cli

REPO = Path(__file__).resolve().parents[2]
POLICIES = REPO / "examples" / "policies"


def audit(*args: str):
    return CliRunner().invoke(cli, ["audit-policy", *args])


def assert_one_line_error(result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


@pytest.mark.rules("R35")
def test_fixed_depth_example_passes():
    result = audit(f"{POLICIES / 'fixed_depth.py'}:policy", "--vocab", "3")
    assert result.exit_code == 0, result.output
    assert "3 of 3 scenarios pass" in result.output
    assert "FAIL" not in result.output


@pytest.mark.rules("R36", "R38")
def test_toy_example_reports_three_quarters_against_one_half():
    result = audit(f"{POLICIES / 'toy_biased.py'}:policy", "--depth", "1", "--horizon", "1")
    assert result.exit_code == 1, result.output
    assert "scenario toy-q-equals-p-uniform-v2 (V = 2): FAIL" in result.output
    assert "token 0: 3/4 (target 1/2, +1/4)" in result.output
    assert "token 1: 1/4 (target 1/2, -1/4)" in result.output
    assert "round 1, before admitting x1: read x1 (encodes x1), probability 1" in result.output


@pytest.mark.rules("R36", "R37")
def test_dspark_appendix_a_example_fails_with_the_exact_distortion():
    result = audit(f"{POLICIES / 'dspark.py'}:appendix_a_scheduler", "--horizon", "1")
    assert result.exit_code == 1, result.output
    assert "token 0: 9/20 (target 3/10, +3/20)" in result.output
    assert "read c2 (encodes x1)" in result.output


@pytest.mark.rules("R36", "R37")
@pytest.mark.parametrize("name,code", [("prefix_scan", 0), ("prefix_scan_light_load", 0), ("prefix_scan_sampled", 1)])
def test_prefix_scan_examples(name, code):
    result = audit(f"{POLICIES / 'dspark.py'}:{name}")
    assert result.exit_code == code, result.output


@pytest.mark.rules("R35")
def test_dotted_module_names_work():
    result = audit("qconform.spec.admission.counterexamples:toy_selection_policy", "--depth", "1")
    assert result.exit_code == 1 and "token 0: 3/4" in result.output


@pytest.mark.rules()
@pytest.mark.parametrize(
    "target,fragments",
    [
        ("no_such_module_xyz:policy", ("cannot import no_such_module_xyz", "ModuleNotFoundError")),
        ("missing/file.py:policy", ("no policy file missing/file.py",)),
        ("qconform.spec.admission:nothing_here", ("has no attribute 'nothing_here'",)),
        ("qconform.spec.admission:ADMIT", ("is not callable", "str")),
        ("justaname", ("expected MODULE:CALLABLE",)),
        ("qconform.spec.admission:", ("expected MODULE:CALLABLE",)),
    ],
)
def test_bad_targets_are_one_line_errors(target, fragments):
    assert_one_line_error(audit(target), *fragments)


@pytest.mark.rules()
def test_a_module_that_fails_to_import_is_one_line_error(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('boom')\n")
    assert_one_line_error(audit(f"{broken}:policy"), "cannot import", "RuntimeError: boom")


@pytest.mark.rules("R36")
def test_a_policy_that_answers_garbage_cannot_be_audited(tmp_path):
    module = tmp_path / "garbage.py"
    module.write_text("def policy(view):\n    return 3\n")
    assert_one_line_error(audit(f"{module}:policy"), "cannot audit", "BAD_POLICY")


@pytest.mark.rules()
def test_bad_scenarios_are_one_line_errors(tmp_path):
    module = tmp_path / "scen.py"
    module.write_text("AUDIT_SCENARIOS = [42]\ndef policy(view):\n    return 'stop'\n")
    assert_one_line_error(audit(f"{module}:policy"), "AUDIT_SCENARIOS holds int")


@pytest.mark.rules()
def test_options_are_bounded():
    result = audit(f"{POLICIES / 'fixed_depth.py'}:policy", "--vocab", "1")
    assert result.exit_code == 2
