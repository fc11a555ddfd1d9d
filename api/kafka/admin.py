"""The Kafka admin APIs that Kafka's tools and AdminClient use, over the broker's own parts.

Topics and configs go to the controller as controller commands (``CreatePartitions``,
``AlterConfigs``), exactly as the HTTP API's v3 routes send them; groups go to this broker's
``GroupCoordinator`` (the client sends each group's request to its coordinator, found with
FindCoordinator, as with Kafka); OffsetForLeaderEpoch reads the partition leader's epoch
cache; DescribeCluster and DescribeConfigs read the broker's ``MetadataImage``;
DescribeLogDirs reads the replica manager's logs.

Config resources, as Kafka numbers them: TOPIC (2) is a topic's overrides over Kafka's
defaults; BROKER (4) is a broker's dynamic overrides (name "" for the cluster-wide default).
A describe of a topic lists every config Longboat knows with its source (the topic's own
override, Longboat's cluster-wide override, or Kafka's default); a describe of a broker lists
its dynamic overrides only (a Longboat broker has no static ``server.properties`` to show).

Errors are Kafka's codes per resource, group or partition: the controller's refusals carry
Kafka's error names (``metalog.errors``), the coordinator's too (``broker.groups.types``).

Authorization (issue 18, Kafka's rules): CreatePartitions ALTER on the topic,
OffsetForLeaderEpoch DESCRIBE on it, DescribeConfigs DESCRIBE_CONFIGS and AlterConfigs/
IncrementalAlterConfigs ALTER_CONFIGS on the topic (or, for a broker resource, on the
CLUSTER), DescribeGroups DESCRIBE on each group, ListGroups every group with DESCRIBE on the
CLUSTER and otherwise only those the principal may DESCRIBE, DeleteGroups DELETE on each
group, OffsetDelete DELETE on the group and READ on each topic, DescribeLogDirs DESCRIBE on
the CLUSTER. DescribeCluster needs only an authenticated principal, as in Kafka.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from api.kafka.handlers import (
    ZERO_MS,
    KafkaContext,
    _assignment,
    _code,
    _kafka_endpoint,
)
from api.kafka.protocol import build, error_code, response_module
from api.kafka.security import allowed, allowed_on_cluster
from broker.errors import BrokerError
from broker.group_coordinator import CoordinatorError
from broker.groups.types import GroupState, TopicPartition
from metalog.commands import AlterConfigs, CreatePartitions, ElectionType, ElectLeaders
from metalog.errors import MetadataError
from metalog.image import CLUSTER_RESOURCE, TOPIC_CONFIG_DEFAULTS, MetadataImage
from metalog.records import BrokerId, ConfigResourceType
from metalog.security import Operation, ResourceType
from storage.errors import StorageError

TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
IMAGE_WAIT_S = 5.0
"""How long an alter waits for this broker's image to show the change, so that the same
client's next describe (on this broker) sees it; the change is committed either way."""

# Kafka's ConfigResource.Type ids on the wire.
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4

# DescribeConfigsResponse.ConfigSource.
SOURCE_TOPIC = 1
SOURCE_DYNAMIC_BROKER = 2
SOURCE_DYNAMIC_DEFAULT_BROKER = 3
SOURCE_DEFAULT = 5

# ConfigEntry.ConfigType.
TYPE_BOOLEAN, TYPE_STRING, TYPE_INT, TYPE_LONG, TYPE_DOUBLE, TYPE_LIST = 1, 2, 3, 5, 6, 7
_CONFIG_TYPES: Mapping[str, int] = {
    "cleanup.policy": TYPE_LIST,
    "compression.type": TYPE_STRING,
    "message.timestamp.type": TYPE_STRING,
    "min.cleanable.dirty.ratio": TYPE_DOUBLE,
    "unclean.leader.election.enable": TYPE_BOOLEAN,
    "index.interval.bytes": TYPE_INT,
    "max.message.bytes": TYPE_INT,
    "min.insync.replicas": TYPE_INT,
    "segment.bytes": TYPE_INT,
    "segment.index.bytes": TYPE_INT,
}
"""Kafka's ``ConfigDef`` types of the topic configs; the others are LONG."""

