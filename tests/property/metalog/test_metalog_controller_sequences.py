"""Random command sequences through the QuorumController, with records left in flight,
partial commits, clock jumps and controller failovers. After every committed record the image
must be consistent (leader in ISR within replicas, or -1) and epochs must only grow; when
nothing is in flight no fenced or shut-down broker leads; a standby replaying the same log, and
a snapshot of the image, rebuild an equal image."""

from __future__ import annotations

from collections import deque
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from metalog.commands import (
    AllocateProducerIds,
    AlterConfigs,
    AlterPartition,
    AlterPartitionReassignments,
    BrokerHeartbeat,
    CreatePartitions,
    CreateTopic,
    DeleteTopic,
    ElectionType,
    ElectLeaders,
    IsrMember,
    PartitionStateChange,
    RegisterBroker,
    ReplicaReassignment,
    UnregisterBroker,
)
from metalog.controller import ControllerConfig, QuorumController
from metalog.delta import decode_snapshot, encode_snapshot
from metalog.errors import MetadataError
from metalog.image import MetadataImage, PartitionRegistration
from metalog.records import (
    NO_LEADER,
    BrokerId,
    ConfigResourceType,
    MetadataRecord,
    PartitionChangeRecord,
)

BROKERS = [0, 1, 2, 3, 4]
TOPICS = ["a", "b", "c"]


class World:
    def __init__(self) -> None:
        self.ctl = QuorumController(
            0, ControllerConfig(noop_interval_ms=700, leader_imbalance_check_interval_ms=5_000)
        )
        self.standby = QuorumController(1)
        self.term = 1
        self.ctl.become_active(self.term, 0)
        self.now_ms = 0
        self.offset = 0
        self.in_flight: deque[tuple[MetadataRecord, ...]] = deque()
        """Proposed batches; Raft commits (or loses) each batch whole."""
        self.parts: dict[tuple[str, int], PartitionRegistration] = {}
        self.broker_epochs: dict[int, int] = {}
        self.next_pid = 0
        self.commands = 0
        self.refusals = 0

    @property
    def image(self) -> MetadataImage:
        return self.ctl.image

    def commit(self, n: int) -> None:
        """Commit the first ``n`` batches in flight, checking after every record."""
        for _ in range(min(n, len(self.in_flight))):
            for rec in self.in_flight.popleft():
                self.offset += 1
                self.ctl.replay(rec, self.offset, self.term)
                self.standby.replay(rec, self.offset, self.term)
                self.check_after_record()

    def check_after_record(self) -> None:
        image = self.ctl.image
        image.check()
        seen = set()
        for t, p, reg in image.topics.partitions():
            key = (t.topic_id, p)
            seen.add(key)
            old = self.parts.get(key)
            if old is not None and old != reg:
                assert reg.partition_epoch > old.partition_epoch, "partition epoch not bumped"
                if reg.leader != old.leader:
                    assert reg.leader_epoch > old.leader_epoch, "leader epoch not bumped"
                else:
                    assert reg.leader_epoch >= old.leader_epoch, "leader epoch went back"
                if old.isr and set(reg.replicas) < set(old.replicas):
                    assert reg.isr, "removing replicas emptied the ISR"
                if (
                    old.is_reassigning
                    and not reg.is_reassigning
                    and reg.replicas == old.target_replicas != old.original_replicas
                ):
                    # KIP-455: a move completes only once every target is in the ISR, so
                    # the replicas it drops held nothing the rest lacked.
                    assert set(reg.replicas) <= set(old.isr), "move completed early"
                    event("a reassignment completed")
            self.parts[key] = reg
        for b, reg in image.brokers.brokers.items():
            if b in self.broker_epochs:
                assert reg.broker_epoch >= self.broker_epochs[b], "broker epoch went back"
            self.broker_epochs[b] = reg.broker_epoch
        assert image.producer_ids.next_producer_id >= self.next_pid
        self.next_pid = image.producer_ids.next_producer_id

    def check_quiescent(self) -> None:
        """Nothing in flight: every decision has committed."""
        image = self.ctl.image
        for t, p, reg in image.topics.partitions():
            if reg.leader != NO_LEADER:
                assert image.brokers.is_usable(reg.leader), (t.name, p, reg)
            if len(reg.isr) > 1:
                for b in reg.isr:
                    broker = image.brokers.get(b)
                    assert broker is not None and not broker.fenced, (t.name, p, reg)

    def submit(self, cmd: Any) -> None:
        self.commands += 1
        try:
            res = self.ctl.handle(cmd, self.now_ms)
        except MetadataError as e:
            self.refusals += 1
            event(f"{type(cmd).__name__}: {e.code}")
            return
        event(f"{type(cmd).__name__}: {'records' if res.records else 'no records'}")
        for r in res.records:
            if isinstance(r, PartitionChangeRecord) and r.leader >= -1:
                event("leader changed" if r.leader >= 0 else "partition went offline")
            if isinstance(r, PartitionChangeRecord) and r.leader_recovery_state == 1:
                event("unclean election")
        for result in getattr(res.response, "results", ()):
            if getattr(result, "error", None) is not None:
                event(f"{type(cmd).__name__} result: {result.error.code}")
        if res.records:
            self.in_flight.append(res.records)

    def bootstrap(self, brokers: int, racks: bool) -> None:
        """Register, commit and unfence ``brokers`` brokers: a cluster worth commanding."""
        for b in range(brokers):
            self.submit(
                RegisterBroker(
                    broker_id=BrokerId(b), incarnation_id="x", rack=f"r{b % 2}" if racks else None
                )
            )
        self.commit(len(self.in_flight))
        self.heartbeat_all()

    def heartbeat_all(self) -> None:
        for b, reg in sorted(self.image.brokers.brokers.items()):
            if reg.broker_epoch >= 0:
                self.submit(
                    BrokerHeartbeat(
                        broker_id=b,
                        broker_epoch=reg.broker_epoch,
                        current_metadata_offset=self.offset,
                    )
                )
        self.commit(len(self.in_flight))

    def failover(self, keep: int) -> None:
        """The leader dies: a prefix of its uncommitted records commits anyway, the rest is
        lost; the node wins the next term after replaying everything committed."""
        self.ctl.become_standby()
        self.commit(keep)
        self.in_flight.clear()
        self.term += 1
        self.ctl.become_active(self.term, self.now_ms)


