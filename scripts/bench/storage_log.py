#!/usr/bin/env python3
"""Storage benchmarks: PartitionLog append (group fsync) and read against plain file I/O.

Figures (one JSON object per line on stdout; progress on stderr; medians over runs):

* ``storage.append``, ``storage.append_records``: 100-byte records in prebuilt batches of
  1,000, appended through ``PartitionLog.append`` by 8 concurrent producers, each with up
  to 5 appends awaiting ``GroupCommitter.durable_future`` (durable acks with group fsync).
  Baseline: the same bytes written by a plain ``os.write`` loop with exactly as many
  fsyncs as the log's files got during that run (counted at the file layer), spread evenly.
  ``params`` gives both fsync counts and the group committer's rounds (medians).
* ``storage.append_fewest_fsyncs``: the same appends against a stricter baseline, the plain
  loop fsyncing once per 40 batches: the fewest fsyncs any design can do when 8 x 5 acks
  are in flight (each ack needs an fsync after its append, and at most 40 appends wait at
  once). The group committer fsyncs more often than that (rounds overlap appends, so each
  covers less), and on a busy disk every fsync has a fixed cost: this figure shows the
  throughput is not bought by making the baseline fsync more.
* ``storage.read``: reading the whole log back from the page cache with
  ``PartitionLog.read(offset, 1 MiB)``. Baseline: sequential ``os.pread`` of 1 MiB chunks
  of the same segment file.
* ``storage.encode_batch``: microseconds to build one batch of 1,000 records. Baseline:
  ``msgpack.packb`` of the same record list (the body alone: no header, no CRC).

Usage: python scripts/bench/storage_log.py [--quick | --smoke] [--dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

import msgpack
from _report import add_size_flags, figure, progress, size

from storage.batch import Header, encode_batch
from storage.config import LogConfig
from storage.fileio import FileHandle, ForwardingFileHandle, RealFileLayer
from storage.group_commit import GroupCommitter
from storage.log import PartitionLog

RECORD_BYTES = 100
BATCH_RECORDS = 1000
PRODUCERS = 8
IN_FLIGHT = 5
READ_CHUNK_BYTES = 1 << 20


def make_batches(count: int) -> list[bytes]:
    """Distinct batches (so nothing is deduplicated anywhere), built before timing."""
    out = []
    for b in range(count):
        recs: list[tuple[bytes | None, bytes | None, int, list[Header]]] = [
            (None, (b"%08d" % (b * BATCH_RECORDS + i)).ljust(RECORD_BYTES, b"x"), 1000 + b, [])
            for i in range(BATCH_RECORDS)
        ]
        out.append(encode_batch(recs))
    return out


def _run_loop(coro: Any) -> Any:
    # The broker and controller processes run on uvloop (api.cli.quorum.run_loop), so the
    # append path is measured on the same loop.
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


class _CountingHandle(ForwardingFileHandle):
    """A real file that counts its fsyncs (one Python call more per append: ~0.1 µs)."""

    def __init__(self, layer: CountingFileLayer, inner: FileHandle):
        super().__init__(inner)
        self._layer = layer

    def fsync(self) -> None:
        self._inner.fsync()
        self._layer.fsyncs += 1


class CountingFileLayer(RealFileLayer):
    """The real layer, counting fsyncs of files and directories (the baseline's fsync
    count is taken from here, so both sides pay for the same number)."""

    def __init__(self) -> None:
        self.fsyncs = 0

    def open(self, path: str, *, create: bool = True) -> FileHandle:
        return _CountingHandle(self, super().open(path, create=create))

    def fsync_dir(self, path: str) -> None:
        super().fsync_dir(path)
        self.fsyncs += 1


async def append_run(dir_path: str, batches: list[bytes]) -> tuple[float, int, int, str]:
    """Seconds to append all batches with durable acks; fsyncs done meanwhile (file layer
    count); group commit rounds; the segment file."""
    files = CountingFileLayer()
    log = PartitionLog.open(dir_path, LogConfig(segment_bytes=(1 << 31) - 1), files)
    committer = GroupCommitter()
    fsyncs_before = files.fsyncs
    queue = list(reversed(batches))

    async def producer() -> None:
        # Each producer keeps up to IN_FLIGHT appends awaiting their durable ack, as a
        # Kafka producer pipelines requests (max.in.flight.requests.per.connection=5).
        pending: collections.deque[asyncio.Future[None]] = collections.deque()
        while queue:
            batch = queue.pop()
            _, last = log.append(batch, leader_epoch=0)
            pending.append(committer.durable_future(log, last + 1))
            if len(pending) >= IN_FLIGHT:
                await pending.popleft()
            else:
                await asyncio.sleep(0)
        while pending:
            await pending.popleft()

    t0 = time.perf_counter()
    await asyncio.gather(*(producer() for _ in range(PRODUCERS)))
    elapsed = time.perf_counter() - t0
    fsyncs = files.fsyncs - fsyncs_before
    await committer.close()
    assert log.flushed_offset == log.log_end_offset
    seg = log.active_segment.log_path
    log.close()
    return elapsed, fsyncs, committer.flushes, seg


def baseline_append_run(path: str, batches: list[bytes], fsyncs: int) -> tuple[float, int]:
    """A plain write loop over the same bytes with exactly ``fsyncs`` fsyncs (at least
    one, the last after the last write), spread evenly; seconds and fsyncs done."""
    n = len(batches)
    fsyncs = max(1, min(fsyncs, n))
    # fsync after batch i when i * fsyncs / n crosses an integer: exactly ``fsyncs`` times.
    sync_after = [(i * fsyncs) // n != ((i - 1) * fsyncs) // n for i in range(1, n + 1)]
    done = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    try:
        t0 = time.perf_counter()
        for b, sync in zip(batches, sync_after, strict=True):
            os.write(fd, b)
            if sync:
                os.fsync(fd)
                done += 1
        return time.perf_counter() - t0, done
    finally:
        os.close(fd)


def read_run(dir_path: str) -> tuple[float, int]:
    log = PartitionLog.open(dir_path, LogConfig(segment_bytes=(1 << 31) - 1), RealFileLayer())
    total = 0
    offset = 0
    end = log.log_end_offset
    t0 = time.perf_counter()
    while offset < end:
        r = log.read(offset, READ_CHUNK_BYTES)
        total += len(r.data)
        # The next offset is the last batch's end: one prefix look per batch, as a fetcher.
        offset = _next_offset(r.data)
    elapsed = time.perf_counter() - t0
    log.close()
    return elapsed, total


def _next_offset(data: bytes) -> int:
    from storage.batch import parse_header, peek_prefix

    pos = 0
    n = len(data)
    last_pos = 0
    while pos < n:
        last_pos = pos
        _, size = peek_prefix(data, pos)
        pos += size
    return parse_header(data, last_pos).next_offset


def baseline_read_run(path: str) -> tuple[float, int]:
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        total = 0
        pos = 0
        t0 = time.perf_counter()
        while pos < size:
            chunk = os.pread(fd, READ_CHUNK_BYTES, pos)
            total += len(chunk)
            pos += len(chunk)
        return time.perf_counter() - t0, total
    finally:
        os.close(fd)


def encode_figures(runs: int, reps: int) -> None:
    recs: list[tuple[bytes | None, bytes | None, int, list[Header]]] = [
        (None, b"x" * RECORD_BYTES, 1000 + i, []) for i in range(BATCH_RECORDS)
    ]
    body: list[list[object]] = [[i, i, None, b"x" * RECORD_BYTES, []] for i in range(BATCH_RECORDS)]
    enc, base = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(reps):
            encode_batch(recs)
        enc.append((time.perf_counter() - t0) / reps * 1e6)
        t0 = time.perf_counter()
        for _ in range(reps):
            msgpack.packb(body, use_bin_type=True)
        base.append((time.perf_counter() - t0) / reps * 1e6)
    figure(
        "storage.encode_batch",
        "us",
        enc,
        baseline="msgpack.packb of the same 1,000 records (body only)",
        baseline_values=base,
        higher_is_better=False,
        params={"record_bytes": RECORD_BYTES, "batch_records": BATCH_RECORDS},
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_size_flags(ap)
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    args = ap.parse_args()
    runs, total_mb, encode_reps = {
        "smoke": (1, 2, 5),
        "quick": (3, 48, 200),
        "full": (5, 256, 200),
    }[size(args)]
    batch_bytes = len(make_batches(1)[0])
    count = max(PRODUCERS, total_mb * (1 << 20) // batch_bytes)
    progress(
        f"storage bench: {count} batches of {BATCH_RECORDS} x {RECORD_BYTES} B "
        f"({count * batch_bytes / 1e6:.0f} MB per run), {runs} runs"
    )
    batches = make_batches(count)
    nbytes = sum(len(b) for b in batches)
    scratch = tempfile.mkdtemp(prefix="lb-bench-storage-", dir=args.dir)
    try:
        app, app_base, app_fewest, rd, rd_base = [], [], [], [], []
        fsync_counts, base_fsync_counts, round_counts = [], [], []
        for run in range(runs):
            d = os.path.join(scratch, f"log-{run}")
            elapsed, fsyncs, rounds, seg = _run_loop(append_run(d, batches))
            fsync_counts.append(fsyncs)
            round_counts.append(rounds)
            # The two baselines take turns going first, so neither always follows the
            # other's freshly written (and then truncated) file.
            plain_path = os.path.join(scratch, "plain.log")
            fewest = -(-count // (PRODUCERS * IN_FLIGHT))
            if run % 2:
                fewest_elapsed, fewest_fsyncs = baseline_append_run(plain_path, batches, fewest)
            base_elapsed, base_fsyncs = baseline_append_run(plain_path, batches, fsyncs)
            if not run % 2:
                fewest_elapsed, fewest_fsyncs = baseline_append_run(plain_path, batches, fewest)
            base_fsync_counts.append(base_fsyncs)
            app.append(nbytes / elapsed / 1e6)
            app_base.append(nbytes / base_elapsed / 1e6)
            app_fewest.append(nbytes / fewest_elapsed / 1e6)
            # Reads come from the page cache: the files were just written. Passes alternate
            # (ours, plain, ours, ...) and each side keeps its median, against the noise of
            # a shared machine.
            ours, plain = [], []
            for _ in range(3):
                r_elapsed, r_bytes = read_run(d)
                b_elapsed, b_bytes = baseline_read_run(seg)
                assert r_bytes == b_bytes == nbytes, (r_bytes, b_bytes, nbytes)
                ours.append(r_bytes / r_elapsed / 1e6)
                plain.append(b_bytes / b_elapsed / 1e6)
            rd.append(statistics.median(ours))
            rd_base.append(statistics.median(plain))
            progress(
                f"run {run + 1}/{runs}: append {app[-1]:.0f} MB/s ({fsyncs} fsyncs, "
                f"{rounds} rounds; plain {app_base[-1]:.0f}, {base_fsyncs} fsyncs; "
                f"plain {app_fewest[-1]:.0f}, {fewest_fsyncs} fsyncs), "
                f"read {rd[-1]:.0f} MB/s (plain {rd_base[-1]:.0f})"
            )
            shutil.rmtree(d)
        params = {
            "record_bytes": RECORD_BYTES,
            "batch_records": BATCH_RECORDS,
            "producers": PRODUCERS,
            "in_flight_per_producer": IN_FLIGHT,
            "mb_per_run": round(nbytes / 1e6),
            "fsyncs_per_run": statistics.median(fsync_counts),
            "baseline_fsyncs_per_run": statistics.median(base_fsync_counts),
            "group_commit_rounds_per_run": statistics.median(round_counts),
        }
        figure(
            "storage.append",
            "MB/s",
            app,
            baseline="os.write loop, same bytes, same fsync cadence",
            baseline_values=app_base,
            params=params,
        )
        figure(
            "storage.append_fewest_fsyncs",
            "MB/s",
            app,
            baseline="os.write loop, same bytes, one fsync per 40 batches (the fewest 8 x 5 "
            "in-flight acks allow)",
            baseline_values=app_fewest,
            params={**params, "baseline_fsyncs_per_run": fewest_fsyncs},
        )
        per_mb = BATCH_RECORDS * count / (nbytes / 1e6)
        figure(
            "storage.append_records",
            "records/s",
            [a * per_mb for a in app],
            baseline="os.write loop, same bytes, same fsync cadence",
            baseline_values=[b * per_mb for b in app_base],
            params=params,
        )
        figure(
            "storage.read",
            "MB/s",
            rd,
            baseline="sequential os.pread of the same file, 1 MiB chunks, page cache",
            baseline_values=rd_base,
            params={"max_bytes": READ_CHUNK_BYTES, "mb_per_run": round(nbytes / 1e6)},
        )
        encode_figures(runs, encode_reps)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
