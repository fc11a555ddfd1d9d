"""The longboat data source in a real local[2] Spark session against a real 3+3 cluster.

One cluster and one SparkSession for the module (cold starts dominate: a session takes 10-20 s).
What is produced is produced with the Python client and remembered with its delivery
reports, so every read is compared with the offsets the cluster acknowledged.
"""

from __future__ import annotations

import datetime as dt
import json
import pickle
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from longboat_spark_harness import LocalCluster, cluster, spark_session

from api.client import Producer, RecordMetadata
from api.node.localcluster import wait_for
from spark.fetch import RangeReader
from spark.options import parse_source_options
from spark.planning import DataLossError
from spark.source import LongboatBatchReader

pytestmark = pytest.mark.slow

TS0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def lc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from cluster(tmp_path_factory.mktemp("spark-cluster"))


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    s = spark_session(tmp_path_factory.mktemp("spark"))
    yield s
    s.stop()


Produced = dict[tuple[int, int], tuple[bytes | None, bytes, int, tuple[tuple[str, bytes], ...]]]


def produce(
    lc: LocalCluster, topic: str, n: int, partitions: int, *, tag: str = "", start: int = 0
) -> Produced:
    """n records spread round-robin; -> {(partition, offset): (key, value, ts, headers)}."""
    sent = []
    with Producer(lc.bootstrap, linger_ms=2) as p:
        for i in range(start, start + n):
            key = None if i % 7 == 0 else f"k{i}".encode()
            value = f"{tag}v{i}".encode()
            headers = (("i", str(i).encode()),) if i % 2 else ()
            f = p.send(
                topic,
                value,
                key=key,
                headers=list(headers),
                partition=i % partitions,
                timestamp_ms=TS0 + i,
            )
            sent.append((f, key, value, TS0 + i, headers))
        p.flush()
        out: Produced = {}
        for f, key, value, ts, headers in sent:
            md: RecordMetadata = f.result(30)
            out[(md.partition, md.offset)] = (key, value, ts, headers)
    return out


def reader(spark: Any, lc: LocalCluster, **options: str) -> Any:
    r = spark.read.format("longboat").option("bootstrap", lc.bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


@pytest.fixture(scope="module")
def orders(lc: LocalCluster) -> Produced:
    lc.create_topic("orders", 3)
    return produce(lc, "orders", 3000, 3)


def test_batch_read_returns_every_record_with_its_offset_in_partition_order(
    spark: Any, lc: LocalCluster, orders: Produced
) -> None:
    df = reader(spark, lc, subscribe="orders", includeHeaders="true")
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,"
        "headers:array<struct<key:string,value:binary>>>"
    )
    rows = df.collect()
    assert len(rows) == len(orders) == 3000
    got = {
        (r.partition, r.offset): (
            r.key,
            r.value,
            int(r.timestamp.replace(tzinfo=dt.UTC).timestamp() * 1000),
            tuple((h.key, h.value) for h in r.headers),
        )
        for r in rows
    }
    assert {
        k: (bytes(v[0]) if v[0] is not None else None, bytes(v[1]), v[2], v[3])
        for k, v in got.items()
    } == orders
    assert {r.topic for r in rows} == {"orders"} and {r.timestampType for r in rows} == {0}
    for p in range(3):
        offs = [r.offset for r in rows if r.partition == p]
        assert offs == list(range(1000)), f"partition {p} out of order or with gaps"


def test_offsets_json_timestamps_and_min_partitions_select_the_right_ranges(
    spark: Any, lc: LocalCluster, orders: Produced
) -> None:
    df = reader(
        spark,
        lc,
        subscribe="orders",
        startingOffsets=json.dumps({"orders": {"0": 10, "1": -2, "2": 995}}),
        endingOffsets=json.dumps({"orders": {"0": 20, "1": 5, "2": -1}}),
    )
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    want = sorted(
        [(0, o) for o in range(10, 20)]
        + [(1, o) for o in range(5)]
        + [(2, o) for o in range(995, 1000)]
    )
    assert got == want
    # Record i has timestamp TS0 + i and sits at offset i // 3 of partition i % 3.
    df = reader(spark, lc, subscribe="orders", startingTimestamp=str(TS0 + 2990))
    assert sorted(r.value for r in df.select("value").collect()) == sorted(
        f"v{i}".encode() for i in range(2990, 3000)
    )
    df = reader(spark, lc, assign=json.dumps({"orders": [0, 2]}), minPartitions="8")
    assert df.rdd.getNumPartitions() >= 8
    assert df.count() == 2000
    assert df.select("partition").distinct().count() == 2


