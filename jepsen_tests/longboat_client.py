"""The queue workload's client for a real Longboat cluster, over the Python client.

One `LongboatQueueClient` per worker: one ``api.client.AsyncProducer`` (acks=all, idempotence
as the cluster says) and one ``AsyncConsumer`` per key, each assigned that key's partition,
so a worker's polls keep the consumer's own position and prefetching as an application's
would; a poll at another offset than the consumer's position (a re-assignment) seeks.
Every socket binds the client's own address (``source_host``, 127.0.0.100+), so partitions
can cut clients off too. Clients go to the leaders the brokers' metadata names, at the
addresses the brokers advertise: they do not go through the harness's TCP proxies.

How outcomes map (the history's ``fail`` means "certainly did not happen"):

* ``send`` refused before anything was queued (``await producer.send`` raised: no
  metadata, unknown partition) -> DefiniteError.
* the record's future failed with a deterministic refusal (the same request would be
  refused on every attempt: INVALID_REQUEST, MESSAGE_TOO_LARGE, ...) -> DefiniteError.
* any other failure -> IndefiniteError. The producer retries retriable errors (timeouts, not
  leader, not enough replicas) until ``delivery_timeout_ms``, so the error that ends a
  record may follow an attempt that reached the leader's log: NOT_ENOUGH_REPLICAS on the
  last attempt does not prove an earlier REQUEST_TIMED_OUT attempt left nothing behind.
* a poll asks the leader's high watermark first (ListOffsets latest): at or past it the
  answer is "nothing", at once; otherwise a poll that fails or brings nothing within the
  poll timeout raises DefiniteError: reads have no effect, and the final reads must
  not take an unavailable leader for the end of the log.

`LongboatGroupMember` consumes as a member of a consumer group instead (see its docstring).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from typing import Any, Protocol

import aiohttp

from api.client import (
    AsyncConsumer,
    AsyncGroupConsumer,
    AsyncProducer,
    ClientError,
    TopicPartition,
)
from api.client.coordinator import CoordinatorClient
from api.client.security import ClientSecurity
from api.client.transport import MetadataCache, Transport, normalize_bootstrap
from jepsen_tests.cluster import DefiniteError, IndefiniteError, OnRebalance


class LongboatCluster(Protocol):
    """What the clients need of ``jepsen_tests.longboat.LongboatCluster``, which creates
    them: a protocol, so that this module does not import the module that imports it."""

    topic: str
    idempotence: bool
    keys: list[str]
    brokers: list[str]
    by_id: dict[int, str]
    client_security: ClientSecurity | None
    """TLS trust and credentials on a secure cluster; None: plaintext."""

    def url(self, name: str) -> str: ...

    def broker_urls(self) -> list[str]: ...

    def key_partition(self, key: str) -> int: ...


# Refusals that do not depend on the cluster's state: every attempt would get them, so the
# first one did too and nothing was appended.
DETERMINISTIC_REFUSALS = frozenset(
    {
        "INVALID_REQUEST",
        "MESSAGE_TOO_LARGE",
        "INVALID_RECORD",
        "RECORD_LIST_TOO_LARGE",
        "INVALID_TOPIC_EXCEPTION",
        "ILLEGAL_STATE",
        "UNSUPPORTED_VERSION",
    }
)


async def _start_or_definite(client: AsyncProducer | AsyncConsumer, what: str) -> None:
    """Start a client; one that cannot start (no broker answers its metadata request) sent
    nothing, so the operation that needed it definitely did not happen."""
    try:
        await client.start()
    except ClientError as e:
        await client.close()
        raise DefiniteError(f"{what} start: {e}") from e


class LongboatQueueClient:
    def __init__(
        self,
        cluster: LongboatCluster,
        name: str,
        host: str,
        *,
        request_timeout_ms: int = 3_000,
        delivery_timeout_ms: int = 8_000,
        poll_timeout_ms: int = 1_000,
    ) -> None:
        self.cluster = cluster
        self.name = name
        self.host = host
        self.request_timeout_ms = request_timeout_ms
        self.delivery_timeout_ms = delivery_timeout_ms
        self.poll_timeout_ms = poll_timeout_ms
        self.bootstrap = cluster.broker_urls()
        self._producer: AsyncProducer | None = None
        self._consumers: dict[int, AsyncConsumer] = {}
        self._positions: dict[int, int] = {}

    async def _producer_or_start(self) -> AsyncProducer:
        if self._producer is None:
            p = AsyncProducer(
                self.bootstrap,
                acks=-1,
                linger_ms=0,
                enable_idempotence=self.cluster.idempotence,
                request_timeout_ms=self.request_timeout_ms,
                delivery_timeout_ms=self.delivery_timeout_ms,
                source_host=self.host,
                security=self.cluster.client_security,
            )
            await _start_or_definite(p, "producer")
            self._producer = p
        return self._producer

    def _leader_name(self, p: AsyncProducer, partition: int) -> str | None:
        info = p.metadata.current.topics.get(self.cluster.topic, {}).get(partition)
        return None if info is None else self.cluster.by_id.get(info.leader)

    async def send(self, key: str, value: int) -> tuple[int, str | None]:
        p = await self._producer_or_start()
        partition = self.cluster.key_partition(key)
        try:
            fut = await p.send(
                self.cluster.topic, str(value).encode(), key=key.encode(), partition=partition
            )
        except ClientError as e:
            raise DefiniteError(f"not queued: {e}") from e
        try:
            md = await fut
        except ClientError as e:
            err = DefiniteError if e.code in DETERMINISTIC_REFUSALS else IndefiniteError
            raise err(str(e)) from e
        return md.offset, self._leader_name(p, partition)

    async def _consumer(self, partition: int) -> AsyncConsumer:
        c = self._consumers.get(partition)
        if c is None:
            c = AsyncConsumer(
                self.bootstrap,
                max_wait_ms=200,
                auto_offset_reset="none",
                request_timeout_ms=self.request_timeout_ms,
                source_host=self.host,
                security=self.cluster.client_security,
            )
            await _start_or_definite(c, "consumer")
            c.assign([TopicPartition(self.cluster.topic, partition)])
            self._consumers[partition] = c
        return c

    async def poll(self, key: str, offset: int, max_records: int) -> list[tuple[int, Any]]:
        partition = self.cluster.key_partition(key)
        tp = TopicPartition(self.cluster.topic, partition)
        c = await self._consumer(partition)
        if self._positions.get(partition) != offset:
            c.seek(tp, offset)
        try:
            # The leader's high watermark first: a caught-up poll answers at once instead of
            # waiting out the poll timeout, and the final reads never take an unavailable
            # leader for the end of the log.
            hw = (await c.end_offsets([tp]))[tp]
            if hw <= offset:
                self._positions[partition] = offset
                return []
            recs = await c.poll(timeout_ms=self.poll_timeout_ms, max_records=max_records)
        except ClientError as e:
            self._positions.pop(partition, None)
            raise DefiniteError(str(e)) from e
        out = [(r.offset, int(r.value)) for r in recs if r.value is not None]
        if not out:
            raise DefiniteError(
                f"no records from {offset} within {self.poll_timeout_ms} ms (high watermark {hw})"
            )
        self._positions[partition] = out[-1][0] + 1
        return out

    async def close(self) -> None:
        closers = [c.close() for c in self._consumers.values()]
        if self._producer is not None:
            closers.append(self._producer.close())
        # A client that cannot close cleanly (its leader is gone) has nothing left to lose.
        await asyncio.gather(*closers, return_exceptions=True)
        self._consumers.clear()
        self._producer = None


class LongboatGroupMember:
    """One member of the queue workload's consumer group: an ``api.client.AsyncGroupConsumer``
    subscribed to the workload's topic, auto-commit off (the worker commits what a poll
    returned once it has recorded it), ``auto_offset_reset="earliest"`` (the topic has no
    retention: a partition without a committed offset starts at 0). The consumer's fetches,
    metadata requests and coordinator calls share one transport bound to ``source_host``, so
    partitions cut the member off as they cut the other clients.

    Assignment changes go to ``on_rebalance`` from the consumer's callbacks, which run at the
    moment the fetcher's assignment changes: ``assigned`` after the group's committed offsets
    were fetched and seeked, before any poll can return the partition's records; ``revoked``
    once the partition is paused, before it is dropped. A partition *lost* (the member was
    fenced) leaves the fetcher at once but is reported later, from the member task; by then
    the coordinator may have handed it back, with an ``assigned`` already reported, so only
    lost partitions that are not assigned again are reported.

    Outcomes:

    * ``poll``: any error -> DefiniteError (a poll that raised returned nothing and moved no
      position).
    * ``commit``: DefiniteError only when the member is in no generation (not joined yet, or
      fenced and rejoining): the consumer refuses such a commit before sending anything.
      Every other failure is IndefiniteError: the coordinator client retries timeouts and
      lost connections, and the consumer retries REBALANCE_IN_PROGRESS, so even a refusal
      may follow an attempt that was applied and whose answer was lost.
    """

    def __init__(
        self,
        cluster: LongboatCluster,
        name: str,
        host: str,
        *,
        group: str,
        assignor: str,
        on_rebalance: OnRebalance,
        request_timeout_ms: int = 3_000,
        poll_timeout_ms: int = 200,
        session_timeout_ms: int = 6_000,
        consumer: AsyncGroupConsumer | None = None,
    ) -> None:
        self.topic = cluster.topic
        self.group = group
        self.poll_timeout_ms = poll_timeout_ms
        self._on_rebalance = on_rebalance
        self._partition = {k: cluster.key_partition(k) for k in cluster.keys}
        self._key = {p: k for k, p in self._partition.items()}
        self._consumer = (
            consumer
            if consumer is not None
            else AsyncGroupConsumer(
                cluster.broker_urls(),
                group_id=group,
                client_id=name,
                auto_offset_reset="earliest",
                enable_auto_commit=False,
                # The brokers' smallest allowed session: a member behind a fault is dropped, and
                # its partitions move on, within a run of a few tens of seconds.
                session_timeout_ms=session_timeout_ms,
                heartbeat_interval_ms=session_timeout_ms // 6,
                # Also the rebalance timeout (KIP-62): how long a join waits for a member that
                # does not rejoin. Kafka's 300 s would outlast the run.
                max_poll_interval_ms=20_000,
                partition_assignment_strategy=assignor,
                max_wait_ms=200,
                request_timeout_ms=request_timeout_ms,
                source_host=host,
                security=cluster.client_security,
            )
        )

    def _tp(self, key: str) -> TopicPartition:
        return TopicPartition(self.topic, self._partition[key])

    def _keys(self, tps: set[TopicPartition]) -> list[str]:
        return sorted(
            self._key[tp.partition]
            for tp in tps
            if tp.topic == self.topic and tp.partition in self._key
        )

    def _report(self, event: str, tps: set[TopicPartition]) -> None:
        keys = self._keys(tps)
        if keys:
            self._on_rebalance(event, keys)

    def _lost(self, tps: set[TopicPartition]) -> None:
        self._report("lost", tps - self._consumer.assignment())

    async def start(self) -> None:
        c = self._consumer
        try:
            await c.start()
        except ClientError as e:
            await self.close()
            raise DefiniteError(f"group consumer start: {e}") from e
        c.subscribe(
            [self.topic],
            on_assigned=lambda tps: self._report("assigned", tps),
            on_revoked=lambda tps: self._report("revoked", tps),
            on_lost=self._lost,
        )

    async def poll(self, max_records: int) -> dict[str, list[tuple[int, Any]]]:
        try:
            recs = await self._consumer.poll(
                timeout_ms=self.poll_timeout_ms, max_records=max_records
            )
        except ClientError as e:
            raise DefiniteError(str(e)) from e
        out: dict[str, list[tuple[int, Any]]] = {}
        for r in recs:
            if r.value is not None and r.topic == self.topic and r.partition in self._key:
                out.setdefault(self._key[r.partition], []).append((r.offset, int(r.value)))
        return out

    async def commit(self, offsets: dict[str, int]) -> None:
        c = self._consumer
        # The consumer makes this same check before its first attempt, with no await in
        # between: a member in no generation sends nothing.
        if c.generation < 0 or not c.member_id:
            raise DefiniteError(
                f"group {self.group}: not in a generation (joining, or fenced "
                "and rejoining); nothing sent"
            )
        try:
            await c.commit({self._tp(k): o for k, o in offsets.items()})
        except ClientError as e:
            raise IndefiniteError(f"{type(e).__name__}: {e}") from e

    async def close(self) -> None:
        # A member that cannot leave (its coordinator is gone) is dropped by its session
        # timeout; nothing is committed on close (auto-commit is off).
        with contextlib.suppress(ClientError, OSError):
            await self._consumer.close()


async def wait_for_group_coordinator(
    cluster: LongboatCluster, group: str, host: str, timeout_s: float = 30.0
) -> None:
    """Until `group`'s coordinator answers: the first lookup creates ``__consumer_offsets``
    and its partitions' leaders load them, which takes seconds a run's members should not
    spend under faults."""
    transport = Transport(request_timeout_s=5.0, source_host=host, security=cluster.client_security)
    try:
        metadata = MetadataCache(transport, normalize_bootstrap(cluster.broker_urls()))
        coordinator = CoordinatorClient(transport, metadata, group, retry_timeout_s=timeout_s)
        try:
            ans = await coordinator.call("fetch_offsets", {"partitions": None})
        except ClientError as e:
            raise RuntimeError(f"group {group}: no coordinator within {timeout_s:g} s: {e}") from e
        if ans.get("error") not in (None, "NONE"):
            raise RuntimeError(f"group {group}: fetch_offsets answered {ans['error']}")
    finally:
        await transport.close()


async def _mark_sent(_session: aiohttp.ClientSession, ctx: Any, _params: Any) -> None:
    if isinstance(ctx.trace_request_ctx, dict):
        ctx.trace_request_ctx["sent"] = True


class LongboatMetadataClient:
    """Topic create/delete/describe over the brokers' v3 HTTP API, each op through a broker
    chosen at random (any broker forwards admin commands to the active controller and
    answers reads from its own metadata image).

    The definition the workload creates, ``{"partitions": n, "create": id}``, travels as the
    topic's partition count and its ``retention.ms`` (``RETENTION_BASE_MS + id``), so a
    describe tells which create it sees. A describe reads the topic, its ``retention.ms``,
    and the topic again, and retries if the topic id changed in between (deleted and
    re-created): the two reads come from one broker's image, which only moves forward.

    Outcomes: a refusal (4xx) is DefiniteError, except that ``TOPIC_ALREADY_EXISTS`` is an
    answer (created: false), as is 404 on delete (deleted: false); a 5xx, a timeout or a
    dropped connection after sending is IndefiniteError (the broker's controller client
    retries commands, so one may have been applied); a refused connection is DefiniteError
    unless an earlier attempt of the same request was sent (aiohttp resends idempotent
    requests once over a fresh connection when a pooled one drops).
    """

    RETENTION_BASE_MS = 1_000_000_000

    def __init__(
        self,
        cluster: LongboatCluster,
        name: str,
        host: str,
        timeout_s: float = 10.0,
        replication_factor: int = 1,
    ) -> None:
        self.cluster = cluster
        self.host = host
        self.timeout_s = timeout_s
        self.replication_factor = replication_factor
        self.rng = random.Random(name)
        self._session: aiohttp.ClientSession | None = None
        self._cluster_id: str | None = None
        self.last_node: str | None = None

    def _sess(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # aiohttp resends an idempotent request (GET, DELETE, ...) once when a pooled
            # keep-alive connection drops (RFC 9112 9.3.1): a DELETE that reached a broker
            # killed mid-request is retried, the retry is refused, and the refusal is all
            # the caller sees. Record whether any attempt's headers went out.
            trace = aiohttp.TraceConfig()
            trace.on_request_headers_sent.append(_mark_sent)
            security = self.cluster.client_security
            ctx = None if security is None else security.ssl_context()
            auth = None if security is None else security.authorization()
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout_s, sock_connect=2.0),
                connector=aiohttp.TCPConnector(
                    local_addr=(self.host, 0), limit=10, ssl=ctx if ctx is not None else True
                ),
                headers={"Authorization": auth} if auth is not None else None,
                trace_configs=[trace],
            )
        return self._session

    async def _request(
        self, method: str, base: str, path: str, body: Any = None
    ) -> tuple[int, Any]:
        attempt: dict[str, bool] = {"sent": False}
        try:
            async with self._sess().request(
                method, base + path, json=body, trace_request_ctx=attempt
            ) as r:
                raw = await r.read()
                return r.status, (json.loads(raw) if raw else None)
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as e:
            if attempt["sent"]:
                # An earlier attempt of this request was sent (finding 5 of
                # docs/fault-injection.md: a delete recorded as refused had been applied).
                raise IndefiniteError(
                    f"{method} {base}{path}: sent, then the resend could not connect: {e!r}"
                ) from e
            raise DefiniteError(f"{method} {base}{path}: connect: {e!r}") from e
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as e:
            raise IndefiniteError(f"{method} {base}{path}: {type(e).__name__}: {e}") from e

    async def _base(self) -> tuple[str, str]:
        """(broker URL, path prefix /v3/clusters/<id>) through a random broker."""
        broker = self.rng.choice(self.cluster.brokers)
        self.last_node = broker
        base = self.cluster.url(broker)
        if self._cluster_id is None:
            status, body = await self._request("GET", base, "/v3/clusters")
            if status != 200 or not body or not body.get("data"):
                raise DefiniteError(f"GET /v3/clusters: HTTP {status}: {body}")
            self._cluster_id = str(body["data"][0]["cluster_id"])
        return base, f"/v3/clusters/{self._cluster_id}"

    @staticmethod
    def _error(status: int, body: Any, what: str) -> Exception:
        msg = f"{what}: HTTP {status}: {body}"
        return IndefiniteError(msg) if status >= 500 else DefiniteError(msg)

    async def create_topic(self, topic: str, definition: dict[str, Any]) -> bool:
        base, prefix = await self._base()
        retention = self.RETENTION_BASE_MS + int(definition["create"])
        status, body = await self._request(
            "POST",
            base,
            prefix + "/topics",
            {
                "topic_name": topic,
                "partitions_count": int(definition["partitions"]),
                "replication_factor": self.replication_factor,
                "configs": [{"name": "retention.ms", "value": str(retention)}],
            },
        )
        if status in (201, 202):
            return True
        if status == 400 and "already exists" in str((body or {}).get("message", "")):
            return False
        raise self._error(status, body, f"create {topic}")

    async def delete_topic(self, topic: str) -> bool:
        base, prefix = await self._base()
        status, body = await self._request("DELETE", base, f"{prefix}/topics/{topic}")
        if status == 204:
            return True
        if status == 404:
            return False
        raise self._error(status, body, f"delete {topic}")

    async def describe_topic(self, topic: str) -> dict[str, Any] | None:
        base, prefix = await self._base()
        path = f"{prefix}/topics/{topic}"
        for _ in range(5):
            try:
                status, t1 = await self._request("GET", base, path)
                if status == 404:
                    return None
                if status != 200:
                    raise DefiniteError(f"describe {topic}: HTTP {status}: {t1}")
                status, cfg = await self._request("GET", base, path + "/configs/retention.ms")
                status2, t2 = await self._request("GET", base, path)
            except IndefiniteError as e:  # a read has no effect either way
                raise DefiniteError(str(e)) from e
            if status2 == 200 and status == 200 and t1["topic_id"] == t2["topic_id"]:
                return {
                    "partitions": int(t1["partitions_count"]),
                    "create": int(cfg["value"]) - self.RETENTION_BASE_MS,
                    "topic_id": t1["topic_id"],
                }
        raise DefiniteError(f"describe {topic}: the topic kept changing under the reads")

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
