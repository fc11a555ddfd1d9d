"""raft.quorum: majority arithmetic over a set of voters.

Membership changes one voter at a time (Raft thesis §4.1), so one majority configuration is
enough: any two majorities of configurations differing by one voter intersect. Observers
never count.

Pure: no I/O, no clock, no global random.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping

from raft.types import LogIndex, NodeId


class VoteResult(enum.Enum):
    PENDING = "pending"
    LOST = "lost"
    WON = "won"


class MajorityConfig:
    """A set of voters; a quorum is any strict majority of them."""

    __slots__ = ("voters",)

    def __init__(self, voters: frozenset[NodeId]) -> None:
        self.voters = voters

    def __repr__(self) -> str:
        return f"MajorityConfig({sorted(self.voters)})"

    def quorum_size(self) -> int:
        return len(self.voters) // 2 + 1

    def committed_index(self, match_of: Callable[[NodeId], LogIndex]) -> LogIndex:
        """The largest index that a majority of voters have (0 for no voters)."""
        if not self.voters:
            return LogIndex(0)
        matches = sorted((match_of(v) for v in self.voters), reverse=True)
        return matches[self.quorum_size() - 1]

    def vote_result(self, votes: Mapping[NodeId, bool]) -> VoteResult:
        """WON once a majority granted, LOST once a majority can no longer grant."""
        granted = rejected = 0
        for v in self.voters:
            r = votes.get(v)
            if r is True:
                granted += 1
            elif r is False:
                rejected += 1
        q = self.quorum_size()
        if granted >= q:
            return VoteResult.WON
        if len(self.voters) - rejected < q:
            return VoteResult.LOST
        return VoteResult.PENDING

    def is_active(self, active: Callable[[NodeId], bool]) -> bool:
        """Check-quorum: have a majority of voters been heard from?"""
        return sum(1 for v in self.voters if active(v)) >= self.quorum_size()
