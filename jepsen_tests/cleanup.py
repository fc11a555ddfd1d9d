"""Undo everything a run started, however it ends.

Whatever creates something outside this process (a child process, a network namespace, an
nftables table, a proxy thread) registers an undo callback here and unregisters it when it
undoes the thing itself. The callbacks run newest first at interpreter exit (atexit), and on
SIGINT/SIGTERM, where the handler runs them and then lets the signal do what it would have
done (KeyboardInterrupt for SIGINT, exit status 128+15 for SIGTERM). `try/finally` in the
runner covers exceptions; this module covers the rest.

A SIGKILL of the harness itself cannot be caught: child processes are started in their own
session and would survive it, and named namespaces would stay. `NetNamespace` names carry the
creating pid, and the next run sweeps namespaces whose creator is gone.
"""

from __future__ import annotations

import asyncio
import atexit
import signal
import sys
import threading
from collections.abc import Callable, Coroutine
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")

# Seconds a Ctrl-C'd run's tasks get to finish their cancellation before they are abandoned.
INTERRUPT_GRACE_S = 5.0

_lock = threading.RLock()
_undo: dict[int, tuple[str, Callable[[], None]]] = {}
_next = 0
_installed = False


def register(what: str, undo: Callable[[], None]) -> int:
    """Remember how to undo something; returns a token for `unregister`."""
    global _next
    _install()
    with _lock:
        _next += 1
        _undo[_next] = (what, undo)
        return _next


def unregister(token: int) -> None:
    with _lock:
        _undo.pop(token, None)


def run_all() -> None:
    """Run every pending undo, newest first; report failures and go on."""
    while True:
        with _lock:
            if not _undo:
                return
            token = max(_undo)
            what, fn = _undo.pop(token)
        try:
            fn()
        except Exception as e:  # cleanup must go on past one failure
            print(f"jepsen_tests cleanup: undoing {what} failed: {e!r}", file=sys.stderr)


def pending() -> list[str]:
    with _lock:
        return [what for _, (what, _) in sorted(_undo.items())]


def _install() -> None:
    global _installed
    if _installed:
        return
    _installed = True
    atexit.register(run_all)
    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be set from the main thread; atexit still covers
    for sig in (signal.SIGINT, signal.SIGTERM):
        previous = signal.getsignal(sig)
        signal.signal(sig, _make_handler(sig, previous))


def _make_handler(sig: int, previous: Any) -> Callable[[int, FrameType | None], None]:
    def handler(signum: int, frame: FrameType | None) -> None:
        run_all()
        if callable(previous):
            previous(signum, frame)
        elif sig == signal.SIGINT:
            raise KeyboardInterrupt
        else:
            sys.exit(128 + signum)

    return handler


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)``, except that the tasks left when ``main`` ends (or a Ctrl-C,
    a KeyboardInterrupt out of the loop, ends it) get ``INTERRUPT_GRACE_S`` to finish their
    cancellation and are then abandoned, their stacks printed: ``asyncio.run`` waits for
    them without a bound, and CI saw a Ctrl-C'd toy run still inside that wait 30 s later (a
    task that outlived its cancellation). After a Ctrl-C the signal handler has undone
    everything outside the process already, so nothing is left for such a task to clean up."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    interrupted = False
    try:
        return loop.run_until_complete(main)
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        try:
            _cancel_left_tasks(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
            if not interrupted:  # a worker thread may be the thing stuck: do not wait for it
                loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


def _cancel_left_tasks(loop: asyncio.AbstractEventLoop) -> None:
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for t in tasks:
        t.cancel()
    if not tasks:
        return
    _, pending = loop.run_until_complete(asyncio.wait(tasks, timeout=INTERRUPT_GRACE_S))
    for t in pending:
        print(
            f"jepsen_tests: a task outlived its cancellation by {INTERRUPT_GRACE_S} s; "
            f"abandoned: {t!r}",
            file=sys.stderr,
        )
        t.print_stack(file=sys.stderr)
