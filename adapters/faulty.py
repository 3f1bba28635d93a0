"""Deliberately broken adapters, ``faulty:<mode>``, for the harness's robustness tests.

A faulty adapter answers like the reference, except on the *affected* cases
(:func:`affected`: a fixed hash of the case input, so about half of them). Modes
(``FAULTY_MODES`` in qconform.adapters.catalog):

* per case: ``raise`` (run_batch raises), ``wrong_shape`` (a blob whose shape does
  not match its bytes), ``wrong_dtype`` (a blob of unknown dtype ``f16``), ``nan``
  (a NaN where a number belongs). Only the affected cases must become errors.
* per batch, when the batch holds an affected case: ``hang`` (sleeps), ``exit``
  (``os._exit(3)``), ``kill`` (SIGKILL to itself), ``garbage`` (a non-JSON line on
  the protocol stream), ``wrong_length`` (one output fewer than inputs). Every
  case of that batch must become an error.

Besides the corpus families it runs ``echo`` (:data:`ECHO_FAMILY`), a self-test
family outside the corpus whose right answer is ``{"echo": input}``, so the
robustness tests do not depend on any spec family.
"""

from __future__ import annotations

import copy
import hashlib
import os
import signal
import sys
import time
from typing import Any, BinaryIO, Sequence

from qconform.adapters.catalog import FAULTY_MODES
from qconform.adapters.reference import ReferenceAdapter
from qconform.generators.encoding import canonical_json, encode_blob
from qconform.harness.adapter import ECHO_FAMILY, Outcome

EXIT_STATUS = 3
HANG_S = 3600.0
GARBAGE = b"this line is not JSON {\n"


def echo(case_input: dict) -> dict:
    """The right answer of the ``echo`` self-test family."""
    return {"echo": case_input}


def affected(case_input: dict) -> bool:
    """Whether a faulty adapter misbehaves on this case: the low bit of the
    first byte of the sha256 of its canonical JSON."""
    return hashlib.sha256(canonical_json(case_input).encode("ascii")).digest()[0] & 1 == 1


def first_blob(value: Any) -> dict | None:
    """The first typed blob (an object with ``b64``) inside ``value``, depth first."""
    if isinstance(value, dict):
        if "b64" in value:
            return value
        children = list(value.values())
    elif isinstance(value, list):
        children = value
    else:
        return None
    for child in children:
        blob = first_blob(child)
        if blob is not None:
            return blob
    return None


def replace_first_value(output: dict, value: Any) -> dict:
    first = next(iter(output), "value")
    return {**output, first: value}


def corrupt(mode: str, output: dict) -> Any:
    """The affected output of a per-case mode."""
    output = copy.deepcopy(output)
    blob = first_blob(output)
    if mode == "wrong_shape":
        if blob is None:
            return replace_first_value(output, encode_blob("u32", [7]) | {"shape": [2]})
        blob["shape"] = blob["shape"][:-1] + [blob["shape"][-1] + 1] if blob["shape"] else [2]
        return output
    if mode == "wrong_dtype":
        if blob is None:
            return replace_first_value(output, encode_blob("u32", [7]) | {"dtype": "f16"})
        blob["dtype"] = "f16"
        return output
    if mode == "nan":
        return replace_first_value(output, float("nan"))
    raise ValueError(f"{mode} is not a per-case mode")


class FaultyAdapter(ReferenceAdapter):
    """The reference, broken in one way (``mode``) on the affected cases."""

    def __init__(self, device: str = "cpu", mode: str = "raise") -> None:
        if mode not in FAULTY_MODES:
            raise ValueError(f"unknown faulty mode {mode!r}; modes: {', '.join(FAULTY_MODES)}")
        super().__init__(device)
        self.mode = mode
        self.name = f"faulty:{mode}"
        #: the protocol's output stream, set by the shim host that serves this adapter
        #: (qconform.harness.transport.host), for mode ``garbage`` to corrupt
        self.protocol_out: BinaryIO | None = None

    def load_solvers(self) -> dict:
        return {**super().load_solvers(), ECHO_FAMILY: echo}

    def misbehave_on_batch(self) -> None:
        """The per-batch modes that stop the process or corrupt the stream."""
        print(f"faulty adapter: mode {self.mode} triggered", file=sys.stderr, flush=True)
        if self.mode == "hang":
            time.sleep(HANG_S)
        elif self.mode == "exit":
            os._exit(EXIT_STATUS)
        elif self.mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif self.mode == "garbage":
            stream = self.protocol_out or sys.stdout.buffer
            stream.write(GARBAGE)
            stream.flush()
        elif self.mode == "raise":
            raise RuntimeError("faulty adapter: deliberate failure on an affected case")

    def run_batch(self, family: str, inputs: Sequence[dict]) -> list[Outcome]:
        hits = [affected(case_input) for case_input in inputs]
        if any(hits):
            self.misbehave_on_batch()
        outcomes = super().run_batch(family, inputs)
        if any(hits) and self.mode == "wrong_length":
            return outcomes[:-1]
        if self.mode in ("wrong_shape", "wrong_dtype", "nan"):
            return [
                corrupt(self.mode, out) if hit and isinstance(out, dict) else out for out, hit in zip(outcomes, hits)
            ]
        return outcomes
