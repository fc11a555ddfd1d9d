#!/usr/bin/env python3
"""Transactions: what a transactional producer costs against an idempotent one (Longboat's
Python client; librdkafka on Longboat and on Apache Kafka 4.4, the peer), and what a
read_committed consumer costs against a read_uncommitted one, in one run (JSON lines on
stdout, progress on stderr: _report.py).

A real cluster (1 controller, 3 brokers, started and stopped here) holds a topic of 3
partitions, RF 3, min.insync.replicas 2; records are 100 bytes, acks=all, through the Python
client (``api.client.AsyncProducer``, bulk ``send_batch``, each chunk spread over the three
partitions). Within a run the producers take turns for the same duration:

* ``txn.produce.n10`` / ``n100`` / ``n1000``: a transactional producer running transactions
  of 10, 100 and 1,000 records back to back (begin, send, commit), records/s against the
  idempotent producer sending the same chunks with 4 in flight (its baseline value is the
  same in the four figures: one measurement per run).
* ``txn.produce.n1000.p4``: four transactional producers (four transactional ids, as four
  Kafka Streams tasks would have), each running transactions of 1,000 records back to back,
  their records/s summed, against the same baseline: the idempotent producer keeps four
  chunks of 1,000 in flight, so this compares the two at the same records in flight. One
  transactional producer is a chain of replicated writes with one transaction in flight;
  ``n1000`` measures that.
* ``txn.produce.commit_100ms``: a transactional producer sending as the idempotent one does
  and committing every 100 ms (Kafka's benchmark setting: transactions as long as the commit
  interval), against the same baseline.
* ``txn.commit_ms.n10``: the time of one transaction of 10 records (begin to commit
  answered), ms, against one idempotent send of 10 records waited for.
* ``consume.read_committed``: a consumer reading the whole topic (transactional records,
  their markers and the idempotent records) at read_committed, records/s against the same
  read at read_uncommitted.

The same workload through a Kafka client, on Longboat and on Apache Kafka itself (the peer):
confluent-kafka (librdkafka) produces 100-byte records, acks=all, idempotent, ``linger.ms`` 5,
spread over three partitions in turn, to a topic of 3 partitions, RF 3,
``min.insync.replicas`` 2 (a topic per phase). First to Longboat's Kafka listener on the same
cluster, then, with that cluster stopped (one at a time: 2 cores), to Apache Kafka 4.4: three
KRaft nodes in combined mode from the Maven Central jars (``scripts/setup-kafka-java.sh``;
``tests/integration/kafka/apache_kafka.py``), each with ``-Xmx512m``, 6 partitions of
``__transaction_state`` as Longboat's, everything else Kafka's defaults. Each cluster first
takes an unmeasured idempotent and transactional run (a JVM compiles its hot paths in its
first seconds). Per cluster, records/s against the same client's idempotent producer on the
same cluster in the same run (run before and after the transactional phases: the median of
both):

* ``txn.rdkafka.<cluster>.n10`` / ``n100`` / ``n1000``: transactions of that many records
  back to back (``begin_transaction``, ``produce``, ``commit_transaction``);
* ``txn.rdkafka.<cluster>.commit_100ms``: producing as the idempotent producer does and
  committing every 100 ms;

with ``<cluster>`` ``longboat`` or ``kafka``; and Longboat against Kafka, the same client:

* ``txn.rdkafka.idempotent.vs_kafka``: the idempotent producers' records/s;
* ``txn.rdkafka.n1000.vs_kafka``: transactions of 1,000 records, records/s.

Every phase's topic is read back at read_committed and must hold exactly the records sent, so
a run that lost, aborted or duplicated records fails instead of printing a rate.
``--skip-kafka`` leaves out Apache Kafka (so does ``--smoke``, unless given ``--kafka``): its
figures are not printed and the two ``vs_kafka`` figures have no baseline.

Goal (issue 19): transactions of 1,000 records at >= 0.8 of the idempotent rate.

Full: 8 s per producer, 3 runs; ``--quick``: 3 s, one run (about 2 minutes with Apache Kafka,
1 without); ``--smoke``: 0.5 s, one run, no Apache Kafka unless ``--kafka``.

Usage: python scripts/bench/transactions.py [--quick | --smoke] [--skip-kafka | --kafka]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from _report import add_size_flags, figure, progress, size
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from kafka_protocol import create_topic

from api.client import AsyncConsumer, AsyncProducer, TopicPartition
from api.node.localcluster import running_cluster
from metalog.client import ControllerClient
from metalog.commands import CreateTopic
from tests.integration.kafka.apache_kafka import KafkaCluster, kafka_jars

TOPIC = "bench-txn"
PARTITIONS = 3
RECORD = b"x" * 100
CHUNK = 1_000
"""Records per ``send_batch`` round of the idempotent producer (and of commit_100ms)."""
IN_FLIGHT = 4
SIZES = (10, 100, 1_000)
DURATION_S = {"full": 8.0, "quick": 3.0, "smoke": 0.5}
RUNS = {"full": 3, "quick": 1, "smoke": 1}


async def send_spread(p: AsyncProducer, n: int) -> asyncio.Future[object]:
    """``n`` records over the partitions (as even as can be): one future for all."""
    futures = []
    for part in range(PARTITIONS):
        k = n // PARTITIONS + (1 if part < n % PARTITIONS else 0)
        if k:
            futures.append(await p.send_batch(TOPIC, [RECORD] * k, partition=part))
    return asyncio.ensure_future(asyncio.gather(*futures))


async def timed(duration_s: float, step: Callable[[], Awaitable[int]]) -> float:
    """Run ``step`` (it returns the records it wrote) until ``duration_s`` has passed:
    records/s."""
    count = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < duration_s:
        count += await step()
    return count / (time.perf_counter() - t0)


async def idempotent_rate(bootstrap: list[str], duration_s: float) -> float:
    async with AsyncProducer(bootstrap, linger_ms=0) as p:
        window: list[asyncio.Future[object]] = []
        count = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < duration_s:
            window.append(await send_spread(p, CHUNK))
            count += CHUNK
            if len(window) >= IN_FLIGHT:
                await window.pop(0)
        await asyncio.gather(*window)
        return count / (time.perf_counter() - t0)


async def txn_rate(bootstrap: list[str], tid: str, n: int, duration_s: float) -> float:
    async with AsyncProducer(bootstrap, transactional_id=tid, linger_ms=0) as p:
        await p.init_transactions()

        async def one() -> int:
            p.begin_transaction()
            await send_spread(p, n)
            await p.commit_transaction()
            return n

        await one()  # warm: partitions' leaders and the coordinator known
        return await timed(duration_s, one)


async def txn_rate_parallel(
    bootstrap: list[str], tid: str, n: int, producers: int, duration_s: float
) -> float:
    """``producers`` transactional producers of their own ids side by side: summed records/s."""
    rates = await asyncio.gather(
        *(txn_rate(bootstrap, f"{tid}-{i}", n, duration_s) for i in range(producers))
    )
    return sum(rates)


async def txn_interval_rate(bootstrap: list[str], tid: str, duration_s: float) -> float:
    """Send as the idempotent producer does; commit every 100 ms."""
    async with AsyncProducer(bootstrap, transactional_id=tid, linger_ms=0) as p:
        await p.init_transactions()
        count = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < duration_s:
            p.begin_transaction()
            began = time.perf_counter()
            window: list[asyncio.Future[object]] = []
            while time.perf_counter() - began < 0.1:
                window.append(await send_spread(p, CHUNK))
                count += CHUNK
                if len(window) >= IN_FLIGHT:
                    await window.pop(0)
            await p.commit_transaction()  # flushes the window
        return count / (time.perf_counter() - t0)


async def latencies_ms(bootstrap: list[str], tid: str, count: int) -> tuple[float, float]:
    """Median ms of a transaction of 10 records, and of 10 idempotent records waited for."""
    txn: list[float] = []
    plain: list[float] = []
    async with AsyncProducer(bootstrap, transactional_id=tid, linger_ms=0) as p:
        await p.init_transactions()
        for _ in range(count + 1):
            t0 = time.perf_counter()
            p.begin_transaction()
            await send_spread(p, 10)
            await p.commit_transaction()
            txn.append((time.perf_counter() - t0) * 1000)
    async with AsyncProducer(bootstrap, linger_ms=0) as p:
        for _ in range(count + 1):
            t0 = time.perf_counter()
            await (await send_spread(p, 10))
            plain.append((time.perf_counter() - t0) * 1000)
    txn, plain = sorted(txn[1:]), sorted(plain[1:])
    return txn[len(txn) // 2], plain[len(plain) // 2]


async def consume_rate(bootstrap: list[str], level: str) -> float:
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    async with AsyncConsumer(bootstrap, isolation_level=level) as c:
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        ends = await c.end_offsets(tps)
        count = 0
        t0 = time.perf_counter()
        while True:
            count += len(await c.poll(1000))
            positions = [await c.position(tp) for tp in tps]
            if all(pos >= ends[tp] for pos, tp in zip(positions, tps, strict=True)):
                break
        return count / (time.perf_counter() - t0)


async def bench(bootstrap: list[str], voters: list[str], sz: str) -> None:
    async with ControllerClient(voters, timeout_s=30) as cc:
        await cc.execute(
            CreateTopic(
                name=TOPIC,
                num_partitions=PARTITIONS,
                replication_factor=3,
                configs={"min.insync.replicas": "2"},
            )
        )
    duration_s, runs = DURATION_S[sz], RUNS[sz]
    idem: list[float] = []
    txn: dict[int, list[float]] = {n: [] for n in SIZES}
    interval: list[float] = []
    parallel: list[float] = []
    for run in range(runs):
        progress(f"run {run + 1}/{runs}: idempotent")
        idem.append(await idempotent_rate(bootstrap, duration_s))
        for n in SIZES:
            progress(f"run {run + 1}/{runs}: transactions of {n}")
            txn[n].append(await txn_rate(bootstrap, f"bench-{n}", n, duration_s))
        progress(f"run {run + 1}/{runs}: {IN_FLIGHT} producers, transactions of {CHUNK}")
        parallel.append(
            await txn_rate_parallel(bootstrap, "bench-par", CHUNK, IN_FLIGHT, duration_s)
        )
        progress(f"run {run + 1}/{runs}: commit every 100 ms")
        interval.append(await txn_interval_rate(bootstrap, "bench-interval", duration_s))
    params = {
        "brokers": 3,
        "partitions": PARTITIONS,
        "rf": 3,
        "record_bytes": len(RECORD),
        "duration_s": duration_s,
    }
    base = "idempotent producer, same chunks, 4 in flight"
    for n in SIZES:
        figure(
            f"txn.produce.n{n}",
            "records/s",
            txn[n],
            baseline=base,
            baseline_values=idem,
            params={**params, "records_per_txn": n},
        )
    figure(
        f"txn.produce.n{CHUNK}.p{IN_FLIGHT}",
        "records/s",
        parallel,
        baseline=base,
        baseline_values=idem,
        params={**params, "records_per_txn": CHUNK, "producers": IN_FLIGHT},
    )
    figure(
        "txn.produce.commit_100ms",
        "records/s",
        interval,
        baseline=base,
        baseline_values=idem,
        params={**params, "commit_interval_ms": 100},
    )
    progress("latency of a transaction of 10")
    lat_txn, lat_plain = [], []
    for _ in range(runs):
        t, b = await latencies_ms(bootstrap, "bench-lat", 10 if sz == "smoke" else 50)
        lat_txn.append(t)
        lat_plain.append(b)
    figure(
        "txn.commit_ms.n10",
        "ms",
        lat_txn,
        baseline="10 idempotent records sent and waited for",
        baseline_values=lat_plain,
        higher_is_better=False,
        params=params,
    )
    progress("consumers")
    rc, ru = [], []
    for _ in range(runs):
        ru.append(await consume_rate(bootstrap, "read_uncommitted"))
        rc.append(await consume_rate(bootstrap, "read_committed"))
    figure(
        "consume.read_committed",
        "records/s",
        rc,
        baseline="the same read at read_uncommitted",
        baseline_values=ru,
        params=params,
    )


# ------------------------------------------------- librdkafka on both clusters (the peer)

RD_PREFIX = "txn.rdkafka"
TXN_PHASES: dict[str, int | None] = {f"n{n}": n for n in SIZES} | {"commit_100ms": None}
"""librdkafka's transactional phases: records per transaction, None to commit every 100 ms."""
KAFKA_HEAP = "-Xmx512m"
# Apache Kafka's settings beside its default ones: the same internal-topic layout as
# Longboat's (6 partitions of __transaction_state, RF 3, min ISR 2) and no auto-creation
# (apache_kafka.KafkaCluster).
KAFKA_PROPS = {"transaction.state.log.num.partitions": "6"}


