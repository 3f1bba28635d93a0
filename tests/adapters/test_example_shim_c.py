"""examples/shim-c: a C shim (stdlib only) built with cc passes rng_abi and categorical_sampling,
and a one-character bug in it fails them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from qconform.generators.corpus import default_vectors_dir
from qconform.generators.validation import iter_cases
from qconform.harness.run.case_runner import CaseRunner
from qconform.harness.transport.client import open_adapter
from qconform.harness.verdicts import VerdictClass

SOURCE = Path(__file__).resolve().parents[2] / "examples" / "shim-c" / "qconform_shim.c"
FAMILIES = ("rng_abi", "categorical_sampling")
#: (what the bug is, the text replaced, its replacement, the family it must fail)
BUGS = [
    (
        "cumulative >= draw",
        "if (cumulative[mid] > u) hi = mid;",
        "if (cumulative[mid] >= u) hi = mid;",
        "categorical_sampling",
    ),
    (
        "key words swapped",
        "key[0] = (uint32_t)seed;\n    key[1] = (uint32_t)(seed >> 32);",
        "key[1] = (uint32_t)seed;\n    key[0] = (uint32_t)(seed >> 32);",
        "rng_abi",
    ),
]


def compiler() -> str:
    found = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if found is None:
        pytest.skip("no C compiler (cc, gcc or clang) on PATH to build examples/shim-c")
    return found


def build(source: str, directory: Path) -> Path:
    path, binary = directory / "qconform_shim.c", directory / "qconform_shim"
    path.write_text(source)
    subprocess.run(
        [compiler(), "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-pedantic", "-o", str(binary), str(path)],
        check=True,
        capture_output=True,
        text=True,
    )
    return binary


def run_families(binary: Path) -> dict[str, list]:
    cases = {
        f: [
            {"id": c.id, "result": c.result, "input": c.input, "expected": c.expected, "flags": list(c.flags)}
            for c in iter_cases(default_vectors_dir(), [f])
        ]
        for f in FAMILIES
    }
    runner = CaseRunner(lambda: open_adapter(f"shim:{binary}"))
    try:
        return {f: runner.run(cases[f]) for f in FAMILIES}
    finally:
        runner.close()


@pytest.mark.rules("R08", "R22", "R23")
def test_the_c_shim_passes_its_families(tmp_path):
    found = run_families(build(SOURCE.read_text(), tmp_path))
    #: the one group the example leaves out (it has no SHA-256), answered "unimplemented"
    left_out = "rng_abi/unseeded_requests/"
    for verdicts in found.values():
        judged = [v for v in verdicts if not v.case_id.startswith(left_out)]
        assert judged and {v.cls for v in judged} == {VerdictClass.PASS}, [v.line() for v in judged if v.cls != "pass"]
    assert {v.cls for v in found["rng_abi"] if v.case_id.startswith(left_out)} == {VerdictClass.UNSUPPORTED}


@pytest.mark.rules("R08", "R22")
@pytest.mark.parametrize("bug, old, new, family", BUGS, ids=[b[0] for b in BUGS])
def test_a_one_character_bug_in_the_c_shim_fails(tmp_path, bug, old, new, family):
    source = SOURCE.read_text()
    assert source.count(old) == 1
    found = run_families(build(source.replace(old, new), tmp_path))
    assert VerdictClass.FAIL in {v.cls for v in found[family]}, bug
