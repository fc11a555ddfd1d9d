"""KIP-966 in the controller: eligible leader replicas, unclean shutdowns, unclean recovery.

The election order: a live ISR member; with an empty ISR a live ELR member; else, for a
partition with neither ISR nor ELR, the longest log among the replicas that report theirs
(``balanced``: once every last known ELR member has). A broker back from an unclean shutdown
(no clean-shutdown marker naming the registration it replaces) leaves every ISR and ELR.
"""

from __future__ import annotations

import pytest

from metalog.commands import CreateTopic, ReplicaLogInfo, UnregisterBroker
from metalog.controller import ControllerConfig
from metalog.delta import decode_snapshot, encode_snapshot
from metalog.image import PartitionRegistration
from metalog.records import (
    NO_LEADER,
    BrokerId,
    LeaderEpoch,
    LeaderRecoveryState,
    PartitionEpoch,
    PartitionRecord,
    TopicId,
)
from tests.unit.metalog.metalog_harness import Harness
from tests.unit.metalog.test_metalog_controller import alter

B = BrokerId


def cluster(*ids: int, **config: object) -> Harness:
    h = Harness(ControllerConfig(noop_interval_ms=None, **config))  # type: ignore[arg-type]
    h.add_brokers(*ids)
    return h


def three_replicas(**config: object) -> Harness:
    """Brokers 1, 2, 3; topic ``t``: one partition on (1, 2, 3), min.insync.replicas 2."""
    h = cluster(1, 2, 3, **config)
    h.run(CreateTopic(name="t", assignments={0: (1, 2, 3)}, configs={"min.insync.replicas": "2"}))
    return h


def fence(h: Harness, *ids: int) -> None:
    for i in ids:
        h.heartbeat(i, want_fence=True)


def restart(h: Harness, broker: int, *, clean: bool = False, incarnation: str = "i1") -> None:
    """A new process of ``broker`` registers (with the marker of a clean shutdown if
    ``clean``) and catches up. The old one's session expired first (until then the
    controller refuses a new incarnation)."""
    b = h.image.brokers.get(B(broker))
    if b is not None and not b.fenced:
        fence(h, broker)
    previous = h.epochs[B(broker)] if clean else -1
    h.register(broker, incarnation=incarnation, previous_broker_epoch=previous)
    h.heartbeat(broker)


def report(
    h: Harness,
    broker: int,
    last_epoch: int,
    leo: int,
    *,
    name: str = "t",
    partition_epoch: int | None = None,
) -> None:
    reg = h.part(name)
    pe = reg.partition_epoch if partition_epoch is None else partition_epoch
    h.heartbeat(
        broker,
        replica_logs=(
            ReplicaLogInfo(
                topic_id=h.image.topics.by_name[name],
                partition=0,
                partition_epoch=PartitionEpoch(pe),
                last_leader_epoch=LeaderEpoch(last_epoch),
                log_end_offset=leo,
            ),
        ),
    )


# --------------------------------------------------------------------------- ELR


def test_a_replica_leaving_an_isr_below_min_insync_becomes_eligible() -> None:
    h = three_replicas()
    fence(h, 3)
    reg = h.part("t")
    assert reg.isr == (1, 2) and reg.elr == ()  # still at min.insync.replicas: not needed
    fence(h, 2)
    reg = h.part("t")
    assert reg.isr == (1,) and reg.elr == (2,) and reg.leader == 1
    fence(h, 1)
    reg = h.part("t")
    assert reg.isr == () and reg.elr == (1, 2) and reg.leader == NO_LEADER


def test_a_live_eligible_replica_leads_when_the_isr_is_empty() -> None:
    h = three_replicas()
    fence(h, 3, 2, 1)
    h.heartbeat(2)  # broker 2 was only cut off; its log is whole
    reg = h.part("t")
    assert reg.leader == 2 and reg.isr == (2,) and reg.elr == (1,)
    assert reg.leader_recovery_state == LeaderRecoveryState.RECOVERED


