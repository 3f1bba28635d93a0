"""Checks of the arguments several commands share: family, adapter, device, corpus and
expectations. Each mistake is one :class:`~qconform.cli.errors.UsageLineError` line
(exit status 2), raised before any work starts.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from qconform.cli.errors import UsageLineError

if TYPE_CHECKING:
    from qconform.harness.run.signals import SignalGuard

#: name of the expectations folder at the root of a checkout
EXPECTATIONS_DIR = "expectations"

#: a day of seconds: a run that needs more than a day at the fastest rate anything could serve it is
#: refused before it starts, by every command that can be asked for one (docs/harness.md, "Long work")
A_DAY = 86_400


def refuse_beyond_a_day(amount: int, per_second: int, what: str, fastest: str, advice: str) -> None:
    """UsageLineError (exit 2) when ``amount`` units of work need more than a day at ``per_second``
    units a second, the fastest rate ``fastest`` names; nothing has started yet."""
    if amount > per_second * A_DAY:
        raise UsageLineError(
            f"{what} = {amount:.3g}: at {per_second:.0e} a second ({fastest}) that takes more than a day; {advice}"
        )


#: ``--start-timeout S``, of every command that starts an adapter (docs/shim-protocol.md, "Starting")
start_timeout_option = click.option(
    "--start-timeout",
    "start_timeout",
    type=click.FloatRange(min=0, min_open=True),
    metavar="S",
    help="Seconds the adapter may take to start (to answer get_config), at each start and restart "
    "(default: the longest of the batch timeout, 60 and the start a bundled adapter declares: vllm 600).",
)


def _load(name: str):
    from qconform.generators import registry

    try:
        return registry.load_family(name)
    except ImportError as exc:
        raise click.ClickException(f"family {name} cannot be loaded: {exc}") from None


def resolve_families(names: tuple[str, ...]) -> list | None:
    """The registered families named, in the order given; None (all) when no name is given.

    Every family that a run needs must load; an unknown name is a usage error.
    """
    from qconform.generators import registry

    known = registry.family_names()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageLineError(f"unknown family {', '.join(unknown)}; known families: {', '.join(known)}")
    families = [_load(n) for n in (dict.fromkeys(names) or known)]
    return families if names else None


def checkout_expectations(adapter: str) -> Path | None:
    """``expectations/<adapter>.toml`` of the checkout this package runs from, if present."""
    import qconform.harness
    from qconform.adapters.catalog import shim_adapter

    name = shim_adapter(adapter) or adapter
    path = Path(qconform.harness.__file__).resolve().parent.parent / EXPECTATIONS_DIR / f"{name}.toml"
    return path if path.is_file() else None


def check_device(adapter: str, device: str) -> None:
    """Refuse ``--device cuda`` up front where torch sees no CUDA device, for the bundled
    in-process adapters (a shim or an endpoint owns its device and says so itself):
    otherwise every case would be an error saying the same thing. One rule for every device
    (docs/harness.md, "Exit codes"): a device this machine or the adapter lacks means the
    adapter cannot start, exit 3, here as when the adapter itself refuses ``--device tpu``."""
    from qconform.adapters.catalog import shim_adapter
    from qconform.cli.errors import StartLineError
    from qconform.harness.transport.client import SHIM_PREFIX, TCP_PREFIX

    if not device.startswith("cuda") or adapter.startswith((SHIM_PREFIX, TCP_PREFIX)) or shim_adapter(adapter):
        return
    try:
        import torch
    except ImportError:
        raise StartLineError(
            f"--device {device} needs torch with CUDA, and torch is not installed: pip install 'qconform[torch]'"
        ) from None
    if not torch.cuda.is_available():
        raise StartLineError(
            f"--device {device}: torch {torch.__version__} sees no CUDA device on this machine; run with --device cpu"
        )


def check_adapter(adapter: str) -> None:
    from qconform.adapters.catalog import available_adapters
    from qconform.harness.transport.client import SHIM_PREFIX, TCP_PREFIX

    if adapter.startswith(TCP_PREFIX):
        from qconform.harness.transport.tcp_adapter import parse_tcp_url

        try:
            parse_tcp_url(adapter)
        except ValueError as exc:
            raise UsageLineError(f"{exc}, e.g. --adapter tcp://127.0.0.1:7700") from None
        return
    if adapter.startswith(SHIM_PREFIX):
        if not adapter[len(SHIM_PREFIX) :].strip():
            raise UsageLineError("shim: needs a command line, e.g. --adapter 'shim:./my_shim --flag'")
        try:
            shlex.split(adapter[len(SHIM_PREFIX) :])
        except ValueError as exc:
            raise UsageLineError(
                f"cannot parse the shim: command line {adapter[len(SHIM_PREFIX) :]!r}: {exc}"
            ) from None
        return
    from qconform.adapters.catalog import shim_adapter, shim_adapter_command
    from qconform.harness.transport.client import AdapterStartError

    if shim_adapter(adapter):
        try:
            shim_adapter_command(adapter)
        except AdapterStartError as exc:
            raise UsageLineError(str(exc)) from None
        return
    names = available_adapters()
    if adapter not in names:
        raise UsageLineError(f"unknown adapter {adapter!r}; available adapters: {', '.join(names)}")


@contextmanager
def usable_corpus() -> Iterator[None]:
    """A vector file that cannot be read or fails its checks, read by a command that runs the corpus
    (its index, or a family's cases as ``show`` and ``stat`` read them): one usage line (exit 2), as
    ``run``'s integrity check says it, never a traceback."""
    from qconform.generators.validation import VectorFileError

    try:
        yield
    except VectorFileError as exc:
        raise UsageLineError(f"no usable vector corpus: {exc}") from None


def check_corpus(
    vectors: Path, families: tuple[str, ...], pinned_root: str | None = None, verify: bool = False
) -> dict:
    """The corpus index; with ``verify``, every hash checked first (generators/integrity.py)."""
    from qconform.generators.integrity import IntegrityError
    from qconform.generators.integrity import verify as verify_corpus
    from qconform.generators.validation import load_index

    with usable_corpus():
        try:
            index = verify_corpus(vectors, pinned_root) if verify else load_index(vectors)
        except IntegrityError as exc:
            raise UsageLineError(str(exc)) from None
    unknown = [f for f in families if f not in index["families"]]
    if unknown:
        raise UsageLineError(
            f"unknown family {', '.join(unknown)}; the corpus at {vectors} has: {', '.join(index['families'])}"
        )
    return index


def check_expectations(path: Path) -> None:
    from qconform.harness.expectations import Expectations, ExpectationsError

    try:
        Expectations.load(path)
    except ExpectationsError as exc:
        raise UsageLineError(str(exc)) from None


def check_keyword(keyword: str | None) -> None:
    """A ``-k`` expression pytest cannot parse is a usage error before anything runs."""
    if not keyword:
        return
    from _pytest.mark.expression import Expression  # pytest's own parser: what -k will accept

    try:
        Expression.compile(keyword)
    except Exception as exc:  # noqa: BLE001 - ParseError (pytest < 9) or SyntaxError (pytest >= 9)
        raise UsageLineError(f"-k {keyword!r} is not a valid expression: {exc}") from None


def open_checked(
    adapter: str, device: str, timeout: float, start_timeout: float | None = None, spawned: Any = None
) -> Any:
    """The started adapter client of a command that drives it directly (fuzz, batch-invariance);
    an unknown adapter is a usage error (exit 2), one that cannot start a start error (exit 3), as
    on every command (docs/harness.md, "Exit codes"). ``spawned``: told of each child as it is
    spawned (``AdapterClient.spawned``)."""
    from qconform.cli.errors import StartLineError
    from qconform.harness.transport.client import AdapterStartError, open_adapter

    check_adapter(adapter)
    try:
        return open_adapter(adapter, device=device, timeout_s=timeout, start_timeout_s=start_timeout, spawned=spawned)
    except AdapterStartError as exc:
        raise StartLineError(str(exc)) from None


def start_adapter(
    adapter: str, device: str, timeout: float, start_timeout: float | None, guard: SignalGuard, nothing: str
) -> Any:
    """The started adapter client of a command that has nothing to report before its adapter answers
    (stat, fuzz, batch-invariance), ``guard`` raising at checkpoints: a signal while it starts ends
    the command with one line, ``... while the adapter started; {nothing}``, and 128 + its number
    (docs/harness.md, "Exit codes"); an adapter still starting is killed (:meth:`OpeningAdapter.close`)."""
    from qconform.cli.errors import interrupted_line

    opening = OpeningAdapter(adapter, device, timeout, start_timeout)
    try:
        return opening.client(guard)
    except KeyboardInterrupt:
        opening.close()
        interrupted_line(guard, f"while the adapter started; {nothing}")


class OpeningAdapter:
    """:func:`open_checked` on a thread of its own, so that the adapter's child starts (loads its
    engine: torch's import is most of a torch rank's start-up) while the command prepares the rest
    (``qconform accumulate``: the family's spec and comparator). :meth:`client` waits for it and
    raises what :func:`open_checked` raised. :meth:`close` closes it if it has started; if it is
    still starting, it kills the child at once (its start then fails, and :meth:`client` raises
    that), so no child waits out its start timeout after the caller has given up on it."""

    def __init__(self, adapter: str, device: str, timeout: float, start_timeout: float | None = None) -> None:
        import threading

        from qconform.harness.run.signals import OnThread

        check_adapter(adapter)  # an unknown adapter is a usage error before anything starts
        self._lock = threading.Lock()
        self._client: Any = None
        #: the child whose start is under way (``harness.transport.client.Child``), None before and after
        self._starting: Any = None
        self._closed = False
        self._start = OnThread(lambda: self._open(adapter, device, timeout, start_timeout), "adapter-start")

    def _spawned(self, child: Any) -> None:
        with self._lock:
            self._starting = child
            if self._closed:
                child.kill()

    def _open(self, adapter: str, device: str, timeout: float, start_timeout: float | None) -> Any:
        client = open_checked(adapter, device, timeout, start_timeout, self._spawned)
        with self._lock:
            self._starting = None
            self._client = client
            if self._closed:
                client.close()
        return client

    def client(self, guard: SignalGuard | None = None) -> Any:
        """The started client (an ``AdapterClient``), or what :func:`open_checked` raised. While it
        waits, a signal that ``guard`` remembered is raised (:meth:`OnThread.result`): a start that
        never ends can still be interrupted, though the guard raises nowhere else."""
        return self._start.result(guard)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            client, starting = self._client, self._starting
        if client is not None:
            client.close()
        elif starting is not None:
            starting.kill()  # the start under way fails; a start not yet spawned is killed as it spawns

    def __enter__(self) -> OpeningAdapter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
