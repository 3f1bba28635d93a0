"""Suite-wide rules: nothing a test runs writes into the user's own cache, and ``slow`` tests run
only when asked for (``-m slow``)."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_qconform_cache(tmp_path_factory):
    """The kit's cache (``$QCONFORM_CACHE``: ``--lf``'s record, the validated vector files; generators/cache.py),
    one per test session, never the user's."""
    previous = os.environ.get("QCONFORM_CACHE")
    os.environ["QCONFORM_CACHE"] = str(tmp_path_factory.mktemp("qconform-cache"))
    yield
    if previous is None:
        os.environ.pop("QCONFORM_CACHE", None)
    else:
        os.environ["QCONFORM_CACHE"] = previous


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A ``slow`` test (a long run: the real corpus, every mutant, a stress) is skipped, before its
    fixtures are set up, unless the run selected slow tests (``-m slow``)."""
    if item.get_closest_marker("slow") is not None and "slow" not in (item.config.getoption("markexpr") or ""):
        pytest.skip("a long run; opt in with -m slow")
