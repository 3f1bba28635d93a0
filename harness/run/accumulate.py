"""Accumulated runs: an adapter answers millions of stream cases, pinned by one hash (docs/accumulated.md).

The cases of an accumulated family (:mod:`qconform.generators.accumulated`) go to the
adapter in large requests, so a vectorised candidate runs them at once. Each answer is reduced to its canonical
record; the records of each fixed shard are hashed, and the shard digests combine into
the run's hash, which is compared with the committed one (``vectors/accumulated.json``)
or, for a count that has none, the engine's.

Localisation: every shard's records are also computed by the exact engine
(:mod:`qconform.generators.accumulated_engine`, far faster than any candidate). A shard
whose digest differs is searched for its first differing record, so the first divergent
case of the run is known without a second pass; it is printed as an ordinary vector
(its ``expected`` from the spec's ``solve``), ready for ``--record``.

Cases reach the adapter by block (``run_block``: arrays each way, docs/accumulated.md
"Blocks") when it answers blocks, else as input objects. The ordinary comparator judges a
divergent case of a block: its answer rebuilt from its block record where the family's record
holds the whole answer (``allocation_dense``), else the case asked again as one input object.

Under ``torchrun`` each rank takes a contiguous ``1 / world`` of the cases
(:mod:`qconform.harness.run.distributed`); a shard cut between ranks is hashed from the
gathered pieces, so the hash does not depend on the world size.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from qconform.generators.accumulated import (
    EXPECTED_FILE,
    EXPECTED_SCHEMA,
    FAMILIES,
    PAD,
    SHARD_CASES,
    AccumulatedError,
    AccumulatedFamily,
    Batch,
    combine,
    record_of,
    shard_ranges,
)
from qconform.generators.accumulated_engine import ENGINES
from qconform.harness.adapter import AdapterError, Unimplemented
from qconform.harness.run.distributed import SINGLE, Ranks


class AccumulatedFileError(ValueError):
    """``vectors/accumulated.json`` is missing or does not follow its schema."""


#: most divergent cases judged per shard; beyond it a shard's divergences count as failures
MAX_JUDGED: int = 2048

#: (case index, its input object, the adapter's outcome) -> (verdict class, one-line verdict) by the
#: ordinary comparator
Judge = Callable[[int, dict, object], tuple[str, str]]


@dataclass(frozen=True)
class Divergence:
    """A case whose record differs from the spec's, and the ordinary comparator's verdict on it."""

    case: int
    outcome: object  # the adapter's answer (dict), AdapterError or Unimplemented
    reason: str  # why the answer has no record, or "" when its record differs
    verdict: str  # "precision" (excused by the adapter's declared margins), "fail", "error"...
    line: str


@dataclass(frozen=True)
class ShardResult:
    digest: bytes
    engine_digest: bytes
    divergences: list[Divergence]
    unjudged: int


@dataclass(frozen=True)
class Piece:
    """Part of a shard computed by one rank (docs/distributed.md): its records as canonical
    bytes, the engine's, and its divergent cases, judged as if the piece were a shard; with the
    digests of those bytes (a whole shard keeps no bytes, ``b""``: only its digests travel)."""

    records: bytes
    engine: bytes
    divergences: list[Divergence]
    unjudged: int
    digest: bytes = b""
    engine_digest: bytes = b""


class RecordStream:
    """A piece's canonical record bytes, batch by batch: hashed as they come, and kept only where
    the piece is part of a shard (its bytes are hashed with the other parts'). A whole shard's
    batches are never copied into bytes (issue #24: the copies, and the fresh pages they took,
    were a tenth of the harness's time on ``verification_round``)."""

    def __init__(self, keep: bool) -> None:
        self.sha = hashlib.sha256()
        self.kept: list[bytes] | None = [] if keep else None

    def add(self, records: np.ndarray) -> np.ndarray:
        """Records ``[n, words]`` appended; their canonical array (little-endian u32, C order)."""
        canonical = np.ascontiguousarray(records, dtype="<u4")
        self.sha.update(canonical.data)
        if self.kept is not None:
            self.kept.append(canonical.tobytes())
        return canonical

    def data(self) -> bytes:
        return b"".join(self.kept or [])

    def fork(self) -> RecordStream:
        """A stream of the same records so far that goes on apart (the hash state copied)."""
        other = RecordStream(self.kept is not None)
        other.sha = self.sha.copy()
        if self.kept is not None:
            other.kept = list(self.kept)
        return other


class RecordPair:
    """The adapter's records of a piece and the engine's (two :class:`RecordStream`), batch by
    batch. While every batch so far is the same in both, the two streams are the same bytes, so
    they are one stream (one SHA-256 and, where kept, one copy of the bytes); at the first batch
    that differs the engine's stream is forked from it (:meth:`RecordStream.fork`) and the two go
    on apart. The digests are those of hashing each stream alone (issue #24: a passing run hashed
    every record twice, and compared them case by case, on the harness's time)."""

    def __init__(self, keep: bool) -> None:
        self.adapter = RecordStream(keep)
        #: the engine's own stream once the two parted; None while it is the adapter's
        self.parted: RecordStream | None = None

    @property
    def engine(self) -> RecordStream:
        return self.adapter if self.parted is None else self.parted

    @property
    def same(self) -> bool:
        """Every batch so far the same in both streams."""
        return self.parted is None

    def add(self, records: np.ndarray, engine: np.ndarray) -> np.ndarray:
        """Both streams' records ``[n, words]`` appended; per case, whether they differ."""
        answered = np.ascontiguousarray(records, dtype="<u4")
        expected = np.ascontiguousarray(engine, dtype="<u4")
        if np.array_equal(answered, expected):  # a whole-array memcmp, far cheaper than by case
            differs = np.zeros(len(answered), dtype=bool)
        else:
            differs = (answered != expected).any(axis=1)
            if self.parted is None:
                self.parted = self.adapter.fork()
        self.adapter.add(answered)
        if self.parted is not None:
            self.parted.add(expected)
        return differs


def capped(divergences: list[Divergence], unjudged: int) -> tuple[list[Divergence], int]:
    """A shard's judged divergences in case order, cut as one pass over the shard cuts them: at
    :data:`MAX_JUDGED`, and after the first failure; what is cut counts as unjudged."""
    keep = len(divergences)
    for index, divergence in enumerate(divergences):
        if index >= MAX_JUDGED:
            keep = index
            break
        if divergence.verdict != "precision":
            keep = index + 1
            break
    return divergences[:keep], unjudged + len(divergences) - keep


def whole_shard(piece: Piece) -> ShardResult:
    """A shard computed whole by one rank: its digests, and its divergences cut as a shard's."""
    divergences, unjudged = capped(piece.divergences, piece.unjudged)
    return ShardResult(piece.digest, piece.engine_digest, divergences, unjudged)


def merge_pieces(pieces: list[Piece]) -> ShardResult:
    """One shard's result from its pieces in case order: the same digests, divergences and
    unjudged count as one pass over the whole shard gives."""
    divergences, unjudged = capped([d for p in pieces for d in p.divergences], sum(p.unjudged for p in pieces))
    return ShardResult(
        hashlib.sha256(b"".join(p.records for p in pieces)).digest(),
        hashlib.sha256(b"".join(p.engine for p in pieces)).digest(),
        divergences,
        unjudged,
    )


def rank_pieces(shards: list[tuple[int, int]], count: int, ranks: Ranks) -> list[tuple[int, int, int]]:
    """This rank's work, ``(shard, lo, hi)``: its contiguous ``1 / world`` of the cases,
    ``[count * rank // world, count * (rank + 1) // world)``, cut at shard boundaries."""
    first, last = ranks.share(count)
    pieces = []
    for index, (lo, hi) in enumerate(shards):
        if max(lo, first) < min(hi, last):
            pieces.append((index, max(lo, first), min(hi, last)))
    return pieces


@dataclass
class AccumulateResult:
    family: str
    count: int
    hash: str
    expected: str
    expected_source: str  # "vectors/accumulated.json" or "engine"
    engine_hash: str
    divergences: list[Divergence]
    unjudged: int
    seconds: float
    world: int
    shards: int

    @property
    def matches(self) -> bool:
        return self.hash == self.expected

    @property
    def failures(self) -> list[Divergence]:
        return [d for d in self.divergences if d.verdict != "precision"]

    @property
    def excused(self) -> list[Divergence]:
        return [d for d in self.divergences if d.verdict == "precision"]

    @property
    def verdict(self) -> str:
        """``pass`` (the hash matches), ``precision`` (every divergent case is excused by the
        adapter's declared margins), ``fail`` (any other divergence, or an engine that
        disagrees with the committed hash)."""
        if self.matches:
            return "pass"
        if self.divergences and not self.failures and not self.unjudged and self.engine_hash == self.expected:
            return "precision"
        return "fail"


def exact_judge(_case: int, _input: dict, _outcome: object) -> tuple[str, str]:
    """Without the ordinary comparator every divergence is a failure."""
    return "fail", "differs from the spec's record"


def load_expected(vectors_dir: Path) -> dict:
    """The committed hashes, validated against their schema."""
    import jsonschema

    path = vectors_dir / EXPECTED_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise AccumulatedFileError(f"{path}: {exc}") from None
    try:
        jsonschema.validate(data, EXPECTED_SCHEMA)
    except jsonschema.ValidationError as exc:
        raise AccumulatedFileError(f"{path}: {exc.message}") from None
    return data


def committed_hash(expected: dict, family: str, count: int) -> str | None:
    return expected["families"].get(family, {}).get("hashes", {}).get(str(count))


def answer_records(family: AccumulatedFamily, inputs: list[dict], outcomes: list) -> tuple[np.ndarray, dict[int, str]]:
    """The records of a batch of answers, and per case without a record the reason (its
    record is then all padding, which no answer of a valid case reduces to)."""
    records = np.full((len(inputs), family.record_words), PAD, dtype=np.uint64)
    broken: dict[int, str] = {}
    for k, (inp, outcome) in enumerate(zip(inputs, outcomes)):
        if isinstance(outcome, (AdapterError, Unimplemented)):
            broken[k] = f"{type(outcome).__name__}: {getattr(outcome, 'message', getattr(outcome, 'reason', ''))}"
            continue
        try:
            records[k] = record_of(family, inp, outcome)
        except AccumulatedError as exc:
            broken[k] = str(exc)
    return records, broken


#: a run_batch of an adapter client: (family, case inputs) -> one outcome per input
RunBatch = Callable[[str, list[dict]], list]
#: a run_block of an adapter client: (family, block arrays) -> records, or Unimplemented / AdapterError
RunBlock = Callable[[str, dict[str, np.ndarray]], object]
#: a run_block that returns once the block is sent (an adapter client's ``send_block``, with pipelined
#: requests, docs/shim-protocol.md): (family, block arrays) -> the wait for what RunBlock returns; the
#: blocks are answered in the order they were sent
SendBlock = Callable[[str, dict[str, np.ndarray]], Callable[[], object]]


#: one judged case of a batch: its input object, its ordinary outcome, the reason it has no record
#: ("" when it has one), and whether it reduces to the record the batch holds (False: its block
#: answer and its answer as one input object differ, a failure whatever the comparator says)
Outcome = tuple[dict, object, str, bool]


@dataclass(frozen=True)
class Answers:
    """A batch of cases answered: their records ``[n, words]``, and for cases ``ks`` (indices in
    the batch) their outcomes (:data:`Outcome`)."""

    records: np.ndarray
    outcomes: Callable[[list[int]], list[Outcome]]


def per_case_answers(run_batch: RunBatch, family: AccumulatedFamily, batch: Batch) -> Answers:
    """The cases as input objects through ``run_batch``: one object per case each way."""
    inputs = [family.case_input(batch, k) for k in range(batch.stop - batch.start)]
    outcomes = run_batch(family.name, inputs)
    records, broken = answer_records(family, inputs, outcomes)
    return Answers(records, lambda ks: [(inputs[k], outcomes[k], broken.get(k, ""), True) for k in ks])


def rebuilt_answer(family: AccumulatedFamily, inp: dict, record: np.ndarray) -> dict | None:
    """The answer whose record is a block's ``record``, where the family's record holds the whole
    answer (:attr:`AccumulatedFamily.answer`) and ``record`` is the record of that answer; else
    None (no such family, a record of padding alone, or words no answer reduces to: the case is
    asked again as one input object, which says what its answer is)."""
    if family.answer is None or (record == PAD).all():
        return None
    words = record.tolist()
    answer = family.answer(inp, words)
    try:
        return answer if record_of(family, inp, answer) == words else None
    except AccumulatedError:
        return None


class Candidate:
    """How the cases reach the adapter: by block (``run_block``: arrays each way, docs/accumulated.md
    "Blocks") while the adapter answers blocks, else as input objects (``run_batch``). A divergent
    case of a block goes to the ordinary comparator as its answer rebuilt from its block record
    (:func:`rebuilt_answer`: no request, and the answer judged is the one hashed), or else asked
    again as one input object."""

    def __init__(
        self, run_batch: RunBatch, run_block: RunBlock | None = None, send_block: SendBlock | None = None
    ) -> None:
        # One call at a time: a divergent case is asked again from the judging thread
        # (:func:`run_pieces`) while the main thread asks the next block, and neither an adapter's
        # channel nor an in-process adapter is made to take two calls at once. Two requests in
        # flight happen only by ``send_block``, the channel's ordered protocol feature (its
        # sending and each wait are calls under this lock too).
        one_at_a_time = threading.Lock()

        def run_batch_alone(*args: Any, **kwargs: Any) -> Any:
            with one_at_a_time:
                return run_batch(*args, **kwargs)

        def run_block_alone(block_run: RunBlock) -> RunBlock:
            def alone(*args: Any, **kwargs: Any) -> Any:
                with one_at_a_time:
                    return block_run(*args, **kwargs)

            return alone

        def send_block_alone(block_send: SendBlock) -> SendBlock:
            def sent(family: str, block: dict[str, np.ndarray]) -> Callable[[], object]:
                with one_at_a_time:
                    waiting = block_send(family, block)

                def wait() -> object:
                    with one_at_a_time:
                        return waiting()

                return wait

            return sent

        self.run_batch: RunBatch = run_batch_alone
        self.run_block: RunBlock | None = None if run_block is None else run_block_alone(run_block)
        self.send_block: SendBlock | None = None if send_block is None else send_block_alone(send_block)
        #: requests asked ahead of the one being answered (:meth:`ask`): 1 with ``send_block``
        self.ahead = 0 if send_block is None else 1
        #: why the block path was left (a refusal or a failed request), "" while it is used
        self.blocks_left = ""

    @property
    def by_block(self) -> bool:
        return (self.run_block is not None or self.send_block is not None) and not self.blocks_left

    def ask(self, family: AccumulatedFamily, batch: Batch) -> Callable[[], Answers]:
        """Send the batch's cases and return the wait for their :class:`Answers`. With ``send_block``
        the block goes out now and is answered while the caller sends the next (waits are taken in
        the order asked); a block sent ahead whose wait finds the block path left by an earlier
        block is asked case by case, as it would have been one request at a time."""
        if self.send_block is None or not self.by_block:
            answers = self.answers(family, batch)
            return lambda: answers
        waiting = self.send_block(family.name, family.block(batch))

        def answered() -> Answers:
            answer = waiting()  # read in any case: the replies come in the order asked
            if self.blocks_left:
                return per_case_answers(self.run_batch, family, batch)
            return self.block_answers(family, batch, answer)

        return answered

    def answers(self, family: AccumulatedFamily, batch: Batch) -> Answers:
        if not self.by_block:
            return per_case_answers(self.run_batch, family, batch)
        block = family.block(batch)
        if self.run_block is not None:
            return self.block_answers(family, batch, self.run_block(family.name, block))
        assert self.send_block is not None
        return self.block_answers(family, batch, self.send_block(family.name, block)())

    def block_answers(self, family: AccumulatedFamily, batch: Batch, answer: object) -> Answers:
        """The answers of a batch sent as a block, from what the block was answered (records, or a
        refusal or failure: the block path is left and the batch asked case by case)."""
        n = batch.stop - batch.start
        if not isinstance(answer, np.ndarray) or answer.shape != (n, family.record_words) or answer.dtype != "<u4":
            what = (
                answer
                if isinstance(answer, (Unimplemented, AdapterError))
                else f"records of shape {getattr(answer, 'shape', '?')}"
            )
            self.blocks_left = f"the adapter answered a block with {what}"
            return per_case_answers(self.run_batch, family, batch)
        records = answer

        def outcomes(ks: list[int]) -> list[Outcome]:
            """The cases' answers rebuilt from their records, and those that cannot be asked again as
            input objects, in one ``run_batch`` call."""
            inputs = {k: family.case_input(batch, k) for k in ks}
            rebuilt = {k: rebuilt_answer(family, inputs[k], records[k]) for k in ks}
            ask = [k for k in ks if rebuilt[k] is None]
            answered = self.run_batch(family.name, [inputs[k] for k in ask]) if ask else []
            again, broken = answer_records(family, [inputs[k] for k in ask], answered)
            asked = {
                k: (answered[j], broken.get(j, ""), bool((again[j] == records[k]).all())) for j, k in enumerate(ask)
            }
            return [(inputs[k], *asked[k]) if rebuilt[k] is None else (inputs[k], rebuilt[k], "", True) for k in ks]

        return Answers(records, outcomes)


#: the interpreter's switch interval while a run feeds the candidate (the default is 5 ms): the main
#: thread sends the next block as soon as its answer is in, instead of waiting up to 5 ms for the
#: judging thread to let go of the interpreter lock (docs/accumulated.md, "Feeding")
SWITCH_S: float = 0.0002


def request_ranges(pieces: list[tuple[int, int]], batch: int) -> list[tuple[int, int, int]]:
    """The requests of a run over ``pieces`` (case ranges, in order), as ``(piece, start, stop)``:
    ``batch`` cases each, cut at the pieces' ends. The records, hashes and verdicts do not depend
    on where the requests are cut (:func:`judge_batch`)."""
    return [
        (piece, start, min(start + batch, hi))
        for piece, (lo, hi) in enumerate(pieces)
        for start in range(lo, hi, batch)
    ]


def run_pieces(
    candidate: Candidate, family: AccumulatedFamily, pieces: list[tuple[int, int, bool]], batch: int, judge: Judge
) -> list[Piece]:
    """The adapter's records of each piece ``(lo, hi, keep)`` (cases ``[lo, hi)``), the engine's
    (their digests, and with ``keep`` their bytes: :class:`RecordStream`), and the divergent cases,
    each piece judged as if it were alone. Per request (:func:`request_ranges`), the only per-case
    work is the judging of divergent cases (at most :data:`MAX_JUDGED` a piece, none after a
    piece's first failure); the rest are counted.

    While the adapter answers a request, a second thread computes the engine's records of its
    cases and then the next request's inputs, and judges the request before it (:func:`judge_batch`:
    the comparison with the engine, the divergent cases, the records' bytes), one task after the
    other in the order they were asked, from the run's first request to its last, across pieces.
    The inputs and records are pure functions of the case range and the requests are judged in
    case order, so the records, hashes and verdicts are those of one thread; on a machine with a
    core to spare the harness's own work hides behind the candidate's (docs/accumulated.md,
    "Blocks", Feeding)."""
    streams = [RecordPair(keep) for _lo, _hi, keep in pieces]
    divergences: list[list[Divergence]] = [[] for _ in pieces]
    unjudged = [0] * len(pieces)
    requests = request_ranges([(lo, hi) for lo, hi, _keep in pieces], batch)
    ahead = ThreadPoolExecutor(1, thread_name_prefix="accumulate")

    def judged(piece: int, answers: Answers, expected: Future, start: int) -> None:
        # ``expected`` was asked of this thread before this task: it is done
        unjudged[piece] = judge_batch(
            answers, expected.result(), start, streams[piece], divergences[piece], unjudged[piece], judge
        )

    switch = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_S)
    try:
        upcoming = ahead.submit(family.arrays, *requests[0][1:]) if requests else None
        judging: list[Future] = []
        asked: deque[tuple[int, Callable[[], Answers], Future, int]] = deque()
        for index, (piece, start, _stop) in enumerate(requests):
            assert upcoming is not None
            arrays = upcoming.result()
            expected = ahead.submit(ENGINES[family.name], arrays)
            if index + 1 < len(requests):
                upcoming = ahead.submit(family.arrays, *requests[index + 1][1:])
            asked.append((piece, candidate.ask(family, arrays), expected, start))
            # with pipelined requests the next block is sent before this one's answer is awaited
            while len(asked) > candidate.ahead or (asked and index + 1 == len(requests)):
                its_piece, answered, its_expected, its_start = asked.popleft()
                judging.append(ahead.submit(judged, its_piece, answered(), its_expected, its_start))
        for done in judging:
            done.result()  # in order; a judge that raised raises here
    finally:
        ahead.shutdown(cancel_futures=True)  # an interrupted run does not compute what is queued
        sys.setswitchinterval(switch)
    return [
        Piece(
            pair.adapter.data(), pair.engine.data(), found, count, pair.adapter.sha.digest(), pair.engine.sha.digest()
        )
        for pair, found, count in zip(streams, divergences, unjudged)
    ]


def judge_batch(
    answers: Answers,
    engine: np.ndarray,
    start: int,
    streams: RecordPair,
    divergences: list[Divergence],
    unjudged: int,
    judge: Judge,
) -> int:
    """One request of :func:`run_pieces`: its records and the engine's appended to ``streams``, its
    divergent cases judged into ``divergences``; the new unjudged count."""
    differs = streams.add(answers.records, engine)
    divergent = int(np.count_nonzero(differs))
    if not divergent:
        return unjudged
    failed = any(d.verdict != "precision" for d in divergences[-1:])
    # only the cases to judge become Python integers (a failing adapter diverges on every case)
    asked = [] if failed else np.flatnonzero(differs)[: max(0, MAX_JUDGED - len(divergences))].tolist()
    unjudged += divergent - len(asked)  # past the budget, or after the first failure
    judged = 0
    while judged < len(asked) and not failed:
        # the first divergent case alone (a failing adapter is asked one case), then the rest at once
        take = asked[judged : judged + 1] if judged == 0 else asked[judged:]
        for k, (inp, outcome, reason, consistent) in zip(take, answers.outcomes(take)):
            if consistent:
                verdict, line = judge(start + k, inp, outcome)
            else:
                verdict, line = "fail", "its answer in a block differs from its answer as one input object"
            divergences.append(Divergence(start + k, outcome, reason, verdict, line))
            judged += 1
            failed = verdict != "precision"
            if failed:
                break
    unjudged += len(asked) - judged  # after the first failure
    return unjudged


def accumulate(
    run_batch: RunBatch,
    family_name: str,
    count: int,
    expected: dict,
    batch: int = 4096,
    ranks: Ranks = SINGLE,
    judge: Judge = exact_judge,
    shard_cases: int = SHARD_CASES,
    run_block: RunBlock | None = None,
    send_block: SendBlock | None = None,
) -> AccumulateResult:
    """Run ``count`` cases of an accumulated family through ``run_batch`` (an adapter
    client's), this rank's share of the shards; every rank returns the same result.
    The committed hash applies only to the committed shard size. ``send_block`` (in place of
    ``run_block``): blocks sent ahead, two requests in flight (docs/shim-protocol.md, "Pipelined
    requests"), with the same records, hashes and verdicts."""
    family = FAMILIES[family_name]
    began = time.perf_counter()
    shards = shard_ranges(count, shard_cases)
    candidate = Candidate(run_batch, run_block, send_block)
    mine = rank_pieces(shards, count, ranks)
    # a whole shard travels as its digests, a part as its records
    whole = [(lo, hi) == shards[index] for index, lo, hi in mine]
    computed = run_pieces(candidate, family, [(lo, hi, not w) for (_i, lo, hi), w in zip(mine, whole)], batch, judge)
    local: dict[tuple[int, int], ShardResult | Piece] = {
        (index, lo): whole_shard(piece) if w else piece for (index, lo, _hi), w, piece in zip(mine, whole, computed)
    }
    by_shard: dict[int, list] = {}
    for (index, _lo), part in sorted(ranks.merged(local).items(), key=lambda item: item[0]):
        by_shard.setdefault(index, []).append(part)
    ordered = [
        parts[0] if isinstance(parts[0], ShardResult) else merge_pieces(parts)
        for parts in (by_shard[index] for index in range(len(shards)))
    ]
    engine_hash = combine([r.engine_digest for r in ordered])
    committed = committed_hash(expected, family_name, count) if shard_cases == SHARD_CASES else None
    return AccumulateResult(
        family=family_name,
        count=count,
        hash=combine([r.digest for r in ordered]),
        expected=committed or engine_hash,
        expected_source="vectors/accumulated.json" if committed else "engine",
        engine_hash=engine_hash,
        divergences=[d for r in ordered for d in r.divergences],
        unjudged=sum(r.unjudged for r in ordered),
        seconds=time.perf_counter() - began,
        world=ranks.world,
        shards=len(shards),
    )


def case_vector(family_name: str, case: int, command: str, case_input: dict | None = None) -> dict:
    """Case ``case`` of the stream as an ordinary vector of its family (the fuzzer's form:
    id ``<family>/fuzz/found-<digest>``, ``expected`` from the spec's ``solve``); ``case_input``
    is its input object where the caller has it (else it is made from the stream)."""
    from qconform.harness.fuzz.spec_cases import spec_case

    family = FAMILIES[family_name]
    if case_input is None:
        case_input = family.case_input(family.arrays(case, case + 1), 0)
    vector = spec_case(family_name, case_input)
    vector["comment"] = (
        f"Found by `{command}`: case {case} of the accumulated {family_name} stream "
        "(docs/accumulated.md) differs from the spec."
    )
    return vector
