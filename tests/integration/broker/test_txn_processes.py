"""Transactions, the partition side, with real processes: 1 controller and 2 brokers (each with
a Kafka listener), topic RF 2. Transactional batches and markers go through the node routes
(``produce`` with a transactional id, ``write_txn_markers``), then both isolation levels are
read through every read path: Longboat's Python consumer (msgpack fetch), the HTTP v3 read
(JSON and msgpack), and a real Kafka client (confluent-kafka, which filters with the
FetchResponse's aborted transactions itself). Then the leader is killed: the new leader (the
old follower, which applied the markers as it replicated them) hides the aborted records too;
and the killed broker restarted without a snapshot rebuilds the same state from its log."""

from __future__ import annotations

import base64
import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pyarrow
import pytest

from api.client import Consumer as LBConsumer
from api.client import TopicPartition as LBTopicPartition
from api.node.localcluster import Brokers, running_cluster, wait_for
from storage.batch import encode_batch

confluent_kafka = pytest.importorskip("confluent_kafka")

TOPIC = "tx"
A, B = 1000, 2000  # producer ids: A's transaction aborts, B's commits


def _post(url: str, route: str, body: dict[str, Any]) -> Any:
    req = urllib.request.Request(
        f"{url}/internal/broker/v1/{route}",
        data=msgpack.packb(body, use_bin_type=True),
        headers={"Content-Type": "application/msgpack"},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return msgpack.unpackb(r.read(), raw=False)


def _get(url: str, accept: str = "application/json") -> tuple[Any, str]:
    req = urllib.request.Request(url, headers={"Accept": accept})
    with urllib.request.urlopen(req, timeout=30) as r:
        body = r.read()
        ct = r.headers.get("Content-Type", "")
    return (msgpack.unpackb(body, raw=False) if "msgpack" in ct else json.loads(body)), ct


def _leader(brokers: Brokers) -> int | None:
    for b in list(brokers.procs):
        try:
            for r in brokers.get(b, "/internal/broker/v1/replicas"):
                if r["topic"] == TOPIC and r["role"] == "leader":
                    return b
        except OSError:
            continue
    return None


def _lb_values(urls: list[str], level: str, end: int) -> list[bytes]:
    tp = LBTopicPartition(TOPIC, 0)
    with LBConsumer(urls, isolation_level=level, auto_offset_reset="earliest") as c:
        c.assign([tp])
        c.seek(tp, 0)
        out: list[bytes] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            out += [r.value for r in c.poll(500)]
            if c.position(tp) >= end:
                return out
        raise AssertionError(f"{level}: position {c.position(tp)} never reached {end}")


def _kafka_values(bootstrap: str, level: str, n: int) -> list[bytes]:
    c = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"tx-{level}",
            "enable.auto.commit": False,
            "isolation.level": level,
        }
    )
    c.assign([confluent_kafka.TopicPartition(TOPIC, 0, 0)])
    out: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(out) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            out.append(m.value())
        # Nothing more arrives (an aborted record would, if the filter failed).
        extra = c.poll(1.0)
        assert extra is None or extra.error() is not None, extra.value()
    finally:
        c.close()
    return out


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Brokers]:
    root: Path = tmp_path_factory.mktemp("txn-cluster")
    # The batches here open transactions no coordinator knows of: without verification
    # (KIP-890 part 1) the partitions take them, as the node routes are tested alone.
    with running_cluster(
        root,
        controllers=1,
        brokers=2,
        kafka=True,
        broker_args=["--override", "transaction_partition_verification_enable=false"],
    ) as (_, brokers):
        yield brokers


