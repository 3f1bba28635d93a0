"""Seeded bugs of the TP emulator, ``torch-tp2-mutant:<name>`` (torch-free, so listing adapters never imports torch).

Each is a distributed-sampling bug that a real sharded sampler can ship; the
``sharding`` vectors (and ``allocation_*`` / ``verification_round``, run sharded)
must catch every one (tests/adapters/test_torch_tp.py).
"""

from __future__ import annotations

#: name -> the bug, in one line
TP_MUTANTS: dict[str, str] = {
    "local-normalization": "each rank normalizes its own shard before the merge (its local logit max, its local sum)",
    "independent-draws": "the owner samples its shard with its own draw (the leader's draw rescaled to the shard's "
    "mass) instead of the draw less the mass before the shard",
    "residual-support-only": "a non-leader rank builds its residual only on the sparse q support, not on every token "
    "it owns",
    "per-shard-tickets": "each non-leader shard takes floor(its share of the remaining tickets), the leader the rest, "
    "instead of the global largest remainders",
}