def test_bad_options_fail_with_clear_errors(spark: Any, lc: LocalCluster, orders: Produced) -> None:
    with pytest.raises(Exception, match="'bootstrap' is required"):
        spark.read.format("longboat").option("subscribe", "orders").load().collect()
    with pytest.raises(Exception, match="topic 'nope' does not exist"):
        reader(spark, lc, subscribe="nope").collect()
    with pytest.raises(Exception, match="unknown source option 'startingoffset'"):
        reader(spark, lc, subscribe="orders", startingOffset="earliest").collect()
    with pytest.raises(Exception, match=r"missing \['orders-1', 'orders-2'\]"):
        reader(spark, lc, subscribe="orders", startingOffsets='{"orders": {"0": 1}}').collect()


def test_write_produces_rows_and_reads_back(spark: Any, lc: LocalCluster) -> None:
    lc.create_topic("written", 2)
    rows = [(f"k{i}".encode(), f"value {i}", i % 2, [("src", b"spark")]) for i in range(500)]
    df = spark.createDataFrame(
        rows,
        "key binary, value string, partition int, headers array<struct<key:string,value:binary>>",
    )
    # One writing task, so the order within each partition is the DataFrame's.
    df.coalesce(1).write.format("longboat").option("bootstrap", lc.bootstrap).option(
        "topic", "written"
    ).mode("append").save()
    back = reader(spark, lc, subscribe="written", includeHeaders="true").collect()
    assert len(back) == 500
    for p in (0, 1):
        vals = [
            bytes(r.value).decode()
            for r in sorted(back, key=lambda r: r.offset)
            if r.partition == p
        ]
        assert vals == [f"value {i}" for i in range(500) if i % 2 == p]
    assert {tuple((h.key, bytes(h.value)) for h in r.headers) for r in back} == {
        (("src", b"spark"),)
    }
    # A record the cluster does not take fails the write (here: the topic does not exist).
    with pytest.raises(Exception, match="UNKNOWN_TOPIC_OR_PARTITION"):
        spark.createDataFrame([("x",)], "value string").write.format("longboat").option(
            "bootstrap", lc.bootstrap
        ).option("topic", "no-such-topic").option("request.timeout.ms", "1500").mode(
            "append"
        ).save()
    with pytest.raises(Exception, match="needs a 'value' column"):
        spark.createDataFrame([(1,)], "x int").write.format("longboat").option(
            "bootstrap", lc.bootstrap
        ).option("topic", "written").mode("append").save()


def test_stream_restarted_from_its_checkpoint_reads_every_record_exactly_once(
    spark: Any, lc: LocalCluster, tmp_path: Path
) -> None:
    lc.create_topic("events", 2)
    first = produce(lc, "events", 300, 2, tag="a")
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"

    def run(limit: int) -> list[int]:
        q = (
            spark.readStream.format("longboat")
            .option("bootstrap", lc.bootstrap)
            .option("subscribe", "events")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(limit))
            .load()
            .selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(120)
        assert q.exception() is None, q.exception()
        return [p["numInputRows"] for p in q.recentProgress]

    sizes = run(limit=120)
    assert sum(sizes) == 300 and max(sizes) <= 120, sizes
    assert len([s for s in sizes if s]) >= 3
    second = produce(lc, "events", 200, 2, tag="b", start=300)
    sizes = run(limit=1000)
    assert sum(sizes) == 200, sizes
    got = spark.read.parquet(str(out)).collect()
    keys = sorted((r.partition, r.offset) for r in got)
    assert keys == sorted([*first, *second]), "a record is missing or read twice"
    assert sorted(r.value for r in got) == sorted(
        v[1].decode() for v in [*first.values(), *second.values()]
    )


