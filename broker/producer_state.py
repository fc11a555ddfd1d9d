"""Idempotent producer state of one partition (Kafka's ``ProducerStateManager``).

An idempotent producer gets a producer id and epoch from the controller and numbers the
records it sends to each partition with a sequence (int32, wrapping to 0 after 2**31-1,
KAFKA-5283). For each producer id this module keeps its epoch and the metadata of its last
five batches ``(first_seq, last_seq, first_offset, last_offset, timestamp_ms)`` (Kafka's
``NUM_BATCHES_TO_RETAIN``; a producer has at most five requests in flight), and decides for an
incoming batch (Kafka's ``ProducerAppendInfo.checkSequence`` and ``findDuplicateBatch``):

* same epoch and exactly the sequence range of a retained batch: ``Duplicate`` with the
  original offsets; the batch is not appended again (a retry whose answer was lost);
* an epoch older than the known one: ``InvalidProducerEpochError`` (a zombie instance);
* a newer epoch: must start at sequence 0 (the epoch bump resets sequences, KIP-360),
  else ``OutOfOrderSequenceError``;
* the same epoch: first_seq must follow the last appended last_seq (2**31-1 is followed by
  0), else ``OutOfOrderSequenceError``;
* an unknown producer id: any sequence is accepted. Its state may have expired or its
  records been deleted by retention; refusing would make the producer fail for good, which is
  what KIP-360 removed (Kafka's ``checkSequence`` accepts when the entry has no epoch);
* no producer id (-1): not idempotent, always appended.

``check_and_plan`` only decides; ``on_append`` records the batch once the log has assigned
offsets. The shell does both under the partition's append lock, so nothing interleaves.
Followers and recovery call ``on_append`` for every batch they write, with no checks (Kafka's
``AppendOrigin.REPLICATION``: the leader validated it).

Truncation (a follower cutting its unreplicated tail, KIP-101): every ``on_append`` at or
above the high watermark is journalled with the producer's entry from before it; the journal
is trimmed as the HW advances (``on_high_watermark``). ``truncate_to(offset)`` undoes the
journal back to ``offset`` exactly, which is what rebuilding from the remaining log would give.
Truncation below the HW happens only after an unclean election; ``can_truncate_to`` then says
False and the caller rebuilds (``ProducerState.rebuild`` or a snapshot plus ``replay``). Chosen
over Kafka's way (reload the newest snapshot below the offset and rescan the log after it) so
that the common case costs nothing but memory for the batches above the HW.

Expiration: a producer whose last batch's timestamp is ``producer.id.expiration.ms`` (default
one day) older than ``now_ms`` is forgotten (Kafka's ``isProducerExpired``; Kafka uses the
batch's max timestamp too, so the state rebuilt from the log expires the same way).
Truncation does not bring an expired producer back.

Snapshots: ``encode_snapshot`` gives compact bytes (msgpack, CRC-32C) holding the state as of
``end_offset``; at restart ``from_snapshot`` then ``replay`` of the headers from
``end_offset`` replaces a scan of the whole log. The caller writes and names the files and
discards a snapshot whose ``end_offset`` is above a truncation point. Unlike Kafka's snapshot
(which keeps one batch per producer) ours keeps all five, so duplicates are still caught after
a restart.

Transactions (KIP-98): a transactional batch (attribute bit) opens a transaction of its
producer in this partition if none is open (``current_txn_first_offset``); a control batch
(a commit or abort marker, ``storage.txn``) of that producer closes it. The partition's
*first unstable offset* is the smallest first offset of an open transaction; the last stable
offset (LSO) is min(that, HW), computed by the caller that knows the HW. An abort marker
that closes an open transaction makes an ``AbortedTxn`` (producer, first offset, marker
offset, LSO after it), which ``on_append`` returns: the caller hands it to the log's
per-segment aborted-transaction index (``storage.txn_index``), which read_committed readers
filter with; this state does not keep it (memory holds only the open transactions).
Leader-side checks
(Kafka's ``ProducerAppendInfo``): a control batch from a client is refused; a
non-transactional batch of a producer with an open transaction is INVALID_TXN_STATE; a
transactional batch that would open a transaction needs verification by the coordinator
(KIP-890 part 1, ``needs_txn_verification``; the shell asks it). A marker of an older producer
epoch, or of an older coordinator epoch than the last marker, is refused (``check_marker``).
A producer with an open transaction never expires (Kafka's ``isProducerExpired``).

Pure: no I/O, no clock, no global random.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import crc32c
import msgpack

from broker.errors import (
    CorruptProducerSnapshotError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from common.invariant import invariant
from storage.batch import BatchHeader
from storage.txn import AbortedTxn, ControlMarker

NUM_BATCHES_TO_RETAIN = 5
INT32_MAX = 0x7FFFFFFF
NO_PRODUCER_ID = -1
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000

_SNAPSHOT_MAGIC = b"LBPS"
_SNAPSHOT_VERSION = 3
"""1: no transactions; 2 adds each producer's open transaction and coordinator epoch, and
the aborted transactions; 3 drops the aborted transactions again (they are in the log's
``.txnindex`` files). All are read (a version 2 list is ignored)."""
NO_TXN = -1
_SNAPSHOT_HEADER = struct.Struct(">4sBI")  # magic, version, CRC-32C of the payload


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """Kafka's ``ProducerAppendInfo.inSequence``: ``next_seq`` follows ``last_seq``."""
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