@st.composite
def steps(draw: st.DrawFn, w: World) -> None:
    kind = draw(
        st.sampled_from(
            [
                "create",
                "create",
                "delete",
                "grow",
                "config",
                "register",
                "register",
                "heartbeat",
                "heartbeat",
                "heartbeat",
                "tick",
                "alter",
                "alter",
                "elect",
                "pids",
                "unregister",
                "commit",
                "commit",
                "failover",
                "reassign",
                "reassign",
            ]
        )
    )
    latest = w.ctl.latest_image
    committed = w.image
    if kind == "create":
        if draw(st.booleans()):
            w.submit(
                CreateTopic(
                    name=draw(st.sampled_from(TOPICS)),
                    num_partitions=draw(st.integers(1, 4)),
                    replication_factor=draw(st.integers(1, 3)),
                    configs=draw(st.sampled_from([{}, {"unclean.leader.election.enable": "true"}])),
                )
            )
        else:
            n = draw(st.integers(1, 3))
            rf = draw(st.integers(1, 3))
            w.submit(
                CreateTopic(
                    name=draw(st.sampled_from(TOPICS)),
                    assignments={p: tuple(draw(st.permutations(BROKERS))[:rf]) for p in range(n)},
                )
            )
    elif kind == "delete":
        w.submit(DeleteTopic(name=draw(st.sampled_from(TOPICS))))
    elif kind == "grow":
        w.submit(
            CreatePartitions(
                name=draw(st.sampled_from(TOPICS)), total_count=draw(st.integers(1, 6))
            )
        )
    elif kind == "config":
        w.submit(
            AlterConfigs(
                resource_type=ConfigResourceType.TOPIC,
                resource_name=draw(st.sampled_from(TOPICS)),
                ops={
                    "unclean.leader.election.enable": draw(st.sampled_from(["true", "false", None]))
                },
            )
        )
    elif kind == "register":
        b = draw(st.sampled_from(BROKERS))
        w.submit(
            RegisterBroker(
                broker_id=BrokerId(b),
                incarnation_id=draw(st.sampled_from("xy")),
                rack=draw(st.sampled_from([None, "r1", "r2"])),
            )
        )
    elif kind == "heartbeat":
        regs = sorted(committed.brokers.brokers.items())
        if not regs:
            return
        b, reg = draw(st.sampled_from(regs))
        flag = draw(st.sampled_from(["none", "none", "none", "fence", "shutdown"]))
        w.submit(
            BrokerHeartbeat(
                broker_id=b,
                broker_epoch=reg.broker_epoch,
                current_metadata_offset=draw(st.sampled_from([w.offset, reg.broker_epoch - 1])),
                want_fence=flag == "fence",
                want_shutdown=flag == "shutdown",
            )
        )
    elif kind == "heartbeat_all":
        w.heartbeat_all()
    elif kind == "tick":
        w.now_ms += draw(st.sampled_from([100, 1_000, 3_000, 4_000, 10_000]))
        records, deadline = w.ctl.poll(w.now_ms)
        if any(type(r).__name__ == "FenceBrokerRecord" for r in records):
            event("poll fenced a broker")
        assert deadline is None or deadline > w.now_ms
        if records:
            w.in_flight.append(records)
    elif kind == "alter":
        parts = sorted(
            ((t.topic_id, p), reg)
            for t, p, reg in latest.topics.partitions()
            if reg.leader != NO_LEADER
        )
        if not parts:
            return
        (tid, p), reg = draw(st.sampled_from(parts))
        others = [b for b in reg.replicas if b != reg.leader]
        chosen = draw(st.lists(st.sampled_from(others), unique=True)) if others else []
        if reg.is_reassigning and draw(st.booleans()):
            chosen = others  # every replica caught up: completes the move (KIP-455)
        isr = (reg.leader, *chosen)
        leader_reg = committed.brokers.get(reg.leader)
        if leader_reg is None:
            return
        stale = draw(st.sampled_from([0, 0, 0, 1]))
        w.submit(
            AlterPartition(
                broker_id=reg.leader,
                broker_epoch=leader_reg.broker_epoch,
                partitions=(
                    PartitionStateChange(
                        topic_id=tid,
                        partition=p,
                        leader_epoch=reg.leader_epoch - stale,
                        partition_epoch=reg.partition_epoch,
                        new_isr=tuple(IsrMember(b) for b in isr),
                    ),
                ),
            )
        )
    elif kind == "elect":
        w.submit(ElectLeaders(election=draw(st.sampled_from(list(ElectionType)))))
    elif kind == "pids":
        regs = sorted(committed.brokers.brokers.items())
        if regs:
            b, reg = draw(st.sampled_from(regs))
            w.submit(AllocateProducerIds(broker_id=b, broker_epoch=reg.broker_epoch))
    elif kind == "unregister":
        w.submit(UnregisterBroker(broker_id=draw(st.sampled_from(BROKERS))))
    elif kind == "reassign":
        # KIP-455: start, replace or cancel a move; the "alter" steps bring the adding
        # replicas into the ISR, which completes it.
        parts = sorted(((t.name, p), reg) for t, p, reg in latest.topics.partitions())
        if not parts:
            return
        (name, p), reg = draw(st.sampled_from(parts))
        if reg.is_reassigning and draw(st.booleans()):
            target = None
        else:
            target = tuple(
                BrokerId(b) for b in draw(st.permutations(BROKERS))[: draw(st.integers(1, 3))]
            )
        w.submit(AlterPartitionReassignments(reassignments=(ReplicaReassignment(name, p, target),)))
        moved = w.ctl.latest_image.topics.get(name)
        if moved is not None and p in moved.partitions and moved.partitions[p].is_reassigning:
            event("a reassignment in progress")
    elif kind == "commit":
        w.commit(draw(st.integers(1, 5)))
    elif kind == "failover":
        w.failover(draw(st.integers(0, len(w.in_flight))))


@settings(max_examples=120)
@given(st.data())
def test_random_command_sequences_keep_the_image_consistent(data: st.DataObject) -> None:
    w = World()
    w.bootstrap(data.draw(st.integers(0, 5), label="brokers"), data.draw(st.booleans()))
    for _ in range(data.draw(st.integers(10, 60), label="steps")):
        data.draw(steps(w))
        if not w.in_flight and not w.ctl.pending_records:
            w.check_quiescent()
    w.commit(len(w.in_flight))
    w.check_quiescent()
    assert w.standby.image == w.image
    assert decode_snapshot(encode_snapshot(w.image)) == w.image
    assert w.image.offset == (w.offset or -1)


@settings(max_examples=30)
@given(st.data())
def test_every_intermediate_image_snapshots_to_itself(data: st.DataObject) -> None:
    w = World()
    w.bootstrap(data.draw(st.integers(1, 5), label="brokers"), data.draw(st.booleans()))
    for _ in range(data.draw(st.integers(5, 30), label="steps")):
        data.draw(steps(w))
        snap = decode_snapshot(encode_snapshot(w.image))
        assert snap == w.image
        assert snap.records() == w.image.records()
