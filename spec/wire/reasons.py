"""Stable reason codes of wire v2 rejections (R12-R20, R24, R25, R27, R28).

Every rejected frame or event is refused with one :class:`WireReject` whose
``code`` is a key of :data:`REASONS`. Codes are stable strings: vectors and
counters cite them; a code is never renamed or reused, only appended. Each
class of the design's rejection list (R19) has its own code, so an
implementation can be told apart by *why* it refused, not only *that* it did.
"""

from __future__ import annotations

from dataclasses import dataclass

#: code -> (rule id, one-line meaning), grouped by the stage that detects it.
REASONS: dict[str, tuple[str, str]] = {
    # framing (header.py, codec.py)
    "TRUNCATED": ("R18", "fewer bytes than the header, or than the header and payload lengths declare"),
    "LENGTH_MISMATCH": (
        "R18",
        "a header length other than 20, bytes beyond the declared frame, or a payload length other than its own counts imply",
    ),
    "BAD_MAGIC": ("R12", "the magic is neither the v2 nor the v1 magic"),
    "UNKNOWN_VERSION": ("R12", "a known magic with an unknown version, or a HELLO wire version other than 2"),
    "UNKNOWN_MESSAGE_TYPE": ("R12", "a message type code that the version does not define"),
    "CHECKSUM_MISMATCH": ("R21", "the frame's CRC-32C does not match its bytes"),
    "UNEXPECTED_SIZE": ("R18", "a length or size that the negotiated HELLO does not admit"),
    "V2_BEFORE_HELLO": ("R12", "a v2 message other than HELLO before HELLO negotiated v2"),
    # negotiation (negotiation.py)
    "SEMANTIC_ID_MISMATCH": ("R13", "the q semantic ID is not the receiver's (dyadic24-standard-v1)"),
    "VERIFIER_MISMATCH": ("R13", "the standard-verifier ID is not the receiver's"),
    "RNG_ABI_MISMATCH": ("R13", "the RNG ABI ID is not the receiver's"),
    "VOCAB_MISMATCH": ("R13", "the vocabulary size is not the receiver's"),
    "ID_MAP_MISMATCH": ("R13", "the global ID map hash is not the receiver's"),
    "IDENTITY_MISMATCH": (
        "R13",
        "the draft checkpoint, native-or-adapted flag or target identity is not the receiver's",
    ),
    "PRECISION_MISMATCH": ("R13", "the q precision code is not the receiver's (FP32)"),
    "DEPTH_MISMATCH": ("R27", "a depth or row count other than the negotiated fixed depth"),
    "SUPPORT_ABOVE_MAX": ("R27", "a support size k above the negotiated maximum (or zero)"),
    "TOO_MANY_SLOTS": ("R27", "a slot index or slot count beyond the negotiated maximum"),
    "TOO_MANY_REQUESTS": ("R27", "more requests in flight, or a request maximum, above the negotiated bound"),
    # message content (validation.py)
    "SESSION_MISMATCH": (
        "R19",
        "the session ID is not the negotiated session (a wrong identity, or a key from before a reconnection)",
    ),
    "MISSING_Q": (
        "R25",
        "a reply without q (representation none or zero entries), or a completion before every row arrived",
    ),
    "UNKNOWN_REPRESENTATION": ("R15", "a representation code other than dense or sparse"),
    "REPRESENTATION_MISMATCH": ("R15", "a reply representation other than the one its STEP's support policy asks for"),
    "TOKEN_OUT_OF_RANGE": ("R19", "a sampled, correction or bonus token ID outside the vocabulary"),
    "SPARSE_ID_OUT_OF_RANGE": (
        "R19",
        "a sparse ID outside [0, vocab): negative (a padding sentinel) or padded/beyond the vocabulary",
    ),
    "DUPLICATE_SPARSE_ID": ("R19", "a sparse ID listed twice (even when both q values are zero)"),
    "UNSORTED_SUPPORT": ("R19", "sparse IDs not strictly ascending"),
    "NONCANONICAL_SUPPORT": ("R07", "a sparse entry with zero q (the canonical support drops zero counts)"),
    "NONZERO_DENSE_PADDING": ("R20", "a dense entry beyond the vocabulary is not all-zero bytes"),
    "NON_FINITE_VALUE": ("R19", "a q value (or the temperature) is NaN or infinite"),
    "NEGATIVE_VALUE": ("R19", "a q value has its sign bit set (negative, or -0.0), or the temperature is not positive"),
    "NON_DYADIC_VALUE": ("R03", "q * 2^24 is not an integer"),
    "WRONG_TOTAL_MASS": ("R03", "the recovered counts do not sum to exactly M = 2^24"),
    "ZERO_Q_AT_TOKEN": ("R19", "the sampled token has zero q"),
    "Q_CHECKSUM_MISMATCH": ("R15", "the reply's probability checksum is not the CRC-32C of its entries"),
    "UNKNOWN_STATUS": ("R16", "a completion status other than OK or FAILED"),
    # session state (receiver.py)
    "UNEXPECTED_MESSAGE": (
        "R16",
        "a message that the session state does not admit (a second HELLO, a round that is not open, a STEP on a busy slot)",
    ),
    "STALE_GENERATION": ("R19", "a generation that is not the slot's live generation"),
    "DUPLICATE_GENERATION": ("R19", "a RESET to the slot's current generation"),
    "STALE_ROUND": ("R19", "a round older than the slot's open round, or already committed"),
    "DUPLICATE_ROUND": ("R19", "a STEP reusing the slot's latest round ID"),
    "LATE_REPLY": (
        "R28",
        "a reply or completion for a generation ended by RESET, CANCEL, a timeout, a discard or a disconnect",
    ),
    "RETRY_MISMATCH": ("R24", "a retried reply or completion whose bytes differ from the first"),
    "CONSUMED_BEFORE_COMPLETION": ("R16", "a COMMIT consumes a round whose COMPLETION has not validated"),
    "POSITION_MISMATCH": (
        "R16",
        "a position, anchor, accepted count or committed position inconsistent with the round",
    ),
    "CONTEXT_MISMATCH": ("R16", "a completion's prefix digest or context version differs from its STEP"),
    "REPLY_SIZE_MISMATCH": ("R16", "a completion's reply byte count differs from the replies received"),
    "COMPLETION_CHECKSUM_MISMATCH": (
        "R16",
        "a completion's byte checksum differs from the CRC-32C of the replies received",
    ),
    "SLOT_EXHAUSTED": (
        "R24",
        "a RESET of a slot whose generation reached 2^32 - 1: no higher generation exists, the slot is retired",
    ),
    # worker state (worker.py)
    "SLOT_HELD": (
        "R28",
        "a RESET of a slot whose generation is live on another connection: the slot is released only when that link ends or CANCELs it",
    ),
}


