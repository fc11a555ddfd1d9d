"""The client's wire: msgpack over HTTP to the brokers' data routes, and cluster metadata.

Every call is ``POST {broker}/binary/v1/<route>`` with a msgpack map, answered with
a msgpack map or ``{"error": <Kafka error name>, "message", "leader_id"}`` (see
``broker/data_routes.py``): the same binary path replication uses, so a produced batch is
stored byte for byte as the client built it. One keep-alive ``aiohttp`` session per client.

Cluster metadata (which broker leads which partition, and where brokers listen) comes from
``GET /v3/broker/metadata`` on any broker, tried in order: brokers of the last answer first,
then the bootstrap URLs. Refreshes are shared: many callers that find their metadata stale
at once cause one request.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import msgpack
import orjson

from api.client.errors import SSL_AUTHENTICATION_FAILED, ClientError
from api.client.security import ClientSecurity
from common import netbind
from common.principal import PRINCIPAL_HEADER, forwarding_headers

MSGPACK = "application/msgpack"
DATA_PREFIX = "/binary/v1"
"""The brokers' public binary routes (issue 18: on a client listener, authenticated; the
``/internal/broker/v1`` twins are node-to-node)."""


def normalize_bootstrap(bootstrap: str | Sequence[str]) -> list[str]:
    """``"http://a:8082,http://b:8082"``, a list of such, or bare ``host:port`` -> URLs."""
    items = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
    out = []
    for item in items:
        u = item.strip().rstrip("/")
        if not u:
            continue
        if "://" not in u:
            u = f"http://{u}"
        out.append(u)
    if not out:
        raise ValueError("bootstrap needs at least one broker URL")
    return out


class Transport:
    """One aiohttp session; msgpack calls to broker data routes."""

    def __init__(
        self,
        *,
        request_timeout_s: float = 30.0,
        connections: int = 100,
        source_host: str | None = None,
        security: ClientSecurity | None = None,
    ) -> None:
        self.request_timeout_s = request_timeout_s
        self._connections = connections
        self.source_host = source_host
        self.security = security
        self._authorization = None if security is None else security.authorization()
        self._session: aiohttp.ClientSession | None = None
        self.acting_as: Callable[[str | None], str | None] | None = None
        """Inside a broker: the principal each call (by route; None for a JSON read) is
        made for, or None for the node itself, instead of the serving request's. A producer
        kept between requests (``api.http.transactions``) acts for whichever request holds
        it, which its background tasks' inherited context cannot tell."""

    def _headers(self, route: str | None = None) -> dict[str, str]:
        # Inside a broker (v2 consumer instances, group reads) the client forwards the
        # principal of the request it serves (issue 18); a user's process has none.
        if self.acting_as is None:
            h = forwarding_headers()
        else:
            p = self.acting_as(route)
            h = {} if p is None else {PRINCIPAL_HEADER: p}
        if self._authorization is not None:
            h["Authorization"] = self._authorization
        return h

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                # source_host: a fault-injection client on 127.0.0.N sends from it, so
                # firewall rules between loopback addresses see who is talking.
                connector=netbind.connector(
                    self.source_host,
                    limit=self._connections,
                    keepalive_timeout=60,
                    **({} if (ctx := self._ssl()) is None else {"ssl": ctx}),
                ),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=5),
                read_bufsize=netbind.READ_BUFSIZE,
            )
        return self._session

    def _ssl(self) -> Any:
        return None if self.security is None else self.security.ssl_context()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def call(
        self, url: str, route: str, body: dict[str, Any], *, timeout_s: float | None = None
    ) -> dict[str, Any]:
        """The answer map; raises ``ClientError`` for a refusal or a failure to get one."""
        answer = await self.call_map(url, route, body, timeout_s=timeout_s)
        err = answer.get("error")
        if err is not None:
            raise ClientError(
                str(err),
                str(answer.get("message") or ""),
                leader_id=int(answer.get("leader_id", -1) or -1),
            )
        return answer

    async def call_map(
        self, url: str, route: str, body: dict[str, Any], *, timeout_s: float | None = None
    ) -> dict[str, Any]:
        """The answer map as the broker sent it, ``error`` included; raises ``ClientError``
        only when no map came back. The group routes answer group-level outcomes as
        ``{"error": "NONE" | <code>, ...}`` beside the other fields, which ``call`` would
        turn into an exception and lose."""
        data = msgpack.packb(body, use_bin_type=True)
        timeout = aiohttp.ClientTimeout(total=timeout_s or self.request_timeout_s)
        try:
            async with self.session().post(
                f"{url}{DATA_PREFIX}/{route}",
                data=data,
                headers={"Content-Type": MSGPACK, **self._headers(route)},
                timeout=timeout,
            ) as resp:
                payload = await resp.read()
                status = resp.status
        except TimeoutError as e:
            raise ClientError("REQUEST_TIMED_OUT", f"{route} to {url}") from e
        except (aiohttp.ClientConnectorCertificateError, ssl.SSLCertVerificationError) as e:
            raise ClientError(SSL_AUTHENTICATION_FAILED, f"{route} to {url}: {e}") from e
        except (aiohttp.ClientError, OSError) as e:
            raise ClientError("NETWORK_EXCEPTION", f"{route} to {url}: {e}") from e
        try:
            answer = msgpack.unpackb(payload, raw=False)
        except Exception:  # not msgpack: a proxy's page, a server error
            answer = None
        _raise_for_security(status, payload, url)
        # A body the broker refuses is answered 400 with the usual error map (INVALID_REQUEST).
        if status != 200 and not (
            status == 400 and isinstance(answer, dict) and answer.get("error")
        ):
            raise ClientError(
                "UNKNOWN_SERVER_ERROR", f"{url} answered HTTP {status}: {payload[:200]!r}"
            )
        if not isinstance(answer, dict):
            raise ClientError("UNKNOWN_SERVER_ERROR", f"{url}: answer is not a map")
        return answer

    async def get_json(self, url: str, path: str, *, timeout_s: float = 5.0) -> Any:
        try:
            async with self.session().get(
                f"{url}{path}",
                timeout=aiohttp.ClientTimeout(total=timeout_s),
                headers=self._headers(),
            ) as r:
                payload = await r.read()
                _raise_for_security(r.status, payload, url)
                if r.status != 200:
                    raise ClientError(
                        "UNKNOWN_SERVER_ERROR",
                        f"GET {url}{path}: HTTP {r.status}: {payload[:200]!r}",
                    )
                return orjson.loads(payload)
        except TimeoutError as e:
            raise ClientError("REQUEST_TIMED_OUT", f"GET {url}{path}") from e
        except (aiohttp.ClientConnectorCertificateError, ssl.SSLCertVerificationError) as e:
            raise ClientError(SSL_AUTHENTICATION_FAILED, f"GET {url}{path}: {e}") from e
        except (aiohttp.ClientError, OSError) as e:
            raise ClientError("NETWORK_EXCEPTION", f"GET {url}{path}: {e}") from e


