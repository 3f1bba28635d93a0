"""Strictness of the vector schemas (docs/vector-format.md) and validity of the committed corpus."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import vector_fakes
from jsonschema import Draft202012Validator

from qconform.generators import registry
from qconform.generators.corpus import assemble_file, default_vectors_dir
from qconform.generators.encoding import encode_blob
from qconform.generators.schemas import COMMON_DEFS, INDEX_SCHEMA, build_family_schema, loose_objects
from qconform.generators.validation import load_vector_file, schema_path

# Schemas encode the value formats of every rule's vectors, not one rule.
pytestmark = pytest.mark.rules()

ALPHA = vector_fakes.FAKE_FAMILIES["fake_alpha"]
REPO = Path(__file__).resolve().parents[2]


def _validator(family=ALPHA) -> Draft202012Validator:
    return Draft202012Validator(build_family_schema(family))


def _alpha_file() -> dict:
    return assemble_file(ALPHA, ALPHA.build())


def _at(obj, path: str):
    """The object at a dotted path such as ``testGroups.1.tests.0.input``."""
    for part in path.split("."):
        obj = obj[int(part)] if part.isdigit() else obj[part]
    return obj


def _errors(instance, family=ALPHA) -> list:
    return list(_validator(family).iter_errors(instance))


def test_built_schemas_are_valid_draft_2020_12():
    for family in vector_fakes.FAKE_FAMILIES.values():
        schema = build_family_schema(family)
        Draft202012Validator.check_schema(schema)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert schema["$id"] == f"urn:qconform:vectors:schema:{family.name}"
    Draft202012Validator.check_schema(INDEX_SCHEMA)


def test_schema_build_is_pure_and_injects_common_defs():
    first, second = build_family_schema(ALPHA), build_family_schema(ALPHA)
    assert first == second
    for name, definition in COMMON_DEFS.items():
        assert first["$defs"][name] == definition
    assert first["$defs"]["input"] == ALPHA.input_schema


def test_assembled_fake_file_is_valid():
    assert _errors(_alpha_file()) == []


OBJECT_PATHS = [
    "",
    "notes.TIE",
    "testGroups.0",
    "testGroups.0.tests.0",
    "testGroups.0.tests.0.input",
    "testGroups.0.tests.0.input.q",
    "testGroups.0.tests.0.input.q.counts",
    "testGroups.0.tests.0.input.temperature",
    "testGroups.0.tests.0.expected",
    "testGroups.1.tests.0.input.q",
    "testGroups.1.tests.0.input.q.ids",
    "testGroups.1.tests.0.input.p",
    "testGroups.1.tests.1.expected",
]


@pytest.mark.parametrize("path", OBJECT_PATHS)
def test_an_extra_property_is_rejected_at_every_level(path):
    doc = _alpha_file()
    target = _at(doc, path) if path else doc
    target["unexpected"] = 1
    assert _errors(doc), f"extra property at {path or '$'} was accepted"


def test_pinned_header_fields_are_rejected_when_wrong():
    for key, value in [
        ("family", "other"),
        ("schema", "x.schema.json"),
        ("specVersion", "999"),
        ("generator", "elsewhere"),
        ("rules", ["R99"]),
        ("numberOfTests", -1),
    ]:
        doc = _alpha_file()
        doc[key] = value
        assert _errors(doc), key


BAD_BLOBS = [
    {"dtype": "f16", "shape": [1], "b64": "AAAA"},
    {"dtype": "u32", "shape": ["1"], "b64": "AAAAAA=="},
    {"dtype": "u32", "shape": [-1], "b64": "AAAAAA=="},
    {"dtype": "u32", "shape": [1], "b64": "AAAAAA="},  # wrong padding
    {"dtype": "u32", "shape": [1], "b64": "AA!AAA=="},
    {"dtype": "u32", "shape": [1]},
    {"dtype": "i32", "shape": [1], "b64": "AAAAAA=="},  # counts must be u32
]


@pytest.mark.parametrize("blob", BAD_BLOBS)
def test_a_bad_blob_is_rejected(blob):
    doc = _alpha_file()
    doc["testGroups"][0]["tests"][0]["input"]["q"]["counts"] = blob
    assert _errors(doc)


def test_a_good_blob_in_the_same_place_is_accepted():
    doc = _alpha_file()
    doc["testGroups"][0]["tests"][0]["input"]["q"]["counts"] = encode_blob("u32", [1, 2, 3, 4])
    assert _errors(doc) == []


MALFORMED_ROWS = [
    ("q", {"representation": "dense", "counts": encode_blob("u32", [1]), "ids": encode_blob("i32", [0])}),
    ("q", {"representation": "sparse", "counts": encode_blob("u32", [1])}),
    ("q", {"representation": "sparse", "ids": encode_blob("u32", [0]), "counts": encode_blob("u32", [1])}),
    ("q", {"representation": "other", "counts": encode_blob("u32", [1])}),
    ("p", {"weights": encode_blob("u32", [1])}),
    ("p", {"probabilities": []}),
    ("p", {"probabilities": [["1/2", "0.5"]]}),
    ("p", {"weights": encode_blob("f32", [0]), "probabilities": [["1/1"]]}),
]


@pytest.mark.parametrize("field, row", MALFORMED_ROWS)
def test_malformed_q_and_p_rows_are_rejected(field, row):
    doc = _alpha_file()
    doc["testGroups"][1]["tests"][0]["input"][field] = row
    assert _errors(doc)


@pytest.mark.parametrize(
    "definition, good, bad",
    [
        ("rational", ["0/1", "-3/4", "12/7"], ["1/0", "1.5/2", "3", "3/-4", " 1/2"]),
        ("word32", ["0x6627e8d5", "0x00000000"], ["0x6627E8D5", "6627e8d5", "0x6627e8d", "0x6627e8d50"]),
        ("u64", ["0", "18446744073709551615"], ["01", "-1", "1e3", "", "123456789012345678901"]),
    ],
)
def test_scalar_encodings(definition, good, bad):
    validator = Draft202012Validator({"$defs": COMMON_DEFS, "$ref": f"#/$defs/{definition}"})
    for text in good:
        assert validator.is_valid(text), text
    for text in bad:
        assert not validator.is_valid(text), text


@pytest.mark.parametrize(
    "path, value",
    [
        ("testGroups.0.tests.0.id", "fake_beta/rows/dense_a"),
        ("testGroups.0.tests.0.id", "fake_alpha/rows/has space"),
        ("testGroups.0.tests.0.result", "ok"),
        ("testGroups.0.tests.0.flags", ["lower_case"]),
        ("testGroups.0.tests.0.rules", []),
        ("testGroups.0.group", "Bad-Name"),
        ("notes.TIE", {"description": "no bug type"}),
    ],
)
def test_case_layout_is_enforced(path, value):
    doc = _alpha_file()
    parent, _, key = path.rpartition(".")
    _at(doc, parent)[key] = value
    assert _errors(doc)


def test_loose_objects_finds_open_schemas():
    assert loose_objects(build_family_schema(ALPHA)) == []
    assert loose_objects({}) == ["$"]
    assert loose_objects({"type": "object", "properties": {"a": {}}}) == ["$", "$.properties.a"]
    nested = {"oneOf": [{"type": "object", "additionalProperties": True}]}
    assert loose_objects(nested) == ["$.oneOf[0].additionalProperties"]
    refined = {"$ref": "#/$defs/blob", "properties": {"dtype": {"const": "u32"}}}
    assert loose_objects(refined) == []


def _committed_families() -> list[str]:
    root = default_vectors_dir()
    return [name for name in registry.family_names() if (root / f"{name}.json").is_file()]


def test_every_committed_vector_file_validates_against_its_schema():
    names = _committed_families()
    if not names:
        pytest.skip("no committed vector files yet")
    root = default_vectors_dir()
    for name in names:
        path = root / f"{name}.json"
        schema = json.loads(schema_path(path).read_text(encoding="utf-8"))
        Draft202012Validator.check_schema(schema)
        assert loose_objects(schema) == [], name
        assert load_vector_file(path)["family"] == name


def test_formats_index_lists_every_registered_family():
    text = (REPO / "docs" / "formats" / "README.md").read_text(encoding="utf-8")
    for name in registry.family_names():
        assert re.search(rf"\b{name}\b", text), name
