"""``PartitionLog``: one partition's log, a directory of segments, as Kafka's ``UnifiedLog``.

Owns the segment list, the log start and end offsets, the recovery point (``flushed_offset``),
the leader epoch cache, rolling, truncation, retention, and recovery on open. Compaction is
in ``storage.cleaner`` and group fsync in ``storage.group_commit``; both call in here through
public methods only (the cleaner through ``segments_for_cleaning`` and ``replace_segments``).

Must not: read the clock (time comes in as ``now_ms``), decode records on the append or read
path (one CRC check per appended batch, one ``writev`` per batch, one ``pread`` per read).

Threads. Every method is called from one thread (the event loop), except ``flush()`` and
``maybe_compact()``, which may run in a worker thread at the same time: they take the log's
lock only to snapshot and to publish, never while fsyncing or rewriting a segment.

Layout of the directory::

    00000000000000000000.log        batches back to back (storage.batch)
    00000000000000000000.index      sparse offset index   (storage.index)
    00000000000000000000.timeindex  sparse time index     (storage.index)
    00000000000000000000.txnindex   aborted transactions  (storage.txn_index)
    00000000000000004096.log ...    the next segment, named by its base offset
    leader-epoch-checkpoint         storage.epoch_cache
    recovery-point-offset-checkpoint, log-start-offset-checkpoint, clean-shutdown
                                    storage.checkpoint

Recovery (``open``), byte rules in docs/storage-format.md:

1. Leftovers of interrupted work are removed: ``*.tmp`` (checkpoints) and ``*.cleaned``
   (a compaction that did not swap in).
2. With a valid clean-shutdown marker, index files are loaded and nothing is scanned.
   Otherwise segments that may hold offsets at or above the recovery point are scanned
   batch by batch with CRCs checked, and their indexes rebuilt; earlier segments load their
   index files (rebuilt if missing or inconsistent).
3. In the last segment, an incomplete batch at the end, or a bad batch after which no
   valid batch exists anywhere in the file, is a torn write if it lies at or above the
   recovery point: the file is cut there. This is the only damage repaired without being
   asked (it is reported in ``recovery``); it can only hold data that was never fsynced.
4. Any other bad batch (below the recovery point, so fsynced, even at the very end; or
   followed by a valid batch; or anywhere in a non-last segment, which was fsynced when
   the log rolled past it) is corruption, and so is data missing where the log says it
   was (fault-injection finding 8): a last segment ending below the recovery point (a log
   never ends in a gap on disk: a truncation into one rolls a segment based at the new
   end), or a closed segment ending before a batch its offset index names (the index of a
   closed segment names its last batch; a cleaned one is indexed by the cleaner, so a
   compaction gap is no damage). So is a scanned batch whose leader epoch is below an
   earlier batch's or above ``leader-epoch-checkpoint``'s latest (finding 9; the epoch is
   outside the CRC; such a batch is never a torn write). ``open`` raises
   ``CorruptSegmentError`` with the file, the byte position and the first offset lost, and
   the log is not opened, so the bad batch is never served. ``allow_truncate_corrupt=True``
   instead cuts the log at the bad batch (dropping every later segment) and says so in
   ``recovery.corruption``: for a replica that will fetch the range again from its leader.
5. The leader epoch cache is rebuilt from the scanned batches and trimmed to the log.
6. A checkpoint file that fails its checksum is reported in ``recovery`` and replaced by
   the safe choice: no recovery point (scan the active segment, torn-tail rule above), the
   first segment's base as log start (deleted records may show again; none is lost), a
   leader epoch cache rebuilt from every batch header.

Disk errors (storage.logdir): an I/O error on write, read, truncation or any fsync takes
the log's ``LogDirectory`` offline; from then on every log of that directory refuses
appends, reads, flushes and truncations with ``LogDirOfflineError`` and ``flushed_offset``
never moves again (after a failed fsync a later one may succeed without the lost pages).
ENOSPC or EDQUOT on a write cuts the partial batch off again and refuses the append with
``OutOfSpaceError``; the directory stays online and appends work once space is freed.
A read never returns a batch that fails its CRC (``read_range``, which hands out a file range
for ``sendfile`` without reading it, checks headers only): the first bad batch ends the read (an
error if it is the first), and the log raises ``CorruptSegmentError`` and tells the
directory's corruption listeners, unless the index was what was wrong (then it is rebuilt).

Rolling fsyncs the segment being closed and writes its index files, so every segment but
the last is durable and ``flushed_offset`` is at least the active segment's base offset.

Aborted transactions (KIP-98, Kafka's ``.txnindex``; rules in ``storage.txn_index``): the
partition's producer state, which knows the open transactions, hands each abort marker's
entry to ``append_aborted_txn`` right after the marker is appended, and it goes to the
active segment (in memory, and appended to its file unsynced; fsynced at roll and close).
``aborted_txns_in`` answers read_committed fetches from the segments' entries. Truncation
drops the entries of the markers cut; a deleted segment's file goes with it; the cleaner
keeps the entries of the markers it keeps. On open a closed segment's ``.txnindex`` is
checked (its format, and that each entry names a control batch of its producer); one that
is missing or fails is reported in ``recovery`` and rebuilt. The file of a segment recovery
scanned (the active one after a crash: unsynced) is kept only if its entries name exactly
the segment's abort markers (each a control batch of the entry's producer; any past the
recovered end dropped); else it is rebuilt, unreported (a crash is no damage). Rebuilding
reads the log's batch headers from its first segment (``AbortTracker``: an entry needs the
transactions open before its marker), decoding only control batches, so a topic with no
aborted transaction in its scanned segments never pays for it.
"""

from __future__ import annotations

import contextlib
import errno as errno_codes
import logging
import os
import threading
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from common.invariant import invariant
from storage import checkpoint
from storage.batch import (
    HEADER_SIZE,
    LEADER_EPOCH_OFFSET,
    MAGIC_OFFSET,
    MAGICS,
    BatchHeader,
    compute_crc,
    decode_records,
    iter_batches,
    parse_header,
    stamp,
    verify_batch,
)
from storage.cleaner import compact_log
from storage.config import LogConfig
from storage.epoch_cache import CHECKPOINT_NAME as EPOCH_CHECKPOINT_NAME
from storage.epoch_cache import LeaderEpochCache
from storage.errors import (
    CorruptCheckpointError,
    CorruptRecordError,
    CorruptSegmentError,
    InvalidRecordError,
    KafkaStorageError,
    LogDirOfflineError,
    OffsetOutOfRangeError,
    OutOfSpaceError,
    RecordTooLargeError,
    StorageError,
)
from storage.fileio import Buffer, FileLayer, FsyncError, default_file_layer
from storage.logdir import NO_SPACE_ERRNOS, LogDirectory
from storage.segment import (
    CLEANED_SUFFIX,
    RELATIVE_OFFSET_MAX,
    Segment,
    parse_segment_name,
)
from storage.txn import AbortedTxn, ControlMarker, decode_marker
from storage.txn_index import (
    ENTRY_BYTES,
    AbortTracker,
    TxnIndexError,
    collect,
    encode_entries,
    parse_entries,
)

logger = logging.getLogger(__name__)

EARLIEST_TIMESTAMP = -2
"""``offset_for_timestamp(EARLIEST_TIMESTAMP)`` is the log start offset (Kafka's -2)."""
LATEST_TIMESTAMP = -1
"""``offset_for_timestamp(LATEST_TIMESTAMP)`` is the log end offset (Kafka's -1)."""

ZERO_COPY_BATCHES_MAX = 64
"""``read_range`` walks at most this many batch headers (one ``pread`` each, for batches
above a page); a range of more, smaller batches is cheaper to read whole."""

_STAMP_PREFIX_BYTES = LEADER_EPOCH_OFFSET + 4  # base_offset, batch_length, leader_epoch


class ReadResult(NamedTuple):
    data: bytes
    """Whole batches, raw, the first one holding the offset asked for (or the next offset
    that exists). Empty at the log end."""
    log_start_offset: int
    log_end_offset: int


@dataclass(eq=False)
class FileRange:
    """Whole Kafka batches as they lie in a segment file, for ``os.sendfile`` (zero copy).

    ``fd`` is a duplicate of the segment file's descriptor, owned by the range: the bytes
    stay what they were when the range was taken if the segment is deleted (retention,
    DeleteRecords) or replaced (compaction) before they are sent, as a deleted file lives
    on while a descriptor names it. Only a truncation of the same file (the active
    segment's, which cuts above the high watermark only, or an unclean election's) can
    shorten it under the sender: ``os.sendfile`` then stops short, and the sender must not
    pretend otherwise. ``close()`` it (``with`` does); ``len()`` is ``size_bytes``."""

    fd: int
    position: int
    size_bytes: int
    records: int
    """Records in the range's batches (their headers' counts)."""
    next_offset: int
    """The offset after the range's last batch."""
    log_start_offset: int
    log_end_offset: int

    def __len__(self) -> int:
        return self.size_bytes

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    def __enter__(self) -> FileRange:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # A safety net only: every holder closes its ranges (a leaked one would keep a
        # deleted segment's disk space until the process ends).
        self.close()


