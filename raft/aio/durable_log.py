"""The Raft log on disk: a ``storage.PartitionLog`` plus snapshot checkpoint files, mirrored
in a ``MemoryStorage`` that the core reads through its port.

Owns, in a node's data directory::

    quorum-state                         term, vote, commit (raft.aio.quorum_state)
    log/                                 a PartitionLog (segments, indexes, epoch cache),
                                         the metadata log as a log like any other
                                         (KRaft's __cluster_metadata-0)
    snapshots/<index>-<term>.checkpoint  the latest snapshot(s), CRC-checked (KIP-630 names);
                                         a bootstrapped node starts with an empty one at
                                         index 0 holding the initial configuration

Mapping of entries to batches:

* Raft entry ``i`` is the record at offset ``i - 1`` (Raft indexes start at 1, log offsets
  at 0, so the log stays dense from offset 0). The log start offset is therefore the
  latest snapshot's index: the first entry kept after a snapshot at ``s`` is ``s + 1``.
* Each run of entries of one term in a ``Ready`` is one batch whose base offset is its
  first entry's offset and whose leader epoch is the term, so the term of every entry is
  recovered from the batch header on restart (and the log's leader epoch cache is the
  Raft term history). A record's key is one byte, the ``EntryKind``; its value the data.
* A conflict (a follower's suffix replaced by the leader's) is ``truncate_to(i - 1)``.
  ``PartitionLog`` cuts at batch boundaries, so when ``i`` falls inside a batch, the kept
  part of that batch (``i`` down to its base) is appended again from the mirror before the
  flush. Those kept entries may have been acknowledged (and counted towards a commit), so
  losing them in a crash between the cut and the flush would break Raft's durability
  assumption (with 5 voters a committed entry could then be lost). A redo journal closes
  that window: before the cut, the kept entries are written to ``truncation-intent``
  (atomically, fsynced, with a CRC-32C: a damaged one makes ``open`` refuse to start);
  after the flush the intent is removed durably, before ``persist`` returns and so before
  any message that depends on it is sent. ``open`` finding an intent redoes the repair (cut
  to the batch base, append the kept entries, flush): a leftover intent always belongs to
  the last, unacknowledged ``persist``.

Snapshot file, replaced atomically (tmp, fsync, rename, fsync dir)::

    off  size  field
      0     4  magic    b"LBSN"
      4     1  version  1
      5     4  crc      CRC-32C of the payload
      9     4  length   payload bytes
     13     *  payload  msgpack [index, term, [voters], [observers], data]

Durability order inside ``persist`` (one call per Ready, in a worker thread): the quorum-state
file when term or vote changed (so no entry on disk has a term above it: ``open`` checks
that, since a term is a batch's leader epoch, outside the CRC), snapshot file, log
truncation/append, one ``flush()`` (fsync) of the log. The node sends the Ready's messages
only after ``persist`` returns.

Snapshots kept, and what a corrupt one does. The newest two snapshot files are kept, and
the log keeps every entry after the *older* of them (``save_snapshot`` moves the log start
to the previous snapshot's index, not the new one's), so that the older one plus the log
still make the whole state. On ``open`` a snapshot file that fails its checks (magic,
length, CRC, payload, or a payload whose index or term disagrees with its name) is passed
over for the previous one if the log continues that one up to at least the corrupt one's
index; the corrupt file is then renamed ``<name>.corrupt`` (kept for the operator, never
read again) and a warning logged. Otherwise ``open`` raises ``CorruptSnapshotError`` naming
the file and why the log cannot stand in for it: a voter that lost what it acknowledged
must not vote or append again (Raft's durability assumption), so it refuses to start. It
never discards its log to get going. (A snapshot installed from the leader replaces the
log, so there a corrupt newest snapshot means refusing to start: rejoin the node as a new
member, or restore the file.)

Disk errors: the log lives in its own ``storage.logdir.LogDirectory`` (``log_dir``); an I/O
error in ``persist`` or ``save_snapshot`` takes it offline, and every later call refuses
(``LogDirOfflineError``), so the node task ends and the process stops (common.essential):
a failed fsync must never be followed by a message that depends on it.

Threads: ``persist``, ``save_snapshot`` and ``open`` block (file I/O and fsync) and run in a
worker thread; ``mirror_*`` and the port methods run on the node's task. The node never
runs two of the blocking calls at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import crc32c
import msgpack

from common.essential import describe_error
from common.invariant import invariant
from raft.aio.quorum_state import QuorumStateFile
from raft.storage_port import MemoryStorage
from raft.types import (
    ConfState,
    Entry,
    EntryKind,
    HardState,
    LogIndex,
    NodeId,
    Snapshot,
    SnapshotMetadata,
    Term,
)
from storage.batch import (
    CRC_OFFSET,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_MSGPACK,
    compute_crc,
    decode_records,
    iter_batches,
    parse_header,
)
from storage.config import LogConfig
from storage.errors import CorruptSegmentError, StorageError
from storage.fileio import FileLayer, default_file_layer
from storage.log import PartitionLog
from storage.logdir import LogDirectory

log = logging.getLogger(__name__)

SNAPSHOT_DIR = "snapshots"
LOG_DIR = "log"
TRUNCATION_INTENT = "truncation-intent"
SNAPSHOT_SUFFIX = ".checkpoint"
CORRUPT_SUFFIX = ".corrupt"
SNAPSHOT_MAGIC = b"LBSN"
SNAPSHOT_VERSION = 1
_SNAP_HEAD = struct.Struct(">4sBII")
_KIND_KEYS = {k: bytes([int(k)]) for k in EntryKind}
READ_CHUNK_BYTES = 4 << 20
COMMIT_SAVE_INTERVAL_S = 1.0


class CorruptSnapshotError(StorageError):
    """A snapshot checkpoint file failed its magic, length or CRC, or the node cannot start
    without it (and the truncation journal, likewise)."""


def encode_snapshot(snap: Snapshot) -> bytes:
    m = snap.metadata
    payload = msgpack.packb(
        [m.index, m.term, sorted(m.conf_state.voters), sorted(m.conf_state.observers), snap.data],
        use_bin_type=True,
    )
    head = _SNAP_HEAD.pack(SNAPSHOT_MAGIC, SNAPSHOT_VERSION, crc32c.crc32c(payload), len(payload))
    return head + payload


def decode_snapshot(buf: bytes, *, path: str = "snapshot") -> Snapshot:
    if len(buf) < _SNAP_HEAD.size:
        raise CorruptSnapshotError(f"{path}: shorter than its header")
    magic, version, crc, length = _SNAP_HEAD.unpack_from(buf)
    payload = buf[_SNAP_HEAD.size :]
    if magic != SNAPSHOT_MAGIC or version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"{path}: bad magic {magic!r} or version {version}")
    if len(payload) != length or crc32c.crc32c(payload) != crc:
        raise CorruptSnapshotError(f"{path}: length or crc mismatch")
    try:
        index, term, voters, observers, data = msgpack.unpackb(payload, raw=False)
        cs = ConfState(
            frozenset(NodeId(v) for v in voters), frozenset(NodeId(o) for o in observers)
        )
        return Snapshot(SnapshotMetadata(LogIndex(index), Term(term), cs), bytes(data))
    except Exception as e:
        raise CorruptSnapshotError(f"{path}: payload does not decode: {e}") from e


def snapshot_file_name(index: int, term: int) -> str:
    return f"{index:020d}-{term:010d}{SNAPSHOT_SUFFIX}"


def parse_snapshot_file_name(name: str) -> tuple[int, int] | None:
    if not name.endswith(SNAPSHOT_SUFFIX):
        return None
    stem = name[: -len(SNAPSHOT_SUFFIX)]
    parts = stem.split("-")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1])


def encode_entries(entries: Sequence[Entry], now_ms: int) -> list[bytes]:
    """One batch per run of entries of one term (base offset = index - 1, epoch = term)."""
    out: list[bytes] = []
    i = 0
    n = len(entries)
    while i < n:
        term = entries[i].term
        j = i + 1
        while j < n and entries[j].term == term:
            j += 1
        out.append(_encode_run(entries[i:j], term, now_ms))
        i = j
    return out


def _encode_run(run: Sequence[Entry], term: int, now_ms: int) -> bytes:
    """``storage.batch.encode_batch`` for entries, without its per-record generality.

    Same bytes as ``encode_batch([(kind_key, data, now_ms, ()) ...], base_offset=index-1,
    leader_epoch=term)``: every record has timestamp delta 0 and no headers, so the body is
    built in one comprehension and the header packed once (the batch codec's layout,
    docs/storage-format.md). About 0.6 us per entry instead of 2.2 us.
    """
    keys = _KIND_KEYS
    body = msgpack.packb(
        [[k, 0, keys[e.kind], e.data, []] for k, e in enumerate(run)], use_bin_type=True
    )
    buf = bytearray(HEADER_SIZE + len(body))
    HEADER.pack_into(
        buf,
        0,
        run[0].index - 1,  # base_offset
        HEADER_SIZE + len(body) - LOG_OVERHEAD,  # batch_length
        term,  # leader_epoch
        MAGIC_MSGPACK,
        0,  # magic, crc (below)
        0,  # attributes: no compression
        len(run) - 1,  # last_offset_delta
        now_ms,
        now_ms,  # first/max timestamp
        -1,
        -1,
        -1,  # producer id/epoch, base sequence
        len(run),  # record_count
    )
    buf[HEADER_SIZE:] = body
    struct.pack_into(">I", buf, CRC_OFFSET, compute_crc(buf))
    return bytes(buf)


def decode_entries(batches: bytes) -> list[Entry]:
    out: list[Entry] = []
    mv = memoryview(batches)
    for pos, h in iter_batches(mv, verify=False):  # PartitionLog checked CRCs on append/open
        term = Term(h.leader_epoch)
        for r in decode_records(mv[pos : pos + h.size], verify=False):
            kind = EntryKind(r.key[0]) if r.key else EntryKind.NORMAL
            out.append(Entry(LogIndex(r.offset + 1), term, kind, r.value or b""))
    return out


@dataclass
class PersistStats:
    persists: int = 0
    fsyncs: int = 0
    entries: int = 0
    rewrites: int = 0


class DurableLog:
    """Log + snapshot + quorum state of one node; ``memory`` is the core's storage port."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        fsync: bool = True,
        file_layer: FileLayer | None = None,
        log_config: LogConfig | None = None,
    ) -> None:
        self.data_dir = str(data_dir)
        self.fsync = fsync
        self.files = file_layer or default_file_layer()
        self.log_config = log_config or LogConfig(segment_bytes=64 << 20)
        self.quorum_state = QuorumStateFile(self.data_dir, fsync=fsync, file_layer=self.files)
        self.snapshot_dir = os.path.join(self.data_dir, SNAPSHOT_DIR)
        self.log_dir = LogDirectory(self.data_dir)
        self.memory = MemoryStorage()
        self.plog: PartitionLog | None = None
        self.stats = PersistStats()
        self._saved_hard_state = HardState()
        self._saved_at = 0.0

    # ------------------------------------------------------------------ open / close

    def open(self, bootstrap: ConfState) -> None:
        """Load snapshot, log and hard state; a fresh directory starts with ``bootstrap``.

        Blocking. ``bootstrap`` is the initial configuration of a new cluster (all voters),
        or ``ConfState()`` for a node that joins an existing one and learns it from the
        leader. It is used only when there is no snapshot and no log yet.
        """
        self.files.mkdir(self.data_dir)
        self.files.mkdir(self.snapshot_dir)
        hs = self.quorum_state.load()
        snap, corrupt = self._load_latest_snapshot()
        plog = PartitionLog.open(
            os.path.join(self.data_dir, LOG_DIR), self.log_config, self.files, log_dir=self.log_dir
        )
        self.plog = plog
        self._redo_truncation_intent(plog)
        entries: list[Entry] = []
        offset = plog.log_start_offset
        while offset < plog.log_end_offset:
            res = plog.read(offset, READ_CHUNK_BYTES)
            if not res.data:
                break
            chunk = decode_entries(res.data)
            entries.extend(e for e in chunk if e.index > offset)  # skip below the log start
            offset = chunk[-1].index if chunk else plog.log_end_offset
        _check_terms_or_raise(plog, entries, hs.term, self.quorum_state.path)
        if corrupt:
            self._fall_back_or_raise(snap, corrupt, plog, entries, hs)
        fresh = snap is None and not entries and hs.term == 0
        if fresh and bootstrap.members():
            # The initial configuration is durable from the start, as an empty snapshot at
            # index 0, so that a restart does not depend on the command line to know it.
            snap = Snapshot(SnapshotMetadata(conf_state=bootstrap))
            self._write_snapshot_file(snap)
        if snap is not None and snap.index == 0:
            mem = MemoryStorage(snap.metadata.conf_state)
        else:
            mem = MemoryStorage()
        if snap is not None and snap.index > 0:
            mem.apply_snapshot(snap)
            # The log continues the snapshot only if it starts right after it or holds the
            # snapshot's own last entry; otherwise it is an older history (a crash between
            # writing the snapshot file and resetting the log): drop it.
            if entries and not _continues(entries, snap):
                # (Only with the newest snapshot valid: a fallback past a corrupt one was
                # checked to continue, above.)
                plog.truncate_fully_and_start_at(snap.index)
                entries = []
            entries = [e for e in entries if e.index > snap.index]
        if entries:
            invariant(
                entries[0].index == mem.last_index() + 1,
                "log starts at index %d, expected %d",
                entries[0].index,
                mem.last_index() + 1,
            )
            mem.append(entries)
        # commit on disk may be ahead of what the log kept (a lost unsynced tail cannot be
        # committed: commit only counts fsynced entries) but never ahead of last index.
        commit = LogIndex(min(hs.commit, mem.last_index()))
        hs = HardState(hs.term, hs.vote, commit)
        mem.set_hard_state(hs)
        self._saved_hard_state = hs
        self.memory = mem

    def close(self) -> None:
        """Close the log (a clean shutdown: its files flushed, the clean-shutdown marker
        written). On a disk that is full or failing that write fails: say so and go on, since
        nothing is lost (every persist was flushed; without the marker the next start runs
        recovery), and a node stopping after a disk error must exit the named way, not on
        this second error."""
        plog, self.plog = self.plog, None
        if plog is None:
            return
        try:
            plog.close()
        except (OSError, StorageError) as e:
            log.error(
                "raft log %s: closing it failed (%s); the next start recovers it",
                plog.dir_path,
                describe_error(e),
            )

    # ------------------------------------------------------------------ persist (blocking)

    def persist(
        self,
        hard_state: HardState | None,
        entries: Sequence[Entry],
        snapshot: Snapshot | None,
        must_sync: bool,
    ) -> None:
        """Make one Ready's state durable: snapshot, entries, one fsync, hard state."""
        plog = self.plog
        invariant(plog is not None, "persist on a closed log")
        assert plog is not None
        with self._failing_dir("persist"):
            self._persist(plog, hard_state, entries, snapshot, must_sync)

    @contextlib.contextmanager
    def _failing_dir(self, operation: str) -> Iterator[None]:
        """Refuse if the directory failed; an I/O error inside takes it offline."""
        self.log_dir.check_or_raise()
        try:
            yield
        except OSError as e:
            self.log_dir.fail(
                e, operation=operation, path=getattr(e, "filename", None) or self.data_dir
            )
            raise self.log_dir.offline_error() from e

    def _persist(
        self,
        plog: PartitionLog,
        hard_state: HardState | None,
        entries: Sequence[Entry],
        snapshot: Snapshot | None,
        must_sync: bool,
    ) -> None:
        intent = False
        if hard_state is not None and self.hard_state_save_due(hard_state):
            # Term and vote first: every entry on disk then has a term at or below the one in
            # quorum-state, which ``open`` checks (a term is the batch's leader epoch, outside
            # the CRC). Raft only needs both durable before the Ready's messages go out; a
            # crash in between leaves a term with no entries of it, which is harmless, and a
            # commit index past the log, which ``open`` clamps.
            self.quorum_state.save(hard_state)
            self._saved_hard_state = hard_state
            self._saved_at = time.monotonic()
            if self.fsync:
                self.stats.fsyncs += 1
        if snapshot is not None:
            self._write_snapshot_file(snapshot)
            plog.truncate_fully_and_start_at(snapshot.index)
        if entries:
            first = entries[0].index
            offset = first - 1
            # append_as_follower accepts gaps (compacted logs have them); a Raft log must not.
            invariant(
                offset <= plog.log_end_offset,
                "entries start at index %d but the log ends before index %d",
                first,
                plog.log_end_offset + 1,
            )
            if offset < plog.log_end_offset:
                base = self._batch_base_at(plog, offset)
                if base < offset:
                    # The cut falls inside a batch: journal the entries it must keep first.
                    kept_before = self.memory.entries(LogIndex(base + 1), LogIndex(first), None)
                    self._write_truncation_intent(base, kept_before)
                    intent = True
                plog.truncate_to(offset)
                if plog.log_end_offset < offset:
                    # The cut fell inside a batch: re-append its kept entries (from the mirror,
                    # which still holds them: it is updated only after persist).
                    kept = self.memory.entries(
                        LogIndex(plog.log_end_offset + 1), LogIndex(first), None
                    )
                    self._append(plog, kept)
                    self.stats.rewrites += 1
            self._append(plog, entries)
            self.stats.entries += len(entries)
        if self.fsync and (entries or snapshot is not None):
            plog.flush()
            self.stats.fsyncs += 1
        if entries and intent:
            if not self.fsync:
                plog.flush()
            self._clear_truncation_intent()
        self.stats.persists += 1

    def hard_state_save_due(self, hs: HardState) -> bool:
        """Whether ``persist`` would write the quorum-state file for ``hs``.

        Term and vote must be durable before any message goes out (Raft §5.1, §5.2);
        commit alone may lag on disk (it is recovered from the quorum), so it is saved with
        them or at most once every ``COMMIT_SAVE_INTERVAL_S``.
        """
        prev = self._saved_hard_state
        return (
            hs.term != prev.term
            or hs.vote != prev.vote
            or (
                hs.commit != prev.commit
                and time.monotonic() - self._saved_at >= COMMIT_SAVE_INTERVAL_S
            )
        )

    # ------------------------------------------------------------------ truncation journal

    def _intent_path(self) -> str:
        return os.path.join(self.data_dir, TRUNCATION_INTENT)

    @staticmethod
    def _batch_base_at(plog: PartitionLog, offset: int) -> int:
        """Base offset of the batch holding ``offset`` (``offset`` itself if none)."""
        res = plog.read(offset, 1)
        if not res.data:
            return offset
        return parse_header(res.data).base_offset

    def _write_truncation_intent(self, base: int, kept: Sequence[Entry]) -> None:
        batches = b"".join(encode_entries(kept, int(time.time() * 1000))) if kept else b""
        # Version 2 adds a CRC-32C of [base, batches]: a flipped bit in ``base`` would make
        # the redo cut the log at the wrong entry (the batches carry their own CRCs).
        body = msgpack.packb([base, batches], use_bin_type=True)
        payload = msgpack.packb([2, base, batches, crc32c.crc32c(body)], use_bin_type=True)
        self.files.write_file_atomic(self._intent_path(), payload)

    def _read_truncation_intent(self, path: str) -> tuple[int, bytes]:
        """``(base, batches)`` of the intent at ``path``; ``CorruptTruncationIntentError``
        if it fails its checks (the node must not guess where to cut)."""
        try:
            fields = msgpack.unpackb(self.files.read_file(path), raw=False)
            version, base, batches = fields[:3]
            if version == 2:
                body = msgpack.packb([base, batches], use_bin_type=True)
                if len(fields) != 4 or fields[3] != crc32c.crc32c(body):
                    raise ValueError("checksum mismatch")
            elif version != 1 or len(fields) != 3:
                raise ValueError(f"unknown version {version}")
            if type(base) is not int or base < 0 or not isinstance(batches, bytes):
                raise ValueError("bad fields")
            return base, batches
        except (ValueError, TypeError, msgpack.UnpackException) as e:
            raise CorruptSnapshotError(
                f"{path}: the journal of an interrupted truncation is damaged ({e}); refusing "
                "to start rather than guess which entries to keep. Restore it, or remove this "
                "node's data directory and add it back as a new member"
            ) from e

    def _clear_truncation_intent(self) -> None:
        self.files.unlink(self._intent_path())
        self.files.fsync_dir(self.data_dir)

    def _redo_truncation_intent(self, plog: PartitionLog) -> None:
        path = self._intent_path()
        if not self.files.exists(path):
            return
        base, batches = self._read_truncation_intent(path)
        if plog.log_end_offset > base:
            plog.truncate_to(base)
        invariant(
            plog.log_end_offset == base,
            "truncation intent at %d but the log ends at %d",
            base,
            plog.log_end_offset,
        )
        if batches:
            plog.append_as_follower(batches)
        plog.flush()
        self._clear_truncation_intent()
        self.stats.rewrites += 1

    def _append(self, plog: PartitionLog, entries: Sequence[Entry]) -> None:
        if not entries:
            return
        now_ms = int(time.time() * 1000)
        batches = encode_entries(entries, now_ms)
        plog.append_as_follower(batches[0] if len(batches) == 1 else b"".join(batches))

    def _write_snapshot_file(self, snap: Snapshot) -> None:
        name = snapshot_file_name(snap.index, snap.term)
        path = os.path.join(self.snapshot_dir, name)
        if self.fsync:
            self.files.write_file_atomic(path, encode_snapshot(snap))
        else:
            tmp = path + ".tmp"
            f = self.files.open(tmp)
            try:
                f.write(encode_snapshot(snap))
            finally:
                f.close()
            self.files.replace(tmp, path)
        # Keep the newest two: the new one, and its predecessor in case the new one is
        # found corrupt on open.
        named = sorted(
            (p, n)
            for n in self.files.listdir(self.snapshot_dir)
            if (p := parse_snapshot_file_name(n)) is not None
        )
        for _, n in named[:-2]:
            self.files.unlink(os.path.join(self.snapshot_dir, n))

    def _snapshot_files(self) -> list[tuple[tuple[int, int], str]]:
        """``((index, term), name)`` of every snapshot file, oldest first."""
        return sorted(
            (p, n)
            for n in self.files.listdir(self.snapshot_dir)
            if (p := parse_snapshot_file_name(n)) is not None
        )

    def _load_latest_snapshot(self) -> tuple[Snapshot | None, list[tuple[str, int, str]]]:
        """The newest snapshot that passes its checks, and ``(path, index, why)`` of each
        newer one that did not."""
        corrupt: list[tuple[str, int, str]] = []
        for (index, term), n in reversed(self._snapshot_files()):
            path = os.path.join(self.snapshot_dir, n)
            try:
                snap = decode_snapshot(self.files.read_file(path), path=path)
            except CorruptSnapshotError as e:
                corrupt.append((path, index, str(e)))
                continue
            if snap.index == index and snap.term == term:
                return snap, corrupt
            corrupt.append(
                (
                    path,
                    index,
                    f"{path}: holds index {snap.index} and term "
                    f"{snap.term}, not what its name says",
                )
            )
        return None, corrupt

    def _fall_back_or_raise(
        self,
        snap: Snapshot | None,
        corrupt: list[tuple[str, int, str]],
        plog: PartitionLog,
        entries: list[Entry],
        hs: HardState,
    ) -> None:
        """Newer snapshots than ``snap`` are corrupt: go on from ``snap`` only if the log
        continues it past every corrupt one's index, and move those aside; else raise
        ``CorruptSnapshotError``. With no valid snapshot at all, only a node that has never
        held an entry or a term may go on (it bootstraps afresh): every other one needs a
        snapshot for its configuration. Never cuts the log."""
        floor = snap.index if snap is not None else 0
        needed = max(index for _, index, _ in corrupt)
        last = entries[-1].index if entries else floor
        if snap is None:
            continues = not entries and hs.term == 0 and plog.log_start_offset == 0
            needed = 0
        else:
            continues = plog.log_start_offset <= floor and (
                not entries or _continues(entries, snap)
            )
        if not continues or last < needed:
            reasons = "; ".join(why for _, _, why in corrupt)
            have = (
                f"the log holds entries {entries[0].index}..{last}"
                if entries
                else f"the log is empty from entry {plog.log_start_offset + 1}"
            )
            prev = f"snapshot at index {floor}" if snap is not None else "no older snapshot"
            raise CorruptSnapshotError(
                f"{reasons}. Refusing to start: the fallback is {prev} and {have}, which "
                f"does not reach index {needed}, so this node would lose state it may have "
                "acknowledged. Restore the snapshot file, or remove this node's data "
                "directory and add it back as a new member (docs/storage.md, "
                '"Error handling").'
            )
        for path, _, why in corrupt:
            self.files.rename(path, path + CORRUPT_SUFFIX)
            log.warning(
                "%s; set aside as %s, starting from the %s and the log",
                why,
                path + CORRUPT_SUFFIX,
                f"snapshot at index {floor}" if snap is not None else "log alone",
            )
        self.files.fsync_dir(self.snapshot_dir)

    def save_snapshot(self, snap: Snapshot) -> None:
        """The application's own snapshot at ``snap.index``: write it, move the log start.

        Blocking. The mirror is compacted by the caller (``mirror_compact``) afterwards.
        """
        plog = self.plog
        assert plog is not None
        with self._failing_dir("snapshot"):
            self._write_snapshot_file(snap)
            # Keep the log from the previous snapshot on (entry ``i + 1`` is at offset
            # ``i``): if this snapshot file is found corrupt on open, the previous one and
            # the log still make the whole state.
            kept = [index for (index, _), _ in self._snapshot_files() if index < snap.index]
            if kept:
                plog.delete_records_before(min(kept[-1], plog.log_end_offset))

    # ------------------------------------------------------------------ mirror (node task)

    def mirror_ready(
        self, hard_state: HardState | None, entries: Sequence[Entry], snapshot: Snapshot | None
    ) -> None:
        """After ``persist``: let the core read back what is now durable."""
        if snapshot is not None:
            self.memory.apply_snapshot(snapshot)
        if entries:
            self.memory.append(list(entries))
        if hard_state is not None:
            self.memory.set_hard_state(hard_state)

    def log_start_offset(self) -> int:
        return self.plog.log_start_offset if self.plog is not None else 0

    def log_end_offset(self) -> int:
        return self.plog.log_end_offset if self.plog is not None else 0


