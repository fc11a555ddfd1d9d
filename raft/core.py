"""raft.core: the Raft consensus state machine, sans I/O (after etcd-io/raft's raft.go and
rawnode.go).

The core owns term, vote, role, the log's commit/apply cursors and the leader's view of its
followers. It does no I/O at all: time is ``tick()``, input is ``step(message)`` and the
local calls below, and everything it wants done is buffered in a ``Ready``.

Pure: no I/O, no clock, no global random (randomness comes from an injected ``Rng``).

Usage (the node's loop; the order inside one Ready matters)::

    core = RaftCore(Config(id=NodeId(1)), storage, rng)
    while True:
        on timer every tick_ms:     core.tick()
        on message m from network:  core.step(m)
        on client write:            core.propose(data)       # leader only
        on client read:             core.read_index(ctx)
        if core.has_ready():
            rd = core.ready()
            # 1. soft state: rd.soft_state (leader/role changed) -- tell the application
            # 2. persist, in this order, as one atomic write or in order with the WAL:
            #    rd.snapshot (storage.apply_snapshot), rd.entries (storage.append),
            #    rd.hard_state (storage.set_hard_state); fsync if rd.must_sync
            # 3. only now send rd.messages (they may acknowledge what step 2 wrote)
            # 4. apply rd.snapshot (if any) then rd.committed_entries to the state machine
            # 5. rd.read_states: serve each read once applied >= read_state.index
            core.advance(rd)

The public API is what a node (``raft.aio.node``), the simulators and the tests drive;
everything else is internal and its name starts with an underscore:

* inputs: ``tick``, ``step``, ``propose``, ``propose_conf_change``, ``read_index``,
  ``transfer_leadership``, ``campaign``, ``report_unreachable``, ``report_snapshot``;
* the Ready cycle: ``has_ready``, ``ready``, ``advance``;
* queries (read only): ``is_leader``, ``leader``, ``term``, ``vote``, ``role``, ``conf``,
  ``conf_index``, ``applied_conf``, ``log`` (``committed``, ``applied``, ...),
  ``progress(node)``, ``transferee``, ``promotable()``, ``check_message(m)`` (would
  ``step(m)`` refuse it: a message that contradicts this node's log).

``step``/``tick``/``propose`` may be called between ``ready()`` and ``advance()`` (e.g. while
the fsync runs); what they produce goes into the next Ready. ``has_ready()`` is False while
a Ready is outstanding, and a second ``ready()`` before ``advance()`` is a bug.

Restart: build the storage from what is durable and construct a new ``RaftCore`` on it. The
core starts as a follower with the stored term and vote (an ex-leader has voted for itself
in its term, so it cannot vote for anyone else in it), commit = max(stored commit, snapshot
index), applied = snapshot index (the application rebuilds its state from the snapshot and
the committed entries handed out again), the configuration from the last CONF_CHANGE in the
log (else the snapshot's), and term raised to the last log term if a torn write kept a
Ready's entries but lost its hard state.

Roles (``_become_*`` are the only mutators of ``self.role``):

=============  ==========================  ==============================================
role           data (role object)          transitions
=============  ==========================  ==============================================
follower       leader (NO_NODE if none)    election timeout & promotable -> pre-candidate
                                           (candidate if pre_vote is off); TimeoutNow ->
                                           candidate; higher term -> follower(term)
pre-candidate  votes                       pre-vote majority -> candidate; lost, or
                                           AppendEntries/Heartbeat/InstallSnapshot of
                                           term >= ours, or higher term -> follower
candidate      votes                       vote majority -> leader; lost, leader's message
                                           or higher term -> follower; timeout -> pre-cand.
leader         progress, read-only state,  check-quorum fails, higher term, or its own
               transferee                  removal/demotion committed -> follower
observer       (a follower that is not a   never campaigns; becomes a voter when a
               voter: not "promotable")    CONF_CHANGE promoting it is appended
=============  ==========================  ==============================================

Rules implemented (Raft paper §5, thesis §3-§6, etcd): randomized election timeout in
[election_timeout, 2*election_timeout) ticks drawn from the injected rng; pre-vote (thesis
§9.6) and check-quorum (leader steps down when it has not heard from a majority in an
election timeout; voters that heard from a leader within an election timeout ignore
RequestVote, unless it is a leadership-transfer campaign); log consistency check with fast
back-off; commit only an entry of the leader's own term (§5.4.2); a no-op at the start of
each term; flow control (probe/replicate, bounded in-flight window) and batching by bytes;
install-snapshot for followers behind the first index; read-index reads (thesis §6.4);
leadership transfer (thesis §3.10); one-at-a-time membership changes (thesis §4.1).

Membership: a CONF_CHANGE entry carries the whole new ``ConfState`` and takes effect on every
node as soon as it is *appended* to that node's log, committed or not (thesis §4.1, as
KIP-853's VotersRecord); so it commits on the new majority. If a follower's log is truncated
past it, the node falls back to the previous configuration in its log (or its snapshot's).
The leader refuses a new change until the previous one is committed and until it has
committed an entry of its own term (Ongaro's fix to the single-server-change bug). A leader
that removes or demotes itself keeps leading, without counting itself, until the change
commits, then asks the most caught-up voter to campaign (TimeoutNow) and steps down (thesis
§4.2.2). ``applied_conf`` is the configuration as of the applied index: the one to store in
an application snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from common.invariant import invariant
from raft.log import RaftLog
from raft.messages import (
    AppendEntries,
    AppendEntriesResponse,
    Heartbeat,
    HeartbeatResponse,
    InstallSnapshot,
    InstallSnapshotResponse,
    Message,
    ReadIndex,
    ReadIndexResponse,
    RequestVote,
    RequestVoteResponse,
    TimeoutNow,
    TransferLeadership,
)
from raft.quorum import MajorityConfig, VoteResult
from raft.storage_port import CompactedError, StoragePort
from raft.tracker import Inflights, Progress, ProgressState
from raft.types import (
    NO_INDEX,
    NO_NODE,
    ConfChange,
    ConfState,
    Entry,
    EntryKind,
    HardState,
    LogIndex,
    NodeId,
    ReadState,
    Role,
    Snapshot,
    SoftState,
    Term,
    TraceEvent,
    TraceKind,
    TraceSink,
    TraceValue,
)


class Rng(Protocol):
    """The slice of ``random.Random`` the core uses; inject a seeded one in tests."""

    def randrange(self, stop: int, /) -> int: ...


class NotLeaderError(Exception):
    """The operation needs the leader; ``leader`` is who we think it is (NO_NODE: unknown)."""

    def __init__(self, leader: NodeId) -> None:
        super().__init__(f"not the leader (leader is {leader or 'unknown'})")
        self.leader = leader


class ProposalDroppedError(Exception):
    """The leader is transferring leadership and refuses new proposals."""


class ConfChangeError(Exception):
    """A membership change was refused (one is pending, or the change is not allowed)."""


class InvalidMessageError(ValueError):
    """A well-formed message that cannot be true of this node's log (``check_message``);
    ``step`` raises it before changing anything."""


@dataclass(frozen=True, slots=True)
class Config:
    id: NodeId
    election_timeout_ticks: int = 10
    heartbeat_interval_ticks: int = 1
    pre_vote: bool = True
    check_quorum: bool = True
    # Batching: an AppendEntries carries at most this many bytes of entries (at least one).
    max_entries_bytes_per_msg: int = 1 << 20
    # Flow control in REPLICATE state: appends in flight per follower, by count and bytes
    # (0 bytes: no byte bound).
    max_inflight_msgs: int = 256
    max_inflight_bytes: int = 0
    # Bound on the committed entries handed out in one Ready (None: no bound).
    max_apply_bytes: int | None = None

    def validate(self) -> None:
        if self.id == NO_NODE:
            raise ValueError("node id must be positive")
        if self.heartbeat_interval_ticks <= 0:
            raise ValueError("heartbeat_interval_ticks must be positive")
        if self.election_timeout_ticks <= self.heartbeat_interval_ticks:
            raise ValueError("election_timeout_ticks must exceed heartbeat_interval_ticks")
        if self.max_inflight_msgs <= 0:
            raise ValueError("max_inflight_msgs must be positive")


@dataclass(frozen=True, slots=True)
class Ready:
    """Everything the node must do, in field order. See the module docstring's loop."""

    # 1. Changed leader/role, or None. Volatile: tell the application, never persist.
    soft_state: SoftState | None
    # 2. Persist (snapshot, then entries, then hard state) before step 3.
    hard_state: HardState | None  # None: unchanged since the last Ready
    entries: tuple[Entry, ...]  # append, replacing any conflicting suffix
    snapshot: Snapshot | None  # replace the log and the state machine with this
    must_sync: bool  # fsync before step 3 (term, vote or entries changed)
    # 3. Send only after step 2 is durable: these may acknowledge votes or entries.
    messages: tuple[Message, ...]
    # 4. Apply to the state machine, in order (all are already persisted by step 2).
    committed_entries: tuple[Entry, ...]
    # 5. Linearizable reads: serve each once the state machine has applied its index.
    read_states: tuple[ReadState, ...]


