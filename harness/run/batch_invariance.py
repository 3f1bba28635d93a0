"""Batch invariance: a request's draws and tokens may not depend on its batch (R22, R27).

Every request of the valid ``verification_round`` cases of the corpus is keyed only
by its own RNG identity, so the spec's answer for it alone is its answer in any
batch. :func:`check_batch_invariance` re-batches those requests
(:func:`rebatchings`: each alone; mixed with the requests of other cases in
corpus, reversed and shuffled order; four copies of itself), runs every
re-batching through the adapter, and checks

* each request's answer against the spec's per-request answer, draw for draw, with
  :func:`qconform.harness.judging.judge.judge` (``precision`` stays inside the adapter's
  declared margins and is not a divergence), and
* that the adapter answers each request identically in every re-batching (margin
  fields aside), which also catches batch dependence inside declared margins.

Batches hold up to four requests sharing one vocabulary and one depth (R27). The
bug class is FlashInfer's Philox keyed by batch row (vLLM #27433 asks for this
check). ``qconform batch-invariance`` is the command (docs/fuzzing.md).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from qconform.generators.encoding import canonical_json
from qconform.generators.registry import load_family
from qconform.harness.judging.judge import judge
from qconform.harness.judging.value_diff import Malformed, first_difference
from qconform.harness.run.case_runner import CHUNK, Client
from qconform.harness.verdicts import Verdict, VerdictClass
from qconform.spec.constants import MAX_REQUESTS

FAMILY = "verification_round"
#: verdicts that are divergences (``precision`` is inside declared margins)
DIVERGENT = frozenset({VerdictClass.FAIL, VerdictClass.ERROR})
#: the re-batching every other one is compared with
BASELINE = "alone"


@dataclass(frozen=True)
class Request:
    """One request of a corpus case and the spec's answer for it alone."""

    origin: str
    vocab: int
    body: dict
    expected: dict

    @property
    def depth(self) -> int:
        return len(self.body["draft_tokens"])


def case_field(case: object, key: str) -> Any:
    """A field of a case object or of a VectorCase: a JSON value, of another type for each key."""
    return case.get(key) if isinstance(case, dict) else getattr(case, key)


def corpus_requests(cases: Iterable) -> list[Request]:
    """The distinct requests of the valid ``verification_round`` cases (objects or
    :class:`~qconform.generators.validation.VectorCase`), in corpus order.

    The spec verifies each request of a batch on its own (R27), so the expected
    answer of request ``i`` of a case is ``expected.requests[i]``.
    """
    found: dict[str, Request] = {}
    for case in cases:
        if case_field(case, "result") != "valid":
            continue
        inp, expected = case_field(case, "input"), case_field(case, "expected")
        for index, (body, answer) in enumerate(zip(inp["requests"], expected["requests"])):
            key = canonical_json([inp["vocab"], body])
            found.setdefault(key, Request(f"{case_field(case, 'id')}#{index}", inp["vocab"], body, answer))
    return list(found.values())


# --- re-batchings ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rebatching:
    name: str
    description: str
    batches: tuple[tuple[Request, ...], ...]


def pools(requests: Sequence[Request]) -> list[list[Request]]:
    """The requests grouped by (vocabulary, depth), each group in the given order."""
    groups: dict[tuple[int, int], list[Request]] = {}
    for request in requests:
        groups.setdefault((request.vocab, request.depth), []).append(request)
    return list(groups.values())


def chunked(pool: Sequence[Request], size: int) -> list[tuple[Request, ...]]:
    return [tuple(pool[start : start + size]) for start in range(0, len(pool), size)]


def rebatchings(requests: Sequence[Request], seed: int = 0, max_batch: int = MAX_REQUESTS) -> list[Rebatching]:
    """The re-batchings of ``requests``: alone, mixed in corpus order, reversed, shuffled
    (``random.Random(seed)``), and replicated (``max_batch`` copies of one request)."""
    groups = pools(requests)
    rng = random.Random(seed)
    shuffled = [rng.sample(pool, len(pool)) for pool in groups]
    return [
        Rebatching(BASELINE, "each request alone (batch row 0)", tuple((r,) for r in requests)),
        Rebatching(
            "mixed",
            f"requests of all cases in corpus order, batches of up to {max_batch}",
            tuple(b for pool in groups for b in chunked(pool, max_batch)),
        ),
        Rebatching(
            "reversed",
            "the same pools in reverse order",
            tuple(b for pool in groups for b in chunked(pool[::-1], max_batch)),
        ),
        Rebatching(
            "shuffled",
            f"the same pools shuffled (seed {seed})",
            tuple(b for pool in shuffled for b in chunked(pool, max_batch)),
        ),
        Rebatching(
            "replicated", f"{max_batch} copies of each request in one batch", tuple((r,) * max_batch for r in requests)
        ),
    ]


# --- running and judging ------------------------------------------------------------------------


@dataclass(frozen=True)
class Divergence:
    """A request whose answer in one re-batching is not the spec's, or not its answer alone."""

    rebatching: str
    batch: int
    row: int
    origin: str
    message: str

    def line(self) -> str:
        return f"{self.origin} in {self.rebatching} batch {self.batch} row {self.row}: {self.message}"


