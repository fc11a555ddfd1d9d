"""raft.messages: the messages Raft nodes exchange, named as in the Raft paper.

Every message carries ``src``, ``dst`` and the sender's ``term``. Each round-trips through
a plain dict of msgpack-able values (ints, bools, bytes, lists, str keys) with
``to_wire()`` and ``message_from_wire()``; the transport chooses the encoding.

Pure: no I/O, no clock, no global random.

=======================  ==============================================================
message                  meaning
=======================  ==============================================================
AppendEntries            leader -> follower: entries after (prev_log_index, prev_log_term)
AppendEntriesResponse    follower -> leader: matched up to ``index``, or reject with a
                         hint (``reject_hint``, ``log_term``) for fast back-off
Heartbeat                leader -> follower: I am alive; commit = min(match, committed);
                         ``context`` echoes a read-index round
HeartbeatResponse        follower -> leader: echo of ``context``
RequestVote              candidate -> voter; ``pre_vote`` for the pre-vote phase (the
                         term is the one the candidate *would* use); ``transfer`` marks
                         a campaign started by TimeoutNow, which ignores the leader lease
RequestVoteResponse      voter -> candidate
InstallSnapshot          leader -> follower whose next entry was compacted away
InstallSnapshotResponse  follower -> leader: now matches up to ``index``
TimeoutNow               leader -> transferee: campaign at once (leadership transfer)
ReadIndex                follower -> leader: a read-index request with ``context``
ReadIndexResponse        leader -> follower: read at ``index`` once applied
TransferLeadership       follower -> leader: please transfer to ``transferee``
=======================  ==============================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from raft.types import NO_INDEX, NO_TERM, Entry, LogIndex, NodeId, Snapshot, Term


class _Wire:
    """``m.to_wire()`` and ``Cls.from_wire(d)`` for every message class."""

    __slots__ = ()

    def to_wire(self) -> dict[str, Any]:
        return to_wire(self)  # type: ignore[arg-type]

    @staticmethod
    def from_wire(d: dict[str, Any]) -> Message:
        return message_from_wire(d)


@dataclass(frozen=True, slots=True)
class AppendEntries(_Wire):
    src: NodeId
    dst: NodeId
    term: Term
    prev_log_index: LogIndex
    prev_log_term: Term
    entries: tuple[Entry, ...]
    leader_commit: LogIndex


@dataclass(frozen=True, slots=True)
class AppendEntriesResponse(_Wire):
    src: NodeId
    dst: NodeId
    term: Term
    index: LogIndex  # accepted: last index now matching; rejected: the prev_log_index refused
    reject: bool = False
    reject_hint: LogIndex = NO_INDEX  # highest index that may match (fast back-off)
    log_term: Term = NO_TERM  # follower's term at reject_hint (0: unknown)


@dataclass(frozen=True, slots=True)
class Heartbeat(_Wire):
    src: NodeId
    dst: NodeId
    term: Term
    commit: LogIndex
    context: bytes = b""


@dataclass(frozen=True, slots=True)
class HeartbeatResponse(_Wire):
    src: NodeId
    dst: NodeId
    term: Term
    context: bytes = b""


@dataclass(frozen=True, slots=True)
class RequestVote(_Wire):
    src: NodeId
    dst: NodeId
    term: Term
    last_log_index: LogIndex
    last_log_term: Term
    pre_vote: bool = False
    transfer: bool = False


@dataclass(frozen=True, slots=True)
class RequestVoteResponse(_Wire):
    src: NodeId
    dst: NodeId
    term: Term
    granted: bool
    pre_vote: bool = False


@dataclass(frozen=True, slots=True)
class InstallSnapshot(_Wire):
    src: NodeId
    dst: NodeId
    term: Term
    snapshot: Snapshot


@dataclass(frozen=True, slots=True)
class InstallSnapshotResponse(_Wire):
    src: NodeId
    dst: NodeId
    term: Term
    index: LogIndex


@dataclass(frozen=True, slots=True)
class TimeoutNow(_Wire):
    src: NodeId
    dst: NodeId
    term: Term


@dataclass(frozen=True, slots=True)
class ReadIndex(_Wire):
    src: NodeId
    dst: NodeId
    term: Term
    context: bytes


@dataclass(frozen=True, slots=True)
class ReadIndexResponse(_Wire):
    src: NodeId
    dst: NodeId
    term: Term
    index: LogIndex
    context: bytes


@dataclass(frozen=True, slots=True)
class TransferLeadership(_Wire):
    src: NodeId
    dst: NodeId
    term: Term
    transferee: NodeId


Message = (
    AppendEntries
    | AppendEntriesResponse
    | Heartbeat
    | HeartbeatResponse
    | RequestVote
    | RequestVoteResponse
    | InstallSnapshot
    | InstallSnapshotResponse
    | TimeoutNow
    | ReadIndex
    | ReadIndexResponse
    | TransferLeadership
)

_TYPES: dict[str, type[Any]] = {
    c.__name__: c
    for c in (
        AppendEntries,
        AppendEntriesResponse,
        Heartbeat,
        HeartbeatResponse,
        RequestVote,
        RequestVoteResponse,
        InstallSnapshot,
        InstallSnapshotResponse,
        TimeoutNow,
        ReadIndex,
        ReadIndexResponse,
        TransferLeadership,
    )
}


def to_wire(m: Message) -> dict[str, Any]:
    """A plain dict of msgpack-able values; ``"type"`` names the message class."""
    d: dict[str, Any] = {"type": type(m).__name__}
    for name in m.__dataclass_fields__:
        v = getattr(m, name)
        if name == "entries":
            v = [e.to_wire() for e in v]
        elif name == "snapshot":
            v = v.to_wire()
        d[name] = v
    return d


def message_from_wire(d: dict[str, Any]) -> Message:
    """Inverse of ``to_wire``; raises ``ValueError`` on an unknown type or bad fields."""
    try:
        cls = _TYPES[d["type"]]
        kw = {k: v for k, v in d.items() if k != "type"}
        if "entries" in kw:
            kw["entries"] = tuple(Entry.from_wire(e) for e in kw["entries"])
        if "snapshot" in kw:
            kw["snapshot"] = Snapshot.from_wire(kw["snapshot"])
        m: Message = cls(**kw)
    except (KeyError, TypeError, AssertionError) as e:
        raise ValueError(f"malformed raft message: {e!r}") from e
    return m
