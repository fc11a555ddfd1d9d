"""The reassignment nemesis against a real Longboat cluster: partition moves (KIP-455) on one
fault track, SIGKILLs on another, so brokers die mid-move; the queue checker must find every
acknowledged write. Asserts too that the moves really moved data: some broker deleted a
replica it lost and some replica was rebuilt on another broker.

A failure here is a product bug (or a harness bug): the run directory holds history.jsonl,
node logs, the plans (``reassign/``) and report.html; rerun with the printed command.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from jepsen_support import no_leftover_nodes

from jepsen_tests.history import History

# In the extended tier (docs/testing.md): a real fault-injection run of its own; the fast
# suite keeps the queue workload (test_jepsen_longboat.py) and the transactional one.
pytestmark = [pytest.mark.slow, pytest.mark.extended]

ARGS = (
    "--nemesis",
    "reassign,kill",
    "--tracks",
    "2",
    "--seed",
    "11",
    "--time-limit",
    "30",
    "--netns",
    "off",
)


def test_no_acknowledged_write_lost_while_partitions_move_and_brokers_die(
    tmp_path: Path,
) -> None:
    out = tmp_path / "reassign"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "jepsen_tests",
            "run",
            "--cluster",
            "longboat",
            "--out",
            str(out),
            *ARGS,
        ],
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
    assert r["stats"]["sends"]["ok"] > 100, where
    windows = History.load(out / "history.jsonl").fault_windows()
    kinds = {w.kind for w in windows}
    assert {"reassign", "kill"} <= kinds, windows
    logs = "".join(f.read_text() for f in (out / "logs").glob("b*.log"))
    assert "deleted replica jepsen-" in logs, "no move took a replica away"
    no_leftover_nodes(out)
