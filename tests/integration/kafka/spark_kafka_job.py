"""Spark jobs over Spark's own Kafka connector (``format("kafka")``), run by
``test_spark_kafka.py`` as a subprocess: the jobs given, in order, in one SparkSession, and
their results as one JSON list on the last line of stdout.

Each run is its own process, so its own JVM: Spark reads ``spark.jars`` only when its JVM
starts, and a JVM another test module started (without the connector) would answer
``KAFKA_DATA_SOURCE_NOT_ENABLED``. A streaming job run twice against one checkpoint is also a
real restart this way.

    python spark_kafka_job.py JARS_DIR '[["JOB", {"bootstrap": ..., ...}], ...]'

Jobs (``deprecated_offset_fetching``: true in a job's arguments sets
``spark.sql.streaming.kafka.useDeprecatedOffsetFetching`` for it, the connector's older way to
find offsets, through a consumer in a group rather than the AdminClient):
  read    every record of ``topic`` (batch), then those at or after ``ts`` by
          ``startingTimestamp`` (ListOffsets by time), then the offsets ``[2, 5)`` of partition 0
          by ``startingOffsets``/``endingOffsets`` JSON
  write   ``rows`` ([key, value, partition, [[header, value], ...]]) to ``topic`` (batch)
  stream  ``topic`` from the earliest offset, at most ``per_trigger`` records a micro-batch,
          into Parquet at ``out`` with the checkpoint ``checkpoint``, until caught up
          (``availableNow``); answers each micro-batch's input row count and the Parquet rows
  committed  every record of ``topic`` (batch) with ``kafka.isolation.level``
          ``read_committed``: the values of committed transactions only
  pipe    ``topic`` from the earliest offset into the Kafka topic ``to`` (a streaming query
          with Spark's Kafka sink, ``writeStream.format("kafka")``), each value upper-cased,
          key and headers kept, with the checkpoint ``checkpoint``, until caught up; answers
          each micro-batch's input row count
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROW = [
    "CAST(key AS STRING) AS key",
    "CAST(value AS STRING) AS value",
    "topic",
    "partition",
    "offset",
    "unix_millis(timestamp) AS ts",
    "timestampType",
    "transform(headers, h -> array(h.key, CAST(h.value AS STRING))) AS headers",
]


def session(jars: Path, tmp: Path) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    s = (
        SparkSession.builder.master("local[2]")
        .appName("longboat-spark-kafka")
        .config("spark.jars", ",".join(str(j) for j in sorted(jars.glob("*.jar"))))
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.warehouse.dir", str(tmp / "warehouse"))
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    s.sparkContext.setLogLevel("ERROR")
    return s


def rows(df: Any) -> list[dict[str, Any]]:
    return [r.asDict() for r in df.selectExpr(*ROW).orderBy("partition", "offset").collect()]


def read(spark: Any, a: dict[str, Any]) -> dict[str, Any]:
    def kafka(how: str = "subscribe", what: str = a["topic"]) -> Any:
        return (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", a["bootstrap"])
            .option(how, what)
            .option("includeHeaders", "true")
        )

    every = rows(kafka().load())
    since = rows(kafka().option("startingTimestamp", str(a["ts"])).load())
    window = rows(
        kafka("assign", json.dumps({a["topic"]: [0]}))
        .option("startingOffsets", json.dumps({a["topic"]: {"0": 2}}))
        .option("endingOffsets", json.dumps({a["topic"]: {"0": 5}}))
        .load()
    )
    return {"all": every, "since": since, "window": window}


def write(spark: Any, a: dict[str, Any]) -> dict[str, Any]:
    data = [
        (k, v, p, [(hk, None if hv is None else hv.encode()) for hk, hv in hs])
        for k, v, p, hs in a["rows"]
    ]
    df = spark.createDataFrame(
        data,
        "key string, value string, partition int, headers array<struct<key:string,value:binary>>",
    )
    (
        df.write.format("kafka")
        .option("kafka.bootstrap.servers", a["bootstrap"])
        .option("topic", a["topic"])
        .option("kafka.acks", "all")
        .save()
    )
    return {"written": len(data)}


def _read_stream(spark: Any, a: dict[str, Any]) -> Any:
    """``topic`` as a streaming DataFrame from the earliest offset, headers included."""
    return (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", a["bootstrap"])
        .option("subscribe", a["topic"])
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
    )


def _run_until_caught_up(query: Any) -> list[int]:
    """Wait for an ``availableNow`` query; each micro-batch's input row count."""
    if not query.awaitTermination(120):
        query.stop()
        raise SystemExit("the streaming query did not catch up in 120 s")
    if query.exception() is not None:
        raise SystemExit(f"the streaming query failed: {query.exception()}")
    return [int(p["numInputRows"]) for p in query.recentProgress]


def stream(spark: Any, a: dict[str, Any]) -> dict[str, Any]:
    q = (
        _read_stream(spark, a)
        .option("maxOffsetsPerTrigger", str(a["per_trigger"]))
        .load()
        .selectExpr(*ROW)
        .writeStream.format("parquet")
        .option("path", a["out"])
        .option("checkpointLocation", a["checkpoint"])
        .trigger(availableNow=True)
        .start()
    )
    batches = _run_until_caught_up(q)
    out = [
        r.asDict() for r in spark.read.parquet(a["out"]).orderBy("partition", "offset").collect()
    ]
    return {"batches": batches, "rows": out}


def committed(spark: Any, a: dict[str, Any]) -> dict[str, Any]:
    df = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", a["bootstrap"])
        .option("subscribe", a["topic"])
        .option("kafka.isolation.level", "read_committed")
        .load()
    )
    return {"values": sorted(r[0] for r in df.selectExpr("CAST(value AS STRING)").collect())}


def pipe(spark: Any, a: dict[str, Any]) -> dict[str, Any]:
    q = (
        _read_stream(spark, a)
        .load()
        .selectExpr("key", "CAST(upper(CAST(value AS STRING)) AS BINARY) AS value", "headers")
        .writeStream.format("kafka")
        .option("kafka.bootstrap.servers", a["bootstrap"])
        .option("topic", a["to"])
        .option("kafka.acks", "all")
        .option("checkpointLocation", a["checkpoint"])
        .trigger(availableNow=True)
        .start()
    )
    return {"batches": _run_until_caught_up(q)}


JOBS = {"read": read, "write": write, "stream": stream, "pipe": pipe, "committed": committed}


def main() -> None:
    jars, jobs = Path(sys.argv[1]), json.loads(sys.argv[2])
    spark = session(jars, Path.cwd())
    results = []
    try:
        for job, args in jobs:
            spark.conf.set(
                "spark.sql.streaming.kafka.useDeprecatedOffsetFetching",
                str(bool(args.get("deprecated_offset_fetching"))).lower(),
            )
            t0 = time.monotonic()
            results.append(JOBS[job](spark, args))
            # On stderr, for a slow run's report.
            print(f"spark_kafka_job: {job} took {time.monotonic() - t0:.1f} s", file=sys.stderr)
    finally:
        spark.stop()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
