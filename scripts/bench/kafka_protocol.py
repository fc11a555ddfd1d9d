#!/usr/bin/env python3
"""librdkafka against Longboat's Kafka listener and against Apache Kafka 4.4, in one run
(JSON lines on stdout, progress on stderr: _report.py).

Both clusters have 3 brokers on this machine and one topic of 6 partitions with RF 3 and
``min.insync.replicas=2``; the clusters run one after the other, never together (2 cores).
Longboat: 1 controller and 3 broker processes with ``kafka_listen``. Kafka: 3 nodes in
KRaft combined mode (``process.roles=broker,controller``), started from the Maven Central jars
(``scripts/setup-kafka-java.sh``) as ``kafka.Kafka`` after ``StorageTool format``, each with
``-Xmx512m``. Each cluster first takes an unmeasured produce and consume of the same size (a
JVM compiles its hot paths in its first seconds). Figures (100-byte records):

* ``kafka_protocol.produce``: kcat (librdkafka's C client: the same library confluent-kafka
  wraps) producing with ``acks=all`` and idempotence (``linger.ms=5``, ``batch.size=1 MiB``),
  records/s, Longboat against Kafka; every record must land (end offsets checked). kcat and
  not confluent-kafka's Python ``produce()`` loop, which on this machine enqueues only
  150,000-250,000 records/s and would measure itself, not the brokers.
* ``kafka_protocol.produce_mb``: the same in MB/s of record values.
* ``kafka_protocol.produce_cpu_s_per_m``: CPU-seconds (user + system, ``/proc/PID/stat``) the
  cluster's processes used during that produce, per million records: Longboat's 3 brokers and
  its controller against Kafka's 3 combined nodes; lower is better. On two cores shared with
  kcat this, more than the rate, is what one change against another is judged by: the rate
  moves with whatever else the machine runs.
* ``kafka_protocol.consume``: one kcat consumer reading the topic from the start.
* ``kafka_protocol.latency_p50`` / ``_p99``: confluent-kafka producing one record at a time at
  a fixed 1,000 records/s (``linger.ms=0``), ms from ``produce()`` to its delivery report.
* ``kafka_protocol.python_client``: Longboat's own Python client (``AsyncProducer.send_batch``,
  acks=all, idempotent) to the same Longboat topic, against kcat on Longboat: the reference
  the Kafka path is measured against.
* ``kafka_protocol.http_json``: the HTTP path to the same topic, REST Proxy v3 JSON produce
  (``POST .../records``, 1,000 JSON records of ~100 bytes a request, ``acks=all``, 64
  requests in flight to the partitions' leaders: ``http_produce.py``'s ``json1000`` load) for
  a fixed time, against kcat on Longboat.

``--quick``: 300,000 records, one run; ``--smoke``: 20,000 records; full: 2,000,000, three
runs. ``--skip-kafka`` measures Longboat alone (the Kafka figures then have no baseline).

Usage: python scripts/bench/kafka_protocol.py [--quick | --smoke] [--skip-kafka]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from _report import add_size_flags, figure, progress, size
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from api.client import AsyncProducer
from api.node.localcluster import Brokers, Quorum, free_ports

# The Apache Kafka cluster helper lives with the tests that share it; the repository root is
# not on the path when a benchmark is run as a script outside scripts/_env.sh.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.integration.kafka.apache_kafka import KafkaCluster, kafka_jars

REPO = Path(__file__).resolve().parents[2]
RECORD = 100
VALUE = b"x" * RECORD
PARTITIONS = 6
LATENCY_RATE = 1000.0
KAFKA_HEAP = "-Xmx512m"


# ----------------------------------------------------------------------------- clients


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics(
        [NewTopic(name, partitions, 3, config={"min.insync.replicas": "2"})],
        operation_timeout=30,
    )[name]
    fut.result(timeout=60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        t = admin.list_topics(name, timeout=5).topics.get(name)
        if (
            t is not None
            and t.error is None
            and len(t.partitions) == partitions
            and all(p.leader >= 0 and len(p.isrs) == 3 for p in t.partitions.values())
        ):
            return
        time.sleep(0.2)
    raise RuntimeError(f"{name}: no leaders with full ISRs after 60 s")


def kcat_path() -> str:
    path = shutil.which("kcat")
    if path is None:
        subprocess.run([str(REPO / "scripts" / "setup-kafka-clients.sh")], check=True, timeout=600)
        path = shutil.which("kcat")
    if path is None:
        raise RuntimeError("kcat is missing and scripts/setup-kafka-clients.sh did not install it")
    return path


def end_offsets(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> int:
    """The sum of the topic's end offsets; retried while leadership settles (a new topic's
    leaders may not know it yet when Metadata already names them)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-unused"})
    deadline = time.monotonic() + 30
    try:
        while True:
            try:
                return sum(
                    c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                    for p in range(partitions)
                )
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        c.close()


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU-seconds of these processes so far (fields 14 and 15 of
    /proc/PID/stat)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / tick


