"""The qconform pytest plugin: one pytest item per vector case, judged against an adapter.

Registered under the ``pytest11`` entry point ``qconform``. It does nothing unless
``--qconform-adapter`` is given, so a project's own test runs are unaffected.
With it, and without explicit test paths, pytest collects the selected family
files of the corpus (``--qconform-vectors``, default the installed
``qconform.vectors``) and nothing else::

    pytest --qconform-adapter=reference -n auto --junitxml=out.xml --qconform-json=out.json

Each item is named by its case id and marked ``xdist_group(<family>)``; plain
``-n`` (``--dist load``) is switched to ``--dist loadgroup`` so a family runs on
one worker. The first item of a family that has no verdict yet sends the next
:data:`qconform.harness.run.case_runner.CHUNK` cases of that worker's family items in
one ``run_batch`` call; the items then report their verdicts: ``pass`` and
``precision`` pass, ``fail``, ``error`` and ``xpass`` fail, ``unsupported`` and
``disabled`` skip, ``xfail`` xfails. Each item's verdict travels as the user
property ``qconform`` (so JUnit carries it too) and the controller assembles
the summary, the JSON report and the exit status from the reports.
"""

from __future__ import annotations

import gc
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import pytest

from qconform.harness.expectations import Expectations, ExpectationsError
from qconform.harness.run.case_runner import CHUNK, CaseRunner, open_client
from qconform.harness.run.gate import RunExit, RunState, coverage_problems, exit_code
from qconform.harness.run.signals import SignalGuard
from qconform.harness.run.summary import STOPPED, RunHeader, RunSummary, account
from qconform.harness.run.triage import CaseInfo, LastFailed, RerunContext
from qconform.harness.verdicts import Verdict, VerdictClass

if TYPE_CHECKING:
    from qconform.harness.transport.arena import BlobArena
    from qconform.harness.transport.client import EarlyStart

#: the user property that carries an item's verdict (JSON text)
PROPERTY = "qconform"
#: pytest options that load this plugin explicitly whether or not its entry point
#: is installed (blocking the entry point name avoids a double registration)
PLUGIN_ARGS = ("-p", "no:qconform", "-p", "qconform.harness.run.plugin")
_WORKER_DESELECTED = "qconform_deselected"
_WORKER_CONFIG = "qconform_adapter_config"
#: the user property that carries an item's flags, rules and comment (JSON text)
CASE_PROPERTY = "qconform-case"
#: config.stash key of the run's exit status (harness/run/gate.py), read by ``qconform run``
EXIT_STATUS = pytest.StashKey[int]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("qconform", "qconform conformance run")
    group.addoption(
        "--qconform-adapter",
        metavar="A",
        default=None,
        help="Run the vector corpus against adapter A (a registered name or shim:<command>).",
    )
    group.addoption(
        "--qconform-family",
        metavar="F",
        action="append",
        default=[],
        help="Only family F (repeatable; default: every family of the corpus).",
    )
    group.addoption(
        "--qconform-expectations",
        metavar="FILE",
        default=None,
        help="Expectations TOML ([disabled] and [xfail] globs).",
    )
    group.addoption("--qconform-device", metavar="D", default="cpu", help="Device for the adapter (default cpu).")
    group.addoption(
        "--qconform-vectors",
        metavar="DIR",
        default=None,
        help="Vector corpus directory (default: $QCONFORM_VECTORS or the installed qconform.vectors).",
    )
    group.addoption("--qconform-json", metavar="FILE", default=None, help="Write the JSON run report to FILE.")
    group.addoption(
        "--qconform-html", metavar="FILE", default=None, help="Write the run as one self-contained HTML page to FILE."
    )
    group.addoption(
        "--qconform-timeout",
        metavar="S",
        type=float,
        default=None,
        help="Seconds one run_batch call may take before its cases are errors.",
    )
    group.addoption(
        "--qconform-start-timeout",
        metavar="S",
        type=float,
        default=None,
        help="Seconds the adapter may take to answer get_config, at each start and restart.",
    )
    group.addoption(
        "--qconform-case",
        metavar="ID",
        action="append",
        default=[],
        help="Only the case with this exact id (repeatable).",
    )
    group.addoption(
        "--qconform-require",
        metavar="F",
        action="append",
        default=[],
        help="Fail the run unless the adapter declares family F and supports all its cases (repeatable).",
    )
    group.addoption(
        "--qconform-max-unsupported",
        metavar="N",
        type=int,
        default=None,
        help="Fail the run when more than N cases are unsupported.",
    )
    group.addoption(
        "--qconform-strict-schema",
        action="store_true",
        default=False,
        help="Walk every answer through its family's full JSON Schema (default: the structure its comparator reads).",
    )
    group.addoption(
        "--qconform-record-failures",
        action="store_true",
        default=False,
        help="Record the unexpected cases for a later `qconform run --lf`.",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "xdist_group(name): run every item of the group on one xdist worker")
    if config.getoption("qconform_adapter") is None:
        return
    config.pluginmanager.register(ConformanceRun(config), "qconform-run")


