"""The JSON-lines shim protocol (docs/shim-protocol.md), both directions.

Every implementation under test is a child process that reads one JSON request per
line on stdin and writes one JSON reply per line on stdout. This module holds the
message vocabulary and the checks a harness applies to what comes back: a reply
that breaks the protocol becomes a :class:`ProtocolError` (whole request) or an
:class:`AdapterError` (one case), never an exception the harness run dies of.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import fields
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable

import orjson

from qconform.harness.adapter import (
    B64_BLOB_KEYS,
    RAW_BLOB_KEYS,
    AdapterConfig,
    AdapterError,
    Capabilities,
    Outcome,
    PrecisionProfile,
    Unimplemented,
)

if TYPE_CHECKING:
    from qconform.harness.transport.arena import BlobArena as Arena

PROTOCOL_VERSION = 1
OPS = ("get_config", "run", "run_block", "sample", "shutdown")
ENTRY_STATUSES = ("ok", "unimplemented", "error")
#: keys of a ``get_config`` answer's ``config``; any other key lands in ``extra``
CONFIG_KEYS = ("name", "protocol", "capabilities", "precision", "device", "payload", "arena", "window", "pipeline")
#: the most requests the harness offers to have in flight at once (docs/shim-protocol.md, "Pipelined
#: requests"): two, the next block in the child's pipe while it computes the one before
PIPELINE_DEPTH = 2
#: payload forms (docs/shim-protocol.md, "Binary payloads"): every blob in base64 inside the
#: JSON line (the default, all a hand-written shim needs), or raw sections after the line
JSON_PAYLOAD, BINARY_PAYLOAD = "json", "binary"
PAYLOADS = (JSON_PAYLOAD, BINARY_PAYLOAD)
#: most raw bytes one binary message may announce (a sanity bound on a child's claim)
MAX_SECTION_BYTES = 1 << 32
CAPABILITY_KEYS = ("families", "injected_draws", "devices", "sampling", "injected_domains")
PRECISION_KEYS = tuple(f.name for f in fields(PrecisionProfile))
MARGIN_KEYS = ("exp_ulp", "ratio_margin", "residual_margin", "sum_rel")
#: blob dtype -> item size in bytes (docs/vector-format.md)
BLOB_ITEM_SIZE = {"u8": 1, "i32": 4, "u32": 4, "f32": 4, "u64": 8, "f64": 8}
#: how much of an offending reply an error message quotes
QUOTE_CHARS = 200


class ProtocolError(ValueError):
    """A message that breaks docs/shim-protocol.md; the text says how."""


class NonFinite(str):
    """Stands for a ``NaN`` / ``Infinity`` token, which strict JSON forbids."""


#: orjson options that hand what the standard ``json`` module refuses to serialize (dataclasses,
#: datetimes) to ``default``, which refuses it too; the fallback then raises json's own error
_ORJSON_OPTIONS = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME


def _refuse(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def dumps(value: Any) -> str:
    """``value`` as compact strict JSON: exactly the JSON value of ``json.dumps(value, separators=(",", ":"),
    allow_nan=False)`` (ASCII, ``\\uXXXX`` escapes), or its error. orjson writes it when its text is ASCII
    and holds no ``null`` (orjson writes NaN and infinities as ``null``, which the standard module refuses);
    anything else, and whatever orjson refuses (integers beyond 64 bits, keys that are not strings), is
    left to the standard module. Same value, not always the same bytes: orjson may spell a float
    differently (``0.00001`` for ``1e-05``). orjson also writes ``Enum`` and ``UUID`` members, which the
    standard module refuses; protocol messages are built of JSON values."""
    try:
        text = orjson.dumps(value, default=_refuse, option=_ORJSON_OPTIONS)
    except TypeError:
        pass
    else:
        if text.isascii() and b"null" not in text:
            return text.decode("ascii")
    return STRICT_JSON.encode(value)


#: ``json.dumps(value, separators=(",", ":"), allow_nan=False)`` as one encoder, built once
#: (``json.dumps`` with arguments builds a new encoder per call)
STRICT_JSON = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def encode_message(message: dict) -> bytes:
    """One protocol line: compact strict JSON (no NaN), ASCII, newline-terminated (:func:`dumps`)."""
    return (dumps(message) + "\n").encode("ascii")


def quote(data: bytes | str) -> str:
    """A short printable excerpt of ``data`` for error messages."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    text = text.rstrip("\n")
    return repr(text if len(text) <= QUOTE_CHARS else text[:QUOTE_CHARS] + "...")


