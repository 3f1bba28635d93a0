"""The books of a soak (issue #25): every round accounted for exactly once, the counters, the keys, the spec, memory.

:class:`Books` sees the soak as it runs: every round as the target resolves it
(``Target.on_round``), every fault the proxy applies (``FaultProxy.on_fault``),
every COMMIT the target sent (``FaultProxy.on_commit``) and the resident memory of
both endpoints. It holds O(slots) state in memory and spills one line per round
to a file, so it adds nothing that grows with the number of rounds to the
process it runs in. :meth:`Books.close` then audits, and returns every breach as
one line (docs/endpoint.md, "The soak"):

1. **accounting**: each slot's rounds 1..N each resolved exactly once, as
   ``committed`` or ``target-only``, never both and never neither, chained (a
   round starts at the committed position and token its predecessor left); a
   committed round's COMMIT, as the proxy saw it go to the worker, matches its
   verified outcome, and no COMMIT names a round not committed; a target-only
   round's draw is the documented one (CORRECTION, position ``anchor``, counter 1);
   a faulted round falls back with its fault's reason (a duplicate commits), and a
   round no fault touched commits, unless a fault that discards every open round
   (a corrupt frame, a dropped or truncated link) ended it;
2. **counters**: each counter a fault moves (``expected_counters``) equals the
   faults injected that move it, class by class; ``discarded_proposals`` equals
   the target-only rounds; no other refusal is counted but the late and stale
   frames a discarded round leaves behind;
3. **keys**: no (seed, generation, round, position, domain, counter) key drawn
   twice across the soak (the worker's PROPOSAL draws, the target's ACCEPT and
   CORRECTION draws and its fallback draw, rebuilt from each round's identity);
4. **spec**: each target-only draw is the spec's (``spec.wire.fallback``), and each
   sampled committed round (every ``spec_every``-th, every one by default) consumed
   the spec's tokens and q rows and committed the spec's verdict;
5. **memory**: after warm-up, neither endpoint's resident memory grew by more than
   ``rss_bound_mb``.
"""

from __future__ import annotations

import os
import random
import tempfile
import time
from collections import Counter, deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np
import orjson

from qconform.adapters.fault_proxy import COMPLETION, Fault, expected_counters
from qconform.spec.proposal import ProposalInput, ProposalResult, SupportPolicy, proposal_chain
from qconform.spec.rng_abi import DrawKey, RngIdentity, accept_key, correction_key, proposal_key
from qconform.spec.verification import RoundInput, RoundResult, target_rows_from_f32, verify_round
from qconform.spec.wire.fallback import fallback_key, target_only_draw

if TYPE_CHECKING:  # torch is imported by the soak, which builds the models
    from qconform.adapters.endpoint.model import DraftModel, TargetModel
    from qconform.adapters.endpoint.target import RoundRecord

ONE_F32 = 0x3F800000
POSITIONS = 1 << 32
COMMITTED, TARGET_ONLY = "committed", "target-only"
#: the reasons a round no fault touched may fall back with: a fault on another slot's frame that discards
#: every open round of the link (a frame checksum failed, the link was cut short or dropped)
LINK_WIDE = ("CHECKSUM_MISMATCH", "TRUNCATED", "disconnect")
#: counters that move with every clean round, or as the consequence of a discard (frames of a round
#: already discarded arriving late or stale), not one for one with a fault
CONSEQUENCES = ("accepted", "discarded_proposals", "LATE_REPLY", "STALE_GENERATION", "STALE_ROUND", "UNKNOWN_ROUND")
#: every counter a fault of the proxy moves one for one (the table's counter column)
FAULT_COUNTERS = (
    "MISSING_Q",
    "timeouts",
    "CHECKSUM_MISMATCH",
    "TRUNCATED",
    "disconnects",
    "worker_failed",
    "duplicate_retries",
    "RETRY_MISMATCH",
    "POSITION_MISMATCH",
)
#: how many latencies the books keep for percentiles (a seeded reservoir)
LATENCY_SAMPLE = 4096


def fault_reason(fault: Fault) -> str:
    """The reason the target records for the round ``fault`` hit (the fault table of docs/endpoint.md)."""
    if fault.kind == "drop":
        return "timeout" if fault.index == COMPLETION else "MISSING_Q"
    return {
        "delay": "timeout",
        "corrupt": "CHECKSUM_MISMATCH",
        "truncate": "TRUNCATED",
        "fail": "worker_failed",
        "redraw": "RETRY_MISMATCH",
        "reorder": "POSITION_MISMATCH",
        "late_after_reset": "reset",
        "disconnect": "disconnect",
    }[fault.kind]


