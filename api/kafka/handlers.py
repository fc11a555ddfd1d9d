"""The Kafka API handlers: one request in, one response out, over the broker's own parts.

A second front door, not a second broker: produce and fetch go to this broker's
``ReplicaManager`` (a Kafka client talks to each partition's leader itself, so a partition
this broker does not lead is answered NOT_LEADER_OR_FOLLOWER and the client refreshes its
metadata, as with Kafka), groups to the ``GroupCoordinator``, producer ids to the
``ProducerIdManager``, topics to the controller, and Metadata is read from the broker's
``MetadataImage``. Each handler serves its API's whole advertised version range through
``protocol.build`` (fields a version lacks are dropped).

Groups: Longboat's coordinator computes assignments itself (docs/consumer-groups.md), so a
Kafka group is joined with the subscription decoded from the member's consumer-protocol
metadata (its topics, owned partitions, and the first assignor it offers that the coordinator
has), the leader is handed every member's metadata as Kafka does, and SyncGroup answers each
member with the coordinator's plan, encoded as a ``ConsumerProtocolAssignment``; the plan the
leader sends is not used. Only ``protocol_type`` "consumer" is served.

Authorization (issue 18): each handler asks ``api.kafka.security.allowed`` with Kafka's rules
(KafkaApis): Produce WRITE on the topic (and on the TRANSACTIONAL_ID of a transactional
produce), Fetch READ, ListOffsets and Metadata DESCRIBE (a Metadata request for every topic
lists only those the principal may describe; one naming a topic it may not describe is
answered TOPIC_AUTHORIZATION_FAILED whether it exists or not), the group APIs READ on the
GROUP (FindCoordinator DESCRIBE), OffsetCommit READ on the group and each topic, OffsetFetch
DESCRIBE on both, CreateTopics CREATE on the CLUSTER or the topic, DeleteTopics DELETE,
InitProducerId WRITE on its TRANSACTIONAL_ID or else IDEMPOTENT_WRITE on the CLUSTER (or
WRITE on some topic, KIP-679), and the transaction APIs WRITE on the TRANSACTIONAL_ID (plus
WRITE on added topics, READ on the group of offsets). A refused resource is answered
with Kafka's error (TOPIC_/GROUP_/CLUSTER_/TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and nothing
is done for it.
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import datetime
import importlib
import io
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.consumer_protocol_assignment.v0.data import (
    ConsumerProtocolAssignment,
)
from kio.schema.consumer_protocol_assignment.v0.data import (
    TopicPartition as AssignedPartitions,
)
from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32

from api.kafka.protocol import build, error_code, response_module
from api.kafka.security import allowed, may_create_topic, may_get_producer_id
from api.kafka.zerocopy import PlannedResponse, new_sentinel
from broker.errors import BrokerError
from broker.group_coordinator import OFFSETS_TOPIC, CoordinatorError, GroupCoordinator
from broker.groups.group import (
    HeartbeatRequest,
    JoinRequest,
    LeaveRequest,
    OffsetAndMetadata,
    OffsetCommitRequest,
    SyncRequest,
    TxnOffsetCommitRequest,
)
from broker.groups.types import RebalanceProtocol, TopicPartition
from broker.producer_ids import ProducerIdThrottledError
from broker.replica_manager import READ_COMMITTED, READ_UNCOMMITTED, ReplicaManager
from broker.router import as_replica_error
from broker.txn_coordinator import TxnCoordinator
from metalog.commands import CreateTopic, DeleteTopic
from metalog.errors import MetadataError
from metalog.image import TOPIC_CONFIG_DEFAULTS, MetadataImage
from metalog.records import BrokerId, TopicId
from metalog.security import Operation, ResourceType
from storage.batch import MAGIC_KAFKA, as_kafka_batch, decode_records, iter_batches
from storage.errors import StorageError
from storage.log import FileRange

log = logging.getLogger(__name__)

ZERO_MS = datetime.timedelta(0)
PRODUCE_APPENDED: contextvars.ContextVar[Callable[[], None] | None] = contextvars.ContextVar(
    "PRODUCE_APPENDED", default=None
)
"""Set by the listener for a produce request it pipelines: called once every partition's
batch of the request is appended (or refused), before the wait for acks."""
AUTO_CREATE_WAIT_S = 5.0
"""How long a Metadata request waits for the controller to create a topic it names."""
KAFKA_LISTENER = "kafka"
"""The endpoint name a broker registers its (first) Kafka listener under; a broker with
several registers the others as ``kafka:<NAME>`` (``kafka_endpoint_name``)."""


def kafka_endpoint_name(listener: str, first: bool) -> str:
    """The endpoint a Kafka listener is registered as. Metadata answers a client with the
    endpoints of the listener it came in on, as Kafka does, so an SSL client is never sent
    to a plaintext port."""
    return KAFKA_LISTENER if first else f"{KAFKA_LISTENER}:{listener}"


COORDINATOR_ASSIGNORS = ("range", "roundrobin", "sticky", "cooperative-sticky")
TOPIC, GROUP, TXN_ID = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID
READ, WRITE, DESCRIBE = Operation.READ, Operation.WRITE, Operation.DESCRIBE
# Protocol names other clients give the same assignors. KafkaJS's one built-in assigner is
# "RoundRobinAssigner"; a KafkaJS member looks its assigner up by the name JoinGroup answers,
# so the answer keeps the member's own name (``handle_join_group``).
ASSIGNOR_ALIASES = {"RoundRobinAssigner": "roundrobin"}


def coordinator_assignor(name: str) -> str:
    return ASSIGNOR_ALIASES.get(name, name)


def topic_uuid(topic_id: str) -> uuid.UUID:
    """Longboat's topic id (22 characters of URL-safe base64 of 16 bytes) as Kafka's UUID."""
    try:
        raw = base64.urlsafe_b64decode(topic_id + "=" * (-len(topic_id) % 4))
        return uuid.UUID(bytes=raw[:16].ljust(16, b"\0"))
    except (ValueError, TypeError):
        return uuid.UUID(int=0)


@dataclass
class KafkaContext:
    """What the handlers use; the broker process builds it (``api.node.broker_app``)."""

    broker_id: int
    cluster_id: str
    image_fn: Callable[[], MetadataImage]
    replicas: ReplicaManager
    groups: GroupCoordinator
    next_producer_id: Callable[[], Awaitable[int]]
    execute: Callable[[Any], Awaitable[Any]]
    """Runs a controller command (``ControllerClient.execute``)."""
    fetch_wait_ms_max: int = 30_000
    endpoint: str = KAFKA_LISTENER
    """The endpoint name of this listener (``kafka_endpoint_name``): what Metadata,
    FindCoordinator and DescribeCluster answer with."""
    txn: TxnCoordinator | None = None
    """The transaction coordinator (InitProducerId with a transactional id, FindCoordinator
    key type 1, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn); None: transactions refused."""
    auto_create_topics: bool = False
    """``auto_create_topics_enable``: a Metadata request naming a topic that does not exist
    creates it with the cluster's defaults (when the request allows it, v4+, and the
    principal may CREATE it), as Kafka's ``auto.create.topics.enable``."""
    fetch_zero_copy: bool = False
    """Fetch answers carry Kafka batches as ranges of the segment files, sent with
    ``os.sendfile`` (``api.kafka.zerocopy``); the listener sets it on plaintext only."""
    group_metadata: dict[tuple[str, str], tuple[str, bytes]] = field(default_factory=dict)
    """(group, member) -> (protocol name, metadata) of members that joined here, for the
    group leader's JoinGroup answer. Only the coordinator hears joins, so it is complete
    there; a new coordinator learns it again as members rejoin."""

    @property
    def image(self) -> MetadataImage:
        return self.image_fn()


