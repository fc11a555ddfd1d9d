"""Schema-registry values in the ``longboat`` source and sink: Avro and JSON Schema columns.

Spark's own ``from_avro`` cannot read Confluent's wire format (magic byte, 4-byte schema id,
then the Avro body), so a pipeline over a registry-backed topic had to decode by hand. With
``valueFormat=avro`` (``keyFormat`` likewise) the source:

* on the driver (``LongboatDataSource.schema``), takes the *reader* schema from the registry
  (``valueSubject`` default ``<topic>-value``, ``valueSchemaVersion`` default latest, or
  ``valueSchemaId``) and maps it to a Spark type as spark-avro's ``SchemaConverters`` do; the
  reader schema travels to the executors in the column's metadata, so planning and reading
  agree even if a version is registered in between;
* in the executors (``Decoder.decode``), reads each value with the writer schema its id names
  (fetched once per id and cached) resolved to the reader schema (fastavro, Avro's resolution
  rules), and builds the Arrow column from the Python values.

A value not in the wire format or not resolvable fails the read (``mode=FAILFAST``, naming
topic, partition and offset) or becomes null (``mode=PERMISSIVE``), as ``from_avro``'s mode.

``valueFormat=jsonschema`` parses the JSON text into a struct when the schema is a flat object
of string/integer/number/boolean properties; anything else stays a JSON string column.

On write, ``valueFormat=avro`` encodes the ``value`` struct with the subject's latest schema,
with ``valueSchema`` (registered under the subject), or with a schema derived from the
DataFrame's type (``valueSchema.autoRegister=true``), and frames each value with its id.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import date, datetime, time
from typing import Any, Literal

import fastavro
import orjson
import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from api.client.schemas import (
    AVRO,
    JSON,
    AvroDeserializer,
    RegisteredSchema,
    SchemaRegistryClient,
    SchemaRegistryError,
    SerializationError,
    _parse_avro,
    frame,
    unframe,
)
from api.client.security import ClientSecurity
from spark.options import LongboatOptionError, parse_bootstrap, parse_security
from spark.security import client_security

Format = Literal["binary", "avro", "jsonschema"]
META_SCHEMA = "longboat.schema"
META_ID = "longboat.schemaId"
META_TYPE = "longboat.schemaType"


class AvroDecodeError(RuntimeError):
    """A record whose key or value cannot be decoded (``mode=FAILFAST``)."""


# ---------------------------------------------------------------- options


@dataclass(frozen=True)
class ColumnFormat:
    """How one of ``key``/``value`` is encoded, and where its schema comes from."""

    column: Literal["key", "value"]
    kind: Format = "binary"
    subject: str | None = None
    version: str = "latest"
    schema_id: int | None = None
    schema: str | None = None
    """Writes: an explicit Avro schema (registered under the subject)."""
    auto_register: bool = False


@dataclass(frozen=True)
class Formats:
    registry: tuple[str, ...]
    key: ColumnFormat
    value: ColumnFormat
    mode: Literal["FAILFAST", "PERMISSIVE"] = "FAILFAST"
    security: ClientSecurity | None = None
    """The job's TLS files and credentials (``spark.security``), for a secure registry."""

    @property
    def any(self) -> bool:
        return self.key.kind != "binary" or self.value.kind != "binary"

    def columns(self) -> tuple[ColumnFormat, ...]:
        return tuple(c for c in (self.key, self.value) if c.kind != "binary")


def _lower(options: Mapping[str, Any]) -> dict[str, str]:
    return {k.lower(): str(v) for k, v in options.items() if v is not None}


