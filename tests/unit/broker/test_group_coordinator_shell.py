"""The group coordinator shell against a fake ``OffsetsLog``: the group -> partition mapping,
answers held until their records are committed (in order), parked joins, append failures,
leadership loss, loading, timers. The rules of groups themselves are the core's
(tests/unit/groups); these pin what the shell adds around it."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from broker.group_coordinator import (
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    NOT_COORDINATOR,
    OFFSETS_TOPIC,
    CoordinatorConfig,
    CoordinatorError,
    GroupCoordinator,
    KeyValue,
    Leadership,
    LoggedMarker,
    TxnAppend,
    TxnKeyValue,
    java_string_hash,
    kafka_abs,
    partition_for,
    wall_clock_ms,
)
from broker.groups.group import (
    GroupConfig,
    HeartbeatRequest,
    JoinRequest,
    OffsetAndMetadata,
    OffsetCommitRequest,
    SyncRequest,
    TxnOffsetCommitRequest,
)
from broker.groups.records import OffsetCommitRecord, encode_record
from broker.groups.types import ErrorCode, GroupState, TopicPartition
from metalog.commands import CreateTopic
from metalog.delta import MetadataDelta
from metalog.image import MetadataImage
from metalog.records import Endpoint, PartitionRecord, RegisterBrokerRecord, TopicRecord

TP0 = TopicPartition("orders", 0)

# ---------------------------------------------------------------- group -> partition


@pytest.mark.parametrize(
    ("s", "h"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("Aa", 2112),
        ("BB", 2112),
        ("polygenelubricants", -(2**31)),
        ("my-group", -1906497762),
        ("\U0001f600", 0xD83D * 31 + 0xDE00),  # a surrogate pair: two UTF-16 code units
    ],
)
def test_java_string_hash_is_javas(s: str, h: int) -> None:
    assert java_string_hash(s) == h


def test_kafka_abs_maps_min_value_to_zero_and_is_abs_otherwise() -> None:
    assert kafka_abs(-(2**31)) == 0
    assert kafka_abs(-5) == 5 and kafka_abs(7) == 7
    assert kafka_abs(java_string_hash("polygenelubricants")) == 0


def test_partition_for_matches_kafkas_partition_for() -> None:
    # Kafka's Utils.abs("my-group".hashCode()) % 50 is 12 (a negative hash: masking the sign
    # bit instead, as n & 0x7fffffff, would give 36).
    assert partition_for("my-group", 50) == 12
    assert partition_for("kafka-txn-0", 50) == 30
    assert partition_for("polygenelubricants", 7) == 0


# ---------------------------------------------------------------- a fake log


class FakeLog:
    """One broker's view of the offsets partitions: leaderships, logs, a gate on appends."""

    def __init__(self) -> None:
        self.leaders: dict[int, Leadership] = {0: Leadership("tid", 0)}
        self.logs: dict[int, list[KeyValue]] = {0: []}
        self.appends: list[list[KeyValue]] = []
        self.txns: list[TxnAppend | None] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.read_gate = asyncio.Event()
        self.read_gate.set()
        self.fail: str | None = None

    def leadership(self, partition: int) -> Leadership | None:
        return self.leaders.get(partition)

    async def read(self, partition: int, lead: Leadership) -> tuple[list[KeyValue], int]:
        await self.read_gate.wait()
        return list(self.logs[partition]), len(self.logs[partition])

    async def wait_high_watermark(self, partition: int, lead: Leadership, offset: int) -> None:
        return None

    async def append(
        self,
        partition: int,
        lead: Leadership,
        records: list[KeyValue],
        timestamp_ms: int,
        timeout_ms: int,
        txn: TxnAppend | None = None,
    ) -> None:
        self.appends.append(records)
        self.txns.append(txn)
        await self.gate.wait()
        if self.fail is not None:
            raise CoordinatorError(self.fail)
        self.logs[partition].extend(records)


def image(offsets_partitions: int = 1, leader: int = 1) -> MetadataImage:
    d = MetadataDelta(MetadataImage.EMPTY)
    for b in (1, 2):
        d.replay(
            RegisterBrokerRecord(
                broker_id=b,
                incarnation_id="x",
                fenced=False,
                endpoints=(Endpoint("http", "127.0.0.1", 9090 + b),),
            ),
            b,
        )
    d.replay(TopicRecord(name=OFFSETS_TOPIC, topic_id="tid"), 3)
    off = 3
    for p in range(offsets_partitions):
        off += 1
        d.replay(
            PartitionRecord(
                topic_id="tid", partition=p, replicas=(1, 2), isr=(1, 2), leader=leader
            ),
            off,
        )
    d.replay(TopicRecord(name="orders", topic_id="oid"), off + 1)
    for p in range(2):
        d.replay(
            PartitionRecord(topic_id="oid", partition=p, replicas=(1,), isr=(1,), leader=1),
            off + 2 + p,
        )
    return d.apply()


