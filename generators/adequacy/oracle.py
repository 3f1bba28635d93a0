"""The oracle: re-solve the committed cases under a mutated spec module, in this process.

It runs inside a forked worker (:mod:`.runner`), so the mutation dies with it.
The mutated module is compiled from its mutated syntax tree and served by a
meta-path finder; the module and every module that imports it (the static graph
of :mod:`.imports`) are dropped from ``sys.modules`` first, so every
``from qconform.spec.x import f`` binding is re-made against the mutant. Then
each affected family's ``solve`` (the very function the generators and the
``reference`` adapter call) answers every committed input, and the first answer
whose canonical JSON differs from the committed ``expected`` kills the mutant.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import CodeType, FrameType, ModuleType

from qconform.generators.adequacy import imports
from qconform.generators.adequacy.mutate import Site, mutated_tree
from qconform.generators.encoding import canonical_json

#: outcome kinds of one run (the runner adds "timeout")
DRIFT, CRASH, SURVIVED = "drift", "crash", "survived"
#: the longest detail kept from a crash message or a drift
DETAIL_LIMIT = 200


@dataclass(frozen=True)
class CommittedCase:
    """A committed case as the oracle needs it."""

    id: str
    input: dict
    expected: dict


@dataclass(frozen=True)
class Outcome:
    """What the corpus did to one mutant (or to the unmutated spec)."""

    kind: str  # DRIFT | CRASH | SURVIVED | "timeout"
    case: str | None = None  # the first drifted (or crashing) case
    detail: str = ""
    cases: int = 0  # cases solved
    #: (source file, qualified name) of every function the run called (the traced baseline only)
    reached: frozenset[tuple[str, str]] = frozenset()


#: a module ID with this prefix names a judge (``harness/judging/<name>.py``), not a spec module
JUDGING = "judging/"


def module_name(module: str) -> str:
    """``"wire/codec"`` -> ``"qconform.spec.wire.codec"``; ``"judging/wire"`` -> ``"qconform.harness.judging.wire"``."""
    if module.startswith(JUDGING):
        return "qconform.harness." + module.replace("/", ".")
    return "qconform.spec." + module.replace("/", ".")


class _MutantLoader(importlib.abc.Loader):
    def __init__(self, code: CodeType) -> None:
        self.code = code

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        exec(self.code, module.__dict__)  # noqa: S102 - the mutated module, compiled from its own source


class _MutantFinder(importlib.abc.MetaPathFinder):
    """Serves the mutated code for one module name, and nothing else."""

    def __init__(self, name: str, path: Path, code: CodeType) -> None:
        self.name, self.path, self.code = name, path, code

    def find_spec(self, fullname: str, path=None, target=None) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        return importlib.machinery.ModuleSpec(fullname, _MutantLoader(self.code), origin=str(self.path))


def forget(stale: frozenset[str]) -> None:
    """Drop the loaded modules of ``stale`` from ``sys.modules``, so that the next import runs them again."""
    for loaded in [m for m in sys.modules if m in stale]:
        del sys.modules[loaded]
        # ``from package import module`` reads the package's attribute before sys.modules: drop it
        # too, or a re-imported importer would bind the stale, unmutated submodule
        parent, _, child = loaded.rpartition(".")
        if parent in sys.modules and parent not in stale:
            vars(sys.modules[parent]).pop(child, None)


def forget_spec() -> None:
    """Drop every spec module and every module that imports one: the traced baseline imports them again, so a
    function that a spec module calls while it is imported (``checksum.table_entry`` building the CRC table,
    ``layout.contiguous`` placing the fields) is recorded as reached, as its mutants change what the import builds."""
    prefix = module_name("")
    forget(frozenset().union(*(imports.dependents(m) for m in imports.module_files() if m.startswith(prefix))))


def install(site: Site) -> None:
    """Make ``site``'s mutant the module that every later import of it gets."""
    name = module_name(site.module)
    path = imports.module_files()[name]
    code = compile(mutated_tree(path, site), str(path), "exec")
    forget(imports.dependents(name))
    sys.meta_path.insert(0, _MutantFinder(name, path, code))


