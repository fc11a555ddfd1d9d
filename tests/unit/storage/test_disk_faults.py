"""Disk faults on the lazy file layer: fsync and write errors take the log directory
offline (fsyncgate), ENOSPC rolls the append back and is survivable, and a group commit never
resolves a waiter on a range that was not durable."""

from __future__ import annotations

import asyncio
import errno
import os

import pytest
from storage_harness import batch, offsets

from storage.batch import iter_batches, stamp
from storage.errors import (
    KafkaStorageError,
    LogDirOfflineError,
    OutOfSpaceError,
)
from storage.fileio import LazyFileLayer
from storage.group_commit import GroupCommitter
from storage.log import PartitionLog
from storage.logdir import LogDirectory


def lazy_log(
    path, files: LazyFileLayer, log_dir: LogDirectory | None = None, **kafka: str
) -> PartitionLog:
    from storage.config import LogConfig

    return PartitionLog.open(str(path), LogConfig.from_kafka(kafka), files, log_dir=log_dir)


# --------------------------------------------------------------------------- fsyncgate


def test_an_eio_on_the_second_of_two_fsyncs_resolves_no_waiter_and_covers_no_range(
    tmp_path,
) -> None:
    files = LazyFileLayer()
    log = lazy_log(tmp_path / "p0", files)
    failures = []
    log.log_dir.add_failure_listener(failures.append)

    async def main() -> None:
        gc = GroupCommitter()
        _, last = log.append(batch(3), leader_epoch=0)
        await gc.durable(log, last + 1)  # fsync 1 succeeds
        durable_end = log.flushed_offset
        assert durable_end == 3
        # Armed before anyone waits, and every append made first: the committer's worker
        # thread starts a round as soon as the first wait asks, so (CI saw both) a fault
        # armed later can miss that round, and a round that fails before the last wait is
        # asked for makes that ask itself refuse (the directory is offline by then).
        files.fail_fsync(1, match=".log")  # fsync 2 fails with EIO
        lasts = [log.append(batch(2), leader_epoch=0)[1] for _ in range(4)]
        results: list[object] = []
        waits = []
        for last in lasts:
            try:
                waits.append(gc.durable_future(log, last + 1))
            except LogDirOfflineError as e:
                results.append(e)
        results += await asyncio.gather(*waits, return_exceptions=True)
        assert len(results) == 4
        assert all(isinstance(r, LogDirOfflineError) for r in results), results
        assert log.flushed_offset == durable_end
        # The next fsync would succeed (the kernel reported the error once and dropped the
        # pages): nothing may try it, and the lost range is never counted as flushed.
        with pytest.raises(LogDirOfflineError):
            log.append(batch(), leader_epoch=0)
        with pytest.raises(LogDirOfflineError):
            log.flush()
        with pytest.raises(LogDirOfflineError):
            gc.durable_future(log, log.log_end_offset)
        with pytest.raises(LogDirOfflineError):
            log.read(0, 1000)
        assert log.flushed_offset == durable_end
        await gc.close()

    asyncio.run(main())
    assert len(failures) == 1 and failures[0].operation == "fsync"
    assert failures[0].errno == errno.EIO and failures[0].path.endswith(".log")
    assert not log.log_dir.online
    # What the failed fsync should have written is gone from the disk: after a restart
    # only the range fsynced before the failure is there, and recovery cuts the rest.
    log.close()  # offline: closes the files, writes nothing (no clean-shutdown marker)
    assert not os.path.exists(tmp_path / "p0" / "clean-shutdown")
    files.crash()
    reopened = lazy_log(tmp_path / "p0", LazyFileLayer())
    assert offsets(reopened) == [0, 1, 2]


def test_one_failed_log_takes_its_whole_directory_offline_and_no_other(tmp_path) -> None:
    files = LazyFileLayer()
    disk_a, disk_b = LogDirectory(str(tmp_path / "a")), LogDirectory(str(tmp_path / "b"))
    a0 = lazy_log(tmp_path / "a" / "t-0", files, disk_a)
    a1 = lazy_log(tmp_path / "a" / "t-1", files, disk_a)
    b0 = lazy_log(tmp_path / "b" / "t-0", files, disk_b)

    async def main() -> None:
        gc = GroupCommitter()
        files.fail_fsync(1, match=os.path.join("a", "t-0", "0000"))  # a0's segment
        lasts = {log: log.append(batch(2), leader_epoch=0)[1] for log in (a0, a1, b0)}
        outcomes = await asyncio.gather(
            *(gc.durable(log, last + 1) for log, last in lasts.items()), return_exceptions=True
        )
        results = dict(zip(lasts, outcomes, strict=True))
        assert isinstance(results[a0], LogDirOfflineError)
        assert results[b0] is None
        # a1's fsync may have run before a0's failed in the same round (then it is durable:
        # its own fsync succeeded); it is never resolved after the failure, nor left waiting.
        if results[a1] is not None:
            assert isinstance(results[a1], LogDirOfflineError)
            assert a1.flushed_offset == 0
        # Every log of the failed directory refuses from now on; the other disk goes on.
        for log in (a0, a1):
            with pytest.raises(LogDirOfflineError):
                log.append(batch(), leader_epoch=0)
        _, last = b0.append(batch(), leader_epoch=0)
        await gc.durable(b0, last + 1)
        assert b0.flushed_offset == 3
        await gc.close()

    asyncio.run(main())
    assert not disk_a.online and disk_b.online
    with pytest.raises(LogDirOfflineError):
        lazy_log(tmp_path / "a" / "t-2", files, disk_a)


