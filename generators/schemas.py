"""JSON Schemas of the vector corpus (docs/vector-format.md).

``COMMON_DEFS`` holds the shared value encodings that family schemas reference as
``{"$ref": "#/$defs/<name>"}``; :func:`build_family_schema` wraps a family's
``input_schema`` and ``expected_schema`` in the strict file layout. Every object
schema here sets ``additionalProperties: false``, so a misspelled or extra field
in a vector file is an error, never silently ignored.
"""

from __future__ import annotations

import copy
from typing import Any

from qconform.generators.registry import FUZZ_GROUP, RESULTS, Family
from qconform.spec import SPEC_VERSION
from qconform.spec.rules import RULES

DRAFT = "https://json-schema.org/draft/2020-12/schema"
BLOB_DTYPES = ["f32", "f64", "i32", "u32", "u64", "u8"]

#: Canonical padded base64 (RFC 4648 alphabet), which is what encode_blob writes.
BASE64_PATTERN = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
RATIONAL_PATTERN = r"^-?[0-9]+/[1-9][0-9]*$"
WORD32_PATTERN = r"^0x[0-9a-f]{8}$"
U64_PATTERN = r"^(?:0|[1-9][0-9]{0,19})$"
NAME_PATTERN = r"^[a-z0-9_]+$"
FLAG_PATTERN = r"^[A-Z][A-Z0-9_]*$"
#: Tail of a case id ``family/group/name``.
CASE_NAME_PATTERN = r"[A-Za-z0-9_.=+-]+"


def blob_schema(dtype: str | None = None) -> dict:
    """A blob reference, optionally pinned to one dtype (for family fragments)."""
    if dtype is None:
        return {"$ref": "#/$defs/blob"}
    if dtype not in BLOB_DTYPES:
        raise ValueError(f"unknown blob dtype {dtype!r}")
    return {"$ref": "#/$defs/blob", "properties": {"dtype": {"const": dtype}}}


def closed_object(properties: dict, required: list[str] | None = None) -> dict:
    """An object schema with exactly ``properties`` (all required by default).

    Family modules use it for their ``input_schema`` / ``expected_schema`` objects.
    """
    return {
        "type": "object",
        "properties": properties,
        "required": sorted(properties) if required is None else required,
        "additionalProperties": False,
    }


#: Older spelling, kept for family modules that import it.
_closed = closed_object

COMMON_DEFS: dict[str, Any] = {
    "blob": closed_object(
        {
            "dtype": {"enum": BLOB_DTYPES},
            "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
            "b64": {"type": "string", "pattern": BASE64_PATTERN},
        }
    ),
    "rational": {"type": "string", "pattern": RATIONAL_PATTERN},
    "word32": {"type": "string", "pattern": WORD32_PATTERN},
    "u64": {"type": "string", "pattern": U64_PATTERN},
    "f32": closed_object({"f32": {"$ref": "#/$defs/word32"}}),
    "qRow": {
        "oneOf": [
            closed_object({"representation": {"const": "dense"}, "counts": blob_schema("u32")}),
            closed_object(
                {
                    "representation": {"const": "sparse"},
                    "ids": blob_schema("i32"),
                    "counts": blob_schema("u32"),
                }
            ),
        ]
    },
    "pRows": {
        "oneOf": [
            closed_object({"weights": blob_schema("f32")}),
            closed_object(
                {
                    "probabilities": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "array",
                            "minItems": 1,
                            "items": {"$ref": "#/$defs/rational"},
                        },
                    }
                }
            ),
        ]
    },
}


def _file_defs(family: Family) -> dict:
    """The layout definitions of one family's file (notes, groups, tests)."""
    rule_list = {
        "type": "array",
        "items": {"enum": sorted(RULES)},
        "uniqueItems": True,
        "minItems": 1,
    }
    case_id = f"^{family.name}/[a-z0-9_]+/{CASE_NAME_PATTERN}$"
    return {
        "ruleList": rule_list,
        "note": closed_object(
            {
                "bugType": {"type": "string", "minLength": 1},
                "description": {"type": "string", "minLength": 1},
                "effect": {"type": "string", "minLength": 1},
            },
            required=["bugType", "description"],
        ),
        "testGroup": closed_object(
            {
                "group": {"type": "string", "pattern": NAME_PATTERN},
                "description": {"type": "string"},
                "rules": {"$ref": "#/$defs/ruleList"},
                "tests": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/test"}},
            }
        ),
        "test": closed_object(
            {
                "id": {"type": "string", "pattern": case_id},
                "comment": {"type": "string"},
                "flags": {
                    "type": "array",
                    "items": {"type": "string", "pattern": FLAG_PATTERN},
                    "uniqueItems": True,
                },
                "rules": {"$ref": "#/$defs/ruleList"},
                "result": {"enum": list(RESULTS)},
                "input": {"$ref": "#/$defs/input"},
                "expected": {"$ref": "#/$defs/expected"},
            }
        ),
    }


def _hoist_defs(fragment: dict, defs: dict, where: str) -> dict:
    """Copy ``fragment`` and move its own ``$defs`` into the file-level ``defs``."""
    fragment = copy.deepcopy(fragment)
    for name, value in fragment.pop("$defs", {}).items():
        if name in defs and defs[name] != value:
            raise ValueError(f"{where} redefines $defs/{name} differently from the common one")
        defs[name] = value
    return fragment


def schema_id(family_name: str) -> str:
    """The stable ``$id`` of a family's schema."""
    return f"urn:qconform:vectors:schema:{family_name}"


