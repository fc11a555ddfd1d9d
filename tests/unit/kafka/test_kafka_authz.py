"""Kafka's ACL rules in the Kafka listener's handlers (api.kafka.security, issue 18), with the
HTTP routes' own authorizer over in-memory ACLs and fake broker parts: every refusal is
Kafka's error code for it, and a refused request reaches no coordinator or controller.
Every version of each API is built and encoded (the refusal paths have their own shapes)."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from api.http.auth import StaticAcls
from api.http.authz import Authorizer
from api.kafka import admin as a
from api.kafka import handlers as h
from api.kafka.security import SESSION, Session
from metalog.security import AclBinding, Operation, PatternType, Permission, ResourceType
from tests.unit.kafka.test_kafka_handlers import FakeGroups, ctx, request, round_trip, versions

ALICE = "User:alice"


def allow(rtype: ResourceType, name: str, op: Operation, who: str = ALICE) -> AclBinding:
    return AclBinding(who, "*", rtype, name, PatternType.LITERAL, op, Permission.ALLOW)


@pytest.fixture
def acls() -> Iterator[StaticAcls]:
    """The ACLs of the connection ``SESSION`` is set to (User:alice, authorizer on)."""
    static = StaticAcls()
    token = SESSION.set(Session(ALICE, "127.0.0.1", Authorizer(static, frozenset())))
    yield static
    SESSION.reset(token)


def _next_request() -> None:
    """What the listener does before each request: forget the last request's decisions."""
    s = SESSION.get()
    assert s is not None
    s.cache.clear()


def run(coro: Any) -> Any:
    # asyncio.run copies the current context: the handlers see this test's SESSION.
    return asyncio.run(coro)


@pytest.mark.parametrize("version", versions(11))
def test_join_without_read_on_the_group_never_reaches_the_coordinator(
    acls: StaticAcls, version: int
) -> None:
    c = ctx()
    mod = __import__(f"kio.schema.join_group.v{version}.request", fromlist=["x"])
    req = request(
        11,
        version,
        group_id="g",
        session_timeout=datetime.timedelta(seconds=10),
        rebalance_timeout=datetime.timedelta(seconds=30),
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=(mod.JoinGroupRequestProtocol(name="range", metadata=b"\0\0"),),
    )
    out = round_trip(11, version, run(h.handle_join_group(c, version, req)))
    assert out.error_code == ErrorCode.group_authorization_failed
    assert c.groups.calls == []  # type: ignore[attr-defined]
    acls.bindings.append(allow(ResourceType.GROUP, "g", Operation.READ))
    _next_request()
    out = round_trip(11, version, run(h.handle_join_group(c, version, req)))
    assert out.error_code != ErrorCode.group_authorization_failed


@pytest.mark.parametrize("version", versions(8))
def test_offset_commit_checks_the_group_and_each_topic(acls: StaticAcls, version: int) -> None:
    mod = __import__(f"kio.schema.offset_commit.v{version}.request", fromlist=["x"])

    def topic(name: str) -> Any:
        fields = dict(
            partition_index=0,
            committed_offset=5,
            committed_leader_epoch=-1,
            commit_timestamp=-1,
            committed_metadata="",
        )
        known = mod.OffsetCommitRequestPartition.__dataclass_fields__
        part = mod.OffsetCommitRequestPartition(**{k: v for k, v in fields.items() if k in known})
        return mod.OffsetCommitRequestTopic(name=name, partitions=(part,))

    req = request(
        8,
        version,
        group_id="g",
        generation_id_or_member_epoch=-1,
        generation_id=-1,
        member_id="",
        group_instance_id=None,
        retention_time=datetime.timedelta(milliseconds=-1),
        topics=(topic("mine"), topic("theirs")),
    )
    c = ctx()
    out = round_trip(8, version, run(h.handle_offset_commit(c, version, req)))
    codes = {t.name: t.partitions[0].error_code for t in out.topics}
    assert codes == {
        "mine": ErrorCode.group_authorization_failed,
        "theirs": ErrorCode.group_authorization_failed,
    }
    assert c.groups.calls == []  # type: ignore[attr-defined]
    acls.bindings += [
        allow(ResourceType.GROUP, "g", Operation.READ),
        allow(ResourceType.TOPIC, "mine", Operation.READ),
    ]
    _next_request()
    out = round_trip(8, version, run(h.handle_offset_commit(c, version, req)))
    codes = {t.name: t.partitions[0].error_code for t in out.topics}
    assert codes == {"mine": ErrorCode.none, "theirs": ErrorCode.topic_authorization_failed}
    (commit,) = c.groups.calls  # type: ignore[attr-defined]
    assert {tp.topic for tp in commit.offsets} == {"mine"}  # the refused topic is not committed


