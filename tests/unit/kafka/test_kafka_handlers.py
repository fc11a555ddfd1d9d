"""api.kafka.handlers over fake broker parts: every advertised version of the group,
producer-id and coordinator APIs builds a response that encodes and reads back.

Each version of a Kafka message has its own field set (LeaveGroup answers per member only
from v3, FindCoordinator batches keys from v4); a handler written once for a range must build
every version's shape. The integration tests reach only the versions real clients choose.
"""

from __future__ import annotations

import asyncio
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
        return JoinResponse(GroupError.NONE, member_id="m1", generation=3,
                            assignor=req.assignor, leader="m1", members=("m1",))

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

    return h.KafkaContext(broker_id=101, cluster_id="c", image_fn=lambda: MetadataImage.EMPTY,
                          replicas=None, groups=FakeGroups([]),  # type: ignore[arg-type]
                          next_producer_id=pid, execute=execute)


def subscription(topics: list[str]) -> bytes:
    import io

    from kio.schema.consumer_protocol_subscription.v1.data import ConsumerProtocolSubscription
    from kio.serial import entity_writer

    buf = io.BytesIO()
    buf.write(b"\0\1")
    entity_writer(ConsumerProtocolSubscription)(buf, ConsumerProtocolSubscription(
        topics=tuple(topics), user_data=None, owned_partitions=()))
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

    req = request(13, version, group_id="g", member_id="m1",
                  members=(MemberIdentity(member_id="m1", group_instance_id=None),))
    out = round_trip(13, version, asyncio.run(h.handle_leave_group(ctx(), version, req)))
    assert out.error_code == ErrorCode.none


@pytest.mark.parametrize("version", versions(11))
def test_join_then_sync_every_version(version: int) -> None:
    c = ctx()
    mod = __import__(f"kio.schema.join_group.v{version}.request", fromlist=["x"])
    protos = (mod.JoinGroupRequestProtocol(name="cooperative-sticky",
                                           metadata=subscription(["t"])),)
    req = request(11, version, group_id="g", session_timeout=datetime.timedelta(seconds=10),
                  rebalance_timeout=datetime.timedelta(seconds=30), member_id="",
                  group_instance_id=None, protocol_type="consumer", protocols=protos)
    out = round_trip(11, version, asyncio.run(h.handle_join_group(c, version, req)))
    assert (out.error_code, out.member_id, out.leader, out.generation_id) == (
        ErrorCode.none, "m1", "m1", 3)
    assert [m.metadata for m in out.members] == [subscription(["t"])]
    join = c.groups.calls[0]  # type: ignore[attr-defined]
    assert (join.topics, join.assignor) == (frozenset({"t"}), "cooperative-sticky")
    for sv in versions(14):
        sreq = request(14, sv, group_id="g", generation_id=3, member_id="m1",
                       group_instance_id=None, protocol_type="consumer",
                       protocol_name="cooperative-sticky", assignments=())
        sout = round_trip(14, sv, asyncio.run(h.handle_sync_group(c, sv, sreq)))
        assert sout.error_code == ErrorCode.none
        assert sout.assignment == b"\0\0" + bytes.fromhex("00000001" "0001" "74" "00000001"
                                                          "00000001" "ffffffff")


@pytest.mark.parametrize("version", versions(12))
def test_heartbeat_every_version(version: int) -> None:
    req = request(12, version, group_id="g", generation_id=3, member_id="m1",
                  group_instance_id=None)
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
    req = request(22, version, transactional_id=None,
                  transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1,
                  producer_epoch=-1)
    out = round_trip(22, version, asyncio.run(h.handle_init_producer_id(ctx(), version, req)))
    assert (out.error_code, out.producer_id, out.producer_epoch) == (ErrorCode.none, 77, 0)


@pytest.mark.parametrize("version", versions(8))
def test_offset_commit_every_version(version: int) -> None:
    mod = __import__(f"kio.schema.offset_commit.v{version}.request", fromlist=["x"])
    topic = h.build(mod, "OffsetCommitRequestTopic", name="t", partitions=(h.build(
        mod, "OffsetCommitRequestPartition", partition_index=0, committed_offset=5,
        committed_leader_epoch=-1, commit_timestamp=-1, committed_metadata="meta"),))
    c = ctx()
    req = request(8, version, group_id="g", generation_id_or_member_epoch=3,
                  generation_id=3, member_id="m1", group_instance_id=None,
                  retention_time=datetime.timedelta(0), topics=(topic,))
    out = round_trip(8, version, asyncio.run(h.handle_offset_commit(c, version, req)))
    assert out.topics[0].partitions[0].error_code == ErrorCode.none
    commit = c.groups.calls[0]  # type: ignore[attr-defined]
    assert commit.offsets[TopicPartition("t", 0)].metadata == "meta"


@pytest.mark.parametrize("version", versions(9))
def test_offset_fetch_every_version(version: int) -> None:
    mod = __import__(f"kio.schema.offset_fetch.v{version}.request", fromlist=["x"])
    req = request(9, version, group_id="g", require_stable=False, topics=(
        h.build(mod, "OffsetFetchRequestTopic", name="t", partition_indexes=(0,)),))
    out = round_trip(9, version, asyncio.run(h.handle_offset_fetch(ctx(), version, req)))
    assert out.topics[0].partitions[0].committed_offset == -1
