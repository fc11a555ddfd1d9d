"""LeaderState: the high watermark, ISR shrink and expand, AlterPartition answers,
min.insync.replicas and acks=all waiters (Kafka's Partition.scala rules, KIP-497, KIP-966)."""

from __future__ import annotations

import dataclasses

import pytest
from replication_harness import TOPIC, b, fetch, make_leader, registration

from broker.errors import (
    FencedLeaderEpochError,
    InvalidRequiredAcksError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    RequestTimedOutError,
    UnknownLeaderEpochError,
)
from broker.replica_state import AlterOutcome, IsrChangeKind
from common.invariant import InvariantError
from metalog.commands import IsrMember
from metalog.errors import FencedLeaderEpochError as ControllerFencedError
from metalog.errors import IneligibleReplicaError, InvalidUpdateVersionError, NotControllerError
from metalog.records import BrokerId, LeaderRecoveryState
from metalog.responses import AlterPartitionResult

LAG = 30_000

# --------------------------------------------------------------------------- high watermark


@pytest.mark.parametrize(
    ("isr", "fetches", "expected_hw"),
    [
        ((1, 2, 3), {2: 10, 3: 7}, 7),  # min over the ISR
        ((1, 2, 3), {2: 10, 3: 10}, 10),  # everyone at the leader's LEO
        ((1, 2, 3), {2: 10}, 0),  # 3 has not fetched from this leader yet
        ((1, 2), {2: 6, 3: 1}, 6),  # 3 is outside the ISR and never caught up
        ((1,), {}, 10),  # the leader alone
    ],
)
def test_hw_is_the_smallest_leo_over_the_isr(isr, fetches, expected_hw) -> None:
    s = make_leader((1, 2, 3), isr, leo=0)
    s.on_local_append(10, now_ms=0)
    for f, off in fetches.items():
        fetch(s, f, off)
    assert s.high_watermark == expected_hw


def test_hw_never_moves_back_and_never_passes_the_leader_leo() -> None:
    s = make_leader((1, 2), leo=10)
    fetch(s, 2, 10)
    assert s.high_watermark == 10
    fetch(s, 2, 4)  # a follower reporting less (e.g. it restarted) does not pull the HW back
    assert s.high_watermark == 10
    with pytest.raises(InvariantError):
        fetch(s, 2, 11)  # beyond our log end: the shell must have refused the fetch


def test_new_leader_starts_from_its_own_hw_and_waits_for_isr_followers_to_fetch() -> None:
    s = make_leader((1, 2, 3), leo=10, hw=4)
    assert s.high_watermark == 4
    assert s.high_watermark_lagging  # 4 < epoch start 10
    with pytest.raises(OffsetNotAvailableError):
        s.latest_offset_or_raise()
    fetch(s, 2, 10)
    assert s.high_watermark == 4
    fetch(s, 3, 10)
    assert s.high_watermark == 10
    assert not s.high_watermark_lagging
    assert s.latest_offset_or_raise() == 10


def test_hw_passes_old_epoch_offsets_without_a_current_epoch_record() -> None:
    # Not Raft's rule (KAFKA-12619): every ISR member holds offsets 5..9 of the old epoch, and
    # only ISR members can be elected, so committing them is safe (see _maybe_advance_hw).
    s = make_leader((1, 2), leo=10, hw=5, leader_epoch=2)
    assert s.epoch_start_offset == 10
    fetch(s, 2, 10)
    assert s.high_watermark == 10


def test_isr_of_only_the_leader_commits_on_append() -> None:
    s = make_leader((1, 2, 3), (1,), leo=0)
    assert s.on_local_append(3, now_ms=0)
    assert s.high_watermark == 3


@pytest.mark.parametrize(("gate", "expected_hw"), [(True, 0), (False, 5)])
def test_hw_stands_still_while_the_isr_is_below_min_insync_replicas(gate, expected_hw) -> None:
    s = make_leader((1, 2, 3), (1,), min_isr=2, hw_requires_min_isr=gate)
    s.on_local_append(5, now_ms=0)
    assert s.high_watermark == expected_hw