def case_id_of(nodeid: str) -> str | None:
    """The case id of a conformance item's node id (xdist's ``@group`` suffix removed)."""
    if "::" not in nodeid:
        return None
    name = nodeid.split("::", 1)[1]
    family = name.split("/", 1)[0]
    suffix = f"@{family}"
    return name[: -len(suffix)] if name.endswith(suffix) else name


def verdict_of(report: pytest.TestReport) -> Verdict | None:
    for name, value in report.user_properties:
        if name == PROPERTY:
            assert isinstance(value, str)  # CaseItem writes it as JSON text
            return Verdict.from_json(json.loads(value))
    return None


class CaseFailure(Exception):
    """A case judged ``fail``, ``error`` or ``xpass``; its text is the whole report."""


class CaseItem(pytest.Item):
    case: dict
    info: dict
    family: str
    run: "ConformanceRun"

    def runtest(self) -> None:
        verdict = self.run.verdict_for(self)
        self.user_properties.append((PROPERTY, json.dumps(verdict.to_json())))
        self.user_properties.append((CASE_PROPERTY, json.dumps(self.info)))
        if verdict.cls in (VerdictClass.PASS, VerdictClass.PRECISION):
            return
        if verdict.cls in (VerdictClass.UNSUPPORTED, VerdictClass.DISABLED):
            # reported at the case (like a skip mark), not at this line of the plugin
            raise pytest.skip.Exception(f"{verdict.cls.value}: {verdict.message}", _use_item_location=True)
        if verdict.cls is VerdictClass.XFAIL:
            pytest.xfail(verdict.message)
        raise CaseFailure(verdict.line())

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, CaseFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, self.name  # the family file; JSON has no useful line


class FamilyFile(pytest.File):
    family: str
    run: "ConformanceRun"

    def collect(self) -> Iterable[CaseItem]:
        from qconform.generators.validation import VectorFileError, iter_cases

        try:
            cases = list(iter_cases(self.run.root, [self.family]))
        except VectorFileError as exc:
            raise self.CollectError(str(exc)) from None  # reported as its one line, no traceback
        for case in cases:
            item = CaseItem.from_parent(self, name=case.id)
            item.case = {
                "id": case.id,
                "family": case.family,
                "result": case.result,
                "flags": list(case.flags),
                "input": case.input,
                "expected": case.expected,
            }
            item.info = {"flags": list(case.flags), "rules": list(case.rules), "comment": case.comment}
            item.family = case.family
            item.run = self.run
            item.add_marker(pytest.mark.xdist_group(name=case.family))
            item.extra_keyword_matches.update(case.flags)
            item.extra_keyword_matches.update(case.rules)
            yield item


def _resolve(path: str | Path) -> Path:
    return Path(path).expanduser().resolve()


def _text_option(config: pytest.Config, name: str) -> str:
    """An option that always holds text here: it has a default, or (``qconform_adapter``) the plugin runs only when set."""
    value = config.getoption(name)
    assert isinstance(value, str), name
    return value