def test_a_fenced_eligible_replica_is_waited_for_not_replaced_by_another_replica() -> None:
    h = three_replicas()
    fence(h, 3, 2, 1)
    h.heartbeat(3)  # back, but it left the ISR while the ISR was at min: it lacks records
    reg = h.part("t")
    assert reg.leader == NO_LEADER and reg.isr == () and reg.elr == (1, 2)


def test_the_elr_empties_once_the_isr_is_back_at_min_insync() -> None:
    h = three_replicas()
    fence(h, 3, 2)
    assert h.part("t").elr == (2,)
    h.heartbeat(3)
    alter(h, "t", 0, (1, 3), epochs={3: h.epochs[B(3)]})
    reg = h.part("t")
    assert reg.isr == (1, 3) and reg.elr == () and reg.last_known_elr == ()


def test_a_leader_shrinking_the_isr_below_min_insync_keeps_the_follower_eligible() -> None:
    h = three_replicas()
    alter(h, "t", 0, (1, 2))
    alter(h, "t", 0, (1,))
    reg = h.part("t")
    assert reg.isr == (1,) and reg.elr == (2,)
    alter(h, "t", 0, (1, 2), epochs={2: h.epochs[B(2)]})  # an ELR member rejoins the ISR
    assert h.part("t").elr == ()


# --------------------------------------------------------------------------- unclean shutdown


def test_a_replica_back_empty_from_an_unclean_shutdown_is_not_elected_over_the_elr() -> None:
    """Finding 1b of docs/fault-injection.md: the ISR had shrunk to broker 2, broker 3 held
    every acknowledged write, and broker 2 came back from a power cut with an empty log."""
    h = three_replicas()
    fence(h, 1, 3)  # 3 is cut off: out of the ISR, eligible (the ISR is below 2)
    reg = h.part("t")
    assert reg.isr == (2,) and reg.elr == (3,) and reg.leader == 2
    restart(h, 2)  # power cut: no clean-shutdown marker
    reg = h.part("t")
    assert reg.isr == () and reg.elr == (3,) and reg.last_known_elr == (2,)
    assert reg.leader == NO_LEADER  # broker 2 is live and a replica, but not eligible
    h.heartbeat(3)  # the cut heals
    reg = h.part("t")
    assert reg.leader == 3 and reg.isr == (3,) and reg.elr == ()
    assert reg.leader_recovery_state == LeaderRecoveryState.RECOVERED


def test_a_restart_proven_by_the_data_directory_is_unclean_and_not_waited_out() -> None:
    """Finding 1b again, the restarted broker 2 registering while its old session lives (it
    names the incarnation that held its data directory): it leaves the ISR and the ELR at
    once, and broker 3, which holds every acknowledged write, is the one waited for."""
    h = three_replicas()
    fence(h, 1, 3)
    h.now_ms += 1_000  # broker 2's old session is live
    h.register(2, incarnation="i1", previous_incarnation_id="i0")
    h.heartbeat(2)
    reg = h.part("t")
    assert reg.isr == () and reg.elr == (3,) and reg.leader == NO_LEADER
    h.heartbeat(3)
    assert h.part("t").leader == 3


def test_a_clean_restart_proven_by_the_data_directory_stays_eligible() -> None:
    h = three_replicas()
    fence(h, 3)
    h.now_ms += 1_000
    h.register(
        2, incarnation="i1", previous_broker_epoch=h.epochs[B(2)], previous_incarnation_id="i0"
    )
    h.heartbeat(2)
    reg = h.part("t")  # out of the ISR as if fenced; below min.insync.replicas: eligible
    assert reg.leader == 1 and reg.isr == (1,) and reg.elr == (2,)


def test_without_elr_the_replica_back_empty_leads_as_the_last_isr_member() -> None:
    """The same history on Kafka 3.x rules loses every write broker 3 held (finding 1b)."""
    h = three_replicas(eligible_leader_replicas_enabled=False)
    fence(h, 1, 3)
    restart(h, 2)
    h.heartbeat(3)
    assert h.part("t").leader == 2


