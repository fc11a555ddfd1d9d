"""``/metrics`` and the broker configs routes against a real local cluster (3 controllers, 3
brokers, processes): per-topic counters move with produce and fetch, per-partition gauges come
from the leader, consumer-group lag matches ``longboat groups describe``, the under-replicated
flag turns on when a follower stops and off when it is back, the Grafana dashboard and the
alert rules in deploy/ name only metrics the cluster exposes (and, where Debian's prometheus
package is installed, promtool accepts the rules and a real Prometheus scraping the cluster
evaluates every dashboard query with data and every rule healthy), and the configs endpoints.

One cluster for the module; each test uses its own topics and groups. The test that stops a
broker goes last.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from consumer_groups_support import Consumers, produce
from http_cluster_support import HttpCluster
from jsonschema import Draft202012Validator
from prometheus_client.parser import text_string_to_metric_families

from api.cli.main import main
from api.node.localcluster import free_ports, running_cluster

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
DASHBOARD = REPO / "deploy" / "grafana" / "longboat.json"
ALERTS = REPO / "deploy" / "prometheus" / "alerts.yml"
PROMETHEUS_OWN = {"up"}
"""Series Prometheus makes itself, not scraped from a target."""
REPLICA_LAG_TIME_MAX_MS = 2_000

Sample = tuple[str, dict[str, str], float]


@pytest.fixture(scope="module")
def c(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpCluster]:
    root: Path = tmp_path_factory.mktemp("metrics")
    args = [
        "--override",
        "group_initial_rebalance_delay_ms=300",
        "--override",
        f"replica_lag_time_max_ms={REPLICA_LAG_TIME_MAX_MS}",
    ]
    with running_cluster(root, broker_args=args) as (q, brokers):
        yield HttpCluster(q, brokers)


def scrape(c: HttpCluster, url: str) -> list[Sample]:
    st, h, text = c.call("GET", f"{url}/metrics")
    assert st == 200 and h["content-type"].startswith("text/plain"), (st, text)
    return [
        (s.name, dict(s.labels), s.value)
        for fam in text_string_to_metric_families(text.decode())
        for s in fam.samples
    ]


def values(c: HttpCluster, url: str, name: str, **labels: str) -> list[float]:
    return [
        v
        for n, lb, v in scrape(c, url)
        if n == name and all(lb.get(k) == want for k, want in labels.items())
    ]


def per_broker(c: HttpCluster, name: str, **labels: str) -> dict[int, list[float]]:
    return {b: values(c, u, name, **labels) for b, u in zip(c.brokers.ids, c.urls, strict=True)}


def total(c: HttpCluster, name: str, **labels: str) -> float:
    return sum(sum(vs) for vs in per_broker(c, name, **labels).values())


def wait_until(what: str, cond: Callable[[], Any], timeout_s: float = 60) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        out = cond()
        if out:
            return out
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def describe_group(c: HttpCluster, group: str) -> dict[str, Any]:
    r = CliRunner().invoke(
        main, ["groups", "describe", group, "--json", "--bootstrap", ",".join(c.urls)]
    )
    assert r.exit_code == 0, (r.output, r.exception)
    out: dict[str, Any] = json.loads(r.output)
    return out


@pytest.fixture(scope="module")
def workload(c: HttpCluster) -> dict[str, Any]:
    """Topic "lagt" (3 partitions, 10 records each, then 5 more on partition 0) and group
    "lagg" whose one member committed offsets 2, 5 and 7 (REST v2 commits offset + 1)."""
    c.create_topic("lagt", partitions=3, rf=3)
    produce(
        c,
        "lagt",
        [{"partition_id": i % 3, "value": {"type": "JSON", "data": i}} for i in range(30)],
    )
    Consumers(c).committed_member("lagg", "m", "lagt", 30, {0: 1, 1: 4, 2: 6})
    produce(
        c, "lagt", [{"partition_id": 0, "value": {"type": "JSON", "data": i}} for i in range(5)]
    )
    return {"topic": "lagt", "group": "lagg"}


# --------------------------------------------------------------------------- topics


def test_per_topic_counters_move_with_produce_and_fetch(c: HttpCluster) -> None:
    c.create_topic("traffic", partitions=1, rf=3)
    assert total(c, "longboat_topic_records_in_total", topic="traffic") == 0
    produce(c, "traffic", [{"value": {"type": "JSON", "data": i}} for i in range(25)])
    assert total(c, "longboat_topic_records_in_total", topic="traffic") == 25
    bytes_in = total(c, "longboat_topic_bytes_in_total", topic="traffic")
    assert bytes_in > 25
    assert total(c, "longboat_topic_produce_requests_total", topic="traffic") >= 1
    assert total(c, "longboat_topic_records_out_total", topic="traffic") == 0

    assert len(c.read_all("traffic", 0, i=1)) == 25
    assert total(c, "longboat_topic_records_out_total", topic="traffic") == 25
    assert total(c, "longboat_topic_bytes_out_total", topic="traffic") == bytes_in
    assert total(c, "longboat_topic_fetch_requests_total", topic="traffic") >= 1
    # The two followers appended what the leader took in, and fetched it from the leader.
    wait_until(
        "followers to replicate",
        lambda: (
            total(c, "longboat_topic_replication_bytes_in_total", topic="traffic") == 2 * bytes_in
        ),
    )
    assert total(c, "longboat_topic_replication_bytes_out_total", topic="traffic") >= 2 * bytes_in


def test_partition_gauges_come_from_the_leader_and_each_replica(c: HttpCluster) -> None:
    c.create_topic("gauges", partitions=1, rf=3)
    produce(c, "gauges", [{"value": {"type": "JSON", "data": i}} for i in range(7)])
    leader = c.brokers.ids[c.leader_index("gauges", 0)]
    labels = {"topic": "gauges", "partition": "0"}
    hw = per_broker(c, "longboat_topic_partition_current_offset", **labels)
    assert {b: v for b, v in hw.items() if v} == {leader: [7.0]}
    for name, want in (
        ("longboat_topic_partition_oldest_offset", 0),
        ("longboat_topic_partition_in_sync_replica", 3),
        ("longboat_topic_partition_replicas", 3),
        ("longboat_topic_partition_leader", leader),
        ("longboat_topic_partition_under_replicated_partition", 0),
        ("longboat_topic_partition_under_min_isr", 0),
    ):
        got = per_broker(c, name, **labels)
        assert {b: v for b, v in got.items() if v} == {leader: [float(want)]}, name
    is_leader = per_broker(c, "longboat_topic_partition_is_leader", **labels)
    assert is_leader == {b: [1.0 if b == leader else 0.0] for b in c.brokers.ids}
    wait_until(
        "every replica at log end 7",
        lambda: (
            per_broker(c, "longboat_topic_partition_log_end_offset", **labels)
            == {b: [7.0] for b in c.brokers.ids}
        ),
    )
    sizes = per_broker(c, "longboat_topic_partition_size_bytes", **labels)
    assert all(len(v) == 1 and v[0] > 0 for v in sizes.values()), sizes


# --------------------------------------------------------------------------- groups


def test_lag_metrics_match_groups_describe(c: HttpCluster, workload: dict[str, Any]) -> None:
    topic, group = workload["topic"], workload["group"]
    described = describe_group(c, group)
    coordinator = described["coordinator_id"]
    want = {str(p["partition"]): p for p in described["partitions"] if p["topic"] == topic}
    assert {p: (r["current_offset"], r["log_end_offset"], r["lag"]) for p, r in want.items()} == {
        "0": (2, 15, 13),
        "1": (5, 10, 5),
        "2": (7, 10, 3),
    }
    lags = per_broker(c, "longboat_consumergroup_lag", consumergroup=group)
    assert [b for b, v in lags.items() if v] == [coordinator]  # only its coordinator shows it
    url = c.brokers.url(coordinator)
    for p, row in want.items():
        labels = {"consumergroup": group, "topic": topic, "partition": p}
        assert values(c, url, "longboat_consumergroup_lag", **labels) == [row["lag"]]
        assert values(c, url, "longboat_consumergroup_current_offset", **labels) == [
            row["current_offset"]
        ]
    sums = {"consumergroup": group, "topic": topic}
    assert values(c, url, "longboat_consumergroup_lag_sum", **sums) == [13 + 5 + 3]
    assert values(c, url, "longboat_consumergroup_current_offset_sum", **sums) == [2 + 5 + 7]
    assert values(c, url, "longboat_consumergroup_members", consumergroup=group) == [1]
    assert values(c, url, "longboat_consumergroup_lag_unknown_partitions", consumergroup=group) == [
        0
    ]

    # More records: the lag grows at the next scrape (computed then, not cached).
    produce(c, topic, [{"partition_id": 2, "value": {"type": "JSON", "data": i}} for i in range(4)])
    labels = {"consumergroup": group, "topic": topic, "partition": "2"}
    assert values(c, url, "longboat_consumergroup_lag", **labels) == [3 + 4]
    again = describe_group(c, group)["partitions"]
    assert [p["lag"] for p in again if p["partition"] == 2] == [3 + 4]


# --------------------------------------------------------------------------- controllers


def test_controllers_show_the_active_one_the_cluster_and_commit_latency(c: HttpCluster) -> None:
    active = [values(c, u, "longboat_controller_active") for u in c.quorum.urls]
    assert sorted(active) == [[0.0], [0.0], [1.0]]
    leader_url = c.quorum.urls[active.index([1.0])]
    leader_ids = {values(c, u, "longboat_raft_leader_id")[0] for u in c.quorum.urls}
    assert leader_ids == {float(c.quorum.urls.index(leader_url) + 1)}
    assert values(c, leader_url, "longboat_controller_brokers") == [3]
    assert values(c, leader_url, "longboat_controller_offline_partitions") == [0]
    assert values(c, leader_url, "longboat_controller_partitions")[0] >= 1
    assert values(c, leader_url, "longboat_raft_commit_latency_seconds_count")[0] > 0
    assert len(values(c, leader_url, "longboat_raft_follower_lag")) == 2
    for u in c.quorum.urls:
        names = {n for n, _, _ in scrape(c, u)}
        assert {"process_resident_memory_bytes", "python_info"} <= names


# --------------------------------------------------------------------------- deploy/


def promql_metric_names(expr: str) -> set[str]:
    """The metric names an expression reads: identifiers of this project's families and of
    prometheus_client's runtime collectors (labels, functions and keywords never start so)."""
    return set(re.findall(r"\b(?:longboat|process|python)_[a-zA-Z0-9_]+\b|\bup\b", expr))


