"""The Schema Registry on a real cluster (1 controller, 3 brokers), with Confluent's own client
as the peer: ``SchemaRegistryClient`` given a broker's URL, its Avro and JSON Schema serdes,
and Longboat's client and serdes beside them.

Register, look up, evolve compatibly, refuse incompatibly, the same schema twice -> the same
id, soft and hard deletes, ids never reused; reads through a broker other than the one written
through see the write; an acknowledged registration survives SIGKILL of the writer (the leader
of ``_schemas``-0) with its id, and the next writer continues above every id. About 25 s.
"""

from __future__ import annotations

import base64
import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient, SchemaRegistryError
from confluent_kafka.schema_registry.avro import AvroDeserializer as CfAvroDeserializer
from confluent_kafka.schema_registry.avro import AvroSerializer as CfAvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer as CfJSONDeserializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer as CfJSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from http_cluster_support import HttpCluster

from api.client import Consumer, Producer, TopicPartition
from api.client.schemas import (
    AvroDeserializer,
    AvroSerializer,
    JSONDeserializer,
    JSONSerializer,
    SerializationError,
)
from api.client.schemas import SchemaRegistryClient as LbRegistry
from api.node.localcluster import running_cluster

pytestmark = pytest.mark.slow

CT = {"Content-Type": "application/vnd.schemaregistry.v1+json"}


def record(name: str, *fields: dict[str, Any]) -> str:
    return json.dumps(
        {
            "type": "record",
            "name": name,
            "namespace": "demo",
            "fields": [{"name": "name", "type": "string"}, *fields],
        }
    )


V1 = record("User")
V2 = record("User", {"name": "age", "type": "int", "default": 0})
NO_DEFAULT = record("User", {"name": "email", "type": "string"})
ORDER = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "amount", "type": "double"},
            {"name": "note", "type": ["null", "string"], "default": None},
        ],
    }
)
POINT = json.dumps(
    {
        "type": "object",
        "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
        "required": ["x", "y"],
    }
)


@pytest.fixture(scope="module")
def c(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpCluster]:
    root: Path = tmp_path_factory.mktemp("schemas")
    with running_cluster(
        root,
        controllers=1,
        brokers=3,
        controller_args=["--override", "broker_session_timeout_ms=3000"],
        broker_args=["--override", "broker_heartbeat_interval_ms=500"],
    ) as (q, brokers):
        yield HttpCluster(q, brokers)


def cf(c: HttpCluster, i: int) -> SchemaRegistryClient:
    """A fresh Confluent client (empty caches) on broker ``i``."""
    return SchemaRegistryClient({"url": c.urls[i]})


def sr(c: HttpCluster, method: str, i: int, path: str, body: Any = None) -> tuple[int, Any]:
    st, _, out = c.call(method, c.urls[i] + path, body, headers=CT)
    return st, out