def test_hw_waits_for_the_leader_flush_when_configured() -> None:
    s = make_leader((1, 2), leo=0)
    s = type(s)(
        topic_id=s.topic_id,
        partition=0,
        local_broker_id=BrokerId(1),
        registration=s.registration,
        log_end_offset=0,
        high_watermark=0,
        now_ms=0,
        config=dataclasses.replace(s.config, hw_requires_leader_flush=True),
    )
    s.on_local_append(5, now_ms=0)
    fetch(s, 2, 5)
    assert s.high_watermark == 0
    assert s.on_local_flush(3, now_ms=0) and s.high_watermark == 3
    assert s.on_local_flush(9, now_ms=0) and s.high_watermark == 5  # never past the LEO


def test_min_isr_larger_than_the_replication_factor_is_capped() -> None:
    s = make_leader((1,), min_isr=3)
    assert s.effective_min_isr == 1
    s.check_append_or_raise(-1)
    s.on_local_append(2, now_ms=0)
    assert s.high_watermark == 2


def test_hw_counts_the_member_a_pending_expansion_adds() -> None:
    s = make_leader((1, 2, 3), (1, 2), leo=10)
    fetch(s, 2, 10, now_ms=0)
    fetch(s, 3, 10, now_ms=0)
    assert s.high_watermark == 10
    change = s.maybe_expand_isr(BrokerId(3))
    assert change is not None and s.maximal_isr == {1, 2, 3}
    # The controller may have committed it already; 3 then must hold everything below the
    # HW. Long after 3's last fetch (so only its place in the maximal ISR holds the HW):
    s.on_local_append(20, now_ms=LAG + 1)
    fetch(s, 2, 20, now_ms=LAG + 1)
    assert s.high_watermark == 10
    fetch(s, 3, 15, now_ms=LAG + 2)
    assert s.high_watermark == 15


def test_hw_keeps_counting_a_follower_until_its_removal_commits() -> None:
    s = make_leader((1, 2, 3), leo=10)
    fetch(s, 2, 10)
    fetch(s, 3, 10)
    s.on_local_append(20, now_ms=0)
    fetch(s, 2, 20, now_ms=1)
    change = s.maybe_shrink_isr(now_ms=LAG + 5)
    assert change is not None and [m.broker_id for m in change.new_isr] == [1, 2]
    assert s.maximal_isr == {1, 2, 3}
    assert s.high_watermark == 10  # the shrink is not committed: 3 still counts
    assert (
        s.on_alter_partition_result(change, _ok(s, isr=(1, 2)), now_ms=LAG + 5)
        is AlterOutcome.APPLIED
    )
    assert s.isr == (1, 2) and s.high_watermark == 20


def test_hw_waits_for_a_caught_up_replica_outside_the_isr_but_not_an_ineligible_one() -> None:
    # Kafka's shouldWaitForReplicaToJoinIsr: without it a follower chasing a busy leader
    # whose ISR is just itself never reaches the HW, so never joins.
    s = make_leader((1, 2), (1,), leo=10, hw=10)
    fetch(s, 2, 10, now_ms=0)  # 2 caught up at t=0 (but not in the ISR)
    s.on_local_append(20, now_ms=1)
    assert s.high_watermark == 10  # held for 2
    fetch(s, 2, 15, now_ms=2)
    assert s.high_watermark == 15
    assert s.set_ineligible_replicas([BrokerId(2)], now_ms=3)
    assert s.high_watermark == 20  # a fenced replica does not hold the HW
    assert s.maybe_expand_isr(BrokerId(2)) is None


# --------------------------------------------------------------------------- shrink


