"""ProduceLanes: a lane per batch in flight, sequences that follow on, a new producer id after
any failure, and no producer id (rather than no produce) when none can be had."""

from __future__ import annotations

import asyncio
import itertools

from broker import produce_lanes
from broker.produce_lanes import IDLE_LANES_MAX, ProduceLanes


def ids() -> ProduceLanes:
    counter = itertools.count(1000)

    async def next_id() -> int:
        await asyncio.sleep(0)
        return next(counter)

    return ProduceLanes(next_id)


def test_each_batch_in_flight_has_a_lane_of_its_own_and_sequences_follow_on() -> None:
    async def go() -> None:
        lanes = ids()
        a = await lanes.acquire("t", 0)
        b = await lanes.acquire("t", 0)
        assert a is not None and b is not None
        assert a.producer_id != b.producer_id
        assert (a.producer_epoch, a.next_sequence) == (0, 0)
        lanes.release("t", 0, a, 10)
        again = await lanes.acquire("t", 0)
        assert again is a and again.next_sequence == 10
        # Another partition never gets t-0's lane: its sequences are t-0's.
        other = await lanes.acquire("t", 1)
        assert other is not None and other.producer_id not in (a.producer_id, b.producer_id)
        assert lanes.created == 3

    asyncio.run(go())


def test_a_failed_batch_drops_its_lane() -> None:
    async def go() -> None:
        lanes = ids()
        a = await lanes.acquire("t", 0)
        assert a is not None
        lanes.drop(a)
        b = await lanes.acquire("t", 0)
        assert b is not None and b.producer_id != a.producer_id and b.next_sequence == 0
        assert (lanes.created, lanes.dropped) == (2, 1)

    asyncio.run(go())


def test_a_lane_retires_before_its_sequence_could_wrap(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(produce_lanes, "SEQ_LIMIT", 100)

    async def go() -> None:
        lanes = ids()
        a = await lanes.acquire("t", 0)
        assert a is not None
        lanes.release("t", 0, a, 99)
        assert await lanes.acquire("t", 0) is a
        lanes.release("t", 0, a, 1)
        b = await lanes.acquire("t", 0)
        assert b is not None and b is not a and b.next_sequence == 0

    asyncio.run(go())


def test_idle_lanes_are_bounded() -> None:
    async def go() -> None:
        lanes = ids()
        held = [await lanes.acquire("t", 0) for _ in range(IDLE_LANES_MAX + 5)]
        for lane in held:
            assert lane is not None
            lanes.release("t", 0, lane, 1)
        assert lanes.idle() == IDLE_LANES_MAX

    asyncio.run(go())


def test_no_producer_id_to_be_had_means_a_batch_without_one() -> None:
    async def go() -> None:
        async def hangs() -> int:
            await asyncio.sleep(60)
            return 1

        async def fails() -> int:
            raise RuntimeError("no active controller")

        slow = ProduceLanes(hangs, id_wait_s=0.05)
        assert await slow.acquire("t", 0) is None
        broken = ProduceLanes(fails)
        assert await broken.acquire("t", 0) is None
        assert await broken.acquire("t", 0) is None
        assert (slow.without_id, broken.without_id, broken.created) == (1, 2, 0)

    asyncio.run(go())
