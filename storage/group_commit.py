"""``GroupCommitter``: one fsync covers every append since the last one, across logs.

The asyncio shell around ``PartitionLog.flush``. Callers append (on the event loop), then
``await committer.durable(log, end_offset)``; the waiter asks for its log to be flushed, and
a flush job in a worker thread (the executor's) does the fsyncs while the loop goes on
appending. The job runs rounds back to back for as long as anything is asked for, and ends
when nothing is:

* a round takes every log asked for since the last round began and fsyncs each one
  (``PartitionLog.flush``: everything appended to it so far), then hands the results to the
  loop, which resolves every waiter the round covered, and only those;
* appends made while a round runs ask for the next one, which the job starts as soon as the
  round ends, from its own thread: the disk does not wait for the loop to come round (the
  loop may be busy appending), and appending overlaps with fsyncing;
* except that a round following another one at once waits for company: if fewer waiters
  have asked than the previous round covered, it waits until as many have, or for at most
  as long as the previous round took. Without that, whenever the loop is slow to refill
  (a busy machine), the waiters released by one round split over the next two, and rounds
  only ever get smaller: three or four times the fsyncs for the same bytes, each with a
  fixed cost (a journal commit). A round after an idle disk starts at once: a lone waiter
  never waits for company.

Under load each round covers everything appended during the one before, which is what makes
durable acknowledgements cheap (a 1 KiB fsync costs ~0.2 ms on these machines; thousands of acks
share it). An earlier version ran each round from a loop task and let the released appenders
run before starting the next: every in-flight append then waited on the same fsync and the
loop sat idle during it, so appending and fsyncing took turns (docs/storage.md, "Durability").

The broker (``broker.replica_manager``) awaits it before answering an ``acks=1`` produce;
follower appends only feed the flush policy (``note_append``).

A waiter whose offsets were flushed succeeds, whatever happened to the log since. Otherwise:
one whose offsets are truncated away fails with ``LogTruncatedError``; a flush that fails
(an I/O error) takes the log's directory offline (``storage.logdir``) and fails the log's
waiters with ``LogDirOfflineError``; so does every later round on a log of that directory
(``PartitionLog.flush`` refuses without an fsync: fsyncgate), and a waiter asked for on
one is refused at once. No waiter on a range that was not durable when its directory
failed is ever resolved as durable, and none is left waiting. Logs of other directories
go on as before. Waiters on a log closed without a flush (``abandon``) fail with
``StorageError``.

Threads: every method is called on the event loop, except ``_flush_job`` and what it calls
(``_run_rounds``, ``_wait_for_company_locked``), which run in a worker thread.
They share only ``_asked``, ``_asks``, ``_asks_wanted`` and ``_job_running``, under ``_lock``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor

from storage.errors import StorageError
from storage.flush_policy import CLEAN, FlushPolicy, Unflushed
from storage.log import LogTruncatedError, PartitionLog

_RoundResult = list[tuple[PartitionLog, BaseException | None]]


class GroupCommitter:
    """Invariants: a future in ``_waiters[log]`` is resolved with success only once
    ``log.flushed_offset`` is at least its offset (so only after the fsync covering it has
    returned), and only if no truncation cut below it; a log with waiters is in ``_asked``
    or in the round the job is running; at most one flush job runs (``_job_running``)."""

    def __init__(
        self,
        *,
        policy: FlushPolicy | None = None,
        executor: Executor | None = None,
        clock_ms: Callable[[], int] | None = None,
        wait_for_company: bool = True,
    ):
        """``policy`` for every log, else each log's own ``flush.messages``/``flush.ms``.

        ``wait_for_company``: a round right after another waits for as many asks as that
        one covered (see the module doc). Off, rounds start the moment the last ends: in
        the storage benchmark ~7% more throughput on a lightly loaded machine, for two to
        four times the fsyncs (docs/storage.md).

        ``executor`` runs the flush job (default: the loop's default executor); it holds
        one of its threads while there is work. ``clock_ms`` gives milliseconds for
        ``flush.ms`` (default: the loop's monotonic clock).
        """
        self._policy = policy
        self._executor = executor
        self._clock_ms = clock_ms
        self._wait_for_company = wait_for_company
        self._waiters: dict[PartitionLog, list[tuple[int, asyncio.Future[None]]]] = {}
        self._unflushed: dict[PartitionLog, Unflushed] = {}
        self._known: set[int] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._lock = threading.Lock()
        self._asked: dict[PartitionLog, None] = {}
        """Logs to flush in the next round (insertion-ordered set). Under ``_lock``."""
        self._asks = 0
        """Asks (waiters, policy flushes) since the current round began. Under ``_lock``."""
        self._asks_wanted: int | None = None
        """While the job waits for company: the asks it waits for. Under ``_lock``."""
        self._company = threading.Condition(self._lock)
        self._job_running = False
        """A flush job is running or submitted. Under ``_lock``."""
        self._job: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at_ms: int | None = None
        self._closing = False
        self.flushes = 0
        """Flush rounds done (each one fsync per log asked for)."""
        self.log_flushes = 0
        """``PartitionLog.flush`` calls that succeeded, summed over rounds."""
        self.waiters_resolved = 0

    # ------------------------------------------------------------------ public

    async def durable(self, log: PartitionLog, offset: int) -> None:
        """Return once every record of ``log`` below ``offset`` is fsynced.

        Pass ``last_offset + 1`` of an append. Raises ``LogTruncatedError`` if those
        offsets are truncated first, or ``LogDirOfflineError`` if the log's directory
        failed before they were flushed.
        """
        await self.durable_future(log, offset)

    def durable_future(self, log: PartitionLog, offset: int) -> asyncio.Future[None]:
        """``durable`` as a plain future, for callers that pipeline many appends and would
        rather not pay for a task each (call it on the event loop)."""
        loop = self._ensure_started()
        fut: asyncio.Future[None] = loop.create_future()
        if log.flushed_offset >= offset:
            fut.set_result(None)
            return fut
        if offset > log.log_end_offset:
            # Nothing appended will ever make these offsets durable: they were truncated
            # (or never appended, a caller's bug). Waiting would never end.
            raise LogTruncatedError(
                f"{log.dir_path}: offsets below {offset} are beyond the log end "
                f"{log.log_end_offset}"
            )
        # Never durable now: the directory failed before they were flushed.
        log.log_dir.check_or_raise()
        if self._closing:
            raise RuntimeError("group committer is closed")
        self._watch(log)
        waiters = self._waiters.get(log)
        if waiters is None:
            self._waiters[log] = [(offset, fut)]
        else:
            waiters.append((offset, fut))
        # The next round flushes everything appended so far: the policy starts afresh.
        self._unflushed.pop(log, None)
        self._ask([log])
        return fut

    def note_append(self, log: PartitionLog, size_bytes: int, messages: int = 1) -> None:
        """Tell the committer about an append nobody awaits, for the flush policy."""
        self._ensure_started()
        now = self._now_ms()
        state = self._unflushed.get(log, CLEAN).after_append(size_bytes, messages, now)
        self._unflushed[log] = state
        self._watch(log)
        policy = self._policy_for(log)
        if policy.should_flush(state, now):
            self._unflushed.pop(log, None)
            self._ask([log])
        else:
            self._arm_timer(policy.deadline_ms(state), now)

    async def close(self) -> None:
        """Flush what is waited on, then stop (no timer, no flush job left running)."""
        self._closing = True
        self._cancel_timer()
        # A round's results may ask for another round (waiters it did not cover), which
        # starts a new job: wait until the last one has ended.
        while self._job is not None:
            job = self._job
            await job
            if self._job is job:
                self._job = None

    # ------------------------------------------------------------------ the flush job

    def _ask(self, logs: list[PartitionLog], *, again: bool = False) -> None:
        """Ask for ``logs`` to be flushed in the next round; start the job if it is idle.

        ``again``: for waiters that asked before (not new company for the next round).
        """
        with self._lock:
            for log in logs:
                self._asked[log] = None
            if not again:
                self._asks += 1
            if self._job_running:
                if self._asks_wanted is not None and self._asks >= self._asks_wanted:
                    self._company.notify()
                return
            self._job_running = True
        assert self._loop is not None
        try:
            self._job = self._loop.run_in_executor(self._executor, self._flush_job)
        except BaseException:
            with self._lock:
                self._job_running = False
            raise

    def _flush_job(self) -> None:
        """Worker thread: run rounds until nothing is asked for."""
        try:
            self._run_rounds()
        except BaseException:
            # A bug or a closed loop: let the next ask start a fresh job rather than
            # wait forever on this one.
            with self._lock:
                self._job_running = False
            raise

    def _run_rounds(self) -> None:
        assert self._loop is not None
        last_asks = 0  # asks the previous round of this job covered (0: none yet)
        last_s = 0.0  # and how long it took
        while True:
            with self._lock:
                if not self._asked:
                    self._job_running = False
                    return
                if self._wait_for_company and self._asks < last_asks:
                    self._wait_for_company_locked(last_asks, time.monotonic() + last_s)
                logs = list(self._asked)
                self._asked.clear()
                last_asks, self._asks = self._asks, 0
            t0 = time.monotonic()
            # Every waiter that asked for these logs appended before asking, and so before
            # the take above: each flush below (which snapshots the log end) covers it.
            results: _RoundResult = []
            for log in logs:
                try:
                    log.flush()
                    results.append((log, None))
                except Exception as e:
                    results.append((log, e))
            last_s = time.monotonic() - t0
            self._loop.call_soon_threadsafe(self._on_round_done, results)

    def _wait_for_company_locked(self, asks: int, deadline: float) -> None:
        """Worker thread, ``_lock`` held: wait until ``asks`` asks or ``deadline``."""
        self._asks_wanted = asks
        try:
            while self._asks < asks:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._company.wait(left)
        finally:
            self._asks_wanted = None

    def _on_round_done(self, results: _RoundResult) -> None:
        self.flushes += 1
        again = []
        for log, error in results:
            if error is None:
                self.log_flushes += 1
            if self._resolve(log, error):
                again.append(log)
        if again:
            # Waiters the round did not cover: most asked while it ran (their log is
            # asked for already); if a truncation raced the flush, some asked before it
            # began, and their offsets below the new end still wait.
            self._ask(again, again=True)

    def _resolve(self, log: PartitionLog, error: BaseException | None) -> bool:
        """Settle ``log``'s waiters after a round; True if some are left waiting."""
        waiters = self._waiters.get(log)
        if not waiters:
            return False
        flushed = log.flushed_offset
        if error is None and log.closed:
            # A closed log is never flushed again: what ``close`` did not flush (it flushes
            # all it has; ``abandon`` flushes nothing) will never be durable.
            error = StorageError(f"log {log.dir_path} is closed")
        keep = []
        for offset, fut in waiters:
            if fut.done():
                continue
            if offset <= flushed:  # durable, whatever happened to the log since
                fut.set_result(None)
                self.waiters_resolved += 1
            elif error is not None:
                fut.set_exception(error)
            else:
                keep.append((offset, fut))
        if keep:
            self._waiters[log] = keep
            return True
        del self._waiters[log]
        return False

    # ------------------------------------------------------------------ policy timer

    def _arm_timer(self, at_ms: int | None, now_ms: int) -> None:
        if at_ms is None or (self._timer_at_ms is not None and self._timer_at_ms <= at_ms):
            return
        assert self._loop is not None
        self._cancel_timer()
        self._timer_at_ms = at_ms
        self._timer = self._loop.call_later(max(0.0, (at_ms - now_ms) / 1000), self._on_timer)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        self._timer_at_ms = None

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at_ms = None
        if self._closing:
            return
        now = self._now_ms()
        due = []
        next_ms: int | None = None
        for log, state in self._unflushed.items():
            policy = self._policy_for(log)
            if policy.should_flush(state, now):
                due.append(log)
            else:
                d = policy.deadline_ms(state)
                if d is not None and (next_ms is None or d < next_ms):
                    next_ms = d
        for log in due:
            del self._unflushed[log]
        if due:
            self._ask(due)
        self._arm_timer(next_ms, now)

    # ------------------------------------------------------------------ internals

    def _ensure_started(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._loop_thread = threading.get_ident()
        return self._loop

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
                    fut.set_exception(
                        LogTruncatedError(
                            f"{log.dir_path}: offsets below {offset} were truncated to "
                            f"{new_end_offset} before they were flushed"
                        )
                    )
            else:
                keep.append((offset, fut))
        if log in self._waiters:
            self._waiters[log] = keep
