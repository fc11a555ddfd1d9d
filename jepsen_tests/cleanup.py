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

import atexit
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

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
