"""Serve an in-process adapter over the shim protocol (docs/shim-protocol.md).

``python -m qconform.harness.transport.host --adapter NAME [--device D]`` loads a registered
adapter and answers protocol requests on stdin/stdout until ``shutdown`` or EOF.

Stdout belongs to the protocol alone: before the adapter is loaded, file
descriptor 1 is pointed at stderr (and fd 0 at /dev/null), so a stray ``print``,
a C++ warning or a child process of the implementation cannot corrupt a reply.
Exceptions in ``run_batch`` become per-case errors: the batch is re-run one case
at a time so each exception is pinned to the case that raised it.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import traceback
from typing import Any, BinaryIO, Callable, Protocol, Sequence, runtime_checkable

from qconform.harness.adapter import Adapter, AdapterError, Unimplemented
from qconform.harness.transport.arena import map_arena
from qconform.harness.transport.client import TCP_PREFIX
from qconform.harness.transport.shim_protocol import (
    BINARY_PAYLOAD,
    OPS,
    PROTOCOL_VERSION,
    STRICT_JSON,
    ProtocolError,
    config_to_json,
    decode_line,
    encode_binary,
    encode_message,
    join_sections,
    outcome_to_entry,
    section_sizes,
    to_json_blobs,
    to_raw_blobs,
    to_sections,
)
from qconform.harness.transport.window import WindowError, WindowMap, window_range


@runtime_checkable
class StreamCorrupter(Protocol):
    """An adapter that asks for the protocol's output stream, to corrupt it: only the
    deliberately broken ``faulty:garbage`` (adapters/faulty.py)."""

    protocol_out: BinaryIO | None


def claim_stdio() -> tuple[BinaryIO, BinaryIO]:
    """Take private copies of fds 0/1 for the protocol; send fd 1 to stderr, fd 0 to /dev/null."""
    sys.stdout.flush()
    proto_in = os.fdopen(os.dup(0), "rb")
    proto_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    sys.stdout = sys.stderr
    return proto_in, proto_out


def describe_exception(exc: BaseException) -> str:
    """``Type: message (at file:line)`` of the innermost frame."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


def entry_json(outcome: Any, sections: list[bytes | memoryview] | None = None, raw: bool = False) -> str:
    """One serialized output entry; an outcome that is not strict JSON becomes an error entry.
    With ``sections`` (binary payloads), its blobs' bytes are appended there instead; else
    ``raw`` (an adapter that may answer raw blobs) puts its raw blobs in base64."""
    if not isinstance(outcome, (dict, Unimplemented, AdapterError)):
        outcome = AdapterError(f"run_batch returned a {type(outcome).__name__} where an output object belongs")
    entry, mark = outcome_to_entry(outcome), 0
    try:
        if sections is not None:
            mark = len(sections)
            entry = to_sections(entry, sections)
        elif raw:
            entry = to_json_blobs(entry)
        return STRICT_JSON.encode(entry)  # the standard module's errors: orjson would write Enum members
    except (TypeError, ValueError) as exc:
        if sections is not None:
            del sections[mark:]
        return json.dumps(outcome_to_entry(AdapterError(f"output is not strict JSON: {exc}")), separators=(",", ":"))


def entries_json(outcomes: list, sections: list[bytes | memoryview] | None = None, raw: bool = False) -> str:
    """The serialized output entries of ``outcomes``, comma-separated, as :func:`entry_json` writes
    them one by one (``sections`` and ``raw`` as there), in one walk and one encoding of the whole
    list where every outcome is an outcome object and strict JSON (the usual case: issue #24, the
    host's per-case work on the answer path); else one by one, from the start, so that each
    outcome that is not becomes its own error entry."""
    entries = [outcome_to_entry(o) for o in outcomes if isinstance(o, (dict, Unimplemented, AdapterError))]
    if len(entries) == len(outcomes):
        mark = 0 if sections is None else len(sections)
        try:
            if sections is not None:
                whole = to_sections(entries, sections)
            else:
                whole = to_json_blobs(entries) if raw else entries
            return STRICT_JSON.encode(whole)[1:-1]  # "[e1,e2,...]": the same bytes as the entries joined
        except (TypeError, ValueError):
            if sections is not None:
                del sections[mark:]
    return ",".join(entry_json(outcome, sections, raw) for outcome in outcomes)


