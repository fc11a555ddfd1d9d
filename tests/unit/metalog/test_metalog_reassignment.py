"""The controller's reassignment state machine (KIP-455): add the target replicas, wait for
them in the ISR, move the leader, remove the old ones; cancel; list.

One test per step of Kafka's ``ReplicationControlManager`` reassignment rules, driven through
the harness, which replays every record and checks the image after each.
"""

from __future__ import annotations

import pytest

from metalog.commands import (
    AlterPartition,
    AlterPartitionReassignments,
    CreateTopic,
    IsrMember,
    ListPartitionReassignments,
    PartitionStateChange,
    ReplicaReassignment,
)
from metalog.errors import (
    InvalidReplicaAssignmentError,
    NoReassignmentInProgressError,
    UnknownTopicOrPartitionError,
)
from metalog.records import BrokerId, PartitionChangeRecord, PartitionRecord, decode_record
from metalog.records import encode_record as enc
from metalog.responses import AlterPartitionReassignmentsResponse
from tests.unit.metalog.metalog_harness import Harness


def cluster(*ids: int) -> Harness:
    h = Harness()
    h.add_brokers(*ids)
    return h


def create(h: Harness, name: str, assignments: dict[int, tuple[BrokerId, ...]]) -> None:
    h.run(CreateTopic(name=name, assignments=assignments))


def reassign(
    h: Harness, name: str, p: int, replicas: tuple[int, ...] | None
) -> AlterPartitionReassignmentsResponse:
    resp: AlterPartitionReassignmentsResponse = h.run(
        AlterPartitionReassignments(
            reassignments=(
                ReplicaReassignment(
                    name, p, None if replicas is None else tuple(BrokerId(b) for b in replicas)
                ),
            )
        )
    )
    return resp


def ok(resp: AlterPartitionReassignmentsResponse) -> None:
    (r,) = resp.results
    assert r.error is None, r.error


def error(resp: AlterPartitionReassignmentsResponse) -> Exception:
    (r,) = resp.results
    assert r.error is not None
    return r.error


def join_isr(h: Harness, name: str, p: int, *members: int) -> None:
    """The leader proposes ``members`` as the ISR (what it does once they caught up)."""
    reg = h.part(name, p)
    tid = h.image.topics.by_name[name]
    resp = h.run(
        AlterPartition(
            broker_id=reg.leader,
            broker_epoch=h.epochs[reg.leader],
            partitions=(
                PartitionStateChange(
                    topic_id=tid,
                    partition=p,
                    leader_epoch=reg.leader_epoch,
                    partition_epoch=reg.partition_epoch,
                    new_isr=tuple(IsrMember(BrokerId(b)) for b in members),
                ),
            ),
        )
    )
    (result,) = resp.results
    assert result.error is None, result.error


def test_start_adds_the_target_replicas_and_marks_adding_and_removing() -> None:
    h = cluster(1, 2, 3, 4)
    h.create("t", 1, 2)
    before = h.part("t")
    old = before.replicas
    new = next(b for b in (1, 2, 3, 4) if b not in old)
    target = (new, old[1])
    ok(reassign(h, "t", 0, target))
    reg = h.part("t")
    assert reg.replicas == (new, old[1], old[0])
    assert reg.adding == (new,)
    assert reg.removing == (old[0],)
    # The new replica is not in the ISR yet, and the leader did not move.
    assert reg.isr == before.isr
    assert reg.leader == before.leader


def test_the_move_completes_once_every_target_is_in_the_isr() -> None:
    h = cluster(1, 2, 3)
    create(h, "t", {0: (BrokerId(1), BrokerId(2))})
    ok(reassign(h, "t", 0, (2, 3)))
    assert h.part("t").replicas == (2, 3, 1)
    join_isr(h, "t", 0, 1, 2, 3)
    reg = h.part("t")
    # Broker 1 led and leaves: a target in the ISR leads, in target order.
    assert reg.replicas == (2, 3)
    assert reg.isr == (2, 3)
    assert reg.leader == 2
    assert reg.adding == () and reg.removing == ()


def test_the_move_waits_while_any_target_is_outside_the_isr() -> None:
    h = cluster(1, 2, 3, 4)
    create(h, "t", {0: (BrokerId(1), BrokerId(2))})
    ok(reassign(h, "t", 0, (3, 4)))
    join_isr(h, "t", 0, 1, 2, 3)
    reg = h.part("t")
    assert reg.replicas == (3, 4, 1, 2) and reg.adding == (3, 4)
    assert reg.leader == 1
    join_isr(h, "t", 0, 1, 2, 3, 4)
    reg = h.part("t")
    assert reg.replicas == (3, 4) and reg.leader == 3 and reg.isr == (3, 4)


def test_a_leader_that_stays_keeps_leading_and_its_epoch() -> None:
    h = cluster(1, 2, 3)
    create(h, "t", {0: (BrokerId(1), BrokerId(2))})
    epoch = h.part("t").leader_epoch
    ok(reassign(h, "t", 0, (1, 3)))
    join_isr(h, "t", 0, 1, 2, 3)
    reg = h.part("t")
    assert reg.replicas == (1, 3) and reg.leader == 1 and reg.leader_epoch == epoch


