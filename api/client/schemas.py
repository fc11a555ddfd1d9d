"""Schema Registry client and Avro / JSON Schema serializers in Confluent's wire format.

``SchemaRegistryClient(urls)`` talks to the registry every broker serves (or any Confluent-
compatible registry) with a cache: an id once learnt for a subject and schema, and a schema
once fetched by id, are never asked for again (ids are immutable). Its methods block (the
standard library's HTTP client): call them from a thread, not from a running event loop.

The serializers turn a value into the bytes a producer sends, and the deserializers back:

    registry = SchemaRegistryClient("http://127.0.0.1:9092")
    to_bytes = AvroSerializer(registry, USER_SCHEMA)
    producer.send("users", to_bytes({"name": "ada"}, "users"))
    ...
    value = AvroDeserializer(registry)(record.value)

Wire format (Confluent's): byte 0 is the magic 0, bytes 1-4 the schema id (big-endian), then
the Avro binary encoding of the value (schemaless) or the JSON text. A serializer registers
its schema under the subject its strategy names (``TopicNameStrategy``: ``<topic>-value`` or
``<topic>-key``) on first use, or only looks it up with ``auto_register=False``. A
deserializer fetches the writer's schema by the id in the record and decodes with it; an
Avro deserializer given a reader schema resolves the data to it (Avro's resolution rules).

No server module is imported here: the client library stays installable on its own.
"""

from __future__ import annotations

import io
import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import fastavro
import jsonschema
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from api.client.avro_json import AvroJsonError, from_avro_json, to_avro_json
from api.client.errors import ClientError
from api.client.security import ClientSecurity

MAGIC = 0
HEADER_BYTES = 5
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
AVRO = "AVRO"
JSON = "JSON"


class SchemaRegistryError(ClientError):
    """A refusal from the registry: ``status`` (HTTP) and ``error_code`` (the registry's,
    e.g. 40401 subject not found, 409 incompatible, 42201 invalid schema)."""

    def __init__(self, status: int, error_code: int, message: str) -> None:
        super().__init__(str(error_code), message)
        self.status = status
        self.error_code = error_code


class SerializationError(ClientError):
    """A value that does not fit its schema, or bytes not in the wire format."""

    def __init__(self, message: str) -> None:
        super().__init__("SERIALIZATION_ERROR", message)


@dataclass(frozen=True)
class SchemaReference:
    name: str
    subject: str
    version: int


@dataclass(frozen=True)
class RegisteredSchema:
    schema: str
    schema_type: str = AVRO
    references: tuple[SchemaReference, ...] = ()


def _refs_json(refs: Iterable[SchemaReference]) -> list[dict[str, Any]]:
    return [{"name": r.name, "subject": r.subject, "version": r.version} for r in refs]


def _refs_of(body: dict[str, Any]) -> tuple[SchemaReference, ...]:
    return tuple(
        SchemaReference(str(r["name"]), str(r["subject"]), int(r["version"]))
        for r in body.get("references") or ()
    )


# ---------------------------------------------------------------- the registry client


