"""Real Kafka clients against a real Longboat cluster through its Kafka listener.

One cluster of processes (1 controller, 3 brokers, each with ``kafka_listen``) for the
module. The clients are the real ones: confluent-kafka (librdkafka, from its wheel),
kafka-python, and kcat (Debian's package, installed by ``scripts/setup-kafka-clients.sh`` when
missing). What is pinned: Metadata lists every broker's Kafka listener; produce with acks
0/1/all, idempotent and with each codec Kafka uses; keys, headers and timestamps survive;
consume by assignment and by group (commit, then resume where the group left off);
ListOffsets earliest/latest/by time; records cross between the Kafka path, the HTTP API and
Longboat's own Python client in both directions; and the listener's answers to what a client
should not send (an ApiVersions version from the future, a frame larger than allowed, a
partition this broker does not lead, a fetch inside a batch).
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import io
import json
import shutil
import socket
import struct
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")

from confluent_kafka import Consumer as CKConsumer  # noqa: E402
from confluent_kafka import KafkaError, TopicPartition  # noqa: E402
from confluent_kafka import Producer as CKProducer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from api.client import Consumer as LBConsumer  # noqa: E402
from api.client import Producer as LBProducer  # noqa: E402
from api.client import TopicPartition as LBTopicPartition  # noqa: E402
from api.node.localcluster import Brokers, Quorum, running_cluster, wait_for  # noqa: E402

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


class Cluster:
    def __init__(self, quorum: Quorum, brokers: Brokers) -> None:
        self.quorum = quorum
        self.brokers = brokers

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.brokers.kafka_ports.values())

    @property
    def http(self) -> list[str]:
        return [self.brokers.url(b) for b in self.brokers.ids]

    def create_topic(
        self, name: str, partitions: int = 3, rf: int = 3, configs: dict[str, str] | None = None
    ) -> None:
        """Through Kafka's CreateTopics, so that API is exercised on every run."""
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        fut = admin.create_topics(
            [NewTopic(name, partitions, rf, config=configs or {})], operation_timeout=20
        )[name]
        fut.result(timeout=30)
        wait_for(f"{name} has leaders", lambda: self._led(name, partitions), 20)

    def _led(self, name: str, partitions: int) -> bool:
        md = AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(name, timeout=5)
        t = md.topics.get(name)
        return (
            t is not None
            and t.error is None
            and len(t.partitions) == partitions
            and all(p.leader >= 0 for p in t.partitions.values())
        )

    def cluster_id(self) -> str:
        with urllib.request.urlopen(self.http[0] + "/v3/clusters", timeout=5) as r:
            return str(json.loads(r.read())["data"][0]["cluster_id"])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root: Path = tmp_path_factory.mktemp("kafka-cluster")
    with running_cluster(
        root,
        controllers=1,
        brokers=3,
        kafka=True,
        broker_args=["--replica-lag-time-max-ms", "2000"],
    ) as (q, brokers):
        yield Cluster(q, brokers)


@pytest.fixture(scope="module")
def kcat() -> str:
    if shutil.which("kcat") is None:
        subprocess.run([str(REPO / "scripts" / "setup-kafka-clients.sh")], check=True, timeout=600)
    path = shutil.which("kcat")
    assert path is not None, "scripts/setup-kafka-clients.sh did not install kcat"
    return path


def consume_all(
    bootstrap: str, topic: str, partitions: int, n: int, timeout_s: float = 30, **conf: Any
) -> list[Any]:
    c = CKConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **conf,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            out.append(m)
    finally:
        c.close()
    return out


# ------------------------------------------------------------------ metadata


