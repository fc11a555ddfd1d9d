"""The active controller's work per event is bounded (finding 13): a poll decides at most
``partition_changes_per_poll_max`` partition changes, and a big ``CreateTopic`` is decided in
steps of ``partitions_per_step`` partitions, so the event loop that also runs Raft is never
held for the whole of a 10,000-partition fence or create."""

from __future__ import annotations

import pytest
from metalog_harness import Harness

from metalog.commands import (
    AlterPartition,
    CreatePartitions,
    CreateTopic,
    IsrMember,
    PartitionStateChange,
    RegisterBroker,
)
from metalog.controller import ControllerConfig
from metalog.errors import NotControllerError
from metalog.records import (
    BrokerEpoch,
    BrokerId,
    Endpoint,
    FenceBrokerRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
)

SESSION_MS = ControllerConfig().session_timeout_ms


def _harness(**kw: object) -> Harness:
    base: dict[str, object] = {"noop_interval_ms": None, "leader_imbalance_check_interval_ms": None}
    h = Harness(ControllerConfig(**{**base, **kw}), check=False)  # type: ignore[arg-type]
    h.add_brokers(1, 2, 3)
    return h


def test_fencing_brokers_of_many_partitions_decides_a_bounded_number_of_changes_per_poll() -> None:
    h = _harness(partition_changes_per_poll_max=50)
    h.create("big", partitions=400, rf=3)
    now = h.now_ms + SESSION_MS + 1  # every session expired: all three brokers go
    polls: list[tuple[object, ...]] = []
    for _ in range(100):
        records, deadline = h.poll(now)
        if not records:
            break
        changes = [r for r in records if isinstance(r, PartitionChangeRecord)]
        assert len(changes) <= 50, f"poll {len(polls)} decided {len(changes)} changes"
        polls.append(records)
        # Hand-overs left: poll again at once; none: nothing is due any more.
        done = all(b.fenced for b in h.image.brokers.brokers.values())
        assert deadline == (None if done else now)
        # A fenced broker leads nothing and is in no ISR it could be removed from: its
        # FenceBrokerRecord came with (after) the last of its hand-overs.
        for b in h.image.brokers.brokers.values():
            if b.fenced:
                for _, _, reg in h.image.topics.partitions():
                    assert reg.leader != b.broker_id
    fenced = [r.broker_id for rs in polls for r in rs if isinstance(r, FenceBrokerRecord)]
    assert fenced == [1, 2, 3]  # one broker at a time, in order
    assert len(polls) >= 3 * 400 // 50  # 400 partitions x 3 brokers, 50 a poll
    assert all(b.fenced for b in h.image.brokers.brokers.values())
    regs = [reg for _, _, reg in h.image.topics.partitions()]
    assert len(regs) == 400 and all(reg.leader == -1 for reg in regs)


def test_a_broker_of_few_partitions_is_fenced_in_one_poll_as_before() -> None:
    h = _harness(partition_changes_per_poll_max=50)
    h.create("small", partitions=10, rf=3)
    for b in (2, 3):
        h.heartbeat(b)
    h.now_ms += SESSION_MS - 1
    h.heartbeat_all(2, 3)
    records, _ = h.poll(h.now_ms + 2)  # only broker 1's session expired
    assert isinstance(records[0], FenceBrokerRecord) and records[0].broker_id == 1
    assert all(isinstance(r, PartitionChangeRecord) for r in records[1:])
    assert h.image.brokers.get(BrokerId(1)).fenced
    assert all(reg.leader != 1 for _, _, reg in h.image.topics.partitions())


def test_a_heartbeat_during_the_hand_over_keeps_the_broker_unfenced() -> None:
    h = _harness(partition_changes_per_poll_max=50)
    h.create("big", partitions=300, rf=3)
    h.now_ms += SESSION_MS - 1
    h.heartbeat_all(2, 3)
    h.poll(h.now_ms + 2)  # broker 1: the first 50 of its 300 partitions handed over
    led = sum(reg.leader == 1 or 1 in reg.isr for _, _, reg in h.image.topics.partitions())
    assert 200 <= led < 300
    h.now_ms += 2
    h.heartbeat(1)  # alive after all
    records, _ = h.poll()
    assert not any(isinstance(r, PartitionChangeRecord | FenceBrokerRecord) for r in records)
    assert not h.image.brokers.get(BrokerId(1)).fenced


