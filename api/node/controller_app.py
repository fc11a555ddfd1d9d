"""The controller process: a Raft voter running the quorum controller, on one aiohttp app.

Routes (all on the node's ``listen`` address):

* ``POST /internal/raft/v1/messages``      Raft traffic between nodes (msgpack).
* ``POST /internal/controller/v1/command`` a ``metalog.controller`` command (msgpack, see
  ``metalog.wire``) -> ``{"ok": response}`` or ``{"error": {...}}``; a node that is not the
  active controller answers 421 Misdirected Request with the leader's id and URL, so the
  client retries there (``metalog.client``).
* ``GET /internal/controller/v1/metadata?offset=N&max_wait_ms=M&broker_id=B`` (msgpack,
  ``metalog.client.MetadataFetchResponse``): committed metadata from offset N on, for
  observers (brokers); long-polls up to M ms when there is nothing new; the snapshot when N
  is older than what this node retains. Every controller answers, followers too.
* ``GET /v3/quorum/status``                JSON: this node's Raft view (leader, term, commit,
  per-follower match index and last contact), its metadata offset, the brokers fetching
  metadata from it (``metadata_observers``: fetch offset, lag, last contact) and the
  addresses it knows (``addresses``, so a tool can ask every voter).
* ``GET /v3/quorum/metadata``              JSON: a summary of the committed image (topics,
  partitions with leader/ISR/epochs, brokers): for operators and tests.
* ``POST /internal/controller/v1/peers``   JSON ``{"node_id", "url"}``: learn (and persist in
  ``DATA_DIR/controller-peers.json``) the address of a node about to join. Raft membership
  entries carry node ids only, so every member must learn a new voter's address before it
  is added (KIP-853 carries endpoints in its VotersRecord; doing the same in our Raft
  entries would retire this route).
* ``POST /internal/controller/v1/membership`` JSON ``{"op": "add-voter"|"remove-voter",
  "node_id", "url"}`` on the leader (421 elsewhere). Adding first adds the node as an
  observer, waits until it has caught up with the commit index, then promotes it: a voter
  that joins empty would otherwise count towards the quorum before it holds the log.
* ``GET /v3/health``                       200 while the process runs and its essential tasks
  (the Raft node loop, the controller service) live; 503 with ``failure`` once one died, and
  the process then exits non-zero (``common.essential``).
* ``GET /v3/health/ready``                 200 when not failed, a leader is known and this
  node has applied everything it knows committed; else 503 with ``reasons``.
* ``GET /metrics``                         Prometheus text: Raft term, commit lag and
  latency, the active controller's view of the cluster (offline partitions, ...), process
  and Python runtime (``api.http.metrics``).

Disk errors fail-stop the controller, named (exit 70, ``/v3/health`` 503 meanwhile): an
``OSError`` from the Raft log, a snapshot or quorum-state (ENOSPC or EIO) ends the Raft node
task with the file and errno in its reason, and one while opening them at start stops the
process the same way. A full disk is not waited out in-process: the Raft core takes every
``persist`` for done (etcd's ``Ready`` contract), so refusing appends would mean holding
back a Ready and every message behind it; a supervisor restarts the node, whose recovery
trusts only what was fsynced, and the start fails the same named way until space returns.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson
from aiohttp import web

from api.http.auth import ImageSecurity
from api.http.errors import error_middleware
from api.http.metrics import add_controller_metrics
from api.node import listeners
from api.node.config import ConfigError, NodeConfig
from api.node.signals import (
    FAILED_CLEANUP_TIMEOUT_S,
    cleanup_within,
    stop_signal_or_failure,
)
from common import netbind
from common.essential import Essentials, NodeFailedError, describe_error
from metalog import wire
from metalog.controller import ControllerConfig, QuorumController
from metalog.errors import MetadataError, NotControllerError
from metalog.image import MetadataImage
from metalog.service import ControllerService, error_to_wire
from raft.aio.node import RaftNodeConfig
from storage.errors import StorageError

log = logging.getLogger(__name__)

MSGPACK = "application/x-msgpack"
SERVICE_KEY: web.AppKey[ControllerService] = web.AppKey("controller_service", ControllerService)
DATA_DIR_KEY: web.AppKey[Path] = web.AppKey("data_dir", Path)
ESSENTIALS_KEY: web.AppKey[Essentials] = web.AppKey("essentials", Essentials)

# Entries a node that has caught up once may fall behind its commit index and stay ready.
READY_MAX_LAG = 1_000


class CatchUp:
    """Whether a controller's applied index counts against its readiness. Until the node has
    applied everything it knew committed (a restarted voter replaying its log) it is not
    ready. After that a lag under ``READY_MAX_LAG`` entries is ordinary: the commit index
    moves before the apply of every entry (a NoOpRecord every half second), so a strict
    ``applied == commit`` answered 503 for an instant twice a second, and a probe would take a
    healthy controller out of service (CI's fuzz run caught one). Kafka's broker latches
    its metadata catch-up the same way."""

    def __init__(self) -> None:
        self.caught_up_once = False

    def reason(self, applied: int, commit: int) -> str | None:
        if applied >= commit:
            self.caught_up_once = True
            return None
        if self.caught_up_once and commit - applied < READY_MAX_LAG:
            return None
        return f"applied {applied} < commit {commit}"


CATCH_UP_KEY: web.AppKey[CatchUp] = web.AppKey("catch_up", CatchUp)


def image_summary(image: MetadataImage) -> dict[str, Any]:
    topics = []
    for tid, t in sorted(image.topics.by_id.items(), key=lambda kv: kv[1].name):
        parts = []
        for p, reg in sorted(t.partitions.items()):
            parts.append(
                {
                    "partition": p,
                    "leader": reg.leader,
                    "replicas": list(reg.replicas),
                    "isr": list(reg.isr),
                    "leader_epoch": reg.leader_epoch,
                    "partition_epoch": reg.partition_epoch,
                    "eligible_leader_replicas": list(reg.elr),
                    "last_known_elr": list(reg.last_known_elr),
                    "leader_recovery_state": int(reg.leader_recovery_state),
                    "adding_replicas": list(reg.adding),
                    "removing_replicas": list(reg.removing),
                }
            )
        topics.append({"name": t.name, "topic_id": tid, "partitions": parts})
    brokers = []
    for bid, b in sorted(image.brokers.brokers.items()):
        brokers.append(
            {
                "broker_id": bid,
                "epoch": b.broker_epoch,
                "fenced": b.fenced,
                "rack": b.rack,
                "in_controlled_shutdown": b.in_controlled_shutdown,
                "endpoints": [list(e) for e in b.endpoints],
            }
        )
    return {
        "offset": image.offset,
        "epoch": image.epoch,
        "topics": topics,
        "brokers": brokers,
        # Issue 18: ACL bindings by id, and which users have which SCRAM mechanisms (never a
        # salt or a key).
        "acls": {
            i: {k: str(getattr(a, k)) for k in a.__slots__}
            for i, a in sorted(image.acls.by_id.items())
        },
        "scram_users": {u: [c.mechanism for c in cs] for u, cs in image.scram.users().items()},
    }


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json")


async def handle_command(request: web.Request) -> web.Response:
    svc = request.app[SERVICE_KEY]
    try:
        command = wire.loads_command(await request.read())
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
    st["metadata_observers"] = svc.observers_status()
    st["addresses"] = {str(k): v for k, v in sorted(svc.node.addresses.items())}
    return _json(st)


FETCH_WAIT_MS_MAX = 30_000


async def handle_metadata_fetch(request: web.Request) -> web.Response:
    svc = request.app[SERVICE_KEY]
    q = request.query
    try:
        offset = int(q["offset"])
        max_wait_ms = min(max(int(q.get("max_wait_ms", "0")), 0), FETCH_WAIT_MS_MAX)
        broker_id = int(q["broker_id"]) if "broker_id" in q else None
    except (KeyError, ValueError):
        return _json(
            {
                "error_code": 400,
                "message": "need integer offset (and optional max_wait_ms, broker_id)",
            },
            400,
        )
    if offset < 0:
        return _json({"error_code": 400, "message": "offset must be >= 0"}, 400)
    resp = await svc.fetch_metadata(offset, max_wait_ms=max_wait_ms, broker_id=broker_id)
    return web.Response(body=resp.to_msgpack(), content_type=MSGPACK)


SUMMARY_KEY: web.AppKey[list[Any]] = web.AppKey("metadata_summary", list)
"""``[image, body]`` of the last ``/v3/quorum/metadata`` answer (one-item cache)."""


async def handle_metadata(request: web.Request) -> web.Response:
    image = request.app[SERVICE_KEY].controller.image
    cached = request.app[SUMMARY_KEY]
    if cached and cached[0] is image:
        body = cached[1]
    else:
        # Images are immutable values, so a worker thread may walk one: at 10,000 partitions
        # the summary and its JSON took ~0.8 s, which on the event loop held the Raft node's
        # heartbeats and the brokers' metadata fetches for as long. Polls between two
        # metadata changes (operators' dashboards, the Jepsen load) get the same bytes.
        body = await asyncio.to_thread(lambda: orjson.dumps(image_summary(image)))
        cached[:] = [image, body]
    return web.Response(body=body, content_type="application/json")


PEERS_FILE = "controller-peers.json"


NODE_ID_MAX = 2**31 - 1
MEMBERSHIP_TIMEOUT_S_MAX = 300.0


class PeerBodyError(ValueError):
    """A peers or membership body (or peers file) with a missing or ill-typed field."""


def _node_id(v: Any) -> int:
    if type(v) is not int or not 1 <= v <= NODE_ID_MAX:
        raise PeerBodyError(f"node_id must be an integer in 1..{NODE_ID_MAX}, got {v!r:.40}")
    return v


def _peer_url(v: Any) -> str:
    """``http://HOST:PORT`` (or https), nothing else: it becomes where Raft traffic goes."""
    if type(v) is not str or len(v) > 512:
        raise PeerBodyError(f"url must be a string of at most 512 characters, got {v!r:.40}")
    try:
        u = urlsplit(v.rstrip("/"))
        port = u.port
    except ValueError as e:
        raise PeerBodyError(f"url {v!r:.80}: {e}") from None
    if (
        u.scheme not in ("http", "https")
        or not u.hostname
        or port is None
        or (u.path or u.query or u.fragment or u.username or u.password)
    ):
        raise PeerBodyError(f"url must be http(s)://HOST:PORT, got {v!r:.80}")
    return f"{u.scheme}://{u.netloc}"


async def _json_object(request: web.Request) -> dict[str, Any]:
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError as e:
        raise PeerBodyError(f"body is not JSON: {e}") from None
    if not isinstance(body, dict):
        raise PeerBodyError("body must be a JSON object")
    return body


def load_peers(data_dir: Path) -> dict[int, str]:
    """The peer addresses this node learned (``handle_peers``). A damaged file refuses the
    start with its name, rather than dialling addresses nobody checked."""
    p = data_dir / PEERS_FILE
    if not p.exists():
        return {}
    try:
        raw = orjson.loads(p.read_bytes())
        if not isinstance(raw, dict):
            raise PeerBodyError("not a JSON object")
        return {_node_id(int(k)): _peer_url(v) for k, v in raw.items()}
    except (orjson.JSONDecodeError, PeerBodyError, ValueError) as e:
        raise ConfigError(
            f"{p} is damaged ({e}); restore it or remove it and let the "
            "leader teach this node its peers again"
        ) from None


def save_peers(data_dir: Path, peers: dict[int, str]) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    tmp = data_dir / (PEERS_FILE + ".tmp")
    tmp.write_bytes(orjson.dumps({str(k): v for k, v in peers.items()}))
    tmp.replace(data_dir / PEERS_FILE)


async def handle_peers(request: web.Request) -> web.Response:
    try:
        body = await _json_object(request)
        node_id, url = _node_id(body.get("node_id")), _peer_url(body.get("url"))
    except PeerBodyError as e:
        return _json({"error_code": 400, "message": str(e)}, 400)
    await _learn_peer(request.app, node_id, url)
    return _json({"node_id": node_id, "url": url})


async def _learn_peer(app: web.Application, node_id: int, url: str) -> None:
    """This node learns ``node_id``'s address: persisted, then handed to the transport."""
    data_dir = app[DATA_DIR_KEY]
    peers = load_peers(data_dir)
    peers[node_id] = url
    await asyncio.to_thread(save_peers, data_dir, peers)
    node = app[SERVICE_KEY].node
    if node_id != node.id:
        node.addresses[node_id] = url
        node.transport.set_peer(node_id, url)


async def _teach_members(app: web.Application, node_id: int, url: str) -> None:
    """Every current member (and this node, persistently) learns ``node_id``'s address."""
    node = app[SERVICE_KEY].node
    await _learn_peer(app, node_id, url)
    st = node.status()
    members = set(st.voters) | set(st.observers)
    async with aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=5), connector=netbind.connector()
    ) as http:
        for m in members - {int(node.id), node_id}:
            murl = node.addresses.get(m)
            if murl is None:
                continue
            try:
                async with http.post(
                    f"{murl}/internal/controller/v1/peers", json={"node_id": node_id, "url": url}
                ) as r:
                    r.raise_for_status()
            except (aiohttp.ClientError, TimeoutError, OSError) as e:
                # A member that is down learns it from its own config or a later add.
                log.warning("could not tell node %d the address of node %d: %s", m, node_id, e)