def _worker_output(config: pytest.Config) -> dict[str, Any]:
    """What an xdist worker hands back to the controller (JSON values of several kinds).

    pytest-xdist sets ``workeroutput`` on a worker's config; ``pytest.Config`` does not declare it."""
    output = getattr(config, "workeroutput")
    assert isinstance(output, dict)
    return output


def _list_option(config: pytest.Config, name: str) -> list[str]:
    """A repeatable option (``action="append"``, default ``[]``)."""
    value = config.getoption(name)
    assert isinstance(value, list), name
    return value


class ConformanceRun:
    """The plugin object of one session with ``--qconform-adapter`` (on every process)."""

    def __init__(self, config: pytest.Config) -> None:
        from qconform import __version__
        from qconform.generators.corpus import default_vectors_dir
        from qconform.generators.validation import VectorFileError, load_index

        self.config = config
        self.is_worker = hasattr(config, "workerinput")
        if self.is_worker:  # a worker (and so its adapters' trees) ends with the run that started it
            from qconform.harness.transport.client import die_with_parent

            die_with_parent()
        self.adapter = _text_option(config, "qconform_adapter")
        self.device = _text_option(config, "qconform_device")
        self.root = _resolve(config.getoption("qconform_vectors") or default_vectors_dir())
        try:
            self.index = load_index(self.root)
        except VectorFileError as exc:
            raise pytest.UsageError(f"qconform: no usable corpus index: {exc}") from None
        self.families = self._selected_families(_list_option(config, "qconform_family"))
        expectations_path = config.getoption("qconform_expectations")
        try:
            self.expectations = Expectations.load(expectations_path) if expectations_path else Expectations()
        except ExpectationsError as exc:
            raise pytest.UsageError(f"qconform: {exc}") from None
        timeout = config.getoption("qconform_timeout")
        start_timeout = config.getoption("qconform_start_timeout")
        strict = bool(config.getoption("qconform_strict_schema"))
        adapter, device = str(self.adapter), str(self.device)  # set: the plugin runs only with an adapter
        #: the collected cases' blobs, decoded once (docs/shim-protocol.md, "Shared arena"): built
        #: when collection finishes, on the process that runs the cases
        self.arena: BlobArena | None = None
        #: the adapter's child, spawned as the session starts so that it loads its engine while the
        #: corpus is collected (docs/shim-protocol.md, "Starting early"); the first start takes it
        self.early: EarlyStart | None = None
        self.runner = CaseRunner(
            lambda: open_client(adapter, device, timeout, strict, self.arena, start_timeout, self.early),
            self.expectations,
            timeout,
        )
        self.summary = RunSummary(
            RunHeader(
                adapter=self.adapter,
                device=self.device,
                corpus_root=self.index["root"],
                vectors=str(self.root),
                qconform_version=__version__,
                expectations=str(_resolve(expectations_path)) if expectations_path else "",
                families=tuple(self.families),
            )
        )
        self.rerun = RerunContext(
            self.adapter,
            self.device,
            str(self.root),
            str(_resolve(expectations_path)) if expectations_path else "",
            timeout,
            start_timeout,
        )
        self.family_files = {self.index["families"][f]["file"]: f for f in self.families}
        self.collected: list[str] | None = None
        self.deselected: set[str] = set()
        self.collection_errors: dict[str, str] = {}
        self._verdicts: dict[str, Verdict] = {}
        self._family_items: dict[str, list[CaseItem]] = {}
        self.console = None
        self.progress = None
        if config.args_source is not pytest.Config.ArgsSource.ARGS:
            config.args = [str(self.root / name) for name in self.family_files]
        if getattr(config.option, "dist", "no") == "load":
            config.option.dist = "loadgroup"
        self.cases = set(_list_option(config, "qconform_case"))
        self.start_error: str | None = None
        self.write_errors: list[str] = []
        self.signals = SignalGuard()
        self.froze = False
        if not self.is_worker:
            self.signals.install()

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.signals.restore()
        # what collection froze is collectable again: in a process that outlives the run (pytest
        # itself with the plugin, a test invoking `qconform run` in-process) the permanent generation
        # would hold it to the end, where no collection frees it, and extension modules report it as
        # leaked at exit (Triton's: nanobind's "leaked ... instances/types/functions"; issue #22)
        if self.froze:
            gc.unfreeze()

    def _selected_families(self, names: list[str]) -> list[str]:
        indexed = list(self.index["families"])
        unknown = [n for n in names if n not in indexed]
        if unknown:
            raise pytest.UsageError(
                f"qconform: unknown family {', '.join(unknown)}; the corpus at {self.root} has: {', '.join(indexed)}"
            )
        return list(dict.fromkeys(names)) if names else indexed

    # -- collection ---------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_collect_directory(self, path: Path, parent: pytest.Collector) -> pytest.Collector | None:
        """The corpus directory and its parents are plain directories (never imported packages)."""
        if path == self.root or path in self.root.parents:
            return pytest.Dir.from_parent(parent, path=path)
        return None

    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
        if file_path.parent == self.root and file_path.name in self.family_files:
            node = FamilyFile.from_parent(parent, path=file_path)
            node.family = self.family_files[file_path.name]
            node.run = self
            return node
        return None

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed and report.nodeid not in self.collection_errors:
            text = str(report.longrepr).strip().splitlines()
            self.collection_errors[report.nodeid] = text[-1] if text else "collection failed"

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """``--qconform-case ID``: keep only those cases (the others are deselected, like ``-k``)."""
        if not self.cases:
            return
        kept = [i for i in items if not isinstance(i, CaseItem) or i.name in self.cases]
        dropped = [i for i in items if isinstance(i, CaseItem) and i.name not in self.cases]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = kept

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.deselected.update(item.name for item in items if isinstance(item, CaseItem))

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        items = [item for item in session.items if isinstance(item, CaseItem)]
        if not self.config.option.collectonly and (
            self.is_worker or not getattr(self.config.option, "numprocesses", None)
        ):
            from qconform.harness.transport.arena import BlobArena

            reserved = self.early.arena_file() if self.early is not None else None  # the child holds it
            self.arena = BlobArena.of_cases((item.case for item in items), reserved)  # None: blobs travel inline
            # the cases (and everything loaded so far) live for the whole run: the cycle collector
            # need not scan them again at every full collection (unfrozen at pytest_unconfigure)
            gc.freeze()
            self.froze = True
        if self.is_worker:
            _worker_output(self.config)[_WORKER_DESELECTED] = sorted(self.deselected)
            return
        self._collected([item.name for item in items])
        if self.config.option.collectonly and self.config.pluginmanager.getplugin("terminalreporter") is None:
            self._list(items)  # `qconform run --list`; under plain `pytest --co`, pytest lists them itself

    def _list(self, items: list[CaseItem]) -> None:
        """``--list``: the cases that would run, one id a line (a disabled case says so)."""
        if self.progress is not None:
            self.progress.stop()
        try:
            for item in items:
                reason = self.expectations.disabled_reason(item.name)
                print(item.name if reason is None else f"{item.name}  (disabled: {reason})", flush=True)
        except BrokenPipeError:  # `qconform run --list | head`
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> None:
        """Start the adapter once before any case runs: an adapter that cannot start
        (or declares a family no corpus knows) stops the run with one line."""
        if self.is_worker or session.config.option.collectonly or self.collected == []:
            return
        self.start_error = self.runner.start_check(self._known_families())
        if self.start_error is not None:
            pytest.exit(self.start_error, returncode=RunExit.ADAPTER_START)
        if getattr(self.config.option, "numprocesses", None):
            self.runner.close()  # the workers start their own

    def _known_families(self) -> set[str]:
        from qconform.generators.registry import family_names
        from qconform.harness.adapter import ECHO_FAMILY

        return set(self.index["families"]) | set(family_names()) | {ECHO_FAMILY}

    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        if self.collected is None:
            self._collected([cid for cid in map(case_id_of, ids) if cid is not None])

    def _collected(self, ids: list[str]) -> None:
        self.collected = ids
        if self.progress is not None:
            self.progress.start(len(ids))

    # -- running ------------------------------------------------------------------------

    def verdict_for(self, item: CaseItem) -> Verdict:
        """The item's verdict, judging the next chunk of its family's items if needed."""
        if item.name not in self._verdicts:
            family_items = self._family_items.get(item.family)
            if family_items is None:
                family_items = [i for i in item.session.items if isinstance(i, CaseItem) and i.family == item.family]
                self._family_items[item.family] = family_items
            start = family_items.index(item)
            chunk = [i for i in family_items[start:] if i.name not in self._verdicts][:CHUNK]
            for verdict in self.runner.run([i.case for i in chunk]):
                self._verdicts[verdict.case_id] = verdict
        return self._verdicts[item.name]

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.is_worker:
            return
        verdict = verdict_of(report)
        case_id = case_id_of(report.nodeid)
        for name, value in report.user_properties:
            if name == CASE_PROPERTY and case_id is not None:
                assert isinstance(value, str)  # CaseItem writes it as JSON text
                # CaseInfo's fields, of several types (JSON lists back to tuples)
                fields: dict[str, Any] = {
                    k: tuple(v) if isinstance(v, list) else v for k, v in json.loads(value).items()
                }
                self.summary.case_info[case_id] = CaseInfo(**fields, reproducer=self.rerun.command(case_id))
        if verdict is None and report.failed and case_id is not None and case_id in self.index["cases"]:
            lines = str(report.longrepr).strip().splitlines()
            verdict = Verdict(
                VerdictClass.ERROR, case_id, f"harness error ({report.when}): {lines[-1] if lines else 'no details'}"
            )
        if verdict is None or verdict.case_id in self.summary.verdicts:
            return
        self.summary.add(verdict)
        if self.progress is not None:
            self.progress.advance(verdict.cls, verdict.family)

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        output = getattr(node, "workeroutput", None) or {}
        self.deselected.update(output.get(_WORKER_DESELECTED, ()))
        if output.get(_WORKER_CONFIG):
            self.summary.adapter_config = output[_WORKER_CONFIG]

    # -- reporting ----------------------------------------------------------------------

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        from qconform.harness.run.report import header_lines

        return header_lines(self.summary.header)

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if not self.config.option.collectonly:  # every process that starts the adapter: this one
            from qconform.harness.transport.client import spawn_early

            self.early = spawn_early(str(self.adapter), str(self.device))
        if self.is_worker or self.config.pluginmanager.getplugin("terminalreporter") is not None:
            return
        if self.config.option.collectonly:
            return  # --list prints case ids only
        from rich.console import Console

        from qconform.harness.run.report import RunProgress, render_header

        self.console = Console(highlight=False)
        if not self.console.is_terminal:
            self.console.width = 132  # CI logs: do not wrap at 80 columns
        render_header(self.console, self.summary.header)
        self.progress = RunProgress(self.console)

    def _adapter_config_json(self) -> dict:
        config = self.runner.config
        if config is None:
            return {}
        return {
            "name": config.name,
            "device": config.device,
            "capabilities": config.capabilities.to_json(),
            "precision": config.precision.to_json(),
        }

    def finish(self, session: pytest.Session) -> None:
        """Account for every corpus case and collect the problems (controller only)."""
        summary = self.summary
        stopped = bool(session.shouldfail) and self.config.option.maxfail == 1 and self.signals.signum is None
        result = account(
            self.index["cases"],
            self.families,
            self.collected or [],
            self.deselected,
            summary.verdicts,
            STOPPED if stopped else None,
        )
        summary.not_run = result.not_run
        declared = summary.adapter_config.get("capabilities", {}).get("families") if summary.adapter_config else None
        summary.problems = [
            *([f"run interrupted by {self.signals.name}"] if self.signals.signum is not None else []),
            *(
                f"collection error in {nodeid or 'the session'}: {text}"
                for nodeid, text in self.collection_errors.items()
            ),
            *self.expectations.stale_entries(self.index["cases"]),
            *result.problems,
            *coverage_problems(
                summary,
                declared,
                _list_option(self.config, "qconform_require"),
                self.config.getoption("qconform_max_unsupported"),
            ),
        ]

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.is_worker:
            _worker_output(self.config)[_WORKER_CONFIG] = self._adapter_config_json()
        elif not self.summary.adapter_config:
            self.summary.adapter_config = self._adapter_config_json()
        if self.signals.signum is not None:
            self.runner.abort()  # no grace period for an adapter that may hang
        self.runner.close()
        if self.early is not None:
            self.early.close()  # a child no start took (no case ran here, or collection failed)
        if self.arena is not None:
            self.arena.close()
        if self.is_worker:
            return
        if self.progress is not None:
            self.progress.stop()
        if self.config.option.collectonly:
            code = RunExit.OK if self.collected else RunExit.NO_CASES
            self._set_exit(session, code)
            return
        if self.start_error is not None:
            self._adapter_did_not_start(session)
            return
        self.finish(session)
        json_path = self.config.getoption("qconform_json")
        if self.console is not None:
            from qconform.harness.run.report import render_summary

            render_summary(self.console, self.summary, json_report=json_path)
        if json_path:
            self._write_json(_resolve(json_path))
        html_path = self.config.getoption("qconform_html")
        if html_path:
            self._write_html(_resolve(html_path))
        if self.config.getoption("qconform_record_failures"):
            LastFailed().record(
                str(self.root), self.adapter, self.summary.verdicts, [v.case_id for v in self.summary.unexpected()]
            )
        for error in self.write_errors:
            print(f"Error: {error}", file=sys.stderr, flush=True)
        self._set_exit(
            session,
            exit_code(
                RunState(
                    ok=self.summary.ok,
                    judged=len(self.summary.verdicts),
                    signum=self.signals.signum,
                    write_errors=tuple(self.write_errors),
                    usage_error=exitstatus == pytest.ExitCode.USAGE_ERROR or bool(self.collection_errors),
                )
            ),
        )

    def _adapter_did_not_start(self, session: pytest.Session) -> None:
        """One line, and a report that says so when one was asked for; nothing else."""
        assert self.start_error is not None
        self.summary.problems = [self.start_error]
        print(f"Error: {self.start_error}", file=sys.stderr, flush=True)
        json_path = self.config.getoption("qconform_json")
        if json_path:
            self._write_json(_resolve(json_path))
            for error in self.write_errors:
                print(f"Error: {error}", file=sys.stderr, flush=True)
        self._set_exit(session, RunExit.ADAPTER_START)

    def _write_html(self, path: Path) -> None:
        from qconform.generators import atomic_file
        from qconform.harness.run import html_report, json_report

        try:
            html_report.write_run(path, json_report.build(self.summary))
        except atomic_file.WriteError as exc:
            self.write_errors.append(f"HTML report not written: {exc}")

    def _write_json(self, path: Path) -> None:
        from qconform.generators import atomic_file
        from qconform.harness.run import json_report

        try:
            json_report.write(path, self.summary)
        except atomic_file.WriteError as exc:
            self.write_errors.append(f"JSON report not written: {exc}")

    def _set_exit(self, session: pytest.Session, code: int) -> None:
        self.config.stash[EXIT_STATUS] = code
        session.exitstatus = code

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.is_worker or self.config.option.collectonly:
            return  # `pytest --co` judged nothing: a summary of verdicts would say so falsely
        from qconform.harness.run.report import render_to_text

        terminalreporter.section("qconform")
        text = render_to_text(self.summary, width=terminalreporter._tw.fullwidth, color=terminalreporter.hasmarkup)
        terminalreporter.write(text)
