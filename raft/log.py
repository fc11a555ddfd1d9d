"""raft.log: the Raft log as the core sees it: stable entries in storage, plus an unstable
tail (and possibly an unstable snapshot) not yet persisted by the node.

Owns ``committed`` and ``applied``. Shaped after etcd-io/raft's ``log.go`` and
``log_unstable.go``.

Pure: no I/O, no clock, no global random.

Index layout::

    snapshot.index   first_index ............ stable last ... unstable ... last_index
         |<- compacted ->|<-------- storage -------->|<--- Unstable --->|
                   applied <= committed <= last_index
"""

from __future__ import annotations

from common.invariant import invariant
from raft.storage_port import CompactedError, StoragePort, UnavailableError, limit_size
from raft.types import Entry, LogIndex, Snapshot, Term


class Unstable:
    """Entries (and maybe a snapshot) the node has not yet persisted.

    Invariant: if ``snapshot`` is set, ``offset == snapshot.index + 1``.
    Invariant: ``entries[i].index == offset + i``.
    """

    __slots__ = ("entries", "offset", "snapshot")

    def __init__(self, offset: LogIndex) -> None:
        self.snapshot: Snapshot | None = None
        self.entries: list[Entry] = []
        self.offset = offset

    def maybe_first_index(self) -> LogIndex | None:
        if self.snapshot is not None:
            return LogIndex(self.snapshot.index + 1)
        return None

    def maybe_last_index(self) -> LogIndex | None:
        if self.entries:
            return LogIndex(self.offset + len(self.entries) - 1)
        if self.snapshot is not None:
            return self.snapshot.index
        return None

    def maybe_term(self, i: LogIndex) -> Term | None:
        if i < self.offset:
            if self.snapshot is not None and self.snapshot.index == i:
                return self.snapshot.term
            return None
        k = i - self.offset
        if k >= len(self.entries):
            return None
        return self.entries[k].term

    def stable_to(self, i: LogIndex, t: Term) -> None:
        """Entries up to (i, t) are persisted; forget them unless replaced meanwhile."""
        gt = self.maybe_term(i)
        if gt is None or gt != t or i < self.offset:
            return
        del self.entries[: i + 1 - self.offset]
        self.offset = LogIndex(i + 1)

    def stable_snap_to(self, i: LogIndex) -> None:
        if self.snapshot is not None and self.snapshot.index == i:
            self.snapshot = None

    def restore(self, snap: Snapshot) -> None:
        self.offset = LogIndex(snap.index + 1)
        self.entries = []
        self.snapshot = snap

    def truncate_and_append(self, ents: list[Entry]) -> None:
        after = ents[0].index
        if after == self.offset + len(self.entries):
            self.entries.extend(ents)
        elif after <= self.offset:
            # Replaces everything unstable (and, once persisted, a stable suffix too).
            self.offset = after
            self.entries = list(ents)
        else:
            del self.entries[after - self.offset :]
            self.entries.extend(ents)

    def slice(self, lo: LogIndex, hi: LogIndex) -> list[Entry]:
        invariant(
            self.offset <= lo <= hi <= self.offset + len(self.entries),
            "unstable slice [%d,%d) out of [%d,%d]",
            lo,
            hi,
            self.offset,
            self.offset + len(self.entries),
        )
        return self.entries[lo - self.offset : hi - self.offset]


