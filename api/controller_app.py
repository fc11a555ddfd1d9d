"""The controller process: a Raft voter running the quorum controller, on one aiohttp app.

Routes (all on the node's ``listen`` address):

* ``POST /internal/raft/v1/messages``      Raft traffic between nodes (msgpack).
* ``POST /internal/controller/v1/command`` a ``metalog.controller`` command (msgpack, see
  ``metalog.wire``) -> ``{"ok": response}`` or ``{"error": {...}}``; a node that is not the
  active controller answers 421 Misdirected Request with the leader's id and URL, so the
  client retries there (``api.controller_client``).
* ``GET /v3/quorum/status``                JSON: this node's Raft view (leader, term, commit,
  per-follower match index and last contact) and its metadata offset.
* ``GET /v3/quorum/metadata``              JSON: a summary of the committed image (topics,
  partitions with leader/ISR/epochs, brokers): for operators and tests.
* ``GET /v3/health``                       200 while the process runs.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from api.config import NodeConfig
from api.errors import error_middleware
from metalog import wire
from metalog.controller import MetadataError, NotControllerError, QuorumController
from metalog.image import MetadataImage
from metalog.service import ControllerService, error_to_wire
from raft.aio.node import RaftNodeConfig

log = logging.getLogger(__name__)

MSGPACK = "application/x-msgpack"
SERVICE_KEY: web.AppKey[ControllerService] = web.AppKey("controller_service", ControllerService)


def image_summary(image: MetadataImage) -> dict[str, Any]:
    topics = []
    for tid, t in sorted(image.topics.by_id.items(), key=lambda kv: kv[1].name):
        parts = []
        for p, reg in sorted(t.partitions.items()):
            parts.append({
                "partition": p, "leader": reg.leader, "replicas": list(reg.replicas),
                "isr": list(reg.isr), "leader_epoch": reg.leader_epoch,
                "partition_epoch": reg.partition_epoch,
            })
        topics.append({"name": t.name, "topic_id": tid, "partitions": parts})
    brokers = []
    for bid, b in sorted(image.brokers.brokers.items()):
        brokers.append({
            "broker_id": bid, "epoch": b.broker_epoch, "fenced": b.fenced, "rack": b.rack,
            "in_controlled_shutdown": b.in_controlled_shutdown,
            "endpoints": [list(e) for e in b.endpoints],
        })
    return {"offset": image.offset, "epoch": image.epoch, "topics": topics, "brokers": brokers}


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json")


async def handle_command(request: web.Request) -> web.Response:
    svc = request.app[SERVICE_KEY]
    try:
        command = wire.loads(await request.read())
    except wire.WireError as e:
        return web.Response(status=400, body=wire.dumps({"bad": str(e)}), content_type=MSGPACK)
    try:
        response = await svc.execute(command)
    except NotControllerError as e:
        return web.Response(
            status=421, body=orjson.dumps(error_to_wire(e)), content_type="application/json"
        )
    except MetadataError as e:
        return web.Response(body=wire.dumps({"error": e}), content_type=MSGPACK)
    return web.Response(body=wire.dumps({"ok": response}), content_type=MSGPACK)


async def handle_status(request: web.Request) -> web.Response:
    svc = request.app[SERVICE_KEY]
    st = svc.node.status().to_json()
    st["metadata_offset"] = svc.metadata_offset
    st["active_controller"] = svc.controller.is_active
    st["controller_epoch"] = svc.controller.controller_epoch
    return _json(st)


async def handle_metadata(request: web.Request) -> web.Response:
    return _json(image_summary(request.app[SERVICE_KEY].controller.image))


async def handle_health(request: web.Request) -> web.Response:
    return _json({"status": "ok"})


def build_controller(config: NodeConfig) -> tuple[web.Application, ControllerService]:
    voters = {v.node_id: v.url for v in config.voters}
    node_cfg = RaftNodeConfig(
        node_id=config.node_id,
        data_dir=str(Path(config.data_dir) / "__cluster_metadata-0"),
        voters=voters,
    )
    svc = ControllerService(node_cfg, QuorumController(config.node_id))
    app = web.Application(middlewares=[error_middleware], client_max_size=64 << 20)
    app[SERVICE_KEY] = svc
    svc.node.add_routes(app)
    app.router.add_post("/internal/controller/v1/command", handle_command)
    app.router.add_get("/v3/quorum/status", handle_status)
    app.router.add_get("/v3/quorum/metadata", handle_metadata)
    app.router.add_get("/v3/health", handle_health)

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        await svc.start()
        yield
        await svc.stop()

    app.cleanup_ctx.append(lifecycle)
    return app, svc


async def serve_controller(config: NodeConfig) -> None:
    """Run until SIGINT/SIGTERM, then stop cleanly."""
    app, _svc = build_controller(config)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, config.host, config.port, reuse_address=True)
    await site.start()
    log.info("controller %d listening on %s", config.node_id, config.url)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("controller %d stopping", config.node_id)
    await runner.cleanup()
