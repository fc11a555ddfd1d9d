"""The leader epoch cache of one log (KIP-101, KIP-279), persisted as ``leader-epoch-checkpoint``.

Entries are ``(epoch, start_offset)``: the first offset a leader of ``epoch`` appended. A
follower that becomes leader-less or sees a new leader asks the leader
``end_offset_for_epoch(its latest epoch)`` (Kafka's OffsetsForLeaderEpoch) and truncates to
the answer, so its log agrees with the leader's up to that point before it fetches.

Invariant: epochs and start offsets both strictly increase along ``entries``.

File format (Kafka's, text, one item per line, plus a checksum line as in
``storage.checkpoint``; version 0 files, without it, are still read)::

    1                  version
    2                  number of entries
    0 0                epoch start_offset
    3 1200
    0e5c77d1           CRC-32C of the lines above

It is replaced atomically (temporary file, fsync, rename, directory fsync) on every change:
changes happen once per epoch, and on truncation.
"""

from __future__ import annotations

import itertools
import os

from common.invariant import invariant
from storage.checkpoint import seal, unseal
from storage.errors import CorruptCheckpointError
from storage.fileio import FileLayer

CHECKPOINT_NAME = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
_VERSION = 1


class LeaderEpochCache:
    def __init__(self, dir_path: str, files: FileLayer, entries: list[tuple[int, int]]):
        self._path = os.path.join(dir_path, CHECKPOINT_NAME)
        self._files = files
        self._entries = list(entries)
        self._check()

    @classmethod
    def load(cls, dir_path: str, files: FileLayer) -> LeaderEpochCache:
        """The cache as checkpointed; ``CorruptCheckpointError`` if the file is damaged."""
        path = os.path.join(dir_path, CHECKPOINT_NAME)
        entries: list[tuple[int, int]] = []
        if files.exists(path):
            entries = parse_checkpoint(files.read_file(path), path)
        return cls(dir_path, files, entries)

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1][0] if self._entries else UNDEFINED_EPOCH

    def _check(self) -> None:
        for (e0, o0), (e1, o1) in zip(self._entries, self._entries[1:], strict=False):
            invariant(e0 < e1 and o0 < o1, "leader epoch cache out of order: %s", self._entries)

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Note that ``epoch`` starts at ``start_offset`` if it is new; True if it changed.

        Entries at or after ``start_offset`` with a smaller epoch, or with this epoch and a
        later start, are dropped first (they were superseded: Kafka's ``assign``).
        """
        if epoch < 0:
            return False
        if self._entries and self._entries[-1][0] == epoch and self._entries[-1][1] <= start_offset:
            return False
        if self._entries and epoch < self._entries[-1][0] and start_offset >= self._entries[-1][1]:
            # An older epoch after a newer one: a stale leader's batch. Keep the history
            # monotonic and ignore it, as Kafka logs and ignores it.
            return False
        kept = [(e, o) for e, o in self._entries if e < epoch and o < start_offset]
        self._replace([*kept, (epoch, start_offset)])
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs that start at or after ``end_offset`` (the log was truncated)."""
        kept = [(e, o) for e, o in self._entries if o < end_offset]
        if kept != self._entries:
            self._replace(kept)

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: the epoch covering it starts there."""
        before = [i for i, (_, o) in enumerate(self._entries) if o <= start_offset]
        if not before:
            return
        last = before[-1]
        kept = [(self._entries[last][0], start_offset), *self._entries[last + 1 :]]
        if kept != self._entries:
            self._replace(kept)

    def clear(self) -> None:
        if self._entries:
            self._replace([])

    def _replace(self, entries: list[tuple[int, int]]) -> None:
        """Persist ``entries``, then adopt them: if the write fails (a full disk), the
        cache in memory still matches the file."""
        old, self._entries = self._entries, entries
        try:
            self._check()
            self._persist()
        except BaseException:
            self._entries = old
            raise

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch whose leader appended ``offset``, per the cache (-1 if unknown)."""
        epoch = UNDEFINED_EPOCH
        for e, o in self._entries:
            if o > offset:
                break
            epoch = e
        return epoch

    def end_offset_for_epoch(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """``(epoch, end_offset)`` as Kafka's ``LeaderEpochFileCache.endOffsetFor``.

        * the latest epoch: ``(epoch, log_end_offset)``;
        * an epoch between known ones: the largest known epoch at or below it and the start
          offset of the first epoch above it (where this leader's history diverged);
        * an epoch below every known one: ``(epoch, start of the first known epoch)``;
        * an epoch above every known one, or -1: ``(-1, -1)``.
        """
        if epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if epoch == self.latest_epoch:
            return epoch, log_end_offset
        higher = next(((e, o) for e, o in self._entries if e > epoch), None)
        if higher is None:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        floor = [(e, o) for e, o in self._entries if e <= epoch]
        if not floor:
            return epoch, higher[1]
        return floor[-1][0], higher[1]

    def _persist(self) -> None:
        lines = [str(_VERSION), str(len(self._entries))]
        lines += [f"{e} {o}" for e, o in self._entries]
        self._files.write_file_atomic(self._path, seal(lines))


def parse_checkpoint(data: bytes, path: str) -> list[tuple[int, int]]:
    """Entries of a ``leader-epoch-checkpoint`` file; ``CorruptCheckpointError`` if it
    fails its checksum, does not parse, or its entries do not strictly increase."""
    lines = unseal(data, path)
    try:
        count = int(lines[1])
        entries = []
        for line in lines[2:]:
            e, o = line.split()
            entries.append((int(e), int(o)))
        if len(entries) != count:
            raise ValueError(f"expected {count} entries, found {len(entries)}")
    except (ValueError, IndexError) as err:
        raise CorruptCheckpointError(path, str(err)) from None
    for (e0, o0), (e1, o1) in itertools.pairwise(entries):
        if not (e0 < e1 and o0 < o1):
            raise CorruptCheckpointError(path, f"entries do not increase: {entries[:8]}")
    if entries and (entries[0][0] < 0 or entries[0][1] < 0):
        raise CorruptCheckpointError(path, f"negative epoch or offset: {entries[0]}")
    return entries
