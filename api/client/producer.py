"""``AsyncProducer``: batching, partitioning, idempotence and retries, straight to leaders.

How a record travels (Kafka's ``RecordAccumulator`` + ``Sender``, one asyncio task per
partition instead of one network thread):

1. ``send`` picks the partition (given; murmur2 of the key; or sticky for null keys,
   ``api.client.partitioner``) and appends the record to that partition's *open* batch.
2. A batch is sealed when it holds ``batch_size`` bytes, or when its partition's sender may
   send another request and the batch is ``linger_ms`` old. While the partition's requests
   in flight are at ``max_in_flight`` the open batch keeps filling, so batches grow with
   latency: under load every request carries as much as has arrived, and an idle producer
   still sends within ``linger_ms``.
3. The partition's sender takes sealed batches in order, encodes each once (a Longboat
   batch: ``storage.batch.encode_batch`` with the producer id, epoch and base sequence,
   sequences taken in queue order at the first send) and POSTs it to the partition leader's
   ``produce`` route. Up to ``max_in_flight`` requests per partition are in flight at once
   (Kafka's ``max.in.flight.requests.per.connection``, at most 5 with idempotence, as
   Kafka). They travel on several connections and may reach the leader out of order; with
   idempotence the leader's sequence check refuses a batch whose predecessor has not
   arrived yet (``OUT_OF_ORDER_SEQUENCE_NUMBER``), and the sender sends it again once its
   predecessors are settled. That check keeps order only while the leader knows the
   producer id and epoch in the partition (it takes a producer it does not know at any
   sequence, KIP-360), so the first batch of an id or epoch goes alone, as does the first
   after an idle minute. Without idempotence requests may overtake each other and retries
   may reorder, as Kafka documents for more than one in flight: ``max_in_flight=1`` for
   order.
4. Answers are acted on in sequence order, the oldest unsettled batch (the head) first: a
   retriable error (not leader, not enough replicas, timeout, connection lost) sends the
   head again, with the *same bytes*, after a backoff, refreshing metadata first when
   leadership may have moved, until the batch's ``delivery_timeout_ms`` runs out; its
   successors wait and go again after it, in order, and no new batch goes meanwhile. With
   idempotence (on by default) the leader recognises a batch it already has (among the
   producer's last five) by producer id and sequence and answers with the original offsets,
   so retries never duplicate. Without it, a retry after an unknown outcome may duplicate,
   as in Kafka.
5. The futures of the batch's records resolve with ``RecordMetadata`` (offset = base offset
   + index) or with the ``ClientError`` that ended it.

A batch that fails for good after it was sent may or may not be in the log; its sequence
numbers cannot be reused for other records, so the producer takes a new producer id (its
sequences start again at 0), as Kafka's idempotent producer does (KIP-360's epoch bump).
Batches already in flight keep the old id's bytes; one of the same partition that the
leader then refuses as out of order, sent alone, follows the lost batch and was not
appended either: it is encoded again under the new id and sent.

``buffer_memory`` bounds the bytes waiting in batches: ``send`` waits for room (Kafka's
``max.block.ms``, here ``delivery_timeout_ms``).

Transactions (``transactional_id``, docs/transactions.md): ``init_transactions()`` takes the
id's producer id and epoch from its transaction coordinator, fencing older producers of the
id; between ``begin_transaction()`` and ``commit_transaction()``/``abort_transaction()``
every batch is transactional, and the first batch to each partition waits for the partition
to be added to the transaction (``api.client.transactions``). A batch that fails for good
makes the transaction abortable instead of taking a new producer id; each end bumps the
epoch (KIP-890 part 2), which restarts every partition's sequence at 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from api.client.coordinator import CoordinatorClient
from api.client.errors import ClientError, ProducerFencedError, TransactionAbortedError
from api.client.partitioner import partition_for_key
from api.client.security import ClientSecurity
from api.client.transactions import TransactionManager, TxnPhase
from api.client.transport import (
    MetadataCache,
    Transport,
    call_with_retries,
    normalize_bootstrap,
)
from api.client.types import ConsumerGroupMetadata, Header, RecordMetadata, TopicPartition
from common.waits import wait_event
from storage.batch import encode_batch, encode_values
from storage.compression import Compression

log = logging.getLogger(__name__)

RECORD_OVERHEAD = 16
"""Bytes a record adds to a batch beyond key, value and headers (msgpack framing, deltas):
the estimate that decides when a batch is full."""

ACKS = {"all": -1, "-1": -1, -1: -1, "1": 1, 1: 1, "0": 0, 0: 0}

MAX_IN_FLIGHT_IDEMPOTENT = 5
"""The most produce requests per partition an idempotent producer keeps in flight (Kafka's
limit for ``max.in.flight.requests.per.connection``): the leader keeps a producer's last five
batches (``broker.producer_state``), so a resend of any unsettled batch is recognised there
as a duplicate and answered with its offsets."""

PIPELINE_IDLE_S = 60.0
"""A partition whose last acknowledgement is older than this sends its next batch alone
again: a leader forgets an idle producer (``producer.id.expiration.ms``) and then accepts any
sequence, which would let a later batch that overtook an earlier one in."""

OUT_OF_ORDER = "OUT_OF_ORDER_SEQUENCE_NUMBER"

FATAL_SEQUENCE_ERRORS = frozenset(
    {"OUT_OF_ORDER_SEQUENCE_NUMBER", "UNKNOWN_PRODUCER_ID", "INVALID_PRODUCER_EPOCH"}
)


class BatchDelivery(NamedTuple):
    """``send_batch``'s report for one stored batch: offsets ``base_offset`` ..
    ``base_offset + record_count - 1`` of ``topic``-``partition``."""

    topic: str
    partition: int
    base_offset: int
    record_count: int


@dataclass(eq=False)
class _Batch:
    tp: TopicPartition
    created: float
    records: list[tuple[bytes | None, bytes | None, int, Sequence[Header]]] = field(
        default_factory=list
    )
    waiters: list[asyncio.Future[Any]] = field(default_factory=list)
    """Per-record futures (``send``), or one future for the whole batch (``send_batch``)."""
    whole: bool = False
    columns: tuple[list[bytes], list[bytes | None] | None, int] | None = None
    """``send_batch``'s records as (values, keys, timestamp): encoded by
    ``storage.batch.encode_values`` without a tuple per record."""
    size: int = 0

    @property
    def count(self) -> int:
        return len(self.columns[0]) if self.columns is not None else len(self.records)

    encoded: bytes | None = None
    producer: tuple[int, int] = (-1, -1)
    """The producer id and epoch ``encoded`` carries."""
    sent: bool = False
    request: asyncio.Task[dict[str, Any] | ClientError] | None = None
    """The produce request on its way. Invariant (in flight): exactly one of ``request``
    and ``answer`` is set."""
    answer: dict[str, Any] | ClientError | None = None
    """The last request's outcome, not yet acted on (the sender acts on the head's only)."""
    behind: bool = False
    """The last request went while an earlier batch of the partition was unsettled: the
    leader may have seen this one first, so OUT_OF_ORDER_SEQUENCE_NUMBER is no verdict."""
    attempt: int = 0
    answered_at: float = 0.0
    """When ``answer`` came: a retry's back-off counts from there, so batches that failed
    together behind a failed head do not each wait a whole back-off once it is through."""
    retry_at: float | None = None
    """When the head's retry goes (after the back-off); None until one is scheduled."""