def _check_terms_or_raise(
    plog: PartitionLog, entries: Sequence[Entry], term: int, quorum_state_path: str
) -> None:
    """Refuse a log holding an entry of a term above ``term`` (quorum-state's, written before
    any entry of a new term) or below an earlier entry's (Raft §5.3, log matching): the term
    is the batch's leader epoch, outside the CRC, and a wrong one breaks log matching and the
    vote rule (fault-injection finding 9). ``PartitionLog.open`` checks the segments it
    scans; this covers the whole log, closed segments too (every entry is read here anyway).
    """
    prev = 0
    for e in entries:
        if e.term > term:
            why = (
                f"Raft entry {e.index} has term {e.term}, above the term {term} in "
                f"{quorum_state_path} (written before any entry of a new term)"
            )
            break
        if e.term < prev:
            why = f"Raft entry {e.index} has term {e.term}, below the term {prev} before it"
            break
        prev = e.term
    else:
        return
    offset = e.index - 1
    seg = [s for s in plog.segments if s.base_offset <= offset][-1]
    where = seg.locate(offset)
    raise CorruptSegmentError(
        why,
        path=seg.log_path,
        position=where[0] if where is not None else seg.size_bytes,
        offset=offset,
    )


def _continues(entries: Sequence[Entry], snap: Snapshot) -> bool:
    """Whether the log ``entries`` continue ``snap``: they start right after it, or hold
    its last entry in its term."""
    at_snap = next((e for e in entries if e.index == snap.index), None)
    return entries[0].index == snap.index + 1 or (at_snap is not None and at_snap.term == snap.term)
