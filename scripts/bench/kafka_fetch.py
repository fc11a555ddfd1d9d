#!/usr/bin/env python3
"""The Kafka listener's zero-copy Fetch against its copy path: one kcat consumer reading the
same log both ways (JSON lines on stdout, progress on stderr: _report.py).

One controller and one broker process (``kafka_listen``, page cache left to the kernel:
``log_page_cache_keep_bytes=-1``, so both ways read from memory), one topic of 4 partitions
with RF 1, filled once by kcat (``acks=1``, ``linger.ms=5``, ``batch.size=1 MiB``, no
compression) with 10,000-byte records. Then, turn by turn, the broker is restarted with
``kafka_fetch_zero_copy`` true (Fetch answers send the stored batches with ``sendfile``) or
false (read into the process, encoded, written: the path before the zero-copy one, and TLS's),
and kcat (``fetch.max.bytes`` 8 MiB) reads every record from the start. Figures:

* ``kafka_fetch.consume_mb``: MB/s of record batches read, zero copy against copy.
* ``kafka_fetch.broker_cpu_s_per_gb``: the broker process's CPU-seconds (user + system,
  ``/proc/PID/stat``) during the read, per GB read; lower is better.

``--smoke``: 20 MB, one turn each; ``--quick``: 300 MB, two turns each; full: 1 GB, three.

Usage: python scripts/bench/kafka_fetch.py [--quick | --smoke]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from _report import add_size_flags, figure, progress, size
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_protocol import end_offsets, kcat_consume, kcat_path

from api.node.localcluster import Brokers, Quorum, free_ports

REPO = Path(__file__).resolve().parents[2]
RECORD = 10_000
PARTITIONS = 4
TOPIC = "fetch-bench"
BROKER = 101


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU-seconds of one process (fields 14 and 15 of /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def create_topic(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(timeout=60)


def wait_leaders(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        t = admin.list_topics(TOPIC, timeout=5).topics.get(TOPIC)
        if (
            t is not None
            and t.error is None
            and len(t.partitions) == PARTITIONS
            and all(p.leader >= 0 for p in t.partitions.values())
        ):
            try:
                end_offsets(bootstrap, TOPIC, PARTITIONS)
                return
            except Exception:
                pass
        time.sleep(0.3)
    raise RuntimeError(f"{TOPIC} has no leaders")


def fill(bootstrap: str, records: Path, n: int) -> None:
    subprocess.run(
        [
            kcat_path(),
            "-P",
            "-b",
            bootstrap,
            "-t",
            TOPIC,
            "-X",
            "acks=1",
            "-X",
            "linger.ms=5",
            "-X",
            f"batch.size={1 << 20}",
            "-l",
            str(records),
        ],
        check=True,
        capture_output=True,
        timeout=1800,
    )
    if end_offsets(bootstrap, TOPIC, PARTITIONS) != n:
        raise RuntimeError(f"{end_offsets(bootstrap, TOPIC, PARTITIONS)} of {n} records landed")


def read_all(bootstrap: str, n: int, pid: int) -> tuple[float, float, float]:
    """(seconds, broker user and system CPU-seconds) of kcat reading n records from the
    start."""
    cpu0 = cpu_seconds(pid)
    dt = kcat_consume(bootstrap, TOPIC, n, timeout_s=1800)
    cpu1 = cpu_seconds(pid)
    return dt, cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_size_flags(ap)
    args = ap.parse_args()
    total, turns = {"smoke": (20e6, 1), "quick": (300e6, 2), "full": (1e9, 3)}[size(args)]
    n = int(total // RECORD)
    root = Path(tempfile.mkdtemp(prefix="longboat-bench-fetch-"))
    records = root / "records.txt"
    with open(records, "wb") as f:
        for i in range(n):
            f.write(b"%09d" % i + b"x" * (RECORD - 9) + b"\n")
    q = Quorum(root / "longboat", 1)
    base_args = ["--override", "log_page_cache_keep_bytes=-1"]
    brokers = Brokers(root / "longboat", q, 1, kafka_ports=free_ports(1), extra_args=base_args)
    boot = f"127.0.0.1:{brokers.kafka_ports[BROKER]}"
    seconds: dict[bool, list[float]] = {True: [], False: []}
    cpu: dict[bool, list[float]] = {True: [], False: []}
    try:
        progress("starting Longboat: 1 controller, 1 broker")
        q.start_all()
        brokers.start_all()
        brokers.wait_ready(timeout_s=90)
        create_topic(boot)
        wait_leaders(boot)
        progress(f"filling {TOPIC}: {n} records of {RECORD} bytes")
        fill(boot, records, n)
        read_all(boot, n, brokers.procs[BROKER].pid)  # unmeasured: the first read warms up
        for turn in range(turns):
            for zero_copy in (True, False):
                brokers.kill(BROKER, 15)
                brokers.extra_args = [
                    *base_args,
                    "--override",
                    f"kafka_fetch_zero_copy={str(zero_copy).lower()}",
                ]
                brokers.start(BROKER)
                brokers.wait_ready(timeout_s=90)
                wait_leaders(boot)
                way = "zero copy" if zero_copy else "copy"
                progress(f"turn {turn + 1}: kcat reads {n} records, {way}")
                dt, user, system = read_all(boot, n, brokers.procs[BROKER].pid)
                seconds[zero_copy].append(dt)
                cpu[zero_copy].append(user + system)
                progress(
                    f"  {total / dt / 1e6:.0f} MB/s, broker CPU-s {user + system:.2f} "
                    f"(user {user:.2f}, system {system:.2f})"
                )
    finally:
        brokers.stop_all()
        q.stop_all()
        shutil.rmtree(root, ignore_errors=True)
    params = {
        "bytes": int(total),
        "record_bytes": RECORD,
        "partitions": PARTITIONS,
        "client": "kcat (librdkafka), fetch.max.bytes=8 MiB",
    }
    base = "the same read with kafka_fetch_zero_copy=false (copied through the process)"
    figure(
        "kafka_fetch.consume_mb",
        "MB/s",
        [total / s / 1e6 for s in seconds[True]],
        baseline=base,
        baseline_values=[total / s / 1e6 for s in seconds[False]],
        params=params,
    )
    figure(
        "kafka_fetch.broker_cpu_s_per_gb",
        "s",  # CPU-seconds per GB read
        [c / (total / 1e9) for c in cpu[True]],
        baseline=base,
        baseline_values=[c / (total / 1e9) for c in cpu[False]],
        higher_is_better=False,
        params=params,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
