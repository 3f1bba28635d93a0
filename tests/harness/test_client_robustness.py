"""The client survives every way an adapter can misbehave, and blames exactly the cases in flight."""

from __future__ import annotations

import os
import shlex
import sys
import textwrap
import time
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from qconform.adapters import catalog as registry
from qconform.adapters.catalog import FAULTY_MODES, UnknownAdapter, available_adapters, load_adapter
from qconform.adapters.faulty import ECHO_FAMILY, affected
from qconform.adapters.noop import NoopAdapter
from qconform.generators.encoding import encode_blob
from qconform.harness.adapter import AdapterError, Unimplemented
from qconform.harness.transport.arena import BlobArena
from qconform.harness.transport.client import START_TIMEOUT_S, AdapterStartError, Child, host_command, open_adapter
from qconform.harness.transport.shim_protocol import to_json_blobs

pytestmark = pytest.mark.rules()

INPUTS = [{"i": i, "counts": encode_blob("u32", [i, i + 1, i + 2])} for i in range(10)]
HIT = [affected(case) for case in INPUTS]
CLEAN = [case for case, hit in zip(INPUTS, HIT) if not hit]
TIMEOUT_S = 2.0


def echoed(case: dict) -> dict:
    return {"echo": case}


def test_the_inputs_mix_affected_and_clean_cases():
    assert 2 <= sum(HIT) <= len(INPUTS) - 2


@pytest.mark.parametrize(
    "mode, fragment",
    [
        ("raise", "adapter reported: RuntimeError: faulty adapter: deliberate failure"),
        ("wrong_shape", "malformed output: blob at output.echo.counts holds 12 bytes; shape [4] of u32 needs 16"),
        ("wrong_dtype", "malformed output: blob at output.echo.counts has unknown dtype 'f16'"),
        ("nan", "adapter reported: output is not strict JSON"),
    ],
)
@pytest.mark.parametrize(
    "strict_schema, binary_payload, raw_blobs, shared",
    [
        (False, True, False, False),
        (True, False, False, False),
        (False, True, True, False),
        (True, True, True, False),
        (False, True, True, True),
        (True, True, False, True),
    ],
    ids=[
        "structure-only, binary",
        "strict-schema, json",
        "structure-only, raw",
        "strict-schema, raw",
        "structure-only, raw, arena",
        "strict-schema, binary, arena",
    ],
)
def test_per_case_faults_become_errors_of_exactly_the_affected_cases(
    mode, fragment, strict_schema, binary_payload, raw_blobs, shared
):
    # with ``shared``, the inputs' blobs reach the child as ranges of the shared arena
    arena = BlobArena.build(case["counts"]["b64"] for case in INPUTS) if shared else None
    opened = open_adapter(
        f"faulty:{mode}",
        timeout_s=30,
        strict_schema=strict_schema,
        binary_payload=binary_payload,
        raw_blobs=raw_blobs,
        arena=arena,
    )
    with opened as client:
        assert client.arena_attached == shared
        outcomes = client.run_batch(ECHO_FAMILY, INPUTS)
        assert client.restarts == 0
    for case, hit, outcome in zip(INPUTS, HIT, outcomes):
        if hit:
            assert isinstance(outcome, AdapterError) and fragment in outcome.message, outcome
            # what the child wrote to stderr during the request is quoted (docs/shim-protocol.md, "Errors")
            said = outcome.message.split("; stderr: ", 1)[1]
            assert f"faulty adapter: mode {mode} triggered" in said.splitlines(), outcome
        else:
            assert to_json_blobs(outcome) == echoed(case)
            assert raw_blobs == ("raw" in repr(outcome))


BATCH_FAULTS = {
    "hang": (f"timed out after {TIMEOUT_S:g}s", 1),
    "exit": ("adapter exited with status 3 before answering", 1),
    "kill": ("adapter was killed by signal 9 (SIGKILL) before answering", 1),
    "garbage": ("protocol violation: reply is not JSON", 1),
    "wrong_length": (
        f"adapter failed the whole request: run_batch returned {len(INPUTS) - 1} outcomes for {len(INPUTS)} inputs",
        0,
    ),
}


