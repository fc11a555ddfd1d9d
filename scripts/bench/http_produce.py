#!/usr/bin/env python3
"""HTTP produce benchmark: records/s and latency through the brokers' public HTTP API.

A real cluster (3 controllers, 3 brokers, each its own process), a topic of 3 partitions with
RF 3 and ``acks=all`` (``min.insync.replicas=2``), and 64 concurrent requests from one client
process (aiohttp on uvloop), each request to the partition's leader. Shapes:

* ``json1``: one JSON record of ~100 bytes per request (``POST .../records``);
* ``json1000``: 1,000 such records per request (a JSON array; one report per record back);
* ``binary``: the binary batch form, one msgpack ``{"partition_id", "batch"}`` per request
  holding 1,000 records of 100 bytes (``storage.batch.encode_batch``, built once).

Baseline, in the same run: a bare aiohttp server (one process, uvloop) on the same kind of
route that parses the same bodies (orjson / msgpack) and stores nothing: the ceiling of this
HTTP stack on this machine. For each shape: ``http.produce.<shape>`` (records/s) and
``http.produce.<shape>.p50`` / ``.p99`` (ms, per request).

``--quick``: one 3-second run per shape and server (about 40 s with the cluster start);
``--smoke``: one half-second run each; full: three 10-second runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import msgpack
import orjson
from _report import add_size_flags, figure, progress, size

CONCURRENCY = 64
PARTITIONS = 3
VALUE = "x" * 62  # with the record's JSON around it, ~100 bytes a record


def json_record(p: int, i: int) -> dict[str, Any]:
    return {"partition_id": p, "value": {"type": "STRING", "data": f"{i:08d}{VALUE}"}}


def bodies(p: int) -> dict[str, tuple[bytes, str, int]]:
    """shape -> (body, content type, records per request) for partition ``p``."""
    from storage.batch import encode_batch

    one = orjson.dumps(json_record(p, 0))
    many = orjson.dumps([json_record(p, i) for i in range(1000)])
    now = int(time.time() * 1000)
    batch = encode_batch(
        [(None, f"{i:08d}{VALUE}".encode() + b"x" * 30, now, ()) for i in range(1000)]
    )
    binary = msgpack.packb({"partition_id": p, "batch": batch})
    return {
        "json1": (one, "application/json", 1),
        "json1000": (many, "application/json", 1000),
        "binary": (binary, "application/msgpack", 1000),
    }


# --------------------------------------------------------------------------- the ceiling


def bare_server(port: int) -> None:
    """Parse what Longboat parses, store nothing, answer a small JSON."""
    import uvloop
    from aiohttp import web

    async def handle(request: web.Request) -> web.Response:
        raw = await request.read()
        if request.content_type == "application/msgpack":
            body = msgpack.unpackb(raw)
            n = 1 if "batch" in body else len(body["records"])
        else:
            body = orjson.loads(raw)
            n = len(body) if isinstance(body, list) else 1
        return web.Response(
            body=orjson.dumps({"error_code": 200, "count": n}), content_type="application/json"
        )

    app = web.Application(client_max_size=64 << 20)
    app.router.add_post("/v3/clusters/{cid}/topics/{topic}/records", handle)

    async def run() -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        await asyncio.Event().wait()

    uvloop.run(run())


# --------------------------------------------------------------------------- load


async def load(
    targets: list[tuple[str, bytes, str]], per_request: int, seconds: float
) -> tuple[float, list[float], list[float]]:
    """64 workers posting round-robin over ``targets`` (url, body, content type) for
    ``seconds``; (records/s, request latencies in ms, when each request ended in s from the
    start). A non-200 answer stops the run."""
    lat: list[float] = []
    ends: list[float] = []
    done = 0
    started = time.monotonic()
    stop_at = started + seconds
    conn = aiohttp.TCPConnector(limit=CONCURRENCY)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=60)) as s:

        async def worker(w: int) -> None:
            nonlocal done
            k = w
            while time.monotonic() < stop_at:
                url, body, ctype = targets[k % len(targets)]
                k += 1
                t0 = time.perf_counter()
                async with s.post(url, data=body, headers={"Content-Type": ctype}) as r:
                    payload = await r.read()
                    if r.status != 200:
                        raise RuntimeError(f"{url}: HTTP {r.status}: {payload[:300]!r}")
                lat.append((time.perf_counter() - t0) * 1000)
                ends.append(time.monotonic() - started)
                done += per_request

        t0 = time.monotonic()
        await asyncio.gather(*(worker(w) for w in range(CONCURRENCY)))
        took = time.monotonic() - t0
    return done / took, lat, ends


def cpu_seconds(pid: int) -> float:
    """User + system CPU of process ``pid`` (all its threads) so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_report(label: str, pids: dict[str, int], run: Any, records_of: Any) -> Any:
    """Run ``run()``; print the CPU each of ``pids`` (and this process) spent per record."""
    before = {k: cpu_seconds(p) for k, p in pids.items()}
    me = os.times()
    out = run()
    me2 = os.times()
    used = {k: cpu_seconds(p) - before[k] for k, p in pids.items()}
    used["client"] = me2.user + me2.system - me.user - me.system
    n = records_of(out)
    per = ", ".join(f"{k} {v / n * 1e6:.2f}" for k, v in used.items())
    progress(f"{label}: CPU us per record: {per}; total {sum(used.values()) / n * 1e6:.2f}")
    return out


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0.0


