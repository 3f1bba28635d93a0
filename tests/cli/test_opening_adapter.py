"""``OpeningAdapter`` (qconform.cli.arguments): the adapter starts on a thread while the command
prepares; closed before it has started, it is closed as soon as it does, so nothing is left running."""

from __future__ import annotations

import time

import pytest
from robustness.processes import recorded, sent_to_self, survivors, tree_shim, wait_until

from qconform.cli.arguments import OpeningAdapter
from qconform.cli.errors import StartLineError, UsageLineError


def test_an_adapter_closed_while_it_starts_is_ended_at_once(tmp_path):
    """The child never answers ``get_config`` (a start of 60 s allowed): closed while it starts, it is
    killed at once, with its helpers, not left to wait out its start timeout; the start fails."""
    pids = tmp_path / "pids"
    opening = OpeningAdapter(tree_shim(pids, "mute"), "cpu", 60.0, start_timeout=60.0)
    assert wait_until(lambda: len(recorded(pids)) == 2, 60.0)
    began = time.monotonic()
    opening.close()
    with pytest.raises(StartLineError, match="did not start"):
        opening.client()
    assert survivors(pids) == []
    assert time.monotonic() - began < 10.0


def test_an_adapter_closed_before_its_child_is_spawned_is_killed_as_it_spawns(tmp_path):
    pids = tmp_path / "pids"
    opening = OpeningAdapter(tree_shim(pids), "cpu", 60.0)
    opening.close()  # at once: the child is not spawned yet, or its start is under way
    with pytest.raises(StartLineError, match="did not start"):
        opening.client()
    assert survivors(pids) == []


def test_the_started_client_and_its_errors_reach_the_caller(tmp_path):
    with OpeningAdapter(tree_shim(tmp_path / "pids"), "cpu", 60.0) as opening:
        assert opening.client().config.capabilities.families
    assert survivors(tmp_path / "pids") == []
    with OpeningAdapter(tree_shim(tmp_path / "crash-pids", "crash"), "cpu", 60.0) as opening:
        with pytest.raises(StartLineError, match="crashing on purpose"):
            opening.client()
    with pytest.raises(UsageLineError, match="unknown adapter"):
        OpeningAdapter("no-such-adapter", "cpu", 60.0)


def test_a_wait_for_a_start_that_never_ends_stops_at_the_guards_next_checkpoint(tmp_path):
    """The adapter is up but never answers ``get_config``; a signal the guard remembered is raised by
    the wait within a checkpoint's interval, not after the start's timeout; the close that follows
    ends the child still starting."""
    from qconform.harness.run.signals import SignalGuard

    pids = tmp_path / "pids"
    guard = SignalGuard(at_checkpoints=True)
    guard.install()
    try:
        opening = OpeningAdapter(tree_shim(pids, "mute"), "cpu", 60.0, start_timeout=60.0)
        assert wait_until(lambda: len(recorded(pids)) == 2, 60.0)
        sent_to_self()  # remembered, not raised: the guard is at checkpoints
        began = time.monotonic()
        with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
            opening.client(guard)
        assert time.monotonic() - began < 5.0
    finally:
        guard.restore()
        opening.close()
    assert survivors(pids) == []  # ended by the close, not left to the start's timeout
