"""The broker's internal data-path routes (msgpack bodies), served by ``ReplicaManager``.

``POST /internal/broker/v1/<route>``, body and answer msgpack maps. Every answer is HTTP 200;
a refusal is ``{"error": <Kafka error name>, "message": ..., "leader_id": ...}``
(``leader_id`` with NOT_LEADER_OR_FOLLOWER: the leader this broker knows, -1 if none).

* ``produce``  {topic, partition, acks (0|1|-1), timeout_ms, batch (bytes: one batch)}
  -> {base_offset, last_offset, log_append_time, duplicate}
* ``fetch``    {topic, partition, replica_id (-1: consumer), fetch_offset, leader_epoch,
  last_fetched_epoch, max_bytes, max_wait_ms, min_bytes, high_watermark, broker_epoch}
  -> {records (raw batches), high_watermark, log_start_offset, log_end_offset,
  leader_epoch, diverging_epoch ([epoch, end_offset] or None)}
* ``offsets_for_leader_epoch`` {topic, partition, current_leader_epoch, epoch}
  -> {leader_epoch, end_offset}
* ``list_offsets`` {topic, partition, timestamp (-2 earliest, -1 latest = HW, or ms)}
  -> {offset}

``GET /internal/broker/v1/replicas`` (JSON) describes every local replica.

``produce``, consumer ``fetch`` (``replica_id`` -1) and ``list_offsets`` go through the
``PartitionRouter``: a broker that does not lead the partition forwards the request to the
leader (retrying through a leader change within the request's time budget). A body with
``forwarded: true`` came from another broker's router and is answered locally or refused, so
a request is forwarded at most once. Followers' fetches and OffsetsForLeaderEpoch are never
forwarded: they are addressed to one replica on purpose.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import msgpack
import orjson
from aiohttp import web

from broker.errors import BrokerError
from broker.fetcher import MSGPACK
from broker.replica_manager import ReplicaError, ReplicaManager, error_code
from broker.router import STORAGE_CODES, PartitionRouter
from storage.errors import StorageError

log = logging.getLogger(__name__)

REPLICAS_KEY: web.AppKey[ReplicaManager] = web.AppKey("replicas", ReplicaManager)
ROUTER_KEY: web.AppKey[PartitionRouter] = web.AppKey("router", PartitionRouter)


def _pack(data: dict[str, Any]) -> web.Response:
    return web.Response(body=msgpack.packb(data, use_bin_type=True), content_type=MSGPACK)


def _handler(fn: Callable[[PartitionRouter, dict[str, Any]], Awaitable[dict[str, Any]]]
             ) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        mgr = request.app[ROUTER_KEY]
        try:
            body = msgpack.unpackb(await request.read(), raw=False)
            if not isinstance(body, dict):
                raise ReplicaError("INVALID_REQUEST", "body must be a msgpack map")
            return _pack(await fn(mgr, body))
        except ReplicaError as e:
            return _pack({"error": e.error_code, "message": str(e), "leader_id": e.leader_id})
        except BrokerError as e:
            return _pack({"error": error_code(e), "message": str(e), "leader_id": -1})
        except StorageError as e:
            code = STORAGE_CODES.get(type(e).__name__, "KAFKA_STORAGE_ERROR")
            return _pack({"error": code, "message": str(e), "leader_id": -1})
        except (KeyError, TypeError, ValueError, msgpack.UnpackException) as e:
            return _pack({"error": "INVALID_REQUEST", "message": repr(e), "leader_id": -1})

    return handle


async def _produce(router: PartitionRouter, b: dict[str, Any]) -> dict[str, Any]:
    return await router.produce(str(b["topic"]), int(b["partition"]), int(b.get("acks", -1)),
                                int(b.get("timeout_ms", 30_000)), bytes(b["batch"]),
                                forwarded=bool(b.get("forwarded", False)))


async def _fetch(router: PartitionRouter, b: dict[str, Any]) -> dict[str, Any]:
    replica_id = int(b.get("replica_id", -1))
    if replica_id == -1:
        max_wait_ms = int(b.get("max_wait_ms", 0))
        return await router.fetch(
            str(b["topic"]), int(b["partition"]), int(b["fetch_offset"]),
            max_bytes=int(b.get("max_bytes", 1 << 20)), max_wait_ms=max_wait_ms,
            min_bytes=int(b.get("min_bytes", 1)),
            timeout_ms=int(b.get("timeout_ms", max(max_wait_ms, 30_000))),
            forwarded=bool(b.get("forwarded", False)),
            leader_epoch=int(b.get("leader_epoch", -1)))
    return await router.mgr.fetch(
        topic=str(b["topic"]), partition=int(b["partition"]),
        replica_id=int(b.get("replica_id", -1)), fetch_offset=int(b["fetch_offset"]),
        leader_epoch=int(b.get("leader_epoch", -1)),
        last_fetched_epoch=int(b.get("last_fetched_epoch", -1)),
        max_bytes=int(b.get("max_bytes", 1 << 20)), max_wait_ms=int(b.get("max_wait_ms", 0)),
        min_bytes=int(b.get("min_bytes", 1)), high_watermark=int(b.get("high_watermark", -1)),
        broker_epoch=int(b.get("broker_epoch", -1)))


async def _offsets_for_leader_epoch(router: PartitionRouter,
                                    b: dict[str, Any]) -> dict[str, Any]:
    return router.mgr.offsets_for_leader_epoch(str(b["topic"]), int(b["partition"]),
                                        int(b.get("current_leader_epoch", -1)), int(b["epoch"]))


async def _list_offsets(router: PartitionRouter, b: dict[str, Any]) -> dict[str, Any]:
    return await router.list_offsets(str(b["topic"]), int(b["partition"]), int(b["timestamp"]),
                                     timeout_ms=int(b.get("timeout_ms", 10_000)),
                                     forwarded=bool(b.get("forwarded", False)))


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
    app.router.add_post(f"{p}/offsets_for_leader_epoch", _handler(_offsets_for_leader_epoch))
    app.router.add_post(f"{p}/list_offsets", _handler(_list_offsets))
    app.router.add_get(f"{p}/replicas", _replicas)
    return router
