"""``qconform run`` (cli.run, cli.arguments): argument checks, the pytest call, exit codes, reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from harness_stubs import ScriptedAdapter, corpus_cases, small_corpus

from qconform.cli.arguments import checkout_expectations
from qconform.cli.run import pytest_args, run
from qconform.harness.run import plugin

pytestmark = pytest.mark.rules()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = small_corpus(tmp_path_factory.mktemp("corpus"), ("rng_abi",))
    return root, corpus_cases(root)


def invoke(*args: str):
    return CliRunner().invoke(run, list(args))


@pytest.mark.parametrize(
    "args, message",
    [
        (["--family", "nope"], "unknown family nope"),
        (["--adapter", "no-such-adapter"], "unknown adapter 'no-such-adapter'"),
        (["--adapter", "reference", "--expectations", "/no/such.toml"], "cannot read expectations file"),
        (["--adapter", "reference", "-n", "many"], "-n takes a number"),
        (["--adapter", "shim:  "], "shim: needs a command line"),
    ],
)
def test_bad_arguments_are_one_line_errors_with_status_2(corpus, args, message):
    result = invoke("--vectors", str(corpus[0]), *args)
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and lines[0].startswith("Error:")


def test_a_cuda_device_torch_does_not_see_is_a_start_error(corpus, monkeypatch):
    """One rule for every device (docs/harness.md, "Exit codes"): one the machine lacks is exit 3."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = invoke("--vectors", str(corpus[0]), "--adapter", "torch", "--device", "cuda")
    assert result.exit_code == 3
    assert result.output.strip().splitlines() == [
        f"Error: --device cuda: torch {torch.__version__} sees no CUDA device on this machine; run with --device cpu"
    ]
    monkeypatch.setitem(__import__("sys").modules, "torch", None)
    result = invoke("--vectors", str(corpus[0]), "--adapter", "triton", "--device", "cuda:1")
    assert result.exit_code == 3 and "torch is not installed" in result.output


def test_a_directory_without_an_index_is_a_usage_error(tmp_path):
    result = invoke("--vectors", str(tmp_path), "--adapter", "reference")
    assert result.exit_code == 2 and "no usable vector corpus" in result.output


def test_malformed_expectations_are_a_usage_error(corpus, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[xfail]\n'a/b/c' = ''\n")
    result = invoke("--vectors", str(corpus[0]), "--adapter", "reference", "--expectations", str(bad))
    assert result.exit_code == 2 and "non-empty reason" in result.output


def test_pytest_arguments_isolate_the_run(tmp_path):
    args = pytest_args(
        "torch",
        "cuda",
        tmp_path,
        ("rng_abi",),
        "kat",
        None,
        tmp_path / "r.json",
        tmp_path / "r.xml",
        "4",
        30.0,
        tmp_path / "pytest.ini",
    )
    text = " ".join(args)
    for part in (
        "-p no:qconform -p qconform.harness.run.plugin",
        "--noconftest",
        "-p no:cacheprovider",
        f"--rootdir {tmp_path}",
        f"-c {tmp_path / 'pytest.ini'}",
        "--qconform-family rng_abi",
        "-k kat",
        "-n 4 --dist loadgroup",
        f"--junitxml {tmp_path / 'r.xml'}",
        "--qconform-timeout 30.0",
    ):
        assert part in text
    assert "-n" not in pytest_args("torch", "cpu", tmp_path, (), None, None, None, None, "0", None, tmp_path)


def test_default_expectations_come_from_the_checkout():
    assert checkout_expectations("adapter-without-a-file") is None
    shipped = sorted(p.stem for p in (Path(__file__).parents[2] / "expectations").glob("*.toml"))
    for name in shipped:
        path = checkout_expectations(name)
        assert path is not None and path.name == f"{name}.toml"


def stub(monkeypatch, cases, overrides=None):
    monkeypatch.setattr(plugin, "open_client", ScriptedAdapter(cases, overrides).open)


def test_a_clean_run_exits_0_and_writes_both_reports(corpus, monkeypatch, tmp_path):
    stub(monkeypatch, corpus[1])
    result = invoke(
        "--vectors",
        str(corpus[0]),
        "--adapter",
        "reference",
        "--json",
        str(tmp_path / "r.json"),
        "--junit",
        str(tmp_path / "r.xml"),
    )
    assert result.exit_code == 0, result.output
    assert "adapter reference on cpu" in result.output and "OK:" in result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["counts"]["pass"] == len(corpus[1])
    assert (tmp_path / "r.xml").read_text().count("<testcase") == len(corpus[1])


@pytest.mark.parametrize("flag, strict", [((), False), (("--strict-schema",), True)])
def test_strict_schema_reaches_the_client(corpus, monkeypatch, flag, strict):
    scripted = ScriptedAdapter(corpus[1])
    monkeypatch.setattr(plugin, "open_client", scripted.open)
    result = invoke("--vectors", str(corpus[0]), "--adapter", "reference", *flag)
    assert result.exit_code == 0, result.output
    assert scripted.strict and set(scripted.strict) == {strict}


def test_unexpected_results_exit_1_and_are_listed(corpus, monkeypatch, tmp_path):
    victim = next(c for c in corpus[1] if c["result"] == "valid")
    stub(monkeypatch, corpus[1], {victim["id"]: {"error": "ZERO_MASS"}})
    result = invoke("--vectors", str(corpus[0]), "--adapter", "reference", "-k", victim["id"].split("/")[1])
    assert result.exit_code == 1
    assert f"FAIL {victim['id']}: refused a valid case with ZERO_MASS" in result.output
    assert "deselected" in result.output
