"""The scrape-time collectors of ``api.http.metrics`` over fakes of what they read, the record
count of a fetch answer, and the broker configs' sensitive values and sources."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel

from api.http.broker_configs import broker_config_entries, cluster_config_entries, is_sensitive
from api.http.metrics import (
    BrokerMetrics,
    ControllerMetrics,
    GroupLagCollector,
    ReplicaCollector,
    cluster_gauges,
)
from broker.group_coordinator import GroupLagSnapshot
from broker.groups.group import PartitionLag
from broker.groups.types import GroupState, TopicPartition
from broker.replica_manager import TopicTraffic, count_records
from metalog.records import NO_LEADER
from storage.batch import encode_batch


def samples(*collectors: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    r = CollectorRegistry()
    for col in collectors:
        r.register(col)
    text = generate_latest(r).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def replica(topic: str, p: int, *, leads: bool, isr: int, under_min: bool = False) -> Any:
    reg = SimpleNamespace(replicas=(1, 2, 3), isr=(1, 2, 3)[:isr], leader=1 if leads else 2)
    leader = (
        SimpleNamespace(is_leader=True, high_watermark=40, is_under_min_isr=under_min)
        if leads
        else None
    )
    log = SimpleNamespace(log_start_offset=3, log_end_offset=41, size_bytes=1000)
    return SimpleNamespace(topic=topic, partition=p, registration=reg, leader=leader, log=log)


def manager() -> Any:
    return SimpleNamespace(
        traffic={"t": TopicTraffic(bytes_in=100, records_in=10, bytes_out=50, records_out=5)},
        replicas={
            ("a", 0): replica("t", 0, leads=True, isr=2, under_min=True),
            ("a", 1): replica("t", 1, leads=False, isr=3),
        },
    )


def test_replica_collector_shows_topic_counters_and_leader_reported_partition_gauges() -> None:
    got = samples(ReplicaCollector(manager()))
    t = (("topic", "t"),)
    assert got[("longboat_topic_bytes_in_total", t)] == 100
    assert got[("longboat_topic_records_out_total", t)] == 5
    p0 = (("partition", "0"), ("topic", "t"))
    p1 = (("partition", "1"), ("topic", "t"))
    assert got[("longboat_topic_partition_current_offset", p0)] == 40
    assert got[("longboat_topic_partition_oldest_offset", p0)] == 3
    assert got[("longboat_topic_partition_in_sync_replica", p0)] == 2
    assert got[("longboat_topic_partition_under_replicated_partition", p0)] == 1
    assert got[("longboat_topic_partition_under_min_isr", p0)] == 1
    assert got[("longboat_topic_partition_leader_is_preferred", p0)] == 1
    # A follower's replica: its own log, none of the partition's state (its leader says it).
    assert ("longboat_topic_partition_current_offset", p1) not in got
    assert got[("longboat_topic_partition_log_end_offset", p1)] == 41
    assert got[("longboat_topic_partition_is_leader", p1)] == 0
    assert got[("longboat_under_min_isr_partitions", ())] == 1


def test_metrics_per_partition_off_keeps_topic_and_broker_series_only() -> None:
    got = samples(ReplicaCollector(manager(), per_partition=False))
    assert not [k for k in got if "partition" in dict(k[1])]
    assert got[("longboat_topic_bytes_in_total", (("topic", "t"),))] == 100
    assert got[("longboat_under_min_isr_partitions", ())] == 1


def lag_collector(per_partition: bool) -> GroupLagCollector:
    snap = GroupLagSnapshot(
        "g",
        GroupState.STABLE,
        2,
        {
            TopicPartition("t", 0): PartitionLag(5, 15, 10, "m1"),
            TopicPartition("t", 1): PartitionLag(7, 10, 3, "m2"),
            TopicPartition("u", 0): PartitionLag(None, 8, None, "m2"),  # nothing committed
        },
        unknown=1,
    )

    class Coordinator:
        async def lag_snapshot(self, timeout_s: float) -> list[GroupLagSnapshot]:
            return [snap]

    col = GroupLagCollector(Coordinator(), per_partition=per_partition)  # type: ignore[arg-type]
    asyncio.run(col.refresh())
    return col


def test_group_lag_per_partition_and_summed_per_topic_after_kafka_exporter() -> None:
    got = samples(lag_collector(True))
    g = ("consumergroup", "g")
    assert got[("longboat_consumergroup_lag", (g, ("partition", "0"), ("topic", "t")))] == 10
    assert (
        got[("longboat_consumergroup_current_offset", (g, ("partition", "1"), ("topic", "t")))] == 7
    )
    assert got[("longboat_consumergroup_lag_sum", (g, ("topic", "t")))] == 13
    assert got[("longboat_consumergroup_current_offset_sum", (g, ("topic", "t")))] == 12
    assert ("longboat_consumergroup_lag_sum", (g, ("topic", "u"))) not in got
    assert got[("longboat_consumergroup_members", (g,))] == 2
    assert got[("longboat_consumergroup_lag_unknown_partitions", (g,))] == 1
    assert got[("longboat_consumergroups", ())] == 1


def test_group_lag_without_per_partition_series_keeps_the_sums() -> None:
    got = samples(lag_collector(False))
    assert not [
        k
        for k in got
        if k[0] in ("longboat_consumergroup_lag", "longboat_consumergroup_current_offset")
    ]
    assert got[("longboat_consumergroup_lag_sum", (("consumergroup", "g"), ("topic", "t")))] == 13


def fake_image(leaders: list[int], fenced: list[bool]) -> Any:
    topic = SimpleNamespace(name="t")
    regs = [
        (topic, p, SimpleNamespace(leader=lead, isr=(1,), replicas=(1, 2)))
        for p, lead in enumerate(leaders)
    ]
    return SimpleNamespace(
        topics=SimpleNamespace(partitions=lambda: iter(regs)),
        brokers=SimpleNamespace(
            brokers={i: SimpleNamespace(fenced=f) for i, f in enumerate(fenced)}
        ),
    )


def test_cluster_gauges_count_on_the_active_controller_and_zero_elsewhere() -> None:
    im = fake_image([1, NO_LEADER, 2], [False, True, False])
    rows = {(n, tuple(lb.items())): v for n, _, v, lb in cluster_gauges(lambda: im, lambda: True)()}
    assert rows[("longboat_controller_active", ())] == 1
    assert rows[("longboat_controller_offline_partitions", ())] == 1
    assert rows[("longboat_controller_under_replicated_partitions", ())] == 3
    assert rows[("longboat_controller_brokers", ())] == 2
    assert rows[("longboat_controller_fenced_brokers", ())] == 1
    assert rows[("longboat_topic_partitions", (("topic", "t"),))] == 3
    idle = {n: v for n, _, v, lb in cluster_gauges(lambda: im, lambda: False)() if not lb}
    assert set(idle.values()) == {0}


def test_brokers_and_controllers_carry_process_and_python_runtime_metrics() -> None:
    broker = asyncio.run(BrokerMetrics().scrape()).decode()
    ctl = ControllerMetrics(
        lambda: {"term": 1, "commit": 1, "applied": 1, "last_index": 1, "role": "leader"}
    )
    ctl.commit_latency.observe(0.002)
    controller = asyncio.run(ctl.scrape()).decode()
    for text in (broker, controller):
        assert "\nprocess_resident_memory_bytes " in text
        assert "\npython_info{" in text
        assert "\npython_gc_collections_total{" in text
    assert 'longboat_raft_commit_latency_seconds_bucket{le="0.0025"} 1.0' in controller


def test_count_records_reads_each_whole_batch_and_stops_at_a_torn_tail() -> None:
    a = encode_batch([(None, b"x", 0, ())] * 3)
    b = encode_batch([(None, b"y", 0, ())] * 4, base_offset=3)
    assert count_records(a + b) == 7
    assert count_records(a + b[:-1]) == 3
    assert count_records(memoryview(a)) == 3
    assert count_records(b"") == 0


class SecretConfig(BaseModel):
    node_id: int
    ssl_key_password: str | None = None
    tls_key_file: str = "/etc/key.pem"
    api_token: str | None = None
    http_keepalive_timeout_ms: int = 75_000
    roles: tuple[str, ...] = ("broker",)


def test_is_sensitive_catches_secrets_and_not_lookalikes() -> None:
    for name in ("ssl_key_password", "tls_key_file", "api_token", "sasl_jaas_config", "key"):
        assert is_sensitive(name), name
    for name in ("http_keepalive_timeout_ms", "kafka_listen", "node_id", "monkey_count"):
        assert not is_sensitive(name), name


def test_broker_configs_hide_sensitive_values_in_synonyms_too() -> None:
    cfg = SecretConfig(node_id=7, ssl_key_password="hunter2", roles=("broker", "controller"))
    by = {e["name"]: e for e in broker_config_entries(cfg)}
    pw = by["ssl_key_password"]
    assert pw["value"] is None and pw["is_sensitive"] and pw["source"] == "STATIC_BROKER_CONFIG"
    assert [s["value"] for s in pw["synonyms"]] == [None, None]
    assert "hunter2" not in repr(broker_config_entries(cfg))
    assert by["tls_key_file"]["value"] is None and by["tls_key_file"]["is_default"]
    assert by["roles"]["value"] == "broker,controller"
    assert by["node_id"]["synonyms"] == [
        {"name": "node_id", "value": "7", "source": "STATIC_BROKER_CONFIG"}
    ]
    assert by["http_keepalive_timeout_ms"]["value"] == "75000"
    cluster = {e["name"]: e for e in cluster_config_entries(SecretConfig)}
    assert "node_id" not in cluster and cluster["tls_key_file"]["value"] is None