def _column_format(
    opts: Mapping[str, str], column: Literal["key", "value"], *, sink: bool
) -> ColumnFormat:
    kind = opts.get(f"{column}format", "binary").strip().lower()
    allowed = ("binary", "avro") if sink else ("binary", "avro", "jsonschema")
    if kind not in allowed:
        raise LongboatOptionError(
            f"option '{column}Format' must be one of {', '.join(allowed)}, got {kind!r}"
        )
    version = opts.get(f"{column}schemaversion", "latest").strip().lower()
    if version != "latest" and not (version.isdigit() and int(version) >= 1):
        raise LongboatOptionError(
            f"option '{column}SchemaVersion' must be 'latest' or a version >= 1, got {version!r}"
        )
    raw_id = opts.get(f"{column}schemaid")
    sid = None
    if raw_id is not None:
        if not raw_id.strip().isdigit():
            raise LongboatOptionError(f"option '{column}SchemaId' must be an id >= 0")
        sid = int(raw_id)
        if f"{column}schemaversion" in opts or f"{column}subject" in opts:
            raise LongboatOptionError(
                f"option '{column}SchemaId' names the schema itself: drop '{column}Subject' / "
                f"'{column}SchemaVersion'"
            )
    schema = opts.get(f"{column}schema")
    if schema is not None:
        try:
            fastavro.parse_schema(json.loads(schema))
        except Exception as e:
            raise LongboatOptionError(
                f"option '{column}Schema' is not an Avro schema: {e}"
            ) from None
    auto = opts.get(f"{column}schema.autoregister", "false").strip().lower()
    if auto not in ("true", "false"):
        raise LongboatOptionError(f"option '{column}Schema.autoRegister' must be true or false")
    if kind == "binary" and any(
        n in opts
        for n in (
            f"{column}subject",
            f"{column}schemaversion",
            f"{column}schemaid",
            f"{column}schema",
            f"{column}schema.autoregister",
        )
    ):
        raise LongboatOptionError(
            f"schema options for the {column} need option '{column}Format' (avro"
            + ("" if sink else " or jsonschema")
            + ")"
        )
    return ColumnFormat(
        column=column,
        kind=kind,  # type: ignore[arg-type]
        subject=opts.get(f"{column}subject"),
        version=version,
        schema_id=sid,
        schema=schema,
        auto_register=auto == "true",
    )


def parse_formats(options: Mapping[str, Any], *, sink: bool) -> Formats:
    """The format options of a read (``sink=False``) or a write. Pure."""
    opts = _lower(options)
    mode = opts.get("mode", "FAILFAST").strip().upper()
    if mode not in ("FAILFAST", "PERMISSIVE"):
        raise LongboatOptionError(f"option 'mode' must be FAILFAST or PERMISSIVE, got {mode!r}")
    key = _column_format(opts, "key", sink=sink)
    value = _column_format(opts, "value", sink=sink)
    registry: tuple[str, ...] = ()
    security = None
    if key.kind != "binary" or value.kind != "binary":
        raw = opts.get("schema.registry.url")
        registry = (
            parse_bootstrap({"bootstrap": raw}) if raw else parse_bootstrap(opts)
        )  # every broker serves the registry
        # The registry is reached with the brokers' TLS files and credentials.
        security = client_security(parse_security(opts))
    return Formats(registry, key, value, mode, security)  # type: ignore[arg-type]


def _subject(fmt: ColumnFormat, topic: str | None) -> str:
    if fmt.subject:
        return fmt.subject
    if not topic:
        raise LongboatOptionError(
            f"option '{fmt.column}Subject' is needed: the default <topic>-{fmt.column} needs "
            "exactly one topic (option 'subscribe' or 'topic')"
        )
    return f"{topic}-{fmt.column}"


# ---------------------------------------------------------------- the reader schema (driver)


@dataclass(frozen=True)
class ReaderSchema:
    schema_id: int
    schema: RegisteredSchema


def reader_schema(
    registry: SchemaRegistryClient, fmt: ColumnFormat, topic: str | None
) -> ReaderSchema:
    """The schema ``fmt`` names: by id, or the subject's chosen version."""
    want = AVRO if fmt.kind == "avro" else JSON
    try:
        if fmt.schema_id is not None:
            sid = fmt.schema_id
            got = registry.get_schema(sid)
        else:
            subject = _subject(fmt, topic)
            out = registry.get_version(subject, fmt.version)
            sid = int(out["id"])
            got = registry.get_schema(sid)
    except SchemaRegistryError as e:
        raise LongboatOptionError(
            f"the {fmt.column} schema cannot be had from the registry: {e.error_code} {e}"
        ) from None
    if got.schema_type != want:
        raise LongboatOptionError(
            f"the {fmt.column} schema {sid} is {got.schema_type}, not {want} "
            f"(option '{fmt.column}Format' is {fmt.kind})"
        )
    return ReaderSchema(sid, got)


