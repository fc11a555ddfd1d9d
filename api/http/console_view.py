"""What the web console shows, computed from the metadata image and the brokers' replica reports.

Pure: no I/O, no clock (times come in as arguments). ``api.http.console`` gathers the inputs
(this broker's image, every broker's ``/console/api/local`` report, the controllers'
``/v3/quorum/status``) and serves the results as JSON.

A *replica report* is one broker's list of the partition replicas it hosts, as rows
``[topic, partition, role, log_start_offset, log_end_offset, high_watermark, size_bytes]``
(``local_rows``): one row per replica, compact because a cluster of 1,000 partitions sends
3,000 of them on every overview.

Throughput: each broker samples, every ``interval_ms``, the log end offset and the size of the
partitions it leads (``ThroughputHistory.sample``); a topic's rate is the growth since the
previous sample of the partitions led by the same broker at both (a partition whose
leadership just moved counts from its next sample on, so a move is never a burst). Samples
sit on wall-clock multiples of the interval, so the serving broker adds the brokers' rates
bucket by bucket (``merge_throughput``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from metalog.image import MetadataImage, PartitionRegistration, TopicImage
from metalog.records import NO_LEADER

# Indexes into a replica report's row.
TOPIC, PARTITION, ROLE, LOG_START, LOG_END, HW, SIZE = range(7)

Row = list[Any]
"""``[topic, partition, role, log_start_offset, log_end_offset, high_watermark, size_bytes]``."""


class ThroughputHistory:
    """Per-topic records/s and bytes/s of the partitions one broker leads, over the last
    ``samples_max`` samples (a ring: the oldest goes when a new one comes)."""

    def __init__(self, interval_ms: int = 2_000, samples_max: int = 180) -> None:
        self.interval_ms = interval_ms
        self.samples: deque[tuple[int, dict[str, tuple[float, float]]]] = deque(maxlen=samples_max)
        """``(t_ms, {topic: (records_per_s, bytes_per_s)})``, oldest first; ``t_ms`` a
        multiple of ``interval_ms``. Invariant: ``t_ms`` strictly increases."""
        self._last_t_ms: int | None = None
        self._last: dict[tuple[str, int], tuple[int, int]] = {}
        """(topic, partition) -> (log_end_offset, size_bytes) at the last sample, for the
        partitions this broker led then."""

    def bucket(self, now_ms: int) -> int:
        return now_ms - now_ms % self.interval_ms

    def next_sample_ms(self, now_ms: int) -> int:
        """When the next sample is due: the next multiple of the interval."""
        return self.bucket(now_ms) + self.interval_ms

    def sample(self, now_ms: int, leaders: Iterable[tuple[str, int, int, int]]) -> bool:
        """Record ``(topic, partition, log_end_offset, size_bytes)`` of every partition led
        here now. Returns whether a sample was added (not on the first call, nor twice in
        one bucket)."""
        t_ms = self.bucket(now_ms)
        if self._last_t_ms is not None and t_ms <= self._last_t_ms:
            return False
        current = {(t, p): (leo, size) for t, p, leo, size in leaders}
        added = False
        if self._last_t_ms is not None:
            dt_s = (t_ms - self._last_t_ms) / 1000
            rates: dict[str, list[float]] = {}
            for key, (leo, size) in current.items():
                before = self._last.get(key)
                if before is None:
                    continue
                r = rates.setdefault(key[0], [0.0, 0.0])
                # Retention and compaction shrink a log: never a negative rate.
                r[0] += max(0, leo - before[0]) / dt_s
                r[1] += max(0, size - before[1]) / dt_s
            self.samples.append((t_ms, {k: (v[0], v[1]) for k, v in rates.items()}))
            added = True
        self._last_t_ms = t_ms
        self._last = current
        return added

    def to_json(self) -> list[list[Any]]:
        """``[[t_ms, {topic: [records_per_s, bytes_per_s]}], ...]``, oldest first."""
        return [[t, {k: [r, b] for k, (r, b) in rates.items()}] for t, rates in self.samples]


def merge_throughput(histories: Iterable[list[list[Any]]]) -> dict[str, list[list[float]]]:
    """The brokers' ``ThroughputHistory.to_json()`` added bucket by bucket:
    ``{topic: [[t_ms, records_per_s, bytes_per_s], ...]}``, oldest first. A bucket only some
    brokers sampled still counts (a broker that was down adds nothing)."""
    by_t: dict[int, dict[str, list[float]]] = {}
    for h in histories:
        for t_ms, rates in h:
            bucket = by_t.setdefault(int(t_ms), {})
            for topic, (r, b) in rates.items():
                acc = bucket.setdefault(topic, [0.0, 0.0])
                acc[0] += r
                acc[1] += b
    out: dict[str, list[list[float]]] = {}
    times = sorted(by_t)
    topics = {topic for rates in by_t.values() for topic in rates}
    for topic in topics:
        out[topic] = [
            [t, *by_t[t].get(topic, (0.0, 0.0))] for t in times
        ]  # a topic idle in a bucket shows 0 there
    return out


@dataclass(frozen=True)
class PartitionView:
    topic: str
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]
    log_start_offset: int | None
    """From the leader's report (None: the leader did not answer)."""
    log_end_offset: int | None
    high_watermark: int | None
    size_bytes: int | None
    """The leader's copy."""
    disk_bytes: int
    """Every replica that reported."""
    offline: bool
    under_replicated: bool
    under_min_isr: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "leader": self.leader,
            "replicas": self.replicas,
            "isr": self.isr,
            "log_start_offset": self.log_start_offset,
            "log_end_offset": self.log_end_offset,
            "high_watermark": self.high_watermark,
            "size_bytes": self.size_bytes,
            "disk_bytes": self.disk_bytes,
            "offline": self.offline,
            "under_replicated": self.under_replicated,
            "under_min_isr": self.under_min_isr,
        }


