"""``qconform run``: run the vector corpus against an adapter (a thin click layer over pytest).

The command checks its arguments (one-line error, exit status 2, for an unknown
family or adapter, a CUDA device that torch does not see, an unusable corpus or
expectations file), then calls
``pytest.main`` with the qconform plugin and nothing else: no conftest files, no
cache, an empty ini file of its own and the corpus directory as rootdir, so it
collects only the conformance cases whatever the working directory, from a
checkout or a plain install. pytest's terminal output is replaced by the rich
report of :mod:`qconform.harness.run.report`. Before pytest starts, every hash of the
corpus is verified (``--corpus-root`` pins its root) and ``-k`` and ``shim:`` are
parsed. The exit status is the plugin's, from the one table of
:class:`qconform.harness.run.gate.RunExit` (docs/harness.md, "Exit codes"); the
JUnit file is written by pytest to a private temporary file and published by the
atomic writer afterwards, so a failure to write it comes after the summary.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import click

from qconform.cli.arguments import (
    check_adapter,
    check_corpus,
    check_device,
    check_expectations,
    check_keyword,
    checkout_expectations,
    start_timeout_option,
)
from qconform.cli.errors import UsageLineError

#: the private folder of one run (its pytest.ini, its JUnit file before publication), named for its pid
RUN_DIR_PREFIX = "qconform-run-"
RUN_DIR = re.compile(rf"^{RUN_DIR_PREFIX}(?P<pid>\d+)-")


def remove_stale_run_dirs(temp: Path | None = None) -> list[Path]:
    """Remove the private folders of runs that ended without removing them (``kill -9``): those
    whose pid no longer runs, as ``qconform generate`` removes a killed writer's temporaries."""
    from qconform.generators.atomic_file import process_alive

    removed = []
    root = Path(temp or tempfile.gettempdir())
    for path in root.glob(f"{RUN_DIR_PREFIX}*"):
        match = RUN_DIR.match(path.name)
        if match and path.is_dir() and not path.is_symlink() and not process_alive(int(match["pid"])):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def parse_workers(value: str) -> str:
    if value == "auto" or (value.isdigit()):
        return value
    raise UsageLineError(f"-n takes a number of workers or 'auto', not {value!r}")


