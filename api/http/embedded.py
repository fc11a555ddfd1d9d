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
fixed are strings of code points 0-255. fastavro's JSON reader and writer do exactly that.

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
from aiohttp import web

from api.http.errors import HttpError, unprocessable
from broker.schemas.parse import AVRO, JSON, InvalidSchemaError, ParsedSchema, text_of
from broker.schemas.registry import SchemaRegistry, register_args
from broker.schemas.state import RegistryError

SCHEMA_FORMATS = ("avro", "jsonschema")
MAGIC = 0
HEADER_BYTES = 5

BAD_SCHEMA = 42205
"""The REST Proxy's "invalid schema" (the schema text does not parse)."""
CONVERSION_FAILED = 42203
"""The REST Proxy's "conversion of JSON to the format failed" (data does not fit its schema)."""
SCHEMA_LOOKUP_FAILED = 40801
"""The REST Proxy's "schema registration or lookup failed"."""

CODEC_KEY: web.AppKey[EmbeddedCodec] = web.AppKey("embedded_codec")

_TYPE_OF = {"avro": AVRO, "jsonschema": JSON}


def frame(schema_id: int, payload: bytes) -> bytes:
    return bytes([MAGIC]) + schema_id.to_bytes(4, "big") + payload


def unframe(data: bytes) -> tuple[int, bytes]:
    """The schema id and payload of a value in the wire format; ``ValueError`` otherwise."""
    if len(data) < HEADER_BYTES or data[0] != MAGIC:
        raise ValueError("not in the schema registry's wire format (magic byte 0, 4-byte id)")
    return int.from_bytes(data[1:HEADER_BYTES], "big"), data[HEADER_BYTES:]


def _registry_refusal(e: RegistryError, what: str) -> HttpError:
    status, code = e.status, e.error_code
    if status == 404:
        return HttpError(404, f"{what}: {e}", code)
    if status == 422:
        return HttpError(422, f"{what}: {e}", BAD_SCHEMA)
    if status == 409:
        return HttpError(409, f"{what}: {e}", 409)
    return HttpError(
        408, f"Schema registration or lookup failed: {what}: {e}", SCHEMA_LOOKUP_FAILED
    )


class EmbeddedCodec:
    """Encodes and decodes the schema formats through one broker's registry."""

    def __init__(self, registry: Callable[[], SchemaRegistry]) -> None:
        self._registry = registry
        self._parsed: dict[int, ParsedSchema] = {}

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
        if not isinstance(schema, str) or not schema.strip():
            raise unprocessable(f"'{part}_schema' must be the schema's JSON text.", BAD_SCHEMA)
        try:
            text = text_of(_TYPE_OF[fmt], schema, ())
        except InvalidSchemaError as e:
            raise unprocessable(f"Invalid {part} schema: {e}", BAD_SCHEMA) from None
        try:
            out = await self._registry().write(
                "register", register_args(f"{topic}-{part}", text, normalize=False)
            )
        except RegistryError as e:
            raise _registry_refusal(e, f"registering the {part} schema") from None
        return int(out["id"])

    async def parsed(self, schema_id: int) -> ParsedSchema:
        p = self._parsed.get(schema_id)
        if p is None:
            try:
                p = await self._registry().read(lambda st: st.parsed(schema_id))
            except KeyError:
                raise HttpError(404, f"Schema {schema_id} not found.", 40403) from None
            except RegistryError as e:
                raise _registry_refusal(e, f"schema {schema_id}") from None
            except InvalidSchemaError as e:
                raise _registry_refusal(
                    RegistryError(42201, str(e)), f"schema {schema_id}"
                ) from None
            self._parsed[schema_id] = p
        return p

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
                record = next(
                    fastavro.json_reader(io.StringIO(orjson.dumps(value).decode()), p.avro)
                )
                buf = io.BytesIO()
                fastavro.schemaless_writer(buf, p.avro, record)
                payload = buf.getvalue()
            else:
                jsonschema.validate(value, p.json_schema, registry=p.json_registry)
                payload = orjson.dumps(value)
        except jsonschema.ValidationError as e:
            raise unprocessable(
                f"{where} does not match JSON schema {schema_id}: {e.message}", CONVERSION_FAILED
            ) from None
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
            raise HttpError(404, f"{where}: schema {sid} not found in the registry.", 40403)
        try:
            if p.schema_type == AVRO:
                record = fastavro.schemaless_reader(io.BytesIO(payload), p.avro, None)
                out = io.StringIO()
                fastavro.json_writer(out, p.avro, [record])
                return orjson.loads(out.getvalue())
            return orjson.loads(payload)
        except Exception as e:
            raise unprocessable(
                f"{where} does not decode with schema {sid}: {e}", CONVERSION_FAILED
            ) from None
