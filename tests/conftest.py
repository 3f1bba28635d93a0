"""Suite-wide isolation: nothing a test runs writes into the user's own cache."""

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
