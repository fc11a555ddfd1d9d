#!/usr/bin/env python3
"""Produce and consume throughput through the Python client, beside Redis Streams, NATS
JetStream and the raw disk, all in one run on this machine (JSON lines on stdout, progress
on stderr: _report.py).

Figures (100-byte records):

* ``produce.rf1_acks1``: one broker's topic (4 partitions on one broker, RF 1), acks=1
  (each acknowledgement waits for its group fsync), MB/s against the raw disk: the same bytes
  written with 1 MiB ``os.write`` calls and one fsync at the end.
* ``produce.rf3_acks_all``: 3 brokers, 6 partitions, RF 3, min.insync.replicas=2, acks=all,
  idempotent; records/s against NATS JetStream (3 servers, a 3-replica file stream, async
  publish) and against Redis Streams (XADD pipelined by 1,000, ``appendfsync everysec`` and
  ``always``; Redis does not replicate here, so it is the single-node reference).
  Both Longboat figures use ``send_batch`` (the client's bulk path, 10,000 records a call);
  ``produce.rf3_acks_all.send`` is the per-record ``send()`` path.
* ``produce.latency_p50`` / ``_p99``: single-record ``send_and_wait`` latency at a fixed
  moderate rate (linger 0, acks=all, RF 3).
* ``consume.rf3``: a consumer reading the RF 3 topic from the beginning.

The peers are installed when missing (``apt-get install redis-server nats-server``; their
Python clients ``redis`` and ``nats-py`` with pip) and started on 127.0.0.1 ports of their
own in a temporary directory, then stopped. The Longboat cluster (3 controllers, 3 brokers)
is started and stopped by the script.

JetStream fsyncs every 2 minutes by default and Redis ``everysec`` once a second; Longboat
acks=all relies on replication to 2 of 3 replicas (its own fsync is not in the ack path), as
Kafka does.

* ``produce.rf3_acks_all.acks_require_fsync`` (with ``--fsync``): the same RF 3 acks=all
  send_batch load against a second cluster whose brokers run with ``acks_require_fsync``
  (every in-sync replica fsyncs before the ack), beside the default cluster in the same run,
  runs interleaved; and ``produce.latency_p50.acks_require_fsync`` at 1,000 records/s.

Without ``--skip-peers`` the run fails when the peers cannot be installed or started (a figure
without its baseline would pass for one with it). ``--quick``: 300,000 records, one run;
``--smoke``: 20,000 records; full: 2,000,000 records, three runs.

Usage: python scripts/bench/produce.py [--quick | --smoke] [--skip-peers] [--fsync]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _report import add_size_flags, figure, progress, size

from api.client import AsyncConsumer, AsyncProducer, TopicPartition
from api.node.localcluster import Brokers, Quorum, free_ports
from metalog.client import ControllerClient
from metalog.commands import CreateTopic

RECORD = 100
VALUE = b"x" * RECORD
CHUNK = 10_000


# ----------------------------------------------------------------------------- installs


def ensure_peers() -> bool:
    """redis-server, nats-server and their Python clients; False (with a message) if they
    cannot be had."""
    missing = [b for b in ("redis-server", "nats-server") if shutil.which(b) is None]
    if missing:
        progress(f"installing {' '.join(missing)} with apt-get")
        sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(
            [*sudo, "apt-get", "update", "-q"], stdout=subprocess.DEVNULL, check=False, env=env
        )
        r = subprocess.run(
            [*sudo, "apt-get", "install", "-y", "-q", *missing],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        if r.returncode != 0:
            progress(f"apt-get install failed: {r.stderr[-500:]}")
            return False
        # The Debian package starts redis as a service on 6379; we run our own.
        subprocess.run(["service", "redis-server", "stop"], capture_output=True, check=False)
    for mod, pkg in (("redis", "redis>=5"), ("nats", "nats-py>=2.6")):
        try:
            __import__(mod)
        except ImportError:
            progress(f"pip install {pkg}")
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", pkg], check=True)
    return True


# ----------------------------------------------------------------------------- longboat


async def create_topic(
    urls: list[str],
    name: str,
    partitions: int,
    rf: int,
    configs: dict[str, str] | None = None,
    assignments: dict[int, tuple[int, ...]] | None = None,
) -> None:
    async with ControllerClient(urls, timeout_s=30) as cc:
        if assignments:
            await cc.execute(
                CreateTopic(
                    name=name,
                    assignments=assignments,  # type: ignore[arg-type]
                    configs=configs or {},
                )
            )
        else:
            await cc.execute(
                CreateTopic(
                    name=name,
                    num_partitions=partitions,
                    replication_factor=rf,
                    configs=configs or {},
                )
            )


async def produce_bulk(
    bootstrap: list[str], topic: str, n: int, *, acks: int | str, idempotent: bool
) -> float:
    """Seconds to produce n records with send_batch (all acknowledged)."""
    async with AsyncProducer(
        bootstrap,
        acks=acks,
        enable_idempotence=idempotent,
        linger_ms=2,
        batch_size=1 << 20,
        buffer_memory=256 << 20,
    ) as p:
        await p.send_batch(topic, [VALUE] * 1000)  # warm connections and metadata
        await p.flush()
        values = [VALUE] * CHUNK
        t0 = time.perf_counter()
        futs = []
        for _ in range(n // CHUNK):
            futs.append(await p.send_batch(topic, values))
        await asyncio.gather(*futs)
        return time.perf_counter() - t0


async def produce_each(bootstrap: list[str], topic: str, n: int) -> float:
    async with AsyncProducer(bootstrap, linger_ms=5, buffer_memory=256 << 20) as p:
        await (await p.send(topic, VALUE))
        t0 = time.perf_counter()
        futs = [await p.send(topic, VALUE) for _ in range(n)]
        await asyncio.gather(*futs)
        return time.perf_counter() - t0


async def latency(bootstrap: list[str], topic: str, n: int, rate: float) -> list[float]:
    out = []
    async with AsyncProducer(bootstrap, linger_ms=0) as p:
        await p.send_and_wait(topic, VALUE)
        interval = 1 / rate
        start = time.perf_counter()
        futs = []
        for i in range(n):
            t_send = start + i * interval
            delay = t_send - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            t = time.perf_counter()
            f = await p.send(topic, VALUE)
            f.add_done_callback(lambda _f, t=t: out.append((time.perf_counter() - t) * 1000))
            futs.append(f)
        await asyncio.gather(*futs)
    return out


async def consume_all(bootstrap: list[str], topic: str, partitions: int, n: int) -> float:
    async with AsyncConsumer(
        bootstrap, fetch_max_bytes=8 << 20, auto_offset_reset="earliest", check_crcs=True
    ) as c:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        got = 0
        t0 = time.perf_counter()
        while got < n:
            recs = await c.poll(5000)
            if not recs:
                break
            got += len(recs)
        return got / (time.perf_counter() - t0)


def raw_disk(path: Path, nbytes: int) -> float:
    """MB/s of writing nbytes sequentially in 1 MiB writes, then one fsync."""
    chunk = b"x" * (1 << 20)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        t0 = time.perf_counter()
        left = nbytes
        while left > 0:
            left -= os.write(fd, chunk[: min(left, len(chunk))])
        os.fsync(fd)
        dt = time.perf_counter() - t0
    finally:
        os.close(fd)
        path.unlink()
    return nbytes / dt / 1e6


# ----------------------------------------------------------------------------- peers


def start_redis(root: Path, fsync: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_ports(1)[0]
    d = root / f"redis-{fsync}"
    d.mkdir()
    p = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(d),
            "--appendonly",
            "yes",
            "--appendfsync",
            fsync,
            "--save",
            "",
            "--protected-mode",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    import redis

    r = redis.Redis(port=port)
    for _ in range(100):
        try:
            r.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    return p, port


def redis_rate(port: int, n: int) -> float:
    import redis

    r = redis.Redis(port=port)
    t0 = time.perf_counter()
    sent = 0
    while sent < n:
        pipe = r.pipeline(transaction=False)
        for _ in range(1000):
            pipe.xadd("bench", {"v": VALUE})
        pipe.execute()
        sent += 1000
    return sent / (time.perf_counter() - t0)


def start_nats(root: Path) -> tuple[list[subprocess.Popen[bytes]], list[int]]:
    ports = free_ports(6)
    client_ports, route_ports = ports[:3], ports[3:]
    routes = ",".join(f"nats-route://127.0.0.1:{p}" for p in route_ports)
    procs = []
    for i in range(3):
        d = root / f"nats-{i}"
        d.mkdir()
        procs.append(
            subprocess.Popen(
                [
                    "nats-server",
                    "-js",
                    "-sd",
                    str(d),
                    "-a",
                    "127.0.0.1",
                    "-p",
                    str(client_ports[i]),
                    "-n",
                    f"n{i}",
                    "--cluster_name",
                    "bench",
                    "--cluster",
                    f"nats://127.0.0.1:{route_ports[i]}",
                    "--routes",
                    routes,
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    return procs, client_ports


async def nats_rate(ports: list[int], n: int) -> float:
    import nats
    from nats.js.api import StorageType, StreamConfig

    async def quiet(e: Exception) -> None:  # connection attempts while servers start
        pass

    nc = await nats.connect(
        [f"nats://127.0.0.1:{p}" for p in ports],
        error_cb=quiet,
        max_reconnect_attempts=100,
        reconnect_time_wait=0.2,
    )
    js = nc.jetstream()
    for _ in range(100):  # the cluster elects its meta leader first
        try:
            await js.add_stream(
                StreamConfig(
                    name="bench", subjects=["bench"], num_replicas=3, storage=StorageType.FILE
                )
            )
            break
        except Exception:
            await asyncio.sleep(0.2)
    window = 1000
    t0 = time.perf_counter()
    sent = 0
    while sent < n:
        await asyncio.gather(*(js.publish("bench", VALUE) for _ in range(window)))
        sent += window
    rate = sent / (time.perf_counter() - t0)
    await nc.close()
    return rate


# ----------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_size_flags(ap)
    ap.add_argument("--skip-peers", action="store_true", help="Longboat and raw disk only")
    ap.add_argument(
        "--fsync", action="store_true", help="also measure a cluster with acks_require_fsync=true"
    )
    ap.add_argument(
        "--partitions",
        type=int,
        default=6,
        help="partitions of the RF 3 topic (one request in flight per partition)",
    )
    args = ap.parse_args()
    n, runs, samples = {
        "smoke": (20_000, 1, 200),
        "quick": (300_000, 1, 2000),
        "full": (2_000_000, 3, 5000),
    }[size(args)]
    peers = not args.skip_peers
    if peers and not ensure_peers():
        progress("the peers (Redis, NATS) cannot be had: fix that or pass --skip-peers")
        return 1
    root = Path(tempfile.mkdtemp(prefix="longboat-bench-produce-"))
    figures: dict[str, list[float]] = {}

    def add(name: str, v: float) -> None:
        figures.setdefault(name, []).append(v)

    q = Quorum(root, 3)
    brokers = Brokers(root, q, 3)
    fq = fb = None
    flat: list[float] = []
    if args.fsync:
        (root / "fsync").mkdir()
        fq = Quorum(root / "fsync", 3)
        fb = Brokers(root / "fsync", fq, 3, extra_args=["--override", "acks_require_fsync=true"])
    try:
        progress("starting 3 controllers and 3 brokers" + (" (twice)" if fb else ""))
        q.start_all()
        brokers.start_all()
        if fq is not None and fb is not None:
            fq.start_all()
            fb.start_all()
            fb.wait_ready(timeout_s=90)
        brokers.wait_ready(timeout_s=90)
        boot = [brokers.url(b) for b in brokers.ids]
        fboot = [fb.url(b) for b in fb.ids] if fb is not None else []
        b1 = brokers.ids[0]
        for run in range(runs):
            t1, t3 = f"rf1-{run}", f"rf3-{run}"
            asyncio.run(create_topic(q.urls, t1, 4, 1, assignments={p: (b1,) for p in range(4)}))
            asyncio.run(create_topic(q.urls, t3, args.partitions, 3, {"min.insync.replicas": "2"}))
            time.sleep(2)  # leaders elected, followers fetching
            progress(f"run {run + 1}/{runs}: RF1 acks=1, {n} records")
            dt = asyncio.run(produce_bulk(boot, t1, n, acks=1, idempotent=False))
            add("rf1", n / dt)
            add("raw", raw_disk(root / "raw.bin", n * RECORD))
            progress(f"run {run + 1}/{runs}: RF3 acks=all, {n} records")
            dt = asyncio.run(produce_bulk(boot, t3, n, acks="all", idempotent=True))
            add("rf3", n / dt)
            if fq is not None:
                asyncio.run(
                    create_topic(fq.urls, t3, args.partitions, 3, {"min.insync.replicas": "2"})
                )
                time.sleep(2)
                progress(f"run {run + 1}/{runs}: RF3 acks=all, acks_require_fsync, {n} records")
                dt = asyncio.run(produce_bulk(fboot, t3, n, acks="all", idempotent=True))
                add("rf3_fsync", n / dt)
            m = n // 5
            progress(f"run {run + 1}/{runs}: RF3 acks=all per-record send(), {m} records")
            dt = asyncio.run(produce_each(boot, t3, m))
            add("rf3_send", m / dt)
            progress(f"run {run + 1}/{runs}: consume RF3")
            add("consume", asyncio.run(consume_all(boot, t3, args.partitions, n + 1000 + m + 1)))
        progress("latency at 1,000 records/s")
        lat = asyncio.run(latency(boot, f"rf3-{runs - 1}", samples, 1000))
        if fq is not None:
            progress("latency at 1,000 records/s, acks_require_fsync")
            flat = asyncio.run(latency(fboot, f"rf3-{runs - 1}", samples, 1000))
    finally:
        brokers.stop_all()
        q.stop_all()
        if fq is not None and fb is not None:
            fb.stop_all()
            fq.stop_all()

    if peers:
        procs: list[subprocess.Popen[bytes]] = []
        try:
            for fsync in ("everysec", "always"):
                p, port = start_redis(root, fsync)
                procs.append(p)
                for run in range(runs):
                    progress(f"redis appendfsync {fsync}, run {run + 1}/{runs}")
                    add(f"redis_{fsync}", redis_rate(port, n // 2))
            nprocs, ports = start_nats(root)
            procs += nprocs
            for run in range(runs):
                progress(f"NATS JetStream R3, run {run + 1}/{runs}")
                add("nats", asyncio.run(nats_rate(ports, n // 10)))
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
    shutil.rmtree(root, ignore_errors=True)

    params = {"record_bytes": RECORD, "records": n, "chunk": CHUNK}
    mb = [v * RECORD / 1e6 for v in figures["rf1"]]
    figure(
        "produce.rf1_acks1",
        "MB/s",
        mb,
        baseline="raw disk: 1 MiB os.write + one fsync, same bytes",
        baseline_values=figures["raw"],
        params={
            **params,
            "partitions": 4,
            "brokers": 1,
            "records_per_s": round(statistics.median(figures["rf1"])),
        },
    )
    rf3_params = {
        **params,
        "partitions": args.partitions,
        "replication_factor": 3,
        "min_insync": 2,
        "idempotent": True,
        "MB_per_s": round(statistics.median(figures["rf3"]) * RECORD / 1e6, 1),
    }
    if peers:
        figure(
            "produce.rf3_acks_all",
            "records/s",
            figures["rf3"],
            baseline="NATS JetStream 3 servers, R3 file stream, async publish (fsync every 2 min)",
            baseline_values=figures["nats"],
            params=rf3_params,
        )
        figure(
            "produce.rf3_acks_all.vs_redis_everysec",
            "records/s",
            figures["rf3"],
            baseline="Redis Streams XADD pipelined x1000, appendfsync everysec, 1 node",
            baseline_values=figures["redis_everysec"],
            params=rf3_params,
        )
        figure(
            "produce.rf3_acks_all.vs_redis_always",
            "records/s",
            figures["rf3"],
            baseline="Redis Streams XADD pipelined x1000, appendfsync always, 1 node",
            baseline_values=figures["redis_always"],
            params=rf3_params,
        )
    else:
        figure("produce.rf3_acks_all", "records/s", figures["rf3"], params=rf3_params)
    figure(
        "produce.rf3_acks_all.send",
        "records/s",
        figures["rf3_send"],
        baseline="send_batch, same cluster and settings",
        baseline_values=figures["rf3"],
        params={**params, "api": "send() per record"},
    )
    lat_params = {
        "rate_per_s": 1000,
        "samples": len(lat),
        "linger_ms": 0,
        "acks": "all",
        "replication_factor": 3,
    }
    figure("produce.latency_p50", "ms", [statistics.median(lat)], params=lat_params)
    figure("produce.latency_p99", "ms", [statistics.quantiles(lat, n=100)[98]], params=lat_params)
    if fq is not None:
        figure(
            "produce.rf3_acks_all.acks_require_fsync",
            "records/s",
            figures["rf3_fsync"],
            baseline="produce.rf3_acks_all: the same load, default brokers (no fsync in "
            "the ack path), runs interleaved",
            baseline_values=figures["rf3"],
            params={**rf3_params, "acks_require_fsync": True},
        )
        figure(
            "produce.latency_p50.acks_require_fsync",
            "ms",
            [statistics.median(flat)],
            baseline="produce.latency_p50, default brokers",
            baseline_values=[statistics.median(lat)],
            higher_is_better=False,
            params=lat_params,
        )
        figure(
            "produce.latency_p99.acks_require_fsync",
            "ms",
            [statistics.quantiles(flat, n=100)[98]],
            baseline="produce.latency_p99, default brokers",
            baseline_values=[statistics.quantiles(lat, n=100)[98]],
            higher_is_better=False,
            params=lat_params,
        )
    figure(
        "consume.rf3",
        "records/s",
        figures["consume"],
        baseline="produce.rf3_acks_all (same records)",
        baseline_values=figures["rf3"],
        params={"partitions": args.partitions, "fetch_max_bytes": 8 << 20},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