def index_reports(reports: Mapping[int, list[Row]]) -> dict[tuple[str, int], dict[int, Row]]:
    """``{(topic, partition): {broker_id: row}}``."""
    out: dict[tuple[str, int], dict[int, Row]] = {}
    for broker_id, rows in reports.items():
        for row in rows:
            out.setdefault((str(row[TOPIC]), int(row[PARTITION])), {})[broker_id] = row
    return out


def _min_isr(image: MetadataImage, topic: str) -> int:
    v = image.configs.topic_config(topic, "min.insync.replicas")
    try:
        return int(v) if v is not None else 1
    except ValueError:
        return 1


def partition_view(
    image: MetadataImage,
    topic: str,
    partition: int,
    reg: PartitionRegistration,
    rows: Mapping[int, Row],
    min_isr: int,
) -> PartitionView:
    leader = int(reg.leader)
    lb = image.brokers.get(reg.leader) if reg.leader != NO_LEADER else None
    # A registered leader on a fenced broker serves nothing until the controller moves it.
    offline = lb is None or lb.fenced
    lrow = rows.get(leader)
    return PartitionView(
        topic=topic,
        partition=partition,
        leader=leader,
        replicas=[int(b) for b in reg.replicas],
        isr=[int(b) for b in reg.isr],
        log_start_offset=None if lrow is None else int(lrow[LOG_START]),
        log_end_offset=None if lrow is None else int(lrow[LOG_END]),
        high_watermark=None if lrow is None else int(lrow[HW]),
        size_bytes=None if lrow is None else int(lrow[SIZE]),
        disk_bytes=sum(int(r[SIZE]) for r in rows.values()),
        offline=offline,
        under_replicated=len(reg.isr) < len(reg.replicas),
        under_min_isr=len(reg.isr) < min_isr,
    )


def topic_partitions(
    image: MetadataImage, t: TopicImage, index: Mapping[tuple[str, int], dict[int, Row]]
) -> list[PartitionView]:
    m = _min_isr(image, t.name)
    return [
        partition_view(image, t.name, p, reg, index.get((t.name, p), {}), m)
        for p, reg in sorted(t.partitions.items())
    ]


def _recent(series: list[list[float]] | None) -> tuple[float, float]:
    """The latest sample's (records/s, bytes/s): what "now" means in a list of topics."""
    if not series:
        return 0.0, 0.0
    return series[-1][1], series[-1][2]


def topic_summary(
    t: TopicImage, parts: list[PartitionView], series: list[list[float]] | None
) -> dict[str, Any]:
    rec_s, bytes_s = _recent(series)
    known = [p for p in parts if p.high_watermark is not None]
    return {
        "name": t.name,
        "internal": t.name.startswith("__"),
        "partitions": len(parts),
        "replication_factor": max((len(p.replicas) for p in parts), default=0),
        "records": sum(
            (p.high_watermark or 0) - (p.log_start_offset or 0) for p in known
        ),  # offsets held (compaction can leave fewer records)
        "size_bytes": sum(p.size_bytes or 0 for p in parts),
        "disk_bytes": sum(p.disk_bytes for p in parts),
        "offsets_unknown": len(parts) - len(known),
        "under_replicated": sum(p.under_replicated for p in parts),
        "under_min_isr": sum(p.under_min_isr for p in parts),
        "offline": sum(p.offline for p in parts),
        "records_per_s": rec_s,
        "bytes_per_s": bytes_s,
    }


def topics_view(
    image: MetadataImage,
    reports: Mapping[int, list[Row]],
    throughput: Mapping[str, list[list[float]]],
) -> list[dict[str, Any]]:
    """Every topic's summary, by name."""
    index = index_reports(reports)
    out = []
    for t in sorted(image.topics.by_id.values(), key=lambda t: t.name):
        out.append(topic_summary(t, topic_partitions(image, t, index), throughput.get(t.name)))
    return out