def _raise_for_security(status: int, payload: bytes, url: str) -> None:
    """401 and 403 (issue 18) as Kafka's error names, with the broker's message; a 503 from
    a broker not yet caught up with the metadata log (it cannot check users yet) as the
    retriable BROKER_NOT_AVAILABLE, so the client tries again or another broker."""
    if status not in (401, 403, 503):
        return
    try:
        message = str(orjson.loads(payload).get("message", ""))
    except (orjson.JSONDecodeError, AttributeError):
        message = payload[:200].decode(errors="replace")
    if status == 503:
        raise ClientError("BROKER_NOT_AVAILABLE", f"{url}: HTTP 503: {message}")
    if status == 401:
        raise ClientError("SASL_AUTHENTICATION_FAILED", f"{url}: {message}")
    code = "CLUSTER_AUTHORIZATION_FAILED"
    for kind in ("TOPIC", "GROUP", "TRANSACTIONAL_ID"):
        if kind in message:
            code = f"{kind}_AUTHORIZATION_FAILED"
            break
    raise ClientError(code, f"{url}: {message}")


@dataclass(frozen=True)
class PartitionInfo:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class BrokerInfo:
    broker_id: int
    url: str
    fenced: bool
    rack: str | None = None


@dataclass(frozen=True)
class ClusterMetadata:
    brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    topics: dict[str, dict[int, PartitionInfo]] = field(default_factory=dict)
    offset: int = -1

    @classmethod
    def from_summary(cls, data: dict[str, Any]) -> ClusterMetadata:
        brokers = {}
        for b in data.get("brokers", []):
            eps = b.get("endpoints") or []
            if not eps:
                continue
            scheme, host, port = eps[0][0], eps[0][1], eps[0][2]
            brokers[int(b["broker_id"])] = BrokerInfo(
                int(b["broker_id"]),
                f"{scheme}://{host}:{port}",
                bool(b.get("fenced")),
                b.get("rack"),
            )
        topics: dict[str, dict[int, PartitionInfo]] = {}
        for t in data.get("topics", []):
            topics[t["name"]] = {
                int(p["partition"]): PartitionInfo(
                    int(p["partition"]),
                    int(p["leader"]),
                    int(p.get("leader_epoch", -1)),
                    tuple(p.get("replicas", ())),
                    tuple(p.get("isr", ())),
                )
                for p in t.get("partitions", [])
            }
        return cls(brokers, topics, int(data.get("offset", -1)))

    def leader_url(self, topic: str, partition: int) -> str | None:
        p = self.topics.get(topic, {}).get(partition)
        if p is None or p.leader < 0:
            return None
        b = self.brokers.get(p.leader)
        return None if b is None else b.url


