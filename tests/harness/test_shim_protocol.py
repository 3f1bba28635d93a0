"""The shim protocol's messages and checks, and the host that serves in-process adapters."""

from __future__ import annotations

import io
import json
import math
from typing import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qconform.generators import registry
from qconform.generators.encoding import DTYPES, encode_blob
from qconform.generators.registry import Family
from qconform.harness.adapter import (
    Adapter,
    AdapterConfig,
    AdapterError,
    Capabilities,
    Outcome,
    PrecisionProfile,
    Unimplemented,
)
from qconform.harness.transport import shim_protocol
from qconform.harness.transport.host import Host
from qconform.harness.transport.shim_protocol import (
    NonFinite,
    ProtocolError,
    blob_problem,
    check_output,
    config_to_json,
    decode_line,
    encode_binary,
    encode_message,
    encoding_problem,
    entry_to_outcome,
    join_sections,
    outcome_to_entry,
    parse_config,
    parse_payload,
)

pytestmark = pytest.mark.rules()

JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.text() | st.floats(allow_nan=False, allow_infinity=False)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
NAMES = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FFF), min_size=1, max_size=12)
MARGINS = st.builds(lambda n, d: f"{n}/{d}", st.integers(0, 2**40), st.integers(1, 2**40))


@settings(max_examples=60)
@given(st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=5))
def test_a_message_is_one_line_and_decodes_to_itself(message):
    line = encode_message(message)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode_line(line) == message


def test_encode_refuses_non_finite_numbers():
    with pytest.raises(ValueError):
        encode_message({"x": math.nan})


def test_non_finite_tokens_are_kept_as_markers_and_located():
    reply = decode_line(b'{"id":1,"outputs":[{"a":[1,NaN]},{"b":-Infinity}]}')
    first, second = reply["outputs"]
    assert isinstance(first["a"][1], NonFinite)
    assert encoding_problem(first) == "output.a[1] is NaN, which JSON does not allow"
    assert encoding_problem(second) == "output.b is -Infinity, which JSON does not allow"
    assert encoding_problem({"a": [1, {"b": "NaN"}]}) is None  # a string is not a number


@pytest.mark.parametrize(
    "line, fragment",
    [
        (b"hello\n", "reply is not JSON"),
        (b"[1, 2]\n", "reply is not a JSON object"),
        (b'{"id": 1\n', "reply is not JSON"),
        (b"\xff\xfe{}\n", "reply is not JSON"),
    ],
)
def test_decode_line_refuses_what_is_not_a_json_object(line, fragment):
    with pytest.raises(ProtocolError, match=fragment):
        decode_line(line)


CONFIGS = st.builds(
    AdapterConfig,
    name=NAMES,
    capabilities=st.builds(
        Capabilities,
        families=st.lists(NAMES, max_size=4).map(tuple),
        injected_draws=st.booleans(),
        devices=st.lists(NAMES, min_size=1, max_size=3).map(tuple),
    ),
    precision=st.builds(
        PrecisionProfile,
        fp64_allocation=st.booleans(),
        exp_ulp=MARGINS,
        ratio_margin=MARGINS,
        residual_margin=MARGINS,
        notes=st.text(max_size=20),
    ),
    device=NAMES,
    extra=st.dictionaries(st.sampled_from(["version", "commit", "build"]), st.text(max_size=10), max_size=2),
)


@settings(max_examples=40)
@given(CONFIGS)
def test_config_round_trips_through_get_config(config):
    wire = json.loads(encode_message({"config": config_to_json(config)}))["config"]
    assert wire["protocol"] == shim_protocol.PROTOCOL_VERSION
    assert parse_config(wire) == config


def test_missing_precision_fields_are_exact():
    config = parse_config({"name": "x", "protocol": 1, "capabilities": {"families": ["rng_abi"]}, "precision": {}})
    assert config.precision == PrecisionProfile()
    assert config.capabilities == Capabilities(("rng_abi",), True, ("cpu",))
    assert config.device == "cpu"


GOOD_CONFIG = {"name": "x", "protocol": 1, "capabilities": {"families": []}, "precision": {}}


