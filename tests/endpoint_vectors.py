"""The wire vectors as the reference endpoint's tests read them (shared by test_endpoint_codec.py
and test_endpoint_native.py): a family's cases, a blob's bytes, a wire_sessions case played
through a full receiver."""

from __future__ import annotations

import base64
import json

from qconform.adapters.endpoint import answers, deployment
from qconform.adapters.endpoint.receiver import Receiver
from qconform.generators.corpus import default_vectors_dir


def cases(family: str) -> list[dict]:
    document = json.loads((default_vectors_dir() / f"{family}.json").read_text(encoding="utf-8"))
    return [case for group in document["testGroups"] for case in group["tests"]]


def raw(blob: dict) -> bytes:
    return base64.b64decode(blob["b64"])


def played_session(case: dict, receiver: Receiver | None = None) -> dict:
    """A wire_sessions case's events through ``receiver`` (a new one under the case's HELLO by
    default): its verdicts, final state and counters, in the form of the case's ``expected``; a
    configuration the design forbids is refused as the verifier's ``configure`` refuses it."""
    if deployment.config_problem(case["input"]["config"]) is not None:
        return {"error": "BAD_SHAPE"}
    if receiver is None:
        receiver = Receiver(answers.hello_fields(case["input"]["config"]))
    verdicts = []
    for event in case["input"]["events"]:
        if "frame" in event:
            verdict = receiver.feed(raw(event["frame"]), event.get("connection", 0))
        elif "timeout" in event:
            verdict = receiver.timeout(event["timeout"])
        else:
            verdict = receiver.disconnect(event.get("connection", 0))
        verdicts.append(answers.verdict_json(verdict))
    return {"verdicts": verdicts, "final": answers.state_json(receiver), "counters": answers.counters_json(receiver)}
