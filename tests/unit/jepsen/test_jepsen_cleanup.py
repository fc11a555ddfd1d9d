"""The cleanup registry undoes newest first, skips what was unregistered, survives failures."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from jepsen_tests import cleanup


async def ignores_cancellation() -> None:
    """What ``asyncio.run`` would wait on without a bound: a task no cancel ends."""
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            continue


async def sleeps_then_notes(finished: list[str], name: str) -> None:
    """A task that takes its cancellation, running its ``finally``."""
    try:
        await asyncio.sleep(3600)
    finally:
        finished.append(name)


def test_run_all_undoes_newest_first_and_skips_unregistered(
    capsys: pytest.CaptureFixture[str],
) -> None:
    done: list[str] = []

    def boom() -> None:
        raise RuntimeError("cannot")

    cleanup.register("a", lambda: done.append("a"))
    gone = cleanup.register("b", lambda: done.append("b"))
    cleanup.register("broken", boom)
    cleanup.register("c", lambda: done.append("c"))
    cleanup.unregister(gone)
    assert cleanup.pending()[-3:] == ["a", "broken", "c"]
    cleanup.run_all()
    assert done == ["c", "a"]
    assert "undoing broken failed" in capsys.readouterr().err
    assert cleanup.pending() == []


def test_a_ctrl_c_does_not_wait_forever_for_a_task_that_outlives_its_cancellation(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cleanup, "INTERRUPT_GRACE_S", 0.2)
    finished: list[str] = []
    tasks: list[asyncio.Task[None]] = []

    async def main() -> None:
        tasks.extend(
            [
                asyncio.ensure_future(ignores_cancellation()),
                asyncio.ensure_future(sleeps_then_notes(finished, "polite")),
            ]
        )
        await asyncio.sleep(0.01)
        raise KeyboardInterrupt

    t = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        cleanup.run_async(main())
    assert time.monotonic() - t < 2
    assert finished == ["polite"]  # a task that takes its cancellation still runs its finally
    err = capsys.readouterr().err
    assert "outlived its cancellation" in err and "ignores_cancellation" in err


def test_run_async_returns_the_result_and_closes_its_loop() -> None:
    loops: list[asyncio.AbstractEventLoop] = []

    async def main() -> int:
        loops.append(asyncio.get_running_loop())
        return 7

    assert cleanup.run_async(main()) == 7
    assert loops[0].is_closed()


def test_tasks_left_when_main_returns_are_cancelled_as_asyncio_run_does() -> None:
    finished: list[str] = []
    tasks: list[asyncio.Task[None]] = []

    async def main() -> str:
        tasks.append(asyncio.ensure_future(sleeps_then_notes(finished, "left")))
        await asyncio.sleep(0)
        return "done"

    assert cleanup.run_async(main()) == "done"
    assert finished == ["left"]


def test_a_sigint_undoes_at_once_then_cancels_the_run_inside_the_loop() -> None:
    undone: list[str] = []
    finished: list[str] = []
    cleanup.register("a node", lambda: undone.append("a node"))

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.call_later(0.05, os.kill, os.getpid(), signal.SIGINT)
        try:
            await asyncio.sleep(30)
        finally:
            finished.append("main")
            assert undone == ["a node"]  # the undo ran before main was cancelled

    t = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        cleanup.run_async(main())
    assert time.monotonic() - t < 5
    assert finished == ["main"]


def test_a_run_whose_unwinding_hangs_after_a_sigint_is_abandoned(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cleanup, "INTERRUPT_GRACE_S", 0.2)

    async def main() -> None:
        asyncio.get_running_loop().call_later(0.05, os.kill, os.getpid(), signal.SIGINT)
        try:
            await asyncio.sleep(30)
        finally:
            await ignores_cancellation()  # an unwinding that never ends

    t = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        cleanup.run_async(main())
    assert time.monotonic() - t < 3
    assert "outlived its cancellation" in capsys.readouterr().err
