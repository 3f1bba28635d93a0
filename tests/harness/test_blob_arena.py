"""The shared blob arena (harness/transport/arena.py, docs/shim-protocol.md "Shared arena"):
decoded once at load, named by range on the binary channel, attached only by a child that
declares it, never left behind as a file, read by the judge in place."""

from __future__ import annotations

import base64
import io
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Sequence

import pytest

from qconform.adapters.faulty import ECHO_FAMILY, affected
from qconform.generators.encoding import decode_blob, encode_blob
from qconform.harness.adapter import (
    Adapter,
    AdapterError,
    AdapterStartError,
    Capabilities,
    Outcome,
    PrecisionProfile,
    owned_blobs,
)
from qconform.harness.judging.value_diff import blob_difference, expected_blob, expected_view, same_bytes
from qconform.harness.transport import arena as arena_module
from qconform.harness.transport.arena import BlobArena, arena_bytes, case_blobs
from qconform.harness.transport.client import open_adapter
from qconform.harness.transport.host import Host
from qconform.harness.transport.shim_protocol import (
    ProtocolError,
    binary_parts,
    decode_line,
    encode_binary,
    encode_message,
    join_sections,
)

REPO = Path(__file__).resolve().parents[2]
BLOBS = [encode_blob("u32", [i, i + 1, i + 2]) for i in range(6)]
INPUTS = [{"i": i, "counts": BLOBS[i]} for i in range(6)]


@pytest.fixture
def arena():
    built = BlobArena.build(blob["b64"] for blob in BLOBS)
    assert built is not None
    yield built
    built.close()


def split_message(data: bytes) -> tuple[dict, bytes]:
    line, _, rest = data.partition(b"\n")
    return decode_line(line), rest


def test_the_arena_holds_each_distinct_blob_once_and_nothing_that_does_not_decode():
    repeated = [BLOBS[0]["b64"], BLOBS[1]["b64"], BLOBS[0]["b64"], "not base64!"]
    built = BlobArena.build(repeated)
    assert built is not None
    try:
        assert built.size == 24 and list(built.index.values()) == [(0, 12), (12, 12)]
        assert bytes(built.bytes_of(BLOBS[1]["b64"]) or b"") == base64.b64decode(BLOBS[1]["b64"])
        assert built.bytes_of("not base64!") is None and built.bytes_of(BLOBS[2]["b64"]) is None
        assert built.view.readonly
        raw = built.to_raw({"a": [BLOBS[0], BLOBS[3]]})
        assert isinstance(raw["a"][0]["raw"], memoryview) and raw["a"][1] == BLOBS[3]  # not held: as it was
    finally:
        built.close()
    assert BlobArena.build([]) is None and BlobArena.build([encode_blob("u8", [])["b64"]]) is None  # no bytes


def test_case_blobs_walks_inputs_and_expected_values():
    cases = [{"input": {"x": [BLOBS[0], {"y": BLOBS[1]}]}, "expected": {"counts": BLOBS[2], "k": "1/2"}}]
    assert sorted(case_blobs(cases)) == sorted(b["b64"] for b in BLOBS[:3])


def test_the_file_has_no_name_and_is_sealed(arena):
    target = os.readlink(f"/proc/self/fd/{arena.fd}")
    assert target.startswith("/memfd:") or target.endswith("(deleted)"), target
    with pytest.raises(OSError):
        os.write(arena.fd, b"x")  # sealed (memfd) or at least never written again


def test_without_a_shared_file_the_blobs_travel_inline(monkeypatch):
    monkeypatch.setattr(arena_module, "anonymous_file", lambda: None)
    assert BlobArena.build(blob["b64"] for blob in BLOBS) is None


def test_the_fallback_file_is_unlinked_before_anything_is_written(monkeypatch, tmp_path):
    monkeypatch.delattr(os, "memfd_create", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    built = BlobArena.build(blob["b64"] for blob in BLOBS)
    assert built is not None
    try:
        assert list(tmp_path.iterdir()) == [] and os.readlink(f"/proc/self/fd/{built.fd}").endswith("(deleted)")
    finally:
        built.close()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))  # no writable temporary directory
    assert BlobArena.build(blob["b64"] for blob in BLOBS) is None