@pytest.mark.parametrize("mode", sorted(BATCH_FAULTS))
def test_batch_faults_fail_the_batch_then_the_adapter_recovers(mode):
    fragment, restarts = BATCH_FAULTS[mode]
    with open_adapter(f"faulty:{mode}", timeout_s=30) as client:
        started = time.monotonic()
        outcomes = client.run_batch(ECHO_FAMILY, INPUTS, timeout_s=TIMEOUT_S)
        elapsed = time.monotonic() - started
        assert len(outcomes) == len(INPUTS)
        for outcome in outcomes:
            assert isinstance(outcome, AdapterError) and fragment in outcome.message, outcome
            if restarts:  # the child is gone: its stderr explains what happened
                assert f"stderr: faulty adapter: mode {mode} triggered" in outcome.message
        if mode == "hang":
            assert TIMEOUT_S <= elapsed < TIMEOUT_S + 10
        assert client.run_batch(ECHO_FAMILY, CLEAN) == [echoed(case) for case in CLEAN]
        assert client.restarts == restarts


def test_every_faulty_mode_is_registered_and_tested():
    tested = set(BATCH_FAULTS) | {"raise", "wrong_shape", "wrong_dtype", "nan"}
    assert tested == set(FAULTY_MODES)
    assert {f"faulty:{mode}" for mode in FAULTY_MODES} <= set(available_adapters())


def test_a_family_outside_the_capabilities_is_unsupported_without_a_request():
    with open_adapter("faulty:exit") as client:
        outcomes = client.run_batch("no_such_family", INPUTS[:2])
        assert all(isinstance(o, Unimplemented) for o in outcomes)
        assert client.run_batch(ECHO_FAMILY, []) == []
        assert client.restarts == 0


@pytest.mark.parametrize("binary_payload, payload", [(True, "binary"), (False, "json")])
def test_messages_of_several_megabytes_round_trip(binary_payload, payload):
    blob = encode_blob("u32", list(range(1_000_000)))  # 4 MB of raw sections, or a 5 MB line, each way
    big = next(case for n in range(20) if not affected(case := {"n": n, "counts": blob}))
    with open_adapter("faulty:hang", binary_payload=binary_payload) as client:
        assert client.payload == payload  # the host takes the offer; without one it speaks JSON
        assert client.run_batch(ECHO_FAMILY, [big, CLEAN[0]]) == [echoed(big), echoed(CLEAN[0])]


def test_a_request_of_several_large_sections_reaches_the_child_whole_and_in_order():
    """The sections go to the pipe one after the other (never joined); what the pipe does not take at
    once is written by a thread, part after part: three sections of 2 MB each, each with its own values."""
    blobs = [encode_blob("u32", list(range(k, k + 500_000))) for k in (0, 7, 13)]
    big = next(case for n in range(20) if not affected(case := {"n": n, "a": blobs[0], "b": blobs[1], "c": blobs[2]}))
    with open_adapter("faulty:hang") as client:
        assert client.payload == "binary"
        assert client.run_batch(ECHO_FAMILY, [big, CLEAN[0]]) == [echoed(big), echoed(CLEAN[0])]


def test_a_json_only_shim_is_never_sent_binary_payloads():
    shim = Path(__file__).resolve().parents[2] / "examples" / "shim" / "python_shim.py"
    with open_adapter(f"shim:{shlex.quote(sys.executable)} {shlex.quote(str(shim))}") as client:
        assert client.payload == "json"
        (outcome,) = client.run_batch("rng_abi", [{"bad": "input"}])
        assert client.restarts == 0 and outcome is not None


def test_close_ends_the_child_and_is_idempotent():
    client = open_adapter("noop")
    assert client._child is not None
    pid = client._child.proc.pid
    client.close()
    client.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_unknown_adapter_names_list_the_available_ones():
    with pytest.raises(UnknownAdapter) as info:
        open_adapter("refrence")
    message = str(info.value)
    assert message.startswith("unknown adapter 'refrence'; available adapters: reference, ")
    assert {"torch", "noop", "faulty:raise"} <= set(message.split("available adapters: ")[1].split(", "))
    assert isinstance(info.value, AdapterStartError)


def test_a_host_that_cannot_load_its_adapter_says_why():
    with pytest.raises(AdapterStartError) as info:
        open_adapter("shim:" + shlex.join(host_command("nosuch", "cpu")))
    first_line = str(info.value).splitlines()[0]
    assert "get_config answered status 'error': cannot load adapter 'nosuch' on cpu: UnknownAdapter" in first_line
    assert "faulty:garbage" in first_line


