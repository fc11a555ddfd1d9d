"""The state of one transactional id, and its record in the compacted ``__transaction_state``.

``TxnMetadata`` is Kafka's ``TransactionMetadata`` as an immutable value: what the
coordinator writes for a transactional id on every transition, and what a new coordinator
rebuilds by replaying the partition. Compaction keeps the last value per key, so the key is
the transactional id alone; ``DEAD`` is written as a tombstone (value ``None``).

Layout (msgpack arrays, like ``broker.groups.records``):

* key   ``["txn", transactional_id]``
* value ``[0, producer_id, producer_epoch, prev_producer_id, timeout_ms, state,
  [[topic, partition], ...], txn_start_ms, last_update_ms, rotated]``

The leading 0 is the format version, so fields can be added later as Kafka's schemas do.
A key or value that does not decode to a valid record (wrong shape, wrong types, an unknown
state, a negative id, an epoch out of range, partitions on a state that has none) raises
``CorruptRecordError``: a coordinator never acts on a record it cannot trust.

Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from broker.groups.types import TopicPartition
from broker.record_fields import int_field as _int
from broker.record_fields import pack as _pack
from broker.record_fields import str_field as _str
from broker.record_fields import unpack as _unpack
from storage.errors import CorruptRecordError

_VERSION = 0
TRANSACTION_STATE_TOPIC = "__transaction_state"

NO_PRODUCER_ID = -1
EPOCH_MAX = 32767
"""Java's ``Short.MAX_VALUE``. A client's pair never carries it: the coordinator must always
be able to bump the epoch once more for the markers that end its transaction (KIP-890
part 2), so an epoch that would reach it rotates the producer id instead."""
TRANSACTIONAL_ID_CHARS_MAX = 249 * 4
"""A bound on the id, so a key is never unbounded (Kafka bounds it by the request size)."""
TIMEOUT_MS_MAX = 2**31 - 1


class TxnState(StrEnum):
    """Kafka's ``TransactionState`` names."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"
    DEAD = "Dead"


PREPARED = frozenset({TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT})
COMPLETED = frozenset({TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})
WITH_PARTITIONS = frozenset({TxnState.ONGOING, *PREPARED})
"""Only these states hold partitions: a completed transaction's markers are all written."""


