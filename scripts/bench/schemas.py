#!/usr/bin/env python3
"""Avro through Longboat: records/s with the Schema Registry in the path, beside the same
records as plain JSON in the same run (JSON lines on stdout, progress on stderr: _report.py).

One cluster (1 controller, 3 brokers), topics of 3 partitions, RF 3, acks=all. The record is
a 10-field Avro record (longs, doubles, strings, a boolean, a nullable string, an enum), the
same dicts every time; its JSON text is the baseline's value.

* ``schemas.client.produce``: the Python client: ``api.client.schemas.AvroSerializer`` per
  record (fastavro, Confluent framing; the schema registered once and its id cached) then
  ``send_batch``, against ``orjson.dumps`` per record then ``send_batch``. The issue's goal:
  a ratio of at least 0.5.
* ``schemas.client.consume``: a consumer reading them back and decoding every value with
  ``AvroDeserializer``, against the same consumer reading the JSON topic with ``orjson.loads``.
* ``schemas.rest_v2.produce``: REST Proxy v2 produce, ``application/vnd.kafka.avro.v2+json``
  with ``value_schema_id``, 500 records a request, 8 requests in flight (every value checked
  and encoded on the broker: ``api.http.embedded``), against ``...json.v2+json`` with the same
  records.
* ``schemas.rest_v2.consume``: a v2 consumer instance with ``format: avro`` against one with
  ``format: json``, reading everything back.

* ``schemas.spark.read``: Spark (local[2]) reading the client's Avro topic with
  ``valueFormat=avro`` (every value decoded into a struct column in Spark's Python workers:
  fastavro per value, then pyarrow) into the ``noop`` sink, rows/s, against Spark reading the
  same rows (the same struct column) from an Avro container file (written by fastavro with
  the same schema) through Spark's own Avro data source, ``AVRO_FORMAT``. ``parquet_rows_per_s``
  in its params: the same rows from a Parquet file; ``binary_rows_per_s``: the same topic read
  as raw bytes (no decoding), so the decoding's own cost is the gap between the two topic
  figures.

``--quick``: 100,000 records for the client, 20,000 through REST, one run; ``--smoke``: 5,000
and 1,000; full: 500,000 and 100,000, three runs.

Usage: python scripts/bench/schemas.py [--quick | --smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from _report import add_size_flags, figure, progress, size
from spark_read import session, timed

from api.client import AsyncConsumer, AsyncProducer, TopicPartition
from api.client.schemas import AvroDeserializer, AvroSerializer, SchemaRegistryClient
from api.node.localcluster import Brokers, Quorum
from metalog.client import ControllerClient
from metalog.commands import CreateTopic

PARTITIONS = 3
CHUNK = 5_000
REST_BATCH = 500
REST_IN_FLIGHT = 8

SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "Trade",
        "namespace": "bench",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "account", "type": "long"},
            {"name": "symbol", "type": "string"},
            {"name": "price", "type": "double"},
            {"name": "quantity", "type": "long"},
            {"name": "fee", "type": "double"},
            {"name": "venue", "type": "string"},
            {"name": "buy", "type": "boolean"},
            {"name": "note", "type": ["null", "string"], "default": None},
            {
                "name": "state",
                "type": {"type": "enum", "name": "State", "symbols": ["NEW", "DONE"]},
            },
        ],
    }
)


def trade(i: int) -> dict[str, Any]:
    return {
        "id": i,
        "account": 1000 + i % 97,
        "symbol": "ACME",
        "price": 101.25 + i % 13,
        "quantity": 10 + i % 7,
        "fee": 0.35,
        "venue": "XLON",
        "buy": i % 2 == 0,
        "note": None,
        "state": "NEW",
    }


async def create_topic(urls: list[str], name: str) -> None:
    async with ControllerClient(urls, timeout_s=30) as cc:
        await cc.execute(
            CreateTopic(
                name=name,
                num_partitions=PARTITIONS,
                replication_factor=3,
                configs={"min.insync.replicas": "2"},
            )
        )


async def produce(boot: list[str], topic: str, n: int, encode: Any) -> float:
    """Records/s: ``encode`` each of ``n`` records, send them in chunks, all acknowledged."""
    records = [trade(i) for i in range(CHUNK)]
    async with AsyncProducer(
        boot, acks="all", linger_ms=2, batch_size=1 << 20, buffer_memory=256 << 20
    ) as p:
        await (await p.send_batch(topic, [encode(r) for r in records[:100]]))
        t0 = time.perf_counter()
        futs = []
        for _ in range(n // CHUNK):
            futs.append(await p.send_batch(topic, [encode(r) for r in records]))
        await asyncio.gather(*futs)
        return n / (time.perf_counter() - t0)


async def consume(boot: list[str], topic: str, n: int, decode: Any) -> float:
    async with AsyncConsumer(boot, fetch_max_bytes=8 << 20, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        got = 0
        t0 = time.perf_counter()
        while got < n:
            recs = await c.poll(5000)
            if not recs:
                break
            for r in recs:
                decode(r.value)
            got += len(recs)
        return got / (time.perf_counter() - t0)


async def rest_produce(url: str, topic: str, n: int, fmt: str, schema_id: int | None) -> float:
    body: dict[str, Any] = {"records": [{"value": trade(i)} for i in range(REST_BATCH)]}
    if schema_id is not None:
        body["value_schema_id"] = schema_id
    raw = orjson.dumps(body)
    headers = {"Content-Type": f"application/vnd.kafka.{fmt}.v2+json"}
    requests = n // REST_BATCH
    sem = asyncio.Semaphore(REST_IN_FLIGHT)
    async with aiohttp.ClientSession() as s:

        async def one() -> None:
            async with sem, s.post(f"{url}/topics/{topic}", data=raw, headers=headers) as r:
                out = await r.json()
                if r.status != 200 or any(o["error_code"] for o in out["offsets"]):
                    raise RuntimeError(f"REST produce failed: {r.status} {str(out)[:300]}")

        await one()  # warm: connection, metadata, the codec's schema cache
        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(requests)))
        return requests * REST_BATCH / (time.perf_counter() - t0)


async def rest_consume(url: str, topic: str, n: int, fmt: str, group: str) -> float:
    v2 = {"Content-Type": "application/vnd.kafka.v2+json"}
    accept = {"Accept": f"application/vnd.kafka.{fmt}.v2+json"}
    async with aiohttp.ClientSession() as s:
        body = {"name": "b", "format": fmt, "auto.offset.reset": "earliest"}
        async with s.post(f"{url}/consumers/{group}", json=body, headers=v2) as r:
            base = (await r.json())["base_uri"]
        async with s.post(f"{base}/subscription", json={"topics": [topic]}, headers=v2) as r:
            assert r.status == 204
        # Timed from the first records (the group join is not the format's cost) to the last.
        first = 0
        got = 0
        t0 = 0.0
        deadline = time.monotonic() + 120
        while first + got < n and time.monotonic() < deadline:
            async with s.get(f"{base}/records?timeout=1000&max_bytes=8388608", headers=accept) as r:
                recs = await r.json()
                if r.status != 200:
                    raise RuntimeError(f"REST consume failed: {r.status} {str(recs)[:300]}")
            if not first:
                first = len(recs)
                t0 = time.perf_counter()
            else:
                got += len(recs)
        async with s.delete(base, headers=v2):
            pass
        if got <= 0:
            raise RuntimeError(f"REST consume of {topic}: {first + got} of {n} records")
        return got / (time.perf_counter() - t0)


AVRO_FORMAT = "org.apache.spark.sql.avro.AvroFileFormat"
"""Spark's ``format("avro")`` by its class: Spark 4.3's spark-sql jar ships the Avro data
source, but the short name ``avro`` is registered only by the separate spark-avro package,
of which Maven Central has no 4.3 release (4.2.0 is the newest); the class name reaches the
same reader without it."""


def spark_read(
    boot: list[str], topic: str, n: int, root: Path, runs: int
) -> dict[str, list[float]]:
    """rows/s: the Avro topic decoded by the longboat source, the same rows from an Avro file
    and from Parquet, and the topic's raw bytes; each read once untimed first (the JIT's first
    pass is slower)."""
    import fastavro
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql.functions import struct

    rows = [trade(i % CHUNK) for i in range(n)]
    path = root / "trades.parquet"
    pq.write_table(pa.table({"value": rows}), path)
    avro_path = root / "trades.avro"
    with open(avro_path, "wb") as f:
        fastavro.writer(f, fastavro.parse_schema(json.loads(SCHEMA)), rows)
    spark = session()
    try:

        def from_topic(fmt: str) -> Any:
            r = spark.read.format("longboat").option("bootstrap", ",".join(boot))
            return r.option("subscribe", topic).option("valueFormat", fmt).load().select("value")

        sources: dict[str, Callable[[], Any]] = {
            "avro": lambda: from_topic("avro"),
            "avro_file": lambda: (
                spark.read.format(AVRO_FORMAT)
                .load(str(avro_path))
                .select(struct("*").alias("value"))
            ),
            "parquet": lambda: spark.read.parquet(str(path)).select("value"),
            "binary": lambda: from_topic("binary"),
        }
        for name in ("avro", "avro_file"):
            got = sources[name]().where("value.id >= 0").count()
            if got != n:
                raise RuntimeError(f"Spark read {got} rows of {n} ({name})")
        out: dict[str, list[float]] = {}
        for name, df in sources.items():
            df().write.format("noop").mode("overwrite").save()  # warm
            for _ in range(runs):
                dt = timed(lambda df=df: df().write.format("noop").mode("overwrite").save())  # type: ignore[misc]
                out.setdefault(name, []).append(n / dt)
        return out
    finally:
        spark.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_size_flags(ap)
    args = ap.parse_args()
    n, n_rest, runs = {
        "smoke": (CHUNK, 1_000, 1),
        "quick": (100_000, 20_000, 1),
        "full": (500_000, 100_000, 3),
    }[size(args)]
    n = max(CHUNK, n // CHUNK * CHUNK)
    root = Path(tempfile.mkdtemp(prefix="longboat-bench-schemas-"))
    fig: dict[str, list[float]] = {}

    def add(name: str, v: float) -> None:
        fig.setdefault(name, []).append(v)

    q = Quorum(root, 1)
    brokers = Brokers(root, q, 3)
    try:
        progress("starting 1 controller and 3 brokers")
        q.start_all()
        brokers.start_all()
        brokers.wait_ready(timeout_s=90)
        boot = [brokers.url(b) for b in brokers.ids]
        url = boot[0]
        registry = SchemaRegistryClient(boot)
        ser = AvroSerializer(registry, SCHEMA)
        de = AvroDeserializer(registry)
        for run in range(runs):
            ta, tj, ra, rj = (f"{k}-{run}" for k in ("avro", "json", "rest-avro", "rest-json"))
            for t in (ta, tj, ra, rj):
                asyncio.run(create_topic(q.urls, t))
            time.sleep(2)  # leaders elected, followers fetching
            # The serializer registers on first use (blocking HTTP): outside the timed loop.
            result: list[Any] = []
            th = threading.Thread(target=lambda r=result, t=ta: r.append(ser.schema_id(t)))
            th.start()
            th.join()
            sid = result[0]
            de(ser(trade(0), ta))  # the deserializer's cache, likewise

            def enc_avro(r: dict[str, Any], t: str = ta) -> bytes:
                return ser(r, t)

            progress(f"run {run + 1}/{runs}: client produce, {n} Avro and {n} JSON records")
            add("client_avro", asyncio.run(produce(boot, ta, n, enc_avro)))
            add("client_json", asyncio.run(produce(boot, tj, n, orjson.dumps)))
            progress(f"run {run + 1}/{runs}: client consume")
            add("client_avro_in", asyncio.run(consume(boot, ta, n + 100, de)))
            add("client_json_in", asyncio.run(consume(boot, tj, n + 100, orjson.loads)))
            # REST v2 against the same schema id (registered under the Avro topic's subject;
            # a schema id is valid for any topic).
            progress(f"run {run + 1}/{runs}: REST v2 produce, {n_rest} records each")
            add("rest_avro", asyncio.run(rest_produce(url, ra, n_rest, "avro", sid)))
            add("rest_json", asyncio.run(rest_produce(url, rj, n_rest, "json", None)))
            progress(f"run {run + 1}/{runs}: REST v2 consumer instances")
            total = n_rest + REST_BATCH
            add("rest_avro_in", asyncio.run(rest_consume(url, ra, total, "avro", f"ga-{run}")))
            add("rest_json_in", asyncio.run(rest_consume(url, rj, total, "json", f"gj-{run}")))
        progress(f"Spark: the Avro topic ({n + 100} records) into columns, against an Avro file")
        sp = spark_read(boot, f"avro-{runs - 1}", n + 100, root, runs)
    finally:
        brokers.stop_all()
        q.stop_all()
        shutil.rmtree(root, ignore_errors=True)

    params = {"fields": 10, "partitions": PARTITIONS, "rf": 3, "acks": "all"}
    figure(
        "schemas.client.produce",
        "records/s",
        fig["client_avro"],
        baseline="the same records as JSON (orjson.dumps), same client and cluster",
        baseline_values=fig["client_json"],
        params={**params, "records": n, "chunk": CHUNK, "goal_ratio": 0.5},
    )
    figure(
        "schemas.client.consume",
        "records/s",
        fig["client_avro_in"],
        baseline="the same records as JSON, decoded with orjson.loads",
        baseline_values=fig["client_json_in"],
        params={**params, "records": n},
    )
    figure(
        "schemas.rest_v2.produce",
        "records/s",
        fig["rest_avro"],
        baseline="REST v2 json embedded format, the same records",
        baseline_values=fig["rest_json"],
        params={
            **params,
            "records": n_rest,
            "per_request": REST_BATCH,
            "in_flight": REST_IN_FLIGHT,
        },
    )
    figure(
        "schemas.rest_v2.consume",
        "records/s",
        fig["rest_avro_in"],
        baseline="a v2 consumer instance with format json, the same records",
        baseline_values=fig["rest_json_in"],
        params={**params, "records": n_rest},
    )
    figure(
        "schemas.spark.read",
        "rows/s",
        sp["avro"],
        baseline="the same rows (the value struct) from an Avro container file read with "
        "Spark's own Avro data source (format AvroFileFormat)",
        baseline_values=sp["avro_file"],
        params={
            **params,
            "records": n + 100,
            "spark": "local[2], noop sink",
            "binary_rows_per_s": round(statistics.median(sp["binary"]), 1),
            "parquet_rows_per_s": round(statistics.median(sp["parquet"]), 1),
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
