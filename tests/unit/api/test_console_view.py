"""api.http.console_view: throughput rings, their merge, and the overview's health counts."""

from __future__ import annotations

from typing import Any

from api.http.console_view import (
    ThroughputHistory,
    cluster_view,
    merge_throughput,
    quorum_view,
    topic_view,
    topics_view,
)
from metalog.delta import MetadataDelta
from metalog.image import MetadataImage
from metalog.records import (
    BrokerId,
    ConfigRecord,
    ConfigResourceType,
    Endpoint,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicId,
    TopicRecord,
)


def image(
    partitions: list[tuple[list[int], list[int], int]],
    fenced: tuple[int, ...] = (),
    configs: dict[str, str] | None = None,
) -> MetadataImage:
    """Brokers 1-3 (``fenced`` fenced) and topic ``t`` with ``(replicas, isr, leader)``."""
    d = MetadataDelta(MetadataImage.EMPTY)
    off = 0
    for b in (1, 2, 3):
        off += 1
        d.replay(
            RegisterBrokerRecord(
                broker_id=BrokerId(b),
                incarnation_id="x",
                fenced=b in fenced,
                endpoints=(Endpoint("http", "127.0.0.1", 8080 + b),),
            ),
            off,
        )
    off += 1
    d.replay(TopicRecord(name="t", topic_id=TopicId("tid")), off)
    for p, (replicas, isr, leader) in enumerate(partitions):
        off += 1
        d.replay(
            PartitionRecord(
                topic_id=TopicId("tid"),
                partition=p,
                replicas=tuple(BrokerId(b) for b in replicas),
                isr=tuple(BrokerId(b) for b in isr),
                leader=BrokerId(leader),
            ),
            off,
        )
    for k, v in (configs or {}).items():
        off += 1
        d.replay(
            ConfigRecord(
                resource_type=ConfigResourceType.TOPIC, resource_name="t", name=k, value=v
            ),
            off,
        )
    return d.apply()


def test_throughput_counts_growth_per_second_from_the_second_sample_on() -> None:
    h = ThroughputHistory(interval_ms=1000)
    assert not h.sample(10_000, [("t", 0, 100, 5000)])  # the first sample is a baseline
    assert h.sample(11_000, [("t", 0, 150, 7000), ("t", 1, 10, 10)])
    assert h.to_json() == [[11_000, {"t": [50.0, 2000.0]}]]  # partition 1: baseline only
    assert h.sample(13_400, [("t", 0, 170, 7000), ("t", 1, 30, 10)])
    t_ms, rates = h.to_json()[-1]
    assert t_ms == 13_000  # on a multiple of the interval, so brokers' samples line up
    assert rates["t"] == [(20 + 20) / 2, 0.0]  # two intervals since the last sample


def test_throughput_takes_one_sample_per_bucket() -> None:
    h = ThroughputHistory(interval_ms=1000)
    h.sample(1_000, [("t", 0, 0, 0)])
    assert h.sample(2_100, [("t", 0, 10, 0)])
    assert not h.sample(2_900, [("t", 0, 99, 0)])
    assert len(h.to_json()) == 1


def test_throughput_ignores_a_partition_whose_leadership_just_arrived_and_shrinking_logs() -> None:
    h = ThroughputHistory(interval_ms=1000)
    h.sample(1_000, [("t", 0, 500, 9000)])
    # Partition 1 arrives with offsets in the millions: not a burst. Partition 0's log
    # shrank (retention): no negative rate.
    h.sample(2_000, [("t", 0, 500, 1000), ("t", 1, 2_000_000, 10**9)])
    assert h.to_json()[-1][1] == {"t": [0.0, 0.0]}


def test_throughput_ring_keeps_the_latest_samples() -> None:
    h = ThroughputHistory(interval_ms=1000, samples_max=3)
    for i in range(10):
        h.sample(i * 1000, [("t", 0, i * 10, 0)])
    assert [s[0] for s in h.to_json()] == [7000, 8000, 9000]


