"""Apache Kafka 4.4 as a differential oracle, three brokers a side (extended tier): what one
broker cannot show. Placement shapes of a replicated topic, the answers of a broker that does
not lead the partition, preferred-leader election, and NOT_ENOUGH_REPLICAS once a paused
follower has left the ISR.

Three Kafka JVMs (KRaft combined mode) beside a Longboat cluster of 1 controller and 3
brokers cost about a minute on a loaded 2-core machine, which the fast suite cannot spend:
``./scripts/test.sh --extended`` runs this module (docs/testing.md). Same plumbing, same
comparisons and the same rules for allowed differences as ``test_kafka_oracle.py``.
"""

from __future__ import annotations

import datetime
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")

from apache_kafka import QUICK_START_JVM, KafkaCluster, beside_longboat, kafka_jars  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kafka_oracle import Peer, batch, build, same  # noqa: E402
from kio.schema.delete_records.v2.request import DeleteRecordsRequest  # noqa: E402
from kio.schema.describe_cluster.v0.request import DescribeClusterRequest  # noqa: E402
from kio.schema.elect_leaders.v2.request import ElectLeadersRequest  # noqa: E402
from kio.schema.fetch.v12.request import FetchRequest  # noqa: E402
from kio.schema.list_offsets.v7.request import ListOffsetsRequest  # noqa: E402
from kio.schema.metadata.v12.request import MetadataRequest  # noqa: E402
from kio.schema.produce.v9.request import ProduceRequest  # noqa: E402

from api.node.localcluster import wait_for  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.extended]

TIMEOUT = datetime.timedelta(seconds=15)
LAG_MS = 2000  # replica.lag.time.max.ms on both sides: a paused follower leaves the ISR soon


class Side:
    """A peer and how to pause one of its brokers."""

    def __init__(self, peer: Peer, pause: Any) -> None:
        self.peer = peer
        self.pause = pause  # (broker id, signal) -> None


@pytest.fixture(scope="module")
def sides(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Side, Side]]:
    """(Longboat, Kafka), three brokers each, started side by side."""
    root: Path = tmp_path_factory.mktemp("kafka-oracle-cluster")
    jars = kafka_jars()  # fails, never skips, when Java or the jars cannot be had
    ak = KafkaCluster(
        root / "kafka",
        jars,
        nodes=3,
        heap="-Xmx384m",
        jvm_opts=QUICK_START_JVM,
        props={"replica.lag.time.max.ms": str(LAG_MS), "offsets.topic.num.partitions": "1"},
    )
    with beside_longboat(
        ak,
        root / "longboat",
        kafka_timeout_s=240,
        controllers=1,
        brokers=3,
        kafka=True,
        broker_args=["--replica-lag-time-max-ms", str(LAG_MS)],
        ready_timeout_s=120,
    ) as b:
        lb = Peer("longboat", next(iter(b.kafka_ports.values())), b.kafka_ports)
        yield (
            Side(lb, b.send_signal),
            Side(Peer("kafka", ak.broker_ports[0], ak.node_ports), ak.send_signal),
        )


def create_topic(p: Peer, name: str, partitions: int, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": p.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 3, config=configs)], operation_timeout=30)[
        name
    ].result(timeout=60)

    def ready(at: Peer) -> bool:
        parts = partitions_of(at, name)
        return len(parts) == partitions and all(
            x["leader_id"] >= 0 and len(x["isr_nodes"]) == 3 for x in parts
        )

    # Asked of every broker: each applies the metadata on its own, and a leader that has not
    # yet would answer UNKNOWN_TOPIC_OR_PARTITION (seen with Kafka).
    wait_for(
        f"{p.name}: {name} has leaders and full ISRs on every broker",
        lambda: all(ready(p.at(node)) for node in p.nodes),
        60,
    )


