#!/usr/bin/env python3
"""Appending to a partition log with its page-cache footprint bounded, against the same
appends leaving the cache to grow (Kafka's way), in the same run (BENCHMARKS.md: JSON lines
on stdout, progress on stderr).

``storage.page_cache.append``: MB/s of ``PartitionLog.append`` (batches of 1,000 records of
100 bytes, no fsync, as a broker with acks=all writes), with ``drop_cache_behind(64 MiB)``
each time a 16 MiB step lies behind the kept tail (the broker's ``PageCacheTrimmer`` does it
from a worker thread; here it runs inline, so its cost is counted). Baseline: the same
appends with no dropping. Runs alternate, each in a fresh directory that is deleted after.

Why it matters and what it shows on this project's VMs: docs/storage.md, "Page cache". On a
machine whose memory is all backed (bare metal), expect a ratio near or a little below 1:
dropping then only costs the asks.

``--gb`` bytes per run (default 2), ``--runs`` pairs (default 3; ``--quick``: one pair of
0.5 GB, too little to run out of freed pages, so near 1), ``--dir`` where to write
(default a temporary directory under the system's; must be a disk filesystem: tmpfs keeps
its pages whatever is asked).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(HERE.parents[1]))

from scripts.bench._report import figure, progress  # noqa: E402
from storage.batch import encode_batch  # noqa: E402
from storage.config import LogConfig  # noqa: E402
from storage.fileio import RealFileLayer  # noqa: E402
from storage.log import PartitionLog  # noqa: E402

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
                log.drop_cache_behind(KEEP)
        secs = time.perf_counter() - t0
        log.close()
    return written / secs / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--gb", type=float, default=None)
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    args = ap.parse_args()
    gb = args.gb if args.gb is not None else (0.5 if args.quick else 2.0)
    runs = args.runs if args.runs is not None else (1 if args.quick else 3)
    nbytes = int(gb * (1 << 30))
    ours: list[float] = []
    base: list[float] = []
    for i in range(runs):
        for bounded in (True, False):
            mbs = one_run(args.dir, nbytes, bounded=bounded)
            (ours if bounded else base).append(mbs)
            progress(f"run {i + 1}/{runs} {'bounded' if bounded else 'growing'}: "
                     f"{mbs:,.0f} MB/s")
            time.sleep(2)  # let the last run's write-back settle before the next
    figure("storage.page_cache.append", "MB/s", ours,
           baseline="the same appends with the page cache left to grow (Kafka's way)",
           baseline_values=base,
           params={"keep_bytes": KEEP, "step_bytes": STEP, "bytes_per_run": nbytes,
                   "batch_records": 1000, "record_bytes": 100, "fsync": False})


if __name__ == "__main__":
    main()
