"""A poll that raises one partition's error loses no other partition's records.

Finding 14 (docs/fault-injection.md): a transactional processor of the txn-ctp workload was
assigned three partitions; one of them had no committed offset and its reset
(``list_offsets`` at "earliest") timed out against a paused leader. The next ``poll`` took
another partition's buffered records (moving its position past them) and then raised the
reset's error, so the records went nowhere and the processor's next step committed offsets
past 20 inputs it never saw. ``poll`` now raises before it takes anything.

Against the in-process fake broker: partition 0 serves records, partition 1's
``list_offsets`` always answers REQUEST_TIMED_OUT.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgpack
from aiohttp import web
from fake_group_broker import FakeGroupBroker

from api.client import AsyncConsumer, ClientError, TopicPartition

T = "t"
GOOD = TopicPartition(T, 0)
BROKEN = TopicPartition(T, 1)


class _ResetTimesOut(FakeGroupBroker):
    """``list_offsets`` of partition 1 answers REQUEST_TIMED_OUT (its leader is paused)."""

    def __init__(self) -> None:
        super().__init__({T: 2})
        self.refused_resets = 0

    async def _list_offsets(self, request: web.Request) -> web.Response:
        b: dict[str, Any] = msgpack.unpackb(await request.read(), raw=False)
        if int(b["partition"]) == BROKEN.partition:
            self.refused_resets += 1
            body = {"error": "REQUEST_TIMED_OUT", "message": "leader paused"}
            return web.Response(body=msgpack.packb(body), content_type="application/msgpack")
        return await super()._list_offsets(request)


def test_a_poll_raising_a_reset_error_keeps_the_other_partitions_records() -> None:
    async def go() -> None:
        fake = _ResetTimesOut()
        await fake.start()
        try:
            await fake.append(T, 0, [b"a0", b"a1", b"a2"])
            async with AsyncConsumer(
                fake.url,
                max_wait_ms=50,
                auto_offset_reset="earliest",
                request_timeout_ms=200,
                retry_backoff_ms=20,
            ) as c:
                c.assign([GOOD, BROKEN])  # GOOD first: its records are looked at first
                got: list[int] = []
                errors: list[str] = []
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 10
                while len(got) < 3 and loop.time() < deadline:
                    try:
                        got += [r.offset for r in await c.poll(200)]
                    except ClientError as e:
                        errors.append(e.code)
                # The second batch arrives while partition 1's reset is failing; wait until
                # the failure is certainly buffered beside it (a reset's budget is 0.2 s).
                await fake.append(T, 0, [b"a3", b"a4", b"a5"])
                seen = fake.refused_resets
                while fake.refused_resets == seen and loop.time() < deadline:
                    await asyncio.sleep(0.05)
                await asyncio.sleep(0.6)
                while len(got) < 6 and loop.time() < deadline:
                    try:
                        got += [r.offset for r in await c.poll(200)]
                    except ClientError as e:
                        errors.append(e.code)
                assert got == [0, 1, 2, 3, 4, 5], (got, errors)
                assert await c.position(GOOD) == 6
                # The error is reported, not swallowed.
                assert "REQUEST_TIMED_OUT" in errors, errors
        finally:
            await fake.stop()

    asyncio.run(go())
