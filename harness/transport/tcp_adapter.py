"""The transport adapter: ``--adapter tcp://HOST:PORT`` drives a wire v2 endpoint over TCP.

It is an ordinary :class:`~qconform.harness.adapter.Adapter` (served by the
adapter host like any other, so the runner, verdicts and reports are the usual
ones). It asks the endpoint what it is (the ``about`` command of the
test-control protocol, docs/endpoint.md) and declares the families its role
serves:

* a **verifier** (receiver) plays ``wire_frames``: per case, a fresh receiver
  under the case's configuration (``configure``), the HELLO when the case is
  negotiated, then the frame in a CHECK envelope, whose answer is the verdict;
  and ``wire_sessions``: every event in order (frames in APPLY envelopes, the
  ``timeout`` command, a real TCP disconnect and reconnection), then the final
  state and counters. R18 is checked on the side: a frame whose declared length
  fails the negotiated bounds must cost the endpoint no payload allocation (as
  the endpoint reports it in ``allocated``; no report is taken as none), else
  the answer is the refusal ``ALLOCATED_BEFORE_BOUNDS`` (a ``fail``); an
  ``encode`` case is the ``encode`` command, whose frame is the answer;
* a **worker** (drafter leader) plays ``proposal_chain`` end to end: the case's
  draft model goes to the worker (``configure``), then on a fresh connection the
  harness is the target: it negotiates the worker's HELLO, sends RESET and STEP,
  and passes every frame that comes back through the spec's own receiver
  (``qconform.spec.wire.receiver``). The round's tokens and validated q rows,
  with the draws the worker reports (``trace``), are the answer, which the
  family's comparator checks against the spec draw for draw. A frame the spec
  receiver refuses makes the answer ``WIRE_<REASON>`` (a ``fail``). A chain the
  spec refuses for its shapes or ``x_0`` (``check_shapes``, ``check_factors``), or
  whose k the negotiation refuses (``k > V``), cannot be carried: the worker loads
  its model out of band and no round exists to play, so it is ``unsupported``;
  and ``worker_sessions`` over real connections: per case, a control connection
  (its HELLO accepted, so no watchdog ends it) ``configure``s the worker (the
  HELLO shape, the draft model, the session IDs of the case's connections in
  order); each ``connect`` opens a real connection (the worker's HELLO comes
  first), each ``frame`` is written on its connection as it is, followed by a
  ``sync`` whose answer (the verdict and draws) comes after every frame the
  event made the worker send, or the end of the stream (the worker closed: the
  control connection asks ``closed`` for the event's verdict); ``answer_timeout``
  is the command of that name, a ``disconnect`` a real close (then
  ``disconnect_status``); finally ``state``, its connection numbers read back as
  the case's connection labels.
"""

from __future__ import annotations

import socket
import struct
from typing import Sequence
from urllib.parse import urlsplit

from qconform.adapters.endpoint import control
from qconform.generators.encoding import decode_blob, encode_blob
from qconform.generators.families.proposal_chain import decode_input
from qconform.generators.families.wire_frames import fields_to_json, hello_from_json, q_row_json
from qconform.harness.adapter import Adapter, AdapterError, Capabilities, Outcome, PrecisionProfile, Unimplemented
from qconform.harness.transport.client import TCP_PREFIX
from qconform.harness.transport.shim_protocol import ProtocolError, parse_precision
from qconform.spec.errors import SpecError
from qconform.spec.markov import check_factors
from qconform.spec.proposal import check_shapes
from qconform.spec.wire import layout
from qconform.spec.wire.codec import decode_frame, encode_frame
from qconform.spec.wire.header import check_header, parse_header
from qconform.spec.wire.messages import Hello, HelloAnswer, Reply, Reset, Step
from qconform.spec.wire.negotiation import example_config
from qconform.spec.wire.reasons import WireReject
from qconform.spec.wire.receiver import ACCEPT, FrameIn, consumable_rows, initial_state, step
from qconform.spec.wire.validation import payload_bounds

#: seconds one socket operation may take
IO_TIMEOUT_S = 30.0
#: largest frame the harness reads from a worker
MAX_FRAME = 64 << 20
ONE_F32 = 0x3F800000
#: answer of a wire_frames case whose frame was refused on its bounds after the endpoint allocated its payload
ALLOCATED_BEFORE_BOUNDS = "ALLOCATED_BEFORE_BOUNDS"
#: a worker's answer timeout during a worker_sessions case: its watchdog fires only by the case's events
CASE_ANSWER_TIMEOUT_S = 600.0
#: the worker number of a connection that never existed (its watchdog is ``ignore``)
NO_CONNECTION = -1


