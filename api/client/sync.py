"""The synchronous twins: ``Producer`` and ``Consumer`` run the asyncio core on a loop thread.

One implementation serves both worlds: each sync client owns a daemon thread running an
event loop (uvloop where installed) and the async client inside it; every method hands a
coroutine to that loop and waits for its result. ``Producer.send`` returns a
``concurrent.futures.Future`` that resolves with the record's ``RecordMetadata``, so
callbacks (``add_done_callback``) and ``result(timeout)`` work as users of other Kafka
clients expect.

``GroupConsumer``'s rebalance callbacks run on a worker thread, not on the loop thread, so a
callback may call the consumer's own blocking methods (``commit`` in ``on_revoked``, Kafka's
idiom) without waiting on itself.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import threading
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol, Self, TypeVar

from api.client.consumer import AsyncConsumer
from api.client.errors import ClientError
from api.client.group import AsyncGroupConsumer, CommitCallback, PartitionsCallback
from api.client.producer import AsyncProducer, BatchDelivery
from api.client.transactions import TxnPhase
from api.client.types import (
    ConsumerGroupMetadata,
    ConsumerRecord,
    Header,
    RecordMetadata,
    TopicPartition,
)

T = TypeVar("T")


class _AsyncClient(Protocol):
    async def start(self) -> None: ...
    async def close(self) -> None: ...


A = TypeVar("A", bound=_AsyncClient)


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class _LoopThread:
    def __init__(self, name: str) -> None:
        self.loop = _new_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return self.submit(coro).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self.loop.close()


class _OnLoopThread:
    """A client started on a loop thread of its own; closing it stops the thread too."""

    _lt: _LoopThread
    _inner: _AsyncClient

    def _start(self, thread_name: str, make: Callable[[], A]) -> A:
        """``make()`` (an async client) built and started on a new loop thread."""

        async def started() -> A:
            inner = make()
            await inner.start()
            return inner

        self._lt = _LoopThread(thread_name)
        try:
            inner = self._lt.run(started())
        except BaseException:
            self._lt.stop()
            raise
        self._inner = inner
        return inner

    def close(self) -> None:
        try:
            self._lt.run(self._inner.close())
        finally:
            self._lt.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Producer(_OnLoopThread):
    """Synchronous producer; the same options as ``AsyncProducer``."""

    def __init__(self, bootstrap: str | Sequence[str], **options: Any) -> None:
        self._p = self._start("longboat-producer", lambda: AsyncProducer(bootstrap, **options))

    @property
    def producer_id(self) -> int:
        return self._p.producer_id

    def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Sequence[Header] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> concurrent.futures.Future[RecordMetadata]:
        async def go() -> RecordMetadata:
            return await (await self._p.send(topic, value, key, headers, partition, timestamp_ms))

        return self._lt.submit(go())

    def send_batch(
        self,
        topic: str,
        values: Sequence[bytes],
        *,
        keys: Sequence[bytes | None] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> concurrent.futures.Future[list[BatchDelivery]]:
        async def go() -> list[BatchDelivery]:
            return await (
                await self._p.send_batch(
                    topic, values, keys=keys, partition=partition, timestamp_ms=timestamp_ms
                )
            )

        return self._lt.submit(go())

    def flush(self, timeout: float | None = None) -> None:
        self._lt.run(self._p.flush(), timeout)

    # Transactions (``transactional_id``): the async producer's, on its loop.

    def init_transactions(self, timeout: float | None = None) -> None:
        self._lt.run(self._p.init_transactions(), timeout)

    def begin_transaction(self) -> None:
        self._p.begin_transaction()

    def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, int] | Mapping[tuple[str, int], int],
        group_metadata: ConsumerGroupMetadata | str,
        timeout: float | None = None,
    ) -> None:
        self._lt.run(self._p.send_offsets_to_transaction(offsets, group_metadata), timeout)

    def commit_transaction(self, timeout: float | None = None) -> None:
        self._lt.run(self._p.commit_transaction(), timeout)

    def abort_transaction(self, timeout: float | None = None) -> None:
        self._lt.run(self._p.abort_transaction(), timeout)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Producer]:
        """Begin; commit when the block ends, abort when it raises (then re-raise)."""
        self.begin_transaction()
        try:
            yield self
        except BaseException:
            if self._p.transaction_phase is not TxnPhase.FATAL_ERROR:
                with contextlib.suppress(ClientError):
                    self.abort_transaction()
            raise
        self.commit_transaction()


class _Reader(_OnLoopThread):
    """What the two sync consumers read alike: their async clients share these methods."""

    _c: AsyncConsumer | AsyncGroupConsumer

    def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[ConsumerRecord]:
        return self._lt.run(self._c.poll(timeout_ms, max_records))

    def position(self, tp: TopicPartition) -> int:
        return self._lt.run(self._c.position(tp))

    def seek_to_beginning(self, *tps: TopicPartition) -> None:
        self._lt.run(self._c.seek_to_beginning(*tps))

    def seek_to_end(self, *tps: TopicPartition) -> None:
        self._lt.run(self._c.seek_to_end(*tps))

    def topics(self) -> list[str]:
        return self._lt.run(self._c.topics())

    def partitions_for(self, topic: str) -> list[int]:
        return self._lt.run(self._c.partitions_for(topic))


class Consumer(_Reader):
    """Synchronous consumer; the same options as ``AsyncConsumer``."""

    _c: AsyncConsumer

    def __init__(self, bootstrap: str | Sequence[str], **options: Any) -> None:
        self._c = self._start("longboat-consumer", lambda: AsyncConsumer(bootstrap, **options))

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        parts = list(partitions)

        async def go() -> None:
            self._c.assign(parts)

        self._lt.run(go())

    def assignment(self) -> set[TopicPartition]:
        return self._c.assignment()

    def seek(self, tp: TopicPartition, offset: int) -> None:
        async def go() -> None:
            self._c.seek(tp, offset)

        self._lt.run(go())

    def beginning_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._lt.run(self._c.beginning_offsets(list(tps)))

    def end_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._lt.run(self._c.end_offsets(list(tps)))

    def offsets_for_times(
        self, times: dict[TopicPartition, int]
    ) -> dict[TopicPartition, int | None]:
        return self._lt.run(self._c.offsets_for_times(dict(times)))

    def high_watermark(self, tp: TopicPartition) -> int:
        return self._c.high_watermark(tp)

    def last_stable_offset(self, tp: TopicPartition) -> int:
        return self._c.last_stable_offset(tp)

    def lag(self, tp: TopicPartition) -> int | None:
        return self._c.lag(tp)


def _off_loop(cb: Callable[..., Any] | None) -> Callable[..., Any] | None:
    """``cb`` run on a worker thread (awaited by the loop): a synchronous callback may then
    call the sync consumer, whose methods block on the loop thread."""
    if cb is None:
        return None

    async def run(*args: Any) -> None:
        r = await asyncio.to_thread(cb, *args)
        if inspect.isawaitable(r):
            await r

    return run


class GroupConsumer(_Reader):
    """Synchronous group consumer; the same options as ``AsyncGroupConsumer``."""

    _c: AsyncGroupConsumer

    def __init__(self, bootstrap: str | Sequence[str], *, group_id: str, **options: Any) -> None:
        self._c = self._start(
            "longboat-group-consumer",
            lambda: AsyncGroupConsumer(bootstrap, group_id=group_id, **options),
        )

    def _call(self, fn: Callable[[], T]) -> T:
        """A plain method of the async consumer, run on its loop (it touches loop state)."""

        async def go() -> T:
            return fn()

        return self._lt.run(go())

    @property
    def member_id(self) -> str:
        return self._c.member_id

    def group_metadata(self) -> ConsumerGroupMetadata:
        return self._c.group_metadata()

    @property
    def generation(self) -> int:
        return self._c.generation

    def subscribe(
        self,
        topics: Iterable[str] | None = None,
        *,
        pattern: str | None = None,
        on_revoked: PartitionsCallback | None = None,
        on_assigned: PartitionsCallback | None = None,
        on_lost: PartitionsCallback | None = None,
    ) -> None:
        listed = None if topics is None else ([topics] if isinstance(topics, str) else list(topics))
        self._call(
            lambda: self._c.subscribe(
                listed,
                pattern=pattern,
                on_revoked=_off_loop(on_revoked),
                on_assigned=_off_loop(on_assigned),
                on_lost=_off_loop(on_lost),
            )
        )

    def unsubscribe(self) -> None:
        self._call(self._c.unsubscribe)

    def subscription(self) -> set[str]:
        return self._call(self._c.subscription)

    def assignment(self) -> set[TopicPartition]:
        return self._call(self._c.assignment)

    def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        self._lt.run(self._c.commit(None if offsets is None else dict(offsets)))

    def commit_async(
        self,
        offsets: dict[TopicPartition, int] | None = None,
        callback: CommitCallback | None = None,
    ) -> concurrent.futures.Future[None]:
        """The commit's future; ``callback(offsets, error)`` runs on a worker thread."""

        async def go() -> None:
            await self._c.commit_async(
                None if offsets is None else dict(offsets), _off_loop(callback)
            )

        return self._lt.submit(go())

    def committed(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        return self._lt.run(self._c.committed(list(tps)))

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._call(lambda: self._c.seek(tp, offset))

    def pause(self, *tps: TopicPartition) -> None:
        self._call(lambda: self._c.pause(*tps))

    def resume(self, *tps: TopicPartition) -> None:
        self._call(lambda: self._c.resume(*tps))

    def paused(self) -> set[TopicPartition]:
        return self._call(self._c.paused)
