"""The transactional producer's side of transactions: Kafka's ``TransactionManager``.

What it owns: the producer's transactional id, its (producer id, epoch) as the coordinator
handed them out, the phase of the current transaction, the partitions already added to it,
and the error that ended it. ``AsyncProducer`` drives it; it talks to the transaction
coordinator (``POST /binary/v1/txn/<op>``, docs/transactions.md) through a
``CoordinatorClient`` that finds the coordinator and follows it when it moves.

Phases (Kafka's ``TransactionManager.State``)::

    UNINITIALIZED --init_transactions--> READY --begin_transaction--> IN_TRANSACTION
    IN_TRANSACTION --commit_transaction--> COMMITTING --> READY
    IN_TRANSACTION | ABORTABLE_ERROR --abort_transaction--> ABORTING --> READY
    IN_TRANSACTION --a send fails--> ABORTABLE_ERROR
    any --PRODUCER_FENCED / INVALID_PRODUCER_EPOCH--> FATAL_ERROR (for good)

Errors, as Kafka's producer tells them apart: ``ProducerFencedError`` (fatal: a newer
producer owns the id, or the coordinator aborted this producer's transaction on timeout and
bumped the epoch; close the producer) and ``TransactionAbortedError`` (abortable: a send of
this transaction failed; abort and carry on). ``CONCURRENT_TRANSACTIONS`` (the previous
transaction's markers are still being written) is retried here with back-off.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from enum import StrEnum
from typing import Any

from api.client.coordinator import CoordinatorClient
from api.client.errors import ClientError, ProducerFencedError, TransactionAbortedError
from api.client.transport import MetadataCache, Transport
from api.client.types import TopicPartition

TXN_ROUTE = "txn"
FENCED = frozenset({"PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH", "INVALID_PRODUCER_ID_MAPPING"})
TXN_OUTCOMES = frozenset(
    {
        "NONE",
        "CONCURRENT_TRANSACTIONS",
        "INVALID_TXN_STATE",
        "INVALID_TRANSACTION_TIMEOUT",
        *FENCED,
    }
)
"""Answers of the transaction itself: returned by the coordinator client, acted on here."""
BACKOFF_S_MIN = 0.02
BACKOFF_S_MAX = 0.5


class TxnPhase(StrEnum):
    UNINITIALIZED = "UNINITIALIZED"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING = "COMMITTING"
    ABORTING = "ABORTING"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


class TransactionManager:
    """One transactional id's client state; safe to share between tasks of one loop."""

    def __init__(
        self,
        transport: Transport,
        metadata: MetadataCache,
        transactional_id: str,
        *,
        transaction_timeout_ms: int,
        retry_timeout_s: float,
    ) -> None:
        if not transactional_id:
            raise ValueError("transactional_id must not be empty")
        self.transactional_id = transactional_id
        self.timeout_ms = transaction_timeout_ms
        self.retry_timeout_s = retry_timeout_s
        self.coordinator = CoordinatorClient(
            transport,
            metadata,
            transactional_id,
            retry_timeout_s=retry_timeout_s,
            route=TXN_ROUTE,
            key="transactional_id",
            outcomes=TXN_OUTCOMES,
        )
        self.phase = TxnPhase.UNINITIALIZED
        self.producer_id = -1
        self.producer_epoch = -1
        self.partitions: set[TopicPartition] = set()
        """Added to the coordinator's transaction (or being added)."""
        self.offsets_groups: set[str] = set()
        self.error: ClientError | None = None
        self._adding: dict[TopicPartition, asyncio.Future[None]] = {}
        self._add_task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------ checks

    def check_can_send(self) -> None:
        """``send`` is allowed only inside a transaction that can still commit."""
        if self.phase is TxnPhase.IN_TRANSACTION:
            return
        self._raise_if_failed()
        raise ClientError(
            "ILLEGAL_STATE",
            f"a transactional producer sends only inside a transaction (phase {self.phase})",
        )

    def _raise_if_failed(self) -> None:
        if self.phase is TxnPhase.FATAL_ERROR:
            raise ProducerFencedError(
                self.error.code if self.error else "PRODUCER_FENCED",
                f"transactional id {self.transactional_id!r}: {self.error}",
            )
        if self.phase is TxnPhase.ABORTABLE_ERROR:
            raise TransactionAbortedError(
                self.error.code if self.error else "TRANSACTION_ABORTED",
                f"the transaction failed and must be aborted: {self.error}",
            )

    def _require(self, *phases: TxnPhase) -> None:
        if self.phase not in phases:
            self._raise_if_failed()
            raise ClientError(
                "ILLEGAL_STATE",
                f"not allowed in phase {self.phase} (needs {'/'.join(phases)})",
            )

    def on_send_failed(self, err: ClientError) -> None:
        """A batch of the current transaction failed for good: the transaction can only be
        aborted (or, fenced, the producer is done)."""
        if err.code in FENCED:
            self._fatal(err)
        elif self.phase in (TxnPhase.IN_TRANSACTION, TxnPhase.COMMITTING):
            self.phase = TxnPhase.ABORTABLE_ERROR
            self.error = err

    def _fatal(self, err: ClientError) -> None:
        self.phase = TxnPhase.FATAL_ERROR
        self.error = err

    # ------------------------------------------------------------ calls

    async def _call(self, op: str, body: dict[str, Any]) -> dict[str, Any]:
        """``txn/<op>``, retrying CONCURRENT_TRANSACTIONS; a fencing answer is fatal."""
        deadline = time.monotonic() + self.retry_timeout_s
        attempt = 0
        while True:
            answer = await self.coordinator.call(op, body)
            err = str(answer.get("error") or "NONE")
            if err == "NONE":
                return answer
            if err in FENCED:
                e = ProducerFencedError(err, str(answer.get("message") or ""))
                self._fatal(e)
                raise e
            if err != "CONCURRENT_TRANSACTIONS" or time.monotonic() >= deadline:
                raise ClientError(err, f"{op}: {answer.get('message') or ''}")
            attempt += 1
            await asyncio.sleep(min(BACKOFF_S_MIN * 2 ** min(attempt - 1, 5), BACKOFF_S_MAX))

    def _pair(self) -> dict[str, Any]:
        return {"producer_id": self.producer_id, "producer_epoch": self.producer_epoch}

    async def init(self) -> tuple[int, int]:
        """InitProducerId: this producer's pair; every older producer of the id is fenced,
        and its open transaction aborted."""
        self._require(TxnPhase.UNINITIALIZED, TxnPhase.READY)
        answer = await self._call("init_producer_id", {"transaction_timeout_ms": self.timeout_ms})
        self.producer_id = int(answer["producer_id"])
        self.producer_epoch = int(answer["producer_epoch"])
        self.phase = TxnPhase.READY
        return self.producer_id, self.producer_epoch

    def begin(self) -> None:
        self._require(TxnPhase.READY)
        self.partitions.clear()
        self.offsets_groups.clear()
        self.error = None
        self.phase = TxnPhase.IN_TRANSACTION

    async def add_partition(self, tp: TopicPartition) -> None:
        """Before the first batch to ``tp`` in this transaction (the leader refuses a
        transactional batch for a partition the coordinator has not added, KIP-890 part
        1). Partitions asked for at the same time go in one request."""
        if tp in self.partitions:
            fut = self._adding.get(tp)
            if fut is not None:
                await asyncio.shield(fut)
            return
        # Batches sent before a commit or an abort are flushed by it: still this transaction.
        self._require(TxnPhase.IN_TRANSACTION, TxnPhase.COMMITTING, TxnPhase.ABORTING)
        self.partitions.add(tp)
        fut = asyncio.get_running_loop().create_future()
        self._adding[tp] = fut
        if self._add_task is None or self._add_task.done():
            self._add_task = asyncio.get_running_loop().create_task(self._add_waiting())
        await asyncio.shield(fut)

    async def _add_waiting(self) -> None:
        await asyncio.sleep(0)  # let the senders that start together join this request
        while True:
            waiting = {tp: f for tp, f in self._adding.items() if not f.done()}
            if not waiting:
                return
            try:
                await self._call(
                    "add_partitions",
                    {
                        **self._pair(),
                        "partitions": [[tp.topic, tp.partition] for tp in sorted(waiting)],
                    },
                )
                outcome: BaseException | None = None
            except ClientError as e:
                outcome = e
                self.on_send_failed(e)
                for tp in waiting:
                    self.partitions.discard(tp)
            for tp, f in waiting.items():
                self._adding.pop(tp, None)
                if not f.done():
                    if outcome is None:
                        f.set_result(None)
                    else:
                        f.set_exception(outcome)
                        f.exception()  # read: a sender that went away must not log it

    async def add_offsets(self, group: str) -> None:
        self._require(TxnPhase.IN_TRANSACTION)
        if group in self.offsets_groups:
            return
        try:
            await self._call("add_offsets", {**self._pair(), "group": group})
        except ProducerFencedError:
            raise
        except ClientError as e:
            self.on_send_failed(e)
            raise
        self.offsets_groups.add(group)

    async def end(self, commit: bool, flush: Callable[[], Awaitable[BaseException | None]]) -> None:
        """Commit or abort. ``flush`` delivers every batch sent (the first failure, if any)."""
        if commit:
            self._require(TxnPhase.IN_TRANSACTION)
            self.phase = TxnPhase.COMMITTING
        else:
            self._require(TxnPhase.IN_TRANSACTION, TxnPhase.ABORTABLE_ERROR, TxnPhase.ABORTING)
            self.phase = TxnPhase.ABORTING
        failed = await flush()
        if commit and failed is not None and self.phase is not TxnPhase.FATAL_ERROR:
            # A batch failed: this transaction cannot commit.
            self.phase = TxnPhase.ABORTABLE_ERROR
            self.error = self.error or (
                failed
                if isinstance(failed, ClientError)
                else ClientError("TRANSACTION_ABORTED", f"a send failed: {failed!r}")
            )
        if self.phase is TxnPhase.FATAL_ERROR or (
            commit and self.phase is TxnPhase.ABORTABLE_ERROR
        ):
            self._raise_if_failed()
        if self.partitions or self.offsets_groups:
            try:
                answer = await self._call("end_txn", {**self._pair(), "commit": commit})
            except ProducerFencedError:
                raise
            except ClientError:
                # The outcome is unknown (the coordinator may have decided it): the same
                # end can be retried, and a retried end is answered as the first was.
                self.phase = TxnPhase.IN_TRANSACTION if commit else TxnPhase.ABORTING
                raise
            # The epoch is bumped on every end (KIP-890 part 2): this pair is the next one.
            self.producer_id = int(answer["producer_id"])
            self.producer_epoch = int(answer["producer_epoch"])
        self.partitions.clear()
        self.offsets_groups.clear()
        self.error = None
        self.phase = TxnPhase.READY
