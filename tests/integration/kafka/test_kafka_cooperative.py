"""A Kafka group of cooperative consumers (KIP-429's incremental rebalance) on Longboat's
coordinator: librdkafka's ``cooperative-sticky`` and Apache Kafka 4.4's Java consumer with the
classic protocol and ``CooperativeStickyAssignor``. A second member joining moves only the
partitions it gets, the first keeps consuming the rest throughout, and together they read
every record once.

Longboat's coordinator assigns for every member (docs/consumer-groups.md); for a member
that named the cooperative protocol it revokes first and assigns in a second round, which
is what librdkafka's incremental callbacks and the Java client's ``ConsumerCoordinator``
expect. The Java members run in one JVM (``tests/kafka_java/CooperativeConsumers.java``, a
single-file program on the jars ``scripts/setup-kafka-java.sh`` fetches): about 10 s here,
most of it the JVM start and the group's initial rebalance delay."""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from apache_kafka import QUICK_START_JVM, REPO, kafka_jars  # noqa: E402
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
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


# ------------------------------------------------------------------------ the Java client


def _ownership(events: list[dict[str, Any]], end_ms: int) -> dict[int, list[tuple[int, int]]]:
    """partition -> the [from, to) times (ms) a member owned it, from its callbacks: a
    cooperative ``assigned`` adds partitions, ``revoked`` and ``lost`` remove them."""
    since: dict[int, int] = {}
    spans: dict[int, list[tuple[int, int]]] = {}
    for e in events:
        for p in e["partitions"]:
            if e["event"] == "assigned":
                assert p not in since, f"{p} assigned twice without a revoke: {events}"
                since[p] = e["ms"]
            else:
                spans.setdefault(p, []).append((since.pop(p), e["ms"]))
    for p, t in since.items():
        spans.setdefault(p, []).append((t, end_ms))
    return spans


def test_java_cooperative_sticky_moves_only_what_the_new_member_gets(
    kafka_listener_cluster: Brokers,
) -> None:
    """Apache Kafka 4.4's Java consumer, classic protocol with CooperativeStickyAssignor
    (``tests/kafka_java/CooperativeConsumers.java``): the same as above, two members in one
    JVM."""
    jars = kafka_jars()
    bs = _bootstrap(kafka_listener_cluster)
    topic = "coop-java"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, PARTITIONS, 3)], operation_timeout=20)[topic].result(
        timeout=30
    )
    wait_for(
        f"{topic} has leaders",
        lambda: all(
            p.leader >= 0
            for p in admin.list_topics(topic, timeout=5).topics[topic].partitions.values()
        ),
        20,
    )
    run = subprocess.run(
        [
            "java",
            "-Xmx256m",
            *QUICK_START_JVM,
            "-cp",
            f"{jars}/*",
            str(REPO / "tests" / "kafka_java" / "CooperativeConsumers.java"),
            bs,
            topic,
            "coop-java-group",
            str(PARTITIONS),
            str(RECORDS),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    (line,) = [ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")]
    out = json.loads(line.removeprefix("RESULT "))
    a, b = out["a"], out["b"]
    assert a["failed"] is None and b["failed"] is None, (a["failed"], b["failed"])

    # Incremental: a alone got every partition; when b joined, a gave up exactly what b got
    # (one revoke of half, never all), and b was assigned only that.
    a_owns, b_owns = set(out["aOwns"]), set(out["bOwns"])
    for m in (a, b):  # closing revokes the rest (Java's onLeavePrepare): not a rebalance
        m["events"] = [e for e in m["events"] if e["ms"] <= out["doneMs"]]
    assert a_owns | b_owns == set(range(PARTITIONS)) and not a_owns & b_owns
    a_moves = [(e["event"], set(e["partitions"])) for e in a["events"] if e["partitions"]]
    assert a_moves == [("assigned", set(range(PARTITIONS))), ("revoked", b_owns)], a["events"]
    b_moves = [(e["event"], set(e["partitions"])) for e in b["events"] if e["partitions"]]
    assert b_moves == [("assigned", b_owns)], b["events"]
    # ... and no partition had two owners at once (b's assignment came after a's revoke).
    spans_a, spans_b = (
        _ownership(a["events"], out["doneMs"]),
        _ownership(b["events"], out["doneMs"]),
    )
    for p in range(PARTITIONS):
        for fa, ta in spans_a.get(p, []):
            for fb, tb in spans_b.get(p, []):
                assert ta <= fb or tb <= fa, (p, spans_a, spans_b)

    # Every record read once across the group (commits after each poll and on revoke), the
    # second half by the partition's owner after the hand-over; the group's committed
    # offsets are the ends.
    values = [r["value"] for r in a["records"] + b["records"]]
    assert sorted(values) == list(range(RECORDS))
    late = [r for r in a["records"] + b["records"] if r["value"] >= RECORDS // 2]
    assert all((r["partition"] in a_owns) == (r in a["records"]) for r in late)
    c = Consumer({"bootstrap.servers": bs, "group.id": "coop-java-group"})
    try:
        committed = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    finally:
        c.close()
    assert {tp.partition: tp.offset for tp in committed} == {
        p: RECORDS // PARTITIONS for p in range(PARTITIONS)
    }