def test_brokers_build_the_arrow_rows_and_a_worker_would_build_the_same(
    lc: LocalCluster, orders: Produced
) -> None:
    # The planner and read() without Spark: partitions must pickle, and the v3 Arrow route
    # (brokers convert) and the raw-batch route (the worker converts) agree row for row.
    opts = parse_source_options(
        {
            "bootstrap": lc.bootstrap,
            "subscribe": "orders",
            "includeHeaders": "true",
            "maxRecordsPerPartition": "400",
        },
        streaming=False,
    )
    parts = pickle.loads(pickle.dumps(LongboatBatchReader(opts).partitions()))
    assert len(parts) == 9 and all(p.task.cluster_id for p in parts)
    total = 0
    for p in parts:
        r = RangeReader(p.task)
        on_broker = pa.Table.from_batches(list(r.read()))
        assert r.use_arrow, "the broker did not answer with Arrow"
        r2 = RangeReader(replace(p.task, cluster_id=None))
        in_worker = pa.Table.from_batches(list(r2.read()))
        assert on_broker.equals(in_worker)
        assert on_broker.column("offset").to_pylist() == list(range(p.task.start, p.task.end))
        total += on_broker.num_rows
    assert total == 3000


def test_stream_picks_up_partitions_added_while_it_runs(
    spark: Any, lc: LocalCluster, tmp_path: Path
) -> None:
    lc.create_topic("grow", 1)
    first = produce(lc, "grow", 50, 1, tag="a")
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"

    def run() -> None:
        q = (
            spark.readStream.format("longboat")
            .option("bootstrap", lc.bootstrap)
            .option("subscribePattern", "gro.*")
            .option("startingOffsets", "earliest")
            .load()
            .selectExpr("partition", "offset")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(120)
        assert q.exception() is None, q.exception()

    run()
    lc.grow_topic("grow", 3)
    second = produce(lc, "grow", 60, 3, tag="b", start=50)
    run()
    got = sorted((r.partition, r.offset) for r in spark.read.parquet(str(out)).collect())
    assert got == sorted([*first, *second])
    assert {p for p, _ in got} == {0, 1, 2}


def test_records_deleted_by_retention_fail_the_read_or_are_skipped(
    spark: Any, lc: LocalCluster
) -> None:
    # Small segments and retention.bytes, so the brokers (checking every 200 ms here) delete
    # the oldest segments: a read from offset 0 then asks for records that are gone.
    lc.create_topic("trimmed", 1, configs={"segment.bytes": "2048", "retention.bytes": "6144"})
    with Producer(lc.bootstrap, linger_ms=0) as p:
        for i in range(300):  # one small batch each, so that every segment holds several
            p.send("trimmed", f"v{i}".encode() * 8, partition=0).result(30)
    opts = parse_source_options(
        {"bootstrap": lc.bootstrap, "subscribe": "trimmed"}, streaming=False
    )
    (part,) = LongboatBatchReader(opts).partitions()
    probe = RangeReader(part.task)
    wait_for("retention to delete the oldest segments", lambda: probe._list_offset(-2) > 0, 30)
    log_start, end = probe._list_offset(-2), probe._list_offset(-1)
    assert end == 300 and 0 < log_start < 300

    # Planning sees the log start: failOnDataLoss (the default) fails the query, naming it.
    from_zero = json.dumps({"trimmed": {"0": 0}})
    with pytest.raises(Exception, match=r"were deleted.*failOnDataLoss"):
        reader(spark, lc, subscribe="trimmed", startingOffsets=from_zero).collect()
    df = reader(spark, lc, subscribe="trimmed", startingOffsets=from_zero, failOnDataLoss="false")
    offsets = sorted(r.offset for r in df.select("offset").collect())
    assert offsets[0] >= log_start and offsets == list(range(offsets[0], 300))

    # A range planned before the deletion reaches the broker, which answers 416: the task
    # fails, or skips to the log start when loss is allowed.
    stale = replace(part.task, start=0, end=300)
    with pytest.raises(DataLossError, match="were deleted"):
        list(RangeReader(stale).read())
    lenient = replace(stale, fail_on_data_loss=False)
    got = pa.Table.from_batches(list(RangeReader(lenient).read())).column("offset").to_pylist()
    assert got and got[0] >= log_start and got == list(range(got[0], 300))


def test_a_batch_read_with_nothing_to_read_gives_no_rows(spark: Any, lc: LocalCluster) -> None:
    # No ranges: Spark still runs one task, with InputPartition(None) (it crashed read()).
    lc.create_topic("empty", 2)
    assert reader(spark, lc, subscribe="empty").count() == 0
