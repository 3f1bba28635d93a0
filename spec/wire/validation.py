"""Stateless validation against the negotiated HELLO (R03, R15, R18-R20, R27).

Two stages. :func:`check_payload_length` runs on the header alone, before any
payload byte is read or copied (R18): the declared length must be one that the
message type admits under the negotiated bounds. :func:`validate_message` runs
on a decoded message the CONTENT rows of its table in ``checks`` (session,
slot, then the message's own rules; for a REPLY every R19/R20 rejection class
of its q row) and refuses with the first that fails, as docs/wire-v2.md
("Check order") prints them. The counts are recovered exactly (``q * 2^24`` of
each FP32 bit pattern); there is no renormalization (R03).
"""

from __future__ import annotations

from qconform.spec.qrow import QRow
from qconform.spec.rules import defines
from qconform.spec.wire import layout
from qconform.spec.wire.checks import (
    COMMIT_CHECKS,
    COMPLETION_CHECKS,
    CONTENT,
    DENSE_ENTRY_BYTES,
    FIXED,
    MESSAGE_CHECKS,
    REPLY_CHECKS,
    SPARSE_ENTRY_BYTES,
    STEP_CHECKS,
    Check,
    Subject,
    first_failure,
    reply_entry_bytes,
)
from qconform.spec.wire.layout import MessageLayout
from qconform.spec.wire.messages import Commit, Completion, Hello, HelloAnswer, Message, Reply, Step
from qconform.spec.wire.reasons import Route, reject


@defines("R18", "R27")
def reply_payload_bytes(params: Hello, support_policy: int) -> int:
    """Payload bytes of a REPLY under a STEP's support policy: dense (0) or sparse top-k (k)."""
    if support_policy == 0:
        return layout.REPLY.size + DENSE_ENTRY_BYTES * params.dense_stride
    return layout.REPLY.size + SPARSE_ENTRY_BYTES * support_policy


@defines("R18")
def payload_bounds(message: MessageLayout, params: Hello | None) -> tuple[int, int]:
    """The (least, greatest) payload length a message type admits under the negotiated HELLO.

    Every type but REPLY has a fixed size. A REPLY holds at least its fixed
    fields and at most the larger of a dense row and a full sparse support,
    never above the negotiated ``max_reply_bytes``.
    """
    if message is not layout.REPLY or params is None:
        return message.size, message.size
    largest = max(reply_payload_bytes(params, 0), reply_payload_bytes(params, params.max_support))
    return message.size, min(largest, params.max_reply_bytes)


@defines("R18")
def check_payload_length(message: MessageLayout, payload_length: int, params: Hello | None) -> None:
    """Refuse (UNEXPECTED_SIZE) a declared payload length outside :func:`payload_bounds`."""
    least, greatest = payload_bounds(message, params)
    if not least <= payload_length <= greatest:
        raise reject(
            "UNEXPECTED_SIZE", f"{message.name} payload of {payload_length} bytes, admitted {least}..{greatest}"
        )


@defines("R18", "R19", "R27")
def route_of(message: Message) -> Route | None:
    """The round a message addresses; None for HELLO and HELLO_ANSWER, which address none."""
    if isinstance(message, (Hello, HelloAnswer)):
        return None
    return Route(
        type(message).LAYOUT.code, message.session_id, message.slot, message.generation, getattr(message, "round", None)
    )


@defines("R18", "R19")
def enforce(checks: tuple[Check[Subject], ...], subject: Subject, stage: str) -> None:
    """Refuse with the first failing row of ``checks`` of ``stage`` (docs/wire-v2.md, "Check order")."""
    failed = first_failure(checks, subject, stage)
    if failed is not None:
        raise reject(failed.code, failed.when, route_of(subject.message))


@defines("R15", "R18", "R27")
def check_reply_fixed(reply: Reply, params: Hello, payload_length: int) -> None:
    """A REPLY's representation and entry count against the negotiated bounds, before its tail is read (step 7)."""
    enforce(REPLY_CHECKS, Subject(reply, params, payload_length), FIXED)


@defines("R14", "R18", "R27", "R35")
def validate_step(step: Step, params: Hello) -> None:
    """A STEP asks for the negotiated fixed depth, a support within bounds whose reply fits, a positive temperature."""
    enforce(STEP_CHECKS, Subject(step, params, layout.STEP.size), CONTENT)


@defines("R16", "R27")
def validate_completion(completion: Completion, params: Hello) -> None:
    """A COMPLETION names the fixed depth's row count and an explicit status (OK or FAILED)."""
    enforce(COMPLETION_CHECKS, Subject(completion, params, layout.COMPLETION.size), CONTENT)


@defines("R17")
def validate_commit(commit: Commit, params: Hello) -> None:
    """A COMMIT accepts at most the depth and names an in-vocabulary correction or bonus token."""
    enforce(COMMIT_CHECKS, Subject(commit, params, layout.COMMIT.size), CONTENT)


@defines("R03", "R07", "R15", "R19", "R20")
def validate_reply(reply: Reply, params: Hello) -> QRow:
    """Validate a REPLY's q row (the CONTENT rows of ``checks.REPLY_CHECKS``) and return it."""
    subject = Subject(reply, params, layout.REPLY.size + reply_entry_bytes(reply.representation) * reply.entry_count)
    enforce(REPLY_CHECKS, subject, CONTENT)
    if subject.sparse:
        return QRow.sparse(params.vocab, reply.ids, list(subject.counts))
    return QRow.dense(list(subject.counts))


@defines("R15", "R16", "R17", "R19", "R27")
def validate_message(message: Message, params: Hello) -> QRow | None:
    """Every stateless check of a decoded non-HELLO message; a REPLY's validated q row is returned."""
    if isinstance(message, Reply):
        return validate_reply(message, params)
    checks = MESSAGE_CHECKS.get(type(message).LAYOUT.code) if not isinstance(message, Hello) else None
    if checks is None:
        raise TypeError(f"not a v2 session message: {type(message).__name__}")
    enforce(checks, Subject(message, params, type(message).LAYOUT.size), CONTENT)
    return None
