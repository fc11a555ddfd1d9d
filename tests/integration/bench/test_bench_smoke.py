"""Every benchmark in scripts/bench still runs: ``python scripts/bench/X.py --smoke`` (a few
seconds of tiny data) exits 0 and prints, as JSON lines and nothing else on standard output,
every figure it should, each with its baseline where it has one. The values are not checked:
a benchmark is not a test with a time limit, but a broken one should be caught the day it
breaks, not when someone next wants its figures.

The peers run for real (PySyncObj, Redis, NATS JetStream, Spark): a benchmark whose peer
cannot be installed or started fails here, it is not skipped.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
BENCH = ROOT / "scripts" / "bench"

# Each benchmark's figures: True where the figure has a baseline measured in the same run.
EXPECTED: dict[str, dict[str, bool]] = {
    "storage_log.py": {
        "storage.append": True,
        "storage.append_fewest_fsyncs": True,
        "storage.append_records": True,
        "storage.read": True,
        "storage.encode_batch": True,
    },
    "page_cache.py": {"storage.page_cache.append": True},
    "security.py": {
        "security.client.produce": True,
        "security.client.fetch": True,
        "security.http_json.produce": True,
        "security.http_json.fetch": True,
        "security.cost.tls_handshake": True,
        "security.cost.tls_request": True,
        "security.cost.tls_bulk": True,
        "security.cost.basic_auth": False,
        "security.cost.acl_check": False,
    },
    "schemas.py": {
        "schemas.client.produce": True,
        "schemas.client.consume": True,
        "schemas.rest_v2.produce": True,
        "schemas.rest_v2.consume": True,
        "schemas.spark.read": True,
    },
    "raft_node.py": {
        "raft.propose_throughput": True,
        "raft.commit_latency_p50": True,
        "raft.commit_latency_p99": True,
        "raft.commit_latency_light_p50": True,
        "raft.commit_latency_light_p99": True,
        "raft.failover": False,
    },
    "metadata.py": {
        "metadata.topic_creations": True,
        "metadata.snapshot_catch_up": False,
        "metadata.controller_failover": False,
    },
    "kafka_protocol.py": {
        "kafka_protocol.produce": True,
        "kafka_protocol.produce_mb": True,
        "kafka_protocol.produce_cpu_s_per_m": True,
        "kafka_protocol.consume": True,
        "kafka_protocol.latency_p50": True,
        "kafka_protocol.latency_p99": True,
        "kafka_protocol.python_client": True,
    },
    "produce.py": {
        "produce.rf1_acks1": True,
        "produce.rf3_acks_all": True,
        "produce.rf3_acks_all.vs_redis_everysec": True,
        "produce.rf3_acks_all.vs_redis_always": True,
        "produce.rf3_acks_all.send": True,
        "produce.latency_p50": False,
        "produce.latency_p99": False,
        "consume.rf3": True,
    },
    "http_produce.py": {
        f"http.produce.{shape}{stat}": True
        for shape in ("json1", "json1000", "binary")
        for stat in ("", ".p50", ".p99")
    },
    "groups.py": {
        "groups.pause_join.cooperative_vs_eager": True,
        "groups.stable_after_join.cooperative_vs_eager": True,
        "groups.pause_kill.cooperative_vs_eager": True,
        "groups.stable_after_kill.cooperative_vs_eager": True,
        "groups.stable_after_kill.cooperative.vs_session_timeout": True,
        "groups.stable_after_kill.eager.vs_session_timeout": True,
    },
    "spark_read.py": {
        **{
            f"spark.{op}.vs_{fmt}": True
            for op in ("count", "read", "to_parquet")
            for fmt in ("parquet", "jsonl")
        },
        "spark.read.workers_convert": True,
        "spark.to_parquet.workers_convert": True,
    },
    "metrics_scrape.py": {
        "metrics.produce_with_scrape": True,
        "metrics.scrape_broker_ms": False,
        "metrics.scrape_broker_cpu_ms": False,
    },
    "reassign.py": {
        "reassign.move_unthrottled": False,
        "reassign.move_throttled": True,
        "reassign.produce_during_move": True,
        "reassign.produce_during_throttled_move": True,
    },
    "transactions.py": {
        "txn.produce.n10": True,
        "txn.produce.n100": True,
        "txn.produce.n1000": True,
        "txn.produce.n1000.p4": True,
        "txn.produce.commit_100ms": True,
        "txn.commit_ms.n10": True,
        "consume.read_committed": True,
        # --smoke leaves Apache Kafka out: librdkafka on Longboat's listener only, so the
        # comparisons with Kafka print without a baseline.
        "txn.rdkafka.longboat.n10": True,
        "txn.rdkafka.longboat.n100": True,
        "txn.rdkafka.longboat.n1000": True,
        "txn.rdkafka.longboat.commit_100ms": True,
        "txn.rdkafka.idempotent.vs_kafka": False,
        "txn.rdkafka.n1000.vs_kafka": False,
    },
    "replication_partitions.py": {
        "replication.acks_all_wide": True,
        "replication.catch_up_wide": False,
    },
    "kafka_fetch.py": {
        "kafka_fetch.consume_mb": True,
        "kafka_fetch.broker_cpu_s_per_gb": True,
    },
}

LATENCY_UNITS = {"ms", "us", "s"}
REQUIRED_KEYS = {"bench", "unit", "value", "baseline", "params", "runs"}


def _all_py_benchmarks() -> tuple[str, ...]:
    spec = importlib.util.spec_from_file_location("bench_all", BENCH / "all.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return tuple(module.BENCHMARKS)


def test_every_benchmark_is_run_by_all_py_and_smoke_checked_here() -> None:
    scripts = {
        p.name
        for p in BENCH.glob("*.py")
        if not p.name.startswith("_") and p.name != "all.py" and not p.stem.endswith("_server")
    }
    listed = _all_py_benchmarks()
    assert set(listed) == scripts, "scripts/bench/all.py's BENCHMARKS lists every benchmark"
    assert set(EXPECTED) == scripts, "this test's EXPECTED names every benchmark's figures"


def test_no_script_in_scripts_bench_shadows_a_package() -> None:
    # A script's folder comes first on sys.path: scripts/bench/http.py once shadowed the
    # standard library's http (aiohttp in the Raft benchmark's servers got the script).
    project = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert {"storage", "raft", "api"} <= project
    clashes = [
        p.name for p in BENCH.glob("*.py") if p.stem in sys.stdlib_module_names or p.stem in project
    ]
    assert clashes == []


def _check_figure(fig: object, has_baseline: bool) -> None:
    assert isinstance(fig, dict)
    assert REQUIRED_KEYS <= fig.keys() <= REQUIRED_KEYS | {"baseline_value", "ratio"}
    assert isinstance(fig["value"], int | float) and math.isfinite(fig["value"])
    assert isinstance(fig["runs"], int) and fig["runs"] >= 1
    assert isinstance(fig["params"], dict)
    if not has_baseline:
        assert fig["baseline"] is None
        assert "baseline_value" not in fig and "ratio" not in fig
        return
    assert isinstance(fig["baseline"], str) and fig["baseline"]
    base = fig.get("baseline_value")
    assert isinstance(base, int | float) and math.isfinite(base)
    value = fig["value"]
    if value > 0 and base > 0:
        # Higher is always better: value / baseline, inverted for latencies and durations.
        want = base / value if fig["unit"] in LATENCY_UNITS else value / base
        assert fig["ratio"] == pytest.approx(want, rel=0.01, abs=0.002)


# Smoke runs that start several clusters, JVMs or a Spark session: in the extended tier
# (./scripts/test.sh --extended, docs/testing.md), so the fast suite stays within its budget.
EXTENDED = {
    "kafka_protocol.py",
    "security.py",
    "reassign.py",
    "metrics_scrape.py",
    "schemas.py",
    "spark_read.py",
    "groups.py",
    "replication_partitions.py",
    "kafka_fetch.py",
}


@pytest.mark.parametrize(
    "script",
    [pytest.param(s, marks=pytest.mark.extended) if s in EXTENDED else s for s in sorted(EXPECTED)],
)
def test_smoke_run_prints_every_figure_with_its_baseline(script: str, tmp_path: Path) -> None:
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
    )
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), "--smoke"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=240,
    )
    assert proc.returncode == 0, (
        f"{script} --smoke exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    )
    figures = []
    for line in proc.stdout.splitlines():
        try:
            figures.append(json.loads(line))
        except ValueError:
            pytest.fail(f"{script}: a line on stdout is not JSON: {line!r}")
    names = [f.get("bench") if isinstance(f, dict) else None for f in figures]
    assert len(names) == len(set(names)), f"{script}: a figure printed twice: {names}"
    assert set(names) == set(EXPECTED[script]), f"{script} printed {names}"
    for fig in figures:
        try:
            _check_figure(fig, EXPECTED[script][fig["bench"]])
        except AssertionError as e:
            raise AssertionError(f"{script}: bad figure {json.dumps(fig)}") from e


# transactions.py leaves Apache Kafka out of --smoke (3 JVMs: a minute); --kafka puts it back.
TXN_WITH_KAFKA = {
    **{k: v for k, v in EXPECTED["transactions.py"].items() if not k.endswith(".vs_kafka")},
    "txn.rdkafka.kafka.n10": True,
    "txn.rdkafka.kafka.n100": True,
    "txn.rdkafka.kafka.n1000": True,
    "txn.rdkafka.kafka.commit_100ms": True,
    "txn.rdkafka.idempotent.vs_kafka": True,
    "txn.rdkafka.n1000.vs_kafka": True,
}


@pytest.mark.extended
def test_transactions_smoke_with_apache_kafka_prints_its_figures(tmp_path: Path) -> None:
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
    )
    proc = subprocess.run(
        [sys.executable, str(BENCH / "transactions.py"), "--smoke", "--kafka"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    figures = {f["bench"]: f for f in map(json.loads, proc.stdout.splitlines())}
    assert set(figures) == set(TXN_WITH_KAFKA)
    for name, fig in figures.items():
        _check_figure(fig, TXN_WITH_KAFKA[name])
