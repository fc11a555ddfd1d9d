"""The Kafka listener pipelines a connection's produce requests (api.kafka.server): the next
one is started once the previous one's batches are appended, so the waits for acks overlap,
while appends keep the producer's order and answers keep the request order. Any other
request waits for every answer before it. On a real socket, with a fake replica manager
whose acks are released by the test."""

from __future__ import annotations

import asyncio
import datetime
import io
import logging
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.serial import entity_writer
from kio.static.primitive import Records

from api.kafka import handlers as h
from api.kafka.server import PIPELINE_DEPTH, KafkaListener
from metalog.image import MetadataImage


class HeldAcks:
    """``produce`` appends at once (recording the order) and then waits for its acks until
    the test releases them."""

    def __init__(self) -> None:
        self.appended: list[bytes] = []
        self.acks: dict[bytes, asyncio.Event] = {}
        self.by_name: dict[tuple[str, int], Any] = {}  # no replica: log start answered -1

    async def produce(
        self,
        topic: str,
        partition: int,
        acks: int,
        timeout_ms: int,
        batch: bytes,
        *,
        transactional_id: str | None = None,
        appended: Any = None,
    ) -> dict[str, Any]:
        self.appended.append(batch)
        self.acks[batch] = asyncio.Event()
        if appended is not None:
            appended()
        await self.acks[batch].wait()
        return {"base_offset": self.appended.index(batch)}


def _ctx(replicas: HeldAcks) -> h.KafkaContext:
    async def pid() -> int:
        return 1

    async def execute(cmd: Any) -> Any:
        return None

    return h.KafkaContext(
        broker_id=101,
        cluster_id="c",
        image_fn=lambda: MetadataImage.EMPTY,
        replicas=replicas,  # type: ignore[arg-type]
        groups=None,  # type: ignore[arg-type]
        next_producer_id=pid,
        execute=execute,
    )


Reader = asyncio.StreamReader
Writer = asyncio.StreamWriter


def _frame(api_key: int, version: int, cid: int, body: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(body))(buf, body)
    header = struct.pack(">hhih", api_key, version, cid, 1) + b"t"
    payload = header + buf.getvalue()
    return struct.pack(">i", len(payload)) + payload


def _produce(cid: int, records: bytes, *, acks: int = -1) -> bytes:
    cls = load_request_schema(0, 3)
    mod = __import__("kio.schema.produce.v3.request", fromlist=["x"])
    body = cls(
        transactional_id=None,
        acks=acks,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(
            mod.TopicProduceData(
                name="t",
                partition_data=(mod.PartitionProduceData(index=0, records=Records(records)),),
            ),
        ),
    )
    return _frame(0, 3, cid, body)


def _api_versions(cid: int) -> bytes:
    header = struct.pack(">hhih", 18, 0, cid, 1) + b"t"
    return struct.pack(">i", len(header)) + header


async def _answer_cid(reader: asyncio.StreamReader) -> int:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    return int(struct.unpack_from(">i", await reader.readexactly(size))[0])


async def _until(cond: Any) -> None:
    while not cond():
        await asyncio.sleep(0.01)


class Refusing(HeldAcks):
    """Every produce is refused (a partition not led here), after ``delay_s``."""

    def __init__(self, delay_s: float = 0.0) -> None:
        super().__init__()
        self.delay_s = delay_s

    async def produce(self, *a: Any, **kw: Any) -> dict[str, Any]:
        from broker.replica_manager import ReplicaError

        await asyncio.sleep(self.delay_s)
        raise ReplicaError("NOT_LEADER_OR_FOLLOWER")