def produce_rate(
    bootstrap: str, topic: str, n: int, records: Path, cpu: dict[str, Any] | None = None
) -> float:
    """Records/s of n idempotent acks=all records through kcat (librdkafka's own C
    client, reading one record a line from ``records``); all must land. With ``cpu``
    (``{"pids": [...]}``: the cluster's processes), ``cpu["seconds"]`` is set to the
    CPU-seconds those processes used while kcat ran."""
    before = end_offsets(bootstrap, topic)
    cpu0 = cpu_seconds(cpu["pids"]) if cpu is not None else 0.0
    t0 = time.perf_counter()
    subprocess.run(
        [
            kcat_path(),
            "-P",
            "-b",
            bootstrap,
            "-t",
            topic,
            "-X",
            "acks=all",
            "-X",
            "enable.idempotence=true",
            "-X",
            "linger.ms=5",
            "-X",
            f"batch.size={1 << 20}",
            "-X",
            "queue.buffering.max.messages=2000000",
            "-l",
            str(records),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    dt = time.perf_counter() - t0
    if cpu is not None:
        cpu["seconds"] = cpu_seconds(cpu["pids"]) - cpu0
    landed = end_offsets(bootstrap, topic) - before
    if landed != n:
        raise RuntimeError(f"{landed} of {n} records landed")
    return n / dt


def kcat_consume(bootstrap: str, topic: str, n: int, *, timeout_s: float = 600) -> float:
    """Seconds one kcat consumer takes to read n records from the start of every partition
    (an error if fewer come)."""
    t0 = time.perf_counter()
    out = subprocess.run(
        [
            kcat_path(),
            "-C",
            "-b",
            bootstrap,
            "-t",
            topic,
            "-o",
            "beginning",
            "-e",
            "-q",
            "-c",
            str(n),
            "-f",
            "%o\\n",
            "-X",
            f"fetch.max.bytes={8 << 20}",
            # Room for the whole read in librdkafka's queue: past queued.min.messages
            # (100,000) or queued.max.messages.kbytes (64 MiB) it stops fetching and looks
            # again only on its 1 s timer (fetch.queue.backoff.ms in later versions), so a
            # broker faster than kcat prints was measured as ~1 s stalls (1,000,000
            # records: 1.1-4.1 s against 0.3 s with this room).
            "-X",
            "queued.min.messages=10000000",
            "-X",
            "queued.max.messages.kbytes=2097151",
        ],
        check=True,
        capture_output=True,
        timeout=timeout_s,
    )
    dt = time.perf_counter() - t0
    got = out.stdout.count(b"\n")
    if got < n:
        raise RuntimeError(f"consumed {got} of {n}")
    return dt


def consume_rate(bootstrap: str, topic: str, n: int) -> float:
    """Records/s of one kcat consumer reading n records from the start of every partition."""
    return n / kcat_consume(bootstrap, topic, n)


def latencies_ms(bootstrap: str, topic: str, n: int) -> list[float]:
    p = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 0}
    )
    p.produce(topic, VALUE)
    p.flush(30)
    out: list[float] = []

    def report(t: float) -> Callable[[Any, Any], None]:
        def done(err: Any, _msg: Any) -> None:
            if err is None:
                out.append((time.perf_counter() - t) * 1000)

        return done

    start = time.perf_counter()
    for i in range(n):
        delay = start + i / LATENCY_RATE - time.perf_counter()
        if delay > 0:
            p.poll(delay)
        p.produce(topic, VALUE, on_delivery=report(time.perf_counter()))
        p.poll(0)
    p.flush(30)
    return out


