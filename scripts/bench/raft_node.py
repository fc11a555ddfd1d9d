#!/usr/bin/env python3
"""Benchmark: the Longboat Raft node (raft.aio.RaftNode) against PySyncObj, 3 nodes each.

Figures (JSON lines on stdout, see _report.py), all on 127.0.0.1, real processes:

* ``raft.propose_throughput``: committed 100-byte proposals per second, one Raft entry each,
  under a concurrent client; baseline PySyncObj under the same client.
* ``raft.commit_latency_p50`` / ``raft.commit_latency_p99``: ms from sending a request to
  its answer that all its proposals committed, under the saturating load above; baseline
  PySyncObj's.
* ``raft.commit_latency_light_p50`` / ``_p99``: the same with 4 clients proposing one entry
  at a time: the latency of a commit itself (with fsync) rather than of a queue.
* ``raft.failover``: ms from SIGKILL of the leader until a new leader has committed a
  proposal (median over the kills; the killed node is restarted between kills). No baseline.

Both systems serve the same client endpoints (``POST /propose`` with a msgpack list of
payloads, ``GET /status``; see raft_server.py and pysyncobj_server.py). Longboat runs with
fsync on (every Ready's entries and hard state are fsynced before its messages go out);
PySyncObj never fsyncs (in-memory journal by default, mmap without fsync otherwise), which
the ``baseline`` string says.

Usage: python scripts/bench/raft_node.py [--quick | --smoke] [--only longboat|pysyncobj]
Progress goes to standard error; standard output holds only the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgpack
from _report import add_size_flags, figure, progress, size

from api.node.localcluster import free_ports

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PAYLOAD_BYTES = 100
LIGHT_CONCURRENCY = 4


def ensure_pysyncobj() -> None:
    try:
        import pysyncobj  # noqa: F401
    except ImportError:
        progress("installing pysyncobj from the package registry")
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "pysyncobj"],
            check=True,
            stdout=sys.stderr,
        )


# ---------------------------------------------------------------- clusters


@dataclass
class Cluster:
    """Three server processes of one system; ``argv(i)`` builds node i's command line."""

    name: str
    workdir: Path
    http_ports: list[int]
    argv_by_node: dict[int, list[str]]
    procs: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)

    def url(self, node: int) -> str:
        return f"http://127.0.0.1:{self.http_ports[node - 1]}"

    def start(self, node: int) -> None:
        logf = open(self.workdir / f"{self.name}-{node}.log", "ab")  # noqa: SIM115
        # The servers import this checkout's packages, whatever else is installed.
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.procs[node] = subprocess.Popen(
            self.argv_by_node[node],
            stdout=logf,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
        )
        logf.close()

    def start_all(self) -> None:
        for node in self.argv_by_node:
            self.start(node)

    def kill(self, node: int) -> None:
        p = self.procs.pop(node, None)
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait()

    def stop_all(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + 5
        for p in self.procs.values():
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs.clear()


def pysyncobj_cluster(workdir: Path) -> Cluster:
    ports = free_ports(6)
    raft_ports, http_ports = ports[:3], ports[3:]
    argv = {
        i: [
            sys.executable,
            str(HERE / "pysyncobj_server.py"),
            str(i),
            ",".join(map(str, raft_ports)),
            ",".join(map(str, http_ports)),
        ]
        for i in (1, 2, 3)
    }
    return Cluster("pysyncobj", workdir, http_ports, argv)


def longboat_cluster(workdir: Path) -> Cluster:
    http_ports = free_ports(3)
    argv = {
        i: [
            sys.executable,
            str(HERE / "raft_server.py"),
            str(i),
            ",".join(map(str, http_ports)),
            str(workdir / f"node-{i}"),
        ]
        for i in (1, 2, 3)
    }
    return Cluster("longboat", workdir, http_ports, argv)


# ---------------------------------------------------------------- client


async def find_leader(
    session: aiohttp.ClientSession,
    cluster: Cluster,
    timeout_s: float = 30.0,
    exclude: int | None = None,
) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for node in cluster.argv_by_node:
            if node == exclude or node not in cluster.procs:
                continue
            try:
                async with session.get(
                    cluster.url(node) + "/status", timeout=aiohttp.ClientTimeout(total=0.5)
                ) as r:
                    st = await r.json()
                if st.get("leader"):
                    return cluster.url(node)
            except (TimeoutError, aiohttp.ClientError, ValueError):
                pass
        await asyncio.sleep(0.02)
    raise RuntimeError(f"{cluster.name}: no leader within {timeout_s} s")


@dataclass
class LoadResult:
    committed: int
    elapsed_s: float
    latencies_ms: list[float]

    @property
    def per_s(self) -> float:
        return self.committed / self.elapsed_s

    def pct(self, q: float) -> float:
        xs = sorted(self.latencies_ms)
        return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


async def drive_load(
    cluster: Cluster, duration_s: float, concurrency: int, per_request: int
) -> LoadResult:
    """``concurrency`` workers, each POSTing ``per_request`` proposals and awaiting commit."""
    payloads = [os.urandom(PAYLOAD_BYTES) for _ in range(per_request)]
    body = msgpack.packb(payloads)
    # A request that is not answered within this is counted lost (PySyncObj can lose
    # callbacks when its leader changes under load); the worker then looks for the leader.
    request_timeout = aiohttp.ClientTimeout(total=10.0)
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=concurrency * 2), timeout=request_timeout
    ) as session:
        leader = await find_leader(session, cluster)
        # Warm up: a few rounds before the clock starts.
        for _ in range(3):
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with session.post(leader + "/propose", data=body) as r:
                    await r.read()
        committed = 0
        failed = 0
        latencies: list[float] = []
        stop_at = time.monotonic() + duration_s

        async def worker() -> None:
            nonlocal committed, failed, leader
            while time.monotonic() < stop_at:
                t0 = time.perf_counter()
                try:
                    async with session.post(leader + "/propose", data=body) as r:
                        await r.read()
                        ok = r.status == 200
                except (aiohttp.ClientError, TimeoutError):
                    ok = False
                if ok:
                    latencies.append((time.perf_counter() - t0) * 1000)
                    committed += per_request
                else:
                    failed += 1
                    await asyncio.sleep(0.05)
                    with contextlib.suppress(RuntimeError):
                        leader = await find_leader(session, cluster, timeout_s=5.0)

        t_start = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.monotonic() - t_start
    if failed:
        progress(f"{cluster.name}: {failed} request(s) failed or timed out")
    return LoadResult(committed, elapsed, latencies)


