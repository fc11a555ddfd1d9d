"""The zero-copy Fetch path (``api.kafka.zerocopy``) against real broker processes.

On the package's shared cluster (``kafka_listener_cluster``: 1 controller, 3 brokers, plaintext
Kafka listeners). Pinned: records a Kafka client (librdkafka) produced, plain and lz4, are read
back by a Kafka client that checks every batch's CRC (``check.crcs``), keys, headers and
timestamps intact, and the leader's ``longboat_kafka_sendfile_*`` counters show the path was
taken; a log mixing msgpack batches (Longboat's client) with Kafka ones is read whole and in
order (a fetch starting at a msgpack batch is converted and copied; one starting at a Kafka
batch is sent from the file up to the next msgpack batch); and a
segment deleted (DeleteRecords) while a Fetch answer is being sent from it, to a client that
reads slowly, still yields exactly the bytes that were stored, after which the connection
serves the next request.
"""

from __future__ import annotations

import datetime
import re
import socket
import struct
import time
import urllib.request
from typing import Any

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kio.index import load_response_schema  # noqa: E402
from kio.schema.fetch.v12 import request as fetch_v12  # noqa: E402
from kio.serial import entity_reader, entity_writer  # noqa: E402

from api.client import Producer as LBProducer  # noqa: E402
from api.node.localcluster import Brokers, wait_for  # noqa: E402
from storage.batch import MAGIC_KAFKA, decode_records, iter_batches, verify_batch  # noqa: E402

pytestmark = pytest.mark.slow


def bootstrap(brokers: Brokers) -> str:
    return ",".join(f"127.0.0.1:{p}" for p in brokers.kafka_ports.values())


def create_topic(brokers: Brokers, name: str, rf: int, configs: dict[str, str]) -> int:
    """The topic's one partition's leader, once it has one."""
    admin = AdminClient({"bootstrap.servers": bootstrap(brokers)})
    admin.create_topics([NewTopic(name, 1, rf, config=configs)])[name].result(timeout=30)

    def leader() -> int:
        t = admin.list_topics(name, timeout=5).topics.get(name)
        if t is None or t.error is not None or 0 not in t.partitions:
            return -1
        return int(t.partitions[0].leader)

    wait_for(f"{name} has a leader", lambda: leader() >= 0, 20)
    return leader()


def sendfile_counters(brokers: Brokers, broker: int) -> tuple[float, float]:
    with urllib.request.urlopen(brokers.url(broker) + "/metrics", timeout=10) as r:
        text = r.read().decode()

    def value(name: str) -> float:
        m = re.search(rf"^{name}_total (\S+)$", text, re.M)
        assert m is not None, f"{name} is not on /metrics"
        return float(m.group(1))

    return value("longboat_kafka_sendfile_responses"), value("longboat_kafka_sendfile_bytes")


def read_assigned(brokers: Brokers, topic: str, n: int, start: int = 0) -> list[Any]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap(brokers),
            "group.id": "zc-unused",
            "enable.auto.commit": False,
            "check.crcs": True,  # librdkafka checks every batch's CRC-32C itself
        }
    )
    c.assign([TopicPartition(topic, 0, start)])
    got: list[Any] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < n and time.monotonic() < deadline:
            for m in c.consume(n - len(got), timeout=0.5):
                assert m.error() is None, m.error()
                got.append(m)
    finally:
        c.close()
    return got


def test_kafka_client_reads_what_a_kafka_client_wrote_through_sendfile(
    kafka_listener_cluster: Brokers,
) -> None:
    brokers = kafka_listener_cluster
    leader = create_topic(brokers, "zc-plain", 3, {})
    expected = []
    for codec in ("none", "lz4"):
        p = Producer(
            {"bootstrap.servers": bootstrap(brokers), "acks": "all", "compression.type": codec}
        )
        for _ in range(1500):
            n = len(expected)
            key, value = f"k{n}".encode(), (f"v{n}-" * (1 + n % 40)).encode()
            headers = [("n", str(n).encode()), ("codec", codec.encode())]
            p.produce("zc-plain", key=key, value=value, headers=headers, timestamp=1_000 + n)
            expected.append((key, value, headers, 1_000 + n))
        assert p.flush(30) == 0
    responses, sent = sendfile_counters(brokers, leader)
    got = read_assigned(brokers, "zc-plain", len(expected))
    assert [(m.key(), m.value(), m.headers(), m.timestamp()[1]) for m in got] == expected
    assert [m.offset() for m in got] == list(range(len(expected)))
    responses_after, sent_after = sendfile_counters(brokers, leader)
    assert responses_after > responses
    # Every stored byte went out by sendfile at least once (the values alone of the plain
    # half are ~60 KB; the consumer may fetch some ranges twice).
    assert sent_after - sent >= sum(len(v) for _, v, _, _ in expected[:1500])