@dataclass
class RebatchingResult:
    rebatching: Rebatching
    counts: Counter = field(default_factory=Counter)
    divergences: list[Divergence] = field(default_factory=list)

    def line(self) -> str:
        counts = ", ".join(f"{n} {cls}" for cls, n in sorted(self.counts.items()))
        requests = sum(len(batch) for batch in self.rebatching.batches)
        return (
            f"{self.rebatching.name:<11} {len(self.rebatching.batches):>4} batches {requests:>4} requests: "
            f"{counts}; {len(self.divergences)} divergent  ({self.rebatching.description})"
        )


@dataclass
class InvarianceReport:
    results: list[RebatchingResult]
    #: requests answered differently in two re-batchings
    inconsistencies: list[Divergence]

    @property
    def divergences(self) -> list[Divergence]:
        return [d for r in self.results for d in r.divergences] + self.inconsistencies

    @property
    def ok(self) -> bool:
        return not self.divergences


def batch_case(batch: Sequence[Request], name: str) -> dict:
    """A ``verification_round`` case of ``batch`` whose expected answer is the per-request one."""
    return {
        "id": f"{FAMILY}/batch_invariance/{name}",
        "family": FAMILY,
        "result": "valid",
        "flags": [],
        "input": {"vocab": batch[0].vocab, "requests": [r.body for r in batch]},
        "expected": {"requests": [r.expected for r in batch]},
    }


def request_outcomes(outcome: object, size: int) -> list[object]:
    """One outcome per request: the answer split by request when it has one per request,
    else the whole outcome (a refusal, an error, a malformed answer) for each."""
    if isinstance(outcome, dict) and isinstance(outcome.get("requests"), list) and len(outcome["requests"]) == size:
        return [{"requests": [answer]} for answer in outcome["requests"]]
    return [outcome] * size


def without_margins(value: object, margins: frozenset[str]) -> object:
    """``value`` with every field named in ``margins`` removed, at any depth."""
    if isinstance(value, dict):
        return {k: without_margins(v, margins) for k, v in value.items() if k not in margins}
    if isinstance(value, list):
        return [without_margins(v, margins) for v in value]
    return value


class AnswerLog:
    """Each request's answer in each re-batching, to check they agree."""

    def __init__(self) -> None:
        self.margins = frozenset(load_family(FAMILY).margins)
        self.answers: dict[str, list[tuple[str, int, int, object]]] = {}

    def record(self, request: Request, where: tuple[str, int, int], outcome: object) -> None:
        if isinstance(outcome, dict) and "requests" in outcome:
            self.answers.setdefault(request.origin, []).append((*where, without_margins(outcome, self.margins)))

    def inconsistencies(self) -> list[Divergence]:
        found = []
        for origin, answers in self.answers.items():
            name, _, _, baseline = answers[0]
            for rebatching, batch, row, answer in answers[1:]:
                if canonical_json(answer) != canonical_json(baseline):
                    found.append(
                        Divergence(
                            rebatching,
                            batch,
                            row,
                            origin,
                            f"answered differently than in {name}: {difference(baseline, answer)}",
                        )
                    )
                    break
        return found


def difference(baseline: object, answer: object) -> str:
    try:
        return str(first_difference(baseline, answer))
    except Malformed as exc:
        return f"malformed: {exc}"


def run_rebatching(client: Client, rebatching: Rebatching, log: AnswerLog, chunk: int = CHUNK) -> RebatchingResult:
    """Run one re-batching (``chunk`` batches per ``run_batch`` call) and judge every request."""
    result = RebatchingResult(rebatching)
    numbered = list(enumerate(rebatching.batches))
    for start in range(0, len(numbered), chunk):
        part = numbered[start : start + chunk]
        cases = [batch_case(batch, f"{rebatching.name}-{n}") for n, batch in part]
        outcomes = client.run_batch(FAMILY, [case["input"] for case in cases])
        for (n, batch), outcome in zip(part, outcomes):
            for row, (request, single) in enumerate(zip(batch, request_outcomes(outcome, len(batch)))):
                verdict = judge(batch_case([request], f"{rebatching.name}-{n}-{row}"), single, client.config)
                result.counts[verdict.cls.value] += 1
                if verdict.cls in DIVERGENT:
                    result.divergences.append(Divergence(rebatching.name, n, row, request.origin, describe(verdict)))
                log.record(request, (rebatching.name, n, row), single)
    return result


def describe(verdict: Verdict) -> str:
    text = f"{verdict.cls}: {verdict.message}"
    if verdict.diff is not None and str(verdict.diff) not in text:
        text += f" [{verdict.diff}]"
    return text


def check_batch_invariance(
    client: Client, requests: Sequence[Request], seed: int = 0, max_batch: int = MAX_REQUESTS
) -> InvarianceReport:
    """Run every re-batching of ``requests`` through ``client`` and collect the divergences."""
    log = AnswerLog()
    results = [run_rebatching(client, rebatching, log) for rebatching in rebatchings(requests, seed, max_batch)]
    return InvarianceReport(results, log.inconsistencies())