# ------------------------------------------------------------------------------ roles
@dataclass(slots=True)
class FollowerRole:
    leader: NodeId = NO_NODE
    role: Role = Role.FOLLOWER


@dataclass(slots=True)
class PreCandidateRole:
    votes: dict[NodeId, bool] = field(default_factory=dict)
    role: Role = Role.PRE_CANDIDATE


@dataclass(slots=True)
class CandidateRole:
    votes: dict[NodeId, bool] = field(default_factory=dict)
    role: Role = Role.CANDIDATE


@dataclass(slots=True)
class ReadIndexStatus:
    index: LogIndex
    context: bytes
    src: NodeId  # who asked (ourselves or a follower)
    acks: set[NodeId] = field(default_factory=set)


@dataclass(slots=True)
class LeaderRole:
    progress: dict[NodeId, Progress]
    heartbeat_elapsed: int = 0
    ticks: int = 0  # ticks since this node became leader: the clock of last_heard_tick
    transferee: NodeId = NO_NODE
    # Read-index rounds waiting for a heartbeat quorum, in arrival order.
    reads: dict[bytes, ReadIndexStatus] = field(default_factory=dict)
    # Reads that arrived before this term's first commit (thesis §6.4 step 1).
    reads_waiting_for_commit: list[tuple[bytes, NodeId]] = field(default_factory=list)
    role: Role = Role.LEADER


RoleState = FollowerRole | PreCandidateRole | CandidateRole | LeaderRole


