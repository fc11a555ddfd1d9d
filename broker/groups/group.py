"""The consumer-group state machine: Kafka's classic group protocol, assignment by the coordinator.

What it owns: every group of one coordinator (one ``__consumer_offsets`` partition): members,
generations, the plan each member was handed, committed offsets. What it must not do: any
I/O. Pure: no clock (time arrives as ``now_ms``), no global random (member ids come from an
injected factory), no sockets, no files.

Theory of operation
-------------------
The shell (the coordinator on a broker) turns requests into ``handle_*`` calls and calls
``poll(now_ms)`` when the deadline returned by the last call passes. Every call returns an
``Outcome``:

1. ``records``: append them, in order, to the group's ``__consumer_offsets`` partition.
2. ``response``: the answer to the caller, or ``None`` when the request is parked (a join
   waits for the rest of the group). Send it only once ``records`` (and those of every
   earlier outcome) are durable, as etcd's ``Ready`` sends only after persisting.
3. ``joins_completed``: answers to parked joins, keyed by (group, member id); each resolves
   every join that member has parked.
4. ``deadline_ms``: the earliest moment this group needs ``poll``; keep a timer at the
   minimum of these. ``poll`` returns the earliest over all groups.

Only the coordinator computes plans (``assignors``). A plan never hands a member a partition
that another member still owns (see "Ownership" below), so at most one member owns a
partition at any time, whichever protocol members speak.

States and transitions (Kafka ``ClassicGroupState``)
----------------------------------------------------
====================  ===========================================  ======================
state                 event                                        next state
====================  ===========================================  ======================
EMPTY                 join from a new member                       PREPARING_REBALANCE
EMPTY                 no offsets left (expiry, deletion)           DEAD
PREPARING_REBALANCE   every member has (re)joined, or the          COMPLETING_REBALANCE
                      rebalance timeout passed (laggards removed)
PREPARING_REBALANCE   the same, with no member left                EMPTY
COMPLETING_REBALANCE  every member has synced its plan             STABLE
COMPLETING_REBALANCE  join with new metadata, leave, member        PREPARING_REBALANCE
                      expiry, sync timeout
STABLE                join with new metadata or new owned set,     PREPARING_REBALANCE
                      leave, session/poll expiry, topic change,
                      a cooperative hand-over still due
DEAD                  (final: the group is forgotten)
====================  ===========================================  ======================

Requests in each state:

=========== ==================== ========================== ===================== ===============
request     EMPTY                PREPARING_REBALANCE        COMPLETING_REBALANCE  STABLE
=========== ==================== ========================== ===================== ===============
join        new member: parked   parked until all joined    same metadata: answer same metadata:
            known id: UNKNOWN_                              again; else rebalance answer again;
            MEMBER_ID                                                             else rebalance
sync        UNKNOWN_MEMBER_ID    REBALANCE_IN_PROGRESS      the member's plan     its assignment
heartbeat   UNKNOWN_MEMBER_ID    REBALANCE_IN_PROGRESS      NONE                  NONE
leave       UNKNOWN_MEMBER_ID    member removed             rebalance             rebalance
commit      simple commits only  members of the current     REBALANCE_IN_PROGRESS members of
            (no member, gen -1)  generation                                       current gen
reset       allowed              NON_EMPTY_GROUP            NON_EMPTY_GROUP       NON_EMPTY_GROUP
offset      allowed              topics no member subscribes to; else GROUP_SUBSCRIBED_TO_TOPIC
delete
=========== ==================== ========================== ===================== ===============

Sync, heartbeat and commit check membership first (UNKNOWN_MEMBER_ID) and then the
generation (ILLEGAL_GENERATION). A group that does not exist answers like an EMPTY one, and
commits with a generation to it get ILLEGAL_GENERATION, as Kafka's ``validateOffsetCommit``.

Timers (``poll``)
-----------------
* session: a member not heard from (join, sync, heartbeat, commit) for
  ``session_timeout_ms`` is removed, unless its join is parked (Kafka keeps those alive;
  a member waiting for its plan must heartbeat, as Kafka's clients do).
* poll interval (KIP-62): a member that declared ``max_poll_interval_ms`` and was not seen
  polling (``handle_member_poll``, join, sync) for that long is removed, as the Java
  client's heartbeat thread leaves the group when the application stops polling.
* rebalance timeout (KIP-62: the client's ``max.poll.interval.ms``): the join phase ends at
  most the longest member rebalance timeout after it began; members that did not rejoin are
  removed. A group leaving EMPTY waits ``group.initial.rebalance.delay.ms`` for more members.
* sync timeout: members that have not fetched their plan within the rebalance timeout are
  removed and the group rebalances (Kafka's pending-sync timeout).
* offsets (KIP-211): the offsets of an EMPTY consumer group expire
  ``offsets.retention.minutes`` after it became empty; those of a simple group (never had
  members) each that long after their commit. An EMPTY group with no offsets is DEAD.

Ownership and the two protocols (KIP-429)
-----------------------------------------
The coordinator tracks what each member may still hold (``Member.owned``):

* a plan handed out in a sync adds its partitions; the partitions it takes away (revoked)
  stay owned until the member's next join, because the client revokes them between its sync
  and its next join;
* an EAGER member's join empties it: the client revoked everything before joining;
* a COOPERATIVE member's join keeps only what the member says it still owns (by default all
  it was handed minus what its last plan revoked): unaffected partitions stay with it
  throughout the rebalance;
* a removed member owns nothing (its commits are refused from then on: it is fenced).

A plan is the assignor's target minus every partition another member still owns
(``withhold_owned_by_others``). The old owner's plan lacks the partition, so it revokes it;
once the group is STABLE and a subscribed partition is assigned to nobody, the coordinator
starts the follow-up rebalance in which the partition is handed over. A member whose plan
revokes something is told to rejoin (``SyncResponse.rejoin``), as KIP-429's clients do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from broker.groups.assignors import (
    ASSIGNORS,
    MemberSubscription,
    subscribed_partitions,
    withhold_owned_by_others,
)
from broker.groups.records import (
    GroupMetadataRecord,
    GroupRecord,
    GroupTombstoneRecord,
    MemberMetadata,
    OffsetCommitRecord,
    OffsetTombstoneRecord,
)
from broker.groups.types import ErrorCode, GroupState, RebalanceProtocol, TopicPartition
from common.invariant import invariant

NO_GENERATION = -1
"""Generation sent by a client outside group management (simple commits)."""

UNKNOWN_MEMBER_ID = ""
"""Member id of a first join, and of simple commits."""


# ---------------------------------------------------------------- config


@dataclass(frozen=True)
class GroupConfig:
    """Coordinator settings; the Kafka broker config each one mirrors is named beside it."""

    session_timeout_ms_min: int = 6_000  # group.min.session.timeout.ms
    session_timeout_ms_max: int = 1_800_000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3_000  # group.initial.rebalance.delay.ms
    offsets_retention_minutes: int = 10_080  # offsets.retention.minutes (7 days)
    group_size_max: int = 2**31 - 1  # group.max.size

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000


# ---------------------------------------------------------------- requests and responses


@dataclass(frozen=True)
class JoinRequest:
    group: str
    member_id: str
    """``UNKNOWN_MEMBER_ID`` ("") on a first join: the coordinator assigns one."""
    topics: frozenset[str]
    protocol: RebalanceProtocol = RebalanceProtocol.EAGER
    assignor: str = "range"
    client_id: str = ""
    session_timeout_ms: int = 45_000  # session.timeout.ms
    rebalance_timeout_ms: int = 300_000  # the client's max.poll.interval.ms (KIP-62)
    max_poll_interval_ms: int | None = None
    """Set when the shell reports this member's polls (``handle_member_poll``)."""
    owned: frozenset[TopicPartition] | None = None
    """COOPERATIVE: partitions the member still owns; ``None``: all it was handed except
    what its last plan revoked."""


