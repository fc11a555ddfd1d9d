"""GroupCommitter: one fsync covers many waiters across logs; truncation fails waiters;
an acknowledgement never precedes the fsync covering it; the next round starts without
waiting for the event loop."""

from __future__ import annotations

import asyncio
import collections
import functools
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import pytest
from storage_harness import batch, open_log

from storage.errors import StorageError
from storage.fileio import Buffer, FileHandle, FileLayer, ForwardingFileHandle, LazyFileLayer
from storage.flush_policy import FlushPolicy
from storage.group_commit import GroupCommitter
from storage.log import LogTruncatedError, PartitionLog


class GatedExecutor(ThreadPoolExecutor):
    """Runs nothing until ``open()``: lets a test line up waiters before a round starts."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.gate = threading.Event()

    def open(self) -> None:
        self.gate.set()

    def submit(
        self,
        fn: Callable[..., object],
        /,
        *args: object,  # type: ignore[override]
        **kwargs: object,
    ) -> Future[object]:
        def gated() -> object:
            assert self.gate.wait(10), "gate never opened"
            return fn(*args, **kwargs)

        return super().submit(gated)


class RecordingHandle(ForwardingFileHandle):
    def __init__(self, layer: RecordingFileLayer, inner: FileHandle) -> None:
        super().__init__(inner)
        self._layer = layer

    def write(self, data: Buffer) -> int:
        pos = self._inner.write(data)
        self._layer.record("write", self.path, pos + len(data))
        return pos

    def writev(self, parts: Sequence[Buffer]) -> int:
        pos = self._inner.writev(parts)
        self._layer.record("write", self.path, pos + sum(len(p) for p in parts))
        return pos

    def fsync(self) -> None:
        size = self._inner.size()
        n = self._layer.record("fsync_start", self.path, size)
        self._layer.before_fsync(n)
        self._inner.fsync()
        self._layer.record("fsync_end", self.path, size)


class RecordingFileLayer(FileLayer):
    """Wraps a layer and records, in order and from any thread, every append (the file
    size after it), the start and end of every fsync (the file size when it began), and
    whatever the test adds (``record("ack", ...)``). ``before_fsync(n)`` runs in the thread
    that fsyncs, before the ``n``-th fsync since the last ``reset()``."""

    def __init__(self, inner: FileLayer) -> None:
        self.inner = inner
        self.events: list[tuple[str, str, int]] = []
        self.fsync_started: collections.defaultdict[int, threading.Event] = collections.defaultdict(
            threading.Event
        )
        self.fsync_gate: dict[int, threading.Event] = {}
        self._fsyncs = 0
        self._lock = threading.Lock()

    def reset(self) -> None:
        with self._lock:
            self.events.clear()
            self.fsync_started.clear()
            self._fsyncs = 0

    def record(self, kind: str, path: str, size: int) -> int:
        with self._lock:
            self.events.append((kind, path, size))
            if kind == "fsync_start":
                self._fsyncs += 1
                self.fsync_started[self._fsyncs].set()
            return self._fsyncs

    def before_fsync(self, n: int) -> None:
        gate = self.fsync_gate.get(n)
        if gate is not None:
            assert gate.wait(10), f"fsync {n} was never let through"

    def open(self, path: str, *, create: bool = True) -> FileHandle:
        return RecordingHandle(self, self.inner.open(path, create=create))

    def replace(self, src: str, dst: str) -> None:
        self.inner.replace(src, dst)

    def unlink(self, path: str) -> None:
        self.inner.unlink(path)

    def fsync_dir(self, path: str) -> None:
        self.inner.fsync_dir(path)


def _ask(gc: GroupCommitter, log: PartitionLog) -> asyncio.Future[None]:
    """Append one batch and ask for it to be made durable: that append's waiter."""
    _, last = log.append(batch(), leader_epoch=0)
    return gc.durable_future(log, last + 1)


async def _until_flushed(log: PartitionLog, offset: int) -> None:
    """Wait (up to 0.5 s) for ``log`` to be flushed to ``offset`` with nobody asking."""
    for _ in range(100):
        if log.flushed_offset == offset:
            return
        await asyncio.sleep(0.005)


