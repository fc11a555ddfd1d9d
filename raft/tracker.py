"""raft.tracker: the leader's view of each follower's log (etcd's tracker/progress.go).

A ``Progress`` is in one of three states:

===========  =================================================================  ============
state        meaning                                                            paused when
===========  =================================================================  ============
PROBE        next is a guess; send one AppendEntries, wait for its answer        one in flight
REPLICATE    follower is in sync; stream appends optimistically (next jumps)    window full
SNAPSHOT     follower is behind first_index; an InstallSnapshot is in flight    always
===========  =================================================================  ============

Transitions: PROBE -> REPLICATE on the first successful AppendEntriesResponse;
REPLICATE -> PROBE on a rejection (or the transport reporting it unreachable);
any -> SNAPSHOT when the entries needed were compacted; SNAPSHOT -> PROBE once the
follower acknowledges an index at or beyond the snapshot (or the snapshot failed).

Pure: no I/O, no clock, no global random.
"""

from __future__ import annotations

import enum
from collections import deque

from common.invariant import invariant
from raft.types import LogIndex


class ProgressState(enum.Enum):
    PROBE = "probe"
    REPLICATE = "replicate"
    SNAPSHOT = "snapshot"


class Inflights:
    """Bounded window of AppendEntries sent but not yet acknowledged (by count and bytes)."""

    __slots__ = ("bytes_in_flight", "max_bytes", "max_count", "queue")

    def __init__(self, max_count: int, max_bytes: int) -> None:
        invariant(max_count > 0, "max in-flight count must be positive")
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.queue: deque[tuple[LogIndex, int]] = deque()
        self.bytes_in_flight = 0

    def add(self, last_index: LogIndex, nbytes: int) -> None:
        invariant(not self.full(), "adding to a full in-flight window")
        invariant(
            not self.queue or self.queue[-1][0] < last_index,
            "in-flight indexes must increase: %s then %d",
            self.queue[-1][0] if self.queue else None,
            last_index,
        )
        self.queue.append((last_index, nbytes))
        self.bytes_in_flight += nbytes

    def free_le(self, index: LogIndex) -> None:
        """Forget every in-flight append whose last index is <= index (acknowledged)."""
        q = self.queue
        while q and q[0][0] <= index:
            self.bytes_in_flight -= q.popleft()[1]

    def free_first_one(self) -> None:
        """Give up on the oldest in-flight append (it was probably lost)."""
        if self.queue:
            self.bytes_in_flight -= self.queue.popleft()[1]

    def full(self) -> bool:
        return len(self.queue) >= self.max_count or (
            self.max_bytes > 0 and self.bytes_in_flight >= self.max_bytes
        )

    def count(self) -> int:
        return len(self.queue)

    def reset(self) -> None:
        self.queue.clear()
        self.bytes_in_flight = 0


class Progress:
    """The leader's knowledge of one follower.

    Invariant: ``match < next``.
    Invariant: ``pending_snapshot > 0`` iff ``state is SNAPSHOT``.
    """

    __slots__ = (
        "inflights",
        "is_observer",
        "last_heard_tick",
        "match",
        "next",
        "pending_snapshot",
        "probe_sent",
        "recent_active",
        "snapshot_sent_tick",
        "state",
    )

    def __init__(
        self, next_index: LogIndex, inflights: Inflights, *, is_observer: bool = False
    ) -> None:
        self.match = LogIndex(0)
        self.next = next_index
        self.state = ProgressState.PROBE
        self.pending_snapshot = LogIndex(0)
        # PROBE: an append is in flight; pause until it is answered or a heartbeat answers.
        self.probe_sent = False
        # Heard from since the last check-quorum round.
        self.recent_active = False
        # Leader's tick count when it last heard from this follower (check-quorum).
        self.last_heard_tick = 0
        # Leader's tick count when the pending InstallSnapshot was sent (resend timer).
        self.snapshot_sent_tick = 0
        self.inflights = inflights
        self.is_observer = is_observer

    def __repr__(self) -> str:
        snap = f" snap={self.pending_snapshot}" if self.pending_snapshot else ""
        return (
            f"Progress({self.state.value} match={self.match} next={self.next}"
            f" inflight={self.inflights.count()}{snap})"
        )

    def _reset_state(self, state: ProgressState) -> None:
        self.probe_sent = False
        self.pending_snapshot = LogIndex(0)
        self.state = state
        self.inflights.reset()

    def become_probe(self) -> None:
        if self.state is ProgressState.SNAPSHOT:
            pending = self.pending_snapshot
            self._reset_state(ProgressState.PROBE)
            self.next = LogIndex(max(self.match + 1, pending + 1))
        else:
            self._reset_state(ProgressState.PROBE)
            self.next = LogIndex(self.match + 1)

    def become_replicate(self) -> None:
        self._reset_state(ProgressState.REPLICATE)
        self.next = LogIndex(self.match + 1)

    def become_snapshot(self, snapshot_index: LogIndex) -> None:
        self._reset_state(ProgressState.SNAPSHOT)
        self.pending_snapshot = snapshot_index

    def sent_entries(self, count: int, nbytes: int) -> None:
        """An AppendEntries carrying ``count`` entries from ``next`` was sent."""
        if self.state is ProgressState.REPLICATE:
            if count > 0:
                self.next = LogIndex(self.next + count)
                self.inflights.add(LogIndex(self.next - 1), nbytes)
        elif self.state is ProgressState.PROBE:
            self.probe_sent = True
        else:
            invariant(False, "sending entries to a follower in state %s", self.state)

    def maybe_update(self, n: LogIndex) -> bool:
        """The follower matches up to n; returns whether match advanced."""
        updated = False
        if self.match < n:
            self.match = n
            updated = True
            self.probe_sent = False
        self.next = LogIndex(max(self.next, n + 1))
        return updated

    def maybe_decrease_to(self, rejected: LogIndex, match_hint: LogIndex) -> bool:
        """The follower rejected an append after ``rejected``; back ``next`` off.

        Returns False for a stale rejection (one answering an append we no longer care about).
        """
        if self.state is ProgressState.REPLICATE:
            if rejected <= self.match:
                return False
            self.next = LogIndex(self.match + 1)
            return True
        if self.next - 1 != rejected:
            return False
        self.next = LogIndex(max(min(rejected, match_hint + 1), self.match + 1))
        self.probe_sent = False
        return True

    def is_paused(self) -> bool:
        if self.state is ProgressState.PROBE:
            return self.probe_sent
        if self.state is ProgressState.REPLICATE:
            return self.inflights.full()
        return True
