"""Waiting for the signals that stop a server process."""

from __future__ import annotations

import asyncio
import signal


async def wait_for_stop_signal() -> None:
    """Return once SIGINT or SIGTERM arrives (handled on the loop, so shutdown is clean)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
