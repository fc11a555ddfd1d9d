"""``wait_event``: wait for an ``asyncio.Event`` for at most a while.

Shared by every asyncio shell in the project (the Raft node's neighbours, the controllers,
the brokers, the client), as ``netbind`` is. Not ``asyncio.wait_for``: on Python 3.11 it
swallows a cancellation that arrives in the loop iteration the event fires (fixed in 3.12),
and a task that survives its cancellation runs on to its timeout and hangs whoever awaits it
(a consumer's ``poll``, a coordinator's ``stop``). ``asyncio.timeout`` does not, and makes
no task.
"""

from __future__ import annotations

import asyncio
import contextlib


async def wait_event(ev: asyncio.Event, timeout_s: float | None) -> None:
    """Return once ``ev`` is set or ``timeout_s`` has passed (None: no limit), whichever
    comes first; the caller checks which. A cancellation always propagates."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout_s):
            await ev.wait()