# IncrementalAlterConfigs operations (KIP-339).
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3

# Kafka's group state names (DescribeGroups, ListGroups).
_GROUP_STATES: Mapping[GroupState, str] = {
    GroupState.EMPTY: "Empty",
    GroupState.PREPARING_REBALANCE: "PreparingRebalance",
    GroupState.COMPLETING_REBALANCE: "CompletingRebalance",
    GroupState.STABLE: "Stable",
    GroupState.DEAD: "Dead",
}


async def _controller(ctx: KafkaContext, command: Any) -> tuple[ErrorCode, str | None]:
    """Run a controller command; its refusal as Kafka's code and message."""
    try:
        await ctx.execute(command)
    except MetadataError as e:
        return error_code(e.code), str(e)
    except Exception as e:  # no controller answered in time
        return ErrorCode.request_timed_out, f"no controller answered: {e}"
    return ErrorCode.none, None


async def _wait_image(ctx: KafkaContext, cond: Callable[[MetadataImage], bool]) -> None:
    deadline = time.monotonic() + IMAGE_WAIT_S
    while not cond(ctx.image) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)


# ------------------------------------------------------------------------ cluster


async def handle_describe_cluster(ctx: KafkaContext, version: int, req: Any) -> Any:
    mod = response_module(60, version)
    endpoint_type = int(getattr(req, "endpoint_type", 1))
    if endpoint_type != 1:  # 2 = controllers (KIP-919): Longboat's are not Kafka endpoints
        return build(
            mod,
            "DescribeClusterResponse",
            throttle_time=ZERO_MS,
            error_code=ErrorCode.unsupported_endpoint_type,
            error_message="only broker endpoints are described",
            endpoint_type=endpoint_type,
            cluster_id=ctx.cluster_id,
            controller_id=-1,
            brokers=(),
            cluster_authorized_operations=-2147483648,
        )
    image = ctx.image
    with_fenced = bool(getattr(req, "include_fenced_brokers", False))
    brokers = []
    for br in sorted(image.brokers.brokers.values(), key=lambda b: int(b.broker_id)):
        ep = _kafka_endpoint(image, int(br.broker_id), ctx.endpoint)
        if ep is None or (br.fenced and not with_fenced):
            continue
        brokers.append(
            build(
                mod,
                "DescribeClusterBroker",
                broker_id=int(br.broker_id),
                host=ep[0],
                port=ep[1],
                rack=br.rack,
                is_fenced=bool(br.fenced),
            )
        )
    return build(
        mod,
        "DescribeClusterResponse",
        throttle_time=ZERO_MS,
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=1,
        cluster_id=ctx.cluster_id,
        controller_id=ctx.broker_id,  # as Metadata: admin requests go to any broker
        brokers=tuple(brokers),
        cluster_authorized_operations=-2147483648,
    )


# ------------------------------------------------------------------------ partitions


async def handle_create_partitions(ctx: KafkaContext, version: int, req: Any) -> Any:
    mod = response_module(37, version)
    results = []
    for t in req.topics:
        assignments = (
            None
            if t.assignments is None
            else tuple(tuple(BrokerId(int(b)) for b in a.broker_ids) for a in t.assignments)
        )
        if not allowed(Operation.ALTER, TOPIC, t.name):
            results.append(
                build(
                    mod,
                    "CreatePartitionsTopicResult",
                    name=t.name,
                    error_code=ErrorCode.topic_authorization_failed,
                    error_message=None,
                )
            )
            continue
        err, msg = await _controller(
            ctx,
            CreatePartitions(
                name=t.name,
                total_count=int(t.count),
                assignments=assignments,
                validate_only=bool(req.validate_only),
            ),
        )
        if err == ErrorCode.none and not req.validate_only:
            await _wait_image(ctx, _has_partitions(t.name, int(t.count)))
        results.append(
            build(
                mod, "CreatePartitionsTopicResult", name=t.name, error_code=err, error_message=msg
            )
        )
    return build(mod, "CreatePartitionsResponse", throttle_time=ZERO_MS, results=tuple(results))


