"""The block window (harness/transport/window.py, docs/shim-protocol.md "Block window"): a block's
arrays and its records travel through one shared file instead of the pipe, arrive bit for bit,
are refused precisely when a range is wrong, fall back to sections with a child that does not
take the window, and leave nothing behind however the harness or the child ends."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from robustness.processes import alive

from qconform.adapters.noop import NoopAdapter
from qconform.generators.accumulated import FAMILIES, PAD
from qconform.harness.adapter import AdapterError, AdapterStartError
from qconform.harness.run.accumulate import accumulate
from qconform.harness.transport import arena as arena_module
from qconform.harness.transport.blocks import BlockError, blob_array, block_arrays, records_bytes
from qconform.harness.transport.client import open_adapter
from qconform.harness.transport.host import Host
from qconform.harness.transport.shim_protocol import decode_line, encode_message
from qconform.harness.transport.window import ALIGN, BlockWindow, WindowError, WindowMap, window_range

pytestmark = pytest.mark.rules("R06", "R22")

REPO = Path(__file__).resolve().parents[2]


def block_of(family: str, lo: int = 0, hi: int = 300) -> dict[str, np.ndarray]:
    spec = FAMILIES[family]
    return spec.block(spec.arrays(lo, hi))


@pytest.fixture
def window():
    made = BlockWindow.create()
    assert made is not None
    yield made
    made.close()


# --- the window itself -------------------------------------------------------------------------


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_placed_block_reads_back_bit_for_bit_at_aligned_ranges(window, family):
    block = block_of(family, 10**10, 10**10 + 333)  # an odd count: ranges that do not end aligned
    blobs, answer = window.place(block, records_bytes(family, 333))
    assert answer == [answer[0], 4 * FAMILIES[family].record_words * 333] and answer[0] % ALIGN == 0
    assert all(blob["window"][0] % ALIGN == 0 for blob in blobs.values())
    spans = sorted([*(blob["window"] for blob in blobs.values()), answer])
    assert all(a[0] + a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # no two ranges overlap
    arrays = block_arrays(blobs, window.bytes_at(0, window.size))
    assert arrays.keys() == block.keys()
    for name, array in block.items():
        assert arrays[name].dtype == array.dtype and np.array_equal(arrays[name], array), name


def test_the_window_grows_and_keeps_no_name(window):
    window.place(block_of("rng_abi"), 0)
    small = window.size
    window.place(block_of("verification_round", 0, 5000), records_bytes("verification_round", 5000))
    assert window.size > small and os.fstat(window.fd).st_size == window.size
    target = os.readlink(f"/proc/self/fd/{window.fd}")
    assert target.startswith("/memfd:qconform-window") or target.endswith("(deleted)"), target


def test_without_a_shared_file_there_is_no_window(monkeypatch):
    monkeypatch.setattr("qconform.harness.transport.window.anonymous_file", lambda label: None)
    assert BlockWindow.create() is None
    with open_adapter("noop") as client:
        assert not client.window_attached and client.window is None
        records = client.run_block("rng_abi", block_of("rng_abi"))
        assert isinstance(records, np.ndarray) and (records == PAD).all()  # as sections


def test_the_fallback_file_is_unlinked_before_anything_is_written(monkeypatch, tmp_path):
    monkeypatch.delattr(os, "memfd_create", raising=False)
    monkeypatch.setattr(arena_module.tempfile, "tempdir", str(tmp_path))
    made = BlockWindow.create()
    assert made is not None
    try:
        assert list(tmp_path.iterdir()) == [] and os.readlink(f"/proc/self/fd/{made.fd}").endswith("(deleted)")
    finally:
        made.close()


@pytest.mark.parametrize(
    "span, size, message",
    [
        ([0, 8], -1, "a blob names window bytes [0, 8), but no window is attached"),
        ([60, 8], 64, "a blob names window bytes [60, 68), outside the 64-byte window"),
        ([-1, 8], 64, "a blob names window range [-1, 8]: not [offset, length] in bytes"),
        ([0], 64, "a blob names window range [0]: not [offset, length] in bytes"),
        ("0,8", 64, "a blob names window range '0,8': not [offset, length] in bytes"),
    ],
)
def test_a_window_range_that_is_not_inside_the_window_is_one_precise_error(span, size, message):
    with pytest.raises(WindowError) as caught:
        window_range(span, size)
    assert str(caught.value) == message


def test_a_block_field_naming_the_window_without_one_is_a_block_error():
    blob = {"dtype": "u32", "shape": [2], "window": [0, 8]}
    with pytest.raises(BlockError, match=r"block field 'x' names window bytes \[0, 8\), but no window is attached"):
        block_arrays({"x": blob})
    with pytest.raises(BlockError, match="holds 8 bytes, not u32 of shape"):
        blob_array(blob | {"shape": [3]}, "the records", memoryview(bytes(64)))


# --- the host (the child's side), in process ---------------------------------------------------


def host_replies(window: BlockWindow | None, *requests: dict) -> list[dict]:
    get_config = {"id": 1, "op": "get_config", "payload": ["json", "binary"]}
    if window is not None:
        get_config["window"] = {"fd": window.fd}
    out = io.BytesIO()
    data = b"".join(encode_message(message) for message in (get_config, *requests))
    assert Host(NoopAdapter()).serve(io.BytesIO(data), out) == 0
    return [decode_line(line) for line in out.getvalue().splitlines()]


def test_the_host_reads_the_block_in_place_and_writes_the_records_into_the_answer_range(window):
    block = block_of("categorical_sampling")
    blobs, answer = window.place(block, records_bytes("categorical_sampling", 300))
    window.bytes_at(answer[0], answer[0] + answer[1])[:] = bytes(answer[1])  # zero: the host must write it
    request = {"id": 2, "op": "run_block", "family": "categorical_sampling", "block": blobs}
    config, reply = host_replies(window, request | {"window": {"bytes": window.size, "answer": answer}})
    assert config["config"]["window"] is True
    assert reply["records"] == {"dtype": "u32", "shape": [300, 4], "window": [answer[0], answer[1]]}
    records = blob_array(reply["records"], "the records", window.bytes_at(0, window.size))
    assert np.array_equal(records, NoopAdapter().run_block("categorical_sampling", block))


def test_records_that_do_not_fit_the_answer_range_come_as_a_section(window):
    blobs, answer = window.place(block_of("rng_abi"), 16)  # room for less than one case's record
    request = {"id": 2, "op": "run_block", "family": "rng_abi", "block": blobs}
    out = io.BytesIO()
    get_config = {"id": 1, "op": "get_config", "payload": ["json", "binary"], "window": {"fd": window.fd}}
    lines = [get_config, request | {"window": {"bytes": window.size, "answer": answer}}]
    Host(NoopAdapter()).serve(io.BytesIO(b"".join(map(encode_message, lines))), out)
    reply = decode_line(out.getvalue().split(b"\n")[1])
    assert reply["records"] == {"dtype": "u32", "shape": [300, 10], "section": 0} and reply["sections"] == [12000]


@pytest.mark.parametrize(
    "offer, window_field, message",
    [
        (False, {"bytes": 64, "answer": [0, 0]}, "the request names the block window, but no window is attached"),
        (True, {"bytes": 1 << 40, "answer": [0, 0]}, "the window file holds"),
        (True, {"bytes": "all", "answer": [0, 0]}, "window.bytes must be a byte count, got 'all'"),
        (True, {"bytes": 64, "answer": [60, 8]}, "window.answer names window bytes [60, 68), outside the 64-byte"),
        (True, [64], "window must be an object with bytes and answer, got [64]"),
    ],
)
def test_a_bad_window_request_is_answered_with_one_precise_error(window, offer, window_field, message):
    blobs, _answer = window.place(block_of("rng_abi"), 0)
    request = {"id": 2, "op": "run_block", "family": "rng_abi", "block": blobs, "window": window_field}
    config, reply = host_replies(window if offer else None, request)
    assert ("window" in config["config"]) is offer
    assert reply["status"] == "error" and reply["message"].startswith(f"bad block: {message}"), reply


def test_a_window_offer_that_is_not_a_file_is_ignored(tmp_path):
    read, write = os.pipe()
    try:
        with pytest.raises(OSError, match="is not a file"):
            WindowMap(read)
        out = io.BytesIO()
        get_config = {"id": 1, "op": "get_config", "payload": ["json", "binary"], "window": {"fd": read}}
        Host(NoopAdapter()).serve(io.BytesIO(encode_message(get_config)), out)
        assert "window" not in decode_line(out.getvalue())["config"]
    finally:
        os.close(read)
        os.close(write)


# --- through a child process -------------------------------------------------------------------


def test_torch_answers_through_the_window_as_in_process():
    """The torch candidate's records through the window, for every family, at the start and beyond
    2^32: those of its ``run_block`` in this process (which tests/harness/test_accumulate_blocks.py
    holds to its per-case answers); and a run gives the hash and verdict of a run through the pipe."""
    pytest.importorskip("torch")
    from qconform.adapters import torch_batched

    with open_adapter("torch") as windowed, open_adapter("torch", block_window=False) as piped:
        assert windowed.window_attached and not piped.window_attached
        for family in sorted(FAMILIES):
            for lo in (0, 10**10):
                block = block_of(family, lo, lo + 300)
                records = windowed.run_block(family, block)
                assert isinstance(records, np.ndarray), records
                assert np.array_equal(records, torch_batched.run_block(family, block, "cpu")), (family, lo)
                assert np.array_equal(records, piped.run_block(family, block)), (family, lo)
        expected: dict = {"families": {}}
        for family in sorted(FAMILIES):
            runs = [
                accumulate(
                    lambda name, inputs, c=client: c.run_batch(name, inputs),
                    family,
                    1500,
                    expected,
                    700,
                    run_block=client.run_block,
                )
                for client in (windowed, piped)
            ]
            assert runs[0].hash == runs[1].hash and runs[0].verdict == runs[1].verdict, family
            assert [(d.case, d.verdict, d.line) for d in runs[0].divergences] == [
                (d.case, d.verdict, d.line) for d in runs[1].divergences
            ]


#: a shim that takes the window and answers every block's records at window offset 0: inside the
#: window, outside the answer range the request gave it
MISPLACED_SHIM = textwrap.dedent(
    """
    import json, os, sys
    for line in sys.stdin.buffer:
        request = json.loads(line)
        sys.stdin.buffer.read(sum(request.get("sections", [])))
        reply = {"id": request["id"], "status": "ok"}
        if request["op"] == "get_config":
            reply["config"] = {"name": "misplaced", "protocol": 1, "precision": {}, "payload": "binary",
                               "capabilities": {"families": ["rng_abi"]}, "window": "window" in request}
            reply["config"] |= json.loads(os.environ.get("QCONFORM_PROBE_CONFIG", "{}"))
        elif request["op"] == "run_block":
            cases = request["block"]["seed"]["shape"][0]
            reply["records"] = {"dtype": "u32", "shape": [cases, 10], "window": [0, 40 * cases]}
        sys.stdout.buffer.write((json.dumps(reply) + "\\n").encode())
        sys.stdout.buffer.flush()
        if request["op"] == "shutdown":
            break
    """
)


def test_records_outside_the_answer_range_are_an_adapter_error(tmp_path):
    shim = tmp_path / "misplaced_shim.py"
    shim.write_text(MISPLACED_SHIM)
    with open_adapter(f"shim:{sys.executable} {shim}") as client:
        assert client.window_attached
        answer = client.run_block("rng_abi", block_of("rng_abi"))
        assert isinstance(answer, AdapterError)
        assert answer.message.startswith("run_block answered the records name window bytes [0, 12000), outside the ")


@pytest.mark.parametrize(
    "answer, offered, fragment",
    [
        ({"window": "yes"}, True, "config.window must be true or false, got 'yes'"),
        ({"window": True}, False, "config.window true, but no window was offered"),
        ({"window": True, "payload": "json"}, True, 'config.window true, but the payload is not "binary"'),
    ],
)
def test_a_window_answer_that_was_not_offered_or_not_a_bool_is_a_start_error(
    tmp_path, monkeypatch, answer, offered, fragment
):
    shim = tmp_path / "misplaced_shim.py"
    shim.write_text(MISPLACED_SHIM)
    monkeypatch.setenv("QCONFORM_PROBE_CONFIG", json.dumps(answer))
    with pytest.raises(AdapterStartError) as caught:
        open_adapter(f"shim:{sys.executable} {shim}", block_window=offered)
    assert fragment in str(caught.value)


def test_a_shim_that_ignores_the_offer_is_sent_sections():
    """The bundled JSON-lines shim knows neither the window nor run_block: it is offered the window,
    does not attach it, and the accumulate run goes on case by case, as before."""
    shim = REPO / "examples" / "shim" / "python_shim.py"
    with open_adapter(f"shim:{sys.executable} {shim}") as client:
        assert client.window is not None and not client.window_attached and client.payload == "json"
        answer = client.run_block("rng_abi", block_of("rng_abi"))
        assert isinstance(answer, AdapterError) and client.restarts == 0  # an unknown op: error, then by case


def listing() -> set[str]:
    """The files of the temporary directory and ``/dev/shm`` a window could have made."""
    names = {f"{tempfile.gettempdir()}/{name}" for name in os.listdir(tempfile.gettempdir())}
    if os.path.isdir("/dev/shm"):
        names |= {f"/dev/shm/{name}" for name in os.listdir("/dev/shm")}
    return {name for name in names if "qconform-window" in name}


#: a child that takes the window and kills itself (SIGKILL) in its first run_block, once per flag file
DYING_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from qconform.adapters.noop import NoopAdapter
    from qconform.harness.transport.host import Host, claim_stdio
    class Dying(NoopAdapter):
        name = "dying"
        def run_block(self, family, block):
            flag = os.environ["QCONFORM_PROBE_FLAG"]
            if not os.path.exists(flag):
                open(flag, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
            return super().run_block(family, block)
    proto_in, proto_out = claim_stdio()
    sys.exit(Host(Dying()).serve(proto_in, proto_out))
    """
)


