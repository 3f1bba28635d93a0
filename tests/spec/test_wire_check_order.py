"""docs/wire-v2.md decides the reason of every frame (R12, R18-R20, R27): its check-order tables are the spec's,
and a decoder written from the document alone agrees with the spec on the ``wire_frames`` vectors.

The decoder below reads the field layout (offsets and types) and the check order from the document's tables and
implements each row's failing condition from its words (the ``CONDITIONS`` map, keyed by the document's text). It
imports nothing from ``qconform.spec``; the CRC-32C is google-crc32c's. Swapping two adjacent rows of any table
makes it disagree with some ``check_order`` vector: the corpus pins every order decision the tables make.
"""

from __future__ import annotations

import base64
import json
import math
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import google_crc32c
import pytest

from qconform.generators.corpus import default_vectors_dir
from qconform.generators.wire_frame_faults import EXCLUSIVE
from qconform.spec.wire import checks
from qconform.spec.wire.layout import MESSAGE_CODES
from qconform.spec.wire.negotiation import BOUND_FIELDS, IDENTITY_FIELDS

pytestmark = pytest.mark.rules("R12", "R14", "R15", "R16", "R17", "R18", "R19", "R20", "R27")

DOC = Path(__file__).resolve().parents[2] / "docs" / "wire-v2.md"
TEXT = DOC.read_text(encoding="utf-8")
M = 1 << 24


def table_after(heading: str) -> list[list[str]]:
    """The body rows of the first table after ``heading`` (cells stripped)."""
    lines = TEXT.splitlines()
    rows: list[list[str]] = []
    for line in lines[lines.index(heading) + 1 :]:
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif rows:
            break
    return rows[2:]


def unquote(cell: str) -> str:
    return cell[1:-1] if cell.startswith("`") and cell.endswith("`") else cell


@dataclass(frozen=True)
class Row:
    number: int
    stage: str
    when: str
    code: str


def order_table(name: str) -> list[Row]:
    return [Row(int(r[0]), r[1], r[2], unquote(r[3])) for r in table_after(f"#### Check order: {name}")]


TABLE_NAMES = ("HELLO", "STEP", "REPLY", "COMPLETION", "COMMIT", "RESET", "CANCEL", "HELLO_ANSWER", "v1 greedy frame")


# ---------------------------------------------------------------- the document's tables are the spec's


@pytest.mark.parametrize("name", [n for n in TABLE_NAMES if n != "HELLO"])
def test_document_order_tables_are_the_spec_tables(name):
    spec = checks.V1_CHECKS if name == "v1 greedy frame" else checks.MESSAGE_CHECKS[MESSAGE_CODES[name]]
    documented = [(r.number, r.stage, r.when, r.code) for r in order_table(name)]
    assert documented == [(i, c.stage, c.when, c.code) for i, c in enumerate(spec, 1)]


def test_document_hello_order_is_negotiation_order():
    rows = order_table("HELLO")
    assert (rows[0].when, rows[0].code) == ("HELLO was already negotiated on this connection", "UNEXPECTED_MESSAGE")
    expected = [(f"`{n}` is not the receiver's", c) for n, c in IDENTITY_FIELDS]
    expected += [(f"`{n}` is outside 1..the receiver's", c) for n, c in BOUND_FIELDS]
    assert [(r.when, r.code) for r in rows[1:]] == expected
    assert [r.number for r in rows] == list(range(1, len(rows) + 1))


# ---------------------------------------------------------------- a decoder from the document alone

FORMATS = {
    "u16": "<H",
    "u32": "<I",
    "u64": "<Q",
    "i32": "<i",
    "f32": "<I",
    "u8[4]": "<4s",
    "char[32]": "<32s",
    "u8[32]": "<32s",
}


def layout(heading: str) -> list[tuple[str, int, str]]:
    """(name, offset, type) of each fixed field, from the document's layout table under ``heading``."""
    return [(unquote(r[0]), int(r[1]), unquote(r[2])) for r in table_after(heading)]


def type_codes() -> dict[int, str]:
    """Message type codes from the document's sentence "Message type codes: HELLO 1, STEP 2, ..."."""
    line = next(x for x in TEXT.splitlines() if x.startswith("Message type codes:"))
    line += " " + TEXT.splitlines()[TEXT.splitlines().index(line) + 1]
    return {int(code): name for name, code in re.findall(r"([A-Z_]+) (\d+)", line)}