Body = Callable[[KafkaListener, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def on_listener(replicas: HeldAcks, body: Body) -> None:
    """Run ``body`` with a listener over ``replicas`` and a connection to it, in a loop of
    its own, within 20 s; the listener is closed whatever happens."""

    async def run() -> None:
        lst = KafkaListener(_ctx(replicas))
        await lst.start("127.0.0.1", 0)
        try:
            async with asyncio.timeout(20):
                reader, writer = await asyncio.open_connection("127.0.0.1", lst.port)
                await body(lst, reader, writer)
                writer.close()
        finally:
            await lst.close()

    asyncio.run(run())


def test_produce_requests_overlap_their_acks_but_answer_in_order() -> None:
    replicas = HeldAcks()

    async def body(lst: KafkaListener, reader: Reader, writer: Writer) -> None:
        batches = [b"b%d" % i for i in range(3)]
        for cid, b in enumerate(batches, 1):
            writer.write(_produce(cid, b))
        writer.write(_api_versions(4))
        # All three appended, in order, while none has its acks yet: overlapped.
        await _until(lambda: len(replicas.appended) == 3)
        assert replicas.appended == batches
        # Acks in reverse order: the answers still come 1, 2, 3, then ApiVersions.
        for b in reversed(batches):
            replicas.acks[b].set()
            await asyncio.sleep(0.02)
        assert [await _answer_cid(reader) for _ in range(4)] == [1, 2, 3, 4]

    on_listener(replicas, body)


def test_a_request_after_produces_waits_for_their_answers() -> None:
    replicas = HeldAcks()

    async def body(lst: KafkaListener, reader: Reader, writer: Writer) -> None:
        writer.write(_produce(1, b"x") + _api_versions(2) + _produce(3, b"y"))
        await _until(lambda: len(replicas.appended) == 1)
        await asyncio.sleep(0.2)
        # ApiVersions is not served before the produce ahead of it is answered, and the
        # produce behind it is not started either.
        assert replicas.appended == [b"x"]
        replicas.acks[b"x"].set()
        await _until(lambda: len(replicas.appended) == 2)
        replicas.acks[b"y"].set()
        assert [await _answer_cid(reader) for _ in range(3)] == [1, 2, 3]

    on_listener(replicas, body)


def test_no_more_than_pipeline_depth_produce_requests_are_started() -> None:
    replicas = HeldAcks()

    async def body(lst: KafkaListener, reader: Reader, writer: Writer) -> None:
        n = PIPELINE_DEPTH + 2
        for cid in range(1, n + 1):
            writer.write(_produce(cid, b"p%d" % cid))
        await _until(lambda: len(replicas.appended) == PIPELINE_DEPTH)
        await asyncio.sleep(0.2)
        assert len(replicas.appended) == PIPELINE_DEPTH
        for cid in range(1, n + 1):
            await _until(lambda cid=cid: b"p%d" % cid in replicas.acks)
            replicas.acks[b"p%d" % cid].set()
        assert [await _answer_cid(reader) for _ in range(n)] == list(range(1, n + 1))

    on_listener(replicas, body)


def test_a_failed_acks_0_produce_closes_the_connection() -> None:
    async def body(lst: KafkaListener, reader: Reader, writer: Writer) -> None:
        writer.write(_produce(1, b"x", acks=0))
        assert await reader.read(1) == b""  # closed, as Kafka does, with no answer

    on_listener(Refusing(), body)


def test_a_failed_acks_0_produce_ends_the_serving_task_even_with_requests_behind_it() -> None:
    # The refusal must end the connection's task, not leave it waiting for answers that the
    # dead responder will never write (a request queued behind the refused produce).
    async def body(lst: KafkaListener, reader: Reader, writer: Writer) -> None:
        writer.write(_produce(1, b"x", acks=0) + _api_versions(2) + _api_versions(3))
        assert await reader.read(1) == b""
        await _until(lambda: not lst._conns)  # the serving task ended

    on_listener(Refusing(delay_s=0.05), body)


def test_a_refused_acks_0_produce_is_logged_when_the_client_already_closed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # An acks=0 producer closes as soon as its bytes are out: the refusal must still be
    # logged as the reason the connection ended (it was lost in a race with the EOF).
    async def body(lst: KafkaListener, reader: Reader, writer: Writer) -> None:
        writer.write(_produce(1, b"x", acks=0))
        await writer.drain()
        writer.close()
        await _until(lambda: "after acks=0 errors" in caplog.text)

    with caplog.at_level(logging.INFO, logger="api.kafka.server"):
        on_listener(Refusing(delay_s=0.05), body)
