"""The adapter's child spawned before the cases are collected (docs/shim-protocol.md, "Starting
early"): ``qconform run`` spawns it as its session starts, so that it loads its engine while the
corpus is collected; the first start asks that child for ``get_config``, handing it the arena that
was built, after the collection, in the file it was given at its spawn."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest
from robustness.processes import qconform, recorded, recording_shim, survivors

from qconform.generators.validation import iter_cases
from qconform.harness.transport.arena import BlobArena
from qconform.harness.transport.client import open_adapter, spawn_early

REPO = Path(__file__).resolve().parents[2]


def dense_cases(count: int = 8) -> list[dict]:
    """Cases whose inputs hold blobs (an arena has something to hold)."""
    cases = itertools.islice(iter_cases(REPO / "vectors", ["allocation_dense"]), count)
    return [{"input": case.input, "expected": case.expected} for case in cases]


def test_the_first_start_is_the_early_child_with_the_arena_built_in_the_file_it_was_given(tmp_path):
    pids = tmp_path / "pids"
    early = spawn_early(recording_shim(pids))
    assert early is not None and early.child is not None
    spawned = early.child.pid
    cases = dense_cases()
    arena = BlobArena.of_cases(cases, early.arena_file())
    assert arena is not None and arena.fd == early.arena_fd
    client = open_adapter(recording_shim(pids), arena=arena, raw_blobs=True, early=early)
    try:
        assert client._child is not None and client._child.pid == spawned  # noqa: SLF001 - the early child
        assert client.arena_attached and client.window_attached
        assert early.child is None  # taken: closing the early start leaves the client's child alone
        early.close()
        answer = client.run_batch("allocation_dense", [cases[0]["input"]])[0]
        assert isinstance(answer, dict) and "counts" in answer
    finally:
        client.close()
        arena.close()
    assert len(recorded(pids)) == 1  # one child was ever spawned
    assert survivors(pids) == []


def test_an_arena_built_in_another_file_is_not_offered_to_the_early_child(tmp_path):
    """The early child holds only the file it was given: an arena elsewhere travels inline."""
    pids = tmp_path / "pids"
    early = spawn_early(recording_shim(pids))
    assert early is not None
    cases = dense_cases()
    arena = BlobArena.of_cases(cases)  # a file of its own
    assert arena is not None and arena.fd != early.arena_fd
    client = open_adapter(recording_shim(pids), arena=arena, raw_blobs=True, early=early)
    try:
        assert not client.arena_attached
        answer = client.run_batch("allocation_dense", [cases[0]["input"]])[0]
        assert isinstance(answer, dict) and "counts" in answer
    finally:
        client.close()
        early.close()
        arena.close()
    assert survivors(pids) == []


def test_an_early_start_no_client_takes_is_ended_by_its_close_with_its_files(tmp_path):
    pids = tmp_path / "pids"
    early = spawn_early(recording_shim(pids))
    assert early is not None and early.child is not None
    child, reserved = early.child, early.arena_fd
    early.close()
    with pytest.raises(OSError):  # the reserved file is closed: no arena took it
        os.fstat(reserved)
    assert child.proc.wait(timeout=10) is not None
    assert survivors(pids) == []
    early.close()  # idempotent


def test_a_spec_that_names_no_adapter_spawns_nothing_early():
    assert spawn_early("no-such-adapter") is None
    assert spawn_early("shim:") is None
    assert spawn_early("shim:/nonexistent/program") is None  # the start after the collection says why


def test_qconform_run_spawns_its_one_child_before_collecting_and_no_child_for_a_list(tmp_path):
    """``qconform run`` starts one adapter child, the early one (a start after the collection would
    record a second pid), and ``--list`` starts none. A run that selects no case never starts an
    adapter after its collection, so the one child it recorded is the early one, which it ends
    (status 5, nothing left running)."""
    pids = tmp_path / "pids"
    done = qconform("run", "--adapter", recording_shim(pids), "--family", "allocation_dense", cwd=tmp_path)
    out, err = done.communicate(timeout=300)
    assert done.returncode == 0, out[-2000:] + err[-2000:]
    assert len(recorded(pids)) == 1
    assert survivors(pids) == []
    listed = tmp_path / "listed"
    done = qconform("run", "--adapter", recording_shim(listed), "--list", cwd=tmp_path)
    done.communicate(timeout=300)
    assert done.returncode == 0 and recorded(listed) == []
    none = tmp_path / "none"
    done = qconform("run", "--adapter", recording_shim(none), "-k", "no_case_is_named_so", cwd=tmp_path)
    done.communicate(timeout=300)
    assert done.returncode == 5
    assert len(recorded(none)) == 1
    assert survivors(none) == []