def _has_partitions(topic: str, count: int) -> Callable[[MetadataImage], bool]:
    def cond(image: MetadataImage) -> bool:
        t = image.topics.get(topic)
        return t is not None and len(t.partitions) >= count

    return cond


async def handle_offset_for_leader_epoch(ctx: KafkaContext, version: int, req: Any) -> Any:
    """KIP-320: the end offset of the asked epoch (the start of the next one), so a consumer
    whose leader changed can tell whether the log it read from was truncated."""
    mod = response_module(23, version)
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            err, epoch, end = ErrorCode.none, -1, -1
            try:
                if not allowed(Operation.DESCRIBE, TOPIC, t.topic):
                    raise _Denied
                ans = ctx.replicas.offsets_for_leader_epoch(
                    t.topic,
                    int(p.partition),
                    int(getattr(p, "current_leader_epoch", -1)),
                    int(p.leader_epoch),
                )
                epoch, end = int(ans["leader_epoch"]), int(ans["end_offset"])
            except _Denied:
                err = ErrorCode.topic_authorization_failed
            except (BrokerError, StorageError) as e:
                err = _code(e)
            parts.append(
                build(
                    mod,
                    "EpochEndOffset",
                    error_code=err,
                    partition=p.partition,
                    leader_epoch=epoch,
                    end_offset=end,
                )
            )
        topics.append(
            build(mod, "OffsetForLeaderTopicResult", topic=t.topic, partitions=tuple(parts))
        )
    return build(mod, "OffsetForLeaderEpochResponse", throttle_time=ZERO_MS, topics=tuple(topics))


class _Denied(Exception):
    """The principal may not DESCRIBE the topic."""


# ------------------------------------------------------------------------ configs


def _config_refusal(rtype: int, rname: str, op: Operation) -> tuple[ErrorCode, str] | None:
    """Kafka: a topic's configs need ``op`` on the topic, a broker's on the CLUSTER."""
    if rtype == RESOURCE_TOPIC and not allowed(op, TOPIC, rname):
        return ErrorCode.topic_authorization_failed, f"not authorized to {op} on topic {rname}"
    if rtype == RESOURCE_BROKER and not allowed_on_cluster(op):
        return ErrorCode.cluster_authorization_failed, f"not authorized to {op} on the cluster"
    return None


def _topic_config_entries(
    image: MetadataImage, topic: str, keys: set[str] | None, synonyms: bool
) -> list[tuple[str, str | None, int, list[tuple[str, str | None, int]]]]:
    """(name, value, source, synonyms) for each config of a topic, Kafka's precedence: the
    topic's override, the cluster-wide one, the default."""
    own = image.configs.get(ConfigResourceType.TOPIC, topic)
    cluster = image.configs.get(*CLUSTER_RESOURCE)
    out = []
    for name in sorted(set(TOPIC_CONFIG_DEFAULTS) | set(own)):
        if keys is not None and name not in keys:
            continue
        chain: list[tuple[str, str | None, int]] = []
        if name in own:
            chain.append((name, own[name], SOURCE_TOPIC))
        if name in cluster:
            chain.append((name, cluster[name], SOURCE_DYNAMIC_DEFAULT_BROKER))
        if name in TOPIC_CONFIG_DEFAULTS:
            chain.append((name, TOPIC_CONFIG_DEFAULTS[name], SOURCE_DEFAULT))
        value, source = chain[0][1], chain[0][2]
        out.append((name, value, source, chain if synonyms else []))
    return out


