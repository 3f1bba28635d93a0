"""Sparse support sizes (R29): the candidate k, the development screens, and the bound on k.

R29 names the sizes: sparse ``k = 32`` is the initial candidate, ``k = 16`` and
``k = 64`` are development screens. What a k must satisfy, and how it is agreed:

* every sparse row's support size satisfies ``1 <= k <= V`` (R07, ``BAD_SUPPORT_SIZE``);
* HELLO negotiates ``max_support``: the worker's offer must lie in
  ``1..the receiver's max_support`` (``SUPPORT_ABOVE_MAX`` otherwise), and the
  offer becomes the session's bound (``qconform.spec.wire.negotiation``);
* each STEP names its support policy, ``0`` for dense or ``k > 0`` for top-k,
  with ``k <= max_support`` of the session (``SUPPORT_ABOVE_MAX`` otherwise), and
  each REPLY's sparse entry count lies in ``1..k`` (zero counts are dropped, R07).

The k of a STEP is therefore the worker's choice per request within the
negotiated bound, and a session can run any of the R29 sizes only if its
``max_support`` admits them. :func:`support_plan` states which sizes a
configuration admits and what the largest sparse reply costs beside the dense
one; docs/formats/allocation_sparse.md (*Support sizes*) explains the production
configuration's ``max_support = 256`` with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from qconform.spec.errors import refuse
from qconform.spec.rules import defines
from qconform.spec.sizes import TABLE_SPARSE_KS
from qconform.spec.wire.messages import Hello
from qconform.spec.wire.validation import reply_payload_bytes

#: The initial sparse candidate (R29).
CANDIDATE_K: int = 32
#: The development screens (R29).
SCREEN_KS: tuple[int, ...] = (16, 64)


@defines("R29")
def support_role(k: int) -> str:
    """``"candidate"`` for k = 32, ``"screen"`` for k = 16 or 64, else ``"other"`` (R29)."""
    if k == CANDIDATE_K:
        return "candidate"
    return "screen" if k in SCREEN_KS else "other"


@defines("R07", "R18", "R29")
def check_sparse_k(k: int, max_support: int, vocab: int) -> None:
    """Refuse a sparse support size outside ``1..min(max_support, vocab)``.

    ``max_support`` is the session's negotiated bound (at most ``vocab``). k above
    it is refused (``BAD_SUPPORT_SIZE``; on the wire the same condition is
    ``SUPPORT_ABOVE_MAX``), as is k outside ``1..V`` (R07).
    """
    for name, value in (("k", k), ("max_support", max_support), ("vocab", vocab)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise refuse("BAD_SUPPORT_SIZE", f"{name} = {value!r} is not a positive integer")
    if max_support > vocab:
        raise refuse("BAD_SUPPORT_SIZE", f"max_support = {max_support} exceeds the vocabulary {vocab}")
    if k > max_support:
        raise refuse("BAD_SUPPORT_SIZE", f"k = {k} exceeds the negotiated max_support = {max_support}")


@dataclass(frozen=True)
class SupportPlan:
    """Which sparse sizes a HELLO admits, and what its largest sparse reply costs.

    ``admitted`` maps every size of interest (R29's candidate and screens and the
    design table's sizes) to whether ``k <= max_support``; the byte counts are
    REPLY payloads (fixed fields plus entries) for one position.
    """

    max_support: int
    admitted: dict[int, bool]
    candidate_admitted: bool
    screens_admitted: bool
    largest_sparse_reply: int
    dense_reply: int
    max_reply_bytes: int

    @property
    def sparse_fits_dense_buffer(self) -> bool:
        """Whether a reply at ``k = max_support`` is no larger than a dense one."""
        return self.largest_sparse_reply <= self.dense_reply


@defines("R13", "R29")
def support_plan(config: Hello) -> SupportPlan:
    """The R29 sizes a (negotiated or receiver) HELLO admits, and its reply sizes."""
    sizes = sorted({CANDIDATE_K, *SCREEN_KS, *TABLE_SPARSE_KS})
    admitted = {k: k <= config.max_support for k in sizes}
    return SupportPlan(
        max_support=config.max_support,
        admitted=admitted,
        candidate_admitted=admitted[CANDIDATE_K],
        screens_admitted=all(admitted[k] for k in SCREEN_KS),
        largest_sparse_reply=reply_payload_bytes(config, config.max_support),
        dense_reply=reply_payload_bytes(config, 0),
        max_reply_bytes=config.max_reply_bytes,
    )
