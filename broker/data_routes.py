"""The broker's internal data-path routes (msgpack bodies), served by ``ReplicaManager``.

``POST /internal/broker/v1/<route>``, body and answer msgpack maps. A refusal is
``{"error": <Kafka error name>, "message": ..., "leader_id": ...}`` (``leader_id`` with
NOT_LEADER_OR_FOLLOWER: the leader this broker knows, -1 if none), with HTTP 200; a body
that is not what the route reads (``broker.request_fields``: a field missing, of the wrong
type or out of range) is refused with HTTP 400 and INVALID_REQUEST before anything acts on
it. Optional fields below are marked ``?``; integers are Kafka's int32 (epochs, sizes,
times) or int64 (offsets).

* ``produce``  {topic, partition, acks? (0|1|-1), timeout_ms?, batch (bytes: one batch),
  transactional_id? (str: the producer's, for KIP-890 verification of a transactional
  batch), forwarded?}
  -> {base_offset, last_offset, log_append_time, duplicate}
* ``fetch``    {topic, partition, replica_id? (-1: consumer, -2: debug), fetch_offset,
  leader_epoch?, last_fetched_epoch?, max_bytes?, max_wait_ms?, min_bytes?,
  high_watermark?, broker_epoch?, log_start_offset?, timeout_ms?, isolation_level?
  ("read_uncommitted" | "read_committed"), forwarded?}
  -> {records (raw batches), high_watermark, last_stable_offset, log_start_offset,
  log_end_offset, leader_epoch, diverging_epoch ([epoch, end_offset] or None),
  aborted_transactions? ([[producer_id, first_offset], ...], read_committed only: their
  batches in ``records`` are emptied, offsets kept)}
* ``replica_fetch`` {replica_id, broker_epoch?, max_wait_ms?, max_bytes? (for the whole
  answer), session_id?, session_epoch? (-1: no session, 0: open one, n: the session's next),
  partitions: [{topic, partition, fetch_offset, leader_epoch?, last_fetched_epoch?,
  high_watermark?, log_start_offset?, max_bytes?}, ...] (each partition at most once; in a
  session, those changed since the last request), forgotten?: [{topic, partition}, ...],
  records_apart? (true: the answer comes as ``broker.fetch_plan.RECORDS_APART``, the
  records after the map instead of inside it)}
  -> {partitions: [entry, ...], session_id?}: a follower's fetch of every partition it follows from this
  leader (``broker.fetcher``; Kafka's FetchRequest from a replica fetcher). Each entry is
  ``fetch``'s follower answer plus {topic, partition}, or {topic, partition, error,
  message, leader_id} for that partition alone; a partition with nothing new (no data, no
  HW past the one sent, no newer log start) is left out. Answered when any partition has
  news, else after ``max_wait_ms``. Added beside ``fetch`` (which stays, for followers of
  an older version during a rolling upgrade). Sessions (KIP-227) and their refusals:
  ``broker.fetch_session``.
* ``offsets_for_leader_epoch`` {topic, partition, current_leader_epoch?, epoch}
  -> {leader_epoch, end_offset}
* ``list_offsets`` {topic, partition, timestamp (-2 earliest, -1 latest = HW, or ms),
  timeout_ms?, isolation_level? (read_committed: latest = the last stable offset),
  forwarded?}
  -> {offset}
* ``write_txn_markers`` {markers: [{topic, partition, producer_id, producer_epoch, commit
  (bool), coordinator_epoch}, ...], timeout_ms?}
  -> {results: [{topic, partition, producer_id, error (Kafka error code or None)}, ...], one
  per marker in order}: Kafka's
  WriteTxnMarkers, answered by this broker for the partitions it leads (never forwarded:
  the coordinator sends each marker to its partition's leader).
* ``txn_partitions_added`` {producer_id, producer_epoch, partitions: [[topic, partition],
  ...]} -> {}: the transaction coordinator's word, sent once the ONGOING record holding them
  is committed, that the producer's transaction in that epoch holds these partitions; the
  first batch of the epoch to one this broker leads then needs no verification round trip
  (``ReplicaManager.note_txn_partitions``; docs/transactions.md, "What a transaction costs").
* ``delete_records`` {topic, partition, offset (-1: the HW), timeout_ms?, forwarded?}
  -> {low_watermark} (Kafka's DeleteRecords; through the router, like ``list_offsets``)

``GET /internal/broker/v1/replicas`` (JSON) describes every local replica.

The client library's routes are public (issue 18): ``POST /binary/v1/<route>`` for
``produce``, ``fetch`` and ``list_offsets`` (and ``init_producer_id`` and ``group/<op>``, their
modules), on a client listener. A public ``fetch`` is a consumer's: a ``replica_id`` other
than -1 (a follower's fetch, which moves the high watermark, or the debug reader) is refused
with INVALID_REQUEST. ``offsets_for_leader_epoch`` and ``replicas`` stay node-only.

``produce``, consumer ``fetch`` (``replica_id`` -1) and ``list_offsets`` go through the
``PartitionRouter``: a broker that does not lead the partition forwards the request to the
leader (retrying through a leader change within the request's time budget). A body with
``forwarded: true`` came from another broker's router and is answered locally or refused, so
a request is forwarded at most once. Followers' fetches and OffsetsForLeaderEpoch are never
forwarded: they are addressed to one replica on purpose.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgpack
import orjson
from aiohttp import payload, web
from aiohttp.abc import AbstractStreamWriter

from broker.errors import BrokerError
from broker.fetch_plan import (
    RECORDS_APART,
    PartitionFetch,
    PartitionKey,
    encode_records_apart,
)
from broker.fetch_session import NO_SESSION
from broker.fetcher import MSGPACK
from broker.replica_manager import (
    DEBUG_REPLICA_ID,
    ISOLATION_LEVELS,
    READ_UNCOMMITTED,
    ReplicaError,
    ReplicaManager,
    error_code,
)
from broker.request_fields import (
    INT32_MAX,
    INT64_MAX,
    InvalidRequestError,
    body_or_raise,
    bool_field,
    bytes_field,
    choice_field,
    int_field,
    list_field,
    partition_field,
    partition_value,
    str_field,
    topic_field,
    topic_value,
)
from broker.router import PUBLIC_PREFIX, STORAGE_CODES, PartitionRouter
from broker.txn_markers import TxnMarker
from storage.errors import StorageError

log = logging.getLogger(__name__)

REPLICAS_KEY: web.AppKey[ReplicaManager] = web.AppKey("replicas", ReplicaManager)
ROUTER_KEY: web.AppKey[PartitionRouter] = web.AppKey("router", PartitionRouter)


def _pack(data: dict[str, Any], status: int = 200) -> web.Response:
    return web.Response(
        body=msgpack.packb(data, use_bin_type=True), content_type=MSGPACK, status=status
    )


class _Parts(payload.Payload):
    """A body written part after part, never joined (``replica_fetch``'s records apart)."""

    def __init__(self, parts: list[bytes | memoryview], content_type: str) -> None:
        super().__init__(parts, content_type=content_type)
        self._size = sum(len(p) for p in parts)

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        raise TypeError("a binary body")

    async def write(self, writer: AbstractStreamWriter) -> None:
        for part in self._value:
            await writer.write(part)


def _handler(
    fn: Callable[[PartitionRouter, dict[str, Any]], Awaitable[dict[str, Any] | web.Response]],
) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        mgr = request.app[ROUTER_KEY]
        try:
            out = await fn(mgr, body_or_raise(await request.read()))
            return out if isinstance(out, web.Response) else _pack(out)
        except InvalidRequestError as e:
            # Read before anything acts on the body: nothing was done.
            return _pack({"error": e.code, "message": f"{request.path}: {e}", "leader_id": -1}, 400)
        except ReplicaError as e:
            return _pack({"error": e.error_code, "message": str(e), "leader_id": e.leader_id})
        except BrokerError as e:
            return _pack({"error": error_code(e), "message": str(e), "leader_id": -1})
        except StorageError as e:
            code = STORAGE_CODES.get(type(e).__name__, "KAFKA_STORAGE_ERROR")
            return _pack({"error": code, "message": str(e), "leader_id": -1})

    return handle


# Field ranges are Kafka's (int32 epochs, sizes and times; int64 offsets): the protocol
# carries nothing wider, and the code behind these routes assumes nothing narrower.
ACKS = (-1, 0, 1)


FETCH_RESPONSE_BYTES_MAX = 57_671_680
"""Kafka's ``fetch.max.bytes`` default (55 MiB): the most one fetch answer carries."""
FETCH_WAIT_MS_MAX = 60_000
"""The longest a fetch long-polls; clients poll again (Kafka's consumers wait 500 ms)."""


def _isolation_level(b: dict[str, Any]) -> str:
    v = str_field(b, "isolation_level", default=READ_UNCOMMITTED)
    if v not in ISOLATION_LEVELS:
        raise InvalidRequestError(
            f"'isolation_level' must be one of {', '.join(ISOLATION_LEVELS)}, got {v!r}"
        )
    return v


def _marker_body(i: int, m: Any) -> dict[str, Any]:
    if type(m) is not dict:
        raise InvalidRequestError(f"'markers[{i}]' must be a map, got {type(m).__name__}")
    return m


async def _produce(router: PartitionRouter, b: dict[str, Any]) -> dict[str, Any]:
    topic, partition = topic_field(b), partition_field(b)
    acks = choice_field(b, "acks", ACKS, default=-1)
    timeout_ms = int_field(b, "timeout_ms", 0, INT32_MAX, default=30_000)
    batch = bytes_field(b, "batch")
    forwarded = bool_field(b, "forwarded", default=False)
    tid = b.get("transactional_id")
    transactional_id = None if tid is None else str_field(b, "transactional_id")
    return await router.produce(
        topic,
        partition,
        acks,
        timeout_ms,
        batch,
        forwarded=forwarded,
        transactional_id=transactional_id,
    )


async def _fetch(router: PartitionRouter, b: dict[str, Any]) -> dict[str, Any]:
    topic, partition = topic_field(b), partition_field(b)
    replica_id = int_field(b, "replica_id", DEBUG_REPLICA_ID, INT32_MAX, default=-1)
    fetch_offset = int_field(b, "fetch_offset", 0, INT64_MAX)
    leader_epoch = int_field(b, "leader_epoch", -1, INT32_MAX, default=-1)
    last_fetched_epoch = int_field(b, "last_fetched_epoch", -1, INT32_MAX, default=-1)
    # Clamped, not refused (Kafka clamps to fetch.max.bytes too): a client may ask for
    # more than a broker will build in memory or hold a request open for.
    max_bytes = min(
        int_field(b, "max_bytes", 0, INT32_MAX, default=1 << 20), FETCH_RESPONSE_BYTES_MAX
    )
    max_wait_ms = min(int_field(b, "max_wait_ms", 0, INT32_MAX, default=0), FETCH_WAIT_MS_MAX)
    min_bytes = int_field(b, "min_bytes", 0, INT32_MAX, default=1)
    high_watermark = int_field(b, "high_watermark", -1, INT64_MAX, default=-1)
    broker_epoch = int_field(b, "broker_epoch", -1, INT64_MAX, default=-1)
    log_start_offset = int_field(b, "log_start_offset", -1, INT64_MAX, default=-1)
    timeout_ms = int_field(b, "timeout_ms", 0, INT32_MAX, default=max(max_wait_ms, 30_000))
    forwarded = bool_field(b, "forwarded", default=False)
    isolation_level = _isolation_level(b)
    if replica_id == -1:
        return await router.fetch(
            topic,
            partition,
            fetch_offset,
            max_bytes=max_bytes,
            max_wait_ms=max_wait_ms,
            min_bytes=min_bytes,
            timeout_ms=timeout_ms,
            forwarded=forwarded,
            leader_epoch=leader_epoch,
            isolation_level=isolation_level,
        )
    return await router.mgr.fetch(
        topic=topic,
        partition=partition,
        replica_id=replica_id,
        fetch_offset=fetch_offset,
        leader_epoch=leader_epoch,
        last_fetched_epoch=last_fetched_epoch,
        max_bytes=max_bytes,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        high_watermark=high_watermark,
        broker_epoch=broker_epoch,
        isolation_level=isolation_level,
        log_start_offset=log_start_offset,
    )


async def _consumer_fetch(router: PartitionRouter, b: dict[str, Any]) -> dict[str, Any]:
    """``fetch`` on the public prefix: a consumer's only."""
    if b.get("replica_id", -1) != -1:
        raise InvalidRequestError(
            "replica_id: only -1 (a consumer) is accepted here; followers fetch on the "
            "inter-broker listener"
        )
    return await _fetch(router, b)


def _partition_fetch(i: int, p: Any) -> PartitionFetch:
    if type(p) is not dict:
        raise InvalidRequestError(f"'partitions[{i}]' must be a map, got {type(p).__name__}")
    return PartitionFetch(
        topic=topic_field(p),
        partition=partition_field(p),
        fetch_offset=int_field(p, "fetch_offset", 0, INT64_MAX),
        leader_epoch=int_field(p, "leader_epoch", -1, INT32_MAX, default=-1),
        last_fetched_epoch=int_field(p, "last_fetched_epoch", -1, INT32_MAX, default=-1),
        high_watermark=int_field(p, "high_watermark", -1, INT64_MAX, default=-1),
        log_start_offset=int_field(p, "log_start_offset", -1, INT64_MAX, default=-1),
        max_bytes=min(
            int_field(p, "max_bytes", 0, INT32_MAX, default=1 << 20), FETCH_RESPONSE_BYTES_MAX
        ),
    )


def _fetch_entry(p: PartitionFetch, ans: dict[str, Any] | Exception) -> dict[str, Any]:
    head = {"topic": p.topic, "partition": p.partition}
    if isinstance(ans, ReplicaError):
        return head | {"error": ans.error_code, "message": str(ans), "leader_id": ans.leader_id}
    if isinstance(ans, BrokerError):
        return head | {"error": error_code(ans), "message": str(ans), "leader_id": -1}
    if isinstance(ans, Exception):
        code = STORAGE_CODES.get(type(ans).__name__, "KAFKA_STORAGE_ERROR")
        return head | {"error": code, "message": str(ans), "leader_id": -1}
    return head | ans


async def _replica_fetch(
    router: PartitionRouter, b: dict[str, Any]
) -> dict[str, Any] | web.Response:
    replica_id = int_field(b, "replica_id", 0, INT32_MAX)
    apart = bool_field(b, "records_apart", default=False)
    broker_epoch = int_field(b, "broker_epoch", -1, INT64_MAX, default=-1)
    max_wait_ms = min(int_field(b, "max_wait_ms", 0, INT32_MAX, default=0), FETCH_WAIT_MS_MAX)
    max_bytes = min(
        int_field(b, "max_bytes", 0, INT32_MAX, default=FETCH_RESPONSE_BYTES_MAX),
        FETCH_RESPONSE_BYTES_MAX,
    )
    # A session (broker.fetch_session): absent fields are an older follower's whole request.
    session_id = int_field(b, "session_id", 0, INT64_MAX, default=0)
    session_epoch = int_field(b, "session_epoch", NO_SESSION, INT32_MAX, default=NO_SESSION)
    parts = [_partition_fetch(i, p) for i, p in enumerate(list_field(b, "partitions"))]
    forgotten = [_partition_key(i, k) for i, k in enumerate(list_field(b, "forgotten", default=[]))]
    seen: set[tuple[str, int]] = set()
    for p in parts:
        if p.key in seen:
            raise InvalidRequestError(f"'partitions' names {p.topic}-{p.partition} twice")
        seen.add(p.key)
    mgr = router.mgr
    sid, parts = mgr.fetch_sessions.resolve(
        replica_id=replica_id,
        session_id=session_id,
        session_epoch=session_epoch,
        changed=parts,
        forgotten=forgotten,
        now_s=time.monotonic(),
        new_id=lambda: secrets.randbits(63),
    )
    answers = await mgr.fetch_for_follower(
        replica_id=replica_id,
        broker_epoch=broker_epoch,
        partitions=parts,
        max_wait_ms=max_wait_ms,
        response_bytes_max=max_bytes,
    )
    out: dict[str, Any] = {"partitions": [_fetch_entry(p, a) for p, a in answers]}
    if sid:
        out["session_id"] = sid
    if apart:
        return web.Response(body=_Parts(encode_records_apart(out), RECORDS_APART))
    return out


def _partition_key(i: int, k: Any) -> PartitionKey:
    if type(k) is not dict:
        raise InvalidRequestError(f"'forgotten[{i}]' must be a map, got {type(k).__name__}")
    return (topic_field(k), partition_field(k))


async def _offsets_for_leader_epoch(router: PartitionRouter, b: dict[str, Any]) -> dict[str, Any]:
    topic, partition = topic_field(b), partition_field(b)
    current = int_field(b, "current_leader_epoch", -1, INT32_MAX, default=-1)
    epoch = int_field(b, "epoch", 0, INT32_MAX)
    return router.mgr.offsets_for_leader_epoch(topic, partition, current, epoch)


async def _list_offsets(router: PartitionRouter, b: dict[str, Any]) -> dict[str, Any]:
    topic, partition = topic_field(b), partition_field(b)
    timestamp = int_field(b, "timestamp", -2, INT64_MAX)  # -2 earliest, -1 latest, else ms
    timeout_ms = int_field(b, "timeout_ms", 0, INT32_MAX, default=10_000)
    forwarded = bool_field(b, "forwarded", default=False)
    isolation_level = _isolation_level(b)
    return await router.list_offsets(
        topic,
        partition,
        timestamp,
        timeout_ms=timeout_ms,
        forwarded=forwarded,
        isolation_level=isolation_level,
    )


async def _write_txn_markers(router: PartitionRouter, b: dict[str, Any]) -> dict[str, Any]:
    markers = [
        TxnMarker(
            topic=topic_field(m),
            partition=partition_field(m),
            producer_id=int_field(m, "producer_id", 0, INT64_MAX),
            producer_epoch=int_field(m, "producer_epoch", 0, 0x7FFF),
            commit=bool_field(m, "commit"),
            coordinator_epoch=int_field(m, "coordinator_epoch", -1, INT32_MAX),
        )
        for m in (_marker_body(i, m) for i, m in enumerate(list_field(b, "markers")))
    ]
    timeout_ms = int_field(b, "timeout_ms", 1, INT32_MAX, default=30_000)
    results = await router.mgr.write_txn_markers_each(markers, timeout_ms=timeout_ms)
    return {
        "results": [
            {"topic": m.topic, "partition": m.partition, "producer_id": m.producer_id, "error": e}
            for m, e in zip(markers, results, strict=True)
        ]
    }


async def _txn_partitions_added(router: PartitionRouter, b: dict[str, Any]) -> dict[str, Any]:
    producer_id = int_field(b, "producer_id", 0, INT64_MAX)
    producer_epoch = int_field(b, "producer_epoch", 0, 0x7FFF)
    partitions = []
    for i, e in enumerate(list_field(b, "partitions")):
        where = f"partitions[{i}]"
        if type(e) is not list or len(e) != 2:
            raise InvalidRequestError(f"{where!r} must be [topic, partition], got {e!r:.60}")
        partitions.append((topic_value(f"{where}[0]", e[0]), partition_value(f"{where}[1]", e[1])))
    router.mgr.note_txn_partitions(producer_id, producer_epoch, partitions)
    return {}


async def _delete_records(router: PartitionRouter, b: dict[str, Any]) -> dict[str, Any]:
    topic, partition = topic_field(b), partition_field(b)
    offset = int_field(b, "offset", -1, INT64_MAX)  # -1: the high watermark
    timeout_ms = int_field(b, "timeout_ms", 0, INT32_MAX, default=30_000)
    forwarded = bool_field(b, "forwarded", default=False)
    return await router.delete_records(
        topic, partition, offset, timeout_ms=timeout_ms, forwarded=forwarded
    )


async def _replicas(request: web.Request) -> web.Response:
    mgr = request.app[REPLICAS_KEY]
    return web.Response(body=orjson.dumps(mgr.describe()), content_type="application/json")


def add_data_routes(app: web.Application, mgr: ReplicaManager) -> PartitionRouter:
    """Register the internal routes; the router (``app[ROUTER_KEY]``) is closed with the app."""
    router = PartitionRouter(mgr)
    app[REPLICAS_KEY] = mgr
    app[ROUTER_KEY] = router

    async def close_router(app: web.Application) -> None:
        await router.close()

    app.on_cleanup.append(close_router)
    p = "/internal/broker/v1"
    app.router.add_post(f"{p}/produce", _handler(_produce))
    app.router.add_post(f"{p}/fetch", _handler(_fetch))
    app.router.add_post(f"{p}/replica_fetch", _handler(_replica_fetch))
    app.router.add_post(f"{p}/offsets_for_leader_epoch", _handler(_offsets_for_leader_epoch))
    app.router.add_post(f"{p}/list_offsets", _handler(_list_offsets))
    app.router.add_post(f"{p}/write_txn_markers", _handler(_write_txn_markers))
    app.router.add_post(f"{p}/txn_partitions_added", _handler(_txn_partitions_added))
    app.router.add_get(f"{p}/replicas", _replicas)
    app.router.add_post(f"{p}/delete_records", _handler(_delete_records))
    app.router.add_post(f"{PUBLIC_PREFIX}/produce", _handler(_produce))
    app.router.add_post(f"{PUBLIC_PREFIX}/fetch", _handler(_consumer_fetch))
    app.router.add_post(f"{PUBLIC_PREFIX}/list_offsets", _handler(_list_offsets))
    return router