# --- the binary channel ----------------------------------------------------------------------


def test_blobs_the_arena_holds_name_their_range_and_the_others_a_section(arena):
    loose = encode_blob("u32", [99])
    message = {"id": 1, "inputs": [INPUTS[0], {"other": loose}]}
    head, rest = split_message(encode_binary(message, arena))
    assert head["inputs"][0]["counts"] == {"dtype": "u32", "shape": [3], "arena": [0, 12]}
    assert head["inputs"][1]["other"] == {"dtype": "u32", "shape": [1], "section": 0} and rest == bytes([99, 0, 0, 0])
    assert "b64" not in json.dumps(head)
    assert join_sections(head, rest, arena=arena.view) == message
    raw = join_sections(head, rest, raw=True, arena=arena.view)
    held = raw["inputs"][0]["counts"]["raw"]
    assert isinstance(held, memoryview) and held.readonly and held.obj is arena.view.obj  # in place, no copy
    assert type(raw["inputs"][1]["other"]["raw"]) is bytes  # a section is bytes of its own, as before


def test_a_message_all_of_whose_blobs_the_arena_holds_carries_no_base64(arena):
    line = encode_binary({"id": 1, "inputs": INPUTS}, arena)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert b"b64" not in line and b"sections" not in line


@pytest.mark.parametrize(
    "span, fragment",
    [
        ([70, 12], "a blob names arena bytes [70, 82), outside the 72-byte arena"),
        ([0, 73], "a blob names arena bytes [0, 73), outside the 72-byte arena"),
        ([-1, 4], "not [offset, length] in bytes"),
        ([0], "not [offset, length] in bytes"),
        ("0:4", "not [offset, length] in bytes"),
    ],
)
def test_an_arena_range_outside_the_arena_is_one_precise_error(arena, span, fragment):
    head = {"b": {"dtype": "u32", "shape": [3], "arena": span}}
    assert arena.size == 72  # six 12-byte blobs
    with pytest.raises(ProtocolError) as caught:
        join_sections(head, b"", arena=arena.view)
    assert fragment in str(caught.value)


def test_an_arena_range_without_an_attached_arena_is_one_precise_error():
    with pytest.raises(ProtocolError) as caught:
        join_sections({"b": {"dtype": "u32", "shape": [3], "arena": [0, 12]}}, b"")
    assert str(caught.value) == "a blob names arena bytes [0, 12), but no arena is attached"


class RecordingAdapter(Adapter):
    """Records what it was handed; answers each input's ``counts`` back."""

    name = "recording"
    raw_blobs = True

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        self.seen: list[dict] = []

    def capabilities(self) -> Capabilities:
        return Capabilities(families=("echo",))

    def precision(self) -> PrecisionProfile:
        return PrecisionProfile()

    def run_batch(self, family: str, inputs: Sequence[dict]) -> list[Outcome]:
        self.seen += inputs
        return [{"counts": case["counts"]} for case in inputs]


def host_exchange(arena: BlobArena, offer: dict | None, *requests: bytes) -> tuple[RecordingAdapter, list[bytes]]:
    adapter = RecordingAdapter()
    get_config = {"id": 1, "op": "get_config", "payload": ["json", "binary"]} | ({"arena": offer} if offer else {})
    out = io.BytesIO()
    assert Host(adapter).serve(io.BytesIO(encode_message(get_config) + b"".join(requests)), out) == 0
    return adapter, out.getvalue().split(b"\n", 1)