def test_metadata_names_every_brokers_kafka_listener(cluster: Cluster, kcat: str) -> None:
    md = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=10)
    assert {b.id: (b.host, b.port) for b in md.brokers.values()} == {
        b: ("127.0.0.1", p) for b, p in cluster.brokers.kafka_ports.items()
    }
    assert md.cluster_id == cluster.cluster_id()
    # Bootstrapping from any one broker finds them all (kcat: librdkafka again, as users run it).
    one = f"127.0.0.1:{cluster.brokers.kafka_ports[cluster.brokers.ids[-1]]}"
    out = subprocess.run(
        [kcat, "-b", one, "-L", "-J"], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    assert sorted(b["id"] for b in json.loads(out)["brokers"]) == cluster.brokers.ids


# ------------------------------------------------------------------ produce, consume


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_kafka_idempotent_acks_all_each_codec(cluster: Cluster, codec: str) -> None:
    topic = f"ck-{codec}"
    cluster.create_topic(topic)
    p = CKProducer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "compression.type": codec,
            "linger.ms": 5,
        }
    )
    ts0 = int(time.time() * 1000) - 60_000
    reports: list[Any] = []
    for i in range(300):
        p.produce(
            topic,
            key=f"k{i % 7}".encode(),
            value=f"value-{i}-{codec * 20}".encode(),
            headers=[("i", str(i).encode()), ("null", None)],
            timestamp=ts0 + i,
            on_delivery=lambda e, m: reports.append((e, m)),
        )
    assert p.flush(30) == 0
    assert [e for e, _ in reports if e is not None] == []
    got = consume_all(cluster.bootstrap, topic, 3, 300)
    assert len(got) == 300
    by_i = {int(dict(m.headers())["i"]): m for m in got}
    assert sorted(by_i) == list(range(300))
    for i, m in by_i.items():
        assert m.key() == f"k{i % 7}".encode()
        assert m.value() == f"value-{i}-{codec * 20}".encode()
        assert m.timestamp()[1] == ts0 + i
        assert m.headers() == [("i", str(i).encode()), ("null", None)]
    # Same key, same partition (librdkafka's partitioner; the broker must not move records).
    assert all(
        len({m.partition() for m in got if m.key() == k}) == 1 for k in {m.key() for m in got}
    )
    # Delivery reports carry the offsets the consumer sees.
    delivered = {(m.partition(), m.offset()) for _, m in reports}
    assert delivered == {(m.partition(), m.offset()) for m in got}


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_confluent_kafka_each_acks_without_idempotence(cluster: Cluster, acks: str) -> None:
    topic = f"acks-{acks}"
    cluster.create_topic(topic, partitions=1)
    p = CKProducer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "enable.idempotence": False,
            "acks": acks,
            "linger.ms": 1,
        }
    )
    for i in range(50):
        p.produce(topic, value=str(i).encode())
        if i % 10 == 9:
            p.flush(10)
    assert p.flush(20) == 0
    got = consume_all(cluster.bootstrap, topic, 1, 50)
    assert [m.value() for m in got] == [str(i).encode() for i in range(50)]
    assert [m.offset() for m in got] == list(range(50))


def test_min_insync_replicas_refuses_acks_all(cluster: Cluster) -> None:
    import signal

    cluster.create_topic("mir", partitions=1, rf=2, configs={"min.insync.replicas": "2"})
    md = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics("mir", timeout=5)
    part = md.topics["mir"].partitions[0]
    follower = next(b for b in part.replicas if b != part.leader)
    cluster.brokers.send_signal(follower, signal.SIGSTOP)
    try:
        # The follower falls out of the ISR after replica_lag_time_max_ms (2 s here).
        wait_for(
            "ISR shrinks to the leader",
            lambda: (
                list(
                    AdminClient({"bootstrap.servers": cluster.bootstrap})
                    .list_topics("mir", timeout=5)
                    .topics["mir"]
                    .partitions[0]
                    .isrs
                )
                == [part.leader]
            ),
            30,
        )
        p = CKProducer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "acks": "all",
                "enable.idempotence": False,
                "message.timeout.ms": 2000,
            }
        )
        errs: list[Any] = []
        p.produce("mir", value=b"x", on_delivery=lambda e, m: errs.append(e))
        p.flush(15)
        assert len(errs) == 1 and errs[0] is not None
        # librdkafka retries NOT_ENOUGH_REPLICAS until the message times out.
        assert errs[0].code() in (KafkaError.NOT_ENOUGH_REPLICAS, KafkaError._MSG_TIMED_OUT)
        p1 = CKProducer({"bootstrap.servers": cluster.bootstrap, "acks": "1"})
        ok: list[Any] = []
        p1.produce("mir", value=b"y", on_delivery=lambda e, m: ok.append(e))
        p1.flush(15)
        assert ok == [None]  # acks=1 does not need the ISR
    finally:
        cluster.brokers.send_signal(follower, signal.SIGCONT)