def single_topic(subscribe: tuple[str, ...], assign: Mapping[str, Any] | None) -> str | None:
    topics = list(subscribe) or list(assign or {})
    return topics[0] if len(topics) == 1 else None


def column_field(registry: SchemaRegistryClient, rs: ReaderSchema, column: str) -> StructField:
    """The Spark column for a decoded key or value, the reader schema in its metadata."""
    if rs.schema.schema_type == AVRO:
        parsed = _parse_avro(registry, rs.schema.schema, rs.schema.references)
        dtype, _ = avro_to_spark(parsed)
    else:
        dtype = json_to_spark(json.loads(rs.schema.schema))
    meta = {
        META_ID: rs.schema_id,
        META_TYPE: rs.schema.schema_type,
        META_SCHEMA: rs.schema.schema,
    }
    return StructField(column, dtype, True, meta)


def with_columns(schema: StructType, formats: Formats, topic: str | None) -> StructType:
    """``schema`` (the Kafka rows) with its key/value columns typed by their schemas."""
    if not formats.any:
        return schema
    registry = SchemaRegistryClient(list(formats.registry), security=formats.security)
    fields: dict[str, StructField] = {
        c.column: column_field(registry, reader_schema(registry, c, topic), c.column)
        for c in formats.columns()
    }
    return StructType([fields.get(f.name, f) for f in schema.fields])


# ---------------------------------------------------------------- Avro -> Spark types

Convert = Callable[[Any], Any] | None
"""A Python value as fastavro gives it -> what pyarrow takes for the Spark type (None: as is)."""


def _named(parsed: Any) -> Mapping[str, Any]:
    return parsed.get("__named_schemas", {}) if isinstance(parsed, dict) else {}


def avro_to_spark(parsed: Any) -> tuple[DataType, Convert]:
    """spark-avro's ``SchemaConverters.toSqlType`` for a ``fastavro.parse_schema`` result, and
    the conversion each decoded value needs (None where pyarrow takes it as it is)."""
    return _to_spark(parsed, _named(parsed), ())


def _to_spark(s: Any, names: Mapping[str, Any], stack: tuple[str, ...]) -> tuple[DataType, Convert]:
    if isinstance(s, str):
        prim = {
            "boolean": BooleanType(),
            "int": IntegerType(),
            "long": LongType(),
            "float": FloatType(),
            "double": DoubleType(),
            "bytes": BinaryType(),
            "string": StringType(),
        }
        if s in prim:
            return prim[s], None
        if s == "null":
            raise LongboatOptionError("an Avro 'null' type outside a union has no Spark type")
        if s in stack:
            raise LongboatOptionError(
                f"recursive Avro type {s!r}: Spark types cannot be recursive (as spark-avro)"
            )
        if s not in names:
            raise LongboatOptionError(f"unknown Avro type {s!r}")
        return _to_spark(names[s], names, stack)
    if isinstance(s, list):
        return _union(s, names, stack)
    t = s["type"]
    logical = s.get("logicalType")
    if logical == "date" and t == "int":
        return DateType(), None
    if logical in ("timestamp-millis", "timestamp-micros") and t == "long":
        return TimestampType(), None
    if logical in ("local-timestamp-millis", "local-timestamp-micros") and t == "long":
        return TimestampNTZType(), None
    if logical == "decimal" and t in ("bytes", "fixed"):
        return DecimalType(int(s["precision"]), int(s.get("scale", 0))), None
    if logical == "uuid":
        return StringType(), _str
    if logical == "time-millis" and t == "int":
        return IntegerType(), _time_millis
    if logical == "time-micros" and t == "long":
        return LongType(), _time_micros
    if t == "record":
        name = s.get("name", "")
        fields = []
        convs: list[tuple[str, Convert]] = []
        for f in s["fields"]:
            ft, fc = _to_spark(f["type"], names, (*stack, name))
            nullable = isinstance(f["type"], list) and "null" in f["type"]
            fields.append(StructField(f["name"], ft, nullable))
            convs.append((f["name"], fc))
        active = [(n, c) for n, c in convs if c is not None]
        if not active:
            return StructType(fields), None

        def record(v: Any) -> Any:
            if v is None:
                return None
            out = dict(v)
            for n, c in active:
                out[n] = c(out[n])
            return out

        return StructType(fields), record
    if t == "enum":
        return StringType(), None
    if t == "fixed":
        return BinaryType(), None
    if t == "array":
        et, ec = _to_spark(s["items"], names, stack)
        nullable = isinstance(s["items"], list) and "null" in s["items"]
        if ec is None:
            return ArrayType(et, nullable), None
        return ArrayType(et, nullable), lambda v: None if v is None else [ec(x) for x in v]
    if t == "map":
        vt, vc = _to_spark(s["values"], names, stack)
        nullable = isinstance(s["values"], list) and "null" in s["values"]
        conv = (
            (lambda v: None if v is None else list(v.items()))
            if vc is None
            else (lambda v: None if v is None else [(k, vc(x)) for k, x in v.items()])
        )
        return MapType(StringType(), vt, nullable), conv
    return _to_spark(t, names, stack)  # {"type": "string"} and the like