def test_msgpack_batches_between_kafka_ones_are_converted_and_the_rest_sent_from_the_file(
    kafka_listener_cluster: Brokers,
) -> None:
    brokers = kafka_listener_cluster
    leader = create_topic(brokers, "zc-mixed", 1, {})
    values: list[bytes] = []
    kafka = Producer({"bootstrap.servers": bootstrap(brokers)})
    for round_ in range(3):
        with LBProducer(brokers.url(leader), linger_ms=0) as lb:
            futs = [lb.send("zc-mixed", b"lb-%d-%d" % (round_, i)) for i in range(5)]
            lb.flush()
            assert all(f.result(10) is not None for f in futs)
        values += [b"lb-%d-%d" % (round_, i) for i in range(5)]
        for i in range(5):
            kafka.produce("zc-mixed", b"kafka-%d-%d" % (round_, i))
        assert kafka.flush(20) == 0
        values += [b"kafka-%d-%d" % (round_, i) for i in range(5)]
    # From offset 0 the first batch is msgpack: that fetch is converted and copied, and
    # it holds everything after it too.
    assert [m.value() for m in read_assigned(brokers, "zc-mixed", len(values))] == values
    # From offset 5 (a Kafka batch) the range ends before the msgpack batch at 10, which
    # the next fetch converts.
    _, sent = sendfile_counters(brokers, leader)
    got = read_assigned(brokers, "zc-mixed", len(values) - 5, start=5)
    assert [m.value() for m in got] == values[5:]
    _, sent_after = sendfile_counters(brokers, leader)
    assert sent_after > sent


# ------------------------------------------------------------- a segment deleted mid-send


def _fetch_frame(correlation_id: int, topic: str, offset: int, max_bytes: int) -> bytes:
    import io

    req = fetch_v12.FetchRequest(
        replica_id=fetch_v12.BrokerId(-1),
        max_wait=datetime.timedelta(0),
        min_bytes=fetch_v12.i32(1),
        max_bytes=fetch_v12.i32(max_bytes),
        isolation_level=fetch_v12.i8(0),
        session_id=fetch_v12.i32(0),
        session_epoch=fetch_v12.i32(-1),
        topics=(
            fetch_v12.FetchTopic(
                topic=fetch_v12.TopicName(topic),
                partitions=(
                    fetch_v12.FetchPartition(
                        partition=fetch_v12.i32(0),
                        current_leader_epoch=fetch_v12.i32(-1),
                        fetch_offset=fetch_v12.i64(offset),
                        last_fetched_epoch=fetch_v12.i32(-1),
                        log_start_offset=fetch_v12.i64(-1),
                        partition_max_bytes=fetch_v12.i32(max_bytes),
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
    buf = io.BytesIO()
    # Request header v2: api key 1, version 12, correlation id, client id, no tagged fields.
    buf.write(struct.pack(">hhih", 1, 12, correlation_id, 2) + b"zc" + b"\0")
    entity_writer(fetch_v12.FetchRequest)(buf, req)
    body = buf.getvalue()
    return struct.pack(">i", len(body)) + body


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(min(n - len(out), 1 << 16))
        assert chunk, "the broker closed the connection"
        out += chunk
    return bytes(out)


def _fetch_answer(sock: socket.socket) -> Any:
    (size,) = struct.unpack(">i", _read_exactly(sock, 4))
    frame = _read_exactly(sock, size)
    # correlation id (4) and the response header's empty tagged fields (1)
    body, _ = entity_reader(load_response_schema(1, 12))(frame, 5)
    return body.responses[0].partitions[0]


def test_a_segment_deleted_while_its_bytes_are_being_sent_serves_what_was_stored(
    kafka_listener_cluster: Brokers,
) -> None:
    brokers = kafka_listener_cluster
    leader = create_topic(brokers, "zc-deleted", 1, {"segment.bytes": str(4 << 20)})
    p = Producer(
        {
            "bootstrap.servers": bootstrap(brokers),
            "linger.ms": 50,
            "batch.size": 1 << 20,
            "compression.type": "none",
        }
    )
    values = [bytes([65 + i % 26]) * 10_000 + b"%d" % i for i in range(1200)]  # ~12 MB
    for v in values:
        p.produce("zc-deleted", v)
    assert p.flush(60) == 0

    def first_segment() -> list[Any]:
        return list((brokers.root / f"broker-{leader}").glob("**/zc-deleted-0/0*0.log"))

    assert first_segment()
    responses, _ = sendfile_counters(brokers, leader)
    sock = socket.socket()
    # A small receive buffer: the broker's sendfile fills it and waits for room.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
    sock.connect(("127.0.0.1", brokers.kafka_ports[leader]))
    sock.settimeout(30)
    try:
        sock.sendall(_fetch_frame(1, "zc-deleted", 0, 64 << 20))
        time.sleep(1.0)
        # Still sending (a response is counted once wholly sent): the answer is mid-file.
        assert sendfile_counters(brokers, leader)[0] == responses
        admin = AdminClient({"bootstrap.servers": bootstrap(brokers)})
        end = len(values)
        (fut,) = admin.delete_records([TopicPartition("zc-deleted", 0, end)]).values()
        assert fut.result(timeout=30).low_watermark == end  # every closed segment is deleted
        assert not first_segment(), "the segment being sent is still on disk"
        part = _fetch_answer(sock)
        assert part.error_code == 0
        data = bytes(part.records)
        spans = list(iter_batches(data))
        assert len(data) > 1 << 20 and sum(h.size for _, h in spans) == len(data)
        got: list[bytes] = []
        for pos, h in spans:
            batch = data[pos : pos + h.size]
            assert h.magic == MAGIC_KAFKA
            verify_batch(batch)  # CRC-32C as Kafka computes it
            got += [r.value for r in decode_records(batch) if r.value is not None]
        assert got == values[: len(got)]
        assert sendfile_counters(brokers, leader)[0] > responses
        # The connection serves the next request: offset 0 is below the log start now.
        sock.sendall(_fetch_frame(2, "zc-deleted", 0, 1 << 20))
        assert _fetch_answer(sock).error_code == 1  # OFFSET_OUT_OF_RANGE
    finally:
        sock.close()