class SchemaRegistryClient:
    """See the module docstring. ``urls``: one or more registry base URLs (a broker's URL
    serves it); a connection failure or a 5xx answer moves on to the next."""

    def __init__(
        self,
        urls: str | Sequence[str],
        *,
        timeout_s: float = 30.0,
        security: ClientSecurity | None = None,
    ) -> None:
        self.urls = [u.rstrip("/") for u in ([urls] if isinstance(urls, str) else urls)]
        if not self.urls:
            raise ValueError("at least one registry URL is needed")
        self.timeout_s = timeout_s
        # A secure cluster's registry (issue 18): its CA and client certificate for https://
        # URLs, the user's Basic or bearer credentials on every request.
        self._ssl = None if security is None else security.ssl_context()
        self._authorization = None if security is None else security.authorization()
        self._lock = threading.Lock()
        self._ids: dict[tuple[str, str, str, tuple[SchemaReference, ...]], int] = {}
        self._schemas: dict[int, RegisteredSchema] = {}
        self.requests = 0
        """How many HTTP requests were sent (the caches keep this small)."""

    def _call(
        self, method: str, path: str, body: Any = None, query: dict[str, Any] | None = None
    ) -> Any:
        url_path = path + ("?" + urllib.parse.urlencode(query) if query else "")
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": CONTENT_TYPE + ", application/json"}
        if data is not None:
            headers["Content-Type"] = CONTENT_TYPE
        if self._authorization is not None:
            headers["Authorization"] = self._authorization
        last: Exception | None = None
        for base in self.urls:
            req = urllib.request.Request(base + url_path, data=data, method=method, headers=headers)
            self.requests += 1
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s, context=self._ssl) as resp:
                    raw = resp.read()
                return json.loads(raw) if raw else None
            except urllib.error.HTTPError as e:
                err = _error_of(e)
                if e.code < 500:
                    raise err from None
                last = err
            except (urllib.error.URLError, OSError) as e:
                last = ClientError("NETWORK_EXCEPTION", f"{base}: {e}")
        assert last is not None
        raise last

    # ------------------------------------------------------------ cached

    def register(
        self,
        subject: str,
        schema: str,
        schema_type: str = AVRO,
        references: Sequence[SchemaReference] = (),
        *,
        normalize: bool = False,
    ) -> int:
        """The id of ``schema`` in ``subject``, registering it if it is new there."""
        key = (subject, schema_type, schema, tuple(references))
        with self._lock:
            hit = self._ids.get(key)
        if hit is not None:
            return hit
        body: dict[str, Any] = {"schema": schema, "schemaType": schema_type}
        if references:
            body["references"] = _refs_json(references)
        out = self._call(
            "POST",
            f"/subjects/{_q(subject)}/versions",
            body,
            {"normalize": "true"} if normalize else None,
        )
        sid = int(out["id"])
        with self._lock:
            self._ids[key] = sid
        return sid

    def lookup_id(
        self,
        subject: str,
        schema: str,
        schema_type: str = AVRO,
        references: Sequence[SchemaReference] = (),
    ) -> int:
        """The id of ``schema`` already in ``subject`` (40403 if it is not there)."""
        key = (subject, schema_type, schema, tuple(references))
        with self._lock:
            hit = self._ids.get(key)
        if hit is not None:
            return hit
        out = self.lookup(subject, schema, schema_type, references)
        sid = int(out["id"])
        with self._lock:
            self._ids[key] = sid
        return sid

    def get_schema(self, schema_id: int) -> RegisteredSchema:
        with self._lock:
            hit = self._schemas.get(schema_id)
        if hit is not None:
            return hit
        out = self._call("GET", f"/schemas/ids/{int(schema_id)}")
        got = RegisteredSchema(
            str(out["schema"]), str(out.get("schemaType") or AVRO), _refs_of(out)
        )
        with self._lock:
            self._schemas[schema_id] = got
        return got

    # ------------------------------------------------------------ not cached

    def lookup(
        self,
        subject: str,
        schema: str,
        schema_type: str = AVRO,
        references: Sequence[SchemaReference] = (),
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"schema": schema, "schemaType": schema_type}
        if references:
            body["references"] = _refs_json(references)
        out: dict[str, Any] = self._call("POST", f"/subjects/{_q(subject)}", body)
        return out

    def get_version(
        self, subject: str, version: int | str = "latest", *, deleted: bool = False
    ) -> dict[str, Any]:
        out: dict[str, Any] = self._call(
            "GET",
            f"/subjects/{_q(subject)}/versions/{version}",
            query={"deleted": "true"} if deleted else None,
        )
        return out

    def subjects(self, *, deleted: bool = False) -> list[str]:
        return list(self._call("GET", "/subjects", query={"deleted": "true"} if deleted else None))

    def versions(self, subject: str) -> list[int]:
        return list(self._call("GET", f"/subjects/{_q(subject)}/versions"))

    def delete_subject(self, subject: str, *, permanent: bool = False) -> list[int]:
        return list(
            self._call(
                "DELETE",
                f"/subjects/{_q(subject)}",
                query={"permanent": "true"} if permanent else None,
            )
        )

    def delete_version(self, subject: str, version: int | str, *, permanent: bool = False) -> int:
        return int(
            self._call(
                "DELETE",
                f"/subjects/{_q(subject)}/versions/{version}",
                query={"permanent": "true"} if permanent else None,
            )
        )

    def is_compatible(
        self, subject: str, schema: str, schema_type: str = AVRO, version: int | str = "latest"
    ) -> bool:
        out = self._call(
            "POST",
            f"/compatibility/subjects/{_q(subject)}/versions/{version}",
            {"schema": schema, "schemaType": schema_type},
        )
        return bool(out["is_compatible"])

    def set_compatibility(self, level: str, subject: str | None = None) -> str:
        path = "/config" if subject is None else f"/config/{_q(subject)}"
        return str(self._call("PUT", path, {"compatibility": level.upper()})["compatibility"])

    def get_compatibility(self, subject: str | None = None) -> str:
        path = "/config" if subject is None else f"/config/{_q(subject)}"
        query = None if subject is None else {"defaultToGlobal": "true"}
        return str(self._call("GET", path, query=query)["compatibilityLevel"])


