"""Kafka's admin APIs and Apache Kafka's own tools against a real Longboat cluster.

One cluster of processes (1 controller, 3 brokers, each with ``kafka_listen``) for the
module. The admin APIs are driven by confluent-kafka's AdminClient (librdkafka) and, where no
client exposes the call, by raw kio requests; then Apache Kafka 4.4's tools from Maven Central
(fetched by ``scripts/setup-kafka-java.sh``, run as ``java -cp <dir>/* <main class>``):
``kafka-topics``, ``kafka-console-producer``/``-consumer``, ``kafka-consumer-groups``,
``kafka-configs``, and ``VerifiableProducer``/``VerifiableConsumer``, the clients Kafka's own
system tests use. A JVM start costs seconds on this machine, so each test runs few of them.
"""

from __future__ import annotations

import asyncio
import io
import json
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition  # noqa: E402
from confluent_kafka import Producer as CKProducer  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)
from kafka import TopicPartition as KPTopicPartition  # noqa: E402
from kio.schema.errors import ErrorCode  # noqa: E402

from api.node.localcluster import Brokers, running_cluster, wait_for  # noqa: E402

# In the extended tier (docs/testing.md): minutes of JVM or Spark time the fast suite cannot afford.
pytestmark = [pytest.mark.slow, pytest.mark.extended]

REPO = Path(__file__).resolve().parents[3]
JAVA_TIMEOUT_S = 120


class Cluster:
    def __init__(self, brokers: Brokers) -> None:
        self.brokers = brokers
        self._admin: AdminClient | None = None

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.brokers.kafka_ports.values())

    def admin(self) -> AdminClient:
        """One for the module: librdkafka fails a future whose client was collected."""
        if self._admin is None:
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap})
        return self._admin

    def create_topic(self, name: str, partitions: int = 3, rf: int = 3) -> None:
        self.admin().create_topics([NewTopic(name, partitions, rf)])[name].result(timeout=30)
        wait_for(f"{name} has leaders", lambda: self.leaders(name, partitions), 20)

    def leaders(self, name: str, partitions: int) -> bool:
        t = self.admin().list_topics(name, timeout=5).topics.get(name)
        return (
            t is not None
            and t.error is None
            and len(t.partitions) == partitions
            and all(p.leader >= 0 for p in t.partitions.values())
        )

    def leader_port(self, topic: str, partition: int) -> tuple[int, int]:
        """(Kafka port, leader epoch) of the partition's leader, from Metadata v12."""
        from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

        raw = Raw(next(iter(self.brokers.kafka_ports.values())))
        try:
            md = raw.call(
                3,
                12,
                MetadataRequest(
                    topics=(MetadataRequestTopic(name=topic, topic_id=None),),
                    allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False,
                ),
            )
        finally:
            raw.close()
        p = next(p for p in md.topics[0].partitions if int(p.partition_index) == partition)
        return self.brokers.kafka_ports[int(p.leader_id)], int(p.leader_epoch)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root: Path = tmp_path_factory.mktemp("kafka-tools")
    with running_cluster(root, controllers=1, brokers=3, kafka=True) as (_q, brokers):
        yield Cluster(brokers)