class LogTruncatedError(StorageError):
    """Offsets a caller was waiting on were truncated away before they became durable."""


@dataclass
class RecoveryReport:
    """What ``PartitionLog.open`` found and did. Nothing here was served; the caller logs
    ``problems()`` and, for a cut below the recovery point (``corruption``), treats the
    replica as having lost fsynced data (fetch it again; do not lead on it)."""

    clean: bool = False
    """A valid clean-shutdown marker: index files loaded, nothing scanned."""
    recovery_point: int | None = None
    """As read from its checkpoint (None: missing or corrupt)."""
    torn_tail: tuple[str, int, int] | None = None
    """``(segment path, byte position, bytes cut)``: a torn write above the recovery point."""
    corruption: CorruptSegmentError | None = None
    """Corruption cut off because ``allow_truncate_corrupt``: offsets from
    ``corruption.offset`` on were dropped, up to at least ``lost_end_offset``."""
    lost_end_offset: int | None = None
    """A lower bound of the log end before the cut (the recovery point, or the base of the
    last segment deleted): the range to fetch again reaches at least this far."""
    indexes_rebuilt: list[str] = field(default_factory=list)
    """Segments whose index files were missing or failed their checks (rebuilt)."""
    txn_indexes_rebuilt: list[str] = field(default_factory=list)
    """``.txnindex`` files that were missing or failed their checks, with why (rebuilt
    from the log; never served). Those of segments recovery scanned are rebuilt unsaid."""
    txn_index_walk_segments: int = 0
    """How many segments were read to rebuild ``.txnindex`` files (0: none was needed)."""
    checkpoint_errors: list[CorruptCheckpointError] = field(default_factory=list)
    epoch_cache_rebuilt: bool = False

    def problems(self) -> list[str]:
        out = []
        if self.torn_tail is not None:
            path, pos, n = self.torn_tail
            out.append(
                f"cut a torn write of {n} bytes at byte {pos} of {path} (above the "
                f"recovery point {self.recovery_point}: never fsynced)"
            )
        if self.corruption is not None:
            out.append(
                f"cut corrupt data: {self.corruption}; offsets "
                f"{self.corruption.offset}..{self.lost_end_offset} must be fetched "
                "again"
            )
        out += [f"rebuilt the indexes of {p}" for p in self.indexes_rebuilt]
        out += [f"rebuilt {p}" for p in self.txn_indexes_rebuilt]
        out += [f"{e}: ignored" for e in self.checkpoint_errors]
        if self.epoch_cache_rebuilt:
            out.append("rebuilt the leader epoch cache from the batch headers")
        return out


