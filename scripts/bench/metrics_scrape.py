#!/usr/bin/env python3
"""What ``/metrics`` costs: produce throughput while every node is scraped once a second,
against the same load unscraped, in one cluster with the runs interleaved; and how long one
broker's scrape takes (JSON lines on stdout, progress on stderr: _report.py).

Figures (100-byte records, the load of ``produce.py``'s ``produce.rf3_acks_all``: 3
brokers, 6 partitions, RF 3, min.insync.replicas=2, acks=all, idempotent, ``send_batch``):

* ``metrics.produce_with_scrape``: records/s while a thread of this process GETs ``/metrics``
  from the 3 brokers and the 3 controllers once a second (as a Prometheus with a 1 s
  interval would), against the same load without scraping. The scraped state (offsets, ISR,
  lag of a group committed on the topic) is read at scrape time, so the produce path pays
  only its per-topic counter additions in both.
* ``metrics.scrape_broker_ms``: the median time of one broker's scrape during the scraped
  runs (its body size in the params).

``--quick``: 3 pairs of runs of 100,000 records; ``--smoke``: one pair of 10,000; full: 6
pairs of 300,000.

Usage: python scripts/bench/metrics_scrape.py [--quick | --smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from _report import add_size_flags, figure, progress, size
from produce import create_topic, produce_bulk

from api.client import TopicPartition
from api.client.group import AsyncGroupConsumer
from api.node.localcluster import Brokers, Quorum

PARTITIONS = 6
SCRAPE_INTERVAL_S = 1.0


class Scraper:
    """GETs ``/metrics`` from every URL once per interval on a thread, timing each broker's."""

    def __init__(self, urls: list[str], broker_urls: list[str]) -> None:
        self.urls = urls
        self.broker_urls = set(broker_urls)
        self.broker_ms: list[float] = []
        self.bytes = 0
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            t_round = time.monotonic()
            for u in self.urls:
                t0 = time.perf_counter()
                try:
                    with urllib.request.urlopen(f"{u}/metrics", timeout=10) as r:
                        body = r.read()
                except OSError:
                    self.errors += 1
                    continue
                if u in self.broker_urls:
                    self.broker_ms.append((time.perf_counter() - t0) * 1000)
                    self.bytes = max(self.bytes, len(body))
            self._stop.wait(max(0.0, SCRAPE_INTERVAL_S - (time.monotonic() - t_round)))


async def commit_group(boot: list[str], topic: str) -> None:
    """A group with an offset committed on every partition: its lag is computed at each
    scrape."""
    async with AsyncGroupConsumer(boot, group_id="bench-metrics", enable_auto_commit=False) as c:
        c.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(c.assignment()) < PARTITIONS:
            if time.monotonic() > deadline:
                raise TimeoutError("the bench group got no assignment")
            await c.poll(500)
        await c.commit({TopicPartition(topic, p): 0 for p in range(PARTITIONS)})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_size_flags(ap)
    args = ap.parse_args()
    n, pairs = {"smoke": (10_000, 1), "quick": (100_000, 3), "full": (300_000, 6)}[size(args)]
    root = Path(tempfile.mkdtemp(prefix="longboat-bench-metrics-"))
    q = Quorum(root, 3)
    brokers = Brokers(root, q, 3)
    plain: list[float] = []
    scraped: list[float] = []
    scrape_ms: list[float] = []
    body_bytes = errors = 0
    try:
        progress("starting 3 controllers and 3 brokers")
        q.start_all()
        brokers.start_all()
        brokers.wait_ready(timeout_s=90)
        boot = [brokers.url(b) for b in brokers.ids]
        topic = "metrics-rf3"
        asyncio.run(create_topic(q.urls, topic, PARTITIONS, 3, {"min.insync.replicas": "2"}))
        time.sleep(2)  # leaders elected, followers fetching
        asyncio.run(commit_group(boot, topic))
        for pair in range(pairs):
            # Alternate which goes first, so a trend over the run (a growing log, a busier
            # machine) does not land on one side.
            for scrape in (False, True) if pair % 2 == 0 else (True, False):
                what = "scraped every second" if scrape else "not scraped"
                progress(f"pair {pair + 1}/{pairs}: {n} records, {what}")
                if scrape:
                    with Scraper(q.urls + boot, boot) as s:
                        dt = asyncio.run(produce_bulk(boot, topic, n, acks="all", idempotent=True))
                    scraped.append(n / dt)
                    scrape_ms += s.broker_ms
                    body_bytes = max(body_bytes, s.bytes)
                    errors += s.errors
                else:
                    dt = asyncio.run(produce_bulk(boot, topic, n, acks="all", idempotent=True))
                    plain.append(n / dt)
    finally:
        brokers.stop_all()
        q.stop_all()
        shutil.rmtree(root, ignore_errors=True)
    if errors:
        progress(f"{errors} scrapes failed")
        return 1
    params = {"records": n, "record_bytes": 100, "partitions": PARTITIONS, "rf": 3, "acks": "all"}
    figure(
        "metrics.produce_with_scrape",
        "records/s",
        scraped,
        baseline="the same load, not scraped (runs interleaved, same cluster)",
        baseline_values=plain,
        params={**params, "scrape_interval_s": SCRAPE_INTERVAL_S, "nodes_scraped": 6},
    )
    figure(
        "metrics.scrape_broker_ms",
        "ms",
        scrape_ms or [0.0],
        higher_is_better=False,
        params={
            "scrapes": len(scrape_ms),
            "body_bytes": body_bytes,
            "p90_ms": round(statistics.quantiles(scrape_ms, n=10)[-1], 2)
            if len(scrape_ms) >= 2
            else None,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
