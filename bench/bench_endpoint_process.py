"""The endpoint as a process: a client that only sends and reads, against `qconform endpoint verifier` and a plain sink.

Run from the repository root: ``.venv/bin/python bench/bench_endpoint_process.py``
(``--rounds 150``, ``--runs 5``, ``--vocab V``, ``--requests B``, ``--log-level``).

bench_wire_loopback.py times the endpoint's receive path inside its own process. This script
times the real thing (issue #24): a separate ``qconform endpoint verifier`` process (its receiving
role, every frame through its receiver), and a client in this process that only sends the bytes
of each round and reads one answer, over loopback TCP. Each round is a fresh generation on every
slot: per request its RESET (generation g) and STEP, then its K = 5 dense REPLY frames of
V = 129280 FP32 q values and its COMPLETION (the frames of bench_wire_loopback.py, encoded before
the round, outside the clock), then one control command (``{"op": "connection"}``) whose answer
comes back once the verifier has fed every frame before it to its receiver: the round's end.

The same client sends the same bytes to a **plain socket sink**, a second process of this script
(``--serve-sink``) that ``recv_into``s one preallocated buffer the round's byte count and then
writes an answer of the same size as the verifier's, nothing parsed. The goal (issue #24): the
endpoint's round at most 2.5x the sink's, over runs of at least 150 rounds. Rounds alternate
between the two (endpoint, then sink, the same round's bytes), so the machine's load hits both
alike. Each run starts both processes afresh: their start-up (spawn to ``listening on``, then the
HELLO and its HELLO_ANSWER for the verifier) is reported apart and is in no round. After each run
the verifier's counters (``{"op": "state"}``) must show every REPLY and COMPLETION accepted, so a
round refused early cannot pass for a fast one. Per run: the median round (wall clock, ms) of each,
their ratio, and each process's CPU time per round (``/proc/PID/stat``, the run's total / rounds).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench_wire_loopback import DEPTH, batch_rows, encode_batch, step_messages

from qconform.adapters.endpoint import control, layout
from qconform.adapters.endpoint.codec import Message, encode
from qconform.adapters.endpoint.deployment import hello_config

#: issue #24's goal: the endpoint's round at most this multiple of the plain sink's
GOAL = 2.5
SYNC = control.json_envelope(control.COMMAND, {"op": "connection"})
ROOT = Path(__file__).resolve().parents[1]


def round_frames(params: dict, steps: list[Message], generation: int, counts, tokens) -> list[bytes]:
    """One round on every slot at ``generation``: per request RESET and STEP, then the batch's REPLY
    and COMPLETION frames, then the sync command."""
    steps = [Message(layout.STEP, {**step.fields, "generation": generation}) for step in steps]
    frames = []
    for step in steps:
        reset = {
            "session_id": params["session_id"],
            "seed": 0x5EED,
            "generation": generation,
            "committed": step["anchor"],
            "slot": step["slot"],
            "token": layout.NO_TOKEN,
        }
        frames += [encode(layout.RESET, reset), encode(layout.STEP, step.fields)]
    return frames + encode_batch(steps, counts, tokens, params["dense_stride"]) + [SYNC]


def read_exactly(sock: socket.socket, buffer: memoryview) -> None:
    got = 0
    while got < len(buffer):
        count = sock.recv_into(buffer[got:])
        if not count:
            raise ConnectionError("the peer closed the connection")
        got += count


def read_envelope(sock: socket.socket) -> bytes:
    """One control envelope (12-byte header, then its body)."""
    head = bytearray(control.ENVELOPE_SIZE)
    read_exactly(sock, memoryview(head))
    _, length = control.body_length(bytes(head))
    body = bytearray(length)
    read_exactly(sock, memoryview(body))
    return bytes(head + body)


def one_round(sock: socket.socket, frames: list[bytes]) -> tuple[float, bytes]:
    """Send the round, read its answer: (wall seconds, the answer)."""
    start = time.perf_counter()
    for frame in frames:
        sock.sendall(frame)
    answer = read_envelope(sock)
    return time.perf_counter() - start, answer


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def listening(proc: subprocess.Popen) -> tuple[str, int]:
    """The address of a started server, from its ``listening on HOST:PORT`` line on stderr."""
    assert proc.stderr is not None
    for line in proc.stderr:
        if "listening on" in line:
            host, port = line.rsplit(" ", 1)[1].strip().rsplit(":", 1)
            return host, int(port)
    raise RuntimeError(f"the server exited ({proc.wait()}) before listening")


def start(command: list[str]) -> tuple[subprocess.Popen, socket.socket, float]:
    """Start a server and connect: (process, connected socket, seconds from spawn to connected)."""
    began = time.perf_counter()
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    address = listening(proc)
    sock = socket.create_connection(address)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return proc, sock, time.perf_counter() - began


def stop(proc: subprocess.Popen, sock: socket.socket) -> None:
    sock.close()
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def serve_sink(round_bytes: int, answer: bytes) -> int:
    """The plain socket sink (``--serve-sink``): per round, ``recv_into`` one preallocated buffer the
    round's bytes, then write ``answer``; nothing parsed. One connection, until it closes."""
    server = socket.create_server(("127.0.0.1", 0))
    print(f"sink listening on 127.0.0.1:{server.getsockname()[1]}", file=sys.stderr, flush=True)
    sock, _ = server.accept()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buffer = memoryview(bytearray(round_bytes))
    try:
        while True:
            read_exactly(sock, buffer)
            sock.sendall(answer)
    except ConnectionError:
        return 0