def _str(v: Any) -> Any:
    return None if v is None else str(v)


def _time_millis(v: Any) -> Any:
    if isinstance(v, time):
        return ((v.hour * 60 + v.minute) * 60 + v.second) * 1000 + v.microsecond // 1000
    return v


def _time_micros(v: Any) -> Any:
    if isinstance(v, time):
        return ((v.hour * 60 + v.minute) * 60 + v.second) * 1_000_000 + v.microsecond
    return v


def _union(
    s: list[Any], names: Mapping[str, Any], stack: tuple[str, ...]
) -> tuple[DataType, Convert]:
    members = [m for m in s if m != "null"]
    if len(members) == 1:
        return _to_spark(members[0], names, stack)
    if not members:
        raise LongboatOptionError("an Avro union of only 'null' has no Spark type")
    # int+long and float+double widen (spark-avro's rule); anything else is member0, member1...
    if set(members) in ({"int", "long"},):
        return LongType(), None
    if set(members) in ({"float", "double"},):
        return DoubleType(), None
    types = [_to_spark(m, names, stack) for m in members]
    fields = [StructField(f"member{i}", t, True) for i, (t, _) in enumerate(types)]
    checks = [_matcher(m, names) for m in members]

    def union(v: Any) -> Any:
        if v is None:
            return None
        out: dict[str, Any] = {f"member{i}": None for i in range(len(members))}
        for i, ok in enumerate(checks):
            if ok(v):
                c = types[i][1]
                out[f"member{i}"] = c(v) if c else v
                return out
        raise SerializationError(f"no union branch of {s} holds {type(v).__name__}")

    return StructType(fields), union


def _matcher(m: Any, names: Mapping[str, Any]) -> Callable[[Any], bool]:
    """Which Python values fastavro returns for union member ``m`` (first match wins)."""
    if isinstance(m, str) and m in names:
        m = names[m]
    t = m if isinstance(m, str) else m.get("type")
    logical = None if isinstance(m, str) else m.get("logicalType")
    if logical == "date":
        return lambda v: isinstance(v, date) and not isinstance(v, datetime)
    if logical and "timestamp" in logical:
        return lambda v: isinstance(v, datetime)
    by_type: dict[str, Callable[[Any], bool]] = {
        "boolean": lambda v: isinstance(v, bool),
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "long": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "float": lambda v: isinstance(v, float),
        "double": lambda v: isinstance(v, float),
        "bytes": lambda v: isinstance(v, bytes),
        "fixed": lambda v: isinstance(v, bytes),
        "string": lambda v: isinstance(v, str),
        "enum": lambda v: isinstance(v, str),
        "record": lambda v: isinstance(v, dict),
        "map": lambda v: isinstance(v, dict),
        "array": lambda v: isinstance(v, list),
    }
    return by_type.get(str(t), lambda v: False)


# ---------------------------------------------------------------- JSON Schema -> Spark types

_JSON_PRIMITIVES: dict[str, DataType] = {
    "string": StringType(),
    "integer": LongType(),
    "number": DoubleType(),
    "boolean": BooleanType(),
}


