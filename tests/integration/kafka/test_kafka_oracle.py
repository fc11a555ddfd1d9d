"""Apache Kafka 4.4 as a differential oracle: the same scenarios against a single-node Kafka
cluster (KRaft, from Maven Central's jars) and a single-broker Longboat cluster, the same
client on both, the observable answers compared.

Each scenario runs on both peers and returns plain values: offsets, error codes, timestamps
the client chose, metadata and group shapes. What must differ is stripped before the
comparison (``kafka_oracle.NOT_COMPARED``: broker and cluster ids, hosts and ports, topic
and member ids, throttle times, free-text error messages). Where Longboat differs on purpose,
the scenario says so in an ``allowed`` step with the reason, and docs/kafka-protocol.md lists
it ("Differential checks against Apache Kafka").

One node a side: the fast suite cannot afford three JVMs, and one broker makes the
answers that depend on placement (leaders, replicas, the coordinator) the same shape on both.
The two clusters start together, once for the module. Java and Kafka's jars come from
``scripts/setup-kafka-java.sh``; without them the module fails rather than skips.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")

from apache_kafka import QUICK_START_JVM, KafkaCluster, beside_longboat, kafka_jars  # noqa: E402
from confluent_kafka import Consumer, TopicPartition  # noqa: E402
from confluent_kafka import Producer as CKProducer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kafka_oracle import (  # noqa: E402
    NOT_COMPARED,
    Peer,
    answered,
    batch,
    batches,
    build,
    plain,
    same,
    send_only,
)
from kio.schema.create_partitions.v3.request import CreatePartitionsRequest  # noqa: E402
from kio.schema.create_topics.v5.request import CreateTopicsRequest  # noqa: E402
from kio.schema.delete_records.v2.request import DeleteRecordsRequest  # noqa: E402
from kio.schema.delete_topics.v4.request import DeleteTopicsRequest  # noqa: E402
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest  # noqa: E402
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest  # noqa: E402
from kio.schema.fetch.v12.request import FetchRequest  # noqa: E402
from kio.schema.incremental_alter_configs.v1.request import (  # noqa: E402
    IncrementalAlterConfigsRequest,
)
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest  # noqa: E402
from kio.schema.list_groups.v4.request import ListGroupsRequest  # noqa: E402
from kio.schema.list_offsets.v7.request import ListOffsetsRequest  # noqa: E402
from kio.schema.metadata.v12.request import MetadataRequest  # noqa: E402
from kio.schema.offset_fetch.v7.request import OffsetFetchRequest  # noqa: E402
from kio.schema.offset_for_leader_epoch.v4.request import (  # noqa: E402
    OffsetForLeaderEpochRequest,
)
from kio.schema.produce.v9.request import ProduceRequest  # noqa: E402
from kio.static.primitive import Records  # noqa: E402

from api.node.localcluster import wait_for  # noqa: E402

pytestmark = pytest.mark.slow

TIMEOUT = datetime.timedelta(seconds=15)
TOPIC_RESOURCE = 2  # ConfigResource.Type.TOPIC


@pytest.fixture(scope="module")
def peers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Peer, Peer]]:
    """(Longboat, Kafka), started side by side."""
    root: Path = tmp_path_factory.mktemp("kafka-oracle")
    jars = kafka_jars()  # fails, never skips, when Java or the jars cannot be had
    ak = KafkaCluster(
        root / "kafka",
        jars,
        nodes=1,
        heap="-Xmx384m",
        jvm_opts=QUICK_START_JVM,
        # One offsets partition: Kafka's default 50 only slow the first group's coordinator.
        props={"offsets.topic.num.partitions": "1"},
    )
    with beside_longboat(
        ak, root / "longboat", kafka_timeout_s=150, controllers=1, brokers=1, kafka=True
    ) as b:
        lb = Peer("longboat", next(iter(b.kafka_ports.values())))
        yield lb, Peer("kafka", ak.broker_ports[0])


def both(peers: tuple[Peer, Peer], scenario: Callable[[Peer], Any]) -> tuple[Any, Any]:
    lb, ak = peers
    return scenario(lb), scenario(ak)


def allow(lb: dict[str, Any], ak: dict[str, Any], key: str, longboat: Any, kafka: Any) -> None:
    """A known difference (listed in docs/kafka-protocol.md with its reason): each side
    answered exactly as expected, and the answer is left out of the comparison. Pinned both
    ways, so a change on either side shows here."""
    assert (lb.pop(key), ak.pop(key)) == (longboat, kafka), key


def create_topic(
    p: Peer, name: str, partitions: int = 1, configs: dict[str, str] | None = None
) -> None:
    admin = AdminClient({"bootstrap.servers": p.bootstrap})
    fut = admin.create_topics(
        [NewTopic(name, partitions, 1, config=configs or {})], operation_timeout=15
    )[name]
    fut.result(timeout=30)

    def led() -> bool:
        t = admin.list_topics(name, timeout=5).topics.get(name)
        return (
            t is not None
            and t.error is None
            and len(t.partitions) == partitions
            and all(x.leader >= 0 for x in t.partitions.values())
        )

    wait_for(f"{p.name}: {name} has leaders", led, 30)


def produce(p: Peer, topic: str, records: Any, partition: int = 0, acks: int = -1) -> Any:
    return p.ask(
        build(
            ProduceRequest,
            transactional_id=None,
            acks=acks,
            timeout=TIMEOUT,
            topic_data=[
                {"name": topic, "partition_data": [{"index": partition, "records": records}]}
            ],
        )
    )["responses"][0]["partition_responses"][0]


def fetch(p: Peer, topic: str, offset: int, partition: int = 0) -> dict[str, Any]:
    part = p.ask(
        build(
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
                    "topic": topic,
                    "partitions": [
                        {
                            "partition": partition,
                            "current_leader_epoch": -1,
                            "fetch_offset": offset,
                            "last_fetched_epoch": -1,
                            "log_start_offset": -1,
                            "partition_max_bytes": 1 << 20,
                        }
                    ],
                }
            ],
            rack_id="",
        ),
        # A session id is 0 for Longboat (no fetch sessions: docs, KIP-227 allows it)
        drop={"session_id"},
    )["responses"][0]["partitions"][0]
    part["batches"] = batches(part.pop("records"))
    # Allowed: a null and an empty aborted-transactions list mean the same to every client
    # (read_uncommitted answers carry none); Kafka sends [] on an error, Longboat null.
    part["aborted_transactions"] = part["aborted_transactions"] or []
    return part


def list_offsets(p: Peer, topic: str, timestamp: int, partition: int = 0) -> tuple[Any, ...]:
    """(error, offset, timestamp, leader epoch) of one ListOffsets v7 question."""
    [x] = ask_offsets(p, topic, [timestamp], partition)
    return x


def ask_offsets(p: Peer, topic: str, timestamps: list[int], partition: int = 0) -> list[Any]:
    """One ListOffsets v7 request asking ``partition`` once per timestamp."""
    parts = p.ask(
        build(
            ListOffsetsRequest,
            replica_id=-1,
            isolation_level=0,
            topics=[
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": partition, "current_leader_epoch": -1, "timestamp": t}
                        for t in timestamps
                    ],
                }
            ],
        )
    )["topics"][0]["partitions"]
    return [(x["error_code"], x["offset"], x["timestamp"], x["leader_epoch"]) for x in parts]


def metadata_raw(p: Peer, *topics: str) -> list[Any]:
    """Metadata's topics with the replica ids kept (``metadata`` leaves them out)."""
    return [
        plain(t, NOT_COMPARED - {"replica_nodes"})
        for t in p.call(
            build(
                MetadataRequest,
                topics=[{"topic_id": None, "name": t} for t in topics],
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
        ).topics
    ]


def metadata(p: Peer, *topics: str) -> list[Any]:
    return p.ask(
        build(
            MetadataRequest,
            topics=[{"topic_id": None, "name": t} for t in topics],
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )["topics"]


def at_end(p: Peer, topic: str, offset: int) -> bool:
    return bool(list_offsets(p, topic, -1)[1] == offset)


def produce_one_at_a_time(
    p: Peer, topic: str, values: list[str], conf: dict[str, Any]
) -> list[tuple[str | None, int, int]]:
    """(error, partition, offset) of each delivery report; one record a batch, each flushed
    before the next, so the offsets do not depend on how the client batches."""
    got: list[tuple[str | None, int, int]] = []

    def report(err: Any, m: Any) -> None:
        got.append((err.name() if err else None, m.partition(), m.offset()))

    prod = CKProducer({"bootstrap.servers": p.bootstrap, "linger.ms": 0, **conf})
    for v in values:
        prod.produce(topic, value=v.encode(), on_delivery=report)
        prod.flush(15)
    assert prod.flush(15) == 0
    return got


# ----------------------------------------------------------------------------- scenarios


def test_produce_with_each_acks_setting_returns_the_same_offsets(
    peers: tuple[Peer, Peer],
) -> None:
    """confluent-kafka with acks 0, 1, all and idempotence: the offsets its delivery reports
    name, then the end offset."""

    def scenario(p: Peer) -> Any:
        create_topic(p, "acks")
        out: dict[str, Any] = {}
        for name, conf in (
            ("acks=0", {"acks": 0}),
            ("acks=1", {"acks": 1}),
            ("acks=all", {"acks": "all"}),
            ("idempotent", {"acks": "all", "enable.idempotence": True}),
        ):
            out[name] = produce_one_at_a_time(p, "acks", [f"{name}-{i}" for i in range(3)], conf)
            # acks=0 is "delivered" once sent: wait until the broker has appended it, so the
            # next producer's offsets do not depend on how fast the broker is.
            end = 3 * len(out)
            wait_for(f"{p.name}: {name} appended", partial(at_end, p, "acks", end), 20)
        out["end"] = [list_offsets(p, "acks", -2), list_offsets(p, "acks", -1)]
        return out

    lb, ak = both(peers, scenario)
    same(lb, ak)
    assert ak["idempotent"] == [(None, 0, 9), (None, 0, 10), (None, 0, 11)]


def test_fetch_list_offsets_and_leader_epochs_match(peers: tuple[Peer, Peer]) -> None:
    """Two batches with timestamps the client chose; a fetch from the middle of the first,
    at the end and past it; ListOffsets earliest, latest, by timestamp (exact, between
    batches, past the end); OffsetForLeaderEpoch of the current epoch and the next."""

    def scenario(p: Peer) -> Any:
        create_topic(p, "reads")
        out: dict[str, Any] = {
            "produce": [
                produce(p, "reads", batch([b"a%d" % i for i in range(5)], 1000)),
                produce(p, "reads", batch([b"b%d" % i for i in range(5)], 2000)),
            ],
            "fetch_from_start": fetch(p, "reads", 0),
            "fetch_mid_batch": fetch(p, "reads", 2),
            "fetch_second_batch": fetch(p, "reads", 5),
            "fetch_at_end": fetch(p, "reads", 10),
            "fetch_past_end": fetch(p, "reads", 11),
            "list_offsets": [
                list_offsets(p, "reads", t) for t in (-2, -1, 1002, 1500, 2004, 2005, 9999)
            ],
            "max_timestamp": list_offsets(p, "reads", -3),
            "asked_twice": ask_offsets(p, "reads", [-2, -1]),
        }
        [topic] = metadata(p, "reads")
        epoch = topic["partitions"][0]["leader_epoch"]
        out["metadata"] = topic
        out["epochs"] = [
            p.ask(
                build(
                    OffsetForLeaderEpochRequest,
                    replica_id=-1,
                    topics=[
                        {
                            "topic": "reads",
                            "partitions": [
                                {"partition": 0, "current_leader_epoch": epoch, "leader_epoch": e}
                            ],
                        }
                    ],
                )
            )["topics"][0]["partitions"][0]
            for e in (epoch, epoch + 1)
        ]
        return out

    lb, ak = both(peers, scenario)
    # KIP-734's max timestamp (-3): not served by Longboat (docs), which says so per partition.
    allow(lb, ak, "max_timestamp", ("unsupported_version", -1, -1, -1), ("none", 9, 2004, 0))
    # A partition asked twice in one request: Kafka answers it once, INVALID_REQUEST; Longboat
    # answers each question (no client sends one; docs).
    allow(
        lb,
        ak,
        "asked_twice",
        [("none", 0, -1, 0), ("none", 10, -1, 0)],
        [("invalid_request", -1, -1, -1)],
    )
    same(lb, ak)
    assert ak["fetch_mid_batch"]["batches"][0].base_offset == 0  # the whole batch
    assert len(ak["fetch_from_start"]["batches"]) == 2


def test_produce_and_fetch_errors_match(peers: tuple[Peer, Peer]) -> None:
    def scenario(p: Peer) -> Any:
        create_topic(p, "errs")
        good = batch([b"x"], 1000)
        corrupt = bytearray(good)
        corrupt[-1] ^= 0xFF  # inside the CRC's span
        return {
            "unknown_topic": produce(p, "no-such-topic", good),
            "unknown_partition": produce(p, "errs", good, partition=7),
            "unknown_topic_acks1": produce(p, "no-such-topic", good, acks=1),
            "corrupt": produce(p, "errs", Records(bytes(corrupt))),
            "fetch_unknown_partition": fetch(p, "errs", 0, partition=7),
            "list_unknown_partition": list_offsets(p, "errs", -1, partition=7),
            "metadata_unknown": metadata(p, "no-such-topic"),
            "still_unknown": metadata(p, "no-such-topic"),  # not auto-created
        }

    lb, ak = both(peers, scenario)
    same(lb, ak)


def test_idempotent_sequences_and_epochs_match(peers: tuple[Peer, Peer]) -> None:
    """Raw batches of an idempotent producer (InitProducerId, then sequences by hand): in
    order, a retried batch (a duplicate answers its first offset), a gap, an older epoch, a
    producer id the broker never gave out."""

    def scenario(p: Peer) -> Any:
        create_topic(p, "idem")
        ask_id = build(
            InitProducerIdRequest,
            transactional_id=None,
            transaction_timeout=datetime.timedelta(seconds=60),
            producer_id=-1,
            producer_epoch=-1,
        )
        # A new Kafka answers COORDINATOR_LOAD_IN_PROGRESS until its producer id block
        # arrives; every client retries it.
        raw_init = wait_for(
            f"{p.name}: a producer id",
            lambda: (r := p.call(ask_id)).error_code == 0 and r,
            30,
        )
        init = plain(raw_init, NOT_COMPARED | {"producer_id"})
        pid, epoch = int(raw_init.producer_id), int(raw_init.producer_epoch)

        def send(seq: int, n: int = 3, e: int = epoch, who: int = pid) -> Any:
            values = [b"s%d" % (seq + i) for i in range(n)]
            return produce(p, "idem", batch(values, 1000 + seq, producer=(who, e, seq)))

        out = {
            "init": init,
            "first": send(0),
            "next": send(3),
            "retried": send(3),
            "older_retried": send(0),
            "gap": send(9),
            "in_order_again": send(6),
            "unknown_producer_at_0": send(0, who=pid + 1000),
            "unknown_producer_at_5": send(5, who=pid + 2000),
        }
        # Asked again with its id and epoch, an idempotent (non-transactional) producer is
        # given a new id at epoch 0 by both.
        again = p.call(
            build(
                InitProducerIdRequest,
                transactional_id=None,
                transaction_timeout=datetime.timedelta(seconds=60),
                producer_id=pid,
                producer_epoch=epoch,
            )
        )
        out["init_again"] = (
            plain(again.error_code),
            int(again.producer_id) == pid,
            int(again.producer_epoch),
        )
        # KIP-360: an idempotent producer may bump its own epoch (sequence back to 0); the
        # old epoch is fenced from then on.
        out["bumped_by_client"] = send(0, e=epoch + 1)
        out["old_epoch"] = send(9, e=epoch)
        out["end"] = list_offsets(p, "idem", -1)
        return out

    lb, ak = both(peers, scenario)
    # A retried batch: Kafka answers a log_append_time taken from its record of the first
    # copy (BatchMetadata.timestamp: one of that batch's timestamps) even on a CreateTime
    # topic; Longboat answers -1 (null) as for every CreateTime append (docs).
    for key, first_ts in (("retried", 1003), ("older_retried", 1000)):
        assert lb[key].pop("log_append_time") is None
        assert first_ts <= ak[key].pop("log_append_time") <= first_ts + 2
    same(lb, ak)
    assert ak["retried"]["base_offset"] == 3
    assert ak["gap"]["error_code"] == "out_of_order_sequence_number"
    assert ak["old_epoch"]["error_code"] == "invalid_producer_epoch"


def test_compressed_batches_match(peers: tuple[Peer, Peer]) -> None:
    """A batch in each of Kafka's codecs (kafka-python's encoders) read back; a topic whose
    ``compression.type`` names a codec, written uncompressed."""

    def scenario(p: Peer) -> Any:
        create_topic(p, "codecs")
        create_topic(p, "gz", configs={"compression.type": "gzip"})
        out: dict[str, Any] = {}
        for codec in (1, 2, 3, 4):
            values = [b"c%d-%d" % (codec, i) * 20 for i in range(4)]
            out[f"produce_{codec}"] = produce(p, "codecs", batch(values, 1000, codec=codec))
        out["fetch"] = fetch(p, "codecs", 0)
        out["produce_to_gzip_topic"] = produce(p, "gz", batch([b"plain" * 20] * 3, 1000))
        out["fetch_gzip_topic"] = fetch(p, "gz", 0)
        return out

    lb, ak = both(peers, scenario)
    # A topic's compression.type other than "producer": Kafka's leader recompresses every
    # batch into that codec; Longboat keeps the batch as the producer sent it (it stores a
    # client's batch with no re-encoding: "How the bytes are stored"). Same records.
    lb_gz, ak_gz = lb.pop("fetch_gzip_topic"), ak.pop("fetch_gzip_topic")
    assert [b.codec for b in lb_gz["batches"]] == [0]
    assert [b.codec for b in ak_gz["batches"]] == [1]
    same(
        {**lb_gz, "batches": [b.values for b in lb_gz["batches"]]},
        {**ak_gz, "batches": [b.values for b in ak_gz["batches"]]},
    )
    same(lb, ak)
    assert [b.codec for b in ak["fetch"]["batches"]] == [1, 2, 3, 4]


def test_record_too_large_and_acks_0_failure_match(peers: tuple[Peer, Peer]) -> None:
    """A batch over the topic's max.message.bytes; an acks=0 produce that fails (Kafka has
    no answer to give it, so it closes the connection) and one that succeeds (the
    connection goes on)."""

    def scenario(p: Peer) -> Any:
        create_topic(p, "small", configs={"max.message.bytes": "200"})
        big = batch([b"z" * 400], 1000)
        ok = batch([b"z"], 1000)
        out: dict[str, Any] = {
            "too_large": produce(p, "small", big),
            "fits": produce(p, "small", ok),
        }
        probe = build(
            MetadataRequest,
            topics=[],
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        for name, topic, records in (
            ("acks0_ok", "small", ok),
            ("acks0_unknown_topic", "no-such-topic", ok),
            ("acks0_too_large", "small", big),
        ):
            with p.connect() as sock:
                send_only(
                    sock,
                    build(
                        ProduceRequest,
                        transactional_id=None,
                        acks=0,
                        timeout=TIMEOUT,
                        topic_data=[
                            {"name": topic, "partition_data": [{"index": 0, "records": records}]}
                        ],
                    ),
                )
                out[name] = answered(sock, probe)
        wait_for(f"{p.name}: acks=0 record appended", partial(at_end, p, "small", 2), 20)
        return out

    lb, ak = both(peers, scenario)
    same(lb, ak)
    assert ak["acks0_ok"] and not ak["acks0_unknown_topic"]


def test_delete_records_then_list_offsets_earliest_match(peers: tuple[Peer, Peer]) -> None:
    def scenario(p: Peer) -> Any:
        create_topic(p, "trim")
        produce(p, "trim", batch([b"r%d" % i for i in range(10)], 1000))

        def delete(offset: int) -> Any:
            return p.ask(
                build(
                    DeleteRecordsRequest,
                    timeout=TIMEOUT,
                    topics=[
                        {"name": "trim", "partitions": [{"partition_index": 0, "offset": offset}]}
                    ],
                )
            )["topics"][0]["partitions"][0]

        return {
            "delete_to_3": delete(3),
            "earliest": [list_offsets(p, "trim", -2), list_offsets(p, "trim", -1)],
            "fetch_deleted": fetch(p, "trim", 1),
            "delete_past_end": delete(99),
            "delete_to_high_watermark": delete(-1),
            "earliest_after": [list_offsets(p, "trim", -2), list_offsets(p, "trim", -1)],
        }

    lb, ak = both(peers, scenario)
    same(lb, ak)


def test_topic_admin_errors_match(peers: tuple[Peer, Peer]) -> None:
    """CreateTopics (existing, 0 partitions, replication factors 0 and above the broker count,
    a bad name, an unknown config, a bad config value, validate-only), DeleteTopics of an
    unknown topic, CreatePartitions (grow, shrink, same count, unknown topic)."""

    def topic(name: str, partitions: int = 1, rf: int = 1, **configs: str) -> dict[str, Any]:
        return {
            "name": name,
            "num_partitions": partitions,
            "replication_factor": rf,
            "configs": [{"name": k.replace("_", "."), "value": v} for k, v in configs.items()],
        }

    def scenario(p: Peer) -> Any:
        create_topic(p, "admin")
        created = p.ask(
            build(
                CreateTopicsRequest,
                timeout=TIMEOUT,
                validate_only=False,
                topics=[
                    topic("admin"),
                    topic("zero-partitions", partitions=0),
                    topic("zero-rf", rf=0),
                    topic("rf-above-brokers", rf=4),
                    topic("bad/name"),
                    topic("unknown-config", no_such_config="1"),
                    topic("bad-value", retention_ms="soon"),
                    topic("defaults", partitions=-1, rf=-1),
                ],
            ),
            # The created topic's full config list (Kafka's and Longboat's sets differ: docs).
            drop={"configs"},
        )["topics"]
        validated = p.ask(
            build(
                CreateTopicsRequest,
                timeout=TIMEOUT,
                validate_only=True,
                topics=[topic("only-validated", partitions=2)],
            ),
            drop={"configs"},
        )["topics"]
        deleted = p.ask(build(DeleteTopicsRequest, timeout=TIMEOUT, topic_names=["no-such-topic"]))[
            "responses"
        ]

        def grow(name: str, count: int) -> Any:
            return p.ask(
                build(
                    CreatePartitionsRequest,
                    timeout=TIMEOUT,
                    validate_only=False,
                    topics=[{"name": name, "count": count, "assignments": None}],
                )
            )["results"]

        partitions = [grow("admin", 3), grow("admin", 2), grow("admin", 3), grow("nope", 2)]
        wait_for(
            f"{p.name}: admin has 3 partitions",
            lambda: len(metadata(p, "admin")[0]["partitions"]) == 3,
            20,
        )
        return {
            "create": sorted(created, key=lambda t: t["name"]),
            "validate_only": validated,
            "validated_not_created": metadata(p, "only-validated"),
            "delete_unknown": deleted,
            "create_partitions": partitions,
            "metadata": metadata(p, "admin"),
            "defaults": [
                (len(t["partitions"]), [len(x["replica_nodes"]) for x in t["partitions"]])
                for t in metadata_raw(p, "defaults")
            ],
        }

    lb, ak = both(peers, scenario)
    same(lb, ak)


def test_configs_describe_and_alter_match(peers: tuple[Peer, Peer]) -> None:
    keys = ["retention.ms", "cleanup.policy", "min.insync.replicas", "max.message.bytes"]

    def scenario(p: Peer) -> Any:
        create_topic(p, "conf", configs={"cleanup.policy": "compact"})

        def describe(name: str) -> Any:
            results = p.ask(
                build(
                    DescribeConfigsRequest,
                    include_synonyms=False,
                    include_documentation=False,
                    resources=[
                        {
                            "resource_type": TOPIC_RESOURCE,
                            "resource_name": name,
                            "configuration_keys": keys,
                        }
                    ],
                )
            )["results"]
            for r in results:
                # The order of the configs is not part of the answer (Kafka's is its own).
                r["configs"] = sorted(r["configs"], key=lambda c: c["name"])
                for c in r["configs"]:
                    if c["name"] == "min.insync.replicas" and c["config_source"] == 3:
                        # Allowed: Kafka 4 writes a cluster-wide min.insync.replicas when it
                        # is formatted (KIP-966's ELR), so its default is a dynamic cluster
                        # default (3); Longboat's is the built-in default (5).
                        c["config_source"] = 5
            return results

        def alter(*configs: tuple[str, int, str | None]) -> Any:
            return p.ask(
                build(
                    IncrementalAlterConfigsRequest,
                    validate_only=False,
                    resources=[
                        {
                            "resource_type": TOPIC_RESOURCE,
                            "resource_name": "conf",
                            "configs": [
                                {"name": n, "config_operation": op, "value": v}
                                for n, op, v in configs
                            ],
                        }
                    ],
                )
            )["responses"]

        return {
            "before": describe("conf"),
            "set": alter(("retention.ms", 0, "12345")),
            "unknown_name": alter(("no.such.config", 0, "1")),
            "bad_value": alter(("retention.ms", 0, "soon")),
            "after": describe("conf"),
            "delete": alter(("cleanup.policy", 1, None)),
            "after_delete": describe("conf"),
            "unknown_topic": describe("no-such-topic"),
        }

    lb, ak = both(peers, scenario)
    same(lb, ak)


def test_min_insync_replicas_above_the_replication_factor(peers: tuple[Peer, Peer]) -> None:
    """RF 1 with min.insync.replicas=2: whether the topic is created, and what acks=all and
    acks=1 produce answer."""

    def scenario(p: Peer) -> Any:
        created = p.ask(
            build(
                CreateTopicsRequest,
                timeout=TIMEOUT,
                validate_only=False,
                topics=[
                    {
                        "name": "minisr",
                        "num_partitions": 1,
                        "replication_factor": 1,
                        "configs": [{"name": "min.insync.replicas", "value": "2"}],
                    }
                ],
            ),
            drop={"configs"},
        )["topics"]
        out: dict[str, Any] = {"create": created}
        if created[0]["error_code"] == "none":
            wait_for(
                f"{p.name}: minisr led",
                lambda: metadata(p, "minisr")[0]["error_code"] == "none",
                20,
            )
            out["acks_all"] = produce(p, "minisr", batch([b"x"], 1000))
            out["acks_1"] = produce(p, "minisr", batch([b"y"], 1001), acks=1)
        return out

    lb, ak = both(peers, scenario)
    same(lb, ak)


def test_consumer_group_shapes_match(peers: tuple[Peer, Peer]) -> None:
    """Two confluent-kafka members of one group (range assignor) over 4 partitions: the
    assignment's shape, commits with metadata read back, DescribeGroups while stable and
    after both leave, ListGroups."""

    def scenario(p: Peer) -> Any:
        create_topic(p, "grp", partitions=4)
        members = [
            Consumer(
                {
                    "bootstrap.servers": p.bootstrap,
                    "group.id": "g1",
                    "client.id": "oracle",
                    "partition.assignment.strategy": "range",
                    "enable.auto.commit": False,
                    "session.timeout.ms": 10000,
                    "heartbeat.interval.ms": 500,
                }
            )
            for _ in range(2)
        ]
        for m in members:
            m.subscribe(["grp"])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for m in members:
                m.poll(0.2)
            if all(len(m.assignment()) == 2 for m in members):
                break
        assignment = sorted(sorted(tp.partition for tp in m.assignment()) for m in members)
        for m in members:
            m.commit(
                offsets=[
                    TopicPartition(
                        "grp", tp.partition, 5 + tp.partition, metadata=f"m{tp.partition}"
                    )
                    for tp in m.assignment()
                ],
                asynchronous=False,
            )
        committed = sorted(
            (tp.partition, tp.offset, tp.metadata)
            for tp in members[0].committed([TopicPartition("grp", i) for i in range(4)], timeout=15)
        )

        def describe() -> Any:
            [g] = p.ask(
                build(DescribeGroupsRequest, groups=["g1"], include_authorized_operations=False),
                # The members' metadata and assignments are bytes the client wrote (checked
                # through ``assignment`` above); their ids and hosts differ.
                drop={"member_metadata", "member_assignment", "group_instance_id"},
            )["groups"]
            g["members"] = len(g["members"])
            return g

        stable = describe()
        listed = [
            g
            for g in p.ask(build(ListGroupsRequest, states_filter=[]))["groups"]
            if g["group_id"] == "g1"
        ]
        for m in members:
            m.close()
        empty = describe()
        fetched = p.ask(
            build(
                OffsetFetchRequest,
                group_id="g1",
                require_stable=False,
                topics=[{"name": "grp", "partition_indexes": [0, 1, 2, 3]}],
            )
        )
        unknown = p.ask(
            build(DescribeGroupsRequest, groups=["no-such"], include_authorized_operations=False)
        )["groups"]
        return {
            "assignment": assignment,
            "committed": committed,
            "stable": stable,
            "listed": listed,
            "empty": empty,
            "offset_fetch": fetched,
            "unknown_group": unknown,
        }

    lb, ak = both(peers, scenario)
    same(lb, ak)
    assert ak["assignment"] == [[0, 1], [2, 3]]
