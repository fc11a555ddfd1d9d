"""The transactional workloads' clients for a real Longboat cluster, over the Python client.

`LongboatTxnClient`: one transactional ``AsyncProducer`` (``transactional_id`` fixed per
worker, so a crashed worker's successor fences its zombie) and one ``read_committed``
``AsyncConsumer`` per partition it polls. `LongboatCtpProcessor`: a ``read_committed``
``AsyncGroupConsumer`` of `CTP_GROUP` over the input topic and a transactional producer that
writes the output topic and the group's offsets. Every socket binds the client's own address.

How outcomes map (see `jepsen_tests.workloads.txn`): anything that fails before
``commit_transaction`` is asked -> abort (best effort) and DefiniteError; an intentional
abort -> DefiniteError; ``commit_transaction`` raising ``TransactionAbortedError`` (a send
failed: the commit was never sent) -> abort and DefiniteError; any other failure of the
commit (a timeout, a lost coordinator, ``ProducerFencedError``, which may answer a retry of a
commit that was applied) -> IndefiniteError. After an unknown commit, or an abort that
failed, the producer is dropped and the next transaction starts a new one with the same id
(``init_transactions`` fences the old one and aborts what it left open).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from api.client import (
    AsyncConsumer,
    AsyncGroupConsumer,
    AsyncProducer,
    ClientError,
    TopicPartition,
    TransactionAbortedError,
)
from api.client.security import ClientSecurity
from jepsen_tests.checkers.txn import OUT_PREFIX, input_key, output_key
from jepsen_tests.cluster import DefiniteError, IndefiniteError
from jepsen_tests.longboat_client import LongboatCluster
from jepsen_tests.workloads.txn import CTP_GROUP

OUTPUT_TOPIC = "jepsen-out"
TRANSACTION_TIMEOUT_MS = 10_000
"""Short, so that a transaction a crashed worker left open (its successor's init aborts it
at once anyway) or one behind a partition is aborted by the coordinator within the run."""


def _tp(cluster: LongboatCluster, key: str) -> TopicPartition:
    if key.startswith(OUT_PREFIX):
        return TopicPartition(OUTPUT_TOPIC, cluster.key_partition(input_key(key)))
    return TopicPartition(cluster.topic, cluster.key_partition(key))


class _TxnProducer:
    """A transactional producer started on demand and dropped after any failure."""

    def __init__(
        self,
        bootstrap: list[str],
        transactional_id: str,
        host: str,
        request_timeout_ms: int,
        security: ClientSecurity | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.security = security
        self.transactional_id = transactional_id
        self.host = host
        self.request_timeout_ms = request_timeout_ms
        self.producer: AsyncProducer | None = None

    async def get(self) -> AsyncProducer:
        if self.producer is None:
            p = AsyncProducer(
                self.bootstrap,
                acks=-1,
                linger_ms=0,
                transactional_id=self.transactional_id,
                transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
                request_timeout_ms=self.request_timeout_ms,
                delivery_timeout_ms=3 * self.request_timeout_ms,
                source_host=self.host,
                security=self.security,
            )
            try:
                await p.init_transactions()
            except ClientError as e:
                with contextlib.suppress(ClientError, OSError):
                    await p.close()
                raise DefiniteError(f"init_transactions: {e}") from e
            self.producer = p
        return self.producer

    async def drop(self) -> None:
        p, self.producer = self.producer, None
        if p is not None:
            with contextlib.suppress(ClientError, OSError):
                await p.close()

    async def abort_quietly(self, p: AsyncProducer) -> None:
        """Abort after a failure; a producer that cannot is dropped (its successor's init
        aborts the transaction)."""
        try:
            await p.abort_transaction()
        except ClientError:
            await self.drop()

    async def run(
        self,
        sends: list[tuple[TopicPartition, bytes]],
        abort: bool,
        on_commit: Callable[[], None],
        before_commit: Callable[[AsyncProducer], Any] | None = None,
    ) -> list[int]:
        """One transaction; the outcome mapping of the module docstring."""
        p = await self.get()
        try:
            p.begin_transaction()
            futs = [await p.send(tp.topic, value, partition=tp.partition) for tp, value in sends]
            if before_commit is not None:
                await before_commit(p)
        except ClientError as e:
            await self.abort_quietly(p)
            raise DefiniteError(f"before commit: {type(e).__name__}: {e}") from e
        if abort:
            await self.abort_quietly(p)
            raise DefiniteError("aborted on purpose")
        on_commit()
        try:
            await p.commit_transaction()
        except TransactionAbortedError as e:
            await self.abort_quietly(p)
            raise DefiniteError(f"commit refused before it was sent: {e}") from e
        except ClientError as e:
            await self.drop()
            raise IndefiniteError(f"commit: {type(e).__name__}: {e}") from e
        try:
            mds = await asyncio.gather(*futs)
        except ClientError as e:  # committed: every send was delivered first
            raise IndefiniteError(f"committed, but a send's result failed: {e}") from e
        return [md.offset for md in mds]


class LongboatTxnClient:
    def __init__(
        self,
        cluster: LongboatCluster,
        name: str,
        host: str,
        transactional_id: str,
        *,
        request_timeout_ms: int = 3_000,
        poll_timeout_ms: int = 500,
    ) -> None:
        self.cluster = cluster
        self.host = host
        self.request_timeout_ms = request_timeout_ms
        self.poll_timeout_ms = poll_timeout_ms
        self.bootstrap = cluster.broker_urls()
        self.txn = _TxnProducer(
            self.bootstrap, transactional_id, host, request_timeout_ms, cluster.client_security
        )
        self._consumers: dict[TopicPartition, AsyncConsumer] = {}
        self._positions: dict[TopicPartition, int] = {}

    async def transact(
        self, sends: list[tuple[str, int]], abort: bool, on_commit: Callable[[], None]
    ) -> list[int]:
        return await self.txn.run(
            [(_tp(self.cluster, k), str(v).encode()) for k, v in sends], abort, on_commit
        )

    async def _consumer(self, tp: TopicPartition) -> AsyncConsumer:
        c = self._consumers.get(tp)
        if c is None:
            c = AsyncConsumer(
                self.bootstrap,
                max_wait_ms=200,
                auto_offset_reset="none",
                request_timeout_ms=self.request_timeout_ms,
                source_host=self.host,
                isolation_level="read_committed",
                security=self.cluster.client_security,
            )
            try:
                await c.start()
            except ClientError as e:
                await c.close()
                raise DefiniteError(f"consumer start: {e}") from e
            c.assign([tp])
            self._consumers[tp] = c
        return c

    async def poll(
        self, key: str, offset: int, max_records: int
    ) -> tuple[list[tuple[int, Any]], int]:
        tp = _tp(self.cluster, key)
        c = await self._consumer(tp)
        if self._positions.get(tp) != offset:
            c.seek(tp, offset)
        try:
            # The last stable offset first (end_offsets at read_committed): a caught-up poll
            # answers at once, and the final reads know where the end is.
            lso = (await c.end_offsets([tp]))[tp]
            if lso <= offset:
                self._positions[tp] = offset
                return [], offset
            recs = await c.poll(timeout_ms=self.poll_timeout_ms, max_records=max_records)
            nxt = await c.position(tp)
        except ClientError as e:
            self._positions.pop(tp, None)
            raise DefiniteError(str(e)) from e
        out = [(r.offset, int(r.value)) for r in recs if r.value is not None]
        if not out and nxt <= offset:
            # Below the last stable offset and nothing came, not even aborted records to
            # step over: a slow or unavailable leader, not the end of the key.
            raise DefiniteError(
                f"no records from {offset} within {self.poll_timeout_ms} ms (LSO {lso})"
            )
        self._positions[tp] = nxt
        return out, nxt

    async def crashed(self) -> None:
        await self.txn.drop()

    async def close(self) -> None:
        await self.txn.drop()
        await asyncio.gather(*(c.close() for c in self._consumers.values()), return_exceptions=True)
        self._consumers.clear()


class LongboatCtpProcessor:
    """A processor of `CTP_GROUP`: see the module docstring. After a failed step it seeks its
    partitions back to the group's committed offsets (as Kafka's processors do after an
    abort), so the records of an aborted step are consumed again."""

    def __init__(
        self,
        cluster: LongboatCluster,
        name: str,
        host: str,
        transactional_id: str,
        *,
        request_timeout_ms: int = 3_000,
        session_timeout_ms: int = 6_000,
    ) -> None:
        self.cluster = cluster
        self.txn = _TxnProducer(
            cluster.broker_urls(),
            transactional_id,
            host,
            request_timeout_ms,
            cluster.client_security,
        )
        self._key = {cluster.key_partition(k): k for k in cluster.keys}
        self.name = name
        self.host = host
        self.request_timeout_ms = request_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.consumer = self._new_consumer()
        self.started = False

    def _new_consumer(self) -> AsyncGroupConsumer:
        return AsyncGroupConsumer(
            self.cluster.broker_urls(),
            group_id=CTP_GROUP,
            client_id=self.name,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=self.session_timeout_ms,
            heartbeat_interval_ms=self.session_timeout_ms // 6,
            max_poll_interval_ms=20_000,
            max_wait_ms=200,
            request_timeout_ms=self.request_timeout_ms,
            source_host=self.host,
            isolation_level="read_committed",
            security=self.cluster.client_security,
        )

    async def _start(self) -> None:
        if self.started:
            return
        try:
            await self.consumer.start()
        except ClientError as e:
            raise DefiniteError(f"group consumer start: {e}") from e
        self.consumer.subscribe([self.cluster.topic])
        self.started = True

    async def step(
        self, max_records: int, abort: bool, on_commit: Callable[[], None], seen: dict[str, Any]
    ) -> bool:
        await self._start()
        try:
            recs = await self.consumer.poll(timeout_ms=300, max_records=max_records)
        except ClientError as e:
            raise DefiniteError(f"poll: {e}") from e
        # (partition, offset, value) by key, then offset: the order the outputs are sent in.
        got_recs = sorted(
            (r.partition, r.offset, r.value)
            for r in recs
            if r.topic == self.cluster.topic and r.value is not None and r.partition in self._key
        )
        if not got_recs:
            return False
        reads: dict[str, list[list[Any]]] = {}
        offsets: dict[TopicPartition, int] = {}
        for part, off, value in got_recs:
            reads.setdefault(self._key[part], []).append([off, int(value)])
            offsets[TopicPartition(self.cluster.topic, part)] = off + 1
        seen["reads"] = reads
        seen["sends"] = [[output_key(self._key[part]), int(v)] for part, _, v in got_recs]
        seen["offsets"] = {self._key[tp.partition]: o for tp, o in offsets.items()}
        meta = self.consumer.group_metadata()

        async def send_offsets(p: AsyncProducer) -> None:
            await p.send_offsets_to_transaction(offsets, meta)

        outputs = [(TopicPartition(OUTPUT_TOPIC, part), v) for part, _, v in got_recs]
        try:
            acked = await self.txn.run(outputs, abort, on_commit, send_offsets)
        except DefiniteError:
            await self._rewind(offsets)
            raise
        seen["sends"] = [
            [output_key(self._key[part]), int(v), o]
            for (part, _, v), o in zip(got_recs, acked, strict=True)
        ]
        return True

    async def _rewind(self, offsets: dict[TopicPartition, int]) -> None:
        """Back to the group's committed offsets: an aborted step's records come again.
        Without them (the coordinator unreachable) the member leaves and a new one joins."""
        try:
            committed = await self.consumer.committed(list(offsets))
            for tp in offsets:
                if tp in self.consumer.assignment():
                    self.consumer.seek(tp, committed.get(tp) or 0)
        except ClientError:
            # A member that went on from its own positions would skip the aborted records
            # (and later commit offsets past them): leave, and join again as a new member.
            await self.close()
            self.consumer = self._new_consumer()

    async def committed(self) -> dict[str, int]:
        await self._start()
        tps = [TopicPartition(self.cluster.topic, p) for p in sorted(self._key)]
        try:
            got = await self.consumer.committed(tps)
        except ClientError as e:
            raise DefiniteError(f"committed: {e}") from e
        return {self._key[tp.partition]: o for tp, o in got.items() if o is not None}

    async def close(self) -> None:
        await self.txn.drop()
        if self.started:
            with contextlib.suppress(ClientError, OSError):
                await self.consumer.close()
        self.started = False