TYPES = type_codes()
LAYOUTS = {
    name: layout(next(h for h in TEXT.splitlines() if h.startswith(f"### {name} (type "))) for name in TYPES.values()
}
HEADER = layout("### Header")
V1_HEADER = layout("### v1 greedy header")
ROW_STAGES = ("fixed", "content")


def read(data: bytes, fields: list[tuple[str, int, str]], base: int = 0) -> dict:
    return {name: struct.unpack_from(FORMATS[kind], data, base + offset)[0] for name, offset, kind in fields}


def fixed_size(fields: list[tuple[str, int, str]]) -> int:
    _, offset, kind = fields[-1]
    return offset + struct.calcsize(FORMATS[kind])


def hello_params(obj: dict) -> dict:
    """The JSON HELLO object as wire values (ASCII IDs NUL-padded, digests as bytes, u64 from strings)."""
    out = {}
    for name, _, kind in LAYOUTS["HELLO"]:
        value = obj[name]
        if kind == "u64":
            value = int(value)
        elif kind == "char[32]":
            value = value.encode("ascii").ljust(32, b"\0")
        elif kind == "u8[32]":
            value = bytes.fromhex(value)
        out[name] = value
    return out


def f32(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def finite(bits: int) -> bool:
    return not (math.isnan(f32(bits)) or math.isinf(f32(bits)))


@dataclass
class Frame:
    """What the rows look at: the fixed fields, the negotiated HELLO, the payload, the HELLO state."""

    fields: dict
    params: dict
    payload: bytes
    negotiated: bool = True
    data: bytes = b""
    tail: dict = field(default_factory=dict)

    def parse_tail(self) -> None:
        """ids and values as the tail's bytes hold them (a sparse tail of n entries is n IDs then n values)."""
        body = self.payload[36:]
        if self.fields.get("representation") == 2:
            n = len(body) // 8
            self.tail = {
                "ids": list(struct.unpack_from(f"<{n}i", body)),
                "values": list(struct.unpack_from(f"<{n}I", body, 4 * n)),
            }
        elif self.fields.get("representation") == 1:
            self.tail = {"ids": None, "values": list(struct.unpack_from(f"<{len(body) // 4}I", body))}

    @property
    def dense(self) -> bool:
        return self.fields["representation"] == 1

    @property
    def sparse(self) -> bool:
        return self.fields["representation"] == 2

    def row_values(self) -> list[int]:
        values = self.tail["values"]
        return values if self.sparse else values[: self.params["vocab"]]

    def counts(self) -> list[Fraction]:
        return [Fraction(f32(b)) * M for b in self.row_values()]

    def q_count(self, token: int) -> Fraction:
        if self.sparse:
            return sum((c for i, c in zip(self.tail["ids"], self.counts()) if i == token), Fraction(0))
        return self.counts()[token] if 0 <= token < len(self.row_values()) else Fraction(0)


def v1_fields(f: Frame) -> dict:
    return read(f.data, V1_HEADER)


def v1_count(f: Frame) -> int:
    return struct.unpack_from("<I", f.data, 12)[0]


CONDITIONS: dict[str, Callable[[Frame], bool]] = {
    # every v2 message after HELLO
    "`session_id` is not the negotiated session": lambda f: f.fields["session_id"] != f.params["session_id"],
    "`slot` >= `max_slots`": lambda f: f.fields["slot"] >= f.params["max_slots"],
    # STEP
    "`depth` is not the negotiated depth": lambda f: f.fields["depth"] != f.params["depth"],
    "`support_policy` > `max_support`": lambda f: f.fields["support_policy"] > f.params["max_support"],
    "the reply `support_policy` asks for is larger than `max_reply_bytes`": lambda f: (
        36 + (4 * f.params["dense_stride"] if f.fields["support_policy"] == 0 else 8 * f.fields["support_policy"])
        > f.params["max_reply_bytes"]
    ),
    "`temperature` is NaN or infinite": lambda f: not finite(f.fields["temperature"]),
    "`temperature` is not positive (-0.0 included)": lambda f: (
        finite(f.fields["temperature"]) and not f32(f.fields["temperature"]) > 0
    ),
    # REPLY, fixed fields
    "`representation` is 0 or `entry_count` is 0": lambda f: (
        f.fields["representation"] == 0 or f.fields["entry_count"] == 0
    ),
    "dense: `entry_count` is not `dense_stride`": lambda f: (
        f.dense and f.fields["entry_count"] != f.params["dense_stride"]
    ),
    "sparse: `entry_count` > `max_support`": lambda f: f.sparse and f.fields["entry_count"] > f.params["max_support"],
    "`representation` is above 2": lambda f: f.fields["representation"] > 2,
    "the payload length is not 36 + `entry_count` entries (4 bytes dense, 8 sparse)": lambda f: (
        len(f.payload) != 36 + (4 if f.dense else 8) * f.fields["entry_count"]
    ),
    # REPLY, q row
    "`q_checksum` is not the CRC-32C of the tail bytes": lambda f: (
        google_crc32c.value(f.payload[36:]) != f.fields["q_checksum"]
    ),
    "`token` is outside [0, `vocab`)": lambda f: not 0 <= f.fields["token"] < f.params["vocab"],
    "sparse: an ID is outside [0, `vocab`)": lambda f: (
        f.sparse and any(not 0 <= i < f.params["vocab"] for i in f.tail["ids"])
    ),
    "sparse: an ID is listed twice": lambda f: f.sparse and len(set(f.tail["ids"])) < len(f.tail["ids"]),
    "sparse: an ID is below the one before it": lambda f: (
        f.sparse and any(b < a for a, b in zip(f.tail["ids"], f.tail["ids"][1:]))
    ),
    "dense: an entry at index >= `vocab` is not all-zero bytes": lambda f: (
        f.dense and any(v != 0 for v in f.tail["values"][f.params["vocab"] :])
    ),
    "a q value is NaN or infinite": lambda f: not all(finite(b) for b in f.row_values()),
    "a q value has its sign bit set (-0.0 included)": lambda f: any(finite(b) and b >> 31 for b in f.row_values()),
    "a q value times 2^24 is not an integer": lambda f: any(
        finite(b) and (Fraction(f32(b)) * M).denominator != 1 for b in f.row_values()
    ),
    "sparse: a q value is +0.0": lambda f: f.sparse and 0 in f.tail["values"],
    "the counts q times 2^24 do not sum to 2^24": lambda f: sum(f.counts()) != M,
    "`token` has count 0": lambda f: f.q_count(f.fields["token"]) == 0,
    # COMPLETION, COMMIT
    "`row_count` is not the negotiated depth": lambda f: f.fields["row_count"] != f.params["depth"],
    "`status` is above 1 (FAILED)": lambda f: f.fields["status"] > 1,
    "`accepted` > the negotiated depth": lambda f: f.fields["accepted"] > f.params["depth"],
    # COMMIT, RESET: -1 is "no token" (an early end, an empty prefix)
    "`token` is neither -1 nor in [0, `vocab`)": lambda f: (
        not (f.fields["token"] == -1 or 0 <= f.fields["token"] < f.params["vocab"])
    ),
    # HELLO_ANSWER
    "`status` is above 1 (REFUSED)": lambda f: f.fields["status"] > 1,
    # HELLO
    "HELLO was already negotiated on this connection": lambda f: f.negotiated,
    # v1
    "fewer than 12 bytes": lambda f: len(f.data) < 12,
    "`version` is not 1": lambda f: v1_fields(f)["version"] != 1,
    "`message_type` is not 1": lambda f: v1_fields(f)["message_type"] != 1,
    "`payload_length` is below 4 or above 4 + 4 * 64": lambda f: not 4 <= v1_fields(f)["payload_length"] <= 4 + 4 * 64,
    "fewer than 12 + `payload_length` bytes": lambda f: len(f.data) < 12 + v1_fields(f)["payload_length"],
    "more than 12 + `payload_length` bytes": lambda f: len(f.data) > 12 + v1_fields(f)["payload_length"],
    "`token_count` > 64": lambda f: v1_count(f) > 64,
    "`payload_length` is not 4 + 4 * `token_count`": lambda f: v1_fields(f)["payload_length"] != 4 + 4 * v1_count(f),
    "a token is negative": lambda f: any(t < 0 for t in struct.unpack_from(f"<{v1_count(f)}i", f.data, 16)),
}


def condition(when: str) -> Callable[[Frame], bool]:
    """A row's failing condition from its words (HELLO's field rows by their pattern)."""
    if when in CONDITIONS:
        return CONDITIONS[when]
    if m := re.fullmatch(r"`(\w+)` is not the receiver's", when):
        return lambda f: f.fields[m[1]] != f.params[m[1]]
    if m := re.fullmatch(r"`(\w+)` is outside 1\.\.the receiver's", when):
        return lambda f: not 1 <= f.fields[m[1]] <= f.params[m[1]]
    raise KeyError(f"no condition for the document's words {when!r}")


TABLES = {name: order_table(name) for name in TABLE_NAMES}


class Refused(Exception):
    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


def first_row(rows: list[Row], frame: Frame, stage: str | None = None) -> None:
    for row in rows:
        if (stage is None or row.stage == stage) and condition(row.when)(frame):
            raise Refused(row.code)


def decode(data: bytes, hello: dict, negotiated: bool, tables: dict[str, list[Row]] = TABLES) -> str:
    """The document's answer for one frame: "accept" or a reason code (decoding order, then the tables)."""
    params = hello_params(hello)
    try:
        if len(data) < 4:
            raise Refused("TRUNCATED")
        if data[:4] == b"QGRD":
            first_row(tables["v1 greedy frame"], Frame({}, params, b"", negotiated, data))
            return "accept"
        if data[:4] != b"QSMP":
            raise Refused("BAD_MAGIC")
        if len(data) < 20:
            raise Refused("TRUNCATED")
        header = read(data, HEADER)
        if header["version"] != 2:
            raise Refused("UNKNOWN_VERSION")
        if header["message_type"] not in TYPES:
            raise Refused("UNKNOWN_MESSAGE_TYPE")
        if header["header_length"] != 20:
            raise Refused("LENGTH_MISMATCH")
        name = TYPES[header["message_type"]]
        if not negotiated and name != "HELLO":
            raise Refused("V2_BEFORE_HELLO")
        fields = LAYOUTS[name]
        least = greatest = fixed_size(fields)
        if name == "REPLY" and negotiated:
            greatest = min(params["max_reply_bytes"], 36 + max(4 * params["dense_stride"], 8 * params["max_support"]))
        if not least <= header["payload_length"] <= greatest:
            raise Refused("UNEXPECTED_SIZE")
        end = 20 + header["payload_length"]
        if len(data) != end:
            raise Refused("TRUNCATED" if len(data) < end else "LENGTH_MISMATCH")
        if google_crc32c.value(data[:16] + data[20:]) != header["checksum"]:
            raise Refused("CHECKSUM_MISMATCH")
        frame = Frame(read(data, fields, 20), params, data[20:], negotiated, data)
        for stage in ROW_STAGES:
            if stage == "content":
                frame.parse_tail()
            first_row(tables[name], frame, stage)
    except Refused as refused:
        return refused.code
    return "accept"


def failing_rows(name: str, data: bytes, hello: dict, negotiated: bool) -> tuple[set[int], set[int]]:
    """The rows of a message's table whose condition holds on a checksum-valid frame, and the rows that cannot
    be read on it (a NaN has no count, a cut frame has no token)."""
    frame = Frame({}, hello_params(hello), data[20:], negotiated, data)
    if name != "v1 greedy frame":
        frame.fields = read(data, LAYOUTS[name], 20)
        frame.parse_tail()
    holds, unreadable = set(), set()
    for row in TABLES[name]:
        try:
            if condition(row.when)(frame):
                holds.add(row.number)
        except (struct.error, IndexError, KeyError, ValueError):  # no tail, a cut frame, a NaN count
            unreadable.add(row.number)
    return holds, unreadable


def vectors(group: str | None = None) -> list[dict]:
    document = json.loads((default_vectors_dir() / "wire_frames.json").read_text(encoding="utf-8"))
    return [
        case
        for g in document["testGroups"]
        for case in g["tests"]
        if group is None or case["id"].split("/")[1] == group
    ]


def frame_of(case: dict) -> bytes:
    """The case's frame: the input of a decoding case, the answer of an encoding case."""
    blob = case["expected"]["frame"] if "encode" in case["input"] else case["input"]["frame"]
    return base64.b64decode(blob["b64"])


def expected_code(case: dict) -> str:
    """The reason, or accept (an encoding case's frame is a valid one)."""
    return case["expected"].get("reason", "accept")


def negotiated(case: dict) -> bool:
    """Whether HELLO is negotiated: as the case says, or, for an encoding case, unless it sends a HELLO."""
    if "encode" in case["input"]:
        return case["input"]["encode"]["type"] != "HELLO"
    return case["input"]["negotiated"]


ORDER_CASES = vectors("check_order")


def test_every_row_has_its_words_understood():
    for rows in TABLES.values():
        for row in rows:
            condition(row.when)


def test_document_decoder_agrees_with_every_wire_frames_vector():
    cases = [c for c in vectors() if not c["id"].endswith("reply_dense_full_vocab")]
    disagree = [c["id"] for c in cases if decode(frame_of(c), c["input"]["hello"], negotiated(c)) != expected_code(c)]
    assert len(cases) > 900 and not disagree


PAIR = re.compile(r"-r(\d\d)-[a-z0-9_]+-r(\d\d)-[a-z0-9_]+$")
TABLE_OF = {
    "hello": "HELLO",
    "step": "STEP",
    "reply": "REPLY",
    "completion": "COMPLETION",
    "commit": "COMMIT",
    "reset": "RESET",
    "cancel": "CANCEL",
    "v1": "v1 greedy frame",
}


def test_pair_vectors_break_both_rows_and_answer_the_earlier():
    """In each pair frame both named rows fail (as far as the tail can be read) and the earlier row is the answer."""
    pairs = unreadable_pairs = 0
    for case in ORDER_CASES:
        m = PAIR.search(case["id"])
        if m is None:
            continue
        first, second = int(m[1]), int(m[2])
        name = TABLE_OF[case["id"].split("/")[2].split("-")[0]]
        assert first < second and expected_code(case) == TABLES[name][first - 1].code, case["id"]
        inp = case["input"]
        holds, unreadable = failing_rows(name, frame_of(case), inp["hello"], inp["negotiated"])
        assert first in holds | unreadable and second in holds | unreadable, case["id"]
        pairs += 1
        unreadable_pairs += bool({first, second} & unreadable)
    assert pairs > 400 and unreadable_pairs <= 12


def swapped(name: str, index: int) -> dict[str, list[Row]]:
    rows = list(TABLES[name])
    rows[index], rows[index + 1] = rows[index + 1], rows[index]
    return {**TABLES, name: rows}


SPEC_NAMES = {"v1 greedy frame": "V1_GREEDY_TOKENS"}
ADJACENT = [
    (name, i)
    for name in TABLE_NAMES
    for i in range(len(TABLES[name]) - 1)
    if TABLES[name][i].code != TABLES[name][i + 1].code
    and frozenset((i + 1, i + 2)) not in EXCLUSIVE.get(SPEC_NAMES.get(name, name), (frozenset(),))[0]
    and TABLES[name][i].stage == TABLES[name][i + 1].stage
    and {TABLES[name][i].when.split(":")[0], TABLES[name][i + 1].when.split(":")[0]} != {"dense", "sparse"}
]


@pytest.mark.parametrize(("name", "index"), ADJACENT)
def test_swapping_two_adjacent_rows_is_caught(name, index):
    """A decoder with two adjacent rows of one table swapped disagrees with at least one check_order vector.

    (Rows that never fail together, a dense and a sparse rule or an exclusive pair, are not swapped; a swapped
    decoder that reads past the bytes it has counts as disagreeing.)
    """
    tables = swapped(name, index)
    kind = next(k for k, v in TABLE_OF.items() if v == name)
    cases = [c for c in ORDER_CASES if c["id"].split("/")[2].split("-")[0] == kind]

    def answer(case: dict) -> str:
        try:
            return decode(frame_of(case), case["input"]["hello"], case["input"]["negotiated"], tables)
        except (struct.error, IndexError, ValueError):
            return "read past the frame"

    assert any(answer(c) != expected_code(c) for c in cases)