def test_one_flush_round_covers_every_waiter_across_logs(tmp_path) -> None:
    files = LazyFileLayer()
    logs = [open_log(tmp_path / f"p{i}", files) for i in range(3)]

    async def main() -> None:
        executor = GatedExecutor()
        gc = GroupCommitter(executor=executor)
        waits = []
        for log in logs:
            waits += [_ask(gc, log) for _ in range(10)]
        fsyncs = files.fsyncs
        executor.open()
        await asyncio.gather(*waits)
        assert gc.flushes == 1
        assert gc.log_flushes == 3
        assert files.fsyncs - fsyncs == 3  # one per log, not one per append
        assert all(log.flushed_offset == 10 for log in logs)
        assert files.unsynced_bytes() == 0
        await gc.close()
        executor.shutdown()

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
        executor = GatedExecutor()
        gc = GroupCommitter(executor=executor)
        log.append(batch(), leader_epoch=0)
        log.append(batch(), leader_epoch=0)
        w1 = gc.durable_future(log, 1)
        w2 = gc.durable_future(log, 2)
        log.truncate_to(1)  # both are waiting; the flush has not run yet
        executor.open()
        await w1
        with pytest.raises(LogTruncatedError):
            await w2
        with pytest.raises(LogTruncatedError):  # asked after the truncation
            await gc.durable(log, 2)
        await gc.close()
        executor.shutdown()

    asyncio.run(main())


def test_flush_policy_flushes_without_waiters(tmp_path) -> None:
    log = open_log(tmp_path, LazyFileLayer())

    async def main() -> None:
        gc = GroupCommitter(policy=FlushPolicy(messages_max=3))
        for _ in range(3):
            log.append(batch(), leader_epoch=0)
            gc.note_append(log, len(batch()))
        await _until_flushed(log, 3)
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
        await _until_flushed(log, 1)
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


def test_an_ack_never_precedes_the_fsync_covering_it(tmp_path) -> None:
    files = RecordingFileLayer(LazyFileLayer())
    log = open_log(tmp_path, files)
    seg = log.active_segment.log_path
    # A slow disk, so that appends land while an fsync runs (the overlap under test).
    files.before_fsync = lambda n: time.sleep(0.002)  # type: ignore[method-assign]
    files.reset()

    async def main() -> None:
        gc = GroupCommitter()

        def on_ack(end: int, _fut: asyncio.Future[None]) -> None:
            files.record("ack", seg, end)

        async def producer() -> None:
            pending: collections.deque[asyncio.Future[None]] = collections.deque()
            for _ in range(40):
                _, last = log.append(batch(20), leader_epoch=0)
                end = log.active_segment.size_bytes
                fut = gc.durable_future(log, last + 1)
                fut.add_done_callback(functools.partial(on_ack, end))
                pending.append(fut)
                if len(pending) >= 3:
                    await pending.popleft()
            while pending:
                await pending.popleft()

        await asyncio.gather(*(producer() for _ in range(4)))
        await gc.close()

    asyncio.run(main())
    durable = 0  # file size covered by the last fsync that has returned
    running: list[int] = []
    acks = writes_during_fsync = 0
    for kind, path, size in files.events:
        if path != seg:
            continue
        if kind == "fsync_start":
            running.append(size)
        elif kind == "fsync_end":
            running.remove(size)
            durable = max(durable, size)
        elif kind == "write":
            writes_during_fsync += bool(running)
        elif kind == "ack":
            assert size <= durable, f"ack of bytes up to {size}, fsynced only {durable}"
            acks += 1
    assert acks == 160
    assert writes_during_fsync > 0, "appending never overlapped an fsync"
    assert log.flushed_offset == log.log_end_offset == 160 * 20


def test_the_next_round_starts_while_the_loop_is_busy(tmp_path) -> None:
    files = RecordingFileLayer(LazyFileLayer())
    log = open_log(tmp_path, files)
    log.append(batch(), leader_epoch=0)  # the first append checkpoints the epoch (an fsync)
    log.flush()
    files.reset()
    files.fsync_gate[1] = threading.Event()

    async def main() -> None:
        gc = GroupCommitter()
        first = _ask(gc, log)
        assert files.fsync_started[1].wait(5)
        second = _ask(gc, log)  # during round 1: for round 2
        files.fsync_gate[1].set()
        # The loop is blocked here (no await): round 2 must start anyway, from the
        # flush job's own thread, rather than when the loop next comes round.
        assert files.fsync_started[2].wait(5), "round 2 waited for the event loop"
        assert not first.done()  # acks are handed out on the loop, which is busy
        await first
        await second
        assert gc.flushes == 2
        assert log.flushed_offset == 3
        await gc.close()

    asyncio.run(main())


def test_close_waits_for_the_round_in_flight(tmp_path) -> None:
    files = RecordingFileLayer(LazyFileLayer())
    log = open_log(tmp_path, files)
    files.reset()
    files.before_fsync = lambda n: time.sleep(0.02)  # type: ignore[method-assign]

    async def main() -> None:
        gc = GroupCommitter()
        fut = _ask(gc, log)
        await gc.close()
        assert fut.done() and fut.exception() is None
        assert log.flushed_offset == 1
        log.append(batch(), leader_epoch=0)
        with pytest.raises(RuntimeError, match="closed"):
            gc.durable_future(log, 2)

    asyncio.run(main())