async def handle_describe_configs(ctx: KafkaContext, version: int, req: Any) -> Any:
    mod = response_module(32, version)
    image = ctx.image
    results = []
    for r in req.resources:
        rtype, rname = int(r.resource_type), r.resource_name
        keys = None if r.configuration_keys is None else set(r.configuration_keys)
        err, msg = ErrorCode.none, None
        entries: list[tuple[str, str | None, int, list[tuple[str, str | None, int]]]] = []
        refusal = _config_refusal(rtype, rname, Operation.DESCRIBE_CONFIGS)
        if refusal is not None:
            err, msg = refusal
        elif rtype == RESOURCE_TOPIC:
            if image.topics.get(rname) is None:
                err, msg = ErrorCode.unknown_topic_or_partition, f"topic {rname!r} does not exist"
            else:
                entries = _topic_config_entries(
                    image, rname, keys, bool(getattr(req, "include_synonyms", False))
                )
        elif rtype == RESOURCE_BROKER:
            if rname and (not rname.isdigit() or BrokerId(int(rname)) not in image.brokers.brokers):
                err, msg = ErrorCode.invalid_request, f"no broker {rname!r}"
            else:
                source = SOURCE_DYNAMIC_BROKER if rname else SOURCE_DYNAMIC_DEFAULT_BROKER
                own = image.configs.get(ConfigResourceType.BROKER, rname)
                entries = [
                    (k, v, source, []) for k, v in sorted(own.items()) if keys is None or k in keys
                ]
        else:
            err, msg = ErrorCode.invalid_request, f"resource type {rtype} is not served"
        configs = tuple(
            build(
                mod,
                "DescribeConfigsResourceResult",
                name=name,
                value=value,
                read_only=False,
                config_source=source,
                is_sensitive=False,
                synonyms=tuple(
                    build(mod, "DescribeConfigsSynonym", name=n, value=v, source=s)
                    for n, v, s in syn
                ),
                config_type=_CONFIG_TYPES.get(name, TYPE_LONG),
                documentation=None,
            )
            for name, value, source, syn in entries
        )
        results.append(
            build(
                mod,
                "DescribeConfigsResult",
                error_code=err,
                error_message=msg,
                resource_type=rtype,
                resource_name=rname,
                configs=configs,
            )
        )
    return build(mod, "DescribeConfigsResponse", throttle_time=ZERO_MS, results=tuple(results))


def _longboat_resource(rtype: int) -> ConfigResourceType | None:
    if rtype == RESOURCE_TOPIC:
        return ConfigResourceType.TOPIC
    if rtype == RESOURCE_BROKER:
        return ConfigResourceType.BROKER
    return None


async def _alter_resource(
    ctx: KafkaContext,
    rtype: int,
    rname: str,
    ops: Mapping[str, str | None] | ErrorCode,
    validate_only: bool,
) -> tuple[ErrorCode, str | None]:
    kind = _longboat_resource(rtype)
    if kind is None:
        return ErrorCode.invalid_request, f"resource type {rtype} is not served"
    refusal = _config_refusal(rtype, rname, Operation.ALTER_CONFIGS)
    if refusal is not None:
        return refusal
    if isinstance(ops, ErrorCode):
        return ops, "the operation does not apply to this config"
    err, msg = await _controller(
        ctx,
        AlterConfigs(
            resource_type=kind, resource_name=rname, ops=dict(ops), validate_only=validate_only
        ),
    )
    if err == ErrorCode.none and not validate_only:

        def applied(im: MetadataImage) -> bool:
            cur = im.configs.get(kind, rname)
            return all(cur.get(k) == v for k, v in ops.items())

        await _wait_image(ctx, applied)
    return err, msg


def _alter_response(
    mod: Any, name: str, results: list[tuple[int, str, ErrorCode, str | None]]
) -> Any:
    return build(
        mod,
        name,
        throttle_time=ZERO_MS,
        responses=tuple(
            build(
                mod,
                "AlterConfigsResourceResponse",
                error_code=err,
                error_message=msg,
                resource_type=rtype,
                resource_name=rname,
            )
            for rtype, rname, err, msg in results
        ),
    )