class AcksZeroFailedError(Exception):
    """An acks=0 produce failed somewhere: the listener closes the connection."""


def _code(e: BaseException) -> ErrorCode:
    if isinstance(e, CoordinatorError):
        return error_code(e.code)
    if isinstance(e, BrokerError | StorageError):
        return error_code(as_replica_error(e).error_code)
    raise e


# ------------------------------------------------------------------------ Metadata


def _kafka_endpoint(
    image: MetadataImage, broker_id: int, name: str = KAFKA_LISTENER
) -> tuple[str, int] | None:
    br = image.brokers.get(BrokerId(broker_id))
    if br is None:
        return None
    for ep in br.endpoints:
        if ep.name == name:
            return ep.host, ep.port
    return None


async def handle_metadata(ctx: KafkaContext, version: int, req: Any) -> Any:
    mod = response_module(3, version)
    image = ctx.image
    brokers = []
    for br in image.brokers.brokers.values():
        ep = _kafka_endpoint(image, int(br.broker_id), ctx.endpoint)
        if ep is not None and not br.fenced:
            brokers.append(
                build(
                    mod,
                    "MetadataResponseBroker",
                    node_id=int(br.broker_id),
                    host=ep[0],
                    port=ep[1],
                    rack=br.rack,
                )
            )
    requested: list[str] | None
    if req.topics is None or (version == 0 and not req.topics):
        requested = None  # every topic (v0: an empty list means all)
    else:
        requested = [t.name for t in req.topics if t.name is not None]
    if requested is None:
        names = [n for n in sorted(image.topics.by_name.keys()) if allowed(DESCRIBE, TOPIC, n)]
    else:
        names = requested
    created: dict[str, ErrorCode] = {}
    if (
        requested is not None
        and ctx.auto_create_topics
        and getattr(req, "allow_auto_topic_creation", True)
    ):
        missing = [
            n
            for n in dict.fromkeys(requested)
            if image.topics.get(n) is None and allowed(DESCRIBE, TOPIC, n)
        ]
        if missing:
            created = await _auto_create(ctx, missing)
            image = ctx.image
    topics = []
    for name in names:
        t = image.topics.get(name)
        denied = requested is not None and not allowed(DESCRIBE, TOPIC, name)
        if t is None or denied:
            topics.append(
                build(
                    mod,
                    "MetadataResponseTopic",
                    error_code=(
                        ErrorCode.topic_authorization_failed
                        if denied
                        else created.get(name, ErrorCode.unknown_topic_or_partition)
                    ),
                    name=name,
                    topic_id=uuid.UUID(int=0),
                    is_internal=False,
                    partitions=(),
                    topic_authorized_operations=-2147483648,
                )
            )
            continue
        parts = []
        for p in sorted(t.partitions.keys()):
            reg = t.partitions[p]
            live = [int(b) for b in reg.replicas if _usable(image, int(b))]
            offline = tuple(int(b) for b in reg.replicas if int(b) not in live)
            parts.append(
                build(
                    mod,
                    "MetadataResponsePartition",
                    error_code=(
                        ErrorCode.none if int(reg.leader) >= 0 else ErrorCode.leader_not_available
                    ),
                    partition_index=p,
                    leader_id=int(reg.leader),
                    leader_epoch=int(reg.leader_epoch),
                    replica_nodes=tuple(int(b) for b in reg.replicas),
                    isr_nodes=tuple(int(b) for b in reg.isr),
                    offline_replicas=offline,
                )
            )
        topics.append(
            build(
                mod,
                "MetadataResponseTopic",
                error_code=ErrorCode.none,
                name=name,
                topic_id=topic_uuid(str(t.topic_id)),
                is_internal=name == OFFSETS_TOPIC,
                partitions=tuple(parts),
                topic_authorized_operations=-2147483648,
            )
        )
    return build(
        mod,
        "MetadataResponse",
        throttle_time=ZERO_MS,
        brokers=tuple(brokers),
        cluster_id=ctx.cluster_id,
        controller_id=ctx.broker_id,
        topics=tuple(topics),
        cluster_authorized_operations=-2147483648,
    )


async def _auto_create(ctx: KafkaContext, names: list[str]) -> dict[str, ErrorCode]:
    """Create each missing topic with the cluster's default partitions and replication
    factor; the code a topic still absent from this broker's image is answered with. Kafka
    answers LEADER_NOT_AVAILABLE for a topic being created (clients ask again), and
    TOPIC_AUTHORIZATION_FAILED to a principal that may not create it."""
    out: dict[str, ErrorCode] = {}
    for name in names:
        if not may_create_topic(name):
            out[name] = ErrorCode.topic_authorization_failed
            continue
        try:
            async with asyncio.timeout(AUTO_CREATE_WAIT_S):
                await ctx.execute(CreateTopic(name=name, topic_id=_random_topic_id()))
            out[name] = ErrorCode.leader_not_available
        except MetadataError as e:
            code = str(getattr(e, "code", "UNKNOWN_SERVER_ERROR"))
            # Another client's request created it first: it is on its way to this image.
            out[name] = (
                ErrorCode.leader_not_available
                if code == "TOPIC_ALREADY_EXISTS"
                else error_code(code)
            )
        except Exception:  # no controller answered in time: the client asks again
            out[name] = ErrorCode.leader_not_available
    return out


def _usable(image: MetadataImage, broker_id: int) -> bool:
    return image.brokers.is_usable(BrokerId(broker_id))