def test_create_topic_is_decided_in_steps_and_commits_as_one_batch() -> None:
    h = _harness(partitions_per_step=100)
    steps = h.ctl.handle_steps(CreateTopic(name="t", num_partitions=1000, replication_factor=3), 0)
    yields = 0
    while True:
        try:
            next(steps)
        except StopIteration as done:
            result = done.value
            break
        yields += 1
    assert yields == 10  # one per 100 partitions
    parts = [r for r in result.records if isinstance(r, PartitionRecord)]
    assert len(parts) == 1000 and len(result.records) == 1001
    h.in_flight.extend(result.records)
    base = h.commit()
    assert result.response_at(base).num_partitions == 1000
    assert len(h.image.topics.get("t").partitions) == 1000

    # CreatePartitions too.
    steps = h.ctl.handle_steps(CreatePartitions(name="t", total_count=1250), 0)
    assert sum(1 for _ in steps) == 2


def test_a_command_decided_in_steps_fails_if_the_view_moved_under_it() -> None:
    h = _harness(partitions_per_step=100, noop_interval_ms=1)
    steps = h.ctl.handle_steps(CreateTopic(name="t", num_partitions=500, replication_factor=3), 0)
    next(steps)
    records, _ = h.ctl.poll(10)  # a poll proposed in between (what the service's lock stops)
    assert records and isinstance(records[-1], NoOpRecord)
    with pytest.raises(NotControllerError, match="view changed"):
        for _ in steps:
            pass
    # Commits of pending records between steps are fine (the service lets those happen).
    h.in_flight.extend(records)
    steps = h.ctl.handle_steps(CreateTopic(name="u", num_partitions=500, replication_factor=3), 0)
    next(steps)
    h.commit()
    while True:
        try:
            next(steps)
        except StopIteration as done:
            assert len(done.value.records) == 501
            break


def test_a_restarted_broker_of_many_partitions_registers_in_steps() -> None:
    h = _harness(partitions_per_step=100)
    h.create("big", partitions=450, rf=3)
    # A new incarnation of broker 1 (its old one dead: it names it): it leaves all 450
    # ISRs and ELRs in its registration's batch, decided 100 at a time.
    steps = h.ctl.handle_steps(
        RegisterBroker(
            broker_id=BrokerId(1),
            incarnation_id="i1",
            previous_incarnation_id="i0",
            endpoints=(Endpoint("http", "127.0.0.1", 9001),),
        ),
        h.now_ms,
    )
    yields = 0
    while True:
        try:
            next(steps)
        except StopIteration as done:
            result = done.value
            break
        yields += 1
    assert yields == 4
    changes = [r for r in result.records if isinstance(r, PartitionChangeRecord)]
    assert len(changes) == 450 and isinstance(result.records[0], RegisterBrokerRecord)


def test_an_alter_partition_of_many_changes_is_decided_in_steps() -> None:
    h = _harness(partitions_per_step=100)
    one = (BrokerId(1), BrokerId(2), BrokerId(3))
    h.run(CreateTopic(name="big", assignments={p: one for p in range(300)}))  # 1 leads all
    tid = h.image.topics.by_name["big"]
    changes = tuple(
        PartitionStateChange(
            topic_id=tid,
            partition=p,
            leader_epoch=reg.leader_epoch,
            partition_epoch=reg.partition_epoch,
            new_isr=(IsrMember(BrokerId(1), BrokerEpoch(-1)),),  # shrink to the leader
        )
        for p, reg in h.image.topics.get("big").partitions.items()
    )
    steps = h.ctl.handle_steps(
        AlterPartition(
            broker_id=BrokerId(1), broker_epoch=h.epochs[BrokerId(1)], partitions=changes
        ),
        h.now_ms,
    )
    yields = 0
    while True:
        try:
            next(steps)
        except StopIteration as done:
            result = done.value
            break
        yields += 1
    assert yields == 2  # 300 changes: after the 100th and the 200th
    assert len(result.records) == 300 and all(r.error is None for r in result.response.results)