@dataclass(frozen=True)
class Route:
    """Which round a message addresses: known once its fixed fields have been read."""

    message_type: int
    session_id: int
    slot: int
    generation: int
    round: int | None


class WireReject(ValueError):
    """A refused frame or event: ``code`` is a key of :data:`REASONS`.

    ``route`` is the round the frame addressed when its fixed fields had already
    passed the frame checksum (so they are what the sender wrote); ``None`` when
    the frame could not be trusted that far. ``v1`` marks the refusal of a frame
    with the v1 magic: v1 traffic, which never touches v2 state (R12).
    """

    def __init__(self, code: str, detail: str = "", route: Route | None = None, v1: bool = False) -> None:
        if code not in REASONS:
            raise KeyError(f"unregistered wire reason code {code!r}")
        self.code = code
        self.rule = REASONS[code][0]
        self.detail = detail
        self.route = route
        self.v1 = v1
        meaning = REASONS[code][1]
        super().__init__(f"{code} ({self.rule}): {meaning}" + (f": {detail}" if detail else ""))


def reject(code: str, detail: str = "", route: Route | None = None, v1: bool = False) -> WireReject:
    """Build the :class:`WireReject` for ``code`` (use as ``raise reject(...)``)."""
    return WireReject(code, detail, route, v1)
