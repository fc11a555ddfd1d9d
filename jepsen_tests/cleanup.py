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
    """``asyncio.run(main)`` for a run that a Ctrl-C may stop.

    A SIGINT while ``main`` runs undoes everything outside the process at once (`run_all`)
    and then *cancels* ``main`` from inside the loop, as ``asyncio.Runner`` does with the
    default handler; KeyboardInterrupt is raised once the loop has unwound. Raised from the
    signal handler instead, at whatever bytecode the loop was running, it can drop a ready
    callback the loop had just taken off its queue (a task's wake-up): that task never runs
    again, its cancellation never arrives, and ``asyncio.run`` waits for it for ever, which
    is how CI saw a Ctrl-C'd toy run still waiting 30 s later. A second SIGINT raises at
    once. Whatever way ``main`` ends, the tasks it left get ``INTERRUPT_GRACE_S`` to take
    their cancellation and are then abandoned with their stacks printed (``asyncio.run``
    waits without a bound); ``main``'s own unwinding after a Ctrl-C gets as long."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    task = loop.create_task(main)
    interrupted = False
    grace: list[asyncio.TimerHandle] = []

    def cancel_main() -> None:
        task.cancel()
        grace.append(loop.call_later(INTERRUPT_GRACE_S, loop.stop))

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        nonlocal interrupted
        run_all()
        if interrupted:
            raise KeyboardInterrupt
        interrupted = True
        loop.call_soon_threadsafe(cancel_main)

    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, on_sigint) if in_main_thread else None
    try:
        try:
            result = loop.run_until_complete(task)
        except (asyncio.CancelledError, RuntimeError):
            # RuntimeError: the grace timer stopped the loop before main had unwound.
            if interrupted:
                raise KeyboardInterrupt from None
            raise
        if interrupted:  # main took its cancellation and returned anyway
            raise KeyboardInterrupt
        return result
    finally:
        if in_main_thread:
            signal.signal(signal.SIGINT, previous)
        for timer in grace:
            timer.cancel()
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
