"""The queue workload consuming through a consumer group, against a real Longboat cluster.

``python -m jepsen_tests run --consumers group`` as a user would: 3 controllers and 3
brokers, four workers that send and consume as members of one group (subscribe, poll, commit
after each poll; each member closed and replaced every 8-20 s), brokers and controllers
SIGKILLed on a seeded schedule. Asserts the checker's verdict (the group checks included)
and that the group really worked under the faults: polls returned records, commits were
acknowledged, and keys moved from one member to another, the new owner resuming from the
group's commits.

Seed 7 draws the cooperative-sticky assignor and kills the active controller, then two of
the three brokers (the group's coordinator among them). Faults last 2-6 s with 4-8 s
between: with 1-3 s gaps the group spends whole runs re-electing its coordinator (each
coordinator failover waits out the broker session timeout), and nothing is consumed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from jepsen_support import no_leftover_nodes, require_netns

from jepsen_tests.history import History

# In the extended tier (docs/testing.md): a real fault-injection run of its own; the fast
# suite keeps the queue workload (test_jepsen_longboat.py) and the transactional one.
pytestmark = [pytest.mark.slow, pytest.mark.extended]

ARGS = (
    "--consumers",
    "group",
    "--nemesis",
    "kill",
    "--seed",
    "7",
    "--time-limit",
    "30",
    "--fault-duration",
    "2,6",
    "--fault-gap",
    "4,8",
)


def test_group_consumers_lose_and_skip_nothing_under_kills(tmp_path: Path) -> None:
    require_netns()
    out = tmp_path / "group-kill"
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
        timeout=150,
    )
    log = p.stdout + p.stderr[-4000:]
    res_path = out / "results.json"
    assert res_path.exists(), f"no results in {out}:\n{log}"
    res = json.loads(res_path.read_text())
    r = res["result"]
    where = (
        f"run dir {out}; rerun: python -m jepsen_tests run {' '.join(ARGS)}\n"
        f"{json.dumps(r, indent=1)[:3000]}"
    )
    assert r["valid"] is True and r["anomaly_types"] == [], where
    assert p.returncode == 0, log
    assert all(res["final_reads_complete"].values()), where
    assert res["group_assignor"] == "cooperative-sticky"

    history = History.load(out / "history.jsonl")
    pairs = history.pairs()
    # (completion index, member, reads) of every ok poll by a group member
    group_polls = sorted(
        (q.complete.index, q.invoke.value["member"], q.value["reads"])
        for q in pairs
        if q.f == "poll"
        and q.complete is not None
        and q.type == "ok"
        and "member" in (q.invoke.value or {})
    )
    records = sum(len(recs) for _, _, reads in group_polls for recs in reads.values())
    commits = [q for q in pairs if q.f == "commit" and q.type == "ok"]
    assert records >= 100 and len(commits) >= 50, (len(group_polls), records, len(commits))
    assert len({q.invoke.value["member"] for q in commits}) >= 2, "one member did all commits"
    assert r["stats"]["group"]["commits"]["ok"] == len(commits)

    # A key that changed hands: read by one member, then by another after an `assigned`.
    owners: dict[str, list[str]] = defaultdict(list)  # key -> members that read it, in order
    for _, m, reads in group_polls:
        for k, recs in reads.items():
            if recs and (not owners[k] or owners[k][-1] != m):
                owners[k].append(m)
    assert any(len(ms) >= 2 for ms in owners.values()), owners

    schedule = json.loads((out / "schedule.json").read_text())
    assert len(history.fault_windows()) == len(schedule) >= 2, schedule
    no_leftover_nodes(out)