@dataclass(frozen=True)
class JoinResponse:
    error: ErrorCode
    member_id: str = UNKNOWN_MEMBER_ID
    generation: int = NO_GENERATION
    protocol: RebalanceProtocol | None = None
    assignor: str | None = None
    leader: str | None = None
    members: tuple[str, ...] = ()


@dataclass(frozen=True)
class SyncRequest:
    group: str
    member_id: str
    generation: int


@dataclass(frozen=True)
class SyncResponse:
    error: ErrorCode
    assignment: frozenset[TopicPartition] = frozenset()
    revoked: frozenset[TopicPartition] = frozenset()
    """Partitions the member owned and must give up now (COOPERATIVE; EAGER gave up all)."""
    rejoin: bool = False
    """Rejoin once ``revoked`` is given up: the follow-up rebalance hands them over."""


@dataclass(frozen=True)
class HeartbeatRequest:
    group: str
    member_id: str
    generation: int


@dataclass(frozen=True)
class LeaveRequest:
    group: str
    member_id: str


@dataclass(frozen=True)
class OffsetAndMetadata:
    offset: int
    metadata: str = ""


@dataclass(frozen=True)
class OffsetCommitRequest:
    group: str
    offsets: Mapping[TopicPartition, OffsetAndMetadata]
    member_id: str = UNKNOWN_MEMBER_ID
    generation: int = NO_GENERATION


@dataclass(frozen=True)
class TxnOffsetCommitRequest:
    """TxnOffsetCommit: offsets committed as part of producer ``producer_id``'s transaction.
    ``member_id``/``generation`` (KIP-447): when given, checked as a commit's are, so a member
    fenced from the group cannot commit through a transaction either."""

    group: str
    producer_id: int
    producer_epoch: int
    offsets: Mapping[TopicPartition, OffsetAndMetadata]
    member_id: str = UNKNOWN_MEMBER_ID
    generation: int = NO_GENERATION


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    metadata: str
    commit_ts_ms: int


@dataclass(frozen=True)
class PartitionLag:
    """Lag of one partition, as the REST proxy's ``/lags`` shows it."""

    current_offset: int | None
    log_end_offset: int
    lag: int | None
    """``log_end_offset - current_offset``; ``None`` when nothing was committed."""
    member_id: str | None


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    client_id: str
    protocol: RebalanceProtocol
    topics: frozenset[str]
    assignment: frozenset[TopicPartition]


@dataclass(frozen=True)
class GroupDescription:
    group: str
    state: GroupState
    generation: int
    protocol: RebalanceProtocol | None
    assignor: str | None
    leader: str | None
    members: tuple[MemberDescription, ...]
    is_simple: bool


R = TypeVar("R", covariant=True)


@dataclass(frozen=True)
class Outcome(Generic[R]):
    """What a call asks the shell to do: persist ``records``, then send the answers."""

    response: R | None
    """The caller's answer; ``None`` when its join is parked (see ``parked``)."""
    records: tuple[GroupRecord, ...] = ()
    joins_completed: Mapping[tuple[str, str], JoinResponse] = field(default_factory=dict)
    """Answers to joins parked earlier, by (group, member id)."""
    deadline_ms: int | None = None
    parked: tuple[str, str] | None = None
    """The caller's join is parked: its answer comes in a later ``joins_completed`` under
    this key (a first join learns its new member id here)."""
    txn: tuple[int, int] | None = None
    """``records`` are a TxnOffsetCommit's: write them as one transactional batch of this
    (producer id, epoch), alone, so the producer's commit or abort marker decides them."""


# ---------------------------------------------------------------- members and groups


