"""Sending cases to an adapter in batches and judging what comes back.

:class:`CaseRunner` is the part of a conformance run that does not depend on
pytest: it opens the adapter lazily, never sends a disabled case or a family the
adapter does not declare, sends the rest in chunks of :data:`CHUNK` cases per
``run_batch`` call, judges each outcome and applies the expectations file. A
chunk's wall time is shared equally among its cases (the ``duration`` of each
verdict). An adapter that cannot start turns every case into ``error``: the run
still finishes and its reports are still written.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable, Collection, Protocol, Sequence

from qconform.harness.adapter import AdapterConfig, AdapterError, Outcome
from qconform.harness.expectations import Expectations
from qconform.harness.judging.judge import case_family, judge
from qconform.harness.verdicts import Verdict, VerdictClass, errored

if TYPE_CHECKING:
    from qconform.harness.transport.arena import BlobArena
    from qconform.harness.transport.client import EarlyStart

#: cases per ``run_batch`` call
CHUNK = 64


#: the prefix of the one line that reports an adapter that cannot start (docs/adapters.md)
START_ERROR = "AdapterStartError"


def start_error_line(text: str) -> str:
    """``AdapterStartError: ...`` in one line: a quoted stderr is cut to its last line
    (for a Python child, the exception that stopped it)."""
    head, sep, stderr = text.partition("; stderr: ")
    head = " ".join(head.split())
    if sep:
        lines = [line.strip() for line in stderr.splitlines() if line.strip()]
        head += f"; stderr: {lines[-1]}" if lines else "; stderr was empty"
        if lines and lines[-1].startswith("ModuleNotFoundError"):
            head += " (does the shim: command name the interpreter that has it? give its absolute path)"
    return head if head.startswith(START_ERROR) else f"{START_ERROR}: {head}"


class Client(Protocol):
    """What the runner needs of :class:`qconform.harness.transport.client.AdapterClient`."""

    config: AdapterConfig

    def run_batch(self, family: str, inputs: Sequence[dict], timeout_s: float | None = None) -> list[Outcome]: ...

    def close(self) -> None: ...


def open_client(
    adapter: str,
    device: str,
    timeout_s: float | None,
    strict_schema: bool = False,
    arena: BlobArena | None = None,
    start_timeout_s: float | None = None,
    early: EarlyStart | None = None,
) -> Client:
    """The default client factory: :func:`qconform.harness.transport.client.open_adapter`, whose
    binary replies' blobs reach :func:`judge` raw (it reads both blob forms); ``arena``, the
    loaded cases' shared arena, is offered to the child (docs/shim-protocol.md, "Shared arena");
    ``early``, a child spawned before the cases were collected, is the first start's."""
    from qconform.harness.transport.client import TIMEOUT_S, open_adapter

    return open_adapter(
        adapter,
        device=device,
        timeout_s=TIMEOUT_S if timeout_s is None else timeout_s,
        strict_schema=strict_schema,
        raw_blobs=True,
        arena=arena,
        start_timeout_s=start_timeout_s,
        early=early,
    )


class CaseRunner:
    def __init__(
        self,
        open_adapter: Callable[[], Client],
        expectations: Expectations | None = None,
        timeout_s: float | None = None,
        chunk: int = CHUNK,
    ) -> None:
        self._open = open_adapter
        self.expectations = expectations or Expectations()
        self.timeout_s = timeout_s
        self.chunk = chunk
        self._client: Client | None = None
        #: why the adapter could not start, once it failed to
        self.start_failure: str | None = None

    def client(self) -> Client | None:
        """The adapter client, started on first use; None if it cannot start."""
        if self._client is None and self.start_failure is None:
            try:
                self._client = self._open()
            except Exception as exc:  # noqa: BLE001 - any start failure is reported per case
                self.start_failure = f"adapter could not start: {exc}"
        return self._client

    @property
    def config(self) -> AdapterConfig | None:
        return None if self._client is None else self._client.config

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def abort(self) -> None:
        """Kill the adapter at once (an interrupted run: no grace period)."""
        client, self._client = self._client, None
        abort = getattr(client, "abort", None)
        if abort is not None:
            abort()

    def start_check(self, known_families: Collection[str]) -> str | None:
        """Start the adapter now; why it cannot run (one line), or None.

        A family in its capability declaration that no corpus knows (a misspelling
        such as ``rng-abi``) is a start error too: otherwise every case of the
        family it meant would silently be ``unsupported``.
        """
        client = self.client()
        if client is None:
            cause = (self.start_failure or "").removeprefix("adapter could not start: ")
            self.start_failure = start_error_line(cause or "adapter did not start")
            return self.start_failure
        declared = client.config.capabilities
        unknown = [f for f in (*declared.families, *declared.sampling) if f not in known_families]
        if unknown:
            self.close()
            self.start_failure = start_error_line(
                f"adapter declares unknown famil{'y' if len(set(unknown)) == 1 else 'ies'} "
                f"{', '.join(map(repr, dict.fromkeys(unknown)))}; known families: {', '.join(sorted(known_families))}"
            )
        return self.start_failure

    def run(self, cases: Sequence[dict]) -> list[Verdict]:
        """Verdicts on ``cases`` (case objects of one family), in order."""
        verdicts: dict[str, Verdict] = {}
        pending = []
        for case in cases:
            reason = self.expectations.disabled_reason(case["id"])
            if reason is not None:
                verdicts[case["id"]] = Verdict(VerdictClass.DISABLED, case["id"], f"disabled: {reason}")
            else:
                pending.append(case)
        for start in range(0, len(pending), self.chunk):
            for verdict in self._run_chunk(pending[start : start + self.chunk]):
                verdicts[verdict.case_id] = self.expectations.apply(verdict)
        return [verdicts[case["id"]] for case in cases]

    def _run_chunk(self, cases: list[dict]) -> list[Verdict]:
        client = self.client()
        if client is None:
            return [errored(case["id"], self.start_failure or "adapter did not start") for case in cases]
        family = case_family(cases[0])
        began = time.perf_counter()
        outcomes = self._outcomes(client, family, [case["input"] for case in cases])
        share = (time.perf_counter() - began) / len(cases)
        return [judge(case, outcome, client.config).with_duration(share) for case, outcome in zip(cases, outcomes)]

    def _outcomes(self, client: Client, family: str, inputs: list[dict]) -> list[Outcome]:
        if family not in client.config.capabilities.families:
            return [AdapterError("not sent: family not declared")] * len(inputs)  # judged unsupported
        try:
            outcomes = client.run_batch(family, inputs, timeout_s=self.timeout_s)
        except Exception as exc:  # noqa: BLE001 - a client bug must not end the run
            return [AdapterError(f"run_batch raised {type(exc).__name__}: {exc}")] * len(inputs)
        if len(outcomes) != len(inputs):
            return [AdapterError(f"run_batch answered {len(outcomes)} outcomes for {len(inputs)} inputs")] * len(inputs)
        return outcomes
