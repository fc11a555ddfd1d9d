"""The REST Proxy's schema formats (avro, jsonschema): JSON in, the registry's wire format out.

A producer that posts ``application/vnd.kafka.avro.v2+json`` (or ``jsonschema``) names the
schema of its values and keys by text (``value_schema``: registered under the topic's subject,
``<topic>-value`` or ``<topic>-key``, as the REST Proxy's TopicNameStrategy) or by id
(``value_schema_id``). Each value is checked against the schema and written in Confluent's wire
format (byte 0, the 4-byte schema id, then the Avro binary or the JSON text), so any Kafka
client's deserializer reads it. A consumer instance created with ``format: "avro"`` (or
``jsonschema``) reads records back as JSON through the schema whose id each record carries.

Avro's JSON form is Avro's own JSON encoding, as the REST Proxy's converter uses it: a union's
value is wrapped in an object naming its branch (``{"string": "x"}``, ``null`` bare), bytes and
fixed are strings of code points 0-255 (``api.client.avro_json``; the binary encoding is
fastavro's).

The v3 produce routes take the same through a key's or value's fields, as the REST Proxy v3:
``{"type": "AVRO" | "JSONSCHEMA", "schema_id" | "schema_version" | "schema", "subject", "data"}``
(``subject`` defaults to what ``subject_name_strategy`` names: TOPIC_NAME, the default,
``<topic>-key``/``<topic>-value``; RECORD_NAME; TOPIC_RECORD_NAME; with neither id, version nor schema
the subject's latest version; ``type`` may be left out beside a ``schema_id``).
``prepare_v3`` turns such fields into ``records.Encoded`` before the records are parsed, and a
record whose schema cannot be resolved into ``records.Refused``: it fails alone.

The registry is the broker's own (``broker.schemas``): registration goes through its single
writer, lookups by id read its state. Ids are immutable, so a parsed schema, once fetched, is
kept here for the life of the process.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable
from typing import Any

import fastavro
import jsonschema
import orjson

from api.client.avro_json import from_avro_json, to_avro_json
from api.http.errors import HttpError, unprocessable
from api.http.records import Encoded, Refused
from broker.schemas.parse import AVRO, JSON, InvalidSchemaError, ParsedSchema, text_of
from broker.schemas.registry import SchemaRegistry, register_args
from broker.schemas.state import LATEST, RegistryError

SCHEMA_FORMATS = ("avro", "jsonschema")
MAGIC = 0
HEADER_BYTES = 5

BAD_SCHEMA = 42205
"""The REST Proxy's "invalid schema" (the schema text does not parse)."""
CONVERSION_FAILED = 42203
"""The REST Proxy's "conversion of JSON to the format failed" (data does not fit its schema)."""
SCHEMA_LOOKUP_FAILED = 40801
"""The REST Proxy's "schema registration or lookup failed"."""

_TYPE_OF = {"avro": AVRO, "jsonschema": JSON}
_FMT_OF_V3 = {"AVRO": "avro", "JSONSCHEMA": "jsonschema"}
_V3_SCHEMA_KEYS = ("schema_id", "schema_version", "schema", "subject", "subject_name_strategy")


def frame(schema_id: int, payload: bytes) -> bytes:
    return bytes([MAGIC]) + schema_id.to_bytes(4, "big") + payload


def unframe(data: bytes) -> tuple[int, bytes]:
    """The schema id and payload of a value in the wire format; ``ValueError`` otherwise."""
    if len(data) < HEADER_BYTES or data[0] != MAGIC:
        raise ValueError("not in the schema registry's wire format (magic byte 0, 4-byte id)")
    return int.from_bytes(data[1:HEADER_BYTES], "big"), data[HEADER_BYTES:]


