"""The click group of the `qconform` command line: one module per command under ``qconform.cli``.

A command's module is imported only when that command runs (or when ``--help``
lists the commands), so ``qconform run`` loads no statistical, fuzzing or
endpoint code. Each command parses its options and delegates to the harness or
the generators; user mistakes (unknown names, malformed or unwritable files) end
in one ``Error:`` line and a nonzero exit status, never a traceback
(:mod:`qconform.cli.errors`).

Add a command by writing ``qconform/cli/<name>.py`` with one click command and
listing it in :data:`COMMANDS` (docs/architecture.md).
"""

from __future__ import annotations

import importlib

import click

#: command name -> ``module:attribute`` of its click command, the module relative to this package
COMMANDS: dict[str, str] = {
    "generate": "generate:generate",
    "rules": "rules:rules",
    "sizes": "sizes:sizes",
    "accumulate": "accumulate:accumulate_command",
    "adequacy": "adequacy:adequacy",
    "run": "run:run",
    "show": "show:show_command",
    "stat": "stat:stat_command",
    "mutants": "mutants:mutants",
    "audit-policy": "audit_policy:audit_policy_command",
    "fuzz": "fuzz:fuzz",
    "batch-invariance": "batch_invariance:batch_invariance",
    "endpoint": "endpoint:endpoint_group",
}


class LazyGroup(click.Group):
    """A click group whose commands are imported on first use (click's documented pattern)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, _, attribute = target.partition(":")
        command = getattr(importlib.import_module(f"{__package__}.{module}"), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{target} is not a click command")
        return command

    def invoke(self, ctx: click.Context) -> object:
        """Run the command. An interruption that reaches here (SIGINT in a command with no guard of
        its own, or before its guard is installed) ends with one line and 128 + the signal's number,
        as every guarded command does, never click's ``Aborted!`` and 1, the status of a failure
        (docs/harness.md, "Stopping cleanly")."""
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:
            import signal

            from qconform.cli.errors import interrupted_by

            interrupted_by(str(exc) if str(exc) in signal.Signals.__members__ else "SIGINT")


def show_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``--version``: as click's ``version_option`` prints it, the version read only when asked
    (:mod:`qconform`: reading it at import would cost every command's start)."""
    if not value or ctx.resilient_parsing:
        return
    from qconform import __version__

    click.echo(f"qconform, version {__version__}")
    ctx.exit()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=show_version,
    help="Show the version and exit.",
)
def cli() -> None:
    """qconform: exact conformance kit for sampled-draft (q) speculative decoding."""
