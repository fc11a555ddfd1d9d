"""``LogDirectory``: one data directory's health, as Kafka's ``LogDirFailureChannel``.

Owns whether a directory that holds logs can still be trusted, and who is told when it
cannot. A log (``PartitionLog``) belongs to one ``LogDirectory``; logs that share a disk
should share one object (the broker makes one per data directory), so that one failure
takes them all offline, as Kafka marks a whole log directory offline.

What fails a directory: an I/O error from a write, a read, a truncation or any fsync
(``storage.fileio.FsyncError``), ENOSPC from fsync included. After a failed fsync the
kernel may have dropped the unwritten pages and a later fsync succeeds without them
("fsyncgate", PostgreSQL 2018; Linux since 4.13 reports the error once), so nothing that was
not durable before the failure may ever be counted durable: once failed, a directory stays
failed for the life of the process. Every log in it then refuses appends, reads, flushes
and truncations with ``LogDirOfflineError``; ``flushed_offset`` never moves again. A restart
runs recovery, which trusts only the recovery point.

What does not fail a directory: ENOSPC or EDQUOT from a write. The partial write is cut off
and the append refused with ``OutOfSpaceError``; appends work again once space is freed.

Listeners (``add_failure_listener``, ``add_corruption_listener``) are called once per event,
in the thread that hit it (a group commit's worker thread for an fsync), with no storage
lock held: a listener on an event loop should hop there (``call_soon_threadsafe``).
"""

from __future__ import annotations

import errno as errno_codes
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

from storage.errors import CorruptSegmentError, LogDirOfflineError

log = logging.getLogger(__name__)

NO_SPACE_ERRNOS = frozenset({errno_codes.ENOSPC, errno_codes.EDQUOT})


@dataclass(frozen=True)
class LogDirFailure:
    """Why a directory went offline: the first I/O error seen in it."""

    dir_path: str
    path: str
    """The file (or log directory) whose operation failed."""
    operation: str
    """``write``, ``fsync``, ``read``, ``truncate``, ``roll``, ``checkpoint``, ``open``..."""
    errno: int | None
    message: str

    def describe(self) -> str:
        code = errno_codes.errorcode.get(self.errno, str(self.errno)) if self.errno else "?"
        return (
            f"log directory {self.dir_path} is offline: {self.operation} of {self.path} "
            f"failed with {code}: {self.message}"
        )


class LogDirectory:
    """Invariant: ``failure`` is set at most once and never cleared."""

    def __init__(self, path: str):
        self.path = os.path.abspath(path)
        self._lock = threading.Lock()
        self._failure: LogDirFailure | None = None
        self._failure_listeners: list[Callable[[LogDirFailure], None]] = []
        self._corruption_listeners: list[Callable[[CorruptSegmentError], None]] = []

    def __repr__(self) -> str:
        return f"LogDirectory({self.path!r}, {'offline' if self._failure else 'online'})"

    @property
    def online(self) -> bool:
        return self._failure is None

    @property
    def failure(self) -> LogDirFailure | None:
        return self._failure

    def add_failure_listener(self, fn: Callable[[LogDirFailure], None]) -> None:
        """``fn(failure)`` once, when the directory fails (at once if it has)."""
        with self._lock:
            failure = self._failure
            if failure is None:
                self._failure_listeners.append(fn)
        if failure is not None:
            fn(failure)

    def add_corruption_listener(self, fn: Callable[[CorruptSegmentError], None]) -> None:
        """``fn(error)`` whenever a log of this directory finds a corrupt batch below its
        recovery point (on read; corruption found on open is raised or reported by open)."""
        with self._lock:
            self._corruption_listeners.append(fn)

    def fail(self, error: OSError, *, operation: str, path: str) -> LogDirFailure:
        """Take the directory offline for ``error`` (idempotent: the first failure stays,
        and is what is returned); logs it and tells the listeners the first time."""
        with self._lock:
            if self._failure is not None:
                return self._failure
            failure = LogDirFailure(
                self.path, path, operation, error.errno, error.strerror or str(error)
            )
            self._failure = failure
            listeners, self._failure_listeners = self._failure_listeners, []
        log.error(
            "%s; its logs refuse appends and reads until the process restarts", failure.describe()
        )
        for fn in listeners:
            fn(failure)
        return failure

    def offline_error(self) -> LogDirOfflineError:
        failure = self._failure
        if failure is None:
            return LogDirOfflineError(f"log directory {self.path} is online", dir_path=self.path)
        return LogDirOfflineError(failure.describe(), dir_path=self.path)

    def check_or_raise(self) -> None:
        """Raise ``LogDirOfflineError`` if the directory has failed."""
        if self._failure is not None:
            raise self.offline_error()

    def report_corruption(self, error: CorruptSegmentError) -> None:
        log.error("%s", error)
        with self._lock:
            listeners = list(self._corruption_listeners)
        for fn in listeners:
            fn(error)