def test_confluent_client_registers_looks_up_evolves_and_refuses(c: HttpCluster) -> None:
    a = cf(c, 0)
    first = a.register_schema("users-value", Schema(V1, "AVRO"))
    # The same schema again, through other brokers and fresh clients: the same id, no version.
    assert cf(c, 1).register_schema("users-value", Schema(V1, "AVRO")) == first
    # Formatting is not identity: the same schema re-indented is still the same one.
    assert (
        cf(c, 2).register_schema(
            "users-value", Schema(json.dumps(json.loads(V1), indent=2), "AVRO")
        )
        == first
    )
    # Read-your-writes through a broker the write did not go through.
    found = cf(c, 2).lookup_schema("users-value", Schema(V1, "AVRO"))
    assert (found.schema_id, found.version) == (first, 1)
    assert cf(c, 1).get_versions("users-value") == [1]

    second = a.register_schema("users-value", Schema(V2, "AVRO"))  # BACKWARD: age has a default
    assert second != first
    latest = cf(c, 1).get_latest_version("users-value")
    assert (latest.version, latest.schema_id) == (2, second)
    assert json.loads(latest.schema.schema_str) == json.loads(V2)

    with pytest.raises(SchemaRegistryError) as e:
        a.register_schema("users-value", Schema(NO_DEFAULT, "AVRO"))
    assert (e.value.http_status_code, e.value.error_code) == (409, 409)
    assert "READER_FIELD_MISSING_DEFAULT_VALUE" in e.value.error_message
    assert not cf(c, 2).test_compatibility("users-value", Schema(NO_DEFAULT, "AVRO"))
    assert cf(c, 2).test_compatibility("users-value", Schema(V2, "AVRO"))
    assert cf(c, 1).get_versions("users-value") == [1, 2]

    # FORWARD: the old schema must read the new one's data; NO_DEFAULT's email is skipped
    # and V2's age takes its default, so the change that BACKWARD refused is taken.
    assert a.set_compatibility("users-value", "FORWARD") == {"compatibility": "FORWARD"}
    assert cf(c, 2).get_compatibility("users-value") == "FORWARD"
    third = a.register_schema("users-value", Schema(NO_DEFAULT, "AVRO"))
    assert third > second
    # FULL_TRANSITIVE against v1..v3: dropping "name" breaks every one of them.
    a.set_compatibility("users-value", "FULL_TRANSITIVE")
    with pytest.raises(SchemaRegistryError) as e:
        a.register_schema(
            "users-value",
            Schema(
                json.dumps({"type": "record", "name": "User", "namespace": "demo", "fields": []}),
                "AVRO",
            ),
        )
    assert e.value.error_code == 409

    # The same schema in another subject has the same id; the id lists both.
    assert cf(c, 0).register_schema("others-value", Schema(V1, "AVRO")) == first
    assert sorted(cf(c, 1).get_subjects_by_schema_id(first)) == ["others-value", "users-value"]
    assert cf(c, 1).get_schema_types() == ["JSON", "AVRO"]
    assert cf(c, 2).get_schema(first).schema_str == latest_schema_of(c, first)


def latest_schema_of(c: HttpCluster, schema_id: int) -> str:
    st, out = sr(c, "GET", 0, f"/schemas/ids/{schema_id}")
    assert st == 200, out
    return str(out["schema"])


def test_serdes_interoperate_with_confluent_across_brokers_and_the_log(c: HttpCluster) -> None:
    ctx = SerializationContext("orders", MessageField.VALUE)
    order = {"id": 7, "amount": 2.5, "note": "first"}
    cf_bytes = CfAvroSerializer(cf(c, 0), ORDER)(order, ctx)
    lb0, lb1 = LbRegistry(c.urls[1]), LbRegistry([c.urls[2], c.urls[0]])
    assert AvroDeserializer(lb0)(cf_bytes) == order
    lb_bytes = AvroSerializer(lb1, ORDER)({"id": 8, "amount": 1.0, "note": None}, "orders")
    assert lb_bytes[:5] == cf_bytes[:5]  # same subject, same schema: the same id in the header
    assert CfAvroDeserializer(cf(c, 2))(lb_bytes, ctx) == {"id": 8, "amount": 1.0, "note": None}
    # A reader schema resolves older data (Avro's rules): a field added with a default.
    newer = json.loads(ORDER)
    newer["fields"].append({"name": "currency", "type": "string", "default": "EUR"})
    assert AvroDeserializer(lb0, json.dumps(newer))(cf_bytes) == {**order, "currency": "EUR"}
    with pytest.raises(SerializationError):
        AvroSerializer(lb1, ORDER)({"id": "not a long"}, "orders")

    jctx = SerializationContext("points", MessageField.VALUE)
    point = {"x": 1, "y": 2}
    cf_json = CfJSONSerializer(POINT, cf(c, 1))(point, jctx)
    assert JSONDeserializer(lb0)(cf_json) == point
    lb_json = JSONSerializer(lb1, POINT)({"x": 3, "y": 4}, "points")
    assert CfJSONDeserializer(None, schema_registry_client=cf(c, 0))(lb_json, jctx) == {
        "x": 3,
        "y": 4,
    }
    with pytest.raises(SerializationError):
        JSONSerializer(lb1, POINT)({"x": 3}, "points")

    # Through the log: framed values produced and consumed by Longboat's client, decoded by
    # Confluent's deserializer.
    c.create_topic("orders", partitions=1, rf=3)
    ser = AvroSerializer(lb0, ORDER)
    sent = [{"id": i, "amount": i / 2, "note": None if i % 2 else f"n{i}"} for i in range(20)]
    with Producer(c.urls) as p:
        for o in sent:
            p.send("orders", ser(o, "orders"))
        p.flush()
    got: list[Any] = []
    de = CfAvroDeserializer(cf(c, 1))
    with Consumer(c.urls) as cons:
        cons.assign([TopicPartition("orders", 0)])
        cons.seek(TopicPartition("orders", 0), 0)
        deadline = time.monotonic() + 20
        while len(got) < len(sent) and time.monotonic() < deadline:
            for r in cons.poll(1000):
                got.append(de(r.value, ctx))
    assert got == sent
    assert lb0.requests <= 4  # the caches: one registration and one schema fetch, or so