async def handle_membership(request: web.Request) -> web.Response:
    svc = request.app[SERVICE_KEY]
    node = svc.node
    try:
        body = await _json_object(request)
        op = body.get("op")
        if op not in ("add-voter", "remove-voter"):
            raise PeerBodyError(f"op must be add-voter or remove-voter, got {op!r:.40}")
        node_id = _node_id(body.get("node_id"))
        url = _peer_url(body.get("url")) if op == "add-voter" else ""
        timeout_s = body.get("timeout_s", 30)
        if type(timeout_s) not in (int, float) or not 0 < timeout_s <= MEMBERSHIP_TIMEOUT_S_MAX:
            raise PeerBodyError(f"timeout_s must be in (0, {MEMBERSHIP_TIMEOUT_S_MAX:.0f}]")
    except PeerBodyError as e:
        return _json({"error_code": 400, "message": str(e)}, 400)
    if node.role.value != "leader":
        leader = int(node.leader_id)
        return _json(
            {
                "error_code": 421,
                "message": "not the leader",
                "leader_id": leader,
                "leader_url": node.addresses.get(leader),
            },
            421,
        )
    try:
        if op == "add-voter":
            await _teach_members(request.app, node_id, url)
            if node_id not in node.status().observers:
                # An observer already (an add-voter that timed out before its promotion, or
                # one retried): adding it again "changes nothing" and was refused, so the
                # node could never be promoted. Go on to the catch-up and the promotion.
                await node.add_observer(node_id, url)
            deadline = asyncio.get_running_loop().time() + float(timeout_s)
            while True:  # promote only once it holds the log (KIP-853's catch-up rule)
                st = node.status()
                match = {f.node_id: f.match for f in st.followers}.get(node_id, 0)
                if match >= st.commit:
                    break
                if asyncio.get_running_loop().time() > deadline:
                    return _json(
                        {
                            "error_code": 504,
                            "message": f"node {node_id} did not catch up (match {match}, "
                            f"commit {st.commit}); it stays an observer",
                        },
                        504,
                    )
                await asyncio.sleep(0.05)
            index = await node.add_voter(node_id, url)
        else:
            index = await node.remove_voter(node_id)
    except Exception as e:  # ConfChangeError (one change at a time), NotLeaderError
        return _json({"error_code": 409, "message": f"{type(e).__name__}: {e}"}, 409)
    st = node.status()
    return _json({"index": index, "voters": list(st.voters), "observers": list(st.observers)})


