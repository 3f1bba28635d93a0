"""The design's numbered rules, R01-R38, and the registry of what covers them.

The rule texts are copied verbatim from the design's ``RULES.md``. Spec functions
declare the rules they *define* with :func:`defines`; generators declare the rules
their vector families *cover*; tests declare theirs with ``@pytest.mark.rules``.
``qconform rules`` joins the three views.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, TypeVar

F = TypeVar("F", bound=Callable)


@dataclass(frozen=True)
class Rule:
    """One numbered rule of the design."""

    id: str
    section: str
    text: str


RULES: dict[str, Rule] = {
    "R01": Rule(
        "R01",
        "Distribution contract",
        "The wire carries the same categorical q that sampled each token, conditioned on the committed prefix and all earlier tokens of that proposal chain. q(x) alone, or confidence/margin, cannot reconstruct a residual.",
    ),
    "R02": Rule(
        "R02",
        "Distribution contract",
        "q is the exact rational normalization of the rounded weights, at both ends. Never send independently rounded probabilities after sampling from unrounded logits; never renormalize a different q on the verifier; never pass log(q) through a lower-precision head dtype or cache (that rounds and so redefines q).",
    ),
    "R03": Rule(
        "R03",
        "Distribution contract",
        "dyadic24: total mass M = 2^24; integer counts c_v >= 0 with exact sum M; q(v) = c_v / M, sent as little-endian FP32 (always exact). The receiver recovers c_v = q(v) * M, requires an integer, validates the sum in uint64. No receiver-only renormalization.",
    ),
    "R04": Rule("R04", "Distribution contract", "A zero count is exactly zero probability."),
    "R05": Rule(
        "R05",
        "Distribution contract",
        "Proposal input: globally normalized draft weights after draft temperature and Markov bias. Reject NaN, +inf, negative probabilities and zero effective mass. -inf masked logits are allowed before the softmax.",
    ),
    "R06": Rule(
        "R06",
        "Distribution contract",
        "Allocation: floor plus largest remainders, ties by lowest global token ID, FP64 arithmetic; assert 0 <= remaining < M and the exact final sum; refuse a numerically inconsistent allocation instead of clipping or silently changing totals. Tiny entries may become zero (that changes the proposal only, never the legal target).",
    ),
    "R07": Rule(
        "R07",
        "Distribution contract",
        "Sparse top-k: select the global support first, normalize within it, allocate M counts on that support, drop zero-count entries, declare zero everywhere else.",
    ),
    "R08": Rule(
        "R08",
        "Distribution contract",
        "Sampling: a uniform 24-bit integer draw u and exact integer cumulative counts; the token is the first whose cumulative count is strictly greater than u.",
    ),
    "R09": Rule(
        "R09",
        "Distribution contract",
        "The q semantics are recorded by the semantic ID `dyadic24-standard-v1`; it is not called unrounded softmax sampling. A poor q still preserves p under correct verification; it only lowers acceptance.",
    ),
    "R10": Rule(
        "R10",
        "Distribution contract",
        "The target p is the distribution after the unchanged target processors, penalties, grammar, T=1 and top_p=1. Ratio tests and full-vocabulary residual sampling use this p and the defined q. GPU finite-precision p / ratio / log residual arithmetic needs numerical qualification against the rational oracle.",
    ),
    "R11": Rule(
        "R11",
        "Distribution contract",
        "Standard verification: accept draft x with probability min(1, p(x)/q(x)); at the first rejection sample the residual max(p - q, 0) normalized; after a fully accepted chain sample the bonus token from the next p. Independent draft temperature needs a q-aware standard-verification interface.",
    ),
    "R12": Rule(
        "R12",
        "Versioned v2 messages",
        "v1 greedy stays intact; v2 capabilities are negotiated before any sampled request is allocated or accepted; no auto-upgrade, no environment-only enablement.",
    ),
    "R13": Rule(
        "R13",
        "Versioned v2 messages",
        "HELLO carries: wire version, q semantic ID, standard-verifier ID, vocabulary 129280, global ID map/hash, draft checkpoint and native-or-adapted identity, target identity, maximum slots/depth/support, byte lengths, RNG ABI, precision.",
    ),
    "R14": Rule(
        "R14",
        "Versioned v2 messages",
        "STEP request carries: session ID, slot, generation, round ID, absolute anchor / first-draft position, committed-prefix/state digest, fixed depth, proposal temperature / support policy ID, target processor / grammar / stop context version.",
    ),
    "R15": Rule(
        "R15",
        "Versioned v2 messages",
        "Per-position reply carries: sampled global int32 token ID, representation (dense/sparse), entry count, q values and sparse global IDs, probability checksum; q is conditioned on that row's preceding sampled tokens.",
    ),
    "R16": Rule(
        "R16",
        "Versioned v2 messages",
        "Completion carries: matching session/generation/round/position/context, exact reply size and byte checksum, explicit status. A row becomes consumable only after validation.",
    ),
    "R17": Rule(
        "R17",
        "Versioned v2 messages",
        "Commit/reset carries: accepted draft count, correction/bonus IDs, new committed position. Cancel/reset invalidates the generation, every probability slot and all speculative Markov/KV/grammar state.",
    ),
    "R18": Rule("R18", "Versioned v2 messages", "Bounds are negotiated and checked before any memory access."),
    "R19": Rule(
        "R19",
        "Versioned v2 messages",
        "Rejected: duplicate sparse IDs (even duplicate zeros), unsorted or noncanonical support, out-of-range or padded IDs, missing q, non-finite values, negative or non-dyadic values, wrong total mass, zero q at the proposed token, wrong identities, unexpected sizes, stale or duplicate generations/rounds.",
    ),
    "R20": Rule("R20", "Versioned v2 messages", "Dense padding beyond the vocabulary is always zero."),
    "R21": Rule(
        "R21",
        "Versioned v2 messages",
        "Checksums detect corrupt transport only; that the worker sampled correctly needs independent CPU/GPU distribution and RNG tests.",
    ),
    "R22": Rule(
        "R22",
        "RNG ownership",
        "One RNG owner draws each proposal: the worker leader, keyed by request generation, round, absolute predicted position, domain and draw counter. The peer receives the chosen token for the next Markov step and never chooses one itself.",
    ),
    "R23": Rule(
        "R23",
        "RNG ownership",
        "The target-side sampler owns separate acceptance and correction/bonus RNG domains. Proposal noise is never reused for correction.",
    ),
    "R24": Rule(
        "R24",
        "RNG ownership",
        "Request seed overrides and reset semantics are explicit. Reconnection invalidates old in-flight RNG/state keys. A retry either reproduces the identical reply or resets the proposal generation; never redraw under a reused key, never consume an earlier q.",
    ),
    "R25": Rule(
        "R25",
        "Failure handling",
        "Missing, corrupt or timed-out q discards the entire unverified proposal on both target ranks; then target-only sampling from the committed prefix, after synchronized invalidation. Never q=None alongside sampled IDs; never a partial commit on one rank and fallback on the other. Exposed failures have counters and errors.",
    ),
    "R26": Rule(
        "R26",
        "Sizes and the critical path",
        "Sizes are exact shape arithmetic (the design's table: dense FP32 depth 5 = 2,585,600 bytes/request; sparse k = 8*k*5 bytes; TP2 dense shard = 1,292,800 bytes/rank), and the ideal serialization bound at a nominal link rate (40 Gb/s: 0.517 ms per dense request, 2.068 ms per four-request batch). These are bounds, not measured latency.",
    ),
    "R27": Rule(
        "R27",
        "Sizes and the critical path",
        "Bound the batch at four requests and fixed depth five; refuse incompatible allocation/graph shapes; preflight the slot/reply limits.",
    ),
    "R28": Rule(
        "R28",
        "Sizes and the critical path",
        "Publish q-ready only after all transfer and validation complete; release a slot only after every consumer is done; a timeout watchdog invalidates the generation before buffers can be reused; late replies are rejected.",
    ),
    "R29": Rule(
        "R29",
        "Sparse support and vocabulary sharding",
        "Sparse k=32 is the initial candidate; k=16 and k=64 are development screens.",
    ),
    "R30": Rule(
        "R30",
        "Sparse support and vocabulary sharding",
        "Sharded top-k: each shard's local top-k, merged with global IDs and deterministic ties, gives the exact global top-k; never independent local normalization; one global support/count vector; the leader samples once and broadcasts the sampled ID before the next Markov-conditioned row.",
    ),
    "R31": Rule(
        "R31",
        "Sparse support and vocabulary sharding",
        "Dense vocabulary sharding: per-rank logit max and shifted sum, all-reduced to the global normalization; count allocation coordinates the remaining tickets globally; the header stores global shard ranges.",
    ),
    "R32": Rule(
        "R32",
        "Sparse support and vocabulary sharding",
        "Sharded exact proposal sampler: one leader-owned integer draw chooses the shard by global count mass, then the token within it; a zero-mass shard can never be chosen.",
    ),
    "R33": Rule(
        "R33",
        "Sparse support and vocabulary sharding",
        "Sharded residual sampler: every rank builds max(p - q, 0) for every token it owns, including tokens outside the sparse q support; global residual mass chooses the shard, the local residual CDF the token; the global ID is broadcast. Global target normalization and grammar masks match target-only sampling.",
    ),
    "R34": Rule(
        "R34",
        "Sparse support and vocabulary sharding",
        "Kernels, in dependency order: global logsumexp and counts, global top-k merge, integer categorical proposal, sparse q lookup by global ID, full-target residual mass and sampling. Each is tested against the CPU oracle and a small-vocabulary sharding emulator before CUDA graphs.",
    ),
    "R35": Rule(
        "R35",
        "Depth admission",
        "Sampled proposals use a depth fixed before sampling (five, or a separately named fixed-depth arm): no confidence pruning, adaptive acceptance window, margin masking, global best-depth search, batch-dependent retrospective prefix cut or full-block confidence scheduling.",
    ),
    "R36": Rule(
        "R36",
        "Depth admission",
        'Any adaptive policy must make "position i will be verified" measurable before x_i is sampled: it may use committed history, load measured before drawing, prior rounds and x_1..x_(i-1), never x_i or a later confidence that encodes x_i; it decides admit/stop sequentially, samples only if admitted, and never reopens a stopped prefix.',
    ),
    "R37": Rule(
        "R37",
        "Depth admission",
        "Published counterexample (DSpark v1, appendix A): first-prefix throughput 0.9 loses to target-only 1.0, yet a later confidence that depends on the first sampled token can raise the two-token score to 1.134, so global selection admits the first token for some values of it and not others; an exact verifier cannot undo that selection.",
    ),
    "R38": Rule(
        "R38",
        "Depth admission",
        "Toy selection-bias regression: q = p uniform over two tokens; admitting the first draw only when it is token 0 and otherwise resampling target-only gives token 0 mass 3/4 instead of 1/2. The fixed-depth reference never does this.",
    ),
}

#: rule id -> qualified names of the spec functions that define it
SPEC_DEFINITIONS: dict[str, list[str]] = {rid: [] for rid in RULES}

#: Rules that *list* what other rules define rather than define a computation of their
#: own, each with the reason shown by ``qconform rules``. Only these may go without a
#: spec function of their own; a vector family still has to pin them.
LISTING_RULES: dict[str, str] = {
    "R34": "lists the kernels in dependency order; each kernel is defined by its own rule's spec "
    "functions (R06-R08 counts and sampling, R11 and R33 residuals, R30-R32 sharded top-k and proposal)",
}


@dataclass(frozen=True)
class Role:
    """One end of a wire v2 link, specified as a state machine: the spec module that defines it
    and the vector family that pins it (issue #20)."""

    name: str
    #: the module, as :data:`SPEC_DEFINITIONS` names it (``spec.wire.receiver``)
    module: str
    family: str


#: The two roles of a wire v2 link, receiver (the target's side) and worker (the drafter leader).
ROLES: tuple[Role, ...] = (
    Role("receiver", "spec.wire.receiver", "wire_sessions"),
    Role("worker", "spec.wire.worker", "worker_sessions"),
)

#: The rules each role must cover on its own (issue #20): a spec function of the role's module
#: defines the rule, the role's family pins it, and a test that imports the role's module cites it.
ROLE_RULES: tuple[str, ...] = ("R01", "R12", "R16", "R17", "R24", "R25")


def check_rule_ids(ids: tuple[str, ...] | list[str]) -> None:
    """Raise ValueError naming any id that is not one of R01-R38."""
    unknown = [i for i in ids if i not in RULES]
    if unknown:
        raise ValueError(f"unknown rule id(s) {unknown}; known ids are R01..R38")


def defines(*rule_ids: str) -> Callable[[F], F]:
    """Mark a spec function as the executable definition of ``rule_ids``."""
    check_rule_ids(rule_ids)

    def mark(fn: F) -> F:
        fn.__rules__ = tuple(rule_ids)  # type: ignore[attr-defined]
        name = f"{fn.__module__.removeprefix('qconform.')}.{fn.__qualname__}"
        for rid in rule_ids:
            if name not in SPEC_DEFINITIONS[rid]:
                SPEC_DEFINITIONS[rid].append(name)
        return fn

    return mark
