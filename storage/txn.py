"""Transaction control records and the read_committed view of a run of batches (KIP-98).

A transaction ends in a partition with a *control batch* written by the partition leader for
the transaction coordinator: attributes control + transactional, the producer's id and epoch,
no sequence, and one record laid out as Kafka's (``ControlRecordType``,
``EndTransactionMarker``):

* key   = version int16 (0) + type int16 (0 abort, 1 commit), big-endian;
* value = version int16 (0) + coordinator epoch int32, big-endian.

An *aborted transaction* of a partition is ``(producer_id, first_offset, last_offset,
last_stable_offset)`` (Kafka's ``AbortedTxn``, the entry of its ``.txnindex``):
``first_offset`` is the producer's first transactional batch of that transaction here,
``last_offset`` the offset of the abort marker, ``last_stable_offset`` the partition's LSO
just after the marker.

``read_committed_view`` turns the raw batches a read returned into what a read_committed
reader may see: every transactional data batch of an aborted transaction is replaced by an
*empty* batch with the same offsets (header kept, no records), so the reader's position still
moves past it (as the cleaner keeps empty batches for their offsets); control batches stay,
and every reader skips them as records (Kafka's consumers do the same).

Pure: no I/O, no clock, no global random.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from storage.batch import (
    BatchHeader,
    decode_records,
    encode_batch,
    iter_batches,
    rebuild_batch,
)
from storage.errors import CorruptRecordError

CONTROL_ABORT = 0
CONTROL_COMMIT = 1
_CONTROL_KEY = struct.Struct(">hh")  # version, type
_MARKER_VALUE = struct.Struct(">hi")  # version, coordinator epoch
NO_SEQUENCE = -1


@dataclass(frozen=True, slots=True)
class ControlMarker:
    """The end of one producer's transaction in one partition."""

    commit: bool
    coordinator_epoch: int


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """Kafka's ``AbortedTxn``: one aborted transaction of a partition."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def encode_marker_batch(
    producer_id: int, producer_epoch: int, marker: ControlMarker, *, timestamp_ms: int
) -> bytes:
    """The control batch the leader appends for ``marker`` (base offset 0: the log stamps it)."""
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if marker.commit else CONTROL_ABORT)
    value = _MARKER_VALUE.pack(0, marker.coordinator_epoch)
    return encode_batch(
        [(key, value, timestamp_ms, ())],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        transactional=True,
        control=True,
    )


def decode_marker(batch: bytes | bytearray | memoryview, *, verify: bool = True) -> ControlMarker:
    """The marker of a control batch; ``CorruptRecordError`` if it is not one."""
    records = decode_records(batch, verify=verify)
    if len(records) != 1:
        raise CorruptRecordError(f"control batch holds {len(records)} records, not 1")
    return marker_of_record(records[0].key, records[0].value)


def marker_of_record(key: bytes | None, value: bytes | None) -> ControlMarker:
    """The marker one control record holds; ``CorruptRecordError`` if it holds none."""
    if key is None or len(key) < _CONTROL_KEY.size:
        raise CorruptRecordError(f"control record key {key!r} is not version + type")
    version, kind = _CONTROL_KEY.unpack_from(key)
    if version < 0 or kind not in (CONTROL_ABORT, CONTROL_COMMIT):
        raise CorruptRecordError(f"control record of version {version}, type {kind}")
    if value is None or len(value) < _MARKER_VALUE.size:
        raise CorruptRecordError(f"transaction marker value {value!r} is too short")
    _, coordinator_epoch = _MARKER_VALUE.unpack_from(value)
    return ControlMarker(kind == CONTROL_COMMIT, coordinator_epoch)


def overlapping(
    aborted: Iterable[AbortedTxn], start_offset: int, end_offset: int
) -> list[AbortedTxn]:
    """The aborted transactions with data in ``[start_offset, end_offset)`` (Kafka's
    ``collectAbortedTxns``: first_offset < end and last_offset >= start)."""
    return [a for a in aborted if a.first_offset < end_offset and a.last_offset >= start_offset]


def is_aborted(h: BatchHeader, aborted: Sequence[AbortedTxn]) -> bool:
    """A transactional data batch that belongs to one of ``aborted``."""
    if h.is_control or not h.is_transactional:
        return False
    return any(
        a.producer_id == h.producer_id and a.first_offset <= h.base_offset <= a.last_offset
        for a in aborted
    )


def read_committed_view(data: bytes, aborted: Sequence[AbortedTxn]) -> bytes:
    """``data`` (whole batches) with every batch of an ``aborted`` transaction emptied (see the
    module docstring). The bytes are returned as they are when nothing in them aborted."""
    if not aborted:
        return data
    mv = memoryview(data)
    parts: list[bytes | memoryview] = []
    changed = False
    for pos, h in iter_batches(mv, verify=False):
        raw = mv[pos : pos + h.size]
        if is_aborted(h, aborted):
            parts.append(rebuild_batch(h, []))
            changed = True
        else:
            parts.append(raw)
    return b"".join(parts) if changed else data
