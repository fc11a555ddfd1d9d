"""A partition's records are stored in the order ``send`` was called, also when calls overlap.

CI caught the sync ``Producer`` storing records 86..95 ahead of 0..85 on a freshly created
topic: the first sends waited for the topic's metadata, the fetch filled the cache, and
sends submitted meanwhile took the no-wait path and overtook them. These tests hold the
metadata fetch (and the buffer) at a gate so the overlap is certain, with a fake leader
that stores what it is sent.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from api.client.producer import AsyncProducer
from api.client.sync import Producer
from api.client.transport import PartitionInfo
from storage.batch import decode_records


class FakeLeader:
    """Stands in for the transport: stores each produced batch, answers its base offset."""

    def __init__(self) -> None:
        self.values: list[bytes | None] = []

    async def call(self, url: str, route: str, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        assert route == "produce"
        base = len(self.values)
        self.values += [r.value for r in decode_records(body["batch"])]
        return {"base_offset": base}

    async def close(self) -> None:
        pass


class GatedMetadata:
    """The topic appears in the cache as soon as it is asked for, but the asking call
    returns only when ``gate`` opens: later sends see a known topic before it resumes."""

    def __init__(self) -> None:
        self.current = type("Cache", (), {"topics": {}})()
        self.gate = asyncio.Event()

    async def partitions(self, topic: str, *, timeout_s: float = 10.0) -> dict[int, Any]:
        self.current.topics[topic] = {0: PartitionInfo(0, 1, 0, (1,), (1,))}
        await self.gate.wait()
        return dict(self.current.topics[topic])

    async def leader_url(self, topic: str, partition: int, *, timeout_s: float = 10.0) -> str:
        return "http://leader"


def _producer(**options: Any) -> tuple[AsyncProducer, GatedMetadata, FakeLeader]:
    p = AsyncProducer(
        "http://127.0.0.1:1", enable_idempotence=False, acks=1, linger_ms=0, **options
    )
    md, leader = GatedMetadata(), FakeLeader()
    p.metadata = md  # type: ignore[assignment]
    p.transport = leader  # type: ignore[assignment]
    p._loop = asyncio.get_running_loop()  # started: no cluster to ask for a producer id
    return p, md, leader


def test_overlapping_sends_keep_call_order_across_a_metadata_wait() -> None:
    async def go() -> None:
        p, md, leader = _producer()
        first = asyncio.create_task(p.send("t", b"0"))
        await asyncio.sleep(0)  # `first` now waits for metadata; the topic is cached
        later = [asyncio.create_task(p.send("t", str(i).encode())) for i in range(1, 20)]
        batch = asyncio.create_task(p.send_batch("t", [b"20", b"21"]))
        await asyncio.sleep(0.01)
        md.gate.set()
        futs = [await t for t in [first, *later]]
        offsets = [(await f).offset for f in futs]
        await (await batch)
        await p.close()
        assert leader.values == [str(i).encode() for i in range(22)]
        assert offsets == list(range(20))

    asyncio.run(go())


def test_a_send_waiting_for_buffer_room_is_not_overtaken() -> None:
    async def go() -> None:
        p, md, leader = _producer(buffer_memory=100)
        md.gate.set()
        await p.send("t", b"x" * 60)
        sent = leader.call

        async def slow_call(*a: Any, **kw: Any) -> dict[str, Any]:
            await asyncio.sleep(0.05)  # the buffer stays full a while
            return await sent(*a, **kw)

        leader.call = slow_call  # type: ignore[method-assign]
        waiting = asyncio.create_task(p.send("t", b"y" * 60))  # must wait for room
        await asyncio.sleep(0)
        small = asyncio.create_task(p.send("t", b"z"))  # would fit at once
        await asyncio.gather(waiting, small)
        await p.close()
        assert leader.values == [b"x" * 60, b"y" * 60, b"z"]

    asyncio.run(go())


def test_the_sync_producer_stores_a_threads_sends_in_call_order() -> None:
    # The shape of the CI failure: a new topic, a burst of sends from one thread.
    md, leader = GatedMetadata(), FakeLeader()

    class Fake(AsyncProducer):
        async def start(self) -> None:
            self.metadata, self.transport = md, leader  # type: ignore[assignment]
            self._loop = asyncio.get_running_loop()

    import api.client.sync as sync

    real, sync.AsyncProducer = sync.AsyncProducer, Fake  # type: ignore[misc]
    try:
        p = Producer("http://127.0.0.1:1", enable_idempotence=False, acks=1, linger_ms=0)
    finally:
        sync.AsyncProducer = real  # type: ignore[misc]
    with p:
        futs = [p.send("t", b"0")]
        deadline = time.monotonic() + 10
        while "t" not in md.current.topics:  # the first send now waits at the gate
            assert time.monotonic() < deadline
            time.sleep(0.001)
        futs += [p.send("t", str(i).encode()) for i in range(1, 50)]
        p._lt.loop.call_soon_threadsafe(md.gate.set)
        futs += [p.send("t", str(i).encode()) for i in range(50, 100)]
        p.flush(10)
        assert [f.result(5).offset for f in futs] == list(range(100))
    assert leader.values == [str(i).encode() for i in range(100)]
