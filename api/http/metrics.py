"""``/metrics`` in the Prometheus text format, on brokers and controllers.

Each app has its own ``CollectorRegistry`` (several nodes can live in one test process), with
prometheus_client's process, platform and garbage-collector collectors in it. Counters end
in ``_total``. What state holds (offsets, ISR, lag, quorum) is read at scrape time by
collectors, so the produce and fetch paths pay nothing for it; what only an event shows
(bytes and records moved) is counted as plain ints where it happens
(``broker.replica_manager.TopicTraffic``) and read at scrape time too.

Brokers:

* HTTP produce and fetch requests, records and latencies (``longboat_produce_*``,
  ``longboat_fetch_*``), bytes in and out, HTTP errors by status and REST code
  (``longboat_http_errors_total``), forwarded requests and leader-change retries of the
  router, produce lanes, the bytes of log asked out of the page cache;
* per topic (label ``topic``), counted by the leader's replica manager whatever the front
  door (HTTP, the client library, the Kafka listener): ``longboat_topic_bytes_in_total``,
  ``_records_in_total``, ``_bytes_out_total``, ``_records_out_total`` (consumers),
  ``_produce_requests_total``, ``_fetch_requests_total``,
  ``_replication_bytes_in_total`` / ``_out_total`` (between replicas);
* per partition (labels ``topic``, ``partition``; off with ``metrics_per_partition =
  false``), after kafka_exporter's names. The partition's own state comes from its leader
  only, so summing over brokers counts each partition once:
  ``longboat_topic_partition_current_offset`` (high watermark), ``_oldest_offset`` (log
  start), ``_in_sync_replica``, ``_replicas``, ``_leader`` (its id),
  ``_leader_is_preferred``, ``_under_replicated_partition``, ``_under_min_isr``; each
  replica's own from every broker holding one: ``_log_end_offset``, ``_size_bytes``,
  ``_is_leader``;
* this broker's totals: replicas, partitions led, under-replicated and under-min-ISR
  partitions led here, ISR shrinks and expands;
* consumer groups this broker coordinates (kafka_exporter's names, label
  ``consumergroup``): ``longboat_consumergroup_lag`` and ``_current_offset`` per
  topic and partition (off with ``metrics_per_partition``), their ``_sum`` per topic,
  ``_members``, and ``longboat_consumergroup_lag_unknown_partitions`` (end offsets not read
  within the scrape's bound). Computed at each scrape (``GroupCoordinator.lag_snapshot``).

Controllers: Raft term, commit and applied index, commit lag (``last_index - commit``),
whether this node is the leader and who is (``longboat_raft_leader_id``), the commit latency
of proposals (``longboat_raft_commit_latency_seconds``), metadata offset, the replication lag
of each follower as the leader sees it; and the cluster as the active controller's image
shows it (Kafka's controller metrics: zero on the others, so a sum over controllers counts
once): ``longboat_controller_active``, ``_offline_partitions``, ``_partitions``,
``_topics``, ``_under_replicated_partitions``, ``_brokers``, ``_fenced_brokers``, and
``longboat_topic_partitions{topic}``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from broker.group_coordinator import GroupCoordinator, GroupLagSnapshot
from broker.replica_manager import ReplicaManager
from metalog.image import MetadataImage
from metalog.records import NO_LEADER

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

LAG_SCRAPE_TIMEOUT_S = 5.0
"""How long a scrape waits for the end offsets of the coordinated groups' partitions
(Prometheus's default scrape timeout is 10 s)."""

LATENCY_BUCKETS_S = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)

GaugeRow = tuple[str, str, float, dict[str, str]]


def runtime_collectors(registry: CollectorRegistry) -> None:
    """prometheus_client's process (``process_*``: CPU, memory, open fds), platform
    (``python_info``) and garbage-collector (``python_gc_*``) collectors, on ``registry``."""
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)


class _Gauges(Collector):
    """Gauges computed at scrape time by ``fn`` -> [(name, help, value, labels)]."""

    def __init__(self, fn: Callable[[], Iterable[GaugeRow]]) -> None:
        self.fn = fn

    def collect(self) -> Iterable[Metric]:
        fams: dict[str, GaugeMetricFamily] = {}
        for name, doc, value, labels in self.fn():
            fam = fams.get(name)
            if fam is None:
                fam = fams[name] = GaugeMetricFamily(name, doc, labels=sorted(labels))
            fam.add_metric([labels[k] for k in sorted(labels)], value)
        return list(fams.values())


class BrokerMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        runtime_collectors(r)
        self._before_scrape: list[Callable[[], Awaitable[None]]] = []
        self.produce_requests = Counter(
            "longboat_produce_requests", "HTTP produce requests", ["api"], registry=r
        )
        self.produce_records = Counter(
            "longboat_produce_records", "Records acknowledged through HTTP produce", registry=r
        )
        self.produce_record_errors = Counter(
            "longboat_produce_record_errors", "Records refused by HTTP produce", registry=r
        )
        self.produce_latency = Histogram(
            "longboat_produce_latency_seconds",
            "HTTP produce request latency",
            ["api"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.bytes_in = Counter("longboat_bytes_in", "Record bytes produced (batches)", registry=r)
        self.fetch_requests = Counter("longboat_fetch_requests", "HTTP read requests", registry=r)
        self.fetch_records = Counter(
            "longboat_fetch_records", "Records returned by HTTP reads", registry=r
        )
        self.fetch_latency = Histogram(
            "longboat_fetch_latency_seconds",
            "HTTP read request latency (long-polls included)",
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.bytes_out = Counter(
            "longboat_bytes_out", "Batch bytes returned by HTTP reads", registry=r
        )
        self.http_errors = Counter(
            "longboat_http_errors", "HTTP error answers", ["status", "error_code"], registry=r
        )
        self.isr_shrinks = Counter(
            "longboat_isr_shrinks", "ISR shrinks of partitions this broker leads", registry=r
        )
        self.isr_expands = Counter(
            "longboat_isr_expands", "ISR expands of partitions this broker leads", registry=r
        )

    def add_gauges(self, fn: Callable[[], Iterable[GaugeRow]]) -> None:
        self.registry.register(_Gauges(fn))

    def add_collector(self, collector: Collector) -> None:
        self.registry.register(collector)

    def before_scrape(self, fn: Callable[[], Awaitable[None]]) -> None:
        """``fn`` runs before each scrape renders (state that takes I/O to read)."""
        self._before_scrape.append(fn)

    def note_error(self, status: int, error_code: int) -> None:
        self.http_errors.labels(str(status), str(error_code)).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)

    async def scrape(self) -> bytes:
        for fn in self._before_scrape:
            try:
                await fn()
            except Exception:  # the rest of the scrape is still worth answering
                log.exception("metrics: preparing a scrape failed")
        return self.render()


def replica_gauges(
    image_fn: Callable[[], Any],
    broker_id: int,
    describe: Callable[[], list[dict[str, Any]]],
) -> Callable[[], Iterable[GaugeRow]]:
    """Gauges from the image (partitions this broker leads: under-replicated, i.e. ISR
    smaller than the replica set) and from ``ReplicaManager.describe()``."""

    def fn() -> Iterable[GaugeRow]:
        reps = describe()
        yield ("longboat_partitions", "Partition replicas on this broker", len(reps), {})
        led = under = 0
        for _t, _p, reg in image_fn().topics.partitions():
            if int(reg.leader) == broker_id:
                led += 1
                if len(reg.isr) < len(reg.replicas):
                    under += 1
        yield ("longboat_leader_partitions", "Partitions this broker leads", led, {})
        yield (
            "longboat_under_replicated_partitions",
            "Partitions led here whose ISR is smaller than the replica set",
            under,
            {},
        )

    return fn


class EventCounters(Collector):
    """Counts kept as plain ints elsewhere (router, produce lanes), shown as counters."""

    def __init__(self, fn: Callable[[], Iterable[tuple[str, str, float]]]) -> None:
        self.fn = fn

    def collect(self) -> Iterable[Metric]:
        return [CounterMetricFamily(name, doc, value) for name, doc, value in self.fn()]


def event_counters(
    router_stats: Callable[[], tuple[int, int]],
    lane_stats: Callable[[], tuple[int, int, int]] | None = None,
    page_cache_asked: Callable[[], int | None] = lambda: None,
    kafka_sendfile: Callable[[], tuple[int, int] | None] = lambda: None,
) -> EventCounters:
    """The router's forwards and retries, the produce lanes (``broker.produce_lanes``:
    created, dropped, batches without a producer id), the bytes of log asked out of
    the page cache (``storage.page_cache``; absent when that is off), and the Kafka
    listeners' zero-copy Fetch answers (responses, record bytes; absent without a Kafka
    listener)."""

    def fn() -> Iterable[tuple[str, str, float]]:
        zero_copy = kafka_sendfile()
        if zero_copy is not None:
            yield (
                "longboat_kafka_sendfile_responses",
                "Kafka Fetch answers whose records went out by sendfile from segment files",
                zero_copy[0],
            )
            yield (
                "longboat_kafka_sendfile_bytes",
                "Record bytes Kafka Fetch answers sent by sendfile from segment files",
                zero_copy[1],
            )
        asked = page_cache_asked()
        if asked is not None:
            yield (
                "longboat_page_cache_asked_bytes",
                "Bytes of partition logs asked out of the page cache (a range counts at each ask)",
                asked,
            )
        forwarded, retries = router_stats()
        yield ("longboat_forwarded_requests", "Requests forwarded to partition leaders", forwarded)
        yield (
            "longboat_leader_retries",
            "Routed requests retried through a leader change",
            retries,
        )
        if lane_stats is not None:
            created, dropped, without = lane_stats()
            yield (
                "longboat_produce_lanes_created",
                "Producer ids taken for batches built from HTTP produce requests",
                created,
            )
            yield (
                "longboat_produce_lanes_dropped",
                "Produce lanes dropped after a failed batch",
                dropped,
            )
            yield (
                "longboat_produce_batches_without_producer_id",
                "HTTP-built acks=all batches sent without a producer id (none to be had)",
                without,
            )

    return EventCounters(fn)


_TOPIC_COUNTERS = (
    ("bytes_in", "Batch bytes producers appended to the topic's partitions led here"),
    ("records_in", "Records producers appended to the topic's partitions led here"),
    ("bytes_out", "Batch bytes consumers fetched from the topic's partitions led here"),
    ("records_out", "Records consumers fetched from the topic's partitions led here"),
    ("produce_requests", "Produce requests to the topic's partitions led here"),
    ("fetch_requests", "Consumer fetches answered by the topic's partitions led here"),
    ("replication_bytes_in", "Batch bytes this broker appended as a follower of the topic"),
    ("replication_bytes_out", "Batch bytes followers fetched from the topic's partitions led here"),
)

_PARTITION_LEADER_GAUGES = (
    ("current_offset", "High watermark: the offset the next consumed record gets (leader)"),
    ("oldest_offset", "Log start offset (leader)"),
    ("in_sync_replica", "In-sync replicas (leader's view)"),
    ("replicas", "Replicas assigned"),
    ("leader", "Broker id of the leader"),
    ("leader_is_preferred", "1 when the leader is the first assigned replica"),
    ("under_replicated_partition", "1 when the ISR is smaller than the replica set"),
    ("under_min_isr", "1 when the ISR is smaller than min.insync.replicas (acks=all refused)"),
)

_PARTITION_REPLICA_GAUGES = (
    ("log_end_offset", "Log end offset of this broker's replica"),
    ("size_bytes", "Bytes of this broker's replica on disk"),
    ("is_leader", "1 on the broker that leads the partition"),
)


class ReplicaCollector(Collector):
    """Per topic counters and per partition gauges of the replicas on one broker, read from
    the ``ReplicaManager`` at scrape time."""

    def __init__(self, mgr: ReplicaManager, *, per_partition: bool = True) -> None:
        self.mgr = mgr
        self.per_partition = per_partition

    def collect(self) -> Iterable[Metric]:
        out: list[Metric] = []
        topics = sorted(self.mgr.traffic.items())
        for attr, doc in _TOPIC_COUNTERS:
            fam = CounterMetricFamily(f"longboat_topic_{attr}", doc, labels=["topic"])
            for name, traffic in topics:
                fam.add_metric([name], getattr(traffic, attr))
            out.append(fam)
        under_min = 0
        lead_fams = {
            a: GaugeMetricFamily(f"longboat_topic_partition_{a}", d, labels=["topic", "partition"])
            for a, d in _PARTITION_LEADER_GAUGES
        }
        rep_fams = {
            a: GaugeMetricFamily(f"longboat_topic_partition_{a}", d, labels=["topic", "partition"])
            for a, d in _PARTITION_REPLICA_GAUGES
        }
        for rep in list(self.mgr.replicas.values()):
            leader = rep.leader if rep.leader is not None and rep.leader.is_leader else None
            if leader is not None and leader.is_under_min_isr:
                under_min += 1
            if not self.per_partition:
                continue
            labels = [rep.topic, str(rep.partition)]
            reg = rep.registration
            rep_fams["log_end_offset"].add_metric(labels, rep.log.log_end_offset)
            rep_fams["size_bytes"].add_metric(labels, rep.log.size_bytes)
            rep_fams["is_leader"].add_metric(labels, 1 if leader is not None else 0)
            if leader is None:
                continue
            values = {
                "current_offset": leader.high_watermark,
                "oldest_offset": rep.log.log_start_offset,
                "in_sync_replica": len(reg.isr),
                "replicas": len(reg.replicas),
                "leader": int(reg.leader),
                "leader_is_preferred": int(bool(reg.replicas) and reg.replicas[0] == reg.leader),
                "under_replicated_partition": int(len(reg.isr) < len(reg.replicas)),
                "under_min_isr": int(leader.is_under_min_isr),
            }
            for a, v in values.items():
                lead_fams[a].add_metric(labels, v)
        out.append(
            GaugeMetricFamily(
                "longboat_under_min_isr_partitions",
                "Partitions led here whose ISR is smaller than min.insync.replicas",
                under_min,
            )
        )
        if self.per_partition:
            out += lead_fams.values()
            out += rep_fams.values()
        return out


class GroupLagCollector(Collector):
    """Consumer groups this broker coordinates: lag and offsets after kafka_exporter's
    ``kafka_consumergroup_*``. ``refresh`` (awaited before each scrape) reads them from the
    coordinator; ``collect`` shows the last refresh."""

    def __init__(
        self,
        coordinator: GroupCoordinator,
        *,
        per_partition: bool = True,
        timeout_s: float = LAG_SCRAPE_TIMEOUT_S,
    ) -> None:
        self.coordinator = coordinator
        self.per_partition = per_partition
        self.timeout_s = timeout_s
        self.snapshot: list[GroupLagSnapshot] = []

    async def refresh(self) -> None:
        self.snapshot = await self.coordinator.lag_snapshot(self.timeout_s)

    def collect(self) -> Iterable[Metric]:
        tp_labels = ["consumergroup", "topic", "partition"]
        lag = GaugeMetricFamily(
            "longboat_consumergroup_lag",
            "Committed offset's distance from the high watermark",
            labels=tp_labels,
        )
        current = GaugeMetricFamily(
            "longboat_consumergroup_current_offset", "Committed offset", labels=tp_labels
        )
        lag_sum = GaugeMetricFamily(
            "longboat_consumergroup_lag_sum",
            "Lag of the group summed over the topic's partitions",
            labels=["consumergroup", "topic"],
        )
        current_sum = GaugeMetricFamily(
            "longboat_consumergroup_current_offset_sum",
            "Committed offsets of the group summed over the topic's partitions",
            labels=["consumergroup", "topic"],
        )
        members = GaugeMetricFamily(
            "longboat_consumergroup_members", "Members of the group", labels=["consumergroup"]
        )
        unknown = GaugeMetricFamily(
            "longboat_consumergroup_lag_unknown_partitions",
            "Partitions of the group whose end offset this scrape could not read",
            labels=["consumergroup"],
        )
        groups = GaugeMetricFamily(
            "longboat_consumergroups", "Consumer groups this broker coordinates", len(self.snapshot)
        )
        for g in self.snapshot:
            members.add_metric([g.group], g.members)
            unknown.add_metric([g.group], g.unknown)
            sums: dict[str, tuple[int, int]] = {}
            for tp, pl in sorted(g.lags.items()):
                if pl.current_offset is None or pl.lag is None:
                    continue  # nothing committed: no lag to speak of (kafka_exporter skips it)
                if self.per_partition:
                    labels = [g.group, tp.topic, str(tp.partition)]
                    lag.add_metric(labels, pl.lag)
                    current.add_metric(labels, pl.current_offset)
                lsum, csum = sums.get(tp.topic, (0, 0))
                sums[tp.topic] = (lsum + pl.lag, csum + pl.current_offset)
            for topic, (lsum, csum) in sorted(sums.items()):
                lag_sum.add_metric([g.group, topic], lsum)
                current_sum.add_metric([g.group, topic], csum)
        out: list[Metric] = [groups, members, unknown, lag_sum, current_sum]
        if self.per_partition:
            out += [lag, current]
        return out


def controller_gauges(
    status: Callable[[], dict[str, Any]],
) -> Callable[[], Iterable[GaugeRow]]:
    def fn() -> Iterable[GaugeRow]:
        st = status()
        yield ("longboat_raft_term", "Current Raft term", st["term"], {})
        yield ("longboat_raft_commit_index", "Raft commit index", st["commit"], {})
        yield ("longboat_raft_applied_index", "Raft applied index", st["applied"], {})
        yield ("longboat_raft_last_index", "Last Raft log index", st["last_index"], {})
        yield (
            "longboat_raft_commit_lag",
            "last_index - commit on this node",
            st["last_index"] - st["commit"],
            {},
        )
        yield (
            "longboat_raft_is_leader",
            "1 on the Raft leader",
            1 if st["role"] == "leader" else 0,
            {},
        )
        yield (
            "longboat_raft_leader_id",
            "Node id of the Raft leader this node knows (-1: none)",
            st.get("leader_id", -1) if st.get("leader_id", 0) > 0 else -1,
            {},
        )
        yield (
            "longboat_metadata_offset",
            "Metadata offset applied",
            st.get("metadata_offset", -1),
            {},
        )
        for f in st.get("followers", []):
            yield (
                "longboat_raft_follower_lag",
                "Leader's last index - follower match index",
                st["last_index"] - f["match"],
                {"follower": str(f["node_id"])},
            )

    return fn


def cluster_gauges(
    image_fn: Callable[[], MetadataImage], active: Callable[[], bool]
) -> Callable[[], Iterable[GaugeRow]]:
    """The cluster as the active controller's image shows it (Kafka's ``KafkaController``
    metrics); zero on the other controllers, so a sum over controllers counts once."""

    def fn() -> Iterable[GaugeRow]:
        is_active = active()
        image = image_fn() if is_active else MetadataImage.EMPTY
        partitions = offline = under = 0
        per_topic: dict[str, int] = {}
        for t, _p, reg in image.topics.partitions():
            partitions += 1
            per_topic[t.name] = per_topic.get(t.name, 0) + 1
            if reg.leader == NO_LEADER:
                offline += 1
            if len(reg.isr) < len(reg.replicas):
                under += 1
        brokers = list(image.brokers.brokers.values())
        fenced = sum(1 for b in brokers if b.fenced)
        yield ("longboat_controller_active", "1 on the active controller", int(is_active), {})
        yield ("longboat_controller_offline_partitions", "Partitions without a leader", offline, {})
        yield ("longboat_controller_partitions", "Partitions in the cluster", partitions, {})
        yield ("longboat_controller_topics", "Topics in the cluster", len(per_topic), {})
        yield (
            "longboat_controller_under_replicated_partitions",
            "Partitions whose ISR is smaller than the replica set",
            under,
            {},
        )
        yield (
            "longboat_controller_brokers",
            "Registered brokers that are not fenced (kafka_brokers)",
            len(brokers) - fenced,
            {},
        )
        yield ("longboat_controller_fenced_brokers", "Registered brokers fenced", fenced, {})
        for name, n in sorted(per_topic.items()):
            yield ("longboat_topic_partitions", "Partitions of the topic", n, {"topic": name})

    return fn


class ControllerMetrics:
    """A controller's registry: runtime collectors, quorum and cluster gauges, the commit
    latency histogram (fed by ``RaftNode.on_proposal_committed``)."""

    def __init__(
        self,
        status: Callable[[], dict[str, Any]],
        image_fn: Callable[[], MetadataImage] | None = None,
        active: Callable[[], bool] | None = None,
    ) -> None:
        r = self.registry = CollectorRegistry()
        runtime_collectors(r)
        r.register(_Gauges(controller_gauges(status)))
        if image_fn is not None and active is not None:
            r.register(_Gauges(cluster_gauges(image_fn, active)))
        self.commit_latency = Histogram(
            "longboat_raft_commit_latency_seconds",
            "Raft proposal to commit and apply, on the leader",
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )

    async def scrape(self) -> bytes:
        return generate_latest(self.registry)


def metrics_handler(scrape: Callable[[], Awaitable[bytes]]) -> Callable[[web.Request], Any]:
    async def handle(request: web.Request) -> web.Response:
        resp = web.Response(body=await scrape())
        resp.headers["Content-Type"] = CONTENT_TYPE
        return resp

    return handle


def add_controller_metrics(
    app: web.Application,
    status: Callable[[], dict[str, Any]],
    image_fn: Callable[[], MetadataImage] | None = None,
    active: Callable[[], bool] | None = None,
) -> ControllerMetrics:
    """``GET /metrics`` on a controller; ``status`` as ``/v3/quorum/status`` answers,
    ``image_fn`` and ``active`` the controller's committed image and whether it is active."""
    metrics = ControllerMetrics(status, image_fn, active)
    app.router.add_get("/metrics", metrics_handler(metrics.scrape))
    return metrics
