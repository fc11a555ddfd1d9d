"""Schemas as the registry holds them: parsed, checked, identified and compared.

* ``SchemaText``   : what is stored for an id: type, schema string, references.
* ``parse``        : a ``SchemaText`` (its references looked up through a callable) to a
  ``ParsedSchema``, or ``InvalidSchemaError`` (the registry's 42201).
* ``identity``     : when two registrations are "the same schema" (same id, no new version).
* ``incompatibilities(reader, writer)``: Avro resolution (``avro_compat``) or JSON Schema
  containment (``json_compat``) by type.

Types: ``AVRO`` (the default), parsed by fastavro, which validates names, defaults and types
and qualifies every name; ``JSON`` (JSON Schema), checked against its metaschema by
``jsonschema`` (draft 2020-12 unless ``$schema`` names another). ``PROTOBUF`` is not offered:
Python has no well-kept parser of ``.proto`` text (the ``protobuf`` runtime reads compiled
descriptors only; compiling needs ``protoc``), so a registration of it is refused as invalid.

References (``{"name", "subject", "version"}``): for AVRO the referenced schema defines named
types the schema uses by name (the reference's name is the type's full name); for JSON the
referenced schema is the resource at the URI ``name``, so ``"$ref": "<name>"`` reaches it.

Identity: two registrations are the same schema when their types, their references and their
schema JSON with keys sorted and whitespace removed are equal, so formatting never makes a new
id but a changed default or doc does (Confluent's ids differ there too). With
``normalize=true`` an AVRO schema is compared as fastavro parses it (every name fully
qualified), so the two ways of writing a namespace are one schema.

Pure: no I/O, no clock, no global random.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import fastavro
import jsonschema
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from broker.schemas import avro_compat, json_compat

if TYPE_CHECKING:
    from referencing._core import Resolver

AVRO = "AVRO"
JSON = "JSON"
PROTOBUF = "PROTOBUF"
SCHEMA_TYPES = (JSON, AVRO)
"""What ``GET /schemas/types`` answers (Confluent lists JSON, PROTOBUF, AVRO)."""
REFERENCE_DEPTH_MAX = 32


class InvalidSchemaError(ValueError):
    """The schema does not parse, or a reference does not resolve (42201)."""


@dataclass(frozen=True)
class Reference:
    name: str
    subject: str
    version: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True)
class SchemaText:
    """A schema as stored and served: ``schema`` is compact JSON text."""

    schema_type: str
    schema: str
    references: tuple[Reference, ...] = ()


@dataclass(frozen=True)
class ParsedSchema:
    text: SchemaText
    avro: Any = None
    """AVRO: the schema as fastavro parsed it."""
    avro_names: Mapping[str, Any] = field(default_factory=dict)
    """AVRO: every named type it and its references define, by full name."""
    json_schema: Any = None
    """JSON: the schema document."""
    json_registry: Registry[Any] | None = None
    """JSON: its references, by name (URI)."""

    @property
    def schema_type(self) -> str:
        return self.text.schema_type

    def json_resolver(self) -> Resolver[Any]:
        return json_compat.root_resolver(self.json_schema, self.json_registry)

    def normalized(self) -> str:
        """The identity under ``normalize=true``."""
        if self.schema_type == AVRO:
            return _identity_of(self.schema_type, _strip_fastavro(self.avro), self.text.references)
        return identity(self.text)


Lookup = Callable[[Reference], SchemaText]
"""The stored text of a reference's subject and version; ``InvalidSchemaError`` if none."""


