#!/usr/bin/env python3
"""Partition reassignment (KIP-455): how long moving a partition of N MB takes with and
without the replication throttle, and what the move costs a producer working beside it.

A real cluster (1 controller, 3 brokers, started and stopped here) holds ``big``, one
partition of N MB on broker 101, and ``load``, one partition on brokers 101 and 102 (the
brokers the move reads from and writes to), which an acks=all producer of 1 KB records
keeps busy throughout. In one run:

1. ``baseline``: the producer alone for as long as the unthrottled move will take (measured
   first without it, then again in step 2's window);
2. ``big`` moves 101 -> 102 with no throttle, the producer running: the move's time and the
   producer's throughput during it;
3. ``big`` moves back 102 -> 101 throttled at ``--throttle`` bytes/s (default: a third of the
   unthrottled move's rate, so the throttle binds): the same two figures.

Figures (JSON lines on stdout, progress on stderr):

* ``reassign.move_unthrottled``: seconds to move N MB (no baseline).
* ``reassign.move_throttled``: seconds; baseline: N MB / throttle rate, the time the
  throttle alone allows (ratio near 1: the throttle is what limits the move).
* ``reassign.produce_during_move``: producer records/s during the unthrottled move, against
  the producer alone.
* ``reassign.produce_during_throttled_move``: the same during the throttled move.

Sizes: full 256 MB (``--mb``; the issue's 1 GB takes minutes to write from one Python
producer), ``--quick`` 24 MB, ``--smoke`` 2 MB.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from _report import add_size_flags, figure, progress, size

from api.client import AsyncProducer
from api.node.localcluster import Brokers, running_cluster, wait_for
from metalog.client import ControllerClient
from metalog.commands import CreateTopic
from metalog.records import BrokerId

SIZES_MB = {"smoke": 2, "quick": 24, "full": 256}
RECORD = b"r" * 1000


def _req(b: Brokers, method: str, path: str, body: Any = None) -> Any:
    via = b.ids[0]
    cid = b.get(via, "/v3/clusters")["data"][0]["cluster_id"]
    req = urllib.request.Request(
        f"{b.url(via)}/v3/clusters/{cid}{path}",
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        raw = r.read()
        return json.loads(raw) if raw else None


def _replicas(b: Brokers, topic: str) -> list[int]:
    for t in b.metadata(b.ids[0])["topics"]:
        if t["name"] == topic:
            return list(t["partitions"][0]["replicas"])
    return []


async def _fill(boot: list[str], mb: int) -> None:
    async with AsyncProducer(boot, linger_ms=20, acks=1, enable_idempotence=False) as p:
        futs = []
        for i in range(mb * 1000):
            futs.append(await p.send("big", RECORD, partition=0))
            if len(futs) >= 5000:
                for f in futs:
                    await f
                futs.clear()
                if i % 20_000 == 0:
                    progress(f"  wrote {i // 1000} MB")
        for f in futs:
            await f


class Load:
    """An acks=all producer on ``load``; ``acked`` counts acknowledgements with their times."""

    def __init__(self, boot: list[str]) -> None:
        self.boot = boot
        self.times: list[float] = []
        self._stop = asyncio.Event()

    async def run(self) -> None:
        async with AsyncProducer(self.boot, linger_ms=2) as p:
            window: list[asyncio.Future[Any]] = []
            while not self._stop.is_set():
                window.append(await p.send("load", RECORD, partition=0))
                if len(window) >= 200:
                    for f in window:
                        await f
                        self.times.append(time.monotonic())
                    window.clear()
            for f in window:
                await f
                self.times.append(time.monotonic())

    def stop(self) -> None:
        self._stop.set()

    def rate(self, t0: float, t1: float) -> float:
        n = sum(1 for t in self.times if t0 <= t < t1)
        return n / max(t1 - t0, 1e-9)


def _move(b: Brokers, target: list[int], throttle: int | None) -> float:
    """Start a move of ``big`` and wait for it (off the event loop); its duration."""
    if throttle is None:
        _req(b, "DELETE", "/reassignment-throttle")
    else:
        _req(b, "PUT", "/reassignment-throttle", {"rate_bytes_per_s": throttle})
    t0 = time.monotonic()
    _req(b, "PATCH", "/topics/big/partitions/0/reassignment", {"replicas": target})
    wait_for("the move", lambda: _replicas(b, "big") == target, 3600, interval_s=0.05)
    took = time.monotonic() - t0
    _req(b, "DELETE", "/reassignment-throttle")
    return took


async def _measure(b: Brokers, mb: int, throttle_arg: int | None) -> dict[str, float]:
    boot = [b.url(i) for i in b.ids]
    progress(f"writing {mb} MB to big ...")
    await _fill(boot, mb)
    load = Load(boot)
    task = asyncio.create_task(load.run())
    await asyncio.sleep(1.0)  # warm up
    loop = asyncio.get_running_loop()
    progress("moving big 101 -> 102, no throttle ...")
    t0 = time.monotonic()
    free_s = await loop.run_in_executor(None, _move, b, [102], None)
    t1 = time.monotonic()
    during = load.rate(t0, t1)
    # The producer alone, for as long as the move took (at least 2 s).
    a0 = time.monotonic()
    await asyncio.sleep(max(free_s, 2.0))
    alone = load.rate(a0, time.monotonic())
    throttle = throttle_arg or max(100_000, int(mb * 1_000_000 / free_s / 3))
    progress(f"moving big 102 -> 101 at {throttle} B/s ...")
    t2 = time.monotonic()
    slow_s = await loop.run_in_executor(None, _move, b, [101], throttle)
    during_throttled = load.rate(t2, time.monotonic())
    load.stop()
    await task
    return {
        "free_s": free_s,
        "slow_s": slow_s,
        "throttle": throttle,
        "alone": alone,
        "during": during,
        "during_throttled": during_throttled,
    }


async def _create(controllers: list[str]) -> None:
    async with ControllerClient(controllers, timeout_s=20) as cc:
        for name, replicas in (("big", (101,)), ("load", (101, 102))):
            await cc.execute(
                CreateTopic(name=name, assignments={0: tuple(BrokerId(x) for x in replicas)})
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_size_flags(ap)
    ap.add_argument("--mb", type=int, help="the partition's size in MB")
    ap.add_argument("--throttle", type=int, help="bytes/s for the throttled move")
    args = ap.parse_args()
    mb = args.mb or SIZES_MB[size(args)]
    with (
        tempfile.TemporaryDirectory(prefix="bench-reassign-") as tmp,
        running_cluster(Path(tmp), controllers=1, brokers=3) as (q, b),
    ):
        asyncio.run(_create(q.urls))
        wait_for("topics", lambda: _replicas(b, "load") == [101, 102], 30)
        r = asyncio.run(_measure(b, mb, args.throttle))
    params = {"size_mb": mb, "brokers": 3, "record_bytes": len(RECORD)}
    figure("reassign.move_unthrottled", "s", [r["free_s"]], higher_is_better=False, params=params)
    figure(
        "reassign.move_throttled",
        "s",
        [r["slow_s"]],
        baseline=f"size / throttle ({int(r['throttle'])} B/s)",
        baseline_values=[mb * 1_000_000 / r["throttle"]],
        higher_is_better=False,
        params={**params, "throttle_bytes_per_s": int(r["throttle"])},
    )
    figure(
        "reassign.produce_during_move",
        "records/s",
        [r["during"]],
        baseline="the same producer, no move",
        baseline_values=[r["alone"]],
        params=params,
    )
    figure(
        "reassign.produce_during_throttled_move",
        "records/s",
        [r["during_throttled"]],
        baseline="the same producer, no move",
        baseline_values=[r["alone"]],
        params={**params, "throttle_bytes_per_s": int(r["throttle"])},
    )


if __name__ == "__main__":
    main()