def first_difference(expected: object, got: object, path: str = "$") -> str:
    """The JSON path of the first place where ``got`` differs from ``expected``, with both values."""
    if isinstance(expected, dict) and isinstance(got, dict):
        for key in sorted(set(expected) | set(got)):
            if key not in got or key not in expected or canonical_json(expected[key]) != canonical_json(got[key]):
                if key in got and key in expected:
                    return first_difference(expected[key], got[key], f"{path}.{key}")
                return f"{path}.{key}: {'missing' if key not in got else 'unexpected'}"
    if isinstance(expected, list) and isinstance(got, list) and len(expected) == len(got):
        for index, (a, b) in enumerate(zip(expected, got)):
            if canonical_json(a) != canonical_json(b):
                return first_difference(a, b, f"{path}[{index}]")
    return f"{path}: expected {_short(canonical_json(expected))}, got {_short(canonical_json(got))}"


def _short(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."


def _crash(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}"
    return text if len(text) <= DETAIL_LIMIT else text[: DETAIL_LIMIT - 3] + "..."


def traced(run: Callable[[], Outcome]) -> Outcome:
    """``run()`` with every call of a Python function recorded in the outcome's ``reached``."""
    seen: set[tuple[str, str]] = set()

    def profile(frame: FrameType, event: str, _arg: object) -> None:
        if event == "call":
            code = frame.f_code
            seen.add((code.co_filename, code.co_qualname.replace(".<locals>", "")))

    sys.setprofile(profile)
    try:
        outcome = run()
    finally:
        sys.setprofile(None)
    return replace(outcome, reached=frozenset(seen))


def solve_all(families: Sequence[str], cases: Mapping[str, Sequence[CommittedCase]]) -> Outcome:
    """Re-solve every committed case of ``families`` in order; stop at the first drift or crash."""
    solved = 0
    for family in families:
        try:
            solve = importlib.import_module(f"{imports.FAMILIES_PACKAGE}.{family}").FAMILY.solve
        except Exception as error:  # noqa: BLE001 - a mutant that breaks an import is killed by a crash
            return Outcome(CRASH, None, f"importing {family}: {_crash(error)}", solved)
        for case in cases[family]:
            try:
                got = solve(case.input)
            except Exception as error:  # noqa: BLE001 - any exception of the mutated spec is a crash
                return Outcome(CRASH, case.id, _crash(error), solved)
            solved += 1
            if canonical_json(got) != canonical_json(case.expected):
                return Outcome(DRIFT, case.id, first_difference(case.expected, got)[:DETAIL_LIMIT], solved)
    return Outcome(SURVIVED, None, "", solved)


class _FirstFailure:
    """A pytest plugin that keeps the first failing test's ID and its one-line reason."""

    def __init__(self) -> None:
        self.nodeid: str | None = None
        self.detail = ""

    def pytest_runtest_logreport(self, report) -> None:
        if report.failed and self.nodeid is None:
            self.nodeid = report.nodeid
            crash = getattr(report.longrepr, "reprcrash", None)
            self.detail = f"{report.when}: {crash.message if crash is not None else report.longrepr}"


def prepare_tests() -> None:
    """Import pytest and hypothesis once in the parent, so that no forked worker pays for it."""
    import hypothesis  # noqa: F401
    import pytest  # noqa: F401


def run_tests(tests: Sequence[str]) -> Outcome:
    """Run the unit tests ``tests`` (paths, in this process, no xdist): the judges' oracle.

    The first failing test kills the mutant (``DRIFT``, named by its test ID); a run that
    cannot even collect (an import error of the mutated judge) is a ``CRASH``.
    """
    import os

    import pytest

    # the worker's own output is not the report: silence pytest's terminal (fds 1 and 2 of this child)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    # the same mutant must meet the same examples in every run: hypothesis's tests (the judges' fuzzer)
    # draw from a fixed seed here, and no example database replays what another mutant's run found
    from hypothesis import settings

    settings.register_profile("qconform-adequacy", derandomize=True, database=None)
    settings.load_profile("qconform-adequacy")
    plugin = _FirstFailure()
    code = pytest.main(
        # --assert=plain: pytest's assertion-rewriting import hook would otherwise load every module of
        # the qconform plugin's package from its file, ahead of the finder that serves the mutant
        [*tests, "-x", "-q", "--assert=plain", "-p", "no:cacheprovider", "-p", "no:xdist", "--no-header"],
        plugins=[plugin],
    )
    if plugin.nodeid is not None:
        return Outcome(DRIFT, plugin.nodeid, plugin.detail[:DETAIL_LIMIT])
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        return Outcome(CRASH, None, f"pytest exited with {code!r}")
    return Outcome(SURVIVED)
