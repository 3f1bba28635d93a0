"""Refusals of the Triton candidate, and the flag words its kernels write.

A kernel never raises: it ORs flag bits into an int32 word per row, and the host
turns the words into one :class:`TritonCandidateError`. Within a row the code is
chosen by class, in the order of :data:`FLAG_CODES` (a NaN before a +inf before a
negative weight before zero mass, as docs/formats/allocation_invalid.md says a
parallel implementation does); across rows the first flagged row wins.

The codes are the stable strings the vectors name. ``ZERO_RESIDUAL_MASS`` is the
candidate's own: its FP64 residual came out empty where the exact one cannot be
(a numerical refusal, never a silent fallback).
"""

from __future__ import annotations

import torch
import triton.language as tl

#: the codes a kernel flags, in priority order within a row; flag bit i is code i
FLAG_ORDER: tuple[str, ...] = (
    "NAN_WEIGHT",
    "POS_INF_WEIGHT",
    "NEGATIVE_WEIGHT",
    "ZERO_MASS",
    "NAN_LOGIT",
    "POS_INF_LOGIT",
    "ALL_MASKED",
    "INCONSISTENT_ALLOCATION",
    "TOKEN_OUT_OF_RANGE",
    "BAD_SPARSE_SUPPORT",
    "WRONG_TOTAL_MASS",
    "BAD_TARGET_ROW",
    "ZERO_RESIDUAL_MASS",
)
#: flag bit -> refusal code, in priority order
FLAG_CODES: tuple[tuple[int, str], ...] = tuple((1 << i, code) for i, code in enumerate(FLAG_ORDER))

# The flag bits as constants the kernels read, in the order of FLAG_ORDER.
(
    NAN_WEIGHT,
    POS_INF_WEIGHT,
    NEGATIVE_WEIGHT,
    ZERO_MASS,
    NAN_LOGIT,
    POS_INF_LOGIT,
    ALL_MASKED,
    INCONSISTENT_ALLOCATION,
    TOKEN_OUT_OF_RANGE,
    BAD_SPARSE_SUPPORT,
    WRONG_TOTAL_MASS,
    BAD_TARGET_ROW,
    ZERO_RESIDUAL_MASS,
) = (tl.constexpr(bit) for bit, _ in FLAG_CODES)

#: every code the candidate raises
CODES: frozenset[str] = frozenset(
    {code for _, code in FLAG_CODES}
    | {
        "EMPTY_ROW",
        "BAD_TEMPERATURE",
        "BAD_SUPPORT_SIZE",
        "BAD_SHAPE",
        "BAD_RNG_FIELD",
        "ZERO_Q_AT_TOKEN",
        "BAD_REQUEST_ID",
    }
)


class TritonCandidateError(ValueError):
    """A refusal by the Triton candidate, with a stable ``code`` string."""

    def __init__(self, code: str, detail: str = "") -> None:
        if code not in CODES:
            raise KeyError(f"unregistered candidate error code {code!r}")
        self.code = code
        self.detail = detail
        super().__init__(f"{code}: {detail}" if detail else code)


def first_flag(words: list[int]) -> tuple[int, str] | None:
    """(row, code) of the first flagged row and its highest-priority code, or None."""
    for row, word in enumerate(words):
        for bit, code in FLAG_CODES:
            if word & bit:
                return row, code
    return None


def raise_flags(flags: torch.Tensor | list[int], what: str) -> None:
    """Raise the refusal that the flag words ``flags`` (a tensor of any shape, row-major, or
    a list) hold, if any."""
    found = first_flag(flags.reshape(-1).tolist() if isinstance(flags, torch.Tensor) else list(flags))
    if found is not None:
        row, code = found
        raise TritonCandidateError(code, f"{what}, row {row}")
