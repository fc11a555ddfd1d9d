#!/usr/bin/env python3
"""Metadata quorum benchmark: 3 real controller processes on 127.0.0.1, fsync on.

Figures (JSON lines on stdout, progress on stderr):

* ``metadata.topic_creations`` (topics/s): N topics of 6 partitions, RF 3, created through
  the active controller by 32 concurrent clients; each answer waits for the commit.
  Baseline: fsynced appends of a ~1 KiB record one at a time on the same disk, the rate a
  quorum that fsyncs each command alone could not beat.
* ``metadata.snapshot_catch_up`` (s): a controller stopped while the image grows to P
  partitions, restarted; time until its metadata offset equals the leader's (it loads its
  latest snapshot and replays the rest). No natural baseline.
* ``metadata.controller_failover`` (s, median of K kills): SIGKILL the active controller;
  time until a topic creation succeeds again. No natural baseline.

``--quick``: 200 topics, 10,000 partitions, 3 kills (about a minute); full: 1,000 topics,
100,000 partitions, 5 kills; ``--smoke``: 10 topics, 500 partitions, 1 kill.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

from _report import add_size_flags, figure, progress, size

from api.node.localcluster import Quorum
from metalog.client import ControllerClient
from metalog.commands import BrokerHeartbeat, CreateTopic, RegisterBroker
from metalog.records import Endpoint


def fsync_baseline(path: Path, n: int = 500) -> float:
    rec = os.urandom(1024)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        t0 = time.perf_counter()
        for _ in range(n):
            os.write(fd, rec)
            os.fsync(fd)
        return n / (time.perf_counter() - t0)
    finally:
        os.close(fd)


class Brokers:
    """Three registered brokers kept alive by heartbeats (RF 3 needs them unfenced)."""

    def __init__(self, client: ControllerClient) -> None:
        self.c = client
        self.epochs: dict[int, int] = {}
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        for b in (1, 2, 3):
            r = await self.c.execute(
                RegisterBroker(
                    broker_id=b,
                    incarnation_id=f"bench-{b}",
                    endpoints=(Endpoint("http", "127.0.0.1", 18000 + b),),
                )
            )
            self.epochs[b] = r.broker_epoch
        await self.beat()
        self._task = asyncio.create_task(self._loop())

    async def beat(self) -> None:
        for b, e in self.epochs.items():
            await self.c.execute(
                BrokerHeartbeat(broker_id=b, broker_epoch=e, current_metadata_offset=1 << 62)
            )

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            try:
                await self.beat()
            except Exception as e:  # during a failover; the next beat retries
                progress(f"  heartbeat failed: {e}")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()


async def create_topics(
    c: ControllerClient, prefix: str, n: int, partitions: int, concurrency: int = 32
) -> float:
    names = iter(range(n))
    t0 = time.perf_counter()

    async def worker() -> None:
        for i in names:
            await c.execute(
                CreateTopic(name=f"{prefix}-{i}", num_partitions=partitions, replication_factor=3)
            )

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return n / (time.perf_counter() - t0)


def wait_caught_up(q: Quorum, node: int, leader: int, timeout_s: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        try:
            target = q.status(leader)["metadata_offset"]
            mine = q.status(node)["metadata_offset"]
            if mine >= target:
                return time.monotonic() - t0
        except OSError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"node {node} did not catch up within {timeout_s} s")


async def run(args: argparse.Namespace, root: Path) -> None:
    topics, big_partitions, kills, fsyncs = {
        "smoke": (10, 500, 1, 50),
        "quick": (200, 10_000, 3, 500),
        "full": (1000, 100_000, 5, 500),
    }[size(args)]

    base = [fsync_baseline(root / "fsync-baseline.bin", fsyncs) for _ in range(3)]
    q = Quorum(root / "quorum", 3)
    q.start_all()
    try:
        leader = q.wait_active_leader()
        async with ControllerClient(q.urls, timeout_s=30) as c:
            brokers = Brokers(c)
            await brokers.start()
            progress(f"creating {topics} topics x 6 partitions, RF 3 ...")
            rate = await create_topics(c, "t", topics, 6)
            figure(
                "metadata.topic_creations",
                "topics/s",
                [rate],
                baseline="fsync'd 1 KiB appends one at a time, same disk",
                baseline_values=base,
                params={
                    "topics": topics,
                    "partitions": 6,
                    "replication_factor": 3,
                    "concurrency": 32,
                    "controllers": 3,
                },
            )

            # Catch-up from snapshot: stop a follower, grow the image, restart it.
            follower = next(i for i in (1, 2, 3) if i != leader)
            q.kill(follower, sig=15)
            have = topics * 6
            per_topic = 100
            n_big = max(0, (big_partitions - have) // per_topic)
            progress(f"growing the image to ~{have + n_big * per_topic} partitions ...")
            await create_topics(c, "big", n_big, per_topic, concurrency=8)
            q.start(follower)
            t_start = time.monotonic()
            await asyncio.to_thread(wait_caught_up, q, follower, leader, 300)
            catch_up = time.monotonic() - t_start
            figure(
                "metadata.snapshot_catch_up",
                "s",
                [catch_up],
                baseline=None,
                params={
                    "partitions": have + n_big * per_topic,
                    "note": "includes process start (~1 s of Python imports)",
                },
            )

            # Failover: kill the active controller; time until a create succeeds again.
            times = []
            for k in range(kills):
                leader = q.wait_active_leader()
                await asyncio.sleep(1.5)  # let the quorum settle (followers caught up)
                q.kill(leader)
                t0 = time.perf_counter()
                await c.execute(
                    CreateTopic(name=f"after-kill-{k}", num_partitions=1, replication_factor=3)
                )
                times.append(time.perf_counter() - t0)
                progress(f"  kill {k + 1}: {times[-1]:.2f} s")
                q.start(leader)
                await asyncio.to_thread(wait_caught_up, q, leader, q.wait_active_leader(), 60)
            figure(
                "metadata.controller_failover",
                "s",
                times,
                baseline=None,
                higher_is_better=False,
                params={"kills": kills, "election_timeout": "10-20 ticks of 50 ms"},
            )
            await brokers.stop()
    finally:
        q.stop_all()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_size_flags(ap)
    ap.add_argument("--keep", action="store_true", help="keep the data directory")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="longboat-bench-metadata-"))
    progress(f"data under {root}")
    try:
        asyncio.run(run(args, root))
    finally:
        if not args.keep:
            import shutil

            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
