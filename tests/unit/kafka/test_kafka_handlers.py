"""api.kafka.handlers over fake broker parts: every advertised version of the group,
producer-id and coordinator APIs builds a response that encodes and reads back.

Each version of a Kafka message has its own field set (LeaveGroup answers per member only
from v3, FindCoordinator batches keys from v4); a handler written once for a range must build
every version's shape. The integration tests reach only the versions real clients choose.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
from dataclasses import dataclass
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from api.kafka import handlers as h
from api.kafka.protocol import SUPPORTED, encode_response
from broker.group_coordinator import CoordinatorInfo
from broker.groups.group import JoinResponse, SyncResponse
from broker.groups.types import ErrorCode as GroupError
from broker.groups.types import TopicPartition
from metalog.image import MetadataImage


@dataclass
class FakeGroups:
    calls: list[Any]

    async def find_coordinator(self, group: str) -> CoordinatorInfo:
        return CoordinatorInfo(101, "http://x", 0)

    async def join(self, req: Any) -> JoinResponse:
        self.calls.append(req)
        return JoinResponse(
            GroupError.NONE,
            member_id="m1",
            generation=3,
            assignor=req.assignor,
            leader="m1",
            members=("m1",),
        )

    async def sync(self, req: Any) -> SyncResponse:
        return SyncResponse(GroupError.NONE, assignment=frozenset({TopicPartition("t", 1)}))

    async def heartbeat(self, req: Any) -> GroupError:
        return GroupError.REBALANCE_IN_PROGRESS

    async def leave(self, req: Any) -> GroupError:
        return GroupError.NONE

    async def commit(self, req: Any) -> GroupError:
        self.calls.append(req)
        return GroupError.NONE

    async def fetch_offsets(self, group: str, parts: Any) -> dict[TopicPartition, Any]:
        return {}


def ctx() -> h.KafkaContext:
    async def pid() -> int:
        return 77

    async def execute(cmd: Any) -> Any:
        return None

    return h.KafkaContext(
        broker_id=101,
        cluster_id="c",
        image_fn=lambda: MetadataImage.EMPTY,
        replicas=None,
        groups=FakeGroups([]),  # type: ignore[arg-type]
        next_producer_id=pid,
        execute=execute,
    )


def subscription(topics: list[str]) -> bytes:
    import io

    from kio.schema.consumer_protocol_subscription.v1.data import ConsumerProtocolSubscription
    from kio.serial import entity_writer

    buf = io.BytesIO()
    buf.write(b"\0\1")
    entity_writer(ConsumerProtocolSubscription)(
        buf, ConsumerProtocolSubscription(topics=tuple(topics), user_data=None, owned_partitions=())
    )
    return buf.getvalue()


def request(api_key: int, version: int, **fields: Any) -> Any:
    cls = load_request_schema(api_key, version)
    from dataclasses import fields as dc_fields

    names = {f.name for f in dc_fields(cls)}
    return cls(**{k: v for k, v in fields.items() if k in names})


def round_trip(api_key: int, version: int, body: Any) -> Any:
    frame = encode_response(api_key, version, 1, body)
    flexible = load_response_schema(api_key, version).__flexible__
    return entity_reader(load_response_schema(api_key, version))(frame, 8 + int(flexible))[0]


def versions(api_key: int) -> list[int]:
    lo, hi = SUPPORTED[api_key]
    return list(range(lo, hi + 1))


@pytest.mark.parametrize("version", versions(13))
def test_leave_group_every_version(version: int) -> None:
    from kio.schema.leave_group.v4.request import MemberIdentity

    req = request(
        13,
        version,
        group_id="g",
        member_id="m1",
        members=(MemberIdentity(member_id="m1", group_instance_id=None),),
    )
    out = round_trip(13, version, asyncio.run(h.handle_leave_group(ctx(), version, req)))
    assert out.error_code == ErrorCode.none


@pytest.mark.parametrize("version", versions(11))
def test_join_then_sync_every_version(version: int) -> None:
    c = ctx()
    mod = __import__(f"kio.schema.join_group.v{version}.request", fromlist=["x"])
    protos = (
        mod.JoinGroupRequestProtocol(name="cooperative-sticky", metadata=subscription(["t"])),
    )
    req = request(
        11,
        version,
        group_id="g",
        session_timeout=datetime.timedelta(seconds=10),
        rebalance_timeout=datetime.timedelta(seconds=30),
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=protos,
    )
    out = round_trip(11, version, asyncio.run(h.handle_join_group(c, version, req)))
    assert (out.error_code, out.member_id, out.leader, out.generation_id) == (
        ErrorCode.none,
        "m1",
        "m1",
        3,
    )
    assert [m.metadata for m in out.members] == [subscription(["t"])]
    join = c.groups.calls[0]  # type: ignore[attr-defined]
    assert (join.topics, join.assignor) == (frozenset({"t"}), "cooperative-sticky")
    for sv in versions(14):
        sreq = request(
            14,
            sv,
            group_id="g",
            generation_id=3,
            member_id="m1",
            group_instance_id=None,
            protocol_type="consumer",
            protocol_name="cooperative-sticky",
            assignments=(),
        )
        sout = round_trip(14, sv, asyncio.run(h.handle_sync_group(c, sv, sreq)))
        assert sout.error_code == ErrorCode.none
        assert sout.assignment == b"\0\0" + bytes.fromhex("000000010001740000000100000001ffffffff")


@pytest.mark.parametrize("version", versions(12))
def test_heartbeat_every_version(version: int) -> None:
    req = request(
        12, version, group_id="g", generation_id=3, member_id="m1", group_instance_id=None
    )
    out = round_trip(12, version, asyncio.run(h.handle_heartbeat(ctx(), version, req)))
    assert out.error_code == ErrorCode.rebalance_in_progress


@pytest.mark.parametrize("version", versions(10))
def test_find_coordinator_every_version_names_no_listener_as_unavailable(version: int) -> None:
    req = request(10, version, key="g", key_type=0, coordinator_keys=("g",))
    out = round_trip(10, version, asyncio.run(h.handle_find_coordinator(ctx(), version, req)))
    err = out.coordinators[0].error_code if version >= 4 else out.error_code
    assert err == ErrorCode.coordinator_not_available  # the empty image has no broker 101


@pytest.mark.parametrize("version", versions(22))
def test_init_producer_id_every_version(version: int) -> None:
    req = request(
        22,
        version,
        transactional_id=None,
        transaction_timeout=datetime.timedelta(seconds=60),
        producer_id=-1,
        producer_epoch=-1,
    )
    out = round_trip(22, version, asyncio.run(h.handle_init_producer_id(ctx(), version, req)))
    assert (out.error_code, out.producer_id, out.producer_epoch) == (ErrorCode.none, 77, 0)


@pytest.mark.parametrize("version", versions(8))
def test_offset_commit_every_version(version: int) -> None:
    mod = __import__(f"kio.schema.offset_commit.v{version}.request", fromlist=["x"])
    topic = h.build(
        mod,
        "OffsetCommitRequestTopic",
        name="t",
        partitions=(
            h.build(
                mod,
                "OffsetCommitRequestPartition",
                partition_index=0,
                committed_offset=5,
                committed_leader_epoch=-1,
                commit_timestamp=-1,
                committed_metadata="meta",
            ),
        ),
    )
    c = ctx()
    req = request(
        8,
        version,
        group_id="g",
        generation_id_or_member_epoch=3,
        generation_id=3,
        member_id="m1",
        group_instance_id=None,
        retention_time=datetime.timedelta(0),
        topics=(topic,),
    )
    out = round_trip(8, version, asyncio.run(h.handle_offset_commit(c, version, req)))
    assert out.topics[0].partitions[0].error_code == ErrorCode.none
    commit = c.groups.calls[0]  # type: ignore[attr-defined]
    assert commit.offsets[TopicPartition("t", 0)].metadata == "meta"


@pytest.mark.parametrize("version", versions(9))
def test_offset_fetch_every_version(version: int) -> None:
    mod = __import__(f"kio.schema.offset_fetch.v{version}.request", fromlist=["x"])
    req = request(
        9,
        version,
        group_id="g",
        require_stable=False,
        topics=(h.build(mod, "OffsetFetchRequestTopic", name="t", partition_indexes=(0,)),),
    )
    out = round_trip(9, version, asyncio.run(h.handle_offset_fetch(ctx(), version, req)))
    assert out.topics[0].partitions[0].committed_offset == -1


class FakeReplicas:
    """produce/fetch/list_offsets as ReplicaManager answers them, for partition 0 only."""

    by_name: dict[Any, Any] = {}

    def __init__(self) -> None:
        from storage.batch import MAGIC_KAFKA, encode_batch

        self.batch = encode_batch([(b"k", b"v", 5, [])], magic=MAGIC_KAFKA)

    async def produce(
        self,
        topic: str,
        partition: int,
        acks: int,
        timeout_ms: int,
        batch: bytes,
        *,
        transactional_id: str | None = None,
        appended: Any = None,
    ) -> dict[str, Any]:
        from broker.replica_manager import ReplicaError

        if partition != 0:
            raise ReplicaError("NOT_LEADER_OR_FOLLOWER")
        if appended is not None:
            appended()
        await asyncio.sleep(0)  # the wait for acks
        return {"base_offset": 41}

    async def fetch(self, **kw: Any) -> dict[str, Any]:
        ans: dict[str, Any] = {"records": self.batch, "high_watermark": 1, "log_start_offset": 0}
        if kw.get("isolation_level") == "read_committed":
            # The Kafka listener filters nothing itself: its clients do, with these.
            assert kw.get("filter_aborted") is False
            ans.update(last_stable_offset=0, aborted_transactions=[[7, 0]])
        return ans

    def list_offsets(
        self, topic: str, partition: int, timestamp: int, isolation_level: str = ""
    ) -> dict[str, Any]:
        return {"offset": 8 if isolation_level == "read_committed" else 9}


def data_ctx() -> h.KafkaContext:
    c = ctx()
    c.replicas = FakeReplicas()  # type: ignore[assignment]
    return c


@pytest.mark.parametrize("version", range(3, SUPPORTED[0][1] + 1))
def test_produce_every_served_version(version: int) -> None:
    from kio.static.primitive import Records

    mod = __import__(f"kio.schema.produce.v{version}.request", fromlist=["x"])
    req = request(
        0,
        version,
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(
            mod.TopicProduceData(
                name="t",
                partition_data=tuple(
                    mod.PartitionProduceData(index=i, records=Records(b"x")) for i in (0, 1)
                ),
            ),
        ),
    )
    out = round_trip(0, version, asyncio.run(h.handle_produce(data_ctx(), version, req)))
    [p0, p1] = out.responses[0].partition_responses
    assert (p0.error_code, p0.base_offset) == (ErrorCode.none, 41)
    assert p1.error_code == ErrorCode.not_leader_or_follower
    acks0 = request(
        0,
        version,
        transactional_id=None,
        acks=0,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(
            mod.TopicProduceData(
                name="t", partition_data=(mod.PartitionProduceData(index=0, records=Records(b"x")),)
            ),
        ),
    )
    assert asyncio.run(h.handle_produce(data_ctx(), version, acks0)) is None
    # An acks=0 produce that fails anywhere closes the connection (Kafka's KafkaApis).
    failing = dataclasses.replace(acks0, topic_data=req.topic_data)
    with pytest.raises(h.AcksZeroFailedError, match="t-1: not_leader_or_follower"):
        asyncio.run(h.handle_produce(data_ctx(), version, failing))


@pytest.mark.parametrize("version", versions(1))
def test_fetch_every_version(version: int) -> None:
    mod = __import__(f"kio.schema.fetch.v{version}.request", fromlist=["x"])
    part = h.build(
        mod,
        "FetchPartition",
        partition=0,
        current_leader_epoch=-1,
        fetch_offset=0,
        last_fetched_epoch=-1,
        log_start_offset=-1,
        partition_max_bytes=1 << 20,
    )
    req = request(
        1,
        version,
        replica_id=-1,
        max_wait=datetime.timedelta(0),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=1,
        session_id=0,
        session_epoch=-1,
        topics=(h.build(mod, "FetchTopic", topic="t", partitions=(part,)),),
        forgotten_topics_data=(),
        rack_id="",
    )
    c = data_ctx()
    out = round_trip(1, version, asyncio.run(h.handle_fetch(c, version, req)))
    p = out.responses[0].partitions[0]
    assert (p.error_code, p.high_watermark, bytes(p.records)) == (
        ErrorCode.none,
        1,
        c.replicas.batch,
    )  # type: ignore[attr-defined]
    # isolation_level 1 (read_committed): the LSO and the aborted transactions.
    assert p.last_stable_offset == 0
    assert [(a.producer_id, a.first_offset) for a in p.aborted_transactions] == [(7, 0)]


@pytest.mark.parametrize("version", versions(2))
def test_list_offsets_every_version(version: int) -> None:
    mod = __import__(f"kio.schema.list_offsets.v{version}.request", fromlist=["x"])
    req = request(
        2,
        version,
        replica_id=-1,
        isolation_level=0,
        topics=(
            h.build(
                mod,
                "ListOffsetsTopic",
                name="t",
                partitions=(
                    h.build(
                        mod,
                        "ListOffsetsPartition",
                        partition_index=0,
                        current_leader_epoch=-1,
                        timestamp=-1,
                        max_num_offsets=1,
                    ),
                ),
            ),
        ),
    )
    out = round_trip(2, version, asyncio.run(h.handle_list_offsets(data_ctx(), version, req)))
    p = out.topics[0].partitions[0]
    assert (p.error_code, p.offset) == (ErrorCode.none, 9)
    if version >= 2:  # isolation_level 1: latest is the last stable offset
        committed = dataclasses.replace(req, isolation_level=1)
        out = round_trip(
            2, version, asyncio.run(h.handle_list_offsets(data_ctx(), version, committed))
        )
        assert out.topics[0].partitions[0].offset == 8


@pytest.mark.parametrize("version", versions(3))
def test_metadata_every_version_names_an_unknown_topic(version: int) -> None:
    mod = __import__(f"kio.schema.metadata.v{version}.request", fromlist=["x"])
    req = request(
        3,
        version,
        topics=(h.build(mod, "MetadataRequestTopic", name="nope", topic_id=None),),
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    out = round_trip(3, version, asyncio.run(h.handle_metadata(data_ctx(), version, req)))
    assert [(t.name, t.error_code) for t in out.topics] == [
        ("nope", ErrorCode.unknown_topic_or_partition)
    ]
    assert out.brokers == ()


def test_init_producer_id_throttled_is_throttling_quota_exceeded() -> None:
    from broker.producer_ids import ProducerIdThrottledError

    async def throttled() -> int:
        raise ProducerIdThrottledError(250)

    c = ctx()
    c.next_producer_id = throttled
    req = request(
        22,
        4,
        transactional_id=None,
        transaction_timeout=datetime.timedelta(0),
        producer_id=-1,
        producer_epoch=-1,
    )
    out = round_trip(22, 4, asyncio.run(h.handle_init_producer_id(c, 4, req)))
    assert out.error_code == ErrorCode.throttling_quota_exceeded
    assert out.throttle_time == datetime.timedelta(milliseconds=250)


def _join(c: h.KafkaContext, version: int, *names: str) -> Any:
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
        protocols=tuple(
            mod.JoinGroupRequestProtocol(name=n, metadata=subscription(["t"])) for n in names
        ),
    )
    return round_trip(11, version, asyncio.run(h.handle_join_group(c, version, req)))


@pytest.mark.parametrize("version", versions(11))
def test_join_with_kafkajs_assigner_name_is_answered_in_that_name(version: int) -> None:
    # KafkaJS offers its round robin as "RoundRobinAssigner" and looks the assigner up by the
    # protocol name JoinGroup answers; the coordinator knows it as "roundrobin".
    c = ctx()
    out = _join(c, version, "RoundRobinAssigner")
    assert (out.error_code, out.protocol_name) == (ErrorCode.none, "RoundRobinAssigner")
    assert c.groups.calls[0].assignor == "roundrobin"  # type: ignore[attr-defined]
    assert _join(ctx(), version, "MyOwnAssigner").error_code == (
        ErrorCode.inconsistent_group_protocol
    )


def _metadata_request(version: int, names: list[str], *, allow: bool) -> Any:
    mod = __import__(f"kio.schema.metadata.v{version}.request", fromlist=["x"])
    return request(
        3,
        version,
        topics=tuple(h.build(mod, "MetadataRequestTopic", name=n, topic_id=None) for n in names),
        allow_auto_topic_creation=allow,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )


def _creating_ctx(created: list[Any], error: Exception | None = None) -> h.KafkaContext:
    c = data_ctx()
    c.auto_create_topics = True

    async def execute(cmd: Any) -> Any:
        created.append(cmd)
        if error is not None:
            raise error

    c.execute = execute
    return c


@pytest.mark.parametrize("version", versions(3))
def test_metadata_auto_creates_a_named_topic_when_enabled(version: int) -> None:
    created: list[Any] = []
    c = _creating_ctx(created)
    req = _metadata_request(version, ["new", "new"], allow=True)
    out = round_trip(3, version, asyncio.run(h.handle_metadata(c, version, req)))
    # Once, with the cluster's defaults; the client asks again until it has a leader.
    assert [(x.name, x.num_partitions, x.replication_factor) for x in created] == [
        ("new", None, None)
    ]
    assert {(t.name, t.error_code) for t in out.topics} == {("new", ErrorCode.leader_not_available)}


@pytest.mark.parametrize("version", [v for v in versions(3) if v >= 4])
def test_metadata_creates_nothing_when_the_request_does_not_allow_it(version: int) -> None:
    created: list[Any] = []
    req = _metadata_request(version, ["new"], allow=False)
    out = round_trip(
        3, version, asyncio.run(h.handle_metadata(_creating_ctx(created), version, req))
    )
    assert created == []
    assert [(t.name, t.error_code) for t in out.topics] == [
        ("new", ErrorCode.unknown_topic_or_partition)
    ]


def test_metadata_creates_nothing_by_default_or_for_all_topics() -> None:
    created: list[Any] = []
    c = _creating_ctx(created)
    c.auto_create_topics = False
    asyncio.run(h.handle_metadata(c, 12, _metadata_request(12, ["new"], allow=True)))
    c.auto_create_topics = True
    every = request(
        3,
        12,
        topics=None,
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )
    asyncio.run(h.handle_metadata(c, 12, every))
    assert created == []


def test_metadata_auto_create_refused_by_the_controller_answers_its_code() -> None:
    from metalog.errors import InvalidTopicError, TopicExistsError

    for error, code in [
        (InvalidTopicError("bad name"), ErrorCode.invalid_topic_exception),
        (TopicExistsError("raced"), ErrorCode.leader_not_available),
    ]:
        c = _creating_ctx([], error)
        out = asyncio.run(h.handle_metadata(c, 12, _metadata_request(12, ["x"], allow=True)))
        assert [(t.name, t.error_code) for t in out.topics] == [("x", code)]


class FencedTxn:
    """A transaction coordinator for which every producer is a zombie."""

    async def _fenced(self, *args: Any, **kwargs: Any) -> Any:
        from broker.txn_coordinator import TxnRequestError

        raise TxnRequestError("PRODUCER_FENCED", "a newer producer exists")

    init_producer_id = add_partitions = add_offsets = end_txn = _fenced


def _txn_request(api_key: int, version: int) -> Any:
    ids = {"transactional_id": "t", "producer_id": 5, "producer_epoch": 0}
    if api_key == 22:
        return request(22, version, **ids, transaction_timeout=datetime.timedelta(seconds=60))
    if api_key == 24:
        mod = __import__(f"kio.schema.add_partitions_to_txn.v{version}.request", fromlist=["x"])
        return request(
            24,
            version,
            **{f"v3_and_below_{k}": v for k, v in ids.items()},
            v3_and_below_topics=(mod.AddPartitionsToTxnTopic(name="t", partitions=(0,)),),
        )
    if api_key == 25:
        return request(25, version, **ids, group_id="g")
    return request(26, version, **ids, committed=True)


def _txn_error(api_key: int, out: Any) -> ErrorCode:
    if api_key == 24:
        (topic,) = out.results_by_topic_v3_and_below
        (part,) = topic.results_by_partition
        return part.partition_error_code  # type: ignore[no-any-return]
    return out.error_code  # type: ignore[no-any-return]


# KIP-588: the first version of each API whose clients know PRODUCER_FENCED (90); Kafka
# answers older ones INVALID_PRODUCER_EPOCH (47). KafkaJS 2.2 speaks EndTxn v0-1 and took 90
# for an unknown error, not a fencing.
@pytest.mark.parametrize(
    ("api_key", "handler", "since"),
    [
        (22, h.handle_init_producer_id, 4),
        (24, h.handle_add_partitions_to_txn, 2),
        (25, h.handle_add_offsets_to_txn, 2),
        (26, h.handle_end_txn, 2),
    ],
)
def test_a_fenced_producer_is_answered_the_code_its_version_knows(
    api_key: int, handler: Any, since: int
) -> None:
    c = ctx()
    c.txn = FencedTxn()  # type: ignore[assignment]
    for version in versions(api_key):
        answer = asyncio.run(handler(c, version, _txn_request(api_key, version)))
        got = _txn_error(api_key, round_trip(api_key, version, answer))
        want = ErrorCode.producer_fenced if version >= since else ErrorCode.invalid_producer_epoch
        assert got == want, version


def test_a_new_topic_id_never_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    """As Kafka's ``Uuid.randomUuid``: an id starting with "-" reads as an option on a command
    line. The first uuid drawn encodes to "-..." (0xF8), the second does not."""
    import uuid

    drawn = iter([uuid.UUID(bytes=b"\xf8" + b"\x00" * 15), uuid.UUID(bytes=b"\x01" * 16)])
    monkeypatch.setattr(h.uuid, "uuid4", lambda: next(drawn))
    assert h._random_topic_id() == "AQEBAQEBAQEBAQEBAQEBAQ"