def test_merge_adds_brokers_rates_bucket_by_bucket() -> None:
    a = [[1000, {"t": [1.0, 10.0]}], [2000, {"t": [2.0, 20.0], "u": [5.0, 50.0]}]]
    b = [[2000, {"t": [3.0, 30.0]}], [3000, {"t": [4.0, 40.0]}]]
    m = merge_throughput([a, b])
    assert m["t"] == [[1000, 1.0, 10.0], [2000, 5.0, 50.0], [3000, 4.0, 40.0]]
    assert m["u"] == [[1000, 0.0, 0.0], [2000, 5.0, 50.0], [3000, 0.0, 0.0]]


def test_partition_health_offline_under_replicated_and_under_min_isr() -> None:
    img = image(
        [
            ([1, 2, 3], [1, 2, 3], 1),  # healthy
            ([1, 2, 3], [1, 2], 2),  # under-replicated
            ([2, 3], [3], 3),  # under-replicated, and under min ISR (2)
            ([1, 3], [1], -1),  # no leader: offline
            ([3, 1], [3, 1], 3),  # leader on a fenced broker: offline
        ],
        fenced=(3,),
        configs={"min.insync.replicas": "2"},
    )
    reports: dict[int, list[Any]] = {
        1: [["t", 0, "leader", 0, 10, 9, 100], ["t", 1, "follower", 0, 10, 10, 100]],
        2: [["t", 1, "leader", 5, 12, 12, 120]],
    }
    view = cluster_view(img, reports, {3: "ClientConnectorError"}, {})
    assert view["health"] == {
        "partitions": 5,
        "under_replicated": 3,  # partitions 1, 2 and 3
        "under_min_isr": 2,  # partitions 2 and 3 (ISR of one)
        "offline": 3,  # partition 3 (no leader), 2 and 4 (their leader, 3, is fenced)
    }
    assert [u["partition"] for u in view["unhealthy"]] == [1, 2, 3, 4]
    b = {x["broker_id"]: x for x in view["brokers"]}
    assert b[1]["leaders"] == 1 and b[1]["replicas"] == 2 and b[1]["size_bytes"] == 200
    assert not b[3]["reachable"] and b[3]["error"] == "ClientConnectorError"
    assert b[3]["fenced"]

    [t] = topics_view(img, reports, {})
    assert t["records"] == 9 + 7  # HW - log start of partitions 0 and 1; the rest unknown
    assert t["size_bytes"] == 220 and t["disk_bytes"] == 320
    assert t["offsets_unknown"] == 3
    detail = topic_view(img, img.topics.get("t"), reports, {"t": [[1000, 2.0, 20.0]]})  # type: ignore[arg-type]
    p1 = detail["partition_list"][1]
    assert (p1["log_start_offset"], p1["high_watermark"], p1["size_bytes"]) == (5, 12, 120)
    assert detail["partition_list"][2]["high_watermark"] is None
    assert detail["records_per_s"] == 2.0 and detail["throughput"] == [[1000, 2.0, 20.0]]


def test_quorum_lag_is_the_leaders_last_index_minus_each_match_index() -> None:
    statuses: dict[int, dict[str, Any] | str] = {
        1: {
            "node_id": 1,
            "role": "leader",
            "term": 4,
            "last_index": 100,
            "commit": 98,
            "followers": [{"node_id": 2, "match": 97}, {"node_id": 3, "match": 60}],
        },
        2: {"node_id": 2, "role": "follower", "term": 4, "last_index": 97, "commit": 97},
        3: "ClientConnectorError: refused",
    }
    q = quorum_view(statuses)
    assert q["leader_id"] == 1 and q["term"] == 4
    assert [(n["node_id"], n.get("lag")) for n in q["nodes"]] == [(1, 0), (2, 3), (3, None)]
    assert not q["nodes"][2]["reachable"]
    assert quorum_view({1: "down", 2: "down"})["leader_id"] is None