# ------------------------------------------------------------------------ Produce


# Produce errors Kafka answers without a log start offset (ReplicaManager.appendToLocalLog:
# no log reached, or the batch refused before it).
_NO_LOG_START = frozenset(
    {
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.not_leader_or_follower,
        ErrorCode.message_too_large,
        ErrorCode.record_list_too_large,
        ErrorCode.corrupt_message,
        ErrorCode.kafka_storage_error,
        ErrorCode.topic_authorization_failed,
        ErrorCode.transactional_id_authorization_failed,
    }
)


async def handle_produce(ctx: KafkaContext, version: int, req: Any) -> Any | None:
    """None for acks=0: Kafka sends no response then."""
    mod = response_module(0, version)
    acks = int(req.acks)
    timeout_ms = max(int(req.timeout.total_seconds() * 1000), 1)
    transactional = req.transactional_id is not None
    txn_allowed = not transactional or allowed(WRITE, TXN_ID, req.transactional_id)
    on_appended = PRODUCE_APPENDED.get()
    waiting = sum(len(t.partition_data) for t in req.topic_data)

    def appended_one() -> None:
        nonlocal waiting
        waiting -= 1
        if waiting == 0 and on_appended is not None:
            on_appended()

    if waiting == 0 and on_appended is not None:
        on_appended()

    async def one(topic: str, p: Any) -> Any:
        done = False

        def mark() -> None:
            nonlocal done
            if not done:
                done = True
                appended_one()

        try:
            return await _one(topic, p, mark)
        finally:
            mark()

    async def _one(topic: str, p: Any, mark: Callable[[], None]) -> Any:
        err, base, start = ErrorCode.none, -1, -1
        msg: str | None = None
        if transactional and ctx.txn is None:
            err, msg = (
                ErrorCode.transactional_id_authorization_failed,
                ("transactions are not served by this listener"),
            )
        elif not txn_allowed:
            err = ErrorCode.transactional_id_authorization_failed
        elif not allowed(WRITE, TOPIC, topic):
            err = ErrorCode.topic_authorization_failed
        elif p.records is None or len(p.records) == 0:
            err = ErrorCode.invalid_record
        else:
            try:
                ans = await ctx.replicas.produce(
                    topic,
                    int(p.index),
                    acks,
                    timeout_ms,
                    bytes(p.records),
                    transactional_id=req.transactional_id,
                    appended=mark,
                )
                base = int(ans["base_offset"])
            except (BrokerError, StorageError) as e:
                err, msg = _code(e), str(e)
            if err not in _NO_LOG_START:
                # v5+: the log start, as Kafka answers it also with a sequence or epoch error
                # (its producer compares it with the last acked offset, KIP-360).
                rep = ctx.replicas.by_name.get((topic, int(p.index)))
                start = rep.log.log_start_offset if rep is not None else -1
        return build(
            mod,
            "PartitionProduceResponse",
            index=p.index,
            error_code=err,
            base_offset=base,
            log_append_time=None,
            log_start_offset=start,
            record_errors=(),
            error_message=msg,
        )

    async def topic_resp(t: Any) -> Any:
        parts = await asyncio.gather(*(one(t.name, p) for p in t.partition_data))
        return build(mod, "TopicProduceResponse", name=t.name, partition_responses=tuple(parts))

    topics = await asyncio.gather(*(topic_resp(t) for t in req.topic_data))
    if acks == 0:
        failed = [
            f"{t.name}-{p.index}: {p.error_code.name}"
            for t in topics
            for p in t.partition_responses
            if p.error_code != ErrorCode.none
        ]
        if failed:
            # Kafka closes the connection when an acks=0 produce fails (KafkaApis), the only
            # way to tell such a producer to refresh its metadata or stop.
            raise AcksZeroFailedError(", ".join(failed[:5]))
        return None
    return build(mod, "ProduceResponse", responses=tuple(topics), throttle_time=ZERO_MS)


# ------------------------------------------------------------------------ Fetch

FETCH_RANGES_MAX = 128
"""File ranges (each a descriptor held until sent) in one zero-copy Fetch answer; further
partitions are copied, so a fetch of many partitions cannot exhaust the descriptors."""


def kafka_records(data: bytes) -> bytes:
    """Fetched log bytes as a Kafka client reads them: Kafka batches as stored, Longboat's
    msgpack batches re-encoded as magic 2 (``as_kafka_batch``)."""
    if not data:
        return b""
    mv = memoryview(data)
    spans = list(iter_batches(mv, verify=False))
    if all(h.magic == MAGIC_KAFKA for _, h in spans):
        return data  # a partial tail batch included, as Kafka sends it
    return b"".join(as_kafka_batch(mv[pos : pos + h.size]) for pos, h in spans)