def test_read_committed_hides_aborted_and_open_transactions_on_every_path(
    cluster: Brokers,
) -> None:
    urls = [cluster.url(b) for b in cluster.ids]
    cid = _get(urls[0] + "/v3/clusters")[0]["data"][0]["cluster_id"]
    _post_json(
        f"{urls[0]}/v3/clusters/{cid}/topics",
        {"topic_name": TOPIC, "partitions_count": 1, "replication_factor": 2},
    )
    wait_for("a leader", lambda: _leader(cluster), 20)
    ts = int(time.time() * 1000)

    def produce(values: list[bytes], pid: int = -1, seq: int = -1) -> Any:
        body: dict[str, Any] = {
            "topic": TOPIC,
            "partition": 0,
            "acks": -1,
            "batch": encode_batch(
                [(None, v, ts, ()) for v in values],
                producer_id=pid,
                producer_epoch=0 if pid >= 0 else -1,
                base_sequence=seq,
                transactional=pid >= 0,
            ),
        }
        if pid >= 0:
            body["transactional_id"] = f"t-{pid}"
        ans = wait_for("produce", lambda: _ok(_post(urls[1], "produce", body)), 20)
        return ans

    assert produce([b"a0", b"a1"], A, 0)["base_offset"] == 0
    assert produce([b"p0"])["base_offset"] == 2
    assert produce([b"b0"], B, 0)["base_offset"] == 3

    # Open transactions: read_committed stops at the LSO (0).
    with LBConsumer(urls, isolation_level="read_committed") as c:
        tp = LBTopicPartition(TOPIC, 0)
        assert c.end_offsets([tp]) == {tp: 0}
    with LBConsumer(urls) as c:
        assert c.end_offsets([tp]) == {tp: 4}
    v3 = f"{urls[0]}/v3/clusters/{cid}/topics/{TOPIC}/partitions/0/records"
    body, _ = _get(f"{v3}?offset=0&timeout_ms=0&isolation_level=read_committed")
    assert body["records"] == [] and body["last_stable_offset"] == 0, body

    leader = _leader(cluster)
    assert leader is not None
    ans = _post(
        cluster.url(leader),
        "write_txn_markers",
        {
            "markers": [
                {
                    "topic": TOPIC,
                    "partition": 0,
                    "producer_id": A,
                    "producer_epoch": 0,
                    "commit": False,
                    "coordinator_epoch": 0,
                },
                {
                    "topic": TOPIC,
                    "partition": 0,
                    "producer_id": B,
                    "producer_epoch": 0,
                    "commit": True,
                    "coordinator_epoch": 0,
                },
            ]
        },
    )
    assert [r["error"] for r in ans["results"]] == [None, None], ans
    everything = [b"a0", b"a1", b"p0", b"b0"]
    committed = [b"p0", b"b0"]

    # Longboat's consumer (msgpack fetch).
    assert _lb_values(urls, "read_committed", 6) == committed
    assert _lb_values(urls, "read_uncommitted", 6) == everything
    # HTTP v3, JSON: markers are never records; read_committed leaves out the aborted ones.
    body, _ = _get(f"{v3}?offset=0&timeout_ms=0&isolation_level=read_committed&format=string")
    assert [r["value"] for r in body["records"]] == ["p0", "b0"], body
    assert body["next_offset"] == 6 and body["last_stable_offset"] == 6
    body, _ = _get(f"{v3}?offset=0&timeout_ms=0&format=string")
    assert [r["value"] for r in body["records"]] == ["a0", "a1", "p0", "b0"], body
    bad = urllib.request.Request(f"{v3}?isolation_level=dirty")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(bad, timeout=10)
    assert e.value.code == 400
    # HTTP v3, msgpack: whole batches, the aborted one emptied.
    body, ct = _get(
        f"{v3}?offset=0&timeout_ms=0&isolation_level=read_committed", "application/x-msgpack"
    )
    assert "msgpack" in ct and body["last_stable_offset"] == 6
    # HTTP v3, Arrow: the aborted records are not rows.
    req = urllib.request.Request(
        f"{v3}?offset=0&timeout_ms=0&isolation_level=read_committed",
        headers={"Accept": "application/vnd.apache.arrow.stream"},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        table = pyarrow.ipc.open_stream(r.read()).read_all()
    assert table.column("value").to_pylist() == committed
    # v2 consumer instances, with Kafka's consumer config name.
    for level, want in (("read_committed", committed), ("read_uncommitted", everything)):
        assert _v2(urls[0], "POST", "/consumers/g", {"name": level, "isolation.level": level})
        inst = f"/consumers/g/instances/{level}"
        _v2(
            urls[0],
            "POST",
            inst + "/assignments",
            {"partitions": [{"topic": TOPIC, "partition": 0}]},
        )
        _v2(
            urls[0],
            "POST",
            inst + "/positions/beginning",
            {"partitions": [{"topic": TOPIC, "partition": 0}]},
        )
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(got) < len(want) and time.monotonic() < deadline:
            got += [
                base64.b64decode(r["value"])
                for r in _v2(urls[0], "GET", inst + "/records?timeout=500")
            ]
        assert got == want, level
        _v2(urls[0], "DELETE", inst)
    with pytest.raises(urllib.error.HTTPError) as e:
        _v2(urls[0], "POST", "/consumers/g", {"name": "bad", "isolation.level": "dirty"})
    assert e.value.code == 422 and json.loads(e.value.read())["error_code"] == 42204
    # A real Kafka client filters with the FetchResponse's aborted transactions.
    bootstrap = ",".join(f"127.0.0.1:{p}" for p in cluster.kafka_ports.values())
    assert _kafka_values(bootstrap, "read_committed", 2) == committed
    assert _kafka_values(bootstrap, "read_uncommitted", 4) == everything

    # Leader change: the old follower applied the markers as it replicated them.
    cluster.kill(leader)
    alive = [cluster.url(b) for b in cluster.procs]
    wait_for("the other broker leads", lambda: _leader(cluster) not in (None, leader), 30)
    assert _lb_values(alive, "read_committed", 6) == committed
    # Restart without a snapshot (SIGKILL): the state is rebuilt from the log's markers.
    cluster.start(leader)
    cluster.wait_ready([leader], timeout_s=60)
    other = _leader(cluster)
    assert other is not None and other != leader

    def caught_up() -> bool:
        for r in cluster.get(leader, "/internal/broker/v1/replicas"):
            if r["topic"] == TOPIC:
                return r["log_end_offset"] == 6 and r["role"] == "follower"
        return False

    wait_for("the restarted broker back as a follower", caught_up, 30)
    wait_for("back in the ISR", lambda: _isr_size(cluster, other) == 2, 40)
    cluster.kill(other)
    wait_for("the restarted broker leads", lambda: _leader(cluster) == leader, 30)
    assert _lb_values([cluster.url(leader)], "read_committed", 6) == committed
    cluster.start(other)


def _v2(url: str, method: str, path: str, body: Any = None) -> Any:
    req = urllib.request.Request(
        url + path,
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={
            "Content-Type": "application/vnd.kafka.v2+json",
            "Accept": "application/vnd.kafka.binary.v2+json",
        },
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        data = r.read()
    return json.loads(data) if data else True


def _isr_size(cluster: Brokers, b: int) -> int:
    for r in cluster.get(b, "/internal/broker/v1/replicas"):
        if r["topic"] == TOPIC:
            return len(r["isr"])
    return 0


def _ok(ans: Any) -> Any:
    return None if ans.get("error") else ans


def _post_json(url: str, body: Any) -> Any:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())
