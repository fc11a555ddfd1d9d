"""A stand-in for the Raft glue: drives a QuorumController, commits its records at
increasing offsets, and checks the image after every record."""

from __future__ import annotations

from collections import deque
from typing import Any

from metalog.commands import BrokerHeartbeat, Command, CreateTopic, RegisterBroker
from metalog.controller import ControllerConfig, ControllerResult, QuorumController
from metalog.image import MetadataImage, PartitionRegistration
from metalog.records import BrokerEpoch, BrokerId, Endpoint, MetadataRecord, TopicId

TERM = 1


class Harness:
    """``run(cmd)`` handles and commits at once; ``submit(cmd)`` leaves records in flight
    until ``commit()``. Every committed record is replayed and the image checked."""

    def __init__(self, config: ControllerConfig | None = None, *, check: bool = True) -> None:
        self.ctl = QuorumController(0, config or ControllerConfig(noop_interval_ms=None))
        self.now_ms = 0
        self.offset = 0
        self.check = check
        self.in_flight: deque[MetadataRecord] = deque()
        self.ctl.become_active(TERM, self.now_ms)
        self.epochs: dict[BrokerId, BrokerEpoch] = {}

    @property
    def image(self) -> MetadataImage:
        return self.ctl.image

    def commit(self, n: int | None = None) -> int:
        """Commit ``n`` in-flight records (all by default); the offset of the first."""
        base = self.offset + 1
        count = len(self.in_flight) if n is None else n
        for _ in range(count):
            self.offset += 1
            self.ctl.replay(self.in_flight.popleft(), self.offset, TERM)
            if self.check:
                self.ctl.image.check()
        return base

    def submit(self, cmd: Command) -> ControllerResult[Any]:
        res = self.ctl.handle(cmd, self.now_ms)
        self.in_flight.extend(res.records)
        return res

    def run(self, cmd: Command) -> Any:
        self.commit()
        res = self.submit(cmd)
        base = self.commit()
        return res.response_at(base)

    def poll(self, now_ms: int | None = None) -> tuple[tuple[MetadataRecord, ...], int | None]:
        if now_ms is not None:
            self.now_ms = now_ms
        records, deadline = self.ctl.poll(self.now_ms)
        self.in_flight.extend(records)
        self.commit()
        return records, deadline

    # ---------------------------------------------------------------- brokers

    def register(
        self,
        broker_id: int,
        rack: str | None = None,
        incarnation: str = "i0",
        previous_broker_epoch: int = -1,
        previous_incarnation_id: str | None = None,
    ) -> BrokerEpoch:
        resp = self.run(
            RegisterBroker(
                broker_id=BrokerId(broker_id),
                incarnation_id=incarnation,
                rack=rack,
                endpoints=(Endpoint("http", "127.0.0.1", 9000 + broker_id),),
                previous_broker_epoch=BrokerEpoch(previous_broker_epoch),
                previous_incarnation_id=previous_incarnation_id,
            )
        )
        self.epochs[BrokerId(broker_id)] = resp.broker_epoch
        return resp.broker_epoch  # type: ignore[no-any-return]

    def heartbeat(self, broker_id: int, **kw: Any) -> Any:
        b = BrokerId(broker_id)
        kw.setdefault("current_metadata_offset", self.offset)
        return self.run(BrokerHeartbeat(broker_id=b, broker_epoch=self.epochs[b], **kw))

    def add_brokers(self, *ids: int, racks: dict[int, str] | None = None) -> None:
        for i in ids:
            self.register(i, rack=(racks or {}).get(i))
            assert self.heartbeat(i).is_fenced is False

    def heartbeat_all(self, *ids: int) -> None:
        for i in ids:
            self.heartbeat(i)

    # ---------------------------------------------------------------- topics

    def create(self, name: str, partitions: int = 1, rf: int = 1, **kw: Any) -> TopicId:
        return self.run(  # type: ignore[no-any-return]
            CreateTopic(name=name, num_partitions=partitions, replication_factor=rf, **kw)
        ).topic_id

    def part(self, name: str, p: int = 0) -> PartitionRegistration:
        t = self.image.topics.get(name)
        assert t is not None, name
        return t.partitions[p]