def test_kafka_python_produce_and_consume(cluster: Cluster) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KPTopicPartition

    cluster.create_topic("kp", partitions=2)
    p = KafkaProducer(
        bootstrap_servers=cluster.bootstrap, acks="all", compression_type="gzip", linger_ms=5
    )
    futs = [
        p.send(
            "kp",
            key=f"k{i}".encode(),
            value=f"v{i}".encode(),
            headers=[("h", b"kp")],
            partition=i % 2,
        )
        for i in range(100)
    ]
    p.flush(20)
    mds = [f.get(timeout=10) for f in futs]
    p.close()
    assert sorted((m.partition, m.offset) for m in mds) == sorted(
        [(0, i) for i in range(50)] + [(1, i) for i in range(50)]
    )
    c = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=5000,
    )
    c.assign([KPTopicPartition("kp", 0), KPTopicPartition("kp", 1)])
    c.seek_to_beginning()
    got = list(c)
    c.close()
    assert sorted(r.value for r in got) == sorted(f"v{i}".encode() for i in range(100))
    assert all(r.key == b"k" + r.value[1:] and r.headers == [("h", b"kp")] for r in got)


def test_kcat_produce_and_consume(cluster: Cluster, kcat: str) -> None:
    cluster.create_topic("kc", partitions=1)
    lines = "".join(f"key{i}:line {i}\n" for i in range(20))
    subprocess.run(
        [kcat, "-b", cluster.bootstrap, "-P", "-t", "kc", "-K:", "-z", "zstd"],
        input=lines,
        text=True,
        timeout=30,
        check=True,
    )
    out = subprocess.run(
        [
            kcat,
            "-b",
            cluster.bootstrap,
            "-C",
            "-t",
            "kc",
            "-o",
            "beginning",
            "-e",
            "-f",
            "%o %k=%s\n",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    assert out.splitlines() == [f"{i} key{i}=line {i}" for i in range(20)]


# ------------------------------------------------------------------ offsets and groups


def test_list_offsets_earliest_latest_and_by_time(cluster: Cluster) -> None:
    cluster.create_topic("lo", partitions=1)
    p = CKProducer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 0})
    base = int(time.time() * 1000) - 100_000
    for i in range(10):
        p.produce("lo", value=b"x", timestamp=base + i * 1000)
        p.flush(10)
    c = CKConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": "lo-reader"})
    try:
        assert c.get_watermark_offsets(TopicPartition("lo", 0), timeout=10) == (0, 10)
        found = c.offsets_for_times([TopicPartition("lo", 0, base + 3500)], timeout=10)
        assert found[0].offset == 4
        from kafka import KafkaConsumer
        from kafka import TopicPartition as KPTopicPartition

        kc = KafkaConsumer(bootstrap_servers=cluster.bootstrap)
        tp = KPTopicPartition("lo", 0)
        hit = kc.offsets_for_times({tp: base + 3500})[tp]
        kc.close()
        assert (hit.offset, hit.timestamp) == (4, base + 4000)  # the found record's time
        past = c.offsets_for_times([TopicPartition("lo", 0, base + 99_000)], timeout=10)
        assert past[0].offset in (-1, 10)  # none at or after it: Kafka answers -1 (end)
    finally:
        c.close()


