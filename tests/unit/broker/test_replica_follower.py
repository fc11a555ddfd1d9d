"""FollowerState: truncation on becoming follower (KIP-101, KIP-279) and the follower's HW.

The traces are the classic ones: a leader crashes with records its followers do not have, a
new leader is elected and writes, and the old leader comes back as a follower and must cut its
unreplicated tail before fetching. Logs are ``EpochHistory`` models: the epoch of every
offset is what the tests compare.
"""

from __future__ import annotations

import pytest
from replication_harness import EpochHistory, fetch, make_leader, registration, run_truncation

from broker.replica_state import FollowerPhase, FollowerState
from common.invariant import InvariantError
from metalog.records import BrokerId


def log(*runs: tuple[int, int]) -> EpochHistory:
    """A log from ``(epoch, count)`` runs."""
    h = EpochHistory()
    for epoch, count in runs:
        h.append(epoch, count)
    return h


@pytest.mark.parametrize(
    ("name", "follower", "leader", "hw", "expected_end", "rounds"),
    [
        # KIP-101 scenario 1: the follower restarts with HW 1 but holds offset 1, which the
        # leader also has. Pre-KIP-101 it truncated to its HW and lost a committed record.
        ("kip101_hw_truncation_loses_nothing", [(0, 2)], [(0, 2)], 1, 2, 1),
        # KIP-101 scenario 2: both crash; B (without offset 1) comes back first, leads epoch 1
        # and writes offset 1. A returns: its offset 1 (epoch 0) must go.
        ("kip101_divergent_logs", [(0, 2)], [(0, 1), (1, 1)], 1, 1, 1),
        # KIP-279: A wrote offset 1 in epoch 0 unreplicated; B led epoch 1 and wrote offset 1
        # unreplicated too; A leads epoch 2. B asks about epoch 1, which A never had: A
        # answers (0, 2) and B must cut at its own end of epoch 0 (1), not at 2.
        ("kip279_fast_failover", [(0, 1), (1, 1)], [(0, 2), (2, 1)], 1, 1, 1),
        # KIP-279, the second round: the leader answers with an epoch the follower never had,
        # so the follower cuts to its end of an older epoch and asks again about that.
        ("kip279_repeat_with_older_epoch", [(0, 3), (3, 4)], [(0, 2), (2, 3), (4, 1)], 0, 2, 2),
        # A follower that is simply behind keeps everything.
        ("behind", [(0, 2), (1, 1)], [(0, 2), (1, 5)], 3, 3, 1),
        # A follower ahead of the leader within the leader's latest epoch (it fetched records
        # of epoch 1 from a previous leader that the new one never got) is cut at the leader's
        # LEO, the end the leader gives for its latest epoch.
        ("ahead_in_same_epoch", [(0, 2), (1, 4)], [(0, 2), (1, 2)], 2, 4, 1),
    ],
)
def test_truncation_reaches_the_point_where_both_logs_agree(
    name, follower, leader, hw, expected_end, rounds
) -> None:
    f, lead = log(*follower), log(*leader)
    fs, steps = run_truncation(f, lead, hw=hw)
    assert f.log_end_offset == expected_end, (name, steps)
    assert len(steps) - 1 == rounds, steps
    assert f.epochs() == lead.epochs()[:expected_end]
    assert not any(s.below_high_watermark for s in steps)
    assert fs.high_watermark == min(hw, expected_end)


def test_follower_without_epochs_truncates_to_its_high_watermark() -> None:
    f = EpochHistory([], log_end_offset=5)  # batches written before epochs were tracked
    fs, steps = run_truncation(f, log((0, 9)), hw=3)
    assert steps[0].truncate_to == 3 and steps[0].query_epoch is None
    assert f.log_end_offset == 3 and fs.phase is FollowerPhase.FETCHING


def test_empty_follower_starts_fetching_at_zero() -> None:
    fs, steps = run_truncation(EpochHistory(), log((0, 9)))
    assert steps == [fs.first_step] and fs.first_step.truncate_to is None


def test_leader_without_our_epochs_makes_us_fall_back_to_the_high_watermark() -> None:
    f = log((5, 4))
    fs = FollowerState(leader_id=BrokerId(2), leader_epoch=6, high_watermark=2, log=f)
    step = fs.on_epoch_end_offset(-1, -1, f)
    assert step.truncate_to == 2 and step.query_epoch is None


def test_leader_answering_an_epoch_below_all_ours_cuts_where_our_epochs_start() -> None:
    # Our offsets from 10 on are epoch 5; the leader's 10..13 are epoch 3: they differ from
    # 10 on (the cache answers (3, 10) for an epoch below all it knows, as Kafka's does).
    f = EpochHistory([(5, 10)], log_end_offset=20)
    fs = FollowerState(leader_id=BrokerId(2), leader_epoch=6, high_watermark=10, log=f)
    step = fs.on_epoch_end_offset(3, 14, f)
    assert step.truncate_to == 10 and step.query_epoch is None