async def handle_health(request: web.Request) -> web.Response:
    failure = request.app[ESSENTIALS_KEY].failure
    if failure is not None:
        return _json({"status": "failed", "failure": failure}, 503)
    return _json({"status": "ok"})


async def handle_ready(request: web.Request) -> web.Response:
    """Ready: no essential task died, a leader is known, and this node has applied every
    entry it knows committed (a restarted voter replaying its log is not ready yet; see
    ``CatchUp`` for the lag allowed after that)."""
    st = request.app[SERVICE_KEY].node.status()
    failure = request.app[ESSENTIALS_KEY].failure
    lag = request.app[CATCH_UP_KEY].reason(st.applied, st.commit)
    reasons = (
        ([f"failed: {failure}"] if failure is not None else [])
        + (["no known leader"] if not st.leader_id else [])
        + ([lag] if lag is not None else [])
    )
    body = {
        "ready": not reasons,
        "reasons": reasons,
        "role": st.role,
        "term": st.term,
        "leader_id": st.leader_id,
        "commit": st.commit,
        "applied": st.applied,
    }
    return _json(body, 503 if reasons else 200)


def build_controller(
    config: NodeConfig, *, join: bool = False, snapshot_records: int = 20_000
) -> tuple[web.Application, ControllerService]:
    """The controller's app. ``join``: start with an empty Raft configuration and wait to be
    added by the leader (``longboat quorum add-voter``), instead of bootstrapping one.
    ``snapshot_records``: records between metadata snapshots."""
    data_dir = Path(config.data_dir)
    voters = {v.node_id: v.url for v in config.voters}
    peers = {**voters, **load_peers(data_dir)}
    node_cfg = RaftNodeConfig(
        node_id=config.node_id,
        data_dir=str(data_dir / "__cluster_metadata-0"),
        voters={} if join else voters,
        peers=peers,
        join=join,
    )
    ctl_config = ControllerConfig(
        session_timeout_ms=config.broker_session_timeout_ms,
        heartbeat_interval_ms=config.broker_heartbeat_interval_ms,
        default_num_partitions=config.default_num_partitions,
        default_replication_factor=config.default_replication_factor,
        leader_imbalance_check_interval_ms=config.leader_imbalance_check_interval_ms or None,
        max_partitions_per_topic=config.max_partitions_per_topic,
        max_partitions=config.max_partitions,
        eligible_leader_replicas_enabled=config.eligible_leader_replicas_enable,
        unclean_recovery_strategy=config.unclean_recovery_strategy,
        unclean_recovery_timeout_ms=config.unclean_recovery_timeout_ms,
    )
    svc = ControllerService(
        node_cfg,
        QuorumController(config.node_id, config=ctl_config),
        snapshot_records=snapshot_records,
    )
    app = web.Application(
        middlewares=[error_middleware], client_max_size=config.http_request_bytes_max
    )
    security = ImageSecurity(lambda: svc.controller.image)
    listeners.install(app, config, credentials=security, acls=security)
    app[SERVICE_KEY] = svc
    app[DATA_DIR_KEY] = data_dir
    svc.node.add_routes(app)
    app.router.add_post("/internal/controller/v1/peers", handle_peers)
    app.router.add_post("/internal/controller/v1/membership", handle_membership)
    app.router.add_post("/internal/controller/v1/command", handle_command)
    app.router.add_get("/internal/controller/v1/metadata", handle_metadata_fetch)
    app.router.add_get("/v3/quorum/status", handle_status)
    app[SUMMARY_KEY] = []
    app[CATCH_UP_KEY] = CatchUp()
    app.router.add_get("/v3/quorum/metadata", handle_metadata)
    app.router.add_get("/v3/health", handle_health)
    app.router.add_get("/v3/health/ready", handle_ready)
    essentials = app[ESSENTIALS_KEY] = Essentials(f"controller {config.node_id}")
    metrics = add_controller_metrics(
        app,
        lambda: {**svc.node.status().to_json(), "metadata_offset": svc.metadata_offset},
        lambda: svc.controller.image,
        lambda: svc.controller.is_active,
    )
    svc.node.on_proposal_committed = metrics.commit_latency.observe

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        try:
            await svc.start()
        except (OSError, StorageError) as e:
            # Fail-stop, named (exit 70): a disk that is full or failing (ENOSPC, EIO), or
            # damage found by recovery, with the file named; never a bare traceback.
            reason = describe_error(e)
            log.critical(
                "controller %d: cannot open its metadata log in %s: %s; the node stops",
                config.node_id,
                node_cfg.data_dir,
                reason,
            )
            raise NodeFailedError(
                f"controller {config.node_id}: cannot open its metadata log in "
                f"{node_cfg.data_dir}: {reason}"
            ) from e
        assert svc.node.task is not None and svc.task is not None
        essentials.watch(svc.node.task, "raft node loop")
        essentials.watch(svc.task, "controller service")
        yield
        essentials.expect_stop()
        await svc.stop()

    app.cleanup_ctx.append(lifecycle)
    return app, svc