def topic_view(
    image: MetadataImage,
    t: TopicImage,
    reports: Mapping[int, list[Row]],
    throughput: Mapping[str, list[list[float]]],
) -> dict[str, Any]:
    """One topic: its summary, every partition and its throughput series."""
    parts = topic_partitions(image, t, index_reports(reports))
    series = throughput.get(t.name, [])
    return {
        **topic_summary(t, parts, series),
        "topic_id": str(t.topic_id),
        "partition_list": [p.to_json() for p in parts],
        "throughput": series,
    }


def quorum_view(statuses: Mapping[int, dict[str, Any] | str]) -> dict[str, Any]:
    """The controller quorum from each voter's ``/v3/quorum/status`` (or the error reaching
    it): each node's role, term, commit and applied index, and its replication lag as the
    leader sees it (the leader's last index minus the node's match index)."""
    leader_status = next(
        (s for s in statuses.values() if isinstance(s, dict) and s.get("role") == "leader"), None
    )
    match: dict[int, int] = {}
    leader_last = None
    if leader_status is not None:
        leader_last = int(leader_status.get("last_index", 0))
        for f in leader_status.get("followers", []):
            match[int(f["node_id"])] = int(f["match"])
    nodes = []
    for node_id, s in sorted(statuses.items()):
        if not isinstance(s, dict):
            nodes.append({"node_id": node_id, "reachable": False, "error": s})
            continue
        lag = None
        if leader_last is not None:
            lag = 0 if s is leader_status else leader_last - match.get(node_id, 0)
        nodes.append(
            {
                "node_id": node_id,
                "reachable": True,
                "role": s.get("role"),
                "term": s.get("term"),
                "leader_id": s.get("leader_id"),
                "commit": s.get("commit"),
                "applied": s.get("applied"),
                "last_index": s.get("last_index"),
                "metadata_offset": s.get("metadata_offset"),
                "lag": lag,
            }
        )
    return {
        "leader_id": None if leader_status is None else leader_status.get("node_id"),
        "term": None if leader_status is None else leader_status.get("term"),
        "nodes": nodes,
    }


def broker_metadata_lags(statuses: Mapping[int, dict[str, Any] | str]) -> dict[int, int]:
    """Each broker's metadata lag (records behind the controller it fetches from), from the
    controller that heard from it last."""
    best: dict[int, tuple[float, int]] = {}
    for s in statuses.values():
        if not isinstance(s, dict):
            continue
        for o in s.get("metadata_observers", []):
            b, seen = int(o["broker_id"]), float(o.get("last_contact_ms") or 0)
            if b not in best or seen < best[b][0]:
                best[b] = (seen, int(o["lag"]))
    return {b: lag for b, (_, lag) in best.items()}


def cluster_view(
    image: MetadataImage,
    reports: Mapping[int, list[Row]],
    unreachable: Mapping[int, str],
    statuses: Mapping[int, dict[str, Any] | str],
) -> dict[str, Any]:
    """The overview: brokers (state, leaders and replicas hosted, size, metadata lag), the
    quorum, and partition health counts with the unhealthy partitions named."""
    index = index_reports(reports)
    leaders: dict[int, int] = {}
    unhealthy: list[dict[str, Any]] = []
    counts = {"partitions": 0, "under_replicated": 0, "under_min_isr": 0, "offline": 0}
    for t in image.topics.by_id.values():
        for p in topic_partitions(image, t, index):
            counts["partitions"] += 1
            leaders[p.leader] = leaders.get(p.leader, 0) + 1
            if p.under_replicated or p.offline or p.under_min_isr:
                counts["under_replicated"] += p.under_replicated
                counts["under_min_isr"] += p.under_min_isr
                counts["offline"] += p.offline
                unhealthy.append({"topic": p.topic, **p.to_json()})
    unhealthy.sort(key=lambda d: (d["topic"], d["partition"]))
    lags = broker_metadata_lags(statuses)
    brokers = []
    for bid, b in sorted(image.brokers.brokers.items()):
        rows = reports.get(int(bid), [])
        http = next((e for e in b.endpoints if e.name in ("http", "https")), None)
        brokers.append(
            {
                "broker_id": int(bid),
                "host": None if http is None else http.host,
                "port": None if http is None else http.port,
                "rack": b.rack,
                "fenced": b.fenced,
                "in_controlled_shutdown": b.in_controlled_shutdown,
                "reachable": int(bid) not in unreachable,
                "error": unreachable.get(int(bid)),
                "leaders": leaders.get(int(bid), 0),
                "replicas": len(rows),
                "size_bytes": sum(int(r[SIZE]) for r in rows),
                "metadata_lag": lags.get(int(bid)),
            }
        )
    return {
        "metadata_offset": image.offset,
        "topics": len(image.topics.by_id),
        "brokers": brokers,
        "quorum": quorum_view(statuses),
        "health": counts,
        # Named in full up to a bound: a cluster with thousands of sick partitions needs
        # the count and a start, not a page that takes seconds to draw.
        "unhealthy": unhealthy[:UNHEALTHY_LISTED_MAX],
    }


UNHEALTHY_LISTED_MAX = 200
