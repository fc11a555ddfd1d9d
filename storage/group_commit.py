"""``GroupCommitter``: one fsync covers every append since the last one, across logs.

The asyncio shell around ``PartitionLog.flush``. Callers append (on the event loop), then
``await committer.durable(log, end_offset)``; one background task collects every log with
waiters (or whose ``FlushPolicy`` asks for a flush), fsyncs them all in a worker thread so
the loop keeps running, and then resolves every waiter whose offsets the flush covered.
Appends made while an fsync is in flight wait for the next one: under load each fsync
covers many appends, which is what makes durable acknowledgements cheap (BENCHMARKS.md:
a 1 KiB fsync costs ~0.2 ms; thousands of acks share it).

The broker awaits it before an ``acks=all`` leader answer is counted durable and the Raft
node before it answers AppendEntries or counts its own vote.

A waiter whose offsets are truncated away before they were flushed fails with
``LogTruncatedError``; a flush that fails (an I/O error) fails its log's waiters with that
error and the log is left to its owner (Kafka stops the log dir; so should the broker).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from concurrent.futures import Executor

from storage.flush_policy import CLEAN, FlushPolicy, Unflushed
from storage.log import LogTruncatedError, PartitionLog


class GroupCommitter:
    """Invariant: a future in ``_waiters[log]`` is resolved only once ``log.flushed_offset``
    is at least its offset, and only with success if no truncation cut below it."""

    def __init__(self, *, policy: FlushPolicy | None = None, executor: Executor | None = None,
                 clock_ms: Callable[[], int] | None = None):
        """``policy`` for every log, else each log's own ``flush.messages``/``flush.ms``.

        ``executor`` runs the fsyncs (default: the loop's default executor); ``clock_ms``
        gives milliseconds for ``flush.ms`` (default: the loop's monotonic clock).
        """
        self._policy = policy
        self._executor = executor
        self._clock_ms = clock_ms
        self._waiters: dict[PartitionLog, list[tuple[int, asyncio.Future[None]]]] = {}
        self._unflushed: dict[PartitionLog, Unflushed] = {}
        self._known: set[int] = set()
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._closing = False
        self.flushes = 0
        """Flush rounds done (each one fsync per dirty log)."""
        self.waiters_resolved = 0

    # ------------------------------------------------------------------ public

    async def durable(self, log: PartitionLog, offset: int) -> None:
        """Return once every record of ``log`` below ``offset`` is fsynced.

        Pass ``last_offset + 1`` of an append. Raises ``LogTruncatedError`` if those
        offsets are truncated first, or the flush's ``OSError``.
        """
        await self.durable_future(log, offset)

    def durable_future(self, log: PartitionLog, offset: int) -> asyncio.Future[None]:
        """``durable`` as a plain future, for callers that pipeline many appends and would
        rather not pay for a task each (call it on the event loop)."""
        self._ensure_started()
        assert self._loop is not None and self._wake is not None
        fut: asyncio.Future[None] = self._loop.create_future()
        if log.flushed_offset >= offset:
            fut.set_result(None)
            return fut
        if offset > log.log_end_offset:
            # Nothing appended will ever make these offsets durable: they were truncated
            # (or never appended, a caller's bug). Waiting would never end.
            raise LogTruncatedError(
                f"{log.dir_path}: offsets below {offset} are beyond the log end "
                f"{log.log_end_offset}")
        if self._closing:
            raise RuntimeError("group committer is closed")
        self._watch(log)
        self._waiters.setdefault(log, []).append((offset, fut))
        self._wake.set()
        return fut

    def note_append(self, log: PartitionLog, size_bytes: int, messages: int = 1) -> None:
        """Tell the committer about an append nobody awaits, for the flush policy."""
        self._ensure_started()
        now = self._now_ms()
        state = self._unflushed.get(log, CLEAN).after_append(size_bytes, messages, now)
        self._unflushed[log] = state
        self._watch(log)
        if self._policy_for(log).should_flush(state, now):
            assert self._wake is not None
            self._wake.set()

    async def close(self) -> None:
        """Flush what is waited on, then stop the background task."""
        self._closing = True
        if self._task is not None and self._wake is not None:
            self._wake.set()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    # ------------------------------------------------------------------ internals

    def _ensure_started(self) -> None:
        if self._task is None:
            self._loop = asyncio.get_running_loop()
            self._loop_thread = threading.get_ident()
            self._wake = asyncio.Event()
            self._task = self._loop.create_task(self._run(), name="group-commit")

    def _now_ms(self) -> int:
        if self._clock_ms is not None:
            return self._clock_ms()
        assert self._loop is not None
        return int(self._loop.time() * 1000)

    def _policy_for(self, log: PartitionLog) -> FlushPolicy:
        if self._policy is not None:
            return self._policy
        return FlushPolicy(messages_max=log.config.flush_messages, interval_ms=log.config.flush_ms)

    def _watch(self, log: PartitionLog) -> None:
        if id(log) not in self._known:
            self._known.add(id(log))
            log.add_truncate_listener(self._on_truncate)

    def _on_truncate(self, log: PartitionLog, new_end_offset: int) -> None:
        if self._loop is None:
            return
        if threading.get_ident() == self._loop_thread:
            self._fail_truncated(log, new_end_offset)
        else:
            self._loop.call_soon_threadsafe(self._fail_truncated, log, new_end_offset)

    def _fail_truncated(self, log: PartitionLog, new_end_offset: int) -> None:
        keep = []
        for offset, fut in self._waiters.get(log, []):
            if offset > new_end_offset:
                if not fut.done():
                    fut.set_exception(LogTruncatedError(
                        f"{log.dir_path}: offsets below {offset} were truncated to "
                        f"{new_end_offset} before they were flushed"))
            else:
                keep.append((offset, fut))
        if log in self._waiters:
            self._waiters[log] = keep

    def _due(self, now_ms: int) -> tuple[set[PartitionLog], float | None]:
        """Logs to flush now, and seconds until the next policy deadline."""
        due = {log for log, ws in self._waiters.items() if ws}
        next_ms: int | None = None
        for log, state in self._unflushed.items():
            policy = self._policy_for(log)
            if policy.should_flush(state, now_ms):
                due.add(log)
            else:
                d = policy.deadline_ms(state)
                if d is not None and (next_ms is None or d < next_ms):
                    next_ms = d
        timeout = None if next_ms is None else max(0.0, (next_ms - now_ms) / 1000)
        return due, timeout

    async def _run(self) -> None:
        assert self._loop is not None and self._wake is not None
        while True:
            due, timeout = self._due(self._now_ms())
            if not due:
                if self._closing:
                    return
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout)
                continue
            self._wake.clear()
            for log in due:
                self._unflushed.pop(log, None)
            logs = list(due)
            results = await self._loop.run_in_executor(self._executor, _flush_all, logs)
            self.flushes += 1
            for log, error in zip(logs, results, strict=True):
                self._resolve(log, error)
            # Yield once so appenders woken by these results can queue the next round.
            await asyncio.sleep(0)

    def _resolve(self, log: PartitionLog, error: BaseException | None) -> None:
        waiters = self._waiters.get(log, [])
        flushed = log.flushed_offset
        keep = []
        for offset, fut in waiters:
            if fut.done():
                continue
            if error is not None:
                fut.set_exception(error)
            elif offset <= flushed:
                fut.set_result(None)
                self.waiters_resolved += 1
            else:
                keep.append((offset, fut))
        if keep:
            self._waiters[log] = keep
        else:
            self._waiters.pop(log, None)


def _flush_all(logs: list[PartitionLog]) -> list[BaseException | None]:
    """Runs in the worker thread: fsync each log, collecting errors per log."""
    out: list[BaseException | None] = []
    for log in logs:
        try:
            log.flush()
            out.append(None)
        except Exception as e:
            out.append(e)
    return out
