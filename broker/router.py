"""``PartitionRouter``: produce, consumer fetch and ListOffsets for any partition, from any broker.

Any broker accepts any request (docs/http-api.md). The router answers locally when
the metadata image names this broker leader of the partition (``ReplicaManager``), and otherwise
POSTs the same msgpack body to the leader's internal route (``/internal/broker/v1/<route>``) on
one keep-alive session, marked ``forwarded: true`` so the leader answers it locally or refuses
it: a request is forwarded at most once, so two brokers with different views of leadership
cannot bounce it between them.

During a leader change (NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, a replica the new leader
has not opened yet, a leader that does not answer) the request is retried with a short back-off,
re-reading the leader from the image each time, until the request's time budget ends; then it
fails with REQUEST_TIMED_OUT (or the last error, when that was not a leadership error).

Produce retries after a connection error can append a batch twice (the first attempt may have
reached the leader's log before the connection broke): at-least-once, as Kafka's
non-idempotent producer; an idempotent batch (producer id and sequence) is answered as a
duplicate by the leader instead. The batches the HTTP layer builds for acks=all carry one
(``broker.produce_lanes``).

Every refusal is a ``ReplicaError`` carrying Kafka's error name (``error_code``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import msgpack

from broker.errors import BrokerError
from broker.replica_manager import ReplicaError, ReplicaManager, error_code
from common import netbind
from common.principal import forwarding_headers
from storage.errors import StorageError

log = logging.getLogger(__name__)

MSGPACK = "application/msgpack"
INTERNAL_PREFIX = "/internal/broker/v1"
PUBLIC_PREFIX = "/binary/v1"
"""The client library's binary routes (issue 18; ``api.client.transport.DATA_PREFIX``)."""

RETRIABLE = frozenset(
    {
        "NOT_LEADER_OR_FOLLOWER",
        "LEADER_NOT_AVAILABLE",
        "UNKNOWN_LEADER_EPOCH",
        "FENCED_LEADER_EPOCH",
        "OFFSET_NOT_AVAILABLE",
        "BROKER_NOT_AVAILABLE",
    }
)
"""Errors a leader change explains: retried within the budget. UNKNOWN_TOPIC_OR_PARTITION is
retried only while the image still has the partition (the leader has not opened it yet)."""
EPOCH_ERRORS = frozenset({"FENCED_LEADER_EPOCH", "UNKNOWN_LEADER_EPOCH"})

STORAGE_CODES = {
    "OffsetOutOfRangeError": "OFFSET_OUT_OF_RANGE",
    "CorruptRecordError": "CORRUPT_MESSAGE",
    "RecordTooLargeError": "MESSAGE_TOO_LARGE",
    "InvalidRecordError": "INVALID_RECORD",
}

BACKOFF_S_MIN = 0.02
BACKOFF_S_MAX = 0.5
CONNECT_TIMEOUT_S = 2.0


def as_replica_error(e: Exception) -> ReplicaError:
    """The data path's exceptions as one type with Kafka's error name."""
    if isinstance(e, ReplicaError):
        return e
    if isinstance(e, BrokerError):
        return ReplicaError(error_code(e), str(e))
    if isinstance(e, StorageError):
        return ReplicaError(STORAGE_CODES.get(type(e).__name__, "KAFKA_STORAGE_ERROR"), str(e))
    raise e