def test_deletes_and_errors_and_ids_never_reused(c: HttpCluster) -> None:
    s = "gone-value"
    st, out = sr(
        c,
        "POST",
        0,
        f"/subjects/{s}/versions",
        {"schema": record("Gone", {"name": "v", "type": "long"})},
    )
    assert st == 200, out
    gone_id = out["id"]
    st, out = sr(c, "POST", 1, f"/subjects/{s}/versions", {"schema": record("Gone")})
    assert st == 200, out  # BACKWARD: dropping a field is fine
    all_ids = {gone_id, out["id"]}

    # Hard delete needs a soft delete first; a soft delete twice is refused.
    assert sr(c, "DELETE", 2, f"/subjects/{s}?permanent=true")[1]["error_code"] == 40405
    assert sr(c, "DELETE", 1, f"/subjects/{s}") == (200, [1, 2])
    assert sr(c, "DELETE", 0, f"/subjects/{s}")[1]["error_code"] == 40404
    st, out = sr(c, "GET", 2, f"/subjects/{s}/versions")
    assert (st, out["error_code"]) == (404, 40401)
    assert sr(c, "GET", 2, f"/subjects/{s}/versions?deleted=true") == (200, [1, 2])
    assert s not in sr(c, "GET", 1, "/subjects")[1]
    assert s in sr(c, "GET", 1, "/subjects?deleted=true")[1]
    assert sr(c, "GET", 0, f"/schemas/ids/{gone_id}")[0] == 200  # soft: still served by id
    assert sr(c, "DELETE", 1, f"/subjects/{s}?permanent=true") == (200, [1, 2])
    st, out = sr(c, "GET", 2, f"/schemas/ids/{gone_id}")
    assert (st, out["error_code"]) == (404, 40403)

    # Every id ever handed out stays retired: the same schema again gets a new id.
    every = set(all_ids)
    for i in range(1, 100):
        st, _ = sr(c, "GET", 0, f"/schemas/ids/{i}")
        if st == 200:
            every.add(i)
    st, out = sr(
        c,
        "POST",
        2,
        f"/subjects/{s}/versions",
        {"schema": record("Gone", {"name": "v", "type": "long"})},
    )
    assert st == 200 and out["id"] > max(every), (out, every)
    assert sr(c, "GET", 0, f"/subjects/{s}/versions") == (200, [1])  # versions restart

    # Version-level deletes, and the registry's error codes.
    assert sr(c, "DELETE", 0, f"/subjects/{s}/versions/1/?permanent=true")[0] == 404
    assert sr(c, "DELETE", 0, f"/subjects/{s}/versions/1?permanent=true")[1]["error_code"] == 40407
    assert sr(c, "DELETE", 1, f"/subjects/{s}/versions/latest") == (200, 1)
    assert sr(c, "DELETE", 2, f"/subjects/{s}/versions/1")[1]["error_code"] == 40406
    assert sr(c, "GET", 0, f"/subjects/{s}/versions/abc")[1]["error_code"] == 42202
    assert sr(c, "GET", 0, "/subjects/users-value/versions/99")[1]["error_code"] == 40402
    assert sr(c, "GET", 0, "/subjects/nobody/versions/1")[1]["error_code"] == 40401
    st, out = sr(c, "POST", 0, "/subjects/bad-value/versions", {"schema": '{"type": 1}'})
    assert (st, out["error_code"]) == (422, 42201)
    st, out = sr(
        c, "POST", 0, "/subjects/bad-value/versions", {"schema": "{}", "schemaType": "PROTOBUF"}
    )
    assert (st, out["error_code"]) == (422, 42201)
    assert sr(c, "PUT", 1, "/config", {"compatibility": "SIDEWAYS"})[1]["error_code"] == 42203
    assert sr(c, "GET", 1, "/config/others-value")[1]["error_code"] == 40408
    assert sr(c, "GET", 1, "/config/others-value?defaultToGlobal=true") == (
        200,
        {"compatibilityLevel": "BACKWARD"},
    )
    assert sr(c, "PUT", 2, "/mode/others-value", {"mode": "READONLY"}) == (
        200,
        {"mode": "READONLY"},
    )
    st, out = sr(c, "POST", 0, "/subjects/others-value/versions", {"schema": V2})
    assert (st, out["error_code"]) == (422, 42205)
    assert sr(c, "DELETE", 0, "/mode/others-value") == (200, {"mode": "READONLY"})
    st, _, raw = c.call("GET", c.urls[0] + "/schemas/types")
    assert raw == ["JSON", "AVRO"]


