#!/usr/bin/env python3
"""What security costs (issue 18): records/s on a secure cluster beside a plaintext one, in the
same run (JSON lines on stdout, progress on stderr: _report.py).

Two clusters of 1 controller and 2 brokers, one after the other, a topic of 2 partitions, RF
2, acks=all, 100-byte values. The secure one is what ``longboat dev up --secure`` runs: TLS on
every listener (replication too), HTTP Basic checked against SCRAM-SHA-256 credentials, the
authorizer on with a user holding exactly WRITE and READ on the topic. The plaintext one is
the default single listener.

* ``security.client.produce`` / ``security.client.fetch``: the Python client (``send_batch``,
  then an assigned consumer reading everything back).
* ``security.http_json.produce`` / ``security.http_json.fetch``: REST Proxy v2 JSON produce,
  500 records a request, 4 in flight; v3 partition reads with ``format=json``, 1 MiB a
  request, both partitions at once.

``ratio`` is secure / plaintext (the issue's goal: at least 0.8).

Both clusters run at once and are measured in turn, the order alternating per run.
``--quick``: 100,000 records through the client, 20,000 through HTTP, two runs; ``--smoke``:
5,000 and 1,000, one run; full: 500,000 and 100,000, four runs.

Usage: python scripts/bench/security.py [--quick | --smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import ssl
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from _report import add_size_flags, figure, progress, size

from api.client import AsyncConsumer, AsyncProducer, ClientSecurity, TopicPartition
from api.node.localcluster import running_cluster

TOPIC = "bench"
PARTITIONS = 2
VALUE = b"x" * 100
REST_BATCH = 500
REST_IN_FLIGHT = 4
USER, PASSWORD = "bench", "bench-password"


class Target:
    """How the benchmark reaches one cluster."""

    def __init__(self, urls: list[str], security: ClientSecurity | None) -> None:
        self.urls = urls
        self.security = security
        self.ssl = None if security is None else security.ssl_context()
        auth = None if security is None else security.authorization()
        self.headers = {} if auth is None else {"Authorization": auth}


async def _json(
    s: aiohttp.ClientSession, method: str, url: str, t: Target, body: Any = None
) -> Any:
    async with s.request(
        method, url, json=body, headers=t.headers, ssl=t.ssl if t.ssl is not None else True
    ) as r:
        data = await r.read()
        if r.status >= 300:
            raise RuntimeError(f"{method} {url}: {r.status} {data[:300]!r}")
        return orjson.loads(data) if data else None


async def setup(t: Target, admin_ssl: ssl.SSLContext | None, secure: bool) -> str:
    """Create the topic (and, secure, the user and its ACLs, as the admin); the cluster id."""
    admin = Target(t.urls, None)
    admin.ssl = admin_ssl
    async with aiohttp.ClientSession() as s:
        cid = (await _json(s, "GET", f"{t.urls[0]}/v3/clusters", admin))["data"][0]["cluster_id"]
        base = f"{t.urls[0]}/v3/clusters/{cid}"
        await _json(
            s,
            "POST",
            f"{base}/topics",
            admin,
            {"topic_name": TOPIC, "partitions_count": PARTITIONS, "replication_factor": 2},
        )
        if secure:
            await _json(
                s, "POST", f"{base}/users", admin, {"user_name": USER, "password": PASSWORD}
            )
            acl = {
                "resource_type": "TOPIC",
                "resource_name": "bench",
                "pattern_type": "PREFIXED",
                "principal": f"User:{USER}",
                "host": "*",
                "permission": "ALLOW",
            }
            await _json(
                s,
                "POST",
                f"{base}/acls:batch",
                admin,
                {"data": [{**acl, "operation": "WRITE"}, {**acl, "operation": "READ"}]},
            )
        # Every broker sees the user and topic before timing starts.
        for url in t.urls:
            for _ in range(100):
                try:
                    await _json(s, "GET", f"{url}/v3/clusters/{cid}/topics/{TOPIC}", t)
                    break
                except RuntimeError:
                    await asyncio.sleep(0.1)
    return str(cid)


async def client_produce(t: Target, topic: str, n: int) -> float:
    async with AsyncProducer(t.urls, security=t.security, linger_ms=5) as p:
        t0 = time.perf_counter()
        futs = [p.send_batch(topic, [VALUE] * 5_000) for _ in range(n // 5_000)]
        for f in futs:
            await (await f)
        await p.flush()
        return n / (time.perf_counter() - t0)


async def client_fetch(t: Target, topic: str, n: int) -> float:
    async with AsyncConsumer(
        t.urls, security=t.security, auto_offset_reset="earliest", fetch_max_bytes=4 << 20
    ) as c:
        c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        await c.seek_to_beginning(*[TopicPartition(topic, p) for p in range(PARTITIONS)])
        got = 0
        t0 = time.perf_counter()
        while got < n:
            got += len(await c.poll(timeout_ms=1000))
        return got / (time.perf_counter() - t0)


async def http_produce(t: Target, topic: str, n: int) -> float:
    body = orjson.dumps({"records": [{"value": {"v": VALUE.decode()}}] * REST_BATCH})
    headers = {**t.headers, "Content-Type": "application/vnd.kafka.json.v2+json"}
    sem = asyncio.Semaphore(REST_IN_FLIGHT)
    conn = aiohttp.TCPConnector(limit=REST_IN_FLIGHT, ssl=t.ssl if t.ssl is not None else True)
    async with aiohttp.ClientSession(connector=conn) as s:

        async def one(i: int) -> None:
            async with (
                sem,
                s.post(
                    f"{t.urls[i % len(t.urls)]}/topics/{topic}", data=body, headers=headers
                ) as r,
            ):
                if r.status != 200:
                    raise RuntimeError(f"produce: {r.status} {(await r.read())[:200]!r}")
                await r.read()

        t0 = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(n // REST_BATCH)))
        return n / (time.perf_counter() - t0)


async def http_fetch(t: Target, cid: str, topic: str, n: int) -> float:
    conn = aiohttp.TCPConnector(limit=PARTITIONS, ssl=t.ssl if t.ssl is not None else True)
    async with aiohttp.ClientSession(connector=conn) as s:

        async def partition(p: int) -> int:
            offset, got = 0, 0
            base = f"{t.urls[0]}/v3/clusters/{cid}/topics/{topic}/partitions/{p}/records"
            while True:
                url = f"{base}?offset={offset}&format=json&max_bytes={1 << 20}&timeout_ms=0"
                async with s.get(url, headers=t.headers) as r:
                    data = orjson.loads(await r.read())
                records = data["records"]
                if not records:
                    return got
                got += len(records)
                offset = records[-1]["offset"] + 1

        t0 = time.perf_counter()
        got = sum(await asyncio.gather(*(partition(p) for p in range(PARTITIONS))))
        if got < n:
            raise RuntimeError(f"read {got} of {n}")
        return got / (time.perf_counter() - t0)


async def measure(t: Target, cid: str, run: int, n_client: int, n_http: int) -> dict[str, float]:
    out = {}
    out["client.produce"] = await client_produce(t, f"{TOPIC}-c{run}", n_client)
    out["client.fetch"] = await client_fetch(t, f"{TOPIC}-c{run}", n_client)
    out["http_json.produce"] = await http_produce(t, f"{TOPIC}-h{run}", n_http)
    out["http_json.fetch"] = await http_fetch(t, cid, f"{TOPIC}-h{run}", n_http)
    return out


async def create_topics(t: Target, admin_ssl: ssl.SSLContext | None, cid: str, run: int) -> None:
    admin = Target(t.urls, None)
    admin.ssl = admin_ssl
    async with aiohttp.ClientSession() as s:
        for name in (f"{TOPIC}-c{run}", f"{TOPIC}-h{run}"):
            await _json(
                s,
                "POST",
                f"{t.urls[0]}/v3/clusters/{cid}/topics",
                admin,
                {"topic_name": name, "partitions_count": PARTITIONS, "replication_factor": 2},
            )
        for url in t.urls:
            for _ in range(100):
                try:
                    await _json(s, "GET", f"{url}/v3/clusters/{cid}/topics/{TOPIC}-h{run}", t)
                    break
                except RuntimeError:
                    await asyncio.sleep(0.1)


@contextlib.contextmanager
def cluster(root: Path, secure: bool) -> Iterator[tuple[Target, ssl.SSLContext | None, str]]:
    """A running cluster with the topic (and, secure, the user and its ACLs) made."""
    with running_cluster(root, controllers=1, brokers=2, secure=secure) as (q, b):
        urls = [b.url(i) for i in b.ids]
        security = None
        admin_ssl = None
        if secure:
            assert q.secure is not None
            security = ClientSecurity(
                ssl_cafile=str(q.secure.ca.cert), username=USER, password=PASSWORD
            )
            admin_ssl = q.secure.client_ssl()
        t = Target(urls, security)
        yield t, admin_ssl, asyncio.run(setup(t, admin_ssl, secure))


def measure_run(
    t: Target, admin_ssl: ssl.SSLContext | None, cid: str, run: int, n_client: int, n_http: int
) -> dict[str, float]:
    asyncio.run(create_topics(t, admin_ssl, cid, run))
    return asyncio.run(measure(t, cid, run, n_client, n_http))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_size_flags(ap)
    sz = size(ap.parse_args())
    n_client, n_http, runs = {
        "smoke": (5_000, 1_000, 1),
        "quick": (100_000, 20_000, 2),
        "full": (500_000, 100_000, 4),
    }[sz]
    root = Path(tempfile.mkdtemp(prefix="longboat-bench-security-"))
    plain: list[dict[str, float]] = []
    secure: list[dict[str, float]] = []
    try:
        # Both clusters up at once, measured in turn (the order alternating per run), so the
        # load of a shared machine falls on both alike.
        with cluster(root / "plain", False) as p, cluster(root / "secure", True) as s:
            for run in range(runs):
                order = [(p, plain, "plaintext"), (s, secure, "secure")]
                for (t, admin_ssl, cid), out, name in order if run % 2 == 0 else order[::-1]:
                    out.append(measure_run(t, admin_ssl, cid, run, n_client, n_http))
                    progress(f"{name} run {run}: {out[-1]}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    params = {"records_client": n_client, "records_http": n_http, "value_bytes": len(VALUE)}
    for key in ("client.produce", "client.fetch", "http_json.produce", "http_json.fetch"):
        figure(
            f"security.{key}",
            "records/s",
            [r[key] for r in secure],
            baseline="the same on a plaintext cluster, same run",
            baseline_values=[r[key] for r in plain],
            params={**params, "secure": "TLS everywhere + SCRAM Basic + ACLs"},
        )


if __name__ == "__main__":
    main()