def json_struct(schema: Any) -> StructType | None:
    """The struct for a flat object schema of primitive properties, else None (JSON text)."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return None
    props = schema.get("properties")
    if not isinstance(props, dict) or not props:
        return None
    fields = []
    for name, p in props.items():
        if not isinstance(p, dict):
            return None
        t = p.get("type")
        kinds = t if isinstance(t, list) else [t]
        real = [k for k in kinds if k != "null"]
        if len(real) != 1 or real[0] not in _JSON_PRIMITIVES or set(p) - {"type", "description"}:
            return None
        fields.append(StructField(name, _JSON_PRIMITIVES[real[0]], True))
    return StructType(fields)


def json_to_spark(schema: Any) -> DataType:
    return json_struct(schema) or StringType()


# ---------------------------------------------------------------- decoding (executors)


@dataclass(frozen=True)
class ColumnDecoder:
    """What an executor needs to decode one column: pickled into each input partition."""

    column: str
    schema_type: str
    reader_schema: str
    dtype_json: str
    registry: tuple[str, ...]
    mode: Literal["FAILFAST", "PERMISSIVE"]
    reader_id: int = -1
    security: ClientSecurity | None = None


def decoders(schema: StructType, formats: Formats) -> tuple[ColumnDecoder, ...]:
    """From the schema Spark hands the reader (its metadata holds the reader schemas)."""
    out = []
    for c in formats.columns():
        f = schema[c.column]
        meta = f.metadata or {}
        if META_SCHEMA not in meta:
            raise LongboatOptionError(f"column {c.column!r} has no schema in its metadata")
        out.append(
            ColumnDecoder(
                c.column,
                str(meta[META_TYPE]),
                str(meta[META_SCHEMA]),
                f.dataType.json(),
                formats.registry,
                formats.mode,
                int(meta.get(META_ID, -1)),
                formats.security,
            )
        )
    return tuple(out)


class Decoder:
    """Decodes a column of Arrow batches in place; one per task (caches writer schemas)."""

    def __init__(self, spec: ColumnDecoder) -> None:
        self.spec = spec
        self.registry = SchemaRegistryClient(list(spec.registry), security=spec.security)
        dtype = StructType.fromJson(
            {
                "fields": [
                    {
                        "name": "x",
                        "type": json.loads(spec.dtype_json),
                        "nullable": True,
                        "metadata": {},
                    }
                ],
                "type": "struct",
            }
        )["x"].dataType
        self.arrow_type = to_arrow_type(dtype, timezone="UTC")  # as the Kafka columns
        self.convert: Convert = None
        self.one: Callable[[bytes], Any]
        if spec.schema_type == AVRO:
            self._avro = AvroDeserializer(self.registry, spec.reader_schema)
            reader = _parse_avro(self.registry, spec.reader_schema, ())
            _, self.convert = avro_to_spark(reader)
            self.one = self._avro_one(reader)
        else:
            struct = json_struct(json.loads(spec.reader_schema))
            self.one = self._json_struct(struct) if struct is not None else self._json_text

    def _avro_one(self, reader: Any) -> Callable[[bytes], Any]:
        resolving = self._avro
        rid = self.spec.reader_id

        def one(data: bytes) -> Any:
            # Written with the reader schema itself (the common case): no resolution, which
            # costs fastavro about 40% more per value.
            if len(data) >= 5 and data[0] == 0 and int.from_bytes(data[1:5], "big") == rid:
                return fastavro.schemaless_reader(io.BytesIO(memoryview(data)[5:]), reader, None)
            return resolving(data)

        return one

    @staticmethod
    def _json_text(data: bytes) -> Any:
        _, payload = unframe(data)
        orjson.loads(payload)  # the text must at least be JSON
        return payload.decode()

    @staticmethod
    def _json_struct(struct: StructType) -> Callable[[bytes], Any]:
        checks = {f.name: type(f.dataType) for f in struct.fields}

        def one(data: bytes) -> Any:
            _, payload = unframe(data)
            v = orjson.loads(payload)
            if not isinstance(v, dict):
                raise SerializationError(f"not a JSON object: {payload[:40]!r}")
            out = {}
            for name, kind in checks.items():
                x = v.get(name)
                ok = x is None or (
                    (kind is StringType and isinstance(x, str))
                    or (kind is BooleanType and isinstance(x, bool))
                    or (kind is LongType and isinstance(x, int) and not isinstance(x, bool))
                    or (
                        kind is DoubleType
                        and isinstance(x, int | float)
                        and not isinstance(x, bool)
                    )
                )
                if not ok:
                    raise SerializationError(f"property {name!r} is {type(x).__name__}")
                out[name] = float(x) if kind is DoubleType and x is not None else x
            return out

        return one

    def decode(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        names = batch.schema.names
        idx = names.index(self.spec.column)
        raw = batch.column(idx).to_pylist()
        out: list[Any] = []
        one, conv = self.one, self.convert
        for i, data in enumerate(raw):
            if data is None:
                out.append(None)
                continue
            try:
                v = one(data)
                out.append(conv(v) if conv else v)
            except Exception as e:
                if self.spec.mode == "PERMISSIVE":
                    out.append(None)
                    continue
                raise AvroDecodeError(self._where(batch, i, e)) from None
        col = pa.array(out, type=self.arrow_type)
        return batch.set_column(idx, pa.field(self.spec.column, self.arrow_type), col)

    def _where(self, batch: pa.RecordBatch, i: int, e: Exception) -> str:
        def at(name: str) -> Any:
            return batch.column(batch.schema.names.index(name))[i].as_py()

        return (
            f"cannot decode the {self.spec.column} of {at('topic')}-{at('partition')} offset "
            f"{at('offset')} as {self.spec.schema_type}: {e} (option mode=PERMISSIVE reads it "
            "as null)"
        )


def decode_batches(
    specs: tuple[ColumnDecoder, ...], batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    decs = [Decoder(s) for s in specs]
    for b in batches:
        for d in decs:
            b = d.decode(b)
        yield b


# ---------------------------------------------------------------- Spark -> Avro, encoding (writes)


def spark_to_avro(dtype: DataType, name: str = "topLevelRecord", namespace: str = "") -> Any:
    """spark-avro's ``SchemaConverters.toAvroType``: a nullable field is a union with null."""
    if isinstance(dtype, StructType):
        full = f"{namespace}.{name}" if namespace else name
        fields = []
        for f in dtype.fields:
            t = spark_to_avro(f.dataType, f.name, full)
            fields.append(
                {"name": f.name, "type": ["null", t], "default": None}
                if f.nullable
                else {"name": f.name, "type": t}
            )
        out: dict[str, Any] = {"type": "record", "name": name, "fields": fields}
        if namespace:
            out["namespace"] = namespace
        return out
    simple: list[tuple[type, Any]] = [
        (BooleanType, "boolean"),
        (ByteType, "int"),
        (ShortType, "int"),
        (IntegerType, "int"),
        (LongType, "long"),
        (FloatType, "float"),
        (DoubleType, "double"),
        (StringType, "string"),
        (BinaryType, "bytes"),
        (DateType, {"type": "int", "logicalType": "date"}),
        (TimestampType, {"type": "long", "logicalType": "timestamp-micros"}),
        (TimestampNTZType, {"type": "long", "logicalType": "local-timestamp-micros"}),
    ]
    for cls, avro in simple:
        if type(dtype) is cls:
            return avro
    if isinstance(dtype, DecimalType):
        return {
            "type": "bytes",
            "logicalType": "decimal",
            "precision": dtype.precision,
            "scale": dtype.scale,
        }
    if isinstance(dtype, ArrayType):
        items = spark_to_avro(dtype.elementType, name, namespace)
        return {"type": "array", "items": ["null", items] if dtype.containsNull else items}
    if isinstance(dtype, MapType):
        if not isinstance(dtype.keyType, StringType):
            raise LongboatOptionError("an Avro map needs string keys")
        values = spark_to_avro(dtype.valueType, name, namespace)
        return {"type": "map", "values": ["null", values] if dtype.valueContainsNull else values}
    raise LongboatOptionError(f"no Avro type for Spark type {dtype.simpleString()}")


