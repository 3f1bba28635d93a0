"""The vocabulary-sharded (TP) emulator: S ranks on one machine, real ``torch.distributed`` collectives.

Each rank is a process of one ``torch.distributed`` process group (gloo on CPU,
NCCL on CUDA) and owns one contiguous vocabulary shard. It computes everything
for the tokens it owns and learns what it needs of the others only through
collectives: ``all_reduce`` (max, sum, min), ``all_gather`` and ``broadcast``. It
is a candidate, so it never imports the spec package; it reuses the torch
candidate's kernels (:mod:`qconform.adapters.torch_candidate`) for local work.

Modules: ``mutants`` (the seeded emulator bugs, torch-free), ``rank`` (one rank:
its collectives, exact partial sums and agreed refusals), ``kernels`` (the sharded
normalization, top-k merge, global tickets and samplers), ``families`` (one case
of each family, run by every rank), ``group`` (the leader side: starting the
ranks, sending them batches, surviving a crash) and ``worker`` (a non-leader
rank's process). docs/sharding.md explains the design.
"""