@dataclass
class Member:
    member_id: str
    client_id: str
    protocol: RebalanceProtocol
    topics: frozenset[str]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    max_poll_interval_ms: int | None
    assignment: frozenset[TopicPartition] = frozenset()
    """The member's part of the current generation's plan."""
    owned: frozenset[TopicPartition] = frozenset()
    """What the member may still hold. Invariant: disjoint from every other member's."""
    revoking: frozenset[TopicPartition] = frozenset()
    """Revoked by the last plan handed to the member; owned until its next join."""
    heartbeat_deadline_ms: int = 0
    poll_deadline_ms: int | None = None
    awaiting_join: bool = False
    """A join of this member is parked (PREPARING_REBALANCE only)."""
    awaiting_sync: bool = False
    """The plan is computed and this member has not fetched it (COMPLETING_REBALANCE only)."""

    def metadata(self) -> MemberMetadata:
        return MemberMetadata(
            member_id=self.member_id,
            client_id=self.client_id,
            protocol=self.protocol,
            topics=self.topics,
            assignment=self.assignment,
            session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            max_poll_interval_ms=self.max_poll_interval_ms,
        )

    def describe(self) -> MemberDescription:
        return MemberDescription(
            self.member_id, self.client_id, self.protocol, self.topics, self.assignment
        )


@dataclass
class _Effects:
    records: list[GroupRecord] = field(default_factory=list)
    joins: dict[tuple[str, str], JoinResponse] = field(default_factory=dict)
    parked: tuple[str, str] | None = None

    def answer_or_park(self, key: tuple[str, str]) -> JoinResponse | None:
        """The caller's join answer if the join phase just completed, else park it."""
        response = self.joins.pop(key, None)
        if response is None:
            self.parked = key
        return response