def partitions_of(p: Peer, topic: str) -> list[dict[str, Any]]:
    """Metadata v12 of one topic's partitions, with leader and replica ids (which the
    comparisons leave out)."""
    raw = p.call(
        build(
            MetadataRequest,
            topics=[{"topic_id": None, "name": topic}],
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )
    return [
        {
            "partition": int(x.partition_index),
            "error_code": int(x.error_code),
            "leader_id": int(x.leader_id),
            "replica_nodes": [int(r) for r in x.replica_nodes],
            "isr_nodes": [int(r) for r in x.isr_nodes],
        }
        for t in raw.topics
        for x in t.partitions
    ]


def produce(p: Peer, topic: str, acks: int, ts: int, timeout: datetime.timedelta = TIMEOUT) -> Any:
    return p.ask(
        build(
            ProduceRequest,
            transactional_id=None,
            acks=acks,
            timeout=timeout,
            topic_data=[
                {
                    "name": topic,
                    "partition_data": [{"index": 0, "records": batch([b"v%d" % ts], ts)}],
                }
            ],
        )
    )["responses"][0]["partition_responses"][0]


def latest(p: Peer, topic: str) -> int:
    ans = p.ask(
        build(
            ListOffsetsRequest,
            replica_id=-1,
            isolation_level=0,
            topics=[
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}
                    ],
                }
            ],
        )
    )
    return int(ans["topics"][0]["partitions"][0]["offset"])


# ----------------------------------------------------------------------------- scenarios


def test_replicated_topic_shapes_match(sides: tuple[Side, Side]) -> None:
    """An RF 3 topic of 3 partitions: replica and ISR counts, leaders spread over the
    brokers, each partition led by one of its replicas; DescribeCluster's broker count."""

    def scenario(p: Peer) -> Any:
        create_topic(p, "spread", 3, {"min.insync.replicas": "2"})
        parts = partitions_of(p, "spread")
        cluster = p.ask(build(DescribeClusterRequest, include_cluster_authorized_operations=False))
        return {
            "partitions": [
                {
                    "replicas": len(x["replica_nodes"]),
                    "isr": len(x["isr_nodes"]),
                    "leader_is_a_replica": x["leader_id"] in x["replica_nodes"],
                    "preferred_leads": x["leader_id"] == x["replica_nodes"][0],
                }
                for x in parts
            ],
            "distinct_leaders": len({x["leader_id"] for x in parts}),
            "brokers": len(cluster["brokers"]),
        }

    lb, ak = (scenario(s.peer) for s in sides)
    same(lb, ak)
    assert ak["distinct_leaders"] == 3


def test_a_broker_that_does_not_lead_answers_the_same(sides: tuple[Side, Side]) -> None:
    """Produce, Fetch, ListOffsets and DeleteRecords sent to a follower of the partition;
    ElectLeaders (preferred) where the preferred replicas lead already."""

    def scenario(p: Peer) -> Any:
        create_topic(p, "follow", 1, {})
        [part] = partitions_of(p, "follow")
        follower = p.at(next(r for r in part["replica_nodes"] if r != part["leader_id"]))
        leader = p.at(part["leader_id"])
        fetch = build(
            FetchRequest,
            cluster_id=None,
            replica_id=-1,
            max_wait=datetime.timedelta(milliseconds=50),
            min_bytes=1,
            max_bytes=1 << 20,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=[
                {
                    "topic": "follow",
                    "partitions": [
                        {
                            "partition": 0,
                            "current_leader_epoch": -1,
                            "fetch_offset": 0,
                            "last_fetched_epoch": -1,
                            "log_start_offset": -1,
                            "partition_max_bytes": 1 << 20,
                        }
                    ],
                }
            ],
            rack_id="",
        )
        offsets = build(
            ListOffsetsRequest,
            replica_id=-1,
            isolation_level=0,
            topics=[
                {
                    "name": "follow",
                    "partitions": [
                        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}
                    ],
                }
            ],
        )
        delete = build(
            DeleteRecordsRequest,
            timeout=TIMEOUT,
            topics=[{"name": "follow", "partitions": [{"partition_index": 0, "offset": 0}]}],
        )
        elect = build(
            ElectLeadersRequest,
            election_type=0,
            timeout=TIMEOUT,
            topic_partitions=[{"topic": "follow", "partitions": [0]}],
        )
        return {
            "produce_to_follower": produce(follower, "follow", -1, 1000),
            "produce_to_leader": produce(leader, "follow", -1, 1001),
            "fetch_from_follower": follower.ask(fetch, drop={"session_id", "records"}),
            "list_offsets_at_follower": follower.ask(offsets),
            "delete_records_at_follower": follower.ask(delete),
            "elect_preferred": p.ask(elect),
        }

    lb, ak = (scenario(s.peer) for s in sides)
    # A consumer's Fetch (v11+) at a follower: Kafka serves it up to the follower's high
    # watermark (KIP-392: a request with client metadata may read any replica); Longboat
    # refuses it as a non-leader. Clients fetch from the leader unless it names a preferred
    # read replica, which Longboat never does (docs).
    fetched = [
        {k: x[k] for k in ("error_code", "high_watermark", "log_start_offset")}
        for x in (
            lb.pop("fetch_from_follower")["responses"][0]["partitions"][0],
            ak.pop("fetch_from_follower")["responses"][0]["partitions"][0],
        )
    ]
    assert fetched == [
        {"error_code": "not_leader_or_follower", "high_watermark": -1, "log_start_offset": -1},
        {
            "error_code": "none",
            "high_watermark": fetched[1]["high_watermark"],
            "log_start_offset": 0,
        },
    ]
    same(lb, ak)
    assert ak["produce_to_follower"]["error_code"] == "not_leader_or_follower"


