"""Log compaction (``cleanup.policy=compact``): keep the latest record of every key.

How a pass works (``compact_log``):

1. Take the log's closed segments (never the active one; ``segments_for_cleaning``, under
   the log's lock) and keep those whose largest timestamp is at least
   ``min.compaction.lag.ms`` old: a prefix of the log.
2. Without the lock: decode them and build ``key -> latest offset`` over that range.
3. One segment at a time, rewrite it into ``<base>.log.cleaned`` (plus ``.index.cleaned``,
   ``.timeindex.cleaned`` and ``.txnindex.cleaned``, the entries of the abort markers kept), keeping a record only if it is the latest of its key in the
   range. Offsets are preserved: a batch that loses records is rebuilt with
   ``rebuild_batch`` (same base offset, last offset delta, epoch and producer state); a
   batch that loses none is copied byte for byte; a batch that loses all is dropped, unless
   it carries producer state (an idempotent producer's id), which is kept as an empty batch.
   The cleaned files are fsynced.
4. Under the lock again (``replace_segments``), if that segment is still in the log (a
   truncation or retention may have removed it meanwhile; then its rewrite is thrown away):
   delete its index files, rename each ``.cleaned`` file over its original (``.log`` first),
   and swap the segment object. Segments with nothing to remove are not rewritten. A crash at any point leaves
   either the old ``.log`` or the new one; index files that are missing are rebuilt on
   open, and leftover ``.cleaned`` files are deleted.

Reads and appends go on during steps 2 and 3; a reader holding an old segment keeps reading
its (unlinked) file, whose handle is closed only at a later maintenance pass.

Rules, as Kafka's:

* Tombstones (value None) are kept as the latest record of their key until their batch's
  max timestamp is older than ``delete.retention.ms``; then they are removed too, so a
  consumer that reads the log within that time sees the delete.
* Records without a key cannot be compacted by key; they are kept (Kafka refuses them in a
  compacted topic at produce time; we keep them rather than lose data already written).
* Transactions (KIP-98, Kafka's ``LogCleaner`` with ``CleanedTransactionMetadata``): only
  segments wholly below ``uncleanable_offset`` (the caller passes the partition's last stable
  offset) are cleaned, so every transaction there is decided or has its marker further on.
  A transaction's records count for "latest of a key" only once its commit marker is seen in
  the range; an aborted transaction's records are removed (its batches dropped, except the
  producer's last batch in the range, kept empty for its producer state); a transaction whose
  marker is not in the range is copied as it is. An abort marker is removed once no batch of
  its transaction is left and its max timestamp is older than ``delete.retention.ms`` (the
  consumers that read the aborted records had that long to see the marker). Other control
  batches are copied as they are.
* With ``cleanup.policy=compact,delete`` retention also deletes old segments
  (``PartitionLog.maybe_apply_retention``).

The cleaner does not import ``storage.log``, which calls it (``PartitionLog.maybe_compact``):
it states what it needs of a log as ``CleanableLog`` (``typing.Protocol``), and touches
nothing private of it (tests/unit/storage/test_cleaner_boundary.py checks).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Protocol

from storage.batch import BatchHeader, Record, decode_records, parse_header, rebuild_batch
from storage.config import LogConfig
from storage.errors import CorruptRecordError
from storage.fileio import FileLayer
from storage.segment import CLEANED_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX, Segment
from storage.txn import decode_marker
from storage.txn_index import TXNINDEX_SUFFIX

_cleaning = threading.Lock()
_busy: set[int] = set()


class CleanableLog(Protocol):
    """What the cleaner needs of a log (``storage.log.PartitionLog``); see its methods for
    the locking rules."""

    @property
    def dir_path(self) -> str: ...
    @property
    def config(self) -> LogConfig: ...
    @property
    def files(self) -> FileLayer: ...

    def segments_for_cleaning(self) -> list[Segment]: ...
    def replace_segments(
        self, old: list[Segment], new: list[Segment], rename_into_place: Callable[[], None]
    ) -> bool: ...


def compact_log(log: CleanableLog, now_ms: int, uncleanable_offset: int | None = None) -> bool:
    """One compaction pass over ``log``'s closed segments below ``uncleanable_offset``; True
    if segments were replaced."""
    with _cleaning:
        if id(log) in _busy:
            return False  # another thread is cleaning this log
        _busy.add(id(log))
    try:
        return _compact(log, now_ms, uncleanable_offset)
    finally:
        with _cleaning:
            _busy.discard(id(log))


class _Transactions:
    """What pass 1 learns of the transactions in the cleaned range."""

    def __init__(self) -> None:
        self.open_batches: dict[int, list[int]] = {}
        """producer id -> base offsets of its transaction's batches, marker not seen yet."""
        self.open_keys: dict[int, list[tuple[bytes, int]]] = {}
        self.aborted: set[int] = set()
        """Base offsets of the batches of aborted transactions."""
        self.marker_batches: dict[int, list[int]] = {}
        """Abort marker's base offset -> base offsets of its transaction's batches."""
        self.last_batch: dict[int, int] = {}
        """producer id -> base offset of its last data batch in the range."""

    def undecided(self) -> set[int]:
        return {b for bs in self.open_batches.values() for b in bs}