class Group:
    """One group. Mutated only through ``GroupCoordinatorState``, which supplies the effects."""

    def __init__(self, group_id: str, config: GroupConfig, topics: Callable[[], Mapping[str, int]]):
        self.group_id = group_id
        self._config = config
        self._topics = topics
        self.state = GroupState.EMPTY
        self.generation = 0
        """Invariant: never decreases; bumped once per completed join phase (and on EMPTY)."""
        self.assignor: str | None = None
        """``None`` for a simple group: one that never had members, only commits."""
        self.protocol: RebalanceProtocol | None = None
        self.leader: str | None = None
        self.members: dict[str, Member] = {}
        """In join order; the leader is the earliest member (Kafka's first joiner)."""
        self.offsets: dict[TopicPartition, CommittedOffset] = {}
        self.state_ts_ms = 0
        """When the group entered its state; for EMPTY, the start of offset retention."""
        self.join_deadline_ms: int | None = None
        self.join_waits_full_delay = False
        """Leaving EMPTY, the join phase waits out its delay for more members to come."""
        self.sync_deadline_ms: int | None = None

    # ------------------------------------------------------------ transitions

    def _become(self, state: GroupState, now_ms: int) -> None:
        allowed = _VALID_PREVIOUS[state]
        invariant(
            self.state in allowed,
            "group %s: %s -> %s is not a transition",
            self.group_id,
            self.state,
            state,
        )
        self.state = state
        self.state_ts_ms = now_ms

    def _prepare_rebalance(self, now_ms: int, fx: _Effects) -> None:
        """Enter PREPARING_REBALANCE (from EMPTY, COMPLETING_REBALANCE or STABLE)."""
        was_empty = self.state == GroupState.EMPTY
        self._become(GroupState.PREPARING_REBALANCE, now_ms)
        self.sync_deadline_ms = None
        for m in self.members.values():
            m.awaiting_sync = False
        timeout_ms = max((m.rebalance_timeout_ms for m in self.members.values()), default=0)
        if was_empty:
            timeout_ms = min(self._config.initial_rebalance_delay_ms, timeout_ms)
            self.join_waits_full_delay = timeout_ms > 0
        self.join_deadline_ms = now_ms + timeout_ms
        self._maybe_complete_join(now_ms, fx)

    def _maybe_complete_join(self, now_ms: int, fx: _Effects) -> None:
        if self.state != GroupState.PREPARING_REBALANCE:
            return
        if self.members and (
            self.join_waits_full_delay or not all(m.awaiting_join for m in self.members.values())
        ):
            return
        self._complete_join(now_ms, fx)

    def _complete_join(self, now_ms: int, fx: _Effects) -> None:
        """End the join phase: compute the plan and answer every parked join."""
        self.generation += 1
        self.join_deadline_ms = None
        self.join_waits_full_delay = False
        if not self.members:
            self.protocol = None
            self.leader = None
            self._become(GroupState.EMPTY, now_ms)
            fx.records.append(self._metadata_record())
            return
        if self.leader not in self.members:
            self.leader = next(iter(self.members))
        protocols = {m.protocol for m in self.members.values()}
        self.protocol = (
            RebalanceProtocol.COOPERATIVE
            if protocols == {RebalanceProtocol.COOPERATIVE}
            else RebalanceProtocol.EAGER
        )
        invariant(self.assignor in ASSIGNORS, "group %s has no assignor", self.group_id)
        assign = ASSIGNORS[self.assignor or ""]
        # Stickiness follows what a member had (an eager member revoked it, but the sticky
        # assignor gives it back where balance allows, as Kafka's does from its user data);
        # safety follows what it still owns: nobody gets a partition somebody else owns.
        subs = [
            MemberSubscription(
                m.member_id,
                m.topics,
                m.owned if m.protocol == RebalanceProtocol.COOPERATIVE else m.assignment,
                self.generation - 1,
            )
            for m in self.members.values()
        ]
        target = assign(subs, self._topics())
        plan = withhold_owned_by_others(
            target, {m.member_id: m.owned for m in self.members.values()}
        )
        self._check_plan(plan)
        self._become(GroupState.COMPLETING_REBALANCE, now_ms)
        self.sync_deadline_ms = now_ms + max(m.rebalance_timeout_ms for m in self.members.values())
        for m in self.members.values():
            m.assignment = plan[m.member_id]
            m.awaiting_join = False
            m.awaiting_sync = True
            m.heartbeat_deadline_ms = now_ms + m.session_timeout_ms
        fx.records.append(self._metadata_record())
        for m in self.members.values():
            fx.joins[(self.group_id, m.member_id)] = self._join_response(m.member_id)

    def _check_plan(self, plan: Mapping[str, frozenset[TopicPartition]]) -> None:
        seen: dict[TopicPartition, str] = {}
        for mid, tps in plan.items():
            for tp in tps:
                invariant(tp not in seen, "%s planned for %s and %s", tp, seen.get(tp), mid)
                seen[tp] = mid
        for m in self.members.values():
            for tp in m.owned:
                invariant(
                    seen.get(tp, m.member_id) == m.member_id,
                    "%s planned for %s while %s owns it",
                    tp,
                    seen.get(tp),
                    m.member_id,
                )

    def _maybe_stable(self, now_ms: int, fx: _Effects) -> None:
        if self.state != GroupState.COMPLETING_REBALANCE:
            return
        if any(m.awaiting_sync for m in self.members.values()):
            return
        self.sync_deadline_ms = None
        self._become(GroupState.STABLE, now_ms)
        if self.plan_is_stale():
            # KIP-429's second round: partitions withheld from their new owner this round are
            # free now that every old owner has its plan (and revokes before rejoining).
            self._prepare_rebalance(now_ms, fx)

    def plan_is_stale(self) -> bool:
        """Some subscribed partition has no owner in the plan, or a planned one is gone."""
        topics = self._topics()
        wanted = set(subscribed_partitions(self._subscriptions(), topics))
        planned = {tp for m in self.members.values() for tp in m.assignment}
        return wanted != planned

    def _subscriptions(self) -> list[MemberSubscription]:
        return [MemberSubscription(m.member_id, m.topics) for m in self.members.values()]

    def _remove_member(self, member_id: str, now_ms: int, fx: _Effects) -> None:
        m = self.members.pop(member_id)
        if m.awaiting_join:
            fx.joins[(self.group_id, member_id)] = JoinResponse(ErrorCode.UNKNOWN_MEMBER_ID)
        if self.leader == member_id:
            self.leader = next(iter(self.members), None)
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(now_ms, fx)
        else:
            self._maybe_complete_join(now_ms, fx)

    def _join_response(self, member_id: str) -> JoinResponse:
        return JoinResponse(
            error=ErrorCode.NONE,
            member_id=member_id,
            generation=self.generation,
            protocol=self.protocol,
            assignor=self.assignor,
            leader=self.leader,
            members=tuple(self.members),
        )

    def _metadata_record(self) -> GroupMetadataRecord:
        return GroupMetadataRecord(
            group=self.group_id,
            generation=self.generation,
            protocol=self.protocol,
            assignor=self.assignor,
            leader=self.leader,
            state_ts_ms=self.state_ts_ms,
            members=tuple(m.metadata() for m in self.members.values()),
        )

    # ------------------------------------------------------------ requests

    def join(
        self, req: JoinRequest, now_ms: int, new_member_id: Callable[[str], str], fx: _Effects
    ) -> JoinResponse | None:
        cfg = self._config
        if not (cfg.session_timeout_ms_min <= req.session_timeout_ms <= cfg.session_timeout_ms_max):
            return JoinResponse(ErrorCode.INVALID_SESSION_TIMEOUT, req.member_id)
        if req.assignor not in ASSIGNORS:
            return JoinResponse(ErrorCode.UNSUPPORTED_ASSIGNOR, req.member_id)
        if self.members and req.assignor != self.assignor:
            # Kafka: the new member's protocols must intersect the group's.
            return JoinResponse(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, req.member_id)
        if req.member_id == UNKNOWN_MEMBER_ID:
            if len(self.members) >= cfg.group_size_max:
                return JoinResponse(ErrorCode.GROUP_MAX_SIZE_REACHED)
            member_id = new_member_id(req.client_id)
            invariant(
                member_id != UNKNOWN_MEMBER_ID and member_id not in self.members,
                "member id factory gave %r, already in use",
                member_id,
            )
            self.assignor = req.assignor
            self.members[member_id] = Member(
                member_id=member_id,
                client_id=req.client_id,
                protocol=req.protocol,
                topics=req.topics,
                session_timeout_ms=req.session_timeout_ms,
                rebalance_timeout_ms=req.rebalance_timeout_ms,
                max_poll_interval_ms=req.max_poll_interval_ms,
                awaiting_join=True,
            )
            self._touch(self.members[member_id], now_ms)
            if self.state == GroupState.PREPARING_REBALANCE:
                self._maybe_complete_join(now_ms, fx)
            else:
                self._prepare_rebalance(now_ms, fx)
            return fx.answer_or_park((self.group_id, member_id))
        m = self.members.get(req.member_id)
        if m is None:
            return JoinResponse(ErrorCode.UNKNOWN_MEMBER_ID, req.member_id)
        changed = (
            m.topics != req.topics
            or m.protocol != req.protocol
            or (req.owned is not None and req.owned != m.owned)
        )
        # A member joining again gives up what its protocol says it gives up.
        if req.protocol == RebalanceProtocol.EAGER:
            m.owned = frozenset()
        elif req.owned is None:
            m.owned = m.owned - m.revoking  # a KIP-429 client revokes before it rejoins
        else:
            m.owned = m.owned & req.owned
        m.revoking = frozenset()
        m.topics = req.topics
        m.protocol = req.protocol
        m.client_id = req.client_id
        m.session_timeout_ms = req.session_timeout_ms
        m.rebalance_timeout_ms = req.rebalance_timeout_ms
        m.max_poll_interval_ms = req.max_poll_interval_ms
        self._touch(m, now_ms)
        if self.state == GroupState.PREPARING_REBALANCE:
            m.awaiting_join = True
            self._maybe_complete_join(now_ms, fx)
            return fx.answer_or_park((self.group_id, m.member_id))
        if not changed:
            # Kafka: a member joining with the same metadata (it lost the response, say)
            # gets the current generation back, and no rebalance starts.
            return self._join_response(m.member_id)
        m.awaiting_join = True
        self._prepare_rebalance(now_ms, fx)
        return fx.answer_or_park((self.group_id, m.member_id))

    def sync(self, req: SyncRequest, now_ms: int, fx: _Effects) -> SyncResponse:
        m = self.members.get(req.member_id)
        if m is None:
            return SyncResponse(ErrorCode.UNKNOWN_MEMBER_ID)
        if req.generation != self.generation:
            return SyncResponse(ErrorCode.ILLEGAL_GENERATION)
        if self.state == GroupState.PREPARING_REBALANCE:
            return SyncResponse(ErrorCode.REBALANCE_IN_PROGRESS)
        self._touch(m, now_ms)
        revoked = m.owned - m.assignment
        for other in self.members.values():
            invariant(
                other is m or not (other.owned & m.assignment),
                "handing %s to %s while %s owns %s",
                sorted(m.assignment),
                m.member_id,
                other.member_id,
                sorted(other.owned & m.assignment),
            )
        m.owned = m.owned | m.assignment
        m.revoking = revoked
        m.awaiting_sync = False
        response = SyncResponse(ErrorCode.NONE, m.assignment, revoked, rejoin=bool(revoked))
        self._maybe_stable(now_ms, fx)
        return response

    def heartbeat(self, req: HeartbeatRequest, now_ms: int) -> ErrorCode:
        m = self.members.get(req.member_id)
        if m is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if req.generation != self.generation:
            return ErrorCode.ILLEGAL_GENERATION
        m.heartbeat_deadline_ms = now_ms + m.session_timeout_ms
        if self.state == GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave(self, req: LeaveRequest, now_ms: int, fx: _Effects) -> ErrorCode:
        if req.member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._remove_member(req.member_id, now_ms, fx)
        return ErrorCode.NONE

    def member_poll(self, member_id: str, now_ms: int) -> ErrorCode:
        m = self.members.get(member_id)
        if m is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if m.max_poll_interval_ms is not None:
            m.poll_deadline_ms = now_ms + m.max_poll_interval_ms
        return ErrorCode.NONE

    def validate_commit(self, req: OffsetCommitRequest) -> ErrorCode:
        """Kafka's ``validateOffsetCommit`` and the state check of ``doCommitOffsets``."""
        if req.generation < 0 and req.member_id == UNKNOWN_MEMBER_ID:
            # No group management (admin client, manual assignment): only into an empty group.
            return ErrorCode.NONE if self.state == GroupState.EMPTY else ErrorCode.UNKNOWN_MEMBER_ID
        if req.member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if req.generation != self.generation:
            return ErrorCode.ILLEGAL_GENERATION
        if self.state == GroupState.COMPLETING_REBALANCE:
            # The member has its join response but not its plan yet (Kafka's answer too).
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def commit(self, req: OffsetCommitRequest, now_ms: int, fx: _Effects) -> ErrorCode:
        error = self.validate_commit(req)
        if error != ErrorCode.NONE:
            return error
        m = self.members.get(req.member_id)
        if m is not None:
            # A commit shows the member is alive (Kafka completes its heartbeat).
            m.heartbeat_deadline_ms = now_ms + m.session_timeout_ms
        for tp in sorted(req.offsets):
            om = req.offsets[tp]
            self.offsets[tp] = CommittedOffset(om.offset, om.metadata, now_ms)
            fx.records.append(
                OffsetCommitRecord(
                    self.group_id, tp.topic, tp.partition, om.offset, om.metadata, now_ms
                )
            )
        return ErrorCode.NONE

    def _touch(self, m: Member, now_ms: int) -> None:
        m.heartbeat_deadline_ms = now_ms + m.session_timeout_ms
        if m.max_poll_interval_ms is not None:
            m.poll_deadline_ms = now_ms + m.max_poll_interval_ms

    # ------------------------------------------------------------ time

    def _expired_members(self, now_ms: int) -> list[str]:
        out = []
        for m in self.members.values():
            if m.awaiting_join:
                continue  # kept alive while its join is parked (Kafka)
            if now_ms >= m.heartbeat_deadline_ms or (
                m.poll_deadline_ms is not None and now_ms >= m.poll_deadline_ms
            ):
                out.append(m.member_id)
        return out

    def _offsets_expired(self, now_ms: int) -> list[TopicPartition]:
        if self.state != GroupState.EMPTY:
            return []
        retention_ms = self._config.offsets_retention_ms
        if self.assignor is None:  # simple group: each offset from its commit (KIP-211)
            return sorted(
                tp for tp, o in self.offsets.items() if now_ms >= o.commit_ts_ms + retention_ms
            )
        return sorted(self.offsets) if now_ms >= self.state_ts_ms + retention_ms else []

    def poll(self, now_ms: int, fx: _Effects) -> None:
        # Each removal can start a rebalance, which changes who is kept alive and which
        # deadlines apply: repeat until nothing is due at now_ms.
        while self._poll_once(now_ms, fx):
            pass
        expired = self._offsets_expired(now_ms)
        for tp in expired:
            del self.offsets[tp]
            fx.records.append(OffsetTombstoneRecord(self.group_id, tp.topic, tp.partition))
        if self.state == GroupState.EMPTY and not self.offsets:
            self._become(GroupState.DEAD, now_ms)
            fx.records.append(GroupTombstoneRecord(self.group_id))

    def _poll_once(self, now_ms: int, fx: _Effects) -> bool:
        """Fire one due timer; say whether there was one."""
        expired = self._expired_members(now_ms)
        if expired:
            self._remove_member(expired[0], now_ms, fx)
            return True
        if (
            self.state == GroupState.PREPARING_REBALANCE
            and self.join_deadline_ms is not None
            and now_ms >= self.join_deadline_ms
        ):
            for mid in [m.member_id for m in self.members.values() if not m.awaiting_join]:
                self.members.pop(mid)  # did not rejoin within the rebalance timeout
                if self.leader == mid:
                    self.leader = None
            self.join_waits_full_delay = False
            self._maybe_complete_join(now_ms, fx)
            return True
        if (
            self.state == GroupState.COMPLETING_REBALANCE
            and self.sync_deadline_ms is not None
            and now_ms >= self.sync_deadline_ms
        ):
            laggards = [m.member_id for m in self.members.values() if m.awaiting_sync]
            for mid in laggards:
                self.members.pop(mid)
                if self.leader == mid:
                    self.leader = None
            self._prepare_rebalance(now_ms, fx)
            return True
        return False

    def deadline_ms(self) -> int | None:
        """The earliest moment ``poll`` has something to do for this group."""
        ds: list[int] = []
        for m in self.members.values():
            if m.awaiting_join:
                continue
            ds.append(m.heartbeat_deadline_ms)
            if m.poll_deadline_ms is not None:
                ds.append(m.poll_deadline_ms)
        if self.state == GroupState.PREPARING_REBALANCE and self.join_deadline_ms is not None:
            ds.append(self.join_deadline_ms)
        if self.state == GroupState.COMPLETING_REBALANCE and self.sync_deadline_ms is not None:
            ds.append(self.sync_deadline_ms)
        if self.state == GroupState.EMPTY:
            retention_ms = self._config.offsets_retention_ms
            if not self.offsets:
                ds.append(self.state_ts_ms)  # dies at the next poll
            elif self.assignor is None:
                ds.append(min(o.commit_ts_ms for o in self.offsets.values()) + retention_ms)
            else:
                ds.append(self.state_ts_ms + retention_ms)
        return min(ds, default=None)

    # ------------------------------------------------------------ replay

    def replay_metadata(self, record: GroupMetadataRecord) -> None:
        invariant(record.generation >= self.generation, "generation went back in %r", record)
        self.generation = record.generation
        self.protocol = record.protocol
        self.assignor = record.assignor
        self.leader = record.leader
        self.state_ts_ms = record.state_ts_ms
        self.members = {}
        for mm in record.members:
            self.members[mm.member_id] = Member(
                member_id=mm.member_id,
                client_id=mm.client_id,
                protocol=mm.protocol,
                topics=mm.topics,
                session_timeout_ms=mm.session_timeout_ms,
                rebalance_timeout_ms=mm.rebalance_timeout_ms,
                max_poll_interval_ms=mm.max_poll_interval_ms,
                assignment=mm.assignment,
                owned=mm.assignment,
                heartbeat_deadline_ms=record.state_ts_ms + mm.session_timeout_ms,
            )
        # Kafka loads a group as Stable or Empty: a rebalance in flight is retried by its
        # members, who find the new coordinator and heartbeat, sync or rejoin.
        self.state = GroupState.STABLE if self.members else GroupState.EMPTY
        self.join_deadline_ms = self.sync_deadline_ms = None
        self.join_waits_full_delay = False

    def describe(self) -> GroupDescription:
        return GroupDescription(
            group=self.group_id,
            state=self.state,
            generation=self.generation,
            protocol=self.protocol,
            assignor=self.assignor,
            leader=self.leader,
            members=tuple(m.describe() for m in self.members.values()),
            is_simple=self.assignor is None,
        )