def test_group_subscribe_commit_and_resume(cluster: Cluster) -> None:
    cluster.create_topic("grp", partitions=3)
    p = CKProducer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 2})
    for i in range(90):
        p.produce("grp", key=str(i).encode(), value=str(i).encode())
    assert p.flush(20) == 0
    conf = {
        "bootstrap.servers": cluster.bootstrap,
        "group.id": "g1",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
    }
    c = CKConsumer(conf)
    c.subscribe(["grp"])
    seen: list[Any] = []
    deadline = time.monotonic() + 60
    while len(seen) < 60 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            seen.append(m)
    assert len(seen) >= 60, f"the group consumer got {len(seen)} of 60"
    assert {tp.partition for tp in c.assignment()} == {0, 1, 2}
    c.commit(asynchronous=False)
    committed = {
        tp.partition: tp.offset
        for tp in c.committed([TopicPartition("grp", i) for i in range(3)], timeout=10)
    }
    consumed_to = {}
    for m in seen:
        consumed_to[m.partition()] = max(consumed_to.get(m.partition(), 0), m.offset() + 1)
    assert {k: v for k, v in committed.items() if v >= 0} == consumed_to
    c.close()  # LeaveGroup
    # A new member of the group resumes after the commits: together, every record once.
    c2 = CKConsumer(conf)
    c2.subscribe(["grp"])
    rest: list[Any] = []
    deadline = time.monotonic() + 60
    while len(seen) + len(rest) < 90 and time.monotonic() < deadline:
        m = c2.poll(0.5)
        if m is not None and m.error() is None:
            rest.append(m)
    c2.close()
    assert sorted(int(m.value()) for m in seen + rest) == list(range(90))


# ------------------------------------------------------------------ cross paths


def test_kafka_written_reads_through_http_and_the_python_client(cluster: Cluster) -> None:
    cluster.create_topic("x1", partitions=1)
    p = CKProducer({"bootstrap.servers": cluster.bootstrap, "compression.type": "lz4"})
    for i in range(10):
        p.produce(
            "x1",
            key=f"k{i}".encode(),
            value=f"v{i}".encode(),
            headers=[("src", b"kafka")],
            timestamp=1_700_000_000_000 + i,
        )
    assert p.flush(20) == 0
    url = (
        f"{cluster.http[0]}/v3/clusters/{cluster.cluster_id()}/topics/x1/partitions/0/"
        "records?offset=0&format=binary&key_format=string&timeout_ms=0"
    )
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.loads(r.read())
    recs = body["records"]
    assert [base64.b64decode(r["value"]) for r in recs] == [f"v{i}".encode() for i in range(10)]
    assert [r["timestamp"] for r in recs] == [1_700_000_000_000 + i for i in range(10)]
    assert [r["key"] for r in recs] == [f"k{i}" for i in range(10)]
    assert all(
        r["headers"] == [{"name": "src", "value": base64.b64encode(b"kafka").decode()}]
        for r in recs
    )
    with LBConsumer(cluster.http, auto_offset_reset="earliest") as c:
        c.assign([LBTopicPartition("x1", 0)])
        got: list[Any] = []
        deadline = time.monotonic() + 20
        while len(got) < 10 and time.monotonic() < deadline:
            got += c.poll(1000)
    assert [(r.key, r.value, r.headers) for r in got] == [
        (f"k{i}".encode(), f"v{i}".encode(), (("src", b"kafka"),)) for i in range(10)
    ]


def test_python_client_written_reads_through_kafka_clients(cluster: Cluster) -> None:
    cluster.create_topic("x2", partitions=1)
    with LBProducer(cluster.http[0], linger_ms=0, compression="snappy") as p:
        futs = [
            p.send("x2", f"v{i}".encode(), key=f"k{i}".encode(), headers=[("src", b"longboat")])
            for i in range(10)
        ]
        p.flush()
        assert [f.result(10).offset for f in futs] == list(range(10))
    got = consume_all(cluster.bootstrap, "x2", 1, 10)
    assert [(m.key(), m.value(), m.headers()) for m in got] == [
        (f"k{i}".encode(), f"v{i}".encode(), [("src", b"longboat")]) for i in range(10)
    ]


