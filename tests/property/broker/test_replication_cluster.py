"""The cores composed as docs/replication.md tells the shell to compose them: three replicas of
one partition, a controller that fences crashed brokers and elects leaders cleanly from the
ISR, producers writing with acks=all, followers truncating (KIP-101/KIP-279) and fetching,
leaders shrinking and expanding the ISR through AlterPartition, crashes and restarts.

The controller commits an AlterPartition in one step and the answer (with the metadata) reaches
the brokers in a later one, so a crash can fall in between and the controller elect a replica
the leader does not know is in the ISR yet. Leader changes reach the brokers at once. Logs
survive crashes (the storage tests cover lost unflushed data). Properties after every step
(KIP-101 logs match, KIP-966 acknowledged data never lost):

* every acknowledged write is in the current leader's log at the offset it was given;
* every follower agrees with the leader below its own HW;
* a leader's HW never decreases during its term.
"""

from __future__ import annotations

import dataclasses

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from replication_harness import TOPIC, EpochHistory

from broker.errors import NotEnoughReplicasError
from broker.replica_state import (
    FollowerPhase,
    FollowerState,
    LeaderState,
    ReplicationConfig,
    TruncationStep,
)
from metalog.commands import PartitionStateChange
from metalog.errors import IneligibleReplicaError, InvalidUpdateVersionError
from metalog.image import PartitionRegistration
from metalog.records import NO_LEADER, BrokerId, LeaderEpoch, PartitionEpoch
from metalog.responses import AlterPartitionResult

R = (1, 2, 3)
LAG = 1_000


class SimLog(EpochHistory):
    """A log holding values: the epoch history plus what each offset holds."""

    def __init__(self) -> None:
        super().__init__()
        self.vals: list[int] = []

    def append_value(self, epoch: int, value: int) -> None:
        self.append(epoch)
        self.vals.append(value)

    def truncate_to(self, offset: int) -> None:
        super().truncate_to(offset)
        del self.vals[offset:]

    def fetch_from(self, leader: SimLog, upto: int) -> None:
        for o in range(self.log_end_offset, upto):
            self.append_value(leader.epoch_at(o), leader.vals[o])