async def handle_alter_configs(ctx: KafkaContext, version: int, req: Any) -> Any:
    """The legacy AlterConfigs: the resource's overrides become exactly those given."""
    mod = response_module(33, version)
    results = []
    for r in req.resources:
        rtype, rname = int(r.resource_type), r.resource_name
        given = {c.name: c.value for c in r.configs}
        kind = _longboat_resource(rtype)
        current = {} if kind is None else ctx.image.configs.get(kind, rname)
        ops: dict[str, str | None] = {k: None for k in current if k not in given}
        ops.update(given)
        err, msg = await _alter_resource(ctx, rtype, rname, ops, bool(req.validate_only))
        results.append((rtype, rname, err, msg))
    return _alter_response(mod, "AlterConfigsResponse", results)


def _incremental_ops(
    image: MetadataImage, rtype: int, rname: str, configs: Any
) -> dict[str, str | None] | ErrorCode:
    """KIP-339's SET/DELETE/APPEND/SUBTRACT as plain overrides; APPEND and SUBTRACT work on
    the list-typed config's effective value, as in Kafka."""
    ops: dict[str, str | None] = {}
    for c in configs:
        op = int(c.config_operation)
        if op == OP_SET:
            ops[c.name] = c.value
        elif op == OP_DELETE:
            ops[c.name] = None
        elif op in (OP_APPEND, OP_SUBTRACT):
            if rtype != RESOURCE_TOPIC or _CONFIG_TYPES.get(c.name) != TYPE_LIST:
                return ErrorCode.invalid_config
            current = ops.get(c.name) or image.configs.topic_config(rname, c.name) or ""
            items = [v for v in current.split(",") if v]
            given = [v for v in (c.value or "").split(",") if v]
            if op == OP_APPEND:
                items += [v for v in given if v not in items]
            else:
                items = [v for v in items if v not in given]
            ops[c.name] = ",".join(items)
        else:
            return ErrorCode.invalid_request
    return ops


async def handle_incremental_alter_configs(ctx: KafkaContext, version: int, req: Any) -> Any:
    mod = response_module(44, version)
    results = []
    for r in req.resources:
        rtype, rname = int(r.resource_type), r.resource_name
        ops = _incremental_ops(ctx.image, rtype, rname, r.configs)
        err, msg = await _alter_resource(ctx, rtype, rname, ops, bool(req.validate_only))
        results.append((rtype, rname, err, msg))
    return _alter_response(mod, "IncrementalAlterConfigsResponse", results)


# ------------------------------------------------------------------------ groups


def _subscription_bytes(topics: frozenset[str]) -> bytes:
    """A ``ConsumerProtocolSubscription`` v0 for a member that did not join through this
    listener (an HTTP or Python consumer), so Kafka's tools can still read its topics."""
    out = bytearray(b"\0\0")
    out += len(topics).to_bytes(4, "big")
    for t in sorted(topics):
        raw = t.encode()
        out += len(raw).to_bytes(2, "big") + raw
    out += (-1).to_bytes(4, "big", signed=True)  # no user data
    return bytes(out)


async def handle_describe_groups(ctx: KafkaContext, version: int, req: Any) -> Any:
    mod = response_module(15, version)
    groups = []
    for gid in req.groups:
        try:
            if not allowed(Operation.DESCRIBE, GROUP, gid):
                raise CoordinatorError("GROUP_AUTHORIZATION_FAILED", "not authorized")
            d = await ctx.groups.describe(gid)
        except CoordinatorError as e:
            groups.append(
                build(
                    mod,
                    "DescribedGroup",
                    error_code=_code(e),
                    error_message=str(e),
                    group_id=gid,
                    group_state="",
                    protocol_type="",
                    protocol_data="",
                    members=(),
                    authorized_operations=-2147483648,
                )
            )
            continue
        dead = d.state == GroupState.DEAD
        # Kafka's ClassicGroup.describe: the protocol and the members' metadata and
        # assignments only while Stable; otherwise "" and members without them.
        stable = d.state == GroupState.STABLE
        members = tuple(
            build(
                mod,
                "DescribedGroupMember",
                member_id=m.member_id,
                group_instance_id=None,
                client_id=m.client_id,
                client_host="",
                member_metadata=ctx.group_metadata.get(
                    (gid, m.member_id), ("", _subscription_bytes(m.topics))
                )[1]
                if stable
                else b"",
                member_assignment=_assignment(m.assignment) if stable else b"",
            )
            for m in d.members
        )
        groups.append(
            build(
                mod,
                "DescribedGroup",
                # KIP-1043 (v6): an unknown group is GROUP_ID_NOT_FOUND; before, a Dead group.
                error_code=ErrorCode.group_id_not_found
                if dead and version >= 6
                else ErrorCode.none,
                error_message=None,
                group_id=gid,
                group_state=_GROUP_STATES[d.state],
                protocol_type="" if d.is_simple or dead else "consumer",
                protocol_data=(d.assignor or "") if stable else "",
                members=members,
                authorized_operations=-2147483648,
            )
        )
    return build(mod, "DescribeGroupsResponse", throttle_time=ZERO_MS, groups=tuple(groups))