def rd_config(bootstrap: str, **extra: object) -> dict[str, object]:
    """The producer both clusters get: acks=all, idempotent, librdkafka's default linger
    (5 ms) and batch size, stated so that a change of default does not move the figures."""
    return {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "batch.size": 1_000_000,
        **extra,
    }


def rd_produce(p: Producer, topic: str, n: int) -> None:
    """``n`` records spread over the partitions in turn (every transaction touches all
    three, as the Python client's ``send_spread``). A full local queue waits for deliveries
    and retries: ``poll`` serves them as they come instead of emptying the queue first."""
    for i in range(n):
        while True:
            try:
                p.produce(topic, RECORD, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)


def rd_idempotent(bootstrap: str, topic: str, duration_s: float) -> tuple[float, int]:
    """An idempotent producer sending chunks of ``CHUNK`` back to back for ``duration_s``,
    then flushed: records/s (the clock stops when the last is acknowledged), records. A
    record to each partition before the clock starts gets the producer id (InitProducerId,
    which a new Kafka cluster may answer with COORDINATOR_LOAD_IN_PROGRESS for a while) and
    the leaders' connections."""
    p = Producer(rd_config(bootstrap))
    rd_produce(p, topic, PARTITIONS)
    if p.flush(60) != 0:
        raise RuntimeError(f"{topic}: the first records undelivered after 60 s")
    count = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < duration_s:
        rd_produce(p, topic, CHUNK)
        count += CHUNK
    if p.flush(120) != 0:
        raise RuntimeError(f"{topic}: records undelivered after 120 s")
    return count / (time.perf_counter() - t0), count + PARTITIONS