@dataclass(frozen=True, slots=True)
class ProducerStateConfig:
    producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS
    """``producer.id.expiration.ms``."""

    @staticmethod
    def from_kafka(configs: Mapping[str, str]) -> ProducerStateConfig:
        return ProducerStateConfig(
            int(configs.get("producer.id.expiration.ms", DEFAULT_PRODUCER_ID_EXPIRATION_MS))
        )


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """One appended batch of a producer (Kafka's ``BatchMetadata``)."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class ProducerEntry:
    """A producer's state in one partition (Kafka's ``ProducerStateEntry``), immutable.

    Invariant: len(batches) <= 5, all of ``producer_epoch``, in append order; no batches
    only when the last thing this producer wrote here is a marker of a new epoch.
    """

    producer_id: int
    producer_epoch: int
    batches: tuple[BatchMetadata, ...]
    current_txn_first_offset: int = NO_TXN
    """The first offset of this producer's open transaction here; ``NO_TXN`` if none."""
    coordinator_epoch: int = -1
    """The coordinator epoch of the last marker (a marker of an older one is refused)."""
    marker_timestamp_ms: int = -1
    """The timestamp of the last marker (it keeps the producer from expiring too)."""

    @property
    def last_timestamp_ms(self) -> int:
        """The max timestamp of the last batch or marker (Kafka's ``lastTimestamp``):
        expiry's clock."""
        t = self.batches[-1].timestamp_ms if self.batches else -1
        return max(t, self.marker_timestamp_ms)

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def in_transaction(self) -> bool:
        return self.current_txn_first_offset != NO_TXN

    def find_duplicate(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The retained batch with exactly this sequence range (Kafka's
        ``batchWithSequenceRange``)."""
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None


@dataclass(frozen=True, slots=True)
class Append:
    """Plan: append the batch, then call ``on_append`` with its base offset."""


APPEND = Append()


@dataclass(frozen=True, slots=True)
class Duplicate:
    """Plan: do not append; answer the producer with the original batch's offsets."""

    base_offset: int
    last_offset: int


Plan = Append | Duplicate


class ProducerState:
    """The idempotent producers of one partition. See the module docstring."""

    def __init__(self, config: ProducerStateConfig | None = None, *, start_offset: int = 0) -> None:
        """An empty state for a log whose next offset is ``start_offset``."""
        self.config = config if config is not None else ProducerStateConfig()
        self._producers: dict[int, ProducerEntry] = {}
        self._end_offset = start_offset
        """Every batch below this offset has been applied, none at or above it (Kafka's
        ``mapEndOffset``). Invariant: batches are applied in increasing offset order."""
        self._journal: deque[tuple[int, int, ProducerEntry | None]] = deque()
        """``(first_offset, producer_id, entry before that batch)`` for every batch applied at
        or above ``_journal_floor``, in offset order."""
        self._journal_floor = start_offset
        """Truncation to any offset >= this is exact (``truncate_to``)."""
        self._ongoing: dict[int, int] = {}
        """producer id -> first offset of its open transaction. Invariant: exactly the
        entries with ``in_transaction``."""

    # ------------------------------------------------------------------ queries

    @property
    def end_offset(self) -> int:
        return self._end_offset

    @property
    def producers(self) -> Mapping[int, ProducerEntry]:
        return dict(self._producers)

    def get(self, producer_id: int) -> ProducerEntry | None:
        return self._producers.get(producer_id)

    def __len__(self) -> int:
        return len(self._producers)

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction; None if none is open."""
        return min(self._ongoing.values()) if self._ongoing else None

    def last_stable_offset(self, high_watermark: int) -> int:
        """Kafka's LSO: min(first unstable offset, HW)."""
        fu = self.first_unstable_offset
        return high_watermark if fu is None else min(fu, high_watermark)

    def needs_txn_verification(self, header: BatchHeader) -> bool:
        """A transactional data batch that would open a transaction here (KIP-890 part 1: the
        coordinator must confirm the partition is in the producer's transaction first)."""
        if not header.is_transactional or header.is_control:
            return False
        entry = self._producers.get(header.producer_id)
        return (
            entry is None
            or not entry.in_transaction
            or header.producer_epoch != entry.producer_epoch
        )

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Refuse a marker from a zombie producer epoch or a stale coordinator (Kafka's
        ``ProducerAppendInfo.checkProducerEpoch`` and ``checkCoordinatorEpoch``)."""
        entry = self._producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"marker of producer {producer_id} epoch {producer_epoch} is older than the "
                f"last seen epoch {entry.producer_epoch}"
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"marker of producer {producer_id} from coordinator epoch {coordinator_epoch}, "
                f"older than {entry.coordinator_epoch}"
            )

    # ------------------------------------------------------------------ leader path

    def check_and_plan(self, header: BatchHeader) -> Plan:
        """Decide what to do with a batch a client sent (see the module docstring for the
        rules). Raises ``OutOfOrderSequenceError``, ``InvalidProducerEpochError``, or
        ``InvalidRecordError`` (an idempotent batch without a sequence). Changes nothing."""
        pid = header.producer_id
        if header.is_control:
            raise InvalidRecordError("clients may not write control batches")
        if pid == NO_PRODUCER_ID:
            if header.is_transactional:
                raise InvalidRecordError("a transactional batch without a producer id")
            return APPEND
        if header.base_sequence < 0 or header.producer_epoch < 0:
            raise InvalidRecordError(
                f"batch of producer {pid} has sequence {header.base_sequence}, "
                f"epoch {header.producer_epoch}"
            )
        entry = self._producers.get(pid)
        if entry is None:
            return APPEND  # unknown producer: any sequence (KIP-360)
        epoch, first_seq = header.producer_epoch, header.base_sequence
        last_seq = header.last_sequence
        if epoch == entry.producer_epoch:
            dup = entry.find_duplicate(first_seq, last_seq)
            if dup is not None:
                return Duplicate(dup.first_offset, dup.last_offset)
        if epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"producer {pid} epoch {epoch} is older than the last seen epoch "
                f"{entry.producer_epoch}"
            )
        if entry.in_transaction and not header.is_transactional:
            raise InvalidTxnStateError(
                f"producer {pid} sent a non-transactional batch with a transaction open"
            )
        if not entry.batches:
            return APPEND  # only a marker seen in this epoch: no sequence to follow
        if epoch > entry.producer_epoch:
            if first_seq != 0:
                raise OutOfOrderSequenceError(
                    f"producer {pid} new epoch {epoch} must start at sequence 0, not {first_seq}"
                )
            return APPEND
        if not in_sequence(entry.last_seq, first_seq):
            raise OutOfOrderSequenceError(
                f"producer {pid} epoch {epoch}: sequence {first_seq} does not follow "
                f"{entry.last_seq}"
            )
        return APPEND

    def on_append(
        self,
        header: BatchHeader,
        base_offset: int | None = None,
        marker: ControlMarker | None = None,
    ) -> AbortedTxn | None:
        """Record a batch the log now holds at ``base_offset`` (default: the header's, as a
        follower or recovery sees it). Call it for *every* batch, idempotent or not, in log
        order, so ``end_offset`` follows the log; a control batch with its ``marker``
        (without one it only moves ``end_offset``). No checks: a leader checked with
        ``check_and_plan`` first; a follower trusts its leader. Returns the aborted
        transaction an abort marker closed, if any."""
        first_offset = header.base_offset if base_offset is None else base_offset
        last_offset = first_offset + header.last_offset_delta
        invariant(
            first_offset >= self._end_offset,
            "batch at %d applied to producer state that ends at %d",
            first_offset,
            self._end_offset,
        )
        self._end_offset = last_offset + 1
        pid = header.producer_id
        if pid == NO_PRODUCER_ID:
            return None
        prev = self._producers.get(pid)
        if header.is_control:
            if marker is None:
                return None
            return self._on_marker(header, first_offset, marker, prev)
        meta = BatchMetadata(
            header.base_sequence,
            header.last_sequence,
            first_offset,
            last_offset,
            header.max_timestamp,
        )
        if prev is None or prev.producer_epoch != header.producer_epoch:
            batches: tuple[BatchMetadata, ...] = (meta,)  # a new epoch forgets the old batches
        else:
            batches = (*prev.batches, meta)[-NUM_BATCHES_TO_RETAIN:]
        txn_first = NO_TXN
        if header.is_transactional:
            txn_first = (
                prev.current_txn_first_offset
                if prev is not None and prev.in_transaction
                else first_offset
            )
            self._ongoing[pid] = txn_first
        self._producers[pid] = ProducerEntry(
            pid,
            header.producer_epoch,
            batches,
            txn_first,
            prev.coordinator_epoch if prev is not None else -1,
            prev.marker_timestamp_ms if prev is not None else -1,
        )
        if first_offset >= self._journal_floor:
            self._journal.append((first_offset, pid, prev))
        return None

    def _on_marker(
        self,
        header: BatchHeader,
        offset: int,
        marker: ControlMarker,
        prev: ProducerEntry | None,
    ) -> AbortedTxn | None:
        pid = header.producer_id
        aborted = None
        if prev is not None and prev.in_transaction:
            del self._ongoing[pid]
            if not marker.commit:
                aborted = AbortedTxn(
                    pid,
                    prev.current_txn_first_offset,
                    offset,
                    self.last_stable_offset(offset + 1),
                )
        same_epoch = prev is not None and prev.producer_epoch == header.producer_epoch
        self._producers[pid] = ProducerEntry(
            pid,
            max(header.producer_epoch, prev.producer_epoch if prev is not None else -1),
            prev.batches if prev is not None and same_epoch else (),
            NO_TXN,
            marker.coordinator_epoch,
            header.max_timestamp,
        )
        if offset >= self._journal_floor:
            self._journal.append((offset, pid, prev))
        return aborted

    def replay(
        self, headers: Iterable[BatchHeader], markers: Mapping[int, ControlMarker] | None = None
    ) -> None:
        """``on_append`` each header in turn (recovery after a snapshot, or a follower);
        ``markers`` holds the marker of each control batch by its base offset."""
        markers = markers or {}
        for h in headers:
            self.on_append(h, None, markers.get(h.base_offset) if h.is_control else None)

    # ------------------------------------------------------------------ truncation

    def on_high_watermark(self, high_watermark: int) -> None:
        """Batches below the HW are never truncated in a clean election: forget how to undo
        them."""
        if high_watermark <= self._journal_floor:
            return
        self._journal_floor = high_watermark
        while self._journal and self._journal[0][0] < high_watermark:
            self._journal.popleft()

    def can_truncate_to(self, offset: int) -> bool:
        """True if ``truncate_to(offset)`` is exact; else rebuild from the log."""
        return offset >= self._journal_floor or offset >= self._end_offset

    def truncate_to(self, offset: int) -> None:
        """Forget every batch at or above ``offset``, as if the log had never held them.
        Invariant: ``can_truncate_to(offset)``."""
        if offset >= self._end_offset:
            return
        invariant(
            offset >= self._journal_floor,
            "producer state can only undo back to %d, not %d: rebuild it from the log",
            self._journal_floor,
            offset,
        )
        while self._journal and self._journal[-1][0] >= offset:
            _, pid, prev = self._journal.pop()
            if prev is None:
                self._producers.pop(pid, None)
            else:
                self._producers[pid] = prev
        self._end_offset = offset
        self._ongoing = {
            pid: e.current_txn_first_offset
            for pid, e in self._producers.items()
            if e.in_transaction
        }

    # ------------------------------------------------------------------ expiration

    def maybe_expire_producers(self, now_ms: int) -> bool:
        """Forget producers idle for ``producer.id.expiration.ms``; True if any went."""
        ttl = self.config.producer_id_expiration_ms
        gone = {
            pid
            for pid, e in self._producers.items()
            if now_ms - e.last_timestamp_ms >= ttl and not e.in_transaction
        }
        if not gone:
            return False
        for pid in gone:
            del self._producers[pid]
        self._journal = deque(j for j in self._journal if j[1] not in gone)
        return True

    # ------------------------------------------------------------------ rebuild, snapshots

    @classmethod
    def rebuild(
        cls,
        headers: Iterable[BatchHeader],
        *,
        markers: Mapping[int, ControlMarker] | None = None,
        config: ProducerStateConfig | None = None,
        log_start_offset: int = 0,
        high_watermark: int | None = None,
    ) -> ProducerState:
        """The state of a log from its batch headers, oldest first (recovery without a
        snapshot, or after truncation below the HW). Only headers are read, never records.
        With ``high_watermark`` the batches above it stay undoable by ``truncate_to``."""
        state = cls(config, start_offset=log_start_offset)
        state._journal_floor = max(
            log_start_offset, high_watermark if high_watermark is not None else 1 << 62
        )
        state.replay(headers, markers)
        if high_watermark is None:
            state._journal_floor = state._end_offset
        return state

    def encode_snapshot(self) -> bytes:
        """The state as of ``end_offset``, compact: a header (magic ``LBPS``, version, CRC-32C
        of the payload) then msgpack ``[end_offset, [[pid, epoch, [[first_seq, last_seq,
        first_offset, last_offset, timestamp_ms], ...], current_txn_first_offset,
        coordinator_epoch, marker_timestamp_ms], ...]]`` (version 1 had not the last three
        fields of a producer; version 2 had a third element, the aborted transactions)."""
        producers = [
            [
                e.producer_id,
                e.producer_epoch,
                [
                    [b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp_ms]
                    for b in e.batches
                ],
                e.current_txn_first_offset,
                e.coordinator_epoch,
                e.marker_timestamp_ms,
            ]
            for e in sorted(self._producers.values(), key=lambda e: e.producer_id)
        ]
        payload: bytes = msgpack.packb([self._end_offset, producers], use_bin_type=True)
        return (
            _SNAPSHOT_HEADER.pack(_SNAPSHOT_MAGIC, _SNAPSHOT_VERSION, crc32c.crc32c(payload))
            + payload
        )

    @classmethod
    def from_snapshot(cls, data: bytes, config: ProducerStateConfig | None = None) -> ProducerState:
        """The state a snapshot holds; ``replay`` the log's headers from ``end_offset`` on.
        Raises ``CorruptProducerSnapshotError`` for anything that is not a snapshot we wrote.
        Truncation below ``end_offset`` needs a rebuild (nothing to undo with)."""
        if len(data) < _SNAPSHOT_HEADER.size:
            raise CorruptProducerSnapshotError("producer snapshot too short")
        magic, version, crc = _SNAPSHOT_HEADER.unpack_from(data)
        payload = data[_SNAPSHOT_HEADER.size :]
        if magic != _SNAPSHOT_MAGIC or version not in (1, 2, _SNAPSHOT_VERSION):
            raise CorruptProducerSnapshotError(
                f"not a producer snapshot (magic {magic!r}, version {version})"
            )
        if crc32c.crc32c(payload) != crc:
            raise CorruptProducerSnapshotError("producer snapshot checksum mismatch")
        try:
            body = msgpack.unpackb(payload, raw=False, strict_map_key=True)
            end_offset, producers = body[0], body[1]
            state = cls(config, start_offset=_int(end_offset))
            for p in producers:
                pid, epoch, batches = p[0], p[1], p[2]
                txn = [_int(x) for x in p[3:6]] if version >= 2 else [NO_TXN, -1, -1]
                metas = tuple(BatchMetadata(*(_int(x) for x in b)) for b in batches)
                if not (1 if version == 1 else 0) <= len(metas) <= NUM_BATCHES_TO_RETAIN:
                    raise ValueError(f"{len(metas)} batches for producer {pid}")
                entry = ProducerEntry(_int(pid), _int(epoch), metas, *txn)
                state._producers[entry.producer_id] = entry
                if entry.in_transaction:
                    state._ongoing[entry.producer_id] = entry.current_txn_first_offset
        except (ValueError, TypeError, msgpack.UnpackException) as e:
            raise CorruptProducerSnapshotError(f"producer snapshot does not decode: {e}") from e
        return state


def _int(x: Any) -> int:
    if type(x) is not int:
        raise TypeError(f"expected an integer, found {x!r}")
    return x
