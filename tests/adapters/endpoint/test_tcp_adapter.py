"""The transport adapter ``tcp://HOST:PORT``: the corpus played against endpoints over loopback TCP.

The reference verifier endpoint passes every ``wire_frames`` and
``wire_sessions`` vector through the adapter, and the reference worker every
``proposal_chain`` vector end to end (the harness as the target, every frame
through the spec's receiver, the answer checked draw for draw). The URL is
accepted wherever an adapter name is (registry, client, ``qconform run``), and
an R18 side check turns a payload allocated before a bounds refusal into a fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("torch")

from endpoint_servers import LoopThread, serving  # noqa: E402

from qconform.adapters.endpoint.deployment import hello_config  # noqa: E402
from qconform.adapters.endpoint.model import DraftModel  # noqa: E402
from qconform.adapters.endpoint.verifier import VerifierEndpoint  # noqa: E402
from qconform.adapters.endpoint.worker import WorkerEndpoint  # noqa: E402
from qconform.cli.arguments import check_adapter  # noqa: E402
from qconform.cli.errors import UsageLineError  # noqa: E402
from qconform.generators.corpus import default_vectors_dir  # noqa: E402
from qconform.harness.adapter import AdapterError, AdapterStartError  # noqa: E402
from qconform.harness.judging.judge import judge  # noqa: E402
from qconform.harness.transport.client import open_adapter  # noqa: E402
from qconform.harness.transport.host import construct_adapter  # noqa: E402
from qconform.harness.transport.tcp_adapter import TcpAdapter, allocation_bound, parse_tcp_url  # noqa: E402
from qconform.spec.wire.codec import encode_frame, encode_v1  # noqa: E402
from qconform.spec.wire.header import seal  # noqa: E402
from qconform.spec.wire.messages import Cancel  # noqa: E402
from qconform.spec.wire.negotiation import example_config  # noqa: E402

pytestmark = pytest.mark.rules("R12", "R15", "R16", "R18", "R19", "R22", "R24", "R25", "R28")

VECTORS = default_vectors_dir()


def family_cases(family: str) -> list[dict]:
    document = json.loads((VECTORS / f"{family}.json").read_text(encoding="utf-8"))
    return [dict(case, family=family) for group in document["testGroups"] for case in group["tests"]]


def verdicts(adapter: TcpAdapter, family: str, cases: list[dict]) -> list:
    outcomes = adapter.run_batch(family, [case["input"] for case in cases])
    config = adapter.config()
    return [judge(case, outcome, config) for case, outcome in zip(cases, outcomes)]


@pytest.fixture(scope="module")
def loop():
    thread = LoopThread()
    yield thread
    thread.close()


@pytest.fixture(scope="module")
def verifier_url(loop):
    with serving(loop, VerifierEndpoint(hello_config())) as url:
        yield url


@pytest.fixture(scope="module")
def worker_url(loop):
    with serving(loop, WorkerEndpoint(hello_config(vocab=32), DraftModel.random(32))) as url:
        yield url


@pytest.mark.parametrize("family", ["wire_frames", "wire_sessions"])
def test_reference_verifier_passes_its_families(verifier_url, family):
    adapter = TcpAdapter(verifier_url)
    assert adapter.capabilities().families == ("wire_frames", "wire_sessions")
    results = verdicts(adapter, family, family_cases(family))
    assert Counter(v.cls.value for v in results) == {"pass": len(results)}


def test_reference_worker_passes_proposal_chain_end_to_end(worker_url):
    adapter = TcpAdapter(worker_url)
    assert adapter.capabilities().families == ("proposal_chain", "worker_sessions")
    assert adapter.precision().fp64_allocation
    cases = family_cases("proposal_chain")
    results = verdicts(adapter, "proposal_chain", cases)
    invalid = sum(case["result"] == "invalid" for case in cases)
    assert invalid and Counter(v.cls.value for v in results) == {
        "pass": len(results) - invalid,
        "unsupported": invalid,
    }


def test_a_wrong_answer_from_the_worker_fails(worker_url):
    case = family_cases("proposal_chain")[0]
    wrong = dict(case, expected={**case["expected"], "tokens": [t ^ 1 for t in case["expected"]["tokens"]]})
    adapter = TcpAdapter(worker_url)
    (verdict,) = verdicts(adapter, "proposal_chain", [wrong])
    assert verdict.cls.value == "fail"


def test_tcp_urls():
    assert parse_tcp_url("tcp://127.0.0.1:7700") == ("127.0.0.1", 7700)
    assert parse_tcp_url("tcp://[::1]:80/") == ("::1", 80)
    for bad in ("tcp://127.0.0.1", "udp://127.0.0.1:1", "tcp://:5", "tcp://h:5/path", "tcp://h:99999"):
        with pytest.raises(ValueError):
            parse_tcp_url(bad)


def test_the_url_is_an_adapter_name_everywhere(verifier_url):
    assert isinstance(construct_adapter(verifier_url), TcpAdapter)
    check_adapter(verifier_url)
    with pytest.raises(UsageLineError, match="tcp://HOST:PORT"):
        check_adapter("tcp://nowhere")
    with open_adapter(verifier_url, timeout_s=60) as client:
        assert client.config.name == verifier_url
        outcomes = client.run_batch("wire_sessions", [family_cases("wire_sessions")[0]["input"]])
        assert isinstance(outcomes[0], dict) and "verdicts" in outcomes[0], outcomes[0]


def test_an_endpoint_that_is_not_there_cannot_start():
    with pytest.raises(AdapterStartError):
        open_adapter("tcp://127.0.0.1:1", timeout_s=60)


def test_an_endpoint_that_goes_away_turns_cases_into_errors(loop):
    endpoint = VerifierEndpoint(hello_config())
    with serving(loop, endpoint) as url:
        adapter = TcpAdapter(url)
    outcomes = adapter.run_batch("wire_sessions", [family_cases("wire_sessions")[0]["input"]])
    assert isinstance(outcomes[0], AdapterError) and "connect" in outcomes[0].message


def test_allocation_bound_admits_only_sound_declared_lengths():
    config = example_config(vocab=64, max_support=8)
    frame = encode_frame(Cancel(config.session_id, 1, 0))
    assert allocation_bound(frame, config, True) == len(frame) - 20
    assert allocation_bound(frame, config, False) == 0  # V2_BEFORE_HELLO comes before the payload
    assert allocation_bound(frame[:-1], config, True) == 0
    longer = seal(frame[:12] + (len(frame) - 19).to_bytes(4, "little") + frame[16:] + b"\0")
    assert allocation_bound(longer, config, True) == 0
    v1 = encode_v1([1, 2])
    assert allocation_bound(v1, config, False) == 12 and allocation_bound(v1[:-1], config, False) == 0
    assert allocation_bound(b"QS", config, True) == 0


def test_qconform_run_drives_the_endpoint(verifier_url, tmp_path):
    report = tmp_path / "report.json"
    command = [
        str(Path(sys.executable).with_name("qconform")),
        "run",
        "--adapter",
        verifier_url,
        "--family",
        "wire_sessions",
        "--json",
        str(report),
    ]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    result = subprocess.run(command, capture_output=True, text=True, timeout=180, env=env, input="", check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    summary = json.loads(report.read_text(encoding="utf-8"))
    assert verifier_url in json.dumps(summary)