# --------------------------------------------------------------------------- REST Proxy formats

AVRO_V2 = {"Content-Type": "application/vnd.kafka.avro.v2+json"}
JSONSCHEMA_V2 = {"Content-Type": "application/vnd.kafka.jsonschema.v2+json"}


def _raw_values(c: HttpCluster, topic: str) -> list[bytes]:
    return [base64.b64decode(r["value"]) for r in c.read_all(topic, 0)]


def test_rest_proxy_v2_avro_produce_registers_encodes_and_confluent_decodes(
    c: HttpCluster,
) -> None:
    c.create_topic("v2avro", partitions=1, rf=3)
    u = c.urls[1]
    body = {
        "value_schema": ORDER,
        "records": [
            {"value": {"id": 1, "amount": 2.5, "note": None}},
            # Avro's JSON encoding, as the REST Proxy takes it: a union's branch is named.
            {"value": {"id": 2, "amount": 1.0, "note": {"string": "gift"}}},
        ],
    }
    st, _, ans = c.call("POST", f"{u}/topics/v2avro", body, headers=AVRO_V2)
    assert st == 200, ans
    sid = ans["value_schema_id"]
    assert isinstance(sid, int) and ans["key_schema_id"] is None
    assert [o["offset"] for o in ans["offsets"]] == [0, 1]
    # Registered under the topic's value subject, as the REST Proxy's TopicNameStrategy.
    assert cf(c, 2).get_latest_version("v2avro-value").schema_id == sid

    # By id, through another broker; data that does not fit the schema changes nothing.
    by_id = {"value_schema_id": sid, "records": [{"value": {"id": 3, "amount": 0.5}}]}
    st, _, ans = c.call("POST", f"{c.urls[2]}/topics/v2avro", by_id, headers=AVRO_V2)
    assert st == 200 and ans["value_schema_id"] == sid and ans["offsets"][0]["offset"] == 2
    bad = {"value_schema_id": sid, "records": [{"value": {"id": "four", "amount": 1.0}}]}
    st, _, err = c.call("POST", f"{u}/topics/v2avro", bad, headers=AVRO_V2)
    assert st == 422 and err["error_code"] == 42203, err
    st, _, err = c.call(
        "POST",
        f"{u}/topics/v2avro",
        {"value_schema": "{not json", "records": [{"value": 1}]},
        headers=AVRO_V2,
    )
    assert st == 422 and err["error_code"] == 42205, err
    st, _, err = c.call(
        "POST",
        f"{u}/topics/v2avro",
        {"value_schema_id": 99999, "records": [{"value": 1}]},
        headers=AVRO_V2,
    )
    assert st == 422 and err["error_code"] == 42205 and "not found" in err["message"], err

    # Confluent's own deserializer reads what the proxy wrote: the wire format is theirs.
    de = CfAvroDeserializer(cf(c, 0))
    ctx = SerializationContext("v2avro", MessageField.VALUE)
    values = [de(v, ctx) for v in _raw_values(c, "v2avro")]
    assert values == [
        {"id": 1, "amount": 2.5, "note": None},
        {"id": 2, "amount": 1.0, "note": "gift"},
        {"id": 3, "amount": 0.5, "note": None},
    ]