async def handle_fetch(ctx: KafkaContext, version: int, req: Any) -> Any:
    """The Fetch answer: a body, or with ``ctx.fetch_zero_copy`` a ``PlannedResponse`` when
    some partition's records are a file range (Kafka batches as stored: no conversion, and
    the read_committed aborted list is metadata beside them)."""
    mod = response_module(1, version)
    max_wait_ms = min(max(int(req.max_wait.total_seconds() * 1000), 0), ctx.fetch_wait_ms_max)
    min_bytes = max(int(req.min_bytes), 0)
    total_max = int(getattr(req, "max_bytes", 0x7FFFFFFF) or 0x7FFFFFFF)
    denied = [
        (t.topic, p) for t in req.topics if not allowed(READ, TOPIC, t.topic) for p in t.partitions
    ]
    wanted = [
        (t.topic, p) for t in req.topics if allowed(READ, TOPIC, t.topic) for p in t.partitions
    ]
    deadline = time.monotonic() + max_wait_ms / 1000
    # IsolationLevel 1 (v4+): up to the LSO, with the aborted transactions of the range; a
    # Kafka consumer filters their batches itself, so they are sent as they are.
    isolation = _isolation(req)

    async def read_all(wait_ms: int) -> list[tuple[str, Any, ErrorCode, dict[str, Any]]]:
        out: list[tuple[str, Any, ErrorCode, dict[str, Any]]] = []
        left = total_max
        ranges = 0
        try:
            for topic, p in wanted:
                if left <= 0 and any(len(a.get("records") or b"") for *_, a in out):
                    out.append((topic, p, ErrorCode.none, _no_data(ctx, topic, int(p.partition))))
                    continue
                try:
                    ans = await ctx.replicas.fetch(
                        topic=topic,
                        partition=int(p.partition),
                        replica_id=-1,
                        fetch_offset=int(p.fetch_offset),
                        leader_epoch=int(getattr(p, "current_leader_epoch", -1)),
                        last_fetched_epoch=-1,
                        max_bytes=max(min(int(p.partition_max_bytes), max(left, 1)), 1),
                        max_wait_ms=wait_ms,
                        min_bytes=1,
                        high_watermark=-1,
                        broker_epoch=-1,
                        isolation_level=isolation,
                        filter_aborted=False,
                        file_range=ctx.fetch_zero_copy and ranges < FETCH_RANGES_MAX,
                    )
                    ranges += isinstance(ans.get("records"), FileRange)
                    left -= len(ans.get("records") or b"")
                    out.append((topic, p, ErrorCode.none, ans))
                except (BrokerError, StorageError) as e:
                    out.append((topic, p, _code(e), {}))
        except BaseException:
            _close_ranges(out)
            raise
        return out

    results = await read_all(0)
    got = sum(len(a.get("records") or b"") for *_, a in results)
    if (
        got < max(min_bytes, 1)
        and max_wait_ms > 0
        and wanted
        and all(e == ErrorCode.none for _, _, e, _ in results)
    ):
        _close_ranges(results)
        await _wait_any(ctx, wanted, deadline, isolation)
        results = await read_all(0)
    results += [(t, p, ErrorCode.topic_authorization_failed, {}) for t, p in denied]
    plan = PlannedResponse(None)
    try:
        topics: dict[str, list[Any]] = {}
        for topic, p, err, ans in results:
            hw = int(ans.get("high_watermark", -1)) if ans else -1
            recs = ans.get("records") if ans else None
            if isinstance(recs, FileRange):
                records = new_sentinel()
                plan.ranges[records] = recs
            else:
                records = kafka_records(bytes(recs or b""))
            topics.setdefault(topic, []).append(
                build(
                    mod,
                    "PartitionData",
                    partition_index=p.partition,
                    error_code=err,
                    high_watermark=hw,
                    last_stable_offset=int(ans.get("last_stable_offset", hw)) if ans else -1,
                    log_start_offset=int(ans.get("log_start_offset", -1)) if ans else -1,
                    aborted_transactions=tuple(
                        build(mod, "AbortedTransaction", producer_id=pid, first_offset=first)
                        for pid, first in (ans.get("aborted_transactions") or ())
                    )
                    if isolation == READ_COMMITTED
                    else None,
                    preferred_read_replica=-1,
                    records=records,
                )
            )
        body = build(
            mod,
            "FetchResponse",
            throttle_time=ZERO_MS,
            error_code=ErrorCode.none,
            session_id=0,
            responses=tuple(
                build(mod, "FetchableTopicResponse", topic=t, partitions=tuple(ps))
                for t, ps in topics.items()
            ),
        )
    except BaseException:
        _close_ranges(results)
        raise
    if plan.ranges:
        plan.body = body
        return plan
    return body


def _close_ranges(results: list[tuple[str, Any, ErrorCode, dict[str, Any]]]) -> None:
    for *_, ans in results:
        recs = ans.get("records") if ans else None
        if isinstance(recs, FileRange):
            recs.close()


def _no_data(ctx: KafkaContext, topic: str, partition: int) -> dict[str, Any]:
    rep = ctx.replicas.by_name.get((topic, partition))
    hw = rep.high_watermark if rep is not None else -1
    start = rep.log.log_start_offset if rep is not None else -1
    return {
        "records": b"",
        "high_watermark": hw,
        "last_stable_offset": rep.last_stable_offset if rep is not None else -1,
        "log_start_offset": start,
    }


def _isolation(req: Any) -> str:
    return READ_COMMITTED if int(getattr(req, "isolation_level", 0)) == 1 else READ_UNCOMMITTED


async def _wait_any(
    ctx: KafkaContext, wanted: list[tuple[str, Any]], deadline: float, isolation: str
) -> None:
    """Until any wanted partition has data to give, or the deadline (the long poll)."""
    left_ms = int((deadline - time.monotonic()) * 1000)
    if left_ms <= 0:
        return
    tasks = [
        asyncio.ensure_future(
            ctx.replicas.fetch(
                topic=topic,
                partition=int(p.partition),
                replica_id=-1,
                fetch_offset=int(p.fetch_offset),
                leader_epoch=-1,
                last_fetched_epoch=-1,
                max_bytes=1,
                max_wait_ms=left_ms,
                min_bytes=1,
                high_watermark=-1,
                broker_epoch=-1,
                isolation_level=isolation,
            )
        )
        for topic, p in wanted
    ]
    try:
        pending = set(tasks)
        while pending:
            done, pending = await asyncio.wait(
                pending,
                timeout=max(deadline - time.monotonic(), 0),
                return_when=asyncio.FIRST_COMPLETED,
            )
            if not done:
                return
            for t in done:
                if t.exception() is not None or (t.result().get("records") or b""):
                    return
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


# ------------------------------------------------------------------------ ListOffsets


async def handle_list_offsets(ctx: KafkaContext, version: int, req: Any) -> Any:
    mod = response_module(2, version)
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            err, off, epoch, found_ts = ErrorCode.none, -1, -1, -1
            ts = int(p.timestamp)
            try:
                if not allowed(DESCRIBE, TOPIC, t.name):
                    raise _Denied
                if ts < -2:
                    raise _Unsupported
                off = int(
                    ctx.replicas.list_offsets(t.name, int(p.partition_index), ts, _isolation(req))[
                        "offset"
                    ]
                )
                rep = ctx.replicas.by_name.get((t.name, int(p.partition_index)))
                epoch = rep.registration.leader_epoch if rep is not None else -1
                if ts >= 0 and off >= 0 and rep is not None:
                    found_ts = _timestamp_at(rep.log, off)
            except _Unsupported:
                err = ErrorCode.unsupported_version
            except _Denied:
                err = ErrorCode.topic_authorization_failed
            except (BrokerError, StorageError) as e:
                err = _code(e)
            parts.append(
                build(
                    mod,
                    "ListOffsetsPartitionResponse",
                    partition_index=p.partition_index,
                    error_code=err,
                    timestamp=found_ts,
                    offset=off,
                    # No offset found (a timestamp past the end): no epoch either, as Kafka.
                    leader_epoch=int(epoch) if off >= 0 else -1,
                    old_style_offsets=(off,) if off >= 0 else (),
                )
            )
        topics.append(build(mod, "ListOffsetsTopicResponse", name=t.name, partitions=tuple(parts)))
    return build(mod, "ListOffsetsResponse", throttle_time=ZERO_MS, topics=tuple(topics))


