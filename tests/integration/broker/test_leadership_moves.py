"""Leadership across a broker's controlled shutdown and return, with real processes and the
Python client: SIGTERM moves every leadership away before the broker stops while acks=all
produce carries on; the restarted broker catches up, rejoins every ISR, and the controller's
preferred-leader rebalance gives it back the partitions it is preferred for.

Short timings through ``--override`` (session 4 s, heartbeats 0.5 s, rebalance every 1 s).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from api.client import AsyncConsumer, AsyncProducer, TopicPartition
from api.node.localcluster import Brokers, Quorum, running_cluster, wait_for
from metalog.client import ControllerClient
from metalog.commands import CreateTopic

pytestmark = pytest.mark.slow

TOPIC = "moves"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Quorum, Brokers]]:
    root: Path = tmp_path_factory.mktemp("moves-cluster")
    with running_cluster(
        root,
        controller_args=[
            "--override",
            "leader_imbalance_check_interval_ms=1000",
            "--override",
            "broker_session_timeout_ms=4000",
        ],
        broker_args=["--override", "broker_heartbeat_interval_ms=500"],
    ) as cluster:
        yield cluster


def partitions(b: Brokers, via: int) -> list[dict[str, Any]]:
    for t in b.metadata(via)["topics"]:
        if t["name"] == TOPIC:
            return list(t["partitions"])
    return []


def test_controlled_shutdown_rejoin_and_preferred_leaders(cluster: tuple[Quorum, Brokers]) -> None:
    q, b = cluster

    async def create() -> None:
        async with ControllerClient(q.urls, timeout_s=20) as cc:
            await cc.execute(
                CreateTopic(
                    name=TOPIC,
                    num_partitions=3,
                    replication_factor=3,
                    configs={"min.insync.replicas": "2"},
                )
            )

    asyncio.run(create())
    watcher = b.ids[0]

    def settled() -> list[dict[str, Any]] | None:
        ps = partitions(b, watcher)
        ok = ps and all(p["leader"] == p["replicas"][0] and len(p["isr"]) == 3 for p in ps)
        return ps if ok else None

    ps = wait_for("preferred leaders with full ISRs", settled, 30)
    victim = next(p["leader"] for p in ps if p["leader"] != watcher)
    led = [p["partition"] for p in ps if p["replicas"][0] == victim]
    boot = [b.url(x) for x in b.ids]

    async def produce_through_shutdown() -> list[int]:
        async with AsyncProducer(boot, linger_ms=1, request_timeout_ms=5000) as p:
            futs = []
            for i in range(600):
                futs.append(await p.send(TOPIC, str(i).encode(), partition=i % 3))
                if i == 200:
                    b.send_signal(victim, signal.SIGTERM)  # controlled shutdown, mid-stream
                await asyncio.sleep(0.005)
            return [(await f).offset for f in futs]

    offsets = asyncio.run(produce_through_shutdown())
    assert len(offsets) == 600  # every record acknowledged: no partition went unavailable
    assert b.procs[victim].wait(timeout=30) == 0  # the controller confirmed the shutdown
    del b.procs[victim]
    after = partitions(b, watcher)
    assert all(p["leader"] != victim for p in after), after
    assert all(victim not in p["isr"] for p in after), after

    b.start(victim)
    wait_for("the restarted broker leading its preferred partitions again", settled, 60)

    async def read_back() -> dict[int, list[bytes | None]]:
        async with AsyncConsumer(boot, auto_offset_reset="earliest") as c:
            tps = [TopicPartition(TOPIC, p) for p in range(3)]
            c.assign(tps)
            out: dict[int, list[bytes | None]] = {0: [], 1: [], 2: []}
            while sum(len(v) for v in out.values()) < 600:
                recs = await c.poll(5000)
                assert recs
                for r in recs:
                    out[r.partition].append(r.value)
            return out

    got = asyncio.run(read_back())
    for p in range(3):
        assert got[p] == [str(i).encode() for i in range(p, 600, 3)]
    assert led  # the victim was preferred for at least the partition it led
