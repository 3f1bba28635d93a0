"""The coverage report behind ``qconform rules``: rule -> spec functions, vector families, tests.

Three views are joined per rule R01-R38:

* **spec**: the functions that declare ``@defines("Rxx")``, collected by importing
  every module of the ``qconform.spec`` package;
* **vectors**: the registered families whose ``Family.rules`` name the rule, or
  whose committed vector file has a group or case citing it;
* **tests**: test functions, classes or whole modules marked
  ``pytest.mark.rules("Rxx")``, found by reading ``tests/*.py`` with :mod:`ast`
  (nothing is imported or run).

A rule is **covered** when at least one spec function defines it *and* at least
one test cites it. A rule of ``LISTING_RULES`` (R34: it lists what other rules
define) is excepted by name, with its reason shown: a spec function or a vector
family is enough for it. A family that merely mentions a rule no longer covers it.

**Roles.** The rules of ``ROLE_RULES`` must be covered on each role of the wire
(``ROLES``: the receiver and the worker state machines) on its own: a spec
function of the role's module defines the rule, the role's vector family pins
it, and a test of the role cites it (a test belongs to a role when its module
imports the role's spec module). Each such rule has one row per role, side by
side, in a second table.
"""

from __future__ import annotations

import ast
import importlib
import json
import pkgutil
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeGuard

from rich.console import Console
from rich.table import Table

from qconform.spec.rules import LISTING_RULES, ROLE_RULES, ROLES, RULES, SPEC_DEFINITIONS, Role, Rule

ROLE_DEFINITION = (
    "covered on a role = a spec function of the role's module, the role's vector family, and a test importing "
    "the role's module"
)
COVERED_DEFINITION = (
    "covered = at least one spec function (a listing rule excepted by name: a spec function or vector family), "
    "and at least one test"
)


@dataclass
class RuleCoverage:
    rule: Rule
    spec: list[str] = field(default_factory=list)
    families: list[str] = field(default_factory=list)
    tests: list[str] = field(default_factory=list)

    def lacking(self) -> list[str]:
        """What keeps the rule from being covered (empty when covered)."""
        lacking = []
        if self.rule.id in LISTING_RULES:
            if not self.spec and not self.families:
                lacking.append("spec function or vector family")
        elif not self.spec:
            lacking.append("spec function")
        if not self.tests:
            lacking.append("test")
        return lacking


@dataclass
class RoleCoverage:
    """One rule of ``ROLE_RULES`` on one role: the role's spec functions, family and tests citing it."""

    rule: Rule
    role: Role
    spec: list[str] = field(default_factory=list)
    families: list[str] = field(default_factory=list)
    tests: list[str] = field(default_factory=list)

    def lacking(self) -> list[str]:
        """What keeps the rule from being covered on the role (empty when covered)."""
        needs = (("spec function", self.spec), ("vector family", self.families), ("test", self.tests))
        return [f"{what} of the {self.role.name}" for what, found in needs if not found]


@dataclass
class RulesReport:
    coverage: list[RuleCoverage]
    tests_dir: Path | None
    warnings: list[str]
    roles: list[RoleCoverage] = field(default_factory=list)

    def uncovered(self) -> list[RuleCoverage]:
        return [c for c in self.coverage if c.lacking()]

    def uncovered_roles(self) -> list[RoleCoverage]:
        return [c for c in self.roles if c.lacking()]


def import_spec_modules() -> list[str]:
    """Import every module of ``qconform.spec`` (filling SPEC_DEFINITIONS); return warnings."""
    import qconform.spec

    warnings = []
    for info in pkgutil.iter_modules(qconform.spec.__path__):
        try:
            importlib.import_module(f"qconform.spec.{info.name}")
        except Exception as exc:  # a broken module must not hide the rest of the report
            warnings.append(f"spec module {info.name} failed to import: {type(exc).__name__}: {exc}")
    return warnings


def _committed_rules(path: Path) -> set[str]:
    """Rules cited by the groups and cases of a committed vector file."""
    obj = json.loads(path.read_bytes())
    cited: set[str] = set()
    for group in obj.get("testGroups", []):
        cited.update(group.get("rules", []))
        for case in group.get("tests", []):
            cited.update(case.get("rules", []))
    return cited