class Raw:
    """One blocking connection speaking kio's request classes (for calls no client exposes)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=15)
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def _exactly(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            assert chunk, "the broker closed the connection"
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
        frame = head + buf.getvalue()
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        resp = self._exactly(struct.unpack(">i", self._exactly(4))[0])
        assert struct.unpack(">i", resp[:4])[0] == self.correlation
        off = 4 + (1 if api_key != 18 and is_flexible(api_key, version) else 0)
        return entity_reader(load_response_schema(api_key, version))(resp, off)[0]


def produce(cluster: Cluster, topic: str, n: int, partition: int | None = None) -> None:
    p = CKProducer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True})
    for i in range(n):
        if partition is None:
            p.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode())
        else:
            p.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=partition)
    assert p.flush(30) == 0


def group_consumer(cluster: Cluster, group: str, topic: str, n: int) -> Consumer:
    """A subscribed consumer that has read ``n`` records and committed them."""
    c = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 40
    while got < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got += 1
    assert got == n
    c.commit(asynchronous=False)
    return c


# ------------------------------------------------------------------------ admin APIs


def test_api_versions_advertises_the_admin_apis(cluster: Cluster) -> None:
    from kio.schema.api_versions.v3.request import ApiVersionsRequest

    raw = Raw(next(iter(cluster.brokers.kafka_ports.values())))
    try:
        ans = raw.call(
            18, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1")
        )
    finally:
        raw.close()
    keys = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in ans.api_keys}
    for key in (15, 16, 21, 23, 32, 33, 37, 42, 44, 47, 60):
        assert key in keys, key
    assert 34 not in keys  # AlterReplicaLogDirs: not served here, so not advertised


def test_describe_cluster_names_every_broker(cluster: Cluster) -> None:
    d = cluster.admin().describe_cluster(request_timeout=10).result(timeout=15)
    assert sorted(n.port for n in d.nodes) == sorted(cluster.brokers.kafka_ports.values())
    assert d.cluster_id
    assert d.controller is not None and d.controller.id in cluster.brokers.kafka_ports


def test_create_partitions_grows_a_topic_and_refuses_shrinking(cluster: Cluster) -> None:
    cluster.create_topic("grow", partitions=2)
    admin = cluster.admin()
    admin.create_partitions([NewPartitions("grow", 5)])["grow"].result(timeout=30)
    wait_for("5 partitions with leaders", lambda: cluster.leaders("grow", 5), 20)
    produce(cluster, "grow", 1, partition=4)
    with pytest.raises(confluent_kafka.KafkaException) as e:
        admin.create_partitions([NewPartitions("grow", 3)])["grow"].result(timeout=30)
    assert e.value.args[0].code() == confluent_kafka.KafkaError.INVALID_PARTITIONS
    with pytest.raises(confluent_kafka.KafkaException) as e:
        admin.create_partitions([NewPartitions("no-such-topic", 3)])["no-such-topic"].result(30)
    assert e.value.args[0].code() == confluent_kafka.KafkaError.UNKNOWN_TOPIC_OR_PART


def _topic_configs(admin: AdminClient, topic: str) -> dict[str, Any]:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return dict(admin.describe_configs([res])[res].result(timeout=15))


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")  # it is the API tested
def test_configs_describe_incremental_and_legacy_alter(cluster: Cluster) -> None:
    cluster.create_topic("conf", partitions=1)
    admin = cluster.admin()
    before = _topic_configs(admin, "conf")
    assert before["retention.ms"].value == "604800000"
    assert before["retention.ms"].source == confluent_kafka.admin.ConfigSource.DEFAULT_CONFIG.value

    res = ConfigResource(
        ConfigResource.Type.TOPIC,
        "conf",
        incremental_configs=[
            ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry(
                "cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND
            ),
        ],
    )
    admin.incremental_alter_configs([res])[res].result(timeout=30)
    after = _topic_configs(admin, "conf")
    assert after["retention.ms"].value == "3600000"
    assert (
        after["retention.ms"].source
        == confluent_kafka.admin.ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    )
    assert after["cleanup.policy"].value == "delete,compact"

    res = ConfigResource(
        ConfigResource.Type.TOPIC,
        "conf",
        incremental_configs=[
            ConfigEntry(
                "cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT
            ),
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ],
    )
    admin.incremental_alter_configs([res])[res].result(timeout=30)
    after = _topic_configs(admin, "conf")
    assert after["cleanup.policy"].value == "compact"
    assert after["retention.ms"].value == "604800000"

    # A bad value and APPEND on a config that is not a list change nothing.
    for entry, code in [
        (
            ConfigEntry("retention.ms", "banana", incremental_operation=AlterConfigOpType.SET),
            confluent_kafka.KafkaError.INVALID_CONFIG,
        ),
        (
            ConfigEntry("retention.ms", "5", incremental_operation=AlterConfigOpType.APPEND),
            confluent_kafka.KafkaError.INVALID_CONFIG,
        ),
    ]:
        bad = ConfigResource(ConfigResource.Type.TOPIC, "conf", incremental_configs=[entry])
        with pytest.raises(confluent_kafka.KafkaException) as e:
            admin.incremental_alter_configs([bad])[bad].result(timeout=30)
        assert e.value.args[0].code() == code
    assert _topic_configs(admin, "conf")["retention.ms"].value == "604800000"

    # The legacy AlterConfigs replaces the whole set of overrides.
    legacy = ConfigResource(ConfigResource.Type.TOPIC, "conf", set_config={"segment.ms": "60000"})
    admin.alter_configs([legacy])[legacy].result(timeout=30)
    after = _topic_configs(admin, "conf")
    assert after["segment.ms"].value == "60000"
    assert after["cleanup.policy"].value == "delete"  # the override is gone

    missing = ConfigResource(ConfigResource.Type.TOPIC, "no-such-topic")
    with pytest.raises(confluent_kafka.KafkaException) as e:
        admin.describe_configs([missing])[missing].result(timeout=15)
    assert e.value.args[0].code() == confluent_kafka.KafkaError.UNKNOWN_TOPIC_OR_PART


def test_groups_list_describe_delete_and_offset_delete(cluster: Cluster) -> None:
    cluster.create_topic("grp", partitions=2)
    cluster.create_topic("grp-other", partitions=1)
    produce(cluster, "grp", 6)
    admin = cluster.admin()
    kp_admin = kafka.KafkaAdminClient(bootstrap_servers=cluster.bootstrap.split(","))
    c = group_consumer(cluster, "readers", "grp", 6)
    try:
        d = admin.describe_consumer_groups(["readers"])["readers"].result(timeout=15)
        assert d.state == confluent_kafka.ConsumerGroupState.STABLE
        assert len(d.members) == 1
        assigned = {(tp.topic, tp.partition) for tp in d.members[0].assignment.topic_partitions}
        assert assigned == {("grp", 0), ("grp", 1)}
        listed = admin.list_consumer_groups().result(timeout=15)
        assert "readers" in {g.group_id for g in listed.valid}

        # Both refused while a member reads the topic; nothing changes.
        with pytest.raises(confluent_kafka.KafkaException) as e:
            admin.delete_consumer_groups(["readers"])["readers"].result(timeout=15)
        assert e.value.args[0].code() == confluent_kafka.KafkaError.NON_EMPTY_GROUP
        # OffsetDelete (no librdkafka binding: kafka-python's admin client sends it): refused
        # per partition for the topic the member reads; another topic's offset goes.
        c.commit(offsets=[TopicPartition("grp-other", 0, 3)], asynchronous=False)
        answer = kp_admin.delete_group_offsets(
            "readers", [KPTopicPartition("grp", 0), KPTopicPartition("grp-other", 0)]
        )
        assert answer == {
            KPTopicPartition("grp", 0): kafka.errors.GroupSubscribedToTopicError,
            KPTopicPartition("grp-other", 0): kafka.errors.NoError,
        }
        other = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions("readers", [TopicPartition("grp-other", 0)])]
        )["readers"].result(timeout=15)
        assert other.topic_partitions[0].offset < 0
    finally:
        c.close()

    d = admin.describe_consumer_groups(["readers"])["readers"].result(timeout=15)
    assert d.state == confluent_kafka.ConsumerGroupState.EMPTY
    answer = kp_admin.delete_group_offsets("readers", [KPTopicPartition("grp", 0)])
    assert answer == {KPTopicPartition("grp", 0): kafka.errors.NoError}
    kp_admin.close()
    left = admin.list_consumer_group_offsets(
        [
            ConsumerGroupTopicPartitions(
                "readers", [TopicPartition("grp", 0), TopicPartition("grp", 1)]
            )
        ]
    )["readers"].result(timeout=15)
    offsets = {tp.partition: tp.offset for tp in left.topic_partitions}
    assert offsets[0] < 0 and offsets[1] >= 0  # only partition 0's offset went

    admin.delete_consumer_groups(["readers"])["readers"].result(timeout=15)
    with pytest.raises(confluent_kafka.KafkaException) as e:
        admin.delete_consumer_groups(["readers"])["readers"].result(timeout=15)
    assert e.value.args[0].code() == confluent_kafka.KafkaError.GROUP_ID_NOT_FOUND


def test_offset_for_leader_epoch_answers_the_epochs_end(cluster: Cluster) -> None:
    from kio.schema.offset_for_leader_epoch.v4.request import (
        OffsetForLeaderEpochRequest,
        OffsetForLeaderPartition,
        OffsetForLeaderTopic,
    )
    from kio.schema.types import BrokerId, TopicName
    from kio.static.primitive import i32

    cluster.create_topic("epochs", partitions=1)
    produce(cluster, "epochs", 5, partition=0)
    port, epoch = cluster.leader_port("epochs", 0)

    def ask(current: int, wanted: int) -> Any:
        raw = Raw(port)
        try:
            ans = raw.call(
                23,
                4,
                OffsetForLeaderEpochRequest(
                    replica_id=BrokerId(-1),
                    topics=(
                        OffsetForLeaderTopic(
                            topic=TopicName("epochs"),
                            partitions=(
                                OffsetForLeaderPartition(
                                    partition=i32(0),
                                    current_leader_epoch=i32(current),
                                    leader_epoch=i32(wanted),
                                ),
                            ),
                        ),
                    ),
                ),
            )
        finally:
            raw.close()
        return ans.topics[0].partitions[0]

    now = ask(epoch, epoch)
    assert now.error_code == ErrorCode.none
    assert (int(now.leader_epoch), int(now.end_offset)) == (epoch, 5)
    assert ask(epoch + 1, epoch).error_code == ErrorCode.unknown_leader_epoch
    if epoch > 0:
        assert ask(epoch - 1, epoch).error_code == ErrorCode.fenced_leader_epoch


# ------------------------------------------------------------------------ Kafka's tools


@pytest.fixture(scope="module")
def kafka_java() -> Path:
    """The directory of Kafka 4.4's jars (``scripts/setup-kafka-java.sh`` fetches them once)."""
    # The setup script installs what is missing (scripts/test.sh runs it first) or fails
    # saying what: a missing tool fails the test, never skips it
    out = subprocess.run(
        [str(REPO / "scripts" / "setup-kafka-java.sh")],
        check=True,
        timeout=900,
        capture_output=True,
        text=True,
    )
    return Path(out.stdout.strip().splitlines()[-1])