def _registry_refusal(e: RegistryError, what: str) -> HttpError:
    """A registry refusal in the REST Proxy's code space (where 404xx codes name topics,
    partitions and consumers): a schema the request names but the registry does not have, or
    one it will not take (invalid, incompatible), is the request's bad schema (422/42205); the
    registry failing to answer is the REST Proxy's "schema registration or lookup failed"."""
    if e.status in (404, 409, 422):
        return HttpError(422, f"{what}: {e}", BAD_SCHEMA)
    return HttpError(
        408, f"Schema registration or lookup failed: {what}: {e}", SCHEMA_LOOKUP_FAILED
    )


class EmbeddedCodec:
    """Encodes and decodes the schema formats through one broker's registry."""

    def __init__(self, registry: Callable[[], SchemaRegistry | None]) -> None:
        self._registry_fn = registry
        self._parsed: dict[int, ParsedSchema] = {}
        self._validators: dict[int, Any] = {}

    def _registry(self) -> SchemaRegistry:
        reg = self._registry_fn()
        if reg is None:
            raise HttpError(
                501, "This node has no schema registry: the schema formats are not served.", 501
            )
        return reg

    async def schema_id(
        self, topic: str, fmt: str, *, is_key: bool, schema: Any, schema_id: Any
    ) -> int:
        """The id of the schema a request names: by id, or by text (registered, or found if
        already registered, under the topic's key or value subject)."""
        part = "key" if is_key else "value"
        if schema_id is not None:
            if not isinstance(schema_id, int) or isinstance(schema_id, bool) or schema_id < 1:
                raise unprocessable(f"'{part}_schema_id' must be a positive integer.", 42206)
            parsed = await self.parsed(schema_id)
            if parsed.schema_type != _TYPE_OF[fmt]:
                raise unprocessable(
                    f"Schema {schema_id} is a {parsed.schema_type} schema, not {_TYPE_OF[fmt]}.",
                    BAD_SCHEMA,
                )
            return schema_id
        return await self._register(f"{topic}-{part}", fmt, schema, f"{part}_schema")

    async def parsed(self, schema_id: int) -> ParsedSchema:
        p = self._parsed.get(schema_id)
        if p is None:
            try:
                p = await self._registry().read(lambda st: st.parsed(schema_id))
            except KeyError:
                raise HttpError(422, f"Schema {schema_id} not found.", BAD_SCHEMA) from None
            except RegistryError as e:
                raise _registry_refusal(e, f"schema {schema_id}") from None
            except InvalidSchemaError as e:
                raise _registry_refusal(
                    RegistryError(42201, str(e)), f"schema {schema_id}"
                ) from None
            self._parsed[schema_id] = p
        return p

    def _validator(self, schema_id: int, p: ParsedSchema) -> Any:
        """A JSON Schema validator per id, built once (``jsonschema.validate`` checks the
        schema itself on every call)."""
        v = self._validators.get(schema_id)
        if v is None:
            cls = jsonschema.validators.validator_for(
                p.json_schema, default=jsonschema.Draft202012Validator
            )
            v = self._validators[schema_id] = cls(p.json_schema, registry=p.json_registry)
        return v

    async def preload(self, values: Iterable[bytes | None]) -> None:
        """Fetch the schemas of every value in the wire format, so ``decode`` needs no I/O."""
        for v in values:
            if v is None:
                continue
            try:
                sid, _ = unframe(v)
            except ValueError:
                continue
            if sid not in self._parsed:
                try:
                    await self.parsed(sid)
                except HttpError:
                    continue  # decode reports it, with the record's offset

    async def encode(self, schema_id: int, value: Any, where: str) -> bytes:
        p = await self.parsed(schema_id)
        try:
            if p.schema_type == AVRO:
                record = from_avro_json(p.avro, value)
                buf = io.BytesIO()
                fastavro.schemaless_writer(buf, p.avro, record)
                payload = buf.getvalue()
            else:
                error = jsonschema.exceptions.best_match(
                    self._validator(schema_id, p).iter_errors(value)
                )
                if error is not None:
                    raise unprocessable(
                        f"{where} does not match JSON schema {schema_id}: {error.message}",
                        CONVERSION_FAILED,
                    )
                payload = orjson.dumps(value)
        except HttpError:
            raise
        except Exception as e:  # fastavro raises many types for data that does not fit
            raise unprocessable(
                f"Conversion of JSON to Avro failed for {where} (schema {schema_id}): {e}",
                CONVERSION_FAILED,
            ) from None
        return frame(schema_id, payload)

    def decode(self, data: bytes, where: str) -> Any:
        """A value in the wire format as JSON (its schema must be ``preload``-ed)."""
        try:
            sid, payload = unframe(data)
        except ValueError as e:
            raise unprocessable(f"{where} is {e}.", CONVERSION_FAILED) from None
        p = self._parsed.get(sid)
        if p is None:
            raise unprocessable(f"{where}: schema {sid} not found in the registry.", BAD_SCHEMA)
        try:
            if p.schema_type == AVRO:
                datum = fastavro.schemaless_reader(io.BytesIO(payload), p.avro, None)
                return to_avro_json(p.avro, datum)
            return orjson.loads(payload)
        except Exception as e:
            raise unprocessable(
                f"{where} does not decode with schema {sid}: {e}", CONVERSION_FAILED
            ) from None

    # ------------------------------------------------------------ v3 records

    async def prepare_v3(self, topic: str, objs: list[Any]) -> list[Any]:
        """``objs`` with every schema-typed key and value encoded (``records.Encoded``), and
        every record whose schema fails replaced by ``records.Refused``. Records without
        schema fields are passed through untouched (the same objects)."""
        out: list[Any] = []
        for obj in objs:
            if type(obj) is not dict or not any(
                _uses_schema(obj.get(part)) for part in ("key", "value")
            ):
                out.append(obj)
                continue
            rec = dict(obj)
            try:
                for part in ("key", "value"):
                    if _uses_schema(rec.get(part)):
                        rec[part] = await self._encode_v3(topic, part, rec[part])
            except HttpError as e:
                out.append(Refused(e))
                continue
            out.append(rec)
        return out

    async def _encode_v3(self, topic: str, part: str, field: dict[str, Any]) -> Encoded:
        kind = field.get("type")
        if kind is not None:
            if not isinstance(kind, str):
                raise unprocessable(f"'{part}.type' must be a string.", 42206)
            kind = kind.upper()
            if kind == "PROTOBUF":
                raise unprocessable(
                    f"'{part}.type' PROTOBUF is not supported: the schema registry takes AVRO "
                    "and JSON schemas.",
                    42207,
                )
        sid = await self._v3_schema_id(topic, part, field, kind)
        parsed = await self.parsed(sid)
        actual = "AVRO" if parsed.schema_type == AVRO else "JSONSCHEMA"
        if kind is not None and kind != actual:
            raise unprocessable(
                f"'{part}.type' is {kind} but schema {sid} is a {parsed.schema_type} schema.",
                BAD_SCHEMA,
            )
        data = field.get("data")
        if data is None:
            raise unprocessable(f"'{part}.data' is needed with a schema.", 42206)
        return Encoded(await self.encode(sid, data, part), actual)

    async def _v3_schema_id(
        self, topic: str, part: str, field: dict[str, Any], kind: str | None
    ) -> int:
        subject = field.get("subject")
        if subject is None:
            subject = _subject_by_strategy(topic, part, field)
        if not isinstance(subject, str) or not subject:
            raise unprocessable(f"'{part}.subject' must be a non-empty string.", 42206)
        if field.get("schema_id") is not None:
            fmt = _FMT_OF_V3.get(kind or "", "avro")
            if kind is None:  # the schema says what it is
                p = await self.parsed(_positive(field["schema_id"], f"{part}.schema_id"))
                fmt = "avro" if p.schema_type == AVRO else "jsonschema"
            return await self.schema_id(
                topic, fmt, is_key=part == "key", schema=None, schema_id=field["schema_id"]
            )
        if kind is None:
            raise unprocessable(
                f"'{part}.type' (AVRO or JSONSCHEMA) is needed unless '{part}.schema_id' is given.",
                42206,
            )
        if field.get("schema") is not None:
            return await self._register(
                subject, _FMT_OF_V3[kind], field["schema"], f"{part}.schema"
            )
        given = field.get("schema_version")
        version = (
            LATEST
            if given in (None, LATEST, "latest")
            else _positive(given, f"{part}.schema_version")
        )
        try:
            out = await self._registry().read(lambda st: st.get_version(subject, version))
        except RegistryError as e:
            if given is None and e.status == 404:
                # Nothing names a schema and the subject has none: the REST Proxy's "schema
                # missing" (42201 for a key, 42202 for a value).
                raise unprocessable(
                    f"Request includes {part}s but does not include {part} schema "
                    f"(subject {subject!r} has no schema registered).",
                    42201 if part == "key" else 42202,
                ) from None
            raise _registry_refusal(e, f"{part} schema of subject {subject!r}") from None
        return int(out["id"])

    async def _register(self, subject: str, fmt: str, schema: Any, where: str) -> int:
        """The id of ``schema`` (the request's field ``where``) registered under ``subject``."""
        if not isinstance(schema, str) or not schema.strip():
            raise unprocessable(f"'{where}' must be the schema's JSON text.", BAD_SCHEMA)
        try:
            text = text_of(_TYPE_OF[fmt], schema, ())
        except InvalidSchemaError as e:
            raise unprocessable(f"Invalid '{where}': {e}", BAD_SCHEMA) from None
        try:
            out = await self._registry().write(
                "register", register_args(subject, text, normalize=False)
            )
        except RegistryError as e:
            raise _registry_refusal(e, f"registering '{where}' under {subject!r}") from None
        return int(out["id"])


