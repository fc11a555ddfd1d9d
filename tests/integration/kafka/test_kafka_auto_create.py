"""``auto_create_topics_enable``: a Kafka producer's first record to a topic that does not
exist creates it with the cluster's defaults, as against Kafka with
``auto.create.topics.enable``; a cluster started without the setting (every other test in
this package) answers UNKNOWN_TOPIC_OR_PARTITION instead."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

from api.node.localcluster import Brokers, running_cluster  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Brokers]:
    root: Path = tmp_path_factory.mktemp("kafka-auto-create")
    with running_cluster(
        root,
        controllers=1,
        brokers=1,
        kafka=True,
        broker_args=["--override", "auto_create_topics_enable=true"],
    ) as (_, b):
        yield b


def test_a_producers_first_record_creates_the_topic(brokers: Brokers) -> None:
    bootstrap = ",".join(f"127.0.0.1:{p}" for p in brokers.kafka_ports.values())
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert "made-by-producing" not in admin.list_topics(timeout=10).topics

    reports: list[tuple[object, int]] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 20_000})
    for i in range(3):
        p.produce(
            "made-by-producing",
            f"v{i}".encode(),
            on_delivery=lambda err, msg: reports.append((err, msg.offset())),
        )
    assert p.flush(30) == 0
    assert reports == [(None, 0), (None, 1), (None, 2)]

    t = admin.list_topics(timeout=10).topics["made-by-producing"]
    assert t.error is None
    assert len(t.partitions) == 1  # default_num_partitions
    assert [len(x.replicas) for x in t.partitions.values()] == [1]  # default_replication_factor