def java(
    jars: Path, main: str, *args: str, stdin: str | None = None, timeout_s: float = JAVA_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    """One run of a Kafka tool (a bounded heap; C1 only, which starts these short runs
    faster)."""
    return subprocess.run(
        [
            "java",
            "-Xmx256m",
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            "-cp",
            f"{jars}/*",
            main,
            *args,
        ],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def ok(p: subprocess.CompletedProcess[str]) -> str:
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Error while executing" not in p.stdout + p.stderr, p.stdout + p.stderr
    return p.stdout


TOPICS = "org.apache.kafka.tools.TopicCommand"
GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
CONFIGS = "org.apache.kafka.tools.ConfigCommand"


def test_kafka_topics_create_describe_alter_list_delete(cluster: Cluster, kafka_java: Path) -> None:
    b = ["--bootstrap-server", cluster.bootstrap]
    out = ok(
        java(
            kafka_java,
            TOPICS,
            *b,
            "--create",
            "--topic",
            "jt",
            "--partitions",
            "2",
            "--replication-factor",
            "3",
            "--config",
            "retention.ms=3600000",
        )
    )
    assert "Created topic jt." in out
    ok(java(kafka_java, TOPICS, *b, "--alter", "--topic", "jt", "--partitions", "4"))
    out = ok(java(kafka_java, TOPICS, *b, "--describe", "--topic", "jt"))
    assert "PartitionCount: 4" in out and "ReplicationFactor: 3" in out, out
    assert "Configs: retention.ms=3600000" in out, out
    assert out.count("Topic: jt\tPartition:") == 4, out
    again = java(kafka_java, TOPICS, *b, "--create", "--topic", "jt", "--partitions", "1")
    assert "already exists" in again.stdout + again.stderr
    ok(java(kafka_java, TOPICS, *b, "--delete", "--topic", "jt"))
    wait_for("jt is gone", lambda: "jt" not in cluster.admin().list_topics(timeout=5).topics, 20)
    out = ok(java(kafka_java, TOPICS, *b, "--list"))
    assert "jt" not in out.split()


def test_kafka_log_dirs_describes_each_brokers_replicas(cluster: Cluster, kafka_java: Path) -> None:
    cluster.create_topic("dirs", partitions=2)
    produce(cluster, "dirs", 50, partition=0)  # acks=all: every in-sync replica has them
    brokers = _log_dirs(kafka_java, cluster)
    assert sorted(b["broker"] for b in brokers) == sorted(cluster.brokers.kafka_ports)
    for b in brokers:
        assert b["error"] is None
        parts = {p["partition"]: p for p in b["partitions"]}
        assert set(parts) == {"dirs-0", "dirs-1"}  # RF 3 on 3 brokers: every broker has both
        assert parts["dirs-0"]["size"] > 0 and parts["dirs-1"]["size"] == 0
        assert parts["dirs-0"]["offsetLag"] >= 0


def _log_dirs(kafka_java: Path, cluster: Cluster) -> list[dict[str, Any]]:
    """``kafka-log-dirs --describe`` for topic ``dirs``: per broker, its one log dir's
    partitions (its JSON, flattened)."""
    out = ok(
        java(
            kafka_java,
            "org.apache.kafka.tools.LogDirsCommand",
            "--bootstrap-server",
            cluster.bootstrap,
            "--describe",
            "--topic-list",
            "dirs",
        )
    )
    doc = json.loads(next(ln for ln in out.splitlines() if ln.startswith("{")))
    return [
        {
            "broker": b["broker"],
            "error": b["logDirs"][0]["error"],
            "partitions": b["logDirs"][0]["partitions"],
        }
        for b in doc["brokers"]
    ]


def test_console_producer_and_consumer_keep_keys_and_headers(
    cluster: Cluster, kafka_java: Path
) -> None:
    cluster.create_topic("console", partitions=1)
    b = ["--bootstrap-server", cluster.bootstrap]
    lines = "origin:java,n:1\tk1|v1\norigin:java,n:2\tk2|v2\nn:3\tk1|v3\n"
    ok(
        java(
            kafka_java,
            "org.apache.kafka.tools.ConsoleProducer",
            *b,
            "--topic",
            "console",
            "--reader-property",
            "parse.key=true",
            "--reader-property",
            "key.separator=|",
            "--reader-property",
            "parse.headers=true",
            "--command-property",
            "acks=all",
            stdin=lines,
        )
    )
    out = ok(
        java(
            kafka_java,
            "org.apache.kafka.tools.consumer.ConsoleConsumer",
            *b,
            "--topic",
            "console",
            "--from-beginning",
            "--max-messages",
            "3",
            "--group",
            "console-readers",
            "--timeout-ms",
            "30000",
            "--formatter-property",
            "print.key=true",
            "--formatter-property",
            "print.headers=true",
            "--formatter-property",
            "print.offset=true",
        )
    )
    assert out.splitlines()[:3] == [
        "Offset:0\torigin:java,n:1\tk1\tv1",
        "Offset:1\torigin:java,n:2\tk2\tv2",
        "Offset:2\tn:3\tk1\tv3",
    ], out
    # Written by Kafka's Java producer, read by librdkafka too.
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "x"})
    c.assign([TopicPartition("console", 0, 0)])
    m = None
    deadline = time.monotonic() + 20
    while m is None and time.monotonic() < deadline:
        m = c.poll(0.5)
    c.close()
    assert m is not None and m.error() is None
    assert (m.key(), m.value(), m.headers()) == (b"k1", b"v1", [("origin", b"java"), ("n", b"1")])