def test_a_pure_removal_completes_at_once() -> None:
    h = cluster(1, 2, 3)
    create(h, "t", {0: (BrokerId(1), BrokerId(2), BrokerId(3))})
    ok(reassign(h, "t", 0, (2, 3)))
    reg = h.part("t")
    assert reg.replicas == (2, 3) and reg.isr == (2, 3) and reg.leader == 2
    assert not reg.is_reassigning


def test_cancel_goes_back_to_the_original_replicas() -> None:
    h = cluster(1, 2, 3, 4)
    create(h, "t", {0: (BrokerId(1), BrokerId(2))})
    ok(reassign(h, "t", 0, (3, 4)))
    join_isr(h, "t", 0, 1, 2, 3)
    ok(reassign(h, "t", 0, None))
    reg = h.part("t")
    assert reg.replicas == (1, 2) and reg.isr == (1, 2) and reg.leader == 1
    assert not reg.is_reassigning


def test_cancel_without_a_move_in_progress_is_refused_and_changes_nothing() -> None:
    h = cluster(1, 2)
    create(h, "t", {0: (BrokerId(1), BrokerId(2))})
    before = h.part("t")
    assert isinstance(error(reassign(h, "t", 0, None)), NoReassignmentInProgressError)
    assert h.part("t") == before


def test_a_new_target_replaces_the_move_in_progress() -> None:
    h = cluster(1, 2, 3, 4)
    create(h, "t", {0: (BrokerId(1), BrokerId(2))})
    ok(reassign(h, "t", 0, (1, 3)))
    join_isr(h, "t", 0, 1, 2)  # 3 still catching up
    ok(reassign(h, "t", 0, (1, 4)))
    reg = h.part("t")
    # Relative to the original replicas (1, 2): 4 is added, 2 removed; 3 is dropped.
    assert reg.replicas == (1, 4, 2) and reg.adding == (4,) and reg.removing == (2,)


@pytest.mark.parametrize("target", [(), (1, 1), (1, 9)], ids=["empty", "duplicate", "unregistered"])
def test_bad_targets_are_refused_and_change_nothing(target: tuple[int, ...]) -> None:
    h = cluster(1, 2)
    create(h, "t", {0: (BrokerId(1), BrokerId(2))})
    before = h.part("t")
    assert isinstance(error(reassign(h, "t", 0, target)), InvalidReplicaAssignmentError)
    assert h.part("t") == before


def test_unknown_partition_is_refused_per_partition() -> None:
    h = cluster(1, 2)
    create(h, "t", {0: (BrokerId(1),)})
    resp = h.run(
        AlterPartitionReassignments(
            reassignments=(
                ReplicaReassignment("t", 5, (BrokerId(2),)),
                ReplicaReassignment("t", 0, (BrokerId(2),)),
            )
        )
    )
    assert isinstance(resp.results[0].error, UnknownTopicOrPartitionError)
    assert resp.results[1].error is None
    assert h.part("t").replicas == (2, 1)


def test_a_move_whose_targets_die_waits_and_the_old_replicas_keep_the_data() -> None:
    """The safety rule: until every target is in the ISR, the old replicas stay, so a
    broker dying mid-move leaves the committed records on the ISR that remains."""
    h = cluster(1, 2, 3)
    create(h, "t", {0: (BrokerId(1), BrokerId(2))})
    ok(reassign(h, "t", 0, (3,)))
    # Broker 3 is fenced (its session expires) before it caught up.
    h.heartbeat_all(1, 2)
    h.poll(h.ctl.config.session_timeout_ms - 1)
    h.heartbeat_all(1, 2)
    h.poll(h.ctl.config.session_timeout_ms + 1)
    reg = h.part("t")
    assert reg.replicas == (3, 1, 2) and reg.isr == (1, 2) and reg.leader == 1
    assert reg.is_reassigning


def test_list_shows_only_partitions_being_moved() -> None:
    h = cluster(1, 2, 3)
    create(h, "a", {0: (BrokerId(1),), 1: (BrokerId(2),)})
    ok(reassign(h, "a", 1, (3,)))
    resp = h.run(ListPartitionReassignments())
    (r,) = resp.reassignments
    assert (r.topic, r.partition, r.replicas, r.adding_replicas, r.removing_replicas) == (
        "a",
        1,
        (3, 2),
        (3,),
        (2,),
    )
    assert h.run(ListPartitionReassignments(partitions=(("a", 0),))).reassignments == ()


def test_reassignment_fields_survive_the_record_codec_and_snapshots() -> None:
    h = cluster(1, 2, 3)
    create(h, "t", {0: (BrokerId(1),)})
    ok(reassign(h, "t", 0, (2,)))
    records = [r for r in h.image.records() if isinstance(r, PartitionRecord)]
    (rec,) = records
    assert decode_record(enc(rec)) == rec
    assert rec.adding_replicas == (2,) and rec.removing_replicas == (1,)
    change = PartitionChangeRecord(
        topic_id=rec.topic_id, partition=0, adding_replicas=(), removing_replicas=()
    )
    assert decode_record(enc(change)) == change
