"""The endpoints' deployment configuration: the HELLO a worker offers and a verifier requires.

The identities are those of the example deployment of docs/wire-v2.md (SHA-256
digests of fixed strings) so that the endpoints agree with each other and with
the corpus's production configuration out of the box; a real deployment puts
its own digests here. Defaults: V = 129280, dense stride 129280, sparse support
up to 256, four slots and four requests in flight, fixed depth 5, FP32 q.
"""

from __future__ import annotations

import hashlib

from . import layout

VOCAB = 129280
DEPTH = 5
MAX_REQUESTS = 4
MAX_SUPPORT = 256
SESSION_ID = 0x5E55_1010_0000_0001
SEMANTIC_ID = b"dyadic24-standard-v1"
VERIFIER_ID = b"standard-speculative-v1"
RNG_ABI_ID = b"philox4x32-10-qconform-v1"
#: seconds a worker waits for the answer to its HELLO before it closes the connection (R12; ``--answer-timeout``)
ANSWER_TIMEOUT_S = 10.0


def digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("ascii")).digest()


def hello_config(
    vocab: int = VOCAB,
    dense_stride: int | None = None,
    max_support: int = MAX_SUPPORT,
    max_slots: int = MAX_REQUESTS,
    max_requests: int = MAX_REQUESTS,
    session_id: int = SESSION_ID,
) -> dict:
    """The HELLO fields of the deployment; ``max_reply_bytes`` fits a dense row and a full sparse support."""
    stride = vocab if dense_stride is None else dense_stride
    params = {
        "session_id": session_id,
        "vocab": vocab,
        "max_support": min(max_support, vocab),
        "dense_stride": stride,
        "wire_version": layout.WIRE_VERSION,
        "precision": layout.PRECISION_FP32,
        "id_bytes": layout.ID_BYTES,
        "q_bytes": layout.Q_BYTES,
        "max_slots": max_slots,
        "max_requests": max_requests,
        "depth": DEPTH,
        "draft_adapted": 0,
        "semantic_id": SEMANTIC_ID.ljust(32, b"\0"),
        "verifier_id": VERIFIER_ID.ljust(32, b"\0"),
        "rng_abi_id": RNG_ABI_ID.ljust(32, b"\0"),
        "id_map_hash": digest("qconform example global ID map"),
        "draft_identity": digest("qconform example draft checkpoint"),
        "target_identity": digest("qconform example target model and processors"),
    }
    params["max_reply_bytes"] = max(layout.reply_bytes(params, 0), layout.reply_bytes(params, params["max_support"]))
    return params
