"""``qconform run``: run the vector corpus against an adapter (a thin click layer over pytest).

The command checks its arguments (one-line error, exit status 2, for an unknown
family or adapter, a CUDA device that torch does not see, an unusable corpus or
expectations file), then calls
``pytest.main`` with the qconform plugin and nothing else: no conftest files, no
cache, an empty ini file of its own and the corpus directory as rootdir, so it
collects only the conformance cases whatever the working directory, from a
checkout or a plain install. pytest's terminal output is replaced by the rich
report of :mod:`qconform.harness.report`. The exit status is pytest's: 0 when
nothing unexpected happened, 1 for any ``fail``, ``error``, ``xpass``, stale
expectations entry or incomplete run, 2 for a usage or collection error, 5 when
no case was selected.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import click

#: name of the expectations folder at the root of a checkout
EXPECTATIONS_DIR = "expectations"


class RunUsageError(click.ClickException):
    """A bad argument: one ``Error:`` line, exit status 2, no usage banner."""

    exit_code = 2


def checkout_expectations(adapter: str) -> Path | None:
    """``expectations/<adapter>.toml`` of the checkout this package runs from, if present."""
    import qconform.harness

    from qconform.adapters import vllm

    name = vllm.NAME if vllm.is_vllm(adapter) else adapter
    path = Path(qconform.harness.__file__).resolve().parent.parent / EXPECTATIONS_DIR / f"{name}.toml"
    return path if path.is_file() else None


def check_device(adapter: str, device: str) -> None:
    """Refuse ``--device cuda`` up front where torch sees no CUDA device, for the bundled
    in-process adapters (a shim or an endpoint owns its device and says so itself):
    otherwise every case would be an error saying the same thing."""
    from qconform.harness.client import SHIM_PREFIX
    from qconform.harness.registry import TCP_PREFIX

    from qconform.adapters import vllm

    if not device.startswith("cuda") or adapter.startswith((SHIM_PREFIX, TCP_PREFIX)) or vllm.is_vllm(adapter):
        return
    try:
        import torch
    except ImportError:
        raise RunUsageError(f"--device {device} needs torch with CUDA; torch is not installed") from None
    if not torch.cuda.is_available():
        raise RunUsageError(f"--device {device}: torch {torch.__version__} sees no CUDA device on this machine")


def check_adapter(adapter: str) -> None:
    from qconform.harness.client import SHIM_PREFIX
    from qconform.harness.registry import TCP_PREFIX, available_adapters

    if adapter.startswith(TCP_PREFIX):
        from qconform.harness.tcp_adapter import parse_tcp_url

        try:
            parse_tcp_url(adapter)
        except ValueError as exc:
            raise RunUsageError(f"{exc}, e.g. --adapter tcp://127.0.0.1:7700") from None
        return
    if adapter.startswith(SHIM_PREFIX):
        if not adapter[len(SHIM_PREFIX):].strip():
            raise RunUsageError("shim: needs a command line, e.g. --adapter 'shim:./my_shim --flag'")
        return
    from qconform.adapters import vllm

    if vllm.is_vllm(adapter):
        try:
            vllm.shim_command(adapter)
        except vllm.VllmSetupError as exc:
            raise RunUsageError(str(exc)) from None
        return
    names = available_adapters()
    if adapter not in names:
        raise RunUsageError(f"unknown adapter {adapter!r}; available adapters: {', '.join(names)}")


def check_corpus(vectors: Path, families: tuple[str, ...]) -> None:
    from qconform.generators.validation import VectorFileError, load_index

    try:
        index = load_index(vectors)
    except VectorFileError as exc:
        raise RunUsageError(f"no usable vector corpus: {exc}") from None
    unknown = [f for f in families if f not in index["families"]]
    if unknown:
        raise RunUsageError(
            f"unknown family {', '.join(unknown)}; the corpus at {vectors} has: {', '.join(index['families'])}")


def check_expectations(path: Path) -> None:
    from qconform.harness.expectations import Expectations, ExpectationsError

    try:
        Expectations.load(path)
    except ExpectationsError as exc:
        raise RunUsageError(str(exc)) from None


def parse_workers(value: str) -> str:
    if value == "auto" or (value.isdigit()):
        return value
    raise RunUsageError(f"-n takes a number of workers or 'auto', not {value!r}")


def pytest_args(
    adapter: str, device: str, vectors: Path, families: tuple[str, ...], keyword: str | None,
    expectations: Path | None, json_path: Path | None, junit_path: Path | None, workers: str,
    timeout: float | None, ini: Path,
) -> list[str]:
    """The ``pytest.main`` argument list of one run (every path absolute)."""
    from qconform.harness.plugin import PLUGIN_ARGS

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