def test_entry_points_register_classes_and_factories(monkeypatch):
    points = {
        "third-party": EntryPoint("third-party", "qconform.adapters.noop:NoopAdapter", "qconform.adapters"),
        "factory": EntryPoint("factory", "qconform.adapters.faulty:FaultyAdapter", "qconform.adapters"),
        "broken": EntryPoint("broken", "builtins:str", "qconform.adapters"),
        "noop": EntryPoint("noop", "builtins:str", "qconform.adapters"),
    }
    monkeypatch.setattr(registry, "_entry_points", lambda: points)
    names = available_adapters()
    assert names["third-party"] == "entry point qconform.adapters.noop:NoopAdapter"
    assert names["noop"] == registry.BUILTIN_ADAPTERS["noop"].description  # a built-in wins
    adapter = load_adapter("third-party", "cuda")
    assert isinstance(adapter, NoopAdapter) and adapter.device == "cuda"
    assert load_adapter("factory").name == "faulty:raise"
    with pytest.raises(TypeError, match="factory returned str, not an Adapter"):
        load_adapter("broken")
    assert isinstance(load_adapter("noop"), NoopAdapter)


def test_an_adapter_is_not_started_on_a_device_it_does_not_declare():
    with pytest.raises(AdapterStartError, match="runs on cpu, not on device 'tpu'"):
        open_adapter("reference", device="tpu")


# --- shims that break the protocol -----------------------------------------------------

SHIM = textwrap.dedent("""
    import json, os, sys, time
    behaviour = sys.argv[1]
    if behaviour == "slow_start":  # an engine that loads for a while before it reads a request
        if len(sys.argv) > 3:
            open(sys.argv[3], "w").write(str(os.getpid()))
        time.sleep(float(sys.argv[2]))
    config = {"name": "bad", "protocol": 2 if behaviour == "protocol2" else 1,
              "capabilities": {"families": ["echo"]}, "precision": {}}
    if behaviour == "dies":
        print("shim: cannot open device", file=sys.stderr)
        sys.exit(7)
    for line in sys.stdin:
        request = json.loads(line)
        rid, op = request["id"], request["op"]
        if op == "get_config":
            if behaviour == "config_error":
                reply = {"id": rid, "status": "error", "message": "no GPU found"}
            else:
                reply = {"id": rid, "status": "ok", "config": config}
            print(json.dumps(reply), flush=True)
            continue
        if op == "shutdown":
            break
        outputs = [{"status": "ok", "output": {"echo": case}} for case in request["inputs"]]
        reply = {"id": rid, "status": "ok", "outputs": outputs}
        if behaviour == "wrong_id":
            reply["id"] = rid + 100
        elif behaviour == "count":
            reply["outputs"] = outputs[:1]
        elif behaviour == "entries":
            outputs[1] = {"output": {}}
            outputs[2] = {"status": "ok", "output": [1, 2]}
        elif behaviour == "noise":
            print("loading kernels...", flush=True)
        elif behaviour == "nan":
            text = json.dumps(reply).replace('"NAN_HERE"', "NaN")
            print(text, flush=True)
            continue
        print(json.dumps(reply), flush=True)
""")


@pytest.fixture(scope="module")
def shim_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("shim") / "bad_shim.py"
    path.write_text(SHIM)
    return path


def shim(path, behaviour: str) -> str:
    return f"shim:{sys.executable} {path} {behaviour}"


THREE = [{"k": 0}, {"k": 1}, {"k": 2}]


@pytest.mark.parametrize(
    "behaviour, fragment, restarts",
    [
        ("wrong_id", "protocol violation: reply id 102 does not match request id 2", 1),
        ("noise", "protocol violation: reply is not JSON", 1),
        ("count", "adapter answered 1 outputs for 3 inputs", 0),
    ],
)
def test_replies_that_break_the_protocol_fail_the_request(shim_path, behaviour, fragment, restarts):
    with open_adapter(shim(shim_path, behaviour), timeout_s=30) as client:
        outcomes = client.run_batch("echo", THREE)
        assert all(isinstance(o, AdapterError) and fragment in o.message for o in outcomes), outcomes
        client.run_batch("echo", THREE)
        assert client.restarts == restarts


