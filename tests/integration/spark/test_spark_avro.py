"""Avro values through the longboat data source: a real local[2] Spark session, a real 3+3
cluster (whose brokers serve the Schema Registry), records written by Confluent's
AvroSerializer and by the REST Proxy v2 Avro route, read into typed columns and written back.
"""

from __future__ import annotations

import datetime as dt
import json
import urllib.request
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient as CfRegistry
from confluent_kafka.schema_registry.avro import AvroDeserializer as CfAvroDeserializer
from confluent_kafka.schema_registry.avro import AvroSerializer as CfAvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from longboat_spark_harness import LocalCluster, cluster, spark_session

from api.client import Consumer, Producer, TopicPartition
from api.client.schemas import AvroSerializer, JSONSerializer
from api.client.schemas import SchemaRegistryClient as LbRegistry

# In the extended tier (docs/testing.md): minutes of JVM or Spark time the fast suite cannot afford.
pytestmark = [pytest.mark.slow, pytest.mark.extended]

USER_V1 = json.dumps(
    {
        "type": "record",
        "name": "User",
        "namespace": "test",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "name", "type": "string"},
            {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {"name": "score", "type": ["null", "double"], "default": None},
            {"name": "born", "type": {"type": "int", "logicalType": "date"}},
        ],
    }
)
# Version 2 adds a field with a default: BACKWARD compatible, so v1 records read with it.
USER_V2 = json.dumps(
    {
        **json.loads(USER_V1),
        "fields": [
            *json.loads(USER_V1)["fields"],
            {"name": "email", "type": "string", "default": "none"},
        ],
    }
)


def user(i: int) -> dict[str, Any]:
    return {
        "id": i,
        "name": f"u{i}",
        "kind": "AB"[i % 2],
        "tags": [f"t{j}" for j in range(i % 3)],
        "score": None if i % 4 == 0 else i / 2,
        "born": dt.date(2000, 1, 1) + dt.timedelta(days=i),
    }


@pytest.fixture(scope="module")
def lc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from cluster(tmp_path_factory.mktemp("spark-avro-cluster"))


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    s = spark_session(tmp_path_factory.mktemp("spark-avro"))
    yield s
    s.stop()


def registry_url(lc: LocalCluster) -> str:
    return lc.bootstrap.split(",")[0]


