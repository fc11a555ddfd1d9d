"""``wait_event``: wait for an ``asyncio.Event`` for at most a while; ``join_task``: wait for
a task to end without re-raising its failure.

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
from typing import Any


async def wait_event(ev: asyncio.Event, timeout_s: float | None) -> None:
    """Return once ``ev`` is set or ``timeout_s`` has passed (None: no limit), whichever
    comes first; the caller checks which. A cancellation always propagates."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout_s):
            await ev.wait()


async def join_task(task: asyncio.Task[Any], *, cancel: bool = False) -> None:
    """Wait for ``task`` to end (cancelling it first with ``cancel``) without raising what it
    ended with. A component's ``stop`` uses this: a loop that died on an exception has been
    reported already (``common.essential`` retrieves and logs it), and raising it again from
    ``stop`` would leave everything stopped after it running (a dead Raft loop made a
    controller's shutdown raise before its log and transport were closed). A cancellation
    of the caller still propagates."""
    if cancel:
        task.cancel()
    await asyncio.wait((task,))