async def measure_failover(cluster: Cluster, kills: int) -> list[float]:
    """ms from SIGKILL of the leader to the first proposal committed by a new leader."""
    out: list[float] = []
    body = msgpack.packb([os.urandom(PAYLOAD_BYTES)])
    async with aiohttp.ClientSession() as session:
        for k in range(kills):
            leader_url = await find_leader(session, cluster)
            # one committed proposal first, so the cluster is demonstrably live
            async with session.post(leader_url + "/propose", data=body) as r:
                await r.read()
            victim = cluster.http_ports.index(int(leader_url.rsplit(":", 1)[1])) + 1
            t0 = time.perf_counter()
            cluster.kill(victim)
            committed_at = None
            while committed_at is None and time.perf_counter() - t0 < 30:
                for node in list(cluster.procs):
                    try:
                        async with session.post(
                            cluster.url(node) + "/propose",
                            data=body,
                            timeout=aiohttp.ClientTimeout(total=1.0),
                        ) as r:
                            await r.read()
                            if r.status == 200:
                                committed_at = time.perf_counter()
                                break
                    except (TimeoutError, aiohttp.ClientError):
                        pass
                else:
                    await asyncio.sleep(0.01)
            if committed_at is None:
                for node in list(cluster.procs):
                    try:
                        async with session.get(cluster.url(node) + "/status") as r:
                            progress(f"node {node} status: {await r.text()}")
                    except aiohttp.ClientError as e:
                        progress(f"node {node} status: {e!r}")
                raise RuntimeError("no new leader committed within 30 s of the kill")
            ms = (committed_at - t0) * 1000
            progress(f"failover {k + 1}/{kills}: killed node {victim}, {ms:.0f} ms")
            out.append(ms)
            cluster.start(victim)
            await asyncio.sleep(1.0)  # let it rejoin and catch up before the next kill
    return out


# ---------------------------------------------------------------- runs


