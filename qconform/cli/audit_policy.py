"""``qconform audit-policy``: the exact depth-admission auditor (R35-R38) on the command line.

``qconform audit-policy MODULE:CALLABLE [--vocab N] [--depth K] [--horizon H]``

``MODULE`` is a dotted module name (importable from the current directory) or
the path of a ``.py`` file; ``CALLABLE`` a sequential admission policy
(docs/admission.md). The policy is audited, with exact rationals and no
sampling, in the standard scenarios at ``N`` tokens and depth ``K``, and in the
module's ``AUDIT_SCENARIOS`` if it defines them. For each scenario the report
gives the total variation between the law of the first ``H`` emitted tokens and
the target law, the tokens and sequences whose mass moved, and every premature
read (R36). Exit status: 0 when every audit passes, 1 when a law differs from
p or a premature read is found, 2 when the arguments are unusable or the policy
cannot be run.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from fractions import Fraction
from pathlib import Path
from types import ModuleType
from typing import Callable

import click

#: at most this many moved sequences are listed per scenario
MOVED_LINES = 12


class AuditUsageError(click.ClickException):
    """A bad argument or an unrunnable policy: one ``Error:`` line, exit status 2."""

    exit_code = 2


def import_module(name: str) -> ModuleType:
    """The module named by a dotted name (from the current directory too) or a ``.py`` path."""
    try:
        if name.endswith(".py") or "/" in name or os.sep in name:
            path = Path(name)
            if not path.is_file():
                raise AuditUsageError(f"no policy file {name}")
            spec = importlib.util.spec_from_file_location(f"qconform_audited_{path.stem}", path)
            if spec is None or spec.loader is None:
                raise AuditUsageError(f"{name} cannot be imported as a Python module")
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module  # dataclasses and pickling look modules up by name
            spec.loader.exec_module(module)
            return module
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        return importlib.import_module(name)
    except AuditUsageError:
        raise
    except Exception as exc:  # noqa: BLE001 - any import failure is the user's module
        raise AuditUsageError(f"cannot import {name}: {type(exc).__name__}: {exc}") from None


def load_policy(target: str) -> tuple[Callable, ModuleType]:
    """The callable and its module for ``MODULE:CALLABLE``."""
    module_name, colon, attribute = target.rpartition(":")
    if not colon or not module_name or not attribute:
        raise AuditUsageError(f"expected MODULE:CALLABLE, got {target!r}")
    module = import_module(module_name)
    if not hasattr(module, attribute):
        raise AuditUsageError(f"{module_name} has no attribute {attribute!r}")
    policy = getattr(module, attribute)
    if not callable(policy):
        raise AuditUsageError(f"{target} is not callable (it is a {type(policy).__name__})")
    return policy, module


def module_scenarios(module: ModuleType) -> list:
    """The module's ``AUDIT_SCENARIOS`` (scenarios, or callables returning one)."""
    from qconform.spec.admission import Scenario

    found = []
    for item in getattr(module, "AUDIT_SCENARIOS", ()):
        scenario = item() if callable(item) and not isinstance(item, Scenario) else item
        if not isinstance(scenario, Scenario):
            raise AuditUsageError(f"AUDIT_SCENARIOS holds {type(scenario).__name__}, not a Scenario")
        found.append(scenario)
    return found


def show(value: Fraction) -> str:
    """The exact rational, with a decimal approximation when its denominator is long."""
    return f"{value} (~{float(value):.6g})" if value.denominator > 1000 else str(value)


def signed(value: Fraction) -> str:
    return f"+{show(value)}" if value > 0 else show(value)


def encoded(count: int) -> str:
    return "x1" if count == 1 else f"x1..x{count}"


def render(audit) -> list[str]:
    """The report lines of one scenario's audit."""
    from qconform.spec.admission import first_token_moves

    lines = [f"scenario {audit.scenario} (V = {audit.vocab}): {'pass' if audit.passes else 'FAIL'}"]
    if audit.lossless:
        lines.append(f"  law of the first {audit.horizon} token(s) equals the target law")
    else:
        lines.append(f"  law of the first {audit.horizon} token(s) differs from p: TV = {show(audit.tv)}")
        moves = first_token_moves(audit)
        if moves:
            lines.append(f"  first token: TV = {show(audit.first_token_tv)}")
            lines.extend(
                f"    token {m.tokens[0]}: {show(m.law)} (target {show(m.target)}, {signed(m.law - m.target)})"
                for m in moves
            )
        lines.append(f"  sequences whose mass moved: {len(audit.moved)}")
        for m in audit.moved[:MOVED_LINES]:
            tokens = " ".join(map(str, m.tokens))
            lines.append(f"    {tokens}: {show(m.law)} (target {show(m.target)}, {signed(m.law - m.target)})")
        if len(audit.moved) > MOVED_LINES:
            lines.append(f"    ... and {len(audit.moved) - MOVED_LINES} more")
    if audit.peeks:
        lines.append("  premature reads (R36): the policy read a value that encodes the draft it was admitting")
        lines.extend(
            f"    round {p.round}, before admitting x{p.step}: read {p.name} (encodes {encoded(p.encodes)}), "
            f"probability {show(p.probability)}"
            for p in audit.peeks
        )
    return lines


def run_audits(policy: Callable, scenarios: list, horizon: int | None) -> list:
    from qconform.spec.admission import audit_policy

    audits = []
    for scenario in scenarios:
        try:
            audits.append(audit_policy(policy, scenario, horizon or scenario.max_depth + 1))
        except Exception as exc:  # noqa: BLE001 - the policy is user code
            raise AuditUsageError(f"cannot audit in scenario {scenario.name}: {type(exc).__name__}: {exc}") from None
    return audits


@click.command("audit-policy")
@click.argument("target", metavar="MODULE:CALLABLE")
@click.option(
    "--vocab", type=click.IntRange(2, 6), default=2, show_default=True, help="Vocabulary of the standard scenarios."
)
@click.option("--depth", type=click.IntRange(0, 4), default=2, show_default=True, help="Most drafts a round may hold.")
@click.option(
    "--horizon",
    type=click.IntRange(1, 5),
    default=None,
    help="Emitted tokens whose law is compared (default: depth + 1).",
)
def audit_policy_command(target: str, vocab: int, depth: int, horizon: int | None) -> None:
    """Audit a depth-admission policy exactly: its emitted law beside p, and its premature reads (R35-R38)."""
    from qconform.spec.admission import standard_scenarios

    policy, module = load_policy(target)
    scenarios = standard_scenarios(vocab, depth) + module_scenarios(module)
    audits = run_audits(policy, scenarios, horizon)
    click.echo(f"audit of {target}: exact laws with real-valued uniform acceptance and residual draws")
    for audit in audits:
        click.echo("\n".join(render(audit)))
    failed = [a for a in audits if not a.passes]
    click.echo(
        f"{len(audits) - len(failed)} of {len(audits)} scenarios pass; "
        f"law differs from p in {sum(not a.lossless for a in audits)}, "
        f"premature reads in {sum(not a.measurable for a in audits)}"
    )
    if failed:
        raise SystemExit(1)
