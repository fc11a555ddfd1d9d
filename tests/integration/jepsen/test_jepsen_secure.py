"""The short fault-injection suite on a secure cluster (issue 18): TLS on every listener,
SCRAM users, the authorizer on.

One ``python -m jepsen_tests run --secure`` as a user would run it: 3 controllers and 3
brokers configured as ``longboat dev up --secure`` configures them (on their own 127.0.0.N,
each certificate naming its address), the queue workload's clients as ``User:jepsen`` over
TLS with HTTP Basic and only the ACLs they need, and 30 s of kill, pause and partition
faults aimed at the active controller and partition leaders (seed 39: the controller
paused, a leader isolated, a leader cut from its followers, a leader killed). It asserts what
the plaintext short suite asserts (test_jepsen_longboat.py), and that the cluster was secure
and the clients were let in all along.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from jepsen_support import no_leftover_nodes, require_netns

from jepsen_tests.history import History

pytestmark = pytest.mark.slow

ARGS = ("--nemesis", "kill,pause,partition", "--seed", "39", "--time-limit", "30")
SCHEDULE = ("--fault-duration", "2,6", "--fault-gap", "1,3")


def test_no_acknowledged_write_lost_on_a_secure_cluster_under_kill_pause_partition(
    tmp_path: Path,
) -> None:
    require_netns()
    out = tmp_path / "secure"
    argv = [sys.executable, "-m", "jepsen_tests", "run", "--secure", "--out", str(out)]
    p = subprocess.run([*argv, *ARGS, *SCHEDULE], capture_output=True, text=True, timeout=240)
    log = p.stdout + p.stderr[-4000:]
    res_path = out / "results.json"
    assert res_path.exists(), f"no results in {out}:\n{log}"
    res = json.loads(res_path.read_text())
    r = res["result"]
    where = (
        f"run dir {out}; rerun: python -m jepsen_tests run --secure {' '.join(ARGS + SCHEDULE)}"
        f"\n{json.dumps(r, indent=1)[:3000]}"
    )
    assert r["valid"] is True and r["anomaly_types"] == [], where
    assert p.returncode == 0, log
    assert all(res["final_reads_complete"].values()), where
    # 463 in the run the docs show; a loaded machine and a secure cluster's reconnections
    # (a TLS handshake and a SCRAM login per new connection) can cost most of that.
    assert r["stats"]["sends"]["ok"] > 50, where

    schedule = json.loads((out / "schedule.json").read_text())
    kinds = {s["kind"] for s in schedule}
    assert {"kill", "pause"} <= kinds and any(k.startswith("partition-") for k in kinds), schedule
    assert {"leader", "controller", "leader-followers"} <= {s["spec"] for s in schedule}
    history = History.load(out / "history.jsonl")
    windows = history.fault_windows()
    assert len(windows) == len(schedule), (windows, schedule)
    assert res["netns"], "partitions ran without a namespace"

    # Secure all along: every broker's client listener on SASL_SSL and its inter-broker one
    # on SSL, controllers on SSL, the authorizer on.
    logs = {p.stem: p.read_text() for p in (out / "logs").glob("[bq]*.log")}
    for b in ("b1", "b2", "b3"):
        assert "listener CLIENT (SASL_SSL, client)" in logs[b], b
        assert "listener BROKER (SSL, broker)" in logs[b], b
    for q in ("q1", "q2", "q3"):
        assert "listener CONTROLLER (SSL, controller)" in logs[q], q
    assert "authorizer_enable = true" in (out / "config" / "b1.toml").read_text()
    # ... and the clients got in with their credentials and ACLs: no operation refused for
    # want of an ACL, and no login refused but by a broker that had just been restarted
    # (the open observation of docs/fault-injection.md: a restarted broker can answer a
    # known user 401 before its metadata image holds the credential).
    errors = [op.error or "" for op in history.ops]
    assert not [e for e in errors if "AUTHORIZATION_FAILED" in e], errors
    restarted = {t for w in windows if w.kind == "kill" for t in w.targets}
    refused = {n: text.count("authentication failed") for n, text in logs.items()}
    assert {n for n, k in refused.items() if k} <= restarted, refused
    assert sum(refused.values()) <= 5, refused
    assert sum("AUTHENTICATION" in e for e in errors) <= sum(refused.values()), errors
    no_leftover_nodes(out)