def test_malformed_entries_fail_only_their_cases(shim_path):
    with open_adapter(shim(shim_path, "entries")) as client:
        first, second, third = client.run_batch("echo", THREE)
    assert first == {"echo": THREE[0]}
    assert isinstance(second, AdapterError) and "malformed output entry" in second.message
    assert isinstance(third, AdapterError) and "output must be a JSON object, got list" in third.message


def test_a_nan_token_fails_only_its_case(shim_path):
    with open_adapter(shim(shim_path, "nan")) as client:
        outcomes = client.run_batch("echo", [{"v": 1}, {"v": "NAN_HERE"}, {"v": 3}])
    assert outcomes[0] == {"echo": {"v": 1}} and outcomes[2] == {"echo": {"v": 3}}
    assert outcomes[1] == AdapterError("malformed output: output.echo.v is NaN, which JSON does not allow")


@pytest.mark.parametrize(
    "behaviour, fragment",
    [
        ("protocol2", "config.protocol is 2; this harness speaks 1"),
        ("config_error", "get_config answered status 'error': no GPU found"),
        ("dies", "adapter exited with status 7 before answering request 1; stderr: shim: cannot open device"),
    ],
)
def test_a_shim_that_cannot_start_raises_one_clear_error(shim_path, behaviour, fragment):
    with pytest.raises(AdapterStartError) as info:
        open_adapter(shim(shim_path, behaviour))
    assert fragment in str(info.value) and "\n" not in str(info.value).split("stderr:")[0]


SLOW_START_S = 4.0  # a start that succeeds: waited for in full, longer than the batch timeout
BATCH_S = 2.0  # the batch timeout beside it: an echo takes milliseconds, even on a loaded machine
STUCK_START_S = 300.0  # a start that must be cut short: the test is over long before it


@pytest.mark.parametrize("start_timeout_s", [60, None], ids=["given", "default"])
def test_a_slow_start_gets_its_own_deadline_and_then_the_batch_timeout_applies(shim_path, start_timeout_s):
    """By default a start has at least START_TIMEOUT_S, however short the batch timeout."""
    started = time.monotonic()
    spec = f"{shim(shim_path, 'slow_start')} {SLOW_START_S}"
    with open_adapter(spec, timeout_s=BATCH_S, start_timeout_s=start_timeout_s) as client:
        assert time.monotonic() - started >= SLOW_START_S
        assert client.start_timeout_s == (START_TIMEOUT_S if start_timeout_s is None else start_timeout_s)
        assert client.run_batch("echo", THREE) == [{"echo": case} for case in THREE]
        assert client.restarts == 0


@pytest.mark.parametrize("timeout_s", [BATCH_S, 600])
def test_a_start_past_its_deadline_is_one_start_error_and_leaves_no_process(shim_path, timeout_s, tmp_path):
    """A start timeout shorter or longer than the batch timeout holds; the stuck child is killed."""
    spec = f"{shim(shim_path, 'slow_start')} {STUCK_START_S:g} {tmp_path / 'pid'}"
    started = time.monotonic()
    with pytest.raises(AdapterStartError) as info:
        open_adapter(spec, timeout_s=timeout_s, start_timeout_s=0.5)
    assert time.monotonic() - started < 30  # the 0.5 s deadline, with room for a loaded machine
    message = str(info.value)
    assert message.startswith(f"adapter {spec!r} did not start: timed out after 0.5s waiting for the answer ")
    assert "to get_config (a slow start: --start-timeout S); stderr was empty" in message
    pid = int((tmp_path / "pid").read_text())
    for _ in range(100):  # killed at once; reaped by the client's reader
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the slow child {pid} is still running")


def test_a_bundled_shim_adapter_starts_within_the_time_it_declares(shim_path, monkeypatch):
    """vLLM imports for tens of seconds before it answers: its declared start outlasts a short batch timeout."""
    slow = [sys.executable, str(shim_path), "slow_start", str(SLOW_START_S)]
    monkeypatch.setattr(registry, "shim_adapter_command", lambda spec, device="cpu": slow)
    assert registry.shim_adapter_start_s("vllm") >= 300
    with open_adapter("vllm", timeout_s=BATCH_S) as client:
        assert client.start_timeout_s == registry.shim_adapter_start_s("vllm") and client.timeout_s == BATCH_S
        assert client.run_batch("echo", THREE) == [{"echo": case} for case in THREE]
    with pytest.raises(AdapterStartError, match="timed out after 0.5s waiting for the answer to get_config"):
        open_adapter("vllm", timeout_s=30, start_timeout_s=0.5)