def _timestamp_at(log: Any, offset: int) -> int:
    """The timestamp of the record at ``offset`` (Kafka answers a by-time lookup with the
    found record's timestamp); -1 if it is not there to read."""
    data = log.read(offset, 1).data
    for pos, bh in iter_batches(data, verify=False):
        for r in decode_records(memoryview(data)[pos : pos + bh.size], verify=False):
            if r.offset >= offset:
                return r.timestamp
    return -1


class _Unsupported(Exception):
    """A ListOffsets spec this listener does not serve yet (-3 max timestamp and beyond)."""


class _Denied(Exception):
    """The principal may not do it (the handler answers its API's authorization error)."""


class _Skip(Exception):
    """Nothing to send to the coordinator."""


# ------------------------------------------------------------------------ producer ids


async def handle_init_producer_id(ctx: KafkaContext, version: int, req: Any) -> Any:
    mod = response_module(22, version)

    def answer(error: Any, pid: int = -1, epoch: int = -1, throttle: Any = ZERO_MS) -> Any:
        return build(
            mod,
            "InitProducerIdResponse",
            throttle_time=throttle,
            error_code=error,
            producer_id=pid,
            producer_epoch=epoch,
        )

    if req.transactional_id is not None:
        if ctx.txn is None or not allowed(WRITE, TXN_ID, req.transactional_id):
            return answer(ErrorCode.transactional_id_authorization_failed)
        try:
            r = await ctx.txn.init_producer_id(
                req.transactional_id, int(req.transaction_timeout.total_seconds() * 1000)
            )
        except CoordinatorError as e:
            return answer(_txn_code(22, version, e))
        return answer(ErrorCode.none, r.producer_id, r.producer_epoch)
    if not may_get_producer_id():
        return answer(ErrorCode.cluster_authorization_failed)
    try:
        pid = await ctx.next_producer_id()
    except ProducerIdThrottledError as e:  # KIP-936: new ids are rate-limited per broker
        return answer(
            ErrorCode.throttling_quota_exceeded,
            throttle=datetime.timedelta(milliseconds=e.throttle_time_ms),
        )
    except Exception as e:  # the controller did not hand out a block
        log.warning("InitProducerId: %s", e)
        return answer(ErrorCode.coordinator_not_available)
    return answer(ErrorCode.none, pid, 0)


# ------------------------------------------------------------------------ groups


async def handle_find_coordinator(ctx: KafkaContext, version: int, req: Any) -> Any:
    mod = response_module(10, version)
    keys = list(req.coordinator_keys) if version >= 4 else [req.key]
    key_type = int(getattr(req, "key_type", 0))
    answers = []
    for key in keys:
        node, host, port, err, msg = -1, "", -1, ErrorCode.none, None
        if key_type not in (0, 1) or (key_type == 1 and ctx.txn is None):
            err, msg = ErrorCode.coordinator_not_available, f"no coordinator of key type {key_type}"
        elif key_type == 0 and not allowed(DESCRIBE, GROUP, key):
            err = ErrorCode.group_authorization_failed
        elif key_type == 1 and not allowed(DESCRIBE, TXN_ID, key):
            err = ErrorCode.transactional_id_authorization_failed
        else:
            try:
                info = await (
                    ctx.groups.find_coordinator(key)
                    if key_type == 0
                    else ctx.txn.find_coordinator(key)  # type: ignore[union-attr]
                )
                ep = _kafka_endpoint(ctx.image, info.coordinator_id, ctx.endpoint)
                if ep is None:
                    err = ErrorCode.coordinator_not_available
                    msg = f"broker {info.coordinator_id} has no Kafka listener"
                else:
                    node, (host, port) = info.coordinator_id, ep
            except CoordinatorError as ce:
                err, msg = _code(ce), str(ce)
        answers.append((key, node, host, port, err, msg))
    if version >= 4:
        return build(
            mod,
            "FindCoordinatorResponse",
            throttle_time=ZERO_MS,
            coordinators=tuple(
                build(
                    mod,
                    "Coordinator",
                    key=k,
                    node_id=n,
                    host=h,
                    port=p,
                    error_code=e,
                    error_message=m,
                )
                for k, n, h, p, e, m in answers
            ),
        )
    _k, n, h, p, first_err, m = answers[0]
    return build(
        mod,
        "FindCoordinatorResponse",
        throttle_time=ZERO_MS,
        error_code=first_err,
        error_message=m,
        node_id=n,
        host=h,
        port=p,
    )


def _subscription(metadata: bytes) -> tuple[frozenset[str], frozenset[TopicPartition] | None]:
    """Topics and owned partitions of a ``ConsumerProtocolSubscription`` (any version)."""
    if len(metadata) < 2:
        return frozenset(), None
    v = min(int.from_bytes(metadata[:2], "big", signed=True), 3)
    mod = importlib.import_module(f"kio.schema.consumer_protocol_subscription.v{max(v, 0)}.data")
    sub, _ = entity_reader(mod.ConsumerProtocolSubscription)(metadata, 2)
    owned = None
    if getattr(sub, "owned_partitions", None) is not None and v >= 1:
        owned = frozenset(
            TopicPartition(tp.topic, int(p)) for tp in sub.owned_partitions for p in tp.partitions
        )
    return frozenset(sub.topics), owned


def _assignment(parts: frozenset[TopicPartition]) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(parts):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    body = ConsumerProtocolAssignment(
        assigned_partitions=tuple(
            AssignedPartitions(topic=TopicName(t), partitions=tuple(i32(p) for p in ps))
            for t, ps in by_topic.items()
        ),
        user_data=None,
    )
    buf = io.BytesIO()
    buf.write(b"\0\0")  # version 0
    entity_writer(ConsumerProtocolAssignment)(buf, body)
    return buf.getvalue()


