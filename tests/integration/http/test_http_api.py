"""The public HTTP API against a real local cluster (3 controllers, 3 brokers): every endpoint
and every error the issue names. One cluster for the module; each test uses its own topics.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pyarrow as pa
import pytest
from http_cluster_support import HttpCluster, http_cluster

from storage.batch import decode_records, encode_batch, iter_batches

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def c(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpCluster]:
    root: Path = tmp_path_factory.mktemp("http-api")
    with http_cluster(root) as cl:
        yield cl


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


# --------------------------------------------------------------------------- cluster


def test_every_broker_answers_the_same_cluster_with_brokers_and_controller(c: HttpCluster) -> None:
    ids = set()
    for u in c.urls:
        st, _, body = c.call("GET", f"{u}/v3/clusters")
        assert st == 200 and body["kind"] == "KafkaClusterList"
        ids.add(body["data"][0]["cluster_id"])
    assert ids == {c.cluster_id}
    st, _, cl = c.call("GET", c.v3(1))
    assert st == 200 and cl["controller"]["controller_id"] in (1, 2, 3)
    assert sorted(b["broker_id"] for b in cl["brokers"]) == c.brokers.ids
    st, _, bl = c.call("GET", f"{c.v3(2)}/brokers")
    assert st == 200 and [b["broker_id"] for b in bl["data"]] == c.brokers.ids
    assert all(not b["fenced"] and b["port"] for b in bl["data"])
    st, _, b = c.call("GET", f"{c.v3()}/brokers/{c.brokers.ids[0]}")
    assert st == 200 and b["broker_id"] == c.brokers.ids[0]
    st, _, err = c.call("GET", f"{c.urls[0]}/v3/clusters/not-this-one/topics")
    assert st == 404 and err == {"error_code": 404, "message": "Cluster 'not-this-one' not found."}
    st, _, err = c.call("GET", f"{c.v3()}/brokers/7")
    assert st == 404 and err["error_code"] == 404


# --------------------------------------------------------------------------- topics


def test_topic_create_list_get_add_partitions_delete(c: HttpCluster) -> None:
    st, _, body = c.call(
        "POST",
        f"{c.v3()}/topics",
        {
            "topic_name": "adm",
            "partitions_count": 2,
            "replication_factor": 2,
            "validate_only": True,
        },
    )
    assert st == 200 and body["validate_only"]
    assert c.call("GET", f"{c.v3()}/topics/adm")[0] == 404  # validate_only created nothing
    t = c.create_topic("adm", partitions=2, rf=2, configs={"retention.ms": "3600000"})
    assert t["topic_name"] == "adm" and t["partitions_count"] == 2
    assert t["replication_factor"] == 2
    st, _, lst = c.call("GET", f"{c.v3(1)}/topics")
    assert st == 200 and "adm" in [x["topic_name"] for x in lst["data"]]
    st, _, got = c.call("GET", f"{c.v3(2)}/topics/adm")
    assert st == 200 and got["topic_id"] == t["topic_id"]
    st, _, grown = c.call("PATCH", f"{c.v3()}/topics/adm", {"partitions_count": 4})
    assert st == 200 and grown["partitions_count"] == 4
    st, _, err = c.call("PATCH", f"{c.v3()}/topics/adm", {"partitions_count": 3})
    assert st == 400 and err["error_code"] == 40002  # cannot shrink
    st, _, _ = c.call("DELETE", f"{c.v3(1)}/topics/adm")
    assert st == 204
    st, _, err = c.call("GET", f"{c.v3(1)}/topics/adm")
    assert st == 404 and err["error_code"] == 40401
    st, _, err = c.call("DELETE", f"{c.v3(1)}/topics/adm")
    assert st == 404 and err["error_code"] == 40401


def test_admin_through_different_brokers_sees_its_own_writes(c: HttpCluster) -> None:
    # The controller decides existence, and admin reads wait for the receiving broker's
    # image to catch up with it: no broker answers from a stale image.
    for i in range(5):
        a, b, d = i % 3, (i + 1) % 3, (i + 2) % 3
        st, _, body = c.call(
            "POST",
            f"{c.v3(a)}/topics",
            {"topic_name": f"rw{i}", "partitions_count": 1, "replication_factor": 1},
        )
        assert st == 201, body
        st, _, got = c.call("GET", f"{c.v3(b)}/topics/rw{i}")
        assert st == 200, got
        st, _, got = c.call("GET", f"{c.v3(d)}/topics/rw{i}/configs/retention.ms")
        assert st == 200, got
        st, _, err = c.call("DELETE", f"{c.v3(b)}/topics/rw{i}")
        assert st == 204, err
        st, _, err = c.call("GET", f"{c.v3(d)}/topics/rw{i}")
        assert st == 404 and err["error_code"] == 40401, err
    st, _, err = c.call("PUT", f"{c.v3()}/topics/never/configs/retention.ms", {"value": "1"})
    assert st == 404 and err["error_code"] == 40401
    st, _, err = c.call("PATCH", f"{c.v3()}/topics/never", {"partitions_count": 2})
    assert st == 404 and err["error_code"] == 40401


@pytest.mark.parametrize(
    ("body", "status", "code", "needle"),
    [
        ({"topic_name": "bad name!"}, 400, 40002, "INVALID_TOPIC_EXCEPTION"),
        ({"topic_name": "rf5", "replication_factor": 5}, 400, 40002, "INVALID_REPLICATION_FACTOR"),
        ({"topic_name": "many", "partitions_count": 1_000_000}, 400, 40002, "INVALID_PARTITIONS"),
        ({"topic_name": "zero", "partitions_count": 0}, 400, 40002, "at least 1"),
        ({"topic_name": "typ", "partitions_count": "3"}, 422, 42206, "must be an integer"),
        ({"topic_name": 7}, 422, 42206, "topic_name"),
        (
            {"topic_name": "cfg", "configs": [{"name": "retention.ms", "value": "soon"}]},
            400,
            40002,
            "INVALID_CONFIG",
        ),
        (
            {"topic_name": "cfg2", "configs": [{"name": "no.such.config", "value": "1"}]},
            400,
            40002,
            "INVALID_CONFIG",
        ),
    ],
)
def test_topic_create_errors(
    c: HttpCluster, body: dict[str, object], status: int, code: int, needle: str
) -> None:
    st, _, err = c.call("POST", f"{c.v3()}/topics", body)
    assert st == status and err["error_code"] == code and needle in err["message"], err


def test_topic_create_malformed_and_empty_bodies_and_duplicate(c: HttpCluster) -> None:
    st, _, err = c.call(
        "POST", f"{c.v3()}/topics", raw=b"{nope", headers={"Content-Type": "application/json"}
    )
    assert st == 400 and err["error_code"] == 400 and "Malformed JSON" in err["message"]
    st, _, err = c.call(
        "POST", f"{c.v3()}/topics", raw=b"", headers={"Content-Type": "application/json"}
    )
    assert st == 422 and err["error_code"] == 42206
    c.create_topic("dup", partitions=1, rf=1)
    st, _, err = c.call("POST", f"{c.v3()}/topics", {"topic_name": "dup"})
    assert st == 400 and err["error_code"] == 40002 and "already exists" in err["message"]


def test_topic_configs_list_get_set_alter_reset(c: HttpCluster) -> None:
    c.create_topic("cfgs", partitions=1, rf=1)
    base = f"{c.v3()}/topics/cfgs/configs"
    st, _, lst = c.call("GET", base)
    names = {x["name"]: x for x in lst["data"]}
    assert st == 200 and names["retention.ms"]["is_default"]
    assert names["cleanup.policy"]["value"] == "delete"
    st, _, _ = c.call("PUT", f"{base}/retention.ms", {"value": "1000"})
    assert st == 204
    st, _, one = c.call("GET", f"{base}/retention.ms")
    assert st == 200 and one["value"] == "1000" and not one["is_default"]
    assert one["source"] == "DYNAMIC_TOPIC_CONFIG"
    st, _, _ = c.call(
        "POST",
        f"{base}:alter",
        {
            "data": [
                {"name": "retention.ms", "operation": "DELETE"},
                {"name": "segment.ms", "value": "60000"},
            ]
        },
    )
    assert st == 204
    _, _, one = c.call("GET", f"{base}/retention.ms")
    assert one["is_default"] and one["value"] == "604800000"
    _, _, seg = c.call("GET", f"{base}/segment.ms")
    assert seg["value"] == "60000"
    assert c.call("DELETE", f"{base}/segment.ms")[0] == 204
    assert c.call("GET", f"{base}/segment.ms")[2]["is_default"]
    st, _, err = c.call("PUT", f"{base}/retention.ms", {"value": "-7"})
    assert st == 400 and err["error_code"] == 40002
    st, _, err = c.call("GET", f"{base}/no.such")
    assert st == 404
    st, _, err = c.call("POST", f"{base}:alter", {"data": [{"name": "x", "operation": "BOOM"}]})
    assert st == 422


# --------------------------------------------------------------------------- partitions


def test_partitions_list_get_offsets_and_offset_for_timestamp(c: HttpCluster) -> None:
    c.create_topic("parts", partitions=2, rf=3)
    st, _, lst = c.call("GET", f"{c.v3()}/topics/parts/partitions")
    assert st == 200 and [p["partition_id"] for p in lst["data"]] == [0, 1]
    p0 = lst["data"][0]
    assert len(p0["replicas"]) == 3 and p0["leader_id"] in c.brokers.ids
    assert sorted(p0["isr"]) == sorted(r["broker_id"] for r in p0["replicas"])
    assert sum(r["is_leader"] for r in p0["replicas"]) == 1
    st, _, err = c.call("GET", f"{c.v3()}/topics/parts/partitions/5")
    assert st == 404 and err["error_code"] == 40402
    st, _, err = c.call("GET", f"{c.v3()}/topics/parts/partitions/x")
    assert st == 400
    for i in range(3):
        st, _, rep = c.call(
            "POST",
            f"{c.v3()}/topics/parts/records",
            {
                "partition_id": 0,
                "value": {"type": "STRING", "data": f"v{i}"},
                "timestamp": 1_000_000 + i * 1000,
            },
        )
        assert st == 200 and rep["offset"] == i, rep
    st, _, off = c.call("GET", f"{c.v3(1)}/topics/parts/partitions/0/offset")
    assert st == 200 and (off["earliest_offset"], off["latest_offset"]) == (0, 3)
    _, _, off = c.call("GET", f"{c.v3(2)}/topics/parts/partitions/0/offset?timestamp=1001500")
    assert off["offset"] == 2
    _, _, off = c.call(
        "GET", f"{c.v3(2)}/topics/parts/partitions/0/offset?timestamp=1970-01-01T00:16:41Z"
    )
    assert off["offset"] == 1
    _, _, off = c.call("GET", f"{c.v3()}/topics/parts/partitions/0/offset?timestamp=9999999")
    assert off["offset"] == -1


# --------------------------------------------------------------------------- produce


def test_produce_through_every_broker_forwards_to_the_leader(c: HttpCluster) -> None:
    c.create_topic("fwd", partitions=1, rf=3)
    leader = c.leader_index("fwd", 0)
    sent = []
    for i in range(3):  # the leader itself and both non-leaders
        v = {"n": i, "via": c.brokers.ids[i]}
        st, _, rep = c.call(
            "POST",
            f"{c.v3(i)}/topics/fwd/records",
            {
                "key": {"type": "STRING", "data": "k"},
                "value": {"data": v},
                "headers": [{"name": "h", "value": _b64(b"hv")}],
            },
        )
        assert st == 200 and rep["error_code"] == 200 and rep["offset"] == i, rep
        assert rep["key"] == {"type": "STRING", "size": 1} and rep["value"]["type"] == "JSON"
        sent.append(v)
    for i in range(3):
        recs = c.read_all("fwd", 0, i=i, fmt="json", key_fmt="string")
        assert [r["value"] for r in recs] == sent
        assert recs[0]["key"] == "k" and recs[0]["headers"] == [{"name": "h", "value": _b64(b"hv")}]
    assert leader in range(3)


def test_produce_many_records_a_bad_one_fails_alone(c: HttpCluster) -> None:
    c.create_topic("many", partitions=2, rf=3)
    body = [
        {"partition_id": 0, "value": {"data": 1}},
        {"partition_id": 0, "value": {"type": "BINARY", "data": "not base64!"}},
        {"partition_id": 9, "value": {"data": 2}},
        {"partition_id": 0, "value": {"type": "AVRO", "data": 3}},
        {"partition_id": 0, "value": {"type": "STRING", "data": 4}},
        "not an object",
        {
            "partition_id": 0,
            "key": {"type": "BINARY", "data": _b64(b"\x00\x01")},
            "value": {"type": "BINARY", "data": _b64(b"\xff")},
        },
    ]
    st, h, reps = c.call("POST", f"{c.v3(1)}/topics/many/records", body)
    assert st == 200 and "ndjson" in h["content-type"]
    codes = [r["error_code"] for r in reps]
    assert codes == [200, 400, 40402, 42202, 42206, 42206, 200], reps
    assert "base64" in reps[1]["message"]
    assert (reps[0]["offset"], reps[6]["offset"]) == (0, 1)
    recs = c.read_all("many", 0)
    assert [base64.b64decode(r["value"]) for r in recs] == [b"1", b"\xff"]
    assert base64.b64decode(recs[1]["key"]) == b"\x00\x01"


def test_produce_keyed_records_land_where_kafka_puts_them(c: HttpCluster) -> None:
    from api.client.partitioner import partition_for_key

    c.create_topic("keyed", partitions=3, rf=1)
    body = [
        {"key": {"type": "STRING", "data": f"key-{i}"}, "value": {"data": i}} for i in range(12)
    ]
    st, _, reps = c.call("POST", f"{c.v3()}/topics/keyed/records", body)
    assert st == 200
    for i, r in enumerate(reps):
        assert r["partition_id"] == partition_for_key(f"key-{i}".encode(), 3)


def test_produce_chunked_stream_one_report_per_record_in_order(c: HttpCluster) -> None:
    c.create_topic("stream", partitions=1, rf=3)
    lines = [json.dumps({"value": {"data": i}}).encode() + b"\n" for i in range(50)]
    lines.insert(10, b"{broken json\n")
    # Chunks cut through records: the server must join them.
    blob = b"".join(lines)
    chunks = [blob[i : i + 37] for i in range(0, len(blob), 37)]
    st, _, reps = c.call("POST", f"{c.v3(2)}/topics/stream/records?acks=1", chunks=chunks)
    assert st == 200 and len(reps) == 51
    assert reps[10]["error_code"] == 400 and "Malformed JSON" in reps[10]["message"]
    good = [r for r in reps if r["error_code"] == 200]
    assert [r["offset"] for r in good] == list(range(50))
    assert [int(base64.b64decode(r["value"])) for r in c.read_all("stream", 0)] == list(range(50))


def test_produce_records_batch_form_207(c: HttpCluster) -> None:
    c.create_topic("batch", partitions=1, rf=3)
    entries = [{"id": f"e{i}", "value": {"data": i}} for i in range(5)]
    entries.append({"id": "bad", "value": {"type": "BINARY", "data": 5}})
    st, _, body = c.call("POST", f"{c.v3()}/topics/batch/records:batch", {"entries": entries})
    assert st == 207
    assert [s["id"] for s in body["successes"]] == [f"e{i}" for i in range(5)]
    assert [s["offset"] for s in body["successes"]] == list(range(5))
    assert body["failures"][0]["id"] == "bad" and body["failures"][0]["error_code"] == 400
    st, _, err = c.call(
        "POST", f"{c.v3()}/topics/batch/records:batch", {"entries": [{"id": "a"}, {"id": "a"}]}
    )
    assert st == 422 and err["error_code"] == 42208
    st, _, err = c.call("POST", f"{c.v3()}/topics/batch/records:batch", {"entries": []})
    assert st == 422 and err["error_code"] == 42208


def test_produce_binary_batch_and_records_forms(c: HttpCluster) -> None:
    c.create_topic("bin", partitions=2, rf=3)
    ts = int(time.time() * 1000)
    batch = encode_batch([(b"k", f"v{i}".encode(), ts, ()) for i in range(10)])
    st, _, ans = c.call(
        "POST",
        f"{c.v3(1)}/topics/bin/records",
        raw=msgpack.packb({"partition_id": 1, "batch": batch}),
        headers={"Content-Type": "application/msgpack"},
    )
    assert st == 200 and ans["base_offset"] == 0 and ans["last_offset"] == 9
    st, _, ans = c.call(
        "POST",
        f"{c.v3(2)}/topics/bin/records",
        raw=msgpack.packb(
            {"partition_id": 1, "records": [[None, b"x", None, [["h", b"1"]]], ["no", 1, 2, 3]]}
        ),
        headers={"Content-Type": "application/x-msgpack"},
    )
    assert st == 200 and [r["error_code"] for r in ans["reports"]] == [200, 42206]
    assert ans["reports"][0]["offset"] == 10
    st, _, err = c.call(
        "POST",
        f"{c.v3()}/topics/bin/records",
        raw=b"\xc1garbage",
        headers={"Content-Type": "application/msgpack"},
    )
    assert st == 400
    corrupt = bytearray(batch)
    corrupt[-1] ^= 0xFF
    st, _, err = c.call(
        "POST",
        f"{c.v3()}/topics/bin/records",
        raw=msgpack.packb({"partition_id": 0, "batch": bytes(corrupt)}),
        headers={"Content-Type": "application/msgpack"},
    )
    assert st == 400 and "CORRUPT_MESSAGE" in err["message"]
    # Read back as msgpack: whole batches.
    st, _, got = c.call(
        "GET",
        f"{c.v3()}/topics/bin/partitions/1/records?offset=0&timeout_ms=0",
        headers={"Accept": "application/msgpack"},
    )
    assert st == 200 and got["next_offset"] == 11
    data = got["records"]
    vals = [
        r.value for pos, h in iter_batches(data) for r in decode_records(data[pos : pos + h.size])
    ]
    assert vals == [f"v{i}".encode() for i in range(10)] + [b"x"]


def test_produce_acks_and_errors(c: HttpCluster) -> None:
    c.create_topic("acks", partitions=1, rf=3, configs={"max.message.bytes": "300"})
    for acks in ("all", "1", "0"):
        st, _, rep = c.call(
            "POST", f"{c.v3()}/topics/acks/records?acks={acks}", {"value": {"data": acks}}
        )
        assert st == 200 and rep["error_code"] == 200
        assert (rep["offset"] == -1) == (acks == "0")
    st, _, err = c.call("POST", f"{c.v3()}/topics/acks/records?acks=2", {"value": {"data": 1}})
    assert st == 400
    st, _, err = c.call(
        "POST", f"{c.v3()}/topics/acks/records", {"value": {"type": "STRING", "data": "x" * 400}}
    )
    assert st == 413 and "max.message.bytes" in err["message"]
    st, _, err = c.call("POST", f"{c.v3()}/topics/nope/records", {"value": {"data": 1}})
    assert st == 404 and err["error_code"] == 40401
    st, _, err = c.call("POST", f"{c.v3()}/topics/acks/records", {"partition_id": 3})
    assert st == 404 and err["error_code"] == 40402
    st, _, err = c.call("POST", f"{c.v3()}/topics/acks/records", {"partition_id": -1})
    assert st == 422
    st, _, err = c.call("POST", f"{c.v3()}/topics/acks/records", {"timestamp": "yesterday"})
    assert st == 422
    st, _, err = c.call(
        "POST",
        f"{c.v3()}/topics/acks/records",
        raw=b"   ",
        headers={"Content-Type": "application/json"},
    )
    assert st == 422 and err["error_code"] == 42206
    st, _, err = c.call(
        "POST",
        f"{c.v3()}/topics/acks/records",
        raw=b"<xml/>",
        headers={"Content-Type": "application/xml"},
    )
    assert st == 415
    st, _, err = c.call(
        "POST",
        f"{c.v3()}/topics/acks/records",
        raw=b"[" + b"1," * (33 << 20) + b"1]",
        headers={"Content-Type": "application/json"},
    )
    assert st == 413 and err["error_code"] == 413


# --------------------------------------------------------------------------- read


def test_read_formats_long_poll_and_offset_errors(c: HttpCluster) -> None:
    c.create_topic("rd", partitions=1, rf=3)
    base = f"{c.v3(1)}/topics/rd/partitions/0/records"
    c.call(
        "POST",
        f"{c.v3()}/topics/rd/records",
        [{"value": {"data": {"a": 1}}}, {"value": {"data": "s"}}],
    )
    st, _, body = c.call("GET", f"{base}?offset=0&format=json&timeout_ms=0")
    assert st == 200 and [r["value"] for r in body["records"]] == [{"a": 1}, "s"]
    assert body["next_offset"] == 2 and body["high_watermark"] == 2
    st, _, body = c.call("GET", f"{base}?offset=1&format=string&timeout_ms=0")
    assert [r["value"] for r in body["records"]] == ['"s"']
    st, _, body = c.call("GET", f"{base}?offset=earliest&timeout_ms=0")
    assert [r["offset"] for r in body["records"]] == [0, 1]
    # Long-poll: a read at the end waits and wakes when a record arrives.
    threading.Timer(
        0.5, lambda: c.call("POST", f"{c.v3(2)}/topics/rd/records", {"value": {"data": "late"}})
    ).start()
    t0 = time.monotonic()
    st, _, body = c.call("GET", f"{base}?offset=2&format=json&timeout_ms=10000")
    took = time.monotonic() - t0
    assert st == 200 and [r["value"] for r in body["records"]] == ["late"], body
    assert 0.3 < took < 8
    t0 = time.monotonic()
    st, _, body = c.call("GET", f"{base}?offset=3&timeout_ms=400")
    assert st == 200 and body["records"] == [] and time.monotonic() - t0 >= 0.35
    st, _, err = c.call("GET", f"{base}?offset=99&timeout_ms=0")
    assert st == 416 and "OFFSET_OUT_OF_RANGE" in err["message"]
    st, _, err = c.call("GET", f"{base}?offset=-1")
    assert st == 400
    st, _, err = c.call("GET", f"{base}?offset=0&format=xml")
    assert st == 400
    c.call(
        "POST",
        f"{c.v3()}/topics/rd/records",
        {"value": {"type": "BINARY", "data": _b64(b"\xff\xfe")}},
    )
    st, _, err = c.call("GET", f"{base}?offset=3&format=json&timeout_ms=0")
    assert st == 422 and err["error_code"] == 42203
    st, _, err = c.call("GET", f"{c.v3()}/topics/rd/partitions/4/records?offset=0")
    assert st == 404 and err["error_code"] == 40402


def test_read_as_arrow_stream(c: HttpCluster) -> None:
    c.create_topic("arrow", partitions=1, rf=1)
    c.call(
        "POST",
        f"{c.v3()}/topics/arrow/records",
        [
            {
                "key": {"type": "STRING", "data": f"k{i}"},
                "partition_id": 0,
                "value": {"type": "STRING", "data": f"v{i}"},
            }
            for i in range(5)
        ],
    )
    st, h, body = c.call(
        "GET",
        f"{c.v3(1)}/topics/arrow/partitions/0/records?offset=1&max_offset=4&timeout_ms=0",
        headers={"Accept": "application/vnd.apache.arrow.stream"},
    )
    assert st == 200 and h["content-type"] == "application/vnd.apache.arrow.stream"
    table = pa.ipc.open_stream(body).read_all()
    assert table.column("offset").to_pylist() == [1, 2, 3]
    assert table.column("value").to_pylist() == [b"v1", b"v2", b"v3"]
    assert h["x-longboat-high-watermark"] == "5"


# --------------------------------------------------------------------------- v2


def test_v2_metadata_and_produce(c: HttpCluster) -> None:
    c.create_topic("v2t", partitions=2, rf=3, configs={"retention.ms": "100000"})
    u = c.urls[1]
    st, _, names = c.call("GET", f"{u}/topics")
    assert st == 200 and "v2t" in names
    st, _, t = c.call("GET", f"{u}/topics/v2t")
    assert t["name"] == "v2t" and t["configs"] == {"retention.ms": "100000"}
    assert len(t["partitions"]) == 2
    st, _, parts = c.call("GET", f"{u}/topics/v2t/partitions")
    assert [p["partition"] for p in parts] == [0, 1]
    assert sum(r["leader"] for r in parts[0]["replicas"]) == 1
    st, _, brokers = c.call("GET", f"{u}/brokers")
    assert brokers == {"brokers": c.brokers.ids}
    st, _, ans = c.call(
        "POST",
        f"{u}/topics/v2t",
        raw=json.dumps(
            {
                "records": [
                    {"key": "a", "value": {"x": 1}, "partition": 0},
                    {"value": 2, "partition": 7},
                ]
            }
        ).encode(),
        headers={"Content-Type": "application/vnd.kafka.json.v2+json"},
    )
    assert st == 200 and ans["key_schema_id"] is None and ans["value_schema_id"] is None
    assert ans["offsets"][0] == {"partition": 0, "offset": 0, "error_code": None, "error": None}
    assert ans["offsets"][1]["error_code"] == 40402
    st, _, ans = c.call(
        "POST",
        f"{u}/topics/v2t/partitions/1",
        raw=json.dumps({"records": [{"value": _b64(b"bin")}]}).encode(),
        headers={"Content-Type": "application/vnd.kafka.binary.v2+json"},
    )
    assert st == 200 and ans["offsets"][0]["partition"] == 1
    st, _, off = c.call("GET", f"{u}/topics/v2t/partitions/1/offsets")
    assert off == {"beginning_offset": 0, "end_offset": 1}
    assert base64.b64decode(c.read_all("v2t", 1)[0]["value"]) == b"bin"
    for fmt, code in (("avro", 42202), ("protobuf", 42202), ("jsonschema", 42202)):
        st, _, err = c.call(
            "POST",
            f"{u}/topics/v2t",
            raw=b'{"records":[{"value":1}]}',
            headers={"Content-Type": f"application/vnd.kafka.{fmt}.v2+json"},
        )
        assert st == 422 and err["error_code"] == code, (fmt, err)
    st, _, err = c.call(
        "POST",
        f"{u}/topics/v2t",
        raw=b'{"records":[{"key":1,"value":1}]}',
        headers={"Content-Type": "application/vnd.kafka.avro.v2+json"},
    )
    assert st == 422 and err["error_code"] == 42201
    st, _, err = c.call(
        "POST",
        f"{u}/topics/v2t",
        raw=b'{"records":[{"value":"*"}]}',
        headers={"Content-Type": "application/vnd.kafka.binary.v2+json"},
    )
    assert st == 200 and err["offsets"][0]["error_code"] == 400
    st, _, err = c.call("GET", f"{u}/topics/nope")
    assert st == 404 and err["error_code"] == 40401


# --------------------------------------------------------------------------- the rest


def test_unknown_route_and_method_are_json_errors(c: HttpCluster) -> None:
    st, _, err = c.call("GET", f"{c.urls[0]}/v3/nothing-here")
    assert st == 404 and err["error_code"] == 404
    st, _, err = c.call("PUT", f"{c.urls[0]}/v3/clusters")
    assert st == 405 and err["error_code"] == 405


def test_metrics_and_openapi(c: HttpCluster) -> None:
    c.create_topic("met", partitions=1, rf=3)
    c.call("POST", f"{c.v3()}/topics/met/records", {"value": {"data": 1}})
    c.call("GET", f"{c.v3()}/topics/met/partitions/0/records?offset=0&timeout_ms=0")
    c.call("GET", f"{c.v3()}/topics/no-such-topic")
    st, h, text = c.call("GET", f"{c.urls[0]}/metrics")
    assert st == 200 and h["content-type"].startswith("text/plain")
    text = text.decode()
    assert "longboat_produce_records_total" in text
    assert 'longboat_http_errors_total{error_code="40401",status="404"}' in text
    assert "longboat_under_replicated_partitions 0.0" in text
    assert "longboat_fetch_latency_seconds_bucket" in text
    for u in c.quorum.urls:
        st, _, text = c.call("GET", f"{u}/metrics")
        assert st == 200 and b"longboat_raft_term" in text and b"longboat_raft_commit_lag" in text
    st, _, doc = c.call("GET", f"{c.urls[2]}/openapi.json")
    assert st == 200 and doc["openapi"].startswith("3.")
    assert "/v3/clusters/{cluster_id}/topics/{topic}/records" in doc["paths"]


# --------------------------------------------------------------------------- command line


def test_cli_topics_and_cluster_status(c: HttpCluster) -> None:
    from click.testing import CliRunner

    from api.cli.main import main

    run = CliRunner().invoke
    b = ",".join(["http://127.0.0.1:1", *c.urls])  # a dead first URL: the next one answers
    r = run(
        main,
        [
            "topics",
            "create",
            "clitopic",
            "-p",
            "2",
            "-r",
            "3",
            "-c",
            "retention.ms=3600000",
            "-b",
            b,
        ],
    )
    assert r.exit_code == 0, r.output
    assert "created topic clitopic: 2 partition(s), replication factor 3" in r.output
    r = run(main, ["topics", "list", "-b", b, "--json"])
    assert r.exit_code == 0 and "clitopic" in [t["topic_name"] for t in json.loads(r.output)]
    r = run(main, ["topics", "list", "-b", b])
    assert r.output.splitlines()[0].split() == ["TOPIC", "PARTITIONS", "RF", "TOPIC", "ID"]
    r = run(
        main,
        [
            "topics",
            "alter",
            "clitopic",
            "-p",
            "3",
            "--set",
            "segment.ms=60000",
            "--delete-config",
            "retention.ms",
            "-b",
            b,
        ],
    )
    assert r.exit_code == 0, r.output
    r = run(main, ["topics", "describe", "clitopic", "-b", b, "--json"])
    d = json.loads(r.output)
    assert len(d["partitions"]) == 3 and d["configs"] == {"segment.ms": "60000"}
    assert all(p["latest_offset"] == 0 for p in d["partitions"])
    r = run(main, ["topics", "describe", "clitopic", "-b", b])
    assert "UNDER-REPLICATED" in r.output and "segment.ms=60000" in r.output
    r = run(main, ["cluster", "status", "-b", b, "--json"])
    st = json.loads(r.output)
    assert st["cluster_id"] == c.cluster_id and len(st["brokers"]) == 3
    assert st["controller"]["controller_id"] in (1, 2, 3)
    assert st["under_replicated_partitions"] == [] and st["offline_partitions"] == []
    r = run(main, ["cluster", "status", "-b", b])
    assert "Active controller: node" in r.output and "under-replicated: 0" in r.output
    r = run(main, ["topics", "delete", "clitopic", "-y", "-b", b])
    assert r.exit_code == 0
    r = run(main, ["topics", "describe", "clitopic", "-b", b])
    assert r.exit_code == 1 and "40401" in r.output
    r = run(main, ["topics", "create", "bad name", "-b", b])
    assert r.exit_code == 1 and "INVALID_TOPIC_EXCEPTION" in r.output
