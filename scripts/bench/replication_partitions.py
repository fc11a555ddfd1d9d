#!/usr/bin/env python3
"""Replication of many partitions: acks=all produce and follower catch-up across N partitions
of RF 3 (the follower fetcher's scaling, docs/replication.md "The fetcher").

A real cluster (1 controller, 3 brokers, started and stopped here) holds ``wide``: N
partitions, RF 3, ``min.insync.replicas`` 2, leaders spread over the brokers, so each broker
follows about 2N/3 partitions from two leaders. In one run:

1. ``rounds`` rounds of one 100-byte record to every partition with acks=all (one producer,
   every record in flight at once), and as many with acks=1 in between: an acks=all record
   is acknowledged once a follower fetched it, so the ratio shows what replication costs
   across N partitions;
2. ``catch_up``: one more acks=1 record to every partition, then the time until every replica
   on every broker holds it and knows it committed (log end and HW equal on all three).

Figures (JSON lines on stdout, progress on stderr):

* ``replication.acks_all_wide``: records/s with acks=all; baseline the acks=1 rounds.
* ``replication.catch_up_wide``: seconds until every replica of the N partitions holds the
  last record (no baseline: compare across versions, docs/benchmarks.md History).

Sizes: full 2,000 partitions (``--partitions``), ``--quick`` 1,000, ``--smoke`` 30. A run
that does not finish a step within ``--timeout`` seconds reports the time limit as its
figure and says so on stderr (the fetcher before issue 17's finding 10 did not, at 1,000).
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

SIZES = {"smoke": (30, 2), "quick": (1000, 3), "full": (2000, 5)}
"""partitions, rounds"""
TOPIC = "wide"
RECORD = b"r" * 100


def replicas(b: Brokers, bid: int) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{b.url(bid)}/internal/broker/v1/replicas", timeout=30) as r:
        out: list[dict[str, Any]] = json.loads(r.read())
    return [x for x in out if x["topic"] == TOPIC]


def lagging(b: Brokers, partitions: int, offset: int) -> int:
    """How many of the 3N replicas do not yet hold ``offset`` records with the HW there."""
    ok = 0
    for bid in b.ids:
        for x in replicas(b, bid):
            if x["log_end_offset"] >= offset and x["high_watermark"] >= offset:
                ok += 1
    return 3 * partitions - ok


async def produce_round(boot: list[str], partitions: int, acks: int, timeout_s: float) -> float:
    """One record to every partition; seconds until all are acknowledged (``timeout_s`` if
    not all were: the rest fail at the producer's delivery timeout)."""
    async with AsyncProducer(
        boot,
        acks=acks,
        linger_ms=5,
        enable_idempotence=False,
        request_timeout_ms=int(timeout_s * 1000),
        delivery_timeout_ms=int(timeout_s * 1000),
    ) as p:
        t0 = time.monotonic()
        futs = [await p.send(TOPIC, RECORD, partition=i) for i in range(partitions)]
        results = await asyncio.gather(*futs, return_exceptions=True)
        took = time.monotonic() - t0
    failed = sum(1 for r in results if isinstance(r, BaseException))
    if failed:
        progress(f"  acks={acks}: {failed} of {partitions} not acknowledged within {timeout_s} s")
        return max(took, timeout_s)
    return took


async def create(controllers: list[str], partitions: int) -> None:
    async with ControllerClient(controllers, timeout_s=60) as cc:
        await cc.execute(
            CreateTopic(
                name=TOPIC,
                num_partitions=partitions,
                replication_factor=3,
                configs={"min.insync.replicas": "2"},
            )
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_size_flags(ap)
    ap.add_argument("--partitions", type=int, help="partitions of the topic (RF 3)")
    ap.add_argument("--rounds", type=int, help="produce rounds per acks setting")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per step at most")
    args = ap.parse_args()
    n, rounds = SIZES[size(args)]
    n = args.partitions or n
    rounds = args.rounds or rounds
    with (
        tempfile.TemporaryDirectory(prefix="bench-replication-") as tmp,
        running_cluster(Path(tmp), controllers=1, brokers=3) as (q, b),
    ):
        boot = [b.url(i) for i in b.ids]
        progress(f"creating {TOPIC}: {n} partitions, RF 3 ...")
        t0 = time.monotonic()
        asyncio.run(create(q.urls, n))
        wait_for(
            "every replica open",
            lambda: all(len(replicas(b, bid)) == n for bid in b.ids),
            args.timeout,
            interval_s=0.5,
        )
        progress(f"  {time.monotonic() - t0:.1f} s")
        all_s: list[float] = []
        one_s: list[float] = []
        for r in range(rounds):
            one_s.append(asyncio.run(produce_round(boot, n, 1, args.timeout)))
            all_s.append(asyncio.run(produce_round(boot, n, -1, args.timeout)))
            progress(f"  round {r}: acks=1 {one_s[-1]:.2f} s, acks=all {all_s[-1]:.2f} s")
        asyncio.run(produce_round(boot, n, 1, args.timeout))
        target = 2 * rounds + 1
        t0 = time.monotonic()
        deadline = t0 + args.timeout
        while True:
            left = lagging(b, n, target)
            if left == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        catch_up_s = min(time.monotonic() - t0, args.timeout)
        if left:
            progress(f"  catch-up: {left} of {3 * n} replicas still behind after {args.timeout} s")
    params = {"partitions": n, "replication_factor": 3, "brokers": 3, "rounds": rounds}
    figure(
        "replication.acks_all_wide",
        "records/s",
        [n / s for s in all_s],
        baseline="acks=1, same partitions",
        baseline_values=[n / s for s in one_s],
        params=params,
    )
    figure("replication.catch_up_wide", "s", [catch_up_s], higher_is_better=False, params=params)


if __name__ == "__main__":
    main()
