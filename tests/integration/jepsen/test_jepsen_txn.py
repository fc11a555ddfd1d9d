"""The transactional workloads against a real Longboat cluster, under faults (CI's share).

``python -m jepsen_tests run --workload txn-ctp`` as a user would run it: 3 controllers and 3
brokers as processes in a fresh network namespace; two transactional producers (transactions
of 1-4 sends over 6 partitions, some aborted on purpose, read_committed polls) and two
consume-transform-produce processors (a read_committed group over the input topic, outputs
and offsets in one transaction); kills aimed at the coordinator of the run's transactional
ids, then partitions; heal, the group's committed offsets, final reads, the txn checker.

A failure here is a product bug (or a harness bug): the run directory named in the assertion
holds history.jsonl, node logs and report.html; rerun with the printed command.
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

ARGS = (
    "--workload",
    "txn-ctp",
    "--nemesis",
    "kill,partition",
    "--target-specs",
    "txn-coordinator",
    "--seed",
    "4",
    "--time-limit",
    "25",
    "--fault-duration",
    "2,8",
    "--fault-gap",
    "1,3",
)


def test_transactions_and_ctp_stay_atomic_under_coordinator_kills_and_partitions(
    tmp_path: Path,
) -> None:
    require_netns()
    out = tmp_path / "txn"
    p = subprocess.run(
        [sys.executable, "-m", "jepsen_tests", "run", "--out", str(out), *ARGS],
        capture_output=True,
        text=True,
        timeout=300,
    )
    res_path = out / "results.json"
    assert res_path.exists(), p.stdout + p.stderr[-4000:]
    res = json.loads(res_path.read_text())
    r = res["result"]
    where = (
        f"run dir {out}; rerun: python -m jepsen_tests run {' '.join(ARGS)}\n"
        f"{json.dumps(r, indent=1)[:3000]}"
    )
    assert r["valid"] is True and r["anomaly_types"] == [], where
    assert p.returncode == 0, p.stdout + p.stderr[-4000:]
    assert all(res["final_reads_complete"].values()), where
    st = r["stats"]
    assert st["txns"].get("ok", 0) > 10, where
    assert st["ctp"].get("ok", 0) > 5, where
    assert st["aborted_on_purpose"] > 0, where
    assert res["netns"], "partitions ran without a namespace"
    schedule = json.loads((out / "schedule.json").read_text())
    kinds = {s["kind"] for s in schedule}
    assert "kill" in kinds and kinds - {"kill"}, schedule
    assert any(s["spec"] == "txn-coordinator" for s in schedule), schedule
    history = History.load(out / "history.jsonl")
    killed = [o for o in history.nemesis_ops() if o.f == "start" and o.value["kind"] == "kill"]
    assert killed and all(o.value["targets"] for o in killed), "no coordinator was found to kill"
    # The committed offsets were read, so the ctp atomicity checks ran.
    assert any(o.f == "committed" and o.type == "ok" for o in history), where
    no_leftover_nodes(out)
