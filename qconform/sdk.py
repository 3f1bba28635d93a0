"""The in-process Python adapter API: plug an engine in with arrays, not base64 JSON (docs/sdk.md).

Subclass :class:`EngineAdapter` and write one method per vector family, named after
the family, taking the case's decoded ``input`` and returning its answer::

    class MyEngine(EngineAdapter):
        name = "my-engine"

        def categorical_sampling(self, case: dict) -> dict:
            counts = case["row"]["counts"]          # a numpy array (or a torch tensor)
            ...
            return {"tokens": tokens}               # arrays are encoded for you

* **Inputs** arrive decoded: every typed blob (``{"dtype", "shape", "b64"}``) is a
  NumPy array of its dtype and shape (``arrays = "torch"``: a torch tensor on the
  adapter's device); every other value is as in the vector (``word32`` and ``u64``
  stay strings, read them with :func:`word32` and :func:`u64`).
* **Outputs** may hold NumPy arrays, torch tensors, NumPy scalars and
  :class:`fractions.Fraction` values. An array becomes a typed blob of its own
  dtype where the family's ``expected`` schema has a blob, and a JSON list
  everywhere else (``tokens``, ``emitted``...); a Fraction becomes ``"num/den"``.
* **Refusals**: ``raise Refusal("WRONG_TOTAL_MASS")`` (or ``return refusal(code)``)
  answers ``{"error": code}``; :attr:`EngineAdapter.error_map` maps the engine's own
  exception types to refusal codes; ``raise Unsupported(reason)`` makes the case
  ``unsupported``. Any other exception is that case's ``error``, never the run's.
* **Draws**: :func:`draw_key` gives the Philox key and counter words of any draw of
  the RNG ABI (docs/rng-abi.md), :func:`round_draws` every draw of one round, for an
  engine that takes its draws as input. An engine that generates its draws itself
  must compute keys with its own code: the ``rng_abi`` family then checks that code.

Run it with :func:`serve` from a script (``--adapter 'shim:/abs/path/python my_engine.py'``)
or register the class under the ``qconform.adapters`` entry point (docs/adapters.md).
The example ``examples/sdk/numpy_engine.py`` is a complete engine in 30 lines.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Sequence
from fractions import Fraction
from functools import cache
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import numpy as np

from qconform.harness.adapter import (
    RAW_BLOB_KEYS,
    Adapter,
    AdapterError,
    Capabilities,
    Outcome,
    PrecisionProfile,
    Unimplemented,
    blob_bytes,
)

#: blob dtype -> NumPy dtype (little-endian), docs/vector-format.md "Value encodings"
BLOB_DTYPES: dict[str, str] = {"f32": "<f4", "f64": "<f8", "i32": "<i4", "u32": "<u4", "u64": "<u8", "u8": "u1"}
_NUMPY_TO_BLOB: dict[str, str] = {np.dtype(v).str: k for k, v in BLOB_DTYPES.items()}
BLOB_KEYS = frozenset({"dtype", "shape", "b64"})


class Refusal(Exception):
    """The input is invalid: the case is answered ``{"error": code}`` (a code of spec/errors.py)."""

    def __init__(self, code: str, detail: str = "") -> None:
        super().__init__(f"{code}: {detail}" if detail else code)
        self.code = code


class Unsupported(Exception):
    """This case needs something the engine does not implement: the case is ``unsupported``."""


def refusal(code: str) -> dict:
    """The answer that refuses a case with ``code``: ``{"error": code}``."""
    return {"error": code}


def refusal_codes() -> dict[str, tuple[str, str]]:
    """The registered refusal codes: code -> (rule, meaning)."""
    from qconform.spec.errors import ERROR_CODES

    return dict(ERROR_CODES)


def word32(text: str) -> int:
    """The integer of a ``word32`` string (``"0x6627e8d5"``)."""
    return int(text, 16)


def u64(text: str) -> int:
    """The integer of a ``u64`` string (a decimal, e.g. a seed)."""
    return int(text)


# --- the RNG ABI ----------------------------------------------------------------------------


class DrawKey(NamedTuple):
    """One draw's Philox4x32-10 key words (k0, k1), counter words (c0..c3) and output words."""

    key: tuple[int, int]
    counter: tuple[int, int, int, int]
    output: tuple[int, int, int, int]

    @property
    def u24(self) -> int:
        """The proposal draw: the top 24 bits of output word 0."""
        return self.output[0] >> 8

    @property
    def u32(self) -> int:
        """The acceptance, correction or bonus draw: output word 0."""
        return self.output[0]