def compact(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _identity_of(schema_type: str, obj: Any, refs: tuple[Reference, ...]) -> str:
    return json.dumps(
        [schema_type, obj, [r.to_json() for r in refs]],
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )


def identity(text: SchemaText) -> str:
    """Equal for two registrations of the same schema (see the module docstring)."""
    try:
        obj = json.loads(text.schema)
    except ValueError:
        obj = text.schema
    return _identity_of(text.schema_type, obj, text.references)


def _strip_fastavro(s: Any) -> Any:
    if isinstance(s, dict):
        return {k: _strip_fastavro(v) for k, v in s.items() if not k.startswith("__")}
    if isinstance(s, list):
        return [_strip_fastavro(x) for x in s]
    return s


def text_of(
    schema_type: str | None, schema: str, references: tuple[Reference, ...] = ()
) -> SchemaText:
    """The stored form of a request's schema: its type (AVRO if absent), its JSON compacted
    (key order kept); ``InvalidSchemaError`` if it is not JSON or the type is unknown."""
    t = (schema_type or AVRO).upper()
    if t == PROTOBUF:
        raise InvalidSchemaError(
            "schema type PROTOBUF is not supported by this registry (AVRO and JSON are)"
        )
    if t not in SCHEMA_TYPES:
        raise InvalidSchemaError(f"unknown schema type {schema_type!r} (AVRO or JSON)")
    try:
        obj = json.loads(schema)
    except ValueError as e:
        raise InvalidSchemaError(f"Invalid schema: not JSON: {e}") from None
    return SchemaText(t, compact(obj), references)


def parse(text: SchemaText, lookup: Lookup) -> ParsedSchema:
    """Check ``text`` and resolve its references."""
    refs = list(_references_in_order(text, lookup, 0, set()))
    try:
        obj = json.loads(text.schema)
    except ValueError as e:
        raise InvalidSchemaError(f"Invalid schema: not JSON: {e}") from None
    if text.schema_type == AVRO:
        return _parse_avro(text, obj, refs)
    if text.schema_type == JSON:
        return _parse_json(text, obj, refs)
    raise InvalidSchemaError(f"unknown schema type {text.schema_type!r}")


def _references_in_order(
    text: SchemaText, lookup: Lookup, depth: int, seen: set[tuple[str, int]]
) -> Iterator[tuple[Reference, SchemaText]]:
    """Every reference (transitively), each after those it depends on, each once."""
    if depth > REFERENCE_DEPTH_MAX:
        raise InvalidSchemaError("references nest too deep (a cycle?)")
    for ref in text.references:
        key = (ref.subject, ref.version)
        if key in seen:
            continue
        seen.add(key)
        target = lookup(ref)
        if target.schema_type != text.schema_type:
            raise InvalidSchemaError(
                f"reference {ref.name!r} ({ref.subject} version {ref.version}) is a "
                f"{target.schema_type} schema, not {text.schema_type}"
            )
        yield from _references_in_order(target, lookup, depth + 1, seen)
        yield ref, target


def _parse_avro(
    text: SchemaText, obj: Any, refs: list[tuple[Reference, SchemaText]]
) -> ParsedSchema:
    names: dict[str, Any] = {}
    try:
        for _ref, target in refs:
            fastavro.parse_schema(json.loads(target.schema), named_schemas=names)
        parsed = fastavro.parse_schema(obj, named_schemas=names)
    except Exception as e:  # fastavro raises several types for a bad schema
        raise InvalidSchemaError(f"Invalid schema: {e}") from None
    return ParsedSchema(text, avro=parsed, avro_names=names)


def _parse_json(
    text: SchemaText, obj: Any, refs: list[tuple[Reference, SchemaText]]
) -> ParsedSchema:
    if not isinstance(obj, (dict, bool)):
        raise InvalidSchemaError("Invalid schema: a JSON Schema is an object or a boolean")
    try:
        cls = jsonschema.validators.validator_for(obj, default=jsonschema.Draft202012Validator)
        cls.check_schema(obj)
        registry: Registry[Any] = Registry()
        for ref, target in refs:
            contents = json.loads(target.schema)
            cls.check_schema(contents)
            registry = registry.with_resource(
                ref.name, Resource.from_contents(contents, default_specification=DRAFT202012)
            )
    except jsonschema.SchemaError as e:
        raise InvalidSchemaError(f"Invalid schema: {e.message}") from None
    except Exception as e:  # referencing: a resource it cannot take
        raise InvalidSchemaError(f"Invalid schema: {e}") from None
    parsed = ParsedSchema(text, json_schema=obj, json_registry=registry)
    _check_json_refs(obj, parsed.json_resolver())
    return parsed


def _check_json_refs(node: Any, resolver: Resolver[Any]) -> None:
    """Every ``$ref`` resolves (subschemas with their own ``$id`` are left to validation)."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            try:
                resolver.lookup(ref)
            except Unresolvable as e:
                raise InvalidSchemaError(
                    f"Invalid schema: unresolvable $ref {ref!r}: {e}"
                ) from None
        for k, v in node.items():
            if k not in ("enum", "const", "default", "examples") and not (
                isinstance(v, dict) and "$id" in v
            ):
                _check_json_refs(v, resolver)
    elif isinstance(node, list):
        for v in node:
            _check_json_refs(v, resolver)


def incompatibilities(reader: ParsedSchema, writer: ParsedSchema) -> list[str]:
    """Why data written with ``writer`` may not be read with ``reader`` (empty: none)."""
    if reader.schema_type != writer.schema_type:
        return [
            f"TYPE_CHANGED: a {reader.schema_type} schema cannot read {writer.schema_type} data"
        ]
    if reader.schema_type == AVRO:
        return [
            str(i)
            for i in avro_compat.read_incompatibilities(
                reader.avro, writer.avro, reader.avro_names, writer.avro_names
            )
        ]
    return [
        str(i)
        for i in json_compat.accept_incompatibilities(
            reader.json_schema,
            writer.json_schema,
            reader_resolver=reader.json_resolver(),
            writer_resolver=writer.json_resolver(),
        )
    ]