def one_by_one(call: Callable[[list], Any], inputs: Sequence[dict], what: str) -> list[Any]:
    """Re-run a failed batch case by case so each exception lands on its own case."""
    outcomes: list[Any] = []
    for case_input in inputs:
        try:
            single = call([case_input])
        except Exception as exc:  # noqa: BLE001 - the adapter's failure is the result
            outcomes.append(AdapterError(describe_exception(exc)))
            continue
        if not isinstance(single, list) or len(single) != 1:
            outcomes.append(AdapterError(f"{what} returned {_count(single)} for 1 input"))
        else:
            outcomes.append(single[0])
    return outcomes


def _count(outcomes: Any) -> str:
    return f"{len(outcomes)} outcomes" if isinstance(outcomes, list) else f"a {type(outcomes).__name__}"


def batch_reply(
    call: Callable[[list], Any], what: str, request_id: Any, inputs: list, binary: bool = False, raw: bool = False
) -> bytes:
    """The serialized answer to a request whose outcomes ``call(inputs)`` computes
    (``what`` names the adapter method, for messages), in the binary form when ``binary``;
    ``raw``: the adapter may answer raw blobs (:attr:`Adapter.raw_blobs`)."""
    try:
        outcomes = call(inputs)
    except Exception:  # noqa: BLE001 - attribute it to cases below
        traceback.print_exc()  # to stderr, which the client quotes
        outcomes = one_by_one(call, inputs, what)
    if not isinstance(outcomes, list) or len(outcomes) != len(inputs):
        return error_reply(request_id, f"{what} returned {_count(outcomes)} for {len(inputs)} inputs")
    sections: list[bytes | memoryview] | None = [] if binary else None
    body = entries_json(outcomes, sections, raw)
    head = json.dumps(request_id)
    if not sections:
        return f'{{"id":{head},"status":"ok","outputs":[{body}]}}\n'.encode("utf-8")
    sizes = json.dumps([len(data) for data in sections], separators=(",", ":"))
    line = f'{{"id":{head},"status":"ok","outputs":[{body}],"sections":{sizes}}}\n'.encode("utf-8")
    return line + b"".join(sections)


def unimplemented_reply(adapter: Adapter, request_id: Any, what: str) -> bytes:
    return encode_message({"id": request_id, "status": "unimplemented", "reason": f"{adapter.name} does not {what}"})


def run_reply(
    adapter: Adapter, families: tuple[str, ...], request_id: Any, family: Any, inputs: Any, binary: bool = False
) -> bytes:
    """The serialized answer to one ``run`` request."""
    if not isinstance(family, str) or not isinstance(inputs, list):
        return error_reply(request_id, "run needs a string family and a list of inputs")
    if family not in families:
        return unimplemented_reply(adapter, request_id, f"implement {family}")
    return batch_reply(
        lambda batch: adapter.run_batch(family, batch), "run_batch", request_id, inputs, binary, adapter.raw_blobs
    )


def sample_reply(
    adapter: Adapter, sampling: tuple[str, ...], request_id: Any, request: dict, binary: bool = False
) -> bytes:
    """The serialized answer to one ``sample`` request (docs/stat-mode.md)."""
    family, inputs, samples, seed = (request.get(key) for key in ("family", "inputs", "samples", "seed"))
    if not isinstance(family, str) or not isinstance(inputs, list):
        return error_reply(request_id, "sample needs a string family and a list of inputs")
    if type(samples) is not int or samples < 1:
        return error_reply(request_id, f"sample needs a positive integer samples, got {samples!r}")
    if not isinstance(seed, str) or not seed.isdigit() or int(seed) >= 1 << 64:
        return error_reply(request_id, f"sample needs a 64-bit seed as a decimal string, got {seed!r}")
    if family not in sampling:
        return unimplemented_reply(adapter, request_id, f"sample {family}")
    return batch_reply(
        lambda batch: adapter.sample_batch(family, batch, samples, int(seed)),
        "sample_batch",
        request_id,
        inputs,
        binary,
        adapter.raw_blobs,
    )