def test_not_enough_replicas_once_a_follower_leaves_the_isr(sides: tuple[Side, Side]) -> None:
    """RF 3 with min.insync.replicas=3: a paused follower leaves the ISR; acks=all is then
    refused with NOT_ENOUGH_REPLICAS and acks=1 accepted; once it is back in the ISR acks=all
    is accepted again."""

    def scenario(s: Side) -> Any:
        p = s.peer
        create_topic(p, "mir", 1, {"min.insync.replicas": "3"})
        [part] = partitions_of(p, "mir")
        follower = next(r for r in part["replica_nodes"] if r != part["leader_id"])
        leader = p.at(part["leader_id"])
        out: dict[str, Any] = {"all_in_sync": produce(leader, "mir", -1, 1000)}
        s.pause(follower, signal.SIGSTOP)
        try:
            wait_for(
                f"{p.name}: the paused follower leaves the ISR",
                lambda: len(partitions_of(leader, "mir")[0]["isr_nodes"]) == 2,
                60,
            )
            # Kafka's leader may still count the paused follower for a moment after the
            # metadata shows the smaller ISR (it applies the controller's ISR change on its
            # own): such an acks=all append waits and times out. Asked again until the
            # leader refuses; the offsets below are then counted from the log end.
            refused = wait_for(
                f"{p.name}: acks=all refused",
                lambda: (
                    (a := produce(leader, "mir", -1, 1001, datetime.timedelta(seconds=2)))
                    and a["error_code"] != "request_timed_out"
                    and a
                ),
                60,
            )
            out["acks_all_short"] = refused
            end = latest(leader, "mir")
            acked = produce(leader, "mir", 1, 1002)
            out["acks_1_short"] = {**acked, "base_offset": acked["base_offset"] - end}
        finally:
            s.pause(follower, signal.SIGCONT)
        wait_for(
            f"{p.name}: the follower is back in the ISR",
            lambda: len(partitions_of(leader, "mir")[0]["isr_nodes"]) == 3,
            90,
        )
        end = latest(leader, "mir")
        again = produce(leader, "mir", -1, 1003)
        out["acks_all_again"] = {**again, "base_offset": again["base_offset"] - end}
        return out

    lb, ak = (scenario(s) for s in sides)
    same(lb, ak)
    assert ak["acks_all_short"]["error_code"] == "not_enough_replicas"
    assert ak["acks_1_short"]["base_offset"] == 0