def test_rest_proxy_v2_keys_and_json_schema_and_avro_consumer_instances(c: HttpCluster) -> None:
    c.create_topic("v2js", partitions=1, rf=3)
    u = c.urls[0]
    body = {
        "key_schema": json.dumps({"type": "string"}),
        "value_schema": POINT,
        "records": [{"key": "p1", "value": {"x": 1, "y": 2}}],
    }
    st, _, ans = c.call("POST", f"{u}/topics/v2js", body, headers=JSONSCHEMA_V2)
    assert st == 200, ans
    assert ans["key_schema_id"] != ans["value_schema_id"]
    bad = {**body, "records": [{"key": "p2", "value": {"x": 1}}]}  # y is required
    st, _, err = c.call("POST", f"{u}/topics/v2js", bad, headers=JSONSCHEMA_V2)
    assert st == 422 and err["error_code"] == 42203, err
    assert len(c.read_all("v2js", 0)) == 1
    de = CfJSONDeserializer(POINT, schema_registry_client=cf(c, 1))
    (raw,) = _raw_values(c, "v2js")
    assert de(raw, SerializationContext("v2js", MessageField.VALUE)) == {"x": 1, "y": 2}

    # A v2 consumer instance with format avro decodes through the id each record carries.
    v2 = {"Content-Type": "application/vnd.kafka.v2+json"}
    group = f"{u}/consumers/avro-readers"
    st, _, _ = c.call(
        "POST",
        group,
        {"name": "a", "format": "avro", "auto.offset.reset": "earliest"},
        headers=v2,
    )
    assert st == 200
    inst = f"{group}/instances/a"
    st, _, _ = c.call("POST", f"{inst}/subscription", {"topics": ["v2avro"]}, headers=v2)
    assert st == 204
    got: list[Any] = []
    deadline = time.monotonic() + 30
    while len(got) < 3:
        assert time.monotonic() < deadline, got
        st, _, recs = c.call(
            "GET",
            f"{inst}/records?timeout=1000",
            headers={"Accept": "application/vnd.kafka.avro.v2+json"},
        )
        assert st == 200, recs
        got += recs
    assert [r["value"] for r in got[:3]] == [
        {"id": 1, "amount": 2.5, "note": None},
        {"id": 2, "amount": 1.0, "note": {"string": "gift"}},
        {"id": 3, "amount": 0.5, "note": None},
    ]
    assert c.call("DELETE", inst, headers=v2)[0] == 204