def reader(spark: Any, lc: LocalCluster, **options: str) -> Any:
    r = spark.read.format("longboat").option("bootstrap", lc.bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


@pytest.fixture(scope="module")
def users(lc: LocalCluster) -> dict[int, dict[str, Any]]:
    """users: 0-19 written by Confluent's serializer with v1, then 20-24 through REST v2 Avro
    with v2 (the REST Proxy takes Avro's JSON encoding: unions name their branch)."""
    lc.create_topic("users", 2)
    cf = CfRegistry({"url": registry_url(lc)})
    ser = CfAvroSerializer(cf, USER_V1)
    ctx = SerializationContext("users", MessageField.VALUE)
    with Producer(lc.bootstrap) as p:
        for i in range(20):
            p.send("users", ser(user(i), ctx), partition=i % 2).result(30)
    records = []
    for i in range(20, 25):
        u = user(i)
        rest = {
            **u,
            "score": None if u["score"] is None else {"double": u["score"]},
            "born": (u["born"] - dt.date(1970, 1, 1)).days,
            "email": f"u{i}@example.com",
        }
        records.append({"value": rest, "partition": i % 2})
    req = urllib.request.Request(
        registry_url(lc) + "/topics/users",
        data=json.dumps({"value_schema": USER_V2, "records": records}).encode(),
        headers={"Content-Type": "application/vnd.kafka.avro.v2+json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        ans = json.loads(resp.read())
    assert all(o.get("error") is None for o in ans["offsets"]), ans
    out = {i: user(i) for i in range(20)}
    out.update({i: {**user(i), "email": f"u{i}@example.com"} for i in range(20, 25)})
    return out


def as_dict(row: Any) -> dict[str, Any]:
    d: dict[str, Any] = row.asDict(recursive=True)
    return d


def test_avro_values_read_into_typed_columns_with_either_schema_version(
    spark: Any, lc: LocalCluster, users: dict[int, dict[str, Any]]
) -> None:
    latest = reader(spark, lc, subscribe="users", valueFormat="avro")
    assert latest.schema["value"].dataType.simpleString() == (
        "struct<id:bigint,name:string,kind:string,tags:array<string>,score:double,born:date,"
        "email:string>"
    )
    got = {r.value.id: as_dict(r.value) for r in latest.select("value").collect()}
    # v1 records resolved to v2: the added field takes its default.
    want = {i: {**u, "email": u.get("email", "none")} for i, u in users.items()}
    assert got == want
    # Columns are typed: Spark SQL works on them directly.
    n = latest.where("value.kind = 'A' AND size(value.tags) > 0").count()
    assert n == sum(1 for u in users.values() if u["kind"] == "A" and u["tags"])

    v1 = reader(spark, lc, subscribe="users", valueFormat="avro", valueSchemaVersion="1")
    assert "email" not in v1.schema["value"].dataType.fieldNames()
    got1 = {r.value.id: as_dict(r.value) for r in v1.select("value").collect()}
    # v2 records read with v1: the new field is skipped (Avro's resolution).
    assert got1 == {i: {k: v for k, v in u.items() if k != "email"} for i, u in users.items()}


def test_a_record_not_in_the_wire_format_fails_the_read_or_reads_as_null(
    spark: Any, lc: LocalCluster, users: dict[int, dict[str, Any]]
) -> None:
    lc.create_topic("mixed", 1)
    cf = CfRegistry({"url": registry_url(lc)})
    ser = CfAvroSerializer(cf, USER_V1)
    ctx = SerializationContext("mixed", MessageField.VALUE)
    with Producer(lc.bootstrap) as p:
        p.send("mixed", ser(user(1), ctx)).result(30)
        p.send("mixed", b"plain text, no schema").result(30)
        p.send("mixed", ser(user(2), ctx)).result(30)
    with pytest.raises(Exception) as e:
        reader(spark, lc, subscribe="mixed", valueFormat="avro").collect()
    assert "mixed-0 offset 1" in str(e.value) and "PERMISSIVE" in str(e.value)
    rows = reader(spark, lc, subscribe="mixed", valueFormat="avro", mode="PERMISSIVE").collect()
    assert [r.offset for r in rows] == [0, 1, 2]
    assert [None if r.value is None else r.value.id for r in rows] == [1, None, 2]


def test_bad_format_options_fail_at_load_with_clear_errors(
    spark: Any, lc: LocalCluster, users: dict[int, dict[str, Any]]
) -> None:
    cases = [
        ({"valueFormat": "protobuf"}, "'valueFormat' must be one of"),
        ({"valueFormat": "avro", "valueSubject": "nope-value"}, "40401"),
        ({"valueFormat": "avro", "valueSchemaVersion": "99"}, "40402"),
        ({"valueSubject": "users-value"}, "need option 'valueFormat'"),
        ({"valueFormat": "avro", "mode": "DROPMALFORMED"}, "FAILFAST or PERMISSIVE"),
    ]
    for opts, msg in cases:
        with pytest.raises(Exception, match=msg):
            reader(spark, lc, subscribe="users", **opts).schema  # noqa: B018


def test_a_dataframe_written_as_avro_reads_back_equal_and_confluent_decodes_it(
    spark: Any, lc: LocalCluster
) -> None:
    lc.create_topic("typed", 1)
    rows = [
        (
            f"k{i}",
            (
                i,
                f"n{i}",
                None if i % 3 == 0 else i * 1.5,
                [i, i + 1],
                {"a": i},
                Decimal(f"{i}.25"),
                dt.datetime(2024, 1, 1, 12, i, tzinfo=dt.UTC),
            ),
        )
        for i in range(30)
    ]
    df = spark.createDataFrame(
        rows,
        "key string, value struct<id:bigint,name:string,score:double,xs:array<int>,"
        "m:map<string,int>,price:decimal(10,2),at:timestamp>",
    )
    (
        df.write.format("longboat")
        .option("bootstrap", lc.bootstrap)
        .option("topic", "typed")
        .option("valueFormat", "avro")
        .option("valueSchema.autoRegister", "true")
        .mode("append")
        .save()
    )
    back = reader(spark, lc, subscribe="typed", valueFormat="avro")
    assert back.schema["value"].dataType == df.schema["value"].dataType
    got = sorted(
        (bytes(r.key).decode(), as_dict(r.value)) for r in back.select("key", "value").collect()
    )
    want = sorted((k, as_dict(v)) for k, v in df.collect())
    assert got == want

    # The bytes are Confluent's wire format: its deserializer reads them.
    de = CfAvroDeserializer(CfRegistry({"url": registry_url(lc)}))
    ctx = SerializationContext("typed", MessageField.VALUE)
    with Consumer(lc.bootstrap) as c:
        c.assign([TopicPartition("typed", 0)])
        c.seek(TopicPartition("typed", 0), 0)
        first: list[Any] = []
        while not first:
            first = c.poll(1000)
    v = de(first[0].value, ctx)
    i = int(v["id"])
    assert v["name"] == f"n{i}" and v["m"] == {"a": i} and v["price"] == Decimal(f"{i}.25")
    assert v["at"] == dt.datetime(2024, 1, 1, 12, i, tzinfo=dt.UTC)

    # Without a schema to use, the write refuses before producing anything.
    with pytest.raises(Exception, match="autoRegister"):
        (
            df.write.format("longboat")
            .option("bootstrap", lc.bootstrap)
            .option("topic", "typed")
            .option("valueFormat", "avro")
            .option("valueSubject", "no-such-subject")
            .mode("append")
            .save()
        )


def test_avro_keys_and_json_schema_values(spark: Any, lc: LocalCluster) -> None:
    lc.create_topic("points", 1)
    registry = LbRegistry(lc.bootstrap.split(","))
    flat = json.dumps(
        {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "number"}}}
    )
    to_json = JSONSerializer(registry, flat)
    to_key = AvroSerializer(registry, '"string"', is_key=True)
    with Producer(lc.bootstrap) as p:
        for i in range(4):
            p.send("points", to_json({"x": i, "y": i / 4}, "points"), key=to_key(f"p{i}", "points"))
        p.flush()
    df = reader(spark, lc, subscribe="points", valueFormat="jsonschema", keyFormat="avro")
    assert df.schema["key"].dataType.simpleString() == "string"
    assert df.schema["value"].dataType.simpleString() == "struct<x:bigint,y:double>"
    got = sorted((r.key, r.value.x, r.value.y) for r in df.collect())
    assert got == [(f"p{i}", i, i / 4) for i in range(4)]
    # A schema that is not a flat object: the value stays JSON text.
    lc.create_topic("docs", 1)
    nested = json.dumps({"type": "object", "properties": {"p": {"type": "object"}}})
    with Producer(lc.bootstrap) as p:
        p.send("docs", JSONSerializer(registry, nested)({"p": {"q": 1}}, "docs")).result(30)
    text = reader(spark, lc, subscribe="docs", valueFormat="jsonschema")
    assert text.schema["value"].dataType.simpleString() == "string"
    assert [json.loads(r.value) for r in text.collect()] == [{"p": {"q": 1}}]
