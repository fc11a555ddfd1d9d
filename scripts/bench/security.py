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

Method: both clusters run at once, and each workload is measured in short pairs, a plaintext
run and a secure run back to back, the order alternating from pair to pair (ABBAAB...), so
that the load of a shared machine, which drifts over seconds, falls on both halves of a pair
alike. Each pair gives a ratio; a figure's ``params`` carry their median and spread
(``pair_ratio_median``, ``pair_ratio_spread``: min, first quartile, third quartile, max),
which is the figure to quote; ``value`` and ``baseline_value`` are the medians of the secure
and plaintext runs (two short runs of a loaded machine compared once said 0.64 one time and
1.54 the next).

Each pair's topics are deleted once it is measured: a follower's fetch carries every partition
it follows, so partitions left idle by earlier pairs made every later produce slower on both
clusters (``delete_topics``).

Each timed run starts with its connections open (a producer's first record to each
partition, a consumer's end offsets, concurrent reads of the topic over HTTP), as a
long-lived client has them: what opening one costs is a figure of its own.

Where the cost is, as figures of their own:

* ``security.cost.tls_handshake``: a request on a new connection (GET /v3/health, which needs
  no credentials), secure against plaintext, alternating: the TLS handshake's price;
* ``security.cost.tls_request``: the same request on a kept-alive connection: TLS's record
  layer per request;
* ``security.cost.tls_bulk``: MB/s of a 72 KB document on a kept-alive connection (TLS's
  encryption and its asyncio/uvloop transports per byte);
* ``security.cost.basic_auth``: a remembered HTTP Basic login (``AuthState.basic_principal``,
  in process: one HMAC and lookups; ``params.first_login_ms``: the PBKDF2 derivation a new
  connection's first login of a user pays once per process);
* ``security.cost.acl_check``: one authorization (``Authorizer.allows``) against the bench's
  two ACLs, in process (``params.with_1000_other_bindings_us``: among 1,000 others' on other
  topics: the check scans every binding of the resource type).

``--quick``: 5 pairs of 100,000 records through the client and 20,000 through HTTP per
workload; ``--smoke``: 2 pairs of 2,000 and 500; full: 15 pairs of 300,000 and 60,000.

Usage: python scripts/bench/security.py [--quick | --smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import ssl
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from _report import add_size_flags, figure, progress, size

from api.client import AsyncConsumer, AsyncProducer, ClientSecurity, TopicPartition
from api.http.auth import AuthState, StaticCredentials
from api.http.authz import Authorizer
from api.node.localcluster import running_cluster
from metalog.image import AclsImage, PMap
from metalog.security import (
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    ScramCredential,
)

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


def _admin(t: Target, admin_ssl: ssl.SSLContext | None) -> Target:
    """``t``'s cluster as its admin reaches it (the admin certificate, no Basic login)."""
    admin = Target(t.urls, None)
    admin.ssl = admin_ssl
    return admin


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
    admin = _admin(t, admin_ssl)
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
        # Connections (a TLS handshake and a login each on the secure cluster) are opened
        # before timing, as a long-lived producer has them: their price is its own figure,
        # security.cost.tls_handshake, not spread over a few hundred milliseconds of records.
        for part in range(PARTITIONS):
            await p.send_and_wait(topic, VALUE, partition=part)
        t0 = time.perf_counter()
        chunk = min(5_000, n)
        futs = [p.send_batch(topic, [VALUE] * chunk) for _ in range(n // chunk)]
        for f in futs:
            await (await f)
        await p.flush()
        return n / (time.perf_counter() - t0)


async def client_fetch(t: Target, topic: str, n: int) -> float:
    async with AsyncConsumer(
        t.urls, security=t.security, auto_offset_reset="earliest", fetch_max_bytes=4 << 20
    ) as c:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        c.assign(tps)
        await c.end_offsets(tps)  # connects to every leader before timing (as produce)
        await c.seek_to_beginning(*tps)
        got = 0
        t0 = time.perf_counter()
        while got < n:
            got += len(await c.poll(timeout_ms=1000))
            if time.perf_counter() - t0 > 120:
                raise RuntimeError(f"read {got} of {n} records in 120 s")
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

        await _warm(s, t, topic, REST_IN_FLIGHT)
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

        await _warm(s, t, topic, PARTITIONS, cid)
        t0 = time.perf_counter()
        got = sum(await asyncio.gather(*(partition(p) for p in range(PARTITIONS))))
        if got < n:
            raise RuntimeError(f"read {got} of {n}")
        return got / (time.perf_counter() - t0)


async def _warm(
    s: aiohttp.ClientSession, t: Target, topic: str, n: int, cid: str | None = None
) -> None:
    """Open the session's ``n`` connections to each broker (a handshake and a login each on
    the secure cluster) before timing, with concurrent reads of the topic's description."""
    path = f"/topics/{topic}" if cid is None else f"/v3/clusters/{cid}/topics/{topic}"

    async def get(url: str) -> None:
        async with s.get(f"{url}{path}", headers=t.headers) as r:
            await r.read()
            if r.status != 200:
                raise RuntimeError(f"warm-up GET {path}: {r.status}")

    await asyncio.gather(*(get(url) for url in t.urls for _ in range(n)))


async def delete_topics(t: Target, admin_ssl: ssl.SSLContext | None, cid: str, run: int) -> None:
    """Delete a pair's topics once it is measured. A follower's fetch carries every
    partition it follows (Longboat has no fetch sessions, KIP-227), so idle partitions left
    by earlier pairs would cost every later produce more, both clusters alike: broker CPU
    per million records 0.47 s with none, 0.82 s beside 120 idle partitions (RF 2 on two
    brokers), 1.2 s beside 240 (docs/security.md, "What it costs")."""
    admin = _admin(t, admin_ssl)
    async with aiohttp.ClientSession() as s:
        for name in (f"{TOPIC}-c{run}", f"{TOPIC}-h{run}"):
            await _json(s, "DELETE", f"{t.urls[0]}/v3/clusters/{cid}/topics/{name}", admin)


async def create_topics(t: Target, admin_ssl: ssl.SSLContext | None, cid: str, run: int) -> None:
    admin = _admin(t, admin_ssl)
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


WORKLOADS = ("client.produce", "client.fetch", "http_json.produce", "http_json.fetch")
Cluster = tuple[Target, ssl.SSLContext | None, str]


async def one_workload(
    key: str, t: Target, cid: str, pair: int, n_client: int, n_http: int
) -> float:
    """Records/s of one run of ``key``; a fetch reads what the pair's produce wrote."""
    if key == "client.produce":
        return await client_produce(t, f"{TOPIC}-c{pair}", n_client)
    if key == "client.fetch":
        return await client_fetch(t, f"{TOPIC}-c{pair}", n_client)
    if key == "http_json.produce":
        return await http_produce(t, f"{TOPIC}-h{pair}", n_http)
    return await http_fetch(t, cid, f"{TOPIC}-h{pair}", n_http)


def measure_pairs(
    plain: Cluster, secure: Cluster, pairs: int, n_client: int, n_http: int
) -> dict[str, list[tuple[float, float]]]:
    """Per workload, ``pairs`` of (plaintext, secure) records/s measured back to back, the
    order alternating from pair to pair."""
    out: dict[str, list[tuple[float, float]]] = {k: [] for k in WORKLOADS}
    for pair in range(pairs):
        for t, admin_ssl, cid in (plain, secure):
            asyncio.run(create_topics(t, admin_ssl, cid, pair))
        order = [("plain", plain), ("secure", secure)]
        if pair % 2:
            order.reverse()
        for key in WORKLOADS:
            got = {}
            for name, (t, _admin_ssl, cid) in order:
                got[name] = asyncio.run(one_workload(key, t, cid, pair, n_client, n_http))
            out[key].append((got["plain"], got["secure"]))
            progress(
                f"pair {pair} {key}: plaintext {got['plain']:,.0f}, secure {got['secure']:,.0f} "
                f"records/s, ratio {got['secure'] / got['plain']:.2f}"
            )
        for t, admin_ssl, cid in (plain, secure):
            asyncio.run(delete_topics(t, admin_ssl, cid, pair))
    return out


def spread(xs: list[float]) -> list[float]:
    """min, first quartile, third quartile, max (the quartiles of one value are itself)."""
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
    return [round(min(xs), 3), round(q[0], 3), round(q[2], 3), round(max(xs), 3)]


async def _health_ms(url: str, ctx: ssl.SSLContext | None, n: int, *, new: bool) -> list[float]:
    """Latencies of ``n`` GET /v3/health, each on a new connection (``new``) or all on one."""
    conn = aiohttp.TCPConnector(force_close=new, limit=1, ssl=ctx if ctx is not None else True)
    out = []
    async with aiohttp.ClientSession(connector=conn) as s:
        if not new:
            async with s.get(f"{url}/v3/health") as r:  # the one connection, made
                await r.read()
        for _ in range(n):
            t0 = time.perf_counter()
            async with s.get(f"{url}/v3/health") as r:
                await r.read()
            out.append((time.perf_counter() - t0) * 1000)
    return out


def connection_costs(plain: Cluster, secure: Cluster, rounds: int, n: int) -> None:
    """``security.cost.tls_handshake`` and ``security.cost.tls_request``: median latencies,
    the clusters alternating per round."""
    for name, new in (("tls_handshake", True), ("tls_request", False)):
        got: dict[str, list[float]] = {"plain": [], "secure": []}
        for r in range(rounds):
            order = [("plain", plain), ("secure", secure)]
            for who, (t, _admin_ssl, _cid) in order if r % 2 == 0 else order[::-1]:
                ctx = None if t.security is None else t.ssl
                lat = asyncio.run(_health_ms(t.urls[0], ctx, n, new=new))
                got[who].append(statistics.median(lat))
        what = "a new connection" if new else "a kept-alive connection"
        if not new:
            _bulk_figure(plain, secure, rounds)
        figure(
            f"security.cost.{name}",
            "ms",
            got["secure"],
            baseline=f"the same GET /v3/health on {what} to the plaintext cluster, same run",
            baseline_values=got["plain"],
            higher_is_better=False,
            params={
                "request": "GET /v3/health (no credentials)",
                "requests_per_round": n,
                "extra_ms": round(
                    statistics.median(got["secure"]) - statistics.median(got["plain"]), 3
                ),
            },
        )


async def _bulk_mb_s(t: Target, n: int) -> float:
    """MB/s of ``n`` GET /openapi.json (72 KB) on one kept-alive connection."""
    conn = aiohttp.TCPConnector(limit=1, ssl=t.ssl if t.ssl is not None else True)
    got = 0
    async with aiohttp.ClientSession(connector=conn) as s:
        t0 = time.perf_counter()
        for _ in range(n):
            async with s.get(f"{t.urls[0]}/openapi.json", headers=t.headers) as r:
                got += len(await r.read())
        return got / (time.perf_counter() - t0) / 1e6


def _bulk_figure(plain: Cluster, secure: Cluster, rounds: int) -> None:
    """``security.cost.tls_bulk``: bytes through TLS (the same document, kept-alive)."""
    got: dict[str, list[float]] = {"plain": [], "secure": []}
    for r in range(rounds):
        order = [("plain", plain), ("secure", secure)]
        for who, (t, _admin_ssl, _cid) in order if r % 2 == 0 else order[::-1]:
            got[who].append(asyncio.run(_bulk_mb_s(t, 50)))
    figure(
        "security.cost.tls_bulk",
        "MB/s",
        got["secure"],
        baseline="the same GET /openapi.json on a kept-alive connection to the plaintext cluster",
        baseline_values=got["plain"],
        params={"request": "GET /openapi.json (72 KB; Basic, remembered, on the secure one)"},
    )


def _per_call_us(fn: Callable[[], object], n: int) -> float:
    """The median over 5 batches of ``n`` calls, in microseconds per call."""
    batches = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        batches.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(batches)


def check_costs(n: int) -> None:
    """``security.cost.basic_auth`` and ``security.cost.acl_check``, in process."""
    cred = ScramCredential.derive("SCRAM-SHA-256", PASSWORD, b"0123456789abcdef", 4096)
    state = AuthState(StaticCredentials({(USER, "SCRAM-SHA-256"): cred}))
    t0 = time.perf_counter()
    state.basic_principal(USER, PASSWORD)  # PBKDF2, then remembered
    first_ms = (time.perf_counter() - t0) * 1000
    figure(
        "security.cost.basic_auth",
        "us",
        [_per_call_us(lambda: state.basic_principal(USER, PASSWORD), n)],
        params={
            "mechanism": "SCRAM-SHA-256",
            "iterations": 4096,
            "first_login_ms": round(first_ms, 3),
        },
    )

    def allow(who: str, topic: str, op: Operation) -> AclBinding:
        return AclBinding(
            who, "*", ResourceType.TOPIC, topic, PatternType.LITERAL, op, Permission.ALLOW
        )

    mine = [
        AclBinding(
            f"User:{USER}",
            "*",
            ResourceType.TOPIC,
            "bench",
            PatternType.PREFIXED,
            op,
            Permission.ALLOW,
        )
        for op in (Operation.WRITE, Operation.READ)
    ]
    others = [allow(f"User:u{i}", f"t{i}", Operation.READ) for i in range(1000)]

    def check_us(bindings: list[AclBinding], n: int) -> float:
        # As a node holds them: the metadata image's AclsImage and its per-resource index.
        image = AclsImage.of(PMap({str(i): b for i, b in enumerate(bindings)}))
        az = Authorizer(_Acls(image), frozenset({"User:admin"}))
        return _per_call_us(
            lambda: az.allows(
                f"User:{USER}", "127.0.0.1", Operation.WRITE, ResourceType.TOPIC, "bench-c0"
            ),
            n,
        )

    figure(
        "security.cost.acl_check",
        "us",
        [check_us(mine, n)],
        params={
            "bindings": len(mine),
            "operation": "WRITE on a topic, allowed by a prefix",
            "with_1000_other_bindings_us": round(check_us(mine + others, max(n // 100, 10)), 3),
        },
    )


class _Acls:
    def __init__(self, image: AclsImage) -> None:
        self.image = image

    def acls_for(self, resource_type: ResourceType) -> tuple[AclBinding, ...]:
        return self.image.for_type(resource_type)

    def acls_on(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        return self.image.on_resource(resource_type, name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_size_flags(ap)
    sz = size(ap.parse_args())
    n_client, n_http, pairs = {
        "smoke": (2_000, 500, 2),
        # A fetch of 20,000 records took ~60 ms: fixed costs of a consumer's first polls
        # decided the ratio (0.3-0.5 at --quick, 0.95-1.0 for the same read of 100,000)
        "quick": (100_000, 20_000, 5),
        "full": (300_000, 60_000, 15),
    }[sz]
    rounds, n_health = (2, 5) if sz == "smoke" else (4, 40)
    root = Path(tempfile.mkdtemp(prefix="longboat-bench-security-"))
    try:
        with cluster(root / "plain", False) as p, cluster(root / "secure", True) as s:
            got = measure_pairs(p, s, pairs, n_client, n_http)
            connection_costs(p, s, rounds, n_health)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    check_costs(200 if sz == "smoke" else 20_000)
    params = {"records_client": n_client, "records_http": n_http, "value_bytes": len(VALUE)}
    for key in WORKLOADS:
        ratios = [sec / pl for pl, sec in got[key]]
        progress(
            f"{key}: pair ratio median {statistics.median(ratios):.2f}, spread "
            f"{json.dumps(spread(ratios))} over {len(ratios)} pairs"
        )
        figure(
            f"security.{key}",
            "records/s",
            [sec for _pl, sec in got[key]],
            baseline="the same on a plaintext cluster, same run, measured in alternating pairs",
            baseline_values=[pl for pl, _sec in got[key]],
            params={
                **params,
                "secure": "TLS everywhere + SCRAM Basic + ACLs",
                "pair_ratio_median": round(statistics.median(ratios), 3),
                "pair_ratio_spread": spread(ratios),
            },
        )


if __name__ == "__main__":
    main()