class RaftLog:
    """The log: storage (persisted) + unstable (to persist) + commit/apply cursors.

    Invariant: ``applied <= committed <= last_index()``.
    Invariant: ``first_index() - 1 <= applied`` unless a snapshot is pending to apply
    (then ``applied`` catches up to it when the node has applied the snapshot).
    """

    def __init__(self, storage: StoragePort, max_apply_bytes: int | None = None) -> None:
        self.storage = storage
        first = storage.first_index()
        last = storage.last_index()
        self.unstable = Unstable(LogIndex(last + 1))
        # Everything up to the snapshot is committed and applied by definition.
        self.committed = LogIndex(first - 1)
        self.applied = LogIndex(first - 1)
        self.max_apply_bytes = max_apply_bytes

    def __repr__(self) -> str:
        return (
            f"RaftLog(committed={self.committed}, applied={self.applied}, "
            f"unstable.offset={self.unstable.offset}, len(unstable)={len(self.unstable.entries)})"
        )

    # ---------------------------------------------------------------- indexes and terms
    def first_index(self) -> LogIndex:
        i = self.unstable.maybe_first_index()
        return i if i is not None else self.storage.first_index()

    def last_index(self) -> LogIndex:
        i = self.unstable.maybe_last_index()
        return i if i is not None else self.storage.last_index()

    def last_term(self) -> Term:
        t = self.term(self.last_index())
        invariant(t is not None, "no term for the last index %d", self.last_index())
        assert t is not None
        return t

    def term(self, i: LogIndex) -> Term | None:
        """Term of entry i; None if i is compacted (below first_index - 1) or beyond the end."""
        dummy = self.first_index() - 1
        if i < dummy or i > self.last_index():
            return None
        t = self.unstable.maybe_term(i)
        if t is not None:
            return t
        try:
            return self.storage.term(i)
        except (CompactedError, UnavailableError):
            return None

    def match_term(self, i: LogIndex, t: Term) -> bool:
        return self.term(i) == t

    def is_up_to_date(self, last_index: LogIndex, last_term: Term) -> bool:
        """Raft §5.4.1: is a log ending at (last_index, last_term) at least as up to date?"""
        lt = self.last_term()
        return last_term > lt or (last_term == lt and last_index >= self.last_index())

    # ---------------------------------------------------------------- reading entries
    def slice(self, lo: LogIndex, hi: LogIndex, max_bytes: int | None) -> list[Entry]:
        """Entries [lo, hi); raises CompactedError if lo < first_index()."""
        invariant(lo <= hi, "bad slice [%d,%d)", lo, hi)
        if lo < self.first_index():
            raise CompactedError(lo)
        invariant(hi <= self.last_index() + 1, "slice [%d,%d) beyond last", lo, hi)
        if lo == hi:
            return []
        ents: list[Entry] = []
        off = self.unstable.offset
        if lo < off:
            ents = self.storage.entries(lo, LogIndex(min(hi, off)), max_bytes)
            if len(ents) < min(hi, off) - lo:  # cut by size
                return ents
        if hi > off:
            uns = self.unstable.slice(LogIndex(max(lo, off)), hi)
            ents = ents + uns if ents else uns
        return limit_size(ents, max_bytes)

    def entries_from(self, i: LogIndex, max_bytes: int | None) -> list[Entry]:
        if i > self.last_index():
            return []
        return self.slice(i, LogIndex(self.last_index() + 1), max_bytes)

    def snapshot(self) -> Snapshot:
        if self.unstable.snapshot is not None:
            return self.unstable.snapshot
        return self.storage.snapshot()

    def has_pending_snapshot(self) -> bool:
        return self.unstable.snapshot is not None

    def unstable_entries(self) -> list[Entry]:
        return list(self.unstable.entries)

    def has_next_committed_entries(self) -> bool:
        return not self.has_pending_snapshot() and self.committed > self.applied

    def next_committed_entries(self) -> list[Entry]:
        """Committed entries not yet applied, from applied + 1 (bounded by max_apply_bytes)."""
        if not self.has_next_committed_entries():
            return []
        lo = LogIndex(max(self.applied + 1, self.first_index()))
        return self.slice(lo, LogIndex(self.committed + 1), self.max_apply_bytes)

    # ---------------------------------------------------------------- changing the log
    def append(self, ents: list[Entry]) -> LogIndex:
        """Append (truncating a conflicting unstable/stable suffix); returns last_index."""
        if not ents:
            return self.last_index()
        invariant(
            ents[0].index - 1 >= self.committed,
            "appending at %d would overwrite committed %d",
            ents[0].index,
            self.committed,
        )
        self.unstable.truncate_and_append(ents)
        return self.last_index()

    def find_conflict(self, ents: list[Entry] | tuple[Entry, ...]) -> LogIndex:
        """Index of the first entry whose term differs from ours (or that we lack); 0 if none."""
        for e in ents:
            if not self.match_term(e.index, e.term):
                return e.index
        return LogIndex(0)

    def find_conflict_by_term(self, index: LogIndex, term: Term) -> tuple[LogIndex, Term]:
        """The largest i <= index whose term is <= term, and that term (fast back-off).

        Used by a follower to hint where the leader should probe next, and by the leader
        to jump over a whole term of the follower's log (etcd's findConflictByTerm).
        """
        i = index
        while i > 0:
            t = self.term(i)
            if t is None:
                # Compacted (or beyond the end): nothing better to say than this index.
                return i, Term(0)
            if t <= term:
                return i, t
            i = LogIndex(i - 1)
        return LogIndex(0), Term(0)

    def maybe_append(
        self,
        prev_index: LogIndex,
        prev_term: Term,
        leader_commit: LogIndex,
        ents: tuple[Entry, ...],
    ) -> tuple[LogIndex, LogIndex] | None:
        """Raft §5.3 consistency check, then append.

        Returns None if rejected, else (new last index, index of the first conflicting
        entry that was replaced or appended; 0 if all entries were already present).
        """
        if not self.match_term(prev_index, prev_term):
            return None
        last_new = LogIndex(prev_index + len(ents))
        ci = self.find_conflict(ents)
        if ci != 0:
            invariant(
                ci > self.committed,
                "entry %d conflicts with committed entry (committed %d)",
                ci,
                self.committed,
            )
            self.append(list(ents[ci - prev_index - 1 :]))
        self.commit_to(LogIndex(min(leader_commit, last_new)))
        return last_new, ci

    def commit_to(self, to_commit: LogIndex) -> None:
        """Never decreases ``committed``."""
        if to_commit > self.committed:
            invariant(
                to_commit <= self.last_index(),
                "commit %d beyond last index %d",
                to_commit,
                self.last_index(),
            )
            self.committed = to_commit

    def maybe_commit(self, max_index: LogIndex, term: Term) -> bool:
        """Raft §5.4.2: commit up to max_index only if that entry is from ``term``."""
        if max_index > self.committed and self.term(max_index) == term:
            self.commit_to(max_index)
            return True
        return False

    def applied_to(self, i: LogIndex) -> None:
        if i == 0:
            return
        invariant(
            self.applied <= i <= self.committed,
            "applied_to(%d) out of [applied %d, committed %d]",
            i,
            self.applied,
            self.committed,
        )
        self.applied = i

    def stable_to(self, i: LogIndex, t: Term) -> None:
        self.unstable.stable_to(i, t)

    def stable_snap_to(self, i: LogIndex) -> None:
        self.unstable.stable_snap_to(i)

    def restore(self, snap: Snapshot) -> None:
        """Replace the log with a snapshot received from the leader."""
        self.committed = snap.index
        self.unstable.restore(snap)

    def snapshot_applied(self, i: LogIndex) -> None:
        """The node has installed the snapshot at ``i``: everything up to it is applied."""
        if i > self.applied:
            invariant(i <= self.committed, "snapshot %d beyond committed %d", i, self.committed)
            self.applied = i