def throughput_runs(
    cluster: Cluster, runs: int, duration_s: float, concurrency: int, per_request: int
) -> list[LoadResult]:
    results = []
    for _ in range(runs):
        res = asyncio.run(drive_load(cluster, duration_s, concurrency, per_request))
        progress(
            f"{cluster.name}: {res.per_s:,.0f} proposals/s, "
            f"p50 {res.pct(0.5):.1f} ms, p99 {res.pct(0.99):.1f} ms"
        )
        results.append(res)
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_size_flags(ap)
    ap.add_argument("--only", choices=["longboat", "pysyncobj"])
    ap.add_argument("--concurrency", type=int, default=None, help="default 64 (smoke: 8)")
    ap.add_argument("--per-request", type=int, default=None, help="default 256 (smoke: 16)")
    ap.add_argument("--workdir", help="keep data and server logs here (default: a temp dir)")
    args = ap.parse_args()
    runs, duration_s, light_s, kills, concurrency, per_request = {
        "smoke": (1, 0.5, 0.5, 1, 8, 16),
        "quick": (1, 4.0, 2.0, 5, 64, 256),
        "full": (3, 10.0, 5.0, 7, 64, 256),
    }[size(args)]
    concurrency = args.concurrency or concurrency
    per_request = args.per_request or per_request
    params = {
        "nodes": 3,
        "payload_bytes": PAYLOAD_BYTES,
        "concurrency": concurrency,
        "proposals_per_request": per_request,
        "duration_s": duration_s,
    }
    light_params = {
        "nodes": 3,
        "payload_bytes": PAYLOAD_BYTES,
        "concurrency": LIGHT_CONCURRENCY,
        "proposals_per_request": 1,
        "duration_s": light_s,
    }
    results: dict[tuple[str, str], list[LoadResult]] = {}
    failovers: list[float] = []
    with tempfile.TemporaryDirectory(prefix="longboat-raft-bench-") as tmp:
        workdir = Path(args.workdir or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        clusters: list[Cluster] = []
        if args.only in (None, "pysyncobj"):
            ensure_pysyncobj()
            clusters.append(pysyncobj_cluster(workdir))
        if args.only in (None, "longboat"):
            clusters.append(longboat_cluster(workdir))
        try:
            for cl in clusters:
                fsync = " (fsync on)" if cl.name == "longboat" else ""
                progress(f"starting 3 {cl.name} nodes{fsync}")
                cl.start_all()
            # Runs alternate between the systems, so that a change in the machine's
            # background load hits both alike (the idle cluster only sends heartbeats).
            for _ in range(runs):
                for cl in clusters:
                    res = throughput_runs(cl, 1, duration_s, concurrency, per_request)
                    results.setdefault((cl.name, "load"), []).extend(res)
            # Light load: the latency of a commit itself rather than of a queue.
            for cl in clusters:
                res = throughput_runs(cl, 1, light_s, LIGHT_CONCURRENCY, 1)
                results.setdefault((cl.name, "light"), []).extend(res)
            for cl in clusters:
                if cl.name == "longboat":
                    failovers = asyncio.run(measure_failover(cl, kills))
        finally:
            for cl in clusters:
                cl.stop_all()
    report(results, failovers, params, light_params, kills)
    return 0


def report(
    results: dict[tuple[str, str], list[LoadResult]],
    failovers: list[float],
    params: dict[str, Any],
    light_params: dict[str, Any],
    kills: int,
) -> None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        pysyncobj_version = version("pysyncobj")
    except PackageNotFoundError:
        pysyncobj_version = "?"
    baseline = (
        f"PySyncObj {pysyncobj_version}, 3 nodes, default config, same client; it "
        "never fsyncs (in-memory journal; mmap without fsync when a journal file is "
        "set)"
    )
    rows: list[tuple[str, str, Callable[[LoadResult], float], bool, str]] = [
        ("raft.propose_throughput", "proposals/s", lambda r: r.per_s, True, "load"),
        ("raft.commit_latency_p50", "ms", lambda r: r.pct(0.50), False, "load"),
        ("raft.commit_latency_p99", "ms", lambda r: r.pct(0.99), False, "load"),
        ("raft.commit_latency_light_p50", "ms", lambda r: r.pct(0.50), False, "light"),
        ("raft.commit_latency_light_p99", "ms", lambda r: r.pct(0.99), False, "light"),
    ]
    for bench, unit, of, higher_is_better, load in rows:
        ours = [of(r) for r in results.get(("longboat", load), [])]
        theirs = [of(r) for r in results.get(("pysyncobj", load), [])]
        prm = dict(params if load == "load" else light_params)
        if ours:
            figure(
                bench,
                unit,
                ours,
                baseline=baseline if theirs else None,
                baseline_values=theirs or None,
                higher_is_better=higher_is_better,
                params=dict(prm, system="longboat"),
            )
        else:  # --only pysyncobj: the baseline's own figures, as values
            figure(
                bench,
                unit,
                theirs,
                higher_is_better=higher_is_better,
                params=dict(prm, system="pysyncobj"),
            )
    if failovers:
        figure(
            "raft.failover",
            "ms",
            failovers,
            higher_is_better=False,
            params={
                "nodes": 3,
                "kills": kills,
                "max_ms": round(max(failovers), 1),
                "min_ms": round(min(failovers), 1),
            },
        )


if __name__ == "__main__":
    sys.exit(main())
