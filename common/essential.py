"""Fail-stop for the tasks a node cannot serve without.

A node process runs a few long-lived asyncio tasks that everything else depends on: the Raft
node loop and the controller service on a controller; the metadata follower, the lifecycle
(registration and heartbeats), the replica timer, the replica fetchers and the group
coordinator on a broker. Before this module, when one of them died on an exception the
process went on answering: ``/v3/health`` said 200, brokers kept following a dead
controller, and nothing said why (an invalid committed record killed all three Raft node
tasks of a quorum that way, issue 17).

``Essentials`` watches such tasks. The first one that ends while the node is not stopping
fails the node: a CRITICAL log line names the task and why (its exception, or "cancelled" /
"returned"), ``failure`` is set for the health routes, and ``wait_failed()`` wakes the
process's main coroutine, which shuts down within a bound and exits non-zero, as etcd does on
a fatal error. Ends after ``expect_stop()`` are a clean shutdown and fail nothing.

Call everything on the event loop.
"""

from __future__ import annotations

import asyncio
import errno
import logging
from typing import Any

log = logging.getLogger(__name__)


class NodeFailedError(Exception):
    """An essential task of this node died; the message says which and why."""


def describe_error(exc: BaseException) -> str:
    """``Type: message`` for a log line an operator acts on; an ``OSError`` spells out its
    errno's name and its file (``OSError: ENOSPC on /data/...: No space left on device``), so
    a disk that is full reads differently from one that fails."""
    if isinstance(exc, OSError) and exc.errno is not None:
        code = errno.errorcode.get(exc.errno, str(exc.errno))
        where = f" on {exc.filename}" if exc.filename else ""
        return f"{type(exc).__name__}: {code}{where}: {exc.strerror or exc}"
    return f"{type(exc).__name__}: {exc}"


class Essentials:
    """The essential tasks of one node, and whether one of them has died."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.failure: str | None = None
        self._stopping = False
        self._failed = asyncio.Event()

    def watch(
        self, task: asyncio.Task[Any], what: str, *, only_errors: bool = False
    ) -> asyncio.Task[Any]:
        """Fail the node if ``task`` ends before ``expect_stop()``; with ``only_errors``, only
        if it ends on an exception (a replica fetcher is cancelled whenever its replica stops
        following, and that is no failure). Returns ``task``."""
        task.add_done_callback(lambda t: self._on_done(t, what, only_errors))
        return task

    def expect_stop(self) -> None:
        """From now on the node is shutting down: its tasks ending is what should happen."""
        self._stopping = True

    def fail(self, what: str, reason: str) -> None:
        """Fail the node for ``what`` (a task name). The first failure is the one kept."""
        if self.failure is not None:
            return
        self.failure = f"{what}: {reason}"
        log.critical("%s: essential task %s died: %s; the node stops", self.node, what, reason)
        self._failed.set()

    async def wait_failed(self) -> str:
        """Wait until an essential task has died; return what ``failure`` says."""
        await self._failed.wait()
        assert self.failure is not None
        return self.failure

    def _on_done(self, task: asyncio.Task[Any], what: str, only_errors: bool) -> None:
        exc = None if task.cancelled() else task.exception()  # retrieved: never "lost"
        if self._stopping or (only_errors and exc is None):
            return
        if exc is None:
            self.fail(what, "cancelled" if task.cancelled() else "returned")
            return
        log.error("%s: %s failed", self.node, what, exc_info=exc)
        self.fail(what, describe_error(exc))
