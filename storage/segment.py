"""One segment of a partition log: ``<base>.log`` plus its sparse ``.index`` and ``.timeindex``,
and its aborted-transaction index ``.txnindex`` (``storage.txn_index``).

A segment is named by the base offset it was created at (20 digits, zero-padded, as Kafka
names them), holds whole batches back to back, and knows where its batches are through an
in-memory sparse index (``storage.index``). Only the last segment of a log (the active one)
is appended to; the others are immutable until retention deletes them or the cleaner
replaces them whole.

Index files are written whole, and fsynced, when a segment stops being active (roll) and on
clean shutdown. An active segment's indexes after a crash are rebuilt from its ``.log``
(recovery scans it anyway), so the append path writes one thing: the batch. The
``.txnindex`` differs: the active segment keeps its entries in memory (``txn_entries``) and
also appends each to its file as it comes (rare: one per abort marker; the file is created
with the first), unsynced, so that
after a crash recovery can check the file against the scanned batches instead of rebuilding
it from the whole log (``storage.log``); it is fsynced with the other index files. A closed
segment's entries are read from the file when asked for (``aborted_txns``), so memory holds
only the active segment's.

Must not: decode records (only ``offset_for_timestamp`` and the cleaner do, elsewhere), or
know about other segments.
"""

from __future__ import annotations

import os
import struct
from bisect import bisect_right
from collections.abc import Iterator, Sequence

import crc32c

from common.invariant import invariant
from storage.batch import (
    ATTRIBUTES_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_KAFKA,
    MAGIC_MSGPACK,
    BatchHeader,
    compute_crc,
    parse_header,
)
from storage.errors import CorruptRecordError, CorruptSegmentError
from storage.fileio import Buffer, FileHandle, FileLayer
from storage.index import IndexFormatError, OffsetIndex, TimeIndex
from storage.txn import AbortedTxn
from storage.txn_index import TXNINDEX_SUFFIX, TxnIndexError, encode_entries, parse_entries

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
CLEANED_SUFFIX = ".cleaned"
DELETED_SUFFIX = ".deleted"

# A segment holds at most this many offsets: relative offsets are u32 in the index, and
# Kafka rolls before a relative offset would overflow a signed int.
RELATIVE_OFFSET_MAX = (1 << 31) - 1

_SCAN_CHUNK_BYTES = 1 << 20
_LOCATE_CHUNK_BYTES = 64 << 10
_PAGE_BYTES = 4096
_PREFIX = struct.Struct(">qi")
_LAST_OFFSET_DELTA = struct.Struct(">i")
_LAST_OFFSET_DELTA_AT = 23
_WALK = struct.Struct(">qiiBIhi")
"""base_offset, batch_length, leader_epoch, magic, crc, attributes, last_offset_delta"""
_RECORD_COUNT = struct.Struct(">i")
_RECORD_COUNT_AT = 57
_MAX_TIMESTAMP = struct.Struct(">q")
_MAX_TIMESTAMP_AT = 35
_NO_SIZE_LIMIT = 1 << 62
"""Parsing an index file without checking it against its log's size."""


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


def parse_segment_name(filename: str) -> int | None:
    """Base offset of a ``.log`` file name, or None for any other file."""
    stem, _, suffix = filename.partition(".")
    if "." + suffix != LOG_SUFFIX or len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem)