def f32_bits(tensor) -> Any:
    return tensor.numpy().astype("<f4").view("<u4").tolist()


def spec_round(
    model: DraftModel, target: TargetModel, line: dict, support: SupportPolicy
) -> tuple[ProposalResult, RoundResult]:
    """The spec's proposal chain and verification of the round ``line`` names (its key and prefix)."""
    identity = RngIdentity(int(line["seed"]), line["generation"], line["round"], line["anchor"])
    previous = model.last_token if line["draft_previous"] is None else line["draft_previous"]
    chain = proposal_chain(
        ProposalInput(
            f32_bits(model.base_logits),
            f32_bits(model.left),
            f32_bits(model.right),
            previous,
            ONE_F32,
            support,
            identity,
        )
    )
    p_rows = target_rows_from_f32(f32_bits(target.weights))
    verdict = verify_round(RoundInput(identity, chain.tokens, [row.q for row in chain.rows], p_rows))
    return chain, verdict


def round_keys(seed: int, generation: int, round_id: int, anchor: int, depth: int, accepted: int) -> set[DrawKey]:
    """Every key a round drew: the worker's K proposals, then the target's tests and correction or bonus
    (``accepted`` >= 0), or its fallback draw (``accepted`` -1)."""
    identity = RngIdentity(seed, generation, round_id, anchor)
    keys = {proposal_key(identity, i) for i in range(1, depth + 1)}
    if accepted < 0:
        return keys | {fallback_key(identity)}
    keys |= {accept_key(identity, i) for i in range(1, min(accepted + 1, depth) + 1)}
    return keys | {correction_key(identity, accepted)}


def describe_key(key: DrawKey) -> str:
    return (
        f"(seed {key.seed}, generation {key.generation}, round {key.round}, position {key.position}, "
        f"{key.domain.name}, counter {key.draw_counter})"
    )


@dataclass
class SlotBook:
    """What the books know of one slot: the next round, where it stands, how its last round ended."""

    next_round: int = 1
    committed: int | None = None
    token: int | None = None
    last: tuple[int, str] | None = None


