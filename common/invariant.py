"""Invariant checks that stay on under ``python -O``.

``assert`` disappears with ``-O``; a storage or consensus invariant must not. Expected
operating errors (a bad request, a corrupt file) are ordinary exceptions, not invariants:
an ``InvariantError`` always means a bug in Longboat.

Pure: no I/O.
"""

from __future__ import annotations

from typing import NoReturn


class InvariantError(AssertionError):
    """A broken internal invariant: a bug, never a user error."""


def invariant(cond: object, msg: str, *args: object) -> None:
    """Raise ``InvariantError`` unless ``cond`` holds.

    ``msg`` is %-formatted with ``args`` only on failure, so the happy path costs one test.
    """
    if not cond:
        _fail(msg, args)


def _fail(msg: str, args: tuple[object, ...]) -> NoReturn:
    raise InvariantError(msg % args if args else msg)