#: domain name -> the code the RNG ABI puts in the top byte of counter word 3
DOMAINS: dict[str, int] = {"PROPOSAL": 1, "ACCEPT": 2, "CORRECTION": 3}


def request_seed(request: dict) -> int:
    """A ``verification_round`` request's seed: its ``seed`` as given, or, for a request that
    carries none, the seed the RNG ABI derives from its ``request_id`` (docs/rng-abi.md,
    "Request seeds")."""
    from qconform.spec.rng_abi import unseeded_request_seed

    return u64(request["seed"]) if "seed" in request else unseeded_request_seed(request["request_id"])


def draw_key(seed: int, generation: int, round_id: int, position: int, domain: str, draw_counter: int = 0) -> DrawKey:
    """The key, counter and output words of one draw (docs/rng-abi.md); fields out of range
    raise ``Refusal("BAD_RNG_FIELD")``. ``domain`` is ``PROPOSAL``, ``ACCEPT`` or ``CORRECTION``."""
    from qconform.spec import rng_abi
    from qconform.spec.errors import SpecError

    try:
        key = rng_abi.DrawKey(seed, generation, round_id, position, rng_abi.Domain[domain], draw_counter)
        return DrawKey(key.key_words(), key.counter_words(), rng_abi.draw_words(key))
    except SpecError as exc:
        raise Refusal(exc.code) from None


def round_draws(seed: int, generation: int, round_id: int, anchor: int, depth: int) -> dict[str, np.ndarray]:
    """Every draw of one round (docs/rng-abi.md, "Which draw is used where"): ``proposal``
    (u24 of x_1..x_K), ``accept`` (u32 of x_1..x_K), ``correction`` (u32 after j = 0..K
    acceptances; j = K is the bonus), as ``uint32`` arrays."""
    at = [(anchor + offset) % (1 << 32) for offset in range(depth + 1)]

    def draws(domain: str, positions: list[int], top24: bool) -> np.ndarray:
        keys = [draw_key(seed, generation, round_id, p, domain) for p in positions]
        return np.array([k.u24 if top24 else k.u32 for k in keys], dtype=np.uint32)

    return {
        "proposal": draws("PROPOSAL", at[:depth], True),
        "accept": draws("ACCEPT", at[:depth], False),
        "correction": draws("CORRECTION", at, False),
    }


# --- decoding inputs, encoding outputs ------------------------------------------------------


def decode(value: Any, to_array: Callable[[np.ndarray], Any] = lambda a: a) -> Any:
    """A case input with every blob decoded into an array (``to_array`` may move it to torch)."""
    if isinstance(value, dict):
        if set(value) in (BLOB_KEYS, RAW_BLOB_KEYS) and value["dtype"] in BLOB_DTYPES:
            data = blob_bytes(value)
            return to_array(np.frombuffer(data, dtype=BLOB_DTYPES[value["dtype"]]).reshape(value["shape"]).copy())
        return {k: decode(v, to_array) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v, to_array) for v in value]
    return value


def blob(array: np.ndarray) -> dict:
    """A typed blob of ``array`` (its own dtype, which must be a blob dtype)."""
    array = np.asarray(array)
    little = array.dtype.newbyteorder("<") if array.dtype.byteorder == ">" else array.dtype
    dtype = _NUMPY_TO_BLOB.get(np.dtype(little).str)
    if dtype is None:
        raise TypeError(f"array dtype {array.dtype} has no blob encoding; use one of {', '.join(BLOB_DTYPES)}")
    data = np.ascontiguousarray(array, dtype=BLOB_DTYPES[dtype]).tobytes()
    return {"dtype": dtype, "shape": list(array.shape), "b64": base64.b64encode(data).decode("ascii")}


@cache
def expected_schema(family: str) -> dict:
    """The ``expected`` schema of ``family`` with its ``$defs`` (vectors/schemas/<family>.schema.json)."""
    from qconform.generators.corpus import default_vectors_dir

    root = json.loads((Path(default_vectors_dir()) / "schemas" / f"{family}.schema.json").read_text())
    return {"$defs": root.get("$defs", {}), **root["$defs"]["expected"]}


