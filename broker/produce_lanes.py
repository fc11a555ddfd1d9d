"""``ProduceLanes``: producer ids and sequences for the batches a broker builds for HTTP clients.

A JSON produce (``POST .../records``) becomes batches that this broker builds and routes to the
leader (``broker.router``), which retries through a leader change. A retry after a connection
broke cannot know whether the first attempt reached the leader's log: without a producer id the
record would be appended twice. Confluent's REST Proxy produces with the Java producer, whose
``enable.idempotence`` is on by default since Kafka 3.0, so a curl user expects one copy of
every record answered 200. Here each batch is stamped as an idempotent producer's would be, and
the leader (``broker.producer_state``) answers a retry of an appended batch as a duplicate, with
the original offsets.

A *lane* is one producer id writing one partition, with its next sequence. A lane carries one
batch at a time, so its sequences reach the leader in order however many requests run at once
(each request in flight takes a lane of its own; lanes are made on demand and kept for reuse).
A batch that succeeds moves its lane's sequence on; a batch that fails in any way (refused,
timed out, cancelled) leaves its lane's state at the leader unknown, so the lane is dropped and
the next batch gets a new producer id, which the leader accepts at any sequence (KIP-360).
Producer ids come in blocks from the controller (``broker.producer_ids``), so a new lane
usually costs no round trip; when none can be had quickly the batch goes without one
(at-least-once, as before) rather than fail.

Only for acks=all, as Kafka's idempotent producer requires: with acks=1 a batch can vanish in a
failover and the lane's next batch would be refused as out of order.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

SEQ_LIMIT = 1 << 30
"""A lane whose sequence reaches this is retired rather than wrap (int32 sequences)."""
IDLE_LANES_MAX = 32
"""Idle lanes kept per partition; more were only needed for a burst."""
ID_WAIT_S = 1.0
"""How long a batch waits for a producer id before it goes without one."""


@dataclass
class Lane:
    producer_id: int
    producer_epoch: int
    next_sequence: int


class ProduceLanes:
    def __init__(
        self, next_id: Callable[[], Awaitable[int]], *, id_wait_s: float = ID_WAIT_S
    ) -> None:
        self._next_id = next_id
        self._id_wait_s = id_wait_s
        self._idle: dict[tuple[str, int], list[Lane]] = {}
        self.created = 0
        self.dropped = 0
        self.without_id = 0

    async def acquire(self, topic: str, partition: int) -> Lane | None:
        """A lane of its own for one batch to ``topic``-``partition``; None: no producer id
        could be had within ``id_wait_s`` (the batch goes without one)."""
        idle = self._idle.get((topic, partition))
        if idle:
            return idle.pop()
        try:
            async with asyncio.timeout(self._id_wait_s):
                pid = await self._next_id()
        except Exception as e:  # the controller is away: produce on, at least once
            self.without_id += 1
            if self.without_id == 1 or self.without_id % 1000 == 0:
                log.warning(
                    "no producer id for %s-%d (%r): batches go without one (%d so far)",
                    topic,
                    partition,
                    e,
                    self.without_id,
                )
            return None
        self.created += 1
        return Lane(pid, 0, 0)

    def release(self, topic: str, partition: int, lane: Lane, records: int) -> None:
        """The lane's batch of ``records`` was appended (or answered as a duplicate)."""
        lane.next_sequence += records
        if lane.next_sequence >= SEQ_LIMIT:
            self.dropped += 1
            return
        idle = self._idle.setdefault((topic, partition), [])
        if len(idle) < IDLE_LANES_MAX:
            idle.append(lane)

    def drop(self, lane: Lane) -> None:
        """The lane's batch failed: what the leader holds for it is unknown."""
        self.dropped += 1

    def idle(self) -> int:
        return sum(map(len, self._idle.values()))