_STRATEGIES = ("TOPIC_NAME", "RECORD_NAME", "TOPIC_RECORD_NAME")


def _subject_by_strategy(topic: str, part: str, field: dict[str, Any]) -> str:
    """The subject the REST Proxy v3's ``subject_name_strategy`` names: TOPIC_NAME (the
    default) ``<topic>-key|value``; RECORD_NAME the record's full name; TOPIC_RECORD_NAME
    ``<topic>-<record full name>``. The record's name comes from the ``schema`` given."""
    strategy = field.get("subject_name_strategy", "TOPIC_NAME")
    if strategy not in _STRATEGIES:
        raise unprocessable(
            f"'{part}.subject_name_strategy' must be one of {', '.join(_STRATEGIES)}.", 42206
        )
    if strategy == "TOPIC_NAME":
        return f"{topic}-{part}"
    record = _record_name(field.get("schema"))
    if record is None:
        raise unprocessable(
            f"'{part}.subject_name_strategy' {strategy} needs the record's schema in "
            f"'{part}.schema' (or name the subject in '{part}.subject').",
            42206,
        )
    return record if strategy == "RECORD_NAME" else f"{topic}-{record}"


def _record_name(schema: Any) -> str | None:
    """The full name of the record a schema text defines (Avro's name and namespace, or a JSON
    Schema's title, as Confluent's serializers take them); None if it names none."""
    if not isinstance(schema, str):
        return None
    try:
        obj = orjson.loads(schema)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict):
        return None
    name = obj.get("name") or obj.get("title")
    if not isinstance(name, str) or not name:
        return None
    ns = obj.get("namespace")
    return f"{ns}.{name}" if isinstance(ns, str) and ns and "." not in name else name


def _uses_schema(field: Any) -> bool:
    if type(field) is not dict:
        return False
    kind = field.get("type")
    if isinstance(kind, str) and kind.upper() in ("AVRO", "JSONSCHEMA", "PROTOBUF"):
        return True
    return kind is None and any(k in field for k in _V3_SCHEMA_KEYS)


def _positive(v: Any, where: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise unprocessable(f"'{where}' must be a positive integer.", 42206)
    return v