def http_json_rate(brokers: Brokers, topic: str, seconds: float) -> float:
    """Records/s of REST Proxy v3 JSON produce to ``topic``'s partition leaders for
    ``seconds`` (``http_produce.py``'s load and bodies, acks=all)."""
    import uvloop
    from http_produce import bodies, load

    base = brokers.url(brokers.ids[0])
    cid = _http_get(f"{base}/v3/clusters")["data"][0]["cluster_id"]
    parts = _http_get(f"{base}/v3/clusters/{cid}/topics/{topic}/partitions")["data"]
    targets = []
    for part in parts:
        p = int(part["partition_id"])
        body, ctype, _ = bodies(p)["json1000"]
        leader = brokers.url(int(part["leader_id"]))
        targets.append((f"{leader}/v3/clusters/{cid}/topics/{topic}/records?acks=all", body, ctype))
    rate, _lat, _ends = uvloop.run(load(targets, 1000, seconds))
    return rate


def _http_get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as r:
        return orjson.loads(r.read())


async def python_client_rate(bootstrap: list[str], topic: str, n: int) -> float:
    chunk = 10_000
    async with AsyncProducer(
        bootstrap,
        acks="all",
        enable_idempotence=True,
        linger_ms=2,
        batch_size=1 << 20,
        buffer_memory=256 << 20,
    ) as p:
        await p.send_batch(topic, [VALUE] * 1000)
        await p.flush()
        t0 = time.perf_counter()
        futs = [await p.send_batch(topic, [VALUE] * chunk) for _ in range(max(n // chunk, 1))]
        await asyncio.gather(*futs)
        return max(n // chunk, 1) * chunk / (time.perf_counter() - t0)


def percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(int(q * len(s)), len(s) - 1)]


# ----------------------------------------------------------------------------- clusters


# The Kafka cluster (and its jars) is tests/integration/kafka/apache_kafka.py's, shared with
# the differential tests.


# ----------------------------------------------------------------------------- main


def warm_up(name: str, bootstrap: str, records: Path, n: int) -> None:
    """A first produce and consume that is not measured: Kafka's JVMs compile their hot
    paths in the first seconds, and a long-running broker is what is being compared."""
    progress(f"{name}: warm-up, {n} records")
    create_topic(bootstrap, "warm-up")
    produce_rate(bootstrap, "warm-up", n, records)
    consume_rate(bootstrap, "warm-up", n)


def measure(
    name: str,
    bootstrap: str,
    run: int,
    n: int,
    records: Path,
    add: Callable[[str, float], None],
    pids: list[int],
) -> None:
    topic = f"bench-{run}"
    create_topic(bootstrap, topic)
    progress(f"{name} run {run + 1}: kcat (librdkafka) produce, {n} records")
    cpu: dict[str, Any] = {"pids": pids}
    rate = produce_rate(bootstrap, topic, n, records, cpu)
    add(f"{name}.produce", rate)
    add(f"{name}.produce_cpu", cpu["seconds"] / (n / 1e6))
    progress(
        f"{name} run {run + 1}: {rate:,.0f} records/s, "
        f"{cpu['seconds'] / (n / 1e6):.2f} CPU-s per million records"
    )
    progress(f"{name} run {run + 1}: kcat (librdkafka) consume")
    rate = consume_rate(bootstrap, topic, n)
    add(f"{name}.consume", rate)
    progress(f"{name} run {run + 1}: consumed {rate:,.0f} records/s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_size_flags(ap)
    ap.add_argument("--skip-kafka", action="store_true", help="Longboat alone (no Java)")
    args = ap.parse_args()
    n, runs, samples, http_s = {
        "smoke": (20_000, 1, 200, 0.5),
        "quick": (300_000, 1, 2000, 2.0),
        "full": (2_000_000, 3, 5000, 5.0),
    }[size(args)]
    root = Path(tempfile.mkdtemp(prefix="longboat-bench-kafka-"))
    figures: dict[str, list[float]] = {}
    lat: dict[str, list[float]] = {}

    def add(name: str, v: float) -> None:
        figures.setdefault(name, []).append(v)

    jars = None if args.skip_kafka else kafka_jars()
    kcat_path()
    records = root / "records.txt"
    records.write_bytes((VALUE + b"\n") * n)
    q = Quorum(root / "longboat", 1)
    brokers = Brokers(root / "longboat", q, 3, kafka_ports=free_ports(3))
    try:
        progress("starting Longboat: 1 controller, 3 brokers")
        q.start_all()
        brokers.start_all()
        brokers.wait_ready(timeout_s=90)
        boot = ",".join(f"127.0.0.1:{p}" for p in brokers.kafka_ports.values())
        warm_up("longboat", boot, records, n)
        for run in range(runs):
            pids = [p.pid for p in (*brokers.procs.values(), *q.procs.values())]
            measure("longboat", boot, run, n, records, add, pids)
            progress(f"longboat run {run + 1}: Python client send_batch, {n} records")
            http = [brokers.url(b) for b in brokers.ids]
            add("longboat.python", asyncio.run(python_client_rate(http, f"bench-{run}", n)))
            progress(f"longboat run {run + 1}: HTTP JSON produce for {http_s} s")
            add("longboat.http_json", http_json_rate(brokers, f"bench-{run}", http_s))
        progress(f"longboat: latency at {LATENCY_RATE:.0f} records/s")
        lat["longboat"] = latencies_ms(boot, "bench-0", samples)
    finally:
        brokers.stop_all()
        q.stop_all()

    if jars is not None:
        kc = KafkaCluster(root / "kafka", jars, nodes=3, heap=KAFKA_HEAP)
        try:
            progress("starting Apache Kafka 4.4: 3 KRaft nodes")
            kc.start()
            warm_up("kafka", kc.bootstrap, records, n)
            for run in range(runs):
                measure("kafka", kc.bootstrap, run, n, records, add, [p.pid for p in kc.procs])
            progress(f"kafka: latency at {LATENCY_RATE:.0f} records/s")
            lat["kafka"] = latencies_ms(kc.bootstrap, "bench-0", samples)
        finally:
            kc.stop()
    shutil.rmtree(root, ignore_errors=True)

    params = {
        "record_bytes": RECORD,
        "records": n,
        "partitions": PARTITIONS,
        "replication_factor": 3,
        "min_insync_replicas": 2,
        "client": "kcat (librdkafka), acks=all, idempotent, linger.ms=5",
    }
    kafka = jars is not None
    base = "Apache Kafka 4.4, 3 KRaft nodes, same client, same run"
    figure(
        "kafka_protocol.produce",
        "records/s",
        figures["longboat.produce"],
        baseline=base if kafka else None,
        baseline_values=figures.get("kafka.produce") if kafka else None,
        params=params,
    )
    figure(
        "kafka_protocol.produce_mb",
        "MB/s",
        [v * RECORD / 1e6 for v in figures["longboat.produce"]],
        baseline=base if kafka else None,
        baseline_values=[v * RECORD / 1e6 for v in figures["kafka.produce"]] if kafka else None,
        params=params,
    )
    figure(
        "kafka_protocol.produce_cpu_s_per_m",
        "s",  # CPU-seconds of the cluster's processes per million records produced
        figures["longboat.produce_cpu"],
        baseline=base if kafka else None,
        baseline_values=figures.get("kafka.produce_cpu") if kafka else None,
        higher_is_better=False,
        params={**params, "processes": "Longboat: 3 brokers + 1 controller; Kafka: 3 nodes"},
    )
    figure(
        "kafka_protocol.consume",
        "records/s",
        figures["longboat.consume"],
        baseline=base if kafka else None,
        baseline_values=figures.get("kafka.consume") if kafka else None,
        params=params,
    )
    lparams = {
        **params,
        "client": "confluent-kafka (librdkafka), acks=all, idempotent, linger.ms=0",
        "rate_per_s": LATENCY_RATE,
        "samples": samples,
    }
    for q_name, qv in (("p50", 0.5), ("p99", 0.99)):
        figure(
            f"kafka_protocol.latency_{q_name}",
            "ms",
            [percentile(lat["longboat"], qv)],
            baseline=base if kafka else None,
            baseline_values=[percentile(lat["kafka"], qv)] if kafka else None,
            higher_is_better=False,
            params=lparams,
        )
    figure(
        "kafka_protocol.http_json",
        "records/s",
        figures["longboat.http_json"],
        baseline="kcat (librdkafka) on Longboat's Kafka listener, same cluster and run",
        baseline_values=figures["longboat.produce"],
        params={
            **params,
            "client": "REST Proxy v3 JSON produce, 1,000 records a request, acks=all, "
            "64 requests in flight (http_produce.py's json1000 load)",
            "seconds": http_s,
        },
    )
    figure(
        "kafka_protocol.python_client",
        "records/s",
        figures["longboat.python"],
        baseline="kcat (librdkafka) on Longboat's Kafka listener, same cluster and run",
        baseline_values=figures["longboat.produce"],
        params={**params, "client": "api.client.AsyncProducer.send_batch, acks=all, idempotent"},
    )
    progress(
        "medians: "
        + ", ".join(f"{k} {statistics.median(v):,.0f}" for k, v in sorted(figures.items()))
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