def block_reply(
    adapter: Adapter,
    families: tuple[str, ...],
    request_id: Any,
    request: dict,
    binary: bool,
    window: WindowMap | None = None,
) -> bytes:
    """The serialized answer to one ``run_block`` request (docs/shim-protocol.md, "run_block"):
    the adapter's records as one ``u32`` blob, ``unimplemented`` when it has no block path. Where
    the request names the block ``window`` (docs/shim-protocol.md, "Block window"), the block is
    read from it in place and the records are written into its answer range, if they fit."""
    import numpy as np  # here: a child that is never sent a block does not load NumPy

    from qconform.harness.transport.blocks import BlockError, array_blob, block_arrays

    family = request.get("family")
    if not isinstance(family, str):
        return error_reply(request_id, "run_block needs a string family")
    if family not in families:
        return unimplemented_reply(adapter, request_id, f"implement {family}")
    try:
        view, answer = window_of(request.get("window"), window)
        block = block_arrays(request.get("block"), None if view is None else view.toreadonly())
    except (BlockError, WindowError) as exc:
        return error_reply(request_id, f"bad block: {exc}")
    try:
        records = adapter.run_block(family, block)
    except Exception as exc:  # noqa: BLE001 - the whole block failed: the harness asks case by case
        traceback.print_exc()
        return error_reply(request_id, describe_exception(exc))
    if isinstance(records, Unimplemented):
        return encode_message({"id": request_id, "status": "unimplemented", "reason": records.reason})
    try:
        blob = array_blob(np.asarray(records))
    except BlockError as exc:
        return error_reply(request_id, f"run_block returned {exc}")
    data = memoryview(blob["raw"]).cast("B")
    if view is not None and answer is not None and data.nbytes <= answer[1] - answer[0]:
        view[answer[0] : answer[0] + data.nbytes] = data
        blob = {"dtype": blob["dtype"], "shape": blob["shape"], "window": [answer[0], data.nbytes]}
        return encode_message({"id": request_id, "status": "ok", "records": blob})
    reply = {"id": request_id, "status": "ok", "records": blob}
    return encode_binary(reply) if binary else encode_message(to_json_blobs(reply))


def window_of(offer: Any, window: WindowMap | None) -> tuple[memoryview | None, tuple[int, int] | None]:
    """A ``run_block`` request's ``window`` field (``{"bytes": SIZE, "answer": [offset, length]}``,
    or absent) as the window's read-write view and the answer range ``(start, stop)``; (None, None)
    without the field; :class:`WindowError` for a field that is malformed, or with no window attached."""
    if offer is None:
        return None, None
    if window is None:
        raise WindowError("the request names the block window, but no window is attached")
    if not isinstance(offer, dict):
        raise WindowError(f"window must be an object with bytes and answer, got {offer!r}")
    view = window.view(offer.get("bytes"))
    return view, window_range(offer.get("answer"), view.nbytes, "window.answer")


def attach_window(offer: Any) -> WindowMap | None:
    """The block window offered (``{"fd": N}``), ready to map, or None when there is no offer or its
    descriptor is not a file (the harness then sends blocks as sections; said on stderr)."""
    if not isinstance(offer, dict):
        return None
    fd = offer.get("fd")
    if type(fd) is not int or fd < 0:
        print(f"qconform host: ignoring a malformed block window offer {offer!r}", file=sys.stderr)
        return None
    try:
        return WindowMap(fd)
    except OSError as exc:
        print(f"qconform host: cannot use the block window (fd {fd}): {exc}", file=sys.stderr)
        return None


def attach_arena(offer: Any) -> memoryview | None:
    """The read-only mapping of an offered arena (``{"fd": N, "bytes": SIZE}``), or None when there
    is no offer or it does not map (the harness then sends every blob inline; said on stderr)."""
    if not isinstance(offer, dict):
        return None
    fd, size = offer.get("fd"), offer.get("bytes")
    if type(fd) is not int or type(size) is not int or fd < 0 or size <= 0:
        print(f"qconform host: ignoring a malformed arena offer {offer!r}", file=sys.stderr)
        return None
    try:
        return map_arena(fd, size)
    except (OSError, ValueError) as exc:
        print(f"qconform host: cannot map the arena (fd {fd}, {size} bytes): {exc}", file=sys.stderr)
        return None


def error_reply(request_id: Any, message: str) -> bytes:
    return encode_message({"id": request_id, "status": "error", "message": message})


