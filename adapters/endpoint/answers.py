"""The endpoint's JSON view of what it decoded and holds (docs/formats/wire_frames.md, wire_sessions.md).

The endpoint's own encoder of those formats, so the harness can compare the
endpoint's answers with the corpus: 64-bit integers as decimal strings, FP32
fields as ``{"f32": "0x........"}``, ASCII identities with their NUL padding
stripped, digests as hex, q rows as typed little-endian blobs.
"""

from __future__ import annotations

from . import layout
from .blobs import array, blob
from .codec import Message, encode, encode_v1
from .commits import commit_fields
from .receiver import Disposition, Receiver
from .replies import row_reply
from .validation import QRow


def field_json(kind: str, value):
    if kind == "u64":
        return str(value)
    if kind == "f32":
        return {"f32": f"0x{value:08x}"}
    if kind == "text":  # the bytes before the first NUL, one character per byte (docs/wire-v2.md)
        return value.split(b"\0", 1)[0].decode("latin-1")
    if kind == "digest":
        return value.hex()
    return value


def field_value(kind: str, value):
    """The inverse of :func:`field_json` (reading a HELLO object)."""
    if kind == "u64":
        return int(value)
    if kind == "f32":
        return int(value["f32"], 16)
    if kind == "text":
        return value.encode("ascii").ljust(32, b"\0")
    if kind == "digest":
        return bytes.fromhex(value)
    return value


def fields_json(message_type: int, fields: dict) -> dict:
    spec = layout.FIELDS[message_type]
    return {name: field_json(kind, fields[name]) for name, kind in zip(spec.names, spec.kinds)}


def hello_fields(obj: dict) -> dict:
    """A HELLO (or receiver configuration) from its JSON object."""
    spec = layout.FIELDS[layout.HELLO]
    return {name: field_value(kind, obj[name]) for name, kind in zip(spec.names, spec.kinds)}


def row_json(row: QRow) -> dict:
    if row.ids is None:
        return {"representation": "dense", "counts": blob("u32", row.counts)}
    return {"representation": "sparse", "ids": blob("i32", row.ids), "counts": blob("u32", row.counts)}


def message_json(message: Message, row: QRow | None) -> dict:
    """A decoded message: type, every fixed field, and a REPLY's validated q row."""
    if message.type == 0:
        return {"type": layout.V1_NAME, "tokens": list(message.tokens)}
    out = {"type": message.name, **fields_json(message.type, message.fields)}
    if row is not None:
        out["q"] = row_json(row)
    return out


def message_frame(config: dict, obj: dict) -> bytes:
    """The frame this endpoint sends for a message of the ``wire_frames`` encoding cases, under ``config``.

    A REPLY is given its routing fields, token and q row; the rest comes from the
    worker's own sender (``replies.row_reply``), the code that writes its rounds. A
    COMMIT in ``outcome`` form gets its fields from the target's own rule
    (``target.commit_fields``), the code that commits its rounds.
    """
    if obj["type"] == layout.V1_NAME:
        return encode_v1(list(obj["tokens"]))
    message_type = next(code for code, name in layout.TYPE_NAMES.items() if name == obj["type"])
    if message_type == layout.COMMIT and "outcome" in obj:
        outcome = obj["outcome"]
        accepted, token, new_committed = commit_fields(outcome["anchor"], outcome["accepted"], outcome["emitted"])
        fields = {
            "session_id": int(obj["session_id"]),
            "generation": obj["generation"],
            "round": obj["round"],
            "slot": obj["slot"],
            "accepted": accepted,
            "token": token,
            "new_committed": new_committed,
        }
        spec = layout.FIELDS[message_type]
        return encode(message_type, {name: fields[name] for name in spec.names})
    if message_type != layout.REPLY:
        spec = layout.FIELDS[message_type]
        return encode(message_type, {name: field_value(kind, obj[name]) for name, kind in zip(spec.names, spec.kinds)})
    q = obj["q"]
    ids = array(q["ids"], "i32") if q["representation"] == "sparse" else None
    route = Message(
        layout.STEP,
        {
            "session_id": int(obj["session_id"]),
            "generation": obj["generation"],
            "round": obj["round"],
            "anchor": obj["position"],
            "slot": obj["slot"],
        },
    )
    return row_reply(route, 0, obj["token"], array(q["counts"], "u32"), ids, config["dense_stride"]).data


def verdict_json(verdict: Disposition) -> dict:
    out = {"verdict": verdict.kind, "discarded": list(verdict.discarded)}
    if verdict.reason is not None:
        out["reason"] = verdict.reason
    if verdict.answer is not None:
        out["answer"] = blob("u8", list(verdict.answer))
    return out


def state_json(receiver: Receiver, connection: int = 0) -> dict:
    """The receiver's state as wire_sessions' ``final`` shows it, the link as ``connection`` sees it."""
    slots = []
    for index, slot in enumerate(receiver.slots):
        current = slot.open
        slots.append(
            {
                "slot": index,
                "generation": slot.generation,
                "live": slot.live,
                "committed": slot.committed,
                "last_round": slot.last_round,
                "seed": str(slot.seed),
                "open": None
                if current is None
                else {
                    "round": current.step["round"],
                    "anchor": current.step["anchor"],
                    "rows": len(current.replies),
                    "consumable": receiver.is_consumable(current),
                },
            }
        )
    negotiated = receiver.link(connection)
    return {
        "negotiated": negotiated is not None,
        "session_id": None if negotiated is None else str(negotiated["session_id"]),
        "slots": slots,
    }


def counters_json(receiver: Receiver) -> dict:
    return {name: count for name, count in sorted(receiver.counters.items()) if count}