async def handle_join_group(ctx: KafkaContext, version: int, req: Any) -> Any:
    mod = response_module(11, version)

    def answer(err: ErrorCode, **kw: Any) -> Any:
        base: dict[str, Any] = dict(
            throttle_time=ZERO_MS,
            error_code=err,
            generation_id=-1,
            protocol_type="consumer",
            protocol_name=None,
            leader="",
            member_id=req.member_id,
            members=(),
        )
        base.update(kw)
        if version < 7 and base["protocol_name"] is None:
            base["protocol_name"] = ""
        return build(mod, "JoinGroupResponse", **base)

    if not allowed(READ, GROUP, req.group_id):
        return answer(ErrorCode.group_authorization_failed)
    if req.protocol_type != "consumer":
        return answer(ErrorCode.inconsistent_group_protocol)
    offered = [(p.name, bytes(p.metadata)) for p in req.protocols]
    chosen = next(
        ((n, m) for n, m in offered if coordinator_assignor(n) in COORDINATOR_ASSIGNORS), None
    )
    if chosen is None:
        return answer(ErrorCode.inconsistent_group_protocol)
    assignor = coordinator_assignor(chosen[0])
    try:
        topics, owned = _subscription(chosen[1])
    except Exception:
        return answer(ErrorCode.inconsistent_group_protocol)
    jr = JoinRequest(
        group=req.group_id,
        member_id=req.member_id,
        topics=topics,
        protocol=(
            RebalanceProtocol.COOPERATIVE
            if assignor == "cooperative-sticky"
            else RebalanceProtocol.EAGER
        ),
        assignor=assignor,
        client_id="",
        session_timeout_ms=int(req.session_timeout.total_seconds() * 1000),
        rebalance_timeout_ms=int(
            getattr(req, "rebalance_timeout", req.session_timeout).total_seconds() * 1000
        ),
        owned=owned if assignor == "cooperative-sticky" else None,
    )
    try:
        resp = await ctx.groups.join(jr)
    except CoordinatorError as e:
        return answer(_code(e))
    err = error_code(str(resp.error))
    if err != ErrorCode.none:
        return answer(err, member_id=resp.member_id or req.member_id)
    ctx.group_metadata[(req.group_id, resp.member_id)] = chosen
    # The protocol name answered is the member's own spelling of the coordinator's choice.
    name = next((n for n, _ in offered if coordinator_assignor(n) == resp.assignor), chosen[0])
    members = ()
    if resp.leader == resp.member_id:
        members = tuple(
            build(
                mod,
                "JoinGroupResponseMember",
                member_id=m,
                group_instance_id=None,
                metadata=ctx.group_metadata.get((req.group_id, m), (name, b"\0\0\0\0\0\0"))[1],
            )
            for m in resp.members
        )
    return answer(
        ErrorCode.none,
        generation_id=resp.generation,
        protocol_name=name,
        leader=resp.leader or "",
        member_id=resp.member_id,
        members=members,
    )


async def handle_sync_group(ctx: KafkaContext, version: int, req: Any) -> Any:
    mod = response_module(14, version)
    if not allowed(READ, GROUP, req.group_id):
        err, assignment = ErrorCode.group_authorization_failed, b""
    else:
        try:
            resp = await ctx.groups.sync(
                SyncRequest(req.group_id, req.member_id, int(req.generation_id))
            )
            err = error_code(str(resp.error))
            assignment = _assignment(resp.assignment) if err == ErrorCode.none else b""
        except CoordinatorError as e:
            err, assignment = _code(e), b""
    return build(
        mod,
        "SyncGroupResponse",
        throttle_time=ZERO_MS,
        error_code=err,
        protocol_type="consumer",
        protocol_name=getattr(req, "protocol_name", None),
        assignment=assignment,
    )


async def handle_heartbeat(ctx: KafkaContext, version: int, req: Any) -> Any:
    mod = response_module(12, version)
    if not allowed(READ, GROUP, req.group_id):
        return build(
            mod,
            "HeartbeatResponse",
            throttle_time=ZERO_MS,
            error_code=ErrorCode.group_authorization_failed,
        )
    try:
        err = error_code(
            str(
                await ctx.groups.heartbeat(
                    HeartbeatRequest(req.group_id, req.member_id, int(req.generation_id))
                )
            )
        )
    except CoordinatorError as e:
        err = _code(e)
    return build(mod, "HeartbeatResponse", throttle_time=ZERO_MS, error_code=err)


async def handle_leave_group(ctx: KafkaContext, version: int, req: Any) -> Any:
    mod = response_module(13, version)
    ids = [m.member_id for m in req.members] if version >= 3 else [req.member_id]
    results = []
    top = ErrorCode.none
    if not allowed(READ, GROUP, req.group_id):
        return build(
            mod,
            "LeaveGroupResponse",
            throttle_time=ZERO_MS,
            error_code=ErrorCode.group_authorization_failed,
            members=(),
        )
    for mid in ids:
        try:
            err = error_code(str(await ctx.groups.leave(LeaveRequest(req.group_id, mid))))
        except CoordinatorError as e:
            err = top = _code(e)
        ctx.group_metadata.pop((req.group_id, mid), None)
        if version >= 3:  # v3+ (KIP-345) answers per member
            results.append(
                build(mod, "MemberResponse", member_id=mid, group_instance_id=None, error_code=err)
            )
        else:
            top = err
    return build(
        mod, "LeaveGroupResponse", throttle_time=ZERO_MS, error_code=top, members=tuple(results)
    )


async def handle_offset_commit(ctx: KafkaContext, version: int, req: Any) -> Any:
    mod = response_module(8, version)
    group_ok = allowed(READ, GROUP, req.group_id)
    refused = {t.name for t in req.topics if not allowed(READ, TOPIC, t.name)}
    offsets = {
        TopicPartition(t.name, int(p.partition_index)): OffsetAndMetadata(
            int(p.committed_offset), p.committed_metadata or ""
        )
        for t in req.topics
        if t.name not in refused
        for p in t.partitions
    }
    generation = int(
        getattr(req, "generation_id_or_member_epoch", getattr(req, "generation_id", -1))
    )
    err = ErrorCode.none if group_ok else ErrorCode.group_authorization_failed
    if group_ok and offsets:
        try:
            err = error_code(
                str(
                    await ctx.groups.commit(
                        OffsetCommitRequest(
                            req.group_id, offsets, member_id=req.member_id, generation=generation
                        )
                    )
                )
            )
        except CoordinatorError as e:
            err = _code(e)

    def code(topic: str) -> ErrorCode:
        if group_ok and topic in refused:
            return ErrorCode.topic_authorization_failed
        return err

    return build(
        mod,
        "OffsetCommitResponse",
        throttle_time=ZERO_MS,
        topics=tuple(
            build(
                mod,
                "OffsetCommitResponseTopic",
                name=t.name,
                partitions=tuple(
                    build(
                        mod,
                        "OffsetCommitResponsePartition",
                        partition_index=p.partition_index,
                        error_code=code(t.name),
                    )
                    for p in t.partitions
                ),
            )
            for t in req.topics
        ),
    )


