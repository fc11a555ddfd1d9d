"""The hardening nemeses in one short run against a real Longboat cluster (CI's share).

One ``python -m jepsen_tests run`` with a failed disk (EIO from write-back on a broker), a
wall-clock strobe on the active controller, a one-way partition around a partition leader and
reordering between the controller and the other nodes, each once (seed 52, drawn with
`jepsen_tests.nemesis.schedule.generate`). Asserts the verdict, that each fault happened where
it was meant to (the disk filesystem mounted, the write-back errors seen by the node, the
intercepting proxy carrying the links), and that nothing is left behind: no node process, no
mount, no namespace. About 45 s. The long runs are in docs/fault-injection.md ("Hardening
nemeses").
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from jepsen_support import no_leftover_nodes, require_netns

from jepsen_tests.history import History

# In the extended tier (docs/testing.md): a real fault-injection run of its own; the fast
# suite keeps the queue workload (test_jepsen_longboat.py) and the transactional one.
pytestmark = [pytest.mark.slow, pytest.mark.extended]

ARGS = (
    "--nemesis",
    "partition-oneway,reorder,clock-strobe,disk-eio",
    "--seed",
    "52",
    "--time-limit",
    "24",
    "--fault-duration",
    "2,4",
    "--fault-gap",
    "1,2",
)


def test_hardening_nemeses_hit_where_meant_and_lose_nothing(tmp_path: Path) -> None:
    require_netns()
    out = tmp_path / "run"
    p = subprocess.run(
        [sys.executable, "-m", "jepsen_tests", "run", "--out", str(out), *ARGS],
        capture_output=True,
        text=True,
        timeout=170,
    )
    log = p.stdout + p.stderr[-4000:]
    res = json.loads((out / "results.json").read_text())
    r = res["result"]
    where = f"run dir {out}; rerun: python -m jepsen_tests run {' '.join(ARGS)}\n{log}"
    assert r["valid"] is True and r["anomaly_types"] == [], where
    assert p.returncode == 0, where
    assert all(res["final_reads_complete"].values()), where
    assert r["stats"]["sends"]["ok"] > 100, where

    windows = History.load(out / "history.jsonl").fault_windows()
    kinds = {w.kind: w for w in windows}
    assert set(kinds) == {"partition-oneway", "reorder", "clock-strobe", "disk-eio"}, windows
    assert kinds["disk-eio"].targets == ("b2",)
    assert kinds["clock-strobe"].targets and kinds["clock-strobe"].targets[0].startswith("q")
    # the broker saw its disk fail (EIO from a write-back), and every node ran on its own
    # filesystem, now unmounted
    assert "Input/output error" in (out / "logs" / "b2.log").read_text(), where
    assert sorted(f.name for f in (out / "disks").glob("*.img")) == [
        f"{n}.img" for n in ("b1", "b2", "b3", "q1", "q2", "q3")
    ]
    mounts = Path("/proc/mounts").read_text()
    assert str(out) not in mounts
    assert (out / "clock" / "libwallclock.so").exists()
    assert (
        res["netns"]
        not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    )
    no_leftover_nodes(out)
