"""Test helpers for the conformance runner: real cases, stub adapter clients, small corpora.

``family_cases(name)`` gives the committed cases of a family when ``vectors/`` holds
them, else the cases the family's generator builds (cached per session), so the
comparison tests run against real vectors either way. :class:`StubClient` stands
for :class:`qconform.harness.transport.client.AdapterClient` in-process: it answers each
input through ``answer(family, input)``.
"""

from __future__ import annotations

import copy
import json
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Sequence

from qconform.generators.corpus import assemble_file, default_vectors_dir, generate
from qconform.generators.encoding import canonical_json
from qconform.generators.registry import family_names, load_family
from qconform.harness.adapter import AdapterConfig, Capabilities, Outcome, PrecisionProfile


def available_families() -> list[str]:
    """Registered families whose generator module exists."""
    found = []
    for name in family_names():
        try:
            load_family(name)
        except ModuleNotFoundError:
            continue
        found.append(name)
    return found


@lru_cache(maxsize=None)
def _family_file(name: str) -> dict:
    path = default_vectors_dir() / f"{name}.json"
    if path.is_file():
        return json.loads(path.read_text())
    family = load_family(name)
    return assemble_file(family, family.build())


def family_cases(name: str) -> list[dict]:
    """Case objects of family ``name`` (with ``family`` added), deep copies."""
    obj = _family_file(name)
    return [dict(copy.deepcopy(case), family=name) for group in obj["testGroups"] for case in group["tests"]]


def first_cases(name: str, per_result: int) -> list[dict]:
    """Up to ``per_result`` cases of each result (valid, invalid, ...) of family ``name``, in file
    order, with ``family`` added (deep copies; no deep copy of the rest of the family)."""
    kept: dict[str, int] = {}
    out = []
    for group in _family_file(name)["testGroups"]:
        for case in group["tests"]:
            if kept.get(case["result"], 0) < per_result:
                kept[case["result"]] = kept.get(case["result"], 0) + 1
                out.append(dict(copy.deepcopy(case), family=name))
    return out


def distinct_cases(name: str, key: Callable[[dict], object], limit: int) -> list[dict]:
    """The first case of each distinct ``key(case)`` of family ``name``, in file order, at most
    ``limit`` of them, with ``family`` added (deep copies of those alone)."""
    seen: set = set()
    out = []
    for group in _family_file(name)["testGroups"]:
        for case in group["tests"]:
            kind = key(case)
            if kind is not None and kind not in seen and len(out) < limit:
                seen.add(kind)
                out.append(dict(copy.deepcopy(case), family=name))
    return out


def case(name: str, case_id: str) -> dict:
    return next(c for c in family_cases(name) if c["id"] == case_id)


def adapter_config(families: Sequence[str], name: str = "stub", **profile: Any) -> AdapterConfig:
    """A config of ``families`` whose precision profile has the fields ``profile`` names (the rest default)."""
    return AdapterConfig(name, Capabilities(tuple(families)), PrecisionProfile(**profile))


def oracle(cases: Sequence[dict]) -> Callable[[str, dict], Outcome]:
    """An answer function that returns each case's ``expected`` (a perfect adapter)."""
    answers = {canonical_json(c["input"]): c["expected"] for c in cases}
    return lambda family, inp: copy.deepcopy(answers[canonical_json(inp)])


class StubClient:
    """An in-process client: ``answer(family, input) -> Outcome`` per case; counts its calls."""

    def __init__(self, config: AdapterConfig, answer: Callable[[str, dict], Outcome]) -> None:
        self.config = config
        self.answer = answer
        self.batches: list[tuple[str, int]] = []
        self.closed = False

    def run_batch(self, family: str, inputs: Sequence[dict], timeout_s: float | None = None) -> list[Outcome]:
        self.batches.append((family, len(inputs)))
        return [self.answer(family, inp) for inp in inputs]

    def close(self) -> None:
        self.closed = True


class ScriptedAdapter:
    """Opens stub clients that answer each case's ``expected``, except where ``overrides`` (by id) says.

    ``open`` has the signature of :func:`qconform.harness.run.case_runner.open_client`, so a
    test monkeypatches ``qconform.harness.run.plugin.open_client`` with it.
    """

    def __init__(
        self,
        cases: Sequence[dict],
        overrides: dict | None = None,
        families: Sequence[str] = (),
        start_error: str | None = None,
    ) -> None:
        self.ids = {canonical_json(c["input"]): c["id"] for c in cases}
        self.perfect = oracle(cases)
        self.overrides = overrides or {}
        self.families = tuple(families) or tuple(dict.fromkeys(c["family"] for c in cases))
        self.start_error = start_error
        self.clients: list[StubClient] = []
        self.seen: list[str] = []
        #: the ``strict_schema`` and the shared arena of each ``open``
        self.strict: list[bool] = []
        self.arenas: list[object] = []
        self.start_timeouts: list[float | None] = []

    def answer(self, family: str, inp: dict) -> Outcome:
        case_id = self.ids[canonical_json(inp)]
        self.seen.append(case_id)
        return self.overrides.get(case_id) or self.perfect(family, inp)

    def open(
        self,
        adapter: str,
        device: str,
        timeout: float | None,
        strict_schema: bool = False,
        arena: object = None,
        start_timeout: float | None = None,
        early: object = None,
    ) -> StubClient:
        self.strict.append(strict_schema)
        self.start_timeouts.append(start_timeout)
        self.arenas.append(arena)
        if self.start_error:
            raise RuntimeError(self.start_error)
        client = StubClient(adapter_config(self.families, name=adapter), self.answer)
        self.clients.append(client)
        return client


def corpus_cases(root: Path) -> list[dict]:
    """The cases of the corpus under ``root`` as case objects (validated on the way)."""
    from qconform.generators.validation import iter_cases

    return [
        dict(id=c.id, family=c.family, result=c.result, flags=list(c.flags), input=c.input, expected=c.expected)
        for c in iter_cases(root)
    ]


def small_corpus(root: Path, families: Sequence[str] = ("rng_abi",)) -> Path:
    """Generate a corpus of ``families`` into ``root`` (committed files are copied when present)."""
    generate(root, [load_family(name) for name in families])
    return root


def threaded_ranks(world: int) -> list:
    """``world`` in-process ranks whose gather meets at a barrier (all_gather_object's contract)."""
    from qconform.harness.run.distributed import Ranks  # here: most users of these helpers need no ranks

    barrier, slots = threading.Barrier(world), [None] * world

    def ranks(rank: int) -> Ranks:
        def gather(obj):
            slots[rank] = obj
            barrier.wait()
            out = list(slots)
            barrier.wait()
            return out

        return Ranks(rank, world, gather)

    return [ranks(r) for r in range(world)]


def on_ranks(world: int, run: Callable) -> list:
    """``run(ranks)`` on ``world`` threaded in-process ranks (:func:`threaded_ranks`); their results."""
    results: list = [None] * world

    def one(rank: int, ranks) -> None:
        results[rank] = run(ranks)

    threads = [threading.Thread(target=one, args=(r, ranks)) for r, ranks in enumerate(threaded_ranks(world))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def spec_run_batch(family: str, inputs: Sequence[dict]) -> list:
    """A ``run_batch`` that answers with the spec's ``solve`` (the reference answers)."""
    solve = load_family(family).solve
    assert solve is not None, f"{family} has no solve"
    return [solve(inp) for inp in inputs]