def test_the_host_attaches_an_offered_arena_and_hands_raw_adapters_views(arena):
    run = encode_binary({"id": 2, "op": "run", "family": "echo", "inputs": INPUTS[:2]}, arena)
    adapter, (config, rest) = host_exchange(arena, {"fd": arena.fd, "bytes": arena.size}, run)
    assert json.loads(config)["config"]["arena"] is True
    assert [bytes(case["counts"]["raw"]) for case in adapter.seen] == [
        bytes([0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0]),
        (bytes([1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0])),
    ]
    assert all(isinstance(case["counts"]["raw"], memoryview) for case in adapter.seen)
    head, data = split_message(rest)
    assert [entry["output"] for entry in join_sections(head, data)["outputs"]] == [
        {"counts": BLOBS[0]},
        {"counts": BLOBS[1]},
    ]
    assert owned_blobs(adapter.seen)[0]["counts"]["raw"] == bytes(adapter.seen[0]["counts"]["raw"])
    assert type(owned_blobs(adapter.seen)[0]["counts"]["raw"]) is bytes  # picklable, for an adapter that sends it on


def test_a_host_that_never_attached_the_arena_answers_one_precise_error(arena):
    run = encode_binary({"id": 2, "op": "run", "family": "echo", "inputs": INPUTS[:1]}, arena)
    for offer in (None, {"fd": 987, "bytes": arena.size}, {"fd": arena.fd, "bytes": arena.size + 1}):
        adapter, (config, rest) = host_exchange(arena, offer, run)
        assert "arena" not in json.loads(config)["config"]  # not offered, or could not map it
        assert json.loads(rest) == {
            "id": None,
            "status": "error",
            "message": "bad request: a blob names arena bytes [0, 12), but no arena is attached",
        }
        assert adapter.seen == []


# --- through a child process ---------------------------------------------------------------


def test_a_child_that_attaches_the_arena_runs_as_with_inline_sections(arena):
    clean = [case for case in INPUTS if not affected(case)]
    with open_adapter("faulty:hang", arena=arena, raw_blobs=True) as client:
        assert client.arena_attached and client.payload == "binary"
        assert [o["echo"]["counts"]["raw"] for o in client.run_batch(ECHO_FAMILY, clean)] == [  # type: ignore[index]
            base64.b64decode(case["counts"]["b64"]) for case in clean
        ]
    with open_adapter("faulty:hang", arena=arena, binary_payload=False) as client:
        assert not client.arena_attached and client.payload == "json"  # the JSON form: no arena
        assert client.run_batch(ECHO_FAMILY, clean) == [{"echo": case} for case in clean]


def test_a_json_only_shim_is_offered_the_arena_ignores_it_and_runs_unchanged(arena):
    shim = REPO / "examples" / "shim" / "python_shim.py"
    with open_adapter(f"shim:{shlex.quote(sys.executable)} {shlex.quote(str(shim))}", arena=arena) as client:
        assert client.payload == "json" and not client.arena_attached
        (outcome,) = client.run_batch("rng_abi", [{"bad": "input"}])
        assert client.restarts == 0 and outcome is not None


#: a binary shim written before the arena: it takes binary payloads, never answers ``arena``,
#: and logs its get_config offer and the form of every blob it is sent
OLD_BINARY_SHIM = textwrap.dedent(
    """
    import json, os, sys
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    log = open(os.environ["QCONFORM_PROBE_LOG"], "a")
    def forms(value):
        if isinstance(value, dict):
            if "dtype" in value:
                return [sorted(set(value) - {"dtype", "shape"})[0]]
            return [f for item in value.values() for f in forms(item)]
        if isinstance(value, list):
            return [f for item in value for f in forms(item)]
        return []
    for line in stdin:
        request = json.loads(line)
        stdin.read(sum(request.get("sections", [])))
        if request["op"] == "get_config":
            log.write(json.dumps({"offer": sorted(request.get("arena") or {})}) + "\\n")
            config = {"name": "old-binary", "protocol": 1, "capabilities": {"families": ["allocation_dense"]},
                      "precision": {}, "payload": "binary"}
            config |= json.loads(os.environ.get("QCONFORM_PROBE_CONFIG", "{}"))
            reply = {"id": request["id"], "status": "ok", "config": config}
        elif request["op"] == "run":
            log.write(json.dumps({"forms": sorted(set(forms(request["inputs"])))}) + "\\n")
            reply = {"id": request["id"], "status": "ok",
                     "outputs": [{"status": "unimplemented", "reason": "probe"}] * len(request["inputs"])}
        else:
            reply = {"id": request["id"], "status": "ok"}
        log.flush()
        stdout.write((json.dumps(reply) + "\\n").encode())
        stdout.flush()
        if request["op"] == "shutdown":
            break
    """
)


