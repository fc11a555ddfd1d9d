"""A Kafka group of librdkafka consumers with ``cooperative-sticky`` (KIP-429's incremental
rebalance) on Longboat's coordinator: a second member joining moves only the partitions it
gets, the first keeps consuming the rest throughout, and together they read every record.

Longboat's coordinator assigns for every member (docs/consumer-groups.md); for a member
that named the cooperative protocol it revokes first and assigns in a second round, which
is what librdkafka's incremental callbacks expect."""

from __future__ import annotations

import time
from typing import Any

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from api.node.localcluster import Brokers, wait_for  # noqa: E402

pytestmark = pytest.mark.slow

TOPIC = "coop"
PARTITIONS = 4
RECORDS = 200


def _bootstrap(b: Brokers) -> str:
    return ",".join(f"127.0.0.1:{p}" for p in b.kafka_ports.values())


class Member:
    """A consumer that records every (incremental) assignment and revocation."""

    def __init__(self, bootstrap: str, name: str) -> None:
        self.name = name
        self.assigned: list[set[int]] = []
        self.revoked: list[set[int]] = []
        self.values: list[int] = []
        self.c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "coop-group",
                "client.id": name,
                "partition.assignment.strategy": "cooperative-sticky",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 300,
            }
        )

        def on_assign(c: Any, tps: list[Any]) -> None:
            self.assigned.append({tp.partition for tp in tps})

        def on_revoke(c: Any, tps: list[Any]) -> None:
            self.revoked.append({tp.partition for tp in tps})
            if tps:
                # Commit what was read before the partitions move: the next owner resumes
                # there, so no record is read twice.
                try:
                    c.commit(asynchronous=False)
                except confluent_kafka.KafkaException:
                    pass

        self.c.subscribe([TOPIC], on_assign=on_assign, on_revoke=on_revoke)

    def owned(self) -> set[int]:
        return {tp.partition for tp in self.c.assignment()}

    def poll(self, s: float) -> None:
        deadline = time.monotonic() + s
        while time.monotonic() < deadline:
            m = self.c.poll(0.1)
            if m is not None and m.error() is None:
                self.values.append(int(m.value()))


def test_cooperative_sticky_moves_only_what_the_new_member_gets(
    kafka_listener_cluster: Brokers,
) -> None:
    bs = _bootstrap(kafka_listener_cluster)
    admin = AdminClient({"bootstrap.servers": bs})  # kept: its futures need the handle
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)], operation_timeout=20)[TOPIC].result(
        timeout=30
    )
    p = Producer({"bootstrap.servers": bs, "linger.ms": 2})
    for i in range(RECORDS // 2):
        p.produce(TOPIC, value=str(i).encode(), partition=i % PARTITIONS)
    assert p.flush(30) == 0

    a = Member(bs, "a")
    wait_for(
        "a owns every partition", lambda: (a.poll(0.2), a.owned())[1] == set(range(PARTITIONS)), 60
    )
    before = a.owned()

    b = Member(bs, "b")

    def settled() -> bool:
        a.poll(0.1)
        b.poll(0.1)
        return len(a.owned()) == len(b.owned()) == PARTITIONS // 2

    wait_for("the two members share the partitions", settled, 60)
    # Incremental: a gave up exactly what b got, never everything (an eager rebalance
    # revokes all, then assigns anew).
    assert a.owned() | b.owned() == set(range(PARTITIONS))
    assert not a.owned() & b.owned()
    assert a.owned() < before
    moved = [r for r in a.revoked if r]
    assert moved == [b.owned()], (a.revoked, a.assigned, b.assigned)

    for i in range(RECORDS // 2, RECORDS):
        p.produce(TOPIC, value=str(i).encode(), partition=i % PARTITIONS)
    assert p.flush(30) == 0

    def all_read() -> bool:
        a.poll(0.1)
        b.poll(0.1)
        return len(set(a.values) | set(b.values)) == RECORDS

    wait_for("every record read by one of the members", all_read, 60)
    a.c.close()
    b.c.close()
    assert sorted(set(a.values) | set(b.values)) == list(range(RECORDS))
    # Each record once: a committed before it gave partitions up, b resumed there.
    assert sorted(a.values + b.values) == list(range(RECORDS))