async def handle_list_groups(ctx: KafkaContext, version: int, req: Any) -> Any:
    """The groups this broker coordinates (Kafka's AdminClient asks every broker)."""
    mod = response_module(16, version)
    states = {s.lower() for s in getattr(req, "states_filter", ())}
    types = {t.lower() for t in getattr(req, "types_filter", ())}
    err = ErrorCode.none
    listed = []
    every = allowed_on_cluster(Operation.DESCRIBE)
    try:
        for g in await ctx.groups.list_groups():
            if not every and not allowed(Operation.DESCRIBE, GROUP, g.group):
                continue
            state = _GROUP_STATES[g.state]
            if states and state.lower() not in states:
                continue
            if types and "classic" not in types:
                continue
            listed.append(
                build(
                    mod,
                    "ListedGroup",
                    group_id=g.group,
                    protocol_type="" if g.is_simple else "consumer",
                    group_state=state,
                    group_type="classic",
                )
            )
    except CoordinatorError as e:
        err = _code(e)
    return build(
        mod, "ListGroupsResponse", throttle_time=ZERO_MS, error_code=err, groups=tuple(listed)
    )


async def handle_delete_groups(ctx: KafkaContext, version: int, req: Any) -> Any:
    mod = response_module(42, version)
    results = []
    for gid in req.groups_names:
        try:
            if not allowed(Operation.DELETE, GROUP, gid):
                raise CoordinatorError("GROUP_AUTHORIZATION_FAILED", "not authorized")
            err = error_code(str(await ctx.groups.delete_group(gid)))
        except CoordinatorError as e:
            err = _code(e)
        results.append(build(mod, "DeletableGroupResult", group_id=gid, error_code=err))
    return build(mod, "DeleteGroupsResponse", throttle_time=ZERO_MS, results=tuple(results))