def dashboard_exprs(doc: Any) -> list[str]:
    out: list[str] = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k in ("expr", "definition", "query") and isinstance(v, str):
                out.append(v)
            else:
                out += dashboard_exprs(v)
    elif isinstance(doc, list):
        for v in doc:
            out += dashboard_exprs(v)
    return out


def test_dashboard_and_alerts_name_only_metrics_the_cluster_exposes(
    c: HttpCluster, workload: dict[str, Any]
) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    rules = yaml.safe_load(ALERTS.read_text())
    dash_names = set().union(*(promql_metric_names(e) for e in dashboard_exprs(dashboard)))
    alert_exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    assert all("alert" in r and "expr" in r for g in rules["groups"] for r in g["rules"])
    alert_names = set().union(*(promql_metric_names(e) for e in alert_exprs))
    # What a dashboard for Kafka operators must show, and what the commonest alerts read.
    for must in (
        "longboat_topic_bytes_in_total",
        "longboat_consumergroup_lag_sum",
        "longboat_controller_offline_partitions",
        "longboat_under_replicated_partitions",
        "longboat_controller_active",
        "longboat_produce_latency_seconds_bucket",
        "longboat_raft_commit_latency_seconds_bucket",
    ):
        assert must in dash_names, must
    for must in (
        "longboat_consumergroup_lag_sum",
        "longboat_under_replicated_partitions",
        "longboat_controller_offline_partitions",
        "longboat_controller_active",
    ):
        assert must in alert_names, must

    # Produced and committed (the workload); consumed; one error answered.
    assert len(c.read_all(workload["topic"], 0)) > 0
    assert c.call("GET", f"{c.v3()}/topics/no-such-topic")[0] == 404
    exposed = {n for u in c.urls + c.quorum.urls for n, _, _ in scrape(c, u)}
    missing = sorted((dash_names | alert_names) - exposed - PROMETHEUS_OWN)
    assert missing == [], f"named in deploy/ but on no node's /metrics: {missing}"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian: prometheus)")
