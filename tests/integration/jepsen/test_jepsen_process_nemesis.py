"""SIGSTOP/SIGCONT and SIGKILL/restart on a real child process; clock jumps via faketime."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from jepsen_support import require_faketime

from jepsen_tests.history import Recorder
from jepsen_tests.nemesis import Fault, FaultInjectionUnavailable
from jepsen_tests.nemesis.clock import ClockNemesis
from jepsen_tests.nemesis.process import (
    NodeProcess,
    ProcessNemesis,
    freezer_unavailable_reason,
    wait_until,
)

TICKER = """
import sys, time
path = sys.argv[1]
for _ in range(2000):
    with open(path, "a") as f:
        f.write(f"{time.time():.3f}\\n")
    time.sleep(0.02)
"""


def _ticks(path: Path) -> list[float]:
    try:
        return [float(x) for x in path.read_text().split()]
    except (OSError, ValueError):
        return []


def test_pause_stops_progress_and_kill_restarts_with_a_new_pid(tmp_path: Path) -> None:
    out = tmp_path / "ticks"
    p = NodeProcess("t", [sys.executable, "-c", TICKER, str(out)], tmp_path / "t.log")
    rec = Recorder()
    nem = ProcessNemesis({"t": p}, rec)
    try:
        p.start()
        assert wait_until(lambda: len(_ticks(out)) > 3, 5)

        pause = Fault("pause", ("t",))
        nem.start(pause)
        time.sleep(0.1)
        n = len(_ticks(out))
        time.sleep(0.4)
        assert len(_ticks(out)) == n, "a stopped process made progress"
        assert p.alive()
        nem.stop(pause)
        assert wait_until(lambda: len(_ticks(out)) > n + 3, 5)

        first_pid = p.pid
        kill = Fault("kill", ("t",))
        nem.start(kill)
        assert not p.alive()
        n = len(_ticks(out))
        time.sleep(0.2)
        assert len(_ticks(out)) == n
        nem.stop(kill)
        assert p.alive() and p.pid != first_pid and p.starts == 2
        assert wait_until(lambda: len(_ticks(out)) > n + 3, 5)

        nem.start(Fault("pause", ("t",)))
        nem.heal_all()  # resumes what is paused
        assert not p.paused
        n = len(_ticks(out))
        assert wait_until(lambda: len(_ticks(out)) > n + 3, 5)
        kinds = [(w.kind, w.targets) for w in rec.history().fault_windows()]
        assert kinds == [("pause", ("t",)), ("kill", ("t",)), ("pause", ("t",))]
        assert "start #2" in p.log_path.read_text()
    finally:
        p.destroy()
    assert not p.alive()


def test_freeze_stops_the_whole_tree_and_thaw_removes_the_cgroup(tmp_path: Path) -> None:
    reason = freezer_unavailable_reason()
    if reason is not None:
        pytest.fail(f"cannot test the freezer on this machine: {reason}")
    out = tmp_path / "ticks"
    child_out = tmp_path / "child-ticks"
    # a parent that runs a ticking child and ticks itself: the freezer must stop both
    tree = (
        "import subprocess, sys\n"
        f"subprocess.Popen([sys.executable, '-c', {TICKER!r}, {str(child_out)!r}])\n"
        f"exec(compile({TICKER!r}, 't', 'exec'), {{}}, {{}})\n"
    )
    p = NodeProcess("t", [sys.executable, "-c", tree, str(out)], tmp_path / "t.log")
    rec = Recorder()
    nem = ProcessNemesis({"t": p}, rec)
    try:
        p.start()
        assert wait_until(lambda: len(_ticks(out)) > 3 and len(_ticks(child_out)) > 3, 5)
        f = Fault("freeze", ("t",))
        nem.start(f)
        time.sleep(0.1)
        n, m = len(_ticks(out)), len(_ticks(child_out))
        time.sleep(0.4)
        assert (len(_ticks(out)), len(_ticks(child_out))) == (n, m), "frozen tree progressed"
        cg = nem.freezers["t"].dir
        assert cg.exists()
        nem.stop(f)
        assert not cg.exists()
        assert wait_until(lambda: len(_ticks(out)) > n + 3 and len(_ticks(child_out)) > m + 3, 5)
    finally:
        p.destroy()


def test_lose_unsynced_refuses_nodes_started_without_lazyfs(tmp_path: Path) -> None:
    p = NodeProcess("t", [sys.executable, "-c", "import time; time.sleep(30)"], tmp_path / "t.log")
    nem = ProcessNemesis({"t": p}, Recorder())
    try:
        p.start()
        try:
            nem.start(Fault("lose-unsynced", ("t",)))
        except FaultInjectionUnavailable as e:
            assert "LONGBOAT_LAZYFS" in str(e)
        else:
            raise AssertionError("lose-unsynced on a node without the lazy layer must refuse")
    finally:
        p.destroy()


def test_clock_bump_moves_one_process_clock_and_back(tmp_path: Path) -> None:
    require_faketime()
    rec = Recorder()
    clock = ClockNemesis(["t"], tmp_path / "clock", rec)
    out = tmp_path / "ticks"
    p = NodeProcess(
        "t", [sys.executable, "-c", TICKER, str(out)], tmp_path / "t.log", env=clock.env_for("t")
    )
    try:
        p.start()
        assert wait_until(lambda: len(_ticks(out)) > 3, 5)
        f = Fault("clock-bump", ("t",), {"delta_s": 120})
        clock.start(f)
        assert wait_until(lambda: _ticks(out)[-1] > time.time() + 100, 5)
        clock.stop(f)
        assert wait_until(lambda: abs(_ticks(out)[-1] - time.time()) < 5, 5)
    finally:
        p.destroy()
