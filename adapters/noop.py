"""The ``noop`` adapter: does no work, so a run against it measures the harness alone.

Every case is answered ``{"error": "NOOP"}``: a well-formed refusal (docs/shim-protocol.md),
so each case goes through the whole path (protocol, output checks, comparison) and is
judged like any refusal: a ``fail`` for a valid case or an invalid one (wrong code),
whatever the runner's policy says for an ``acceptable`` case; never ``error``. A run
against ``noop`` with an ``error`` verdict is a harness bug.
"""

from __future__ import annotations

from typing import Any, Sequence

from qconform.generators.registry import family_names
from qconform.harness.adapter import Adapter, Capabilities, Outcome, PrecisionProfile

NOOP_CODE = "NOOP"


class NoopAdapter(Adapter):
    name = "noop"
    #: it reads no input: the host hands it the sections as they are (no base64 for nothing)
    raw_blobs = True

    def capabilities(self) -> Capabilities:
        return Capabilities(families=family_names(), injected_draws=True, devices=("cpu", "cuda"))

    def precision(self) -> PrecisionProfile:
        return PrecisionProfile(notes="answers nothing: every case is refused with error code NOOP")

    def run_batch(self, family: str, inputs: Sequence[dict]) -> list[Outcome]:
        return [{"error": NOOP_CODE} for _ in inputs]

    def run_block(self, family: str, block: dict[str, Any]) -> Any:
        """Every case of a block refused (docs/accumulated.md, "Blocks"): records all padding,
        made at once, so a run measures the harness's block path."""
        import numpy as np

        from qconform.generators.accumulated import FAMILIES, PAD

        cases = len(next(iter(block.values())))
        return np.full((cases, FAMILIES[family].record_words), PAD, dtype="<u4")