def test_rest_proxy_v3_schema_values_by_id_subject_version_and_text(c: HttpCluster) -> None:
    c.create_topic("v3avro", partitions=1, rf=3)
    url = f"{c.v3()}/topics/v3avro/records"
    # By schema text: registered under <topic>-value.
    st, _, rep = c.call(
        "POST",
        url,
        {"value": {"type": "AVRO", "schema": ORDER, "data": {"id": 1, "amount": 1.5}}},
    )
    assert st == 200 and rep["value"]["type"] == "AVRO", rep
    sid = cf(c, 1).get_latest_version("v3avro-value").schema_id
    # By id (type from the schema), by the subject's latest version, and by version number,
    # with a keyed STRING key beside, in one NDJSON body; one bad record fails alone.
    body = b"\n".join(
        json.dumps(r).encode()
        for r in (
            {"value": {"schema_id": sid, "data": {"id": 2, "amount": 2.0}}},
            {"value": {"type": "AVRO", "data": {"id": 3, "amount": 3.0, "note": {"string": "x"}}}},
            {"value": {"type": "AVRO", "schema_version": 1, "data": {"id": "bad", "amount": 0}}},
            {
                "key": {"type": "STRING", "data": "k"},
                "value": {"type": "AVRO", "schema_version": 1, "data": {"id": 4, "amount": 4.0}},
            },
            {"value": {"type": "PROTOBUF", "data": {}}},
            {"value": {"type": "AVRO", "subject": "nobody-value", "data": {"id": 5}}},
        )
    )
    st, _, lines = c.call("POST", url, raw=body, headers={"Content-Type": "application/json"})
    assert st == 200
    reps = lines
    codes = [r["error_code"] for r in reps]
    assert codes == [200, 200, 42203, 200, 42207, 42202], reps
    assert reps[5].get("message") and "nobody-value" in reps[5]["message"]
    de = CfAvroDeserializer(cf(c, 2))
    ctx = SerializationContext("v3avro", MessageField.VALUE)
    assert [de(v, ctx)["id"] for v in _raw_values(c, "v3avro")] == [1, 2, 3, 4]
    # The v3 read decodes by the id each record carries when asked (format=avro), keys as
    # their own format says.
    st, _, page = c.call(
        "GET", f"{c.v3(2)}/topics/v3avro/partitions/0/records?format=avro&key_format=string"
    )
    assert st == 200, page
    assert [r["value"]["id"] for r in page["records"]] == [1, 2, 3, 4]
    assert page["records"][2]["value"]["note"] == {"string": "x"}
    assert [r["key"] for r in page["records"]] == [None, None, None, "k"]
    # Values that are not in the wire format: a clear refusal, not garbage.
    c.create_topic("v3plain", partitions=1, rf=3)
    assert c.call("POST", f"{c.v3()}/topics/v3plain/records", {"value": {"data": 1}})[0] == 200
    st, _, err = c.call("GET", f"{c.v3()}/topics/v3plain/partitions/0/records?format=avro")
    assert st == 422 and err["error_code"] == 42203 and "wire format" in err["message"], err
    # The REST Proxy v3's subject name strategies: RECORD_NAME and TOPIC_RECORD_NAME name the
    # subject by the record in the schema given; without a schema they cannot.
    for strategy, subject in (("RECORD_NAME", "Order"), ("TOPIC_RECORD_NAME", "v3avro-Order")):
        value = {
            "type": "AVRO",
            "subject_name_strategy": strategy,
            "schema": ORDER,
            "data": {"id": 9, "amount": 1.0},
        }
        st, _, rep = c.call("POST", url, {"value": value})
        assert st == 200, rep
        assert cf(c, 0).get_latest_version(subject).schema_id == sid
    bad = {"type": "AVRO", "subject_name_strategy": "RECORD_NAME", "data": {"id": 1}}
    st, _, err = c.call("POST", url, {"value": bad})
    assert st == 422 and err["error_code"] == 42206 and "schema" in err["message"], err
    # JSON Schema through a batch, checked (another topic: a subject keeps one schema type).
    c.create_topic("v3json", partitions=1, rf=3)
    st, _, ans = c.call(
        "POST",
        f"{c.v3()}/topics/v3json/records:batch",
        {
            "entries": [
                {
                    "id": "a",
                    "value": {"type": "JSONSCHEMA", "schema": POINT, "data": {"x": 1, "y": 2}},
                },
                {"id": "b", "value": {"type": "JSONSCHEMA", "data": {"x": 1}}},
            ]
        },
    )
    assert st == 207, ans
    assert [s["id"] for s in ans["successes"]] == ["a"], ans
    assert [(f["id"], f["error_code"]) for f in ans["failures"]] == [("b", 42203)]


