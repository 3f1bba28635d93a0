"""The torch candidate's proposals reproduce every round the worker_sessions corpus serves, byte for byte.

The bundled worker endpoint samples with the torch candidate (FP64 allocation, FP64
exp rounded once to FP32), so its rows must be the spec's on every vector: the
generator keeps only draft models whose served rows are far from any tie
(docs/formats/worker_sessions.md). This test holds it to that: for each served
round it calls ``torch_candidate.proposal.propose`` with the slot's seed and
committed token at that moment, encodes its rows with the spec's codec and
compares the REPLY frames and the draws with the corpus. (A test may import both
the spec and a candidate; a candidate never imports the spec.)
"""

from __future__ import annotations

import struct

import pytest

torch = pytest.importorskip("torch")

from qconform.adapters.torch_candidate.proposal import propose  # noqa: E402
from qconform.generators.corpus import default_vectors_dir  # noqa: E402
from qconform.generators.families.worker_sessions import (  # noqa: E402
    config_from_json,
    event_from_json,
    model_from_json,
)
from qconform.generators.validation import load_vector_file  # noqa: E402
from qconform.spec.qrow import QRow  # noqa: E402
from qconform.spec.wire.codec import decode_frame, encode_frame, reply_from_row  # noqa: E402
from qconform.spec.wire.messages import Step  # noqa: E402
from qconform.spec.wire.worker import DraftModel, FrameIn, initial_state, step  # noqa: E402

pytestmark = pytest.mark.rules("R01", "R15", "R22")

CASES = [c for g in load_vector_file(default_vectors_dir() / "worker_sessions.json")["testGroups"] for c in g["tests"]]


def as_f32(bits):
    """FP32 bit patterns as a float32 tensor."""
    return torch.tensor(list(bits), dtype=torch.int64).to(torch.int32).view(torch.float32)


def torch_frames(model: DraftModel, seed: int, x0: int, message: Step, stride: int) -> tuple[list[bytes], list]:
    """The REPLY frames and (counter words, u24) draws of the torch candidate's chain for one STEP."""
    logits = torch.stack([as_f32(row) for row in model.base_logits])
    left = torch.stack([as_f32(row) for row in model.markov_left])
    right = torch.stack([as_f32(row) for row in model.markov_right])
    temperature = struct.unpack("<f", struct.pack("<I", message.temperature))[0]
    result = propose(
        [seed],
        message.generation,
        message.round,
        message.anchor,
        x0,
        logits[None],
        temperature,
        (left, right),
        message.support_policy or None,
    )
    vocab = logits.shape[1]
    frames = []
    for i, token in enumerate(result.tokens[0].tolist()):
        if result.sparse is None:
            assert result.counts is not None
            row = QRow.dense(result.counts[0, i].tolist())
        else:
            pairs = sorted(
                (v, c)
                for v, c in zip(result.sparse.ids[0, i].tolist(), result.sparse.counts[0, i].tolist(), strict=True)
                if c > 0
            )
            row = QRow.sparse(vocab, [v for v, _ in pairs], [c for _, c in pairs])
        position = (message.anchor + i) % (1 << 32)
        reply = reply_from_row(
            message.session_id, message.slot, message.generation, message.round, position, token, row, stride
        )
        frames.append(encode_frame(reply))
    draws = [
        (tuple(w & 0xFFFFFFFF for w in c), u)
        for c, u in zip(result.counters[0].tolist(), result.u24[0].tolist(), strict=True)
    ]
    return frames, draws


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["id"])
def test_the_torch_candidate_reproduces_every_served_round(case):
    config = config_from_json(case["input"]["config"])
    model = model_from_json(case["input"]["model"])
    state = initial_state(config, model)
    served = 0
    for obj in case["input"]["events"]:
        before = state
        state, output = step(state, event_from_json(obj))
        if not output.draws:
            continue
        event = event_from_json(obj)
        assert isinstance(event, FrameIn)
        link = before.link(event.connection)
        assert link is not None
        message = decode_frame(event.data, link.hello)
        assert isinstance(message, Step)
        slot = before.slots[message.slot]
        frames, draws = torch_frames(model, slot.seed, slot.committed_token, message, config.dense_stride)
        assert tuple(frames) == output.frames[:-1], (case["id"], message)
        assert draws == [(d.key.counter_words(), d.u24) for d in output.draws]
        served += 1
    assert served == sum(1 for o in case["expected"]["outputs"] if o["draws"])
