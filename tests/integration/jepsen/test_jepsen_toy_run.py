"""The whole path, run -> check -> report, against the toy cluster as real processes.

The toy's planted bug (``ack-before-sync``: acknowledge, fsync later) must be found when the
lose-unsynced nemesis kills nodes, and must *not* show under a plain kill (the page cache
survives SIGKILL). The correct toy passes under kills, pauses and partitions.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from jepsen_support import require_netns

from jepsen_tests.history import History

pytestmark = pytest.mark.slow


def _run(out: Path, *args: str, timeout_s: float = 90) -> tuple[int, str, dict[str, Any]]:
    p = subprocess.run(
        [sys.executable, "-m", "jepsen_tests", "run", "--cluster", "toy", "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    results = (
        json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {}
    )
    return p.returncode, p.stdout + p.stderr, results


def _leftovers(marker: str) -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmd:
            found.append(f"{pid}: {cmd}")
    return found


def test_correct_toy_passes_under_kill_pause_and_partitions(tmp_path: Path) -> None:
    require_netns()
    out = tmp_path / "run"
    rc, log, res = _run(
        out,
        "--nemesis",
        "kill,pause,partition",
        "--time-limit",
        "8",
        "--seed",
        "10",
        "--tracks",
        "2",
    )
    assert rc == 0, log
    r = res["result"]
    assert r["valid"] is True and r["anomaly_types"] == []
    assert r["stats"]["sends"]["ok"] > 200
    kinds = {w.kind for w in History.load(out / "history.jsonl").fault_windows()}
    assert {"kill", "pause", "partition-isolate"} <= kinds, kinds
    # the partition was real: some ops to the isolated node did not succeed
    assert r["stats"]["sends"].get("fail", 0) + r["stats"]["sends"].get("info", 0) > 0
    assert all(res["final_reads_complete"].values())
    html = (out / "report.html").read_text()
    assert "VALID" in html and "<svg" in html and "partition-isolate" in html
    for f in ("history.jsonl", "schedule.json", "logs/n1.log"):
        assert (out / f).exists()
    assert not _leftovers(str(out))
    assert res["netns"] and not os.path.exists(f"/run/netns/{res['netns']}")


def test_planted_bug_is_found_by_lose_unsynced_and_recheck_agrees(tmp_path: Path) -> None:
    require_netns()
    out = tmp_path / "run"
    rc, log, res = _run(
        out,
        "--toy-mode",
        "ack-before-sync",
        "--toy-sync-interval-ms",
        "3000",
        "--nemesis",
        "lose-unsynced",
        "--time-limit",
        "7",
        "--seed",
        "3",
    )
    assert rc == 1, log
    r = res["result"]
    assert r["valid"] is False
    assert r["counts"].get("lost-middle", 0) + r["counts"].get("lost-write", 0) > 0, r["counts"]
    assert "inconsistent-offsets" in r["anomaly_types"]  # offsets were handed out again
    killed = {t for w in History.load(out / "history.jsonl").fault_windows() for t in w.targets}
    assert set(r["lost_by_node"]) <= killed  # only the nodes that lost power lost writes
    assert any("lose-unsynced" in k for k in r["lost_by_fault"])
    assert "INVALID" in (out / "report.html").read_text()

    p = subprocess.run(
        [sys.executable, "-m", "jepsen_tests", "check", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 1 and "valid: False" in p.stdout
    assert json.loads((out / "results.json").read_text())["result"]["counts"] == r["counts"]


def test_planted_bug_survives_plain_kill_because_the_page_cache_does(tmp_path: Path) -> None:
    require_netns()
    rc, log, res = _run(
        tmp_path / "run",
        "--toy-mode",
        "ack-before-sync",
        "--toy-sync-interval-ms",
        "3000",
        "--nemesis",
        "kill",
        "--time-limit",
        "6",
        "--seed",
        "3",
    )
    assert rc == 0, log
    assert res["result"]["valid"] is True


def test_metadata_workload_linearizable_on_correct_toy_and_not_on_the_buggy_one(
    tmp_path: Path,
) -> None:
    require_netns()
    rc, log, res = _run(
        tmp_path / "ok",
        "--workload",
        "metadata",
        "--nemesis",
        "kill",
        "--time-limit",
        "5",
        "--seed",
        "2",
    )
    assert rc == 0, log
    assert res["result"]["valid"] is True
    assert res["result"]["linearizable"]["keys"] == 4
    # One node, so every lose-unsynced hits the controller; acked topic changes are lost.
    rc, log, res = _run(
        tmp_path / "bad",
        "--nodes",
        "1",
        "--toy-mode",
        "ack-before-sync",
        "--toy-sync-interval-ms",
        "3000",
        "--workload",
        "metadata",
        "--nemesis",
        "lose-unsynced",
        "--time-limit",
        "8",
        "--seed",
        "2",
    )
    assert rc == 1, log
    assert res["result"]["valid"] is False
    # A lost create or delete shows up either way, by which the run's timing decides: a
    # describe that contradicts an acknowledged change (nonlinearizable), or the topic seen
    # under two ids after a lost create was made again (divergent definition)
    lost_change_anomalies = {"nonlinearizable-topics", "divergent-definition"}
    assert set(res["result"]["anomaly_types"]) & lost_change_anomalies, res["result"]["counts"]
    assert set(res["result"]["anomaly_types"]) <= lost_change_anomalies, res["result"]["counts"]


def test_longboat_run_refuses_proxy_faults_its_clients_would_not_feel(tmp_path: Path) -> None:
    # api.client dials the addresses brokers advertise, never the harness's per-link
    # proxies; only inside a namespace can the harness intercept its connections
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "jepsen_tests",
            "run",
            "--workload",
            "queue",
            "--nemesis",
            "delay",
            "--out",
            str(tmp_path / "x"),
            "--netns",
            "off",
            "--time-limit",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2, p.stdout + p.stderr
    assert "not the harness's TCP proxies" in p.stderr
    assert not (tmp_path / "x" / "history.jsonl").read_text().strip()


def test_ctrl_c_mid_run_cleans_up_processes_and_namespace(tmp_path: Path) -> None:
    require_netns()
    out = tmp_path / "run"
    # Output to a file, not a pipe nobody reads: a run that prints more than the pipe holds
    # (a slow start under load) would block on write and never exit after the SIGINT.
    console = (tmp_path / "console.txt").open("wb")
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jepsen_tests",
            "run",
            "--cluster",
            "toy",
            "--out",
            str(out),
            "--nemesis",
            "pause,partition",
            "--time-limit",
            "60",
            "--seed",
            "1",
        ],
        stdout=console,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            h = out / "history.jsonl"
            if h.exists() and h.stat().st_size > 20_000:
                break
            time.sleep(0.2)
        else:
            raise AssertionError("run did not get going")
        assert _leftovers(str(out)), "expected node processes while running"
        p.send_signal(signal.SIGINT)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGUSR1)  # the run prints every thread's stack (faulthandler)
            time.sleep(1)
            raise AssertionError(
                "the run did not exit 30 s after SIGINT:\n"
                + (tmp_path / "console.txt").read_text()[-6000:]
            ) from None
    finally:
        if p.poll() is None:
            p.kill()
        console.close()
    assert p.returncode != 0
    assert not _leftovers(str(out)), _leftovers(str(out))
    stale = (
        [n for n in os.listdir("/run/netns") if n.startswith(f"lbjt-{p.pid}-")]
        if os.path.isdir("/run/netns")
        else []
    )
    assert not stale