async def until(cond: Callable[[], Any], timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not cond():
            await asyncio.sleep(0.005)


async def started(fake: FakeLog, *, delay_ms: int = 0) -> GroupCoordinator:
    async def create(cmd: CreateTopic) -> None:
        raise AssertionError("the topic exists")

    async def end_offset(topic: str, partition: int) -> int | None:
        return 42

    c = GroupCoordinator(
        broker_id=1,
        offsets_log=fake,
        image=image,
        create_topic=create,
        end_offset=end_offset,
        config=CoordinatorConfig(
            group=GroupConfig(session_timeout_ms_min=50, initial_rebalance_delay_ms=delay_ms)
        ),
    )
    await c.start()
    await until(lambda: 0 in c.shards and c.shards[0].state is not None)
    return c


def join_req(member_id: str = "", session_ms: int = 10_000) -> JoinRequest:
    return JoinRequest("g", member_id, frozenset({"orders"}), session_timeout_ms=session_ms)


async def stable_member(c: GroupCoordinator) -> tuple[str, int]:
    j = await c.join(join_req())
    assert j.error == ErrorCode.NONE
    s = await c.sync(SyncRequest("g", j.member_id, j.generation))
    assert s.assignment == {TP0, TopicPartition("orders", 1)}
    return j.member_id, j.generation


# ---------------------------------------------------------------- the shell


def run_async(fn: Callable[[], Awaitable[None]]) -> Callable[[], None]:
    @functools.wraps(fn)
    def test() -> None:
        asyncio.run(fn())  # type: ignore[arg-type]

    return test


@run_async
async def test_answers_wait_for_the_append_and_go_out_in_order() -> None:
    fake = FakeLog()
    c = await started(fake)
    try:
        member, gen = await stable_member(c)
        fake.gate.clear()
        commit = asyncio.create_task(
            c.commit(OffsetCommitRequest("g", {TP0: OffsetAndMetadata(5)}, member, gen))
        )
        await until(lambda: len(fake.appends) == 2)  # the join's plan, then this commit
        # A heartbeat writes nothing, but it comes after the commit: it waits too.
        beat = asyncio.create_task(c.heartbeat(HeartbeatRequest("g", member, gen)))
        read = asyncio.create_task(c.fetch_offsets("g", None))
        await asyncio.sleep(0.05)
        assert not commit.done() and not beat.done() and not read.done()
        fake.gate.set()
        assert await commit == ErrorCode.NONE
        assert await beat == ErrorCode.NONE
        assert (await read)[TP0].offset == 5
        assert fake.logs[0][-1] == encode_record(
            OffsetCommitRecord("g", "orders", 0, 5, "", (await read)[TP0].commit_ts_ms)
        )
    finally:
        await c.stop()


@run_async
async def test_a_parked_join_is_answered_when_its_join_phase_completes() -> None:
    fake = FakeLog()
    c = await started(fake, delay_ms=100)
    try:
        first = asyncio.create_task(c.join(join_req()))
        second = asyncio.create_task(c.join(join_req()))
        a, b = await asyncio.gather(first, second)
        assert a.error == b.error == ErrorCode.NONE
        assert a.generation == b.generation == 1
        assert sorted(a.members) == sorted([a.member_id, b.member_id])
    finally:
        await c.stop()


@run_async
async def test_a_failed_append_answers_coordinator_not_available_and_reloads_the_log() -> None:
    fake = FakeLog()
    c = await started(fake)
    try:
        member, gen = await stable_member(c)
        fake.fail = "NOT_ENOUGH_REPLICAS"
        with pytest.raises(CoordinatorError) as e:
            await c.commit(OffsetCommitRequest("g", {TP0: OffsetAndMetadata(7)}, member, gen))
        assert e.value.code == COORDINATOR_NOT_AVAILABLE
        fake.fail = None
        await until(lambda: 0 in c.shards and c.shards[0].state is not None)
        # Reloaded from what the log holds: the refused commit is not there.
        assert await c.fetch_offsets("g", None) == {}
        assert (await c.describe("g")).state == GroupState.STABLE
    finally:
        await c.stop()


@run_async
async def test_losing_leadership_answers_parked_joins_not_coordinator() -> None:
    fake = FakeLog()
    c = await started(fake)
    try:
        member, gen = await stable_member(c)
        newcomer = asyncio.create_task(c.join(join_req()))  # waits for the member to rejoin
        await until(lambda: c.shards[0].parked)
        del fake.leaders[0]
        await c.on_metadata(None)
        with pytest.raises(CoordinatorError) as e:
            await newcomer
        assert e.value.code == NOT_COORDINATOR
        # The image still names this broker: the leadership may come back, so "loading".
        with pytest.raises(CoordinatorError) as e:
            await c.heartbeat(HeartbeatRequest("g", member, gen))
        assert e.value.code == COORDINATOR_LOAD_IN_PROGRESS
        # Once the image names the new leader, callers are sent there.
        c.image = lambda: image(leader=2)
        with pytest.raises(CoordinatorError) as e:
            await c.heartbeat(HeartbeatRequest("g", member, gen))
        assert e.value.code == NOT_COORDINATOR and e.value.coordinator_id == 2
    finally:
        await c.stop()


@run_async
async def test_a_new_leader_replays_the_log_and_answers_load_in_progress_meanwhile() -> None:
    fake = FakeLog()
    # Committed just now: a simple group's offsets expire a retention period after commit.
    fake.logs[0] = [encode_record(OffsetCommitRecord("g", "orders", 1, 9, "m", wall_clock_ms()))]
    fake.read_gate.clear()
    c = GroupCoordinator(
        broker_id=1, offsets_log=fake, image=image, create_topic=_never, end_offset=_end_42
    )
    await c.start()
    try:
        await until(lambda: 0 in c.shards)
        with pytest.raises(CoordinatorError) as e:
            await c.fetch_offsets("g", None)
        assert e.value.code == COORDINATOR_LOAD_IN_PROGRESS
        fake.read_gate.set()
        await until(lambda: c.shards[0].state is not None)
        got = await c.fetch_offsets("g", None)
        assert got[TopicPartition("orders", 1)].offset == 9
        lag = await c.lag("g")
        assert lag[TopicPartition("orders", 1)].lag == 42 - 9
        # A new epoch is a new leadership: the shard is dropped and loaded again.
        old = c.shards[0]
        fake.leaders[0] = Leadership("tid", 1)
        await c.on_metadata(None)
        await until(
            lambda: 0 in c.shards and c.shards[0] is not old and c.shards[0].state is not None
        )
        assert old.closed
    finally:
        await c.stop()


@run_async
async def test_the_session_timer_removes_a_silent_member() -> None:
    fake = FakeLog()
    c = await started(fake)
    try:
        j = await c.join(join_req(session_ms=100))
        await c.sync(SyncRequest("g", j.member_id, j.generation))
        # With an offset the group outlives its last member (EMPTY, not DEAD).
        assert (
            await c.commit(
                OffsetCommitRequest("g", {TP0: OffsetAndMetadata(1)}, j.member_id, j.generation)
            )
            == ErrorCode.NONE
        )

        async def empty() -> bool:
            return (await c.describe("g")).state == GroupState.EMPTY

        async with asyncio.timeout(5):
            while not await empty():
                await asyncio.sleep(0.01)
        assert await c.heartbeat(HeartbeatRequest("g", j.member_id, j.generation)) == (
            ErrorCode.UNKNOWN_MEMBER_ID
        )
    finally:
        await c.stop()


@run_async
async def test_requests_for_a_partition_led_elsewhere_are_not_coordinator() -> None:
    fake = FakeLog()
    fake.leaders.clear()
    c = GroupCoordinator(
        broker_id=2, offsets_log=fake, image=image, create_topic=_never, end_offset=_end_42
    )
    await c.start()
    try:
        with pytest.raises(CoordinatorError) as e:
            await c.describe("g")
        assert e.value.code == NOT_COORDINATOR and e.value.coordinator_id == 1
        info = await c.find_coordinator("g")
        assert (info.coordinator_id, info.url, info.partition) == (1, "http://127.0.0.1:9091", 0)
    finally:
        await c.stop()


async def _never(cmd: CreateTopic) -> None:
    raise AssertionError("the topic exists")


async def _end_42(topic: str, partition: int) -> int | None:
    return 42


@run_async
async def test_lag_snapshot_reads_each_end_offset_once_and_leaves_out_a_slow_one() -> None:
    asked: list[tuple[str, int]] = []

    async def create(cmd: CreateTopic) -> None:
        raise AssertionError("the topic exists")

    async def end_offset(topic: str, partition: int) -> int | None:
        asked.append((topic, partition))
        if partition == 1:
            await asyncio.sleep(30)  # its leader does not answer
        return 42

    fake = FakeLog()
    c = GroupCoordinator(
        broker_id=1,
        offsets_log=fake,
        image=image,
        create_topic=create,
        end_offset=end_offset,
        config=CoordinatorConfig(group=GroupConfig(session_timeout_ms_min=50)),
    )
    await c.start()
    try:
        await until(lambda: 0 in c.shards and c.shards[0].state is not None)
        member, gen = await stable_member(c)
        offsets = {TP0: OffsetAndMetadata(5), TopicPartition("orders", 1): OffsetAndMetadata(9)}
        assert await c.commit(OffsetCommitRequest("g", offsets, member, gen)) == ErrorCode.NONE
        t0 = asyncio.get_running_loop().time()
        (snap,) = await c.lag_snapshot(timeout_s=0.3)
        assert asyncio.get_running_loop().time() - t0 < 5
        assert (snap.group, snap.state, snap.members, snap.unknown) == (
            "g",
            GroupState.STABLE,
            1,
            1,
        )
        assert {
            tp: (pl.current_offset, pl.log_end_offset, pl.lag) for tp, pl in snap.lags.items()
        } == {TP0: (5, 42, 37)}
        assert sorted(asked) == [("orders", 0), ("orders", 1)]
    finally:
        await c.stop()


@run_async
async def test_txn_offsets_go_alone_as_the_producers_batch_and_count_after_its_marker() -> None:
    fake = FakeLog()
    c = await started(fake)
    try:
        fake.gate.clear()
        plain = asyncio.create_task(c.commit(OffsetCommitRequest("g", {TP0: OffsetAndMetadata(1)})))
        req = TxnOffsetCommitRequest("g", 7, 2, {TopicPartition("orders", 1): OffsetAndMetadata(5)})
        first = asyncio.create_task(c.txn_commit(req, "tx"))
        second = asyncio.create_task(c.txn_commit(req, "tx"))
        await asyncio.sleep(0.05)
        fake.gate.set()
        assert await plain == await first == await second == ErrorCode.NONE
        # Each transactional batch alone, numbered on from the producer's last one here.
        assert fake.txns[-3:] == [None, TxnAppend(7, 2, 0, "tx"), TxnAppend(7, 2, 1, "tx")]
        assert set(await c.fetch_offsets("g", None)) == {TP0}  # pending
        with pytest.raises(CoordinatorError) as e:  # KIP-447: a taker-over must wait
            await c.fetch_offsets("g", None, require_stable=True)
        assert e.value.code == "UNSTABLE_OFFSET_COMMIT"
        c.on_txn_marker(0, 7, 3, True)
        got = await c.fetch_offsets("g", None, require_stable=True)
        assert got[TopicPartition("orders", 1)].offset == 5
        # A new epoch (the end of the transaction bumped it) starts at sequence 0 again.
        await c.txn_commit(TxnOffsetCommitRequest("g", 7, 3, req.offsets), "tx")
        assert fake.txns[-1] == TxnAppend(7, 3, 0, "tx")
    finally:
        await c.stop()


@run_async
async def test_loading_replays_txn_batches_as_pending_and_markers_as_completions() -> None:
    fake = FakeLog()
    now = wall_clock_ms()  # offsets older than the retention would expire at once
    k, v = encode_record(OffsetCommitRecord("g", "orders", 0, 5, "", now))
    k2, v2 = encode_record(OffsetCommitRecord("g", "orders", 1, 6, "", now))
    fake.logs[0] = [
        TxnKeyValue(k, v, 7, 2, 0),  # type: ignore[list-item]
        TxnKeyValue(k2, v2, 8, 0, 4),  # type: ignore[list-item]
        LoggedMarker(7, 3, True),  # type: ignore[list-item]
    ]
    c = await started(fake)
    try:
        got = await c.fetch_offsets("g", None)
        assert {tp: o.offset for tp, o in got.items()} == {TP0: 5}  # producer 8 still open
        await c.txn_commit(TxnOffsetCommitRequest("g", 8, 0, {TP0: OffsetAndMetadata(9)}), "t8")
        assert fake.txns[-1] == TxnAppend(8, 0, 5, "t8")  # numbered on from the log
    finally:
        await c.stop()
