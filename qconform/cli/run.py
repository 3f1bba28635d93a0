"""``qconform run``: run the vector corpus against an adapter (a thin click layer over pytest).

The command checks its arguments (one-line error, exit status 2, for an unknown
family or adapter, a CUDA device that torch does not see, an unusable corpus or
expectations file), then calls
``pytest.main`` with the qconform plugin and nothing else: no conftest files, no
cache, an empty ini file of its own and the corpus directory as rootdir, so it
collects only the conformance cases whatever the working directory, from a
checkout or a plain install. pytest's terminal output is replaced by the rich
report of :mod:`qconform.harness.run.report`. The exit status is pytest's: 0 when
nothing unexpected happened, 1 for any ``fail``, ``error``, ``xpass``, stale
expectations entry or incomplete run, 2 for a usage or collection error, 5 when
no case was selected.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import click

from qconform.cli.arguments import (
    check_adapter,
    check_corpus,
    check_device,
    check_expectations,
    checkout_expectations,
)
from qconform.cli.errors import UsageLineError

def parse_workers(value: str) -> str:
    if value == "auto" or (value.isdigit()):
        return value
    raise UsageLineError(f"-n takes a number of workers or 'auto', not {value!r}")


def pytest_args(
    adapter: str, device: str, vectors: Path, families: tuple[str, ...], keyword: str | None,
    expectations: Path | None, json_path: Path | None, junit_path: Path | None, workers: str,
    timeout: float | None, ini: Path,
) -> list[str]:
    """The ``pytest.main`` argument list of one run (every path absolute)."""
    from qconform.harness.run.plugin import PLUGIN_ARGS

    args = [
        *PLUGIN_ARGS, "-p", "no:cacheprovider", "-p", "no:terminal", "--noconftest", "--assert=plain",
        "-c", str(ini), "--rootdir", str(vectors), "--confcutdir", str(vectors),
        "--qconform-adapter", adapter, "--qconform-device", device, "--qconform-vectors", str(vectors),
    ]
    for family in families:
        args += ["--qconform-family", family]
    if keyword:
        args += ["-k", keyword]
    if expectations is not None:
        args += ["--qconform-expectations", str(expectations)]
    if json_path is not None:
        args += ["--qconform-json", str(json_path)]
    if junit_path is not None:
        args += ["--junitxml", str(junit_path), "-o", "junit_suite_name=qconform"]
    if workers not in ("0", ""):
        args += ["-n", workers, "--dist", "loadgroup"]
    if timeout is not None:
        args += ["--qconform-timeout", str(timeout)]
    return args


def _absolute(path: str | None) -> Path | None:
    return None if path is None else Path(path).expanduser().resolve()


@click.command("run")
@click.option("--adapter", default="torch", show_default=True, metavar="A",
              help="Adapter to test: a registered name (see docs/adapters.md), shim:<command line>, "
                   "or tcp://HOST:PORT for a wire v2 endpoint (docs/endpoint.md).")
@click.option("--family", "families", multiple=True, metavar="F", help="Only family F (repeatable).")
@click.option("-k", "keyword", metavar="EXPR", help="Only cases whose id, flags or rules match EXPR (pytest -k).")
@click.option("--expectations", metavar="FILE",
              help="Expectations TOML (default: expectations/<adapter>.toml of the checkout, if present).")
@click.option("--json", "json_path", metavar="FILE", help="Write the JSON report to FILE.")
@click.option("--junit", "junit_path", metavar="FILE", help="Write a JUnit XML report to FILE.")
@click.option("-n", "workers", default="0", show_default=True, metavar="N",
              help="pytest-xdist workers (a number or 'auto'; 0 runs in this process).")
@click.option("--device", default="cpu", show_default=True, metavar="D", help="Device the adapter runs on.")
@click.option("--vectors", metavar="DIR", help="Vector corpus (default: $QCONFORM_VECTORS or the installed corpus).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), metavar="S",
              help="Seconds one batch of cases may take before its cases are errors.")
@click.pass_context
def run(ctx: click.Context, adapter: str, families: tuple[str, ...], keyword: str | None,
        expectations: str | None, json_path: str | None, junit_path: str | None, workers: str,
        device: str, vectors: str | None, timeout: float | None) -> None:
    """Run the vector corpus against an adapter and report every case's verdict."""
    import pytest

    from qconform.generators.corpus import default_vectors_dir

    root = _absolute(vectors) or default_vectors_dir().resolve()
    check_corpus(root, families)
    check_adapter(adapter)
    check_device(adapter, device)
    workers = parse_workers(workers)
    expectations_path = _absolute(expectations) if expectations else checkout_expectations(adapter)
    if expectations_path is not None:
        check_expectations(expectations_path)
    with tempfile.TemporaryDirectory(prefix="qconform-run-") as tmp:
        ini = Path(tmp) / "pytest.ini"
        ini.write_text("[pytest]\n", encoding="utf-8")
        args = pytest_args(adapter, device, root, families, keyword, expectations_path, _absolute(json_path),
                           _absolute(junit_path), workers, timeout, ini)
        code = pytest.main(args)
    ctx.exit(int(code))
