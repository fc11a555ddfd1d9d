"""KafkaJS 2.2 (Node.js) against a real Longboat cluster through its Kafka listener.

KafkaJS is a Kafka client written from scratch in JavaScript, sharing no code with librdkafka
or the Java client, so it finds the listener's assumptions those two happen to share. One node
run (``tests/kafkajs/run.js``) creates a topic with KafkaJS's admin client, produces with
acks=all and idempotence (gzip on every other batch), consumes by group from that topic and from
one the Python client wrote, commits, and asks the admin client for offsets, the group and a
config; the test checks what KafkaJS reports and reads its records back through confluent-kafka
and Longboat's own Python client. KafkaJS is installed by ``scripts/setup-kafkajs.sh`` (``npm
ci`` from the committed lockfile); the test is skipped without Node.js and npm.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import Consumer as CKConsumer  # noqa: E402
from confluent_kafka import TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from api.client import Consumer as LBConsumer  # noqa: E402
from api.client import Producer as LBProducer  # noqa: E402
from api.client import TopicPartition as LBTopicPartition  # noqa: E402
from api.node.localcluster import Brokers, wait_for  # noqa: E402

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
TS0 = 1_700_000_000_000  # run.js stamps record i with TS0 + i


@pytest.fixture(scope="module")
def kafkajs() -> Path:
    # The setup script installs what is missing (scripts/test.sh runs it first) or fails
    # saying what: a missing tool fails the test, never skips it
    subprocess.run([str(REPO / "scripts" / "setup-kafkajs.sh")], check=True, timeout=600)
    return REPO / "tests" / "kafkajs" / "run.js"


def bootstrap(brokers: Brokers) -> str:
    return ",".join(f"127.0.0.1:{p}" for p in brokers.kafka_ports.values())


def read_back(
    bootstrap: str, topic: str, partitions: int, n: int, *, committed: bool = False
) -> list[Any]:
    """``n`` records of ``topic`` from the start through librdkafka; ``committed``: at
    read_committed, and nothing after them (an aborted record would show there)."""
    conf = {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
    if committed:
        conf["isolation.level"] = "read_committed"
    else:
        conf["auto.offset.reset"] = "earliest"
    c = CKConsumer(conf)
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[Any] = []
    deadline = time.monotonic() + 30
    try:
        while len(out) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                out.append(m)
        if committed:
            extra = c.poll(1.0)
            assert extra is None or extra.error() is not None, extra.value()
    finally:
        c.close()
    return out


def test_kafkajs_admin_idempotent_produce_and_group_consume(
    kafka_listener_cluster: Brokers, kafkajs: Path
) -> None:
    brokers = kafka_listener_cluster
    bs = bootstrap(brokers)
    # Written by Longboat's own client (through HTTP) for KafkaJS's group consumer to read.
    py_topic = "py-for-js"

    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(py_topic, 1, 3)])[py_topic].result(30)
    wait_for(
        f"{py_topic} has a leader",
        lambda: all(
            p.leader >= 0
            for p in admin.list_topics(py_topic, timeout=5).topics[py_topic].partitions.values()
        ),
        20,
    )
    with LBProducer(brokers.url(brokers.ids[0]), linger_ms=0) as p:
        futs = [
            p.send(
                py_topic,
                f"py {i}".encode(),
                key=b"py",
                headers=[("origin", b"longboat")],
                timestamp_ms=TS0 - 1000 + i,
            )
            for i in range(5)
        ]
        p.flush()
        assert [f.result(10).offset for f in futs] == list(range(5))

    n = 60
    run = subprocess.run(
        [
            "node",
            str(kafkajs),
            json.dumps(
                {
                    "bootstrap": bs,
                    "topic": "js",
                    "group": "js-group",
                    "produce": n,
                    "consumeTopics": ["js", py_topic],
                    "consume": n + 5,
                }
            ),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "KAFKAJS_NO_PARTITIONER_WARNING": "1"},
    )
    assert run.returncode == 0, run.stderr[-4000:]
    out = json.loads(run.stdout)

    # Admin: the topic as created, every broker's Kafka listener, the config set at creation.
    assert out["created"] is True and out["topics"] == ["js"]
    (md,) = out["metadata"]
    assert [p["id"] for p in md["partitions"]] == [0, 1, 2]
    assert all(p["leader"] in brokers.ids and p["replicas"] == 3 for p in md["partitions"])
    assert {b["nodeId"]: b["port"] for b in out["cluster"]["brokers"]} == brokers.kafka_ports
    assert out["configs"] == [{"errorCode": 0, "configs": [["retention.ms", "-1"]]}]

    # Produce: every batch acknowledged; record offsets follow from each batch's base offset.
    assert all(r["errorCode"] == 0 for r in out["produced"])
    ends = {int(o["partition"]): int(o["high"]) for o in out["topicOffsets"]}
    assert sum(ends.values()) == n and all(int(o["low"]) == 0 for o in out["topicOffsets"])

    # Read back through librdkafka: each record once, its key, headers and timestamp kept, one
    # key per partition, and within a partition in the order KafkaJS sent (idempotent, one in
    # flight).
    got = read_back(bs, "js", 3, n)
    assert len(got) == n
    by_i = {int(dict(m.headers())["i"]): m for m in got}
    assert sorted(by_i) == list(range(n))
    for i, m in by_i.items():
        assert m.key() == f"js-{i % 5}".encode()
        assert m.value() == f"kafkajs value {i}".encode()
        assert m.timestamp()[1] == TS0 + i
        assert dict(m.headers()) == {"i": str(i).encode(), "origin": b"kafkajs"}
    for part in range(3):
        mine = sorted((m for m in got if m.partition() == part), key=lambda m: m.offset())
        assert [m.offset() for m in mine] == list(range(ends[part]))
        idx = [int(dict(m.headers())["i"]) for m in mine]
        assert idx == sorted(idx)
    assert all(
        len({m.partition() for m in got if m.key() == k}) == 1 for k in {m.key() for m in got}
    )

    # And through Longboat's own Python client (HTTP): the same records at the same offsets.
    busiest = max(ends, key=lambda p: ends[p])
    with LBConsumer(brokers.url(brokers.ids[1]), auto_offset_reset="earliest") as c:
        c.assign([LBTopicPartition("js", busiest)])
        lb: list[Any] = []
        deadline = time.monotonic() + 20
        while len(lb) < ends[busiest] and time.monotonic() < deadline:
            lb += c.poll(1000)
    want = sorted((m for m in got if m.partition() == busiest), key=lambda m: m.offset())
    assert [(r.offset, r.key, r.value) for r in lb] == [
        (m.offset(), m.key(), m.value()) for m in want
    ]

    # Group consume: every record of both topics once, Longboat's client's with its key,
    # headers and timestamp; the commits are the end offsets, seen by KafkaJS and by librdkafka.
    consumed = out["consumed"]
    assert sorted((c["topic"], c["partition"], int(c["offset"])) for c in consumed) == sorted(
        [("js", m.partition(), m.offset()) for m in got] + [(py_topic, 0, i) for i in range(5)]
    )
    from_py = sorted(
        (c for c in consumed if c["topic"] == py_topic), key=lambda c: int(c["offset"])
    )
    assert [(c["key"], c["value"], c["headers"], int(c["timestamp"])) for c in from_py] == [
        ("py", f"py {i}", {"origin": "longboat"}, TS0 - 1000 + i) for i in range(5)
    ]
    assert {int(o["partition"]): int(o["offset"]) for o in out["groupOffsets"]} == ends
    ck = CKConsumer({"bootstrap.servers": bs, "group.id": "js-group"})
    try:
        committed = ck.committed([TopicPartition("js", p) for p in range(3)], timeout=10)
    finally:
        ck.close()
    assert {tp.partition: tp.offset for tp in committed} == ends
    assert out["groups"] == [{"groupId": "js-group", "protocolType": "consumer"}]
    assert out["describedGroups"] == [
        {
            "groupId": "js-group",
            "state": "Empty",
            "protocolType": "consumer",
            "members": 0,
            "errorCode": 0,
        }
    ]


def test_kafkajs_transactions_commit_abort_send_offsets_and_fence(
    kafka_listener_cluster: Brokers, kafkajs: Path
) -> None:
    """KafkaJS's transactional producer (InitProducerId with its transactional id,
    AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn at the versions KafkaJS
    speaks) and its read_committed consumer; ``tests/kafkajs/txn.js`` says what runs."""
    brokers = kafka_listener_cluster
    bs = bootstrap(brokers)
    admin = AdminClient({"bootstrap.servers": bs})
    for name, parts in (("js-txn-in", 2), ("js-txn-out", 3), ("js-txn-zombie", 1)):
        admin.create_topics([NewTopic(name, parts, 3)])[name].result(30)
    wait_for(
        "the transaction topics have leaders",
        lambda: all(
            p.leader >= 0
            for t in ("js-txn-in", "js-txn-out", "js-txn-zombie")
            for p in admin.list_topics(t, timeout=5).topics[t].partitions.values()
        ),
        20,
    )
    n_in = 8
    with LBProducer(brokers.url(brokers.ids[0]), linger_ms=0) as p:
        futs = [p.send("js-txn-in", f"in{i}".encode(), partition=i % 2) for i in range(n_in)]
        p.flush()
        assert all(f.result(10).offset == i // 2 for i, f in enumerate(futs))

    run = subprocess.run(
        [
            "node",
            str(kafkajs.parent / "txn.js"),
            json.dumps(
                {
                    "bootstrap": bs,
                    "in": "js-txn-in",
                    "out": "js-txn-out",
                    "group": "js-eos",
                    "records": n_in,
                    "zombieTopic": "js-txn-zombie",
                }
            ),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "KAFKAJS_NO_PARTITIONER_WARNING": "1"},
    )
    assert run.returncode == 0, run.stderr[-4000:]
    out = json.loads(run.stdout)

    committed = {f"c{i}" for i in range(6)}
    aborted = {f"a{i}" for i in range(6)}
    transformed = {f"t-in{i}" for i in range(n_in)}
    assert all(r["errorCode"] == 0 for r in out["committedSend"])
    # read_committed: exactly the two committed transactions, once each, on every partition;
    # read_uncommitted shows the aborted records are in the log, so the filter did the work.
    rc = [r["value"] for r in out["readCommitted"]]
    assert sorted(rc) == sorted(committed | transformed)
    assert {r["partition"] for r in out["readCommitted"] if r["value"] in committed} == {0, 1, 2}
    ru = [r["value"] for r in out["readUncommitted"]]
    assert sorted(ru) == sorted(committed | aborted | transformed)
    # librdkafka's read_committed consumer agrees.
    got = read_back(bs, "js-txn-out", 3, len(rc), committed=True)
    assert sorted(m.value().decode() for m in got) == sorted(rc)

    # The group's offsets are the committed transaction's, not the aborted rewind's, as KafkaJS
    # and librdkafka see them.
    ends = {0: n_in // 2, 1: n_in // 2}
    assert {int(p): o for p, o in out["sentOffsets"].items()} == ends
    assert {o["partition"]: o["offset"] for o in out["groupOffsets"]} == ends
    ck = CKConsumer({"bootstrap.servers": bs, "group.id": "js-eos"})
    try:
        offs = ck.committed([TopicPartition("js-txn-in", p) for p in range(2)], timeout=10)
    finally:
        ck.close()
    assert {tp.partition: tp.offset for tp in offs} == ends

    # Fenced: the first producer's commit fails with Kafka's error for an old epoch at the
    # EndTxn versions KafkaJS speaks (v0-1 know no PRODUCER_FENCED), and only the successor's
    # record is visible.
    z = out["zombieCommit"]
    assert z["ok"] is False and z["type"] == "INVALID_PRODUCER_EPOCH", z
    assert [r["value"] for r in out["zombieTopic"]] == ["fresh"]
