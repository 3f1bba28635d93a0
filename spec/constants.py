"""Constants named by the design (R03, R09, R13, R26, R27, R35)."""

from __future__ import annotations

#: log2 of the total dyadic mass: q(v) = c_v / 2^M_BITS (R03).
M_BITS: int = 24

#: Total dyadic mass: counts c_v are nonnegative integers summing to M (R03).
M: int = 1 << M_BITS

#: Production vocabulary (R13).
VOCAB: int = 129280

#: Fixed proposal depth, chosen before sampling (R35).
DEPTH: int = 5

#: Batch bound in requests (R27).
MAX_REQUESTS: int = 4

#: Semantic ID of the q representation (R09).
Q_SEMANTIC_ID: str = "dyadic24-standard-v1"

#: Standard-verifier ID (R11, R13).
VERIFIER_ID: str = "standard-speculative-v1"

#: RNG ABI ID (R22-R24); the layout is stated in docs/rng-abi.md.
RNG_ABI_ID: str = "philox4x32-10-qconform-v1"

#: Width of the acceptance / correction draws (bits) and of the proposal draw.
U32_BITS: int = 32
U24_BITS: int = 24