def test_kafka_consumer_groups_describe_list_reset_delete(
    cluster: Cluster, kafka_java: Path
) -> None:
    cluster.create_topic("cg", partitions=2)
    produce(cluster, "cg", 10)
    group_consumer(cluster, "cg-readers", "cg", 10).close()
    b = ["--bootstrap-server", cluster.bootstrap]
    out = ok(java(kafka_java, GROUPS, *b, "--list"))
    assert "cg-readers" in out.split()
    out = ok(java(kafka_java, GROUPS, *b, "--describe", "--group", "cg-readers"))
    rows = [ln.split() for ln in out.splitlines() if ln.startswith("cg-readers ")]
    assert sorted((r[1], r[2]) for r in rows) == [("cg", "0"), ("cg", "1")], out
    assert all(r[3] == r[4] and r[5] == "0" for r in rows), out  # committed = end, no lag
    out = ok(
        java(
            kafka_java,
            GROUPS,
            *b,
            "--reset-offsets",
            "--group",
            "cg-readers",
            "--topic",
            "cg",
            "--to-earliest",
            "--execute",
        )
    )
    committed = (
        cluster.admin()
        .list_consumer_group_offsets(
            [
                ConsumerGroupTopicPartitions(
                    "cg-readers", [TopicPartition("cg", 0), TopicPartition("cg", 1)]
                )
            ]
        )["cg-readers"]
        .result(timeout=15)
    )
    assert [tp.offset for tp in committed.topic_partitions] == [0, 0]
    out = ok(java(kafka_java, GROUPS, *b, "--delete", "--group", "cg-readers"))
    assert "successful" in out, out
    listed = cluster.admin().list_consumer_groups().result(timeout=15)
    assert "cg-readers" not in {g.group_id for g in listed.valid}