def test_diverging_epoch_against_a_log_without_epochs_cuts_at_the_leaders_end() -> None:
    f = EpochHistory([], log_end_offset=5)
    fs = FollowerState(leader_id=BrokerId(2), leader_epoch=6, high_watermark=0, log=f)
    assert fs.first_step.truncate_to == 0
    f.truncate_to(0)
    f.log_end_offset = 5  # refetched without epochs (a pre-epoch leader)
    step = fs.on_epoch_end_offset(3, 4, f)
    assert step.truncate_to == 4 and step.query_epoch is None


def test_truncation_below_the_high_watermark_is_flagged_and_lowers_it() -> None:
    # Only an unclean election can do this: the new leader lacks committed offsets.
    f, lead = log((0, 6)), log((0, 2), (1, 3))
    fs, steps = run_truncation(f, lead, hw=5)
    assert f.log_end_offset == 2
    assert steps[-1].below_high_watermark
    assert fs.high_watermark == 2


def test_diverging_epoch_in_a_fetch_response_goes_back_to_truncating() -> None:
    f, lead = log((0, 3)), log((0, 3))
    fs, _ = run_truncation(f, lead)
    f.append(0, 2)  # we fetched more from an old leader (a stale fetch)
    lead.append(2, 4)  # meanwhile the leader moved on in a new epoch
    step = fs.on_epoch_end_offset(*lead.end_offset_for_epoch(0), f)  # DivergingEpoch(0, 3)
    assert step.truncate_to == 3 and step.query_epoch is None


def test_follower_hw_is_min_of_leader_hw_and_own_leo_and_never_moves_back() -> None:
    f = log((0, 3))
    fs, _ = run_truncation(f, log((0, 10)), hw=1)
    assert fs.on_fetch_response(leader_high_watermark=8, log_end_offset=3)
    assert fs.high_watermark == 3
    assert fs.on_fetch_response(leader_high_watermark=8, log_end_offset=6)
    assert fs.high_watermark == 6
    assert not fs.on_fetch_response(
        leader_high_watermark=4, log_end_offset=9
    )  # a lagging new leader
    assert fs.high_watermark == 6


def test_fetch_response_before_truncation_finished_is_a_bug() -> None:
    f = log((0, 3))
    fs = FollowerState(leader_id=BrokerId(2), leader_epoch=1, high_watermark=0, log=f)
    with pytest.raises(InvariantError):
        fs.on_fetch_response(3, 3)


def test_old_leader_returns_truncates_its_unreplicated_tail_and_rejoins() -> None:
    """The whole trace, leader state and follower state together.

    Epoch 1: A (1) leads {A, B, C}; B and C replicate 0..4 (HW 5); A appends 5..12 with acks=1
    and crashes. The controller elects B (2) in epoch 2 with ISR {B, C}; B writes 5..7.
    C truncates nothing; A comes back, truncates 5..12 away, catches up, rejoins.
    """
    a, bb, c = log((1, 5)), log((1, 5)), log((1, 5))
    a.append(1, 8)  # 5..12, never replicated
    # B becomes leader in epoch 2 at its LEO 5.
    bb.assign(2, bb.log_end_offset)
    leader = make_leader(
        (2, 1, 3), (2, 3), leader=2, leo=5, hw=5, leader_epoch=2, partition_epoch=3
    )
    assert leader.epoch_start_offset == 5
    bb.append(2, 3)
    leader.on_local_append(bb.log_end_offset, now_ms=10)
    # C: asks about epoch 1, B answers (1, 5): nothing to cut.
    _, steps = run_truncation(c, bb, hw=5, leader_id=2)
    assert all(s.truncate_to is None for s in steps)
    c.copy_from(bb, bb.log_end_offset)
    fetch(leader, 3, c.log_end_offset, now_ms=11)
    assert leader.high_watermark == 8
    # A returns as follower of B: it asks about epoch 1 and cuts to 5.
    _, steps = run_truncation(a, bb, hw=5, leader_id=2)
    assert a.log_end_offset == 5 and not any(s.below_high_watermark for s in steps)
    assert leader.maybe_expand_isr(1) is None  # no fetch from A yet
    a.copy_from(bb, 7)
    fetch(leader, 1, 7, now_ms=12)
    assert leader.maybe_expand_isr(1) is None  # below the HW (8)
    a.copy_from(bb, bb.log_end_offset)
    fetch(leader, 1, a.log_end_offset, now_ms=13)
    change = leader.maybe_expand_isr(1)
    assert change is not None and [m.broker_id for m in change.new_isr] == [2, 3, 1]
    assert a.epochs() == bb.epochs() == c.epochs()
    # The epochs tell the story: A's 5..12 of epoch 1 are gone.
    assert a.epochs() == [1] * 5 + [2] * 3
    leader.on_registration(
        registration((2, 1, 3), (2, 3, 1), 2, leader_epoch=2, partition_epoch=4), now_ms=14
    )
    assert leader.isr == (2, 3, 1) and leader.pending is None