async def handle_offset_fetch(ctx: KafkaContext, version: int, req: Any) -> Any:
    mod = response_module(9, version)
    wanted = (
        None
        if req.topics is None
        else [TopicPartition(t.name, int(p)) for t in req.topics for p in t.partition_indexes]
    )
    top = ErrorCode.none
    committed: dict[TopicPartition, Any] = {}
    if not allowed(DESCRIBE, GROUP, req.group_id):
        top = ErrorCode.group_authorization_failed
    else:
        try:
            readable = None if wanted is None else [tp for tp in wanted if _describable(tp)]
            committed = dict(await ctx.groups.fetch_offsets(req.group_id, readable))
        except CoordinatorError as e:
            top = _code(e)
    tps = wanted if wanted is not None else [tp for tp in sorted(committed) if _describable(tp)]
    if top == ErrorCode.group_authorization_failed and version >= 2:
        tps = []  # Kafka answers the group error alone
    by_topic: dict[str, list[Any]] = {}
    for tp in tps:
        c = committed.get(tp)
        part_err = top if version < 2 else ErrorCode.none
        if part_err == ErrorCode.none and not _describable(tp):
            part_err = ErrorCode.topic_authorization_failed
        by_topic.setdefault(tp.topic, []).append(
            build(
                mod,
                "OffsetFetchResponsePartition",
                partition_index=tp.partition,
                committed_offset=-1 if c is None else c.offset,
                committed_leader_epoch=-1,
                metadata="" if c is None else c.metadata,
                error_code=part_err,
            )
        )
    return build(
        mod,
        "OffsetFetchResponse",
        throttle_time=ZERO_MS,
        error_code=top,
        topics=tuple(
            build(mod, "OffsetFetchResponseTopic", name=t, partitions=tuple(ps))
            for t, ps in by_topic.items()
        ),
    )


def _describable(tp: TopicPartition) -> bool:
    return allowed(DESCRIBE, TOPIC, tp.topic)


# ------------------------------------------------------------------------ topics


async def handle_create_topics(ctx: KafkaContext, version: int, req: Any) -> Any:
    mod = response_module(19, version)
    results = []
    for t in req.topics:
        err, msg = ErrorCode.none, None
        assignments = {
            int(a.partition_index): tuple(BrokerId(int(b)) for b in a.broker_ids)
            for a in t.assignments
        } or None
        configs = {c.name: c.value for c in t.configs if c.value is not None}
        n, rf = int(t.num_partitions), int(t.replication_factor)
        try:
            if not may_create_topic(t.name):
                raise _Denied
            created = await ctx.execute(
                CreateTopic(
                    name=t.name,
                    # -1: the cluster's default (KIP-464), as Kafka's brokers take it. Any
                    # other count below 1 goes to the controller, which refuses it as Kafka
                    # does (it used to be read as the default too).
                    num_partitions=None if assignments is not None or n == -1 else n,
                    replication_factor=None if assignments is not None or rf == -1 else rf,
                    assignments=assignments,
                    configs=configs,
                    validate_only=bool(req.validate_only),
                    topic_id=None if req.validate_only else _random_topic_id(),
                )
            )
            # Kafka answers the counts the topic was created with (the defaults resolved).
            n = int(getattr(created, "num_partitions", n))
            rf = int(getattr(created, "replication_factor", rf))
        except _Denied:
            err, msg = ErrorCode.topic_authorization_failed, "not authorized to create it"
        except MetadataError as e:
            err, msg = error_code(str(getattr(e, "code", "UNKNOWN_SERVER_ERROR"))), str(e)
        except Exception as e:  # no controller answered
            err, msg = ErrorCode.request_timed_out, str(e)
        results.append(
            build(
                mod,
                "CreatableTopicResult",
                name=t.name,
                error_code=err,
                error_message=msg,
                topic_config_error_code=0,
                # Kafka answers the topic's counts, and -1 for both when it was not created.
                num_partitions=n if err == ErrorCode.none else -1,
                replication_factor=rf if err == ErrorCode.none else -1,
                # v5+: the Java AdminClient reads the created topic's configs (a null list
                # fails its createTopics); Kafka answers every config with its source.
                configs=_created_configs(mod, configs) if err == ErrorCode.none else (),
                topic_id=uuid.UUID(int=0),
            )
        )
    return build(mod, "CreateTopicsResponse", throttle_time=ZERO_MS, topics=tuple(results))


def _created_configs(mod: Any, overrides: dict[str, str]) -> tuple[Any, ...]:
    """A new topic's configs for CreateTopics v5+: its own (source 1, TOPIC_CONFIG), else
    Kafka's default (5, DEFAULT_CONFIG)."""
    if not hasattr(mod, "CreatableTopicConfigs"):
        return ()
    merged = {**{k: (v, 5) for k, v in TOPIC_CONFIG_DEFAULTS.items()}}
    merged.update((k, (v, 1)) for k, v in overrides.items())
    return tuple(
        build(
            mod,
            "CreatableTopicConfigs",
            name=k,
            value=v,
            read_only=False,
            config_source=src,
            is_sensitive=False,
        )
        for k, (v, src) in sorted(merged.items())
    )


def _random_topic_id() -> Any:
    # Kafka's Uuid.randomUuid never returns an id starting with "-": its tools would take
    # one on a command line (``--topic-id -x...``) for an option.
    while (tid := base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode())[0] == "-":
        pass
    return TopicId(tid)


async def handle_delete_topics(ctx: KafkaContext, version: int, req: Any) -> Any:

    mod = response_module(20, version)
    results = []
    for name in req.topic_names:
        err = ErrorCode.none
        t = ctx.image.topics.get(name)
        if not allowed(Operation.DELETE, TOPIC, name):
            err = ErrorCode.topic_authorization_failed
        elif t is None:
            err = ErrorCode.unknown_topic_or_partition
        else:
            try:
                await ctx.execute(DeleteTopic(topic_id=t.topic_id))
            except MetadataError as e:
                err = error_code(str(getattr(e, "code", "UNKNOWN_SERVER_ERROR")))
            except Exception:
                err = ErrorCode.request_timed_out
        results.append(build(mod, "DeletableTopicResult", name=name, error_code=err))
    return build(mod, "DeleteTopicsResponse", throttle_time=ZERO_MS, responses=tuple(results))


# ------------------------------------------------------------------------ transactions
# Kafka's first transaction protocol (EndTxn before v5): the client keeps its epoch across
# transactions, so the coordinator ends them without the KIP-890 part 2 bump; KIP-890 part 1
# (the partition asks the coordinator before a transaction opens there) still holds.


# KIP-588 gave each transaction API a version from which PRODUCER_FENCED may be answered; an
# older client does not know the code (KafkaJS 2.2, at EndTxn v0-1, fails with an unknown
# error instead of its fencing error), so it gets INVALID_PRODUCER_EPOCH, which every client
# treats as fenced, as Kafka's KafkaApis answers it. API key -> first version knowing it.
_PRODUCER_FENCED_SINCE = {22: 4, 24: 2, 25: 2, 26: 2}