def test_promtool_accepts_the_alert_rules() -> None:
    out = subprocess.run(
        ["promtool", "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus (Debian: prometheus)")
def test_a_real_prometheus_evaluates_every_dashboard_query_and_rule(
    c: HttpCluster, workload: dict[str, Any], tmp_path: Path
) -> None:
    targets = [u.removeprefix("http://") for u in c.urls + c.quorum.urls]
    shutil.copy(ALERTS, tmp_path / "alerts.yml")
    (tmp_path / "prometheus.yml").write_text(
        json.dumps(  # JSON is YAML
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": ["alerts.yml"],
                "scrape_configs": [
                    {"job_name": "longboat", "static_configs": [{"targets": targets}]}
                ],
            }
        )
    )
    (port,) = free_ports(1)
    api = f"http://127.0.0.1:{port}/api/v1"
    log = open(tmp_path / "prometheus.log", "wb")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:

        def query(q: str) -> Any:
            _, _, out = c.call("GET", f"{api}/query?" + urllib.parse.urlencode({"query": q}))
            return out

        def all_up() -> bool:
            try:
                out = query("up")
            except OSError:
                return False
            res = out["data"]["result"] if isinstance(out, dict) else []
            return len(res) == len(targets) and all(r["value"][1] == "1" for r in res)

        wait_until("Prometheus to scrape every node", all_up)
        for i in range(5):  # traffic across several scrapes, so rates have two points
            produce(c, workload["topic"], [{"value": {"type": "JSON", "data": i}}])
            c.read_all(workload["topic"], 0)
            time.sleep(1)
        exprs = [
            e.replace("$__rate_interval", "10s")
            .replace('"$topic"', '".*"')
            .replace('"$consumergroup"', '".*"')
            for e in dashboard_exprs(json.loads(DASHBOARD.read_text())["panels"])
        ]
        failed = {e: query(e) for e in exprs}
        failed = {e: out for e, out in failed.items() if out.get("status") != "success"}
        assert failed == {}
        empty = [e for e in exprs if not query(e)["data"]["result"]]
        assert empty == [], f"dashboard queries with no data on a cluster in use: {empty}"

        def rules_evaluated() -> list[Any]:
            _, _, out = c.call("GET", f"{api}/rules")
            rules = [r for g in out["data"]["groups"] for r in g["rules"]]
            return rules if all(r.get("lastEvaluation", "").startswith("2") for r in rules) else []

        rules = wait_until("every rule evaluated", rules_evaluated)
        assert len(rules) == 14 and all(r["health"] == "ok" for r in rules), rules
        # Not an ISR shrink (replica_lag_time_max_ms is 2 s here, and CI is a loaded box).
        quiet = {"LongboatNodeDown", "LongboatNoActiveController", "LongboatOfflinePartitions"}
        firing = [r["name"] for r in rules if r["name"] in quiet and r["state"] != "inactive"]
        assert firing == [], f"alerts on a healthy cluster: {firing}"
    finally:
        proc.terminate()
        proc.wait(20)
        log.close()