def test_an_unclean_restart_also_leaves_the_elr() -> None:
    h = three_replicas()
    fence(h, 3, 2, 1)  # ISR empty, ELR (1, 2)
    restart(h, 1)
    reg = h.part("t")
    assert reg.elr == (2,) and reg.last_known_elr == (1,) and reg.leader == NO_LEADER
    h.heartbeat(2)
    assert h.part("t").leader == 2


def test_a_clean_restart_keeps_the_broker_eligible() -> None:
    h = three_replicas()
    fence(h, 3, 2, 1)
    restart(h, 1, clean=True)
    reg = h.part("t")
    assert reg.leader == 1 and reg.isr == (1,) and reg.elr == (2,)


def test_a_clean_restart_after_a_controlled_shutdown_changes_no_partition() -> None:
    h = three_replicas()
    fence(h, 3)
    assert h.heartbeat(1, want_shutdown=True).should_shutdown
    reg = h.part("t")
    assert reg.leader == 2 and reg.isr == (2,) and reg.elr == (1,)
    before = reg.partition_epoch
    restart(h, 1, clean=True)
    reg = h.part("t")
    assert reg.partition_epoch == before and reg.elr == (1,)


def test_a_marker_naming_an_older_registration_counts_as_unclean() -> None:
    h = three_replicas()
    fence(h, 3, 2, 1)
    old = h.epochs[B(1)]
    restart(h, 1, clean=True, incarnation="i1")  # clean: stays eligible
    fence(h, 1)
    h.epochs[B(1)] = old  # the next process finds a marker of the first incarnation
    restart(h, 1, clean=True, incarnation="i2")
    reg = h.part("t")
    assert 1 not in reg.elr and 1 in reg.last_known_elr


def test_the_same_process_registering_again_is_clean() -> None:
    h = three_replicas()
    fence(h, 3, 2, 1)
    h.register(1, incarnation="i0")  # its registration was lost, the process lives on
    h.heartbeat(1)
    assert h.part("t").leader == 1


def test_unregistering_a_broker_takes_it_out_of_the_elr() -> None:
    h = three_replicas()
    fence(h, 3, 2, 1)
    h.run(UnregisterBroker(broker_id=B(1)))
    reg = h.part("t")
    assert reg.elr == (2,) and reg.last_known_elr == (1,)


# --------------------------------------------------------------------------- unclean recovery


def _all_unclean(**config: object) -> Harness:
    """Every replica that held the committed records came back from an unclean shutdown."""
    h = three_replicas(**config)
    fence(h, 3, 2, 1)  # ISR empty, ELR (1, 2); 3 left while the ISR was at min
    restart(h, 1)
    restart(h, 2)
    reg = h.part("t")
    assert reg.isr == () and reg.elr == () and reg.last_known_elr == (1, 2)
    assert reg.leader == NO_LEADER
    h.heartbeat(3)
    return h


def test_balanced_recovery_waits_for_every_last_known_elr_member() -> None:
    h = _all_unclean()
    report(h, 3, 0, 120)  # not a last known ELR member: its report alone elects nobody
    report(h, 1, 0, 100)
    assert h.part("t").leader == NO_LEADER
    notes = h.ctl.drain_notes()
    assert any("waits for log ends from [2]" in n for n in notes), notes
    report(h, 2, 0, 80)
    reg = h.part("t")
    assert reg.leader == 3 and reg.isr == (3,)  # the longest log of all who reported
    assert reg.leader_recovery_state == LeaderRecoveryState.RECOVERING
    assert reg.elr == () and reg.last_known_elr == ()
    (note,) = h.ctl.drain_notes()
    assert (
        "broker 3 leads, the longest log of 1: epoch 0 end 100, 2: epoch 0 end 80, "
        "3: epoch 0 end 120" in note
    )


def test_recovery_also_waits_for_every_live_replica() -> None:
    """Broker 3 left the ISR while it was at min; if nothing was written since, its log is
    the whole one, so its report (a heartbeat away) is worth waiting for."""
    h = _all_unclean()
    report(h, 1, 0, 100)
    report(h, 2, 0, 80)
    assert h.part("t").leader == NO_LEADER
    report(h, 3, 0, 120)
    reg = h.part("t")
    assert reg.leader == 3 and reg.isr == (3,)
    assert reg.leader_recovery_state == LeaderRecoveryState.RECOVERING
    assert reg.elr == () and reg.last_known_elr == ()