@pytest.mark.parametrize("version", versions(22))
def test_init_producer_id_needs_idempotent_write_or_write_on_some_topic(
    acls: StaticAcls, version: int
) -> None:
    req = request(
        22,
        version,
        transactional_id=None,
        transaction_timeout=datetime.timedelta(seconds=60),
        producer_id=-1,
        producer_epoch=-1,
    )
    out = round_trip(22, version, run(h.handle_init_producer_id(ctx(), version, req)))
    assert out.error_code == ErrorCode.cluster_authorization_failed
    acls.bindings.append(allow(ResourceType.TOPIC, "any", Operation.WRITE))  # KIP-679
    _next_request()
    out = round_trip(22, version, run(h.handle_init_producer_id(ctx(), version, req)))
    assert (out.error_code, out.producer_id) == (ErrorCode.none, 77)
    txn = request(
        22,
        version,
        transactional_id="tx",
        transaction_timeout=datetime.timedelta(seconds=60),
        producer_id=-1,
        producer_epoch=-1,
    )
    out = round_trip(22, version, run(h.handle_init_producer_id(ctx(), version, txn)))
    assert out.error_code == ErrorCode.transactional_id_authorization_failed


@pytest.mark.parametrize("version", versions(10))
def test_find_coordinator_needs_describe_on_the_group(acls: StaticAcls, version: int) -> None:
    req = request(10, version, key="g", key_type=0, coordinator_keys=("g",))
    out = round_trip(10, version, run(h.handle_find_coordinator(ctx(), version, req)))
    err = out.coordinators[0].error_code if version >= 4 else out.error_code
    assert err == ErrorCode.group_authorization_failed


@pytest.mark.parametrize("version", versions(20))
def test_delete_topics_without_delete_reaches_no_controller(acls: StaticAcls, version: int) -> None:
    c = ctx()
    sent: list[Any] = []

    async def execute(cmd: Any) -> Any:
        sent.append(cmd)

    c.execute = execute
    from kio.schema.types import TopicName

    req = request(20, version, topic_names=(TopicName("orders"),), timeout=datetime.timedelta(0))
    out = round_trip(20, version, run(h.handle_delete_topics(c, version, req)))
    assert [r.error_code for r in out.responses] == [ErrorCode.topic_authorization_failed]
    assert sent == []


@pytest.mark.parametrize("version", versions(16))
def test_list_groups_shows_only_describable_groups(acls: StaticAcls, version: int) -> None:
    from broker.groups.types import GroupState

    class Listed:
        def __init__(self, group: str) -> None:
            self.group, self.state, self.is_simple = group, GroupState.STABLE, False

    async def list_groups() -> list[Any]:
        return [Listed("mine"), Listed("theirs")]

    c = ctx()
    c.groups.list_groups = list_groups  # type: ignore[attr-defined]
    acls.bindings.append(allow(ResourceType.GROUP, "mine", Operation.DESCRIBE))
    req = request(16, version, states_filter=(), types_filter=())
    out = round_trip(16, version, run(a.handle_list_groups(c, version, req)))
    assert [g.group_id for g in out.groups] == ["mine"]
    acls.bindings.append(allow(ResourceType.CLUSTER, "kafka-cluster", Operation.DESCRIBE))
    _next_request()
    out = round_trip(16, version, run(a.handle_list_groups(c, version, req)))
    assert [g.group_id for g in out.groups] == ["mine", "theirs"]