@pytest.mark.parametrize("memfd", [True, False], ids=["memfd", "unlinked-file"])
def test_a_child_killed_in_a_block_leaves_no_file_and_its_successor_attaches(tmp_path, monkeypatch, memfd):
    if not memfd:
        monkeypatch.delattr(os, "memfd_create", raising=False)
    script = tmp_path / "dying_child.py"
    script.write_text(DYING_CHILD)
    monkeypatch.setenv("QCONFORM_PROBE_FLAG", str(tmp_path / "died"))
    before = listing()
    with open_adapter(f"shim:{sys.executable} {script}") as client:
        assert client.window_attached
        died = client.run_block("rng_abi", block_of("rng_abi"))
        assert isinstance(died, AdapterError) and "killed by signal 9" in died.message
        records = client.run_block("rng_abi", block_of("rng_abi"))
        assert isinstance(records, np.ndarray) and (records == PAD).all()
        assert client.restarts == 1 and client.window_attached  # the new child attached the same window
        fd = client.window.fd if client.window is not None else -1
    assert fd >= 0 and listing() - before == set()
    with pytest.raises(OSError):
        os.fstat(fd)  # closed with the client


HARNESS = textwrap.dedent(
    """
    import os, sys
    if sys.argv[1] == "unlinked-file":
        del os.memfd_create
    from qconform.generators.accumulated import FAMILIES
    from qconform.harness.transport.client import open_adapter
    client = open_adapter("noop")
    spec = FAMILIES["verification_round"]
    client.run_block("verification_round", spec.block(spec.arrays(0, 2000)))
    assert client.window_attached
    print(client.window.fd, client._child.pid, flush=True)
    sys.stdin.read()
    """
)


@pytest.mark.parametrize("how", ["memfd", "unlinked-file"])
def test_a_harness_killed_with_sigkill_leaves_no_file_and_no_child(how):
    before = listing()
    proc = subprocess.Popen(
        [sys.executable, "-c", HARNESS, how], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=REPO
    )
    assert proc.stdout is not None
    fd, child = map(int, proc.stdout.readline().split())
    target = os.readlink(f"/proc/{proc.pid}/fd/{fd}")
    assert target.startswith("/memfd:qconform-window") or target.endswith("(deleted)"), target
    # the child maps the same file, and no name reaches it there either
    maps = Path(f"/proc/{child}/maps").read_text()
    assert any("qconform-window" in line and "(deleted)" in line for line in maps.splitlines()), maps
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    for _ in range(100):  # the keeper ends the child when the harness dies
        if not alive(child):  # gone, or a zombie; reaped between two reads is gone too
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"child {child} outlived its harness")
    assert listing() - before == set()