_VALID_PREVIOUS: Mapping[GroupState, frozenset[GroupState]] = {
    # Kafka's ClassicGroupState.validPreviousStates.
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(
        {
            GroupState.EMPTY,
            GroupState.STABLE,
            GroupState.PREPARING_REBALANCE,
            GroupState.COMPLETING_REBALANCE,
        }
    ),
}


# ---------------------------------------------------------------- the coordinator


class GroupCoordinatorState:
    """Every group of one ``__consumer_offsets`` partition; the only entry point of the core."""

    def __init__(
        self,
        config: GroupConfig | None = None,
        *,
        new_member_id: Callable[[str], str],
        partitions_per_topic: Mapping[str, int] | None = None,
    ):
        """``new_member_id(client_id)`` must return a fresh id (Kafka: client id + "-" + UUID)."""
        self.config = config or GroupConfig()
        self._new_member_id = new_member_id
        self._partitions_per_topic: dict[str, int] = dict(partitions_per_topic or {})
        self.groups: dict[str, Group] = {}
        """Live groups; a group that becomes DEAD is dropped."""
        self.pending_txn: dict[int, dict[tuple[str, TopicPartition], CommittedOffset]] = {}
        """Offsets of open transactions, by producer id (TxnOffsetCommit): not the groups'
        until the producer's commit marker is in the partition."""

    # ------------------------------------------------------------ helpers

    def _group(self, group_id: str, *, create: bool) -> Group | None:
        if create:
            return self._group_or_create(group_id)
        return self.groups.get(group_id)

    def _group_or_create(self, group_id: str) -> Group:
        g = self.groups.get(group_id)
        if g is None:
            g = Group(group_id, self.config, lambda: self._partitions_per_topic)
            self.groups[group_id] = g
        return g

    def _outcome(self, response: R | None, fx: _Effects, group: Group | None) -> Outcome[R]:
        deadline = None
        if group is not None:
            if group.state == GroupState.DEAD:
                self.groups.pop(group.group_id, None)
            else:
                deadline = group.deadline_ms()
        return Outcome(response, tuple(fx.records), dict(fx.joins), deadline, fx.parked)

    # ------------------------------------------------------------ requests

    def handle_join(self, req: JoinRequest, now_ms: int) -> Outcome[JoinResponse]:
        if not req.group:
            return Outcome(JoinResponse(ErrorCode.INVALID_GROUP_ID, req.member_id))
        g = self._group(req.group, create=req.member_id == UNKNOWN_MEMBER_ID)
        if g is None:
            return Outcome(JoinResponse(ErrorCode.UNKNOWN_MEMBER_ID, req.member_id))
        fx = _Effects()
        response = g.join(req, now_ms, self._new_member_id, fx)
        if not g.members and g.state == GroupState.EMPTY and not g.offsets and g.generation == 0:
            self.groups.pop(g.group_id)  # a refused first join leaves no group behind
            return Outcome(response)
        return self._outcome(response, fx, g)

    def handle_sync(self, req: SyncRequest, now_ms: int) -> Outcome[SyncResponse]:
        g = self._group(req.group, create=False)
        if g is None:
            return Outcome(SyncResponse(ErrorCode.UNKNOWN_MEMBER_ID))
        fx = _Effects()
        return self._outcome(g.sync(req, now_ms, fx), fx, g)

    def handle_heartbeat(self, req: HeartbeatRequest, now_ms: int) -> Outcome[ErrorCode]:
        g = self._group(req.group, create=False)
        if g is None:
            return Outcome(ErrorCode.UNKNOWN_MEMBER_ID)
        return self._outcome(g.heartbeat(req, now_ms), _Effects(), g)

    def handle_leave(self, req: LeaveRequest, now_ms: int) -> Outcome[ErrorCode]:
        g = self._group(req.group, create=False)
        if g is None:
            return Outcome(ErrorCode.UNKNOWN_MEMBER_ID)
        fx = _Effects()
        return self._outcome(g.leave(req, now_ms, fx), fx, g)

    def handle_member_poll(self, group_id: str, member_id: str, now_ms: int) -> Outcome[ErrorCode]:
        """The member's application polled (a fetch of a server-side consumer instance)."""
        g = self._group(group_id, create=False)
        if g is None:
            return Outcome(ErrorCode.UNKNOWN_MEMBER_ID)
        return self._outcome(g.member_poll(member_id, now_ms), _Effects(), g)

    def handle_offset_commit(self, req: OffsetCommitRequest, now_ms: int) -> Outcome[ErrorCode]:
        if not req.group:
            return Outcome(ErrorCode.INVALID_GROUP_ID)
        g = self._group(req.group, create=False)
        if g is None:
            if req.generation >= 0 or req.member_id != UNKNOWN_MEMBER_ID:
                return Outcome(ErrorCode.ILLEGAL_GENERATION)
            if not req.offsets:
                return Outcome(ErrorCode.NONE)
            g = self._group_or_create(req.group)  # a simple group, created by its commit
            g.state_ts_ms = now_ms
        fx = _Effects()
        return self._outcome(g.commit(req, now_ms, fx), fx, g)

    def handle_txn_offset_commit(
        self, req: TxnOffsetCommitRequest, now_ms: int
    ) -> Outcome[ErrorCode]:
        """TxnOffsetCommit: the offsets are written now (a transactional batch) but stay
        pending, invisible to ``fetch_offsets``, until the producer's commit marker reaches
        the partition (``complete_txn``); an abort marker drops them (Kafka's
        ``pendingTransactionalOffsetCommits``)."""
        if not req.group:
            return Outcome(ErrorCode.INVALID_GROUP_ID)
        g = self._group(req.group, create=False)
        managed = req.generation >= 0 or req.member_id != UNKNOWN_MEMBER_ID
        if g is None and managed:
            return Outcome(ErrorCode.ILLEGAL_GENERATION)
        if g is not None and managed:
            check = OffsetCommitRequest(req.group, req.offsets, req.member_id, req.generation)
            error = g.validate_commit(check)
            if error != ErrorCode.NONE:
                return Outcome(error)
        if not req.offsets:
            return Outcome(ErrorCode.NONE)
        pending = self.pending_txn.setdefault(req.producer_id, {})
        records: list[GroupRecord] = []
        for tp in sorted(req.offsets):
            om = req.offsets[tp]
            pending[(req.group, tp)] = CommittedOffset(om.offset, om.metadata, now_ms)
            records.append(
                OffsetCommitRecord(
                    req.group, tp.topic, tp.partition, om.offset, om.metadata, now_ms
                )
            )
        return Outcome(ErrorCode.NONE, tuple(records), txn=(req.producer_id, req.producer_epoch))

    def complete_txn(self, producer_id: int, commit: bool, now_ms: int) -> Outcome[None]:
        """The producer's commit or abort marker is in the partition: its pending offsets
        become the groups' committed offsets, or are dropped. Nothing to write: the marker
        is the record."""
        pending = self.pending_txn.pop(producer_id, {})
        if commit:
            for (group, tp), off in sorted(pending.items()):
                self._group_or_create(group).offsets[tp] = off
        return Outcome(None, deadline_ms=self._deadline())

    def replay_txn(self, record: GroupRecord, producer_id: int) -> None:
        """An offset commit read from a transactional batch of ``producer_id``: pending until
        that producer's marker (``complete_txn``) is replayed."""
        if isinstance(record, OffsetCommitRecord):
            self.pending_txn.setdefault(producer_id, {})[
                (record.group, TopicPartition(record.topic, record.partition))
            ] = CommittedOffset(record.offset, record.metadata, record.commit_ts_ms)

    def handle_offset_reset(
        self, group_id: str, offsets: Mapping[TopicPartition, int], now_ms: int
    ) -> Outcome[ErrorCode]:
        """Set offsets (earliest, latest, by time: resolved by the caller) of an inactive group.

        Kafka's ``kafka-consumer-groups --reset-offsets`` refuses a group with members.
        """
        if not group_id:
            return Outcome(ErrorCode.INVALID_GROUP_ID)
        g = self._group(group_id, create=False)
        if g is not None and g.state != GroupState.EMPTY:
            return Outcome(ErrorCode.NON_EMPTY_GROUP)
        req = OffsetCommitRequest(group_id, {tp: OffsetAndMetadata(o) for tp, o in offsets.items()})
        return self.handle_offset_commit(req, now_ms)

    def handle_offset_delete(
        self, group_id: str, partitions: Iterable[TopicPartition], now_ms: int
    ) -> Outcome[ErrorCode]:
        """Delete the committed offsets of ``partitions`` (Kafka's OffsetDelete, KIP-496).

        Allowed in any state for topics no member subscribes to; a subscribed topic refuses
        the whole request with GROUP_SUBSCRIBED_TO_TOPIC (nothing deleted), as a live member
        would commit it again. An EMPTY group left without offsets is DEAD, as after expiry.
        """
        if not group_id:
            return Outcome(ErrorCode.INVALID_GROUP_ID)
        g = self._group(group_id, create=False)
        if g is None:
            return Outcome(ErrorCode.GROUP_ID_NOT_FOUND)
        wanted = sorted(set(partitions))
        subscribed = {t for m in g.members.values() for t in m.topics}
        if any(tp.topic in subscribed for tp in wanted):
            return Outcome(ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC)
        fx = _Effects()
        for tp in wanted:
            if g.offsets.pop(tp, None) is not None:
                fx.records.append(OffsetTombstoneRecord(group_id, tp.topic, tp.partition))
        if g.state == GroupState.EMPTY and not g.offsets:
            g._become(GroupState.DEAD, now_ms)
            fx.records.append(GroupTombstoneRecord(group_id))
        return self._outcome(ErrorCode.NONE, fx, g)

    def handle_delete_group(self, group_id: str, now_ms: int) -> Outcome[ErrorCode]:
        """Delete an EMPTY group and its offsets (Kafka's DeleteGroups)."""
        g = self._group(group_id, create=False)
        if g is None:
            return Outcome(ErrorCode.GROUP_ID_NOT_FOUND)
        if g.state != GroupState.EMPTY:
            return Outcome(ErrorCode.NON_EMPTY_GROUP)
        fx = _Effects()
        for tp in sorted(g.offsets):
            fx.records.append(OffsetTombstoneRecord(group_id, tp.topic, tp.partition))
        g.offsets.clear()
        g._become(GroupState.DEAD, now_ms)
        fx.records.append(GroupTombstoneRecord(group_id))
        return self._outcome(ErrorCode.NONE, fx, g)

    def update_topics(self, partitions_per_topic: Mapping[str, int], now_ms: int) -> Outcome[None]:
        """New topic metadata; STABLE groups whose plan no longer covers it rebalance.

        (In Kafka the group leader notices the metadata change and rejoins.)
        """
        self._partitions_per_topic = dict(partitions_per_topic)
        fx = _Effects()
        for g in self._sorted_groups():
            if g.state == GroupState.STABLE and g.plan_is_stale():
                g._prepare_rebalance(now_ms, fx)
        return Outcome(None, tuple(fx.records), dict(fx.joins), self._deadline())

    def poll(self, now_ms: int) -> Outcome[None]:
        """Fire every timer due at ``now_ms``; ``deadline_ms`` is when to call again."""
        fx = _Effects()
        for g in self._sorted_groups():
            g.poll(now_ms, fx)
            if g.state == GroupState.DEAD:
                del self.groups[g.group_id]
        return Outcome(None, tuple(fx.records), dict(fx.joins), self._deadline())

    def _sorted_groups(self) -> list[Group]:
        return [self.groups[k] for k in sorted(self.groups)]

    def _deadline(self) -> int | None:
        ds = [d for g in self.groups.values() if (d := g.deadline_ms()) is not None]
        return min(ds, default=None)

    # ------------------------------------------------------------ reads

    def describe(self, group_id: str) -> GroupDescription:
        g = self.groups.get(group_id)
        if g is None:
            return GroupDescription(
                group_id, GroupState.DEAD, NO_GENERATION, None, None, None, (), True
            )
        return g.describe()

    def fetch_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, CommittedOffset]:
        """Committed offsets, in any state (Kafka allows OffsetFetch always)."""
        g = self.groups.get(group_id)
        if g is None:
            return {}
        if partitions is None:
            return dict(sorted(g.offsets.items()))
        return {tp: g.offsets[tp] for tp in sorted(set(partitions)) if tp in g.offsets}

    def unstable(self, group_id: str, partitions: Iterable[TopicPartition] | None) -> bool:
        """Whether an open transaction holds offsets of the group for these partitions (all
        if None): KIP-447's OffsetFetch with ``require_stable`` answers
        UNSTABLE_OFFSET_COMMIT then, so a member taking over a partition does not start from
        an offset a commit marker is about to move."""
        wanted = None if partitions is None else set(partitions)
        return any(
            g == group_id and (wanted is None or tp in wanted)
            for pending in self.pending_txn.values()
            for g, tp in pending
        )

    def lag(
        self, group_id: str, log_end_offsets: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, PartitionLag]:
        """Lag per partition in ``log_end_offsets``, with the member its plan gives it to."""
        g = self.groups.get(group_id)
        owner: dict[TopicPartition, str] = {}
        offsets: Mapping[TopicPartition, CommittedOffset] = {}
        if g is not None:
            offsets = g.offsets
            for m in g.members.values():
                for tp in m.assignment:
                    owner[tp] = m.member_id
        out = {}
        for tp in sorted(log_end_offsets):
            end = log_end_offsets[tp]
            c = offsets.get(tp)
            current = None if c is None else c.offset
            lag = None if current is None else max(0, end - current)
            out[tp] = PartitionLag(current, end, lag, owner.get(tp))
        return out

    # ------------------------------------------------------------ failover

    def replay(self, record: GroupRecord) -> None:
        """Apply one record of ``__consumer_offsets``, in log order, to rebuild the groups."""
        match record:
            case OffsetCommitRecord():
                g = self._group_or_create(record.group)
                g.offsets[TopicPartition(record.topic, record.partition)] = CommittedOffset(
                    record.offset, record.metadata, record.commit_ts_ms
                )
            case OffsetTombstoneRecord():
                if (found := self.groups.get(record.group)) is not None:
                    found.offsets.pop(TopicPartition(record.topic, record.partition), None)
            case GroupMetadataRecord():
                self._group_or_create(record.group).replay_metadata(record)
            case GroupTombstoneRecord():
                self.groups.pop(record.group, None)

    def on_loaded(self, now_ms: int) -> Outcome[None]:
        """After replay: start every session clock now and finish any hand-over still due."""
        fx = _Effects()
        for g in self._sorted_groups():
            for m in g.members.values():
                g._touch(m, now_ms)  # session and poll clocks restart at load (Kafka too)
            if g.state == GroupState.STABLE and g.plan_is_stale():
                g._prepare_rebalance(now_ms, fx)
        return Outcome(None, tuple(fx.records), dict(fx.joins), self._deadline())


def durable_view(group: Group) -> tuple[object, ...]:
    """What ``__consumer_offsets`` says of a group: (generation, offsets, state, metadata).

    A replayed group is always STABLE or EMPTY. A live group in those states equals its
    replay in all four; in the middle of a rebalance only the first two are durable yet.
    """
    return (
        group.generation,
        dict(sorted(group.offsets.items())),
        group.state,
        (
            group.assignor,
            group.protocol,
            group.leader,
            tuple(m.metadata() for m in group.members.values()),
        ),
    )
