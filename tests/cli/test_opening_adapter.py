"""``OpeningAdapter`` (qconform.cli.arguments): the adapter starts on a thread while the command
prepares; closed before it has started, it is closed as soon as it does, so nothing is left running."""

from __future__ import annotations

import time

import pytest
from robustness.processes import recorded, sent_to_self, survivors, tree_shim, wait_until

from qconform.cli.arguments import OpeningAdapter
from qconform.cli.errors import StartLineError, UsageLineError


def test_an_adapter_closed_before_it_started_ends_once_it_starts(tmp_path):
    pids = tmp_path / "pids"
    opening = OpeningAdapter(tree_shim(pids), "cpu", 60.0)
    opening.close()  # at once: the child is still starting
    client = opening.client()  # the start completes, then the thread closes it
    assert client.config.capabilities.families
    deadline = time.monotonic() + 30
    while len(recorded(pids)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(recorded(pids)) == 2
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
    the wait within a checkpoint's interval, not after the start's timeout. (The child is left to
    the start's timeout here; a command that stops exits, and the child's keeper ends it.)"""
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
        survivors(pids, wait_s=0.0)  # ended here, not left to the start's timeout