def _compact(log: CleanableLog, now_ms: int, uncleanable_offset: int | None) -> bool:
    cfg = log.config
    closed = log.segments_for_cleaning()
    horizon_ms = now_ms - cfg.min_compaction_lag_ms
    segments: list[Segment] = []
    for seg in closed:
        if seg.max_timestamp > horizon_ms:
            break  # too recent to clean (and so is everything after it)
        if uncleanable_offset is not None and seg.next_offset > uncleanable_offset:
            break  # an open transaction may still abort there
        segments.append(seg)
    if not segments:
        return False

    # Pass 1: the latest offset of each key in the range (the only state kept across
    # segments: memory grows with the number of keys, not with the data), counting a
    # transaction's records once its commit marker is seen.
    latest: dict[bytes, int] = {}
    txns = _Transactions()
    for seg in segments:
        for raw, records in _batches(seg):
            h = parse_header(raw)
            if h.is_control:
                _on_control(txns, h, raw, latest)
                continue
            if h.producer_id >= 0:
                txns.last_batch[h.producer_id] = h.base_offset
            if h.is_transactional:
                txns.open_batches.setdefault(h.producer_id, []).append(h.base_offset)
                txns.open_keys.setdefault(h.producer_id, []).extend(
                    (r.key, r.offset) for r in records if r.key is not None
                )
                continue
            for r in records:
                if r.key is not None:
                    latest[r.key] = r.offset
    undecided = txns.undecided()
    survived: set[int] = set()

    # Pass 2, one segment at a time: rewrite it beside the original if anything goes,
    # then swap it in. Unchanged segments are left alone.
    tombstone_horizon_ms = now_ms - cfg.delete_retention_ms
    swapped = False
    for seg in segments:
        out: list[bytes] = []
        changed = False
        for raw, records in _batches(seg):
            h = parse_header(raw)
            if h.is_control:
                txn = txns.marker_batches.get(h.base_offset)
                if (
                    txn is not None
                    and h.max_timestamp < tombstone_horizon_ms
                    and not any(b in survived for b in txn)
                ):
                    changed = True  # an abort marker no longer needed
                else:
                    out.append(raw)
                continue
            if h.base_offset in undecided:
                out.append(raw)
                survived.add(h.base_offset)
                continue
            if h.base_offset in txns.aborted:
                changed = True
                if txns.last_batch.get(h.producer_id) == h.base_offset:
                    out.append(rebuild_batch(h, []))
                    survived.add(h.base_offset)
                continue
            survived.add(h.base_offset)
            kept = [
                r
                for r in records
                if r.key is None
                or (
                    latest[r.key] == r.offset
                    and not (r.value is None and h.max_timestamp < tombstone_horizon_ms)
                )
            ]
            if len(kept) == len(records):
                out.append(raw)
                continue
            changed = True
            if kept or h.producer_id >= 0:
                out.append(rebuild_batch(h, kept))
            else:
                survived.discard(h.base_offset)
        if changed and _rewrite_and_swap(log, seg, out):
            swapped = True
    return swapped


def _on_control(txns: _Transactions, h: BatchHeader, raw: bytes, latest: dict[bytes, int]) -> None:
    if h.producer_id < 0:
        return
    try:
        marker = decode_marker(raw, verify=False)
    except CorruptRecordError:
        return  # not a transaction marker: it ends nothing
    batches = txns.open_batches.pop(h.producer_id, [])
    keys = txns.open_keys.pop(h.producer_id, [])
    if marker.commit:
        for k, o in keys:
            latest[k] = o
    else:
        txns.aborted.update(batches)
        txns.marker_batches[h.base_offset] = batches


def _batches(seg: Segment) -> Iterator[tuple[bytes, list[Record]]]:
    """Each batch of a closed segment, raw, with its records (none for control batches)."""
    for pos, h in seg.scan(0, verify=True, end=seg.size_bytes):
        raw = seg.log.pread(h.size, pos)
        yield raw, ([] if h.is_control else decode_records(raw, verify=False))


def _rewrite_and_swap(log: CleanableLog, seg: Segment, out: list[bytes]) -> bool:
    """Write ``out`` as ``seg``'s cleaned replacement, fsync it, swap it in atomically."""
    files = log.files
    path = seg.log_path + CLEANED_SUFFIX
    if files.exists(path):
        files.unlink(path)
    new = Segment(seg.dir_path, seg.base_offset, files, files.open(path))
    try:
        kept_markers = set()
        for raw in out:
            h = parse_header(raw)
            new.append([raw], h, log.config.index_interval_bytes)
            if h.is_control:
                kept_markers.add(h.base_offset)
        # An aborted transaction stays indexed as long as its marker is kept (Kafka's
        # CleanedTransactionMetadata): readers of what is left of it still need the entry.
        new.txn_entries = [a for a in seg.aborted_txns() if a.last_offset in kept_markers]
        new.flush()
        new.write_indexes(CLEANED_SUFFIX)
        new.txn_entries = None  # closed: read from its file once swapped in
    except BaseException:
        _discard([new])
        raise

    def rename_into_place() -> None:
        seg.delete_index_files()
        files.replace(seg.log_path + CLEANED_SUFFIX, seg.log_path)
        new.log.path = seg.log_path
        files.replace(seg.index_path + CLEANED_SUFFIX, seg.index_path)
        files.replace(seg.timeindex_path + CLEANED_SUFFIX, seg.timeindex_path)
        files.replace(seg.txnindex_path + CLEANED_SUFFIX, seg.txnindex_path)

    if not log.replace_segments([seg], [new], rename_into_place):
        _discard([new])
        return False
    files.fsync_dir(log.dir_path)
    return True


def _discard(new_segments: list[Segment]) -> None:
    for new in new_segments:
        new.close()
        base = new.log_path
        for path in (
            base + CLEANED_SUFFIX,
            base[: -len(".log")] + INDEX_SUFFIX + CLEANED_SUFFIX,
            base[: -len(".log")] + TIMEINDEX_SUFFIX + CLEANED_SUFFIX,
            base[: -len(".log")] + TXNINDEX_SUFFIX + CLEANED_SUFFIX,
        ):
            with contextlib.suppress(OSError):
                if new.files.exists(path):
                    new.files.unlink(path)