@pytest.mark.parametrize(
    "change, fragment",
    [
        ({"protocol": 2}, "this harness speaks 1"),
        ({"name": None}, "config.name must be str"),
        ({"capabilities": {"families": "rng_abi"}}, "config.capabilities.families must be list"),
        ({"capabilities": {"families": [], "gpu": True}}, "unknown keys ['gpu']"),
        ({"capabilities": {}}, "config.capabilities.families is missing"),
        ({"capabilities": {"families": [], "injected_draws": "yes"}}, "injected_draws must be bool"),
        ({"precision": {"ratio_margin": 0.5}}, "ratio_margin must be str"),
        ({"precision": {"ratio_margin": "0.5"}}, "nonnegative rational"),
        ({"precision": {"exp_ulp": "1/0"}}, "nonnegative rational"),
        ({"precision": {"exp_ulp": "-1/2"}}, "nonnegative rational"),
        ({"precision": {"tolerance": "1/2"}}, "unknown keys ['tolerance']"),
        ({"precision": {"fp64_allocation": 1}}, "fp64_allocation must be bool"),
    ],
)
def test_invalid_configs_are_refused_with_the_field_named(change, fragment):
    with pytest.raises(ProtocolError) as info:
        parse_config({**GOOD_CONFIG, **change})
    assert fragment in str(info.value)


def test_a_config_missing_a_key_names_it():
    for key in ("name", "protocol", "capabilities", "precision"):
        with pytest.raises(ProtocolError, match=f"config.{key} is missing"):
            parse_config({k: v for k, v in GOOD_CONFIG.items() if k != key})


def no_problem(output: dict) -> None:
    return None


@pytest.mark.parametrize(
    "outcome", [{"tokens": [1, 2]}, {"error": "ZERO_MASS"}, Unimplemented("sparse"), AdapterError("boom")]
)
def test_outcomes_round_trip_through_entries(outcome):
    entry = json.loads(json.dumps(outcome_to_entry(outcome)))
    back = entry_to_outcome(entry, no_problem)
    if isinstance(outcome, AdapterError):
        assert back == AdapterError("adapter reported: boom")
    else:
        assert back == outcome


@pytest.mark.parametrize(
    "entry, fragment",
    [
        ([1, 2], "malformed output entry"),
        ({"status": "fine"}, "malformed output entry"),
        ({"output": {}}, "malformed output entry"),
        ({"status": "ok"}, "status ok without an output"),
        ({"status": "ok", "output": [1]}, "output must be a JSON object, got list"),
        ({"status": "ok", "output": "tokens"}, "output must be a JSON object, got str"),
    ],
)
def test_malformed_entries_become_adapter_errors(entry, fragment):
    outcome = entry_to_outcome(entry, no_problem)
    assert isinstance(outcome, AdapterError) and fragment in outcome.message


def test_an_ok_output_is_checked():
    outcome = entry_to_outcome({"status": "ok", "output": {"a": 1}}, lambda output: f"bad {sorted(output)}")
    assert outcome == AdapterError("malformed output: bad ['a']")


@settings(max_examples=50)
@given(st.sampled_from(sorted(DTYPES)), st.data())
def test_consistent_blobs_pass_and_resized_ones_are_caught(dtype, data):
    bits = 8 * DTYPES[dtype][1]
    low = -(1 << (bits - 1)) if dtype == "i32" else 0
    values = data.draw(st.lists(st.integers(low, (1 << bits) - 1 + low), min_size=1, max_size=6))
    blob = encode_blob(dtype, values)
    assert blob_problem(blob, "x") is None
    grown = {**blob, "shape": [len(values) + 1]}
    size = DTYPES[dtype][1]
    assert blob_problem(grown, "x") == (
        f"blob at x holds {len(values) * size} bytes; shape [{len(values) + 1}] of {dtype} needs {(len(values) + 1) * size}"
    )


@pytest.mark.parametrize(
    "change, fragment",
    [
        ({"dtype": "f16"}, "unknown dtype 'f16'"),
        ({"shape": [-1]}, "not a list of nonnegative integers"),
        ({"shape": 2}, "not a list of nonnegative integers"),
        ({"b64": "AAA"}, "invalid base64"),
        ({"extra": 1}, "must have exactly dtype, shape, b64"),
    ],
)
def test_inconsistent_blobs_are_named(change, fragment):
    problem = encoding_problem({"row": {"counts": {**encode_blob("u32", [1, 2]), **change}}})
    assert problem is not None and problem.startswith("blob at output.row.counts") and fragment in problem


TOY_FAMILY = Family(
    name="toy",
    description="a toy family for output checks",
    rules=("R08",),
    notes={},
    build=lambda: iter(()),
    expected_schema={
        "type": "object",
        "properties": {
            "tokens": {"type": "array", "items": {"type": "integer", "minimum": 0}},
            "counts": {"$ref": "#/$defs/blob"},
        },
        "required": ["tokens"],
        "additionalProperties": False,
    },
)