def family_coverage(vectors_dir: Path) -> tuple[dict[str, list[str]], list[str]]:
    """Rule -> registered families covering it, and warnings."""
    from qconform.generators import registry

    covering: dict[str, list[str]] = {rid: [] for rid in RULES}
    warnings = []
    for name in registry.family_names():
        cited: set[str] = set()
        try:
            cited.update(registry.load_family(name).rules)
        except Exception as exc:  # a broken family must not hide the rest of the report
            absent = isinstance(exc, ModuleNotFoundError) and exc.name == f"qconform.generators.families.{name}"
            detail = "is registered but has no module yet" if absent else f"failed to load: {type(exc).__name__}: {exc}"
            warnings.append(f"vector family {name} {detail}")
        path = vectors_dir / f"{name}.json"
        if path.is_file():
            try:
                cited |= _committed_rules(path)
            except (ValueError, AttributeError, TypeError) as exc:
                warnings.append(f"{path} could not be read for rules: {exc}")
        for rid in sorted(cited & set(RULES)):
            covering[rid].append(name)
    return covering, warnings


def _is_rules_mark(node: ast.AST) -> TypeGuard[ast.Call]:
    """``pytest.mark.rules(...)`` or ``mark.rules(...)``."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return False
    owner = node.func.value
    return node.func.attr == "rules" and (
        (isinstance(owner, ast.Attribute) and owner.attr == "mark")
        or (isinstance(owner, ast.Name) and owner.id == "mark")
    )


def _marked_rules(node: ast.AST) -> list[str]:
    """String arguments of every rules mark below ``node``."""
    found = []
    for sub in ast.walk(node):
        if _is_rules_mark(sub):
            found += [a.value for a in sub.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    return found


def _is_pytestmark(node: ast.stmt) -> bool:
    targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
    return any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in targets)


def marked_tests(source: str, label: str) -> list[tuple[str, str]]:
    """(rule id, owner) pairs of one test module: ``label::name`` for a test function
    or class, ``label`` for a module-level ``pytestmark``."""
    pairs = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            rules = [r for d in node.decorator_list for r in _marked_rules(d)]
            owner = f"{label}::{node.name}"
        elif isinstance(node, ast.ClassDef):
            rules, owner = _marked_rules(node), f"{label}::{node.name}"
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and _is_pytestmark(node):
            rules, owner = _marked_rules(node), label
        else:
            continue
        pairs += [(rid, owner) for rid in dict.fromkeys(rules)]
    return pairs


def imported_modules(tree: ast.Module) -> set[str]:
    """Every module a test module imports, by its dotted name: ``import a.b``, ``from a.b import c``
    (both ``a.b`` and ``a.b.c``, since ``c`` may be a module), function-level imports included."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def roles_of(tree: ast.Module) -> list[Role]:
    """The roles whose spec module a test module imports."""
    imported = imported_modules(tree)
    return [role for role in ROLES if f"qconform.{role.module}" in imported]


def scan_role_tests(tests_dir: Path) -> dict[tuple[str, str], list[str]]:
    """(rule id, role name) -> the tests of that role marked with the rule (unparsable files are
    warned about by :func:`scan_tests`)."""
    tests: dict[tuple[str, str], list[str]] = {(rid, role.name): [] for rid in ROLE_RULES for role in ROLES}
    for path in sorted(tests_dir.rglob("*.py")):
        label = path.relative_to(tests_dir).as_posix()
        try:
            source = path.read_text(encoding="utf-8")
            roles = roles_of(ast.parse(source))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for rid, owner in marked_tests(source, label) if roles else []:
            for role in roles:
                if (rid, role.name) in tests:
                    tests[rid, role.name].append(owner)
    return tests


def role_coverage(families: dict[str, list[str]], role_tests: dict[tuple[str, str], list[str]]) -> list[RoleCoverage]:
    """One row per rule of ``ROLE_RULES`` and role, the roles of a rule side by side."""
    rows = []
    for rid in ROLE_RULES:
        for role in ROLES:
            spec = sorted(name for name in SPEC_DEFINITIONS[rid] if name.startswith(f"{role.module}."))
            family = [role.family] if role.family in families[rid] else []
            rows.append(RoleCoverage(RULES[rid], role, spec, family, role_tests[rid, role.name]))
    return rows


def scan_tests(tests_dir: Path) -> tuple[dict[str, list[str]], list[str]]:
    """Rule -> tests marked with it under ``tests_dir``, and warnings (unknown ids, bad files)."""
    tests: dict[str, list[str]] = {rid: [] for rid in RULES}
    warnings = []
    for path in sorted(tests_dir.rglob("*.py")):
        label = path.relative_to(tests_dir).as_posix()
        try:
            pairs = marked_tests(path.read_text(encoding="utf-8"), label)
        except (SyntaxError, UnicodeDecodeError) as exc:
            warnings.append(f"{label} could not be parsed: {exc}")
            continue
        for rid, owner in pairs:
            if rid in tests:
                tests[rid].append(owner)
            else:
                warnings.append(f"{owner} cites unknown rule {rid}")
    return tests, warnings