def measure(
    targets: list[tuple[str, bytes, str]],
    per_request: int,
    seconds: float,
    per_second: bool = False,
) -> tuple[float, float, float]:
    import uvloop

    rate, lat, ends = uvloop.run(load(targets, per_request, seconds))
    if per_second:
        counts = [0] * int(seconds)
        for t in ends:
            if t < len(counts):  # the last requests end after the run's last whole second
                counts[int(t)] += per_request
        progress("records/s in each second: " + ", ".join(f"{n:,}" for n in counts))
    return rate, pct(lat, 0.5), pct(lat, 0.99)


# --------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_size_flags(ap)
    ap.add_argument("--bare-server", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--shapes", default="json1,json1000,binary")
    ap.add_argument(
        "--acks",
        default="all",
        choices=["all", "1", "0"],
        help="Diagnosis: acks=1 shows what replication costs.",
    )
    ap.add_argument(
        "--cpu",
        action="store_true",
        help="Diagnosis: print each process's CPU time per record for every run "
        "(brokers, controllers, the bare server, this client).",
    )
    ap.add_argument(
        "--per-second",
        action="store_true",
        help="Diagnosis: print the records acknowledged in each second of every "
        "run (a fall within a run: docs/benchmarks.md, History).",
    )
    args = ap.parse_args()
    if args.bare_server:
        bare_server(args.bare_server)
        return 0
    runs, seconds = {"smoke": (1, 0.5), "quick": (1, 3.0), "full": (3, 10.0)}[size(args)]
    shapes = args.shapes.split(",")

    from api.node.localcluster import Brokers, Quorum, free_ports

    with tempfile.TemporaryDirectory(prefix="bench-http-") as tmp:
        root = Path(tmp)
        q = Quorum(root, 3)
        brokers = Brokers(root, q, 3)
        (bare_port,) = free_ports(1)
        bare = subprocess.Popen(
            [sys.executable, __file__, "--bare-server", str(bare_port)], stdout=subprocess.DEVNULL
        )
        try:
            progress("starting 3 controllers, 3 brokers and the bare server ...")
            q.start_all()
            brokers.start_all()
            brokers.wait_ready(timeout_s=60)
            b0 = brokers.url(brokers.ids[0])
            import urllib.request

            def call(method: str, url: str, body: Any = None) -> Any:
                req = urllib.request.Request(
                    url,
                    method=method,
                    data=None if body is None else orjson.dumps(body),
                    headers={"Content-Type": "application/json"},
                )
                with urllib.request.urlopen(req, timeout=30) as r:
                    return orjson.loads(r.read() or b"null")

            cid = call("GET", f"{b0}/v3/clusters")["data"][0]["cluster_id"]
            call(
                "POST",
                f"{b0}/v3/clusters/{cid}/topics",
                {
                    "topic_name": "bench",
                    "partitions_count": PARTITIONS,
                    "replication_factor": 3,
                    "configs": [{"name": "min.insync.replicas", "value": "2"}],
                },
            )
            parts = call("GET", f"{b0}/v3/clusters/{cid}/topics/bench/partitions")["data"]
            leaders = {p["partition_id"]: brokers.url(p["leader_id"]) for p in parts}
            per_p = {p: bodies(p) for p in range(PARTITIONS)}
            # Wait for the full ISR so acks=all waits on three replicas from the start.
            deadline = time.monotonic() + 30
            while any(len(p["isr"]) < 3 for p in parts) and time.monotonic() < deadline:
                time.sleep(0.2)
                parts = call("GET", f"{b0}/v3/clusters/{cid}/topics/bench/partitions")["data"]
            bare_url = f"http://127.0.0.1:{bare_port}/v3/clusters/x/topics/bench/records"
            for shape in shapes:
                ours: list[tuple[float, float, float]] = []
                base: list[tuple[float, float, float]] = []
                per_request = per_p[0][shape][2]
                lb = [
                    (
                        f"{leaders[p]}/v3/clusters/{cid}/topics/bench/records?acks={args.acks}",
                        per_p[p][shape][0],
                        per_p[p][shape][1],
                    )
                    for p in range(PARTITIONS)
                ]
                bb = [(bare_url, per_p[p][shape][0], per_p[p][shape][1]) for p in range(PARTITIONS)]

                def run_once(
                    targets: list[tuple[str, bytes, str]],
                    pids: dict[str, int],
                    label: str,
                    n: int = per_request,
                ) -> tuple[float, float, float]:
                    def go() -> tuple[float, float, float]:
                        return measure(targets, n, seconds, args.per_second)

                    if not args.cpu:
                        return go()
                    return cpu_report(label, pids, go, lambda out: out[0] * seconds)

                cluster_pids = {
                    **{f"broker{b}": p.pid for b, p in brokers.procs.items()},
                    **{f"controller{c}": p.pid for c, p in q.procs.items()},
                }
                for r in range(runs):
                    progress(f"{shape}: run {r + 1}/{runs}: longboat ...")
                    ours.append(run_once(lb, cluster_pids, shape))
                    progress(f"{shape}: run {r + 1}/{runs}: bare aiohttp ...")
                    base.append(run_once(bb, {"bare": bare.pid}, f"{shape} bare"))
                params = {
                    "concurrency": CONCURRENCY,
                    "records_per_request": per_request,
                    "record_bytes": 100,
                    "acks": args.acks,
                    "replication_factor": 3,
                    "partitions": PARTITIONS,
                    "seconds": seconds,
                }
                bl = "bare aiohttp endpoint parsing the same bodies, storing nothing"
                figure(
                    f"http.produce.{shape}",
                    "records/s",
                    [o[0] for o in ours],
                    baseline=bl,
                    baseline_values=[b[0] for b in base],
                    params=params,
                )
                figure(
                    f"http.produce.{shape}.p50",
                    "ms",
                    [o[1] for o in ours],
                    baseline=bl,
                    baseline_values=[b[1] for b in base],
                    higher_is_better=False,
                    params=params,
                )
                figure(
                    f"http.produce.{shape}.p99",
                    "ms",
                    [o[2] for o in ours],
                    baseline=bl,
                    baseline_values=[b[2] for b in base],
                    higher_is_better=False,
                    params=params,
                )
            # Every acknowledged record is there: the log end offsets add up.
            total = 0
            for p in range(PARTITIONS):
                total += call("GET", f"{b0}/v3/clusters/{cid}/topics/bench/partitions/{p}/offset")[
                    "latest_offset"
                ]
            progress(f"records in the topic: {total}")
        finally:
            bare.terminate()
            bare.wait(timeout=10)
            brokers.stop_all()
            q.stop_all()

    return 0


if __name__ == "__main__":
    sys.exit(main())
