"""The broker process (control-plane half): registers, heartbeats, follows the metadata log.

``build_broker(config)`` composes a ``MetadataFollower`` (the broker's ``MetadataImage``,
fetched from the controllers) and a ``BrokerLifecycle`` (registration, heartbeats, fencing,
controlled shutdown) on one aiohttp app. Routes, on the node's ``listen`` address:

* ``GET /v3/health``          200 while the process runs and every essential task lives; 503
  with ``failure`` once one has died (``common.essential``: the process is then exiting).
* ``GET /v3/health/ready``    200 once RUNNING, unfenced, caught up with the committed
  metadata and not failed; else 503. Both carry the broker's state
  (``BrokerLifecycle.describe``).
* ``GET /v3/broker/metadata`` JSON: the broker's image (``image_summary``, as the
  controllers' ``/v3/quorum/metadata``) plus its state.
* ``POST /internal/broker/v1/{produce,fetch,offsets_for_leader_epoch,list_offsets}``
  (msgpack) and ``GET /internal/broker/v1/replicas``: the data path of the partition
  replicas this broker hosts (``broker.data_routes``, ``broker.replica_manager``).
* ``POST /internal/broker/v1/init_producer_id``: a producer id for an idempotent producer
  (``broker.producer_ids``).
* ``POST /internal/broker/v1/group/<op>`` (msgpack): the consumer-group coordinator
  (``broker.group_coordinator``, ``broker.group_routes``).
* ``POST /internal/broker/v1/txn/<op>`` (msgpack): the transaction coordinator
  (``broker.txn_coordinator``, ``broker.txn_routes``); it also verifies, for the partitions
  this broker leads, a producer's first transactional batch (KIP-890 part 1).
* The Schema Registry (``broker.schemas``): its public API at ``/subjects``, ``/schemas``,
  ``/compatibility``, ``/config``, ``/mode`` (``api.http.schemas``) and the writes forwarded
  to its single writer at ``POST /internal/broker/v1/schemas/write``.
* The web console at ``/console/`` and its reads under ``/console/api/``
  (``api.http.console``).

With ``kafka_listen`` (or ``kafka_listeners``) set, the broker also serves Kafka's binary
protocol there (``api.kafka``; each listener with its own security, ``api.node.kafka_security``)
over the same replica manager, coordinator, producer ids and image, and registers the first
as its ``kafka`` endpoint, the others as ``kafka:<NAME>``. ``serve_broker`` binds them before
registering.

``serve_broker`` runs until SIGTERM/SIGINT, then shuts down in a controlled way (leadership
moves away before the broker is fenced) and returns. The clean-shutdown marker
(``broker.clean_shutdown``, KIP-966) is taken from the data directory when the broker is
built, before it registers or opens a log, and written again once every log closed cleanly. If an essential task dies first (the
metadata follower, the lifecycle, the replica timer, a replica fetcher on an exception, the
group coordinator), it stops within a bound, without a controlled shutdown, and raises
``NodeFailedError``: the process exits non-zero with the task and the reason logged. So it
does when its data directory fails (an I/O error on write or fsync, ``storage.logdir``),
after a controlled shutdown of at most 5 s that moves its leaderships away.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import orjson
from aiohttp import web

from api.http.app import add_public_routes
from api.http.auth import ImageSecurity, failed_login_gauges
from api.http.authz import AUTHORIZER_KEY
from api.http.console import add_console_routes
from api.http.errors import error_middleware
from api.http.schemas import add_schema_registry_routes
from api.kafka.handlers import KafkaContext, kafka_endpoint_name
from api.node import listeners
from api.node.config import ListenerKind, NodeConfig
from api.node.controller_app import image_summary
from api.node.kafka_security import KafkaListeners, kafka_listeners
from api.node.signals import (
    FAILED_CLEANUP_TIMEOUT_S,
    cleanup_within,
    stop_signal_or_failure,
)
from broker import clean_shutdown
from broker.data_routes import add_data_routes
from broker.group_coordinator import (
    OFFSETS_TOPIC,
    CoordinatorConfig,
    GroupCoordinator,
    ReplicaOffsetsLog,
    router_end_offset,
)
from broker.group_routes import add_group_routes
from broker.groups.group import GroupConfig
from broker.lifecycle import BrokerLifecycle, LifecycleConfig
from broker.metadata_follower import MetadataFollower
from broker.producer_ids import ProducerIdManager, add_producer_id_routes
from broker.replica_manager import ReplicaManager
from broker.router import PartitionRouter
from broker.schemas.registry import ReplicaSchemasLog, SchemaRegistry
from broker.schemas.routes import add_registry_routes
from broker.txn.records import TRANSACTION_STATE_TOPIC
from broker.txn.state import TxnConfig
from broker.txn_coordinator import RoutedMarkerWriter, TxnCoordinator, TxnCoordinatorConfig
from broker.txn_routes import add_txn_routes, txn_verifier
from common import netbind
from common.essential import Essentials, NodeFailedError
from metalog.records import Endpoint
from storage.flush_policy import FlushPolicy
from storage.group_commit import GroupCommitter
from storage.logdir import LogDirFailure
from storage.page_cache import PageCacheTrimmer

log = logging.getLogger(__name__)

LOG_DIR_FAILED_SHUTDOWN_TIMEOUT_S = 5.0


@dataclass
class BrokerServer:
    config: NodeConfig
    follower: MetadataFollower
    lifecycle: BrokerLifecycle
    replicas: ReplicaManager
    groups: GroupCoordinator
    essentials: Essentials
    schemas: SchemaRegistry | None = None
    kafka: KafkaListeners | None = None
    """The Kafka protocol listeners (``kafka_listen``, ``kafka_listeners``); bound by
    ``serve_broker``."""
    txn: TxnCoordinator | None = None
    data_dir_claim: clean_shutdown.DataDirClaim | None = None
    """The data directory's lock (``broker.clean_shutdown.claim_data_dir``), dropped at stop."""

    async def start(self) -> None:
        self.replicas.essentials = self.essentials  # the replica timer and every fetcher
        loop = asyncio.get_running_loop()

        # The data directory failing (an EIO on write or fsync) takes every log offline:
        # with one directory per broker, the broker can serve nothing, and stops, as Kafka's
        # does when its last log directory fails. Listeners run on the thread that failed.
        def on_log_dir_failure(failure: LogDirFailure) -> None:
            loop.call_soon_threadsafe(self.essentials.fail, "log directory", failure.describe())

        self.replicas.log_dir.add_failure_listener(on_log_dir_failure)
        await self.replicas.start()
        await self.groups.start()
        if self.txn is not None:
            await self.txn.start()
        if self.schemas is not None:
            await self.schemas.start()
            assert self.schemas.task is not None
            self.essentials.watch(self.schemas.task, "schema registry")
        await self.follower.start()
        await self.lifecycle.start()
        if self.txn is not None:
            assert self.txn.task is not None
            self.essentials.watch(self.txn.task, "transaction coordinator")
        for task, what in (
            (self.groups.task, "group coordinator"),
            (self.follower.task, "metadata follower"),
            (self.lifecycle.task, "broker lifecycle"),
        ):
            assert task is not None, what
            self.essentials.watch(task, what)

    async def stop(self) -> None:
        self.essentials.expect_stop()
        if self.kafka is not None:
            await self.kafka.close()
        if self.txn is not None:
            await self.txn.stop()  # before the replicas, as the group coordinator
        await self.groups.stop()  # first: its appends go through the replicas
        if self.schemas is not None:
            await self.schemas.stop()
        await self.lifecycle.stop()
        await self.follower.stop()
        await self.replicas.stop()
        self._write_clean_shutdown_marker()
        if self.data_dir_claim is not None:
            self.data_dir_claim.release()

    def _write_clean_shutdown_marker(self) -> None:
        """Every log flushed and closed: the next process may say so when it registers. An
        incarnation that never registered opened no log; the marker it found still holds."""
        epoch: int | None = self.lifecycle.broker_epoch
        if epoch is None:
            epoch = self.lifecycle.previous_broker_epoch
        if epoch is None or epoch < 0 or self.replicas.closed_cleanly is not True:
            log.warning(
                "broker %d: no clean-shutdown marker (broker epoch %s, logs closed "
                "cleanly: %s): the next start counts as unclean",
                self.config.node_id,
                epoch,
                self.replicas.closed_cleanly,
            )
            return
        try:
            clean_shutdown.write_marker(self.config.data_dir, epoch)
        except OSError as e:
            log.warning("broker %d: clean-shutdown marker: %s", self.config.node_id, e)
            return
        log.info(
            "broker %d: clean-shutdown marker written (broker epoch %d)", self.config.node_id, epoch
        )


