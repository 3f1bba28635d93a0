"""Issue #12 §1: ``qconform run`` never says OK when it should not, and never loses results.

One test per bullet; each fails on the behaviour the issue reported (see the docstrings).
The exit-status table of docs/harness.md is checked row by row against RunExit.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from harness_stubs import ScriptedAdapter, corpus_cases, small_corpus

from qconform.cli.run import run
from qconform.generators import atomic_file
from qconform.generators.corpus import generate
from qconform.generators.registry import load_family
from qconform.harness.run import plugin
from qconform.harness.run.gate import RunExit

pytestmark = pytest.mark.rules()
DOCS = Path(__file__).resolve().parents[2] / "docs"

SHIM = textwrap.dedent("""\
    import json, os, sys, time
    FAMILIES = {families!r}
    for line in sys.stdin:
        req = json.loads(line)
        if req["op"] == "get_config":
            print(json.dumps({{"id": req["id"], "status": "ok", "config": {{"protocol": 1, "name": "t",
                  "capabilities": {{"families": FAMILIES}}, "precision": {{}}}}}}), flush=True)
        elif req["op"] == "shutdown":
            break
        elif {hang!r}:
            open({marker!r}, "w").write(str(os.getpid()))
            time.sleep(1000)
        else:
            print(json.dumps({{"id": req["id"], "status": "unimplemented"}}), flush=True)
""")


def shim(tmp_path: Path, families=("rng_abi",), hang=False, name="shim.py") -> tuple[str, Path]:
    marker = tmp_path / f"{name}.pid"
    path = tmp_path / name
    path.write_text(SHIM.format(families=list(families), hang=hang, marker=str(marker)))
    return f"shim:{sys.executable} {path}", marker


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = small_corpus(tmp_path_factory.mktemp("corpus"), ("rng_abi",))
    return root, corpus_cases(root)


def invoke(*args: str):
    return CliRunner().invoke(run, list(args))


def qconform(*args: str, env: dict | None = None, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "qconform", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
        **kwargs,
    )


# -- capability declarations and adapters that cannot start ---------------------------


def test_an_unknown_family_in_a_capability_declaration_is_a_start_error(corpus, tmp_path):
    """Was: ``OK: 32 unsupported``, exit 0, even with --family rng_abi."""
    adapter, _ = shim(tmp_path, families=["rng-abi"])
    result = invoke("--vectors", str(corpus[0]), "--adapter", adapter, "--family", "rng_abi")
    assert result.exit_code == RunExit.ADAPTER_START, result.output
    assert "OK" not in result.output
    assert [line for line in result.output.splitlines() if "Error" in line] == [
        "Error: AdapterStartError: adapter declares unknown family 'rng-abi'; known families: "
        + ", ".join(
            sorted(
                set(json.loads((corpus[0] / "index.json").read_text())["families"])
                | set(__import__("qconform.generators.registry", fromlist=["x"]).family_names())
                | {__import__("qconform.harness.adapter", fromlist=["x"]).ECHO_FAMILY}
            )
        )
    ]


@pytest.mark.parametrize("kind", ["missing program", "refused port", "missing module", "garbage config"])
def test_an_adapter_that_cannot_start_is_one_line_that_stops_the_run(corpus, tmp_path, kind):
    """Was: one error per case, each with the full traceback, then "see the JSON report"."""
    adapter = {
        "missing program": "shim:/nonexistent/binary",
        "refused port": "tcp://127.0.0.1:1",
        "missing module": f"shim:{sys.executable} -c 'import qconform_no_such_module'",
        "garbage config": f"shim:{sys.executable} -c 'print(\"hello\", flush=True); input()'",
    }[kind]
    result = invoke("--vectors", str(corpus[0]), "--adapter", adapter)
    assert result.exit_code == RunExit.ADAPTER_START, result.output
    errors = [line for line in result.output.splitlines() if "Error" in line]
    assert len(errors) == 1 and errors[0].startswith("Error: AdapterStartError: "), result.output
    assert "Traceback" not in result.output and "JSON report" not in result.output
    assert "pass" not in result.output and "unexpected" not in result.output  # no table, no per-case lines
    if kind == "missing module":
        assert errors[0].endswith(
            "No module named 'qconform_no_such_module' (does the shim: command name the "
            "interpreter that has it? give its absolute path)"
        )


def test_a_run_without_torch_prints_one_line_naming_the_extra(corpus, tmp_path):
    """Was: 1231 lines (50 copies of the import traceback) and no install hint."""
    stub = tmp_path / "stub" / "torch"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("raise ImportError('torch is stubbed out by the test')\n")
    env = {"PYTHONPATH": os.pathsep.join([str(stub.parent), os.environ.get("PYTHONPATH", "")])}
    proc = qconform("run", "--vectors", str(corpus[0]), env=env)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == RunExit.ADAPTER_START, out + err
    assert err.strip().splitlines() == [err.strip()], err
    assert "pip install 'qconform[torch]'" in err and "Traceback" not in out + err


# -- signals and orphans --------------------------------------------------------------


def _wait_for(path: Path, seconds: float = 60.0) -> int:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return int(path.read_text())
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


def _dead(pid: int, seconds: float = 10.0) -> bool:
    """The process is gone (or a zombie: killed, not yet reaped by its new parent)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc and the Linux parent-death signal")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_run_cleanly_with_a_partial_report(corpus, tmp_path, signum):
    """Was (SIGTERM): exit 124 under timeout, no report, the shim left running under PID 1.
    SIGINT exited 2 where the docs said 1; both now exit 128 + the signal number."""
    adapter, marker = shim(tmp_path, hang=True)
    report = tmp_path / "t.json"
    proc = qconform("run", "--vectors", str(corpus[0]), "--adapter", adapter, "--json", str(report))
    child = _wait_for(marker)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, out + err
    assert _dead(child), "the shim outlived the run"
    data = json.loads(report.read_text())
    assert data["ok"] is False and f"run interrupted by {signal.Signals(signum).name}" in data["problems"]
    assert f"run interrupted by {signal.Signals(signum).name}" in out and "Traceback" not in out + err


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_shim_dies_with_its_parent_even_after_sigkill(corpus, tmp_path):
    adapter, marker = shim(tmp_path, hang=True)
    proc = qconform("run", "--vectors", str(corpus[0]), "--adapter", adapter)
    child = _wait_for(marker)
    proc.kill()
    proc.communicate(timeout=60)
    assert _dead(child), "the shim was orphaned"