#: :func:`loads`'s screen for number tokens of 19 digits or more (where orjson reads an integer beyond
#: 64 bits as a float): every byte translated to its class, a digit ``0``, a byte that may come
#: before a number token ``D`` (``[ : , -`` and whitespace), any other ``x``; then one substring
#: search, 10x faster than a regular expression over the same bytes
_BYTE_CLASS = bytes(
    ord("0") if chr(b).isdigit() and b < 128 else ord("D") if b in b"[:,- \t\r\n" else ord("x") for b in range(256)
)
_LONG_DIGITS = b"0" * 19


def _long_number(data: bytes) -> bool:
    """Whether ``data`` may hold a number token of 19 digits or more (it may also be inside a string)."""
    classes = data.translate(_BYTE_CLASS)
    return classes.startswith(_LONG_DIGITS) or b"D" + _LONG_DIGITS in classes


def loads(data: bytes) -> Any:
    """The JSON value of UTF-8 ``data``, exactly as ``json.loads(data.decode("utf-8"),
    parse_constant=NonFinite)`` gives it, or its error (docs/shim-protocol.md, "JSON"). orjson
    parses it unless it refuses (``NaN``/``Infinity`` tokens, lone surrogates, bad UTF-8, a number
    that overflows, nesting deeper than 1024) or the text holds a number token of 19 digits or more
    (orjson reads an integer beyond 64 bits as a float): then the standard module decides."""
    if not _long_number(data):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return json.loads(data.decode("utf-8"), parse_constant=NonFinite)


def decode_line(line: bytes, what: str = "reply") -> dict:
    """Parse one protocol line into a JSON object.

    ``NaN``/``Infinity`` tokens are kept as :class:`NonFinite` markers so that only
    the case holding one is refused (see :func:`check_output`), not the whole reply.
    """
    try:
        message = loads(line)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ProtocolError(f"{what} is not JSON ({exc}): {quote(line)}") from None
    if not isinstance(message, dict):
        raise ProtocolError(f"{what} is not a JSON object: {quote(line)}")
    return message


# --- binary payloads: raw sections after the JSON line -----------------------------------


def encode_binary(message: dict, arena: Arena | None = None) -> bytes:
    """One message in the binary form: every blob's bytes moved out of the JSON into a raw
    section (the blob keeps ``dtype`` and ``shape`` and names its ``section``), the line
    listing the sections' byte counts under ``sections``, then the sections, concatenated.
    A message without blobs is the plain JSON line. With the ``arena`` the child attached
    (docs/shim-protocol.md, "Shared arena"), a blob the arena holds names its range there
    (``"arena": [offset, length]``) instead of a section."""
    return b"".join(binary_parts(message, arena))


def binary_parts(message: dict, arena: Arena | None = None) -> list[bytes | memoryview]:
    """:func:`encode_binary`'s bytes in parts, to be written one after the other: the line, then
    each section as it is (a view of its blob's bytes, not copied). A ``run`` or ``sample`` request
    all of whose inputs the ``arena`` was built from is the line alone, its inputs' wire forms
    encoded once per run (:func:`encoded_inputs`)."""
    inputs = message.get("inputs")
    if arena is not None and message.get("op") in ("run", "sample") and type(inputs) is list:
        fragments = encoded_inputs(inputs, arena)
        if fragments is not None:
            head = encode_message({key: value for key, value in message.items() if key != "inputs"})
            return [head[:-2] + b',"inputs":[' + b",".join(fragments) + b"]}\n"]
    sections: list[bytes | memoryview] = []
    body = to_sections(message, sections, arena)
    if not sections:
        return [encode_message(body)]
    return [encode_message({**body, "sections": [len(data) for data in sections]}), *sections]


def encoded_inputs(inputs: list, arena: Arena) -> list[bytes] | None:
    """The wire form (compact JSON, every blob naming its arena range) of each of ``inputs``, or None
    when one of them is not an input object of a case the arena was built from (``BlobArena.inputs``)
    or holds a blob the arena does not (it needs a section). Each is walked and encoded the first
    time it is sent and kept in the arena (``BlobArena.wire``): a corpus case is sent once per pass,
    and walking its fraction-string matrices again each time was a fifth of the harness's CPU on
    the torch candidate's passes (bench/RESULTS.md, "Issue #24: the feed through the child, night")."""
    known, wire = arena.inputs, arena.wire
    fragments = []
    for case_input in inputs:
        key = id(case_input)
        text = wire.get(key)  # only inputs of ``known`` are kept, alive: the id is still theirs
        if text is None:
            if known.get(key) is not case_input:
                return None
            sections: list[bytes | memoryview] = []
            body = to_sections(case_input, sections, arena)
            if sections:
                return None
            text = wire[key] = dumps(body).encode("ascii")
        fragments.append(text)
    return fragments


