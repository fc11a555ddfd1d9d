"""``AlterPartitionQueue``: the ISR changes this broker's partition leaders want the
controller to commit, sent as one request at a time (Kafka's ``AlterPartitionManager``).

Why: a leader used to send one AlterPartition request per partition the moment its ISR
changed. With 10,000 partitions a broker restart meant thousands of concurrent requests to
the active controller, each committed as a metadata batch of its own; most timed out, and the
ISRs shrank to their leaders and never refilled (docs/fault-injection.md, finding 13). Kafka's
brokers keep every pending change in one map and send them all in a single request, with at
most one request in flight; the controller checks each partition on its own and commits the
accepted ones as one batch of records.

Rules:

* one entry per partition, keyed ``(topic_id, partition)``; a change submitted for a
  partition replaces the one queued for it (the latest proposal is the only one its leader
  still waits for) and keeps its place in line;
* at most one request in flight: ``take(now_ms)`` moves up to ``partitions_max`` due entries
  into it, in the order they were first queued; nothing while one is in flight;
* a change submitted while one of the same partition is in flight waits in the queue for
  that answer and goes in the next request, so the controller never sees two changes of one
  partition at once, nor out of order;
* ``complete(results)`` pairs every sent entry with the controller's result for its
  partition (None when the controller left it out) and ends the request; ``fail()`` pairs
  every sent entry with None (no answer: the shell retries). Each pairing holds the exact
  change that was sent: the shell hands it to the leader that proposed it
  (``LeaderState.on_alter_partition_result``), which ignores an answer to anything but its
  change in flight;
* ``retry(owner, change, now_ms)`` queues a change again after ``retry_backoff_ms``, unless a
  newer one of its partition is queued already (the newer one wins);
* ``take`` drops, instead of sending, a due change that the shell's ``keep`` says nobody
  waits for any more (its leader resigned, or a newer registration settled it meanwhile);
* ``discard(key)`` forgets the change queued for a partition (its replica went away); one in
  flight is still answered, and the shell drops that answer because its leader moved on.

Pure: no I/O, no clock (time comes in as ``now_ms``), no asyncio.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

from common.invariant import invariant
from metalog.commands import PartitionStateChange
from metalog.records import TopicId
from metalog.responses import AlterPartitionResult

PARTITIONS_PER_REQUEST_MAX = 2_000
"""Changes in one AlterPartition request. Kafka sends every pending one; a cap keeps one
request (and the metadata batch it commits) within what a loaded controller answers well
inside the client's per-attempt timeout (5 s), and the rest go in the next request."""

RETRY_BACKOFF_MS = 500
"""Before a change whose request got no answer (or a retriable error) is sent again."""

OwnerT = TypeVar("OwnerT")
"""Whatever the shell needs to apply an answer: the replica and the leader that proposed."""

PartitionKey = tuple[TopicId, int]


@dataclass(frozen=True, slots=True)
class AlterItem(Generic[OwnerT]):
    """One partition's proposed change, queued or in flight."""

    owner: OwnerT
    change: PartitionStateChange
    due_ms: int
    """Not sent before this time (a retry's back-off; ``now_ms`` when submitted)."""

    @property
    def key(self) -> PartitionKey:
        return (self.change.topic_id, self.change.partition)


class AlterPartitionQueue(Generic[OwnerT]):
    """See the module docstring."""

    def __init__(
        self,
        *,
        partitions_max: int = PARTITIONS_PER_REQUEST_MAX,
        retry_backoff_ms: int = RETRY_BACKOFF_MS,
    ) -> None:
        invariant(partitions_max >= 1, "partitions_max %d < 1", partitions_max)
        self.partitions_max = partitions_max
        self.retry_backoff_ms = retry_backoff_ms
        self._queued: dict[PartitionKey, AlterItem[OwnerT]] = {}
        """Waiting to be sent, in the order first queued. Invariant: a partition has at
        most one change here and at most one in flight (``take`` moves changes out of here,
        and takes nothing while a request is in flight)."""
        self._in_flight: tuple[AlterItem[OwnerT], ...] | None = None

    # ------------------------------------------------------------------ queueing

    def submit(self, owner: OwnerT, change: PartitionStateChange, now_ms: int) -> None:
        """Queue ``change`` to be sent at once, replacing what was queued for its partition."""
        self._put(AlterItem(owner, change, now_ms))

    def retry(self, owner: OwnerT, change: PartitionStateChange, now_ms: int) -> bool:
        """Queue ``change`` again after the back-off; False (nothing queued) when a newer
        change of its partition is queued already."""
        key = (change.topic_id, change.partition)
        if key in self._queued:
            return False
        self._put(AlterItem(owner, change, now_ms + self.retry_backoff_ms))
        return True

    def discard(self, key: PartitionKey) -> bool:
        """Forget the change queued for ``key``; True if there was one."""
        return self._queued.pop(key, None) is not None

    def _put(self, item: AlterItem[OwnerT]) -> None:
        # Assigning an existing key keeps its place in the dict's order: a partition whose
        # change is replaced does not lose its turn.
        self._queued[item.key] = item

    # ------------------------------------------------------------------ sending

    @property
    def in_flight(self) -> tuple[AlterItem[OwnerT], ...] | None:
        return self._in_flight

    @property
    def queued(self) -> int:
        return len(self._queued)

    def queued_change(self, key: PartitionKey) -> PartitionStateChange | None:
        item = self._queued.get(key)
        return None if item is None else item.change

    def next_due_ms(self) -> int | None:
        """When the earliest queued change may be sent (None: nothing queued)."""
        return min((i.due_ms for i in self._queued.values()), default=None)

    def take(
        self, now_ms: int, *, keep: Callable[[AlterItem[OwnerT]], bool] | None = None
    ) -> tuple[AlterItem[OwnerT], ...]:
        """The changes to send in the next request (empty: nothing due, or a request is in
        flight); they are in flight until ``complete`` or ``fail``. A due change that ``keep``
        refuses (its leader moved on, or no longer waits for it) is dropped, not sent."""
        if self._in_flight is not None:
            return ()
        batch: list[AlterItem[OwnerT]] = []
        dropped: list[AlterItem[OwnerT]] = []
        for item in self._queued.values():
            if item.due_ms <= now_ms:
                if keep is not None and not keep(item):
                    dropped.append(item)
                    continue
                batch.append(item)
                if len(batch) == self.partitions_max:
                    break
        for item in (*batch, *dropped):
            del self._queued[item.key]
        if batch:
            self._in_flight = tuple(batch)
        return self._in_flight or ()

    def complete(
        self, results: Iterable[AlterPartitionResult]
    ) -> list[tuple[AlterItem[OwnerT], AlterPartitionResult | None]]:
        """End the request in flight with the controller's per-partition ``results``: each
        sent change with the result for its partition, or None where there is none."""
        by_key = {(r.topic_id, r.partition): r for r in results}
        return [(item, by_key.get(item.key)) for item in self._end()]

    def fail(self) -> list[tuple[AlterItem[OwnerT], AlterPartitionResult | None]]:
        """End the request in flight without an answer: every sent change with None."""
        return [(item, None) for item in self._end()]

    def _end(self) -> tuple[AlterItem[OwnerT], ...]:
        sent = self._in_flight
        invariant(sent is not None, "an AlterPartition answer with no request in flight")
        assert sent is not None  # for mypy
        self._in_flight = None
        return sent