@pytest.fixture
def toy_registry(monkeypatch):
    monkeypatch.setattr(registry, "family_names", lambda: ("toy",))
    monkeypatch.setattr(registry, "load_family", lambda name: {"toy": TOY_FAMILY}[name])
    shim_protocol.output_validator.cache_clear()
    yield
    shim_protocol.output_validator.cache_clear()


def test_outputs_are_checked_against_the_family_schema(toy_registry):
    def check(output: dict) -> str | None:
        return check_output("toy", output, strict_schema=True)

    def problem(output: dict) -> str:
        found = check(output)
        assert found is not None, f"{output!r} passed the check"
        return found

    assert check({"tokens": [0, 3]}) is None
    assert check({"error": "ANY_CODE"}) is None  # a refusal is well-formed
    assert check({"tokens": [-1]}) == (
        "output['tokens'][0] does not match the toy output format: -1 is less than the minimum of 0"
    )
    assert "'extra' was unexpected" in problem({"tokens": [], "extra": 1})
    assert problem({"error": ""}).startswith("output['error'] does not match")
    for not_a_refusal in ({"error": 5}, {"error": "CODE", "detail": "x"}, {"error": None}):
        assert check(not_a_refusal) is not None, not_a_refusal
    blob = {**encode_blob("u32", [5]), "shape": [2]}
    assert problem({"tokens": [], "counts": blob}).startswith("blob at output.counts holds 4 bytes")
    assert check_output("not_registered", {"anything": [1]}, strict_schema=True) is None  # only encoding checks


def test_the_structure_only_path_checks_encodings_and_leaves_the_structure_to_the_comparator(toy_registry):
    assert check_output("toy", {"tokens": [-1], "extra": 1}) is None  # the comparator's to find
    blob = {**encode_blob("u32", [5]), "shape": [2]}
    unchecked_length = check_output("toy", {"tokens": [], "counts": blob})
    assert unchecked_length is not None and unchecked_length.startswith("blob at output.counts holds 4 bytes")
    assert check_output("toy", {"tokens": [NonFinite("NaN")]}) == "output.tokens[0] is NaN, which JSON does not allow"


# --- the host, in process ---------------------------------------------------------------


class ScriptedAdapter(Adapter):
    """Answers ``{"double": 2x}``; raises on x == 13; misbehaves on request."""

    name = "scripted"

    def __init__(self, device: str = "cpu", answer=None) -> None:
        super().__init__(device)
        self.answer = answer

    def capabilities(self) -> Capabilities:
        return Capabilities(families=("double",))

    def precision(self) -> PrecisionProfile:
        return PrecisionProfile(ratio_margin="1/4294967296")

    def run_batch(self, family: str, inputs: Sequence[dict]) -> list[Outcome]:
        if self.answer is not None:
            return self.answer(inputs)
        if any(case["x"] == 13 for case in inputs):
            raise ValueError("unlucky 13")
        return [{"double": 2 * case["x"]} for case in inputs]


def serve(adapter: Adapter | None, *requests: dict | bytes, load_error: str = "") -> list[dict]:
    lines = b"".join(r if isinstance(r, bytes) else encode_message(r) for r in requests)
    out = io.BytesIO()
    assert Host(adapter, load_error).serve(io.BytesIO(lines), out) == 0
    return [json.loads(line) for line in out.getvalue().splitlines()]


def run(x_values, answer=None) -> dict:
    return serve(
        ScriptedAdapter(answer=answer),
        {"id": 7, "op": "run", "family": "double", "inputs": [{"x": x} for x in x_values]},
    )[0]


def test_host_answers_get_config_with_the_adapters_config():
    (reply,) = serve(ScriptedAdapter(), {"id": 1, "op": "get_config"})
    assert reply["id"] == 1 and reply["status"] == "ok"
    assert parse_config(reply["config"]) == ScriptedAdapter().config()


def test_host_runs_a_batch_in_order():
    assert run([1, 2, 3]) == {
        "id": 7,
        "status": "ok",
        "outputs": [{"status": "ok", "output": {"double": d}} for d in (2, 4, 6)],
    }


def test_host_pins_an_exception_to_the_case_that_raised():
    outputs = run([1, 13, 3, 13])["outputs"]
    assert [o["status"] for o in outputs] == ["ok", "error", "ok", "error"]
    assert outputs[1]["message"].startswith("ValueError: unlucky 13 (at test_shim_protocol.py:")
    assert outputs[2]["output"] == {"double": 6}


def test_host_turns_unserializable_outputs_into_case_errors():
    outputs = run([1, 2, 3, 4], answer=lambda inputs: [{"v": math.nan}, [1], {"v": 1}, {"v": object()}])["outputs"]
    assert [o["status"] for o in outputs] == ["error", "error", "ok", "error"]
    assert "not strict JSON" in outputs[0]["message"]
    assert "run_batch returned a list where an output object belongs" in outputs[1]["message"]
    assert "not strict JSON" in outputs[3]["message"]


