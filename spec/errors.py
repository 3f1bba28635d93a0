"""Typed refusals of the spec. Each carries a stable code and the rule it enforces.

A spec function refuses invalid input by raising :class:`SpecError`; vectors of
``result: "invalid"`` name the expected ``code``.
"""

from __future__ import annotations

#: code -> (rule id, one-line meaning). Codes are stable: vectors cite them.
ERROR_CODES: dict[str, tuple[str, str]] = {
    "NAN_WEIGHT": ("R05", "a weight is NaN"),
    "POS_INF_WEIGHT": ("R05", "a weight is +inf"),
    "NEGATIVE_WEIGHT": ("R05", "a weight is negative (or -inf)"),
    "NAN_LOGIT": ("R05", "a logit is NaN"),
    "POS_INF_LOGIT": ("R05", "a logit is +inf"),
    "ALL_MASKED": ("R05", "every scaled logit is -inf (masked, or overflowed to -inf in the stated FP32 order)"),
    "ZERO_MASS": ("R05", "the weights have zero effective mass"),
    "BAD_TEMPERATURE": ("R05", "the draft temperature is not a finite positive number"),
    "EMPTY_ROW": ("R05", "the row has no entries"),
    "BAD_SUPPORT_SIZE": ("R07", "top-k support size k is not in 1..V"),
    "NOT_DYADIC24": ("R03", "a q value times M is not a nonnegative integer"),
    "WRONG_TOTAL_MASS": ("R03", "the counts do not sum to M"),
    "INCONSISTENT_ALLOCATION": ("R06", "FP64 allocation is numerically inconsistent and is refused"),
    "ZERO_Q_AT_TOKEN": ("R19", "the proposed token has zero q"),
    "TOKEN_OUT_OF_RANGE": ("R19", "a token ID is outside the vocabulary"),
    "BAD_SPARSE_SUPPORT": ("R19", "sparse IDs are not strictly ascending, in range and positive"),
    "BAD_SHAPE": ("R27", "rows, depth or batch do not have the required shape"),
    "BAD_TARGET_ROW": ("R10", "a target row is not a probability distribution"),
    "BAD_RNG_FIELD": ("R22", "an RNG key or counter field is out of range"),
    "BAD_REQUEST_ID": (
        "R24",
        "a request carries both or neither of a seed and a request ID, or its ID is not a UTF-8 string",
    ),
    "BAD_POLICY": ("R36", "an admission policy is malformed or answered other than admit/stop"),
    "BAD_SHARD_RANGES": ("R31", "global shard ranges are not nonempty contiguous ranges covering the vocabulary"),
}


class SpecError(ValueError):
    """A refusal by the spec: ``code`` is stable, ``rule`` is the rule it enforces."""

    def __init__(self, code: str, detail: str = "") -> None:
        if code not in ERROR_CODES:
            raise KeyError(f"unregistered spec error code {code!r}")
        self.code = code
        self.rule = ERROR_CODES[code][0]
        self.detail = detail
        meaning = ERROR_CODES[code][1]
        super().__init__(f"{code} ({self.rule}): {meaning}" + (f": {detail}" if detail else ""))


def refuse(code: str, detail: str = "") -> SpecError:
    """Build the :class:`SpecError` for ``code`` (use as ``raise refuse(...)``)."""
    return SpecError(code, detail)