class Books:
    """The soak's books (see the module docstring)."""

    def __init__(
        self,
        *,
        seed: int,
        slots: int,
        rounds: int,
        depth: int,
        support: SupportPolicy,
        model: DraftModel,
        target: TargetModel,
        spec_every: int = 1,
        rss_bound_mb: float = 64.0,
        warmup_rounds: int = 0,
        spill_dir: str | None = None,
    ) -> None:
        self.seed, self.rounds, self.depth, self.support = seed, rounds, depth, support
        self.model, self.target = model, target
        self.spec_every, self.rss_bound_mb, self.warmup_rounds = spec_every, rss_bound_mb, warmup_rounds
        self.slots = [SlotBook() for _ in range(slots)]
        self.breaches: list[str] = []
        self.resolved = 0
        self.outcomes: Counter = Counter()
        #: (slot, generation, round) -> the fault applied to it, until the round resolves
        self.faulted: dict[tuple[int, int, int], Fault] = {}
        self.fault_counts: Counter = Counter()
        self.expected: Counter = Counter()
        self.link_wide_faults = 0
        #: (slot, generation, round) -> (new_committed, token, accepted) of a committed round until its COMMIT goes by
        self.awaiting: dict[tuple[int, int, int], tuple[int, int, int]] = {}
        #: COMMITs that a dropped link may have swallowed (awaited when a link-ending fault was applied)
        self.excused: set[tuple[int, int, int]] = set()
        self.link_down = False
        #: the newest target-only rounds (a COMMIT naming one is a double commit)
        self.recent_fallbacks: deque[tuple[int, int, int]] = deque(maxlen=4096)
        self.commits_seen = 0
        #: (rounds resolved, target RSS bytes, worker RSS bytes), one per sample
        self.rss: list[tuple[int, int, int]] = []
        self.latency_max = {COMMITTED: 0.0, TARGET_ONLY: 0.0}
        self.latency_clean: list[float] = []
        self.latency_count = 0
        self.sampler = random.Random(seed)
        handle, self.spill_path = tempfile.mkstemp(prefix="qconform-soak-", suffix=".jsonl", dir=spill_dir)
        self.spill = os.fdopen(handle, "wb")

    def breach(self, text: str) -> None:
        self.breaches.append(text)

    # -- as the soak runs ------------------------------------------------------------------------

    def fault(self, fault: Fault) -> None:
        """The proxy applied ``fault`` (its slot and generation filled in)."""
        assert fault.slot is not None and fault.generation is not None
        self.faulted[(fault.slot, fault.generation, fault.round)] = fault
        self.fault_counts[fault.kind] += 1
        self.expected.update(expected_counters(fault))
        if fault.kind in ("corrupt", "truncate", "disconnect"):
            self.link_wide_faults += 1
        if fault.kind in ("truncate", "disconnect"):  # COMMITs in flight on the link may never arrive
            self.excused.update(self.awaiting)
            self.link_down = True

    def commit(self, fields: dict) -> None:
        """A COMMIT the target sent went by the proxy."""
        self.commits_seen += 1
        self.link_down = False
        key = (fields["slot"], fields["generation"], fields["round"])
        said = (fields["new_committed"], fields["token"], fields["accepted"])
        verified = self.awaiting.pop(key, None)
        self.excused.discard(key)
        where = f"slot {key[0]} round {key[2]} (generation {key[1]})"
        if verified is None:
            both = key in self.recent_fallbacks
            self.breach(
                f"{where}: a COMMIT {self.commit_text(said)} went to the worker for a round "
                + ("that fell back target-only (both committed and fallen back)" if both else "not committed")
            )
        elif said != verified:
            self.breach(
                f"{where}: its COMMIT says {self.commit_text(said)}, the verified outcome is {self.commit_text(verified)}"
            )

    @staticmethod
    def commit_text(fields: tuple[int, int, int]) -> str:
        return f"(new_committed {fields[0]}, token {fields[1]}, accepted {fields[2]})"

    def sample_rss(self, target_rss: int, worker_rss: int) -> None:
        self.rss.append((self.resolved, target_rss, worker_rss))

    def round(self, record: RoundRecord) -> None:
        """The target resolved ``record`` (committed or target-only), rows still held."""
        slot = self.slots[record.slot]
        where = f"slot {record.slot} round {record.round} (generation {record.generation})"
        if slot.last is not None and record.round <= slot.last[0]:
            return self.breach(
                f"{where}: accounted twice: {slot.last[1] if slot.last[0] == record.round else 'an earlier round'}, "
                f"then {record.outcome}"
            )
        if record.round > slot.next_round:
            missing = range(slot.next_round, record.round)
            self.breach(
                f"slot {record.slot}: round{'s' if len(missing) > 1 else ''} {missing.start}"
                f"{'' if len(missing) == 1 else f'..{missing.stop - 1}'} never accounted (neither committed nor "
                f"target-only; the next round seen is {record.round})"
            )
        slot.next_round, slot.last = record.round + 1, (record.round, record.outcome)
        self.resolved += 1
        self.outcomes[record.outcome] += 1
        if slot.committed is not None and (record.anchor, record.previous) != (slot.committed, slot.token):
            self.breach(
                f"{where}: starts at position {record.anchor} after token {record.previous}; the slot's committed "
                f"position was {slot.committed} after token {slot.token}"
            )
        slot.committed, slot.token = record.new_committed, record.token
        self.check_outcome(record, where)
        self.check_fault(record, where)
        latency = max(0.0, time.monotonic() - record.opened_at) if record.opened_at else 0.0
        if record.outcome in self.latency_max:
            self.latency_max[record.outcome] = max(self.latency_max[record.outcome], latency)
        if record.outcome == COMMITTED:
            self.latency_count += 1
            if len(self.latency_clean) < LATENCY_SAMPLE:
                self.latency_clean.append(latency)
            elif (pick := self.sampler.randrange(self.latency_count)) < LATENCY_SAMPLE:
                self.latency_clean[pick] = latency
        self.spill_round(record)

    def check_outcome(self, record: RoundRecord, where: str) -> None:
        """A committed round's fields and COMMIT, or a target-only round's documented draw."""
        key = (record.slot, record.generation, record.round)
        if record.outcome == COMMITTED:
            if record.accepted is None or record.token is None or record.new_committed is None:
                return self.breach(f"{where}: committed without its verdict")
            emitted = record.accepted + 1
            if len(record.tokens) != self.depth or record.new_committed != (record.anchor + emitted) % POSITIONS:
                self.breach(
                    f"{where}: committed {len(record.tokens)} drafts, new committed position {record.new_committed} "
                    f"from anchor {record.anchor} with {record.accepted} accepted"
                )
            self.awaiting[key] = (record.new_committed, record.token, record.accepted)
            if self.link_down:
                self.excused.add(key)
        elif record.outcome == TARGET_ONLY:
            self.recent_fallbacks.append(key)
            draw = record.draw
            if draw is None or record.tokens or record.accepted is not None:
                return self.breach(f"{where}: target-only with drafts {record.tokens} or no draw")
            documented = (int(draw.domain), draw.position, draw.draw_counter)
            if documented != (3, record.anchor, 1) or record.token != draw.token:
                self.breach(
                    f"{where}: target-only draw (domain {documented[0]}, position {documented[1]}, counter "
                    f"{documented[2]}), token {record.token}; documented: (domain 3, position {record.anchor}, "
                    f"counter 1), its token"
                )
            if record.new_committed != (record.anchor + 1) % POSITIONS:
                self.breach(f"{where}: target-only, new committed position {record.new_committed} from {record.anchor}")
        else:
            self.breach(f"{where}: resolved as {record.outcome!r}")

    def check_fault(self, record: RoundRecord, where: str) -> None:
        """A faulted round ends as its fault says; an untouched one commits, or fell to a link-wide fault."""
        fault = self.faulted.pop((record.slot, record.generation, record.round), None)
        if fault is not None:
            want = (COMMITTED, None) if fault.kind == "duplicate" else (TARGET_ONLY, fault_reason(fault))
            if (record.outcome, record.reason) != want:
                self.breach(
                    f"{where}: {fault.kind} of frame {fault.index} ended it {record.outcome} ({record.reason}); "
                    f"expected {want[0]} ({want[1]})"
                )
        elif record.outcome == TARGET_ONLY and not (record.reason in LINK_WIDE and self.link_wide_faults):
            advice = "; a clean round outlived the watchdog (a loaded machine: raise --watchdog)"
            self.breach(
                f"{where}: fell back target-only ({record.reason}) with no fault injected"
                + (advice if record.reason == "timeout" else "")
            )

    def spill_round(self, record: RoundRecord) -> None:
        """One line per round to the spill file: its identity and outcome, and its rows when the spec checks it."""
        line: dict[str, Any] = {
            "seq": record.seq,
            "slot": record.slot,
            "seed": str(record.seed),
            "generation": record.generation,
            "round": record.round,
            "anchor": record.anchor,
            "draft_previous": record.draft_previous,
            "outcome": record.outcome,
            "tokens": record.tokens,
            "accepted": record.accepted,
            "token": record.token,
        }
        if record.draw is not None:
            line["u32"] = record.draw.u32
        if record.outcome == COMMITTED and self.spec_every and record.seq % self.spec_every == 0 and record.rows:
            line["rows"] = [[row.counts.tolist(), None if row.ids is None else row.ids.tolist()] for row in record.rows]
        self.spill.write(orjson.dumps(line) + b"\n")

    # -- at the end ------------------------------------------------------------------------------

    def spilled(self) -> Iterator[dict]:
        with open(self.spill_path, "rb") as spill:
            for text in spill:
                yield orjson.loads(text)

    def close(self, counters: Counter, opened: int, played: list[int] | None = None) -> list[str]:
        """Audit the books against the receiver's ``counters`` and the target's ``opened`` rounds; every breach.
        ``played``: the rounds each slot opened, for a soak stopped at its duration (default: ``rounds`` each)."""
        self.spill.close()
        try:
            self.audit_accounting(opened, played or [self.rounds] * len(self.slots))
            self.audit_counters(counters)
            self.audit_keys_and_spec()
            self.audit_memory()
        finally:
            os.unlink(self.spill_path)
        return [f"soak seed {self.seed}: {text}" for text in self.breaches]

    def audit_accounting(self, opened: int, played: list[int]) -> None:
        for index, (slot, rounds) in enumerate(zip(self.slots, played, strict=True)):
            if slot.next_round != rounds + 1:
                self.breach(f"slot {index}: {slot.next_round - 1} rounds accounted of {rounds}")
        if opened != self.resolved:
            self.breach(f"{opened} rounds opened, {self.resolved} resolved once")
        for (slot, generation, round_id), fault in self.faulted.items():
            self.breach(
                f"slot {slot} round {round_id} (generation {generation}): {fault.kind} applied, round never resolved"
            )
        lost = set(self.awaiting) - self.excused
        for slot, generation, round_id in sorted(lost)[:5]:
            self.breach(f"slot {slot} round {round_id} (generation {generation}): committed, its COMMIT never went by")

    def audit_counters(self, counters: Counter) -> None:
        for name in FAULT_COUNTERS:
            if counters.get(name, 0) != self.expected.get(name, 0):
                self.breach(
                    f"counter {name} = {counters.get(name, 0)}, faults injected that move it: "
                    f"{self.expected.get(name, 0)} (injected by kind: {dict(sorted(self.fault_counts.items()))})"
                )
        if counters.get("discarded_proposals", 0) != self.outcomes[TARGET_ONLY]:
            self.breach(
                f"counter discarded_proposals = {counters.get('discarded_proposals', 0)}, "
                f"target-only rounds: {self.outcomes[TARGET_ONLY]}"
            )
        for name, count in sorted(counters.items()):
            if count and name not in FAULT_COUNTERS and name not in CONSEQUENCES:
                self.breach(f"counter {name} = {count}, and no fault injected moves it")

    def audit_keys_and_spec(self) -> None:
        """Rule 3 over every spilled round (sorted identities; equal ones compared key by key), rule 4 as sampled."""
        identities: list[tuple[int, int, int, int, int, int]] = []
        p_row = None  # the exact p_1 a fallback samples (seconds at V = 129280): made at the first fallback
        for line in self.spilled():
            seed = int(line["seed"])
            accepted = -1 if line["outcome"] == TARGET_ONLY else line["accepted"]
            identities.append((seed, line["generation"], line["round"], line["anchor"], line["seq"], accepted))
            if line["outcome"] == TARGET_ONLY:
                if p_row is None:
                    p_row = target_rows_from_f32(f32_bits(self.target.weights[:1]))[0]
                self.check_fallback_against_spec(line, p_row)
            elif "rows" in line:
                self.check_round_against_spec(line)
        self.audit_keys(identities)

    def audit_keys(self, identities: list[tuple[int, int, int, int, int, int]]) -> None:
        if not identities:
            return
        table = np.array([(s >> 32, s & 0xFFFFFFFF, g, r) for s, g, r, *_ in identities], dtype=np.int64)
        order = np.lexsort(table.T[::-1])
        ordered = table[order]
        same = np.flatnonzero((ordered[1:] == ordered[:-1]).all(axis=1))
        for at in same[:20]:
            first, second = identities[order[at]], identities[order[at + 1]]
            shared = round_keys(*first[:4], self.depth, first[5]) & round_keys(*second[:4], self.depth, second[5])
            if shared:
                key = min(shared, key=lambda k: (k.position, k.domain, k.draw_counter))
                self.breach(
                    f"key {describe_key(key)} drawn by two rounds (seq {first[4]} and {second[4]}), "
                    f"{len(shared)} keys shared"
                )

    def check_fallback_against_spec(self, line: dict, p_row) -> None:
        identity = RngIdentity(int(line["seed"]), line["generation"], line["round"], line["anchor"])
        draw = target_only_draw(identity, p_row)
        if (line.get("u32"), line["token"]) != (draw.u32, draw.token):
            self.breach(
                f"slot {line['slot']} round {line['round']} (generation {line['generation']}): target-only u32 "
                f"{line.get('u32')} token {line['token']}; the spec draws u32 {draw.u32} token {draw.token}"
            )

    def check_round_against_spec(self, line: dict) -> None:
        chain, verdict = spec_round(self.model, self.target, line, self.support)
        where = f"slot {line['slot']} round {line['round']} (generation {line['generation']})"
        rows = [[list(row.q.counts), None if row.q.ids is None else list(row.q.ids)] for row in chain.rows]
        if line["tokens"] != chain.tokens or line["rows"] != rows:
            self.breach(
                f"{where}: consumed drafts {line['tokens']} (or their q rows) differ from the spec's {chain.tokens}"
            )
        elif (line["accepted"], line["token"]) != (verdict.accepted, verdict.emitted[-1]):
            self.breach(
                f"{where}: committed {line['accepted']} accepted, token {line['token']}; the spec: "
                f"{verdict.accepted} accepted, token {verdict.emitted[-1]}"
            )

    def warm_index(self) -> int | None:
        """The first RSS sample taken after warm-up."""
        return next((i for i, (done, *_) in enumerate(self.rss) if done >= self.warmup_rounds), None)

    def audit_memory(self) -> None:
        warm = self.warm_index()
        if warm is None or warm == len(self.rss) - 1:
            return
        for column, name in ((1, "target"), (2, "worker")):
            base = self.rss[warm][column]
            peak_at = max(range(warm, len(self.rss)), key=lambda i: self.rss[i][column])
            grown = (self.rss[peak_at][column] - base) / (1 << 20)
            if base and grown > self.rss_bound_mb:
                self.breach(
                    f"{name} RSS grew {grown:.1f} MB after warm-up ({base >> 20} MB at round {self.rss[warm][0]}, "
                    f"{self.rss[peak_at][column] >> 20} MB at round {self.rss[peak_at][0]}); bound {self.rss_bound_mb} MB"
                )
