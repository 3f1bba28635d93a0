"""One q row as it arrives on the wire (R03, R07, R19): dense counts ``[V]``, or a
sparse row of IDs and counts, checked before anything is sampled or verified
against it.

A legal row has exact total mass M (R03). A sparse row lists only its support:
IDs inside the vocabulary, strictly ascending, each with a positive count (R07,
R19). The check is the candidate's, so every consumer of the kernels refuses the
same rows with the same codes.
"""

from __future__ import annotations

import torch

from .allocation import M
from .errors import CandidateError


def legal_q_row(counts: torch.Tensor, ids: torch.Tensor | None, vocab: int) -> torch.Tensor:
    """int64 dense counts ``[V]`` of a dense row (``ids`` None) or a sparse row, refused
    unless legal: BAD_SHAPE (a dense row not of V counts, or unequal IDs and counts),
    TOKEN_OUT_OF_RANGE (a sparse ID outside ``[0, V)``), BAD_SPARSE_SUPPORT (IDs not
    strictly ascending, or a count not positive), WRONG_TOTAL_MASS (sum not M)."""
    counts = counts.to(torch.int64).reshape(-1)
    if ids is None:
        if counts.numel() != vocab:
            raise CandidateError("BAD_SHAPE", f"dense q row has {counts.numel()} counts for vocabulary {vocab}")
        dense = counts
    else:
        ids = ids.to(device=counts.device, dtype=torch.int64).reshape(-1)
        if ids.numel() != counts.numel():
            raise CandidateError("BAD_SHAPE", "sparse q row has unequal ids and counts")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
            raise CandidateError("TOKEN_OUT_OF_RANGE", "sparse id outside the vocabulary")
        if bool((ids[1:] <= ids[:-1]).any()) or bool((counts <= 0).any()):
            raise CandidateError("BAD_SPARSE_SUPPORT", "sparse ids must ascend strictly with positive counts")
        dense = torch.zeros(vocab, dtype=torch.int64, device=counts.device)
        dense[ids] = counts
    if int(dense.sum()) != M:
        raise CandidateError("WRONG_TOTAL_MASS", f"q counts sum to {int(dense.sum())}, not M")
    return dense
