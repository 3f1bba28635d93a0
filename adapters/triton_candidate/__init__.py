"""An independent Triton implementation of the q-transport kernels (CUDA, or CPU under
``TRITON_INTERPRET=1``).

It implements the design and docs/rng-abi.md from their words; it imports neither
the executable spec nor the torch candidate. The math of every row lives in
``@triton.jit`` kernels, in the design's dependency order (R34):

1. global logsumexp and counts: ``weights`` (logits, temperature and Markov bias ->
   FP32 weights, refusal flags), ``allocation`` (FP64 floors and remainders) and
   ``select`` (the deterministic top-R ticket selection, ties to the lowest ID);
2. the global top-k merge: ``topk`` (shard-local top-k, then the merge);
3. the integer categorical proposal: ``sampling`` with draws from ``philox``
   (``tl.philox`` under the RNG ABI); ``proposal`` chains the steps on the device;
4. sparse q lookup by global ID: ``lookup``;
5. full-target residual mass and sampling, and 6. acceptance: ``verification``.

Host Python only decodes inputs, launches kernels (the depth loop, request batching)
and walks the per-request results. ``launch`` holds block sizes and launch options;
``qrows`` the ragged q-row table; ``errors`` the refusals.
"""

from .allocation import M, allocate, allocate_rows
from .errors import TritonCandidateError, raise_flags
from .lookup import lookup_counts
from .philox import ACCEPT, CORRECTION, PROPOSAL, abi_draws, key_table, philox_blocks, request_seed
from .proposal import Proposal, propose
from .qrows import QRows
from .sampling import sample, sample_rows
from .select import radix_select, select_compact
from .topk import merge_top_k, shard_top_k, top_k_support
from .verification import Draw, Identity, RoundOutcome, verify_batch
from .weights import logits_to_weights, weight_scan

__all__ = [
    "ACCEPT",
    "CORRECTION",
    "PROPOSAL",
    "M",
    "Draw",
    "Identity",
    "Proposal",
    "QRows",
    "RoundOutcome",
    "TritonCandidateError",
    "abi_draws",
    "allocate",
    "allocate_rows",
    "key_table",
    "logits_to_weights",
    "lookup_counts",
    "merge_top_k",
    "philox_blocks",
    "propose",
    "radix_select",
    "raise_flags",
    "request_seed",
    "sample",
    "sample_rows",
    "select_compact",
    "shard_top_k",
    "top_k_support",
    "verify_batch",
    "weight_scan",
]
