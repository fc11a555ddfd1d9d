#!/usr/bin/env python3
"""Transactions: what a transactional producer costs against an idempotent one, and what a
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

Goal (issue 19): transactions of 1,000 records at >= 0.8 of the idempotent rate.

Full: 8 s per producer, 3 runs; ``--quick``: 3 s, one run; ``--smoke``: 0.5 s, one run.

Usage: python scripts/bench/transactions.py [--quick | --smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from _report import add_size_flags, figure, progress, size

from api.client import AsyncConsumer, AsyncProducer, TopicPartition
from api.node.localcluster import running_cluster
from metalog.client import ControllerClient
from metalog.commands import CreateTopic

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_size_flags(ap)
    sz = size(ap.parse_args())
    with tempfile.TemporaryDirectory(prefix="bench-txn-") as tmp:
        progress("starting 1 controller and 3 brokers")
        # Few __transaction_state partitions: the first InitProducerId creates them all
        # (50 by default), which is start-up cost, not a transaction's.
        with running_cluster(
            Path(tmp),
            controllers=1,
            brokers=3,
            broker_args=["--override", "transaction_state_log_num_partitions=6"],
        ) as (q, b):
            bootstrap = [b.url(i) for i in b.ids]
            asyncio.run(bench(bootstrap, q.urls, sz))


if __name__ == "__main__":
    main()