# --------------------------------------------------------------------------- configs


def test_broker_configs_endpoints(c: HttpCluster) -> None:
    b0, b1 = c.brokers.ids[0], c.brokers.ids[1]
    st, _, lst = c.call("GET", f"{c.v3()}/broker-configs")
    assert st == 200 and lst["kind"] == "KafkaClusterConfigList"
    by_name = {e["name"]: e for e in lst["data"]}
    e = by_name["replica_lag_time_max_ms"]
    assert e["kind"] == "KafkaClusterConfig" and e["config_type"] == "BROKER"
    assert (e["value"], e["is_default"], e["source"]) == ("30000", True, "DEFAULT_CONFIG")
    assert "node_id" not in by_name  # no default: every broker sets its own
    st, _, one = c.call("GET", f"{c.v3(2)}/broker-configs/metrics_per_partition")
    assert st == 200 and one["value"] == "true"

    st, _, mine = c.call("GET", f"{c.v3()}/brokers/{b0}/configs")
    assert st == 200 and mine["kind"] == "KafkaBrokerConfigList"
    cfg = {e["name"]: e for e in mine["data"]}
    assert set(cfg["node_id"]) >= {
        "name",
        "value",
        "is_default",
        "is_read_only",
        "is_sensitive",
        "source",
        "synonyms",
    }
    assert cfg["node_id"]["value"] == str(b0) and cfg["node_id"]["broker_id"] == b0
    lag = cfg["replica_lag_time_max_ms"]
    assert (lag["value"], lag["is_default"], lag["source"]) == (
        str(REPLICA_LAG_TIME_MAX_MS),
        False,
        "STATIC_BROKER_CONFIG",
    )
    assert [(s["value"], s["source"]) for s in lag["synonyms"]] == [
        (str(REPLICA_LAG_TIME_MAX_MS), "STATIC_BROKER_CONFIG"),
        ("30000", "DEFAULT_CONFIG"),
    ]
    assert all(e["is_read_only"] and not e["is_sensitive"] for e in mine["data"])

    # Another broker's configs, asked through broker 0: that broker's own values.
    st, _, other = c.call("GET", f"{c.v3()}/brokers/{b1}/configs/listen")
    assert st == 200 and other["broker_id"] == b1
    assert other["value"] == f"127.0.0.1:{c.brokers.ports[b1]}"

    for url, code in (
        (f"{c.v3()}/brokers/{b0}/configs/no_such_config", 404),
        (f"{c.v3()}/brokers/{b1}/configs/no_such_config", 404),
        (f"{c.v3()}/broker-configs/no_such_config", 404),
        (f"{c.v3()}/brokers/999/configs", 404),
        (f"{c.v3()}/brokers/x/configs", 400),
        (f"{c.urls[0]}/v3/clusters/not-this-one/broker-configs", 404),
    ):
        st, _, err = c.call("GET", url)
        assert st == code and err["error_code"] == code and err["message"], (url, st, err)
    # Each answer has the shape the OpenAPI document gives it.
    st, _, doc = c.call("GET", f"{c.urls[0]}/openapi.json")
    for path, answer in (
        ("/broker-configs", lst),
        ("/broker-configs/{name}", one),
        ("/brokers/{broker_id}/configs", mine),
        ("/brokers/{broker_id}/configs/{name}", other),
    ):
        op = doc["paths"]["/v3/clusters/{cluster_id}" + path]["get"]
        schema = op["responses"]["200"]["content"]["application/json"]["schema"]
        Draft202012Validator({**schema, "components": doc["components"]}).validate(answer)