async def handle_offset_delete(ctx: KafkaContext, version: int, req: Any) -> Any:
    """KIP-496, answered as Kafka does: a group-level refusal (GROUP_ID_NOT_FOUND...) at the
    top; GROUP_SUBSCRIBED_TO_TOPIC on each partition of a topic a member reads, while the
    other partitions' offsets are deleted. The coordinator refuses a request naming any
    subscribed topic as a whole, so those are split off (from the group's description) and
    the rest deleted in a second call, which checks the subscriptions again."""
    mod = response_module(47, version)
    refused = {t.name for t in req.topics if not allowed(Operation.READ, TOPIC, t.name)}
    wanted = [
        TopicPartition(t.name, int(p.partition_index))
        for t in req.topics
        if t.name not in refused
        for p in t.partitions
    ]
    top = ErrorCode.none
    answers: dict[TopicPartition, ErrorCode] = {
        TopicPartition(t.name, int(p.partition_index)): ErrorCode.topic_authorization_failed
        for t in req.topics
        if t.name in refused
        for p in t.partitions
    }
    try:
        if not allowed(Operation.DELETE, GROUP, req.group_id):
            raise CoordinatorError("GROUP_AUTHORIZATION_FAILED", "not authorized")
        if not wanted:
            raise _Denied
        err = error_code(str(await ctx.groups.delete_offsets(req.group_id, wanted)))
        if err == ErrorCode.group_subscribed_to_topic:
            d = await ctx.groups.describe(req.group_id)
            subscribed = {t for m in d.members for t in m.topics}
            rest = [tp for tp in wanted if tp.topic not in subscribed]
            answers.update((tp, err) for tp in wanted if tp.topic in subscribed)
            if rest:
                err = error_code(str(await ctx.groups.delete_offsets(req.group_id, rest)))
                answers.update((tp, err) for tp in rest)
        elif err != ErrorCode.none:
            top = err
    except _Denied:
        pass  # every topic refused: answered per partition
    except CoordinatorError as e:
        top = _code(e)
    return build(
        mod,
        "OffsetDeleteResponse",
        error_code=top,
        throttle_time=ZERO_MS,
        topics=tuple(
            build(
                mod,
                "OffsetDeleteResponseTopic",
                name=t.name,
                partitions=tuple(
                    build(
                        mod,
                        "OffsetDeleteResponsePartition",
                        partition_index=p.partition_index,
                        error_code=answers.get(
                            TopicPartition(t.name, int(p.partition_index)), ErrorCode.none
                        ),
                    )
                    for p in t.partitions
                ),
            )
            for t in req.topics
        )
        if top == ErrorCode.none
        else (),
    )


# ------------------------------------------------------------------------ log dirs


async def handle_describe_log_dirs(ctx: KafkaContext, version: int, req: Any) -> Any:
    """This broker's one log directory and the sizes of its replicas (``kafka-log-dirs``).
    ``offset_lag`` is Kafka's: how far the replica's log end is behind the high watermark
    it knows (0 on a leader)."""
    mod = response_module(35, version)
    if not allowed_on_cluster(Operation.DESCRIBE):
        # Kafka: v3+ carries the error; before, an empty answer.
        return build(
            mod,
            "DescribeLogDirsResponse",
            throttle_time=ZERO_MS,
            error_code=ErrorCode.cluster_authorization_failed,
            results=(),
        )
    rm = ctx.replicas
    wanted = (
        None
        if req.topics is None
        else {(t.topic, int(p)) for t in req.topics for p in t.partitions}
    )
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), rep in sorted(rm.by_name.items()):
        if wanted is not None and (topic, partition) not in wanted:
            continue
        by_topic.setdefault(topic, []).append(
            build(
                mod,
                "DescribeLogDirsPartition",
                partition_index=partition,
                partition_size=rep.log.size_bytes,
                offset_lag=max(rep.high_watermark - rep.log.log_end_offset, 0),
                is_future_key=False,
            )
        )
    online = rm.log_dir.online
    try:
        usage = shutil.disk_usage(rm.data_dir)
        total, usable = usage.total, usage.free
    except OSError:
        total = usable = -1
    result = build(
        mod,
        "DescribeLogDirsResult",
        error_code=ErrorCode.none if online else ErrorCode.kafka_storage_error,
        log_dir=str(rm.data_dir),
        topics=tuple(
            build(mod, "DescribeLogDirsTopic", name=t, partitions=tuple(ps))
            for t, ps in by_topic.items()
        )
        if online
        else (),
        total_bytes=total,
        usable_bytes=usable,
    )
    return build(
        mod,
        "DescribeLogDirsResponse",
        throttle_time=ZERO_MS,
        error_code=ErrorCode.none,
        results=(result,),
    )


# ------------------------------------------------------------------------ records, leaders