def marked_walk(first: str, second: str) -> Callable[[Any, Callable[[dict], Any]], Any]:
    """The walk ``walk(value, change)``: ``value`` with every object holding the key ``first`` or
    ``second`` replaced by ``change(object)``. What holds no such object is returned as it is, not
    copied: a container is copied only where an object below it changes, and a list of scalars
    (long lists of numbers and fraction strings) is passed over in one C-level look at its items'
    types. (The keys are the closure's, not arguments: the walk is on the hot path of every request.)"""

    def walk(value: Any, change: Callable[[dict], Any]) -> Any:
        if isinstance(value, dict):
            if first in value or second in value:
                return change(value)
            out = None
            for key, item in value.items():
                if type(item) in _SCALARS:
                    continue
                if isinstance(item, CONTAINERS) and (new := walk(item, change)) is not item:
                    if out is None:
                        out = dict(value)
                    out[key] = new
            return value if out is None else out
        if isinstance(value, list):
            if _SCALARS.issuperset(map(type, value)):
                return value
            out = None
            for index, item in enumerate(value):
                if type(item) is list and _SCALARS.issuperset(map(type, item)):
                    continue  # a row of a matrix of scalars: no call
                if isinstance(item, CONTAINERS) and (new := walk(item, change)) is not item:
                    if out is None:
                        out = list(value)
                    out[index] = new
            return value if out is None else out
        return value

    return walk


#: ``map_blobs(value, change)``: every typed blob of the JSON and raw forms (an object holding
#: ``b64`` or ``raw``) replaced by ``change(blob)``
map_blobs = marked_walk("b64", "raw")
#: the same for the blobs of the binary form, which name a ``section`` or an ``arena`` range
map_wire_blobs = marked_walk("section", "arena")


#: the exact types of JSON scalars: a container whose items are all of these holds no blob
_SCALARS = frozenset((str, int, float, bool, type(None)))
#: the JSON values a blob can be inside
CONTAINERS = (dict, list)


def raw_bytes(blob: dict) -> memoryview | None:
    """A blob's bytes, flat, without a copy: its raw bytes (any contiguous buffer), or its
    base64 decoded; None when there are none to take (base64 that does not decode, a ``raw``
    that is not a buffer), so that the blob stays as it is for the receiver's checks to name."""
    try:
        if "raw" in blob:
            return memoryview(blob["raw"]).cast("B")
        if isinstance(blob["b64"], str):
            return memoryview(base64.b64decode(blob["b64"], validate=True))
    except (TypeError, ValueError):
        pass
    return None


def without_bytes(blob: dict) -> dict:
    return {key: item for key, item in blob.items() if key not in ("b64", "raw")}


def to_sections(value: Any, sections: list[bytes | memoryview], arena: Arena | None = None) -> Any:
    """``value`` with every blob's bytes appended to ``sections`` and the blob naming its section,
    or, for a ``b64`` blob that ``arena`` holds, naming its range there."""
    index = None if arena is None else arena.index

    def section(blob: dict) -> dict:
        if index is not None and isinstance(b64 := blob.get("b64"), str) and (span := index.get(b64)) is not None:
            named = dict(blob)  # without_bytes, in fewer steps (this runs for every blob sent)
            del named["b64"]
            named.pop("raw", None)
            named["arena"] = span  # a (offset, length) pair: a JSON list
            return named
        data = raw_bytes(blob)
        if data is None:
            return blob
        sections.append(data)
        return without_bytes(blob) | {"section": len(sections) - 1}

    return map_blobs(value, section)


def to_raw_blobs(value: Any) -> Any:
    """``value`` with every blob in the raw form (``raw`` bytes for ``b64``; one whose base64
    does not decode is left as it is)."""

    def raw(blob: dict) -> dict:
        data = raw_bytes(blob) if "b64" in blob else None
        return blob if data is None else without_bytes(blob) | {"raw": data.obj}

    return map_blobs(value, raw)