GC_THRESHOLDS = (100_000, 50, 100)
"""The controller process's ``gc.set_threshold``. With the default (700, 10, 10), a
controller of 10,000 partitions ran a full collection every few seconds while it created and
fenced them, 50-100 ms of an idle core each (several times that on a loaded one, on the event
loop that runs Raft), and each freed nothing: the images, the Raft log mirror and the
observers' batches are many small long-lived objects, and what dies is freed by reference
counting. These thresholds (the Raft bench server's, docs/raft-node.md) leave one full
collection in such a run (finding 13)."""


async def serve_controller(config: NodeConfig, *, join: bool = False) -> None:
    """Run until SIGINT/SIGTERM, then stop cleanly."""
    gc.set_threshold(*GC_THRESHOLDS)
    netbind.set_client_ssl(listeners.node_client_ssl_context(config))
    app, _svc = build_controller(config, join=join)
    runner, _bound = await listeners.start_listeners(app, config)
    log.info("controller %d listening on %s", config.node_id, config.url)
    failure = await stop_signal_or_failure(app[ESSENTIALS_KEY])
    if failure is not None:
        await cleanup_within(runner, FAILED_CLEANUP_TIMEOUT_S)
        raise NodeFailedError(f"controller {config.node_id}: {failure}")
    log.info("controller %d stopping", config.node_id)
    await runner.cleanup()