class Segment:
    """Invariants: ``size_bytes`` is the end of the last whole batch; ``next_offset`` is one
    past the last batch's last offset (``base_offset`` when empty); every index entry points
    at a batch start below ``size_bytes``."""

    def __init__(self, dir_path: str, base_offset: int, files: FileLayer, log: FileHandle):
        self.dir_path = dir_path
        self.base_offset = base_offset
        self.files = files
        self.log = log
        self.index = OffsetIndex(base_offset)
        self.time_index = TimeIndex(base_offset)
        self.size_bytes = 0
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self.first_batch_max_timestamp: int | None = None
        """segment.ms counts from here, as Kafka's ``rollingBasedTimestamp``."""
        self.bytes_since_index_entry = 0
        self.index_beyond_end: tuple[int, int] | None = None
        """Set by ``load_indexes`` when the offset index file is well formed but has an
        entry ``(offset, position)`` at or past the end of the ``.log``: the file lost data
        the index was written for (recovery decides; see ``PartitionLog``)."""
        self.retired = False
        """Replaced by the cleaner or deleted: readers holding it must retry."""
        self.scanned = False
        """``recover`` rebuilt this segment's indexes from its batches (after a crash, or
        unusable index files): its ``.txnindex`` is rebuilt too (``storage.log``)."""
        self.txn_entries: list[AbortedTxn] | None = []
        """The aborted transactions whose markers this segment holds, in marker order, while
        it is active (or being rewritten by the cleaner); None once they are only in the
        ``.txnindex`` file (a closed segment)."""
        self.txn_file: FileHandle | None = None
        """The active segment's ``.txnindex``, open for append once it has an entry (so a
        partition without aborts holds no extra descriptor). Invariant: holds exactly
        ``txn_entries`` (unsynced until ``write_indexes``); with no handle there is no file
        until ``write_indexes`` writes it."""
        self.cache_dropped = 0
        """Bytes below this were asked out of the page cache again once their write-back
        had had time to end (or once, clean): gone. ``PartitionLog.drop_cache_behind``
        moves it, ``cache_asked`` and ``cache_asks``."""
        self.cache_asked = 0
        """Bytes below this were asked out at least once: clean pages went, dirty ones
        started writing back and go at a later ask."""
        self.cache_asks: list[tuple[int, int]] = []
        """``(end, asked_ms)`` for ``[cache_dropped, cache_asked)``: each piece's end and when
        it was first asked (ranges asked within a short while share one piece, the first
        time). Invariant: ends strictly ascending, all above ``cache_dropped``, the last one
        ``cache_asked``; empty iff ``cache_asked == cache_dropped``."""

    # ------------------------------------------------------------------ paths

    @property
    def log_path(self) -> str:
        return os.path.join(self.dir_path, segment_name(self.base_offset) + LOG_SUFFIX)

    @property
    def index_path(self) -> str:
        return os.path.join(self.dir_path, segment_name(self.base_offset) + INDEX_SUFFIX)

    @property
    def timeindex_path(self) -> str:
        return os.path.join(self.dir_path, segment_name(self.base_offset) + TIMEINDEX_SUFFIX)

    @property
    def txnindex_path(self) -> str:
        return os.path.join(self.dir_path, segment_name(self.base_offset) + TXNINDEX_SUFFIX)

    @property
    def is_empty(self) -> bool:
        return self.size_bytes == 0

    def __repr__(self) -> str:
        return (
            f"Segment(base={self.base_offset}, next={self.next_offset}, "
            f"bytes={self.size_bytes}, max_ts={self.max_timestamp})"
        )

    # ------------------------------------------------------------------ opening

    @classmethod
    def create(cls, dir_path: str, base_offset: int, files: FileLayer) -> Segment:
        seg = cls(dir_path, base_offset, files, files.open(_log_path(dir_path, base_offset)))
        if seg.log.size():
            seg.log.truncate(0)  # a stale file of the same name, left by a crash
        for p in (seg.index_path, seg.timeindex_path, seg.txnindex_path):
            if files.exists(p):
                files.unlink(p)
        return seg

    @classmethod
    def open_existing(cls, dir_path: str, base_offset: int, files: FileLayer) -> Segment:
        """Open with no scan; call ``load_indexes`` or ``recover`` next."""
        seg = cls(dir_path, base_offset, files, files.open(_log_path(dir_path, base_offset)))
        seg.size_bytes = seg.log.size()
        seg.txn_entries = None  # in the file, checked by the log (``load_txn_index``)
        return seg

    def load_indexes(self, next_offset: int | None) -> bool:
        """Load index files written at roll or clean shutdown; False if they are unusable.

        ``next_offset`` is known for the active segment (from the clean-shutdown marker);
        for others it is the end of the last batch, found by a short scan from the last
        index entry.
        """
        self.index_beyond_end = None
        try:
            if not (self.files.exists(self.index_path) and self.files.exists(self.timeindex_path)):
                return False
            raw = self.files.read_file(self.index_path)
            try:
                index = OffsetIndex.from_bytes(self.base_offset, raw, self.size_bytes)
            except IndexFormatError:
                whole = OffsetIndex.from_bytes(self.base_offset, raw, _NO_SIZE_LIMIT)
                if len(whole) and whole.positions[-1] >= self.size_bytes:
                    self.index_beyond_end = (whole.offsets[-1], whole.positions[-1])
                return False
            tindex = TimeIndex.from_bytes(
                self.base_offset, self.files.read_file(self.timeindex_path)
            )
        except (IndexFormatError, OSError):
            return False
        self.index, self.time_index = index, tindex
        self.max_timestamp = tindex.last_timestamp
        if len(tindex):
            self.offset_of_max_timestamp = tindex.offsets[-1]
        last_pos = index.positions[-1] if len(index) else 0
        if self.size_bytes == 0:
            self.next_offset = self.base_offset
        elif next_offset is not None:
            self.next_offset = next_offset
        else:
            end = last_pos
            try:
                for pos, h in self.scan(last_pos, verify=False):
                    self.next_offset = h.next_offset
                    end = pos + h.size
            except CorruptRecordError:
                return False
            if end != self.size_bytes:
                return False
        if len(index) and self.next_offset <= index.offsets[-1]:
            return False
        if len(tindex) and not (
            self.base_offset <= tindex.offsets[0] and tindex.offsets[-1] < self.next_offset
        ):
            return False
        self.bytes_since_index_entry = self.size_bytes - last_pos
        if self.size_bytes:
            h = parse_header(self.log.pread(HEADER_SIZE, 0))
            self.first_batch_max_timestamp = h.max_timestamp
        return True

    def recover(
        self, index_interval_bytes: int, *, verify: bool = True, end: int | None = None
    ) -> tuple[list[BatchHeader], CorruptRecordError | None]:
        """Scan the whole ``.log`` (or up to ``end``; CRCs checked when ``verify``) and
        rebuild the indexes.

        Returns the headers of the whole, valid batches found and, when the scan stopped
        at a batch that is not (a bad CRC, an impossible header, or a base offset that does
        not follow the previous batch: base offsets are outside the CRC), that error located
        in this file. An incomplete batch at the end stops the scan with no error. The
        segment then describes only the valid prefix (``size_bytes`` ends there); the caller
        decides whether to cut the file (a torn tail) or refuse it (corruption).
        """
        self.index = OffsetIndex(self.base_offset)
        self.time_index = TimeIndex(self.base_offset)
        self.size_bytes = 0
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = self.base_offset
        self.first_batch_max_timestamp = None
        self.bytes_since_index_entry = 0
        self.scanned = True
        headers: list[BatchHeader] = []
        error: CorruptRecordError | None = None
        positions: list[int] = []
        before: list[int] = []  # the segment's next offset before each batch
        try:
            for pos, h in self.scan(0, verify=verify, end=end):
                if h.base_offset < self.next_offset:
                    if headers and _header_jumped(before[-1], headers[-1], h):
                        # The previous batch's base offset is the damaged one (below).
                        raise _CutEarlier(positions[-1], headers[-1], before[-1], h)
                    raise CorruptRecordError(
                        f"base offset {h.base_offset} does not follow offset "
                        f"{self.next_offset - 1}",
                        path=self.log.path,
                        position=pos,
                    )
                positions.append(pos)
                before.append(self.next_offset)
                self._note_batch(pos, h, index_interval_bytes)
                headers.append(h)
        except _CutEarlier as cut:
            headers, _ = self.recover(index_interval_bytes, verify=verify, end=cut.position)
            error = CorruptRecordError(
                f"base offset {cut.jumped.base_offset} jumps past offset {cut.expected - 1} and "
                f"the next batch, at offset {cut.following.base_offset}, goes back: the "
                f"jumping batch's base offset, outside its CRC, is damaged",
                path=self.log.path,
                position=cut.position,
            )
        except CorruptRecordError as e:
            error = e
        return headers, error

    def reindex(self, index_interval_bytes: int) -> CorruptSegmentError | None:
        """Check every batch up to ``size_bytes`` (CRC and offsets) and rebuild the indexes
        from them. After a read found a bad batch, this tells a misleading index (rebuilt;
        None) from a corrupt file (the first bad batch, with the offset the good data before
        it ends at). Changes nothing but the in-memory indexes, and those only when the
        whole segment checked out."""
        shadow = Segment(self.dir_path, self.base_offset, self.files, self.log)
        _, error = shadow.recover(index_interval_bytes, verify=True, end=self.size_bytes)
        if error is None and (shadow.size_bytes, shadow.next_offset) != (
            self.size_bytes,
            self.next_offset,
        ):
            error = CorruptRecordError(
                f"batches end at byte {shadow.size_bytes} (offset {shadow.next_offset}), "
                f"not {self.size_bytes} (offset {self.next_offset})"
            )
        if error is not None:
            return CorruptSegmentError(
                error.reason,
                path=self.log.path,
                position=shadow.size_bytes,
                offset=shadow.next_offset,
            )
        self.index, self.time_index = shadow.index, shadow.time_index
        self.max_timestamp = shadow.max_timestamp
        self.offset_of_max_timestamp = shadow.offset_of_max_timestamp
        self.bytes_since_index_entry = shadow.bytes_since_index_entry
        return None

    # ------------------------------------------------------------------ scanning

    def scan(
        self, start: int, *, verify: bool, end: int | None = None
    ) -> Iterator[tuple[int, BatchHeader]]:
        """``(position, header)`` of each whole batch from ``start`` to the end of the file.

        Reads in 1 MiB chunks. Stops silently at an incomplete batch; raises
        ``CorruptRecordError`` with this file's path and the batch's position for an
        impossible header or (when ``verify``) a CRC mismatch.
        """
        file_end = self.log.size() if end is None else end
        pos = start
        buf = b""
        buf_at = pos
        while file_end - pos >= HEADER_SIZE:
            rel = pos - buf_at
            if len(buf) - rel < HEADER_SIZE:
                buf = self.log.pread(min(_SCAN_CHUNK_BYTES, file_end - pos), pos)
                buf_at, rel = pos, 0
            try:
                h = parse_header(buf, rel)
            except CorruptRecordError as e:
                raise e.at(self.log.path, pos) from None
            if pos + h.size > file_end:
                return
            if verify:
                if rel + h.size > len(buf):
                    buf = self.log.pread(max(_SCAN_CHUNK_BYTES, h.size), pos)
                    buf_at, rel = pos, 0
                actual = compute_crc(memoryview(buf)[rel : rel + h.size])
                if actual != h.crc:
                    raise CorruptRecordError(
                        f"crc mismatch: stored {h.crc:#010x}, computed {actual:#010x}",
                        path=self.log.path,
                        position=pos,
                    )
            yield pos, h
            pos += h.size

    def locate(self, offset: int) -> tuple[int, int, int] | None:
        """``(position, size, base_offset)`` of the first batch whose last offset is at least
        ``offset``, or None when this segment holds none. Reads headers only."""
        if offset >= self.next_offset:
            return None
        pos = self.index.lookup(offset)
        end = self.size_bytes
        buf = b""
        buf_at = pos
        while end - pos >= LOG_OVERHEAD:
            rel = pos - buf_at
            if len(buf) - rel < HEADER_SIZE:
                # One page first: the index usually points at the batch itself.
                chunk = _LOCATE_CHUNK_BYTES if buf else _PAGE_BYTES
                buf = self.log.pread(min(chunk, end - pos), pos)
                buf_at, rel = pos, 0
                if len(buf) < HEADER_SIZE:
                    return None
            base, length = _PREFIX.unpack_from(buf, rel)
            size = length + LOG_OVERHEAD
            (delta,) = _LAST_OFFSET_DELTA.unpack_from(buf, rel + _LAST_OFFSET_DELTA_AT)
            if base + delta >= offset:
                return pos, size, base
            pos += size
        return None

    def read_from(
        self,
        position: int,
        first_size: int,
        max_bytes: int,
        max_offset: int | None,
        *,
        verify: bool = True,
    ) -> bytes:
        """Whole batches from ``position``: the first always (unless it reaches
        ``max_offset``), more while within ``max_bytes`` and wholly below ``max_offset``.

        The end is chosen before reading, from batch boundaries already known (the segment
        end, index entries, the first batch's end), so there is one ``pread`` of exactly
        the bytes returned and no copy after it. With a sparse index up to
        ``index.interval.bytes`` of ``max_bytes`` may go unused: the price of not walking.

        ``verify``: every batch returned has a valid CRC, magic and length, and offsets
        inside this segment and increasing (base offset and epoch sit outside the CRC). The
        read ends before the first batch that fails; ``CorruptRecordError`` (located) if
        that is the first one, which may also mean the index pointed into a batch.
        """
        end = self.read_end(position, first_size, max_bytes)
        buf = self.log.pread(end - position, position)
        if max_offset is None and not verify:
            return buf
        # One look per batch: cut before the first batch reaching ``max_offset`` (and, when
        # verifying, before the first bad one). The hot loop of every fetch: one unpack
        # and one CRC call per batch, messages only on failure.
        n = len(buf)
        cut = 0
        prev_end = self.base_offset
        next_offset = self.next_offset
        mv = memoryview(buf)
        unpack = _WALK.unpack_from
        crc = crc32c.crc32c
        while n - cut >= HEADER_SIZE:
            base, length, _, magic, stored, _, delta = unpack(buf, cut)
            if max_offset is not None and base + delta >= max_offset:
                break
            end_at = cut + length + LOG_OVERHEAD
            if verify:
                # Either encoding: a Kafka client's batches (magic 2) sit beside ours.
                if not (
                    magic in (MAGIC_MSGPACK, MAGIC_KAFKA)
                    and cut + HEADER_SIZE <= end_at <= n
                    and prev_end <= base
                    and delta >= 0
                    and base + delta < next_offset
                    and crc(mv[cut + ATTRIBUTES_OFFSET : end_at]) == stored
                ):
                    if cut == 0:
                        raise CorruptRecordError(
                            self._batch_problem(mv, cut, prev_end),
                            path=self.log.path,
                            position=position,
                        )
                    break
                prev_end = base + delta + 1
            cut = end_at
        if verify and cut == 0 and 0 < n < HEADER_SIZE:
            # Not even one whole header where a batch was expected.
            raise CorruptRecordError(
                f"{n} bytes where a batch should start", path=self.log.path, position=position
            )
        return buf if cut >= n else buf[:cut]

    def _batch_problem(self, mv: memoryview, at: int, prev_end: int) -> str:
        """Why the batch at ``at`` of a read buffer failed ``read_from``'s checks."""
        base, length, _, magic, stored, _, delta = _WALK.unpack_from(mv, at)
        size = length + LOG_OVERHEAD
        if not HEADER_SIZE <= size <= len(mv) - at:
            return f"batch_length {length} does not fit the {len(mv) - at} bytes read"
        if magic != MAGIC_MSGPACK and magic != MAGIC_KAFKA:
            return f"unknown magic {magic:#x}"
        if base < prev_end or delta < 0 or base + delta >= self.next_offset:
            return (
                f"offsets {base}..{base + delta} are not after {prev_end - 1} and "
                f"inside the segment (next offset {self.next_offset})"
            )
        actual = compute_crc(mv[at : at + size])
        return f"crc mismatch: stored {stored:#010x}, computed {actual:#010x}"

    def read_end(self, position: int, first_size: int, max_bytes: int) -> int:
        """The end of a read from the batch at ``position``: a batch boundary already known
        (segment end, an index entry, the first batch's end) within ``max_bytes``."""
        limit = position + max(max_bytes, first_size)
        if limit >= self.size_bytes:
            return self.size_bytes
        i = bisect_right(self.index.positions, limit) - 1
        return max(self.index.positions[i] if i >= 0 else 0, position + first_size)

    def kafka_span(
        self, position: int, max_bytes: int, max_offset: int | None, batches_max: int
    ) -> tuple[int, int, int] | None:
        """``(end, records, next_offset)`` of the Kafka batches (magic 2) from the batch at
        ``position`` that a read would return, found from their headers alone (no CRC pass:
        the bytes are not read): the first always (unless it reaches ``max_offset``), more
        while within ``max_bytes``, wholly below ``max_offset`` and shaped right (a known
        magic, a length inside the segment, offsets increasing inside it). It stops before
        the first batch that is not Kafka's or not shaped right. None when the first one
        is not served so, or when more than ``batches_max`` batches would be walked
        (small batches: reading them whole is cheaper than a header read each)."""
        size = self.size_bytes
        limit = position + max_bytes
        pos = position
        records = 0
        prev_end = self.base_offset
        next_offset = self.next_offset
        buf = b""
        buf_at = pos
        walked = 0
        while size - pos >= HEADER_SIZE:
            rel = pos - buf_at
            if len(buf) - rel < HEADER_SIZE:
                buf = self.log.pread(min(_PAGE_BYTES, size - pos), pos)
                buf_at, rel = pos, 0
                if len(buf) < HEADER_SIZE:
                    break
            base, length, _, magic, _, _, delta = _WALK.unpack_from(buf, rel)
            end = pos + length + LOG_OVERHEAD
            if (
                magic != MAGIC_KAFKA
                or not pos + HEADER_SIZE <= end <= size
                or base < prev_end
                or delta < 0
                or base + delta >= next_offset
                or (max_offset is not None and base + delta >= max_offset)
                or (pos > position and end > limit)
            ):
                break
            walked += 1
            if walked > batches_max:
                return None
            (count,) = _RECORD_COUNT.unpack_from(buf, rel + _RECORD_COUNT_AT)
            records += count
            prev_end = base + delta + 1
            pos = end
        if pos == position:
            return None
        return pos, records, prev_end

    def batch_header_at(self, position: int) -> BatchHeader:
        return parse_header(self.log.pread(HEADER_SIZE, position))

    # ------------------------------------------------------------------ writing

    def _note_batch(self, pos: int, h: BatchHeader, index_interval_bytes: int) -> None:
        """Account for a batch now at ``pos`` (appended, or found by a scan)."""
        if not len(self.index) or self.bytes_since_index_entry >= index_interval_bytes:
            self.index.append(h.base_offset, pos)
            if h.max_timestamp > self.max_timestamp:
                self.time_index.maybe_append(h.max_timestamp, h.base_offset)
            else:
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_index_entry = 0
        self.bytes_since_index_entry += h.size
        if self.first_batch_max_timestamp is None:
            self.first_batch_max_timestamp = h.max_timestamp
        if h.max_timestamp > self.max_timestamp:
            self.max_timestamp = h.max_timestamp
            self.offset_of_max_timestamp = h.base_offset
        self.size_bytes = pos + h.size
        self.next_offset = h.next_offset

    def append(self, parts: Sequence[Buffer], h: BatchHeader, index_interval_bytes: int) -> int:
        """Write one batch (as ``parts``, written with one ``writev``) at the end."""
        invariant(
            h.base_offset >= self.next_offset,
            "segment append goes back: %s < %s",
            h.base_offset,
            self.next_offset,
        )
        pos = self.log.writev(parts)
        invariant(
            pos == self.size_bytes, "%s: wrote at %s, expected %s", self, pos, self.size_bytes
        )  # (self, not its path: args are built eagerly)
        self._note_batch(pos, h, index_interval_bytes)
        return pos

    def truncate_to_position(self, position: int, next_offset: int) -> None:
        """Cut the ``.log`` at ``position`` (a batch start) and forget what followed."""
        self.log.truncate(position)
        self.size_bytes = position
        self.next_offset = next_offset
        # What is written here next is new to the page cache (PartitionLog.drop_cache_behind).
        self.cache_dropped = min(self.cache_dropped, position)
        self.cache_asked = min(self.cache_asked, position)
        asks: list[tuple[int, int]] = []
        for end, at_ms in self.cache_asks:
            end = min(end, position)
            if end > (asks[-1][0] if asks else self.cache_dropped):
                asks.append((end, at_ms))
        self.cache_asks = asks
        self.index.truncate_from_position(position)
        self.time_index.truncate_from_offset(next_offset)
        self.max_timestamp = self.time_index.last_timestamp
        self.offset_of_max_timestamp = (
            self.time_index.offsets[-1] if len(self.time_index) else self.base_offset
        )
        last = self.index.positions[-1] if len(self.index) else 0
        self.bytes_since_index_entry = position - last
        if position == 0:
            self.first_batch_max_timestamp = None
        # The largest timestamp of the batches after the last time index entry is not in
        # the index: find it (headers only).
        start = self.index.lookup(self.offset_of_max_timestamp) if len(self.time_index) else 0
        for _, h in self.scan(start, verify=False, end=position):
            if h.max_timestamp > self.max_timestamp:
                self.max_timestamp = h.max_timestamp
                self.offset_of_max_timestamp = h.base_offset

    def finish_indexes(self) -> None:
        """Record the final max timestamp, so the time index alone gives the segment's
        largest timestamp after a restart (Kafka does the same on roll); and index the last
        batch, so the offset index file says where the segment's data ends.

        The second is ours, not Kafka's: a closed segment's data may end below the next
        segment's base because compaction dropped its last batches, or because the disk lost
        its tail. With the last batch indexed, a file cut at any batch boundary ends at or
        before a position its index names, which recovery reports as damage (fault-injection
        finding 8), while a cleaned segment (indexed by the cleaner after rewriting) does not.
        """
        if self.max_timestamp > self.time_index.last_timestamp:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        if not self.size_bytes:
            return
        start = self.index.positions[-1] if len(self.index) else 0
        last: tuple[int, BatchHeader] | None = None
        for pos, h in self.scan(start, verify=False, end=self.size_bytes):
            last = (pos, h)
        if last is not None and (not len(self.index) or last[0] > self.index.positions[-1]):
            self.index.append(last[1].base_offset, last[0])
            self.bytes_since_index_entry = self.size_bytes - last[0]

    def write_indexes(self, suffix: str = "") -> None:
        """Write the index files whole (to their names plus ``suffix``) and fsync them. The
        ``.txnindex`` is written from ``txn_entries`` when they are in memory (an active or
        rewritten segment); a closed segment's file is already written."""
        self.finish_indexes()
        out: list[tuple[str, bytes]] = [
            (self.index_path + suffix, self.index.to_bytes()),
            (self.timeindex_path + suffix, self.time_index.to_bytes()),
        ]
        if self.txn_file is not None:
            self.txn_file.fsync()  # the active segment's: already whole
        elif self.txn_entries is not None:
            out.append((self.txnindex_path + suffix, encode_entries(self.txn_entries)))
        for path, data in out:
            if self.files.exists(path):
                self.files.unlink(path)
            f = self.files.open(path)
            try:
                f.write(data)
                f.fsync()
            finally:
                f.close()

    def delete_index_files(self) -> None:
        for p in (self.index_path, self.timeindex_path, self.txnindex_path):
            if self.files.exists(p):
                self.files.unlink(p)

    # ------------------------------------------------------------------ aborted transactions

    def load_txn_index(self) -> list[AbortedTxn]:
        """The entries of the ``.txnindex`` file, checked against this segment's offsets;
        ``TxnIndexError`` if the file is missing or fails its checks."""
        if not self.files.exists(self.txnindex_path):
            raise TxnIndexError("missing")
        try:
            raw = self.files.read_file(self.txnindex_path)
        except FileNotFoundError:
            raise TxnIndexError("missing") from None
        return parse_entries(raw, self.base_offset, max(self.next_offset, self.base_offset))

    def aborted_txns(self) -> list[AbortedTxn]:
        """This segment's entries: from memory while active, else from its file.
        ``CorruptSegmentError`` if the file no longer passes its checks (it did at open):
        never served."""
        entries = self.txn_entries
        if entries is not None:
            return list(entries)
        try:
            return self.load_txn_index()
        except (TxnIndexError, OSError) as e:
            raise CorruptSegmentError(
                f"aborted transaction index: {e}",
                path=self.txnindex_path,
                position=0,
                offset=self.base_offset,
            ) from None

    def append_aborted_txn(self, entry: AbortedTxn) -> None:
        """Record the abort marker at ``entry.last_offset``, just appended here (active)."""
        entries = self.txn_entries
        invariant(entries is not None, "%s: aborted transaction added to a closed segment", self)
        assert entries is not None
        invariant(
            self.base_offset <= entry.last_offset < self.next_offset
            and (not entries or entries[-1].last_offset < entry.last_offset),
            "%s: aborted transaction %s out of order",
            self,
            entry,
        )
        if self.txn_file is None:
            self.txn_file = self.files.open(self.txnindex_path)
            self.txn_file.truncate(0)
        entries.append(entry)
        self.txn_file.write(encode_entries([entry]))

    def set_aborted_txns(self, entries: list[AbortedTxn]) -> None:
        """Make this the active segment's entries, in memory and in its file (rewritten, or
        removed when there are none): at creation, at open, and when a truncation ends the
        log in it."""
        if not entries:
            if self.txn_file is not None:
                self.txn_file.close()
                self.txn_file = None
            if self.files.exists(self.txnindex_path):
                self.files.unlink(self.txnindex_path)
        else:
            if self.txn_file is None:
                self.txn_file = self.files.open(self.txnindex_path)
            self.txn_file.truncate(0)
            self.txn_file.write(encode_entries(entries))
        self.txn_entries = list(entries)

    def close_txn_file(self) -> None:
        """The segment is closed (rolled): its entries are in its file only."""
        if self.txn_file is not None:
            self.txn_file.close()
            self.txn_file = None
        self.txn_entries = None

    def flush(self) -> None:
        self.log.fsync()

    def close(self) -> None:
        self.log.close()
        if self.txn_file is not None:
            self.txn_file.close()

    def delete(self) -> None:
        """Unlink this segment's files (readers with the handle keep reading; see
        ``retired``). The caller fsyncs the directory."""
        self.retired = True
        self.log.close()
        if self.txn_file is not None:
            self.txn_file.close()
            self.txn_file = None
        for p in (self.log_path, self.index_path, self.timeindex_path, self.txnindex_path):
            if self.files.exists(p):
                self.files.unlink(p)