def test_waiters_on_a_log_closed_without_flushing_fail(tmp_path) -> None:
    log = open_log(tmp_path, LazyFileLayer())

    async def main() -> None:
        executor = GatedExecutor()
        gc = GroupCommitter(executor=executor)
        fut = _ask(gc, log)
        log.abandon()  # a crash test's "close": no flush; the offsets will never be durable
        executor.open()
        with pytest.raises(StorageError, match="closed"):
            await fut
        await gc.close()
        executor.shutdown()

    asyncio.run(main())


def _round_of_three_held(
    tmp_path, hold_s: float, *, wait_for_company: bool = True
) -> tuple[RecordingFileLayer, GroupCommitter, GatedExecutor, PartitionLog]:
    """A log whose first round covers three waiters and is held in its fsync ``hold_s``."""
    files = RecordingFileLayer(LazyFileLayer())
    log = open_log(tmp_path, files)
    log.append(batch(), leader_epoch=0)  # the first append checkpoints the epoch (an fsync)
    log.flush()
    files.reset()
    files.before_fsync = lambda n: time.sleep(hold_s) if n == 1 else None  # type: ignore[method-assign]
    executor = GatedExecutor()
    gc = GroupCommitter(executor=executor, wait_for_company=wait_for_company)
    return files, gc, executor, log


@pytest.mark.parametrize("wait_for_company", [True, False])
def test_a_round_right_after_another_waits_for_company(tmp_path, wait_for_company) -> None:
    files, gc, executor, log = _round_of_three_held(
        tmp_path, 0.3, wait_for_company=wait_for_company
    )

    async def main() -> None:
        first = [_ask(gc, log) for _ in range(3)]
        executor.open()
        assert files.fsync_started[1].wait(5)
        second = [_ask(gc, log)]  # asks while round 1 runs: 1 of 3
        await asyncio.gather(*first)
        # Round 1 covered three asks and took 0.3 s: round 2 waits (up to 0.3 s) for
        # two more asks rather than fsyncing one batch now.
        for _ in range(2):
            await asyncio.sleep(0.02)
            second.append(_ask(gc, log))
        await asyncio.gather(*second)
        fsyncs = sum(kind == "fsync_start" for kind, _, _ in files.events)
        assert fsyncs == gc.flushes
        if wait_for_company:
            assert gc.flushes == 2
        else:  # round 2 fsyncs the lone batch at once; the other two come later
            assert gc.flushes > 2
        assert log.flushed_offset == 7
        await gc.close()
        executor.shutdown()

    asyncio.run(main())


def test_waiting_for_company_ends_after_the_last_rounds_duration(tmp_path) -> None:
    files, gc, executor, log = _round_of_three_held(tmp_path, 0.2)

    async def main() -> None:
        first = [_ask(gc, log) for _ in range(3)]
        executor.open()
        assert files.fsync_started[1].wait(5)
        lone = _ask(gc, log)
        await asyncio.gather(*first)
        t0 = time.monotonic()
        async with asyncio.timeout(5):
            await lone  # no company comes: it is flushed all the same
        assert time.monotonic() - t0 < 2
        assert gc.flushes == 2
        await gc.close()
        executor.shutdown()

    asyncio.run(main())


def test_a_round_after_an_idle_disk_starts_at_once(tmp_path) -> None:
    # Round 1 is held 1 s, so a waiter that waited for company would wait up to 1 s; the
    # bound below leaves a loaded CI machine 0.6 s for the lone fsync itself (a 0.3 s hold
    # against a 0.25 s bound left 0.05 s between passing and failing).
    _, gc, executor, log = _round_of_three_held(tmp_path, 1.0)

    async def main() -> None:
        first = [_ask(gc, log) for _ in range(3)]
        executor.open()
        await asyncio.gather(*first)  # nothing else asked: the job ended with the round
        _, last = log.append(batch(), leader_epoch=0)
        t0 = time.monotonic()
        await gc.durable_future(log, last + 1)
        assert time.monotonic() - t0 < 0.6, "a lone waiter waited for company"
        await gc.close()
        executor.shutdown()

    asyncio.run(main())


def test_waiters_on_a_log_closed_cleanly_succeed(tmp_path) -> None:
    log = open_log(tmp_path, LazyFileLayer())

    async def main() -> None:
        executor = GatedExecutor()
        gc = GroupCommitter(executor=executor)
        fut = _ask(gc, log)
        log.close()  # flushes everything: the waiter's offsets are durable
        executor.open()
        await fut
        await gc.close()
        executor.shutdown()

    asyncio.run(main())