class Cluster(RuleBasedStateMachine):
    @initialize(min_isr=st.integers(1, 2))
    def start(self, min_isr) -> None:
        self.now = 0
        self.min_isr = min_isr
        self.logs = {r: SimLog() for r in R}
        self.alive = set(R)
        self.hw = dict.fromkeys(R, 0)
        self.reg = PartitionRegistration(
            replicas=tuple(BrokerId(r) for r in R),
            isr=tuple(BrokerId(r) for r in R),
            leader=BrokerId(1),
            leader_epoch=LeaderEpoch(0),
            partition_epoch=PartitionEpoch(0),
        )
        self.seen = (
            self.reg
        )  # what the brokers last saw        self.leader: LeaderState | None = None
        self.followers: dict[int, FollowerState] = {}
        self.acked: dict[int, int] = {}
        self.waiting: dict[int, tuple[int, int]] = {}
        self.next_value = 0
        self.last_hw = (-1, 0)  # (leader epoch, hw)
        self.request: PartitionStateChange | None = None  # sent, not handled
        self.answer: tuple[PartitionStateChange, AlterPartitionResult] | None = None
        self._become_leader(1)
        for r in (2, 3):
            self._become_follower(r)

    # ---------------------------------------------------------------- the shell's moves

    @property
    def leader_id(self) -> int | None:
        return None if self.leader is None else self.leader.local_broker_id

    def _become_leader(self, r: int) -> None:
        log = self.logs[r]
        log.assign(self.reg.leader_epoch, log.log_end_offset)  # before any follower asks
        self.followers.pop(r, None)
        self.leader = LeaderState(
            topic_id=TOPIC,
            partition=0,
            local_broker_id=BrokerId(r),
            registration=self.reg,
            log_end_offset=log.log_end_offset,
            high_watermark=self.hw[r],
            now_ms=self.now,
            config=ReplicationConfig(replica_lag_time_ms_max=LAG, min_insync_replicas=self.min_isr),
            ineligible_replicas=[BrokerId(b) for b in R if b not in self.alive],
        )

    def _become_follower(self, r: int) -> None:
        fs = FollowerState(
            leader_id=self.reg.leader,
            leader_epoch=self.reg.leader_epoch,
            high_watermark=self.hw[r],
            log=self.logs[r],
        )
        self.followers[r] = fs
        self._apply(r, fs.first_step)

    def _apply(self, r: int, step: TruncationStep) -> None:
        if step.truncate_to is not None:
            self.logs[r].truncate_to(step.truncate_to)
        self.hw[r] = self.followers[r].high_watermark

    def _collect_acks(self) -> None:
        if self.leader is None:
            return
        for ack in self.leader.drain_acks():
            offset, value = self.waiting.pop(ack.waiter_id)
            if ack.error is None:
                self.acked[offset] = value

    def _publish(self, new: PartitionRegistration) -> None:
        """The controller commits ``new``; every live broker sees it at once."""
        old, self.reg = self.seen, new
        self.seen = new
        if self.leader is not None:
            self.leader.on_registration(new, self.now)
            self._collect_acks()
            if not self.leader.is_leader:
                self.hw[self.leader_id] = self.leader.high_watermark
                self.leader = None
        if new.leader_epoch != old.leader_epoch:
            if new.leader != NO_LEADER and new.leader in self.alive:
                self._become_leader(new.leader)
            for r in self.alive:
                if r != new.leader and new.leader != NO_LEADER:
                    self._become_follower(r)

    def _alter_partition(self, change: PartitionStateChange) -> None:
        self.request = change

    @rule()
    def controller_handles_alter_partition(self) -> None:
        change, self.request = self.request, None
        if change is None:
            return
        reg = self.reg
        if (change.partition_epoch, change.leader_epoch) != (reg.partition_epoch, reg.leader_epoch):
            result = AlterPartitionResult(TOPIC, 0, error=InvalidUpdateVersionError("stale"))
        elif any(m.broker_id not in self.alive for m in change.new_isr):
            result = AlterPartitionResult(TOPIC, 0, error=IneligibleReplicaError("fenced"))
        else:
            # Committed: the controller's truth changes now, the brokers learn it later.
            self.reg = dataclasses.replace(
                reg,
                isr=tuple(m.broker_id for m in change.new_isr),
                partition_epoch=PartitionEpoch(reg.partition_epoch + 1),
            )
            result = AlterPartitionResult(TOPIC, 0, registration=self.reg)
        self.answer = (change, result)

    @rule()
    def answer_and_metadata_arrive(self) -> None:
        if self.answer is None:
            return
        (change, result), self.answer = self.answer, None
        if self.leader is not None:
            self.leader.on_alter_partition_result(change, result, self.now)
            self._collect_acks()
        self._publish(self.reg)

    # ---------------------------------------------------------------- rules

    @rule(n=st.integers(1, 3))
    def produce_acks_all(self, n) -> None:
        if self.leader is None:
            return
        try:
            self.leader.check_append_or_raise(-1)
        except NotEnoughReplicasError:
            return
        log = self.logs[self.leader_id]
        for _ in range(n):
            log.append_value(self.leader.leader_epoch, self.next_value)
            self.leader.on_local_append(log.log_end_offset, self.now)
            wid = self.leader.add_waiter(log.log_end_offset - 1, self.now + 100 * LAG)
            self.waiting[wid] = (log.log_end_offset - 1, self.next_value)
            self.next_value += 1
        self._collect_acks()

    @rule(r=st.sampled_from(R), n=st.integers(0, 4))
    def follower_fetches(self, r, n) -> None:
        fs = self.followers.get(r)
        if fs is None or self.leader is None or r not in self.alive:
            return
        leader_log, log = self.logs[self.leader_id], self.logs[r]
        while fs.phase is FollowerPhase.TRUNCATING:
            assert fs.query_epoch is not None
            epoch, end = leader_log.end_offset_for_epoch(fs.query_epoch)
            self._apply(r, fs.on_epoch_end_offset(epoch, end, log))
        self.leader.on_follower_fetch(
            BrokerId(r), log.log_end_offset, leader_epoch=fs.leader_epoch, now_ms=self.now
        )
        self._collect_acks()
        change = self.leader.maybe_expand_isr(BrokerId(r))
        if change is not None:
            self._alter_partition(change)
        if self.leader is None:
            return
        log.fetch_from(leader_log, min(leader_log.log_end_offset, log.log_end_offset + n))
        fs.on_fetch_response(self.leader.high_watermark, log.log_end_offset)
        self.hw[r] = fs.high_watermark

    @rule(dt=st.integers(1, LAG))
    def time_passes(self, dt) -> None:
        self.now += dt
        if self.leader is None:
            return
        self.leader.poll(self.now)
        self._collect_acks()
        change = self.leader.maybe_shrink_isr(self.now)
        if change is not None:
            self._alter_partition(change)

    @rule(r=st.sampled_from(R), pick=st.integers(0, 2))
    def crash(self, r, pick) -> None:
        if r not in self.alive or len(self.alive) == 1:
            return
        self.alive.discard(r)
        self.followers.pop(r, None)
        if r == self.leader_id:
            assert self.leader is not None
            self.hw[r] = self.leader.high_watermark
            self.leader.resign()
            self._collect_acks()
            self.leader = None
        elif self.leader is not None:
            self.leader.set_ineligible_replicas(
                [BrokerId(b) for b in R if b not in self.alive], self.now
            )
            self._collect_acks()
        reg = self.reg
        isr = tuple(b for b in reg.isr if b != r)
        if reg.leader == r:
            # Clean election only: an alive ISR member, else offline with the last ISR kept.
            candidates = [b for b in isr if b in self.alive]
            leader = candidates[pick % len(candidates)] if candidates else NO_LEADER
            new = dataclasses.replace(
                reg,
                leader=leader,
                isr=isr if candidates else reg.isr,
                leader_epoch=LeaderEpoch(reg.leader_epoch + 1),
                partition_epoch=PartitionEpoch(reg.partition_epoch + 1),
            )
        elif r in reg.isr:
            new = dataclasses.replace(
                reg, isr=isr, partition_epoch=PartitionEpoch(reg.partition_epoch + 1)
            )
        else:
            return
        self._publish(new)

    @rule(r=st.sampled_from(R))
    def restart(self, r) -> None:
        if r in self.alive:
            return
        self.alive.add(r)
        reg = self.reg
        if reg.leader == NO_LEADER:
            if r in reg.isr:
                self._publish(
                    dataclasses.replace(
                        reg,
                        leader=BrokerId(r),
                        isr=(BrokerId(r),),
                        leader_epoch=LeaderEpoch(reg.leader_epoch + 1),
                        partition_epoch=PartitionEpoch(reg.partition_epoch + 1),
                    )
                )
            return
        assert self.leader is not None
        self.leader.set_ineligible_replicas(
            [BrokerId(b) for b in R if b not in self.alive], self.now
        )
        self._collect_acks()
        self._become_follower(r)

    # ---------------------------------------------------------------- properties

    @invariant()
    def acknowledged_writes_are_in_the_leaders_log(self) -> None:
        if self.leader is None:
            return
        vals = self.logs[self.leader_id].vals
        for offset, value in self.acked.items():
            assert offset < len(vals) and vals[offset] == value, (offset, value, vals)

    @invariant()
    def followers_agree_with_the_leader_below_their_hw(self) -> None:
        if self.leader is None:
            return
        lead = self.logs[self.leader_id].vals
        for r, fs in self.followers.items():
            if r in self.alive:
                hw = fs.high_watermark
                assert self.logs[r].vals[:hw] == lead[:hw], r

    @invariant()
    def leader_hw_is_monotonic_within_its_term(self) -> None:
        if self.leader is None:
            return
        epoch, hw = self.leader.leader_epoch, self.leader.high_watermark
        if epoch == self.last_hw[0]:
            assert hw >= self.last_hw[1]
        self.last_hw = (epoch, hw)


Cluster.TestCase.settings = settings(max_examples=120, stateful_step_count=50)
test_replication_cluster = Cluster.TestCase
