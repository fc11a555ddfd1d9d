"""Controllers on a disk that fails (issue 17): real processes on the lazy file layer, faults
armed through its control file (``LONGBOAT_LAZYFS_CONTROL``).

An EIO from an fsync of the Raft log, or ENOSPC from a write to it, stops the controller the
named way: exit status 70 and a log line naming the file and the errno, never the raw
exception of a second failure while closing (``lazy-disk-full`` saw exit 1 and an unhandled
``OutOfSpaceError: close in ...``). Restarted with space back, the controller catches up. A
Raft log damaged while the node was down (a term bit flipped, finding 9) stops the start the
same named way.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from api.node.localcluster import Quorum, wait_for
from storage.batch import LEADER_EPOCH_OFFSET

pytestmark = pytest.mark.slow

LAZY = "LONGBOAT_LAZYFS"
CONTROL = "LONGBOAT_LAZYFS_CONTROL"


def _start(q: Quorum, i: int, control: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Start controller ``i`` on the lazy layer, watching ``control`` (the child inherits
    the environment as it is while it is spawned)."""
    with monkeypatch.context() as m:
        m.setenv(LAZY, "1")
        m.setenv(CONTROL, str(control))
        q.start(i)


def _arm(control: Path, command: str) -> None:
    tmp = control.with_suffix(".tmp")
    tmp.write_text(command + "\n")
    os.replace(tmp, control)  # the node applies it and removes the file
    wait_for(f"{command} armed", lambda: not control.exists(), 10)


def test_eio_and_enospc_on_the_raft_log_stop_a_controller_with_status_70(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    q = Quorum(tmp_path, 3)
    controls = {i: tmp_path / f"lazyfs-control-{i}" for i in (1, 2, 3)}
    for i in (1, 2, 3):
        _start(q, i, controls[i], monkeypatch)
    try:
        leader = q.wait_active_leader(timeout_s=60)
        eio, full = [i for i in (1, 2, 3) if i != leader]
        # Followers persist the leader's NoOpRecords (one every 500 ms): faults hit at once.
        _arm(controls[eio], "fail-fsync 1 EIO __cluster_metadata-0")
        code = q.procs[eio].wait(timeout=60)
        log = q.log_tail(eio, 200)
        assert code == 70, log
        assert "essential task raft node loop died" in log, log
        assert "failed with EIO" in log and "__cluster_metadata-0" in log, log
        assert "longboat: node failed: controller" in log, log

        _arm(controls[full], "free-bytes 0")
        code = q.procs[full].wait(timeout=60)
        log = q.log_tail(full, 200)
        assert code == 70, log  # was 1: closing the log hit ENOSPC again, raw
        assert "essential task raft node loop died: OutOfSpaceError" in log, log
        assert "ENOSPC" in log and "__cluster_metadata-0" in log, log
        assert "closing it failed" in log, log  # said, and not what the process died of

        # Space back (a new process: the layer's free bytes are per process), it catches up.
        del q.procs[full]
        _start(q, full, controls[full], monkeypatch)
        commit = q.status(leader)["commit"]
        wait_for(
            f"controller {full} catches up",
            lambda: q.status(full)["commit"] >= commit and q.status(full)["leader_id"] == leader,
            60,
        )
    finally:
        q.stop_all()


def test_a_raft_log_damaged_while_down_stops_the_start_with_status_70(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    q = Quorum(tmp_path, 1)
    q.start(1)
    try:
        q.wait_active_leader(timeout_s=60)
        wait_for("a few NoOpRecords", lambda: q.status(1)["commit"] >= 5, 30)
    finally:
        q.stop_all()
    seg = tmp_path / "controller-1/data/__cluster_metadata-0/log/00000000000000000000.log"
    with open(seg, "r+b") as f:  # the first batch's term, low byte, bit 4: 1 read as 17
        f.seek(LEADER_EPOCH_OFFSET + 3)
        b = f.read(1)
        f.seek(LEADER_EPOCH_OFFSET + 3)
        f.write(bytes([b[0] ^ 16]))
    q.start(1)
    code = q.procs.pop(1).wait(timeout=60)
    log = q.log_tail(1, 60)
    assert code == 70, log
    assert "cannot open its metadata log" in log and "CorruptSegmentError" in log, log
    # (A clean shutdown: recovery scanned nothing; the term check over the whole log saw it.)
    assert str(seg) in log and "Raft entry 1 has term 17, above the term 1" in log, log
