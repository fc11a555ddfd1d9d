"""A real Kafka client's transactions against Longboat's Kafka listener (1 controller, 3
brokers as processes): confluent-kafka (librdkafka) runs InitProducerId with its
transactional id, FindCoordinator for it, AddPartitionsToTxn, transactional Produce (verified
by the partition leaders, KIP-890 part 1), AddOffsetsToTxn, TxnOffsetCommit and EndTxn, and a
read_committed Kafka consumer reads only what committed; a second producer of the id fences
the first."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from api.node.localcluster import Brokers, running_cluster

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root: Path = tmp_path_factory.mktemp("txn-kafka")
    with running_cluster(
        root,
        controllers=1,
        brokers=3,
        kafka=True,
        broker_args=["--override", "transaction_state_log_num_partitions=4"],
    ) as (_, brokers):
        yield _bootstrap(brokers)


def _bootstrap(brokers: Brokers) -> str:
    return ",".join(f"127.0.0.1:{p}" for p in brokers.kafka_ports.values())


def _create(bootstrap: str, topic: str, partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 3)]).values():
        f.result(30)


def _read_committed(bootstrap: str, topic: str, partitions: int, want: int) -> list[bytes]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{topic}-{time.monotonic_ns()}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline and len(out) < want:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                out.append(m.value())
        extra = c.poll(2.0)  # nothing more: an aborted record would show here
        assert extra is None or extra.error() is not None, extra.value()
    finally:
        c.close()
    return sorted(out)


def test_a_kafka_client_commits_and_aborts(bootstrap: str) -> None:
    _create(bootstrap, "ck-out")
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "ck-1", "linger.ms": 1})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(6):
        p.produce("ck-out", f"c{i}".encode(), partition=i % 2)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(4):
        p.produce("ck-out", f"x{i}".encode(), partition=i % 2)
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce("ck-out", b"c6", partition=0)
    p.commit_transaction(30)
    assert _read_committed(bootstrap, "ck-out", 2, 7) == [f"c{i}".encode() for i in range(7)]


def test_a_second_kafka_producer_fences_the_first(bootstrap: str) -> None:
    _create(bootstrap, "ck-zombie", 1)
    first = Producer({"bootstrap.servers": bootstrap, "transactional.id": "ck-z"})
    first.init_transactions(30)
    first.begin_transaction()
    first.produce("ck-zombie", b"zombie")
    first.flush(30)
    second = Producer({"bootstrap.servers": bootstrap, "transactional.id": "ck-z"})
    second.init_transactions(60)  # aborts the first's transaction
    with pytest.raises(KafkaException) as e:
        first.commit_transaction(30)
    assert e.value.args[0].fatal() or "fenced" in str(e.value).lower()
    second.begin_transaction()
    second.produce("ck-zombie", b"fresh")
    second.commit_transaction(30)
    assert _read_committed(bootstrap, "ck-zombie", 1, 1) == [b"fresh"]


def test_a_kafka_client_commits_offsets_with_its_outputs(bootstrap: str) -> None:
    _create(bootstrap, "ck-in", 1)
    _create(bootstrap, "ck-eos", 1)
    plain = Producer({"bootstrap.servers": bootstrap})
    for i in range(4):
        plain.produce("ck-in", f"in{i}".encode())
    plain.flush(30)
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "ck-eos-group",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    c.subscribe(["ck-in"])
    records = []
    deadline = time.monotonic() + 60
    while len(records) < 4 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            records.append(m)
    assert len(records) == 4
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "ck-eos"})
    p.init_transactions(30)
    p.begin_transaction()
    for m in records:
        p.produce("ck-eos", b"out-" + m.value())
    offsets = [TopicPartition("ck-in", 0, records[-1].offset() + 1)]
    p.send_offsets_to_transaction(offsets, c.consumer_group_metadata(), 30)
    p.commit_transaction(30)
    deadline = time.monotonic() + 30
    got = None
    while time.monotonic() < deadline:
        got = c.committed([TopicPartition("ck-in", 0)], 10)[0].offset
        if got == 4:
            break
        time.sleep(0.2)
    c.close()
    assert got == 4
    assert _read_committed(bootstrap, "ck-eos", 1, 4) == [f"out-in{i}".encode() for i in range(4)]
