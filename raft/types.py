"""raft.types: the values the Raft core speaks in.

Owns the distinct integer types (``NodeId``, ``Term``, ``LogIndex``), log entries, the
persistent ``HardState``, the volatile ``SoftState``, the membership ``ConfState``,
``Snapshot``, and the ``TraceEvent`` the core reports each transition with. All values
are immutable.

Pure: no I/O, no clock, no global random.

Conventions (as etcd-io/raft):

* ``NodeId(0)`` (``NO_NODE``) means "nobody": no vote cast, no leader known. Real node ids
  are positive.
* ``Term(0)`` and ``LogIndex(0)`` are "before everything": the log's first real entry has
  index 1; index 0 has term 0 in an empty log.
* A ``CONF_CHANGE`` entry carries the *whole* configuration that results from the change
  (``ConfState.to_bytes``), as Kafka's ``VotersRecord`` does (KIP-853). Replaying the log
  from a snapshot therefore needs no earlier state to know the configuration.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import NewType

NodeId = NewType("NodeId", int)
Term = NewType("Term", int)
LogIndex = NewType("LogIndex", int)

NO_NODE = NodeId(0)
NO_TERM = Term(0)
NO_INDEX = LogIndex(0)

# The largest values a node accepts from the wire (``raft.messages``): beyond them a value
# cannot be stored. Node ids are Kafka's int32 ``node.id``; a term is stored as the leader
# epoch of a batch header (int32, docs/storage-format.md); an index as a batch's int64 base
# offset, with room left for the offset deltas of the batch.
NODE_ID_MAX = 2**31 - 1
TERM_MAX = Term(2**31 - 1)
INDEX_MAX = LogIndex(2**62)


class EntryKind(enum.IntEnum):
    """What an entry's ``data`` means. The leader's no-op is ``NORMAL`` with empty data."""

    NORMAL = 0
    CONF_CHANGE = 1


# Bytes an entry costs beyond its data when sizing batches (index, term, kind, framing).
ENTRY_OVERHEAD_BYTES = 24


@dataclass(frozen=True, slots=True)
class Entry:
    index: LogIndex
    term: Term
    kind: EntryKind = EntryKind.NORMAL
    data: bytes = b""

    def size_bytes(self) -> int:
        return len(self.data) + ENTRY_OVERHEAD_BYTES

    def to_wire(self) -> list[object]:
        return [self.index, self.term, int(self.kind), self.data]


@dataclass(frozen=True, slots=True)
class HardState:
    """What must be durable before any message that depends on it is sent.

    ``vote`` is the node voted for in ``term`` (``NO_NODE`` if none). ``commit`` may lag
    on disk (it is recoverable from the quorum), so a change of commit alone does not
    require a sync; a change of term or vote does.
    """

    term: Term = NO_TERM
    vote: NodeId = NO_NODE
    commit: LogIndex = NO_INDEX


EMPTY_HARD_STATE = HardState()


class Role(enum.Enum):
    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre-candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"


@dataclass(frozen=True, slots=True)
class SoftState:
    """Volatile state worth telling the application about; never persisted."""

    leader: NodeId
    role: Role


@dataclass(frozen=True, slots=True)
class ConfState:
    """Membership: voters elect and form quorums; observers only replicate (Raft learners).

    Invariant: no node is both a voter and an observer.
    """

    voters: frozenset[NodeId] = frozenset()
    observers: frozenset[NodeId] = frozenset()

    def __post_init__(self) -> None:
        if self.voters & self.observers:
            raise ValueError(
                f"nodes both voter and observer: {sorted(self.voters & self.observers)}"
            )

    def members(self) -> frozenset[NodeId]:
        return self.voters | self.observers

    def to_bytes(self) -> bytes:
        vs, os_ = sorted(self.voters), sorted(self.observers)
        return struct.pack(f">HH{len(vs)}Q{len(os_)}Q", len(vs), len(os_), *vs, *os_)

    @staticmethod
    def from_bytes(b: bytes) -> ConfState:
        """Inverse of ``to_bytes``; ``ValueError`` unless ``b`` is exactly such an encoding
        (sizes that match, ids in [1, NODE_ID_MAX], none twice)."""
        if len(b) < 4:
            raise ValueError(f"configuration of {len(b)} bytes: shorter than its header")
        nv, no = struct.unpack_from(">HH", b)
        if len(b) != 4 + 8 * (nv + no):
            raise ValueError(
                f"configuration of {len(b)} bytes does not hold {nv} voters and {no} observers"
            )
        ids = struct.unpack_from(f">{nv + no}Q", b, 4)
        if not all(0 < i <= NODE_ID_MAX for i in ids):
            raise ValueError(f"configuration names a node id out of [1, {NODE_ID_MAX}]")
        voters = frozenset(NodeId(i) for i in ids[:nv])
        observers = frozenset(NodeId(i) for i in ids[nv:])
        if len(voters) + len(observers) != nv + no:
            raise ValueError("configuration names a node twice")
        return ConfState(voters, observers)

    def to_wire(self) -> list[object]:
        return [sorted(self.voters), sorted(self.observers)]


class ConfChangeKind(enum.IntEnum):
    ADD_VOTER = 0  # a new node, or an observer promoted to voter
    ADD_OBSERVER = 1  # a new node, or a voter demoted to observer
    REMOVE_NODE = 2


@dataclass(frozen=True, slots=True)
class ConfChange:
    """One membership change, as asked for by ``RaftCore.propose_conf_change``."""

    kind: ConfChangeKind
    node_id: NodeId

    def apply_to(self, cs: ConfState) -> ConfState:
        n = frozenset([self.node_id])
        if self.kind is ConfChangeKind.ADD_VOTER:
            return ConfState(cs.voters | n, cs.observers - n)
        if self.kind is ConfChangeKind.ADD_OBSERVER:
            return ConfState(cs.voters - n, cs.observers | n)
        return ConfState(cs.voters - n, cs.observers - n)


@dataclass(frozen=True, slots=True)
class SnapshotMetadata:
    index: LogIndex = NO_INDEX
    term: Term = NO_TERM
    conf_state: ConfState = field(default_factory=ConfState)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The application's state as of ``metadata.index``, plus the configuration then."""

    metadata: SnapshotMetadata = field(default_factory=SnapshotMetadata)
    data: bytes = b""

    @property
    def index(self) -> LogIndex:
        return self.metadata.index

    @property
    def term(self) -> Term:
        return self.metadata.term

    def is_empty(self) -> bool:
        return self.metadata.index == 0

    def to_wire(self) -> list[object]:
        m = self.metadata
        return [m.index, m.term, m.conf_state.to_wire(), self.data]