def _q(subject: str) -> str:
    return urllib.parse.quote(subject, safe="")


def _error_of(e: urllib.error.HTTPError) -> SchemaRegistryError:
    try:
        body = json.loads(e.read() or b"{}")
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    return SchemaRegistryError(
        e.code, int(body.get("error_code", e.code)), str(body.get("message", e.reason))
    )


# ---------------------------------------------------------------- wire format


def frame(schema_id: int, payload: bytes) -> bytes:
    """Confluent's framing: magic byte 0, the 4-byte big-endian schema id, the payload."""
    return bytes([MAGIC]) + schema_id.to_bytes(4, "big") + payload


def unframe(data: bytes) -> tuple[int, bytes]:
    """(schema id, payload); ``SerializationError`` for bytes not in the wire format."""
    if len(data) < HEADER_BYTES or data[0] != MAGIC:
        raise SerializationError(
            f"not in the schema registry's wire format (magic byte 0 and a 4-byte schema id "
            f"first): {bytes(data[:8])!r}"
        )
    return int.from_bytes(data[1:HEADER_BYTES], "big"), bytes(data[HEADER_BYTES:])


SubjectStrategy = Callable[[str, bool, str | None], str]
"""(topic, is_key, record name) -> subject."""


def topic_name_strategy(topic: str, is_key: bool, record_name: str | None) -> str:
    return f"{topic}-{'key' if is_key else 'value'}"


def record_name_strategy(topic: str, is_key: bool, record_name: str | None) -> str:
    if not record_name:
        raise SerializationError("RecordNameStrategy needs a named (record) schema")
    return record_name


def topic_record_name_strategy(topic: str, is_key: bool, record_name: str | None) -> str:
    return f"{topic}-{record_name_strategy(topic, is_key, record_name)}"


class _Serializer:
    schema_type = AVRO

    def __init__(
        self,
        registry: SchemaRegistryClient,
        schema: str,
        *,
        references: Sequence[SchemaReference] = (),
        is_key: bool = False,
        auto_register: bool = True,
        subject_name_strategy: SubjectStrategy = topic_name_strategy,
        schema_id: int | None = None,
    ) -> None:
        self.registry = registry
        self.schema = schema
        self.references = tuple(references)
        self.is_key = is_key
        self.auto_register = auto_register
        self.strategy = subject_name_strategy
        self.fixed_id = schema_id
        """Frame every value with this id (a schema already registered, as Confluent's
        ``use.schema.id``): no registration or lookup."""
        self._ids: dict[str, int] = {}

    def _record_name(self) -> str | None:
        return None

    def schema_id(self, topic: str) -> int:
        """The id this serializer frames values for ``topic`` with."""
        if self.fixed_id is not None:
            return self.fixed_id
        subject = self.strategy(topic, self.is_key, self._record_name())
        sid = self._ids.get(subject)
        if sid is None:
            if self.auto_register:
                sid = self.registry.register(
                    subject, self.schema, self.schema_type, self.references
                )
            else:
                sid = self.registry.lookup_id(
                    subject, self.schema, self.schema_type, self.references
                )
            self._ids[subject] = sid
        return sid


