"""Text for error messages about values that came from outside the process.

Pure: no I/O.
"""

from __future__ import annotations


def show(v: object, limit: int = 60) -> str:
    """``repr(v)``, cut to ``limit`` characters: a refusal names what it got without echoing a
    megabyte of someone's body back into a log line or an answer."""
    r = repr(v)
    return r if len(r) <= limit else r[: limit - 3] + "..."
