"""HELLO negotiation (R12, R13, R27): the peer's offer against the receiver's own configuration.

v2 exists only after HELLO (R12). The receiver's configuration has the shape of a
HELLO: the identities it requires byte for byte (q semantic ID, verifier ID, RNG
ABI ID, vocabulary, global ID map hash, draft checkpoint and its native-or-adapted
flag, target identity, precision, ID and q byte widths, dense stride, fixed
depth) and the upper bounds it can serve (support, reply bytes, slots,
requests). An offer is accepted when every identity matches and every bound
lies in 1..the receiver's bound; the offer then *is* the negotiated HELLO.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

from qconform.spec.arms import Arm, check_arm
from qconform.spec.constants import DEPTH, MAX_REQUESTS, Q_SEMANTIC_ID, RNG_ABI_ID, VERIFIER_ID, VOCAB
from qconform.spec.errors import refuse
from qconform.spec.rules import defines
from qconform.spec.wire import layout
from qconform.spec.wire.messages import Hello, ascii_field
from qconform.spec.wire.reasons import reject
from qconform.spec.wire.validation import reply_payload_bytes

#: Fields that must equal the receiver's, checked in this order, with their reason codes.
IDENTITY_FIELDS: tuple[tuple[str, str], ...] = (
    ("wire_version", "UNKNOWN_VERSION"),
    ("semantic_id", "SEMANTIC_ID_MISMATCH"),
    ("verifier_id", "VERIFIER_MISMATCH"),
    ("rng_abi_id", "RNG_ABI_MISMATCH"),
    ("vocab", "VOCAB_MISMATCH"),
    ("id_map_hash", "ID_MAP_MISMATCH"),
    ("draft_identity", "IDENTITY_MISMATCH"),
    ("draft_adapted", "IDENTITY_MISMATCH"),
    ("target_identity", "IDENTITY_MISMATCH"),
    ("precision", "PRECISION_MISMATCH"),
    ("id_bytes", "UNEXPECTED_SIZE"),
    ("q_bytes", "UNEXPECTED_SIZE"),
    ("dense_stride", "UNEXPECTED_SIZE"),
    ("depth", "DEPTH_MISMATCH"),
)

#: Bounds the offer may lower but not raise (each at least 1), with their reason codes.
BOUND_FIELDS: tuple[tuple[str, str], ...] = (
    ("max_support", "SUPPORT_ABOVE_MAX"),
    ("max_reply_bytes", "UNEXPECTED_SIZE"),
    ("max_slots", "TOO_MANY_SLOTS"),
    ("max_requests", "TOO_MANY_REQUESTS"),
)


@defines("R13", "R27")
def check_config(config: Hello) -> None:
    """Refuse (SpecError BAD_SHAPE) a receiver configuration the design forbids.

    At most four requests (R27) and a fixed-depth arm: depth five, or a
    separately named arm depth-K, K = 1..8 (R35, :mod:`qconform.spec.arms`),
    which the configuration's ``depth`` names and HELLO negotiates; a dense
    stride that holds the vocabulary; a support within the vocabulary; 4-byte
    IDs and q values.
    """
    if not 1 <= config.max_requests <= MAX_REQUESTS:
        raise refuse("BAD_SHAPE", f"a batch holds 1..{MAX_REQUESTS} requests, not {config.max_requests}")
    check_arm(Arm(config.depth))
    if config.dense_stride < config.vocab or not 1 <= config.max_support <= config.vocab:
        raise refuse("BAD_SHAPE", "the dense stride must hold the vocabulary and 1 <= max_support <= vocab")
    if (config.id_bytes, config.q_bytes) != (layout.ID_BYTES, layout.Q_BYTES) or config.max_slots < 1:
        raise refuse("BAD_SHAPE", "IDs and q values are 4 bytes and there is at least one slot")


@defines("R12", "R13", "R27")
def check_hello(offer: Hello, config: Hello) -> Hello:
    """Accept the peer's HELLO ``offer`` under the receiver's ``config`` and return it as negotiated."""
    for name, code in IDENTITY_FIELDS:
        if getattr(offer, name) != getattr(config, name):
            raise reject(code, f"{name} differs from the receiver's")
    for name, code in BOUND_FIELDS:
        if not 1 <= getattr(offer, name) <= getattr(config, name):
            raise reject(code, f"{name} = {getattr(offer, name)}, the receiver admits 1..{getattr(config, name)}")
    return offer


#: The example deployment's identities (any 32-byte digests; the vectors use these).
EXAMPLE_ID_MAP_HASH: bytes = hashlib.sha256(b"qconform example global ID map").digest()
EXAMPLE_DRAFT_IDENTITY: bytes = hashlib.sha256(b"qconform example draft checkpoint").digest()
EXAMPLE_TARGET_IDENTITY: bytes = hashlib.sha256(b"qconform example target model and processors").digest()
#: Largest sparse support of the production example (the design's table goes to k = 256).
EXAMPLE_MAX_SUPPORT: int = 256
EXAMPLE_SESSION_ID: int = 0x5E55_1010_0000_0001


@defines("R13", "R27")
def example_config(
    vocab: int = VOCAB,
    dense_stride: int | None = None,
    max_support: int = EXAMPLE_MAX_SUPPORT,
    max_slots: int = MAX_REQUESTS,
    max_requests: int = MAX_REQUESTS,
    session_id: int = EXAMPLE_SESSION_ID,
    depth: int = DEPTH,
) -> Hello:
    """The example deployment's HELLO: V = 129280, depth 5 (or another arm), four requests, dense replies fit.

    Smaller vocabularies give the development profile the vectors use for dense rows.
    """
    stride = vocab if dense_stride is None else dense_stride
    unsized = Hello(
        session_id,
        vocab,
        max_support,
        stride,
        0,
        layout.WIRE_VERSION,
        layout.PRECISION_FP32,
        layout.ID_BYTES,
        layout.Q_BYTES,
        max_slots,
        max_requests,
        depth,
        0,
        ascii_field(Q_SEMANTIC_ID),
        ascii_field(VERIFIER_ID),
        ascii_field(RNG_ABI_ID),
        EXAMPLE_ID_MAP_HASH,
        EXAMPLE_DRAFT_IDENTITY,
        EXAMPLE_TARGET_IDENTITY,
    )
    largest = max(reply_payload_bytes(unsized, 0), reply_payload_bytes(unsized, max_support))
    config = replace(unsized, max_reply_bytes=largest)
    check_config(config)
    return config