def test_without_an_authorizer_everything_is_allowed() -> None:
    token = SESSION.set(Session(ALICE, "127.0.0.1", None))
    try:
        req = request(10, 3, key="g", key_type=0)
        out = run(h.handle_find_coordinator(ctx(), 3, req))
        assert out.error_code == ErrorCode.coordinator_not_available  # not an auth error
    finally:
        SESSION.reset(token)


def test_fake_groups_is_the_handlers_tests_own() -> None:
    assert FakeGroups([]).calls == []


@pytest.mark.parametrize("version", versions(29))
def test_acl_admin_every_version(acls: StaticAcls, version: int) -> None:
    from api.kafka import security_admin as sa

    describe = request(
        29,
        version,
        resource_type_filter=1,
        resource_name_filter=None,
        pattern_type_filter=1,
        principal_filter=None,
        host_filter=None,
        operation=1,
        permission_type=1,
    )
    out = round_trip(29, version, run(sa.handle_describe_acls(ctx(), version, describe)))
    assert out.error_code == ErrorCode.cluster_authorization_failed
    acls.bindings.append(allow(ResourceType.CLUSTER, "kafka-cluster", Operation.DESCRIBE))
    _next_request()
    out = round_trip(29, version, run(sa.handle_describe_acls(ctx(), version, describe)))
    assert (out.error_code, out.resources) == (ErrorCode.none, ())
    mod = __import__(f"kio.schema.create_acls.v{version}.request", fromlist=["x"])
    creation = mod.AclCreation(
        resource_type=2,
        resource_name="t",
        resource_pattern_type=3,
        principal="User:x",
        host="*",
        operation=3,
        permission_type=3,
    )
    create = request(30, version, creations=(creation,))
    out = round_trip(30, version, run(sa.handle_create_acls(ctx(), version, create)))
    assert [r.error_code for r in out.results] == [ErrorCode.cluster_authorization_failed]
    token = SESSION.set(Session(ALICE, "127.0.0.1", None))  # no authorizer
    try:
        out = round_trip(30, version, run(sa.handle_create_acls(ctx(), version, create)))
        assert [r.error_code for r in out.results] == [ErrorCode.security_disabled]
    finally:
        SESSION.reset(token)


def test_scram_admin_needs_the_cluster(acls: StaticAcls) -> None:
    from api.kafka import security_admin as sa

    describe = request(50, 0, users=None)
    out = round_trip(50, 0, run(sa.handle_describe_user_scram_credentials(ctx(), 0, describe)))
    assert out.error_code == ErrorCode.cluster_authorization_failed
    mod = __import__("kio.schema.alter_user_scram_credentials.v0.request", fromlist=["x"])
    up = mod.ScramCredentialUpsertion(
        name="u", mechanism=1, iterations=4096, salt=b"s", salted_password=b"p"
    )
    alter = request(51, 0, deletions=(), upsertions=(up,))
    out = round_trip(51, 0, run(sa.handle_alter_user_scram_credentials(ctx(), 0, alter)))
    assert [(r.user, r.error_code) for r in out.results] == [
        ("u", ErrorCode.cluster_authorization_failed)
    ]