def test_a_failed_fsync_while_rolling_fails_the_directory(tmp_path) -> None:
    files = LazyFileLayer()
    log = lazy_log(tmp_path, files, **{"segment.bytes": "200"})
    log.append(batch(2), leader_epoch=0)
    files.fail_fsync(1, match=".log")
    with pytest.raises(LogDirOfflineError):
        log.append(batch(2, value_bytes=150), leader_epoch=0)  # needs a roll: fsync fails
    assert (log.log_end_offset, log.flushed_offset, len(log.segments)) == (2, 0, 1)


def test_an_offline_directory_never_publishes_a_flush_that_raced_the_failure(tmp_path) -> None:
    """Two logs on one disk; the first's fsync succeeds, then the second's fails before
    the first publishes its flushed offset: the first must not publish either."""
    files = LazyFileLayer()
    disk = LogDirectory(str(tmp_path))
    first = lazy_log(tmp_path / "t-0", files, disk)
    second = lazy_log(tmp_path / "t-1", files, disk)
    first.append(batch(), leader_epoch=0)
    second.append(batch(), leader_epoch=0)
    seg = first.active_segment
    real_flush = seg.flush

    def flush_then_fail_the_other() -> None:
        real_flush()
        files.fail_fsync(1)
        with pytest.raises(LogDirOfflineError):
            second.flush()

    seg.flush = flush_then_fail_the_other  # type: ignore[method-assign]
    with pytest.raises(LogDirOfflineError):
        first.flush()
    assert first.flushed_offset == 0 == second.flushed_offset


# --------------------------------------------------------------------------- write errors


def test_an_eio_on_write_fails_the_directory_and_leaves_nothing_half_written(tmp_path) -> None:
    files = LazyFileLayer()
    log = lazy_log(tmp_path, files)
    log.append(batch(2), leader_epoch=0)
    size = log.active_segment.size_bytes
    files.fail_write(1, match=".log", partial_bytes=30)
    with pytest.raises(LogDirOfflineError) as ei:
        log.append(batch(3), leader_epoch=0)
    assert ei.value.code == "KAFKA_STORAGE_ERROR"
    assert log.log_end_offset == 2 and log.active_segment.size_bytes == size
    assert log.active_segment.log.size() == size  # the partial write was cut off again
    assert log.log_dir.failure is not None and log.log_dir.failure.operation == "append"
    with pytest.raises(LogDirOfflineError):
        log.append_as_follower(b"")
    with pytest.raises(LogDirOfflineError):
        log.truncate_to(0)


