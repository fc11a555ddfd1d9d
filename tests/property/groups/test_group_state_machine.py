"""A RuleBasedStateMachine over GroupCoordinatorState: random members join, sync, heartbeat,
poll, commit, leave and fall silent while time advances; after every step:

* at most one member owns a partition, as the coordinator sees it and as the clients see it
  (what their syncs handed them), and every plan handed out is disjoint from what the other
  members hold at that moment;
* generations never go back;
* commits from another generation are refused, and accepted ones are exactly those Kafka
  accepts;
* replaying every record persisted so far rebuilds the same durable state.

Clients behave as Kafka's do: an eager client drops everything when it rejoins, a cooperative
client drops what its last sync revoked.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)

from broker.groups.group import (
    GroupConfig,
    GroupCoordinatorState,
    HeartbeatRequest,
    JoinRequest,
    JoinResponse,
    LeaveRequest,
    Member,
    OffsetAndMetadata,
    OffsetCommitRequest,
    Outcome,
    SyncRequest,
    durable_view,
)
from broker.groups.records import GroupRecord, decode_record, encode_record
from broker.groups.types import ErrorCode, GroupState, RebalanceProtocol, TopicPartition

GROUPS = ["g1", "g2"]
TOPICS = {"t": 5, "u": 3}
SESSION_MS = 1_000
REBALANCE_MS = 2_000
CONFIG = GroupConfig(
    session_timeout_ms_min=10,
    session_timeout_ms_max=10_000,
    initial_rebalance_delay_ms=50,
    offsets_retention_minutes=1,
)
ASSIGNOR_OF = {"g1": "cooperative-sticky", "g2": "range"}


@dataclass
class Client:
    group: str
    member_id: str
    protocol: RebalanceProtocol
    topics: frozenset[str]
    generation: int = -1
    holding: frozenset[TopicPartition] = frozenset()
    revoked_last: frozenset[TopicPartition] = field(default_factory=frozenset)


class GroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        counter = itertools.count()
        self.st = GroupCoordinatorState(
            CONFIG,
            new_member_id=lambda client: f"{client}-{next(counter)}",
            partitions_per_topic=TOPICS,
        )
        self.topics = dict(TOPICS)
        self.now = 0
        self.records: list[GroupRecord] = []
        self.clients: dict[str, Client] = {}
        self.pending_new: dict[tuple[str, str], Client] = {}
        self.generation_seen: dict[str, int] = {}

    # ------------------------------------------------------------ plumbing

    def take(self, out: Outcome[object]) -> None:
        for rec in out.records:
            # Everything persisted goes through the codec, as it will on disk.
            self.records.append(decode_record(*encode_record(rec)))
        for (group, mid), resp in out.joins_completed.items():
            self.on_join_response(group, mid, resp)

    def on_join_response(self, group: str, mid: str, resp: JoinResponse) -> None:
        c = self.clients.get(mid) or self.pending_new.pop((group, mid), None)
        if c is None:
            return
        if resp.error != ErrorCode.NONE:
            self.clients.pop(mid, None)
            return
        c.member_id = mid
        c.generation = resp.generation
        self.clients[mid] = c

    def members(self, group: str) -> dict[str, Member]:
        g = self.st.groups.get(group)
        return {} if g is None else dict(g.members)

    def live_clients(self) -> list[Client]:
        """Clients the coordinator still counts as members (the others are fenced)."""
        return [c for c in self.clients.values() if c.member_id in self.members(c.group)]

    # ------------------------------------------------------------ rules

    @rule(
        group=st.sampled_from(GROUPS),
        # Mostly cooperative members, some eager ones (a rolling upgrade mixes both).
        protocol=st.sampled_from([RebalanceProtocol.COOPERATIVE] * 3 + [RebalanceProtocol.EAGER]),
        topics=st.frozensets(st.sampled_from(sorted(TOPICS)), min_size=1),
        wrong_assignor=st.booleans(),
    )
    def join_new(
        self, group: str, protocol: RebalanceProtocol, topics: frozenset[str], wrong_assignor: bool
    ) -> None:
        assignor = "sticky" if wrong_assignor else ASSIGNOR_OF[group]
        req = JoinRequest(group, "", topics, protocol, assignor, "c", SESSION_MS, REBALANCE_MS)
        out = self.st.handle_join(req, self.now)
        c = Client(group, "", protocol, topics)
        if out.parked is not None:
            self.pending_new[out.parked] = c
        self.take(out)
        if out.response is not None:
            if wrong_assignor and self.members(group) and out.response.error == ErrorCode.NONE:
                raise AssertionError("a second assignor was let into a group")
            self.on_join_response(group, out.response.member_id, out.response)

    @precondition(lambda self: self.clients)
    @rule(data=st.data(), change_topics=st.booleans())
    def rejoin(self, data: st.DataObject, change_topics: bool) -> None:
        c = data.draw(st.sampled_from(sorted(self.clients.values(), key=lambda c: c.member_id)))
        self.do_rejoin(c, change_topics)

    def do_rejoin(self, c: Client, change_topics: bool) -> None:
        if change_topics:
            c.topics = frozenset(TOPICS) - c.topics or frozenset({"t"})
        # A client gives up what its protocol says before it sends the join.
        if c.protocol == RebalanceProtocol.EAGER:
            c.holding = frozenset()
        else:
            c.holding = c.holding - c.revoked_last
        c.revoked_last = frozenset()
        req = JoinRequest(
            c.group,
            c.member_id,
            c.topics,
            c.protocol,
            ASSIGNOR_OF[c.group],
            "c",
            SESSION_MS,
            REBALANCE_MS,
        )
        out = self.st.handle_join(req, self.now)
        self.take(out)
        if out.response is not None:
            self.on_join_response(c.group, c.member_id, out.response)

    @precondition(lambda self: self.clients)
    @rule(data=st.data(), stale=st.booleans())
    def sync(self, data: st.DataObject, stale: bool) -> None:
        c = data.draw(st.sampled_from(sorted(self.clients.values(), key=lambda c: c.member_id)))
        self.do_sync(c, stale)

    def do_sync(self, c: Client, stale: bool) -> None:
        gen = c.generation - 1 if stale else c.generation
        current = self.st.groups.get(c.group)
        out = self.st.handle_sync(SyncRequest(c.group, c.member_id, gen), self.now)
        self.take(out)
        resp = out.response
        assert resp is not None
        if resp.error != ErrorCode.NONE:
            if current is not None and c.member_id in current.members:
                assert resp.error != ErrorCode.UNKNOWN_MEMBER_ID
            return
        assert current is not None and gen == current.generation
        others = [
            o for o in self.live_clients() if o.group == c.group and o.member_id != c.member_id
        ]
        for o in others:
            assert not (o.holding & resp.assignment), (
                f"{c.member_id} handed {sorted(resp.assignment)} while {o.member_id} "
                f"holds {sorted(o.holding)}"
            )
        c.holding = resp.assignment
        c.revoked_last = resp.revoked

    @rule(group=st.sampled_from(GROUPS))
    def settle(self, group: str) -> None:
        """Every member does what a well-behaved client does until the group is STABLE:
        rejoin when a rebalance is on, fetch its plan, rejoin after a revocation."""
        for _ in range(12):
            g = self.st.groups.get(group)
            if g is None or g.state in (GroupState.STABLE, GroupState.EMPTY):
                return
            for c in sorted(self.live_clients(), key=lambda c: c.member_id):
                m = self.members(group).get(c.member_id)
                if c.group != group or m is None:
                    continue
                if g.state == GroupState.PREPARING_REBALANCE and not m.awaiting_join:
                    self.do_rejoin(c, change_topics=False)
                elif g.state == GroupState.COMPLETING_REBALANCE and m.awaiting_sync:
                    self.do_sync(c, stale=False)
            if g.state == GroupState.PREPARING_REBALANCE and g.join_waits_full_delay:
                self.advance(CONFIG.initial_rebalance_delay_ms)

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        c = data.draw(st.sampled_from(sorted(self.clients.values(), key=lambda c: c.member_id)))
        out = self.st.handle_heartbeat(
            HeartbeatRequest(c.group, c.member_id, c.generation), self.now
        )
        self.take(out)

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        c = data.draw(st.sampled_from(sorted(self.clients.values(), key=lambda c: c.member_id)))
        self.take(self.st.handle_leave(LeaveRequest(c.group, c.member_id), self.now))
        self.clients.pop(c.member_id, None)

    @precondition(lambda self: self.clients)
    @rule(data=st.data(), generation_delta=st.sampled_from([0, 0, -1, 1]))
    def commit(self, data: st.DataObject, generation_delta: int) -> None:
        c = data.draw(st.sampled_from(sorted(self.clients.values(), key=lambda c: c.member_id)))
        gen = c.generation + generation_delta
        g = self.st.groups.get(c.group)
        expected_ok = (
            g is not None
            and c.member_id in g.members
            and gen == g.generation
            and g.state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE)
        )
        offsets = {TopicPartition("t", 0): OffsetAndMetadata(self.now, "m")}
        out = self.st.handle_offset_commit(
            OffsetCommitRequest(c.group, offsets, c.member_id, gen), self.now
        )
        self.take(out)
        assert (out.response == ErrorCode.NONE) == expected_ok, (out.response, gen, g and g.state)
        if g is not None and gen != g.generation:
            assert out.response in (ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID)

    @rule(group=st.sampled_from(GROUPS), offset=st.integers(0, 100))
    def simple_commit(self, group: str, offset: int) -> None:
        g = self.st.groups.get(group)
        expected_ok = g is None or g.state == GroupState.EMPTY
        req = OffsetCommitRequest(group, {TopicPartition("u", 1): OffsetAndMetadata(offset)})
        out = self.st.handle_offset_commit(req, self.now)
        self.take(out)
        assert (out.response == ErrorCode.NONE) == expected_ok

    @rule(group=st.sampled_from(GROUPS))
    def delete_group(self, group: str) -> None:
        self.take(self.st.handle_delete_group(group, self.now))

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def member_poll(self, data: st.DataObject) -> None:
        c = data.draw(st.sampled_from(sorted(self.clients.values(), key=lambda c: c.member_id)))
        self.take(self.st.handle_member_poll(c.group, c.member_id, self.now))

    @rule(grow=st.sampled_from(["t", "u"]))
    def add_partition(self, grow: str) -> None:
        self.topics[grow] += 1
        self.take(self.st.update_topics(self.topics, self.now))

    @rule(ms=st.sampled_from([1, 10, 50, 50, 300, 300, 900, 2_100, 61_000]))
    def advance(self, ms: int) -> None:
        self.now += ms
        out = self.st.poll(self.now)
        self.take(out)
        if out.deadline_ms is not None:
            assert out.deadline_ms > self.now or out.deadline_ms == self.now

    # ------------------------------------------------------------ invariants

    @invariant()
    def one_owner_per_partition(self) -> None:
        for group in GROUPS:
            owned = [tp for m in self.members(group).values() for tp in m.owned]
            assert len(owned) == len(set(owned)), (group, sorted(owned))
            holding = [tp for c in self.live_clients() if c.group == group for tp in c.holding]
            assert len(holding) == len(set(holding)), (group, sorted(holding))
        # What a client holds, the coordinator counts as owned by it.
        for c in self.live_clients():
            m = self.members(c.group)[c.member_id]
            assert c.holding <= m.owned, (c.member_id, c.holding, m.owned)

    @invariant()
    def generations_never_go_back(self) -> None:
        for group in GROUPS:
            g = self.st.groups.get(group)
            if g is None:
                self.generation_seen.pop(group, None)  # dead: a new group starts again
                continue
            assert g.generation >= self.generation_seen.get(group, 0)
            self.generation_seen[group] = g.generation

    @invariant()
    def waiting_flags_match_the_state(self) -> None:
        for g in self.st.groups.values():
            for m in g.members.values():
                assert not m.awaiting_join or g.state == GroupState.PREPARING_REBALANCE
                assert not m.awaiting_sync or g.state == GroupState.COMPLETING_REBALANCE
            assert bool(g.members) == (g.state != GroupState.EMPTY)

    @invariant()
    def replay_rebuilds_the_durable_state(self) -> None:
        replayed = GroupCoordinatorState(
            CONFIG, new_member_id=str, partitions_per_topic=self.topics
        )
        for rec in self.records:
            replayed.replay(rec)
        for gid, g in self.st.groups.items():
            if g.generation == 0 and not g.offsets:
                assert gid not in replayed.groups  # nothing about it is durable yet
                continue
            live, again = durable_view(g), durable_view(replayed.groups[gid])
            if g.state in (GroupState.STABLE, GroupState.EMPTY):
                assert again == live, gid
            else:  # mid-rebalance: only the generation and the offsets are durable yet
                assert again[:2] == live[:2], gid
        assert set(replayed.groups) <= set(self.st.groups)


GroupMachine.TestCase.settings = settings(
    max_examples=120,
    stateful_step_count=40,
)
test_group_state_machine = GroupMachine.TestCase