class Host:
    """The serving side of one adapter; with no adapter, every request but
    ``shutdown`` is answered with ``load_error`` (so the client can show it)."""

    def __init__(self, adapter: Adapter | None, load_error: str = "") -> None:
        self.adapter = adapter
        self.load_error = load_error
        self.families: tuple[str, ...] | None = None
        self.sampling: tuple[str, ...] | None = None
        #: binary payloads, once a ``get_config`` offered them (docs/shim-protocol.md)
        self.binary = False
        #: the shared arena's read-only mapping, once a ``get_config`` offered one that maps
        #: (docs/shim-protocol.md, "Shared arena")
        self.arena: memoryview | None = None
        #: the block window, once a ``get_config`` offered one that is a file ("Block window")
        self.window: WindowMap | None = None

    def answer(self, request: dict) -> tuple[bytes, bool]:
        """(reply line, keep serving) for one decoded request."""
        request_id, op = request.get("id"), request.get("op")
        if op == "shutdown":
            return encode_message({"id": request_id, "status": "ok"}), False
        if self.adapter is None:
            return error_reply(request_id, self.load_error), True
        if op == "get_config":
            config = self.adapter.config()
            self.families = config.capabilities.families
            self.sampling = config.capabilities.sampling
            offered = request.get("payload")
            self.binary = isinstance(offered, list) and BINARY_PAYLOAD in offered
            self.arena = attach_arena(request.get("arena")) if self.binary else None
            self.window = attach_window(request.get("window")) if self.binary else None
            answer = config_to_json(config) | ({"payload": BINARY_PAYLOAD} if self.binary else {})
            answer |= {"arena": True} if self.arena is not None else {}
            answer |= {"window": True} if self.window is not None else {}
            # pipelined requests (docs/shim-protocol.md): this host reads a request only after it wrote
            # the reply before it, so it takes every depth the harness offers, answering in order
            depth = request.get("pipeline")
            answer |= {"pipeline": depth} if type(depth) is int and depth > 1 else {}
            return encode_message({"id": request_id, "status": "ok", "config": answer}), True
        if op == "run":
            if self.families is None:
                self.families = self.adapter.capabilities().families
            family, inputs = request.get("family"), request.get("inputs")
            return run_reply(self.adapter, self.families, request_id, family, inputs, self.binary), True
        if op == "run_block":
            if self.families is None:
                self.families = self.adapter.capabilities().families
            return block_reply(self.adapter, self.families, request_id, request, self.binary, self.window), True
        if op == "sample":
            if self.sampling is None:
                self.sampling = self.adapter.capabilities().sampling
            return sample_reply(self.adapter, self.sampling, request_id, request, self.binary), True
        message = f"unknown op {op!r}; protocol {PROTOCOL_VERSION} has {', '.join(OPS)}"
        return error_reply(request_id, message), True

    def serve(self, proto_in: BinaryIO, proto_out: BinaryIO) -> int:
        """Answer requests until ``shutdown`` or EOF."""
        for line in proto_in:
            if not line.strip():
                continue
            try:
                request = decode_line(line, "request")
                # a block's arrays are read raw whatever the adapter takes (blocks.block_arrays reads both)
                raw = self.adapter is not None and (self.adapter.raw_blobs or request.get("op") == "run_block")
                if self.binary:  # sections and arena ranges: raw adapters get memoryviews, no copy
                    sizes = section_sizes(request)
                    request = join_sections(request, proto_in.read(sum(sizes)) if sizes else b"", raw, self.arena)
                elif raw:
                    request = to_raw_blobs(request)
            except ProtocolError as exc:
                reply, keep_serving = error_reply(None, f"bad request: {exc}"), True
            else:
                try:
                    reply, keep_serving = self.answer(request)
                except Exception as exc:  # noqa: BLE001 - e.g. capabilities() raised: report it
                    reply, keep_serving = error_reply(request.get("id"), describe_exception(exc)), True
            proto_out.write(reply)
            proto_out.flush()
            if not keep_serving:
                break
        return 0


def construct_adapter(name: str, device: str = "cpu") -> Adapter:
    """The adapter ``name`` on ``device``, in this process: the transport adapter of the
    endpoint at a ``tcp://HOST:PORT`` name, else the catalog's or an entry point's
    (:func:`qconform.adapters.catalog.load_adapter`)."""
    if name.startswith(TCP_PREFIX):
        from qconform.harness.transport.tcp_adapter import TcpAdapter

        return TcpAdapter(name, device)
    from qconform.adapters.catalog import load_adapter

    return load_adapter(name, device)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m qconform.harness.transport.host", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("--adapter", required=True, help="registered adapter name (docs/adapters.md)")
    parser.add_argument("--device", default="cpu", help="device to run on (default cpu)")
    args = parser.parse_args(argv)
    proto_in, proto_out = claim_stdio()
    from qconform.adapters.catalog import MissingExtra

    adapter, load_error = None, ""
    try:
        adapter = construct_adapter(args.adapter, args.device)
    except MissingExtra as exc:  # one line naming the extra, no traceback
        load_error = f"cannot load adapter {args.adapter!r}: {exc}"
    except Exception as exc:  # noqa: BLE001 - reported through get_config
        traceback.print_exc()
        load_error = f"cannot load adapter {args.adapter!r} on {args.device}: {describe_exception(exc)}"
    if isinstance(adapter, StreamCorrupter):
        adapter.protocol_out = proto_out
    # what is loaded now (the adapter's modules: torch's are hundreds of thousands of objects)
    # lives as long as the process: no collection of the cycle collector need scan it again
    gc.freeze()
    return Host(adapter, load_error).serve(proto_in, proto_out)


if __name__ == "__main__":
    sys.exit(main())
