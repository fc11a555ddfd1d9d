"""The metadata workload against a real cluster: topic creates, deletes and describes
through random brokers' v3 HTTP API, checked for linearizability per topic.

Without faults it found that a ``DELETE .../topics/{t}`` answered 404 from the receiving
broker's lagging image (fixed: the controller decides, and admin reads wait for the broker's
image to reach the controller's); the first test pins that.

Under kills and partitions it finds a create that took effect but answered "already exists"
(``created: false``; the next describe shows that very create's definition): the request's
first attempt at the controller timed out after it had been committed, and the retry found
the topic. Fixed: the HTTP API chooses the topic id and the controller answers a retry that
finds its own topic as created; the second test pins that. The same hazard for deletes
(third test: seed 5, a delete whose first attempt committed before the active controller was
killed answered "not found"; and a retried delete by name removed a newer topic of the same
name) is fixed too: deletes go by the id a LookupTopic read gives, a proposal whose leader
lost leadership counts as maybe applied, and a refusal after such an attempt answers 504
"outcome unknown".

    python -m jepsen_tests run --workload metadata --time-limit 15 --seed 1
    python -m jepsen_tests run --workload metadata --nemesis kill,partition --time-limit 30 \\
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
            "metadata",
            "--out",
            str(out),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=200,
    )
    # A run that ends without its results says why on stderr: show it (CI keeps no files).
    assert (out / "results.json").exists(), (
        f"exit {p.returncode}; stdout tail:\n{p.stdout[-3000:]}\nstderr tail:\n{p.stderr[-6000:]}"
    )
    res: dict[str, Any] = json.loads((out / "results.json").read_text())
    assert res["ops"] > 400, p.stdout + p.stderr[-2000:]
    return res


def test_topic_admin_is_linearizable_without_faults(tmp_path: Path) -> None:
    r = _run(tmp_path / "meta", "--time-limit", "15", "--seed", "1")["result"]
    assert r["valid"] is True, json.dumps(r["counts"])


def test_topic_admin_is_linearizable_under_kills_and_partitions(tmp_path: Path) -> None:
    # Seed 3 twice showed "finding 5": a delete recorded as refused had been applied. Its
    # first attempt reached a broker killed mid-request and aiohttp's resend was refused;
    # the client now records such a delete as unknown (tests/unit/jepsen).
    r = _run(
        tmp_path / "meta",
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
    )["result"]
    assert r["valid"] is True, json.dumps(r["counts"])


def test_topic_deletes_are_linearizable_across_a_controller_failover(tmp_path: Path) -> None:
    # Seed 5: a delete invoked 8 ms before the active controller is killed answers
    # "deleted: false" 1.1 s later; the topic existed and nothing else deleted it. The same
    # seed (and seed 3 of the test above) once showed finding 4: a create's retry brought
    # back a topic deleted after the create's first attempt took effect (fixed: the image
    # remembers deleted topic ids and the retry answers "created").
    r = _run(
        tmp_path / "meta",
        "--nemesis",
        "kill,partition",
        "--time-limit",
        "30",
        "--seed",
        "5",
        "--fault-duration",
        "2,8",
        "--fault-gap",
        "1,3",
    )["result"]
    assert r["valid"] is True, json.dumps(r["counts"])