def rd_transactions(
    bootstrap: str, topic: str, tid: str, n: int | None, duration_s: float
) -> tuple[float, int]:
    """A transactional producer for ``duration_s``: transactions of ``n`` records back to
    back, or (``n`` None) sending chunks as ``rd_idempotent`` does and committing every
    100 ms. One transaction before the clock starts finds the coordinator and the leaders.
    Records/s, and every record committed (the first transaction's too)."""
    p = Producer(rd_config(bootstrap, **{"transactional.id": tid}))
    p.init_transactions(60)
    p.begin_transaction()
    rd_produce(p, topic, n or CHUNK)
    p.commit_transaction(60)
    warm = n or CHUNK
    count = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < duration_s:
        p.begin_transaction()
        if n is not None:
            rd_produce(p, topic, n)
            count += n
        else:
            began = time.perf_counter()
            while time.perf_counter() - began < 0.1:
                rd_produce(p, topic, CHUNK)
                count += CHUNK
        p.commit_transaction(60)  # flushes: raises if any record of it failed
    rate = count / (time.perf_counter() - t0)
    return rate, count + warm


def committed_count(bootstrap: str, topic: str, *, timeout_s: float = 60) -> int:
    """Records a read_committed consumer reads from the start of every partition until it
    has seen each partition's end with nothing new after it (a commit's markers follow its
    answer, so an end reached early is read past once they land)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-txn-count-{topic}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            # An end is reported once a fetch comes back empty: wait for data briefly.
            "fetch.wait.max.ms": 50,
        }
    )
    c.assign([KafkaTopicPartition(topic, part, 0) for part in range(PARTITIONS)])
    count = 0
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while len(at_end) < PARTITIONS and time.monotonic() < deadline:
            # consume() waits out its timeout unless it fills the batch: keep it short.
            for m in c.consume(10_000, 0.05):
                err, part = m.error(), m.partition()
                if err is None:
                    count += 1
                    at_end.discard(part or 0)
                elif err.code() == KafkaError._PARTITION_EOF and part is not None:
                    at_end.add(part)
                else:
                    raise RuntimeError(f"{topic}: {err}")
    finally:
        c.close()
    return count


def rd_landed(bootstrap: str, topic: str, sent: int) -> None:
    """Every record the phase counted is readable at read_committed, and no more: a run that
    lost, aborted or duplicated records fails here instead of printing a rate."""
    deadline = time.monotonic() + 60
    while True:
        got = committed_count(bootstrap, topic)
        if got >= sent or time.monotonic() > deadline:
            break
        time.sleep(0.5)  # markers still on their way: read again
    if got != sent:
        raise RuntimeError(f"{topic}: {got} records read at read_committed, {sent} sent")


def rd_bench(name: str, bootstrap: str, sz: str) -> dict[str, list[float]]:
    """librdkafka's idempotent and transactional rates on one cluster: {phase: records/s}.
    The idempotent producer runs before and after the transactional phases (two values a
    run), so that load from other work on the machine falls on the baseline as it falls on
    what it is compared with. Each phase writes its own topic, read back in full."""
    duration_s, runs = DURATION_S[sz], RUNS[sz]
    out: dict[str, list[float]] = {}
    if sz != "smoke":  # a smoke run's figures mean nothing: no need to warm them up
        progress(f"{name}: librdkafka warm-up")
        create_topic(bootstrap, "txn-warm", PARTITIONS)
        rd_idempotent(bootstrap, "txn-warm", min(duration_s, 2.0))
        rd_transactions(bootstrap, "txn-warm", "warm", CHUNK, min(duration_s, 2.0))
    phases = ["idempotent", *TXN_PHASES]
    if sz != "smoke":  # the baseline again after them; a smoke run only checks the figures
        phases.append("idempotent")
    for run in range(runs):
        for i, phase in enumerate(phases):
            topic = f"txn-{run}-{i}-{phase}"
            create_topic(bootstrap, topic, PARTITIONS)
            progress(f"{name} run {run + 1}/{runs}: librdkafka {phase}")
            if phase == "idempotent":
                rate, sent = rd_idempotent(bootstrap, topic, duration_s)
            else:
                tid = f"rd-{run}-{phase}"
                rate, sent = rd_transactions(bootstrap, topic, tid, TXN_PHASES[phase], duration_s)
            rd_landed(bootstrap, topic, sent)
            out.setdefault(phase, []).append(rate)
    return out


def rd_figures(
    longboat: dict[str, list[float]], kafka: dict[str, list[float]] | None, duration_s: float
) -> None:
    params: dict[str, object] = {
        "client": "confluent-kafka 2.16 (librdkafka), acks=all, idempotent, linger.ms=5",
        "partitions": PARTITIONS,
        "rf": 3,
        "min_insync_replicas": 2,
        "record_bytes": len(RECORD),
        "duration_s": duration_s,
    }
    for cluster, rates in (("longboat", longboat), ("kafka", kafka)):
        if rates is None:
            continue
        where = (
            "Longboat's Kafka listener (1 controller, 3 brokers)"
            if cluster == "longboat"
            else f"Apache Kafka 4.4 (3 KRaft nodes, {KAFKA_HEAP})"
        )
        for phase, n in TXN_PHASES.items():
            extra = {"commit_interval_ms": 100} if n is None else {"records_per_txn": n}
            figure(
                f"{RD_PREFIX}.{cluster}.{phase}",
                "records/s",
                rates[phase],
                baseline=f"the same client's idempotent producer, {where}, same run",
                baseline_values=rates["idempotent"],
                params={**params, **extra, "cluster": where},
            )
    peer = "Apache Kafka 4.4, 3 KRaft nodes, same client, same run"
    for phase in ("idempotent", f"n{CHUNK}"):
        figure(
            f"{RD_PREFIX}.{phase}.vs_kafka",
            "records/s",
            longboat[phase],
            baseline=peer if kafka else None,
            baseline_values=kafka[phase] if kafka else None,
            params=params,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_size_flags(ap)
    peer = ap.add_mutually_exclusive_group()
    peer.add_argument("--skip-kafka", action="store_true", help="Longboat alone (no Java)")
    peer.add_argument(
        "--kafka",
        action="store_true",
        help="Apache Kafka too in --smoke (which leaves it out to stay fast)",
    )
    args = ap.parse_args()
    sz = size(args)
    skip_kafka = args.skip_kafka or (sz == "smoke" and not args.kafka)
    jars = None if skip_kafka else kafka_jars()  # fetched before any cluster starts
    with tempfile.TemporaryDirectory(prefix="bench-txn-") as tmp:
        progress("starting 1 controller and 3 brokers")
        # Few __transaction_state partitions: the first InitProducerId creates them all
        # (50 by default), which is start-up cost, not a transaction's.
        with running_cluster(
            Path(tmp),
            controllers=1,
            brokers=3,
            broker_args=["--override", "transaction_state_log_num_partitions=6"],
            kafka=True,
        ) as (q, b):
            bootstrap = [b.url(i) for i in b.ids]
            asyncio.run(bench(bootstrap, q.urls, sz))
            listener = ",".join(f"127.0.0.1:{port}" for port in b.kafka_ports.values())
            longboat = rd_bench("longboat", listener, sz)
        kafka = None
        if jars is not None:
            # One cluster at a time: the two would share 2 cores.
            with KafkaCluster(
                Path(tmp) / "kafka", jars, nodes=3, heap=KAFKA_HEAP, props=KAFKA_PROPS
            ) as kc:
                progress("started Apache Kafka 4.4: 3 KRaft nodes")
                kafka = rd_bench("kafka", kc.bootstrap, sz)
    rd_figures(longboat, kafka, DURATION_S[sz])


if __name__ == "__main__":
    main()