def pytest_args(
    adapter: str,
    device: str,
    vectors: Path,
    families: tuple[str, ...],
    keyword: str | None,
    expectations: Path | None,
    json_path: Path | None,
    junit_path: Path | None,
    workers: str,
    timeout: float | None,
    ini: Path,
    html_path: Path | None = None,
) -> list[str]:
    """The ``pytest.main`` argument list of one run (every path absolute)."""
    from qconform.harness.run.plugin import PLUGIN_ARGS

    args = [
        *PLUGIN_ARGS,
        "-p",
        "no:cacheprovider",
        "-p",
        "no:terminal",
        "--noconftest",
        "--assert=plain",
        "-c",
        str(ini),
        "--rootdir",
        str(vectors),
        "--confcutdir",
        str(vectors),
        "--qconform-adapter",
        adapter,
        "--qconform-device",
        device,
        "--qconform-vectors",
        str(vectors),
    ]
    for family in families:
        args += ["--qconform-family", family]
    if keyword:
        args += ["-k", keyword]
    if expectations is not None:
        args += ["--qconform-expectations", str(expectations)]
    if json_path is not None:
        args += ["--qconform-json", str(json_path)]
    if html_path is not None:
        args += ["--qconform-html", str(html_path)]
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
@click.option(
    "--adapter",
    default="torch",
    show_default=True,
    metavar="A",
    help="Adapter to test: a registered name (see docs/adapters.md), shim:<command line>, "
    "or tcp://HOST:PORT for a wire v2 endpoint (docs/endpoint.md).",
)
@click.option("--family", "families", multiple=True, metavar="F", help="Only family F (repeatable).")
@click.option("-k", "keyword", metavar="EXPR", help="Only cases whose id, flags or rules match EXPR (pytest -k).")
@click.option(
    "--expectations",
    metavar="FILE",
    help="Expectations TOML (default: expectations/<adapter>.toml of the checkout, if present).",
)
@click.option("--json", "json_path", metavar="FILE", help="Write the JSON report to FILE.")
@click.option("--junit", "junit_path", metavar="FILE", help="Write a JUnit XML report to FILE.")
@click.option("--html", "html_path", metavar="FILE", help="Write the run as one self-contained HTML page to FILE.")
@click.option(
    "-n",
    "workers",
    default="0",
    show_default=True,
    metavar="N",
    help="pytest-xdist workers (a number or 'auto'; 0 runs in this process).",
)
@click.option("--device", default="cpu", show_default=True, metavar="D", help="Device the adapter runs on.")
@click.option("--vectors", metavar="DIR", help="Vector corpus (default: $QCONFORM_VECTORS or the installed corpus).")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    metavar="S",
    help="Seconds one batch of cases may take before its cases are errors.",
)
@click.option(
    "--case",
    "case_ids",
    multiple=True,
    metavar="ID",
    help="Only the case with exactly this id (repeatable); what a failure's reproducer uses.",
)
@click.option("-x", "--exitfirst", is_flag=True, help="Stop at the first unexpected result.")
@click.option(
    "--lf",
    "last_failed",
    is_flag=True,
    help="Rerun only the cases that were unexpected in the last run of this adapter on this corpus.",
)
@click.option("--list", "list_only", is_flag=True, help="List the cases that would run, one id a line; run nothing.")
@click.option(
    "--corpus-root",
    metavar="HEX",
    help="Refuse a corpus whose verified root hash is not HEX (pin the corpus of a release gate).",
)
@click.option(
    "--require",
    "required",
    multiple=True,
    metavar="F",
    help="Fail unless the adapter declares family F and supports all its cases (repeatable).",
)
@click.option(
    "--max-unsupported", type=click.IntRange(min=0), metavar="N", help="Fail when more than N cases are unsupported."
)
@click.option(
    "--strict-schema",
    is_flag=True,
    help="Also walk every answer through its family's full JSON Schema "
    "(default: only the structure its comparator reads; docs/harness.md).",
)
@start_timeout_option
@click.pass_context
def run(
    ctx: click.Context,
    adapter: str,
    families: tuple[str, ...],
    keyword: str | None,
    expectations: str | None,
    json_path: str | None,
    junit_path: str | None,
    workers: str,
    device: str,
    vectors: str | None,
    timeout: float | None,
    case_ids: tuple[str, ...],
    exitfirst: bool,
    last_failed: bool,
    list_only: bool,
    corpus_root: str | None,
    required: tuple[str, ...],
    max_unsupported: int | None,
    html_path: str | None = None,
    strict_schema: bool = False,
    start_timeout: float | None = None,
) -> None:
    """Run the vector corpus against an adapter and report every case's verdict."""
    import pytest

    from qconform.generators.corpus import default_vectors_dir
    from qconform.harness.run.gate import RunExit
    from qconform.harness.run.triage import LastFailed

    root = _absolute(vectors) or default_vectors_dir().resolve()
    if corpus_root is not None and not _is_root(corpus_root):
        raise UsageLineError(f"--corpus-root takes the 64 hex digits of a corpus root, not {corpus_root!r}")
    index = check_corpus(root, families + required, corpus_root, verify=True)
    check_adapter(adapter)
    check_device(adapter, device)
    check_keyword(keyword)
    workers = parse_workers(workers)
    expectations_path = _absolute(expectations) if expectations else checkout_expectations(adapter)
    if expectations_path is not None:
        check_expectations(expectations_path)
    cases = list(case_ids)
    if last_failed:
        recorded = LastFailed().get(str(root), adapter)
        if not recorded:
            click.echo(f"--lf: no unexpected result recorded for adapter {adapter} on {root}; nothing to rerun")
            ctx.exit(RunExit.NO_CASES)
        cases += [cid for cid in recorded if cid in index["cases"]]
    unknown = [cid for cid in cases if cid not in index["cases"]]
    if unknown:
        raise UsageLineError(
            f"unknown case {unknown[0]} (not in the corpus at {root}); `qconform run --list` lists them"
        )
    if cases and not families:
        families = tuple(dict.fromkeys(cid.split("/", 1)[0] for cid in cases))
    extra = [arg for cid in dict.fromkeys(cases) for arg in ("--qconform-case", cid)]
    extra += [arg for family in required for arg in ("--qconform-require", family)]
    if max_unsupported is not None:
        extra += ["--qconform-max-unsupported", str(max_unsupported)]
    if strict_schema:
        extra += ["--qconform-strict-schema"]
    if start_timeout is not None:
        extra += ["--qconform-start-timeout", str(start_timeout)]
    extra += ["--collect-only"] if list_only else ["--qconform-record-failures"]
    if exitfirst:
        extra += ["-x"]
    remove_stale_run_dirs()
    with tempfile.TemporaryDirectory(prefix=f"{RUN_DIR_PREFIX}{os.getpid()}-") as tmp:
        ini = Path(tmp) / "pytest.ini"
        ini.write_text("[pytest]\n", encoding="utf-8")
        junit_tmp = Path(tmp) / "junit.xml" if junit_path else None
        args = pytest_args(
            adapter,
            device,
            root,
            families,
            keyword,
            expectations_path,
            _absolute(json_path),
            junit_tmp,
            workers,
            timeout,
            ini,
            _absolute(html_path),
        )
        recorder = ExitRecorder()
        code = pytest.main(args + extra, plugins=[recorder])
        status = recorder.status if recorder.status is not None else from_pytest(int(code))
        if junit_tmp is not None and not list_only and status != RunExit.ADAPTER_START:
            assert junit_path is not None  # junit_tmp is set only with --junit
            status = _publish_junit(junit_tmp, Path(junit_path).expanduser().resolve(), status)
    ctx.exit(int(status))


def _is_root(text: str) -> bool:
    return len(text) == 64 and all(c in "0123456789abcdefABCDEF" for c in text)


class ExitRecorder:
    """A pytest plugin object that keeps the run's exit status (harness/run/gate.py) after pytest ends."""

    def __init__(self) -> None:
        self.status: int | None = None

    def pytest_unconfigure(self, config) -> None:
        from qconform.harness.run.plugin import EXIT_STATUS

        self.status = config.stash.get(EXIT_STATUS, None)


def from_pytest(code: int) -> int:
    """Our status for a pytest status the plugin did not decide (it failed before the session ended)."""
    from qconform.harness.run.gate import RunExit

    return {0: RunExit.OK, 1: RunExit.FAILED, 2: RunExit.SIGINT, 4: RunExit.USAGE, 5: RunExit.NO_CASES}.get(
        code, RunExit.FAILED
    )


def _publish_junit(written: Path, target: Path, status: int) -> int:
    """Move pytest's JUnit file into place atomically; on failure one ``Error:`` line and status 4."""
    from qconform.generators import atomic_file
    from qconform.harness.run.gate import RunExit

    try:
        atomic_file.write_bytes(target, written.read_bytes())
    except OSError as exc:
        click.echo(f"Error: JUnit report not written: {exc}", err=True)
        return RunExit.REPORT_WRITE if status in (RunExit.OK, RunExit.FAILED, RunExit.NO_CASES) else status
    return status
