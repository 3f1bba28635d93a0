"""The refusal precedence of every family outside the wire, as data (R05, R07, R10, R19, R22, R24, R27, R31, R36).

When one input breaks several rules at once, its answer is the code of the **earlier row** of its
family's table. Each family's format document (``docs/formats/<family>.md``, "Refusal precedence")
prints the same table, and a test parses it and compares row for row (the words of each failing
condition and its code). The spec functions that refuse check in this order; the family's generator
pins every row alone and every pair of rows that can fail together (its ``precedence`` group) and
fails when the spec answers other than the earlier row, so the code cannot drift from its table.
The wire's own tables are ``qconform.spec.wire.checks`` (docs/wire-v2.md, "Check order").

The principle behind every table, as on the wire: the shape of the input (lengths, counts, the
sizes a request asks for) comes before its values, so a refusal about a size never depends on the
values it sizes; then each value class **over the whole row** (which entry is bad first never
decides the answer: a parallel implementation reduces one flag per class), then the rules that
need every value (a sum, zero mass). A batch is judged request by request, in batch order
(verification_round, "Refusal precedence", says why).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Refusal:
    """One row of a family's precedence table: ``code`` when the input fails ``when`` (the document's words)."""

    code: str
    when: str


def table(*rows: tuple[str, str]) -> tuple[Refusal, ...]:
    return tuple(Refusal(code, when) for code, when in rows)


#: A q row (``QRow``): the shape, then the IDs over the whole row, then the counts (R03, R07, R19).
QROW_REFUSALS: tuple[Refusal, ...] = table(
    ("BAD_SHAPE", "dense: the row has not `vocab` counts"),
    ("BAD_SHAPE", "sparse: `ids` and `counts` differ in length"),
    ("TOKEN_OUT_OF_RANGE", "sparse: an ID is outside [0, `vocab`)"),
    ("BAD_SPARSE_SUPPORT", "sparse: an ID is not above the one before it"),
    ("BAD_SPARSE_SUPPORT", "sparse: a count is 0"),
    ("WRONG_TOTAL_MASS", "the counts do not sum to M = 2^24"),
)

#: A proposal row of weights or of logits and a temperature, and the top-k size (R05, R07).
ALLOCATION_REFUSALS: tuple[Refusal, ...] = table(
    ("EMPTY_ROW", "the row has no entries"),
    ("BAD_TEMPERATURE", "logits: T is not a finite positive number"),
    ("NAN_WEIGHT", "weights: a weight is NaN"),
    ("POS_INF_WEIGHT", "weights: a weight is +inf"),
    ("NEGATIVE_WEIGHT", "weights: a weight is negative (-inf and negative subnormals included)"),
    ("NAN_LOGIT", "logits: some `s_v = f32(z_v / T)` is NaN"),
    ("POS_INF_LOGIT", "logits: some `s_v` is +inf"),
    ("ZERO_MASS", "weights: no weight is positive"),
    ("ALL_MASKED", "logits: every `s_v` is -inf"),
    ("BAD_SUPPORT_SIZE", "`k` is outside 1..V"),
)

#: A sharded proposal row (the unsharded row's table, shard ranges first) and a sharded residual
#: (its ranges, its q row as ``QROW_REFUSALS``, its target weights, its mass) (R05, R07, R10, R31, R33).
SHARDING_REFUSALS: tuple[Refusal, ...] = table(
    ("BAD_SHARD_RANGES", "the shard ranges are not nonempty contiguous ranges covering [0, V)"),
    *((r.code, r.when) for r in ALLOCATION_REFUSALS[1:-1]),
    ("BAD_SUPPORT_SIZE", "top-k: `k` is outside 1..V"),
    *((r.code, f"residual: `q_row`, {r.when}") for r in QROW_REFUSALS),
    ("BAD_TARGET_ROW", "residual: a target weight is NaN, infinite or negative"),
    ("BAD_TARGET_ROW", "residual: no target weight is positive"),
    ("ZERO_MASS", "residual: every residual mass `max(p - q, 0)` is 0 and a draw is asked for"),
)

#: A batch of rounds: the batch's shape (rows 1-3), then each request in batch order, the first
#: refused request deciding by its earliest failing row (rows 4-17) (R10, R11, R19, R24, R27).
VERIFICATION_REFUSALS: tuple[Refusal, ...] = table(
    ("BAD_SHAPE", "the batch holds more than 4 requests"),
    ("BAD_SHAPE", "two requests have different numbers of drafts K"),
    ("BAD_SHAPE", "K is above 8 (no fixed-depth arm)"),
    ("BAD_REQUEST_ID", "the request carries both or neither of `seed` and `request_id`"),
    ("BAD_SHAPE", "`q_rows` has not K rows or `p_rows` has not K + 1 rows"),
    *((r.code, f"a q row, {r.when}") for r in QROW_REFUSALS),
    ("BAD_SHAPE", "a target row has not `vocab` entries"),
    ("BAD_TARGET_ROW", "a target row is no distribution"),
    ("TOKEN_OUT_OF_RANGE", "a draft token is outside [0, `vocab`)"),
    ("ZERO_Q_AT_TOKEN", "a draft token has count 0 in its q row"),
    ("TOKEN_OUT_OF_RANGE", "a stop token is outside [0, `vocab`)"),
    ("BAD_SHAPE", "`budget` is below 1"),
)

#: The table of one round's rows by prefix: the depth, every q row given, every p row given, then
#: the rows a reachable prefix lacks (R01, R10, R11, R27).
DISTRIBUTION_REFUSALS: tuple[Refusal, ...] = table(
    ("BAD_SHAPE", "`depth` is below 1"),
    *((r.code, f"a q row, {r.when}") for r in QROW_REFUSALS),
    ("BAD_SHAPE", "a p row has not `vocab` entries"),
    ("BAD_TARGET_ROW", "a p row is no distribution"),
    ("BAD_SHAPE", "a prefix the round can reach has no q row (length < K) or no p row"),
)

#: One proposal chain: its shapes, its Markov head and last token, then row by row (row 1 first)
#: that row's weights and the top-k size (R05, R07, R19, R27, R35).
PROPOSAL_CHAIN_REFUSALS: tuple[Refusal, ...] = table(
    ("BAD_SHAPE", "`depth` is not the number of `base_logits` rows"),
    ("BAD_SHAPE", "there is no base logit row (K = 0)"),
    ("BAD_SHAPE", "a `base_logits` row has not V entries (V: the rows of `markov.left`)"),
    ("BAD_SHAPE", "a `markov.left` row has not r entries (r: the rows of `markov.right`)"),
    ("BAD_SHAPE", "a `markov.right` row has not V entries"),
    ("TOKEN_OUT_OF_RANGE", "`last_committed_token` is outside [0, V)"),
    ("BAD_TEMPERATURE", "the row: T is not a finite positive number"),
    ("NAN_LOGIT", "the row: some `s_v = f32(f32(z_v + bias_v) / T)` is NaN"),
    ("POS_INF_LOGIT", "the row: some `s_v` is +inf"),
    ("ALL_MASKED", "the row: every `s_v` is -inf"),
    ("BAD_SUPPORT_SIZE", "the row: top-k `k` is outside 1..V"),
)

#: A batch of proposal chains: the batch's shape, then each request in batch order by the chain's table.
PROPOSAL_BATCH_REFUSALS: tuple[Refusal, ...] = table(
    ("BAD_SHAPE", "the batch holds no request or more than 4"),
    ("BAD_SHAPE", "two requests have different numbers of `base_logits` rows"),
    ("BAD_SHAPE", "two requests have different support policies or Markov heads"),
    *((r.code, f"a request, {r.when}") for r in PROPOSAL_CHAIN_REFUSALS),
)

#: One draw key's fields (R22, R23, R24): one code, so the order never decides it.
RNG_ABI_REFUSALS: tuple[Refusal, ...] = table(
    ("BAD_RNG_FIELD", "`seed` is outside [0, 2^64)"),
    ("BAD_RNG_FIELD", "`position` is outside [0, 2^32)"),
    ("BAD_RNG_FIELD", "`round` is outside [0, 2^32)"),
    ("BAD_RNG_FIELD", "`generation` is outside [0, 2^32)"),
    ("BAD_RNG_FIELD", "`draw_counter` is outside [0, 2^24)"),
)

#: One round's outcome law (R09, R11): a ``round`` is one ``verification_round`` request, so it refuses as
#: that family's rows 4-17 (the batch rows 1-3 have no batch to judge); a ``chain`` is a ``distribution``
#: table, so it refuses as that family's table. ``mode`` decides which rows apply; the two never meet.
OUTCOME_LAW_REFUSALS: tuple[Refusal, ...] = table(
    *((r.code, f"round: {r.when}") for r in VERIFICATION_REFUSALS[3:]),
    *((r.code, f"chain: {r.when}") for r in DISTRIBUTION_REFUSALS),
)

#: An admission audit (R01, R10, R19, R36): the scenario's row keys, its q rows (as ``QROW_REFUSALS``,
#: over all of them), its p rows (every length, then every value), then the decision table as
#: ``check_table`` judges it against the scenario, and last a state the audit reaches without a decision.
ADMISSION_REFUSALS: tuple[Refusal, ...] = table(
    ("BAD_SHAPE", '`q` or `p` is not keyed by `""` and every token ID below `vocab`'),
    *((r.code, f"a q row, {r.when}") for r in QROW_REFUSALS),
    ("BAD_SHAPE", "a p row has not `vocab` entries"),
    ("BAD_TARGET_ROW", "a p row is no distribution"),
    ("BAD_POLICY", "the table has more entries than `depth`"),
    ("BAD_POLICY", "entry i is not numbered `step` i"),
    ("BAD_POLICY", "a step reads `x<j>`, `c<j>` or `t<j>` with j above `depth`"),
    ("BAD_POLICY", 'a context key of `decisions` is not `""` or a token ID below `vocab`'),
    ("BAD_POLICY", "a prefix key is not as many token IDs below `vocab` as the step's reads reveal"),
    ("BAD_POLICY", "a state the audit reaches has no decision"),
)

#: family -> its rows in precedence order (families with refusals; the wire's are ``wire.checks``).
REFUSAL_ORDER: dict[str, tuple[Refusal, ...]] = {
    "categorical_sampling": QROW_REFUSALS,
    "allocation_invalid": ALLOCATION_REFUSALS,
    "sharding": SHARDING_REFUSALS,
    "verification_round": VERIFICATION_REFUSALS,
    "distribution": DISTRIBUTION_REFUSALS,
    "proposal_chain": PROPOSAL_CHAIN_REFUSALS,
    "proposal_batch": PROPOSAL_BATCH_REFUSALS,
    "rng_abi": RNG_ABI_REFUSALS,
    "outcome_law": OUTCOME_LAW_REFUSALS,
    "admission": ADMISSION_REFUSALS,
}