# -- one atomic writer ----------------------------------------------------------------


def test_the_atomic_writer_makes_parents_uses_0644_and_leaves_nothing_behind(tmp_path):
    old = os.umask(0o077)
    try:
        atomic_file.write_text(tmp_path / "a" / "b" / "r.json", "{}\n")
    finally:
        os.umask(old)
    target = tmp_path / "a" / "b" / "r.json"
    assert target.read_text() == "{}\n" and (target.stat().st_mode & 0o777) == 0o644
    assert [p.name for p in target.parent.iterdir()] == ["r.json"]
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("x")
    for bad in (tmp_path / "dir", tmp_path / "file" / "r.json"):
        with pytest.raises(atomic_file.WriteError, match=f"cannot write {re.escape(str(bad))}: "):
            atomic_file.write_text(bad, "{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "dir", "file"]


def test_stale_temporaries_are_recognised_by_their_dead_writer(tmp_path):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    ).stdout.strip()
    stale = [tmp_path / f".rng_abi.json.{dead}.0123456789ab.tmp", tmp_path / ".rng_abi.json.k3j_x9a2.tmp"]
    live = tmp_path / f".rng_abi.json.{os.getpid()}.0123456789ab.tmp"
    other = tmp_path / ".hidden.tmp"
    for path in (*stale, live, other):
        path.write_text("partial")
    assert atomic_file.remove_stale_temporaries([tmp_path]) == sorted(stale)
    assert sorted(tmp_path.iterdir()) == sorted([live, other])


@pytest.mark.parametrize("option", ["--json", "--junit"])
def test_a_report_that_cannot_be_written_comes_after_the_summary_as_one_error(corpus, monkeypatch, tmp_path, option):
    """Was: a traceback, and the verdict table never printed."""
    monkeypatch.setattr(plugin, "open_client", ScriptedAdapter(corpus[1]).open)
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("x")
    for target in (tmp_path / "dir", tmp_path / "file" / "r"):
        result = invoke("--vectors", str(corpus[0]), "--adapter", "reference", option, str(target))
        assert result.exit_code == RunExit.REPORT_WRITE, result.output
        lines = result.output.strip().splitlines()
        assert lines[-2].startswith("OK: ") and lines[-1].startswith("Error: ") and str(target) in lines[-1]
        assert "Traceback" not in result.output