def _maps_to_dicts(s: Any, names: Mapping[str, Any]) -> Convert:
    """pyarrow gives maps as lists of pairs; fastavro wants dicts."""
    if isinstance(s, str):
        return _maps_to_dicts(names[s], names) if s in names else None
    if isinstance(s, list):
        convs = [_maps_to_dicts(m, names) for m in s]
        live = [c for c in convs if c is not None]
        if not live:
            return None
        return lambda v: v if v is None else _each(live, v)
    t = s.get("type")
    if t == "record":
        convs2 = [(f["name"], _maps_to_dicts(f["type"], names)) for f in s["fields"]]
        active: list[tuple[str, Callable[[Any], Any]]] = [
            (n, c) for n, c in convs2 if c is not None
        ]
        if not active:
            return None

        def rec(v: Any) -> Any:
            if not isinstance(v, dict):
                return v
            out = dict(v)
            for n, c in active:
                if n in out:
                    out[n] = c(out[n])
            return out

        return rec
    if t == "array":
        ic = _maps_to_dicts(s["items"], names)
        if ic is None:
            return None
        item: Callable[[Any], Any] = ic
        return lambda v: v if not isinstance(v, list) else [item(x) for x in v]
    if t == "map":
        c = _maps_to_dicts(s["values"], names)

        def m(v: Any) -> Any:
            if isinstance(v, list):
                v = dict(v)
            if isinstance(v, dict) and c is not None:
                v = {k: c(x) for k, x in v.items()}
            return v

        return m
    return None