# ------------------------------------------------------------------ the wire itself


class Raw:
    """One plain socket to a broker's Kafka listener, framing requests with kio."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def send_frame(self, frame: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)

    def recv_frame(self) -> bytes | None:
        head = self._exactly(4)
        if head is None:
            return None
        return self._exactly(struct.unpack(">i", head)[0])

    def _exactly(self, n: int) -> bytes | None:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf

    def call(self, api_key: int, version: int, body: Any) -> Any:
        from kio.index import load_response_schema
        from kio.serial import entity_reader, entity_writer

        from api.kafka.protocol import is_flexible

        self.correlation += 1
        head = struct.pack(">hhih", api_key, version, self.correlation, 4) + b"test"
        if is_flexible(api_key, version):
            head += b"\0"
        buf = io.BytesIO()
        entity_writer(type(body))(buf, body)
        self.send_frame(head + buf.getvalue())
        resp = self.recv_frame()
        assert resp is not None, "the broker closed the connection"
        assert struct.unpack(">i", resp[:4])[0] == self.correlation
        off = 4 + (1 if api_key != 18 and is_flexible(api_key, version) else 0)
        return entity_reader(load_response_schema(api_key, version))(resp, off)[0]


def _port(cluster: Cluster, broker: int) -> int:
    return cluster.brokers.kafka_ports[broker]


def test_api_versions_from_the_future_gets_error_35_and_our_ranges(cluster: Cluster) -> None:
    from kio.schema.api_versions.v0.response import ApiVersionsResponse
    from kio.serial import entity_reader

    raw = Raw(_port(cluster, cluster.brokers.ids[0]))
    try:
        raw.send_frame(struct.pack(">hhih", 18, 99, 7, 1) + b"x" + b"\0\0\0")
        resp = raw.recv_frame()
        assert resp is not None and struct.unpack(">i", resp[:4])[0] == 7
        body = entity_reader(ApiVersionsResponse)(resp, 4)[0]  # response header v0, body v0
        assert body.error_code == 35
        ranges = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in body.api_keys}
        assert ranges[18] == (0, 3) and ranges[0][0] == 0 and ranges[1][0] == 4
    finally:
        raw.close()


def test_oversize_and_malformed_frames_close_the_connection(cluster: Cluster) -> None:
    port = _port(cluster, cluster.brokers.ids[0])
    raw = Raw(port)
    raw.sock.sendall(struct.pack(">i", 200 << 20))  # above socket.request.max.bytes
    assert raw.recv_frame() is None
    raw.close()
    raw = Raw(port)
    raw.send_frame(struct.pack(">hhih", 3, 12, 1, -1) + b"\xff\xff\xff")  # Metadata, garbage
    assert raw.recv_frame() is None
    raw.close()
    raw = Raw(port)  # an API this listener does not serve (DescribeAcls)
    raw.send_frame(struct.pack(">hhih", 29, 1, 1, -1) + b"\0" * 8)
    assert raw.recv_frame() is None
    raw.close()


def test_produce_to_a_follower_is_not_leader_and_fetch_mid_batch_returns_the_batch(
    cluster: Cluster,
) -> None:
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
    from kio.schema.produce.v9.request import (
        PartitionProduceData,
        ProduceRequest,
        TopicProduceData,
    )
    from kio.static.primitive import Records

    from storage.batch import MAGIC_KAFKA, decode_records, encode_batch, iter_batches

    cluster.create_topic("raw", partitions=1)
    md = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics("raw", timeout=5)
    leader = md.topics["raw"].partitions[0].leader
    follower = next(b for b in cluster.brokers.ids if b != leader)
    batch = encode_batch(
        [(None, f"r{i}".encode(), 1000 + i, ()) for i in range(10)], magic=MAGIC_KAFKA
    )

    def produce(port: int) -> Any:
        raw = Raw(port)
        try:
            return raw.call(
                0,
                9,
                ProduceRequest(
                    transactional_id=None,
                    acks=-1,
                    timeout=datetime.timedelta(seconds=10),
                    topic_data=(
                        TopicProduceData(
                            name="raw",
                            partition_data=(PartitionProduceData(index=0, records=Records(batch)),),
                        ),
                    ),
                ),
            )
        finally:
            raw.close()

    refused = produce(_port(cluster, follower)).responses[0].partition_responses[0]
    assert refused.error_code == 6  # NOT_LEADER_OR_FOLLOWER
    ok = produce(_port(cluster, leader)).responses[0].partition_responses[0]
    assert (ok.error_code, ok.base_offset) == (0, 0)
    raw = Raw(_port(cluster, leader))
    try:
        resp = raw.call(
            1,
            12,
            FetchRequest(
                max_wait=datetime.timedelta(milliseconds=100),
                min_bytes=1,
                max_bytes=1 << 20,
                isolation_level=0,
                session_id=0,
                session_epoch=-1,
                topics=(
                    FetchTopic(
                        topic="raw",
                        partitions=(
                            FetchPartition(
                                partition=0, fetch_offset=5, partition_max_bytes=1 << 20
                            ),
                        ),
                    ),
                ),
                forgotten_topics_data=(),
                rack_id="",
            ),
        )
    finally:
        raw.close()
    part = resp.responses[0].partitions[0]
    assert (part.error_code, part.high_watermark) == (0, 10)
    data = bytes(part.records)
    [(_pos, h)] = list(iter_batches(data))
    assert (h.base_offset, h.magic) == (0, MAGIC_KAFKA)  # the whole batch, as stored
    assert [r.value for r in decode_records(data)] == [f"r{i}".encode() for i in range(10)]


def test_long_poll_fetch_waits_for_data(cluster: Cluster) -> None:
    cluster.create_topic("lp", partitions=1)
    c = CKConsumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "lp",
            "fetch.wait.max.ms": 5000,
            "enable.auto.commit": False,
        }
    )
    c.assign([TopicPartition("lp", 0, 0)])
    assert c.poll(1.0) is None

    async def produce_later() -> None:
        await asyncio.sleep(0.5)
        p = CKProducer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 0})
        p.produce("lp", value=b"late")
        p.flush(10)

    t0 = time.monotonic()
    import threading

    th = threading.Thread(target=lambda: asyncio.run(produce_later()))
    th.start()
    m = None
    while m is None and time.monotonic() - t0 < 15:
        m = c.poll(0.5)
    th.join()
    c.close()
    assert m is not None and m.value() == b"late"
    assert time.monotonic() - t0 < 6  # answered when the record came, not at a timeout


def test_admin_create_existing_and_delete_topics(cluster: Cluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    cluster.create_topic("gone", partitions=2)
    again = admin.create_topics([NewTopic("gone", 2, 3)], operation_timeout=10)["gone"]
    with pytest.raises(confluent_kafka.KafkaException) as ei:
        again.result(timeout=20)
    assert ei.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    admin.delete_topics(["gone"], operation_timeout=10)["gone"].result(timeout=20)
    wait_for("gone is gone", lambda: "gone" not in admin.list_topics(timeout=5).topics, 20)
    missing = admin.delete_topics(["never-was"], operation_timeout=10)["never-was"]
    with pytest.raises(confluent_kafka.KafkaException) as ei:
        missing.result(timeout=20)
    assert ei.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_admin_delete_records_and_elect_leaders(cluster: Cluster) -> None:
    """DeleteRecords (each partition to its leader) moves the log start, which Kafka's
    consumer then sees as the earliest offset; beyond the high watermark is refused;
    ElectLeaders elects the preferred leader (or says none was needed)."""
    from confluent_kafka import ElectionType
    from confluent_kafka import TopicPartition as CKTopicPartition

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    cluster.create_topic("trimmed", partitions=2)
    p = CKProducer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(20):
        p.produce("trimmed", f"v{i}".encode(), partition=i % 2)
    assert p.flush(20) == 0
    futs = admin.delete_records(
        [CKTopicPartition("trimmed", 0, 4), CKTopicPartition("trimmed", 1, -1)],
        request_timeout=20,
    )
    got = {tp.partition: f.result(timeout=30) for tp, f in futs.items()}
    assert got[0].low_watermark == 4 and got[1].low_watermark == 10, got
    c = CKConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": "trimmed-reader"})
    try:
        lo, hi = c.get_watermark_offsets(CKTopicPartition("trimmed", 0), timeout=10)
        assert (lo, hi) == (4, 10)
        lo, hi = c.get_watermark_offsets(CKTopicPartition("trimmed", 1), timeout=10)
        assert (lo, hi) == (10, 10)
    finally:
        c.close()
    beyond = admin.delete_records([CKTopicPartition("trimmed", 0, 99)], request_timeout=20)
    with pytest.raises(confluent_kafka.KafkaException) as ei:
        next(iter(beyond.values())).result(timeout=30)
    assert ei.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE

    # Every replica is in sync and the preferred replica leads: a preferred election finds
    # nothing to do (ELECTION_NOT_NEEDED, the AdminClient's answer for the partition).
    res = admin.elect_leaders(ElectionType.PREFERRED, [CKTopicPartition("trimmed", 0)])
    done = res.result(timeout=30)
    (err,) = done.values()
    assert err is not None and err.code() == KafkaError.ELECTION_NOT_NEEDED, err


def test_confluent_avro_serdes_over_kafkas_protocol_with_longboats_registry(
    cluster: Cluster,
) -> None:
    """Issue 21 with issue 20: Confluent's AvroSerializer and AvroDeserializer, their registry
    client pointed at a broker, through confluent-kafka over Kafka's protocol; the same records
    read by Longboat's REST v3 with format=avro."""
    import urllib.request

    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    schema = json.dumps(
        {
            "type": "record",
            "name": "Payment",
            "namespace": "shop",
            "fields": [
                {"name": "id", "type": "long"},
                {"name": "memo", "type": ["null", "string"], "default": None},
            ],
        }
    )
    cluster.create_topic("avro-kafka", partitions=1)
    registry = SchemaRegistryClient({"url": cluster.http[0]})
    ser = AvroSerializer(registry, schema)
    p = CKProducer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True})
    values = [{"id": i, "memo": None if i % 2 else f"m{i}"} for i in range(5)]
    for v in values:
        p.produce(
            "avro-kafka", value=ser(v, SerializationContext("avro-kafka", MessageField.VALUE))
        )
    assert p.flush(30) == 0
    c = CKConsumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "avro-readers",
            "auto.offset.reset": "earliest",
        }
    )
    c.subscribe(["avro-kafka"])
    de = AvroDeserializer(SchemaRegistryClient({"url": cluster.http[1]}))
    got: list[Any] = []
    deadline = time.monotonic() + 30
    while len(got) < len(values) and time.monotonic() < deadline:
        m = c.poll(1.0)
        if m is not None and m.error() is None:
            got.append(de(m.value(), SerializationContext("avro-kafka", MessageField.VALUE)))
    c.close()
    assert got == values
    with urllib.request.urlopen(f"{cluster.http[2]}/v3/clusters", timeout=10) as r:
        cid = json.loads(r.read())["data"][0]["cluster_id"]
    url = f"{cluster.http[2]}/v3/clusters/{cid}/topics/avro-kafka/partitions/0/records?format=avro"
    with urllib.request.urlopen(url, timeout=10) as r:
        page = json.loads(r.read())
    # Avro's JSON encoding: the union's branch is named.
    assert [r["value"] for r in page["records"]] == [
        {"id": v["id"], "memo": None if v["memo"] is None else {"string": v["memo"]}}
        for v in values
    ]
