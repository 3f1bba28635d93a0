"""Tests of the bundled candidates (``adapters/``): the suite's shared helpers (``tests/*.py``) are importable here."""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = str(Path(__file__).resolve().parents[1])
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