class EndpointFailure(Exception):
    """The endpoint broke the control protocol or the connection; its cases are errors."""


class LinkClosed(EndpointFailure):
    """The endpoint ended the connection (the end of the stream, a reset or a broken pipe)."""


class RoundRefused(Exception):
    """The spec's receiver refused a frame of the round, or the worker gave the round up."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


def parse_tcp_url(url: str) -> tuple[str, int]:
    """``(host, port)`` of ``tcp://HOST:PORT``; ValueError otherwise."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if (
        not url.startswith(TCP_PREFIX)
        or not parts.hostname
        or port is None
        or parts.path not in ("", "/")
        or parts.query
    ):
        raise ValueError(f"{url!r} is not tcp://HOST:PORT")
    return parts.hostname, port


class EndpointLink:
    """One blocking connection to an endpoint: control envelopes out, answers and frames in."""

    def __init__(self, host: str, port: int, timeout_s: float = IO_TIMEOUT_S) -> None:
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout_s)
        except OSError as exc:
            raise EndpointFailure(f"cannot connect to {host}:{port}: {exc}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        #: wire frames that arrived while an answer was awaited
        self.frames: list[bytes] = []

    def close(self) -> None:
        self.sock.close()

    def read_exact(self, count: int) -> bytes:
        chunks, left = [], count
        try:
            while left:
                chunk = self.sock.recv(min(left, 1 << 20))
                if not chunk:
                    raise LinkClosed("the endpoint closed the connection")
                chunks.append(chunk)
                left -= len(chunk)
        except ConnectionError as exc:
            raise LinkClosed(f"reading from the endpoint: {exc}") from None
        except OSError as exc:
            raise EndpointFailure(f"reading from the endpoint: {exc}") from None
        return b"".join(chunks)

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except ConnectionError as exc:
            raise LinkClosed(f"writing to the endpoint: {exc}") from None
        except OSError as exc:
            raise EndpointFailure(f"writing to the endpoint: {exc}") from None

    def read_item(self) -> tuple[int, bytes]:
        """``(envelope kind, body)``, or ``(0, frame bytes)`` for a v2 frame (header checked by the spec)."""
        magic = self.read_exact(4)
        if magic == control.MAGIC:
            kind, length = control.body_length(magic + self.read_exact(control.ENVELOPE_SIZE - 4))
            return kind, self.read_exact(length)
        if magic != layout.V2_MAGIC:
            raise WireReject("BAD_MAGIC", f"{magic!r} on the worker's stream")
        head = magic + self.read_exact(layout.HEADER_SIZE - 4)
        header = parse_header(head)
        check_header(header)
        if header.payload_length > MAX_FRAME:
            raise WireReject("UNEXPECTED_SIZE", f"a {header.payload_length}-byte payload")
        return 0, head + self.read_exact(header.payload_length)

    def read_frame(self) -> bytes:
        """The next item, which must be a wire frame."""
        kind, data = self.read_item()
        if kind:
            raise EndpointFailure(f"an envelope of kind {kind} where a wire frame belongs")
        return data

    def request(self, kind: int, body: bytes) -> dict:
        """Send one envelope and return the endpoint's JSON answer (frames meanwhile are kept)."""
        self.send(control.envelope(kind, body))
        while True:
            answer_kind, data = self.read_item()
            if answer_kind == control.ANSWER:
                answer = control.json_body(data)
                if "error" in answer:
                    raise EndpointFailure(f"the endpoint refused the request: {answer['error']}")
                return answer
            if answer_kind:
                raise EndpointFailure(f"envelope kind {answer_kind} where an answer belongs")
            self.frames.append(data)

    def command(self, op: str, **args) -> dict:
        return self.request(control.COMMAND, control.json_bytes({"op": op, **args}))


def allocation_bound(data: bytes, params, negotiated: bool) -> int:
    """The payload bytes a decoder may allocate for ``data`` before refusing it (R18).

    Zero unless the header is sound and the declared length lies within the
    negotiated bounds and the bytes present; then the declared length.
    """
    if len(data) < 4:
        return 0
    if data[:4] == layout.V1_MAGIC:
        if len(data) < layout.V1_HEADER_SIZE:
            return 0
        _, version, kind, length = struct.unpack_from("<4sHHI", data)
        ok = (version, kind) == (
            layout.V1_VERSION,
            layout.V1_GREEDY.code,
        ) and 4 <= length <= 4 + 4 * layout.V1_MAX_TOKENS
        return length if ok and len(data) == layout.V1_HEADER_SIZE + length else 0
    if data[:4] != layout.V2_MAGIC or len(data) < layout.HEADER_SIZE:
        return 0
    header = parse_header(data[: layout.HEADER_SIZE])
    try:
        check_header(header)
    except WireReject:
        return 0
    message = layout.MESSAGES[header.message_type]
    if not negotiated and message is not layout.HELLO:
        return 0
    least, greatest = payload_bounds(message, params if negotiated else None)
    fits = least <= header.payload_length <= greatest and len(data) == layout.HEADER_SIZE + header.payload_length
    return header.payload_length if fits else 0


class TcpAdapter(Adapter):
    """A wire v2 endpoint under test, reached over TCP (see the module docstring)."""

    def __init__(self, url: str, device: str = "cpu") -> None:
        super().__init__(device)
        self.name = url
        self.host, self.port = parse_tcp_url(url)
        link = self.link()
        try:
            self.about = link.command("about")
        finally:
            link.close()

    def link(self) -> EndpointLink:
        return EndpointLink(self.host, self.port)

    def capabilities(self) -> Capabilities:
        return Capabilities(
            families=tuple(self.about.get("families", ())),
            injected_draws=True,
            devices=tuple(self.about.get("devices", ("cpu",))),
        )

    def precision(self) -> PrecisionProfile:
        try:
            return parse_precision(self.about.get("precision", {}))
        except ProtocolError as exc:
            raise EndpointFailure(f"the endpoint's precision profile: {exc}") from None

    def run_batch(self, family: str, inputs: Sequence[dict]) -> list[Outcome]:
        play = {
            "wire_frames": self.wire_frames,
            "wire_sessions": self.wire_sessions,
            "proposal_chain": self.proposal_chain,
            "worker_sessions": self.worker_sessions,
        }[family]
        try:
            return play(list(inputs))
        except (EndpointFailure, control.ControlError) as exc:
            return [AdapterError(f"endpoint {self.name}: {exc}")] * len(inputs)

    # -- verifier families ---------------------------------------------------------------------

    def wire_frames(self, inputs: list[dict]) -> list[Outcome]:
        link = self.link()
        try:
            return [self.frame_case(link, inp) for inp in inputs]
        finally:
            link.close()

    def frame_case(self, link: EndpointLink, inp: dict) -> dict:
        if "encode" in inp:  # the endpoint's own sender writes the message's frame
            return {"frame": link.command("encode", config=inp["hello"], message=inp["encode"])["frame"]}
        link.command("configure", config=inp["hello"])
        params = hello_from_json(inp["hello"])
        if inp["negotiated"]:
            hello = link.request(control.APPLY, encode_frame(params))
            if hello["verdict"] != ACCEPT:
                return {"error": f"HELLO_REFUSED_{hello.get('reason')}"}
        data = bytes(decode_blob(inp["frame"], "u8")[0])
        answer = link.request(control.CHECK, data)
        if answer.get("allocated", 0) > allocation_bound(data, params, inp["negotiated"]):
            return {"error": ALLOCATED_BEFORE_BOUNDS}
        return {key: answer[key] for key in ("verdict", "reason", "message") if key in answer}

    def wire_sessions(self, inputs: list[dict]) -> list[Outcome]:
        return [self.session_case(inp) for inp in inputs]

    def session_case(self, inp: dict) -> dict:
        """One real TCP connection per connection number of the case (opened at its first event);
        a disconnect closes it for real and the next event of that number opens a new one."""
        links = {0: self.link()}
        try:
            links[0].command("configure", config=inp["config"])
            verdicts = []
            for event in inp["events"]:
                label = event.get("connection", 0)
                if label not in links:
                    links[label] = self.link()
                link = links[label]
                if "frame" in event:
                    answer = link.request(control.APPLY, bytes(decode_blob(event["frame"], "u8")[0]))
                elif "timeout" in event:
                    answer = link.command("timeout", slot=event["timeout"])
                else:
                    number = link.command("connection")["connection"]
                    link.close()
                    links[label] = self.link()
                    answer = links[label].command("disconnect_status", connection=number)
                verdicts.append(
                    {key: answer[key] for key in ("verdict", "reason", "discarded", "answer") if key in answer}
                )
            state = links[0].command("state")
            return {"verdicts": verdicts, "final": state["final"], "counters": state["counters"]}
        finally:
            for link in links.values():
                link.close()

    # -- worker family ---------------------------------------------------------------------------

    def proposal_chain(self, inputs: list[dict]) -> list[Outcome]:
        return [self.chain_case(inp) for inp in inputs]

    def chain_case(self, inp: dict) -> Outcome:
        vocab = decode_blob(inp["base_logits"])[1][1]
        k = inp["support"].get("k", 0)
        try:
            chain = decode_input(inp)
            check_shapes(chain)
            check_factors(chain.last_committed_token, chain.markov_left, chain.markov_right)
            config = example_config(vocab=vocab, max_support=k or min(16, vocab), depth=inp["depth"])
        except SpecError as refused:
            return Unimplemented(
                f"a wire v2 worker loads its draft model out of band (control configure) and negotiates "
                f"k <= V; this chain is refused before any round ({refused.code}), so no round can carry it"
            )
        model = {
            "base_logits": inp["base_logits"],
            "markov": inp["markov"],
            "last_committed_token": inp["last_committed_token"],
        }
        link = self.link()
        try:
            link.command("configure", hello=fields_to_json(config), model=model)
        finally:
            link.close()
        link = self.link()
        try:
            return self.play_round(link, config, inp, k)
        except (WireReject, RoundRefused) as refused:
            return {"error": f"WIRE_{refused.code}"}
        finally:
            link.close()

    def play_round(self, link: EndpointLink, config, inp: dict, k: int) -> dict:
        """The harness as the target of one round; every frame through the spec's receiver."""
        state = initial_state(config)

        def through(data: bytes, own: bool) -> None:
            nonlocal state
            state, verdict = step(state, FrameIn(data))
            if verdict.answer is not None:  # the worker's HELLO gets its answer
                link.send(verdict.answer)
            if verdict.kind != ACCEPT or verdict.discarded:
                raise RoundRefused(verdict.reason or "WORKER_FAILED")
            if own:
                link.send(data)

        through(link.read_frame(), own=False)  # the worker's HELLO
        session = state.negotiated.session_id
        seed, generation, round_id, anchor = int(inp["seed"]), inp["generation"], inp["round"], inp["anchor"]
        through(encode_frame(Reset(session, seed, generation, anchor, 0, inp["last_committed_token"])), own=True)
        step_message = Step(
            session, generation, round_id, anchor, k, 1, int(inp["temperature"]["f32"], 16), 0, config.depth, bytes(32)
        )
        through(encode_frame(step_message), own=True)
        tokens = []
        while consumable_rows(state, 0) is None:
            data = link.read_frame()
            through(data, own=False)
            message = decode_frame(data, state.negotiated)
            if isinstance(message, Reply):
                tokens.append(message.token)
        rows = consumable_rows(state, 0)
        draws = link.command("trace", slot=0)["draws"]
        return {"tokens": tokens, "rows": [q_row_json(row) for row in rows], "draws": draws}

    def worker_sessions(self, inputs: list[dict]) -> list[Outcome]:
        return [self.worker_case(inp) for inp in inputs]

    def worker_case(self, inp: dict) -> dict:
        """One case: every event on the real connection of its label, then the worker's state."""
        control_link = self.link()
        session = WorkerSession(self)
        try:
            hello = decode_frame(control_link.read_frame(), None)
            if not isinstance(hello, Hello):
                raise EndpointFailure(f"the worker's first frame is a {type(hello).__name__}, not its HELLO")
            control_link.send(encode_frame(HelloAnswer(hello.session_id, layout.HELLO_ACCEPTED, bytes(32))))
            model = inp["model"]
            control_link.command(
                "configure",
                hello={**inp["config"], "session_id": "0"},
                model={
                    "base_logits": model["base_logits"],
                    "markov": model["markov"],
                    "last_committed_token": model["start_token"],
                },
                sessions=[event["session_id"] for event in inp["events"] if "connect" in event],
                answer_timeout_s=CASE_ANSWER_TIMEOUT_S,
            )
            outputs = [session.play(control_link, event) for event in inp["events"]]
            state = control_link.command("state")
        finally:
            session.close()
            control_link.close()
        return {"outputs": outputs, "final": session.relabeled(state["final"]), "counters": state["counters"]}


class WorkerSession:
    """The real connections of one ``worker_sessions`` case, by the case's connection labels."""

    def __init__(self, adapter: TcpAdapter) -> None:
        self.adapter = adapter
        #: label -> its open connection
        self.links: dict[int, EndpointLink] = {}
        #: label -> the worker's number of the label's latest connection
        self.numbers: dict[int, int] = {}

    def play(self, control_link: EndpointLink, event: dict) -> dict:
        """One event; its output in the family's shape."""
        label = event["connection"]
        if "connect" in event:
            link = self.links[label] = self.adapter.link()
            self.numbers[label] = link.command("connection")["connection"]  # the HELLO arrives first
            return self.synced(control_link, label, link)
        if "frame" in event:
            link = self.links[label]
            data = bytes(decode_blob(event["frame"], "u8")[0])
            cut = cut_short(data)
            try:
                link.send(data)
                if cut:  # the bytes end there: only the end of the stream can say so
                    link.sock.shutdown(socket.SHUT_WR)
            except (LinkClosed, OSError):
                pass  # the worker ended the connection: ``synced`` asks why
            return self.synced(control_link, label, link, ask=not cut)
        if "answer_timeout" in event:
            if label in self.links:
                answer = self.links[label].command("answer_timeout")
                if answer["close"]:
                    self.links.pop(label).close()
            else:
                answer = control_link.command("answer_timeout", connection=self.numbers.get(label, NO_CONNECTION))
            return output_json(answer, [], answer["close"])
        link = self.links.pop(label, None)
        if link is not None:
            link.close()
        return output_json(control_link.command("disconnect_status", connection=self.numbers[label]), [], False)

    def synced(self, control_link: EndpointLink, label: int, link: EndpointLink, ask: bool = True) -> dict:
        """The frames the event made the worker send and its verdict: up to the ``sync`` answer, or up to
        the end of the stream (then the verdict of the event on which the worker ended it). ``ask``
        False: no ``sync`` can follow (the stream was ended after a frame cut short)."""
        try:
            if not ask:
                while True:
                    link.frames.append(link.read_frame())
            answer, close = link.command("sync"), False
        except LinkClosed:
            answer = control_link.command("closed", connection=self.numbers[label])
            close = bool(answer.get("close", True))
            self.links.pop(label).close()
        frames, link.frames = link.frames, []
        return output_json(answer, frames, close)

    def relabeled(self, final: dict) -> dict:
        """The worker's state with its connection numbers read as the case's labels."""
        labels = {number: label for label, number in self.numbers.items()}
        connections = [{**c, "connection": labels.get(c["connection"], c["connection"])} for c in final["connections"]]
        slots = [{**slot, "owner": labels.get(slot["owner"], slot["owner"])} for slot in final["slots"]]
        return {"connections": sorted(connections, key=lambda c: c["connection"]), "slots": slots}

    def close(self) -> None:
        for link in self.links.values():
            link.close()


def cut_short(data: bytes) -> bool:
    """Whether a frame's bytes end before the frame does (fewer than a magic, a header, or its declared
    payload): on a stream the reader learns it only from the end of the stream."""
    if len(data) < 4:
        return True
    if data[:4] == layout.V1_MAGIC:
        if len(data) < layout.V1_HEADER_SIZE:
            return True
        return len(data) < layout.V1_HEADER_SIZE + struct.unpack_from("<I", data, 8)[0]
    if data[:4] != layout.V2_MAGIC:
        return False
    if len(data) < layout.HEADER_SIZE:
        return True
    return len(data) < layout.HEADER_SIZE + parse_header(data[: layout.HEADER_SIZE]).payload_length


def output_json(answer: dict, frames: list[bytes], close: bool) -> dict:
    """One event's output: the worker's verdict (and reason), the frames it sent, close, its draws."""
    out = {
        "verdict": answer["verdict"],
        "frames": [encode_blob("u8", list(frame)) for frame in frames],
        "close": close,
        "draws": answer.get("draws", []),
    }
    if "reason" in answer:
        out["reason"] = answer["reason"]
    return out
