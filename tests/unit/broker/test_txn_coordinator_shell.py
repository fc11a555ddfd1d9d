"""The transaction coordinator shell against a fake ``__transaction_state`` log and a fake
marker writer: answers only once their record is committed, markers then COMPLETE_*, a new
leader completing what its predecessor prepared, timeouts, failed appends, routing. The
rules of transactions themselves are the core's (tests/unit/txn)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest

from broker.group_coordinator import (
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    NOT_COORDINATOR,
    CoordinatorError,
    KeyValue,
    Leadership,
    partition_for,
)
from broker.groups.types import TopicPartition
from broker.txn.records import (
    TRANSACTION_STATE_TOPIC,
    TxnMetadata,
    TxnState,
    decode_txn,
    encode_txn,
)
from broker.txn_coordinator import TxnCoordinator, TxnCoordinatorConfig, TxnRequestError
from broker.txn_markers import TxnMarker
from metalog.commands import CreateTopic
from metalog.delta import MetadataDelta
from metalog.image import MetadataImage
from metalog.records import Endpoint, PartitionRecord, RegisterBrokerRecord, TopicRecord

T = "tx-1"
A0, B0 = TopicPartition("a", 0), TopicPartition("b", 0)


class FakeLog:
    def __init__(self) -> None:
        self.leaders: dict[int, Leadership] = {0: Leadership("tid", 0)}
        self.logs: dict[int, list[KeyValue]] = {0: []}
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail: str | None = None
        self.fail_next: str | None = None
        """Fails one append, the next one to pass the gate."""
        self.waiting = 0
        """Appends issued and not yet through the gate."""

    def leadership(self, partition: int) -> Leadership | None:
        return self.leaders.get(partition)

    async def read(self, partition: int, lead: Leadership) -> tuple[list[KeyValue], int]:
        return list(self.logs[partition]), len(self.logs[partition])

    async def wait_high_watermark(self, partition: int, lead: Leadership, offset: int) -> None:
        return None

    async def append(
        self, partition: int, lead: Leadership, records: list[KeyValue], ts: int, timeout_ms: int
    ) -> None:
        self.waiting += 1
        try:
            await self.gate.wait()
        finally:
            self.waiting -= 1
        if self.fail_next is not None:
            code, self.fail_next = self.fail_next, None
            raise CoordinatorError(code)
        if self.fail is not None:
            raise CoordinatorError(self.fail)
        self.logs[partition].extend(records)

    def states(self) -> list[str]:
        out = []
        for k, v in self.logs[0]:
            assert k is not None
            m = decode_txn(k, v)
            out.append(m.state.value if isinstance(m, TxnMetadata) else "tombstone")
        return out


class FakeMarkers:
    def __init__(self) -> None:
        self.written: list[TxnMarker] = []
        self.refuse: dict[tuple[str, int], str] = {}
        self.gate = asyncio.Event()
        self.gate.set()

    async def write_txn_markers(
        self, markers: Sequence[TxnMarker]
    ) -> dict[tuple[str, int], str | None]:
        await self.gate.wait()
        out: dict[tuple[str, int], str | None] = {}
        for m in markers:
            err = self.refuse.get((m.topic, m.partition))
            if err is None:
                self.written.append(m)
            out[(m.topic, m.partition)] = err
        return out


def image(leader: int = 1, topics: Sequence[str] = ("a", "b")) -> MetadataImage:
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
    d.replay(TopicRecord(name=TRANSACTION_STATE_TOPIC, topic_id="tid"), 3)
    d.replay(
        PartitionRecord(topic_id="tid", partition=0, replicas=(1, 2), isr=(1, 2), leader=leader),
        4,
    )
    off = 5
    for t in topics:
        d.replay(TopicRecord(name=t, topic_id=f"{t}-id"), off)
        d.replay(
            PartitionRecord(topic_id=f"{t}-id", partition=0, replicas=(1,), isr=(1,), leader=1),
            off + 1,
        )
        off += 2
    return d.apply()


async def until(cond: Callable[[], Any], timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not cond():
            await asyncio.sleep(0.005)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


async def started(
    fake: FakeLog,
    markers: FakeMarkers,
    clock: Clock | None = None,
    img: Any = None,
    announce: Any = None,
) -> TxnCoordinator:
    async def create(cmd: CreateTopic) -> None:
        raise AssertionError("the topic exists")

    pids = iter(range(100, 1000))

    async def next_pid() -> int:
        return next(pids)

    c = TxnCoordinator(
        broker_id=1,
        txn_log=fake,
        image=img or image,
        create_topic=create,
        next_producer_id=next_pid,
        markers=markers,
        config=TxnCoordinatorConfig(abort_timed_out_interval_ms=10),
        clock=clock or Clock(),
        announce=announce,
    )
    await c.start()
    await until(lambda: 0 in c.shards and c.shards[0].state is not None)
    return c


def run_async(fn: Callable[[], Awaitable[None]]) -> Callable[[], None]:
    @functools.wraps(fn)
    def test() -> None:
        asyncio.run(fn())  # type: ignore[arg-type]

    return test


@run_async
async def test_a_commit_writes_prepare_then_markers_then_complete() -> None:
    fake, markers = FakeLog(), FakeMarkers()
    c = await started(fake, markers)
    try:
        r = await c.init_producer_id(T, 60_000)
        await c.add_partitions(T, r.producer_id, r.producer_epoch, [A0, B0])
        nxt = await c.end_txn(T, r.producer_id, r.producer_epoch, commit=True)
        assert (nxt.producer_id, nxt.producer_epoch) == (r.producer_id, r.producer_epoch + 1)
        await until(lambda: fake.states()[-1] == "CompleteCommit")
        assert fake.states() == ["Empty", "Ongoing", "PrepareCommit", "CompleteCommit"]
        assert sorted(markers.written, key=lambda m: (m.topic, m.partition)) == [
            TxnMarker("a", 0, r.producer_id, r.producer_epoch + 1, True, 0),
            TxnMarker("b", 0, r.producer_id, r.producer_epoch + 1, True, 0),
        ]
    finally:
        await c.stop()


@run_async
async def test_an_answer_waits_for_its_record_to_be_committed() -> None:
    fake, markers = FakeLog(), FakeMarkers()
    c = await started(fake, markers)
    try:
        r = await c.init_producer_id(T, 60_000)
        fake.gate.clear()
        add = asyncio.create_task(c.add_partitions(T, r.producer_id, r.producer_epoch, [A0]))
        await asyncio.sleep(0.05)
        assert not add.done()
        # Meanwhile the id is busy: concurrent requests are told to retry.
        with pytest.raises(TxnRequestError) as e:
            await c.end_txn(T, r.producer_id, r.producer_epoch, commit=True)
        assert e.value.code == "CONCURRENT_TRANSACTIONS"
        assert c.verify(T, r.producer_id, r.producer_epoch, A0) == "INVALID_TXN_STATE"
        fake.gate.set()
        await add
        assert c.verify(T, r.producer_id, r.producer_epoch, A0) is None
    finally:
        await c.stop()


@run_async
async def test_leaders_hear_of_added_partitions_only_once_the_ongoing_is_committed() -> None:
    fake, markers = FakeLog(), FakeMarkers()
    heard: list[tuple[int, int, list[TopicPartition]]] = []

    async def announce(pid: int, epoch: int, parts: Sequence[TopicPartition]) -> None:
        heard.append((pid, epoch, list(parts)))

    c = await started(fake, markers, announce=announce)
    try:
        r = await c.init_producer_id(T, 60_000)
        pid, e = r.producer_id, r.producer_epoch
        # Not before this producer's first end has bumped the epoch (see below).
        await c.add_partitions(T, pid, e, [A0])
        await c.end_txn(T, pid, e, commit=True)
        # The next transaction's add, chained behind the completion: its epoch, all of it.
        await c.add_partitions(T, pid, e + 1, [A0])
        await until(lambda: len(heard) == 1)
        assert heard == [(pid, e + 1, [A0])]
        assert fake.states()[-2:] == ["CompleteCommit", "Ongoing"]
        fake.gate.clear()
        add = asyncio.create_task(c.add_partitions(T, pid, e + 1, [A0, B0]))
        await until(lambda: fake.waiting == 1)
        await asyncio.sleep(0.02)
        assert len(heard) == 1  # a leader told before the commit could open a hanging txn
        fake.gate.set()
        await add
        await until(lambda: len(heard) == 2)
        assert heard[1] == (pid, e + 1, [B0])  # only what this write added
        # A write that fails is announced to nobody.
        await c.end_txn(T, pid, e + 1, commit=False)
        await until(lambda: fake.states()[-1] == "CompleteAbort")
        fake.fail = "NOT_ENOUGH_REPLICAS"
        with pytest.raises(CoordinatorError):
            await c.add_partitions(T, pid, e + 2, [B0])
        fake.fail = None
        await until(lambda: 0 in c.shards and c.shards[0].state is not None)
        # Nor, in a new leadership, before an end it decided bumped the epoch; nor after an
        # end without the bump (Kafka's first protocol): the next transaction keeps the
        # epoch of the marker before it, so a late announcement would look current.
        await c.add_partitions(T, pid, e + 2, [B0])
        await c.end_txn(T, pid, e + 2, commit=True, bump_epoch=False)
        await until(lambda: fake.states()[-1] == "CompleteCommit")
        await c.add_partitions(T, pid, e + 2, [A0])
        await asyncio.sleep(0.05)
        assert len(heard) == 2
    finally:
        await c.stop()


@run_async
async def test_markers_are_retried_until_every_partition_has_one() -> None:
    fake, markers = FakeLog(), FakeMarkers()
    c = await started(fake, markers)
    try:
        r = await c.init_producer_id(T, 60_000)
        await c.add_partitions(T, r.producer_id, r.producer_epoch, [A0, B0])
        markers.refuse[("b", 0)] = "NOT_LEADER_OR_FOLLOWER"
        await c.end_txn(T, r.producer_id, r.producer_epoch, commit=False)
        await asyncio.sleep(0.3)
        assert fake.states()[-1] == "PrepareAbort"  # not complete while b-0 has none
        del markers.refuse[("b", 0)]
        await until(lambda: fake.states()[-1] == "CompleteAbort")
        assert {(m.topic, m.commit) for m in markers.written} == {("a", False), ("b", False)}
    finally:
        await c.stop()


@run_async
async def test_a_new_leader_completes_what_the_old_one_prepared() -> None:
    fake, markers = FakeLog(), FakeMarkers()
    prepared = TxnMetadata(T, 7, 3, 60_000, TxnState.PREPARE_COMMIT, frozenset({A0, B0}), 1, 2)
    fake.logs[0] = [
        encode_txn(prepared.with_(state=TxnState.ONGOING, producer_epoch=2)),
        encode_txn(prepared),
    ]
    fake.leaders[0] = Leadership("tid", 5)
    c = await started(fake, markers)
    try:
        await until(lambda: fake.states()[-1] == "CompleteCommit")
        # The markers carry the new coordinator's epoch and the bumped producer epoch.
        assert sorted(markers.written, key=lambda m: (m.topic, m.partition)) == [
            TxnMarker("a", 0, 7, 3, True, 5),
            TxnMarker("b", 0, 7, 3, True, 5),
        ]
        r = await c.init_producer_id(T, 60_000)
        assert (r.producer_id, r.producer_epoch) == (7, 4)
    finally:
        await c.stop()


@run_async
async def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced() -> None:
    fake, markers, clock = FakeLog(), FakeMarkers(), Clock()
    c = await started(fake, markers, clock)
    try:
        r = await c.init_producer_id(T, 1_000)
        await c.add_partitions(T, r.producer_id, r.producer_epoch, [A0])
        await asyncio.sleep(0.1)
        assert fake.states()[-1] == "Ongoing"
        clock.now += 1_000
        await until(lambda: fake.states()[-1] == "CompleteAbort")
        assert markers.written == [TxnMarker("a", 0, r.producer_id, r.producer_epoch + 1, False, 0)]
        with pytest.raises(TxnRequestError) as e:
            await c.end_txn(T, r.producer_id, r.producer_epoch, commit=True)
        assert e.value.code == "PRODUCER_FENCED"
    finally:
        await c.stop()


@run_async
async def test_a_zombie_is_fenced_and_its_open_transaction_aborted() -> None:
    fake, markers = FakeLog(), FakeMarkers()
    c = await started(fake, markers)
    try:
        zombie = await c.init_producer_id(T, 60_000)
        await c.add_partitions(T, zombie.producer_id, zombie.producer_epoch, [A0])
        with pytest.raises(TxnRequestError) as e:
            await c.init_producer_id(T, 60_000)
        assert e.value.code == "CONCURRENT_TRANSACTIONS"
        await until(lambda: fake.states()[-1] == "CompleteAbort")
        fresh = await c.init_producer_id(T, 60_000)
        assert fresh.producer_epoch == zombie.producer_epoch + 2
        for call in (
            c.add_partitions(T, zombie.producer_id, zombie.producer_epoch, [A0]),
            c.end_txn(T, zombie.producer_id, zombie.producer_epoch, True),
        ):
            with pytest.raises(TxnRequestError) as e:
                await call
            assert e.value.code == "PRODUCER_FENCED"
        assert c.verify(T, zombie.producer_id, zombie.producer_epoch, A0) == "PRODUCER_FENCED"
    finally:
        await c.stop()


@run_async
async def test_a_failed_append_changes_nothing_and_reloads_from_the_log() -> None:
    fake, markers = FakeLog(), FakeMarkers()
    c = await started(fake, markers)
    try:
        r = await c.init_producer_id(T, 60_000)
        fake.fail = "NOT_ENOUGH_REPLICAS"
        with pytest.raises(CoordinatorError) as e:
            await c.add_partitions(T, r.producer_id, r.producer_epoch, [A0])
        assert e.value.code == COORDINATOR_NOT_AVAILABLE
        fake.fail = None
        await until(lambda: 0 in c.shards and c.shards[0].state is not None)
        m = c.describe(T)
        assert m is not None and m.state is TxnState.EMPTY
        await c.add_partitions(T, r.producer_id, r.producer_epoch, [A0])
    finally:
        await c.stop()


@run_async
async def test_leadership_lost_means_not_coordinator_with_the_new_leader() -> None:
    fake, markers = FakeLog(), FakeMarkers()
    img = image()
    c = await started(fake, markers, img=lambda: img)
    try:
        await c.init_producer_id(T, 60_000)
        del fake.leaders[0]
        img = image(leader=2)
        await c.on_metadata(None)
        await until(lambda: 0 not in c.shards)
        with pytest.raises(CoordinatorError) as e:
            await c.init_producer_id(T, 60_000)
        assert e.value.code == NOT_COORDINATOR and e.value.coordinator_id == 2
        fake.leaders[0] = Leadership("tid", 1)
        img = image(leader=1)
        with pytest.raises(CoordinatorError) as e:
            await c.init_producer_id(T, 60_000)
        assert e.value.code == COORDINATOR_LOAD_IN_PROGRESS
    finally:
        await c.stop()


@run_async
async def test_markers_for_a_deleted_topic_are_skipped() -> None:
    fake, markers = FakeLog(), FakeMarkers()
    img = image()
    c = await started(fake, markers, img=lambda: img)
    try:
        r = await c.init_producer_id(T, 60_000)
        await c.add_partitions(T, r.producer_id, r.producer_epoch, [A0, B0])
        markers.refuse[("b", 0)] = "UNKNOWN_TOPIC_OR_PARTITION"
        img = image(topics=("a",))
        await c.end_txn(T, r.producer_id, r.producer_epoch, commit=True)
        await until(lambda: fake.states()[-1] == "CompleteCommit")
        assert [m.topic for m in markers.written] == ["a"]
    finally:
        await c.stop()


def test_transactional_ids_land_where_kafka_puts_them() -> None:
    # Kafka's partitionFor: Utils.abs(transactionalId.hashCode) % partitions.
    assert partition_for("kafka-txn-0", 50) == 30


@run_async
async def test_a_cancelled_request_still_settles_its_write() -> None:
    fake, markers = FakeLog(), FakeMarkers()
    c = await started(fake, markers)
    try:
        r = await c.init_producer_id(T, 60_000)
        fake.gate.clear()
        add = asyncio.create_task(c.add_partitions(T, r.producer_id, r.producer_epoch, [A0]))
        await asyncio.sleep(0.05)
        add.cancel()  # the client went away mid-write
        fake.gate.set()
        await until(lambda: fake.states()[-1] == "Ongoing")
        await until(lambda: T not in c.shards[0].state.pending)  # type: ignore[union-attr]
        await c.end_txn(T, r.producer_id, r.producer_epoch, commit=True)  # not stuck
    finally:
        await c.stop()


async def _committed_then_markers_held(
    fake: FakeLog, markers: FakeMarkers, c: TxnCoordinator
) -> tuple[int, int]:
    """A committed transaction whose markers wait on ``markers.gate``: the next pair."""
    r = await c.init_producer_id(T, 60_000)
    await c.add_partitions(T, r.producer_id, r.producer_epoch, [A0])
    markers.gate.clear()
    nxt = await c.end_txn(T, r.producer_id, r.producer_epoch, commit=True)
    return nxt.producer_id, nxt.producer_epoch


@run_async
async def test_the_next_add_is_appended_behind_the_completion_not_after_it() -> None:
    fake, markers = FakeLog(), FakeMarkers()
    c = await started(fake, markers)
    try:
        pid, epoch = await _committed_then_markers_held(fake, markers, c)
        add = asyncio.create_task(c.add_partitions(T, pid, epoch, [B0]))
        await asyncio.sleep(0.05)
        assert not add.done()  # the previous transaction's markers come first
        fake.gate.clear()
        markers.gate.set()
        # Both records are in flight at once: the add did not wait for the completion to
        # be committed (the old way: one append, then the other).
        await until(lambda: fake.waiting == 2)
        assert not add.done()  # answered only once its own record is committed
        fake.gate.set()
        await add
        assert fake.states()[-3:] == ["PrepareCommit", "CompleteCommit", "Ongoing"]
        m = c.describe(T)
        assert m is not None and m.state is TxnState.ONGOING and m.partitions == {B0}
        assert (m.producer_id, m.producer_epoch) == (pid, epoch)
        assert c.verify(T, pid, epoch, B0) is None
        await c.end_txn(T, pid, epoch, commit=True)  # the chain left nothing pending
    finally:
        await c.stop()


@run_async
async def test_an_add_chained_behind_a_failed_completion_is_retried_after_the_reload() -> None:
    fake, markers = FakeLog(), FakeMarkers()
    c = await started(fake, markers)
    try:
        pid, epoch = await _committed_then_markers_held(fake, markers, c)
        add = asyncio.create_task(c.add_partitions(T, pid, epoch, [B0]))
        await asyncio.sleep(0.05)
        fake.gate.clear()
        markers.gate.set()
        await until(lambda: fake.waiting == 2)
        # The completion is refused before it reaches the log; the add behind it is written
        # (a record after PrepareCommit whose markers are all written: as good as both).
        fake.fail_next = "NOT_ENOUGH_REPLICAS"
        fake.gate.set()
        with pytest.raises(CoordinatorError) as e:
            await add
        assert e.value.code == COORDINATOR_NOT_AVAILABLE
        assert fake.states()[-2:] == ["PrepareCommit", "Ongoing"]
        await until(lambda: 0 in c.shards and c.shards[0].state is not None)
        await c.add_partitions(T, pid, epoch, [B0])  # the retry: already in, nothing written
        assert fake.states() == ["Empty", "Ongoing", "PrepareCommit", "Ongoing"]
        await c.end_txn(T, pid, epoch, commit=True)
        await until(lambda: fake.states()[-1] == "CompleteCommit")
    finally:
        await c.stop()


@run_async
async def test_an_expired_id_gets_its_tombstone_and_starts_afresh() -> None:
    fake, markers, clock = FakeLog(), FakeMarkers(), Clock()
    c = await started(fake, markers, clock)
    try:
        r = await c.init_producer_id(T, 60_000)
        await c.add_partitions(T, r.producer_id, r.producer_epoch, [A0])
        await c.end_txn(T, r.producer_id, r.producer_epoch, commit=True)
        await until(lambda: fake.states()[-1] == "CompleteCommit")
        assert c.remove_expired() == 0
        clock.now += 7 * 24 * 3600 * 1000  # Kafka's default transactional.id.expiration.ms
        assert c.remove_expired() == 1
        await until(lambda: fake.states()[-1] == "tombstone")
        assert c.describe(T) is None
        again = await c.init_producer_id(T, 60_000)
        assert again.producer_id != r.producer_id and again.producer_epoch == 0
    finally:
        await c.stop()
