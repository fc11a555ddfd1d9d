"""A broker whose data directory fails (issue 17): real processes, a real client.

Broker 102 leads a partition with three replicas and runs on the lazy file layer, armed
through its control file to fail the next write with EIO. The broker takes its log
directory offline, moves its leadership away (a bounded controlled shutdown) and exits 70
naming the directory; the partition is led elsewhere, the producer rides through, and every
acknowledged record is read back.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from api.client import AsyncConsumer, AsyncProducer, TopicPartition
from api.node.localcluster import Brokers, Quorum, wait_for
from metalog.client import ControllerClient
from metalog.commands import CreateTopic

pytestmark = pytest.mark.slow

FAILING = 102


def _leader(q: Quorum, topic: str) -> int | None:
    for t in q.metadata(q.wait_active_leader())["topics"]:
        if t["name"] == topic:
            return int(t["partitions"][0]["leader"])
    return None


async def _produce(bootstrap: list[str], values: list[bytes]) -> None:
    async with AsyncProducer(bootstrap, linger_ms=1, request_timeout_ms=30_000) as p:
        for v in values:
            await p.send("disk", v, partition=0)
        await p.flush()


async def _read_all(bootstrap: list[str], n: int) -> list[bytes]:
    out: list[bytes] = []
    async with AsyncConsumer(bootstrap, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition("disk", 0)])
        async with asyncio.timeout(30):
            while len(out) < n:
                out += [r.value for r in await c.poll(2000) if r.value is not None]
    return out


def test_a_failed_data_directory_stops_its_broker_and_loses_nothing_acknowledged(
    tmp_path: Path,
) -> None:
    q = Quorum(tmp_path, 3)
    b = Brokers(tmp_path, q, 3)
    control = tmp_path / "lazyfs-control-102"
    b.env[FAILING] = {"LONGBOAT_LAZYFS": "1", "LONGBOAT_LAZYFS_CONTROL": str(control)}
    q.start_all()
    b.start_all()
    try:
        b.wait_ready(timeout_s=60)

        async def create() -> None:
            async with ControllerClient(q.urls, timeout_s=20) as c:
                await c.execute(CreateTopic(name="disk", assignments={0: (102, 101, 103)}))

        asyncio.run(create())
        wait_for("102 leads disk-0", lambda: _leader(q, "disk") == FAILING, 20)
        bootstrap = [b.url(i) for i in b.ids]
        first = [f"a{i}".encode() for i in range(100)]
        asyncio.run(_produce(bootstrap, first))

        tmp = control.with_suffix(".tmp")
        tmp.write_text("fail-write 1 EIO disk-0/00000000000000000000.log\n")
        os.replace(tmp, control)  # the broker applies it and removes the file
        wait_for("the fault armed", lambda: not control.exists(), 10)

        second = [f"b{i}".encode() for i in range(100)]
        asyncio.run(_produce(bootstrap, second))  # through the failure, to the new leader

        code = b.procs[FAILING].wait(timeout=60)
        log = b.log_tail(FAILING, 200)
        assert code == 70, log
        assert "essential task log directory died" in log, log
        assert "is offline: append of" in log and "failed with EIO" in log, log
        assert _leader(q, "disk") in (101, 103)
        got = asyncio.run(_read_all([b.url(101), b.url(103)], 200))
        assert set(first + second) <= set(got), sorted(set(first + second) - set(got))[:10]
    finally:
        b.stop_all()
        q.stop_all()
