"""The ``torch-tp2`` / ``torch-tp4`` adapters: the torch candidate, vocabulary-sharded over S ranks.

This process is rank 0 of a ``torch.distributed`` group of S processes (gloo on
CPU, NCCL on CUDA) that lives as long as the adapter; every case runs on all S
ranks with real collectives (:mod:`qconform.adapters.tp_emulator`). It runs the
``sharding`` family (cases whose global shard ranges name S shards; others are
``unsupported``) and, sharded evenly over its ranks, ``allocation_dense``,
``allocation_sparse`` and ``verification_round``, whose answers must equal the
unsharded torch candidate's. ``torch-tp2-mutant:<name>`` runs it with one seeded
distributed-sampling bug (:data:`qconform.adapters.tp_emulator.mutants.TP_MUTANTS`).
"""

from __future__ import annotations

from typing import Sequence

from qconform.adapters.torch_adapter import TorchAdapter
from qconform.adapters.tp_emulator.group import shared_group
from qconform.adapters.tp_emulator.mutants import TP_MUTANTS
from qconform.harness.adapter import Capabilities, Outcome, owned_blobs

#: the families the emulator runs sharded
TP_FAMILIES = ("sharding", "allocation_dense", "allocation_sparse", "verification_round")


class TorchTPAdapter(TorchAdapter):
    """The torch candidate's arithmetic (and precision profile), sharded over ``shards`` ranks."""

    def __init__(self, device: str = "cpu", shards: int = 2, mutant: str | None = None) -> None:
        super().__init__(device)
        if mutant is not None and mutant not in TP_MUTANTS:
            raise ValueError(f"unknown TP emulator mutant {mutant!r}; known: {', '.join(TP_MUTANTS)}")
        self.shards = shards
        self.mutant = mutant
        self.name = f"torch-tp{shards}" + (f"-mutant:{mutant}" if mutant else "")

    def capabilities(self) -> Capabilities:
        return Capabilities(families=TP_FAMILIES, injected_draws=True, devices=("cpu", "cuda"))

    def run_batch(self, family: str, inputs: Sequence[dict]) -> list[Outcome]:
        # the ranks get the inputs pickled: the shared arena's views become bytes of their own
        return shared_group(self.shards, self.device).run(family, owned_blobs(list(inputs)), self.mutant)

    def close(self) -> None:
        """Stop the ranks now (they also stop when the process exits)."""
        shared_group(self.shards, self.device).close()