@dataclass(frozen=True)
class TxnMetadata:
    """One transactional id at one moment. Field invariants (checked by ``check``):

    * ``producer_id >= 0`` and ``0 <= producer_epoch <= EPOCH_MAX``;
    * in every state but the prepared and completed ones, ``producer_epoch < EPOCH_MAX``
      (the pair a client holds);
    * ``partitions`` is empty unless ``state in WITH_PARTITIONS``.

    ``producer_id``/``producer_epoch`` are the pair the client uses now (EMPTY, ONGOING, the
    completed states) or will use for its next transaction (the prepared states: the epoch
    was bumped when the transaction ended, KIP-890 part 2). ``prev_producer_id`` is the id
    before the last rotation (epoch exhaustion), -1 if none: requests still carrying it are
    fenced, and the markers of a transaction that ended with a rotation carry it
    (``marker_pair``).
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition] = frozenset()
    txn_start_ms: int = -1
    last_update_ms: int = -1
    prev_producer_id: int = NO_PRODUCER_ID
    rotated: bool = False
    """The transaction ended with a producer id rotation (prepared/completed states only):
    its data was written under ``prev_producer_id``."""

    def check(self) -> None:
        """``CorruptRecordError`` unless the invariants above hold."""
        if self.producer_id < 0:
            raise CorruptRecordError(f"{self.transactional_id!r}: negative producer id")
        if not 0 <= self.producer_epoch <= EPOCH_MAX:
            raise CorruptRecordError(f"{self.transactional_id!r}: epoch out of range")
        if not 0 < self.timeout_ms <= TIMEOUT_MS_MAX:
            raise CorruptRecordError(f"{self.transactional_id!r}: timeout out of range")
        if self.partitions and self.state not in WITH_PARTITIONS:
            raise CorruptRecordError(
                f"{self.transactional_id!r}: partitions in state {self.state.value}"
            )
        if self.rotated and (self.prev_producer_id < 0 or self.state not in PREPARED | COMPLETED):
            raise CorruptRecordError(
                f"{self.transactional_id!r}: rotated without a previous id, or not ended"
            )

    def marker_pair(self) -> tuple[int, int]:
        """The producer id and epoch the markers of this (ended) transaction carry: the
        bumped epoch, so no batch of the ended transaction can follow them (KIP-890 part 2);
        with a rotation, the old id at ``EPOCH_MAX``."""
        if self.rotated:
            return self.prev_producer_id, EPOCH_MAX
        return self.producer_id, self.producer_epoch

    def with_(self, **changes: Any) -> TxnMetadata:
        return replace(self, **changes)


def encode_txn(meta: TxnMetadata) -> tuple[bytes, bytes | None]:
    """``(key, value)`` for the compacted topic; ``DEAD`` is a tombstone."""
    key = _pack(["txn", meta.transactional_id])
    if meta.state is TxnState.DEAD:
        return key, None
    value = _pack(
        [
            _VERSION,
            meta.producer_id,
            meta.producer_epoch,
            meta.prev_producer_id,
            meta.timeout_ms,
            meta.state.value,
            [[tp.topic, tp.partition] for tp in sorted(meta.partitions)],
            meta.txn_start_ms,
            meta.last_update_ms,
            meta.rotated,
        ]
    )
    return key, value


def decode_txn_key(key: bytes) -> str:
    k = _unpack(key)
    if not isinstance(k, list) or len(k) != 2 or k[0] != "txn":
        raise CorruptRecordError(f"not a {TRANSACTION_STATE_TOPIC} key: {k!r:.80}")
    tid = _str(k[1])
    if not tid or len(tid) > TRANSACTIONAL_ID_CHARS_MAX:
        raise CorruptRecordError("transactional id empty or too long")
    return tid


def decode_txn(key: bytes, value: bytes | None) -> TxnMetadata | str:
    """The metadata stored under ``key``, or the transactional id alone for a tombstone;
    ``CorruptRecordError`` if malformed."""
    tid = decode_txn_key(key)
    if value is None:
        return tid
    v = _unpack(value)
    if not isinstance(v, list) or len(v) != 10 or v[0] != _VERSION:
        raise CorruptRecordError(f"record value is not a version-{_VERSION} array of 10")
    if not isinstance(v[9], bool):
        raise CorruptRecordError("rotated is not a boolean")
    try:
        state = TxnState(_str(v[5]))
    except ValueError:
        raise CorruptRecordError(f"unknown transaction state {v[5]!r:.40}") from None
    if state in (TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE):
        # Dead is a tombstone and the fence is never written (it is a pending transition).
        raise CorruptRecordError(f"state {state.value} is never stored")
    if not isinstance(v[6], list):
        raise CorruptRecordError("partitions is not an array")
    parts = []
    for e in v[6]:
        if not isinstance(e, list) or len(e) != 2:
            raise CorruptRecordError("a partition is not [topic, partition]")
        p = _int(e[1])
        if p < 0:
            raise CorruptRecordError("negative partition")
        parts.append(TopicPartition(_str(e[0]), p))
    epoch = _int(v[2])
    prev = _int(v[3])
    meta = TxnMetadata(
        transactional_id=tid,
        producer_id=_int(v[1]),
        producer_epoch=epoch,
        prev_producer_id=prev,
        timeout_ms=_int(v[4]),
        state=state,
        partitions=frozenset(parts),
        txn_start_ms=_int(v[7]),
        last_update_ms=_int(v[8]),
        rotated=v[9],
    )
    if prev < NO_PRODUCER_ID:
        raise CorruptRecordError("previous producer id below -1")
    meta.check()
    if epoch == EPOCH_MAX and state not in PREPARED | COMPLETED:
        raise CorruptRecordError(f"epoch {EPOCH_MAX} in state {state.value}")
    return meta