def test_kafka_configs_describe_and_alter_a_topic(cluster: Cluster, kafka_java: Path) -> None:
    cluster.create_topic("kc", partitions=1)
    b = ["--bootstrap-server", cluster.bootstrap]
    entity = ["--entity-type", "topics", "--entity-name", "kc"]
    out = ok(
        java(
            kafka_java,
            CONFIGS,
            *b,
            "--alter",
            *entity,
            "--add-config",
            "retention.ms=7200000,cleanup.policy=[compact,delete]",
        )
    )
    assert "Completed updating config for topic kc." in out
    out = ok(java(kafka_java, CONFIGS, *b, "--describe", *entity))
    assert "retention.ms=7200000 sensitive=false" in out, out
    assert "cleanup.policy=compact,delete sensitive=false" in out, out
    bad = java(kafka_java, CONFIGS, *b, "--alter", *entity, "--add-config", "retention.ms=x")
    assert bad.returncode != 0 and "InvalidConfigurationException" in bad.stdout + bad.stderr
    assert _topic_configs(cluster.admin(), "kc")["retention.ms"].value == "7200000"


def test_verifiable_producer_and_consumer_lose_nothing(
    cluster: Cluster, kafka_java: Path, tmp_path: Path
) -> None:
    """acks=all, idempotent: every acked record is consumed by the group, once per offset."""
    cluster.create_topic("verifiable", partitions=3)
    props = tmp_path / "producer.properties"
    props.write_text("enable.idempotence=true\nretries=2147483647\nlinger.ms=5\n")
    n = 3000
    b = ["--bootstrap-server", cluster.bootstrap]
    out = ok(
        java(
            kafka_java,
            "org.apache.kafka.tools.VerifiableProducer",
            *b,
            "--topic",
            "verifiable",
            "--max-messages",
            str(n),
            "--acks",
            "-1",
            "--command-config",
            str(props),
        )
    )
    events = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
    acked = {
        (e["partition"], e["offset"]): e["value"]
        for e in events
        if e["name"] == "producer_send_success"
    }
    assert len(acked) == n
    assert not [e for e in events if e["name"] == "producer_send_error"]
    out = ok(
        java(
            kafka_java,
            "org.apache.kafka.tools.VerifiableConsumer",
            *b,
            "--topic",
            "verifiable",
            "--group-id",
            "verifiers",
            "--max-messages",
            str(n),
            "--reset-policy",
            "earliest",
            "--verbose",
        )
    )
    events = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
    consumed = {
        (e["partition"], e["offset"]): e["value"] for e in events if e["name"] == "record_data"
    }
    assert consumed == acked
    commits = [e for e in events if e["name"] == "offsets_committed"]
    assert commits and all(e["success"] for e in commits)
    last: dict[int, int] = {}
    for e in commits:
        for o in e["offsets"]:
            last[o["partition"]] = max(last.get(o["partition"], 0), o["offset"])
    ends: dict[int, int] = {}
    for p, off in acked:
        ends[p] = max(ends.get(p, 0), off + 1)
    assert last == ends


