"""The probe classes of issue #22 that had no test of their own, one probe each (the catalogue
of every class, and the test that holds it: tests/robustness/README.md).

A probe is a command line and the exit status and line it must end with (docs/harness.md, "Exit
codes"). Every probe also ends with no traceback, no temporary file in the temporary folder or in
the probe's own folder, and none of its processes left running. Before these probes: ``show`` and
``stat`` on a truncated, edited or missing vector file ended in a ``VectorFileError`` traceback
(exit 1); ``rules --tests`` or ``--vectors`` naming a directory that does not exist reported every
rule uncovered and exited 0; ``mutants`` with a torch that is installed but cannot be imported
ended in a 31-line traceback.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from qconform.cli.group import cli
from qconform.generators.corpus import default_vectors_dir
from qconform.harness.run.gate import RunExit
from robustness.processes import alive, qconform

PROBE_SHIM = Path(__file__).resolve().with_name("probe_shim.py")
CASE = "rng_abi/philox_kat/zeros"  # one case: a probe of run sends one request after get_config
ONE = ("--family", "rng_abi", "--case", CASE)


def shim(mode: str) -> str:
    """The ``shim:`` spec of tests/robustness/probe_shim.py in ``mode``."""
    return "shim:" + shlex.join([sys.executable, str(PROBE_SHIM), mode])


@dataclass(frozen=True)
class Probe:
    #: the command line; ``{tmp}`` is the probe's own folder, ``{corrupt}`` a corpus with one bad file
    args: tuple[str, ...]
    status: int
    #: a line of the output must match this (re.search)
    line: str
    #: ``{corrupt}``: the family file made bad, and how (truncated, edited, missing)
    corrupt: tuple[str, str] = ("", "")


USAGE, START, UNEXPECTED, WRITE = RunExit.USAGE, RunExit.ADAPTER_START, RunExit.FAILED, RunExit.REPORT_WRITE
BAD_OPTION = "^Error: Invalid value for '{}'"

PROBES: dict[str, Probe] = {
    # --- shims that cannot start (3) ---------------------------------------------------------------
    "shim: get_config answered with garbage": Probe(
        ("run", "--adapter", shim("garbage-config"), *ONE),
        START,
        r"did not start: protocol violation: reply is not JSON",
    ),
    "shim: another protocol version": Probe(
        ("run", "--adapter", shim("protocol2"), *ONE), START, r"config\.protocol is 2; this harness speaks 1"
    ),
    "shim: silent at start": Probe(
        ("run", "--adapter", shim("silent-start"), "--start-timeout", "1", *ONE),
        START,
        r"did not start: timed out after 1s waiting for the answer to get_config",
    ),
    "shim: dies at start": Probe(
        ("run", "--adapter", shim("dies-at-start"), *ONE),
        START,
        r"exited with status 7 before answering request 1; stderr: probe_shim: cannot open the device",
    ),
    "shim: program missing": Probe(
        ("run", "--adapter", "shim:/nonexistent/engine_shim", *ONE), START, r"^Error: .*/nonexistent/engine_shim"
    ),
    # --- shims that crash, hang or lie while running: their cases are errors (1) -------------------
    "shim: crashes mid-run": Probe(
        ("run", "--adapter", shim("crash"), *ONE), UNEXPECTED, r"ERROR .*exited with status 3 before answering request"
    ),
    "shim: killed mid-run": Probe(
        ("run", "--adapter", shim("killed"), *ONE), UNEXPECTED, r"ERROR .*killed by signal 9 \(SIGKILL\)"
    ),
    "shim: hangs": Probe(
        ("run", "--adapter", shim("hang"), "--timeout", "1", *ONE), UNEXPECTED, r"ERROR .*: timed out after 1s"
    ),
    "shim: closes stdout and stays": Probe(
        ("run", "--adapter", shim("close-stdout"), *ONE), UNEXPECTED, r"ERROR .*closed its stdout but is still running"
    ),
    "shim: answers another request's id": Probe(
        ("run", "--adapter", shim("wrong-id"), *ONE),
        UNEXPECTED,
        r"ERROR .*protocol violation: reply id \d+ does not match request id \d+",
    ),
    "shim: refuses the family it declares, required": Probe(
        ("run", "--adapter", shim("refuses-declared"), "--require", "rng_abi", *ONE),
        UNEXPECTED,
        r"coverage: --require rng_abi, but 1 case\(s\) of rng_abi were unsupported",
    ),
    "shim: floods its stderr": Probe(("run", "--adapter", shim("stderr-flood"), *ONE), RunExit.OK, r"^OK: 1 pass"),
    # --- an unknown adapter, on every command that takes one (2) -----------------------------------
    **{
        f"{command}: unknown adapter": Probe(
            (command, "--adapter", "nonesuch", *extra), USAGE, r"^Error: unknown adapter 'nonesuch'; available adapters"
        )
        for command, extra in [
            ("run", ()),
            ("stat", ()),
            ("fuzz", ("--examples", "1")),
            ("accumulate", ("--family", "rng_abi", "--count", "1")),
            ("batch-invariance", ()),
        ]
    },
    # --- the corpus: missing, not a directory, a bad family file (2) -------------------------------
    **{
        f"{args[0]}: vectors folder missing": Probe(
            (*args, "--vectors", "{tmp}/none"), USAGE, r"^Error: no usable .*vectors?.*No such file or directory"
        )
        for args in [
            ("run", "--adapter", "reference"),
            ("show", CASE),
            ("stat", "--adapter", "reference"),
            ("batch-invariance", "--adapter", "reference"),
        ]
    },
    "run: vectors path is a file": Probe(
        ("run", "--adapter", "reference", "--vectors", str(PROBE_SHIM)), USAGE, r"^Error: no usable vector corpus"
    ),
    "run: a family file truncated": Probe(
        ("run", "--adapter", "reference", "--vectors", "{corrupt}", *ONE),
        USAGE,
        r"^Error: corpus integrity: .*rng_abi\.json does not match the sha256",
        ("rng_abi", "truncated"),
    ),
    **{
        f"{args[0]}: a family file {how}": Probe(
            (*args, "--vectors", "{corrupt}"),
            USAGE,
            rf"^Error: no usable vector corpus: .*{family}\.json",
            (family, how),
        )
        for args, family in [
            (("show", CASE), "rng_abi"),
            (("stat", "--adapter", "reference", "-k", "no_case_has_this"), "verification_round"),
        ]
        for how in ("truncated", "edited", "missing")
    },
    "accumulate: accumulated.json truncated": Probe(
        ("accumulate", "--adapter", "reference", "--family", "rng_abi", "--count", "1", "--vectors", "{corrupt}"),
        USAGE,
        r"^Error: .*accumulated\.json",
        ("accumulated", "truncated"),
    ),
    "rules: tests folder missing": Probe(("rules", "--tests", "{tmp}/none"), USAGE, BAD_OPTION.format("--tests")),
    "rules: vectors folder missing": Probe(("rules", "--vectors", "{tmp}/none"), USAGE, BAD_OPTION.format("--vectors")),
    # --- a bad value of each numeric option: negative, zero, absurd (2) ----------------------------
    **{
        f"{' '.join(args[:-2])}: {args[-2]} {args[-1]}": Probe(args, USAGE, BAD_OPTION.format(args[-2]))
        for args in [
            ("run", "--timeout", "0"),
            ("run", "--start-timeout", "-1"),
            ("run", "--max-unsupported", "-1"),
            ("stat", "--samples", "0"),
            ("stat", "--alpha", "1"),
            ("stat", "--power", "0"),
            ("stat", "--chunk", "0"),
            ("stat", "--looks", "13"),
            ("stat", "--timeout", "-1"),
            ("fuzz", "--examples", "0"),
            ("fuzz", "--timeout", "0"),
            ("accumulate", "--family", "rng_abi", "--count", "0"),
            ("accumulate", "--family", "rng_abi", "--count", "1", "--batch", "0"),
            ("accumulate", "--family", "rng_abi", "--count", "1", "--shard-cases", "-1"),
            ("batch-invariance", "--timeout", "0"),
            ("mutants", "--timeout", "0"),
            ("adequacy", "--sample", "0"),
            ("adequacy", "-n", "0"),
            ("adequacy", "--timeout", "0"),
            ("adequacy", "--fail-under", "101"),
            ("sizes", "--vocab", "0"),
            ("sizes", "--link-gbps", "0"),
            ("endpoint", "worker", "--port", "70000"),
            ("endpoint", "soak", "--rounds", "0"),
            ("endpoint", "soak", "--duration", "0"),
        ]
    },
    "accumulate: --count beyond a day": Probe(
        ("accumulate", "--family", "rng_abi", "--count", str(10**12)), USAGE, r"^Error: --count = .* more than a day"
    ),
    "fuzz: --examples beyond a day": Probe(
        ("fuzz", "--examples", str(10**9)), USAGE, r"^Error: --examples = .* more than a day"
    ),
    "run: -n negative": Probe(("run", "-n", "-1"), USAGE, r"^Error: -n takes a number of workers"),
    "mutants: -n negative": Probe(
        ("mutants", "-n", "-1", "--mutant", "accept-le", "--family", "rng_abi"), USAGE, r"^Error: -n takes a number"
    ),
    # --- an output that cannot be written (4) ------------------------------------------------------
    "run --json: a directory in the way": Probe(
        ("run", "--adapter", "reference", *ONE, "--json", "{tmp}"), WRITE, r"^Error: .*cannot write .*: Is a directory"
    ),
    "run --json: under /proc": Probe(
        ("run", "--adapter", "reference", *ONE, "--json", "/proc/qconform-probe.json"),
        WRITE,
        r"^Error: .*cannot write /proc/qconform-probe\.json",
    ),
    "generate --out: under /proc": Probe(
        ("generate", "--family", "rng_abi", "--out", "/proc/qconform-probe"),
        WRITE,
        r"^Error: cannot write /proc/qconform-probe/rng_abi\.json",
    ),
}


def corrupt_corpus(folder: Path, family: str, how: str) -> Path:
    """The committed corpus, linked file by file into ``folder``, with ``family``'s file bad."""
    folder.mkdir()
    source = default_vectors_dir()
    for path in source.iterdir():
        (folder / path.name).symlink_to(path)
    target = folder / f"{family}.json"
    text = target.read_text()
    target.unlink()
    if how == "truncated":
        target.write_text(text[: len(text) // 2])
    elif how == "edited":
        data = json.loads(text)
        data["testGroups"][0]["tests"][0]["comment"] = "edited"
        target.write_text(json.dumps(data))
    return folder


def children() -> set[int]:
    """The running children of this process (of any of its threads)."""
    pids: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        try:
            pids.update(int(p) for p in (task / "children").read_text().split())
        except OSError:
            continue
    return {pid for pid in pids if alive(pid)}


@pytest.mark.parametrize("name", list(PROBES))
def test_a_probe_ends_with_its_status_and_one_line(name, tmp_path, monkeypatch):
    probe = PROBES[name]
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr(tempfile, "tempdir", None)  # tempfile reads TMPDIR again
    own = tmp_path / "own"
    own.mkdir()
    corrupt = corrupt_corpus(tmp_path / "corrupt", *probe.corrupt) if probe.corrupt[0] else None
    args = [a.replace("{tmp}", str(own)).replace("{corrupt}", str(corrupt)) for a in probe.args]
    before = children()
    result = CliRunner().invoke(cli, args)
    output = result.output
    assert result.exit_code == probe.status, output[-3000:]
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in output, output[-3000:]
    assert any(re.search(probe.line, line) for line in output.splitlines()), output[-3000:]
    errors = [line for line in output.splitlines() if line.startswith("Error:")]
    assert len(errors) <= 1, errors
    assert list(temp.iterdir()) == [], "left in the temporary folder"
    assert list(own.rglob("*.tmp")) == [], "a temporary left beside the output"
    deadline = time.monotonic() + 10
    while (left := children() - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, f"processes left running: {left}"


def test_an_optional_module_installed_but_broken_is_one_start_error(tmp_path):
    """A torch that is there but cannot be imported (its ImportError names no module: a missing
    shared library, a build for another CUDA), here a stub that raises one."""
    stub = tmp_path / "stub" / "torch"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("raise ImportError('libcudart.so.12: cannot open shared object file')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(stub.parent), os.environ.get("PYTHONPATH", "")])}
    proc = qconform("mutants", "--family", "rng_abi", env=env)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == RunExit.ADAPTER_START, err[-3000:]
    assert "Traceback" not in out + err and err.strip().splitlines() == [err.strip()], err[-3000:]
    assert err.strip() == (
        "Error: this command needs torch, which is installed but cannot be imported "
        "(ImportError: libcudart.so.12: cannot open shared object file): "
        "reinstall it, pip install --force-reinstall 'qconform[torch]'"
    )


def test_a_soak_ended_by_sigterm_leaves_no_worker_and_no_traceback():
    """``endpoint soak`` runs its worker endpoint in a child process. Before: a SIGTERM of the soak
    left the child to find its pipe closed and print an ``EOFError`` traceback on the way out."""
    proc = qconform("endpoint", "soak", "--rounds", "100000", "--slots", "1", "--progress", "0.5")
    deadline = time.monotonic() + 120
    worker: list[int] = []
    while not worker:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        worker = [int(p) for p in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()]
        time.sleep(0.1)
    assert proc.stderr is not None
    while "soak:" not in proc.stderr.readline():  # rounds are running
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    deadline = time.monotonic() + 10
    while (left := [pid for pid in worker if alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, f"the soak's worker outlived it: {left}"
    assert "Traceback" not in err and "EOFError" not in err, err[-3000:]
