"""The partition side of transactions as the coordinator sees it: markers and verification.

``TxnMarker`` is one entry of Kafka's WriteTxnMarkers: end ``producer_id``'s transaction in
``topic``-``partition`` with a commit or abort marker, for the coordinator in
``coordinator_epoch``. ``ReplicaManager.write_txn_markers`` appends them on the partition
leaders (``storage.txn`` holds the control batch's layout), and the node route
``POST /internal/broker/v1/write_txn_markers`` (``broker.data_routes``) carries them from a
coordinator on another broker; ``encode_markers``/``decode_markers`` are that route's body.

``TxnVerifier`` is the KIP-890 part 1 hook: before the first transactional batch of a
producer epoch opens a transaction in a partition, the leader asks the coordinator whether
the partition is in that transaction (None: it is; otherwise the Kafka error code to answer
the producer with).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

TxnVerifier = Callable[[str, int, int, str, int], Awaitable[str | None]]
"""``(transactional_id, producer_id, producer_epoch, topic, partition)`` -> None (verified)
or a Kafka error code."""


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """One transaction marker to write (Kafka's ``WritableTxnMarker``, one partition)."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int


def encode_markers(markers: Sequence[TxnMarker]) -> list[dict[str, Any]]:
    return [
        {
            "topic": m.topic,
            "partition": m.partition,
            "producer_id": m.producer_id,
            "producer_epoch": m.producer_epoch,
            "commit": m.commit,
            "coordinator_epoch": m.coordinator_epoch,
        }
        for m in markers
    ]
