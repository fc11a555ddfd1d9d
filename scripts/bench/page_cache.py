#!/usr/bin/env python3
"""Appending to a partition log with its page-cache footprint bounded, against the same
appends leaving the cache to grow (Kafka's way), in the same run (JSON lines on stdout,
progress on stderr: _report.py).

``storage.page_cache.append``: MB/s of ``PartitionLog.append`` (batches of 1,000 records of
100 bytes, no fsync, as a broker with acks=all writes), with ``drop_cache_behind(64 MiB)``
each time a 16 MiB step lies behind the kept tail, settling as the broker's (the broker's
``PageCacheTrimmer`` does it from a worker thread; here it runs inline, so its cost is
counted). Baseline: the same
appends with no dropping. Runs alternate, each in a fresh directory that is deleted after.

Why it matters and what it shows on this project's VMs: docs/storage.md, "Page cache". On a
machine whose memory is all backed (bare metal), expect a ratio near or a little below 1:
dropping then only costs the asks.

``--gb`` bytes per run (default 2), ``--runs`` pairs (default 3; ``--quick``: one pair of
0.5 GB, too little to run out of freed pages, so near 1; ``--smoke``: one pair of 64 MiB),
``--dir`` where to write (default a temporary directory under the system's; must be a disk
filesystem: tmpfs keeps its pages whatever is asked).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from _report import add_size_flags, figure, progress, size

from storage.batch import encode_batch
from storage.config import LogConfig
from storage.fileio import RealFileLayer
from storage.log import PartitionLog
from storage.page_cache import SETTLE_MS

KEEP = 64 << 20
STEP = KEEP // 4


def one_run(root: Path, nbytes: int, *, bounded: bool) -> float:
    """MB/s appending ``nbytes`` to a fresh log under ``root``."""
    batch = encode_batch([(None, b"%08d" % i + b"x" * 92, 1_000, ()) for i in range(1000)])
    with tempfile.TemporaryDirectory(dir=root) as d:
        log = PartitionLog.open(d, LogConfig(), RealFileLayer())
        written = 0
        t0 = time.perf_counter()
        while written < nbytes:
            log.append(batch, leader_epoch=0)
            written += len(batch)
            if bounded and log.cache_drop_pending(KEEP) >= STEP:
                now_ms = time.monotonic_ns() // 1_000_000
                log.drop_cache_behind(KEEP, now_ms=now_ms, settle_ms=SETTLE_MS)
        secs = time.perf_counter() - t0
        log.close()
    return written / secs / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_size_flags(ap)
    ap.add_argument("--gb", type=float, default=None)
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    args = ap.parse_args()
    default_gb, default_runs, settle_s = {
        "smoke": (1 / 16, 1, 0.0),
        "quick": (0.5, 1, 2.0),
        "full": (2.0, 3, 2.0),
    }[size(args)]
    gb = args.gb if args.gb is not None else default_gb
    runs = args.runs if args.runs is not None else default_runs
    nbytes = int(gb * (1 << 30))
    ours: list[float] = []
    base: list[float] = []
    for i in range(runs):
        for bounded in (True, False):
            mbs = one_run(args.dir, nbytes, bounded=bounded)
            (ours if bounded else base).append(mbs)
            progress(f"run {i + 1}/{runs} {'bounded' if bounded else 'growing'}: {mbs:,.0f} MB/s")
            time.sleep(settle_s)  # let the last run's write-back settle before the next
    figure(
        "storage.page_cache.append",
        "MB/s",
        ours,
        baseline="the same appends with the page cache left to grow (Kafka's way)",
        baseline_values=base,
        params={
            "keep_bytes": KEEP,
            "step_bytes": STEP,
            "bytes_per_run": nbytes,
            "batch_records": 1000,
            "record_bytes": 100,
            "fsync": False,
        },
    )


if __name__ == "__main__":
    main()