def _branches(schema: dict, defs: dict) -> list[dict]:
    """``schema`` with ``$ref``, ``oneOf``, ``anyOf`` and ``allOf`` unfolded into plain alternatives."""
    out = [schema]
    ref = schema.get("$ref", "")
    if ref.startswith("#/$defs/") and ref != "#/$defs/blob":
        out += _branches(defs.get(ref.rsplit("/", 1)[1], {}), defs)
    for key in ("oneOf", "anyOf", "allOf"):
        for sub in schema.get(key, ()):
            out += _branches(sub, defs)
    return out


def _child(schemas: list[dict], key: str | int, defs: dict) -> list[dict]:
    found = []
    for schema in schemas:
        for branch in _branches(schema, defs):
            sub = branch.get("properties", {}).get(key) if isinstance(key, str) else branch.get("items")
            if isinstance(sub, dict):
                found.append(sub)
    return found


def _is_blob(schemas: list[dict], defs: dict) -> bool:
    return any(b.get("$ref") == "#/$defs/blob" for s in schemas for b in _branches(s, defs))


def encode(value: Any, schemas: list[dict] | None = None, defs: dict | None = None) -> Any:
    """An answer made JSON: arrays become blobs where ``schemas`` (the alternatives at this
    place of the ``expected`` schema) allow a blob and lists elsewhere; NumPy scalars become
    numbers, Fractions ``"num/den"``."""
    schemas, defs = schemas or [], defs or {}
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return blob(value) if _is_blob(schemas, defs) else encode(value.tolist(), schemas, defs)
    if isinstance(value, dict):
        return {k: encode(v, _child(schemas, k, defs), defs) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(v, _child(schemas, i, defs), defs) for i, v in enumerate(value)]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Fraction):
        return f"{value.numerator}/{value.denominator}"
    return value


# --- the adapter ----------------------------------------------------------------------------


class EngineAdapter(Adapter):
    """An in-process adapter with one method per family (module docstring).

    Class attributes: ``name``; ``arrays`` (``"numpy"`` or ``"torch"``); ``profile`` (the
    :class:`PrecisionProfile`, exact by default); ``injected_draws``; ``devices``;
    ``error_map`` (engine exception type -> refusal code, tried in order).
    """

    name = "engine"
    #: :func:`decode` reads both blob forms: the host hands over a binary payload's sections raw
    raw_blobs = True
    arrays: ClassVar[str] = "numpy"
    profile: ClassVar[PrecisionProfile] = PrecisionProfile()
    injected_draws: ClassVar[bool] = True
    devices: ClassVar[tuple[str, ...]] = ("cpu",)
    error_map: ClassVar[dict[type[BaseException], str]] = {}

    def families(self) -> tuple[str, ...]:
        """The families this engine answers: those of the corpus it has a method for."""
        from qconform.generators.registry import family_names

        return tuple(f for f in family_names() if callable(getattr(self, f, None)))

    def capabilities(self) -> Capabilities:
        return Capabilities(families=self.families(), injected_draws=self.injected_draws, devices=self.devices)

    def precision(self) -> PrecisionProfile:
        return self.profile

    def to_array(self, array: np.ndarray) -> Any:
        if self.arrays == "torch":
            import torch

            return torch.from_numpy(array).to(self.device)
        return array

    def solve(self, family: str, case: dict) -> Outcome:
        """One case's outcome: the method's answer, encoded, or a refusal, or unsupported, or an error."""
        schema = expected_schema(family)
        try:
            answer = getattr(self, family)(decode(case, self.to_array))
        except Refusal as exc:
            return refusal(exc.code)
        except Unsupported as exc:
            return Unimplemented(str(exc) or f"{self.name} does not support this {family} case")
        except Exception as exc:  # noqa: BLE001 - the engine's own errors: mapped, or this case's error
            for kind, code in self.error_map.items():
                if isinstance(exc, kind):
                    return refusal(code)
            return AdapterError(f"{type(exc).__name__}: {exc}")
        return encode(answer, [schema], schema["$defs"])

    def run_batch(self, family: str, inputs: Sequence[dict]) -> list[Outcome]:
        return [self.solve(family, case) for case in inputs]


def serve(adapter: Adapter) -> int:
    """Serve ``adapter`` over the shim protocol on stdin/stdout until shutdown (for ``shim:``)."""
    from qconform.harness.transport.host import Host, claim_stdio

    proto_in, proto_out = claim_stdio()
    return Host(adapter).serve(proto_in, proto_out)
