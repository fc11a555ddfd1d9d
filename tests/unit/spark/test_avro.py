"""spark/avro.py without Spark running: type mapping (spark-avro's rules), value conversion and
option parsing."""

from __future__ import annotations

import datetime as dt
import io
import json
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark.avro import avro_to_spark, json_struct, parse_formats, spark_to_avro
from spark.options import LongboatOptionError, parse_sink_options, parse_source_options

RICH = {
    "type": "record",
    "name": "R",
    "fields": [
        {"name": "i", "type": "int"},
        {"name": "l", "type": ["null", "long"]},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["X", "Y"]}},
        {"name": "f", "type": {"type": "fixed", "name": "F", "size": 2}},
        {"name": "u", "type": ["int", "string"]},
        {"name": "w", "type": ["int", "long"]},
        {"name": "m", "type": {"type": "map", "values": "int"}},
        {"name": "a", "type": {"type": "array", "items": ["null", "string"]}},
        {
            "name": "d",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2},
        },
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "t", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "again", "type": ["null", "F"]},
    ],
}


def test_avro_types_map_as_spark_avro_and_decoded_values_fit_the_arrow_type() -> None:
    parsed = fastavro.parse_schema(RICH)
    dtype, conv = avro_to_spark(parsed)
    assert dtype.simpleString() == (
        "struct<i:int,l:bigint,e:string,f:binary,u:struct<member0:int,member1:string>,"
        "w:bigint,m:map<string,int>,a:array<string>,d:decimal(5,2),ts:timestamp,t:int,"
        "again:binary>"
    )
    assert isinstance(dtype, StructType)
    assert [f.nullable for f in dtype.fields] == [
        False, True, False, False, False, False, False, False, False, False, False, True
    ]  # fmt: skip
    datum = {
        "i": 1,
        "l": None,
        "e": "Y",
        "f": b"ab",
        "u": "text",
        "w": 5,
        "m": {"k": 2},
        "a": ["x", None],
        "d": __import__("decimal").Decimal("1.50"),
        "ts": dt.datetime(2024, 5, 1, 1, 2, 3, 4000, tzinfo=dt.UTC),
        "t": dt.time(0, 0, 1, 500_000),
        "again": None,
    }
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, parsed, datum)
    back = fastavro.schemaless_reader(io.BytesIO(buf.getvalue()), parsed, None)
    assert conv is not None
    row = conv(back)
    assert row["u"] == {"member0": None, "member1": "text"}
    assert row["m"] == [("k", 2)] and row["t"] == 1500
    arr = pa.array([row, None], type=to_arrow_type(dtype, timezone="UTC"))
    assert arr[0].as_py()["ts"] == datum["ts"] and arr[1].as_py() is None


def test_recursive_and_null_only_types_are_refused() -> None:
    linked = {
        "type": "record",
        "name": "Node",
        "fields": [{"name": "next", "type": ["null", "Node"]}],
    }
    with pytest.raises(LongboatOptionError, match="recursive"):
        avro_to_spark(fastavro.parse_schema(linked))


def test_a_spark_struct_maps_to_avro_and_back_to_the_same_type() -> None:
    inner = StructType([StructField("a", IntegerType()), StructField("b", BinaryType())])
    dtype = StructType(
        [
            StructField("id", LongType(), False),
            StructField("name", StringType()),
            StructField("xs", ArrayType(IntegerType())),
            StructField("m", MapType(StringType(), DoubleType())),
            StructField("p", DecimalType(10, 2)),
            StructField("at", TimestampType()),
            StructField("d", DateType()),
            StructField("inner", inner),
        ]
    )
    schema = spark_to_avro(dtype)
    assert schema["name"] == "topLevelRecord"
    assert schema["fields"][0] == {"name": "id", "type": "long"}
    back, _ = avro_to_spark(fastavro.parse_schema(json.loads(json.dumps(schema))))
    assert back == dtype  # nullability included: a nullable field is a union with null


def test_json_schema_becomes_a_struct_only_when_flat() -> None:
    flat = {
        "type": "object",
        "properties": {"x": {"type": "integer"}, "s": {"type": ["string", "null"]}},
    }
    got = json_struct(flat)
    assert got is not None and got.simpleString() == "struct<x:bigint,s:string>"
    nested = {"type": "object", "properties": {"p": {"type": "object"}}}
    assert json_struct(nested) is None
    assert json_struct({"type": "array"}) is None


@pytest.mark.parametrize(
    ("opts", "msg"),
    [
        ({"valueFormat": "xml"}, "valueFormat"),
        ({"keyFormat": "avro", "keySchemaVersion": "0"}, "keySchemaVersion"),
        ({"valueFormat": "avro", "valueSchemaId": "x"}, "valueSchemaId"),
        ({"valueFormat": "avro", "valueSchemaId": "3", "valueSubject": "s"}, "drop"),
        ({"valueSubject": "s"}, "valueFormat"),
        ({"valueFormat": "avro", "mode": "lenient"}, "mode"),
    ],
)
def test_bad_format_options_name_the_option(opts: dict[str, Any], msg: str) -> None:
    with pytest.raises(LongboatOptionError, match=msg):
        parse_formats({"bootstrap": "http://127.0.0.1:1", **opts}, sink=False)


def test_format_options_default_to_the_brokers_as_registry_and_pass_option_checks() -> None:
    opts = {"bootstrap": "127.0.0.1:8082", "subscribe": "t", "valueFormat": "AVRO"}
    f = parse_formats(opts, sink=False)
    assert f.registry == ("http://127.0.0.1:8082",) and f.value.kind == "avro"
    assert f.key.kind == "binary" and f.mode == "FAILFAST"
    parse_source_options({**opts, "schema.registry.url": "http://r:1", "mode": "PERMISSIVE"},
                         streaming=False)  # fmt: skip
    parse_sink_options(
        {"bootstrap": "h:1", "valueFormat": "avro", "valueSchema.autoRegister": "true"}
    )
    with pytest.raises(LongboatOptionError, match="valueFormat"):
        parse_formats({"bootstrap": "h:1", "valueFormat": "jsonschema"}, sink=True)
    with pytest.raises(LongboatOptionError, match="not an Avro schema"):
        parse_formats({"bootstrap": "h:1", "valueFormat": "avro", "valueSchema": "{"}, sink=True)