def test_a_report_into_a_missing_directory_is_created_with_mode_0644(corpus, monkeypatch, tmp_path):
    """Was: reports 0600 (JUnit 0644)."""
    monkeypatch.setattr(plugin, "open_client", ScriptedAdapter(corpus[1]).open)
    result = invoke(
        "--vectors",
        str(corpus[0]),
        "--adapter",
        "reference",
        "--json",
        str(tmp_path / "new" / "r.json"),
        "--junit",
        str(tmp_path / "new" / "r.xml"),
    )
    assert result.exit_code == 0, result.output
    for name in ("r.json", "r.xml"):
        assert ((tmp_path / "new" / name).stat().st_mode & 0o777) == 0o644
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == ["r.json", "r.xml"]


def test_generate_cleans_the_temporaries_of_a_killed_generation(tmp_path):
    """Was: ``.X.json.*.tmp`` files (up to 15 MB) that nothing cleaned or reported."""
    root = small_corpus(tmp_path / "v", ("rng_abi",))
    litter = [root / ".rng_abi.json.k3j_x9a2.tmp", root / "schemas" / ".index.schema.json.abcdefgh.tmp"]
    for path in litter:
        path.write_text("half")
    generate(root, [load_family("rng_abi")])
    assert not any(path.exists() for path in litter)


# -- corpus integrity -----------------------------------------------------------------


@pytest.fixture
def copy(corpus, tmp_path):
    root = tmp_path / "v"
    shutil.copytree(corpus[0], root)
    return root


def _edit_json(path: Path, edit) -> None:
    obj = json.loads(path.read_text())
    edit(obj)
    path.write_text(json.dumps(obj, sort_keys=True, indent=1) + "\n")


def _first_case(obj):
    return obj["testGroups"][0]["tests"][0]


@pytest.mark.parametrize(
    "tamper, names",
    [
        ("root", "index.json"),
        ("case", "rng_abi.json"),
        ("case and file hash", "case rng_abi/"),
        ("schema", "rng_abi.schema.json"),
    ],
)
def test_run_verifies_every_hash_and_names_the_file(copy, corpus, monkeypatch, tamper, names):
    """Was: index.json's root, case hashes and schemaSha256 unchecked; a fake root printed as provenance."""
    from qconform.generators.corpus import sha256_hex

    monkeypatch.setattr(plugin, "open_client", ScriptedAdapter(corpus[1]).open)
    index = copy / "index.json"
    if tamper == "root":
        _edit_json(index, lambda o: o.update(root="0" * 64))
    elif tamper == "case":
        _edit_json(copy / "rng_abi.json", lambda o: _first_case(o).update(comment="edited"))
    elif tamper == "case and file hash":  # the file hash updated to match: the case hash still catches it
        _edit_json(copy / "rng_abi.json", lambda o: _first_case(o).update(comment="edited"))
        digest = sha256_hex((copy / "rng_abi.json").read_bytes())
        _edit_json(index, lambda o: o["families"]["rng_abi"].update(sha256=digest))
    else:
        schema = copy / "schemas" / "rng_abi.schema.json"
        schema.write_text(schema.read_text() + " ")
    result = invoke("--vectors", str(copy), "--adapter", "reference")
    assert result.exit_code == RunExit.USAGE, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: corpus integrity: ") and names in lines[0]


def test_a_half_updated_corpus_names_the_killed_generation(copy, corpus):
    """Was: intact families reported as "run interrupted"."""
    _edit_json(copy / "rng_abi.json", lambda o: _first_case(o).update(comment="half"))
    (copy / ".index.json.k3j_x9a2.tmp").write_text("{")
    result = invoke("--vectors", str(copy), "--adapter", "reference")
    assert result.exit_code == RunExit.USAGE
    assert "`qconform generate` was killed while writing" in result.output and "interrupted" not in result.output


def test_corpus_root_pins_the_corpus(corpus, monkeypatch):
    monkeypatch.setattr(plugin, "open_client", ScriptedAdapter(corpus[1]).open)
    root = json.loads((corpus[0] / "index.json").read_text())["root"]
    assert invoke("--vectors", str(corpus[0]), "--adapter", "reference", "--corpus-root", root).exit_code == 0
    result = invoke("--vectors", str(corpus[0]), "--adapter", "reference", "--corpus-root", "ab" * 32)
    assert result.exit_code == RunExit.USAGE and f"is not the pinned --corpus-root {'ab' * 32}" in result.output
    result = invoke("--vectors", str(corpus[0]), "--adapter", "reference", "--corpus-root", "abc")
    assert result.exit_code == RunExit.USAGE and "64 hex digits" in result.output


