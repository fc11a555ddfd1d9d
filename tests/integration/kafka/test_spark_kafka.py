"""Spark's own Kafka connector (``spark-sql-kafka-0-10``, ``format("kafka")``) against a real
Longboat cluster through its Kafka listener.

The connector is a Kafka client like any other (its AdminClient finds offsets, a consumer reads
each partition by assignment, a producer writes), so a Spark application moves to Longboat by
changing ``kafka.bootstrap.servers``. ``scripts/setup-spark-kafka.sh`` fetches the connector
from Maven Central for the installed PySpark; each Spark job runs in its own process
(``spark_kafka_job.py``), since Spark takes ``spark.jars`` only when its JVM starts.

Fast: one Spark process reads (batch) what librdkafka wrote, with keys, values, headers,
timestamps and offsets, by time and by an offset window, and writes records that librdkafka
reads back. Extended: a streaming read in micro-batches into Parquet with a checkpoint, stopped
and started again in a new process, resuming where it stopped; a streaming query writing to a
Kafka topic through the connector's sink, restarted likewise; a read at read_committed of
committed and aborted transactions; and the connector's older,
consumer-based offset fetching (a group join).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
pytest.importorskip("pyspark")

from confluent_kafka import Consumer as CKConsumer  # noqa: E402
from confluent_kafka import Producer as CKProducer  # noqa: E402
from confluent_kafka import TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from api.node.localcluster import Brokers, wait_for  # noqa: E402

# Every test starts a JVM of its own with the connector (85 s at load 8 for the batch test):
# the extended tier, as the other JVM peers (docs/testing.md)
pytestmark = [pytest.mark.slow, pytest.mark.extended]

REPO = Path(__file__).resolve().parents[3]
JOB = Path(__file__).with_name("spark_kafka_job.py")
TS0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def connector() -> Path:
    """The directory of the connector's jars (fetched once by ``scripts/setup-spark-kafka.sh``)."""
    # The setup script installs what is missing (scripts/test.sh runs it first) or fails
    # saying what: a missing tool fails the test, never skips it
    out = subprocess.run(
        [str(REPO / "scripts" / "setup-spark-kafka.sh")],
        check=True,
        timeout=900,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON": sys.executable},
    )
    return Path(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def brokers(kafka_listener_cluster: Brokers) -> Brokers:
    return kafka_listener_cluster


def bootstrap(b: Brokers) -> str:
    return ",".join(f"127.0.0.1:{p}" for p in b.kafka_ports.values())


def create_topic(bs: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bs})
    topic = NewTopic(name, partitions, 3, config={"retention.ms": "-1"})
    admin.create_topics([topic])[name].result(30)

    def led() -> bool:
        t = admin.list_topics(name, timeout=5).topics.get(name)
        return (
            t is not None
            and t.error is None
            and len(t.partitions) == partitions
            and all(p.leader >= 0 for p in t.partitions.values())
        )

    wait_for(f"{name} has leaders", led, 20)


