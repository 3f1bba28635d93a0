"""Refusals of the torch candidate.

The candidate is an independent implementation: it does not import the spec, so
it carries its own exception. Its ``code`` strings are chosen to be the stable
codes the vectors name (``NAN_WEIGHT``, ``ZERO_MASS``, ...), so a harness adapter
can compare them directly. ``ZERO_RESIDUAL_MASS`` is the candidate's own: its
FP64 residual came out empty where the exact residual cannot be (a numerical
refusal, never a silent fallback).
"""

from __future__ import annotations

import torch

#: every code the candidate raises
CANDIDATE_CODES: frozenset[str] = frozenset(
    {
        "NAN_WEIGHT",
        "POS_INF_WEIGHT",
        "NEGATIVE_WEIGHT",
        "NAN_LOGIT",
        "POS_INF_LOGIT",
        "ALL_MASKED",
        "ZERO_MASS",
        "BAD_TEMPERATURE",
        "EMPTY_ROW",
        "BAD_SUPPORT_SIZE",
        "NOT_DYADIC24",
        "WRONG_TOTAL_MASS",
        "INCONSISTENT_ALLOCATION",
        "ZERO_Q_AT_TOKEN",
        "TOKEN_OUT_OF_RANGE",
        "BAD_SPARSE_SUPPORT",
        "BAD_SHAPE",
        "BAD_TARGET_ROW",
        "BAD_RNG_FIELD",
        "BAD_REQUEST_ID",
        "ZERO_RESIDUAL_MASS",
    }
)


class CandidateError(ValueError):
    """A refusal by the torch candidate, with a stable ``code`` string."""

    def __init__(self, code: str, detail: str = "") -> None:
        if code not in CANDIDATE_CODES:
            raise KeyError(f"unregistered candidate error code {code!r}")
        self.code = code
        self.detail = detail
        super().__init__(f"{code}: {detail}" if detail else code)


def refuse_where(bad: torch.Tensor, code: str, what: str) -> None:
    """Raise ``CandidateError(code)`` if any entry of the boolean tensor ``bad`` is set.

    The detail names the first offending index in row-major order, so a batched
    call reports the same row a one-request call would.
    """
    if bool(bad.any()):
        first = [int(i) for i in bad.nonzero()[0]]
        raise CandidateError(code, f"{what} at index {first}")
