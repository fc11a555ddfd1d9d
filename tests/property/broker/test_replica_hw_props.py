"""LeaderState against a model cluster: followers that fetch and lag, a controller that
commits, refuses, fences and publishes registrations late, answers that are lost and resent.

Properties after every step:

* the HW never decreases and never passes the leader's LEO;
* whenever it advances, it is <= the last reported LEO of every member of the maximal ISR,
  and (KIP-966) the committed ISR is at least ``min.insync.replicas``;
* safety: every member of the ISR *the controller holds* (those it may elect) really holds
  every offset below the HW;
* acks=all waiters complete exactly when the HW passes them, never earlier.
"""

from __future__ import annotations

import dataclasses

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from replication_harness import TOPIC, make_leader

from broker.replica_state import AlterOutcome
from metalog.errors import IneligibleReplicaError, InvalidUpdateVersionError, NotControllerError
from metalog.image import PartitionRegistration
from metalog.records import BrokerId, PartitionEpoch
from metalog.responses import AlterPartitionResult

FOLLOWERS = (2, 3, 4)
LAG = 1_000


class LeaderMachine(RuleBasedStateMachine):
    @initialize(min_isr=st.integers(1, 3), isr_size=st.integers(1, 4), gate=st.booleans())
    def start(self, min_isr, isr_size, gate) -> None:
        isr = (1, 2, 3, 4)[:isr_size]
        self.s = make_leader(
            (1, 2, 3, 4), isr, leo=0, lag_ms=LAG, min_isr=min_isr, hw_requires_min_isr=gate
        )
        self.now = 0
        self.true_leo = dict.fromkeys(FOLLOWERS, 0)  # what each follower really holds
        self.controller = self.s.registration  # the controller's truth
        self.fenced: set[int] = set()
        self.in_flight = None  # request sent, not answered
        self.answers: list = []  # (request, result) not delivered
        self.waiters: dict[int, int] = {}  # id -> last_offset
        self.prev_hw = self.s.high_watermark

    # ---------------------------------------------------------------- the world

    @rule(n=st.integers(1, 5))
    def produce(self, n) -> None:
        self.s.on_local_append(self.s.log_end_offset + n, self.now)

    @rule(n=st.integers(1, 5))
    def produce_acks_all(self, n) -> None:
        try:
            self.s.check_append_or_raise(-1)
        except Exception:
            return
        self.s.on_local_append(self.s.log_end_offset + n, self.now)
        last = self.s.log_end_offset - 1
        self.waiters[self.s.add_waiter(last, self.now + 50 * LAG)] = last

    @rule(f=st.sampled_from(FOLLOWERS), n=st.integers(0, 6))
    def follower_fetches(self, f, n) -> None:
        if f in self.fenced:
            return
        # The fetch reports what it holds; the response then gives it up to n more records.
        self.s.on_follower_fetch(
            BrokerId(f), self.true_leo[f], leader_epoch=self.s.leader_epoch, now_ms=self.now
        )
        self.true_leo[f] = min(self.s.log_end_offset, self.true_leo[f] + n)

    @rule(dt=st.integers(1, LAG))
    def time_passes(self, dt) -> None:
        self.now += dt
        self.s.poll(self.now)

    @rule()
    def maybe_shrink(self) -> None:
        change = self.s.maybe_shrink_isr(self.now)
        if change is not None:
            self.in_flight = change

    @rule(f=st.sampled_from(FOLLOWERS))
    def maybe_expand(self, f) -> None:
        change = self.s.maybe_expand_isr(BrokerId(f))
        if change is not None:
            self.in_flight = change

    @precondition(lambda self: self.s.pending is not None)
    @rule()
    def controller_handles_the_request(self) -> None:
        req = self.s.pending.request
        reg = self.controller
        if req.partition_epoch != reg.partition_epoch:
            result = AlterPartitionResult(TOPIC, 0, error=InvalidUpdateVersionError("stale"))
        elif any(m.broker_id in self.fenced for m in req.new_isr):
            result = AlterPartitionResult(TOPIC, 0, error=IneligibleReplicaError("fenced"))
        else:
            self.controller = dataclasses.replace(
                reg,
                isr=tuple(m.broker_id for m in req.new_isr),
                partition_epoch=PartitionEpoch(reg.partition_epoch + 1),
                leader_recovery_state=req.leader_recovery_state,
            )
            result = AlterPartitionResult(TOPIC, 0, registration=self.controller)
        self.answers.append((req, result))

    @precondition(lambda self: self.s.pending is not None)
    @rule()
    def controller_unreachable(self) -> None:
        self.answers.append(
            (self.s.pending.request, AlterPartitionResult(TOPIC, 0, error=NotControllerError("x")))
        )

    @precondition(lambda self: bool(self.answers))
    @rule(lost=st.booleans())
    def answer_arrives(self, lost) -> None:
        req, result = self.answers.pop(0)
        if not lost:
            outcome = self.s.on_alter_partition_result(req, result, self.now)
            assert outcome is not AlterOutcome.APPLIED or self.s.registration == result.registration

    @rule(f=st.sampled_from(FOLLOWERS))
    def controller_fences(self, f) -> None:
        self.fenced.add(f)
        reg = self.controller
        if f in reg.isr:
            self.controller = dataclasses.replace(
                reg,
                isr=tuple(b for b in reg.isr if b != f),
                partition_epoch=PartitionEpoch(reg.partition_epoch + 1),
            )

    @rule(f=st.sampled_from(FOLLOWERS))
    def controller_unfences(self, f) -> None:
        self.fenced.discard(f)

    @rule()
    def metadata_arrives(self) -> None:
        self.s.on_registration(self.controller, self.now)
        self.s.set_ineligible_replicas([BrokerId(f) for f in self.fenced], self.now)

    # ---------------------------------------------------------------- properties

    @invariant()
    def hw_is_monotonic_and_bounded(self) -> None:
        s = self.s
        hw = s.high_watermark
        assert self.prev_hw <= hw <= s.log_end_offset
        if hw > self.prev_hw:
            for b in s.maximal_isr:
                if b != 1:
                    assert s.follower(b).log_end_offset >= hw
            if s.config.hw_requires_min_isr:
                assert len(s.isr) >= s.effective_min_isr
        self.prev_hw = hw

    @invariant()
    def every_electable_replica_holds_every_committed_offset(self) -> None:
        reg: PartitionRegistration = self.controller
        for b in reg.isr:
            if b != 1:
                assert self.true_leo[b] >= self.s.high_watermark, (b, reg.isr)

    @invariant()
    def waiters_complete_exactly_when_the_hw_passes_them(self) -> None:
        for ack in self.s.drain_acks():
            last = self.waiters.pop(ack.waiter_id)
            assert last == ack.last_offset
            if ack.error is None:
                assert self.s.high_watermark > last
        assert self.s.waiter_count == len(self.waiters)
        for last in self.waiters.values():
            assert last >= self.s.high_watermark


LeaderMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=50)
test_leader_state_machine = LeaderMachine.TestCase
