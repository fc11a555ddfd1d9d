"""``PageCacheTrimmer``: keeps each partition log's page-cache footprint near a bound.

The asyncio shell around ``PartitionLog.drop_cache_behind``. The broker calls
``note_append(log)`` on the event loop after each append; once a log has ``step_bytes`` or
more lying over ``keep_bytes`` behind its end, a job in a worker thread asks them out of the
page cache (``posix_fadvise(DONTNEED)``), so the loop never waits on the kernel's write-back.
One job runs at a time; logs noted while it runs are taken by the next one.

Why a broker would give up cached log at all (Kafka keeps everything until memory runs
short): on a VM that hands the guest's free memory back to its host (free page reporting,
as on the Firecracker machines this project runs on), a page cache that only grows writes
every new page into memory the guest has not touched, at 220-300 MB/s against 1-3 GB/s for
pages it freed a moment ago. A bounded footprint makes the log's appends reuse the pages it
freed itself. Readers within ``keep_bytes`` of a log's end (followers, tailing consumers)
still read from memory; older reads go to the disk. docs/storage.md, "Page cache", has the
figures.

Threads: ``note_append`` and ``close`` on the event loop; the job (``_run``) in the
executor. They share ``_due`` and ``_running`` under ``_lock``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import Executor

from storage.log import PartitionLog

log = logging.getLogger(__name__)


class PageCacheTrimmer:
    """Invariants: at most one job runs (``_running``); a log in ``_due`` is taken by the
    running job, or by the one the loop starts when it ends."""

    def __init__(
        self, keep_bytes: int, *, step_bytes: int | None = None, executor: Executor | None = None
    ) -> None:
        """``keep_bytes``: the newest bytes of each log left in the cache. ``step_bytes``
        (default a quarter of ``keep_bytes``, at least 1 MiB): how much must lie behind
        that before a job runs, so each ask covers a sizeable range."""
        if keep_bytes < 0:
            raise ValueError(f"keep_bytes must be >= 0, not {keep_bytes}")
        self.keep_bytes = keep_bytes
        self.step_bytes = max(1 << 20, keep_bytes // 4) if step_bytes is None else step_bytes
        self._executor = executor
        self._lock = threading.Lock()
        self._due: dict[PartitionLog, None] = {}
        self._running = False
        self._job: asyncio.Future[None] | None = None
        self._closed = False
        self.bytes_asked = 0
        """Bytes asked out of the cache so far (each range counts once per ask)."""
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
        self._job = loop.run_in_executor(self._executor, self._run)

    def _run(self) -> None:
        """The job (a worker thread): drop every due log's range, until none is due."""
        while True:
            with self._lock:
                logs = list(self._due)
                self._due.clear()
                if not logs or self._closed:
                    self._running = False
                    return
            for plog in logs:
                try:
                    self.bytes_asked += plog.drop_cache_behind(self.keep_bytes)
                except OSError as e:
                    # Only a hint to the kernel: a failure costs memory, never data.
                    log.warning("dropping %s from the page cache: %r", plog.dir_path, e)
                except Exception:
                    log.exception("dropping %s from the page cache failed", plog.dir_path)

    async def close(self) -> None:
        """Stop taking work and wait for a running job."""
        self._closed = True
        job = self._job
        if job is not None:
            await asyncio.shield(job)