class RaftCore:
    """One Raft node's consensus state. See the module docstring for the contract."""

    def __init__(
        self, config: Config, storage: StoragePort, rng: Rng, *, trace: TraceSink | None = None
    ) -> None:
        """``trace`` (optional) is called with a ``TraceEvent`` for every transition: role,
        term, vote, leadership transfer, configuration, snapshot, log truncation."""
        config.validate()
        self.cfg = config
        self.id = config.id
        self.rng = rng
        self._tracer = trace
        self.log = RaftLog(storage, config.max_apply_bytes)
        hs, cs = storage.initial_state()
        self.term = hs.term
        self.vote = hs.vote
        # The effective configuration is the latest CONF_CHANGE in the log, committed or
        # not (thesis §4.1); ``conf_index`` is that entry's index (or the snapshot's).
        # Invariant: no CONF_CHANGE entry in (conf_index, last_index].
        self.conf = cs
        self.conf_index = LogIndex(self.log.first_index() - 1)
        self.quorum = MajorityConfig(cs.voters)
        self._prev_voters_at = LogIndex(-1)  # cache of _previous_voters(), keyed by conf_index
        self._prev_voters: frozenset[NodeId] = frozenset()
        # The configuration as of ``log.applied``: what an application snapshot records.
        self.applied_conf = cs
        # The durable commit may lag (it needs no fsync) but never below the snapshot.
        commit = LogIndex(max(hs.commit, self.log.committed))
        invariant(
            commit <= self.log.last_index(),
            "hard state commit %d beyond last index %d",
            commit,
            self.log.last_index(),
        )
        self.log.commit_to(commit)
        last_term = self.log.last_term()
        if last_term > self.term:
            # The node wrote a Ready's entries but crashed before its hard state (same Ready,
            # written after them) reached the disk. Nothing was acknowledged in that term:
            # messages go out only after the sync. Restore "term >= last log term".
            old_term, self.term, self.vote = self.term, last_term, NO_NODE
            self._trace(TraceKind.TERM_CHANGED, prev=old_term, why="last-log-term")
        self.role: RoleState = FollowerRole()
        self._set_conf(*self._conf_from_log())
        # Ticks since the last election timeout reset (or, for a leader, the last
        # check-quorum round).
        self.election_elapsed = 0
        self.randomized_election_timeout = config.election_timeout_ticks
        self.msgs: list[Message] = []
        self.read_states: list[ReadState] = []
        self._prev_hard_state = hs
        self._prev_soft_state = SoftState(NO_NODE, Role.FOLLOWER)
        self._ready_outstanding = False
        self._become_follower(self.term, NO_NODE, "start")

    def __repr__(self) -> str:
        return (
            f"RaftCore(id={self.id}, {self.role.role.value}, term={self.term}, vote={self.vote},"
            f" leader={self.leader}, last={self.log.last_index()}, {self.log!r})"
        )

    # ------------------------------------------------------------------ queries
    @property
    def leader(self) -> NodeId:
        r = self.role
        if isinstance(r, LeaderRole):
            return self.id
        if isinstance(r, FollowerRole):
            return r.leader
        return NO_NODE

    @property
    def is_leader(self) -> bool:
        return isinstance(self.role, LeaderRole)

    def promotable(self) -> bool:
        """May this node campaign? Not while installing a snapshot; otherwise a voter, or a
        voter of the previous configuration while the latest one is uncommitted: thesis
        §4.2.2, "it might still be needed until the C_new entry is committed" (e.g. a leader
        that removed itself and lost its quorum before the removal committed). Its own vote
        counts only if it is a voter of the latest configuration."""
        if self.log.has_pending_snapshot():
            return False
        if self.id in self.conf.voters:
            return True
        return self.conf_index > self.log.committed and self.id in self._previous_voters()

    def _previous_voters(self) -> frozenset[NodeId]:
        """Voters of the configuration before the latest one (which is in the log)."""
        if self._prev_voters_at != self.conf_index:
            first = self.log.first_index()
            hi = self.conf_index
            voters = self.log.snapshot().metadata.conf_state.voters
            while hi > first:
                lo = LogIndex(max(first, hi - 256))
                found = [e for e in self.log.slice(lo, hi, None) if e.kind is EntryKind.CONF_CHANGE]
                if found:
                    voters = ConfState.from_bytes(found[-1].data).voters
                    break
                hi = lo
            self._prev_voters_at, self._prev_voters = self.conf_index, voters
        return self._prev_voters

    def _hard_state(self) -> HardState:
        return HardState(self.term, self.vote, self.log.committed)

    def _soft_state(self) -> SoftState:
        return SoftState(self.leader, self.role.role)

    def progress(self, node: NodeId) -> Progress | None:
        """The leader's view of ``node`` (None on a non-leader)."""
        r = self.role
        return r.progress.get(node) if isinstance(r, LeaderRole) else None

    # ------------------------------------------------------------------ role transitions
    def _trace(self, kind: TraceKind, /, **detail: TraceValue) -> None:
        """Report a transition to the injected tracer. Called only on transitions (never per
        entry or per heartbeat); the event is built only if a tracer is set, and formatted
        only by whoever prints it."""
        if self._tracer is not None:
            self._tracer(TraceEvent(self.id, self.term, kind, detail))

    def _reset(self, term: Term) -> None:
        if self.term != term:
            old_term, self.term = self.term, term
            self.vote = NO_NODE
            self._trace(TraceKind.TERM_CHANGED, prev=old_term)
        self.election_elapsed = 0
        self.randomized_election_timeout = self.cfg.election_timeout_ticks + self.rng.randrange(
            self.cfg.election_timeout_ticks
        )

    def _become_follower(self, term: Term, leader: NodeId, why: str, src: NodeId = NO_NODE) -> None:
        """``why`` (and ``src``, whose message caused it) are for the trace only."""
        invariant(term >= self.term, "term going back from %d to %d", self.term, term)
        self._reset(term)
        self.role = FollowerRole(leader)
        if src != NO_NODE:
            self._trace(TraceKind.BECAME_FOLLOWER, leader=leader, why=why, src=src)
        else:
            self._trace(TraceKind.BECAME_FOLLOWER, leader=leader, why=why)

    def _become_pre_candidate(self) -> None:
        invariant(not self.is_leader, "leader cannot become pre-candidate")
        # Pre-vote (thesis §9.6): neither term nor vote change; election timer restarts.
        self.election_elapsed = 0
        self.randomized_election_timeout = self.cfg.election_timeout_ticks + self.rng.randrange(
            self.cfg.election_timeout_ticks
        )
        self.role = PreCandidateRole()
        self._trace(
            TraceKind.BECAME_PRE_CANDIDATE,
            last_index=self.log.last_index(),
            last_term=self.log.last_term(),
        )

    def _become_candidate(self, *, transfer: bool) -> None:
        """``transfer``: the campaign a TimeoutNow asked for (for the trace only)."""
        invariant(not self.is_leader, "leader cannot become candidate")
        self._reset(Term(self.term + 1))
        self.vote = self.id
        self.role = CandidateRole()
        self._trace(
            TraceKind.BECAME_CANDIDATE,
            last_index=self.log.last_index(),
            last_term=self.log.last_term(),
            transfer=transfer,
        )

    def _become_leader(self) -> None:
        invariant(isinstance(self.role, CandidateRole), "only a candidate becomes leader")
        self._reset(self.term)
        last = self.log.last_index()
        # Our own progress is tracked even when we are not a voter of the latest
        # configuration (a removed leader still replicating it).
        progress = {n: self._new_progress(n, last) for n in self.conf.members() | {self.id}}
        noop_index = LogIndex(last + 1)
        self.role = LeaderRole(progress=progress)
        me = progress[self.id]
        me.match = last
        me.become_replicate()
        me.recent_active = True
        self._trace(TraceKind.BECAME_LEADER, noop=noop_index)
        # Raft §8: a no-op of the new term lets the leader learn what is committed.
        self._append_entries([Entry(noop_index, self.term)])

    def _new_progress(self, node: NodeId, last: LogIndex) -> Progress:
        return Progress(
            LogIndex(last + 1),
            Inflights(self.cfg.max_inflight_msgs, self.cfg.max_inflight_bytes),
            is_observer=node in self.conf.observers,
        )

    # ------------------------------------------------------------------ time
    def tick(self) -> None:
        """Advance logical time by one tick."""
        if isinstance(self.role, LeaderRole):
            self._tick_leader(self.role)
        else:
            self._tick_election()

    def _tick_election(self) -> None:
        self.election_elapsed += 1
        if self.promotable() and self.election_elapsed >= self.randomized_election_timeout:
            self.election_elapsed = 0
            self._hup(transfer=False)

    def _tick_leader(self, r: LeaderRole) -> None:
        if self._maybe_step_down_after_removal(r):
            return
        r.ticks += 1
        r.heartbeat_elapsed += 1
        self.election_elapsed += 1
        if self.cfg.check_quorum and not self._quorum_heard_within_election_timeout(r):
            # Check-quorum: a leader that has not heard from a majority of voters within an
            # election timeout steps down, so an isolated leader stops serving (KAFKA-15489).
            self._become_follower(self.term, NO_NODE, "check-quorum")
            return
        for n, pr in r.progress.items():
            # An InstallSnapshot unanswered for an election timeout was probably lost:
            # probe again, which resends it if the follower still needs it.
            if (
                pr.state is ProgressState.SNAPSHOT
                and n != self.id
                and r.ticks - pr.snapshot_sent_tick >= self.cfg.election_timeout_ticks
            ):
                pr.become_probe()
        if self.election_elapsed >= self.cfg.election_timeout_ticks:
            self.election_elapsed = 0
            for n, pr in r.progress.items():
                if n != self.id:
                    pr.recent_active = False
            if r.transferee != NO_NODE:
                # Thesis §3.10: abort a transfer that did not finish in an election timeout.
                self._trace(TraceKind.TRANSFER_ABORTED, to=r.transferee, why="timeout")
                r.transferee = NO_NODE
        if r.heartbeat_elapsed >= self.cfg.heartbeat_interval_ticks:
            r.heartbeat_elapsed = 0
            self._bcast_heartbeat(r, self._last_pending_read_context(r))

    def _quorum_heard_within_election_timeout(self, r: LeaderRole) -> bool:
        timeout = self.cfg.election_timeout_ticks

        def heard(v: NodeId) -> bool:
            if v == self.id:
                return True
            p = r.progress.get(v)
            return p is not None and r.ticks - p.last_heard_tick < timeout

        return self.quorum.is_active(heard)

    # ------------------------------------------------------------------ elections
    def campaign(self) -> None:
        """Start an election now (pre-vote first if enabled), as an election timeout would."""
        self._hup(transfer=False)

    def _hup(self, *, transfer: bool) -> None:
        if self.is_leader or not self.promotable():
            return
        if self.cfg.pre_vote and not transfer:
            self._campaign(pre_vote=True, transfer=False)
        else:
            self._campaign(pre_vote=False, transfer=transfer)

    def _campaign(self, *, pre_vote: bool, transfer: bool) -> None:
        if pre_vote:
            self._become_pre_candidate()
            vote_term = Term(self.term + 1)
        else:
            self._become_candidate(transfer=transfer)
            vote_term = self.term
        if self._poll(self.id, granted=True) is VoteResult.WON:
            # A single-voter configuration wins at once.
            if pre_vote:
                self._campaign(pre_vote=False, transfer=transfer)
            else:
                self._become_leader()
            return
        last, last_term = self.log.last_index(), self.log.last_term()
        for v in sorted(self.conf.voters):
            if v != self.id:
                self._send(RequestVote(self.id, v, vote_term, last, last_term, pre_vote, transfer))

    def _poll(self, node: NodeId, *, granted: bool) -> VoteResult:
        r = self.role
        invariant(isinstance(r, PreCandidateRole | CandidateRole), "polling while %s", r)
        assert isinstance(r, PreCandidateRole | CandidateRole)
        r.votes.setdefault(node, granted)
        if self._tracer is not None:
            yes = sum(r.votes.values())
            self._trace(
                TraceKind.VOTE_RECEIVED,
                src=node,
                granted=granted,
                pre_vote=isinstance(r, PreCandidateRole),
                granted_total=yes,
                rejected_total=len(r.votes) - yes,
            )
        return self.quorum.vote_result(r.votes)

    # ------------------------------------------------------------------ messages in
    def check_message(self, m: Message) -> None:
        """Raise ``InvalidMessageError`` if ``step(m)`` would act on something no correct
        peer can send to this node as it is now; read only. ``m`` is well formed already
        (``raft.messages.message_from_wire`` checked types and ranges).

        Two messages would break an invariant of the log (etcd panics on both, taking them
        for a corrupted log; from the network they are refused instead):

        * a Heartbeat of our term or newer that commits beyond our last index: a leader
          commits on a follower only what that follower acknowledged holding;
        * a successful AppendEntriesResponse or an InstallSnapshotResponse to this leader, in
          its term, that matches beyond its last index: a follower only acknowledges what the
          leader sent, and a leader never shortens its log within its term.
        """
        if isinstance(m, Heartbeat):
            if m.term >= self.term and m.commit > (last := self.log.last_index()):
                raise InvalidMessageError(
                    f"Heartbeat from {m.src} commits {m.commit}, beyond the last index {last}"
                    f" of node {self.id}"
                )
        elif (
            isinstance(m, AppendEntriesResponse | InstallSnapshotResponse)
            and m.term == self.term
            and isinstance(self.role, LeaderRole)
            and not (isinstance(m, AppendEntriesResponse) and m.reject)
            and m.index > (last := self.log.last_index())
        ):
            raise InvalidMessageError(
                f"{type(m).__name__} from {m.src} matches {m.index}, beyond the last index"
                f" {last} of leader {self.id}"
            )

    def step(self, m: Message) -> None:
        """Handle one message from another node; ``InvalidMessageError`` (nothing changed)
        for one that ``check_message`` refuses."""
        if m.dst != self.id:
            return
        self.check_message(m)
        if m.term > self.term:
            if isinstance(m, RequestVote):
                in_lease = (
                    self.cfg.check_quorum
                    and self.leader != NO_NODE
                    and self.election_elapsed < self.cfg.election_timeout_ticks
                )
                if in_lease and not m.transfer:
                    # Thesis §4.2.3: we heard from a live leader; ignore a disruptive candidate.
                    self._trace(TraceKind.VOTE_IGNORED, src=m.src, pre_vote=m.pre_vote, why="lease")
                    return
            if isinstance(m, RequestVote) and m.pre_vote:
                pass  # a pre-vote never changes our term
            elif isinstance(m, RequestVoteResponse) and m.pre_vote and m.granted:
                pass  # its term is the one we will campaign in if we win
            elif isinstance(m, AppendEntries | Heartbeat | InstallSnapshot):
                self._become_follower(m.term, m.src, "higher-term", m.src)
            else:
                self._become_follower(m.term, NO_NODE, "higher-term", m.src)
        elif m.term < self.term:
            if isinstance(m, AppendEntries | Heartbeat) and (
                self.cfg.check_quorum or self.cfg.pre_vote
            ):
                # A stale leader (partitioned, or whose pre-vote peers stayed behind) would
                # otherwise never learn our term; this answer makes it step down.
                self._send(AppendEntriesResponse(self.id, m.src, self.term, LogIndex(0)))
            elif isinstance(m, RequestVote) and m.pre_vote:
                self._trace(TraceKind.VOTE_REJECTED, to=m.src, pre_vote=True, why="stale-term")
                self._send(RequestVoteResponse(self.id, m.src, self.term, False, pre_vote=True))
            elif isinstance(m, RequestVote):
                self._trace(TraceKind.VOTE_IGNORED, src=m.src, pre_vote=False, why="stale-term")
            return

        if isinstance(m, RequestVote):
            self._handle_request_vote(m)
            return
        r = self.role
        if isinstance(r, LeaderRole):
            self._step_leader(r, m)
        elif isinstance(r, PreCandidateRole | CandidateRole):
            self._step_candidate(r, m)
        else:
            self._step_follower(r, m)

    def _handle_request_vote(self, m: RequestVote) -> None:
        # Raft §5.2, §5.4.1: one vote per term, only for a log at least as up to date.
        can_vote = (
            self.vote == m.src
            or (self.vote == NO_NODE and self.leader == NO_NODE)
            or (m.pre_vote and m.term > self.term)
        )
        up_to_date = self.log.is_up_to_date(m.last_log_index, m.last_log_term)
        if can_vote and up_to_date:
            self._send(RequestVoteResponse(self.id, m.src, m.term, True, m.pre_vote))
            if not m.pre_vote:
                self.election_elapsed = 0
                self.vote = m.src
            self._trace(TraceKind.VOTE_GRANTED, to=m.src, pre_vote=m.pre_vote)
        else:
            self._send(RequestVoteResponse(self.id, m.src, self.term, False, m.pre_vote))
            if self._tracer is not None:
                why = (
                    "log-behind"
                    if can_vote
                    else f"voted-{self.vote}"
                    if self.vote != NO_NODE
                    else f"leader-{self.leader}"
                )
                self._trace(TraceKind.VOTE_REJECTED, to=m.src, pre_vote=m.pre_vote, why=why)

    def _step_leader(self, r: LeaderRole, m: Message) -> None:
        if isinstance(m, AppendEntriesResponse | InstallSnapshotResponse):
            pr = r.progress.get(m.src)
            if pr is not None:
                self._handle_append_response(r, pr, m)
        elif isinstance(m, HeartbeatResponse):
            pr = r.progress.get(m.src)
            if pr is not None:
                self._handle_heartbeat_response(r, pr, m)
        elif isinstance(m, ReadIndex):
            self._leader_read_index(r, m.context, m.src)
        elif isinstance(m, TransferLeadership):
            self._leader_transfer(r, m.transferee)
        # Votes, TimeoutNow and other leaders' traffic (impossible in our term) are ignored.

    def _step_candidate(self, r: PreCandidateRole | CandidateRole, m: Message) -> None:
        if isinstance(m, AppendEntries):
            self._become_follower(m.term, m.src, "leader-of-term")
            self._handle_append_entries(m)
        elif isinstance(m, Heartbeat):
            self._become_follower(m.term, m.src, "leader-of-term")
            self._handle_heartbeat(m)
        elif isinstance(m, InstallSnapshot):
            self._become_follower(m.term, m.src, "leader-of-term")
            self._handle_install_snapshot(m)
        elif isinstance(m, RequestVoteResponse) and m.pre_vote == isinstance(r, PreCandidateRole):
            res = self._poll(m.src, granted=m.granted)
            if res is VoteResult.WON:
                if isinstance(r, PreCandidateRole):
                    self._campaign(pre_vote=False, transfer=False)
                else:
                    self._become_leader()
                    lr = self.role
                    assert isinstance(lr, LeaderRole)
                    self._bcast_append(lr)
            elif res is VoteResult.LOST:
                self._become_follower(self.term, NO_NODE, "election-lost")

    def _step_follower(self, r: FollowerRole, m: Message) -> None:
        if isinstance(m, AppendEntries):
            self.election_elapsed = 0
            r.leader = m.src
            self._handle_append_entries(m)
        elif isinstance(m, Heartbeat):
            self.election_elapsed = 0
            r.leader = m.src
            self._handle_heartbeat(m)
        elif isinstance(m, InstallSnapshot):
            self.election_elapsed = 0
            r.leader = m.src
            self._handle_install_snapshot(m)
        elif isinstance(m, TimeoutNow):
            # Thesis §3.10: the leader asks us to campaign now, skipping pre-vote.
            self._hup(transfer=True)
        elif isinstance(m, ReadIndexResponse):
            self.read_states.append(ReadState(m.index, m.context))
        elif isinstance(m, TransferLeadership) and r.leader != NO_NODE:
            # Sent to us as if we led: pass it on. (A misdirected ReadIndex is dropped: the
            # asker times out and retries against the leader it learns about.)
            self._send(TransferLeadership(self.id, r.leader, self.term, m.transferee))

    # ------------------------------------------------------------------ follower side
    def _handle_append_entries(self, m: AppendEntries) -> None:
        if m.prev_log_index < self.log.committed:
            self._send(AppendEntriesResponse(self.id, m.src, self.term, self.log.committed))
            return
        # Read only when tracing: this is the replication hot path.
        last_before = self.log.last_index() if self._tracer is not None else NO_INDEX
        res = self.log.maybe_append(m.prev_log_index, m.prev_log_term, m.leader_commit, m.entries)
        if res is not None:
            last_new, conflict = res
            if conflict:
                if conflict <= last_before:
                    self._trace(TraceKind.LOG_TRUNCATED, index=conflict, last=last_before)
                self._note_appended(m.entries[conflict - m.prev_log_index - 1 :], conflict)
            self._send(AppendEntriesResponse(self.id, m.src, self.term, last_new))
            return
        # Fast back-off (etcd): hint the largest index whose term is <= the probed term, so
        # the leader skips a whole divergent term per round trip.
        hint = LogIndex(min(m.prev_log_index, self.log.last_index()))
        hint, hint_term = self.log.find_conflict_by_term(hint, m.prev_log_term)
        self._send(
            AppendEntriesResponse(
                self.id,
                m.src,
                self.term,
                m.prev_log_index,
                reject=True,
                reject_hint=hint,
                log_term=hint_term,
            )
        )

    def _handle_heartbeat(self, m: Heartbeat) -> None:
        self.log.commit_to(m.commit)
        self._send(HeartbeatResponse(self.id, m.src, self.term, m.context))

    def _handle_install_snapshot(self, m: InstallSnapshot) -> None:
        if self._restore(m.snapshot):
            idx = self.log.last_index()
        else:
            idx = self.log.committed
        self._send(InstallSnapshotResponse(self.id, m.src, self.term, idx))

    def _restore(self, snap: Snapshot) -> bool:
        if snap.index <= self.log.committed:
            return False
        if self.log.match_term(snap.index, snap.term):
            # We already have this prefix: just learn that it is committed.
            self.log.commit_to(snap.index)
            return False
        self.log.restore(snap)
        self._trace(TraceKind.SNAPSHOT_RESTORED, index=snap.index, snap_term=snap.term)
        self._set_conf(snap.metadata.conf_state, snap.index)
        self.applied_conf = snap.metadata.conf_state
        return True

    # ------------------------------------------------------------------ leader side
    def _append_entries(self, ents: list[Entry]) -> LogIndex:
        r = self.role
        assert isinstance(r, LeaderRole)
        last = self.log.append(ents)
        # The leader's own copy counts toward commit before it is fsynced (thesis §10.2.1):
        # nothing depending on the commit leaves the node before the Ready is persisted.
        r.progress[self.id].maybe_update(last)
        self._maybe_commit(r)
        return last

    def _maybe_commit(self, r: LeaderRole) -> bool:
        mci = self.quorum.committed_index(
            lambda v: p.match if (p := r.progress.get(v)) is not None else LogIndex(0)
        )
        if not self.log.maybe_commit(mci, self.term):
            return False
        if r.reads_waiting_for_commit and self._committed_in_term():
            waiting, r.reads_waiting_for_commit = r.reads_waiting_for_commit, []
            for ctx, src in waiting:
                self._leader_read_index(r, ctx, src)
        return True

    def _committed_in_term(self) -> bool:
        return self.log.term(self.log.committed) == self.term

    def _handle_append_response(
        self, r: LeaderRole, pr: Progress, m: AppendEntriesResponse | InstallSnapshotResponse
    ) -> None:
        pr.recent_active = True
        pr.last_heard_tick = r.ticks
        if isinstance(m, AppendEntriesResponse) and m.reject:
            probe = m.reject_hint
            if m.log_term > 0:
                probe, _ = self.log.find_conflict_by_term(m.reject_hint, m.log_term)
            if pr.maybe_decrease_to(m.index, probe):
                if pr.state is ProgressState.REPLICATE:
                    pr.become_probe()
                self._maybe_send_append(r, m.src, send_if_empty=True)
            return
        old_paused = pr.is_paused()
        if pr.maybe_update(m.index) or (pr.match == m.index and pr.state is ProgressState.PROBE):
            if pr.state is ProgressState.PROBE:
                pr.become_replicate()
            elif pr.state is ProgressState.SNAPSHOT and pr.match + 1 >= self.log.first_index():
                pr.become_probe()
                pr.become_replicate()
            elif pr.state is ProgressState.REPLICATE:
                pr.inflights.free_le(m.index)
            if self._maybe_commit(r):
                self._bcast_append(r)
            elif old_paused:
                self._maybe_send_append(r, m.src, send_if_empty=True)
            while self._maybe_send_append(r, m.src, send_if_empty=False):
                pass
            if m.src == r.transferee and pr.match == self.log.last_index():
                self._send(TimeoutNow(self.id, m.src, self.term))
                self._trace(TraceKind.TIMEOUT_NOW_SENT, to=m.src)

    def _handle_heartbeat_response(self, r: LeaderRole, pr: Progress, m: HeartbeatResponse) -> None:
        pr.recent_active = True
        pr.last_heard_tick = r.ticks
        pr.probe_sent = False
        if pr.state is ProgressState.REPLICATE and pr.inflights.full():
            # The window may be full of lost appends; free one so replication resumes.
            pr.inflights.free_first_one()
        if pr.match < self.log.last_index():
            self._maybe_send_append(r, m.src, send_if_empty=True)
        if m.context and m.src in self.conf.voters:
            st = r.reads.get(m.context)
            if st is None:
                return
            st.acks.add(m.src)
            if self.quorum.vote_result(dict.fromkeys(st.acks, True)) is VoteResult.WON:
                self._release_reads_through(r, m.context)

    def _maybe_send_append(self, r: LeaderRole, to: NodeId, *, send_if_empty: bool) -> bool:
        """Send ``to`` the entries it needs next (or a snapshot); whether anything was sent."""
        pr = r.progress[to]
        if pr.is_paused():
            return False
        prev_index = LogIndex(pr.next - 1)
        prev_term = self.log.term(prev_index)
        ents: list[Entry] = []
        if prev_term is not None:
            try:
                ents = self.log.entries_from(pr.next, self.cfg.max_entries_bytes_per_msg)
            except CompactedError:
                prev_term = None
        if prev_term is None:
            return self._maybe_send_snapshot(r, to, pr)
        if not ents and not send_if_empty:
            return False
        self._send(
            AppendEntries(
                self.id, to, self.term, prev_index, prev_term, tuple(ents), self.log.committed
            )
        )
        pr.sent_entries(len(ents), sum(e.size_bytes() for e in ents))
        return True

    def _maybe_send_snapshot(self, r: LeaderRole, to: NodeId, pr: Progress) -> bool:
        if not pr.recent_active:
            # Do not ship a snapshot to a follower that may be down (etcd).
            return False
        snap = self.log.snapshot()
        invariant(not snap.is_empty(), "entries compacted but no snapshot to send")
        pr.become_snapshot(snap.index)
        pr.snapshot_sent_tick = r.ticks
        self._send(InstallSnapshot(self.id, to, self.term, snap))
        return True

    def _bcast_append(self, r: LeaderRole) -> None:
        for n in r.progress:
            if n != self.id:
                self._maybe_send_append(r, n, send_if_empty=True)

    def _bcast_heartbeat(self, r: LeaderRole, context: bytes) -> None:
        for n, pr in r.progress.items():
            if n != self.id:
                commit = LogIndex(min(pr.match, self.log.committed))
                self._send(Heartbeat(self.id, n, self.term, commit, context))

    # ------------------------------------------------------------------ proposals
    def propose(self, data: bytes) -> LogIndex:
        """Append a NORMAL entry; returns its index. Raises NotLeaderError elsewhere."""
        r = self._leader_or_raise()
        return self._propose(r, EntryKind.NORMAL, data)

    def propose_conf_change(self, cc: ConfChange) -> LogIndex:
        """Propose one membership change; returns the CONF_CHANGE entry's index.

        Raises ``ConfChangeError`` while another change is pending (not yet applied by this
        leader), before this leader has applied its term's no-op, or if the change would
        alter more than one voter or leave no voters.
        """
        r = self._leader_or_raise()
        if self.conf_index > self.log.committed:
            raise ConfChangeError(
                f"a conf change is pending (index {self.conf_index}, committed "
                f"{self.log.committed})"
            )
        if not self._committed_in_term():
            # Ongaro's fix to single-server changes: first commit an entry of this term.
            raise ConfChangeError("the leader has not yet committed an entry in its term")
        new = cc.apply_to(self.conf)
        if new == self.conf:
            raise ConfChangeError(f"{cc} changes nothing")
        if not new.voters:
            raise ConfChangeError("cannot remove the last voter")
        invariant(len(new.voters ^ self.conf.voters) <= 1, "conf change moved >1 voter")
        return self._propose(r, EntryKind.CONF_CHANGE, new.to_bytes())

    def _propose(self, r: LeaderRole, kind: EntryKind, data: bytes) -> LogIndex:
        if r.transferee != NO_NODE:
            raise ProposalDroppedError(f"transferring leadership to {r.transferee}")
        idx = LogIndex(self.log.last_index() + 1)
        if kind is EntryKind.CONF_CHANGE:
            # Takes effect now, before it commits (thesis §4.1): it commits on the new majority.
            self._set_conf(ConfState.from_bytes(data), idx)
        self._append_entries([Entry(idx, self.term, kind, data)])
        self._bcast_append(r)
        return idx

    def _leader_or_raise(self) -> LeaderRole:
        r = self.role
        if not isinstance(r, LeaderRole):
            raise NotLeaderError(self.leader)
        return r

    # ------------------------------------------------------------------ read index
    def read_index(self, context: bytes) -> None:
        """Ask for a linearizable read; a ReadState(index, context) appears in a later Ready.

        ``context`` must be unique among outstanding reads. On a follower the request goes
        to the leader; it raises NotLeaderError if no leader is known. Requests are lost if
        leadership changes before they complete: the caller retries after a timeout.
        """
        if not context:
            raise ValueError("read_index needs a non-empty context")
        r = self.role
        if isinstance(r, LeaderRole):
            self._leader_read_index(r, context, self.id)
        elif self.leader != NO_NODE:
            self._send(ReadIndex(self.id, self.leader, self.term, context))
        else:
            raise NotLeaderError(NO_NODE)

    def _leader_read_index(self, r: LeaderRole, ctx: bytes, src: NodeId) -> None:
        if not self._committed_in_term():
            # Thesis §6.4: the commit index is only known once an entry of this term commits.
            r.reads_waiting_for_commit.append((ctx, src))
            return
        if ctx in r.reads:
            return
        if self.quorum.vote_result({self.id: True}) is VoteResult.WON:
            self._respond_read(ctx, src, self.log.committed)
            return
        r.reads[ctx] = ReadIndexStatus(self.log.committed, ctx, src, {self.id})
        # Confirm we are still the leader: a heartbeat round acknowledged by a quorum.
        self._bcast_heartbeat(r, ctx)

    def _release_reads_through(self, r: LeaderRole, ctx: bytes) -> None:
        # Reads queued before ``ctx`` are confirmed by the same heartbeat quorum.
        while r.reads:
            k = next(iter(r.reads))
            st = r.reads.pop(k)
            self._respond_read(st.context, st.src, st.index)
            if k == ctx:
                return

    def _respond_read(self, ctx: bytes, src: NodeId, index: LogIndex) -> None:
        if src == self.id:
            self.read_states.append(ReadState(index, ctx))
        else:
            self._send(ReadIndexResponse(self.id, src, self.term, index, ctx))

    def _last_pending_read_context(self, r: LeaderRole) -> bytes:
        return next(reversed(r.reads)) if r.reads else b""

    # ------------------------------------------------------------------ leadership transfer
    def transfer_leadership(self, to: NodeId) -> None:
        """Hand leadership to voter ``to`` (thesis §3.10); a follower forwards the request."""
        r = self.role
        if isinstance(r, LeaderRole):
            self._leader_transfer(r, to)
        elif self.leader != NO_NODE:
            self._send(TransferLeadership(self.id, self.leader, self.term, to))
        else:
            raise NotLeaderError(NO_NODE)

    def _leader_transfer(self, r: LeaderRole, to: NodeId) -> None:
        if to not in self.conf.voters or to == self.id:
            return
        if r.transferee == to:
            return
        r.transferee = to
        self._trace(TraceKind.TRANSFER_STARTED, to=to)
        # The transfer must finish within an election timeout or it is aborted (_tick_leader).
        self.election_elapsed = 0
        pr = r.progress[to]
        if pr.match == self.log.last_index():
            self._send(TimeoutNow(self.id, to, self.term))
            self._trace(TraceKind.TIMEOUT_NOW_SENT, to=to)
        else:
            self._maybe_send_append(r, to, send_if_empty=True)

    @property
    def transferee(self) -> NodeId:
        r = self.role
        return r.transferee if isinstance(r, LeaderRole) else NO_NODE

    # ------------------------------------------------------------------ transport feedback
    def report_unreachable(self, node: NodeId) -> None:
        """The transport failed to send to ``node``: stop streaming to it, probe instead."""
        pr = self.progress(node)
        if pr is not None and pr.state is ProgressState.REPLICATE:
            pr.become_probe()

    def report_snapshot(self, node: NodeId, *, ok: bool) -> None:
        """The transport finished (or failed) sending a snapshot to ``node``."""
        pr = self.progress(node)
        if pr is None or pr.state is not ProgressState.SNAPSHOT:
            return
        if not ok:
            pr.pending_snapshot = LogIndex(0)
        pr.become_probe()
        # Wait for a heartbeat response before probing again.
        pr.probe_sent = True

    # ------------------------------------------------------------------ membership
    def _set_conf(self, cs: ConfState, index: LogIndex) -> None:
        """Switch to configuration ``cs``, defined at log index ``index``."""
        self.conf = cs
        self.conf_index = index
        self.quorum = MajorityConfig(cs.voters)
        if self._tracer is not None:
            self._trace(
                TraceKind.CONF_CHANGED,
                voters=tuple(sorted(cs.voters)),
                observers=tuple(sorted(cs.observers)),
                index=index,
            )
        r = self.role
        if not isinstance(r, LeaderRole):
            return
        last = self.log.last_index()
        for n in cs.members():
            pr = r.progress.get(n)
            if pr is None:
                pr = r.progress[n] = self._new_progress(n, last)
                pr.recent_active = True
                pr.last_heard_tick = r.ticks
            pr.is_observer = n in cs.observers
        for n in list(r.progress):
            if n not in cs.members() and n != self.id:
                del r.progress[n]
        if r.transferee not in cs.voters:
            if r.transferee != NO_NODE:
                self._trace(TraceKind.TRANSFER_ABORTED, to=r.transferee, why="not-a-voter")
            r.transferee = NO_NODE

    def _conf_from_log(self) -> tuple[ConfState, LogIndex]:
        """The latest configuration in the log (scanning back from the end), else the
        snapshot's. Used at start-up and after a follower's log is truncated."""
        first, hi = self.log.first_index(), LogIndex(self.log.last_index() + 1)
        while hi > first:
            lo = LogIndex(max(first, hi - 256))
            for e in reversed(self.log.slice(lo, hi, None)):
                if e.kind is EntryKind.CONF_CHANGE:
                    return ConfState.from_bytes(e.data), e.index
            hi = lo
        return self.log.snapshot().metadata.conf_state, LogIndex(first - 1)

    def _note_appended(self, ents: tuple[Entry, ...], conflict: LogIndex) -> None:
        """A follower appended ``ents`` (truncating from ``conflict`` if nonzero)."""
        if conflict and conflict <= self.conf_index:
            # A configuration entry was truncated away: fall back to the one before it.
            self._set_conf(*self._conf_from_log())
            return
        for e in reversed(ents):
            if e.kind is EntryKind.CONF_CHANGE and e.index > self.conf_index:
                self._set_conf(ConfState.from_bytes(e.data), e.index)
                return

    def _maybe_step_down_after_removal(self, r: LeaderRole) -> bool:
        """Thesis §4.2.2: a leader not in its configuration leads until that configuration
        commits, then steps down, first asking the most caught-up voter to campaign."""
        if self.id in self.conf.voters or self.log.committed < self.conf_index:
            return False
        best = max(
            (v for v in self.conf.voters if v in r.progress),
            key=lambda v: (r.progress[v].match, -v),
            default=NO_NODE,
        )
        if best != NO_NODE and r.progress[best].match == self.log.last_index():
            self._send(TimeoutNow(self.id, best, self.term))
            self._trace(TraceKind.TIMEOUT_NOW_SENT, to=best)
        self._become_follower(self.term, NO_NODE, "removed")
        return True

    def _send(self, m: Message) -> None:
        self.msgs.append(m)

    # ------------------------------------------------------------------ Ready
    def has_ready(self) -> bool:
        """Is there anything to persist, send, apply or report? False while a Ready is out."""
        if self._ready_outstanding:
            return False
        return bool(
            self.msgs
            or self.read_states
            or self._soft_state() != self._prev_soft_state
            or self._hard_state() != self._prev_hard_state
            or self.log.unstable.entries
            or self.log.has_pending_snapshot()
            or self.log.has_next_committed_entries()
        )

    def ready(self) -> Ready:
        """Take what the node must do now. Call ``advance`` once it is done."""
        invariant(not self._ready_outstanding, "ready() called twice without advance()")
        self._ready_outstanding = True
        ss = self._soft_state()
        hs = self._hard_state()
        prev = self._prev_hard_state
        entries = tuple(self.log.unstable.entries)
        snap = self.log.unstable.snapshot
        rd = Ready(
            soft_state=ss if ss != self._prev_soft_state else None,
            hard_state=hs if hs != prev else None,
            entries=entries,
            snapshot=snap,
            must_sync=bool(entries)
            or snap is not None
            or hs.term != prev.term
            or hs.vote != prev.vote,
            messages=tuple(self.msgs),
            committed_entries=tuple(self.log.next_committed_entries()),
            read_states=tuple(self.read_states),
        )
        self.msgs = []
        self.read_states = []
        if rd.soft_state is not None:
            self._prev_soft_state = rd.soft_state
        return rd

    def advance(self, rd: Ready) -> None:
        """The node persisted, sent and applied everything in ``rd``."""
        invariant(self._ready_outstanding, "advance() without ready()")
        self._ready_outstanding = False
        if rd.hard_state is not None:
            self._prev_hard_state = rd.hard_state
        if rd.snapshot is not None:
            self.log.stable_snap_to(rd.snapshot.index)
            self.log.snapshot_applied(rd.snapshot.index)
        if rd.entries:
            last = rd.entries[-1]
            self.log.stable_to(last.index, last.term)
        if rd.committed_entries:
            for e in rd.committed_entries:
                if e.kind is EntryKind.CONF_CHANGE:
                    self.applied_conf = ConfState.from_bytes(e.data)
            self.log.applied_to(rd.committed_entries[-1].index)