class _Replicas:
    """The leader's DeleteRecords (``ReplicaManager.delete_records``), recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int]] = []

    async def delete_records(
        self, topic: str, partition: int, offset: int, timeout_ms: int
    ) -> dict[str, int]:
        self.calls.append((topic, partition, offset))
        if offset > 10:
            from broker.replica_manager import ReplicaError

            raise ReplicaError("OFFSET_OUT_OF_RANGE", "past the high watermark")
        return {"low_watermark": 10 if offset == -1 else offset}


@pytest.mark.parametrize("version", versions(21))
def test_delete_records_needs_delete_on_the_topic(acls: StaticAcls, version: int) -> None:
    from kio.schema.delete_records.v0.request import DeleteRecordsPartition, DeleteRecordsTopic

    c = ctx()
    c.replicas = reps = _Replicas()  # type: ignore[assignment]
    ask = [(0, 4), (1, -1), (2, 99)]

    def req() -> Any:
        parts = tuple(DeleteRecordsPartition(partition_index=p, offset=o) for p, o in ask)
        topic = DeleteRecordsTopic(name="orders", partitions=parts)  # type: ignore[arg-type]
        return request(21, version, topics=(topic,), timeout=datetime.timedelta(seconds=5))

    def answer() -> list[tuple[int, int, ErrorCode]]:
        out = round_trip(21, version, run(a.handle_delete_records(c, version, req())))
        (t,) = out.topics
        return [(p.partition_index, p.low_watermark, p.error_code) for p in t.partitions]

    refused = ErrorCode.topic_authorization_failed
    assert answer() == [(0, -1, refused), (1, -1, refused), (2, -1, refused)]
    assert reps.calls == []
    _next_request()
    acls.bindings.append(allow(ResourceType.TOPIC, "orders", Operation.DELETE))
    assert answer() == [
        (0, 4, ErrorCode.none),
        (1, 10, ErrorCode.none),
        (2, -1, ErrorCode.offset_out_of_range),
    ]
    assert reps.calls == [("orders", 0, 4), ("orders", 1, -1), ("orders", 2, 99)]


@pytest.mark.parametrize("version", versions(43))
def test_elect_leaders_needs_alter_on_the_cluster(acls: StaticAcls, version: int) -> None:
    from kio.schema.elect_leaders.v0.request import TopicPartitions

    from metalog.commands import ElectionType, ElectLeaders
    from metalog.errors import MetadataError
    from metalog.records import BrokerId
    from metalog.responses import ElectLeadersResponse, ElectLeadersResult

    class NotNeeded(MetadataError):
        code = "ELECTION_NOT_NEEDED"

    c = ctx()
    sent: list[Any] = []

    async def execute(cmd: Any) -> Any:
        sent.append(cmd)
        return ElectLeadersResponse(
            (
                ElectLeadersResult("orders", 0, leader=BrokerId(102)),
                ElectLeadersResult("orders", 1, error=NotNeeded("it leads already")),
            )
        )

    c.execute = execute
    tps = (TopicPartitions(topic="orders", partitions=(0, 1)),)  # type: ignore[arg-type]
    req = request(
        43, version, election_type=0, topic_partitions=tps, timeout=datetime.timedelta(seconds=5)
    )

    def answer() -> Any:
        return round_trip(43, version, run(a.handle_elect_leaders(c, version, req)))

    out = answer()
    # v0 has no top-level error: each asked partition carries it
    refused = ErrorCode.cluster_authorization_failed
    assert getattr(out, "error_code", refused) == refused and sent == []
    (r,) = out.replica_election_results
    assert [(p.partition_id, p.error_code) for p in r.partition_result] == [
        (0, refused),
        (1, refused),
    ]
    _next_request()
    acls.bindings.append(allow(ResourceType.CLUSTER, "kafka-cluster", Operation.ALTER))
    out = answer()
    assert getattr(out, "error_code", ErrorCode.none) == ErrorCode.none
    assert sent == [
        ElectLeaders(election=ElectionType.PREFERRED, partitions=(("orders", 0), ("orders", 1)))
    ]
    (r,) = out.replica_election_results
    assert [(p.partition_id, p.error_code) for p in r.partition_result] == [
        (0, ErrorCode.none),
        (1, ErrorCode.election_not_needed),
    ]
