"""Bounded page-cache footprint: ``PartitionLog.drop_cache_behind`` asks every byte more than
``keep_bytes`` behind the log's end out of the page cache, twice unless the segment is closed
(clean), the last time once its write-back has had ``settle_ms`` to end, never a byte of the
kept tail; ``PageCacheTrimmer`` runs it in a worker thread, and on a timer when no append
comes. The last tests check the real kernel: pages asked out are gone (``mincore``)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from page_residency import resident_pages
from storage_harness import open_log, read_all

from storage.batch import encode_batch
from storage.fileio import FileHandle, RealFileHandle, RealFileLayer
from storage.log import PartitionLog
from storage.page_cache import PageCacheTrimmer

KIB = 1 << 10
MIB = 1 << 20


class DropRecordingLayer(RealFileLayer):
    """Real files whose handles record every ``drop_cache`` (path, start, end) and then
    ask the kernel; ``gate``, when set, holds each ask until it opens."""

    def __init__(self) -> None:
        self.drops: list[tuple[str, int, int]] = []
        self.gate: threading.Event | None = None
        self.asking = threading.Event()

    def open(self, path: str, *, create: bool = True) -> FileHandle:
        flags = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC | (os.O_CREAT if create else 0)
        return _DropRecordingHandle(self, path, os.open(path, flags, 0o644))


class _DropRecordingHandle(RealFileHandle):
    def __init__(self, layer: DropRecordingLayer, path: str, fd: int) -> None:
        super().__init__(path, fd)
        self.layer = layer

    def drop_cache(self, offset: int, length: int) -> None:
        self.layer.asking.set()
        if self.layer.gate is not None:
            assert self.layer.gate.wait(10), "gate never opened"
        self.layer.drops.append((self.path, offset, offset + length))
        super().drop_cache(offset, length)


def fill(log: PartitionLog, nbytes: int, *, value_kib: int = 32) -> None:
    """Append batches of one ``value_kib`` record until the log grew by ``nbytes``."""
    start = log.size_bytes
    while log.size_bytes - start < nbytes:
        log.append(encode_batch([(None, b"v" * (value_kib * KIB), 1000, [])]), leader_epoch=0)


def times_asked(layer: DropRecordingLayer, path: str, pos: int) -> int:
    return sum(1 for p, lo, hi in layer.drops if p == path and lo <= pos < hi)


def test_every_byte_behind_the_tail_is_asked_twice_and_the_tail_never(tmp_path: object) -> None:
    layer = DropRecordingLayer()
    log = open_log(str(tmp_path), layer)
    keep = 4 * MIB
    fill(log, 3 * MIB)
    assert log.cache_drop_pending(keep) == 0
    assert log.drop_cache_behind(keep) == 0 and layer.drops == []
    fill(log, 6 * MIB)
    end = log.size_bytes
    assert log.cache_drop_pending(keep) == end - keep
    log.drop_cache_behind(keep)
    path = log.active_segment.log_path
    assert layer.drops == [(path, 0, end - keep)]
    assert log.cache_drop_pending(keep) == 0  # asked once: not pending, not done
    fill(log, 2 * MIB)
    end2 = log.size_bytes
    log.drop_cache_behind(keep)
    # The second ask covers the first range again (its dirty pages have been written back
    # since) and the new one.
    assert layer.drops[-1] == (path, 0, end2 - keep)
    log.drop_cache_behind(keep)  # nothing new: the once-asked part is asked again
    assert layer.drops[-1] == (path, end - keep, end2 - keep)
    assert log.drop_cache_behind(keep) == 0
    for pos in range(0, end2 - keep, 64 * KIB):
        assert times_asked(layer, path, pos) >= 2, pos
    for pos in range(end2 - keep, end2, 64 * KIB):
        assert times_asked(layer, path, pos) == 0, pos
    assert [r.offset for r in read_all(log)] == list(range(log.log_end_offset))


def test_once_asked_bytes_are_out_only_after_an_ask_settle_ms_later(tmp_path: object) -> None:
    """The write-back the first ask starts must have had time to end before an ask counts as
    the last: asks in between repeat the range but leave it waiting, and the log says when it
    settles (the time to ask again if no append comes)."""
    layer = DropRecordingLayer()
    log = open_log(str(tmp_path), layer)
    path = log.active_segment.log_path
    keep, settle = 1 * MIB, 1000
    assert log.cache_reask_at_ms(settle) is None
    fill(log, 3 * MIB)
    first = log.size_bytes - keep
    assert log.drop_cache_behind(keep, now_ms=10_000, settle_ms=settle) == first
    assert layer.drops == [(path, 0, first)]
    assert log.cache_reask_at_ms(settle) == 11_000
    # Nothing new and nothing settled: no ask at all.
    assert log.drop_cache_behind(keep, now_ms=10_500, settle_ms=settle) == 0
    fill(log, 1 * MIB)
    second = log.size_bytes - keep
    log.drop_cache_behind(keep, now_ms=10_600, settle_ms=settle)
    assert layer.drops[-1] == (path, 0, second)  # the unsettled bytes are asked again
    seg = log.active_segment
    assert (seg.cache_dropped, seg.cache_asked) == (0, second)
    assert log.cache_reask_at_ms(settle) == 11_000  # the first piece still leads
    # At 11 000 the first piece has settled: asked again and out; the second waits.
    log.drop_cache_behind(keep, now_ms=11_000, settle_ms=settle)
    assert layer.drops[-1] == (path, 0, second)
    assert (seg.cache_dropped, seg.cache_asks) == (first, [(second, 10_600)])
    assert log.cache_reask_at_ms(settle) == 11_600
    log.drop_cache_behind(keep, now_ms=11_600, settle_ms=settle)
    assert layer.drops[-1] == (path, first, second)
    assert (seg.cache_dropped, seg.cache_asks) == (second, [])
    assert log.cache_reask_at_ms(settle) is None
    assert log.drop_cache_behind(keep, now_ms=20_000, settle_ms=settle) == 0
    # Asks within an eighth of settle_ms share a piece (its first time): few pieces.
    fill(log, 1 * MIB)
    log.drop_cache_behind(keep, now_ms=30_000, settle_ms=settle)
    fill(log, 1 * MIB)
    log.drop_cache_behind(keep, now_ms=30_100, settle_ms=settle)
    assert seg.cache_asks == [(log.size_bytes - keep, 30_000)]
    # A truncation below the asked bytes cuts the pieces with the file.
    asked = seg.cache_asked
    log.truncate_to(log.log_end_offset * 3 // 4)
    cut = seg.size_bytes
    assert second < cut < asked
    assert (seg.cache_dropped, seg.cache_asked, seg.cache_asks) == (second, cut, [(cut, 30_000)])
    log.truncate_to(log.log_end_offset // 4)  # below the dropped bytes too: nothing waits
    assert (seg.cache_dropped, seg.cache_asks) == (seg.size_bytes, [])
    assert log.cache_reask_at_ms(settle) is None


def test_closed_segments_are_asked_once_and_the_walk_stops_at_them(tmp_path: object) -> None:
    layer = DropRecordingLayer()
    log = open_log(str(tmp_path), layer, **{"segment.bytes": str(2 * MIB)})
    keep = 3 * MIB
    fill(log, 12 * MIB)
    segs = log.segments
    assert len(segs) >= 6
    log.drop_cache_behind(keep)
    asked = Counter(p for p, _, _ in layer.drops)
    kept_from = log.size_bytes - keep
    at = 0
    for s in segs:
        if at + s.size_bytes <= kept_from and s is not log.active_segment:
            assert asked[s.log_path] == 1, s  # closed and behind the tail: once, whole
            assert s.cache_dropped == s.size_bytes
        elif at >= kept_from:
            assert asked[s.log_path] == 0, s
        at += s.size_bytes
    # Done segments are not walked again: the next drop touches only the newest ones.
    layer.drops.clear()
    fill(log, 1 * MIB)
    log.drop_cache_behind(keep)
    assert {p for p, _, _ in layer.drops} <= {s.log_path for s in log.segments[-3:]}


def test_marks_follow_a_truncation(tmp_path: object) -> None:
    layer = DropRecordingLayer()
    log = open_log(str(tmp_path), layer)
    keep = 1 * MIB
    fill(log, 5 * MIB)
    log.drop_cache_behind(keep)
    log.drop_cache_behind(keep)
    seg = log.active_segment
    assert seg.cache_dropped > 2 * MIB
    log.truncate_to(log.log_end_offset // 4)  # below what was asked
    cut = seg.size_bytes
    assert cut < 2 * MIB and log.cache_drop_pending(keep) == 0
    layer.drops.clear()
    fill(log, 4 * MIB)
    log.drop_cache_behind(keep)
    # The regrown bytes are asked although the marks had been above them before the cut.
    ((_, lo, hi),) = layer.drops
    assert lo <= cut and hi == log.size_bytes - keep


def test_trimmer_asks_in_a_worker_thread_one_job_at_a_time(tmp_path: Path) -> None:
    layer = DropRecordingLayer()
    logs = [open_log(str(tmp_path / f"p{i}"), layer) for i in range(2)]
    trimmer = PageCacheTrimmer(1 * MIB, step_bytes=1 * MIB, settle_ms=60_000)  # no timer
    loop_thread = threading.get_ident()
    threads: set[int] = set()

    async def main() -> None:
        fill(logs[0], 2 * MIB + 64 * KIB)
        layer.gate = threading.Event()
        trimmer.note_append(logs[0])
        assert await asyncio.to_thread(layer.asking.wait, 5), "no job started"
        # While the job is held in its first ask, the other log becomes due: no second job.
        fill(logs[1], 3 * MIB)
        trimmer.note_append(logs[1])
        trimmer.note_append(logs[0])
        assert trimmer.jobs == 1
        layer.gate.set()
        deadline = time.monotonic() + 5
        while logs[1].active_segment.cache_asked == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        await trimmer.close()

    orig = PartitionLog.drop_cache_behind

    def spy(self: PartitionLog, keep_bytes: int, **kw: int) -> int:
        threads.add(threading.get_ident())
        return orig(self, keep_bytes, **kw)

    PartitionLog.drop_cache_behind = spy  # type: ignore[method-assign]
    try:
        asyncio.run(main())
    finally:
        PartitionLog.drop_cache_behind = orig  # type: ignore[method-assign]
    assert trimmer.jobs == 1
    assert loop_thread not in threads and threads
    for plog in logs:
        assert plog.active_segment.cache_asked == plog.size_bytes - 1 * MIB
    assert trimmer.bytes_asked >= 3 * MIB


def test_trimmer_waits_for_a_step_before_asking(tmp_path: object) -> None:
    layer = DropRecordingLayer()
    log = open_log(str(tmp_path), layer)
    trimmer = PageCacheTrimmer(2 * MIB, step_bytes=1 * MIB)
    with pytest.raises(ValueError):
        PageCacheTrimmer(-1)

    async def main() -> None:
        fill(log, 2 * MIB + 512 * KIB)
        trimmer.note_append(log)  # half a step behind the tail: not yet
        assert trimmer.jobs == 0
        fill(log, 1 * MIB)
        trimmer.note_append(log)
        assert trimmer.jobs == 1
        await trimmer.close()

    asyncio.run(main())
    assert layer.drops and layer.drops[-1][2] == log.size_bytes - 2 * MIB


# ---------------------------------------------------------------------- the real kernel


def test_the_kernel_drops_what_was_asked_and_keeps_the_tail(tmp_path: object) -> None:
    log = open_log(str(tmp_path))
    keep = 2 * MIB
    fill(log, 12 * MIB)
    path, end = log.active_segment.log_path, log.size_bytes
    assert resident_pages(path, 0, end) * 4096 >= end - 64 * KIB, (
        "freshly written pages are not in the page cache: mincore does not see this "
        "filesystem's cache, so nothing below can be checked"
    )
    log.flush()  # clean pages: one ask drops them
    log.drop_cache_behind(keep)
    # The kernel drops whole pages only: the one holding the boundary stays.
    behind = resident_pages(path, 0, (end - keep) // 4096 * 4096)
    assert behind == 0, (
        f"{behind} pages behind the tail still cached after DONTNEED on clean pages: this "
        f"filesystem ({tmp_path}) keeps them (tmpfs does); the page-cache bound cannot work"
    )
    assert resident_pages(path, end - keep, end) * 4096 >= keep - 8 * KIB
    assert [r.offset for r in read_all(log)] == list(range(log.log_end_offset))  # from disk


def test_unsynced_pages_go_although_no_append_follows(tmp_path: object) -> None:
    """No fsync (Kafka's acks=all), one step appended and then nothing: the first ask only
    starts write-back, and the trimmer's timer asks again once it has settled."""
    layer = DropRecordingLayer()
    log = open_log(str(tmp_path), layer)
    keep = 2 * MIB
    trimmer = PageCacheTrimmer(keep, step_bytes=1 * MIB, settle_ms=100)
    fill(log, 12 * MIB)
    path, end = log.active_segment.log_path, log.size_bytes

    async def main() -> int:
        trimmer.note_append(log)
        deadline = time.monotonic() + 20
        while True:
            await asyncio.sleep(0.05)
            left = resident_pages(path, 0, (end - keep) // 4096 * 4096)
            if left == 0 or time.monotonic() > deadline:
                await asyncio.sleep(0.3)  # three settle periods: no timer comes back
                await trimmer.close()
                return left

    left = asyncio.run(main())
    assert left == 0, f"{left} pages still cached 20 s after the first ask"
    assert trimmer.jobs == 2  # the second came from the timer: nothing was appended
    assert layer.drops[:2] == [(path, 0, end - keep)] * 2
    assert log.cache_reask_at_ms(100) is None  # nothing left waiting: no more timers
    assert resident_pages(path, end - keep + 4096, end) > 0  # the tail stays