def test_host_refuses_a_batch_of_the_wrong_length():
    reply = run([1, 2, 3], answer=lambda inputs: [{"v": 1}])
    assert reply == {"id": 7, "status": "error", "message": "run_batch returned 1 outcomes for 3 inputs"}


def test_host_passes_unimplemented_and_adapter_errors_through():
    outputs = run([1, 2], answer=lambda inputs: [Unimplemented("no"), AdapterError("bad")])["outputs"]
    assert outputs == [{"status": "unimplemented", "reason": "no"}, {"status": "error", "message": "bad"}]


def test_host_answers_requests_it_cannot_serve():
    replies = serve(
        ScriptedAdapter(),
        {"id": 1, "op": "run", "family": "other", "inputs": [{}]},
        {"id": 2, "op": "dance"},
        b"not json\n",
        {"id": 3, "op": "run", "family": "double", "inputs": "x"},
        b"\n",
        {"id": 4, "op": "shutdown"},
        {"id": 5, "op": "get_config"},
    )
    assert [r["id"] for r in replies] == [1, 2, None, 3, 4]  # nothing after shutdown
    assert replies[0] == {"id": 1, "status": "unimplemented", "reason": "scripted does not implement other"}
    assert replies[1]["status"] == "error" and "unknown op 'dance'" in replies[1]["message"]
    assert replies[2]["status"] == "error" and "request is not JSON" in replies[2]["message"]
    assert replies[3]["status"] == "error" and "list of inputs" in replies[3]["message"]
    assert replies[4] == {"id": 4, "status": "ok"}


def test_host_without_an_adapter_reports_why_it_failed_to_load():
    replies = serve(None, {"id": 1, "op": "get_config"}, {"id": 2, "op": "shutdown"}, load_error="no such thing")
    assert replies == [{"id": 1, "status": "error", "message": "no such thing"}, {"id": 2, "status": "ok"}]


# --- binary payloads (docs/shim-protocol.md, "Binary payloads") ------------------------------


def split_message(data: bytes) -> tuple[dict, bytes]:
    line, _, rest = data.partition(b"\n")
    return decode_line(line), rest


def test_binary_messages_move_every_blob_to_a_section_and_back():
    message = {
        "id": 3,
        "inputs": [{"row": encode_blob("f32", [1, 2, 3]), "k": 2}, {"ids": encode_blob("i32", [-1]), "x": [1, 2]}],
        "empty": encode_blob("u8", []),
    }
    head, rest = split_message(encode_binary(message))
    assert head["sections"] == [12, 4, 0] and len(rest) == 16
    assert head["inputs"][0]["row"] == {"dtype": "f32", "shape": [3], "section": 0}
    assert "b64" not in json.dumps(head)
    assert join_sections(head, rest) == message
    assert encode_binary({"id": 1, "op": "shutdown"}) == encode_message({"id": 1, "op": "shutdown"})
    bad = {"dtype": "u32", "shape": [1], "b64": "AAA"}  # left in base64, for the checks to name
    assert split_message(encode_binary({"out": bad}))[0] == {"out": bad}


@pytest.mark.parametrize(
    "head, data, fragment",
    [
        ({"sections": [4], "b": {"dtype": "u32", "shape": [1], "section": 1}}, b"abcd", "names section 1"),
        ({"sections": [4, 0], "b": {"dtype": "u32", "shape": [1], "section": 0}}, b"abcd", "section 1 is named"),
        ({"sections": [4], "b": {"dtype": "u32", "shape": [1], "section": 0}}, b"abc", "3 followed"),
        ({"sections": [4], "b": [{"section": 0}, {"section": 0}]}, b"abcd", "names section 0"),
        ({"sections": [-1]}, b"", "list of byte counts"),
        ({"sections": "4"}, b"", "list of byte counts"),
    ],
)
def test_malformed_sections_are_protocol_errors(head, data, fragment):
    with pytest.raises(ProtocolError, match=fragment):
        join_sections(head, data)