def _txn_code(api_key: int, version: int, e: BaseException) -> ErrorCode:
    err = _code(e)
    if err == ErrorCode.producer_fenced and version < _PRODUCER_FENCED_SINCE[api_key]:
        return ErrorCode.invalid_producer_epoch
    return err


def _txn_or_raise(ctx: KafkaContext) -> TxnCoordinator:
    if ctx.txn is None:
        raise CoordinatorError("TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "no transactions here")
    return ctx.txn


async def handle_add_partitions_to_txn(ctx: KafkaContext, version: int, req: Any) -> Any:
    mod = response_module(24, version)
    topics = req.v3_and_below_topics
    tps = [TopicPartition(t.name, int(p)) for t in topics for p in t.partitions]
    refused = {t.name for t in topics if not allowed(WRITE, TOPIC, t.name)}
    err = ErrorCode.none
    if not allowed(WRITE, TXN_ID, req.v3_and_below_transactional_id):
        err = ErrorCode.transactional_id_authorization_failed
    elif refused:
        err = ErrorCode.operation_not_attempted  # Kafka: the others are not added either
    else:
        try:
            await _txn_or_raise(ctx).add_partitions(
                req.v3_and_below_transactional_id,
                int(req.v3_and_below_producer_id),
                int(req.v3_and_below_producer_epoch),
                tps,
            )
        except CoordinatorError as e:
            err = _txn_code(24, version, e)

    def code(topic: str) -> ErrorCode:
        if err == ErrorCode.operation_not_attempted and topic in refused:
            return ErrorCode.topic_authorization_failed
        return err

    return build(
        mod,
        "AddPartitionsToTxnResponse",
        throttle_time=ZERO_MS,
        results_by_topic_v3_and_below=tuple(
            build(
                mod,
                "AddPartitionsToTxnTopicResult",
                name=t.name,
                results_by_partition=tuple(
                    build(
                        mod,
                        "AddPartitionsToTxnPartitionResult",
                        partition_index=p,
                        partition_error_code=code(t.name),
                    )
                    for p in t.partitions
                ),
            )
            for t in topics
        ),
    )


async def handle_add_offsets_to_txn(ctx: KafkaContext, version: int, req: Any) -> Any:
    mod = response_module(25, version)
    try:
        if not allowed(WRITE, TXN_ID, req.transactional_id):
            raise CoordinatorError("TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "not authorized")
        if not allowed(READ, GROUP, req.group_id):
            raise CoordinatorError("GROUP_AUTHORIZATION_FAILED", "not authorized")
        txn = _txn_or_raise(ctx)
        # The group's offsets partition must exist: looking the group's coordinator up
        # creates __consumer_offsets, as the client's FindCoordinator would next.
        await ctx.groups.find_coordinator(req.group_id)
        await txn.add_offsets(
            req.transactional_id, int(req.producer_id), int(req.producer_epoch), req.group_id
        )
        err = ErrorCode.none
    except CoordinatorError as e:
        err = _txn_code(25, version, e)
    return build(mod, "AddOffsetsToTxnResponse", throttle_time=ZERO_MS, error_code=err)


async def handle_end_txn(ctx: KafkaContext, version: int, req: Any) -> Any:
    mod = response_module(26, version)
    try:
        if not allowed(WRITE, TXN_ID, req.transactional_id):
            raise CoordinatorError("TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "not authorized")
        await _txn_or_raise(ctx).end_txn(
            req.transactional_id,
            int(req.producer_id),
            int(req.producer_epoch),
            bool(req.committed),
            bump_epoch=False,
        )
        err = ErrorCode.none
    except CoordinatorError as e:
        err = _txn_code(26, version, e)
    return build(mod, "EndTxnResponse", throttle_time=ZERO_MS, error_code=err)


async def handle_txn_offset_commit(ctx: KafkaContext, version: int, req: Any) -> Any:
    mod = response_module(28, version)
    refused = {t.name for t in req.topics if not allowed(READ, TOPIC, t.name)}
    offsets = {
        TopicPartition(t.name, int(p.partition_index)): OffsetAndMetadata(
            int(p.committed_offset), p.committed_metadata or ""
        )
        for t in req.topics
        if t.name not in refused
        for p in t.partitions
    }
    whole: ErrorCode | None = None
    if not allowed(WRITE, TXN_ID, req.transactional_id):
        whole = ErrorCode.transactional_id_authorization_failed
    elif not allowed(READ, GROUP, req.group_id):
        whole = ErrorCode.group_authorization_failed
    err = whole or ErrorCode.none
    try:
        if whole is not None or not offsets:
            raise _Skip
        err = error_code(
            str(
                await ctx.groups.txn_commit(
                    TxnOffsetCommitRequest(
                        req.group_id,
                        int(req.producer_id),
                        int(req.producer_epoch),
                        offsets,
                        member_id=getattr(req, "member_id", "") or "",
                        generation=int(getattr(req, "generation_id", -1)),
                    ),
                    req.transactional_id,
                )
            )
        )
    except _Skip:
        pass
    except CoordinatorError as e:
        err = _code(e)

    def code(topic: str) -> ErrorCode:
        if whole is None and topic in refused:
            return ErrorCode.topic_authorization_failed
        return err

    return build(
        mod,
        "TxnOffsetCommitResponse",
        throttle_time=ZERO_MS,
        topics=tuple(
            build(
                mod,
                "TxnOffsetCommitResponseTopic",
                name=t.name,
                partitions=tuple(
                    build(
                        mod,
                        "TxnOffsetCommitResponsePartition",
                        partition_index=p.partition_index,
                        error_code=code(t.name),
                    )
                    for p in t.partitions
                ),
            )
            for t in req.topics
        ),
    )


HANDLERS: dict[int, Callable[[KafkaContext, int, Any], Awaitable[Any]]] = {
    0: handle_produce,
    1: handle_fetch,
    2: handle_list_offsets,
    3: handle_metadata,
    8: handle_offset_commit,
    9: handle_offset_fetch,
    10: handle_find_coordinator,
    11: handle_join_group,
    12: handle_heartbeat,
    13: handle_leave_group,
    14: handle_sync_group,
    19: handle_create_topics,
    20: handle_delete_topics,
    22: handle_init_producer_id,
    24: handle_add_partitions_to_txn,
    25: handle_add_offsets_to_txn,
    26: handle_end_txn,
    28: handle_txn_offset_commit,
}