def test_a_binary_shim_that_does_not_declare_the_arena_gets_inline_sections(tmp_path, monkeypatch):
    shim, log = tmp_path / "old_binary_shim.py", tmp_path / "probe.log"
    shim.write_text(OLD_BINARY_SHIM)
    monkeypatch.setenv("QCONFORM_PROBE_LOG", str(log))
    # end to end: ``qconform run`` builds the arena from the cases it collected and offers it
    command = [sys.executable, "-m", "qconform", "run", "--adapter", f"shim:{sys.executable} {shim}"]
    subprocess.run([*command, "--family", "allocation_dense"], capture_output=True, timeout=300, cwd=REPO)
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert records[0] == {"offer": ["bytes", "fd"]}  # offered...
    runs = [r["forms"] for r in records if "forms" in r]
    assert runs and all(forms == ["section"] for forms in runs)  # ...not declared: every blob inline


def listing() -> set[str]:
    """The files of the temporary directory and ``/dev/shm`` that an arena could have made (other
    tests running alongside make files of their own there, ``qconform-run-*`` folders among them)."""
    names = {f"{tempfile.gettempdir()}/{name}" for name in os.listdir(tempfile.gettempdir())}
    if os.path.isdir("/dev/shm"):
        names |= {f"/dev/shm/{name}" for name in os.listdir("/dev/shm")}
    return {name for name in names if "qconform-arena" in name}


def test_a_child_killed_mid_run_leaves_no_file_behind(arena):
    before = listing()
    with open_adapter("faulty:kill", arena=arena) as client:
        assert client.arena_attached
        outcomes = client.run_batch(ECHO_FAMILY, INPUTS)
        assert all(isinstance(o, AdapterError) and "killed by signal 9" in o.message for o in outcomes)
        clean = [case for case in INPUTS if not affected(case)]
        assert client.run_batch(ECHO_FAMILY, clean) == [{"echo": case} for case in clean]
        assert client.restarts == 1 and client.arena_attached  # the restarted child attached the same arena
    assert listing() - before == set()


def test_a_harness_killed_with_sigkill_leaves_no_file_behind():
    script = (
        "import sys\n"
        "from qconform.generators.encoding import encode_blob\n"
        "from qconform.harness.transport.arena import BlobArena\n"
        "arena = BlobArena.build([encode_blob('u32', list(range(1000)))['b64']])\n"
        "print(arena.fd, flush=True)\n"
        "sys.stdin.read()\n"
    )
    before = listing()
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=REPO)
    assert proc.stdout is not None
    fd = int(proc.stdout.readline())
    target = os.readlink(f"/proc/{proc.pid}/fd/{fd}")
    assert target.startswith("/memfd:") or target.endswith("(deleted)"), target
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert listing() - before == set()


# --- the judge --------------------------------------------------------------------------------


def test_the_judge_reads_expected_blobs_from_the_arena_with_the_same_values(arena):
    data, shape = expected_view(BLOBS[2])
    assert data.obj is arena.view.obj and shape == [3]  # in place: no base64 decoded
    assert expected_blob(BLOBS[2]) == decode_blob(BLOBS[2])
    assert arena_bytes(encode_blob("u32", [5])["b64"]) is None
    loose = encode_blob("u32", [5, 6])
    assert expected_blob(loose) == decode_blob(loose)  # not held: decoded as before


