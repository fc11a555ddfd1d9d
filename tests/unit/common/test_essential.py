"""common.essential: the first essential task to end outside a shutdown fails the node."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from common.essential import Essentials


def run_async(fn: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    @functools.wraps(fn)
    def test(*args: Any, **kwargs: Any) -> None:
        asyncio.run(fn(*args, **kwargs))

    return test


async def _boom() -> None:
    await asyncio.sleep(0)
    raise RuntimeError("disk on fire")


async def _forever() -> None:
    await asyncio.Event().wait()


@run_async
async def test_a_task_dying_on_an_exception_fails_the_node_and_says_which_and_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ess = Essentials("broker 7")
    ess.watch(asyncio.create_task(_boom()), "metadata follower")
    async with asyncio.timeout(2):
        failure = await ess.wait_failed()
    assert failure == "metadata follower: RuntimeError: disk on fire"
    crit = [r for r in caplog.records if r.levelno == logging.CRITICAL]
    assert len(crit) == 1 and "broker 7" in crit[0].getMessage()
    assert "metadata follower" in crit[0].getMessage()


@run_async
async def test_a_task_cancelled_or_returning_outside_a_shutdown_is_a_failure_too() -> None:
    for what, coro in (("returned", asyncio.sleep(0)), ("cancelled", _forever())):
        ess = Essentials("n")
        t = ess.watch(asyncio.create_task(coro), "loop")
        if what == "cancelled":
            await asyncio.sleep(0)
            t.cancel()
        async with asyncio.timeout(2):
            assert await ess.wait_failed() == f"loop: {what}"


@run_async
async def test_tasks_ending_after_expect_stop_fail_nothing() -> None:
    ess = Essentials("n")
    t = ess.watch(asyncio.create_task(_forever()), "loop")
    b = ess.watch(asyncio.create_task(_boom()), "other")
    ess.expect_stop()
    t.cancel()
    await asyncio.gather(t, b, return_exceptions=True)
    await asyncio.sleep(0)
    assert ess.failure is None


@run_async
async def test_only_errors_lets_a_cancelled_fetcher_go_and_fails_on_an_exception() -> None:
    ess = Essentials("n")
    t = ess.watch(asyncio.create_task(_forever()), "fetcher of t-0", only_errors=True)
    await asyncio.sleep(0)
    t.cancel()
    await asyncio.gather(t, return_exceptions=True)
    await asyncio.sleep(0)
    assert ess.failure is None
    ess.watch(asyncio.create_task(_boom()), "fetcher of t-1", only_errors=True)
    async with asyncio.timeout(2):
        assert await ess.wait_failed() == "fetcher of t-1: RuntimeError: disk on fire"


@run_async
async def test_the_first_failure_is_the_one_kept() -> None:
    ess = Essentials("n")
    ess.fail("a", "first")
    ess.fail("b", "second")
    assert ess.failure == "a: first"
