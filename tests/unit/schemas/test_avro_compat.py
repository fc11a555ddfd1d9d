"""Avro reader/writer resolution, case by case (broker/schemas/avro_compat.py).

The property test (tests/property/schemas) checks the verdict against fastavro at random;
these pin the named rules and what random schemas rarely reach: recursion, named references
across schemas, aliases on named types.
"""

from __future__ import annotations

import copy
from typing import Any

import fastavro
import pytest

from broker.schemas.avro_compat import read_incompatibilities


def kinds(reader: Any, writer: Any) -> list[str]:
    rn: dict[str, Any] = {}
    wn: dict[str, Any] = {}
    r = fastavro.parse_schema(copy.deepcopy(reader), named_schemas=rn)
    w = fastavro.parse_schema(copy.deepcopy(writer), named_schemas=wn)
    return [i.kind for i in read_incompatibilities(r, w, rn, wn)]


def rec(*fields: dict[str, Any], name: str = "R", **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": list(fields), **extra}


def f(name: str, t: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": t, **extra}


CASES = [
    # (name, reader, writer, expected incompatibility kinds)
    ("int read as long", "long", "int", []),
    ("long read as int", "int", "long", ["TYPE_MISMATCH"]),
    ("string read as bytes and back", "bytes", "string", []),
    ("float read as double", "double", "float", []),
    (
        "added field with default",
        rec(f("a", "int"), f("b", "string", default="")),
        rec(f("a", "int")),
        [],
    ),
    (
        "added field without default",
        rec(f("a", "int"), f("b", "string")),
        rec(f("a", "int")),
        ["READER_FIELD_MISSING_DEFAULT_VALUE"],
    ),
    ("removed field", rec(f("a", "int")), rec(f("a", "int"), f("b", "string")), []),
    ("renamed field with alias", rec(f("c", "int", aliases=["a"])), rec(f("a", "int")), []),
    ("renamed record", rec(f("a", "int"), name="S"), rec(f("a", "int")), ["NAME_MISMATCH"]),
    (
        "renamed record with alias",
        rec(f("a", "int"), name="S", aliases=["R"]),
        rec(f("a", "int")),
        [],
    ),
    (
        "namespace change only",
        rec(f("a", "int"), namespace="x"),
        rec(f("a", "int"), namespace="y"),
        [],
    ),
    (
        "enum symbol added",
        {"type": "enum", "name": "E", "symbols": ["A", "B"]},
        {"type": "enum", "name": "E", "symbols": ["A"]},
        [],
    ),
    (
        "enum symbol removed",
        {"type": "enum", "name": "E", "symbols": ["A"]},
        {"type": "enum", "name": "E", "symbols": ["A", "B"]},
        ["MISSING_ENUM_SYMBOLS"],
    ),
    (
        "enum symbol removed, reader default",
        {"type": "enum", "name": "E", "symbols": ["A"], "default": "A"},
        {"type": "enum", "name": "E", "symbols": ["A", "B"]},
        [],
    ),
    (
        "fixed size changed",
        {"type": "fixed", "name": "F", "size": 4},
        {"type": "fixed", "name": "F", "size": 8},
        ["FIXED_SIZE_MISMATCH"],
    ),
    ("made nullable", ["null", "string"], "string", []),
    ("nullable made required", "string", ["null", "string"], ["TYPE_MISMATCH"]),
    ("union branch dropped", ["null", "int"], ["null", "int", "string"], ["MISSING_UNION_BRANCH"]),
    ("union reordered", ["string", "null"], ["null", "string"], []),
    (
        "array items promoted",
        {"type": "array", "items": "double"},
        {"type": "array", "items": "int"},
        [],
    ),
    (
        "map values narrowed",
        {"type": "map", "values": "int"},
        {"type": "map", "values": "long"},
        ["TYPE_MISMATCH"],
    ),
    ("record read as map", {"type": "map", "values": "int"}, rec(f("a", "int")), ["TYPE_MISMATCH"]),
]


@pytest.mark.parametrize("name,reader,writer,expected", CASES, ids=[c[0] for c in CASES])
def test_resolution_rule(name: str, reader: Any, writer: Any, expected: list[str]) -> None:
    assert kinds(reader, writer) == expected


LINKED = rec(f("value", "int"), f("next", ["null", "Node"]), name="Node")


def test_recursive_schemas_are_compared_without_end() -> None:
    assert kinds(LINKED, LINKED) == []
    widened = rec(f("value", "long"), f("next", ["null", "Node"]), name="Node")
    assert kinds(widened, LINKED) == []
    assert kinds(LINKED, widened) == ["TYPE_MISMATCH"]


def test_named_types_from_references_are_looked_up_by_name() -> None:
    # As the registry parses a schema with references: the referenced type is defined in the
    # name table, the schema names it.
    names_w: dict[str, Any] = {}
    names_r: dict[str, Any] = {}
    fastavro.parse_schema(
        rec(f("street", "string"), name="Address", namespace="acme"), named_schemas=names_w
    )
    fastavro.parse_schema(
        rec(f("street", "string"), f("zip", "string"), name="Address", namespace="acme"),
        named_schemas=names_r,
    )
    user = rec(f("home", "acme.Address"), name="User", namespace="acme")
    w = fastavro.parse_schema(copy.deepcopy(user), named_schemas=names_w)
    r = fastavro.parse_schema(copy.deepcopy(user), named_schemas=names_r)
    found = read_incompatibilities(r, w, names_r, names_w)
    assert [i.kind for i in found] == ["READER_FIELD_MISSING_DEFAULT_VALUE"]
    assert "zip" in str(found[0]) and found[0].path == "/fields/0/type/fields/1"


def test_the_first_matching_reader_branch_is_the_one_that_must_resolve() -> None:
    # Two records named R in a union: fastavro (and Avro's resolving grammar) reads an R with
    # the first; a later branch that would fit does not help.
    first = rec(f("a", "string"), name="R", namespace="x")
    second = rec(f("a", "int"), name="R", namespace="y")
    assert kinds([first, second], rec(f("a", "int"))) == ["TYPE_MISMATCH"]
    assert kinds([second, first], rec(f("a", "int"))) == []
