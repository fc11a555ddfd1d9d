"""``broker.fetcher.stop_task``: a fetcher task whose cancellation is swallowed once (on
Python 3.11 aiohttp's request timeout can turn it into a ``TimeoutError`` that a retry loop
survives) still ends, so removing a partition never hangs the broker's metadata handling."""

from __future__ import annotations

import asyncio
import time

from broker.fetcher import stop_task


async def _retry_loop_that_survives_one_cancel() -> None:
    survived = False
    while True:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            if survived:
                raise
            survived = True  # as if it had come out as a TimeoutError: retry


def test_stop_task_ends_a_task_that_survived_its_first_cancellation() -> None:
    async def go() -> None:
        task = asyncio.create_task(_retry_loop_that_survives_one_cancel())
        await asyncio.sleep(0)
        t0 = time.monotonic()
        async with asyncio.timeout(10):
            await stop_task(task)
        assert task.cancelled()
        assert time.monotonic() - t0 < 5
        # A single cancel and a wait would not have ended it.
        again = asyncio.create_task(_retry_loop_that_survives_one_cancel())
        await asyncio.sleep(0)
        again.cancel()
        done, _ = await asyncio.wait((again,), timeout=0.5)
        assert not done
        await stop_task(again)

    asyncio.run(go())