class PartitionRouter:
    """See the module docstring. ``close()`` ends the forwarding session."""

    def __init__(self, mgr: ReplicaManager, *, request_timeout_s_max: float = 120.0) -> None:
        self.mgr = mgr
        self.request_timeout_s_max = request_timeout_s_max
        self._session = netbind.LazySession(limit=256, connect_timeout_s=CONNECT_TIMEOUT_S)
        self.forwarded_requests = 0
        self.retries = 0

    async def close(self) -> None:
        await self._session.close()

    def _sess(self) -> aiohttp.ClientSession:
        return self._session.get()

    # ------------------------------------------------------------------ image

    def leader_of(self, topic: str, partition: int) -> int | None:
        """The leader the image names (-1: none now); None if the partition does not exist."""
        image = self.mgr.image
        if image is None:
            return -1
        t = image.topics.get(topic)
        if t is None:
            return None
        reg = t.partitions.get(partition)
        return None if reg is None else int(reg.leader)

    # ------------------------------------------------------------------ operations

    async def produce(
        self,
        topic: str,
        partition: int,
        acks: int,
        timeout_ms: int,
        batch: bytes,
        *,
        forwarded: bool = False,
        transactional_id: str | None = None,
    ) -> dict[str, Any]:
        async def local() -> dict[str, Any]:
            return await self.mgr.produce(
                topic,
                partition,
                acks,
                max(left_ms(), 1),
                batch,
                transactional_id=transactional_id,
            )

        deadline = time.monotonic() + min(timeout_ms / 1000, self.request_timeout_s_max)

        def left_ms() -> int:
            return int((deadline - time.monotonic()) * 1000)

        def body() -> dict[str, Any]:
            out: dict[str, Any] = {
                "topic": topic,
                "partition": partition,
                "acks": acks,
                "timeout_ms": max(left_ms(), 1),
                "batch": batch,
            }
            if transactional_id is not None:
                out["transactional_id"] = transactional_id
            return out

        return await self._route(
            "produce", topic, partition, deadline, local, body, forwarded=forwarded
        )

    async def fetch(
        self,
        topic: str,
        partition: int,
        fetch_offset: int,
        *,
        max_bytes: int,
        max_wait_ms: int,
        min_bytes: int = 1,
        timeout_ms: int = 30_000,
        forwarded: bool = False,
        leader_epoch: int = -1,
        isolation_level: str = "read_uncommitted",
    ) -> dict[str, Any]:
        """A consumer's fetch (below the high watermark; the last stable offset at
        ``read_committed``, aborted transactions emptied), long-polling up to
        ``max_wait_ms``. ``leader_epoch`` >= 0 is fenced against the leader's (KIP-320)."""
        budget_s = min(max(timeout_ms, max_wait_ms) / 1000, self.request_timeout_s_max)
        deadline = time.monotonic() + budget_s
        start = time.monotonic()

        def wait_ms() -> int:
            # Long-poll only for what is left of max_wait_ms after earlier attempts.
            return max(0, int(max_wait_ms - (time.monotonic() - start) * 1000))

        async def local() -> dict[str, Any]:
            return await self.mgr.fetch(
                topic=topic,
                partition=partition,
                replica_id=-1,
                fetch_offset=fetch_offset,
                leader_epoch=leader_epoch,
                last_fetched_epoch=-1,
                max_bytes=max_bytes,
                max_wait_ms=wait_ms(),
                min_bytes=min_bytes,
                high_watermark=-1,
                broker_epoch=-1,
                isolation_level=isolation_level,
            )

        def body() -> dict[str, Any]:
            return {
                "topic": topic,
                "partition": partition,
                "replica_id": -1,
                "fetch_offset": fetch_offset,
                "max_bytes": max_bytes,
                "max_wait_ms": wait_ms(),
                "min_bytes": min_bytes,
                "leader_epoch": leader_epoch,
                "isolation_level": isolation_level,
            }

        # A consumer that names its leader epoch must hear that it is fenced (it refreshes its
        # metadata, KIP-320); retrying would only run out its budget.
        return await self._route(
            "fetch",
            topic,
            partition,
            deadline,
            local,
            body,
            forwarded=forwarded,
            answer_at_once=EPOCH_ERRORS if leader_epoch >= 0 else frozenset(),
        )

    async def list_offsets(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        *,
        timeout_ms: int = 10_000,
        forwarded: bool = False,
        isolation_level: str = "read_uncommitted",
    ) -> dict[str, Any]:
        deadline = time.monotonic() + min(timeout_ms / 1000, self.request_timeout_s_max)

        async def local() -> dict[str, Any]:
            return self.mgr.list_offsets(topic, partition, timestamp, isolation_level)

        def body() -> dict[str, Any]:
            return {
                "topic": topic,
                "partition": partition,
                "timestamp": timestamp,
                "isolation_level": isolation_level,
            }

        return await self._route(
            "list_offsets", topic, partition, deadline, local, body, forwarded=forwarded
        )

    async def delete_records(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        timeout_ms: int = 30_000,
        forwarded: bool = False,
    ) -> dict[str, Any]:
        deadline = time.monotonic() + min(timeout_ms / 1000, self.request_timeout_s_max)

        async def local() -> dict[str, Any]:
            left_ms = max(0, int((deadline - time.monotonic()) * 1000))
            return await self.mgr.delete_records(topic, partition, offset, left_ms)

        def body() -> dict[str, Any]:
            left_ms = max(0, int((deadline - time.monotonic()) * 1000))
            return {"topic": topic, "partition": partition, "offset": offset, "timeout_ms": left_ms}

        return await self._route(
            "delete_records",
            topic,
            partition,
            deadline,
            local,
            body,
            forwarded=forwarded,
            answer_at_once=frozenset({"REQUEST_TIMED_OUT"}),
        )

    # ------------------------------------------------------------------ routing

    async def _route(
        self,
        route: str,
        topic: str,
        partition: int,
        deadline: float,
        local: Callable[[], Awaitable[dict[str, Any]]],
        body: Callable[[], dict[str, Any]],
        *,
        forwarded: bool,
        answer_at_once: frozenset[str] = frozenset(),
    ) -> dict[str, Any]:
        if forwarded:
            # Sent here by another broker that believed this one leads: answer or refuse,
            # never forward again.
            try:
                return await local()
            except (BrokerError, StorageError) as e:
                raise as_replica_error(e) from None
        attempt = 0
        last: ReplicaError | None = None
        while True:
            leader = self.leader_of(topic, partition)
            if leader is None:
                raise ReplicaError(
                    "UNKNOWN_TOPIC_OR_PARTITION", f"{topic}-{partition} does not exist"
                )
            try:
                if leader == int(self.mgr.broker_id):
                    return await local()
                if leader < 0:
                    raise ReplicaError(
                        "LEADER_NOT_AVAILABLE", f"{topic}-{partition} has no leader now"
                    )
                return await self._forward(route, leader, body(), deadline)
            except (BrokerError, StorageError) as e:
                err = as_replica_error(e)
            code = err.error_code
            retriable = (code not in answer_at_once and code in RETRIABLE) or (
                code == "UNKNOWN_TOPIC_OR_PARTITION"
                and self.leader_of(topic, partition) is not None
            )
            if not retriable:
                raise err
            last = err
            attempt += 1
            self.retries += 1
            backoff = min(BACKOFF_S_MIN * 2 ** min(attempt - 1, 5), BACKOFF_S_MAX)
            if time.monotonic() + backoff >= deadline:
                raise ReplicaError(
                    "REQUEST_TIMED_OUT",
                    f"{route} {topic}-{partition}: no leader answered within the request's "
                    f"time budget (last: {last.error_code}: {last})",
                ) from None
            if attempt == 1 or attempt % 20 == 0:
                log.info(
                    "broker %d: %s %s-%d: %s, retrying",
                    self.mgr.broker_id,
                    route,
                    topic,
                    partition,
                    err,
                )
            await asyncio.sleep(backoff)

    async def _forward(
        self, route: str, leader: int, body: dict[str, Any], deadline: float
    ) -> dict[str, Any]:
        url = self.mgr.leader_url(leader)
        if url is None:
            raise ReplicaError("LEADER_NOT_AVAILABLE", f"no endpoint for broker {leader}")
        body["forwarded"] = True
        data = msgpack.packb(body, use_bin_type=True)
        # The leader answers within the body's own timeout; a little longer here covers the
        # transfer, so a leader that hangs is given up on only after the budget.
        left = max(deadline - time.monotonic(), 0.05) + 1.0
        self.forwarded_requests += 1
        try:
            async with self._sess().post(
                f"{url}{INTERNAL_PREFIX}/{route}",
                data=data,
                # The user's principal, so the leader checks the user's ACLs (issue 18).
                headers={"Content-Type": MSGPACK, **forwarding_headers()},
                timeout=aiohttp.ClientTimeout(total=left, sock_connect=CONNECT_TIMEOUT_S),
            ) as resp:
                payload = await resp.read()
                status = resp.status
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            raise ReplicaError(
                "LEADER_NOT_AVAILABLE", f"broker {leader} ({url}): {str(e) or type(e).__name__}"
            ) from None
        try:
            out = msgpack.unpackb(payload, raw=False)
        except (msgpack.UnpackException, ValueError):
            out = None
        if not isinstance(out, dict):
            raise ReplicaError(
                "BROKER_NOT_AVAILABLE", f"broker {leader} answered HTTP {status}: {payload[:200]!r}"
            )
        if out.get("error"):
            raise ReplicaError(
                str(out["error"]),
                str(out.get("message", "")),
                leader_id=int(out.get("leader_id", -1) or -1),
            )
        return out
