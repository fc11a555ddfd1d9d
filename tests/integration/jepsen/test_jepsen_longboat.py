"""The short fault-injection suite against a real Longboat cluster (CI's share of it).

Each test runs ``python -m jepsen_tests run`` as a user would: 3 controllers and 3 brokers
as processes on their own 127.0.0.N inside a fresh network namespace, 4 idempotent acks=all
producers/consumers on a 6-partition topic (RF 3, min.insync.replicas 2), one nemesis on a
seeded schedule, heal, final reads, the queue checker. It asserts the checker's verdict and
that the faults really happened and hurt (some operations failed or went unknown while the
checker still found every acknowledged write). The long sweep is ``scripts/jepsen.sh``.

A failure here is a product bug (or a harness bug): the run directory named in the assertion
holds history.jsonl, node logs and report.html; rerun with the printed seed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from jepsen_support import no_leftover_nodes, require_netns

from jepsen_tests.history import History

pytestmark = pytest.mark.slow

TIME_LIMIT_S = "20"
SCHEDULE = ("--fault-duration", "2,8", "--fault-gap", "1,3")
# Seeds chosen (jepsen_tests.nemesis.schedule.generate) so that each run hits a partition
# leader, the active controller, and a majority or a minority.


def _run(out: Path, *args: str, timeout_s: float = 150) -> tuple[int, str, dict[str, Any]]:
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
            "--time-limit",
            TIME_LIMIT_S,
            *SCHEDULE,
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    res_path = out / "results.json"
    results = json.loads(res_path.read_text()) if res_path.exists() else {}
    return p.returncode, p.stdout + p.stderr[-4000:], results


def _check_run(out: Path, nemesis: str, seed: str, specs: set[str]) -> dict[str, Any]:
    require_netns()
    rc, log, res = _run(out, "--nemesis", nemesis, "--seed", seed)
    assert res, f"no results in {out}:\n{log}"
    r = res["result"]
    where = (
        f"run dir {out}; rerun: python -m jepsen_tests run --nemesis {nemesis} "
        f"--seed {seed} --time-limit {TIME_LIMIT_S} {' '.join(SCHEDULE)}\n"
        f"{json.dumps(r, indent=1)[:3000]}"
    )
    assert r["valid"] is True and r["anomaly_types"] == [], where
    assert rc == 0, log
    assert all(res["final_reads_complete"].values()), where
    assert r["stats"]["sends"]["ok"] > 100, where
    assert (
        r["stats"]["committed"] == r["stats"]["values_read"]
        or r["stats"]["values_read"] >= r["stats"]["sends"]["ok"]
    ), where
    schedule = json.loads((out / "schedule.json").read_text())
    assert specs <= {s["spec"] for s in schedule} | {s["kind"] for s in schedule}, schedule
    windows = History.load(out / "history.jsonl").fault_windows()
    assert len(windows) == len(schedule), (windows, schedule)
    no_leftover_nodes(out)
    return res


def test_no_acknowledged_write_lost_under_kills(tmp_path: Path) -> None:
    res = _check_run(tmp_path / "kill", "kill", "120", {"leader", "controller", "majority"})
    stats = res["result"]["stats"]
    assert stats["sends"].get("info", 0) + stats["polls"].get("fail", 0) > 0, (
        f"the kills hurt nobody: {stats}"
    )


def test_no_acknowledged_write_lost_under_pauses(tmp_path: Path) -> None:
    _check_run(tmp_path / "pause", "pause", "17", {"leader", "controller"})


def test_no_acknowledged_write_lost_under_partitions(tmp_path: Path) -> None:
    res = _check_run(
        tmp_path / "partition",
        "partition",
        "11",
        {"partition-isolate", "partition-majority", "leader-followers"},
    )
    assert res["netns"], "partitions ran without a namespace"