# ------------------------------------------------------------------------ aiokafka


def test_aiokafka_produce_and_group_consume_with_commit_and_resume(cluster: Cluster) -> None:
    """A third client implementation: idempotent gzip produce with keys and headers, then a
    group consumer that commits half way and a second one that resumes there."""
    aiokafka = pytest.importorskip("aiokafka")
    cluster.create_topic("aio", partitions=2)

    async def run() -> tuple[list[Any], list[Any]]:
        p = aiokafka.AIOKafkaProducer(
            bootstrap_servers=cluster.bootstrap,
            enable_idempotence=True,
            acks="all",
            compression_type="gzip",
        )
        await p.start()
        try:
            for i in range(10):
                await p.send_and_wait(
                    "aio", f"v{i}".encode(), key=b"k", headers=[("n", str(i).encode())]
                )
        finally:
            await p.stop()

        async def read(n: int, commit: bool) -> list[Any]:
            c = aiokafka.AIOKafkaConsumer(
                "aio",
                bootstrap_servers=cluster.bootstrap,
                group_id="aio-readers",
                auto_offset_reset="earliest",
                enable_auto_commit=False,
            )
            await c.start()
            out: list[Any] = []
            try:
                async with asyncio.timeout(40):
                    while len(out) < n:
                        out.append(await c.getone())
                if commit:
                    await c.commit()
            finally:
                await c.stop()
            return out

        return await read(5, True), await read(5, False)

    first, second = asyncio.run(run())
    got = first + second
    assert [m.value for m in got] == [f"v{i}".encode() for i in range(10)]
    assert [m.offset for m in got] == list(range(10))  # one key: one partition, in order
    assert all(m.key == b"k" for m in got)
    assert [dict(m.headers)["n"] for m in got] == [str(i).encode() for i in range(10)]
