"""The import rule between the top-level folders (docs/architecture.md), and what
``qconform run`` loads.

Every ``import`` of a ``qconform`` module in ``spec/``, ``generators/``,
``vectors/``, ``harness/``, ``adapters/`` and ``qconform/`` is read from the source
(function-level imports included) and checked against the folder's allowed
targets. A checker that cannot fail proves nothing, so it is also run on seeded
violations.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: folder -> the import root its modules live under
FOLDERS = {
    "spec": "qconform.spec",
    "generators": "qconform.generators",
    "vectors": "qconform.vectors",
    "harness": "qconform.harness",
    "adapters": "qconform.adapters",
    "qconform": "qconform",
}

#: the harness modules adapters may import: the contract
CONTRACT = (
    "qconform.harness.adapter",
    "qconform.harness.verdicts",
    "qconform.harness.expectations",
)

#: folder -> module prefixes it may import (besides itself and the bare ``qconform`` package)
ALLOWED: dict[str, tuple[str, ...]] = {
    "spec": (),
    "generators": ("qconform.spec", "qconform.vectors"),
    "vectors": (),
    # the catalog, and the endpoints' test-control envelope the TCP transport speaks
    "harness": (
        "qconform.spec",
        "qconform.generators",
        "qconform.adapters.catalog",
        "qconform.adapters.endpoint.control",
    ),
    "adapters": ("qconform.generators", *CONTRACT),
    "qconform": ("qconform.spec", "qconform.generators", "qconform.harness", "qconform.adapters"),
}


def module_name(folder: str, path: Path) -> str:
    parts = list(path.relative_to(REPO / folder).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([FOLDERS[folder], *parts])


def imported_modules(source: str, module: str, is_package: bool) -> list[tuple[int, str]]:
    """``(line, module)`` of every qconform import in ``source`` (relative ones resolved)."""
    found = []
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # ``from pkg import sub`` may name a submodule: judge the most specific name
            found += [(node.lineno, f"{target}.{alias.name}") for alias in node.names]
    return [(line, name) for line, name in found if name == "qconform" or name.startswith("qconform.")]


def allowed(folder: str, target: str) -> bool:
    own = FOLDERS[folder]
    if folder != "qconform" and (target == own or target.startswith(own + ".")):
        return True
    # the bare package, and the loader of the C extensions, a standard-library leaf every folder's
    # extensions load through (docs/architecture.md, "Native extensions")
    if target in ("qconform", "qconform.__version__") or target.split(".")[:2] == ["qconform", "native_sources"]:
        return True
    if folder == "qconform":
        return True  # the command line and its reports sit on top of everything
    return any(target == prefix or target.startswith(prefix + ".") for prefix in ALLOWED[folder])


#: the one adapter that is the spec (``reference``): every other adapter module is a candidate,
#: a harness-proof adapter or glue, and one that imported the spec would check it against itself
SPEC_ADAPTERS = ("adapters/reference.py",)


def violations(folder: str, path: Path, source: str) -> list[str]:
    module = module_name(folder, path)
    relative = path.relative_to(REPO).as_posix()
    return [
        f"{relative}:{line}: {folder}/ imports {target}"
        for line, target in imported_modules(source, module, path.name == "__init__.py")
        if not allowed(folder, target)
        and not (relative in SPEC_ADAPTERS and (target == "qconform.spec" or target.startswith("qconform.spec.")))
    ]


def test_folders_import_only_what_the_rule_allows():
    problems = []
    for folder in FOLDERS:
        for path in sorted((REPO / folder).rglob("*.py")):
            if folder == "qconform" and path.relative_to(REPO / folder).parts[0] in FOLDERS:
                continue  # qconform/<folder> links to a folder checked under its own rule
            problems += violations(folder, path, path.read_text(encoding="utf-8"))
    assert problems == []


@pytest.mark.parametrize(
    ("folder", "relative", "source"),
    [
        ("spec", "allocation.py", "from qconform.generators.encoding import decode_blob\n"),
        ("generators", "corpus.py", "def f():\n    from qconform.harness.verdicts import Verdict\n"),
        ("harness", "run/plugin.py", "from qconform.adapters.torch_adapter import TorchAdapter\n"),
        ("harness", "stat/runner.py", "from qconform.cli.console import wide_console\n"),
        ("adapters", "fault_proxy.py", "from qconform.spec.wire.header import seal\n"),
        ("adapters", "noop.py", "from qconform.spec.sampling import sample_counts\n"),
        ("harness", "judging/judge.py", "from qconform.adapters import reference\n"),
        ("adapters", "faulty.py", "from qconform.harness.transport import host\n"),
        ("adapters", "endpoint/server.py", "from ...harness.run import plugin\n"),
    ],
)
def test_the_rule_catches_a_seeded_violation(folder, relative, source):
    assert violations(folder, REPO / folder / relative, source) != []


def test_the_native_sources_leaf_imports_nothing_of_qconform():
    """Every folder may import ``qconform.native_sources``, so it must stay a leaf: no layer through it."""
    source = (REPO / "qconform" / "native_sources.py").read_text(encoding="utf-8")
    assert imported_modules(source, "qconform.native_sources", False) == []
    assert imported_modules("from qconform.spec import philox\n", "qconform.native_sources", False) != []


def test_the_rule_passes_the_contract_and_relative_imports():
    assert violations("adapters", REPO / "adapters/noop.py", "from qconform.harness.adapter import Adapter\n") == []
    assert violations("adapters", REPO / "adapters/endpoint/server.py", "from . import layout\n") == []
    assert (
        violations(
            "harness",
            REPO / "harness/transport/client.py",
            "from qconform.adapters.catalog import available_adapters\n",
        )
        == []
    )


#: modules ``qconform run`` must not load: statistical mode, fuzzing, the endpoints
NOT_FOR_RUN = (
    "qconform.harness.stat",
    "qconform.harness.fuzz",
    "qconform.adapters.endpoint",
    "qconform.cli.stat",
    "qconform.cli.fuzz",
    "qconform.cli.endpoint",
    "qconform.cli.mutants",
    "qconform.generators.fuzz_inputs",
    "qconform.spec.outcome_law",
)

RUN_PROBE = """
import json, sys
from qconform.cli.group import cli
try:
    cli.main(args=sys.argv[1:], prog_name="qconform", standalone_mode=False)
except SystemExit:
    pass
print(json.dumps(sorted(m for m in sys.modules if m.startswith("qconform"))))
"""


def loaded_by(*args: str) -> list[str]:
    result = subprocess.run([sys.executable, "-c", RUN_PROBE, *args], capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_qconform_run_loads_no_stat_fuzz_or_endpoint_module():
    loaded = loaded_by("run", "--adapter", "reference", "--family", "rng_abi", "-k", "philox_kat")
    assert "qconform.harness.run.plugin" in loaded  # the probe did run the corpus
    assert [m for m in loaded if m.startswith(NOT_FOR_RUN)] == []


def test_the_run_probe_sees_a_command_that_loads_them():
    # the probe is able to fail: ``qconform stat --help`` loads statistical mode
    loaded = loaded_by("stat", "--help")
    assert "qconform.harness.stat.runner" in loaded