def to_json_blobs(value: Any) -> Any:
    """``value`` with every blob in the JSON form (``b64`` for ``raw`` bytes)."""

    def b64(blob: dict) -> dict:
        data = raw_bytes(blob) if "raw" in blob else None
        return blob if data is None else without_bytes(blob) | {"b64": base64.b64encode(data).decode("ascii")}

    return map_blobs(value, b64)


def section_sizes(message: dict) -> list[int]:
    """The byte counts a binary message's ``sections`` announces (none: an empty list)."""
    sizes = message.get("sections", [])
    if not isinstance(sizes, list) or not all(type(n) is int and n >= 0 for n in sizes):
        raise ProtocolError(f"sections must be a list of byte counts, got {quote(repr(sizes))}")
    if sum(sizes) > MAX_SECTION_BYTES:
        raise ProtocolError(f"sections announce {sum(sizes)} bytes, more than {MAX_SECTION_BYTES}")
    return sizes


def join_sections(message: dict, data: bytes, raw: bool = False, arena: memoryview | None = None) -> dict:
    """A binary message read whole (its line decoded, then the bytes its ``sections`` announced) as
    the JSON form: every blob that names a ``section``, or a range of the attached ``arena``
    (the child's read-only mapping, docs/shim-protocol.md "Shared arena"), gets its bytes back
    in base64, or with ``raw`` as they are (``"raw"``: the section's ``bytes``, or a read-only
    memoryview of the arena, no copy: the raw form of docs/adapters.md). Each section belongs
    to exactly one blob; a
    range outside the arena, an arena range with no arena attached, or anything else is a
    :class:`ProtocolError`."""
    sizes = section_sizes(message)
    if len(data) != sum(sizes):
        raise ProtocolError(f"sections announce {sum(sizes)} bytes, {len(data)} followed")
    offsets = [0]
    for size in sizes:
        offsets.append(offsets[-1] + size)
    joiner = _Joiner(memoryview(data), offsets, arena, raw)
    body = {key: value for key, value in message.items() if key != "sections"}
    joined = joiner.join(body)
    if not all(joiner.used):
        raise ProtocolError(f"section {joiner.used.index(False)} is named by no blob")
    return joined


def arena_span(span: Any, arena: memoryview | None) -> tuple[int, int]:
    """``(start, stop)`` of a blob's ``"arena": [offset, length]`` in ``arena``, or :class:`ProtocolError`."""
    if not (
        type(span) is list and len(span) == 2 and type(start := span[0]) is int and type(length := span[1]) is int
    ) or (start < 0 or length < 0):
        raise ProtocolError(f"a blob names arena range {quote(repr(span))}: not [offset, length] in bytes")
    stop = start + length
    if arena is None:
        raise ProtocolError(f"a blob names arena bytes [{start}, {stop}), but no arena is attached")
    if stop > arena.nbytes:
        raise ProtocolError(f"a blob names arena bytes [{start}, {stop}), outside the {arena.nbytes}-byte arena")
    return start, stop


class _Joiner:
    """One walk of :func:`join_sections`: the sections' bytes, which are used, the arena."""

    def __init__(self, view: memoryview, offsets: list[int], arena: memoryview | None, raw: bool) -> None:
        self.view, self.offsets, self.arena, self.raw = view, offsets, arena, raw
        self.used = [False] * (len(offsets) - 1)

    def join(self, value: Any) -> Any:
        """``value`` (a container) with its blobs joined; as :func:`map_blobs`, what holds none is not copied."""
        return map_wire_blobs(value, self.joined)

    def joined(self, value: dict) -> dict:
        """One blob that names a section (first) or an arena range, with its bytes."""
        if "section" in value:
            index = value["section"]
            used = self.used
            if type(index) is not int or not 0 <= index < len(used) or used[index]:
                raise ProtocolError(f"a blob names section {index!r}: not one of the {len(used)} unused sections")
            used[index] = True
            data = self.view[self.offsets[index] : self.offsets[index + 1]]
            return self.blob(value, "section", data.tobytes() if self.raw else data)
        start, stop = arena_span(value["arena"], self.arena)
        assert self.arena is not None
        return self.blob(value, "arena", self.arena[start:stop])

    def blob(self, value: dict, key: str, data: bytes | memoryview) -> dict:
        blob = dict(value)
        del blob[key]
        if self.raw:
            blob["raw"] = data
        else:
            blob["b64"] = base64.b64encode(data).decode("ascii")
        return blob


# --- get_config ------------------------------------------------------------------