def test_the_host_answers_in_the_binary_form_only_when_offered():
    blob_adapter = ScriptedAdapter(answer=lambda inputs: [{"counts": case["counts"]} for case in inputs])
    host, blob = Host(blob_adapter), encode_blob("u32", [7, 8])
    out = io.BytesIO()
    requests = [
        encode_message({"id": 1, "op": "get_config", "payload": ["json", "binary"]}),
        encode_binary({"id": 2, "op": "run", "family": "double", "inputs": [{"counts": blob}]}),
    ]
    assert host.serve(io.BytesIO(b"".join(requests)), out) == 0
    config_line, rest = out.getvalue().split(b"\n", 1)
    assert json.loads(config_line)["config"]["payload"] == "binary"
    head, data = split_message(rest)
    assert head["sections"] == [8] and join_sections(head, data)["outputs"] == [
        {"status": "ok", "output": {"counts": blob}}
    ]
    (config,) = serve(ScriptedAdapter(), {"id": 1, "op": "get_config"})  # no offer: the JSON form
    assert "payload" not in config["config"]


# --- raw blobs (docs/adapters.md, "Raw blobs") -----------------------------------------------


class RawAdapter(ScriptedAdapter):
    """Takes raw blobs; answers each input's ``counts`` doubled, raw, and records what it was given."""

    raw_blobs = True

    def __init__(self) -> None:
        super().__init__(answer=self.double)
        self.seen: list[dict] = []

    def double(self, inputs: Sequence[dict]) -> list[Outcome]:
        self.seen += inputs
        return [{"counts": {**case["counts"], "raw": bytes(2 * b for b in case["counts"]["raw"])}} for case in inputs]


@pytest.mark.parametrize("binary", [True, False])
def test_a_raw_adapter_takes_and_answers_raw_blobs_in_both_payload_forms(binary):
    adapter, blob = RawAdapter(), encode_blob("u32", [7, 8])
    offer = ["json", "binary"] if binary else ["json"]
    run_request = {"id": 2, "op": "run", "family": "double", "inputs": [{"counts": blob}]}
    out = io.BytesIO()
    requests = [
        encode_message({"id": 1, "op": "get_config", "payload": offer}),
        encode_binary(run_request) if binary else encode_message(run_request),
    ]
    assert Host(adapter).serve(io.BytesIO(b"".join(requests)), out) == 0
    assert adapter.seen == [{"counts": {"dtype": "u32", "shape": [2], "raw": bytes([7, 0, 0, 0, 8, 0, 0, 0])}}]
    assert type(adapter.seen[0]["counts"]["raw"]) is bytes  # picklable, hashable: no view into the request
    _, rest = out.getvalue().split(b"\n", 1)
    head, data = split_message(rest)
    reply = join_sections(head, data) if binary else head
    assert reply["outputs"] == [{"status": "ok", "output": {"counts": encode_blob("u32", [14, 16])}}]
    if binary:  # the caller that reads raw blobs (the judge) gets the section's bytes as they are
        raw_reply = join_sections(head, data, raw=True)
        assert raw_reply["outputs"][0]["output"]["counts"]["raw"] == bytes([14, 0, 0, 0, 16, 0, 0, 0])


def test_blob_forms_convert_both_ways_and_the_checks_read_both():
    message = {"a": [encode_blob("f32", [1, 2]), {"b": encode_blob("u8", [])}], "c": 1}
    raw = shim_protocol.to_raw_blobs(message)
    assert raw["a"][0] == {"dtype": "f32", "shape": [2], "raw": bytes([1, 0, 0, 0, 2, 0, 0, 0])}
    assert shim_protocol.to_json_blobs(raw) == message
    sections: list = []
    assert shim_protocol.to_sections(raw, sections) == shim_protocol.to_sections(message, [])
    assert [bytes(s) for s in sections] == [bytes([1, 0, 0, 0, 2, 0, 0, 0]), b""]
    assert shim_protocol.encoding_problem(raw) is None
    short = {"dtype": "u32", "shape": [2], "raw": b"\0" * 7}
    assert "holds 7 bytes; shape [2] of u32 needs 8" in (shim_protocol.encoding_problem({"x": short}) or "")
    assert "not contiguous bytes" in (shim_protocol.blob_problem({**short, "raw": [1, 2]}, "x") or "")
    assert shim_protocol.without_payloads({"x": short}) == {"x": {"dtype": "u32", "shape": [2], "b64": ""}}
    undecodable = {"dtype": "u32", "shape": [1], "b64": "AAA"}  # left as it is, for the checks to name
    assert shim_protocol.to_raw_blobs({"x": undecodable}) == {"x": undecodable}


def test_a_config_payload_must_be_known():
    good = config_to_json(AdapterConfig("x", Capabilities(("rng_abi",)), PrecisionProfile()))
    assert parse_payload(good) == "json" and parse_payload({**good, "payload": "binary"}) == "binary"
    with pytest.raises(ProtocolError, match="config.payload must be one of"):
        parse_config({**good, "payload": "shm"})
