"""``/metrics`` in the Prometheus text format, on brokers and controllers.

Each app has its own ``CollectorRegistry`` (several nodes can live in one test process).

Brokers: produce and fetch requests, records and latencies (``longboat_produce_*``,
``longboat_fetch_*``), bytes in and out, HTTP errors by status and REST code
(``longboat_http_errors_total``), under-replicated and offline partitions this broker leads
(computed from the replicas at scrape time), ISR shrinks and expands seen in the metadata
(``longboat_isr_shrinks_total`` / ``_expands_total``: partitions led by this broker whose ISR
got smaller or larger), forwarded requests and leader-change retries of the router, and the
bytes of log asked out of the page cache (``longboat_page_cache_asked_bytes``, with
``log_page_cache_keep_bytes`` on).

Controllers: Raft term, commit and applied index, commit lag (``last_index - commit``),
whether this node is the leader, metadata offset, and the replication lag of each follower as
the leader sees it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

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


class _Gauges(Collector):
    """Gauges computed at scrape time by ``fn`` -> [(name, help, value)]."""

    def __init__(self, fn: Callable[[], Iterable[tuple[str, str, float, dict[str, str]]]]) -> None:
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

    def add_gauges(
        self, fn: Callable[[], Iterable[tuple[str, str, float, dict[str, str]]]]
    ) -> None:
        self.registry.register(_Gauges(fn))

    def note_error(self, status: int, error_code: int) -> None:
        self.http_errors.labels(str(status), str(error_code)).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


def replica_gauges(
    image_fn: Callable[[], Any],
    broker_id: int,
    describe: Callable[[], list[dict[str, Any]]],
    router_stats: Callable[[], tuple[int, int]],
    page_cache_asked: Callable[[], int | None] = lambda: None,
    lane_stats: Callable[[], tuple[int, int, int]] | None = None,
) -> Callable[[], Iterable[tuple[str, str, float, dict[str, str]]]]:
    """Gauges from the image (partitions this broker leads: under-replicated, i.e. ISR
    smaller than the replica set), from ``ReplicaManager.describe()``, the bytes of log
    asked out of the page cache (``storage.page_cache``; absent when that is off), and the
    produce lanes (``broker.produce_lanes``: created, dropped, batches without a producer id)."""

    def fn() -> Iterable[tuple[str, str, float, dict[str, str]]]:
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
        forwarded, retries = router_stats()
        yield (
            "longboat_forwarded_requests",
            "Requests forwarded to partition leaders",
            forwarded,
            {},
        )
        yield (
            "longboat_leader_retries",
            "Routed requests retried through a leader change",
            retries,
            {},
        )
        asked = page_cache_asked()
        if asked is not None:
            yield (
                "longboat_page_cache_asked_bytes",
                "Bytes of partition logs asked out of the page cache (each range twice)",
                asked,
                {},
            )
        if lane_stats is not None:
            created, dropped, without = lane_stats()
            yield (
                "longboat_produce_lanes_created",
                "Producer ids taken for batches built from HTTP produce requests",
                created,
                {},
            )
            yield (
                "longboat_produce_lanes_dropped",
                "Produce lanes dropped after a failed batch",
                dropped,
                {},
            )
            yield (
                "longboat_produce_batches_without_producer_id",
                "HTTP-built acks=all batches sent without a producer id (none to be had)",
                without,
                {},
            )

    return fn


def controller_gauges(
    status: Callable[[], dict[str, Any]],
) -> Callable[[], Iterable[tuple[str, str, float, dict[str, str]]]]:
    def fn() -> Iterable[tuple[str, str, float, dict[str, str]]]:
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


def metrics_handler(render: Callable[[], bytes]) -> Callable[[web.Request], Any]:
    async def handle(request: web.Request) -> web.Response:
        resp = web.Response(body=render())
        resp.headers["Content-Type"] = CONTENT_TYPE
        return resp

    return handle


def add_controller_metrics(app: web.Application, status: Callable[[], dict[str, Any]]) -> None:
    """``GET /metrics`` on a controller; ``status`` as ``/v3/quorum/status`` answers."""
    registry = CollectorRegistry()
    registry.register(_Gauges(controller_gauges(status)))
    app.router.add_get("/metrics", metrics_handler(lambda: generate_latest(registry)))