def _each(convs: list[Callable[[Any], Any]], v: Any) -> Any:
    # Each only touches the values it recognises (lists of pairs, dicts), so all may run.
    for c in convs:
        v = c(v)
    return v


@dataclass(frozen=True)
class ColumnEncoder:
    column: str
    schema_id: int
    schema: str


def encoders(
    formats: Formats, dtypes: Mapping[str, DataType], topic: str | None
) -> tuple[ColumnEncoder, ...]:
    """On the driver: the schema each Avro column is written with, registered if asked."""
    if not formats.any:
        return ()
    registry = SchemaRegistryClient(list(formats.registry), security=formats.security)
    out = []
    for c in formats.columns():
        dtype = dtypes.get(c.column)
        if not isinstance(dtype, StructType) and c.schema is None and c.auto_register:
            raise LongboatOptionError(f"column {c.column!r} must be a struct to derive its schema")
        subject = _subject(c, topic)
        try:
            if c.schema is not None or c.auto_register:
                schema = c.schema or json.dumps(spark_to_avro(dtype))  # type: ignore[arg-type]
                sid = registry.register(subject, schema, AVRO)
            else:
                got = registry.get_version(subject, c.version)
                sid, schema = int(got["id"]), str(got["schema"])
        except SchemaRegistryError as e:
            hint = (
                " (set option "
                f"'{c.column}Schema' or '{c.column}Schema.autoRegister=true' to register one)"
                if e.error_code == 40401
                else ""
            )
            raise LongboatOptionError(
                f"no Avro schema for the {c.column} in subject {subject!r}: {e}{hint}"
            ) from None
        out.append(ColumnEncoder(c.column, sid, schema))
    return tuple(out)


def encode_batches(
    specs: tuple[ColumnEncoder, ...],
    registry: tuple[str, ...],
    batches: Iterator[pa.RecordBatch],
    security: ClientSecurity | None = None,
) -> Iterator[pa.RecordBatch]:
    """The Avro columns of each batch replaced by their framed binary encoding."""
    if not specs:
        yield from batches
        return
    client = SchemaRegistryClient(list(registry), security=security)
    prepared = []
    for s in specs:
        parsed = _parse_avro(client, s.schema, ())
        prepared.append((s, parsed, _maps_to_dicts(parsed, _named(parsed))))
    for b in batches:
        for s, parsed, conv in prepared:
            idx = b.schema.names.index(s.column)
            out: list[bytes | None] = []
            for v in b.column(idx).to_pylist():
                if v is None:
                    out.append(None)
                    continue
                buf = io.BytesIO()
                try:
                    fastavro.schemaless_writer(buf, parsed, conv(v) if conv else v)
                except (ValueError, TypeError, KeyError, AttributeError) as e:
                    raise SerializationError(
                        f"a {s.column} does not fit Avro schema {s.schema_id}: {e}"
                    ) from None
                out.append(frame(s.schema_id, buf.getvalue()))
            b = b.set_column(idx, pa.field(s.column, pa.binary()), pa.array(out, pa.binary()))
        yield b
