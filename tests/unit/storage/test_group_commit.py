"""GroupCommitter: one fsync covers many waiters across logs; truncation fails waiters."""

from __future__ import annotations

import asyncio

import pytest
from storage_harness import batch, open_log

from storage.fileio import LazyFileLayer
from storage.flush_policy import FlushPolicy
from storage.group_commit import GroupCommitter
from storage.log import LogTruncatedError


def test_one_flush_round_covers_every_waiter_across_logs(tmp_path) -> None:
    files = LazyFileLayer()
    logs = [open_log(tmp_path / f"p{i}", files) for i in range(3)]

    async def main() -> None:
        gc = GroupCommitter()
        waits = []
        for log in logs:
            for _ in range(10):
                _, last = log.append(batch(), leader_epoch=0)
                waits.append(gc.durable(log, last + 1))
        fsyncs = files.fsyncs
        await asyncio.gather(*waits)
        assert gc.flushes == 1
        assert files.fsyncs - fsyncs == 3  # one per log, not one per append
        assert all(log.flushed_offset == 10 for log in logs)
        assert files.unsynced_bytes() == 0
        await gc.close()

    asyncio.run(main())


def test_durable_returns_at_once_when_already_flushed(tmp_path) -> None:
    log = open_log(tmp_path)
    log.append(batch(), leader_epoch=0)
    log.flush()

    async def main() -> None:
        gc = GroupCommitter()
        await gc.durable(log, 1)
        assert gc.flushes == 0

    asyncio.run(main())


def test_appends_during_a_flush_wait_for_the_next_one(tmp_path) -> None:
    log = open_log(tmp_path, LazyFileLayer())

    async def main() -> None:
        gc = GroupCommitter()
        results = []

        async def producer(i: int) -> None:
            _, last = log.append(batch(), leader_epoch=0)
            await gc.durable(log, last + 1)
            results.append(log.flushed_offset >= last + 1)

        await asyncio.gather(*(producer(i) for i in range(50)))
        assert all(results) and len(results) == 50
        assert gc.flushes <= 50
        await gc.close()

    asyncio.run(main())


def test_truncation_fails_waiters_on_the_truncated_offsets(tmp_path) -> None:
    log = open_log(tmp_path, LazyFileLayer())

    async def main() -> None:
        gc = GroupCommitter()
        log.append(batch(), leader_epoch=0)
        log.append(batch(), leader_epoch=0)
        w1 = asyncio.ensure_future(gc.durable(log, 1))
        w2 = asyncio.ensure_future(gc.durable(log, 2))
        await asyncio.sleep(0)  # both are waiting; the flush has not run yet
        log.truncate_to(1)
        await w1
        with pytest.raises(LogTruncatedError):
            await w2
        with pytest.raises(LogTruncatedError):  # asked after the truncation
            await gc.durable(log, 2)
        await gc.close()

    asyncio.run(main())


def test_flush_policy_flushes_without_waiters(tmp_path) -> None:
    log = open_log(tmp_path, LazyFileLayer())

    async def main() -> None:
        gc = GroupCommitter(policy=FlushPolicy(messages_max=3))
        for _ in range(3):
            log.append(batch(), leader_epoch=0)
            gc.note_append(log, len(batch()))
        for _ in range(100):
            if log.flushed_offset == 3:
                break
            await asyncio.sleep(0.005)
        assert log.flushed_offset == 3
        await gc.close()

    asyncio.run(main())


def test_flush_ms_timer_fires(tmp_path) -> None:
    log = open_log(tmp_path, LazyFileLayer(), **{"flush.ms": "20"})

    async def main() -> None:
        gc = GroupCommitter()
        log.append(batch(), leader_epoch=0)
        gc.note_append(log, len(batch()))
        await asyncio.sleep(0.005)
        assert log.flushed_offset == 0
        for _ in range(100):
            if log.flushed_offset == 1:
                break
            await asyncio.sleep(0.005)
        assert log.flushed_offset == 1
        await gc.close()

    asyncio.run(main())


def test_a_failed_fsync_fails_that_logs_waiters(tmp_path, monkeypatch) -> None:
    log = open_log(tmp_path / "bad", LazyFileLayer())
    good = open_log(tmp_path / "good", LazyFileLayer())

    def broken_flush() -> int:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(log, "flush", broken_flush)

    async def main() -> None:
        gc = GroupCommitter()
        log.append(batch(), leader_epoch=0)
        good.append(batch(), leader_epoch=0)
        bad_wait = asyncio.ensure_future(gc.durable(log, 1))
        await gc.durable(good, 1)
        with pytest.raises(OSError, match="Input/output"):
            await bad_wait
        await gc.close()

    asyncio.run(main())
