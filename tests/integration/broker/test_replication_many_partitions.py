"""Replication of many partitions with real processes (issue 17, finding 10): one controller,
three brokers, a topic of ``MANY_PARTITIONS`` partitions (1,000 by default) with RF 3 and
``min.insync.replicas`` 2. Every partition gets records with acks=all, every partition keeps
its three replicas in the ISR, and every replica on every broker ends up holding every record
with the HW there (the follower fetcher asks for all partitions of a leader in one request;
the one it replaced held a long poll per partition on 100 connections and stalled here).

Extended tier: creating 1,000 partitions alone takes ~30 s on a loaded 2-core machine.
``MANY_PARTITIONS=200 python -m pytest tests/integration/broker/test_replication_many_partitions.py``
runs a smaller copy.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.request
from pathlib import Path
from typing import Any

import msgpack
import pytest

from api.client import AsyncProducer
from api.node.localcluster import Brokers, running_cluster, wait_for
from metalog.client import ControllerClient
from metalog.commands import CreateTopic
from storage.batch import decode_records, iter_batches

pytestmark = [pytest.mark.slow, pytest.mark.extended]

TOPIC = "many"
N = int(os.environ.get("MANY_PARTITIONS", "1000"))
ROUNDS = 3


def _replicas(b: Brokers, bid: int) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{b.url(bid)}/internal/broker/v1/replicas", timeout=30) as r:
        return [x for x in json.loads(r.read()) if x["topic"] == TOPIC]


def _debug_read(b: Brokers, bid: int, partition: int) -> list[bytes]:
    """Every record value of ``bid``'s own replica (replica_id -2: Kafka's debug reader)."""
    req = urllib.request.Request(
        f"{b.url(bid)}/internal/broker/v1/fetch",
        data=msgpack.packb(
            {
                "topic": TOPIC,
                "partition": partition,
                "replica_id": -2,
                "fetch_offset": 0,
                "max_bytes": 1 << 20,
            }
        ),
        headers={"Content-Type": "application/msgpack"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        data = msgpack.unpackb(r.read(), raw=False)["records"]
    out: list[bytes] = []
    for pos, h in iter_batches(data):
        out += [rec.value or b"" for rec in decode_records(data[pos : pos + h.size])]
    return out


async def _produce_all(boot: list[str], round_: int) -> None:
    async with AsyncProducer(boot, acks=-1, linger_ms=5, delivery_timeout_ms=300_000) as p:
        futs = [await p.send(TOPIC, f"{i}:{round_}".encode(), partition=i) for i in range(N)]
        for f in futs:
            await f


def test_a_thousand_partitions_replicate_with_acks_all(tmp_path: Path) -> None:
    with running_cluster(tmp_path, controllers=1, brokers=3) as (q, b):

        async def create() -> None:
            async with ControllerClient(q.urls, timeout_s=60) as cc:
                await cc.execute(
                    CreateTopic(
                        name=TOPIC,
                        num_partitions=N,
                        replication_factor=3,
                        configs={"min.insync.replicas": "2"},
                    )
                )

        asyncio.run(create())
        wait_for(
            f"{N} replicas on every broker",
            lambda: all(len(_replicas(b, x)) == N for x in b.ids),
            180,
            interval_s=0.5,
        )
        boot = [b.url(x) for x in b.ids]
        for r in range(ROUNDS):
            t0 = time.monotonic()
            asyncio.run(_produce_all(boot, r))
            print(f"round {r}: {N} acks=all records in {time.monotonic() - t0:.2f} s")

        def in_sync() -> bool:
            for x in b.ids:
                for rep in _replicas(b, x):
                    if (
                        rep["log_end_offset"] != ROUNDS
                        or rep["high_watermark"] != ROUNDS
                        or len(rep["isr"]) != 3
                    ):
                        return False
            return True

        t0 = time.monotonic()
        wait_for("every replica holding every record, ISR of 3", in_sync, 120, interval_s=0.5)
        print(f"all {3 * N} replicas in sync {time.monotonic() - t0:.2f} s after the last ack")
        # The records themselves, on every replica of a spread of partitions.
        for p in range(0, N, max(1, N // 25)):
            want = [f"{p}:{r}".encode() for r in range(ROUNDS)]
            for x in b.ids:
                assert _debug_read(b, x, p) == want, (x, p)
