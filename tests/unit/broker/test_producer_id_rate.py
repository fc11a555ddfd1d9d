"""New producer ids are rate-limited per broker (KIP-936's bound on producer state)."""

from __future__ import annotations

import asyncio
from typing import Any

import msgpack
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from broker.producer_ids import (
    ProducerIdManager,
    ProducerIdThrottledError,
    TokenBucket,
    add_producer_id_routes,
)
from metalog.responses import ProducerIdsBlock


def test_a_bucket_gives_its_burst_then_one_token_per_interval() -> None:
    b = TokenBucket(rate=10, burst=3, now_s=0.0)
    assert [b.take(0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert b.take(0.0) == pytest.approx(0.1)
    assert b.take(0.05) == pytest.approx(0.05)  # half a token saved meanwhile
    assert b.take(0.1) == 0.0
    assert b.take(100.0) == 0.0 and b.tokens == pytest.approx(2.0)  # capped at the burst


class FakeController:
    def __init__(self) -> None:
        self.next = 0

    async def execute(self, command: Any) -> ProducerIdsBlock:
        block = ProducerIdsBlock(
            broker_id=command.broker_id, first_producer_id=self.next, size=1000
        )
        self.next += 1000
        return block


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _manager(clock: Clock) -> ProducerIdManager:
    return ProducerIdManager(
        1,
        lambda: 5,
        FakeController(),  # type: ignore[arg-type]
        ids_per_second_max=2,
        clock_s=clock,
    )


def test_ids_beyond_the_rate_are_refused_with_the_wait_and_come_again_later() -> None:
    clock = Clock()
    m = _manager(clock)

    async def run() -> list[int]:
        ids = [await m.next_id(), await m.next_id()]
        with pytest.raises(ProducerIdThrottledError) as e:
            await m.next_id()
        assert e.value.throttle_time_ms == 500
        clock.now += 0.5
        ids.append(await m.next_id())
        return ids

    assert asyncio.run(run()) == [0, 1, 2]  # no id spent on a refusal
    assert m.throttled == 1


def test_the_route_answers_throttling_quota_exceeded_with_the_wait() -> None:
    clock = Clock()
    m = _manager(clock)

    async def run() -> list[dict[str, Any]]:
        app = web.Application()
        add_producer_id_routes(app, m)
        out = []
        async with TestClient(TestServer(app)) as c:
            for _ in range(3):
                r = await c.post("/internal/broker/v1/init_producer_id", data=msgpack.packb({}))
                assert r.status == 200
                out.append(msgpack.unpackb(await r.read(), raw=False))
        return out

    a, b, c = asyncio.run(run())
    assert (a["producer_id"], b["producer_id"]) == (0, 1)
    assert c["error"] == "THROTTLING_QUOTA_EXCEEDED" and c["throttle_time_ms"] == 500