@dataclass(eq=False)
class _PartitionQueue:
    open: _Batch | None = None
    sealed: deque[_Batch] = field(default_factory=deque)
    """Sealed, not yet sent (nor encoded: sequences are taken at the first send)."""
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    sender: asyncio.Task[None] | None = None
    inflight: deque[_Batch] = field(default_factory=deque)
    """Sent and not settled, in sequence order; the head is the oldest. Invariant: at most
    ``max_in_flight`` batches."""
    next_sequence: int = 0
    acked: tuple[int, int] | None = None
    """The producer id and epoch of the last batch the leader acknowledged here: it knows
    the producer, so its sequence check keeps pipelined batches in order."""
    acked_at: float = 0.0
    gap: tuple[int, int] | None = None
    """The producer id and epoch under which a sent batch of this partition was given up:
    the later batches' sequences may follow a batch the leader does not have."""
    starting: _Batch | None = None
    """Taken from ``sealed``, waiting to join the transaction (``add_partition``) before its
    first send: not acknowledged, so a flush, and with it a commit, still waits for it."""


class AsyncProducer:
    def __init__(
        self,
        bootstrap: str | Sequence[str],
        *,
        acks: int | str = -1,
        linger_ms: float = 5,
        batch_size: int = 1 << 20,
        buffer_memory: int = 64 << 20,
        compression: str | int = "none",
        enable_idempotence: bool = True,
        request_timeout_ms: int = 30_000,
        delivery_timeout_ms: int = 120_000,
        retry_backoff_ms: int = 100,
        max_request_size: int = 8 << 20,
        max_in_flight: int = MAX_IN_FLIGHT_IDEMPOTENT,
        source_host: str | None = None,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60_000,
        security: ClientSecurity | None = None,
    ) -> None:
        if transactional_id is not None and not enable_idempotence:
            # As Kafka: a transactional producer is idempotent.
            raise ValueError("transactional_id requires enable_idempotence")
        if acks not in ACKS:
            raise ValueError(f"acks must be 0, 1, -1 or 'all', not {acks!r}")
        self.acks = ACKS[acks]
        if enable_idempotence and self.acks != -1:
            # Kafka refuses the same combination (idempotence needs acks=all).
            raise ValueError(
                "enable_idempotence requires acks='all'; pass "
                "enable_idempotence=False for acks=0 or 1"
            )
        if batch_size <= 0 or linger_ms < 0:
            raise ValueError("batch_size must be > 0 and linger_ms >= 0")
        if max_in_flight < 1 or (enable_idempotence and max_in_flight > MAX_IN_FLIGHT_IDEMPOTENT):
            # Kafka refuses the same: the leader recognises a resend as a duplicate only
            # among the producer's last five batches.
            raise ValueError(
                f"max_in_flight must be 1..{MAX_IN_FLIGHT_IDEMPOTENT} with idempotence "
                f"(>= 1 without), not {max_in_flight}"
            )
        self.max_in_flight = max_in_flight
        self.linger_s = linger_ms / 1000
        self.batch_size = min(batch_size, max_request_size)
        self.buffer_memory = buffer_memory
        self.compression = Compression.parse(compression)
        self.idempotent = enable_idempotence
        self.request_timeout_s = request_timeout_ms / 1000
        self.delivery_timeout_s = delivery_timeout_ms / 1000
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.transport = Transport(
            request_timeout_s=self.request_timeout_s, source_host=source_host, security=security
        )
        self.metadata = MetadataCache(self.transport, normalize_bootstrap(bootstrap))
        self._txn = (
            None
            if transactional_id is None
            else TransactionManager(
                self.transport,
                self.metadata,
                transactional_id,
                transaction_timeout_ms=transaction_timeout_ms,
                retry_timeout_s=self.delivery_timeout_s,
            )
        )
        self.producer_id = -1
        self.producer_epoch = -1
        self._queues: dict[TopicPartition, _PartitionQueue] = {}
        self._sticky: dict[str, int] = {}
        self._buffered = 0
        self._room = asyncio.Event()
        self._pid_lock = asyncio.Lock()
        self._order = asyncio.Lock()
        """Held by a ``send``/``send_batch`` that waits, so later calls queue behind it."""
        self._in_order = 0
        """Calls holding or queued for ``_order``: while any are, no call takes the fast
        path (the lock alone reads unlocked between a release and the next holder's turn)."""
        self._closed = False
        self._rng = random.Random()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.out_of_order_resends = 0
        """Batches answered OUT_OF_ORDER_SEQUENCE_NUMBER because an earlier one of their
        partition reached the leader after them, and sent again: what pipelining costs."""

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        await self.metadata.refresh(timeout_s=self.request_timeout_s)
        if self.idempotent and self._txn is None:
            await self._init_producer_id()
        self._loop = asyncio.get_running_loop()

    async def __aenter__(self) -> AsyncProducer:
        try:
            await self.start()
        except BaseException:
            await self.close()  # a producer that could not start holds no session
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _seal_all(self) -> list[asyncio.Future[Any]]:
        """Seal every open batch; the waiters of every batch not yet acknowledged."""
        for q in list(self._queues.values()):
            if q.open is not None and q.open.records:
                self._seal(q)
        return [
            w
            for q in self._queues.values()
            for b in (*q.sealed, *([q.starting] if q.starting else []), *q.inflight)
            for w in b.waiters
        ]

    async def flush(self) -> None:
        """Wait until every record sent so far is acknowledged or failed."""
        # Records sent before this call, as Kafka's flush(): concurrent sends do not keep it
        # waiting.
        waits = self._seal_all()
        if waits:
            await asyncio.gather(*waits, return_exceptions=True)

    async def close(self) -> None:
        """Deliver what was sent, then release the connections."""
        if self._closed:
            return
        try:
            await self.flush()
        finally:
            self._closed = True
            for q in self._queues.values():
                if q.sender is not None:
                    q.sender.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await q.sender
            await self.transport.close()

    # ------------------------------------------------------------------ producer ids

    async def _init_producer_id(self) -> None:
        ans = await call_with_retries(
            self.metadata,
            self.metadata.any_broker_url,
            "init_producer_id",
            {},
            budget_s=self.delivery_timeout_s,
            backoff_s=self.retry_backoff_s,
        )
        self.producer_id = int(ans["producer_id"])
        self.producer_epoch = int(ans["producer_epoch"])

    async def _reset_producer_id(self, failed_id: int) -> None:
        """A sent batch failed for good: its sequences are burnt. A new producer id restarts
        every partition's sequence at 0. Batches in flight keep the old id's bytes: their
        sequences still follow each other at the leader (``_sender``)."""
        async with self._pid_lock:
            if self.producer_id != failed_id:
                return  # another partition already did it
            await self._init_producer_id()
            for q in self._queues.values():
                q.next_sequence = 0
            log.info("producer id reset: %d -> %d", failed_id, self.producer_id)

    # ------------------------------------------------------------------ sending

    async def _choose_partition(self, topic: str, key: bytes | None, partition: int | None) -> int:
        parts = self.metadata.current.topics.get(topic)
        if parts is None:
            parts = await self.metadata.partitions(topic, timeout_s=self.request_timeout_s)
        n = len(parts)
        if partition is not None:
            if partition not in parts:
                raise ClientError(
                    "UNKNOWN_TOPIC_OR_PARTITION",
                    f"{topic} has {n} partitions, not partition {partition}",
                )
            return partition
        if key is not None:
            return partition_for_key(key, n)
        p = self._sticky.get(topic)
        if p is None or p >= n:
            p = self._sticky[topic] = self._rng.randrange(n)
        return p

    async def _wait_for_room(self, size: int) -> None:
        deadline = time.monotonic() + self.delivery_timeout_s
        while self._buffered + size > self.buffer_memory and self._buffered > 0:
            self._room.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise ClientError(
                    "REQUEST_TIMED_OUT",
                    f"buffer_memory ({self.buffer_memory} B) full for "
                    f"{self.delivery_timeout_s:.0f} s",
                )
            await wait_event(self._room, left)

    def _queue(self, tp: TopicPartition) -> _PartitionQueue:
        q = self._queues.get(tp)
        if q is None:
            q = self._queues[tp] = _PartitionQueue()
            q.sender = asyncio.get_running_loop().create_task(
                self._sender(tp, q), name=f"producer-{tp}"
            )
        return q

    async def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Sequence[Header] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Queue one record; the returned future resolves when it is acknowledged.

        Records reach their partition in the order ``send`` was called, also when calls
        overlap (tasks, the sync ``Producer``'s loop thread): a call that has to wait (for
        the topic's metadata, for buffer room) holds the send order, and calls made
        meanwhile queue behind it instead of overtaking with the metadata it fetched."""
        if self._closed:
            raise ClientError("ILLEGAL_STATE", "producer is closed")
        if self._txn is not None:
            self._txn.check_can_send()
        size = (
            RECORD_OVERHEAD
            + (len(value) if value is not None else 0)
            + (len(key) if key is not None else 0)
        )
        if headers:
            size += sum(len(h) + (len(v) if v else 0) for h, v in headers)
        if size > self.batch_size:
            raise ClientError(
                "MESSAGE_TOO_LARGE",
                f"record of ~{size} B exceeds batch_size/max_request_size ({self.batch_size} B)",
            )
        ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        # The common case without an await: nothing queued ahead, room in the buffer, the
        # partition's topic known.
        if (
            not self._in_order
            and self._loop is not None
            and self._buffered + size <= self.buffer_memory
        ):
            p = self._partition_now(topic, key, partition)
            if p is not None:
                return self._append(topic, p, key, value, ts, headers, size)
        async with self._in_call_order():
            if self._buffered + size > self.buffer_memory:
                await self._wait_for_room(size)
            p = await self._choose_partition(topic, key, partition)
            return self._append(topic, p, key, value, ts, headers, size)

    @contextlib.asynccontextmanager
    async def _in_call_order(self) -> AsyncIterator[None]:
        """The slow path of ``send``/``send_batch``: wait for the calls made before this
        one, start the producer if it was used without ``async with``, refuse if closed."""
        self._in_order += 1
        try:
            async with self._order:
                if self._loop is None:
                    await self.start()  # connect on first use
                if self._closed:
                    raise ClientError("ILLEGAL_STATE", "producer is closed")
                yield
        finally:
            self._in_order -= 1

    def _partition_now(self, topic: str, key: bytes | None, partition: int | None) -> int | None:
        """The record's partition if it is known without asking the cluster, else None."""
        parts = self.metadata.current.topics.get(topic)
        if parts is None:
            return None
        if partition is not None:
            return partition if partition in parts else None
        if key is not None:
            return partition_for_key(key, len(parts))
        p = self._sticky.get(topic, -1)
        return p if 0 <= p < len(parts) else None

    def _append(
        self,
        topic: str,
        p: int,
        key: bytes | None,
        value: bytes | None,
        ts: int,
        headers: Sequence[Header] | None,
        size: int,
    ) -> asyncio.Future[RecordMetadata]:
        q = self._queues.get((topic, p))  # type: ignore[call-overload]
        if q is None:
            q = self._queue(TopicPartition(topic, p))
        b = q.open
        if b is not None and b.size + size > self.batch_size:
            self._seal(q)
            b = None
        if b is None:
            b = q.open = _Batch(TopicPartition(topic, p), time.monotonic())
            q.wake.set()  # the sender times the linger from here
        b.records.append((key, value, ts, tuple(headers) if headers else ()))
        assert self._loop is not None
        fut: asyncio.Future[RecordMetadata] = self._loop.create_future()
        b.waiters.append(fut)
        b.size += size
        self._buffered += size
        if b.size >= self.batch_size:
            self._seal(q)
        return fut

    async def send_and_wait(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Sequence[Header] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> RecordMetadata:
        return await (await self.send(topic, value, key, headers, partition, timestamp_ms))

    async def send_batch(
        self,
        topic: str,
        values: Sequence[bytes],
        *,
        keys: Sequence[bytes | None] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> asyncio.Future[list[BatchDelivery]]:
        """Queue many records at once: the bulk path for loaders and benchmarks, without a
        future per record. With ``keys`` and no ``partition`` each record goes where its key
        hashes; otherwise all go to ``partition`` or one sticky partition. The future gives
        one ``BatchDelivery`` per stored batch."""
        if keys is not None and len(keys) != len(values):
            raise ValueError("keys and values differ in length")
        ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        if None in values:
            raise ValueError("send_batch takes non-null values; send() a tombstone")
        if self._txn is not None:
            self._txn.check_can_send()
        async with self._in_call_order():  # in call order with send(), as send() explains
            futures = await self._enqueue_batch(topic, values, keys, partition, ts)
        out: asyncio.Future[list[BatchDelivery]] = asyncio.get_running_loop().create_future()
        gathered = asyncio.gather(*futures)

        def done(g: asyncio.Future[list[BatchDelivery]]) -> None:
            if out.done():
                return
            if g.cancelled():
                out.cancel()
            elif g.exception() is not None:
                out.set_exception(g.exception())  # type: ignore[arg-type]
            else:
                out.set_result(list(g.result()))

        gathered.add_done_callback(done)
        return out

    async def _enqueue_batch(
        self,
        topic: str,
        values: Sequence[bytes],
        keys: Sequence[bytes | None] | None,
        partition: int | None,
        ts: int,
    ) -> list[asyncio.Future[Any]]:
        vals_by_p: dict[int, list[bytes]] = {}
        keys_by_p: dict[int, list[bytes | None]] = {}
        if keys is not None and partition is None:
            parts = await self.metadata.partitions(topic, timeout_s=self.request_timeout_s)
            n = len(parts)
            sticky = await self._choose_partition(topic, None, None)
            for k, v in zip(keys, values, strict=True):
                p = sticky if k is None else partition_for_key(k, n)
                if p not in vals_by_p:
                    vals_by_p[p], keys_by_p[p] = [], []
                vals_by_p[p].append(v)
                keys_by_p[p].append(k)
        else:
            p = await self._choose_partition(topic, None, partition)
            vals_by_p[p] = list(values)
            if keys is not None:
                keys_by_p[p] = list(keys)
        futures: list[asyncio.Future[Any]] = []
        for p, vals in vals_by_p.items():
            ks = keys_by_p.get(p)
            tp = TopicPartition(topic, p)
            q = self._queue(tp)
            if q.open is not None and q.open.records:
                self._seal(q)  # keep the partition's order: earlier send()s go first
            # Sizes per chunk from totals (C-level sums), not per record.
            total = RECORD_OVERHEAD * len(vals) + sum(map(len, vals))
            if ks is not None:
                total += sum(len(k) for k in ks if k is not None)
            if max(map(len, vals)) + RECORD_OVERHEAD > self.batch_size:
                raise ClientError(
                    "MESSAGE_TOO_LARGE",
                    f"a record exceeds batch_size/max_request_size ({self.batch_size} B)",
                )
            per = (
                len(vals)
                if total <= self.batch_size
                else max(1, len(vals) * self.batch_size // total)
            )
            for i in range(0, len(vals), per):
                cv = vals[i : i + per]
                ck = None if ks is None else ks[i : i + per]
                size = total * len(cv) // len(vals)
                futures.append(await self._enqueue_whole(q, tp, (cv, ck, ts), size))
            if partition is None and keys is None:
                self._move_sticky(topic, p)
        return futures

    async def _enqueue_whole(
        self,
        q: _PartitionQueue,
        tp: TopicPartition,
        columns: tuple[list[bytes], list[bytes | None] | None, int],
        size: int,
    ) -> asyncio.Future[Any]:
        if self._buffered + size > self.buffer_memory:
            await self._wait_for_room(size)
        b = _Batch(tp, time.monotonic(), whole=True, columns=columns, size=size)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        b.waiters.append(fut)
        self._buffered += size
        q.sealed.append(b)
        q.wake.set()
        return fut

    def _move_sticky(self, topic: str, current: int) -> None:
        parts = self.metadata.current.topics.get(topic)
        if not parts or len(parts) < 2:
            return
        choices = [p for p in parts if p != current]
        self._sticky[topic] = self._rng.choice(choices)

    def _seal(self, q: _PartitionQueue) -> None:
        b = q.open
        if b is None or not b.records:
            return
        q.open = None
        q.sealed.append(b)
        q.wake.set()
        if self._sticky.get(b.tp.topic) == b.tp.partition:
            self._move_sticky(b.tp.topic, b.tp.partition)

    async def _sender(self, tp: TopicPartition, q: _PartitionQueue) -> None:
        """The partition's one task: it alone changes ``q.inflight`` and ``q.sealed``'s head;
        request tasks only report (their completion wakes it)."""
        try:
            while True:
                q.wake.clear()  # before looking: a wake from now on is not lost
                try:
                    wait_s = await self._step(q)
                except Exception as e:  # a bug must not strand the futures
                    log.exception("producer: delivering %s", tp)
                    self._fail_inflight(q, ClientError("UNKNOWN_SERVER_ERROR", repr(e)))
                    continue
                if wait_s is None:
                    await q.wake.wait()
                elif wait_s > 0:
                    await wait_event(q.wake, wait_s)
        except asyncio.CancelledError:
            self._fail_inflight(q, ClientError("ILLEGAL_STATE", "producer closed"))
            raise

    async def _step(self, q: _PartitionQueue) -> float | None:
        """Settle what the answers allow, in sequence order, then send what the window
        allows. Returns when to look again without a wake: None never, 0 at once."""
        for b in q.inflight:
            if b.request is not None and b.request.done():
                b.answer, b.answered_at = self._outcome(b.request), time.monotonic()
                b.request = None
        while q.inflight and q.inflight[0].answer is not None:
            head = q.inflight[0]
            ans = head.answer
            assert ans is not None
            if isinstance(ans, ClientError):
                wait_s = await self._on_head_error(q, head, ans)
                if wait_s is not None:
                    return wait_s  # its back-off: nothing else goes before its retry
                continue  # sent again, or given up
            q.inflight.popleft()
            q.acked, q.acked_at = head.producer, time.monotonic()
            self._complete(head, int(ans.get("base_offset", -1)) if self.acks else -1)
            self._release(head)
        if not self._may_send_more(q):
            return None
        if not q.sealed:
            opened = q.open
            if opened is None or not opened.records:
                return None
            left = opened.created + self.linger_s - time.monotonic()
            if left > 0:
                # Woken early by a seal (batch full, flush), an answer, or not at all: the
                # timeout is the linger, measured on the same clock as ``created``.
                return left
            self._seal(q)
        await self._send_first(q, q.sealed.popleft())
        return 0

    def _may_send_more(self, q: _PartitionQueue) -> bool:
        """May a new batch go while ``q.inflight``'s are unsettled?

        Without idempotence: up to ``max_in_flight``, unless one waits for its retry. With
        it, order rests on the leader's sequence check, which holds only while the leader
        knows this producer id and epoch in the partition (a producer it does not know may
        start at any sequence, KIP-360): so the first batch of an id or epoch goes alone,
        and so do batches after an idle spell (``PIPELINE_IDLE_S``); batches of an older id
        (before a reset) drain before the new id's first batch goes."""
        if not q.inflight:
            return True
        if len(q.inflight) >= self.max_in_flight:
            return False
        if any(isinstance(b.answer, ClientError) for b in q.inflight):
            return False  # one waits to be sent again: its successors follow it in order
        if not self.idempotent:
            return True
        current = (self.producer_id, self.producer_epoch)
        return (
            q.acked == current
            and time.monotonic() - q.acked_at < PIPELINE_IDLE_S
            and all(b.producer == current for b in q.inflight)
        )

    async def _send_first(self, q: _PartitionQueue, b: _Batch) -> None:
        if self._txn is not None:
            # While it joins the transaction the batch is in neither ``sealed`` nor
            # ``inflight``: ``starting`` keeps it where a commit's flush waits for it. A commit
            # that passed it by ended the transaction without it, its send then failed
            # PRODUCER_FENCED, and the group's offsets were committed without their outputs
            # (the Jepsen txn-ctp workload found it).
            q.starting = b
            try:
                await self._txn.add_partition(b.tp)
            except ClientError as e:
                await self._give_up(b, e)
                self._release(b)
                return
            except asyncio.CancelledError:
                self._fail(b, ClientError("ILLEGAL_STATE", "producer closed"))
                self._release(b)
                raise
            finally:
                q.starting = None
        if time.monotonic() >= b.created + self.delivery_timeout_s:
            # Expired while waiting for the window (Kafka expires it in the accumulator):
            # never sent, so no sequence of it is burnt.
            await self._give_up(b, self._timed_out(b, None))
            self._release(b)
            return
        q.inflight.append(b)
        self._send(q, b)

    def _send(self, q: _PartitionQueue, b: _Batch) -> None:
        """(Re)send ``b``, encoded once with the next sequences (the same bytes on every
        retry, so the leader recognises a duplicate)."""
        if b.encoded is None:
            self._encode(q, b)
        b.behind = q.inflight[0] is not b
        b.answer, b.retry_at, b.sent = None, None, True
        timeout = max(
            0.0, min(b.created + self.delivery_timeout_s - time.monotonic(), self.request_timeout_s)
        )
        assert self._loop is not None
        b.request = self._loop.create_task(self._request(b, timeout))
        b.request.add_done_callback(lambda _: q.wake.set())

    async def _request(self, b: _Batch, timeout: float) -> dict[str, Any] | ClientError:
        try:
            url = await self.metadata.leader_url(b.tp.topic, b.tp.partition, timeout_s=timeout)
            body: dict[str, Any] = {
                "topic": b.tp.topic,
                "partition": b.tp.partition,
                "acks": self.acks,
                "timeout_ms": int(timeout * 1000),
                "batch": b.encoded,
            }
            if self._txn is not None:
                # The leader verifies the first batch of the epoch with the coordinator of
                # this id (KIP-890 part 1).
                body["transactional_id"] = self._txn.transactional_id
            return await self.transport.call(url, "produce", body, timeout_s=timeout + 1.0)
        except ClientError as e:
            return e

    def _outcome(self, request: asyncio.Task[dict[str, Any] | ClientError]) -> Any:
        if request.cancelled():
            return ClientError("ILLEGAL_STATE", "produce request cancelled")
        e = request.exception()
        if e is not None:
            log.error("producer: produce request failed", exc_info=e)
            return ClientError("UNKNOWN_SERVER_ERROR", repr(e))
        return request.result()

    async def _on_head_error(
        self, q: _PartitionQueue, head: _Batch, err: ClientError
    ) -> float | None:
        """The oldest unsettled batch failed: send it again (None, or the seconds of its
        back-off still to wait), or give it up (None)."""
        now = time.monotonic()
        if now >= head.created + self.delivery_timeout_s:
            await self._give_up_head(q, head, self._timed_out(head, err))
            return None
        if self.idempotent and err.code == OUT_OF_ORDER:
            if head.behind:
                # Its predecessors reached the leader after it (requests travel on several
                # connections); they are settled now, so this is its turn.
                self.out_of_order_resends += 1
                self._send(q, head)
                return None
            if q.gap == head.producer and self._txn is None:
                # Sent alone, refused: the leader lacks the batch given up before it, so it
                # does not have this one either. A new producer id takes it, from sequence 0.
                with contextlib.suppress(ClientError):
                    await self._reset_producer_id(head.producer[0])
                if self.producer_id != head.producer[0]:
                    head.encoded = None
                    self._send(q, head)
                    return None
            await self._give_up_head(q, head, err)
            return None
        if (self.idempotent and err.code in FATAL_SEQUENCE_ERRORS) or not err.retriable:
            await self._give_up_head(q, head, err)
            return None
        if head.retry_at is None:
            head.attempt += 1
            if err.refresh_metadata:
                with contextlib.suppress(ClientError):
                    await self.metadata.refresh(
                        timeout_s=max(0.1, min(5.0, head.created + self.delivery_timeout_s - now))
                    )
            head.retry_at = head.answered_at + min(
                self.retry_backoff_s * head.attempt,
                1.0,
                max(0.0, head.created + self.delivery_timeout_s - now),
            )
        left = head.retry_at - time.monotonic()
        if left > 0:
            return left
        self._send(q, head)
        return None

    async def _give_up_head(self, q: _PartitionQueue, head: _Batch, err: ClientError) -> None:
        q.inflight.popleft()
        if self.idempotent and self._txn is None:
            q.gap = head.producer
        await self._give_up(head, err, pid=head.producer[0])
        self._release(head)

    def _timed_out(self, b: _Batch, last: ClientError | None) -> ClientError:
        return ClientError(
            "REQUEST_TIMED_OUT",
            f"{b.count} record(s) for {b.tp} not acknowledged within "
            f"delivery_timeout_ms ({last or 'no answer'})",
        )

    def _release(self, b: _Batch) -> None:
        self._buffered -= b.size
        self._room.set()

    def _fail_inflight(self, q: _PartitionQueue, err: ClientError) -> None:
        while q.inflight:
            b = q.inflight.popleft()
            if b.request is not None:
                b.request.cancel()
            self._fail(b, err)
            self._release(b)

    def _encode(self, q: _PartitionQueue, b: _Batch) -> bytes:
        seq = -1
        if self.idempotent:
            seq = q.next_sequence
            q.next_sequence = (q.next_sequence + b.count) & 0x7FFFFFFF
        b.producer = (self.producer_id, self.producer_epoch)
        if b.columns is not None:
            values, keys, ts = b.columns
            b.encoded = encode_values(
                values,
                keys=keys,
                timestamp=ts,
                compression=self.compression,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                base_sequence=seq,
                transactional=self._txn is not None,
            )
        else:
            b.encoded = encode_batch(
                b.records,
                compression=self.compression,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                base_sequence=seq,
                transactional=self._txn is not None,
            )
        return b.encoded

    async def _give_up(self, b: _Batch, err: ClientError, *, pid: int | None = None) -> None:
        self._fail(b, err)
        if self._txn is not None:
            # Its sequences are burnt too, but the transaction's end bumps the epoch, which
            # restarts them: the transaction is abortable, the producer id stays.
            self._txn.on_send_failed(err)
            return
        if self.idempotent and b.sent:
            with contextlib.suppress(ClientError):
                await self._reset_producer_id(self.producer_id if pid is None else pid)

    def _fail(self, b: _Batch, err: BaseException) -> None:
        for w in b.waiters:
            if not w.done():
                w.set_exception(err)
                # A caller that never looks at the future must not get "exception never
                # retrieved" noise; errors reach those who await.
                w.exception()

    def _complete(self, b: _Batch, base: int) -> None:
        tp = b.tp
        if b.whole:
            w = b.waiters[0]
            if not w.done():
                w.set_result(BatchDelivery(tp.topic, tp.partition, base, b.count))
            return
        for i, (w, r) in enumerate(zip(b.waiters, b.records, strict=True)):
            if not w.done():
                w.set_result(
                    RecordMetadata(tp.topic, tp.partition, base + i if base >= 0 else -1, r[2])
                )

    # ------------------------------------------------------------------ transactions

    def _txn_or_raise(self) -> TransactionManager:
        if self._txn is None:
            raise ClientError("ILLEGAL_STATE", "not a transactional producer (transactional_id)")
        return self._txn

    @property
    def transaction_phase(self) -> TxnPhase | None:
        return None if self._txn is None else self._txn.phase

    async def init_transactions(self) -> None:
        """Take the transactional id's producer id and a new epoch from its coordinator:
        every older producer of the id is fenced and its open transaction aborted (Kafka's
        ``initTransactions``). Call once, before the first transaction."""
        txn = self._txn_or_raise()
        if self._loop is None:
            await self.start()
        self.producer_id, self.producer_epoch = await txn.init()
        self._restart_sequences()

    def begin_transaction(self) -> None:
        self._txn_or_raise().begin()

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, int] | Mapping[tuple[str, int], int],
        group_metadata: ConsumerGroupMetadata | str,
        *,
        metadata: Mapping[tuple[str, int], str] | None = None,
    ) -> None:
        """Commit a consumer group's offsets (the next offset to read, per partition) with
        this transaction: visible to the group only if it commits (Kafka's
        ``sendOffsetsToTransaction``). ``group_metadata``: the consumer's
        ``group_metadata()``, or a group id (no member check). ``metadata``: the string
        committed with a partition's offset (Kafka's ``OffsetAndMetadata.metadata``; the
        HTTP transactional produce keeps its last request id there)."""
        txn = self._txn_or_raise()
        meta = (
            ConsumerGroupMetadata(group_metadata)
            if isinstance(group_metadata, str)
            else group_metadata
        )
        if not offsets:
            return
        txn.check_can_send()
        group = CoordinatorClient(
            self.transport, self.metadata, meta.group_id, retry_timeout_s=self.delivery_timeout_s
        )
        # The group's coordinator first: looking it up creates __consumer_offsets, whose
        # partition joins the transaction next.
        await group.call("describe", {})
        await txn.add_offsets(meta.group_id)
        body = {
            "transactional_id": txn.transactional_id,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "member_id": meta.member_id,
            "generation": meta.generation,
            "offsets": [
                [t, p, int(o), (metadata or {}).get((t, p), "")]
                for (t, p), o in sorted(offsets.items())
            ],
        }
        try:
            answer = await group.call("txn_commit", body, timeout_s=self.request_timeout_s)
            err, message = str(answer.get("error") or "NONE"), str(answer.get("message") or "")
            refused = answer.get("partition_errors") or []
            if err == "NONE" and refused:
                # A topic the principal may not READ (issue 18): Kafka's TxnOffsetCommit
                # answers it per partition, an abortable error of the transaction.
                err = str(refused[0][2])
                message = f"offsets of {[[e[0], e[1]] for e in refused]} refused"
        except ClientError as e:
            err, message = e.code, e.message
        if err != "NONE":
            failure = ClientError(err, f"send_offsets_to_transaction: {message}")
            txn.on_send_failed(failure)
            if txn.phase is TxnPhase.FATAL_ERROR:
                raise ProducerFencedError(err, failure.message)
            raise TransactionAbortedError(err, failure.message)

    async def _flush_ok(self) -> BaseException | None:
        """Flush; the first failure of a batch of the transaction, None if all were
        delivered."""
        waits = self._seal_all()
        results = await asyncio.gather(*waits, return_exceptions=True) if waits else []
        return next((r for r in results if isinstance(r, BaseException)), None)

    async def commit_transaction(self) -> None:
        """Deliver every record of the transaction, then commit it. Raises
        ``TransactionAbortedError`` if a send failed (abort, then start again) and
        ``ProducerFencedError`` if a newer producer took the id (close this one)."""
        await self._txn_or_raise().end(True, self._flush_ok)
        self._restart_sequences()

    async def abort_transaction(self) -> None:
        """Abort the transaction: none of its records will ever be read at
        ``read_committed``, and offsets sent with it are dropped."""
        await self._txn_or_raise().end(False, self._flush_ok)
        self._restart_sequences()

    def _restart_sequences(self) -> None:
        """A new epoch (every end bumps it): the partitions' sequences start at 0."""
        txn = self._txn_or_raise()
        self.producer_id, self.producer_epoch = txn.producer_id, txn.producer_epoch
        for q in self._queues.values():
            q.next_sequence = 0

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncProducer]:
        """``async with producer.transaction():`` begins a transaction, commits it when the
        block ends, aborts it when the block raises (and re-raises). A fenced producer is
        not aborted: it can do nothing more."""
        self.begin_transaction()
        try:
            yield self
        except BaseException:
            if self.transaction_phase is not TxnPhase.FATAL_ERROR:
                with contextlib.suppress(ClientError):
                    await self.abort_transaction()
            raise
        await self.commit_transaction()
