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
* ``metrics.scrape_broker_cpu_ms``: the CPU time a broker spends on one scrape with a second
  topic of ``SCALE_PARTITIONS`` partitions (RF 3) and a group committed on all of them (the
  scrape then asks the end offset of every one, two thirds of them from other brokers):
  the broker process's CPU over back-to-back scrapes, less its CPU over as long a time
  unscraped, per scrape. At a 1 s interval that many ms is that many thousandths of a core.

Each run lasts several scrape intervals (a run much shorter than the interval would see at
most one scrape), after one uncounted warm-up run; on a machine shared with other work the
run-to-run spread is wide, so read the ratio with the spread of several runs in mind.
``--quick``: 5 pairs of runs of 1,000,000 records, 90 partitions for the scrape's cost;
``--smoke``: one pair of 10,000, 30 partitions; full: 8 pairs of 3,000,000, 90 partitions.
(Not more: a broker following much over 100 partitions now sees its replica fetches time out,
one long-poll per partition against aiohttp's 100 connections per session.)

Usage: python scripts/bench/metrics_scrape.py [--quick | --smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import os
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


async def commit_group(boot: list[str], group: str, topic: str, partitions: int) -> None:
    """A group with an offset committed on every partition of ``topic``: its lag is
    computed at each scrape."""
    async with AsyncGroupConsumer(boot, group_id=group, enable_auto_commit=False) as c:
        c.subscribe([topic])
        deadline = time.monotonic() + 120
        while len(c.assignment()) < partitions:
            if time.monotonic() > deadline:
                raise TimeoutError(f"group {group} got no full assignment")
            await c.poll(500)
        await c.commit({TopicPartition(topic, p): 0 for p in range(partitions)})


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def scrape_cpu_ms(url: str, pid: int, scrapes: int) -> tuple[float, int]:
    """CPU ms the process spends per scrape of ``url`` (its idle CPU over as long a time
    subtracted), and the body's size."""
    t0, c0 = time.monotonic(), cpu_s(pid)
    body = b""
    for _ in range(scrapes):
        with urllib.request.urlopen(f"{url}/metrics", timeout=30) as r:
            body = r.read()
    busy_s, busy_cpu = time.monotonic() - t0, cpu_s(pid) - c0
    c1 = cpu_s(pid)
    time.sleep(busy_s)
    idle_cpu = cpu_s(pid) - c1
    return max(0.0, busy_cpu - idle_cpu) * 1000 / scrapes, len(body)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_size_flags(ap)
    args = ap.parse_args()
    n, pairs, scale = {
        "smoke": (10_000, 1, 30),
        "quick": (1_000_000, 5, 90),
        "full": (3_000_000, 8, 90),
    }[size(args)]
    root = Path(tempfile.mkdtemp(prefix="longboat-bench-metrics-"))
    q = Quorum(root, 3)
    brokers = Brokers(root, q, 3)
    plain: list[float] = []
    cpu: list[float] = []
    scale_bytes = 0
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
        asyncio.run(commit_group(boot, "bench-metrics", topic, PARTITIONS))
        progress(f"warm-up: {n} records")
        asyncio.run(produce_bulk(boot, topic, n, acks="all", idempotent=True))
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
                    progress(f"  {n / dt:,.0f} records/s")
                    scrape_ms += s.broker_ms
                    body_bytes = max(body_bytes, s.bytes)
                    errors += s.errors
                else:
                    dt = asyncio.run(produce_bulk(boot, topic, n, acks="all", idempotent=True))
                    plain.append(n / dt)
                    progress(f"  {n / dt:,.0f} records/s")
        progress(f"scrape cost: a topic of {scale} partitions and a group committed on them")
        asyncio.run(create_topic(q.urls, "metrics-scale", scale, 3))
        asyncio.run(commit_group(boot, "bench-metrics-scale", "metrics-scale", scale))
        b1 = brokers.ids[0]
        cpu = []
        for _ in range(3):
            ms, scale_bytes = scrape_cpu_ms(brokers.url(b1), brokers.procs[b1].pid, 20)
            cpu.append(ms)
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
    figure(
        "metrics.scrape_broker_cpu_ms",
        "ms",
        cpu,
        higher_is_better=False,
        params={
            "partitions": scale + PARTITIONS + 10,
            "rf": 3,
            "group_partitions": scale,
            "body_bytes": scale_bytes,
            "scrapes_per_run": 20,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