async def handle_delete_records(ctx: KafkaContext, version: int, req: Any) -> Any:
    """DeleteRecords on the partitions this broker leads (Kafka's AdminClient sends each
    partition to its leader; elsewhere NOT_LEADER_OR_FOLLOWER sends it to refresh). Each
    partition's log start moves and is answered once every ISR member's has (the low
    watermark), as the HTTP route does. Needs DELETE on the topic."""
    mod = response_module(21, version)
    timeout_ms = max(int(req.timeout.total_seconds() * 1000), 1)

    async def one(topic: str, p: Any) -> Any:
        index, low, err = int(p.partition_index), -1, ErrorCode.none
        if not allowed(Operation.DELETE, TOPIC, topic):
            err = ErrorCode.topic_authorization_failed
        else:
            try:
                ans = await ctx.replicas.delete_records(
                    topic, index, int(p.offset), timeout_ms=timeout_ms
                )
                low = int(ans["low_watermark"])
            except (BrokerError, StorageError) as e:
                err = _code(e)
        return build(
            mod,
            "DeleteRecordsPartitionResult",
            partition_index=index,
            low_watermark=low,
            error_code=err,
        )

    topics = []
    for t in req.topics:
        parts = await asyncio.gather(*(one(t.name, p) for p in t.partitions))
        topics.append(build(mod, "DeleteRecordsTopicResult", name=t.name, partitions=parts))
    return build(mod, "DeleteRecordsResponse", throttle_time=ZERO_MS, topics=tuple(topics))


async def handle_elect_leaders(ctx: KafkaContext, version: int, req: Any) -> Any:
    """ElectLeaders (preferred or unclean) through the controller, one result per
    partition; null partitions: every partition (Kafka's). Needs ALTER on the CLUSTER."""
    mod = response_module(43, version)
    kind = int(getattr(req, "election_type", 0))
    asked = (
        None
        if req.topic_partitions is None
        else tuple((t.topic, int(p)) for t in req.topic_partitions for p in t.partitions)
    )

    def answer(error: ErrorCode, results: dict[str, list[Any]]) -> Any:
        return build(
            mod,
            "ElectLeadersResponse",
            throttle_time=ZERO_MS,
            error_code=error,
            replica_election_results=tuple(
                build(mod, "ReplicaElectionResult", topic=t, partition_result=tuple(rs))
                for t, rs in results.items()
            ),
        )

    def result(partition: int, error: ErrorCode, message: str | None) -> Any:
        return build(
            mod,
            "PartitionResult",
            partition_id=partition,
            error_code=error,
            error_message=message,
        )

    if not allowed_on_cluster(Operation.ALTER):
        out: dict[str, list[Any]] = {}
        for topic, p in asked or ():
            out.setdefault(topic, []).append(
                result(p, ErrorCode.cluster_authorization_failed, None)
            )
        return answer(ErrorCode.cluster_authorization_failed, out)
    if kind not in (0, 1):
        return answer(ErrorCode.invalid_request, {})
    try:
        resp = await ctx.execute(
            ElectLeaders(
                election=ElectionType.PREFERRED if kind == 0 else ElectionType.UNCLEAN,
                partitions=asked,
            )
        )
    except MetadataError as e:
        return answer(error_code(e.code), {})
    except Exception:  # no controller answered in time
        return answer(ErrorCode.request_timed_out, {})
    out = {}
    for r in resp.results:
        err = ErrorCode.none if r.error is None else error_code(r.error.code)
        out.setdefault(r.topic, []).append(
            result(r.partition, err, None if r.error is None else str(r.error))
        )
    return answer(ErrorCode.none, out)


ADMIN_HANDLERS: dict[int, Callable[[KafkaContext, int, Any], Awaitable[Any]]] = {
    21: handle_delete_records,
    43: handle_elect_leaders,
    15: handle_describe_groups,
    16: handle_list_groups,
    23: handle_offset_for_leader_epoch,
    32: handle_describe_configs,
    33: handle_alter_configs,
    35: handle_describe_log_dirs,
    37: handle_create_partitions,
    42: handle_delete_groups,
    44: handle_incremental_alter_configs,
    47: handle_offset_delete,
    60: handle_describe_cluster,
}
"""Merged into ``api.kafka.handlers.HANDLERS`` by the listener; versions in
``api.kafka.protocol.SUPPORTED``."""