def _avro_named_types(
    registry: SchemaRegistryClient,
    refs: Iterable[SchemaReference],
    into: dict[str, Any],
    seen: set[tuple[str, int]],
) -> None:
    """Parse every referenced schema (dependencies first) into ``into`` (named types)."""
    for ref in refs:
        if (ref.subject, ref.version) in seen:
            continue
        seen.add((ref.subject, ref.version))
        out = registry.get_version(ref.subject, ref.version, deleted=True)
        _avro_named_types(registry, _refs_of(out), into, seen)
        fastavro.parse_schema(json.loads(out["schema"]), named_schemas=into)


def _parse_avro(
    registry: SchemaRegistryClient, schema: str, refs: Iterable[SchemaReference]
) -> Any:
    named: dict[str, Any] = {}
    _avro_named_types(registry, refs, named, set())
    return fastavro.parse_schema(json.loads(schema), named_schemas=named)


class AvroSerializer(_Serializer):
    """A value (dicts for records, as fastavro takes them) -> Confluent-framed Avro."""

    schema_type = AVRO

    def __init__(self, registry: SchemaRegistryClient, schema: str, **kw: Any) -> None:
        super().__init__(registry, schema, **kw)
        self._parsed = _parse_avro(registry, schema, self.references)

    def from_json(self, value: Any, topic: str) -> bytes:
        """A value given in Avro's JSON encoding (unions as ``{"type": value}``, bytes as
        code points 0-255: what Confluent's console producer and the REST Proxy take)."""
        try:
            datum = from_avro_json(self._parsed, value)
        except AvroJsonError as e:
            raise SerializationError(f"value is not Avro JSON of the schema: {e}") from None
        return self(datum, topic)

    def _record_name(self) -> str | None:
        p = self._parsed
        return str(p["name"]) if isinstance(p, dict) and "name" in p else None

    def __call__(self, value: Any, topic: str) -> bytes:
        sid = self.schema_id(topic)
        buf = io.BytesIO()
        try:
            fastavro.schemaless_writer(buf, self._parsed, value)
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise SerializationError(f"value does not fit the Avro schema: {e}") from None
        return frame(sid, buf.getvalue())


def _compiled(
    cache: dict[int, Any],
    registry: SchemaRegistryClient,
    sid: int,
    schema_type: str,
    compile_schema: Callable[[SchemaRegistryClient, str, Iterable[SchemaReference]], Any],
) -> Any:
    """Schema ``sid`` compiled by ``compile_schema`` (fetched and compiled once, then taken
    from ``cache``); a schema of another type than ``schema_type`` cannot decode the payload."""
    compiled = cache.get(sid)
    if compiled is None:
        got = registry.get_schema(sid)
        if got.schema_type != schema_type:
            raise SerializationError(f"schema {sid} is {got.schema_type}, not {schema_type}")
        compiled = cache[sid] = compile_schema(registry, got.schema, got.references)
    return compiled