async def fetch_cluster_metadata(
    bootstrap: str | Sequence[str],
    *,
    timeout_s: float = 5.0,
    security: ClientSecurity | None = None,
) -> ClusterMetadata:
    """One metadata answer from the first broker that gives one."""
    t = Transport(security=security)
    try:
        return await MetadataCache(t, normalize_bootstrap(bootstrap)).refresh(timeout_s=timeout_s)
    finally:
        await t.close()


class MetadataCache:
    MIN_REFRESH_INTERVAL_S = 0.05
    """Kafka's ``retry.backoff.ms`` default (100 ms) halved: the floor between refreshes
    that callers force, so a storm of NOT_LEADER answers does not become a storm of
    metadata requests."""

    def __init__(self, transport: Transport, bootstrap: list[str]) -> None:
        self.transport = transport
        self.bootstrap = bootstrap
        self.current = ClusterMetadata()
        self._refreshing: asyncio.Task[ClusterMetadata] | None = None
        self._last_refresh = 0.0

    def _candidates(self) -> list[str]:
        urls = [b.url for b in self.current.brokers.values() if not b.fenced]
        return list(dict.fromkeys([*urls, *self.bootstrap]))

    async def _refresh_once(self, timeout_s: float) -> ClusterMetadata:
        errors: list[str] = []
        deadline = time.monotonic() + timeout_s
        attempt = 0
        while True:
            for url in self._candidates():
                try:
                    data = await self.transport.get_json(
                        url, "/v3/broker/metadata", timeout_s=min(5.0, timeout_s)
                    )
                except ClientError as e:
                    if e.code in ("SASL_AUTHENTICATION_FAILED", SSL_AUTHENTICATION_FAILED):
                        # Not retriable: the same credentials, or the same trust store, fail
                        # with every broker (Kafka's AuthenticationException)
                        raise
                    errors.append(str(e))
                    continue
                md = ClusterMetadata.from_summary(data)
                # Brokers follow the metadata log at their own pace: never go back to an
                # older image than one already seen.
                if md.offset >= self.current.offset:
                    self.current = md
                return self.current
            attempt += 1
            if time.monotonic() >= deadline:
                raise ClientError(
                    "NETWORK_EXCEPTION",
                    "no broker answered for metadata: " + "; ".join(errors[-3:]),
                )
            await asyncio.sleep(min(0.05 * attempt, 0.5))

    async def refresh(self, *, timeout_s: float = 10.0) -> ClusterMetadata:
        if self._refreshing is None or self._refreshing.done():
            wait = self._last_refresh + self.MIN_REFRESH_INTERVAL_S - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if self._refreshing is None or self._refreshing.done():
                self._last_refresh = time.monotonic()
                self._refreshing = asyncio.get_running_loop().create_task(
                    self._refresh_once(timeout_s)
                )
        return await asyncio.shield(self._refreshing)

    async def partitions(self, topic: str, *, timeout_s: float = 10.0) -> dict[int, PartitionInfo]:
        """The topic's partitions, refreshing until it appears or ``timeout_s`` passes."""
        deadline = time.monotonic() + timeout_s
        if not self.current.topics and not self.current.brokers:
            await self.refresh(timeout_s=timeout_s)
        while True:
            parts = self.current.topics.get(topic)
            if parts:
                return parts
            if time.monotonic() >= deadline:
                raise ClientError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {topic!r} does not exist")
            await self.refresh(timeout_s=max(0.1, deadline - time.monotonic()))
            if topic not in self.current.topics:
                await asyncio.sleep(0.1)

    async def leader_url(self, topic: str, partition: int, *, timeout_s: float = 10.0) -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            url = self.current.leader_url(topic, partition)
            if url is not None:
                return url
            parts = await self.partitions(topic, timeout_s=max(0.1, deadline - time.monotonic()))
            if partition not in parts:
                raise ClientError(
                    "UNKNOWN_TOPIC_OR_PARTITION", f"{topic} has no partition {partition}"
                )
            if time.monotonic() >= deadline:
                raise ClientError("LEADER_NOT_AVAILABLE", f"{topic}-{partition} has no leader")
            await asyncio.sleep(0.1)
            await self.refresh()

    async def any_broker_url(self) -> str:
        if not self.current.brokers:
            await self.refresh()
        return self._candidates()[0]


async def call_with_retries(
    metadata: MetadataCache,
    url_for: Callable[[], Awaitable[str]],
    route: str,
    body: dict[str, Any],
    *,
    budget_s: float,
    backoff_s: float,
) -> dict[str, Any]:
    """``route`` at the broker ``url_for`` names, retrying retriable errors with a growing
    backoff (metadata refreshed first when leadership may have moved) until ``budget_s``."""
    deadline = time.monotonic() + budget_s
    attempt = 0
    while True:
        try:
            return await metadata.transport.call(await url_for(), route, body)
        except ClientError as e:
            attempt += 1
            if not e.retriable or time.monotonic() >= deadline:
                raise
            if e.refresh_metadata:
                with contextlib.suppress(ClientError):
                    await metadata.refresh()
            await asyncio.sleep(min(backoff_s * attempt, 1.0))
