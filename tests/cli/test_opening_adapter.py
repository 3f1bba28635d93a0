"""``OpeningAdapter`` (qconform.cli.arguments): the adapter starts on a thread while the command
prepares; closed before it has started, it is closed as soon as it does, so nothing is left running."""

from __future__ import annotations

import time

import pytest
from robustness.processes import recorded, survivors, tree_shim

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