def test_same_bytes_compares_every_kind_of_view():
    a, b = bytes(range(200)), bytearray(range(200))
    assert same_bytes(memoryview(a), memoryview(b)) and same_bytes(memoryview(b), memoryview(a))
    assert same_bytes(memoryview(b)[10:20], memoryview(a)[10:20])
    b[150] ^= 1
    assert not same_bytes(memoryview(a), memoryview(b)) and not same_bytes(memoryview(b), memoryview(a))
    assert not same_bytes(memoryview(a)[:10], memoryview(a)[:11])
    assert not same_bytes(memoryview(bytes(b))[:160], memoryview(a)[:160])


def test_a_blob_that_differs_from_the_arena_copy_is_still_a_difference(arena):
    got = {"dtype": "u32", "shape": [3], "raw": bytes([1, 0, 0, 0, 2, 0, 0, 0, 4, 0, 0, 0])}
    diff = blob_difference(BLOBS[1], got, "counts")
    assert diff is not None and (diff.path, diff.expected, diff.got) == ("counts[2]", "3", "4")
    same = {"dtype": "u32", "shape": [3], "raw": bytes(arena.bytes_of(BLOBS[1]["b64"]) or b"")}
    assert blob_difference(BLOBS[1], same, "counts") is None


@pytest.mark.parametrize(
    "answer, offered, fragment",
    [
        ({"arena": "yes"}, True, "config.arena must be true or false, got 'yes'"),
        ({"arena": True}, False, "config.arena true, but no arena was offered"),
        ({"arena": True, "payload": "json"}, True, 'config.arena true, but the payload is not "binary"'),
    ],
)
def test_an_arena_answer_that_was_not_offered_or_not_a_bool_is_a_start_error(
    arena, tmp_path, monkeypatch, answer, offered, fragment
):
    shim = tmp_path / "old_binary_shim.py"
    shim.write_text(OLD_BINARY_SHIM)
    monkeypatch.setenv("QCONFORM_PROBE_LOG", str(tmp_path / "probe.log"))
    monkeypatch.setenv("QCONFORM_PROBE_CONFIG", json.dumps(answer))
    with pytest.raises(AdapterStartError) as caught:
        open_adapter(f"shim:{sys.executable} {shim}", arena=arena if offered else None)
    assert fragment in str(caught.value)


def test_the_inputs_the_arena_was_built_from_are_encoded_once_as_the_general_path_encodes_them():
    cases = [{"input": case_input, "expected": {}} for case_input in INPUTS]
    built = BlobArena.of_cases(cases)
    assert built is not None
    try:
        message = {"id": 7, "op": "run", "family": "echo", "inputs": INPUTS[:4]}
        plain = BlobArena.build(blob["b64"] for blob in BLOBS)  # the same ranges, no inputs known
        assert plain is not None and not plain.inputs
        general = split_message(encode_binary(message, plain))
        plain.close()
        (line,) = binary_parts(message, built)
        assert decode_line(bytes(line)) == general[0] and general[1] == b""  # the same JSON value, no sections
        assert set(built.wire) == {id(case_input) for case_input in INPUTS[:4]}
        assert binary_parts(message, built) == [line]  # from the kept wire forms
        # an input the arena was not built from (a copy), or with a blob it does not hold: the general path
        stranger = {"id": 8, "op": "run", "family": "echo", "inputs": [dict(INPUTS[0])]}
        assert binary_parts(stranger, built) == [encode_binary(stranger, built)]
        assert id(stranger["inputs"][0]) not in built.wire  # not kept: its id may be another's later
        outside = {"i": 9, "counts": encode_blob("u32", [9, 9])}
        built.inputs[id(outside)] = outside
        mixed = {"id": 9, "op": "run", "family": "echo", "inputs": [INPUTS[0], outside]}
        parts = binary_parts(mixed, built)
        assert len(parts) == 2 and bytes(parts[1]) == bytes([9, 0, 0, 0, 9, 0, 0, 0]) and id(outside) not in built.wire
    finally:
        built.close()