def state_counters(sock: socket.socket) -> dict:
    sock.sendall(control.json_envelope(control.COMMAND, {"op": "state"}))
    return control.json_body(read_envelope(sock)[control.ENVELOPE_SIZE :])


def run(args: argparse.Namespace, params: dict, rounds_frames, counts, tokens, steps) -> dict:
    """One run: both servers started afresh, ``args.rounds`` timed rounds alternating between them."""
    verifier_cmd = [sys.executable, "-m", "qconform", "endpoint", "verifier", "--port", "0"]
    verifier_cmd += ["--vocab", str(args.vocab), "--log-level", args.log_level]
    verifier, vsock, verifier_start = start(verifier_cmd)
    began = time.perf_counter()
    vsock.sendall(encode(layout.HELLO, params))
    head = bytearray(layout.HEADER_SIZE)
    read_exactly(vsock, memoryview(head))  # the HELLO_ANSWER: its header, then its payload
    _, _, _, header_length, payload, _ = layout.HEADER.unpack(head)
    read_exactly(vsock, memoryview(bytearray(header_length - layout.HEADER_SIZE + payload)))
    verifier_start += time.perf_counter() - began
    warm = rounds_frames(0)
    _, answer = one_round(vsock, warm)
    round_bytes = sum(len(f) for f in warm)
    sink_cmd = [sys.executable, str(Path(__file__).resolve()), "--serve-sink", str(round_bytes), answer.hex()]
    sink, ssock, sink_start = start(sink_cmd)
    one_round(ssock, warm)
    times: dict[str, list[float]] = {"endpoint": [], "sink": []}
    cpu = {"endpoint": -cpu_seconds(verifier.pid), "sink": -cpu_seconds(sink.pid)}
    for r in range(1, args.rounds + 1):
        frames = rounds_frames(r)
        assert sum(len(f) for f in frames) == round_bytes
        for name, sock in (("endpoint", vsock), ("sink", ssock)):
            seconds, got = one_round(sock, frames)
            assert len(got) == len(answer)
            times[name].append(seconds)
    cpu["endpoint"] += cpu_seconds(verifier.pid)
    cpu["sink"] += cpu_seconds(sink.pid)
    counters = state_counters(vsock)["counters"]
    stop(verifier, vsock)
    stop(sink, ssock)
    return {
        "times": times,
        "cpu": cpu,
        "start": (verifier_start, sink_start),
        "counters": counters,
        "round_bytes": round_bytes,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=150)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--vocab", type=int, default=129280)
    parser.add_argument("--requests", type=int, default=4)
    parser.add_argument("--log-level", default="warning", help="the verifier's (info logs one line per frame)")
    parser.add_argument("--serve-sink", nargs=2, metavar=("ROUND_BYTES", "ANSWER_HEX"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_sink:
        return serve_sink(int(args.serve_sink[0]), bytes.fromhex(args.serve_sink[1]))
    params = hello_config(vocab=args.vocab)
    steps = step_messages(params, args.requests)
    counts, tokens = batch_rows(args.requests, args.vocab)
    generation = iter(range(1, 1 << 30))

    def rounds_frames(_r: int) -> list[bytes]:
        return round_frames(params, steps, next(generation), counts, tokens)

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"endpoint process vs plain sink: B = {args.requests} x K = {DEPTH} dense rows, V = {args.vocab}; "
        f"{args.rounds} rounds a run, {args.runs} runs; verifier --log-level {args.log_level}; load {load}"
    )
    ratios, endpoint_ms, sink_ms = [], [], []
    for k in range(args.runs):
        generation = iter(range(1, 1 << 30))  # each run's verifier is fresh
        result = run(args, params, rounds_frames, counts, tokens, steps)
        e, s = (statistics.median(result["times"][n]) * 1e3 for n in ("endpoint", "sink"))
        ratios.append(e / s)
        endpoint_ms.append(e)
        sink_ms.append(s)
        # the HELLO, then per round and request RESET, STEP, K REPLYs and the COMPLETION (warm-up round included)
        frames = 1 + (args.rounds + 1) * args.requests * (DEPTH + 3)
        c = result["counters"]
        print(
            f"run {k + 1}: endpoint {e:.1f} ms / sink {s:.1f} ms = {e / s:.2f}x; CPU per round: verifier "
            f"{result['cpu']['endpoint'] / args.rounds * 1e3:.1f} ms, sink {result['cpu']['sink'] / args.rounds * 1e3:.1f} ms; "
            f"start-up: verifier {result['start'][0]:.2f} s, sink {result['start'][1]:.2f} s; "
            f"{result['round_bytes']:,} bytes a round; counters {c}",
            flush=True,
        )
        assert c.get("accepted") == frames, f"the verifier accepted {c.get('accepted')} of {frames} frames: {c}"
    ratio = statistics.median(ratios)
    print(
        f"endpoint / sink, median of {args.runs} runs (min-max): {ratio:.2f}x ({min(ratios):.2f}-{max(ratios):.2f}); "
        f"endpoint {statistics.median(endpoint_ms):.1f} ms, sink {statistics.median(sink_ms):.1f} ms a round; "
        f"goal {GOAL}x: {'met' if ratio <= GOAL else 'NOT met'}; load {', '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
