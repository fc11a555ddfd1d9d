"""JSON Schema compatibility, case by case (broker/schemas/json_compat.py).

``kinds(reader, writer)``: BACKWARD compatibility of a change is ``kinds(new, old) == []``.
The cases follow the content-model rules Confluent documents for JSON Schema.
"""

from __future__ import annotations

from typing import Any

import pytest
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from broker.schemas.json_compat import accept_incompatibilities, root_resolver


def kinds(reader: Any, writer: Any) -> list[str]:
    return [i.kind for i in accept_incompatibilities(reader, writer)]


def obj(props: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props, **extra}


S, INT, N = {"type": "string"}, {"type": "integer"}, {"type": "number"}
OPEN = obj({"a": S})
CLOSED = obj({"a": S}, additionalProperties=False)

CASES = [
    ("identical", OPEN, OPEN, []),
    ("integer read as number", N, INT, []),
    ("number read as integer", INT, N, ["TYPE_NARROWED"]),
    ("type widened by a list", {"type": ["string", "null"]}, S, []),
    (
        "property added to an open model",
        obj({"a": S, "b": INT}),
        OPEN,
        ["PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"],
    ),
    (
        "property added to a closed model",
        obj({"a": S, "b": INT}, additionalProperties=False),
        CLOSED,
        [],
    ),
    ("property removed from an open model", OPEN, obj({"a": S, "b": INT}), []),
    (
        "property removed from a closed model",
        CLOSED,
        obj({"a": S, "b": INT}, additionalProperties=False),
        ["PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL"],
    ),
    ("open model closed", CLOSED, OPEN, ["SCHEMA_NARROWED"]),
    ("closed model opened", OPEN, CLOSED, []),
    (
        "property typed by additionalProperties",
        obj({"a": S, "b": INT}, additionalProperties=INT),
        obj({"a": S}, additionalProperties=INT),
        [],
    ),
    ("required added", obj({"a": S}, required=["a"]), OPEN, ["REQUIRED_PROPERTY_ADDED"]),
    ("required removed", OPEN, obj({"a": S}, required=["a"]), []),
    ("enum extended", {"enum": ["x", "y", "z"]}, {"enum": ["x", "y"]}, []),
    ("enum narrowed", {"enum": ["x"]}, {"enum": ["x", "y"]}, ["ENUM_NARROWED"]),
    (
        "maximum lowered",
        {"type": "integer", "maximum": 5},
        {"type": "integer", "maximum": 9},
        ["MAXIMUM_DECREASED"],
    ),
    ("minimum lowered", {"type": "integer", "minimum": 0}, {"type": "integer", "minimum": 1}, []),
    ("maxLength added", {"type": "string", "maxLength": 3}, S, ["MAXLENGTH_DECREASED"]),
    (
        "multipleOf coarser",
        {"type": "integer", "multipleOf": 4},
        {"type": "integer", "multipleOf": 2},
        ["MULTIPLE_OF_CHANGED"],
    ),
    (
        "multipleOf finer",
        {"type": "integer", "multipleOf": 2},
        {"type": "integer", "multipleOf": 4},
        [],
    ),
    (
        "pattern changed",
        {"type": "string", "pattern": "^a"},
        {"type": "string", "pattern": "^b"},
        ["PATTERN_CHANGED"],
    ),
    (
        "items narrowed",
        {"type": "array", "items": INT},
        {"type": "array", "items": N},
        ["TYPE_NARROWED"],
    ),
    ("anyOf branch added", {"anyOf": [S, INT]}, S, []),
    ("anyOf branch removed", S, {"anyOf": [S, INT]}, ["TYPE_NARROWED"]),
    ("oneOf branch removed", {"oneOf": [S]}, {"oneOf": [S, INT]}, ["COMBINED_TYPE_NARROWED"]),
    ("not changed", {"not": S}, {"not": INT}, ["KEYWORD_CHANGED"]),
    ("annotations only", {**S, "title": "new", "description": "x"}, S, []),
]


@pytest.mark.parametrize("name,reader,writer,expected", CASES, ids=[c[0] for c in CASES])
def test_containment_rule(name: str, reader: Any, writer: Any, expected: list[str]) -> None:
    assert kinds(reader, writer) == expected


def test_local_refs_and_recursion() -> None:
    tree = {
        "$defs": {
            "node": obj({"v": INT, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}})
        },
        "$ref": "#/$defs/node",
    }
    assert kinds(tree, tree) == []
    wider = {
        "$defs": {
            "node": obj({"v": N, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}})
        },
        "$ref": "#/$defs/node",
    }
    assert kinds(wider, tree) == []
    assert kinds(tree, wider) == ["TYPE_NARROWED"]


def test_refs_to_referenced_schemas_resolve_through_the_registry() -> None:
    old_addr, new_addr = obj({"street": S}), obj({"street": S, "zip": S}, required=["zip"])
    user = obj({"home": {"$ref": "address.json"}})

    def resolver(addr: dict[str, Any]) -> Any:
        reg = Registry().with_resource(
            "address.json", Resource.from_contents(addr, default_specification=DRAFT202012)
        )
        return root_resolver(user, reg)

    found = accept_incompatibilities(
        user, user, reader_resolver=resolver(new_addr), writer_resolver=resolver(old_addr)
    )
    assert [i.kind for i in found] == [
        "REQUIRED_PROPERTY_ADDED",
        "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL",
    ]
    assert found[0].path == "/properties/home/required"


def test_an_unresolvable_ref_is_an_incompatibility_not_a_crash() -> None:
    assert kinds({"$ref": "missing.json"}, S) == ["UNRESOLVED_REFERENCE"]
