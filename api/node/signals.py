"""Waiting for what stops a server process: SIGINT/SIGTERM, or an essential task dying."""

from __future__ import annotations

import asyncio
import logging
import signal

from aiohttp import web

from common.essential import Essentials

log = logging.getLogger(__name__)

# A failed node stops its HTTP server and components within this bound, then exits anyway:
# a component that waits on the task that died must not keep a broken node up.
FAILED_CLEANUP_TIMEOUT_S = 10.0


async def wait_for_stop_signal() -> None:
    """Return once SIGINT or SIGTERM arrives (handled on the loop, so shutdown is clean)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


async def stop_signal_or_failure(essentials: Essentials) -> str | None:
    """Wait for SIGINT/SIGTERM (returns None) or an essential task's death (returns why)."""
    signalled = asyncio.ensure_future(wait_for_stop_signal())
    failed = asyncio.ensure_future(essentials.wait_failed())
    try:
        await asyncio.wait((signalled, failed), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (signalled, failed):
            t.cancel()
    return essentials.failure


async def cleanup_within(runner: web.AppRunner, timeout_s: float) -> None:
    """``runner.cleanup()`` (closes the listener and stops the components), within a bound."""
    try:
        async with asyncio.timeout(timeout_s):
            await runner.cleanup()
    except TimeoutError:
        log.error("cleanup did not finish within %.0f s; exiting anyway", timeout_s)