# --------------------------------------------------------------------------- last: a broker stops


def test_under_replicated_flag_turns_on_when_a_follower_stops(c: HttpCluster) -> None:
    c.create_topic("urp", partitions=1, rf=3)
    produce(c, "urp", [{"value": {"type": "JSON", "data": 1}}])
    leader = c.brokers.ids[c.leader_index("urp", 0)]
    follower = next(b for b in c.brokers.ids if b != leader)
    labels = {"topic": "urp", "partition": "0"}
    leader_url = c.brokers.url(leader)
    assert values(
        c, leader_url, "longboat_topic_partition_under_replicated_partition", **labels
    ) == [0]

    c.brokers.kill(follower, signal.SIGKILL)
    wait_until(
        "the leader to flag urp-0 under-replicated",
        lambda: (
            values(c, leader_url, "longboat_topic_partition_under_replicated_partition", **labels)
            == [1]
        ),
    )
    assert values(c, leader_url, "longboat_topic_partition_in_sync_replica", **labels) == [2]
    assert values(c, leader_url, "longboat_under_replicated_partitions")[0] >= 1
    ctl = next(u for u in c.quorum.urls if values(c, u, "longboat_controller_active") == [1])
    wait_until(
        "the active controller to count it",
        lambda: values(c, ctl, "longboat_controller_under_replicated_partitions")[0] >= 1,
    )

    c.brokers.start(follower)
    c.brokers.wait_ready([follower], timeout_s=60)
    wait_until(
        "urp-0 back in full ISR",
        lambda: (
            values(c, leader_url, "longboat_topic_partition_under_replicated_partition", **labels)
            == [0]
        ),
    )
    assert values(c, leader_url, "longboat_topic_partition_in_sync_replica", **labels) == [3]
