"""A client task cancelled just as what it waits for arrives ends cancelled.

On Python 3.11 ``asyncio.wait_for`` swallows a cancellation that comes in the same loop
iteration as the awaited event fires (fixed in 3.12): the task carried on as if nothing
had happened. ``AsyncConsumer.poll`` then kept polling for the rest of its timeout, so a
member task being stopped hung its ``stop()`` for up to a minute (seen as a 60 s group
consumer test). The waits now use ``asyncio.timeout``, which does not.
"""

from __future__ import annotations

import asyncio

from fake_group_broker import FakeGroupBroker

from api.client import AsyncConsumer, TopicPartition

T = "t"


def test_a_poll_cancelled_as_records_arrive_is_cancelled() -> None:
    async def go() -> None:
        fake = FakeGroupBroker({T: 1})
        await fake.start()
        try:
            async with AsyncConsumer(fake.url, max_wait_ms=50, auto_offset_reset="earliest") as c:
                c.assign([TopicPartition(T, 0)])
                assert await c.poll(200) == []
                for _ in range(20):  # each round: the wake-up and the cancel in one iteration
                    task = asyncio.get_running_loop().create_task(c.poll(30_000))
                    await asyncio.sleep(0.02)
                    assert not task.done()
                    c._arrived.set()
                    task.cancel()
                    done, _ = await asyncio.wait({task}, timeout=2)
                    assert done, "poll went on after it was cancelled"
                    assert task.cancelled(), task
        finally:
            await fake.stop()

    asyncio.run(go())
