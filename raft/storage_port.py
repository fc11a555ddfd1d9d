"""raft.storage_port: the read-only view of durable Raft state that the core reads.

The core never writes storage. The node persists what a ``Ready`` tells it to (through
``MemoryStorage.append/apply_snapshot/set_hard_state`` or a durable equivalent) *before*
calling ``RaftCore.advance``; from then on the core reads those entries back through this
port. ``MemoryStorage`` is the in-memory implementation (etcd's MemoryStorage): unit tests
and the simulator use it, and a durable log can keep one as its read cache.

Layout: ``_ents[0]`` is a dummy entry standing for the snapshot (its index and term are
the snapshot's); real entries follow. Hence ``first_index() == snapshot.index + 1`` and
``term(snapshot.index)`` is answerable even though that entry was compacted.

Pure: no I/O, no clock, no global random.
"""

from __future__ import annotations

from typing import Protocol

from common.invariant import invariant
from raft.types import (
    ConfState,
    Entry,
    HardState,
    LogIndex,
    Snapshot,
    SnapshotMetadata,
    Term,
)


class CompactedError(Exception):
    """The requested index is below the first available one (it is in a snapshot)."""


class UnavailableError(Exception):
    """The requested index is above the last one in storage."""


class SnapshotOutOfDateError(Exception):
    """A snapshot older than the one already held."""


class StoragePort(Protocol):
    """What the core reads. Every method reflects only what the node has persisted."""

    def initial_state(self) -> tuple[HardState, ConfState]:
        """The hard state, and the configuration as of the snapshot (``snapshot().metadata``).

        The core replays CONF_CHANGE entries above the snapshot as they are applied.
        """
        ...

    def entries(self, lo: LogIndex, hi: LogIndex, max_bytes: int | None) -> list[Entry]:
        """Entries [lo, hi); at least one if lo < hi, then stop before exceeding max_bytes.

        Raises ``CompactedError`` if lo < first_index(), ``UnavailableError`` if
        hi > last_index() + 1.
        """
        ...

    def term(self, i: LogIndex) -> Term:
        """Term of entry i, for first_index()-1 <= i <= last_index(); else raises."""
        ...

    def first_index(self) -> LogIndex: ...

    def last_index(self) -> LogIndex: ...

    def snapshot(self) -> Snapshot: ...


class MemoryStorage:
    """``StoragePort`` in memory, plus the writes a node makes after persisting a Ready."""

    def __init__(self, conf_state: ConfState | None = None) -> None:
        """An empty log whose configuration is ``conf_state`` (a bootstrapped cluster).

        A node joining an existing cluster starts with an empty ``ConfState()``: it learns
        the configuration from the leader's log or snapshot.
        """
        self._hard_state = HardState()
        self._snapshot = Snapshot(SnapshotMetadata(conf_state=conf_state or ConfState()))
        self._ents: list[Entry] = [Entry(LogIndex(0), Term(0))]

    # ---------------------------------------------------------------- the port
    def initial_state(self) -> tuple[HardState, ConfState]:
        return self._hard_state, self._snapshot.metadata.conf_state

    def first_index(self) -> LogIndex:
        return LogIndex(self._ents[0].index + 1)

    def last_index(self) -> LogIndex:
        return LogIndex(self._ents[0].index + len(self._ents) - 1)

    def term(self, i: LogIndex) -> Term:
        offset = self._ents[0].index
        if i < offset:
            raise CompactedError(i)
        if i - offset >= len(self._ents):
            raise UnavailableError(i)
        return self._ents[i - offset].term

    def entries(self, lo: LogIndex, hi: LogIndex, max_bytes: int | None) -> list[Entry]:
        offset = self._ents[0].index
        if lo <= offset:
            raise CompactedError(lo)
        if hi > self.last_index() + 1:
            raise UnavailableError(hi)
        ents = self._ents[lo - offset : hi - offset]
        return limit_size(ents, max_bytes)

    def snapshot(self) -> Snapshot:
        return self._snapshot

    def hard_state(self) -> HardState:
        return self._hard_state

    def copy(self) -> MemoryStorage:
        """An independent copy (entries are immutable, so the copy is cheap)."""
        c = MemoryStorage()
        c._hard_state = self._hard_state
        c._snapshot = self._snapshot
        c._ents = list(self._ents)
        return c

    # ---------------------------------------------------------------- writes
    def set_hard_state(self, hs: HardState) -> None:
        self._hard_state = hs

    def apply_snapshot(self, snap: Snapshot) -> None:
        """Replace the whole log with ``snap`` (a follower installing the leader's)."""
        if snap.index <= self._snapshot.index:
            raise SnapshotOutOfDateError(snap.index)
        self._snapshot = snap
        self._ents = [Entry(snap.index, snap.term)]

    def create_snapshot(self, i: LogIndex, conf_state: ConfState, data: bytes) -> Snapshot:
        """Record the application's snapshot of its state as of applied index ``i``."""
        if i <= self._snapshot.index:
            raise SnapshotOutOfDateError(i)
        invariant(i <= self.last_index(), "snapshot %d beyond last index %d", i, self.last_index())
        self._snapshot = Snapshot(SnapshotMetadata(i, self.term(i), conf_state), data)
        return self._snapshot

    def compact(self, compact_index: LogIndex) -> None:
        """Drop entries before ``compact_index`` (which must be covered by the snapshot)."""
        offset = self._ents[0].index
        if compact_index <= offset:
            raise CompactedError(compact_index)
        invariant(
            compact_index <= self._snapshot.index,
            "compacting to %d beyond snapshot %d",
            compact_index,
            self._snapshot.index,
        )
        i = compact_index - offset
        self._ents = [Entry(compact_index, self._ents[i].term), *self._ents[i + 1 :]]

    def append(self, entries: list[Entry] | tuple[Entry, ...]) -> None:
        """Append, truncating any conflicting suffix; entries already compacted are skipped."""
        if not entries:
            return
        first = self.first_index()
        last = entries[-1].index
        if last < first:
            return
        ents = list(entries)
        if first > ents[0].index:
            ents = ents[first - ents[0].index :]
        offset = ents[0].index - self._ents[0].index
        invariant(
            offset <= len(self._ents),
            "missing log entry: last %d, appending at %d",
            self.last_index(),
            ents[0].index,
        )
        del self._ents[offset:]
        self._ents.extend(ents)


def limit_size(ents: list[Entry], max_bytes: int | None) -> list[Entry]:
    """The longest prefix of ``ents`` within ``max_bytes``, but at least one entry."""
    if max_bytes is None or not ents:
        return ents
    size = ents[0].size_bytes()
    n = 1
    while n < len(ents):
        size += ents[n].size_bytes()
        if size > max_bytes:
            break
        n += 1
    return ents[:n]
