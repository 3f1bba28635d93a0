"""An independent torch implementation of the q-transport kernels (CPU and CUDA).

It implements the design and docs/rng-abi.md from their words and never imports the
executable spec. Modules: ``philox`` (RNG ABI), ``weights`` (logits -> FP32 weights,
R05), ``allocation`` (dyadic24 counts, R06/R07), ``sampling`` (R08, R11 draws),
``proposal`` (the worker's chain), ``qrow`` (a received q row's legality, R03/R07/R19),
``verification`` (standard verification, R11).
Refusals raise :class:`CandidateError` with a stable code.
"""

from .allocation import M, SparseCounts, allocate_dense, allocate_top_k
from .errors import CandidateError
from .philox import ACCEPT, CORRECTION, PROPOSAL, counter_words, draw_word0, philox4x32_10, seed_keys
from .proposal import Proposal, propose
from .qrow import legal_q_row
from .sampling import sample_counts, sample_mass
from .verification import Draw, RoundOutcome, VerifiedRound, accepts, verify_round
from .weights import logits_to_weights, markov_bias, validate_weights

__all__ = [
    "ACCEPT",
    "CORRECTION",
    "PROPOSAL",
    "M",
    "CandidateError",
    "Draw",
    "Proposal",
    "RoundOutcome",
    "SparseCounts",
    "VerifiedRound",
    "accepts",
    "allocate_dense",
    "allocate_top_k",
    "counter_words",
    "draw_word0",
    "legal_q_row",
    "logits_to_weights",
    "markov_bias",
    "philox4x32_10",
    "propose",
    "sample_counts",
    "sample_mass",
    "seed_keys",
    "validate_weights",
    "verify_round",
]
