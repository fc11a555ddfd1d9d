"""``PageCacheTrimmer``: keeps each partition log's page-cache footprint near a bound.

The asyncio shell around ``PartitionLog.drop_cache_behind``. The broker calls
``note_append(log)`` on the event loop after each append; once a log has ``step_bytes`` or
more lying over ``keep_bytes`` behind its end, a job in a worker thread asks them out of the
page cache (``posix_fadvise(DONTNEED)``), so the loop never waits on the kernel's write-back.
One job runs at a time; logs noted while it runs are taken by the next one.

Dirty pages (the active segment is not fsynced under Kafka's acks) are not dropped by
the first ask, which only starts their write-back; they go at an ask made after it ended.
Every job asks a log's once-asked bytes again, and bytes first asked ``settle_ms`` before
count as out. A log whose appends stop would get no further job, so the pages of its last
asks would stay for good: after each job the trimmer arms a timer for the earliest time a
log's once-asked bytes settle (``PartitionLog.cache_reask_at_ms``), and that timer's job
asks them again. The hot path (``note_append``) is unchanged: a comparison per append.

Why a broker would give up cached log at all (Kafka keeps everything until memory runs
short): on a VM that hands the guest's free memory back to its host (free page reporting,
as on the Firecracker machines this project runs on), a page cache that only grows writes
every new page into memory the guest has not touched, at 220-300 MB/s against 1-3 GB/s for
pages it freed a moment ago. A bounded footprint makes the log's appends reuse the pages it
freed itself. Readers within ``keep_bytes`` of a log's end (followers, tailing consumers)
still read from memory; older reads go to the disk. docs/storage.md, "Page cache", has the
figures.

Threads: ``note_append``, the timer and ``close`` on the event loop; the job (``_run``) in
the executor. They share ``_due``, ``_settling`` and ``_running`` under ``_lock``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor

from storage.log import PartitionLog

log = logging.getLogger(__name__)


SETTLE_MS = 1000
"""How long after a dirty range's first ask the trimmer asks it again with certainty: the
write-back the first ask started takes milliseconds (3-15 ms for a few MiB on this
project's VMs, also with other processes fsyncing); a second leaves room for a loaded disk
and costs only the memory of the bytes appended in the meantime, and only when an ask in
between came too early (every job asks the unsettled bytes again too)."""


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class PageCacheTrimmer:
    """Invariants: at most one job runs (``_running``); a log in ``_due`` is taken by the
    running job, or by the one the loop starts when it ends; a log in ``_settling`` (with
    the time its once-asked bytes settle) is taken by a job at or after that time: the
    running one, or the one the timer starts, armed whenever no job runs."""

    def __init__(
        self,
        keep_bytes: int,
        *,
        step_bytes: int | None = None,
        settle_ms: int = SETTLE_MS,
        executor: Executor | None = None,
        clock_ms: Callable[[], int] = _monotonic_ms,
    ) -> None:
        """``keep_bytes``: the newest bytes of each log left in the cache. ``step_bytes``
        (default a quarter of ``keep_bytes``, at least 1 MiB): how much must lie behind
        that before a job runs, so each ask covers a sizeable range. ``settle_ms``: how
        long after its first ask a range is asked again for the last time (``SETTLE_MS``).
        """
        if keep_bytes < 0:
            raise ValueError(f"keep_bytes must be >= 0, not {keep_bytes}")
        if settle_ms < 0:
            raise ValueError(f"settle_ms must be >= 0, not {settle_ms}")
        self.keep_bytes = keep_bytes
        self.step_bytes = max(1 << 20, keep_bytes // 4) if step_bytes is None else step_bytes
        self.settle_ms = settle_ms
        self._executor = executor
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._due: dict[PartitionLog, None] = {}
        self._settling: dict[PartitionLog, int] = {}
        """Logs with bytes asked once, and when the first of them settle (monotonic ms)."""
        self._running = False
        self._job: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at_ms = 0
        self._closed = False
        self.bytes_asked = 0
        """Bytes asked out of the cache so far (a range counts at each ask)."""
        self.jobs = 0

    def note_append(self, plog: PartitionLog) -> None:
        """After an append to ``plog`` (on the event loop): start a job if it has enough
        to drop."""
        if self._closed or plog.cache_drop_pending(self.keep_bytes) < self.step_bytes:
            return
        with self._lock:
            self._due[plog] = None
            if self._running:
                return
            self._running = True
        self._start()

    def _start(self) -> None:
        loop = asyncio.get_running_loop()
        self.jobs += 1
        self._job = job = loop.run_in_executor(self._executor, self._run)
        job.add_done_callback(lambda _: self._arm())

    def _run(self) -> None:
        """The job (a worker thread): drop every due log's range, and ask again the logs
        whose once-asked bytes have settled, until none is due."""
        while True:
            now_ms = self._clock_ms()
            with self._lock:
                logs = list(self._due)
                self._due.clear()
                for plog, at_ms in list(self._settling.items()):
                    if at_ms <= now_ms:
                        del self._settling[plog]
                        if plog not in logs:
                            logs.append(plog)
                if not logs or self._closed:
                    self._running = False
                    return
            for plog in logs:
                try:
                    self.bytes_asked += plog.drop_cache_behind(
                        self.keep_bytes, now_ms=self._clock_ms(), settle_ms=self.settle_ms
                    )
                except OSError as e:
                    # Only a hint to the kernel: a failure costs memory, never data.
                    log.warning("dropping %s from the page cache: %r", plog.dir_path, e)
                except Exception:
                    log.exception("dropping %s from the page cache failed", plog.dir_path)
                settles_ms = plog.cache_reask_at_ms(self.settle_ms)
                with self._lock:
                    if settles_ms is None:
                        self._settling.pop(plog, None)
                    else:
                        self._settling[plog] = settles_ms

    def _arm(self) -> None:
        """On the loop, after a job: time a job for when the first settling log settles."""
        with self._lock:
            if self._closed or self._running or not self._settling:
                return
            at_ms = min(self._settling.values())
        if self._timer is not None:
            if self._timer_at_ms <= at_ms:
                return
            self._timer.cancel()
        delay_s = max(0, at_ms - self._clock_ms()) / 1000
        self._timer_at_ms = at_ms
        self._timer = asyncio.get_running_loop().call_later(delay_s, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        with self._lock:
            if self._closed or self._running:
                return  # the running job takes the settled logs, or arms again when it ends
            self._running = True
        self._start()

    async def close(self) -> None:
        """Stop taking work and wait for a running job."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        job = self._job
        if job is not None:
            await asyncio.shield(job)