class AvroDeserializer:
    """Confluent-framed Avro -> a value, read with the writer's schema (fetched by id and
    cached), resolved to ``reader_schema`` if one is given."""

    def __init__(
        self,
        registry: SchemaRegistryClient,
        reader_schema: str | None = None,
        *,
        reader_references: Sequence[SchemaReference] = (),
    ) -> None:
        self.registry = registry
        self._reader = (
            None
            if reader_schema is None
            else _parse_avro(registry, reader_schema, reader_references)
        )
        self._writers: dict[int, Any] = {}

    def __call__(self, data: bytes) -> Any:
        return self._read(data)[0]

    def to_json(self, data: bytes) -> Any:
        """The value in Avro's JSON encoding (as Confluent's console consumer prints it)."""
        datum, schema = self._read(data)
        return to_avro_json(schema, datum)

    def _read(self, data: bytes) -> tuple[Any, Any]:
        """The datum and the schema it is a datum of (the reader's, else the writer's)."""
        sid, payload = unframe(data)
        writer = _compiled(self._writers, self.registry, sid, AVRO, _parse_avro)
        try:
            datum = fastavro.schemaless_reader(io.BytesIO(payload), writer, self._reader)
        except Exception as e:  # fastavro: truncated data, resolution failures
            raise SerializationError(f"cannot decode with schema {sid}: {e}") from None
        return datum, writer if self._reader is None else self._reader


def _json_validator(
    registry: SchemaRegistryClient, schema: str, refs: Iterable[SchemaReference]
) -> Any:
    obj = json.loads(schema)
    resources: list[tuple[str, Resource[Any]]] = []
    seen: set[tuple[str, int]] = set()

    def collect(rs: Iterable[SchemaReference]) -> None:
        for r in rs:
            if (r.subject, r.version) in seen:
                continue
            seen.add((r.subject, r.version))
            out = registry.get_version(r.subject, r.version, deleted=True)
            collect(_refs_of(out))
            resources.append(
                (
                    r.name,
                    Resource.from_contents(
                        json.loads(out["schema"]), default_specification=DRAFT202012
                    ),
                )
            )

    collect(refs)
    cls = jsonschema.validators.validator_for(obj, default=jsonschema.Draft202012Validator)
    return cls(obj, registry=Registry().with_resources(resources))


class JSONSerializer(_Serializer):
    """A JSON value -> Confluent-framed JSON text, validated against the schema first."""

    schema_type = JSON

    def __init__(
        self, registry: SchemaRegistryClient, schema: str, *, validate: bool = True, **kw: Any
    ) -> None:
        super().__init__(registry, schema, **kw)
        self._validator = _json_validator(registry, schema, self.references)
        self.validate = validate

    def _record_name(self) -> str | None:
        title = (
            json.loads(self.schema).get("title") if self.schema.lstrip().startswith("{") else None
        )
        return str(title) if title else None

    def __call__(self, value: Any, topic: str) -> bytes:
        if self.validate:
            err = jsonschema.exceptions.best_match(self._validator.iter_errors(value))
            if err is not None:
                raise SerializationError(f"value does not fit the JSON schema: {err.message}")
        sid = self.schema_id(topic)
        return frame(sid, json.dumps(value, separators=(",", ":")).encode())


class JSONDeserializer:
    """Confluent-framed JSON -> a value, validated against the writer's schema (fetched by
    id and cached) or the ``schema`` given."""

    def __init__(
        self, registry: SchemaRegistryClient, schema: str | None = None, *, validate: bool = True
    ) -> None:
        self.registry = registry
        self.validate = validate
        self._fixed = None if schema is None else _json_validator(registry, schema, ())
        self._validators: dict[int, Any] = {}

    def __call__(self, data: bytes) -> Any:
        sid, payload = unframe(data)
        try:
            value = json.loads(payload)
        except ValueError as e:
            raise SerializationError(f"payload of schema {sid} is not JSON: {e}") from None
        if self.validate:
            v = self._fixed
            if v is None:
                v = _compiled(self._validators, self.registry, sid, JSON, _json_validator)
            err = jsonschema.exceptions.best_match(v.iter_errors(value))
            if err is not None:
                raise SerializationError(f"value does not fit schema {sid}: {err.message}")
        return value