def _log_path(dir_path: str, base_offset: int) -> str:
    return os.path.join(dir_path, segment_name(base_offset) + LOG_SUFFIX)


class _CutEarlier(Exception):
    """``recover`` found that the batch before the one that broke the offset order is the
    damaged one: it scans again up to ``position``."""

    def __init__(
        self, position: int, jumped: BatchHeader, expected: int, following: BatchHeader
    ) -> None:
        super().__init__(position)
        self.position = position
        self.jumped = jumped
        self.expected = expected
        self.following = following


def _header_jumped(expected: int, prev: BatchHeader, nxt: BatchHeader) -> bool:
    """A batch's base offset is outside its CRC (as in Kafka's format: the leader assigns
    it after the producer computed the CRC), so one flipped bit there makes the batch start
    past where the log was (a gap) and the next, undamaged batch then seems to go back.
    Blaming the next one would keep the damaged batch and cut the good data after it, with
    a log end that is wrong by the flipped bit (2^19 in the sweep run that found it): the
    replica then looks longest to an unclean election. The pattern names the jumping batch:
    it opened a gap over ``expected`` (where the log was before it) and the next batch
    starts at or after ``expected``, continuing from before the jump."""
    return prev.base_offset > expected and expected <= nxt.base_offset <= prev.last_offset