class PartitionLog:
    """Invariants: ``log_start_offset <= log_end_offset``; ``flushed_offset <= log_end_offset``;
    segments are sorted by base offset, each base at or above the previous segment's next
    offset; the last segment (active) is the only one appended to; ``flushed_offset`` does
    not move once ``log_dir`` has failed."""

    def __init__(
        self,
        dir_path: str,
        config: LogConfig,
        files: FileLayer,
        segments: list[Segment],
        epochs: LeaderEpochCache,
        log_start_offset: int,
        log_end_offset: int,
        flushed_offset: int,
        *,
        log_dir: LogDirectory | None = None,
        recovery: RecoveryReport | None = None,
    ):
        self.dir_path = dir_path
        self.config = config
        self.files = files
        self.log_dir = log_dir or LogDirectory(os.path.dirname(os.path.abspath(dir_path)))
        """Shared by every log on the same disk (the broker passes one per data directory);
        a log opened without one gets its own, so its failure is its alone."""
        self.recovery = recovery or RecoveryReport()
        self._segments = segments
        self.leader_epoch_cache = epochs
        self._lso = log_start_offset
        self._leo = log_end_offset
        self._flushed = flushed_offset
        self._rp_checkpointed = flushed_offset
        self._lock = threading.RLock()
        self._fsync_lock = threading.Lock()
        """Held around every fsync of a segment and around closing the handles: one fsync
        at a time per log, so the fsync that gets a file's error (Linux reports it to one
        caller) has failed the directory before any other fsync of it can succeed and be
        taken for durability. Taken after ``_lock`` when both are held."""
        self._truncations = 0
        self._retired: list[Segment] = []
        self._closed = False
        self._truncate_listeners: list[Callable[[PartitionLog, int], None]] = []
        self.corruption: CorruptSegmentError | None = None
        """The lowest corrupt batch reads found (never served); None if none."""
        self._corrupt_segments: dict[str, CorruptSegmentError] = {}
        self._check()

    # ------------------------------------------------------------------ state

    @property
    def log_start_offset(self) -> int:
        return self._lso

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def flushed_offset(self) -> int:
        """Every offset below this is on disk (fsynced): the recovery point."""
        return self._flushed

    @property
    def segments(self) -> tuple[Segment, ...]:
        return tuple(self._segments)

    @property
    def active_segment(self) -> Segment:
        return self._segments[-1]

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self._segments)

    @property
    def latest_epoch(self) -> int:
        return self.leader_epoch_cache.latest_epoch

    @property
    def truncation_count(self) -> int:
        return self._truncations

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """Kafka's OffsetsForLeaderEpoch answer for ``epoch`` (KIP-101, KIP-279)."""
        with self._lock:
            return self.leader_epoch_cache.end_offset_for_epoch(epoch, self._leo)

    def add_truncate_listener(self, fn: Callable[[PartitionLog, int], None]) -> None:
        """``fn(log, new_end_offset)`` after every truncation (group commit fails waiters)."""
        self._truncate_listeners.append(fn)

    def _check(self) -> None:
        invariant(self._segments, "a log has at least one segment")
        invariant(self._lso <= self._leo, "log start %s above log end %s", self._lso, self._leo)
        invariant(
            self._flushed <= self._leo, "flushed %s above log end %s", self._flushed, self._leo
        )
        prev = None
        for s in self._segments:
            if prev is not None:
                invariant(s.base_offset >= prev.next_offset, "segments overlap: %s, %s", prev, s)
            prev = s
        invariant(
            self._leo >= self.active_segment.next_offset,
            "log end %s below %s",
            self._leo,
            self.active_segment,
        )

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.dir_path!r}, start={self._lso}, end={self._leo}, "
            f"flushed={self._flushed}, segments={len(self._segments)})"
        )

    # ------------------------------------------------------------------ disk errors

    def _fail_dir(self, e: BaseException, operation: str, path: str) -> LogDirOfflineError:
        """Take the directory offline for ``e`` (an I/O error); the error to raise."""
        if isinstance(e, LogDirOfflineError):
            return e
        if isinstance(e, OSError):
            self.log_dir.fail(e, operation=operation, path=path)
        else:
            self.log_dir.fail(OSError(None, str(e)), operation=operation, path=path)
        return self.log_dir.offline_error()

    def _io_error(self, e: OSError, operation: str, path: str | None = None) -> KafkaStorageError:
        """``OutOfSpaceError`` for ENOSPC/EDQUOT from anything but an fsync (the caller has
        undone what it wrote); anything else fails the directory."""
        if e.errno in NO_SPACE_ERRNOS and not isinstance(e, FsyncError):
            code = errno_codes.errorcode.get(e.errno or 0, str(e.errno))
            return OutOfSpaceError(
                f"{operation} in {path or getattr(e, 'filename', None) or self.dir_path}: no "
                f"space left on the device ({code}: {e.strerror}); refused, nothing written",
                dir_path=self.log_dir.path,
            )
        return self._fail_dir(e, operation, path or getattr(e, "filename", None) or self.dir_path)

    @contextlib.contextmanager
    def _destructive(self, operation: str) -> Iterator[None]:
        """A change that cannot be undone halfway (segments already cut or deleted): any
        error inside takes the directory offline, as the log in memory no longer matches
        the disk."""
        try:
            yield
        except OSError as e:
            raise self._fail_dir(e, operation, getattr(e, "filename", None) or self.dir_path) from e

    def _writable_or_raise(self) -> None:
        self._ensure_open()
        self.log_dir.check_or_raise()

    def _fsync(self, seg: Segment) -> None:
        """fsync ``seg`` (``_fsync_lock`` held, the directory online); a failure takes the
        directory offline and raises ``LogDirOfflineError``."""
        self.log_dir.check_or_raise()
        try:
            seg.flush()
        except OSError as e:
            raise self._fail_dir(e, "fsync", seg.log_path) from e

    # ------------------------------------------------------------------ open / recover

    @classmethod
    def open(
        cls,
        dir_path: str,
        config: LogConfig | None = None,
        file_layer: FileLayer | None = None,
        now_ms: int = 0,
        *,
        allow_truncate_corrupt: bool = False,
        log_dir: LogDirectory | None = None,
    ) -> PartitionLog:
        """Open (creating if needed) and recover the log in ``dir_path``; see the module doc.

        ``log_dir``: the directory's health, shared by the logs on one disk. Opening in an
        offline directory raises ``LogDirOfflineError``; an I/O error while opening takes
        it offline (ENOSPC raises ``OutOfSpaceError``). What recovery found is in the
        returned log's ``recovery`` (and logged).
        """
        del now_ms  # roll clocks start from batch timestamps; kept for the caller's symmetry
        config = config or LogConfig()
        files = file_layer or default_file_layer()
        log_dir = log_dir or LogDirectory(os.path.dirname(os.path.abspath(dir_path)))
        log_dir.check_or_raise()
        try:
            return cls._open(dir_path, config, files, allow_truncate_corrupt, log_dir)
        except OSError as e:
            if e.errno in NO_SPACE_ERRNOS and not isinstance(e, FsyncError):
                raise OutOfSpaceError(
                    f"opening {dir_path}: no space left on the device", dir_path=log_dir.path
                ) from e
            log_dir.fail(e, operation="open", path=getattr(e, "filename", None) or dir_path)
            raise log_dir.offline_error() from e

    @classmethod
    def _open(
        cls,
        dir_path: str,
        config: LogConfig,
        files: FileLayer,
        allow_truncate_corrupt: bool,
        log_dir: LogDirectory,
    ) -> PartitionLog:
        report = RecoveryReport()
        files.mkdir(dir_path)
        names = sorted(files.listdir(dir_path))
        for name in names:
            if name.endswith((".tmp", CLEANED_SUFFIX)):
                files.unlink(os.path.join(dir_path, name))
        bases = sorted(b for b in (parse_segment_name(n) for n in names) if b is not None)
        clean = checkpoint.read_clean_shutdown(files, dir_path)
        recovery_point = _read_checkpoint(files, dir_path, checkpoint.RECOVERY_POINT_NAME, report)
        lso_saved = _read_checkpoint(files, dir_path, checkpoint.LOG_START_OFFSET_NAME, report)
        report.recovery_point = recovery_point
        epochs_saved = files.exists(os.path.join(dir_path, EPOCH_CHECKPOINT_NAME))
        try:
            epochs = LeaderEpochCache.load(dir_path, files)
        except CorruptCheckpointError as e:
            # Rebuilt below from every batch header; a clean marker is no help for it.
            report.checkpoint_errors.append(e)
            report.epoch_cache_rebuilt = True
            epochs = LeaderEpochCache(dir_path, files, [])

        segments: list[Segment] = []
        if not bases:
            base = lso_saved or 0
            segments.append(Segment.create(dir_path, base, files))
            clean = None
        else:
            for b in bases:
                segments.append(Segment.open_existing(dir_path, b, files))
            active = segments[-1]
            if clean is not None and (
                clean["active_base_offset"] != active.base_offset
                or clean["active_segment_bytes"] != active.size_bytes
            ):
                clean = None
        report.clean = clean is not None
        try:
            cls._recover(
                segments,
                config,
                epochs,
                clean,
                recovery_point,
                lso_saved,
                allow_truncate_corrupt,
                report,
                # Written before the batches it describes: no batch has a later epoch. An
                # empty checkpoint bounds nothing (as a missing one): once delete-records
                # moves the log start to the log end, the cache's one entry starts at the end
                # and open trims it, while the active segment still holds the deleted
                # batches below the log start (the property test of the log model found it).
                # A non-empty cache starts at or below the log start, so it bounds those too.
                epochs.latest_epoch
                if epochs_saved and not report.epoch_cache_rebuilt and epochs.latest_epoch >= 0
                else None,
            )
            if report.epoch_cache_rebuilt:
                _rebuild_epochs(segments, epochs)
        except BaseException:
            for s in segments:
                s.close()
            raise
        # Deleted segments (after a cut) drop out of the list inside _recover.
        # The log ends where its data ends: a truncation that ends in a gap rolls a segment
        # based at the new end, so a log end the data does not reach is damage (_recover).
        leo = segments[-1].next_offset
        if clean is not None:
            leo = max(leo, clean["log_end_offset"])
        lso = max(segments[0].base_offset, lso_saved or 0)
        if lso > leo:
            # Records were deleted (DeleteRecords, durable) up to an offset the recovered
            # log no longer reaches (the data was never fsynced): those offsets must never
            # be handed out again, so the log restarts empty at its start offset.
            for s in segments:
                s.delete()
            segments[:] = [Segment.create(dir_path, lso, files)]
            leo = lso
        try:
            _load_txn_indexes(segments, report)
        except BaseException:
            for s in segments:
                s.close()
            raise
        # Start first: an epoch that would start at the log end holds no data and goes.
        epochs.truncate_from_start(lso)
        epochs.truncate_from_end(leo)
        if clean is None:
            segments[-1].flush()  # what recovery found is now durable: the recovery point
        log = cls(
            dir_path,
            config,
            files,
            segments,
            epochs,
            lso,
            leo,
            leo,
            log_dir=log_dir,
            recovery=report,
        )
        checkpoint.write_offset(files, dir_path, checkpoint.RECOVERY_POINT_NAME, leo)
        checkpoint.remove_clean_shutdown(files, dir_path)
        files.fsync_dir(dir_path)
        for problem in report.problems():
            logger.warning("%s: %s", dir_path, problem)
        return log

    @staticmethod
    def _recover(
        segments: list[Segment],
        config: LogConfig,
        epochs: LeaderEpochCache,
        clean: dict[str, int] | None,
        recovery_point: int | None,
        log_start: int | None,
        allow_truncate_corrupt: bool,
        report: RecoveryReport,
        epoch_max: int | None = None,
    ) -> None:
        interval = config.index_interval_bytes
        # Every segment but the last was fsynced when the log rolled past it, so the
        # recovery point is never below the last one's base: the bound to use without one.
        rp = recovery_point if recovery_point is not None else segments[-1].base_offset

        def cut_or_raise(i: int, corrupt: CorruptSegmentError) -> None:
            """Refuse the log, or (``allow_truncate_corrupt``) drop every segment after
            ``segments[i]``, whose file already ends where the good data ends."""
            if not allow_truncate_corrupt:
                raise corrupt
            # The operator's (or a refetching follower's) choice: cut it.
            report.corruption = corrupt
            report.lost_end_offset = max(
                [rp, segments[i].next_offset] + [s.base_offset for s in segments[i + 1 :]]
            )
            for later in segments[i + 1 :]:
                later.delete()
            del segments[i + 1 :]

        epoch_prev = -1  # the last leader epoch scanned: epochs never decrease along a log
        i = 0
        while i < len(segments):
            seg = segments[i]
            last = i == len(segments) - 1
            next_base = segments[i + 1].base_offset if not last else None
            may_be_unflushed = last or (next_base is not None and next_base > rp)
            loaded = False
            if clean is not None or not may_be_unflushed:
                loaded = seg.load_indexes(clean["log_end_offset"] if clean and last else None)
                if not loaded:
                    report.indexes_rebuilt.append(seg.log_path)
            if not loaded:
                file_bytes = seg.log.size()
                headers, error = seg.recover(interval, verify=True)
                bad_epoch = _bad_epoch(headers, epoch_prev, epoch_max)
                if bad_epoch is not None:
                    # The epoch lies outside the CRC (the leader stamps it after the producer
                    # computed it), so a bit flip there passes every other check (finding 9).
                    # A whole batch with a valid CRC was written whole: damage, never torn.
                    k, reason = bad_epoch
                    headers = headers[:k]
                    where = sum(h.size for h in headers)
                    seg.recover(interval, verify=True, end=where)
                    error = CorruptRecordError(reason, path=seg.log_path, position=where)
                if headers:
                    epoch_prev = max(epoch_prev, headers[-1].leader_epoch)
                if may_be_unflushed:
                    # The cache file is written before the batches it describes, so this
                    # only matters if it was lost; as Kafka, only newer epochs are added.
                    for h in headers:
                        if h.leader_epoch > epochs.latest_epoch:
                            epochs.assign(h.leader_epoch, h.base_offset)
                if seg.size_bytes != file_bytes:
                    where = seg.size_bytes
                    if error is None:
                        error = CorruptRecordError(
                            f"incomplete batch: {file_bytes - where} bytes at the end",
                            path=seg.log_path,
                            position=where,
                        )
                    # Fsynced data (below the recovery point) is never a torn write, nor
                    # is damage with valid data after it.
                    # Offsets below the durable log start were deleted: a batch there is
                    # no fsynced data (a truncation past them may not have reached the disk
                    # before the crash, and a torn append then lands on the old bytes).
                    at = max(seg.next_offset, log_start or 0)
                    torn = (
                        bad_epoch is None
                        and last
                        and (recovery_point is None or at >= rp)
                        and not _valid_batch_after(seg, where)
                    )
                    corrupt = CorruptSegmentError(
                        error.reason
                        if bad_epoch is not None
                        else _below_recovery_point(
                            error.reason, recovery_point, last, seg.next_offset
                        ),
                        path=seg.log_path,
                        position=where,
                        offset=seg.next_offset,
                    )
                    if torn:
                        report.torn_tail = (seg.log_path, where, file_bytes - where)
                        for later in segments[i + 1 :]:
                            later.delete()
                        del segments[i + 1 :]
                    else:
                        cut_or_raise(i, corrupt)
                    seg.truncate_to_position(where, seg.next_offset)
                    seg.flush()
                elif (
                    seg.index_beyond_end is not None
                    and next_base is not None
                    and seg.next_offset <= seg.index_beyond_end[0] < next_base
                ):
                    # Closed and fsynced, and its index (written after its data, when the
                    # log rolled past it) names a batch the file no longer holds: the file
                    # lost its tail. Not a compaction gap: the cleaner indexes what it kept.
                    # (An index naming an offset outside the segment is itself damaged: it
                    # was rebuilt, as any unusable index is.)
                    offset, position = seg.index_beyond_end
                    cut_or_raise(
                        i,
                        CorruptSegmentError(
                            f"the file ends at byte {seg.size_bytes} (offset {seg.next_offset}) "
                            f"but its offset index, written when the segment was closed, has "
                            f"the batch at offset {offset} at byte {position}: the file lost "
                            f"its tail; offsets {seg.next_offset}..{next_base - 1} are missing",
                            path=seg.log_path,
                            position=seg.size_bytes,
                            offset=seg.next_offset,
                        ),
                    )
            if next_base is not None and i + 1 < len(segments) and seg.next_offset > next_base:
                raise CorruptSegmentError(
                    f"segment ends at offset {seg.next_offset}, past the next segment's base "
                    f"{next_base}",
                    path=seg.log_path,
                    position=seg.size_bytes,
                    offset=next_base,
                )
            i += 1
        active = segments[-1]
        if (
            clean is None
            and recovery_point is not None
            and report.corruption is None
            and recovery_point > max(active.next_offset, log_start or 0)
        ):
            # Every offset below the recovery point was fsynced, and a log never ends in a
            # gap on disk (a truncation into one rolls a segment based at the new end): data
            # ending below it was lost by the disk, not removed by compaction (finding 8).
            # (Offsets below the durable log start were deleted anyway: no loss there.)
            cut_or_raise(
                len(segments) - 1,
                CorruptSegmentError(
                    f"the log's data ends at offset {active.next_offset} (byte "
                    f"{active.size_bytes}) but the recovery point says offsets below "
                    f"{recovery_point} were fsynced: the segment lost its tail; offsets "
                    f"{active.next_offset}..{recovery_point - 1} are missing",
                    path=active.log_path,
                    position=active.size_bytes,
                    offset=active.next_offset,
                ),
            )

    def _write_checkpoint_or_raise(self, name: str, offset: int, operation: str) -> None:
        """Write checkpoint ``name``; an I/O error takes the directory offline (ENOSPC is
        refused, the directory stays online), as every other write of the log does."""
        try:
            checkpoint.write_offset(self.files, self.dir_path, name, offset)
        except OSError as e:
            raise self._io_error(e, operation) from e

    def checkpoint_recovery_point(self) -> bool:
        """Write ``flushed_offset`` to the recovery point checkpoint if it moved since it
        was last written; True if it wrote. The broker calls this periodically (Kafka's
        ``log.flush.offset.checkpoint.interval.ms``): recovery treats damage below the
        checkpointed point as corruption and above it as a torn write, so the closer it is
        to what was really fsynced, the less fsynced data a bit flip can pass off as torn."""
        with self._lock:
            if self._closed or not self.log_dir.online or self._flushed <= self._rp_checkpointed:
                return False
            offset = self._flushed
            self._write_checkpoint_or_raise(checkpoint.RECOVERY_POINT_NAME, offset, "checkpoint")
            self._rp_checkpointed = offset
            return True

    # ------------------------------------------------------------------ append

    def append(
        self, batch: bytes, *, leader_epoch: int, now_ms: int | None = None
    ) -> tuple[int, int]:
        """Append one batch as leader: assign offsets from the log end, stamp the epoch.

        Checks the batch's CRC (once: the only full pass over its bytes) and size, writes it
        with one ``writev`` (the 16 patched header bytes, then the rest of the caller's
        buffer, uncopied). Returns ``(base_offset, last_offset)``. ``now_ms`` enables the
        ``segment.ms`` roll check. Not durable until ``flush()``.

        All or nothing: ``OutOfSpaceError`` (the disk is full: whatever part of the batch
        reached the file is cut off again) or ``LogDirOfflineError`` (an I/O error; the
        directory is offline) leave the log as it was.
        """
        h = verify_batch(batch)
        if h.size > self.config.max_message_bytes:
            raise RecordTooLargeError(
                f"batch of {h.size} bytes exceeds max.message.bytes={self.config.max_message_bytes}"
            )
        with self._lock:
            self._writable_or_raise()
            base = self._leo
            h = h._replace(base_offset=base, leader_epoch=leader_epoch)
            head = bytearray(memoryview(batch)[:_STAMP_PREFIX_BYTES])
            stamp(head, base, leader_epoch)
            try:
                self._maybe_roll_locked(h.size, h.last_offset, now_ms, h.max_timestamp)
                if leader_epoch >= 0 and leader_epoch != self.leader_epoch_cache.latest_epoch:
                    # Before the data: a crash may leave the cache ahead of the log (trimmed
                    # on open), never behind it.
                    self.leader_epoch_cache.assign(leader_epoch, base)
                self._write_batch_locked([head, memoryview(batch)[_STAMP_PREFIX_BYTES:]], h)
            except OSError as e:
                raise self._io_error(e, "append") from e
            self._leo = h.next_offset
            return base, h.last_offset

    def _write_batch_locked(self, parts: list[Buffer], h: BatchHeader) -> None:
        """Write one batch to the active segment; if the write fails, cut off whatever
        part of it reached the file (a short write before ENOSPC), so that nothing
        half-written stays behind the segment's end, then re-raise. A failed cut takes the
        directory offline."""
        seg = self.active_segment
        try:
            seg.append(parts, h, self.config.index_interval_bytes)
        except OSError as e:
            try:
                seg.log.truncate(seg.size_bytes)
            except OSError as cut:
                raise self._fail_dir(cut, "truncate", seg.log_path) from e
            raise

    def append_as_follower(
        self, batches: bytes | memoryview, *, now_ms: int | None = None
    ) -> tuple[int, int]:
        """Append batches fetched from the leader, offsets and epochs as they are.

        Every batch's CRC is checked; the batches must be whole and strictly increasing,
        the first at or above the log end. Gaps between batches are allowed: a compacted
        leader's log has them (whole batches removed), and the follower must mirror it.
        Returns ``(first_offset, last_offset)``; ``(log_end, log_end - 1)`` for no batches.
        All or nothing, as ``append``: batches written before one that hits a full disk are
        truncated away again before ``OutOfSpaceError`` is raised.
        """
        headers = []
        try:
            for pos, h in iter_batches(batches, verify=True):
                headers.append((pos, h))
        except CorruptRecordError as e:
            raise CorruptRecordError(e.reason, position=e.position) from None
        end = headers[-1][0] + headers[-1][1].size if headers else 0
        if end != len(batches):
            raise InvalidRecordError(
                f"{len(batches) - end} bytes after the last whole batch at {end}"
            )
        with self._lock:
            self._writable_or_raise()
            if not headers:
                return self._leo, self._leo - 1
            expected = self._leo
            for _, h in headers:
                if h.base_offset < expected:
                    raise InvalidRecordError(
                        f"batch at offset {h.base_offset} does not follow offset {expected - 1}"
                    )
                # No max.message.bytes check: a follower takes what its leader accepted.
                expected = h.next_offset
            mv = memoryview(batches)
            start_leo = self._leo
            try:
                for pos, h in headers:
                    self._maybe_roll_locked(h.size, h.last_offset, now_ms, h.max_timestamp)
                    if (
                        h.leader_epoch >= 0
                        and h.leader_epoch != self.leader_epoch_cache.latest_epoch
                    ):
                        self.leader_epoch_cache.assign(h.leader_epoch, h.base_offset)
                    self._write_batch_locked([mv[pos : pos + h.size]], h)
                    self._leo = h.next_offset
            except OSError as e:
                error = self._io_error(e, "append")
                if self._leo > start_leo and isinstance(error, OutOfSpaceError):
                    # Rare (a full disk in the middle of one fetch response): undo the
                    # batches already written, so the caller sees nothing appended. If
                    # even that fails, the log no longer matches what the caller is told.
                    try:
                        self._truncate_to_locked(start_leo)
                    except (OSError, KafkaStorageError) as undo:
                        raise self._fail_dir(undo, "truncate", self.dir_path) from e
                raise error from e
            return headers[0][1].base_offset, headers[-1][1].last_offset

    def _ensure_open(self) -> None:
        if self._closed:
            raise StorageError(f"log {self.dir_path} is closed")

    # ------------------------------------------------------------------ roll

    def maybe_roll(self, now_ms: int) -> bool:
        """Roll the active segment if it is older than ``segment.ms``; True if it rolled."""
        with self._lock:
            self._writable_or_raise()
            try:
                return self._maybe_roll_locked(0, self._leo, now_ms)
            except OSError as e:
                raise self._io_error(e, "roll") from e

    def _maybe_roll_locked(
        self, size_bytes: int, last_offset: int, now_ms: int | None, batch_max_ts: int = -1
    ) -> bool:
        """Roll before an append of ``size_bytes`` ending at ``last_offset`` (or, with
        ``size_bytes`` 0, by time alone). Age is measured as Kafka's
        ``LogSegment.timeWaitedForRoll``: from the first batch's max timestamp to the incoming
        batch's (``batch_max_ts``), so data carrying old timestamps (mirrored, replayed) fills
        segments instead of rolling one per batch; to ``now_ms`` when no batch timestamp is
        given (the periodic check, or a batch without timestamps)."""
        seg = self.active_segment
        if seg.is_empty:
            return False
        full = seg.size_bytes + size_bytes > self.config.segment_bytes
        clock = batch_max_ts if batch_max_ts >= 0 else now_ms
        aged = (
            now_ms is not None
            and clock is not None
            and seg.first_batch_max_timestamp is not None
            and clock - seg.first_batch_max_timestamp >= self.config.segment_ms
        )
        overflow = last_offset - seg.base_offset > RELATIVE_OFFSET_MAX
        if not (full or aged or overflow):
            return False
        self._roll_locked()
        return True

    def roll(self) -> None:
        """Start a new segment at the log end now (tests and tools)."""
        with self._lock:
            self._writable_or_raise()
            if not self.active_segment.is_empty:
                try:
                    self._roll_locked()
                except OSError as e:
                    raise self._io_error(e, "roll") from e

    def _roll_locked(self) -> None:
        """Each step leaves the log consistent if the next one fails (a full disk): the old
        segment synced, then its index files (rebuildable), then the new segment and the
        directory entry, then the recovery point (a stale one is only lower)."""
        old = self.active_segment
        # The segment being closed is made durable now, so every non-active segment is
        # whole on disk and recovery only ever scans from the active segment.
        with self._fsync_lock:
            self._fsync(old)
        old.write_indexes()
        old.close_txn_file()  # its entries are in its .txnindex now
        new = Segment.create(self.dir_path, self._leo, self.files)
        self._segments.append(new)
        self.files.fsync_dir(self.dir_path)  # the new segment's name
        # Every segment before the new one is now on disk (each was synced when it rolled).
        self._flushed = self._leo
        checkpoint.write_offset(
            self.files, self.dir_path, checkpoint.RECOVERY_POINT_NAME, self._flushed
        )
        self._rp_checkpointed = self._flushed

    # ------------------------------------------------------------------ read

    def read(
        self, offset: int, max_bytes: int, *, max_offset: int | None = None, verify: bool = True
    ) -> ReadResult:
        """Raw whole batches from the one holding ``offset``, about ``max_bytes`` of them.

        The first batch is returned even when it is larger than ``max_bytes``, so a reader
        always progresses. Only batches wholly below ``max_offset`` (a high watermark) are
        returned when it is given. Raises ``OffsetOutOfRangeError`` outside
        ``[log_start_offset, log_end_offset]``; at the log end the data is empty.
        Reads stay within one segment, as Kafka's do.

        Never serves a corrupt batch (``verify``, the default: one CRC pass over the bytes
        returned, about a third of the cost of a read from the page cache): the read ends
        before the first batch that fails its checks; if that is the first one, the segment
        is checked whole, and either its index was wrong (rebuilt, and the read retried)
        or ``CorruptSegmentError`` is raised (also kept in ``corruption`` and reported to
        the directory's corruption listeners). An I/O error takes the directory offline.
        """
        self.log_dir.check_or_raise()
        for attempt in range(3):
            with self._lock:
                lso, leo, segs = self._lso, self._leo, list(self._segments)
            if offset < lso or offset > leo:
                raise OffsetOutOfRangeError(offset, lso, leo)
            seg = None
            try:
                i = max(0, bisect_right(segs, offset, key=_base_offset) - 1)
                for seg in segs[i:]:
                    loc = seg.locate(offset)
                    if loc is not None:
                        pos, size, _ = loc
                        data = seg.read_from(pos, size, max_bytes, max_offset, verify=verify)
                        return ReadResult(data, lso, leo)
                    if verify and seg.base_offset <= offset < seg.next_offset:
                        # Some batch here holds the offset, yet the walk from the index
                        # missed it: a bad length field, or a bad index entry.
                        raise CorruptRecordError(
                            f"no batch found for offset {offset}",
                            path=seg.log_path,
                            position=seg.index.lookup(offset),
                        )
                return ReadResult(b"", lso, leo)
            except CorruptRecordError as e:
                if seg is None or seg.retired:
                    if attempt == 2:
                        raise
                    continue
                self._check_bad_read(seg, e)  # raises unless the index was at fault
            except (OSError, ValueError) as e:
                # A segment deleted or replaced by the cleaner under us: read again.
                if seg is not None and seg.retired and attempt < 2:
                    continue
                if isinstance(e, OSError) and not self._closed:
                    raise self._fail_dir(e, "read", seg.log_path if seg else self.dir_path) from e
                raise
        raise CorruptRecordError(
            f"reading offset {offset} of {self.dir_path} failed three times in a row"
        )

    def _check_bad_read(self, seg: Segment, error: CorruptRecordError) -> None:
        """A read found a bad batch in ``seg``: return if the segment checks out whole (its
        index was wrong and is rebuilt: read again), else raise ``CorruptSegmentError``."""
        with self._lock:
            if seg.retired or self._closed:
                return
            known = self._corrupt_segments.get(seg.log_path)
            if known is not None:
                raise known
            corrupt = seg.reindex(self.config.index_interval_bytes)
            if corrupt is None:
                logger.warning(
                    "%s: a read found %s; the segment checks out whole, so its "
                    "index was wrong: rebuilt",
                    self.dir_path,
                    error,
                )
                return
            self._corrupt_segments[seg.log_path] = corrupt
            if self.corruption is None or corrupt.offset < self.corruption.offset:
                self.corruption = corrupt
        self.log_dir.report_corruption(corrupt)
        raise corrupt

    def read_range(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        batches_max: int = ZERO_COPY_BATCHES_MAX,
    ) -> FileRange | None:
        """Where the Kafka batches ``read(offset, max_bytes, max_offset=...)`` would return
        lie, without reading them: for ``os.sendfile``. The same batches as ``read`` up to
        the first batch that is not Kafka's (magic 2), which ends the range, from batch
        headers alone (``Segment.kafka_span``), with the segment's file held open
        (``FileRange``). ``OffsetOutOfRangeError`` as ``read``.

        None, so that the caller reads (and converts) the bytes instead: at the log end or
        nothing below ``max_offset``, a first batch that is Longboat's (msgpack) or not
        shaped right (``read`` then says why), more than ``batches_max`` batches, or a file
        layer without descriptors (the lazy one of the fault suite).

        Not checked: the CRCs (that would read the bytes). A Kafka client checks them
        itself (the Java client always, librdkafka with ``check.crcs``), as it does against
        Kafka, which serves fetches the same way."""
        self.log_dir.check_or_raise()
        with self._lock:
            lso, leo, segs = self._lso, self._leo, list(self._segments)
        if offset < lso or offset > leo:
            raise OffsetOutOfRangeError(offset, lso, leo)
        i = max(0, bisect_right(segs, offset, key=_base_offset) - 1)
        for seg in segs[i:]:
            try:
                loc = seg.locate(offset)
                if loc is None:
                    continue
                span = seg.kafka_span(loc[0], max_bytes, max_offset, batches_max)
                if span is None:
                    return None
                with self._lock:
                    # Under the lock: a retired segment's handle is closed under it too,
                    # so the descriptor duplicated is this file's, never a reused number.
                    fileno = seg.log.fileno()
                    if fileno is None:
                        return None
                    fd = os.dup(fileno)
            except (OSError, ValueError):
                # A segment retired and closed under us (or an I/O error): ``read`` copes
                # (retries, or takes the directory offline).
                return None
            end, records, next_offset = span
            return FileRange(fd, loc[0], end - loc[0], records, next_offset, lso, leo)
        return None

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        """The first offset whose record timestamp is at least ``timestamp_ms`` (Kafka's
        ListOffsets), or None if every record is older. -2/-1 mean earliest/latest.

        Finds the segment by its largest timestamp and the batch through the time index,
        then decodes that one batch to find the record.
        """
        if timestamp_ms == EARLIEST_TIMESTAMP:
            return self._lso
        if timestamp_ms == LATEST_TIMESTAMP:
            return self._leo
        with self._lock:
            segs = list(self._segments)
            lso = self._lso
        for seg in segs:
            if seg.max_timestamp < timestamp_ms or seg.is_empty:
                continue
            start_offset = max(seg.time_index.lookup(timestamp_ms), lso)
            start = seg.index.lookup(start_offset)
            for pos, h in seg.scan(start, verify=False, end=seg.size_bytes):
                if h.max_timestamp < timestamp_ms or h.last_offset < lso:
                    continue
                for r in decode_records(seg.log.pread(h.size, pos)):
                    if r.timestamp >= timestamp_ms and r.offset >= lso:
                        return r.offset
        return None

    # ------------------------------------------------------------------ truncate

    def truncate_to(self, offset: int) -> None:
        """Drop every record at and after ``offset``, across segments.

        Cuts at a batch boundary: if ``offset`` falls inside a batch, that whole batch goes
        and the log end becomes its base offset (a follower then refetches it). Below the log
        start this is ``truncate_fully_and_start_at(offset)``, as in Kafka. The cut is
        fsynced before returning, so truncated data never comes back after a crash.
        ``OutOfSpaceError`` if the recovery point cannot be lowered first (nothing cut);
        any I/O error after that takes the directory offline.
        """
        with self._lock:
            self._writable_or_raise()
            self._truncate_to_locked(offset)

    def _truncate_to_locked(self, offset: int) -> None:
        if offset >= self._leo:
            return
        if offset < self._lso or offset <= self._segments[0].base_offset:
            self._truncate_fully_locked(offset)
            return
        doomed = [s for s in self._segments[1:] if s.base_offset >= offset]
        seg = self._segments[-1 - len(doomed)]
        new_leo = offset
        data_end = seg.next_offset
        loc = seg.locate(offset)
        if loc is not None:
            pos = loc[0]
            end_before = data_end = _end_offset_before(seg, pos)
            # A batch straddling the log start goes whole too; the log is then empty from
            # the log start on. (``end_before``: never below the batches kept, even when
            # the header found at ``pos`` is garbage, as when cutting off corruption.)
            new_leo = max(min(offset, loc[2]), self._lso, end_before)
        new_leo = max(new_leo, data_end)
        # Read before anything changes (a closed segment's come from its file).
        kept_aborted = [a for a in seg.aborted_txns() if a.last_offset < new_leo]
        # Lower the recovery point before cutting, and to where the data will end: a crash
        # in between must not leave a recovery point above the data (open takes that for
        # data the disk lost).
        self._lower_recovery_point_locked(min(new_leo, data_end))
        with self._destructive("truncate"):
            for s in doomed:
                self._segments.remove(s)
                self._retire(s, delete=True)
            if loc is not None:
                seg.truncate_to_position(pos, end_before)
            seg.set_aborted_txns(kept_aborted)  # it is the active segment now
            with self._fsync_lock:
                self._fsync(seg)
            if doomed:
                self.files.fsync_dir(self.dir_path)
            self._after_truncate_locked(new_leo)
            if new_leo > data_end:
                # The log now ends in a gap (a cut into offsets compaction removed, or below
                # the log start): a segment based at the new end records it on disk, where
                # a data end below the recovery point otherwise means lost data.
                self._roll_locked()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete everything; the log restarts empty at ``offset`` (start and end).
        Errors as ``truncate_to``."""
        with self._lock:
            self._writable_or_raise()
            self._truncate_fully_locked(offset)

    def _truncate_fully_locked(self, offset: int) -> None:
        self._lower_recovery_point_locked(offset)
        self._write_checkpoint_or_raise(checkpoint.LOG_START_OFFSET_NAME, offset, "truncate")
        self._lso = offset
        with self._destructive("truncate"):
            for s in self._segments:
                self._retire(s, delete=True)
            self._segments = [Segment.create(self.dir_path, offset, self.files)]
            self.files.fsync_dir(self.dir_path)
            self.leader_epoch_cache.clear()
            self._after_truncate_locked(offset)

    def _lower_recovery_point_locked(self, offset: int) -> None:
        """Checkpoint a recovery point of ``offset`` if the current one is above it. Nothing
        has changed yet when this fails: ENOSPC is ``OutOfSpaceError``."""
        if offset < self._flushed:
            self._write_checkpoint_or_raise(checkpoint.RECOVERY_POINT_NAME, offset, "truncate")
            self._flushed = min(self._flushed, offset)
            self._rp_checkpointed = offset

    def _after_truncate_locked(self, new_leo: int) -> None:
        self._leo = new_leo
        self._flushed = min(self._flushed, new_leo)
        self._truncations += 1
        self.leader_epoch_cache.truncate_from_end(new_leo)
        self._check()
        for fn in self._truncate_listeners:
            fn(self, new_leo)

    def _retire(self, seg: Segment, *, delete: bool) -> None:
        """Take ``seg`` out of service. Its handle is closed later (next maintenance or
        close), so a reader in another thread that still holds it never reads a reused fd."""
        seg.retired = True
        if delete:
            for p in (seg.log_path, seg.index_path, seg.timeindex_path, seg.txnindex_path):
                if self.files.exists(p):
                    self.files.unlink(p)
        self._retired.append(seg)

    # ------------------------------------------------------------------ aborted transactions

    def append_aborted_txn(self, entry: AbortedTxn) -> None:
        """The abort marker at ``entry.last_offset``, just appended (it is in the active
        segment: call this before anything else is appended), ended the transaction
        ``entry`` describes."""
        with self._lock:
            self._writable_or_raise()
            try:
                self.active_segment.append_aborted_txn(entry)
            except OSError as e:
                raise self._io_error(e, "append") from e

    def aborted_txns_in(self, start_offset: int, end_offset: int) -> list[AbortedTxn]:
        """The aborted transactions with data in ``[start_offset, end_offset)`` (Kafka's
        ``collectAbortedTxns``), from the segment holding ``start_offset`` onwards.
        ``CorruptSegmentError`` if a ``.txnindex`` read fails its checks (never served)."""
        out: list[AbortedTxn] = []
        if end_offset <= start_offset:
            return out
        with self._lock:
            self._ensure_open()
            segs = self._segments
            i = max(0, bisect_right(segs, start_offset, key=_base_offset) - 1)
            # Segments after the range too: a later marker may abort data of the range.
            for seg in segs[i:]:
                try:
                    entries = seg.aborted_txns()
                except CorruptSegmentError as e:
                    logger.error("%s: %s", self.dir_path, e)
                    raise
                if collect(entries, start_offset, end_offset, out):
                    break
        return out

    def _close_retired_locked(self, keep: int = 0) -> None:
        while len(self._retired) > keep:
            self._retired.pop(0).close()

    # ------------------------------------------------------------------ log start, retention

    def delete_records_before(self, offset: int) -> int:
        """Move the log start offset up to ``offset`` (Kafka's DeleteRecords); returns it.

        Whole segments below it are deleted; the rest of the first segment stays on disk
        but is no longer served.
        """
        with self._lock:
            self._writable_or_raise()
            if offset > self._leo:
                raise OffsetOutOfRangeError(offset, self._lso, self._leo)
            if offset <= self._lso:
                return self._lso
            self._write_checkpoint_or_raise(
                checkpoint.LOG_START_OFFSET_NAME, offset, "delete records"
            )
            self._lso = offset
            with self._destructive("delete records"):
                self._delete_segments_below_start_locked()
            return self._lso

    def _delete_segments_below_start_locked(self) -> bool:
        deleted = False
        while len(self._segments) > 1 and self._segments[1].base_offset <= self._lso:
            self._retire(self._segments.pop(0), delete=True)
            deleted = True
        if deleted:
            self.files.fsync_dir(self.dir_path)
        self.leader_epoch_cache.truncate_from_start(self._lso)
        return deleted

    def maybe_apply_retention(self, now_ms: int, high_watermark: int | None = None) -> bool:
        """Delete oldest whole segments past ``retention.ms`` or beyond ``retention.bytes``
        (``cleanup.policy`` with ``delete``), and segments below the log start offset.
        Never the active segment, and never a segment holding an offset at or above
        ``high_watermark`` (Kafka's ``deletableSegments``): retention must not remove records
        not yet committed, or the log start would pass the HW and followers could never
        fetch them. True if any segment was deleted."""
        with self._lock:
            self._writable_or_raise()
            self._close_retired_locked()
            doomed = 0
            cfg = self.config
            if cfg.delete:
                total = self.size_bytes
                segs = self._segments
                for i, seg in enumerate(segs[:-1]):
                    if high_watermark is not None and segs[i + 1].base_offset > high_watermark:
                        break
                    # A segment whose records carry no timestamps (-1) never expires by time.
                    expired = cfg.retention_ms >= 0 and (
                        seg.is_empty
                        or (
                            seg.max_timestamp >= 0 and now_ms - seg.max_timestamp > cfg.retention_ms
                        )
                    )
                    oversize = (
                        cfg.retention_bytes >= 0 and total - seg.size_bytes >= cfg.retention_bytes
                    )
                    if not (expired or oversize):
                        break
                    total -= seg.size_bytes
                    doomed += 1
            with self._destructive("retention"):
                for _ in range(doomed):
                    self._retire(self._segments.pop(0), delete=True)
                if doomed:
                    self._lso = max(self._lso, self._segments[0].base_offset)
                    self.files.fsync_dir(self.dir_path)
                return self._delete_segments_below_start_locked() or doomed > 0

    # ------------------------------------------------------------------ compaction

    def maybe_compact(self, now_ms: int, uncleanable_offset: int | None = None) -> bool:
        """Compact closed segments if ``cleanup.policy`` has ``compact``; see storage.cleaner.
        Nothing at or above ``uncleanable_offset`` (the partition's last stable offset: an
        open transaction may still abort) is cleaned.

        May run in a worker thread: appends and reads go on meanwhile.
        """
        if not self.config.compact:
            return False
        return compact_log(self, now_ms, uncleanable_offset)

    def segments_for_cleaning(self) -> list[Segment]:
        """The closed segments (every one but the active), oldest first; none if the log is
        closed. The cleaner's snapshot of what it may rewrite.

        Locking: takes the log's lock for the snapshot only, so it may be called from a
        worker thread; the caller then reads the segments without the lock (a closed segment
        is never appended to, and one retired meanwhile keeps its handle open until the next
        maintenance pass). Under the lock it first closes the handles of the segments retired
        by the previous pass, as ``maybe_apply_retention`` does.
        """
        with self._lock:
            if self._closed:
                return []
            self._close_retired_locked()
            return self._segments[:-1]

    def replace_segments(
        self, old: list[Segment], new: list[Segment], rename_into_place: Callable[[], None]
    ) -> bool:
        """Replace ``old`` (consecutive closed segments, still in the log) by ``new``; the
        cleaner's commit. False, and nothing changed, if the log is closed or ``old`` is gone
        (a truncation or retention may have removed it since ``segments_for_cleaning``).

        Locking: takes the log's lock, so it may be called from a worker thread.
        ``rename_into_place`` runs under that lock, only when the swap goes ahead: it renames
        the cleaner's files over the old ones, and must do nothing slower (appends and reads
        wait for it). The old segments are retired, their handles closed at a later pass.
        """
        with self._lock:
            if self._closed:
                return False
            ids = [id(s) for s in self._segments]
            try:
                i = ids.index(id(old[0]))
            except ValueError:
                return False
            if ids[i : i + len(old)] != [id(s) for s in old] or i + len(old) >= len(ids):
                return False
            rename_into_place()
            self._segments[i : i + len(old)] = new
            for s in old:
                self._retire(s, delete=False)
            self._check()
            return True

    # ------------------------------------------------------------------ flush / close

    def flush(self) -> int:
        """fsync everything appended so far; returns the new ``flushed_offset``.

        Safe to call from a worker thread while the loop appends: what is appended after
        the snapshot is left for the next flush.

        fsyncgate: a failed fsync takes the directory offline and raises
        ``LogDirOfflineError``; so does any flush after that, of this log or any other in
        the directory, without trying: after a failed fsync the kernel may have dropped the
        pages it could not write, and a later fsync would succeed without them. So
        ``flushed_offset`` never covers data that was not durable when the directory
        failed, and no waiter on it is ever told it is.
        """
        with self._lock:
            if self._closed:
                return self._flushed
            self.log_dir.check_or_raise()
            target, gen = self._leo, self._truncations
            if target <= self._flushed:
                return self._flushed
            dirty = [s for s in self._segments if s.next_offset > self._flushed]
            if not dirty:
                dirty = [self.active_segment]
        with self._fsync_lock:
            if self._closed:
                return self._flushed
            for seg in dirty:
                if seg.retired:
                    continue  # deleted or replaced since: nothing of it to make durable
                self._fsync(seg)
        with self._lock:
            # Publish only if the directory is still online: a failure meanwhile (another
            # log's fsync) means this disk lost data, and the caller must not count on it.
            self.log_dir.check_or_raise()
            if gen == self._truncations:
                self._flushed = max(self._flushed, min(target, self._leo))
            return self._flushed

    def update_config(self, config: LogConfig) -> None:
        with self._lock:
            self.config = config

    def close(self) -> None:
        """Flush, write every index file and the checkpoints, then the clean-shutdown marker.

        In an offline directory: close the files and write nothing (no marker, so the next
        open runs recovery from the recovery point). If the flush fails here, the directory
        goes offline, the files are closed and the error raised.
        """
        with self._lock:
            if self._closed:
                return
            try:
                if self.log_dir.online:
                    self.flush()
                    self._write_clean_state_locked()
            except (OSError, LogDirOfflineError) as e:
                self._close_files_locked()
                if isinstance(e, OSError):
                    raise self._io_error(e, "close") from e
                raise
            self._close_files_locked()

    def _write_clean_state_locked(self) -> None:
        active = self.active_segment
        active.write_indexes()
        checkpoint.write_offset(
            self.files, self.dir_path, checkpoint.RECOVERY_POINT_NAME, self._leo
        )
        if self._lso > self._segments[0].base_offset:
            checkpoint.write_offset(
                self.files, self.dir_path, checkpoint.LOG_START_OFFSET_NAME, self._lso
            )
        checkpoint.write_clean_shutdown(
            self.files,
            self.dir_path,
            log_end_offset=self._leo,
            active_base_offset=active.base_offset,
            active_segment_bytes=active.size_bytes,
        )

    def _close_files_locked(self) -> None:
        with self._fsync_lock:
            self._closed = True
            for s in self._segments:
                with contextlib.suppress(OSError):
                    s.close()
            for s in self._retired:
                with contextlib.suppress(OSError):
                    s.close()
            self._retired.clear()

    def abandon(self) -> None:
        """Close file handles with no flush and no marker (tests simulating a crash)."""
        with self._lock:
            self._close_files_locked()

    @property
    def closed(self) -> bool:
        return self._closed

    # ------------------------------------------------------------------ page cache

    def cache_drop_pending(self, keep_bytes: int) -> int:
        """Bytes lying more than ``keep_bytes`` behind the log's end that were never asked
        out of the page cache (``drop_cache_behind``). Cheap: it walks back from the active
        segment only as far as the first segment already out of the cache, so the broker
        may ask after every append."""
        pending = 0
        for seg, size, target, active in self._cache_walk(keep_bytes):
            asked = min(seg.cache_asked if active else seg.cache_dropped, size)
            pending += max(0, target - asked)
        return pending

    def _cache_walk(self, keep_bytes: int) -> Iterator[tuple[Segment, int, int, bool]]:
        """``(segment, size, target, active)`` from the active segment back, as far as the
        first closed segment already out of the cache (it and every older one are):
        ``target`` is where the segment's part more than ``keep_bytes`` behind the log's end
        ends."""
        keep = keep_bytes
        last = len(self._segments) - 1
        for i in range(last, -1, -1):
            seg = self._segments[i]
            size = seg.size_bytes
            if seg.cache_dropped >= size and i != last:
                return
            yield seg, size, max(0, size - keep), i == last
            keep = max(0, keep - size)

    def _cache_drops(self, keep_bytes: int, now_ms: int, settle_ms: int) -> list[_CacheDrop]:
        """What to ask out of the cache at ``now_ms`` (no I/O, no clock): per segment the
        range from what is out already to ``keep_bytes`` behind the end (or to what was
        asked, if more). The bytes asked once at least ``settle_ms`` before are out after
        this ask; the younger ones are asked again too (whatever of them was written back
        goes) but stay to be asked later."""
        out = []
        for seg, size, target, active in self._cache_walk(keep_bytes):
            # A truncation may have cut below what was asked: the marks follow the file.
            lo, asked = min(seg.cache_dropped, size), min(seg.cache_asked, size)
            if not active:
                # Closed segments were fsynced when they rolled: clean, one ask drops them.
                hi = max(target, asked)
                if hi > lo:
                    out.append(_CacheDrop(seg, lo, hi, max(0, target - lo), hi, hi, []))
                continue
            settled = lo
            for end, at_ms in seg.cache_asks:
                if now_ms - at_ms < settle_ms:
                    break
                settled = min(end, size)
            new = max(0, target - asked)
            if new == 0 and settled == lo:
                continue  # nothing new, nothing settled: asking again could only repeat
            hi = max(target, asked)
            asks = [(end, at_ms) for end, at_ms in seg.cache_asks if end > settled]
            if new:
                if asks and now_ms - asks[-1][1] < settle_ms // 8:
                    asks[-1] = (hi, asks[-1][1])  # a few steps per settle: few pieces
                else:
                    asks.append((hi, now_ms))
            out.append(_CacheDrop(seg, lo, hi, new, settled, hi, asks))
        return out

    def drop_cache_behind(self, keep_bytes: int, *, now_ms: int = 0, settle_ms: int = 0) -> int:
        """Drop from the page cache what lies more than ``keep_bytes`` behind the log's end,
        so that the log's page-cache footprint stays bounded; returns the bytes asked.

        Why: on a VM whose guest hands freed memory back to its host (free page reporting,
        as on this project's Firecracker machines), every page cache page the log grows
        into is first-touch memory, several times slower to write than a page just freed;
        keeping the footprint bounded makes appends reuse pages the log itself freed
        (docs/storage.md, "Page cache"). Readers of older data read the disk.

        Dirty pages are not dropped at once: the first ask (``now_ms``) starts their
        write-back and a later one drops them. Bytes asked once are asked again at every
        call, and count as out after the first call at least ``settle_ms`` after their
        first ask (the write-back has had time to end); ``cache_reask_at_ms`` says when
        that comes, for a caller that gets no more appends to ask at. Safe to call from a
        worker thread while the loop appends (as ``flush``): the lock is held to pick the
        ranges only.
        """
        with self._lock:
            if self._closed:
                return 0
            work = self._cache_drops(keep_bytes, now_ms, settle_ms)
            for d in work:
                d.seg.cache_dropped, d.seg.cache_asked = d.dropped, d.asked
                d.seg.cache_asks = d.asks
        n = 0
        for d in work:
            # A segment retired meanwhile keeps its descriptor until the next maintenance
            # closes it (``_retire``); a log closed meanwhile raises EBADF, ignored below.
            # Either way the ask is only a hint: it can cost a re-read, never data.
            try:
                d.seg.log.drop_cache(d.lo, d.hi - d.lo)
            except OSError:
                if not (d.seg.retired or self._closed):
                    raise
            n += d.hi - d.lo
        return n

    def cache_reask_at_ms(self, settle_ms: int) -> int | None:
        """When bytes asked out of the cache once will have settled (``drop_cache_behind``
        with this ``settle_ms``): the time to ask again even if no append comes; None if
        none wait (or the log is closed)."""
        with self._lock:
            if self._closed:
                return None
            at: int | None = None
            for seg, *_ in self._cache_walk(0):
                if seg.cache_asks:
                    t = seg.cache_asks[0][1] + settle_ms
                    at = t if at is None else min(at, t)
            return at


class _CacheDrop(NamedTuple):
    """One segment's part of ``PartitionLog.drop_cache_behind``: ask ``[lo, hi)``, then set
    the segment's marks to ``dropped``, ``asked`` and ``asks``; ``new`` of the bytes were
    never asked."""

    seg: Segment
    lo: int
    hi: int
    new: int
    dropped: int
    asked: int
    asks: list[tuple[int, int]]


def _load_txn_indexes(segments: list[Segment], report: RecoveryReport) -> None:
    """Check every segment's ``.txnindex`` and rebuild those missing or failing, or of a
    scanned segment whose file does not match its abort markers (see the module
    docstring); the active segment's entries go to memory."""
    stale: dict[int, str | None] = {}
    kept: dict[int, list[AbortedTxn]] = {}
    for i, seg in enumerate(segments):
        if seg.txn_entries is not None:
            continue  # created by this open: nothing in it
        if seg.scanned:
            entries = _recovered_txn_entries(seg)
            if entries is None:
                stale[i] = None
            else:
                kept[i] = entries
            continue
        try:
            entries = seg.load_txn_index()
            _check_markers(seg, entries)
        except TxnIndexError as e:
            stale[i] = str(e)
            continue
        kept[i] = entries
    if stale:
        for i, why in stale.items():
            if why is not None:
                report.txn_indexes_rebuilt.append(f"{segments[i].txnindex_path} ({why})")
        rebuilt: dict[int, list[AbortedTxn]] = {i: [] for i in stale}
        tracker = AbortTracker()
        report.txn_index_walk_segments = max(stale) + 1
        for i, seg in enumerate(segments[: max(stale) + 1]):
            for pos, h in seg.scan(0, verify=False, end=seg.size_bytes):
                entry = tracker.on_batch(h, _marker_at(seg, pos, h))
                if entry is not None and i in rebuilt:
                    rebuilt[i].append(entry)
        for i, entries in rebuilt.items():
            kept[i] = entries
            if i != len(segments) - 1:
                seg = segments[i]
                seg.files.write_file_atomic(seg.txnindex_path, encode_entries(entries))
    for i, seg in enumerate(segments):
        if i == len(segments) - 1:
            if i in kept:
                seg.set_aborted_txns(kept[i])  # the file rewritten to match
        elif seg.scanned and i not in stale:
            # A closed segment scanned (its successor began above the recovery point): its
            # file was written whole at roll; rewrite it if entries past its end went.
            seg.files.write_file_atomic(seg.txnindex_path, encode_entries(kept[i]))


def _marker_at(seg: Segment, pos: int, h: BatchHeader) -> ControlMarker | None:
    """The transaction marker of the control batch ``h`` at ``pos``; None for any other
    batch, and for a control batch that is not a marker (it ends nothing)."""
    if not h.is_control or h.producer_id < 0:
        return None
    try:
        return decode_marker(seg.log.pread(h.size, pos), verify=False)
    except CorruptRecordError:
        return None


def _recovered_txn_entries(seg: Segment) -> list[AbortedTxn] | None:
    """The entries of a scanned segment's ``.txnindex`` if they can be trusted: whole
    entries (a torn last one dropped) that pass the file's checks and name exactly the
    segment's abort markers, those past its recovered end dropped. None: rebuild it."""
    try:
        raw = seg.files.read_file(seg.txnindex_path)
    except FileNotFoundError:
        raw = b""  # an active segment gets its file with its first entry
    except OSError:
        return None
    raw = raw[: len(raw) - len(raw) % ENTRY_BYTES]
    try:
        entries = parse_entries(raw, seg.base_offset, 1 << 62)
    except TxnIndexError:
        return None
    entries = [a for a in entries if a.last_offset < seg.next_offset]
    aborts = {}
    for pos, h in seg.scan(0, verify=False, end=seg.size_bytes):
        marker = _marker_at(seg, pos, h)
        if marker is not None and not marker.commit:
            aborts[h.base_offset] = h.producer_id
    if {a.last_offset: a.producer_id for a in entries} != aborts:
        return None  # an entry lost (or an abort that closed nothing): rebuild
    return entries


def _check_markers(seg: Segment, entries: list[AbortedTxn]) -> None:
    """Each entry's ``last_offset`` is the base of a control batch of its producer."""
    for a in entries:
        loc = seg.locate(a.last_offset)
        try:
            h = None if loc is None else seg.batch_header_at(loc[0])
        except CorruptRecordError:
            h = None
        if h is None or not (
            h.is_control and h.base_offset == a.last_offset and h.producer_id == a.producer_id
        ):
            raise TxnIndexError(
                f"entry of producer {a.producer_id} names offset {a.last_offset}, which is not "
                "its marker"
            )


def _base_offset(seg: Segment) -> int:
    return seg.base_offset


def _end_offset_before(seg: Segment, position: int) -> int:
    """``next_offset`` of the last batch ending at or before ``position`` (headers only)."""
    i = bisect_left(seg.index.positions, position) - 1
    start = seg.index.positions[i] if i >= 0 else 0
    end = seg.base_offset
    for _, h in seg.scan(start, verify=False, end=position):
        end = h.next_offset
    return end


def _valid_batch_after(seg: Segment, position: int) -> bool:
    """Whether any whole batch with a valid CRC starts after ``position`` in ``seg``'s file.

    Distinguishes a torn tail (garbage or zeros to the end of the file) from a damaged
    batch in the middle of good data. Searches every position where the magic byte could
    be, so it also finds the next batch when the damaged batch's length field is wrong.
    """
    data = seg.log.pread(seg.log.size() - position, position)
    for m in MAGICS:  # a log holds both encodings (a Kafka client's batches are magic 2)
        magic = bytes([m])
        i = data.find(magic, 1 + MAGIC_OFFSET)
        while i >= 0:
            q = i - MAGIC_OFFSET
            if len(data) - q >= HEADER_SIZE:
                try:
                    h = parse_header(data, q)
                except CorruptRecordError:
                    h = None
                if (
                    h is not None
                    and q + h.size <= len(data)
                    and compute_crc(memoryview(data)[q : q + h.size]) == h.crc
                ):
                    return True
            i = data.find(magic, i + 1)
    return False


def _read_checkpoint(
    files: FileLayer, dir_path: str, name: str, report: RecoveryReport
) -> int | None:
    """A checkpointed offset, or None when missing or damaged (reported)."""
    try:
        return checkpoint.read_offset(files, dir_path, name)
    except CorruptCheckpointError as e:
        report.checkpoint_errors.append(e)
        return None


def _below_recovery_point(reason: str, recovery_point: int | None, last: bool, offset: int) -> str:
    """The reason a bad batch is corruption rather than a torn write."""
    if not last:
        return f"{reason}; in a closed segment (fsynced when the log rolled past it)"
    if recovery_point is not None and offset < recovery_point:
        return f"{reason}; below the recovery point {recovery_point} (fsynced), so not a torn write"
    return f"{reason}; valid batches follow it, so not a torn write"


def _bad_epoch(
    headers: list[BatchHeader], epoch_prev: int, epoch_max: int | None
) -> tuple[int, str] | None:
    """The first batch whose leader epoch cannot be right, as ``(index, reason)``: one below
    an earlier batch's (epochs, and Raft terms, never decrease along a log) or above the
    latest in the leader epoch checkpoint (``epoch_max``; it is written before the batches
    of a new epoch). -1 (no epoch, as a v0/v1 producer's batch) passes."""
    for k, h in enumerate(headers):
        e = h.leader_epoch
        if e < -1 or (e >= 0 and e < epoch_prev):
            return k, (
                f"leader epoch {e} of the batch at offset {h.base_offset} is below the "
                f"epoch {epoch_prev} of an earlier batch (epochs never decrease along a log)"
            )
        if epoch_max is not None and e > epoch_max:
            return k, (
                f"leader epoch {e} of the batch at offset {h.base_offset} is above the latest "
                f"epoch {epoch_max} in {EPOCH_CHECKPOINT_NAME}"
            )
        epoch_prev = max(epoch_prev, e)
    return None


def _rebuild_epochs(segments: list[Segment], epochs: LeaderEpochCache) -> None:
    """The leader epoch cache from every batch header (its checkpoint was damaged): each
    epoch starts at the first batch that carries it. Reads every segment (headers only)."""
    epochs.clear()
    for seg in segments:
        for _, h in seg.scan(0, verify=False, end=seg.size_bytes):
            if h.leader_epoch > epochs.latest_epoch:
                epochs.assign(h.leader_epoch, h.base_offset)