def test_enospc_rolls_the_append_back_and_appends_resume_once_space_is_freed(tmp_path) -> None:
    files = LazyFileLayer()
    log = lazy_log(tmp_path, files)
    log.append(batch(2), leader_epoch=0)
    size = log.active_segment.size_bytes
    files.set_free_bytes(len(batch(3)) // 2)  # a short write, then ENOSPC
    with pytest.raises(OutOfSpaceError) as ei:
        log.append(batch(3), leader_epoch=0)
    assert isinstance(ei.value, KafkaStorageError) and ei.value.code == "KAFKA_STORAGE_ERROR"
    assert "no space left" in str(ei.value)
    # Nothing of it is visible to a reader or a follower, nor left in the file.
    assert log.log_end_offset == 2 and log.active_segment.log.size() == size
    assert offsets(log) == [0, 1]
    assert log.log_dir.online
    with pytest.raises(OutOfSpaceError):
        log.append(batch(3), leader_epoch=0)  # still full: refused again, still clean
    files.set_free_bytes(None)
    assert log.append(batch(3), leader_epoch=0) == (2, 4)
    assert log.flush() == 5
    assert offsets(log) == [0, 1, 2, 3, 4]
    log.abandon()
    files.crash()
    assert offsets(lazy_log(tmp_path, LazyFileLayer())) == [0, 1, 2, 3, 4]


def test_enospc_in_a_roll_refuses_the_append_and_leaves_the_log_consistent(tmp_path) -> None:
    files = LazyFileLayer()
    log = lazy_log(tmp_path, files, **{"segment.bytes": "200"})
    log.append(batch(2), leader_epoch=0)
    files.fail_write(1, match=".index", error=errno.ENOSPC)  # the closing segment's index
    with pytest.raises(OutOfSpaceError):
        log.append(batch(2, value_bytes=150), leader_epoch=0)
    assert log.log_end_offset == 2 and log.log_dir.online
    assert log.append(batch(2, value_bytes=150), leader_epoch=0) == (2, 3)
    assert len(log.segments) == 2 and offsets(log) == [0, 1, 2, 3]
    log.close()
    assert offsets(lazy_log(tmp_path, files, **{"segment.bytes": "200"})) == [0, 1, 2, 3]


def test_a_follower_append_hitting_enospc_appends_nothing(tmp_path) -> None:
    files = LazyFileLayer()
    log = lazy_log(tmp_path, files)
    log.append(batch(2), leader_epoch=0)
    fetched = bytearray()
    for i, base in enumerate((2, 4, 6)):
        b = bytearray(batch(2))
        stamp(b, base, 1 + i)
        fetched += b
    files.set_free_bytes(len(batch(2)) + 10)  # the second of three batches does not fit
    with pytest.raises(OutOfSpaceError):
        log.append_as_follower(bytes(fetched))
    assert log.log_end_offset == 2 and offsets(log) == [0, 1]
    assert log.active_segment.log.size() == log.active_segment.size_bytes
    files.set_free_bytes(None)
    assert log.append_as_follower(bytes(fetched)) == (2, 7)
    assert [h.leader_epoch for _, h in iter_batches(log.read(0, 10_000).data)] == [0, 1, 2, 3]


def test_enospc_from_fsync_is_a_directory_failure(tmp_path) -> None:
    files = LazyFileLayer()
    log = lazy_log(tmp_path, files)
    log.append(batch(), leader_epoch=0)
    files.fail_fsync(1, error=errno.ENOSPC)
    with pytest.raises(LogDirOfflineError):
        log.flush()
    assert not log.log_dir.online and log.flushed_offset == 0


def test_enospc_lowering_the_recovery_point_refuses_the_truncation_and_changes_nothing(
    tmp_path,
) -> None:
    files = LazyFileLayer()
    log = lazy_log(tmp_path, files)
    for _ in range(3):
        log.append(batch(2), leader_epoch=0)
    log.flush()
    files.set_free_bytes(0)
    with pytest.raises(OutOfSpaceError):
        log.truncate_to(2)
    assert offsets(log) == list(range(6)) and log.flushed_offset == 6
    files.set_free_bytes(None)
    log.truncate_to(2)
    assert offsets(log) == [0, 1]


def test_an_io_error_on_read_fails_the_directory(tmp_path, monkeypatch) -> None:
    files = LazyFileLayer()
    log = lazy_log(tmp_path, files)
    log.append(batch(2), leader_epoch=0)
    handle = log.active_segment.log

    def eio(size: int, offset: int) -> bytes:
        raise OSError(errno.EIO, "Input/output error", handle.path)

    monkeypatch.setattr(handle, "pread", eio)
    with pytest.raises(LogDirOfflineError):
        log.read(0, 100)
    assert log.log_dir.failure is not None and log.log_dir.failure.operation == "read"


def test_closing_a_log_on_a_failed_flush_closes_its_files_and_raises(tmp_path) -> None:
    files = LazyFileLayer()
    log = lazy_log(tmp_path, files)
    log.append(batch(), leader_epoch=0)
    files.fail_fsync(1)
    with pytest.raises(LogDirOfflineError):
        log.close()
    assert log.closed and log.active_segment.log.closed
    assert not os.path.exists(tmp_path / "clean-shutdown")


def test_a_follower_append_undone_across_a_roll_lowers_the_recovery_point(tmp_path) -> None:
    files = LazyFileLayer()
    log = lazy_log(tmp_path, files, **{"segment.bytes": "300"})
    for _ in range(2):
        log.append(batch(2), leader_epoch=0)
    fetched = bytearray()
    for base in (4, 6, 8):
        b = bytearray(batch(2))
        stamp(b, base, 0)
        fetched += b
    # The second fetched batch rolls the log (fsyncing the first: the recovery point moves
    # past the start of this append); the third finds the disk full.
    files.fail_write(3, match=os.sep + "000", error=errno.ENOSPC)
    with pytest.raises(OutOfSpaceError):
        log.append_as_follower(bytes(fetched))
    assert log.log_end_offset == 4 and len(log.segments) == 1 and log.log_dir.online
    assert log.flushed_offset <= 4
    log.abandon()
    files.crash()
    reopened = lazy_log(tmp_path, LazyFileLayer(), **{"segment.bytes": "300"})
    assert reopened.log_end_offset <= 4  # never the undone offsets, never a gap over them
    assert offsets(reopened) == list(range(reopened.log_end_offset))
