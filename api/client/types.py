"""Values the client hands out: partitions, delivery reports, consumed records."""

from __future__ import annotations

from typing import NamedTuple

Header = tuple[str, bytes | None]

EARLIEST = -2
LATEST = -1
"""``ListOffsets`` timestamps, as in Kafka: the log start and the high watermark."""

CREATE_TIME = 0
"""``timestampType`` of every record (Kafka's ``TimestampType.CREATE_TIME``): the producer's
timestamp is kept; brokers do not stamp ``LogAppendTime``."""


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class RecordMetadata(NamedTuple):
    """A delivery report: where an acknowledged record landed. ``offset`` is -1 for
    ``acks=0`` (the producer never hears back the offset, as in Kafka)."""

    topic: str
    partition: int
    offset: int
    timestamp: int


class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


class ConsumerGroupMetadata(NamedTuple):
    """What ``send_offsets_to_transaction`` needs of a group member (Kafka's
    ``ConsumerGroupMetadata``): its offsets are committed under this generation, so a member
    that was fenced from the group cannot commit through a transaction either (KIP-447)."""

    group_id: str
    member_id: str = ""
    generation: int = -1