@dataclass(frozen=True, slots=True)
class ReadState:
    """A linearizable read may be served once the state machine has applied ``index``."""

    index: LogIndex
    context: bytes


class TraceKind(enum.Enum):
    """A transition of the core; the value is how it reads in a log line."""

    BECAME_FOLLOWER = "became follower"  # leader, why (start, higher-term, ...), src
    BECAME_PRE_CANDIDATE = "became pre-candidate"  # last_index, last_term
    BECAME_CANDIDATE = "became candidate"  # last_index, last_term, transfer
    BECAME_LEADER = "became leader"  # noop (the index of this term's no-op)
    TERM_CHANGED = "changed term"  # prev (the previous term)
    VOTE_GRANTED = "granted vote"  # to, pre_vote
    VOTE_REJECTED = "rejected vote"  # to, pre_vote, why
    VOTE_IGNORED = "ignored vote request"  # src, pre_vote, why (lease, stale-term)
    VOTE_RECEIVED = "received vote"  # src, granted, pre_vote, granted_total, rejected_total
    TRANSFER_STARTED = "started leadership transfer"  # to
    TRANSFER_ABORTED = "aborted leadership transfer"  # to, why
    TIMEOUT_NOW_SENT = "sent TimeoutNow"  # to
    CONF_CHANGED = "switched configuration"  # voters, observers, index
    SNAPSHOT_RESTORED = "restored snapshot"  # index, snap_term, voters, observers
    LOG_TRUNCATED = "truncated log"  # index (first entry replaced), last (before)


TraceValue = int | str | bool | tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TraceEvent:
    """One transition of node ``node``, reported in ``term`` (the term after the change).

    The core hands each to the ``trace`` callable it was built with (etcd-io/raft logs
    the same transitions); ``str(event)`` is the log line, e.g.
    ``2 granted vote [term=3 to=1 pre_vote=False]``.
    """

    node: NodeId
    term: Term
    kind: TraceKind
    detail: Mapping[str, TraceValue] = field(default_factory=dict, hash=False)

    def __str__(self) -> str:
        parts = [f"term={self.term}"]
        for k, v in self.detail.items():
            parts.append(f"{k}=({' '.join(map(str, v))})" if isinstance(v, tuple) else f"{k}={v}")
        return f"{self.node} {self.kind.value} [{' '.join(parts)}]"


TraceSink = Callable[[TraceEvent], None]