def produce(bs: str, topic: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """librdkafka writes ``records`` (key, value, partition, headers, ts); answers each with
    the partition and offset its delivery report gave."""
    p = CKProducer({"bootstrap.servers": bs, "acks": "all", "enable.idempotence": True})
    done: list[dict[str, Any]] = []

    def report(err: Any, msg: Any, r: dict[str, Any]) -> None:
        assert err is None, err
        done.append({**r, "partition": msg.partition(), "offset": msg.offset()})

    for r in records:
        p.produce(
            topic,
            key=None if r["key"] is None else r["key"].encode(),
            value=r["value"].encode(),
            partition=r["partition"],
            headers=[(k, None if v is None else v.encode()) for k, v in r["headers"]],
            timestamp=r["ts"],
            on_delivery=lambda e, m, r=r: report(e, m, r),
        )
    assert p.flush(30) == 0
    assert len(done) == len(records)
    return done


def spark(jars: Path, jobs: list[tuple[str, dict[str, Any]]], cwd: Path) -> list[Any]:
    run = subprocess.run(
        [sys.executable, str(JOB), str(jars), json.dumps(jobs)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )
    # Spark's Java stack traces bury the cause: show the lines that name it first.
    causes = [ln for ln in run.stderr.splitlines() if "Exception" in ln and "\tat " not in ln]
    assert run.returncode == 0, "\n".join(causes[:20]) + "\n" + run.stderr[-3000:]
    return list(json.loads(run.stdout.strip().splitlines()[-1]))


def as_spark_row(r: dict[str, Any], topic: str) -> dict[str, Any]:
    return {
        "key": r["key"],
        "value": r["value"],
        "topic": topic,
        "partition": r["partition"],
        "offset": r["offset"],
        "ts": r["ts"],
        "timestampType": 0,  # CreateTime: the producer's timestamp, kept
        # The connector gives null, not an empty list, for a record without headers.
        "headers": [[k, v] for k, v in r["headers"]] or None,
    }


def test_spark_batch_reads_what_librdkafka_wrote_and_writes_what_it_reads(
    brokers: Brokers, connector: Path, tmp_path: Path
) -> None:
    bs = bootstrap(brokers)
    create_topic(bs, "spark-in", 2)
    create_topic(bs, "spark-out", 2)
    records = [
        {
            "key": None if i == 3 else f"k{i % 4}",
            "value": f"value {i}",
            "partition": i % 2,
            "headers": [("i", str(i)), ("null", None)] if i % 3 == 0 else [("i", str(i))],
            "ts": TS0 + i * 1000,
        }
        for i in range(12)
    ]
    written = produce(bs, "spark-in", records)
    want = sorted(
        (as_spark_row(r, "spark-in") for r in written), key=lambda r: (r["partition"], r["offset"])
    )
    to_write = [
        [f"s{i}", f"from spark {i}", i % 2, [["origin", "spark"], ["i", str(i)]]] for i in range(8)
    ]
    read, wrote = spark(
        connector,
        [
            ("read", {"bootstrap": bs, "topic": "spark-in", "ts": TS0 + 6000}),
            ("write", {"bootstrap": bs, "topic": "spark-out", "rows": to_write}),
        ],
        tmp_path,
    )
    assert read["all"] == want
    # By time (ListOffsets by timestamp): from each partition's first record at or after it.
    assert read["since"] == [r for r in want if r["ts"] >= TS0 + 6000]
    assert read["window"] == [r for r in want if r["partition"] == 0 and 2 <= r["offset"] < 5]

    assert wrote == {"written": 8}
    c = CKConsumer({"bootstrap.servers": bs, "group.id": "unused", "auto.offset.reset": "earliest"})
    c.assign([TopicPartition("spark-out", p, 0) for p in range(2)])
    got: list[Any] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < 8 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                got.append(m)
    finally:
        c.close()
    assert sorted(
        [
            m.key().decode(),
            m.value().decode(),
            m.partition(),
            [[k, v.decode()] for k, v in m.headers()],
        ]
        for m in got
    ) == sorted(to_write)
    for part in (0, 1):
        assert sorted(m.offset() for m in got if m.partition() == part) == [0, 1, 2, 3]


@pytest.mark.timeout(900)  # two Spark processes, one after the other
def test_spark_streaming_read_resumes_from_its_checkpoint(
    brokers: Brokers, connector: Path, tmp_path: Path
) -> None:
    bs = bootstrap(brokers)
    create_topic(bs, "spark-stream", 3)

    def records(lo: int, hi: int) -> list[dict[str, Any]]:
        return [
            {
                "key": f"k{i}",
                "value": f"event {i}",
                "partition": i % 3,
                "headers": [("i", str(i))],
                "ts": TS0 + i,
            }
            for i in range(lo, hi)
        ]

    job = {
        "bootstrap": bs,
        "topic": "spark-stream",
        "per_trigger": 10,
        "out": str(tmp_path / "out"),
        "checkpoint": str(tmp_path / "checkpoint"),
    }
    first_written = produce(bs, "spark-stream", records(0, 30))
    (first,) = spark(connector, [("stream", job)], tmp_path)
    # maxOffsetsPerTrigger=10: the 30 records arrive over at least three micro-batches.
    assert sum(first["batches"]) == 30
    assert len([n for n in first["batches"] if n > 0]) >= 3
    assert max(first["batches"]) <= 10

    later_written = produce(bs, "spark-stream", records(30, 50))
    (second,) = spark(connector, [("stream", job)], tmp_path)
    # A new process with the same checkpoint reads only what came after (nothing twice).
    assert sum(second["batches"]) == 20
    want = sorted(
        (as_spark_row(r, "spark-stream") for r in first_written + later_written),
        key=lambda r: (r["partition"], r["offset"]),
    )
    assert second["rows"] == want


@pytest.mark.timeout(900)  # two Spark processes, one after the other
def test_spark_streaming_query_writes_to_a_kafka_topic_and_resumes(
    brokers: Brokers, connector: Path, tmp_path: Path
) -> None:
    """Spark's Kafka sink in a streaming query (``writeStream.format("kafka")``): what
    librdkafka wrote to one topic, transformed, lands in another with keys and headers; a
    restart from the checkpoint writes only what came after."""
    bs = bootstrap(brokers)
    create_topic(bs, "spark-pipe-in", 2)
    create_topic(bs, "spark-pipe-out", 2)

    def records(lo: int, hi: int) -> list[dict[str, Any]]:
        return [
            {
                "key": f"k{i}",
                "value": f"event {i}",
                "partition": i % 2,
                "headers": [("i", str(i))],
                "ts": TS0 + i,
            }
            for i in range(lo, hi)
        ]

    job = {
        "bootstrap": bs,
        "topic": "spark-pipe-in",
        "to": "spark-pipe-out",
        "checkpoint": str(tmp_path / "checkpoint"),
    }
    produce(bs, "spark-pipe-in", records(0, 20))
    (first,) = spark(connector, [("pipe", job)], tmp_path)
    assert sum(first["batches"]) == 20
    produce(bs, "spark-pipe-in", records(20, 30))
    (second,) = spark(connector, [("pipe", job)], tmp_path)
    assert sum(second["batches"]) == 10  # from the checkpoint: nothing twice

    c = CKConsumer({"bootstrap.servers": bs, "group.id": "unused", "auto.offset.reset": "earliest"})
    c.assign([TopicPartition("spark-pipe-out", p, 0) for p in range(2)])
    got: list[Any] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < 31 and time.monotonic() < deadline:
            m = c.poll(0.5 if len(got) < 30 else 2.0)
            if m is not None:
                assert m.error() is None, m.error()
                got.append(m)
    finally:
        c.close()
    # No partition column: the sink's producer partitions by key, as Kafka's default.
    assert sorted(
        (m.key().decode(), m.value().decode(), [[k, v.decode()] for k, v in m.headers()])
        for m in got
    ) == sorted((f"k{i}", f"EVENT {i}", [["i", str(i)]]) for i in range(30))


def test_spark_reads_only_committed_transactions_at_read_committed(
    brokers: Brokers, connector: Path, tmp_path: Path
) -> None:
    """A librdkafka transactional producer commits one transaction and aborts another; the
    connector with ``kafka.isolation.level=read_committed`` reads the committed records
    only (the last stable offset and the aborted transactions of Fetch v4+)."""
    bs = bootstrap(brokers)
    create_topic(bs, "spark-txn", 2)
    p = CKProducer({"bootstrap.servers": bs, "transactional.id": "spark-txn-writer"})
    p.init_transactions(30)
    for outcome in ("commit", "abort", "commit"):
        p.begin_transaction()
        for i in range(4):
            p.produce("spark-txn", value=f"{outcome}-{i}".encode(), partition=i % 2)
        p.flush(30)
        if outcome == "commit":
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
    (got,) = spark(connector, [("committed", {"bootstrap": bs, "topic": "spark-txn"})], tmp_path)
    assert got["values"] == sorted([f"commit-{i}" for i in range(4)] * 2)


def test_spark_batch_read_with_consumer_based_offset_fetching(
    brokers: Brokers, connector: Path, tmp_path: Path
) -> None:
    """``useDeprecatedOffsetFetching``: the connector finds offsets with a KafkaConsumer that
    subscribes in a group of its own (a classic group join), not the AdminClient."""
    bs = bootstrap(brokers)
    create_topic(bs, "spark-old", 2)
    written = produce(
        bs,
        "spark-old",
        [
            {"key": f"k{i}", "value": f"v{i}", "partition": i % 2, "headers": [], "ts": TS0 + i}
            for i in range(10)
        ],
    )
    (read,) = spark(
        connector,
        [
            (
                "read",
                {
                    "bootstrap": bs,
                    "topic": "spark-old",
                    "ts": TS0 + 4,
                    "deprecated_offset_fetching": True,
                },
            )
        ],
        tmp_path,
    )
    want = sorted(
        (as_spark_row(r, "spark-old") for r in written), key=lambda r: (r["partition"], r["offset"])
    )
    assert read["all"] == want
    assert read["since"] == [r for r in want if r["ts"] >= TS0 + 4]