BROKER_KEY: web.AppKey[BrokerServer] = web.AppKey("broker", BrokerServer)


def _json(data: object, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json")


def broker_endpoints(config: NodeConfig) -> tuple[Endpoint, ...]:
    """The first endpoint is what clients dial, named by its scheme; then, with named
    listeners, one per listener (``broker.endpoints``); then the Kafka listener."""
    u = urlsplit(config.url)
    eps = [Endpoint(u.scheme or "http", u.hostname or config.host, u.port or config.port)]
    if config.listeners:
        # Not the registry's own listener: brokers and clients never dial it for the log.
        eps += [
            Endpoint(s.name, s.host, s.port)
            for s in config.listener_specs()
            if s.kinds != {ListenerKind.SCHEMA_REGISTRY}
        ]
    eps += [
        Endpoint(kafka_endpoint_name(s.name, i == 0), s.host, s.port)
        for i, s in enumerate(config.kafka_listener_specs())
    ]
    return tuple(eps)


async def handle_health(request: web.Request) -> web.Response:
    failure = request.app[BROKER_KEY].essentials.failure
    if failure is not None:
        return _json({"status": "failed", "failure": failure}, 503)
    return _json({"status": "ok"})


async def handle_ready(request: web.Request) -> web.Response:
    srv = request.app[BROKER_KEY]
    out = srv.lifecycle.describe()
    failure = srv.essentials.failure
    if failure is not None:
        out["failure"] = failure
    return _json(out, 200 if srv.lifecycle.ready and failure is None else 503)


async def handle_metadata(request: web.Request) -> web.Response:
    srv = request.app[BROKER_KEY]
    image, broker = srv.follower.image, srv.lifecycle.describe()
    # In a worker thread (images are immutable): 10,000 partitions are ~0.8 s of summary and
    # JSON, which on the event loop would hold heartbeats, fetches and produce as long.
    body = await asyncio.to_thread(lambda: orjson.dumps({**image_summary(image), "broker": broker}))
    return web.Response(body=body, content_type="application/json")


def build_broker(
    config: NodeConfig,
    *,
    heartbeat_interval_s: float | None = None,
    controlled_shutdown_timeout_s: float = 30.0,
    autostart: bool = True,
) -> tuple[web.Application, BrokerServer]:
    """The broker's app. With ``autostart`` the follower and the lifecycle start with the
    app (``cleanup_ctx``); without, the caller starts them (``serve_broker`` does once its
    port is bound, so a broker that cannot listen never registers). They stop with it."""
    urls = [v.url for v in config.voters]
    follower = MetadataFollower(urls, broker_id=config.node_id)
    # Before anything registers or opens a log: this process's own crash must never pass
    # for a clean shutdown (KIP-966).
    previous_epoch = clean_shutdown.take_marker(config.data_dir)
    incarnation_id = uuid.uuid4().hex
    claim = clean_shutdown.claim_data_dir(config.data_dir, incarnation_id)
    log.info(
        "broker %d: %s",
        config.node_id,
        "no clean-shutdown marker: the last stop was unclean"
        if previous_epoch is None
        else f"clean-shutdown marker of broker epoch {previous_epoch}",
    )
    policy = None
    if (
        config.log_flush_interval_messages
        or config.log_flush_interval_ms is not None
        or config.log_flush_interval_bytes
    ):
        policy = FlushPolicy(
            bytes_max=config.log_flush_interval_bytes,
            messages_max=config.log_flush_interval_messages,
            interval_ms=config.log_flush_interval_ms,
        )
    replicas = ReplicaManager(
        broker_id=config.node_id,
        data_dir=config.data_dir,
        controller_urls=urls,
        broker_epoch=lambda: lifecycle.broker_epoch,
        committer=GroupCommitter(policy=policy),
        replica_lag_time_max_ms=config.replica_lag_time_max_ms,
        retention_check_interval_ms=config.log_retention_check_interval_ms,
        cleaner_backoff_ms=config.log_cleaner_backoff_ms,
        acks_require_fsync=config.acks_require_fsync,
        page_cache=(
            None
            if config.log_page_cache_keep_bytes < 0
            else PageCacheTrimmer(config.log_page_cache_keep_bytes)
        ),
    )
    lifecycle = BrokerLifecycle(
        LifecycleConfig(
            broker_id=config.node_id,
            endpoints=broker_endpoints(config),
            rack=config.rack,
            heartbeat_interval_s=(
                config.broker_heartbeat_interval_ms / 1000
                if heartbeat_interval_s is None
                else heartbeat_interval_s
            ),
            controlled_shutdown_timeout_s=controlled_shutdown_timeout_s,
        ),
        urls,
        follower,
        previous_broker_epoch=previous_epoch,
        replica_logs=replicas.replica_log_reports,
        incarnation_id=incarnation_id,
        previous_incarnation_id=claim.previous_incarnation_id,
    )
    follower.subscribe(replicas.on_metadata)
    inter = config.listener_of(ListenerKind.BROKER)
    if config.listeners and inter is not None:
        replicas.inter_broker_listener = (inter.name, inter.scheme)
    app = web.Application(
        middlewares=[error_middleware], client_max_size=config.http_request_bytes_max
    )
    security = ImageSecurity(lambda: follower.image)
    auth = listeners.install(app, config, credentials=security, acls=security)
    auth.metadata_caught_up = lambda: follower.caught_up
    router = add_data_routes(app, replicas)
    groups = _group_coordinator(config, follower, replicas, router)
    follower.subscribe(groups.on_metadata)  # after the replicas: it reads their leaderships
    schemas = SchemaRegistry(
        broker_id=config.node_id,
        leader_url=replicas.leader_url,
        schemas_log=ReplicaSchemasLog(
            replicas, router, lambda: follower.image, replicas.controller.execute
        ),
    )
    follower.subscribe(schemas.on_metadata)
    srv = BrokerServer(
        config,
        follower,
        lifecycle,
        replicas,
        groups,
        Essentials(f"broker {config.node_id}"),
        schemas,
        data_dir_claim=claim,
    )
    app[BROKER_KEY] = srv
    app.router.add_get("/v3/health", handle_health)
    app.router.add_get("/v3/health/ready", handle_ready)
    app.router.add_get("/v3/broker/metadata", handle_metadata)
    add_group_routes(app, groups)
    add_registry_routes(app, schemas)
    add_schema_registry_routes(app)
    pids = ProducerIdManager(
        config.node_id,
        lambda: lifecycle.broker_epoch,
        replicas.controller,
        ids_per_second_max=config.producer_ids_per_second_max,
    )
    add_producer_id_routes(app, pids)
    srv.txn = _txn_coordinator(config, follower, replicas, router, pids)
    follower.subscribe(srv.txn.on_metadata)
    add_txn_routes(app, srv.txn)
    replicas.txn_marker_listeners.append(
        lambda m: (
            groups.on_txn_marker(m.partition, m.producer_id, m.producer_epoch, m.commit)
            if m.topic == OFFSETS_TOPIC
            else None
        )
    )
    if config.transaction_partition_verification_enable:
        replicas.txn_verifier = txn_verifier(srv.txn, replicas.leader_url, srv.txn.session.get)
    http = add_public_routes(app, srv)  # after the producer ids: its produce lanes take them
    add_console_routes(app, srv, http)  # the web console, /console/ (read-only)
    http.metrics.add_gauges(failed_login_gauges(auth))
    srv.kafka = kafka_listeners(
        config,
        KafkaContext(
            broker_id=config.node_id,
            cluster_id=http.cluster_id,
            image_fn=lambda: follower.image,
            replicas=replicas,
            groups=groups,
            next_producer_id=pids.next_id,
            execute=http.controllers.execute,
            txn=srv.txn,
            auto_create_topics=config.auto_create_topics_enable,
        ),
        auth,
        app.get(AUTHORIZER_KEY),
    )

    async def lifecycle_ctx(app: web.Application) -> AsyncIterator[None]:
        if autostart:
            await srv.start()
        yield
        await srv.stop()

    app.cleanup_ctx.append(lifecycle_ctx)
    return app, srv


def _group_coordinator(
    config: NodeConfig,
    follower: MetadataFollower,
    replicas: ReplicaManager,
    router: PartitionRouter,
) -> GroupCoordinator:
    return GroupCoordinator(
        broker_id=config.node_id,
        offsets_log=ReplicaOffsetsLog(replicas),
        image=lambda: follower.image,
        create_topic=replicas.controller.execute,
        end_offset=router_end_offset(router.list_offsets),
        config=CoordinatorConfig(
            offsets_topic_num_partitions=config.offsets_topic_num_partitions,
            offsets_topic_replication_factor=config.offsets_topic_replication_factor,
            offsets_commit_timeout_ms=config.offsets_commit_timeout_ms,
            group=GroupConfig(
                session_timeout_ms_min=config.group_min_session_timeout_ms,
                session_timeout_ms_max=config.group_max_session_timeout_ms,
                initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
                offsets_retention_minutes=config.offsets_retention_minutes,
                group_size_max=config.group_max_size,
            ),
        ),
    )


def _txn_coordinator(
    config: NodeConfig,
    follower: MetadataFollower,
    replicas: ReplicaManager,
    router: PartitionRouter,
    pids: ProducerIdManager,
) -> TxnCoordinator:
    session = netbind.LazySession(limit=64, connect_timeout_s=5.0)
    markers = RoutedMarkerWriter(
        broker_id=config.node_id,
        leader_of=router.leader_of,
        broker_url=replicas.leader_url,
        local=replicas.write_txn_markers,
        session=session.get,
        local_added=replicas.note_txn_partitions,
    )
    return TxnCoordinator(
        broker_id=config.node_id,
        txn_log=ReplicaOffsetsLog(replicas, TRANSACTION_STATE_TOPIC),
        image=lambda: follower.image,
        create_topic=replicas.controller.execute,
        next_producer_id=pids.next_id,
        markers=markers,
        announce=(
            markers.announce_added if config.transaction_partition_verification_enable else None
        ),
        config=TxnCoordinatorConfig(
            num_partitions=config.transaction_state_log_num_partitions,
            replication_factor=config.transaction_state_log_replication_factor,
            append_timeout_ms=config.offsets_commit_timeout_ms,
            abort_timed_out_interval_ms=(
                config.transaction_abort_timed_out_transaction_cleanup_interval_ms
            ),
            remove_expired_interval_ms=(
                config.transaction_remove_expired_transaction_cleanup_interval_ms
            ),
            core=TxnConfig(
                transaction_max_timeout_ms=config.transaction_max_timeout_ms,
                transactional_id_expiration_ms=config.transactional_id_expiration_ms,
            ),
        ),
        session=session,
    )


async def serve_broker(config: NodeConfig) -> bool:
    """Run until SIGINT/SIGTERM, then shut down in a controlled way. Returns whether the
    controller confirmed the controlled shutdown."""
    netbind.set_client_ssl(listeners.node_client_ssl_context(config))
    app, srv = build_broker(config, autostart=False)
    runner, _bound = await listeners.start_listeners(app, config)
    log.info("broker %d listening on %s", config.node_id, config.url)
    if srv.kafka is not None:
        try:
            await srv.kafka.start()
        except OSError:
            await runner.cleanup()
            raise
    await srv.start()
    failure = await stop_signal_or_failure(srv.essentials)
    if failure is not None:
        if srv.replicas.log_dir.failure is not None:
            # Only the disk failed: heartbeats work, so a controlled shutdown moves this
            # broker's leaderships at once instead of after its session times out.
            srv.essentials.expect_stop()
            try:
                async with asyncio.timeout(LOG_DIR_FAILED_SHUTDOWN_TIMEOUT_S):
                    await srv.lifecycle.shutdown()
            except TimeoutError:
                log.error(
                    "broker %d: controlled shutdown after the disk failure timed out",
                    config.node_id,
                )
        # Otherwise no controlled shutdown: what it needs (metadata, heartbeats) may be
        # what died.
        await cleanup_within(runner, FAILED_CLEANUP_TIMEOUT_S)
        raise NodeFailedError(f"broker {config.node_id}: {failure}")
    log.info("broker %d: controlled shutdown", config.node_id)
    srv.essentials.expect_stop()  # the lifecycle task ends as part of it
    await srv.lifecycle.shutdown()
    outcome = srv.lifecycle.shutdown_clean
    log.info(
        "broker %d stopping (controlled shutdown %s)",
        config.node_id,
        "never registered: nothing to shut down"
        if outcome is None
        else "confirmed"
        if outcome
        else "not confirmed",
    )
    clean = bool(outcome)
    await runner.cleanup()
    return clean