def config_to_json(config: AdapterConfig) -> dict:
    """The ``config`` object of a ``get_config`` answer."""
    return {
        **config.extra,
        "name": config.name,
        "protocol": PROTOCOL_VERSION,
        "capabilities": config.capabilities.to_json(),
        "precision": config.precision.to_json(),
        "device": config.device,
    }


def _expect(value: Any, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise ProtocolError(f"{where} must be {getattr(kind, '__name__', kind)}, got {value!r}")
    return value


def _string_list(value: Any, where: str) -> tuple[str, ...]:
    _expect(value, list, where)
    for item in value:
        _expect(item, str, f"an item of {where}")
    return tuple(value)


def _check_margin(text: Any, where: str) -> str:
    _expect(text, str, where)
    num, slash, den = text.partition("/")
    if not slash or not num.isdigit() or not den.isdigit() or int(den) == 0:
        raise ProtocolError(f"{where} must be a nonnegative rational 'num/den', got {text!r}")
    return text


def parse_capabilities(obj: Any) -> Capabilities:
    _expect(obj, dict, "config.capabilities")
    unknown = sorted(set(obj) - set(CAPABILITY_KEYS))
    if unknown:
        raise ProtocolError(f"config.capabilities has unknown keys {unknown}")
    if "families" not in obj:
        raise ProtocolError("config.capabilities.families is missing")
    families = _string_list(obj["families"], "config.capabilities.families")
    return Capabilities(
        families=families,
        injected_draws=_expect(obj.get("injected_draws", True), bool, "config.capabilities.injected_draws"),
        devices=_string_list(obj.get("devices", ["cpu"]), "config.capabilities.devices"),
        sampling=_string_list(obj.get("sampling", []), "config.capabilities.sampling"),
        injected_domains=parse_injected_domains(obj.get("injected_domains", {}), families),
    )


def parse_injected_domains(obj: Any, families: tuple[str, ...]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``capabilities.injected_domains`` (partial injection, docs/harness.md): per family, the
    RNG ABI domains the adapter takes injected. Only a family whose comparator has a partial
    mode may be listed, with known domain names that include the one it cannot do without."""
    from qconform.harness.judging.judge import partial_mode  # the comparators import this module

    _expect(obj, dict, "config.capabilities.injected_domains")
    declared = []
    for family, domains in sorted(obj.items()):
        where = f"config.capabilities.injected_domains.{family}"
        if family not in families:
            raise ProtocolError(f"{where}: {family} is not one of the declared families")
        mode = partial_mode(family)
        if mode is None:
            raise ProtocolError(f"{where}: family {family} has no partial-injection mode")
        names = _string_list(domains, where)
        unknown = sorted(set(names) - set(mode.domains))
        if unknown:
            raise ProtocolError(f"{where}: unknown domains {unknown}; {family} draws in {list(mode.domains)}")
        if mode.required not in names:
            raise ProtocolError(f"{where}: {mode.required} draws must be injected (the rest is checked against them)")
        if set(names) != set(mode.domains):
            declared.append((family, tuple(d for d in mode.domains if d in names)))
    return tuple(declared)


def parse_precision(obj: Any) -> PrecisionProfile:
    """A precision profile; missing keys take the exact defaults, unknown keys are refused."""
    _expect(obj, dict, "config.precision")
    unknown = sorted(set(obj) - set(PRECISION_KEYS))
    if unknown:
        raise ProtocolError(f"config.precision has unknown keys {unknown}; known: {list(PRECISION_KEYS)}")
    values: dict[str, Any] = {}
    if "fp64_allocation" in obj:
        values["fp64_allocation"] = _expect(obj["fp64_allocation"], bool, "config.precision.fp64_allocation")
    for key in MARGIN_KEYS:
        if key in obj:
            values[key] = _check_margin(obj[key], f"config.precision.{key}")
    if "notes" in obj:
        values["notes"] = _expect(obj["notes"], str, "config.precision.notes")
    return PrecisionProfile(**values)


def parse_payload(obj: dict) -> str:
    """A ``get_config`` answer's ``config.payload``: the payload form of every later message."""
    payload = obj.get("payload", JSON_PAYLOAD)
    if payload not in PAYLOADS:
        raise ProtocolError(f"config.payload must be one of {list(PAYLOADS)}, got {payload!r}")
    return payload


def parse_arena(obj: dict, key: str = "arena") -> bool:
    """A ``get_config`` answer's ``config.arena`` (or ``config.window``, with ``key``): whether the
    child attached the offered arena (the offered block window)."""
    attached = obj.get(key, False)
    if type(attached) is not bool:
        raise ProtocolError(f"config.{key} must be true or false, got {attached!r}")
    return attached


def parse_pipeline(obj: dict) -> int:
    """A ``get_config`` answer's ``config.pipeline``: the most requests the child takes in flight
    at once (docs/shim-protocol.md, "Pipelined requests"); 1, one at a time, when absent."""
    depth = obj.get("pipeline", 1)
    if type(depth) is not int or depth < 1:
        raise ProtocolError(f"config.pipeline must be a positive integer, got {depth!r}")
    return depth


def parse_config(obj: Any) -> AdapterConfig:
    """Validate a ``get_config`` answer's ``config`` into an :class:`AdapterConfig`."""
    _expect(obj, dict, "config")
    for key in CONFIG_KEYS[:4]:
        if key not in obj:
            raise ProtocolError(f"config.{key} is missing")
    if obj["protocol"] != PROTOCOL_VERSION:
        raise ProtocolError(f"config.protocol is {obj['protocol']!r}; this harness speaks {PROTOCOL_VERSION}")
    parse_payload(obj)
    parse_arena(obj)
    parse_arena(obj, "window")
    parse_pipeline(obj)
    return AdapterConfig(
        name=_expect(obj["name"], str, "config.name"),
        capabilities=parse_capabilities(obj["capabilities"]),
        precision=parse_precision(obj["precision"]),
        device=_expect(obj.get("device", "cpu"), str, "config.device"),
        extra={k: v for k, v in obj.items() if k not in CONFIG_KEYS},
    )


# --- run: outcomes <-> entries -------------------------------------------------------


def outcome_to_entry(outcome: Outcome) -> dict:
    """The protocol entry of one outcome (``ok`` / ``unimplemented`` / ``error``)."""
    if isinstance(outcome, Unimplemented):
        return {"status": "unimplemented", "reason": outcome.reason}
    if isinstance(outcome, AdapterError):
        return {"status": "error", "message": outcome.message}
    return {"status": "ok", "output": outcome}


def entry_to_outcome(entry: Any, check: Callable[[dict], str | None]) -> Outcome:
    """One entry of a ``run`` answer as an outcome; a malformed entry is an AdapterError.

    ``check(output)`` returns why an ``ok`` output is malformed, or None.
    """
    if not isinstance(entry, dict) or entry.get("status") not in ENTRY_STATUSES:
        return AdapterError(f"malformed output entry (needs status ok|unimplemented|error): {quote(repr(entry))}")
    status = entry["status"]
    if status == "unimplemented":
        reason = entry.get("reason", "")
        return Unimplemented(reason if isinstance(reason, str) else repr(reason))
    if status == "error":
        message = entry.get("message")
        return AdapterError(f"adapter reported: {message if isinstance(message, str) else repr(message)}")
    if "output" not in entry:
        return AdapterError("malformed output entry: status ok without an output")
    output = entry["output"]
    if not isinstance(output, dict):
        return AdapterError(f"output must be a JSON object, got {type(output).__name__}: {quote(repr(output))}")
    problem = check(output)
    return AdapterError(f"malformed output: {problem}") if problem else output


# --- output checks ------------------------------------------------------------------


def blob_problem(blob: dict, where: str) -> str | None:
    """Why a typed blob, in the JSON form (``b64``) or the raw form (``raw`` bytes, docs/adapters.md),
    is inconsistent (dtype, shape, byte count), or None."""
    dtype, shape = blob.get("dtype"), blob.get("shape")
    if set(blob) not in (B64_BLOB_KEYS, RAW_BLOB_KEYS):
        return f"blob at {where} must have exactly dtype, shape, b64; has {sorted(blob)}"
    if dtype not in BLOB_ITEM_SIZE:
        return f"blob at {where} has unknown dtype {dtype!r} (known: {sorted(BLOB_ITEM_SIZE)})"
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        return f"blob at {where} has shape {shape!r}, not a list of nonnegative integers"
    if "raw" in blob:
        data = raw_bytes(blob)
        if data is None:
            return f"blob at {where} has raw {type(blob['raw']).__name__}, not contiguous bytes"
        size = data.nbytes
    else:
        b64 = blob["b64"]
        try:
            size = len(base64.b64decode(b64, validate=True)) if isinstance(b64, str) else -1
        except binascii.Error as exc:
            return f"blob at {where} has invalid base64: {exc}"
    count = 1
    for dim in shape:
        count *= dim
    if size != count * BLOB_ITEM_SIZE[dtype]:
        return f"blob at {where} holds {size} bytes; shape {shape} of {dtype} needs {count * BLOB_ITEM_SIZE[dtype]}"
    return None


def encoding_problem(value: Any, where: str = "output") -> str | None:
    """The first non-finite number or inconsistent blob inside ``value``, or None. An item's path
    is spelled only for an item that needs a look (a container, a float, a marker), and a
    container of plain scalars is passed over in one C-level look at its items' types."""
    if isinstance(value, NonFinite):
        return f"{where} is {str(value)}, which JSON does not allow"
    if isinstance(value, float) and value != value:  # a NaN that was never serialized
        return f"{where} is NaN"
    if isinstance(value, dict):
        if "b64" in value or "raw" in value:
            return blob_problem(value, where)
        if _PLAIN.issuperset(map(type, value.values())):
            return None
        for key, item in value.items():
            if type(item) in _PLAIN or (type(item) is float and item == item):
                continue
            problem = encoding_problem(item, f"{where}.{key}")
            if problem:
                return problem
    elif isinstance(value, list):
        if _PLAIN.issuperset(map(type, value)):
            return None
        for index, item in enumerate(value):
            if type(item) in _PLAIN or (type(item) is float and item == item):
                continue
            problem = encoding_problem(item, f"{where}[{index}]")
            if problem:
                return problem
    return None


#: the exact types of the scalars :func:`encoding_problem` has nothing to say about (a float may be NaN)
_PLAIN = frozenset((str, int, bool, type(None)))


def without_payloads(value: Any) -> Any:
    """``value`` with every blob's bytes emptied (``b64: ""``, also for a raw blob): the schema
    then checks the structure without scanning megabytes of base64 (already checked by
    :func:`blob_problem`)."""
    return map_blobs(value, lambda blob: without_bytes(blob) | {"b64": ""})


#: ``{"error": CODE}``: a refusal of an input; any nonempty code is well-formed
#: (a wrong code is a ``fail`` decided by the runner, not garbage).
REFUSAL_SCHEMA = {
    "type": "object",
    "properties": {"error": {"type": "string", "minLength": 1}},
    "required": ["error"],
    "additionalProperties": False,
}


def margins_optional(schema: Any, margins: set[str]) -> Any:
    """A copy of ``schema`` in which no object requires one of the case's ``margins``."""
    if isinstance(schema, list):
        return [margins_optional(item, margins) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: margins_optional(value, margins) for key, value in schema.items()}
    if isinstance(out.get("required"), list):
        out["required"] = [name for name in out["required"] if name not in margins]
    return out


def is_refusal(output: dict) -> bool:
    """Whether ``output`` is a well-formed refusal: what :data:`REFUSAL_SCHEMA` accepts."""
    return len(output) == 1 and isinstance(output.get("error"), str) and output["error"] != ""


@lru_cache(maxsize=None)
def output_validator(family: str) -> Any:
    """A jsonschema validator of one family's outputs (``expected`` or a refusal).

    None when the family is not registered or declares no ``expected_schema``
    (then only :func:`encoding_problem` applies).
    """
    import jsonschema

    from qconform.generators.registry import family_names, load_family
    from qconform.generators.schemas import DRAFT, build_family_schema

    if family not in family_names():
        return None
    try:
        spec = load_family(family)
    except ModuleNotFoundError:
        return None
    if not spec.expected_schema:
        return None
    file_schema = build_family_schema(spec)
    schema = {
        "$schema": DRAFT,
        "$defs": margins_optional(file_schema["$defs"], set(spec.margins)),
        "anyOf": [{"$ref": "#/$defs/expected"}, REFUSAL_SCHEMA],
    }
    return jsonschema.Draft202012Validator(schema)


def check_output(family: str, output: dict, strict_schema: bool = False) -> str | None:
    """Why ``output`` is not a well-formed answer for ``family``, or None.

    Always: no non-finite numbers and every blob consistent (dtype, shape, byte
    count). With ``strict_schema`` (``qconform run --strict-schema``), also valid
    against the family's ``expected`` schema or a refusal, walked in full. Without
    it (the default, docs/harness.md "Structure-only validation"), the structure is
    checked by the family's comparator, which reads exactly the keys, shapes and
    dtypes it compares and raises ``Malformed`` (an ``error``) on anything else.
    Well-formed but *wrong* answers are not judged here: they are the runner's
    ``fail``.
    """
    problem = encoding_problem(output)
    if problem:
        return problem
    if not strict_schema or is_refusal(output):
        return None  # a refusal is exactly REFUSAL_SCHEMA, one branch of the anyOf: no walk needed
    validator = output_validator(family)
    if validator is None:
        return None
    error = next(iter(validator.iter_errors(without_payloads(output))), None)
    if error is None:
        return None
    best = _best_error(error)
    where = "output" + "".join(f"[{p!r}]" for p in best.absolute_path)
    return f"{where} does not match the {family} output format: {best.message[:QUOTE_CHARS]}"


def _best_error(error: Any) -> Any:
    """The most telling leaf error under the ``anyOf``/``oneOf`` branches: the
    deepest one, preferring a wrong value to a missing key (a branch the output
    was never meant to match only complains about its missing keys)."""
    leaves, stack = [], [error]
    while stack:  # depth first, in branch order: the expected branches come first
        current = stack.pop()
        if current.context:
            stack.extend(reversed(current.context))
        else:
            leaves.append(current)
    return max(leaves, key=lambda e: (len(e.absolute_path), e.validator != "required"))


# --- sample: outcome histograms ------------------------------------------------------


def sample_per_request(family: str) -> bool | None:
    """How the ``sample`` op answers ``family`` (its ``Family.stat`` hooks, docs/stat-mode.md):
    True for one histogram per request of the case (``{"requests": [{"outcomes": [...]}]}``)
    whose outcomes carry the ``accepted`` count, False for one histogram ``{"outcomes": [...]}``
    of emitted sequences, None for a family that cannot be sampled."""
    from qconform.generators.registry import load_family

    try:
        hooks = load_family(family).stat
    except KeyError:
        return None
    return None if hooks is None else hooks.per_request


def _count_problem(value: Any, where: str) -> str | None:
    if type(value) is not int or value < 0:
        return f"{where} must be a nonnegative integer, got {value!r}"
    return None


def histogram_problem(obj: Any, samples: int, with_accepted: bool, where: str) -> str | None:
    """Why ``obj`` is not ``{"outcomes": [{["accepted",] "emitted", "count"}, ...]}`` with
    positive counts summing to ``samples``, or None."""
    keys = {"accepted", "emitted", "count"} if with_accepted else {"emitted", "count"}
    if not isinstance(obj, dict) or set(obj) != {"outcomes"} or not isinstance(obj["outcomes"], list):
        return f"{where} must be an object holding exactly an outcomes list"
    total = 0
    for i, outcome in enumerate(obj["outcomes"]):
        at = f"{where}.outcomes[{i}]"
        if not isinstance(outcome, dict) or set(outcome) != keys:
            return f"{at} must have exactly the keys {sorted(keys)}"
        if not isinstance(outcome["emitted"], list):
            return f"{at}.emitted must be a list of token ids"
        values = [(f"{at}.emitted[{j}]", token) for j, token in enumerate(outcome["emitted"])]
        values += [(f"{at}.{key}", outcome[key]) for key in sorted(keys - {"emitted"})]
        problem = next(filter(None, (_count_problem(value, path) for path, value in values)), None)
        if problem:
            return problem
        if outcome["count"] == 0:
            return f"{at}.count must be positive"
        total += outcome["count"]
    if total != samples:
        return f"{where} counts {total} rounds, not the {samples} asked for"
    return None


def check_sample_output(family: str, output: dict, samples: int) -> str | None:
    """Why ``output`` is not a well-formed ``sample`` answer for ``family``: a refusal
    ``{"error": CODE}`` or outcome histograms of ``samples`` rounds. None if it is."""
    problem = encoding_problem(output)
    if problem:
        return problem
    if "error" in output:
        return (
            None
            if set(output) == {"error"} and isinstance(output["error"], str) and output["error"]
            else ('a refusal must be exactly {"error": <nonempty code>}')
        )
    per_request = sample_per_request(family)
    if per_request is None:
        return None  # a family the harness has no histogram format for: only encoding checks
    if not per_request:
        return histogram_problem(output, samples, False, "output")
    requests = output.get("requests")
    if set(output) != {"requests"} or not isinstance(requests, list) or not requests:
        return "output must be an object holding exactly a nonempty requests list"
    for r, request in enumerate(requests):
        problem = histogram_problem(request, samples, True, f"output.requests[{r}]")
        if problem:
            return problem
    return None
