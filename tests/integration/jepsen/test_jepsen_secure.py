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
    assert r["stats"]["sends"]["ok"] > 100, where

    schedule = json.loads((out / "schedule.json").read_text())
    kinds = {s["kind"] for s in schedule}
    assert {"kill", "pause"} <= kinds and any(k.startswith("partition-") for k in kinds), schedule
    assert {"leader", "controller", "leader-followers"} <= {s["spec"] for s in schedule}
    assert len(History.load(out / "history.jsonl").fault_windows()) == len(schedule)
    assert res["netns"], "partitions ran without a namespace"

    # Secure all along: every broker's client listener on SASL_SSL and its inter-broker one
    # on SSL, controllers on SSL, the authorizer on.
    for b in ("b1", "b2", "b3"):
        text = (out / "logs" / f"{b}.log").read_text()
        assert "listener CLIENT (SASL_SSL, client)" in text, b
        assert "listener BROKER (SSL, broker)" in text, b
    for q in ("q1", "q2", "q3"):
        assert "listener CONTROLLER (SSL, controller)" in (out / "logs" / f"{q}.log").read_text()
    assert "authorizer_enable = true" in (out / "config" / "b1.toml").read_text()
    # ... and the clients got in with their credentials and ACLs: no refused login on any
    # node, no refused operation in the history.
    for node_log in (out / "logs").glob("[bq]*.log"):
        assert "authentication failed" not in node_log.read_text(), node_log
    errors = [op.error or "" for op in History.load(out / "history.jsonl").ops]
    refused = [e for e in errors if "AUTHORIZATION_FAILED" in e or "AUTHENTICATION" in e]
    assert not refused, refused[:5]
    no_leftover_nodes(out)