def test_cli_produce_and_consume_avro_values(c: HttpCluster, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from api.cli.main import main

    c.create_topic("cliavro", partitions=1, rf=3)
    schema_file = tmp_path / "order.avsc"
    schema_file.write_text(ORDER)
    boot = ["--bootstrap", ",".join(c.urls)]
    lines = (
        '{"id": 1, "amount": 2.5, "note": null}\n'
        "not json\n"
        '{"id": 2, "amount": 1.0, "note": {"string": "gift"}}\n'
        '{"id": "three", "amount": 1.0, "note": null}\n'
    )
    r = CliRunner().invoke(
        main,
        ["produce", "cliavro", *boot, "--value-format", "avro", "--value-schema", str(schema_file)],
        input=lines,
    )
    # The two good lines are sent; the two bad ones fail alone, each named by its line.
    assert r.exit_code == 1, r.output
    assert "line 2" in r.output and "line 4" in r.output and "produced 2 record(s)" in r.output
    sid = cf(c, 0).get_latest_version("cliavro-value").schema_id
    de = CfAvroDeserializer(cf(c, 1))
    ctx = SerializationContext("cliavro", MessageField.VALUE)
    assert [de(v, ctx)["id"] for v in _raw_values(c, "cliavro")] == [1, 2]
    # By id, and a schema of the wrong type refused before anything is sent.
    r = CliRunner().invoke(
        main,
        ["produce", "cliavro", *boot, "--value-format", "avro", "--value-schema-id", str(sid)],
        input='{"id": 3, "amount": 0.5, "note": null}\n',
    )
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(
        main,
        [
            "produce",
            "cliavro",
            *boot,
            "--value-format",
            "jsonschema",
            "--value-schema-id",
            str(sid),
        ],
        input="{}\n",
    )
    assert r.exit_code == 1 and "is AVRO, not JSON" in r.output, r.output
    assert len(_raw_values(c, "cliavro")) == 3
    r = CliRunner().invoke(
        main,
        ["consume", "cliavro", *boot, "--from-beginning", "--exit", "--value-format", "avro"],
    )
    assert r.exit_code == 0, r.output
    values = [json.loads(line) for line in r.stdout.splitlines()]
    assert values == [
        {"id": 1, "amount": 2.5, "note": None},
        {"id": 2, "amount": 1.0, "note": {"string": "gift"}},
        {"id": 3, "amount": 0.5, "note": None},
    ]


# The last test: it kills a broker of the module's cluster.
def test_acknowledged_registration_survives_killing_the_writer(c: HttpCluster) -> None:
    st, _, p = c.call("GET", f"{c.v3()}/topics/_schemas/partitions/0")
    assert st == 200, p
    writer = c.brokers.ids.index(p["leader_id"])
    via, other = (writer + 1) % 3, (writer + 2) % 3
    st, out = sr(c, "POST", via, "/subjects/durable-value/versions", {"schema": ORDER})
    assert st == 200, out
    durable = out["id"]
    ids = {durable}
    for i in range(1, durable + 1):
        if sr(c, "GET", other, f"/schemas/ids/{i}")[0] == 200:
            ids.add(i)
    c.brokers.kill(c.brokers.ids[writer], signal.SIGKILL)

    # Still there, with its id, through both survivors (reads may wait for the new leader).
    for i in (via, other):
        st, out = sr(c, "POST", i, "/subjects/durable-value", {"schema": ORDER})
        assert (st, out["id"], out["version"]) == (200, durable, 1), out
    # The next writer continues above every id written before it.
    st, out = sr(
        c, "POST", other, "/subjects/after-kill-value/versions", {"schema": record("After")}
    )
    assert st == 200, out
    assert out["id"] > max(ids) and out["id"] > durable
    assert sr(c, "POST", via, "/subjects/durable-value/versions", {"schema": ORDER}) == (
        200,
        {"id": durable},
    )
