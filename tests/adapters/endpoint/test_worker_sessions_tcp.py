"""The ``worker_sessions`` corpus over real TCP: the bundled worker passes every case, each seeded worker
mutant fails some (docs/endpoint.md, "Mutants").

The transport adapter (``tcp://``) plays every event of a case on real
connections to a ``WorkerEndpoint`` served on loopback, reads the worker's frames
up to the ``sync`` answer or the end of the stream, and the family's judge
compares the outputs, the final state and the counters with the corpus.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from endpoint_servers import LoopThread, serving  # noqa: E402
from test_tcp_adapter import family_cases, verdicts  # noqa: E402

from qconform.adapters.endpoint.deployment import hello_config  # noqa: E402
from qconform.adapters.endpoint.model import DraftModel  # noqa: E402
from qconform.adapters.endpoint.worker import WorkerEndpoint  # noqa: E402
from qconform.adapters.endpoint.worker_mutants import WORKER_MUTANTS  # noqa: E402
from qconform.harness.transport.tcp_adapter import TcpAdapter  # noqa: E402

pytestmark = pytest.mark.rules("R01", "R12", "R16", "R17", "R22", "R24", "R25", "R28")

FAMILY = "worker_sessions"


@pytest.fixture(scope="module")
def loop():
    thread = LoopThread()
    yield thread
    thread.close()


def served_verdicts(loop: LoopThread, mutant: str | None, cases: list[dict]) -> list:
    worker = WorkerEndpoint(hello_config(vocab=32), DraftModel.random(32), mutant=mutant)
    with serving(loop, worker) as url:
        adapter = TcpAdapter(url)
        assert FAMILY in adapter.capabilities().families
        return verdicts(adapter, FAMILY, cases)


def test_the_bundled_worker_passes_every_case_over_tcp(loop):
    cases = family_cases(FAMILY)
    results = served_verdicts(loop, None, cases)
    failures = [(case["id"], v.cls.value, v.message) for case, v in zip(cases, results) if v.cls.value != "pass"]
    assert failures == [] and len(results) == len(cases) > 0


#: each mutant and the cases that kill it over TCP (docs/endpoint.md's mutant table names them)
KILLED_BY = {
    "serves-before-acceptance": "worker_sessions/breaches/serve-without-answer",
    "keeps-generation-across-links": "worker_sessions/breaches/generation-across-links",
    "redraws-under-used-key": "worker_sessions/reset/at-and-below",
    "retry-different-bytes": "worker_sessions/step/identical-and-differing-retry",
    "stale-committed-token": "worker_sessions/reset/committed-token",
    "serves-unreset-slot": "worker_sessions/step/before-any-reset",
}


@pytest.mark.parametrize("mutant", list(WORKER_MUTANTS))
def test_each_worker_mutant_is_killed_by_the_family_alone(loop, mutant):
    cases = [case for case in family_cases(FAMILY) if case["id"] == KILLED_BY[mutant]]
    (result,) = served_verdicts(loop, mutant, cases)
    assert result.cls.value == "fail", result.message  # a wrong answer, not a broken driver (error)


@pytest.mark.slow
@pytest.mark.parametrize("mutant", list(WORKER_MUTANTS))
def test_each_worker_mutant_fails_the_whole_family_only_with_wrong_answers(loop, mutant):
    cases = family_cases(FAMILY)
    results = served_verdicts(loop, mutant, cases)
    killed = {case["id"] for case, v in zip(cases, results) if v.cls.value == "fail"}
    assert KILLED_BY[mutant] in killed and not [v for v in results if v.cls.value == "error"]