def test_a_missing_shim_program_raises_a_start_error():
    with pytest.raises(AdapterStartError, match="cannot run /nonexistent/shim"):
        open_adapter("shim:/nonexistent/shim --flag")
    with pytest.raises(AdapterStartError, match="needs a command line"):
        open_adapter("shim:  ")


@pytest.mark.parametrize(
    "command",
    [
        ["fuzz"],
        ["accumulate", "--family", "verification_round", "--count", "4"],
        ["batch-invariance"],
        ["stat", "--case", "verification_round/residual/*"],
    ],
    ids=lambda command: command[0],
)
def test_every_command_that_starts_an_adapter_takes_a_start_timeout(command, monkeypatch):
    """``--start-timeout`` reaches the client of every command that starts an adapter itself
    (``run`` passes it through its plugin: tests/harness/test_triage.py); a failed start is one line, exit 3
    (docs/harness.md, "Exit codes": the same status as ``run``'s)."""
    from click.testing import CliRunner

    from qconform.cli.group import cli
    from qconform.harness.transport import client

    seen: list[float | None] = []

    def refuse(spec, device="cpu", timeout_s=60.0, *args, start_timeout_s=None, **kwargs):
        seen.append(start_timeout_s)
        raise AdapterStartError(f"adapter {spec!r} did not start: timed out after {start_timeout_s:g}s")

    monkeypatch.setattr(client, "open_adapter", refuse)
    result = CliRunner().invoke(cli, [*command, "--adapter", "shim:./engine", "--start-timeout", "900"])
    assert result.exit_code == 3, result.output
    assert seen == [900.0]
    assert result.output.strip().splitlines() == ["Error: adapter 'shim:./engine' did not start: timed out after 900s"]


def test_an_error_of_a_child_that_wrote_nothing_to_stderr_during_its_request_quotes_nothing():
    """Only what the child wrote during the request is quoted: a quiet child's messages are as they were,
    and what an earlier request made it write is not quoted again."""
    with open_adapter("faulty:raise", timeout_s=30) as client:
        first = client.run_batch(ECHO_FAMILY, INPUTS)
        assert any(isinstance(o, AdapterError) and o.message.endswith("mode raise triggered") for o in first)
        quiet = client.run_batch("verification_round", [{}])  # refused by the reference code: no stderr
    assert quiet == [AdapterError("adapter reported: spec could not solve this input: KeyError: 'requests'")]


ECHO_WITH_STDERR = """
import sys
sys.stderr.write("at start\\n"); sys.stderr.flush()
for n, line in enumerate(sys.stdin):
    sys.stderr.write(f"during request {n}, line 1\\nduring request {n}, line 2\\n"); sys.stderr.flush()
    sys.stdout.write(line); sys.stdout.flush()
"""


def test_what_a_child_writes_to_stderr_before_its_reply_is_all_there_when_the_reply_is():
    """Child.stderr_since reads the pipe out itself (reads happen only under the lock), so the lines a
    child wrote just before its reply are never still in the pipe: 200 requests in a row, each quoted
    whole, and nothing from before its mark."""
    child = Child([sys.executable, "-c", ECHO_WITH_STDERR])
    try:
        deadline = time.monotonic() + 20
        while child.stderr_tail() != "at start" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert child.stderr_tail() == "at start"
        for n in range(200):
            mark = child.stderr_mark()
            child.send(b"ping\n")
            assert child.lines.get(timeout=20) == b"ping\n"
            assert child.stderr_since(mark) == f"during request {n}, line 1\nduring request {n}, line 2"
        assert child.stderr_since(child.stderr_mark()) == ""
        assert child.stderr_since(child.stderr_mark(), limit=5) == ""
        mark = child.stderr_mark()
        child.send(b"ping\n")
        child.lines.get(timeout=20)
        assert child.stderr_since(mark, limit=10) == "...00, line 2"
    finally:
        child.close(b"")
