"""The queue workload's second client: confluent-kafka (librdkafka) over the brokers' Kafka
listeners, where `jepsen_tests.longboat_client.LongboatQueueClient` uses Longboat's own Python
client over HTTP. The same workload and checker then judge a client Longboat did not write,
on Kafka's wire protocol (``run --client kafka``).

One `KafkaQueueClient` per worker: one idempotent acks=all ``Producer`` and one ``Consumer``
(no group: partitions are assigned, nothing is committed) whose assignment follows the key a
poll asks for. librdkafka has no asyncio API, so each blocking call runs in a thread.

librdkafka cannot bind its sockets to a source address, so these clients connect from
127.0.0.1 rather than their own 127.0.0.100+: a partition nemesis cuts the nodes from each
other but not from these clients (process, pause and clock faults reach them as usual).

How outcomes map (the history's ``fail`` means "certainly did not happen"):

* ``produce()`` refused the record before queueing it (BufferError, KafkaException: unknown
  partition, bad arguments) -> DefiniteError.
* a delivery report with an error librdkafka raises before sending (``_UNKNOWN_PARTITION``,
  ``_UNKNOWN_TOPIC``) or a refusal every attempt would get
  (MSG_SIZE_TOO_LARGE, INVALID_RECORD) -> DefiniteError.
* any other delivery error (``_MSG_TIMED_OUT`` after retries, NOT_ENOUGH_REPLICAS on the last
  attempt, a fatal idempotence error), or no report within the delivery timeout ->
  IndefiniteError: an earlier attempt may have reached the leader's log. A fatal error also
  replaces the producer (librdkafka's idempotent producer cannot go on after one).
* a poll asks the leader's high watermark first (ListOffsets latest, not cached): at or past
  it the answer is "nothing"; otherwise a poll that fails or brings nothing within the poll
  timeout raises DefiniteError (reads have no effect).
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from jepsen_tests.cluster import DefiniteError, IndefiniteError

# Errors that certainly left nothing in the log: librdkafka's own, raised before a request
# carried the record, and broker refusals that every attempt would get.
_DEFINITE = frozenset(
    {
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.INVALID_RECORD,
    }
)


class KafkaCluster(Protocol):
    """What the client needs of ``jepsen_tests.longboat.LongboatCluster``."""

    topic: str
    idempotence: bool

    def kafka_bootstrap(self) -> str: ...

    def key_partition(self, key: str) -> int: ...


class KafkaQueueClient:
    def __init__(
        self,
        cluster: KafkaCluster,
        name: str,
        *,
        request_timeout_ms: int = 3_000,
        delivery_timeout_ms: int = 8_000,
        poll_timeout_ms: int = 1_000,
    ) -> None:
        self.cluster = cluster
        self.name = name
        self.request_timeout_ms = request_timeout_ms
        self.delivery_timeout_ms = delivery_timeout_ms
        self.poll_timeout_ms = poll_timeout_ms
        self.bootstrap = cluster.kafka_bootstrap()
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        self._at: tuple[int, int] | None = None  # (partition, next offset) the consumer is at

    def _producer_or_new(self) -> Producer:
        if self._producer is None:
            self._producer = Producer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "client.id": self.name,
                    "acks": "all",
                    "enable.idempotence": self.cluster.idempotence,
                    "linger.ms": 0,
                    "request.timeout.ms": self.request_timeout_ms,
                    "message.timeout.ms": self.delivery_timeout_ms,
                    "socket.timeout.ms": self.request_timeout_ms,
                    "topic.metadata.refresh.interval.ms": 1_000,
                }
            )
        return self._producer

    def _send(self, key: str, value: int) -> int:
        p = self._producer_or_new()
        report: list[tuple[Any, Any]] = []
        try:
            p.produce(
                self.cluster.topic,
                value=str(value).encode(),
                key=key.encode(),
                partition=self.cluster.key_partition(key),
                on_delivery=lambda err, msg: report.append((err, msg)),
            )
        except (BufferError, KafkaException) as e:
            raise DefiniteError(f"not queued: {e}") from e
        # message.timeout.ms bounds the delivery; the extra second is for the report itself.
        p.flush(self.delivery_timeout_ms / 1000 + 1)
        if not report:
            raise IndefiniteError(f"no delivery report within {self.delivery_timeout_ms} ms")
        err, msg = report[0]
        if err is None:
            return int(msg.offset())
        if err.fatal():
            self._producer = None  # librdkafka's idempotent producer is unusable after one
        if err.code() in _DEFINITE:
            raise DefiniteError(str(err))
        raise IndefiniteError(str(err))

    async def send(self, key: str, value: int) -> tuple[int, str | None]:
        # The acknowledging leader is not in librdkafka's delivery report.
        return await asyncio.to_thread(self._send, key, value), None

    def _consumer_or_new(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "client.id": self.name,
                    "group.id": f"jepsen-{self.name}",  # required; unused without commits
                    "enable.auto.commit": False,
                    "auto.offset.reset": "error",
                    "fetch.wait.max.ms": 200,
                    "socket.timeout.ms": self.request_timeout_ms,
                    "topic.metadata.refresh.interval.ms": 1_000,
                }
            )
        return self._consumer

    def _poll(self, key: str, offset: int, max_records: int) -> list[tuple[int, Any]]:
        partition = self.cluster.key_partition(key)
        c = self._consumer_or_new()
        try:
            _, hw = c.get_watermark_offsets(
                TopicPartition(self.cluster.topic, partition),
                timeout=self.request_timeout_ms / 1000,
                cached=False,
            )
        except KafkaException as e:
            raise DefiniteError(f"high watermark: {e}") from e
        if hw <= offset:
            return []
        if self._at != (partition, offset):
            c.assign([TopicPartition(self.cluster.topic, partition, offset)])
            self._at = (partition, offset)
        msgs = c.consume(num_messages=max_records, timeout=self.poll_timeout_ms / 1000)
        out: list[tuple[int, Any]] = []
        for m in msgs:
            if m.error() is not None:
                self._at = None
                raise DefiniteError(str(m.error()))
            at, value = m.offset(), m.value()
            if value is not None and at is not None and m.partition() == partition and at >= offset:
                out.append((at, int(value)))
        if not out:
            self._at = None
            raise DefiniteError(
                f"no records from {offset} within {self.poll_timeout_ms} ms (high watermark {hw})"
            )
        self._at = (partition, out[-1][0] + 1)
        return out

    async def poll(self, key: str, offset: int, max_records: int) -> list[tuple[int, Any]]:
        return await asyncio.to_thread(self._poll, key, offset, max_records)

    def _close(self) -> None:
        # A client that cannot close cleanly (its leader is gone) has nothing left to lose.
        if self._producer is not None:
            self._producer.flush(1)
            self._producer = None
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    async def close(self) -> None:
        await asyncio.to_thread(self._close)
