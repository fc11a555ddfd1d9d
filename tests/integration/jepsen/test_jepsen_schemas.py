"""The schemas workload against a real cluster: Schema Registry registrations and reads
through random brokers under kills (aimed mostly at the broker leading ``_schemas``) and
partitions, checked for lost registrations, reused or changed ids and gaps in versions
(`jepsen_tests.checkers.schemas`).

    python -m jepsen_tests run --workload schemas --nemesis kill,partition --time-limit 30 \\
        --seed 3 --fault-duration 2,8 --fault-gap 1,3
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from jepsen_support import require_netns

# In the extended tier (docs/testing.md): a real fault-injection run of its own; the fast
# suite keeps the queue workload (test_jepsen_longboat.py) and the transactional one.
pytestmark = [pytest.mark.slow, pytest.mark.extended]


def _run(out: Path, *args: str) -> dict[str, Any]:
    require_netns()
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "jepsen_tests",
            "run",
            "--cluster",
            "longboat",
            "--workload",
            "schemas",
            "--out",
            str(out),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    # A run that ends without its results says why on stderr: show it (CI keeps no files).
    assert (out / "results.json").exists(), (
        f"exit {p.returncode}; stdout tail:\n{p.stdout[-3000:]}\nstderr tail:\n{p.stderr[-6000:]}"
    )
    res: dict[str, Any] = json.loads((out / "results.json").read_text())
    return res


def test_registrations_survive_kills_of_the_schemas_leader_and_partitions(tmp_path: Path) -> None:
    res = _run(
        tmp_path / "schemas",
        "--nemesis",
        "kill,partition",
        "--time-limit",
        "30",
        "--seed",
        "3",
        "--fault-duration",
        "2,8",
        "--fault-gap",
        "1,3",
    )
    r = res["result"]
    assert r["valid"] is True, json.dumps({k: r[k] for k in ("counts", "anomalies")})
    # Enough happened to mean something: registrations acknowledged all through the run
    # (new subjects keep coming), every subject read at the end, and a kill aimed at the
    # broker leading _schemas that found it.
    assert r["acknowledged_registrations"] > 100, json.dumps(r["counts"])
    assert res["final_reads_complete"] and all(res["final_reads_complete"].values())
    schedule = json.loads((tmp_path / "schemas" / "schedule.json").read_text())
    assert any(s["spec"] == "schemas-leader" for s in schedule), schedule
    kills = [
        json.loads(line)
        for line in (tmp_path / "schemas" / "history.jsonl").read_text().splitlines()
        if '"nemesis"' in line and '"kill"' in line
    ]
    assert any(k["f"] == "start" and k["value"]["targets"] for k in kills), kills