# -- exit codes and summaries: one row of docs/harness.md each -----------------------


def test_the_documented_exit_table_is_run_exit():
    text = (DOCS / "harness.md").read_text()
    table = text.split("## Exit codes", 1)[1]
    documented = {int(m) for m in re.findall(r"^\| (\d+) \|", table, re.M)}
    assert documented == {int(code) for code in RunExit}


def test_exit_0_nothing_unexpected(corpus, monkeypatch):
    monkeypatch.setattr(plugin, "open_client", ScriptedAdapter(corpus[1]).open)
    result = invoke("--vectors", str(corpus[0]), "--adapter", "reference")
    assert result.exit_code == RunExit.OK and f"supported {len(corpus[1])}/{len(corpus[1])} (100%)" in result.output


def test_exit_1_unexpected(corpus, monkeypatch):
    victim = next(c for c in corpus[1] if c["result"] == "valid")
    monkeypatch.setattr(plugin, "open_client", ScriptedAdapter(corpus[1], {victim["id"]: {"error": "X"}}).open)
    result = invoke("--vectors", str(corpus[0]), "--adapter", "reference")
    assert result.exit_code == RunExit.FAILED and "FAILED: " in result.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["-k", "bad ("], "-k 'bad (' is not a valid expression"),
        (["--adapter", 'shim:"unterminated'], "cannot parse the shim: command line"),
        (["--case", "rng_abi/no/such"], "unknown case rng_abi/no/such"),
        (["--require", "nope"], "unknown family nope"),
    ],
)
def test_exit_2_usage_errors(corpus, args, message):
    """Was: ``-k "bad ("`` exit 4 with an "interrupted" summary; ``shim:"unterminated`` exit 1."""
    result = invoke("--vectors", str(corpus[0]), "--adapter", "reference", *args)
    assert result.exit_code == RunExit.USAGE, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and message in lines[0]


def test_exit_5_no_case_selected_is_not_ok(corpus, monkeypatch):
    """Was: ``-k nomatch`` printed ``OK:`` and exited 5."""
    monkeypatch.setattr(plugin, "open_client", ScriptedAdapter(corpus[1]).open)
    result = invoke("--vectors", str(corpus[0]), "--adapter", "reference", "-k", "nomatch")
    assert result.exit_code == RunExit.NO_CASES
    assert "OK" not in result.output and "NO CASES: no case selected" in result.output


# -- coverage -------------------------------------------------------------------------


def test_require_and_max_unsupported_fail_a_run_that_silently_dropped_a_family(corpus, monkeypatch, tmp_path):
    """Was: ``OK`` with 73% of the corpus unsupported; nothing could require a family."""
    cat = [c for c in corpus[1] if c["family"] == "categorical_sampling"]
    rng = [c for c in corpus[1] if c["family"] == "rng_abi"]
    assert rng and not cat  # the module corpus holds rng_abi only
    monkeypatch.setattr(plugin, "open_client", ScriptedAdapter(corpus[1], families=["categorical_sampling"]).open)
    result = invoke("--vectors", str(corpus[0]), "--adapter", "reference", "--json", str(tmp_path / "r.json"))
    assert result.exit_code == RunExit.OK and f"supported 0/{len(rng)} (0%)" in result.output
    assert json.loads((tmp_path / "r.json").read_text())["coverage"] == {"supported": 0, "judged": len(rng)}
    result = invoke("--vectors", str(corpus[0]), "--adapter", "reference", "--require", "rng_abi")
    assert result.exit_code == RunExit.FAILED
    assert "coverage: --require rng_abi, but the adapter does not declare rng_abi" in result.output
    result = invoke("--vectors", str(corpus[0]), "--adapter", "reference", "--max-unsupported", str(len(rng) - 1))
    assert result.exit_code == RunExit.FAILED and f"more than --max-unsupported {len(rng) - 1}" in result.output
    result = invoke("--vectors", str(corpus[0]), "--adapter", "reference", "--max-unsupported", str(len(rng)))
    assert result.exit_code == RunExit.OK
