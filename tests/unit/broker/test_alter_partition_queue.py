"""AlterPartitionQueue: pending ISR changes coalesced into one request at a time (Kafka's
AlterPartitionManager), answers paired with the exact change sent, retries after a back-off."""

from __future__ import annotations

import pytest

from broker.alter_partition_manager import AlterPartitionQueue
from common.invariant import InvariantError
from metalog.commands import IsrMember, PartitionStateChange
from metalog.errors import InvalidUpdateVersionError
from metalog.image import PartitionRegistration
from metalog.records import BrokerId, LeaderEpoch, PartitionEpoch, TopicId
from metalog.responses import AlterPartitionResult

T = TopicId("T" * 22)


def change(p: int, isr: tuple[int, ...] = (1, 2), partition_epoch: int = 0) -> PartitionStateChange:
    return PartitionStateChange(
        topic_id=T,
        partition=p,
        leader_epoch=LeaderEpoch(0),
        partition_epoch=PartitionEpoch(partition_epoch),
        new_isr=tuple(IsrMember(BrokerId(b)) for b in isr),
    )


def ok(c: PartitionStateChange) -> AlterPartitionResult:
    isr = tuple(m.broker_id for m in c.new_isr)
    reg = PartitionRegistration(
        replicas=(BrokerId(1), BrokerId(2), BrokerId(3)),
        isr=isr,
        leader=BrokerId(1),
        leader_epoch=c.leader_epoch,
        partition_epoch=PartitionEpoch(c.partition_epoch + 1),
    )
    return AlterPartitionResult(c.topic_id, c.partition, registration=reg)


def test_pending_changes_of_many_partitions_go_in_one_request() -> None:
    q: AlterPartitionQueue[str] = AlterPartitionQueue()
    for p in range(5):
        q.submit(f"leader-{p}", change(p), now_ms=0)
    sent = q.take(0)
    assert [i.change.partition for i in sent] == [0, 1, 2, 3, 4]
    assert [i.owner for i in sent] == [f"leader-{p}" for p in range(5)]
    assert q.queued == 0 and q.in_flight == sent


def test_only_one_request_is_in_flight() -> None:
    q: AlterPartitionQueue[str] = AlterPartitionQueue()
    q.submit("a", change(0), 0)
    first = q.take(0)
    q.submit("b", change(1), 0)
    assert q.take(0) == ()  # waits for the answer to the first
    q.complete([ok(first[0].change)])
    assert [i.change.partition for i in q.take(0)] == [1]


def test_a_newer_change_replaces_the_queued_one_and_keeps_its_turn() -> None:
    q: AlterPartitionQueue[str] = AlterPartitionQueue()
    q.submit("a", change(0, (1, 2, 3)), 0)
    q.submit("b", change(1), 0)
    q.submit("a2", change(0, (1,), partition_epoch=1), 0)
    sent = q.take(0)
    assert [(i.owner, i.change.partition) for i in sent] == [("a2", 0), ("b", 1)]
    assert sent[0].change == change(0, (1,), partition_epoch=1)


def test_a_change_queued_while_its_partition_is_in_flight_waits_for_that_answer() -> None:
    q: AlterPartitionQueue[str] = AlterPartitionQueue()
    old, new = change(0, (1, 2)), change(0, (1,), partition_epoch=1)
    q.submit("old", old, 0)
    (sent,) = q.take(0)
    assert sent.change == old
    q.submit("new", new, 0)
    assert q.take(0) == ()
    # The answer is paired with the change that was sent, not the one now queued.
    ((item, result),) = q.complete([ok(old)])
    assert item.change == old and item.owner == "old" and result is not None
    (nxt,) = q.take(0)
    assert nxt.change == new and nxt.owner == "new"


def test_answers_are_paired_with_the_sent_change_by_partition() -> None:
    q: AlterPartitionQueue[str] = AlterPartitionQueue()
    for p in range(3):
        q.submit(str(p), change(p), 0)
    sent = q.take(0)
    err = AlterPartitionResult(T, 2, error=InvalidUpdateVersionError("stale"))
    # In another order, one missing, one the request did not carry.
    pairs = q.complete([err, ok(change(0)), ok(change(7))])
    assert [(i.change.partition, r) for i, r in pairs] == [
        (0, ok(change(0))),
        (1, None),  # left out by the controller: the shell retries it
        (2, err),
    ]
    assert [i for i, _ in pairs] == list(sent)
    assert q.in_flight is None


def test_a_request_without_an_answer_pairs_every_change_with_none() -> None:
    q: AlterPartitionQueue[str] = AlterPartitionQueue()
    q.submit("a", change(0), 0)
    q.submit("b", change(1), 0)
    q.take(0)
    assert [(i.owner, r) for i, r in q.fail()] == [("a", None), ("b", None)]
    assert q.in_flight is None


def test_a_retry_waits_for_the_back_off() -> None:
    q: AlterPartitionQueue[str] = AlterPartitionQueue(retry_backoff_ms=500)
    c = change(0)
    q.submit("a", c, 0)
    q.take(0)
    q.fail()
    assert q.retry("a", c, now_ms=1_000)
    assert q.next_due_ms() == 1_500
    assert q.take(1_499) == ()
    (again,) = q.take(1_500)
    assert again.change == c


def test_a_retry_does_not_replace_a_newer_queued_change() -> None:
    q: AlterPartitionQueue[str] = AlterPartitionQueue()
    old, new = change(0, (1, 2)), change(0, (1,), partition_epoch=1)
    q.submit("a", old, 0)
    q.take(0)
    q.submit("a", new, 10)
    q.fail()
    assert not q.retry("a", old, 20)
    assert q.queued_change((T, 0)) == new
    (sent,) = q.take(20)
    assert sent.change == new  # at once: a fresh change has no back-off


def test_changes_not_yet_due_stay_behind_due_ones() -> None:
    q: AlterPartitionQueue[str] = AlterPartitionQueue(retry_backoff_ms=500)
    q.retry("a", change(0), now_ms=0)  # due at 500
    q.submit("b", change(1), now_ms=100)
    assert [i.change.partition for i in q.take(100)] == [1]
    q.complete([ok(change(1))])
    assert q.take(499) == ()
    assert [i.change.partition for i in q.take(500)] == [0]


def test_a_request_carries_at_most_partitions_max_changes() -> None:
    q: AlterPartitionQueue[str] = AlterPartitionQueue(partitions_max=3)
    for p in range(7):
        q.submit(str(p), change(p), 0)
    sizes = []
    while (sent := q.take(0)) != ():
        sizes.append(len(sent))
        q.complete([ok(i.change) for i in sent])
    assert sizes == [3, 3, 1]


def test_changes_of_a_leader_that_moved_on_are_dropped_not_sent() -> None:
    q: AlterPartitionQueue[str] = AlterPartitionQueue()
    q.submit("resigned", change(0), 0)
    q.submit("leading", change(1), 0)
    sent = q.take(0, keep=lambda item: item.owner == "leading")
    assert [i.owner for i in sent] == ["leading"]
    q.complete([])
    assert q.queued == 0 and q.take(0) == ()


def test_discard_forgets_a_queued_change() -> None:
    q: AlterPartitionQueue[str] = AlterPartitionQueue()
    q.submit("a", change(0), 0)
    assert q.discard((T, 0)) and not q.discard((T, 0))
    assert q.take(0) == () and q.next_due_ms() is None


def test_an_answer_without_a_request_is_a_bug() -> None:
    q: AlterPartitionQueue[str] = AlterPartitionQueue()
    with pytest.raises(InvariantError):
        q.complete([])