def schema_file_name(family_name: str) -> str:
    return f"{family_name}.schema.json"


def build_family_schema(family: Family) -> dict:
    """The full strict JSON Schema (draft 2020-12) of ``vectors/<family>.json``."""
    defs: dict[str, Any] = copy.deepcopy(COMMON_DEFS)
    defs.update(_file_defs(family))
    defs["input"] = _hoist_defs(family.input_schema, defs, f"{family.name}.input_schema")
    defs["expected"] = _hoist_defs(family.expected_schema, defs, f"{family.name}.expected_schema")
    schema = closed_object(
        {
            "family": {"const": family.name},
            "schema": {"const": schema_file_name(family.name)},
            "specVersion": {"const": SPEC_VERSION},
            "generator": {"const": f"qconform.generators.families.{family.name}"},
            "rules": {"$ref": "#/$defs/ruleList"},
            "numberOfTests": {"type": "integer", "minimum": 0},
            "notes": {
                "type": "object",
                "propertyNames": {"pattern": FLAG_PATTERN},
                "additionalProperties": {"$ref": "#/$defs/note"},
            },
            "testGroups": {"type": "array", "items": {"$ref": "#/$defs/testGroup"}},
        }
    )
    return {
        "$schema": DRAFT,
        "$id": schema_id(family.name),
        "title": f"qconform vector file: {family.name}",
        "description": family.description,
        **schema,
        "$defs": defs,
    }


def found_schema_id(family_name: str) -> str:
    """The stable ``$id`` of the schema of a family's found-inputs file."""
    return f"urn:qconform:generators:found:{family_name}"


def build_found_schema(family: Family) -> dict:
    """The strict JSON Schema of ``generators/found/<family>.json``: committed fuzz findings.

    A JSON list of entries ``{id, comment, flags, rules?, input}``: the id names the
    ``fuzz`` group of the family, flags are the family's notes, rules the family's
    rules, and the input validates as the family's case input. No ``expected``: the
    generator asks the family's ``solve``.
    """
    defs: dict[str, Any] = copy.deepcopy(COMMON_DEFS)
    defs["input"] = _hoist_defs(family.input_schema, defs, f"{family.name}.input_schema")
    defs["entry"] = closed_object(
        {
            "id": {"type": "string", "pattern": f"^{family.name}/{FUZZ_GROUP}/{CASE_NAME_PATTERN}$"},
            "comment": {"type": "string", "minLength": 1},
            "flags": {"type": "array", "items": {"enum": sorted(family.notes)}, "uniqueItems": True},
            "rules": {"type": "array", "items": {"enum": list(family.rules)}, "uniqueItems": True, "minItems": 1},
            "input": {"$ref": "#/$defs/input"},
        },
        required=["id", "comment", "flags", "input"],
    )
    return {
        "$schema": DRAFT,
        "$id": found_schema_id(family.name),
        "title": f"qconform found inputs: {family.name}",
        "type": "array",
        "items": {"$ref": "#/$defs/entry"},
        "$defs": defs,
    }


_SHA256 = {"type": "string", "pattern": "^[0-9a-f]{64}$"}

#: Schema of ``vectors/index.json`` (see docs/vector-format.md, "Index").
INDEX_SCHEMA: dict[str, Any] = {
    "$schema": DRAFT,
    "$id": "urn:qconform:vectors:schema:index",
    "title": "qconform vector corpus index",
    **closed_object(
        {
            "specVersion": {"type": "string"},
            "families": {
                "type": "object",
                "propertyNames": {"pattern": NAME_PATTERN},
                "additionalProperties": closed_object(
                    {
                        "file": {"type": "string"},
                        "schema": {"type": "string"},
                        "count": {"type": "integer", "minimum": 0},
                        "sha256": _SHA256,
                        "schemaSha256": _SHA256,
                    }
                ),
            },
            "cases": {"type": "object", "additionalProperties": _SHA256},
            "root": _SHA256,
        }
    ),
}

INDEX_SCHEMA_FILE = "index.schema.json"


_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "dependentSchemas")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SCHEMA_VALUES = (
    "items",
    "additionalProperties",
    "unevaluatedProperties",
    "propertyNames",
    "contains",
    "not",
    "if",
    "then",
    "else",
)


def loose_objects(schema: Any, path: str = "$") -> list[str]:
    """Paths of subschemas that would accept unknown properties.

    An object schema is strict when it sets ``additionalProperties`` (to ``false``
    or to a schema for map values) or ``unevaluatedProperties``, or when it refines
    a ``$ref`` (whose target is checked on its own). An empty schema (``{}`` or
    ``true``) accepts anything, objects included, and is loose too.
    """
    if schema is True or schema == {}:
        return [path]
    if not isinstance(schema, dict):
        return []
    found: list[str] = []
    is_object = schema.get("type") == "object" or "properties" in schema
    closed = any(k in schema for k in ("additionalProperties", "unevaluatedProperties", "$ref"))
    if is_object and not closed:
        found.append(path)
    for key in _SCHEMA_MAPS:
        for name, sub in schema.get(key, {}).items():
            found += loose_objects(sub, f"{path}.{key}.{name}")
    for key in _SCHEMA_LISTS:
        for i, sub in enumerate(schema.get(key, [])):
            found += loose_objects(sub, f"{path}.{key}[{i}]")
    for key in _SCHEMA_VALUES:
        if key in schema:
            found += loose_objects(schema[key], f"{path}.{key}")
    return found
