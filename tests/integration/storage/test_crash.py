"""Crash tests: SIGKILL a real writer, or crash the lazy file layer, and recover.

After every crash the reopened log must be a clean prefix of what was written (values in
offset order, CRCs valid, ``longboat log verify`` clean) holding every record that was
acknowledged as synced.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from storage.batch import decode_records, encode_batch, iter_batches
from storage.config import LogConfig
from storage.dump import verify_dir
from storage.fileio import LAZYFS_ENV, LazyFileLayer, RealFileLayer
from storage.log import PartitionLog

CHILD = Path(__file__).with_name("crash_child.py")
ROOT = Path(__file__).resolve().parents[3]


def _check_prefix(log: PartitionLog) -> int:
    """Every record's value names its own offset; returns the number of records."""
    n = 0
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).data
        assert data, f"no data at {offset} below the log end {log.log_end_offset}"
        for pos, h in iter_batches(data):
            for r in decode_records(data[pos : pos + h.size]):
                assert r.offset == n and r.value is not None
                assert r.value.startswith(b"value-%d" % r.offset)
                n += 1
            offset = h.next_offset
    assert n == log.log_end_offset
    return n


def _run_and_kill(log_dir: Path, lazy: bool, acks_wanted: int, *extra: str) -> int:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if lazy:
        env[LAZYFS_ENV] = "1"
    else:
        env.pop(LAZYFS_ENV, None)
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), str(log_dir), *extra],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    acked = 0
    seen = 0
    deadline = time.monotonic() + 30
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            acked = max(acked, int(line.split()[1]))
            seen += 1
            if seen >= acks_wanted or time.monotonic() > deadline:
                break
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert seen, "the child never acknowledged a flush"
    return acked


@pytest.mark.parametrize("lazy", [False, True], ids=["real", "lazyfs"])
def test_sigkill_keeps_every_acknowledged_record(tmp_path, lazy) -> None:
    log_dir = tmp_path / "p0"
    acked_total = 0
    start = 0
    for round_ in range(3):  # kill it repeatedly; each run continues the same log
        acked = _run_and_kill(log_dir, lazy, acks_wanted=10 + 7 * round_)
        acked_total = max(acked_total, acked)
        # Was a write-back cut by the kill (Linux stops a large write at a fatal signal)?
        torn = bool(verify_dir(str(log_dir))[1])
        log = PartitionLog.open(str(log_dir), LogConfig(segment_bytes=64 * 1024), RealFileLayer())
        assert log.log_end_offset >= acked_total
        if lazy and not torn:
            # Unsynced bytes lived only in the child's memory: the log ends exactly at one
            # of the child's flushes (every 5 appends of 1 + i % 7 records) ...
            flush_points = set()
            end = start
            for i in range(100_000):
                end += 1 + i % 7
                if (i + 1) % 5 == 0:
                    flush_points.add(end)
            # ... or where a segment rolled (a roll fsyncs the segment it closes).
            at_roll = not 0 < log.segments[-1].size_bytes < 60 * 1024
            assert log.log_end_offset in flush_points or at_roll
        start = log.log_end_offset
        _check_prefix(log)
        log.close()
        count, problems = verify_dir(str(log_dir))
        assert problems == [] and count > 0


@pytest.mark.parametrize("lazy", [False, True], ids=["real", "lazyfs"])
def test_sigkill_keeps_every_record_acknowledged_by_group_commit(tmp_path, lazy) -> None:
    log_dir = tmp_path / "p0"
    acked_total = 0
    for _ in range(2):
        acked_total = max(acked_total, _run_and_kill(log_dir, lazy, 40, "--group-commit"))
        log = PartitionLog.open(str(log_dir), LogConfig(segment_bytes=64 * 1024), RealFileLayer())
        assert log.log_end_offset >= acked_total
        _check_prefix(log)
        log.close()
    assert verify_dir(str(log_dir))[1] == []


@pytest.mark.parametrize("seed", range(25))
def test_lazy_crash_loses_only_unsynced_bytes_and_recovers_a_clean_prefix(tmp_path, seed) -> None:
    rng = random.Random(seed)
    cfg = LogConfig(segment_bytes=rng.choice([600, 2000, 1 << 20]), index_interval_bytes=128)
    files = LazyFileLayer()
    log = PartitionLog.open(str(tmp_path), cfg, files)
    synced = 0
    for round_ in range(3):
        for _ in range(rng.randrange(1, 40)):
            seq = log.log_end_offset
            n = rng.randrange(1, 6)
            log.append(
                encode_batch([(None, b"value-%d" % (seq + j), 0, []) for j in range(n)]),
                leader_epoch=round_,
            )
            if rng.random() < 0.2:
                synced = log.flush()
        written = log.log_end_offset
        log.abandon()
        files.crash(rng)
        files = LazyFileLayer()
        log = PartitionLog.open(str(tmp_path), cfg, files)
        assert synced <= log.log_end_offset <= written
        assert _check_prefix(log) == log.log_end_offset
        synced = log.flushed_offset
    log.close()
    assert verify_dir(str(tmp_path))[1] == []