def test_recovery_prefers_the_newer_leader_epoch_to_the_longer_log() -> None:
    h = _all_unclean()
    report(h, 1, 4, 100)
    report(h, 3, 2, 300)
    report(h, 2, 5, 10)
    assert h.part("t").leader == 2


def test_a_replica_back_empty_loses_the_recovery() -> None:
    h = _all_unclean()
    report(h, 1, -1, 0)
    report(h, 3, 3, 20)
    report(h, 2, 3, 57)
    assert h.part("t").leader == 2


def test_reports_of_another_partition_epoch_or_incarnation_do_not_count() -> None:
    h = _all_unclean()
    stale = h.part("t").partition_epoch - 1
    report(h, 1, 9, 999, partition_epoch=stale)
    report(h, 3, 0, 1)
    report(h, 2, 0, 10)
    assert h.part("t").leader == NO_LEADER  # 1's report described an older partition
    report(h, 1, 0, 100)
    restart(h, 1, incarnation="i3")  # power cut again after reporting: that report is void
    assert h.part("t").leader == NO_LEADER
    report(h, 2, 0, 10)
    report(h, 3, 0, 1)
    report(h, 1, 0, 5)
    assert h.part("t").leader == 2


def test_recovery_elects_among_live_reporters_after_the_timeout() -> None:
    h = _all_unclean(unclean_recovery_timeout_ms=60_000)
    h.now_ms = 1_000
    report(h, 1, 0, 100)
    fence(h, 2)  # broker 2 does not come back
    _, deadline = h.poll(1_000)
    assert deadline is not None and deadline <= 61_000
    assert h.part("t").leader == NO_LEADER
    h.now_ms = 60_000
    h.heartbeat_all(1, 3)
    h.poll(61_000)
    assert h.part("t").leader == 1


def test_aggressive_recovery_waits_only_for_live_replicas() -> None:
    h = _all_unclean(unclean_recovery_strategy="aggressive")
    fence(h, 2, 3)
    report(h, 1, 0, 100)
    assert h.part("t").leader == 1


def test_manual_recovery_never_elects_by_itself() -> None:
    h = _all_unclean(unclean_recovery_strategy="manual")
    for b in (1, 2, 3):
        report(h, b, 0, 10 * b)
    assert h.part("t").leader == NO_LEADER


def test_recovery_does_not_wait_for_an_unregistered_broker() -> None:
    h = _all_unclean()
    fence(h, 2)
    h.run(UnregisterBroker(broker_id=B(2)))
    report(h, 3, 0, 10)
    report(h, 1, 0, 100)
    assert h.part("t").leader == 1


def test_reports_for_a_partition_with_a_leader_are_ignored() -> None:
    h = three_replicas()
    report(h, 2, 99, 10_000)
    reg = h.part("t")
    assert reg.leader == 1 and reg.leader_recovery_state == LeaderRecoveryState.RECOVERED


def test_an_unknown_strategy_is_refused() -> None:
    with pytest.raises(ValueError, match="unclean_recovery_strategy"):
        ControllerConfig(unclean_recovery_strategy="eager")


# --------------------------------------------------------------------------- records, images


def test_old_partition_records_replay_with_empty_elr() -> None:
    rec = PartitionRecord(
        topic_id=TopicId("t"), partition=0, replicas=(B(1),), isr=(B(1),), leader=B(1), version=0
    )
    reg = PartitionRegistration.from_record(rec)
    assert reg.elr == () and reg.last_known_elr == ()


def test_snapshots_carry_the_elr_and_last_known_elr() -> None:
    h = three_replicas()
    fence(h, 3, 2, 1)
    restart(h, 1)
    image = h.image
    again = decode_snapshot(encode_snapshot(image))
    reg = again.topics.by_name["t"]
    assert again.topics.get("t").partitions[0] == image.topics.get("t").partitions[0]  # type: ignore[union-attr]
    assert h.part("t").elr == (2,) and h.part("t").last_known_elr == (1,)
    assert reg is not None