@pytest.mark.parametrize(
    ("scenario", "now_ms", "shrunk"),
    [
        ("stuck", LAG, False),  # no fetch for exactly the lag: still in
        ("stuck", LAG + 1, True),  # one ms more: out
        ("at_leo", 10 * LAG, False),  # at the leader's LEO: in sync however long ago
        ("slow", LAG + 3_000, True),  # fetching, but never reaching the LEO of the last fetch
        ("keeping_up", LAG + 3_000, False),  # reaches the LEO of the previous fetch each time
    ],
)
def test_followers_that_did_not_catch_up_within_the_lag_time_are_shrunk(
    scenario, now_ms, shrunk
) -> None:
    s = make_leader((1, 2), leo=10, now_ms=0)
    if scenario == "at_leo":
        fetch(s, 2, 10, now_ms=0)
    elif scenario in ("slow", "keeping_up"):
        # The leader grows by 10 every second; 2 fetches every second.
        follower_offset = 0
        for t in range(1, (now_ms // 1000) + 1):
            s.on_local_append(10 + 10 * t, now_ms=t * 1000)
            if scenario == "slow":
                follower_offset = 10 * t - 5  # always 5 short of where the leader was
            else:
                follower_offset = 10 + 10 * (t - 1)  # the leader's LEO at its previous fetch
            fetch(s, 2, follower_offset, now_ms=t * 1000)
    change = s.maybe_shrink_isr(now_ms)
    assert (change is not None) == shrunk
    if shrunk:
        assert change is not None
        assert [m.broker_id for m in change.new_isr] == [1]


def test_shrink_proposal_carries_our_epochs_and_the_broker_epochs_we_know() -> None:
    s = make_leader((1, 2, 3), leo=5, leader_epoch=4, partition_epoch=9)
    s.local_broker_epoch = 100
    s.on_follower_fetch(BrokerId(2), 5, leader_epoch=4, now_ms=0, broker_epoch=200)
    change = s.maybe_shrink_isr(now_ms=LAG + 1)
    assert change is not None
    assert (change.topic_id, change.partition, change.leader_epoch, change.partition_epoch) == (
        TOPIC,
        0,
        4,
        9,
    )
    assert change.new_isr == (IsrMember(BrokerId(1), 100), IsrMember(BrokerId(2), 200))
    assert s.pending is not None and s.pending.kind is IsrChangeKind.SHRINK


def test_only_one_isr_change_is_in_flight() -> None:
    s = make_leader((1, 2, 3), (1, 2), leo=5)
    assert s.maybe_shrink_isr(now_ms=LAG + 1) is not None
    fetch(s, 3, 5, now_ms=LAG + 2)
    assert s.maybe_expand_isr(BrokerId(3)) is None
    assert s.maybe_shrink_isr(now_ms=LAG * 3) is None


def test_shrink_never_removes_the_leader() -> None:
    s = make_leader((1,), leo=5)
    assert s.maybe_shrink_isr(now_ms=10 * LAG) is None


# --------------------------------------------------------------------------- expand


@pytest.mark.parametrize(
    ("follower_leo", "expands"),
    [
        (3, False),  # below the HW (5)
        (7, False),  # at or above the HW, below this epoch's start (10)
        (10, True),  # at both
        (12, True),
    ],
)
def test_follower_joins_the_isr_at_hw_and_this_epochs_start(follower_leo, expands) -> None:
    # New leader at LEO 10 with HW 5; 3 has not fetched yet, so the HW stays at 5.
    s = make_leader((1, 2, 3, 4), (1, 2, 3), leo=10, hw=5)
    s.on_local_append(12, now_ms=0)
    fetch(s, 2, 12)
    assert s.high_watermark == 5
    fetch(s, 4, follower_leo)
    change = s.maybe_expand_isr(BrokerId(4))
    assert (change is not None) == expands
    if change is not None:
        assert [m.broker_id for m in change.new_isr] == [1, 2, 3, 4]
        assert s.pending is not None and s.pending.kind is IsrChangeKind.EXPAND


def test_expand_refuses_isr_members_non_replicas_and_ineligible_brokers() -> None:
    s = make_leader((1, 2, 3), (1, 2), leo=0)
    assert s.maybe_expand_isr(BrokerId(2)) is None  # already in
    assert s.maybe_expand_isr(BrokerId(9)) is None  # not a replica
    fetch(s, 3, 0)
    s.set_ineligible_replicas([BrokerId(3)], now_ms=0)
    assert s.maybe_expand_isr(BrokerId(3)) is None
    s.set_ineligible_replicas([], now_ms=0)
    assert s.maybe_expand_isr(BrokerId(3)) is not None


def test_recovering_leader_marks_itself_recovered_before_anyone_joins() -> None:
    s = make_leader((1, 2), (1,), leo=5, recovery=LeaderRecoveryState.RECOVERING)
    fetch(s, 2, 5)
    assert s.maybe_expand_isr(BrokerId(2)) is None
    change = s.maybe_mark_recovered()
    assert change is not None
    assert change.leader_recovery_state == LeaderRecoveryState.RECOVERED
    assert [m.broker_id for m in change.new_isr] == [1]
    s.on_alter_partition_result(change, _ok(s, isr=(1,), recovery=0), now_ms=0)
    assert s.maybe_mark_recovered() is None
    assert s.maybe_expand_isr(BrokerId(2)) is not None


# --------------------------------------------------------------------------- AlterPartition


def _ok(s, *, isr, recovery=None, partition_epoch=None, leader_epoch=None):
    reg = registration(
        s.replicas,
        isr,
        s.local_broker_id,
        leader_epoch=s.leader_epoch if leader_epoch is None else leader_epoch,
        partition_epoch=s.partition_epoch + 1 if partition_epoch is None else partition_epoch,
        recovery=s.registration.leader_recovery_state if recovery is None else recovery,
    )
    return AlterPartitionResult(TOPIC, 0, registration=reg)


def _err(e):
    return AlterPartitionResult(TOPIC, 0, error=e)


def _pending_expand():
    s = make_leader((1, 2, 3), (1, 2), leo=4)
    fetch(s, 2, 4)
    fetch(s, 3, 4)
    change = s.maybe_expand_isr(BrokerId(3))
    assert change is not None
    return s, change


def test_a_committed_expansion_updates_isr_and_partition_epoch() -> None:
    s, change = _pending_expand()
    assert (
        s.on_alter_partition_result(change, _ok(s, isr=(1, 2, 3)), now_ms=0) is AlterOutcome.APPLIED
    )
    assert s.isr == b(1, 2, 3) and s.partition_epoch == 1 and s.pending is None


@pytest.mark.parametrize(
    ("error", "outcome", "still_pending"),
    [
        (IneligibleReplicaError("fenced"), AlterOutcome.REVERTED, False),
        (ControllerFencedError("old"), AlterOutcome.AWAIT_METADATA, True),
        (InvalidUpdateVersionError("old"), AlterOutcome.AWAIT_METADATA, True),
        (NotControllerError("moved"), AlterOutcome.RETRY, True),
        (RuntimeError("no code at all"), AlterOutcome.RETRY, True),
    ],
)
def test_alter_partition_errors_revert_wait_or_retry(error, outcome, still_pending) -> None:
    s, change = _pending_expand()
    assert s.on_alter_partition_result(change, _err(error), now_ms=0) is outcome
    assert (s.pending is not None) == still_pending
    assert s.isr == b(1, 2)
    if not still_pending:
        assert s.maybe_expand_isr(BrokerId(3)) == change  # may propose again at once


def test_answers_to_other_requests_or_older_states_are_ignored() -> None:
    s, change = _pending_expand()
    other = dataclasses.replace(change, new_isr=change.new_isr[:2])
    assert s.on_alter_partition_result(other, _ok(s, isr=(1,)), now_ms=0) is AlterOutcome.IGNORED
    stale = _ok(s, isr=(1, 2, 3), partition_epoch=-1)
    assert s.on_alter_partition_result(change, stale, now_ms=0) is AlterOutcome.IGNORED
    wrong_epoch = _ok(s, isr=(1, 2, 3), leader_epoch=s.leader_epoch + 1)
    assert s.on_alter_partition_result(change, wrong_epoch, now_ms=0) is AlterOutcome.IGNORED
    assert s.pending is not None


def test_a_newer_registration_overrides_the_change_in_flight() -> None:
    s, change = _pending_expand()
    s.on_alter_partition_result(change, _err(InvalidUpdateVersionError("old")), now_ms=0)
    # The controller shrank the ISR meanwhile (say broker 2 was fenced).
    newer = registration((1, 2, 3), (1,), 1, partition_epoch=1)
    assert s.on_registration(newer, now_ms=0)
    assert s.pending is None and s.isr == b(1) and s.partition_epoch == 1
    assert not s.on_registration(newer, now_ms=0)  # seen
    assert not s.on_registration(
        registration((1, 2, 3), (1, 2, 3), 1, leader_epoch=0, partition_epoch=7), now_ms=0
    )  # older leader epoch
    # The answer to the overridden request is stale now.
    assert (
        s.on_alter_partition_result(change, _ok(s, isr=(1, 2, 3)), now_ms=0) is AlterOutcome.IGNORED
    )


def test_reelection_in_a_new_epoch_restarts_the_epoch_at_our_leo() -> None:
    s = make_leader((1, 2), leo=5)
    fetch(s, 2, 5)
    s.on_local_append(8, now_ms=0)
    assert s.on_registration(
        registration((1, 2), (1, 2), 1, leader_epoch=2, partition_epoch=1), now_ms=100
    )
    assert s.epoch_start_offset == 8 and s.leader_epoch == 2
    with pytest.raises(FencedLeaderEpochError):
        s.on_follower_fetch(BrokerId(2), 8, leader_epoch=1, now_ms=101)
    fetch(s, 2, 8, now_ms=101)
    assert s.high_watermark == 8


def test_registration_adding_and_removing_replicas_tracks_exactly_the_followers() -> None:
    s = make_leader((1, 2, 3), (1, 2), leo=5)
    s.on_registration(registration((1, 2, 4), (1, 2), 1, partition_epoch=1), now_ms=0)
    assert set(s.followers) == {2, 4}
    fetch(s, 4, 5)
    with pytest.raises(UnknownLeaderEpochError):
        fetch(s, 3, 5)


# --------------------------------------------------------------------------- produce


@pytest.mark.parametrize(
    ("replicas", "isr", "min_isr", "acks", "error"),
    [
        ((1, 2, 3), (1, 2, 3), 2, -1, None),
        ((1, 2, 3), (1, 2), 2, -1, None),
        ((1, 2, 3), (1,), 2, -1, NotEnoughReplicasError),
        ((1, 2, 3), (1,), 2, 1, None),  # acks=1 does not care
        ((1, 2, 3), (1,), 2, 0, None),
        ((1,), (1,), 2, -1, None),  # min.insync capped by replication factor
        ((1, 2, 3), (1, 2, 3), 1, 2, InvalidRequiredAcksError),
    ],
)
def test_min_insync_replicas_refuses_acks_all_before_the_append(
    replicas, isr, min_isr, acks, error
) -> None:
    s = make_leader(replicas, isr, min_isr=min_isr)
    if error is None:
        s.check_append_or_raise(acks)
    else:
        with pytest.raises(error):
            s.check_append_or_raise(acks)


def test_waiter_completes_only_once_the_hw_passes_its_last_offset() -> None:
    s = make_leader((1, 2), leo=0)
    s.on_local_append(3, now_ms=0)
    w = s.add_waiter(last_offset=2, deadline_ms=1000)
    fetch(s, 2, 2)
    assert s.high_watermark == 2 and s.drain_acks() == []
    fetch(s, 2, 3)
    [ack] = s.drain_acks()
    assert (ack.waiter_id, ack.last_offset, ack.error) == (w, 2, None)
    assert s.waiter_count == 0


def test_waiters_complete_in_offset_order_and_committed_ones_at_once() -> None:
    s = make_leader((1, 2), leo=0)
    s.on_local_append(10, now_ms=0)
    w9 = s.add_waiter(9, 1000)
    w4 = s.add_waiter(4, 1000)
    fetch(s, 2, 10)
    assert [a.waiter_id for a in s.drain_acks()] == [w4, w9]
    w0 = s.add_waiter(0, 1000)  # already below the HW
    assert [(a.waiter_id, a.error) for a in s.drain_acks()] == [(w0, None)]


def test_waiter_times_out_through_poll_and_cancelled_ones_vanish() -> None:
    s = make_leader((1, 2), leo=0)
    s.on_local_append(3, now_ms=0)
    w1 = s.add_waiter(0, deadline_ms=100)
    w2 = s.add_waiter(1, deadline_ms=200)
    w3 = s.add_waiter(2, deadline_ms=300)
    assert s.cancel_waiter(w2) and not s.cancel_waiter(w2)
    assert s.poll(99) == 100
    assert s.poll(150) == 300
    [ack] = s.drain_acks()
    assert ack.waiter_id == w1 and isinstance(ack.error, RequestTimedOutError)
    assert s.poll(300) is None
    assert [a.waiter_id for a in s.drain_acks()] == [w3]


def test_all_waiters_fail_when_leadership_is_lost() -> None:
    s = make_leader((1, 2), leo=0)
    s.on_local_append(3, now_ms=0)
    ws = [s.add_waiter(i, 1000) for i in range(3)]
    assert s.on_registration(registration((1, 2), (2,), 2, leader_epoch=2), now_ms=5)
    acks = s.drain_acks()
    assert [a.waiter_id for a in acks] == ws
    assert all(isinstance(a.error, NotLeaderOrFollowerError) for a in acks)
    assert not s.is_leader
    with pytest.raises(NotLeaderOrFollowerError):
        s.check_append_or_raise(1)
    with pytest.raises(NotLeaderOrFollowerError):
        fetch(s, 2, 3)
    assert s.maybe_shrink_isr(now_ms=10 * LAG) is None


@pytest.mark.parametrize(
    ("gate", "outcome"),
    [
        (True, RequestTimedOutError),  # KIP-966: the HW waits for the ISR
        (False, NotEnoughReplicasAfterAppendError),  # Kafka 3.x: committed by too few
    ],
)
def test_isr_shrinking_below_min_after_the_append(gate, outcome) -> None:
    s = make_leader((1, 2, 3), min_isr=2, leo=0, hw_requires_min_isr=gate)
    s.check_append_or_raise(-1)
    s.on_local_append(1, now_ms=0)
    w = s.add_waiter(0, deadline_ms=LAG * 2)
    change = s.maybe_shrink_isr(now_ms=LAG + 1)
    assert change is not None
    s.on_alter_partition_result(change, _ok(s, isr=(1,)), now_ms=LAG + 1)
    s.poll(LAG * 2)
    [ack] = s.drain_acks()
    assert ack.waiter_id == w and isinstance(ack.error, outcome)
    with pytest.raises(NotEnoughReplicasError):
        s.check_append_or_raise(-1)


def test_follower_fetch_in_another_epoch_is_refused() -> None:
    s = make_leader((1, 2), leo=3, leader_epoch=5)
    with pytest.raises(FencedLeaderEpochError):
        s.on_follower_fetch(BrokerId(2), 3, leader_epoch=4, now_ms=0)
    with pytest.raises(UnknownLeaderEpochError):
        s.on_follower_fetch(BrokerId(2), 3, leader_epoch=6, now_ms=0)
