"""The broker's public HTTP API, registered on the broker's app in one call.

``add_public_routes(app, srv)`` adds the v3 routes (``api.http.v3``; ACLs and SCRAM users in
``api.http.acls``), the REST Proxy v2
routes (``api.http.v2``), the v3 consumer groups (``api.http.groups``), the v2 consumer
instances (``api.http.v2_consumers``), the read-only broker configs
(``api.http.broker_configs``), reassignments, elections and DeleteRecords
(``api.http.reassign``), ``GET /metrics`` (``api.http.metrics``: its collectors read
the replica manager and the group coordinator at scrape time),
``GET /openapi.json`` (``api.http.openapi``) and its page ``GET /openapi``, and CORS when
configured (``api.http.cors``), with an ``HttpContext`` built from the broker server
(its image, its ``PartitionRouter``, a ``ControllerClient`` for topic administration).
Health and readiness (``/v3/health``, ``/v3/health/ready``) are the broker app's own.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from api.http.acls import add_acl_routes
from api.http.broker_configs import add_broker_config_routes
from api.http.context import CONTEXT_KEY, HttpContext, cluster_id_for
from api.http.cors import add_cors
from api.http.embedded import EmbeddedCodec
from api.http.errors import ERROR_HOOK_KEY
from api.http.groups import add_group_routes
from api.http.metrics import (
    BrokerMetrics,
    GroupLagCollector,
    ReplicaCollector,
    event_counters,
    metrics_handler,
    replica_gauges,
)
from api.http.openapi import openapi_document
from api.http.openapi_page import openapi_page
from api.http.reassign import add_reassign_routes
from api.http.transactions import add_transaction_routes
from api.http.v2 import add_v2_routes
from api.http.v2_consumers import add_v2_consumer_routes
from api.http.v3 import add_v3_routes
from broker.data_routes import ROUTER_KEY
from broker.metadata_follower import MetadataUpdate
from broker.produce_lanes import ProduceLanes
from broker.producer_ids import MANAGER_KEY
from common import netbind
from metalog.client import ControllerClient


def add_public_routes(app: web.Application, srv: Any) -> HttpContext:
    """``srv`` is the ``api.node.broker_app.BrokerServer`` (config, follower, lifecycle,
    replicas); the internal data routes (they own the router) and the producer id routes
    (they own the ids the produce lanes use) must be registered first."""
    config = srv.config
    router = app[ROUTER_KEY]
    lanes = ProduceLanes(app[MANAGER_KEY].next_id)
    metrics = BrokerMetrics()
    urls = [v.url for v in config.voters]
    controllers = ControllerClient(urls, timeout_s=15)
    ctx = HttpContext(
        broker_id=config.node_id,
        cluster_id=cluster_id_for(
            config.cluster_id, [(v.node_id, f"{v.host}:{v.port}") for v in config.voters]
        ),
        image_fn=lambda: srv.follower.image,
        router=router,
        controllers=controllers,
        metrics=metrics,
        ready_fn=lambda: bool(srv.lifecycle.ready),
        lanes=lanes,
        # The registry is the broker's own (broker.schemas); looked up per use, so an app
        # built without one still starts and only the schema formats are refused.
        embedded=EmbeddedCodec(lambda: srv.schemas),
    )
    app[CONTEXT_KEY] = ctx
    app[ERROR_HOOK_KEY] = metrics.note_error
    metrics.add_gauges(
        replica_gauges(lambda: srv.follower.image, config.node_id, srv.replicas.describe)
    )
    metrics.add_collector(
        event_counters(
            lambda: (router.forwarded_requests, router.retries),
            lambda: (lanes.created, lanes.dropped, lanes.without_id),
            lambda: (
                None if srv.replicas.page_cache is None else srv.replicas.page_cache.bytes_asked
            ),
            lambda: None if srv.kafka is None else srv.kafka.sendfile_stats(),
        )
    )
    per_partition = config.metrics_per_partition
    metrics.add_collector(ReplicaCollector(srv.replicas, per_partition=per_partition))
    lag = GroupLagCollector(srv.groups, per_partition=per_partition)
    metrics.add_collector(lag)
    metrics.before_scrape(lag.refresh)
    srv.follower.subscribe(_isr_watcher(config.node_id, metrics))
    add_v3_routes(app)
    add_acl_routes(app)  # issue 18: ACLs and SCRAM users (api.http.acls)
    add_broker_config_routes(app, config)
    add_reassign_routes(app)
    add_v2_routes(app)
    # Group reads and v2 consumer instances go through the client library, bootstrapped
    # from this broker; instances name this broker in their base_uri (they live here).
    add_group_routes(app, [config.url])
    add_v2_consumer_routes(
        app,
        bootstrap=[config.url],
        advertised_url=config.url,
        instance_timeout_ms=config.consumer_instance_timeout_ms,
    )
    # Issue 19: transactional produce over HTTP (api.http.transactions).
    add_transaction_routes(app, [config.url], config.node_id)
    app.router.add_get("/metrics", metrics_handler(metrics.scrape))
    doc = orjson.dumps(openapi_document())

    async def openapi(request: web.Request) -> web.Response:
        return web.Response(body=doc, content_type="application/json")

    app.router.add_get("/openapi.json", openapi)
    app.router.add_get("/openapi", openapi_page)

    async def close(app: web.Application) -> None:
        await controllers.close()

    app.on_cleanup.append(close)
    add_cors(app, config.http_cors_allowed_origins)
    _ = netbind  # the controller client binds the node's source address itself
    return ctx


def _isr_watcher(broker_id: int, metrics: BrokerMetrics) -> Any:
    """Counts ISR shrinks and expands of the partitions this broker leads, from the
    metadata deltas (the leader proposes them; the committed change is what counts)."""
    last: dict[tuple[str, int], int] = {}
    seen_topics: object = None  # the TopicsImage last looked at

    async def on_update(update: MetadataUpdate) -> None:
        nonlocal seen_topics
        if update.image.topics is seen_topics:
            return  # no topic changed (images share what a delta left alone)
        seen_topics = update.image.topics
        seen = set()
        for t, p, reg in update.image.topics.partitions():
            key = (str(t.topic_id), p)
            seen.add(key)
            n = len(reg.isr)
            before = last.get(key)
            if before is not None and int(reg.leader) == broker_id:
                if n < before:
                    metrics.isr_shrinks.inc()
                elif n > before:
                    metrics.isr_expands.inc()
            last[key] = n
        for key in set(last) - seen:
            del last[key]

    return on_update
