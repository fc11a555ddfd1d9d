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

Not here: transactions (ongoing transactions, markers, the last stable offset).

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
    OutOfOrderSequenceError,
)
from common.invariant import invariant
from storage.batch import BatchHeader

NUM_BATCHES_TO_RETAIN = 5
INT32_MAX = 0x7FFFFFFF
NO_PRODUCER_ID = -1
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000

_SNAPSHOT_MAGIC = b"LBPS"
_SNAPSHOT_VERSION = 1
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

    Invariant: 1 <= len(batches) <= 5, all of ``producer_epoch``, in append order.
    """

    producer_id: int
    producer_epoch: int
    batches: tuple[BatchMetadata, ...]

    @property
    def last_timestamp_ms(self) -> int:
        """The max timestamp of the last batch (Kafka's ``lastTimestamp``): expiry's clock."""
        return self.batches[-1].timestamp_ms

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset

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

    # ------------------------------------------------------------------ leader path

    def check_and_plan(self, header: BatchHeader) -> Plan:
        """Decide what to do with a batch a client sent (see the module docstring for the
        rules). Raises ``OutOfOrderSequenceError``, ``InvalidProducerEpochError``, or
        ``InvalidRecordError`` (an idempotent batch without a sequence). Changes nothing."""
        pid = header.producer_id
        if pid == NO_PRODUCER_ID:
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

    def on_append(self, header: BatchHeader, base_offset: int | None = None) -> None:
        """Record a batch the log now holds at ``base_offset`` (default: the header's, as a
        follower or recovery sees it). Call it for *every* batch, idempotent or not, in log
        order, so ``end_offset`` follows the log. No checks: a leader checked with
        ``check_and_plan`` first; a follower trusts its leader."""
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
            return
        prev = self._producers.get(pid)
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
        self._producers[pid] = ProducerEntry(pid, header.producer_epoch, batches)
        if first_offset >= self._journal_floor:
            self._journal.append((first_offset, pid, prev))

    def replay(self, headers: Iterable[BatchHeader]) -> None:
        """``on_append`` each header in turn (recovery after a snapshot, or a follower)."""
        for h in headers:
            self.on_append(h)

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

    # ------------------------------------------------------------------ expiration

    def maybe_expire_producers(self, now_ms: int) -> bool:
        """Forget producers idle for ``producer.id.expiration.ms``; True if any went."""
        ttl = self.config.producer_id_expiration_ms
        gone = {pid for pid, e in self._producers.items() if now_ms - e.last_timestamp_ms >= ttl}
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
        state.replay(headers)
        if high_watermark is None:
            state._journal_floor = state._end_offset
        return state

    def encode_snapshot(self) -> bytes:
        """The state as of ``end_offset``, compact: a header (magic ``LBPS``, version, CRC-32C
        of the payload) then msgpack ``[end_offset, [[pid, epoch, [[first_seq, last_seq,
        first_offset, last_offset, timestamp_ms], ...]], ...]]``."""
        producers = [
            [
                e.producer_id,
                e.producer_epoch,
                [
                    [b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp_ms]
                    for b in e.batches
                ],
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
        if magic != _SNAPSHOT_MAGIC or version != _SNAPSHOT_VERSION:
            raise CorruptProducerSnapshotError(
                f"not a producer snapshot (magic {magic!r}, version {version})"
            )
        if crc32c.crc32c(payload) != crc:
            raise CorruptProducerSnapshotError("producer snapshot checksum mismatch")
        try:
            end_offset, producers = msgpack.unpackb(payload, raw=False, strict_map_key=True)
            state = cls(config, start_offset=_int(end_offset))
            for pid, epoch, batches in producers:
                metas = tuple(BatchMetadata(*(_int(x) for x in b)) for b in batches)
                if not 1 <= len(metas) <= NUM_BATCHES_TO_RETAIN:
                    raise ValueError(f"{len(metas)} batches for producer {pid}")
                state._producers[_int(pid)] = ProducerEntry(_int(pid), _int(epoch), metas)
        except (ValueError, TypeError, msgpack.UnpackException) as e:
            raise CorruptProducerSnapshotError(f"producer snapshot does not decode: {e}") from e
        return state


def _int(x: Any) -> int:
    if type(x) is not int:
        raise TypeError(f"expected an integer, found {x!r}")
    return x
