"""Helpers for the broker replication and producer-state tests (imported by bare name from
tests/unit/broker and tests/property/broker).

``EpochHistory`` is a model of one replica's log reduced to what replication looks at: the
leader epoch cache (``(epoch, start_offset)`` entries) and the log end offset. Its
``end_offset_for_epoch`` has the semantics of ``storage.epoch_cache.LeaderEpochCache`` (a
property test checks they agree), so ``FollowerState`` can be driven without files.
"""

from __future__ import annotations

from collections.abc import Iterable

from broker.replica_state import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    FollowerPhase,
    FollowerState,
    LeaderState,
    ReplicationConfig,
    TruncationStep,
)
from metalog.image import PartitionRegistration
from metalog.records import BrokerId, LeaderEpoch, PartitionEpoch, TopicId
from storage.batch import BatchHeader

TOPIC = TopicId("AAAAAAAAAAAAAAAAAAAAAA")


def b(*ids: int) -> tuple[BrokerId, ...]:
    return tuple(BrokerId(i) for i in ids)


def registration(
    replicas: Iterable[int],
    isr: Iterable[int],
    leader: int,
    *,
    leader_epoch: int = 1,
    partition_epoch: int = 0,
    recovery: int = 0,
) -> PartitionRegistration:
    return PartitionRegistration(
        replicas=b(*replicas),
        isr=b(*isr),
        leader=BrokerId(leader),
        leader_epoch=LeaderEpoch(leader_epoch),
        partition_epoch=PartitionEpoch(partition_epoch),
        leader_recovery_state=recovery,
    )


def make_leader(
    replicas: Iterable[int] = (1, 2, 3),
    isr: Iterable[int] | None = None,
    *,
    leader: int = 1,
    leo: int = 0,
    hw: int = 0,
    now_ms: int = 0,
    min_isr: int = 1,
    lag_ms: int = 30_000,
    hw_requires_min_isr: bool = True,
    leader_epoch: int = 1,
    partition_epoch: int = 0,
    recovery: int = 0,
) -> LeaderState:
    replicas = tuple(replicas)
    reg = registration(
        replicas,
        replicas if isr is None else isr,
        leader,
        leader_epoch=leader_epoch,
        partition_epoch=partition_epoch,
        recovery=recovery,
    )
    return LeaderState(
        topic_id=TOPIC,
        partition=0,
        local_broker_id=BrokerId(leader),
        registration=reg,
        log_end_offset=leo,
        high_watermark=hw,
        now_ms=now_ms,
        config=ReplicationConfig(
            replica_lag_time_ms_max=lag_ms,
            min_insync_replicas=min_isr,
            hw_requires_min_isr=hw_requires_min_isr,
        ),
    )


def fetch(state: LeaderState, follower: int, offset: int, now_ms: int = 0) -> bool:
    return state.on_follower_fetch(
        BrokerId(follower), offset, leader_epoch=state.leader_epoch, now_ms=now_ms
    )


class EpochHistory:
    """A replica's log as epoch cache entries and a log end offset (see module docstring)."""

    def __init__(self, entries: Iterable[tuple[int, int]] = (), log_end_offset: int = 0):
        self.entries = list(entries)
        self.log_end_offset = log_end_offset

    def __repr__(self) -> str:
        return f"EpochHistory({self.entries}, leo={self.log_end_offset})"

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """``epoch`` starts at ``start_offset``; later-starting entries are superseded (as
        ``LeaderEpochCache.assign``: a leader that wrote nothing leaves no trace)."""
        if self.entries and self.entries[-1][0] >= epoch:
            return
        self.entries = [(e, o) for e, o in self.entries if o < start_offset]
        self.entries.append((epoch, start_offset))

    def copy(self) -> EpochHistory:
        return EpochHistory(self.entries, self.log_end_offset)

    def append(self, epoch: int, count: int = 1) -> None:
        """``count`` records written by the leader of ``epoch``."""
        self.assign(epoch, self.log_end_offset)
        self.log_end_offset += count

    def truncate_to(self, offset: int) -> None:
        self.entries = [(e, o) for e, o in self.entries if o < offset]
        self.log_end_offset = min(self.log_end_offset, offset)

    def epoch_at(self, offset: int) -> int:
        epoch = UNDEFINED_EPOCH
        for e, o in self.entries:
            if o > offset:
                break
            epoch = e
        return epoch

    def epochs(self) -> list[int]:
        """The epoch of every offset in the log: the log itself, as far as tests care."""
        return [self.epoch_at(o) for o in range(self.log_end_offset)]

    def copy_from(self, leader: EpochHistory, upto: int) -> None:
        """Fetch the leader's records ``[log_end_offset, upto)``."""
        for o in range(self.log_end_offset, upto):
            self.append(leader.epoch_at(o))

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        if epoch == UNDEFINED_EPOCH or not self.entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if epoch == self.latest_epoch:
            return epoch, self.log_end_offset
        higher = next(((e, o) for e, o in self.entries if e > epoch), None)
        if higher is None:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        floor = [(e, o) for e, o in self.entries if e <= epoch]
        if not floor:
            return epoch, higher[1]
        return floor[-1][0], higher[1]


def run_truncation(
    follower: EpochHistory,
    leader: EpochHistory,
    *,
    hw: int = 0,
    leader_id: int = 1,
    leader_epoch: int | None = None,
) -> tuple[FollowerState, list[TruncationStep]]:
    """Become follower of ``leader`` and run OffsetsForLeaderEpoch rounds to the end,
    truncating ``follower`` as told. Returns the state and every step taken."""
    fs = FollowerState(
        leader_id=BrokerId(leader_id),
        leader_epoch=leader.latest_epoch if leader_epoch is None else leader_epoch,
        high_watermark=hw,
        log=follower,
    )
    steps = [fs.first_step]
    step = fs.first_step
    for _ in range(100):
        if step.truncate_to is not None:
            follower.truncate_to(step.truncate_to)
        if step.query_epoch is None:
            assert fs.phase is FollowerPhase.FETCHING
            return fs, steps
        epoch, end = leader.end_offset_for_epoch(step.query_epoch)
        step = fs.on_epoch_end_offset(epoch, end, follower)
        steps.append(step)
    raise AssertionError("truncation did not converge")


def header(
    producer_id: int = 7,
    producer_epoch: int = 0,
    base_sequence: int = 0,
    count: int = 1,
    *,
    base_offset: int = 0,
    timestamp_ms: int = 0,
) -> BatchHeader:
    """A batch header as a client sends it (or, with ``base_offset``, as the log holds it)."""
    return BatchHeader(
        base_offset=base_offset,
        batch_length=49 + count,
        leader_epoch=0,
        magic=0x4C,
        crc=0,
        attributes=0,
        last_offset_delta=count - 1,
        first_timestamp=timestamp_ms,
        max_timestamp=timestamp_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        record_count=count,
    )