def find_tests_dir(start: Path) -> Path | None:
    """``tests/`` of the checkout: the first directory at or above ``start`` whose
    pyproject.toml names the project ``qconform``."""
    for directory in [start, *start.parents]:
        pyproject = directory / "pyproject.toml"
        if not pyproject.is_file():
            continue
        try:
            name = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {}).get("name")
        except (tomllib.TOMLDecodeError, UnicodeDecodeError):
            continue
        if name == "qconform":
            tests = directory / "tests"
            return tests if tests.is_dir() else None
    return None


def build_report(tests_dir: Path | None, vectors_dir: Path) -> RulesReport:
    """Join the three views for every rule; ``tests_dir`` None means search from the cwd."""
    warnings = import_spec_modules()
    families, family_warnings = family_coverage(vectors_dir)
    warnings += family_warnings
    if tests_dir is None:
        tests_dir = find_tests_dir(Path.cwd())
    if tests_dir is None:
        warnings.append("tests were not found (no --tests, and no qconform checkout above the current directory)")
        tests: dict[str, list[str]] = {rid: [] for rid in RULES}
        role_tests = {(rid, role.name): [] for rid in ROLE_RULES for role in ROLES}
    else:
        tests, test_warnings = scan_tests(tests_dir)
        warnings += test_warnings
        role_tests = scan_role_tests(tests_dir)
    coverage = [
        RuleCoverage(rule, sorted(SPEC_DEFINITIONS[rid]), families[rid], tests[rid]) for rid, rule in RULES.items()
    ]
    return RulesReport(coverage, tests_dir, warnings, role_coverage(families, role_tests))


def _short(text: str, limit: int = 70) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _tests_summary(owners: list[str]) -> str:
    """``test_sizes.py (12)``: tests grouped by file, with how many marks each."""
    counts: dict[str, int] = {}
    for owner in owners:
        file = owner.split("::", 1)[0]
        counts[file] = counts.get(file, 0) + 1
    return "\n".join(f"{file} ({n})" for file, n in counts.items())


def render(report: RulesReport, console: Console, missing_only: bool = False) -> None:
    rows = report.uncovered() if missing_only else report.coverage
    table = Table(title="Rule coverage" + (" (uncovered only)" if missing_only else ""), show_lines=True)
    for name in ("Rule", "Text", "Spec functions", "Vector families", "Tests"):
        table.add_column(name, overflow="fold")
    if missing_only:
        table.add_column("Lacking", style="red")
    for cov in rows:
        cells = [
            cov.rule.id,
            _short(cov.rule.text),
            "\n".join(
                [name.removeprefix("spec.") for name in cov.spec]
                + ([f"(listing rule: {LISTING_RULES[cov.rule.id]})"] if cov.rule.id in LISTING_RULES else [])
            ),
            "\n".join(cov.families),
            _tests_summary(cov.tests),
        ]
        if missing_only:
            cells.append(" and ".join(cov.lacking()))
        table.add_row(*cells)
    if rows:
        console.print(table)
    shown = {cov.rule.id for cov in rows}  # --missing names no rule but the uncovered ones
    for rid, reason in LISTING_RULES.items():
        if rid in shown:
            console.print(f"{rid} is excepted from needing a spec function of its own: {reason}.", highlight=False)
    render_roles(report, console, missing_only)
    for warning in report.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}", highlight=False)
    uncovered = len(report.uncovered())
    console.print(f"{len(RULES) - uncovered} of {len(RULES)} rules covered; {COVERED_DEFINITION}.", highlight=False)
    if report.roles:  # named by count only: CI greps the --missing output for rule ids
        lacking = len(report.uncovered_roles())
        console.print(
            f"{len(report.roles) - lacking} of {len(report.roles)} rule-role pairs covered "
            f"({len(ROLE_RULES)} rules on the {' and the '.join(role.name for role in ROLES)}); {ROLE_DEFINITION}.",
            highlight=False,
        )


def render_roles(report: RulesReport, console: Console, missing_only: bool = False) -> None:
    """The rules both roles must cover, one row per role, with the role's own spec functions,
    family and tests (``--missing``: only the pairs that lack one)."""
    rows = report.uncovered_roles() if missing_only else report.roles
    if not rows:
        return
    table = Table(title="Rules on both roles" + (" (uncovered only)" if missing_only else ""), show_lines=True)
    for name in ("Rule", "Role", "Spec functions", "Vector family", "Tests"):
        table.add_column(name, overflow="fold")
    if missing_only:
        table.add_column("Lacking", style="red")
    for cov in rows:
        cells = [
            cov.rule.id,
            cov.role.name,
            "\n".join(name.removeprefix("spec.") for name in cov.spec),
            "\n".join(cov.families),
            _tests_summary(cov.tests),
        ]
        if missing_only:
            cells.append(" and ".join(cov.lacking()))
        table.add_row(*cells)
    console.print(table)
