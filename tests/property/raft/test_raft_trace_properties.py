"""Property: the core's trace misses no transition. Random elections, partitions, ticks,
proposals, transfers and membership changes run on a cluster whose cores check, after every
input, that each change of role, term or vote they made was traced, and that every vote
they answered was traced as granted or rejected."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from raft_harness import Network

from raft.core import ConfChangeError, NotLeaderError, ProposalDroppedError, RaftCore, Ready
from raft.messages import Message, RequestVoteResponse
from raft.types import NO_NODE, ConfChange, ConfChangeKind, NodeId, TraceEvent, TraceKind

ROLE_OF_KIND = {
    TraceKind.BECAME_FOLLOWER: "follower",
    TraceKind.BECAME_PRE_CANDIDATE: "pre-candidate",
    TraceKind.BECAME_CANDIDATE: "candidate",
    TraceKind.BECAME_LEADER: "leader",
}


class CheckedCore(RaftCore):
    """A core that checks its own trace after every input."""

    def __init__(self, *args: Any, trace: Any, **kwargs: Any) -> None:
        self.seen: list[TraceEvent] = []
        self.votes_answered = {True: 0, False: 0}

        def sink(ev: TraceEvent) -> None:
            self.seen.append(ev)
            trace(ev)

        super().__init__(*args, trace=sink, **kwargs)
        assert [e.kind for e in self.seen][-1] is TraceKind.BECAME_FOLLOWER

    def _checked(self, fn: Any, *args: Any) -> Any:
        role, term, vote, n = self.role, self.term, self.vote, len(self.seen)
        try:
            return fn(*args)
        finally:
            self._check(role, term, vote, self.seen[n:])

    def _check(self, role: object, term: int, vote: int, new: list[TraceEvent]) -> None:
        assert all(e.node == self.id for e in new)
        roles = [e for e in new if e.kind in ROLE_OF_KIND]
        if self.role is not role:
            assert roles, f"role change to {self.role} not traced: {new}"
        if roles:
            assert ROLE_OF_KIND[roles[-1].kind] == self.role.role.value
            assert roles[-1].term == self.term
        terms = [e for e in new if e.kind is TraceKind.TERM_CHANGED]
        if self.term != term:
            assert terms, f"term {term} -> {self.term} not traced: {new}"
            assert terms[0].detail["prev"] == term and terms[-1].term == self.term
        else:
            assert not terms
        if self.vote != vote and self.vote not in (NO_NODE, self.id):
            granted = [e for e in new if e.kind is TraceKind.VOTE_GRANTED]
            assert granted and granted[-1].detail == {"to": self.vote, "pre_vote": False}
        if self.vote != vote and self.vote == self.id:
            assert any(e.kind is TraceKind.BECAME_CANDIDATE for e in new)

    def tick(self) -> None:
        self._checked(super().tick)

    def step(self, m: Message) -> None:
        self._checked(super().step, m)

    def campaign(self) -> None:
        self._checked(super().campaign)

    def transfer_leadership(self, to: NodeId) -> None:
        self._checked(super().transfer_leadership, to)

    def propose_conf_change(self, cc: ConfChange) -> Any:
        return self._checked(super().propose_conf_change, cc)

    def ready(self) -> Ready:
        rd = super().ready()
        # Every vote answered before this Ready was traced as granted or rejected.
        for m in rd.messages:
            if isinstance(m, RequestVoteResponse):
                self.votes_answered[m.granted] += 1
        traced = {
            True: sum(e.kind is TraceKind.VOTE_GRANTED for e in self.seen),
            False: sum(e.kind is TraceKind.VOTE_REJECTED for e in self.seen),
        }
        assert traced == self.votes_answered
        return rd


NODES = (1, 2, 3, 4)
actions = st.lists(
    st.one_of(
        st.tuples(st.just("tick"), st.sampled_from(NODES), st.integers(1, 12)),
        st.tuples(st.just("campaign"), st.sampled_from(NODES), st.just(0)),
        st.tuples(st.just("isolate"), st.sampled_from(NODES), st.just(0)),
        st.tuples(st.just("cut"), st.sampled_from(NODES), st.sampled_from(NODES)),
        st.tuples(st.just("heal"), st.just(0), st.just(0)),
        st.tuples(st.just("propose"), st.sampled_from(NODES), st.just(0)),
        st.tuples(st.just("transfer"), st.sampled_from(NODES), st.sampled_from(NODES)),
        st.tuples(st.just("conf"), st.sampled_from(NODES), st.integers(0, 2)),
        st.tuples(st.just("restart"), st.sampled_from(NODES), st.just(0)),
    ),
    max_size=60,
)


@settings(max_examples=100)
@given(actions, st.booleans(), st.integers(0, 3))
def test_every_role_term_and_vote_change_is_traced(
    steps: list[tuple[str, int, int]], pre_vote: bool, seed: int
) -> None:
    net = Network([1, 2, 3], extra=[4], seed=seed, core_class=CheckedCore, pre_vote=pre_vote)
    for op, a, b in steps:
        leaders = net.leaders()
        try:
            if op == "tick":
                net.tick(a, b)
            elif op == "campaign":
                net.campaign(a)
            elif op == "isolate":
                net.isolate(a)
            elif op == "cut":
                net.cut(a, b)
            elif op == "heal":
                net.recover()
            elif op == "propose" and leaders:
                net.propose(leaders[0], b"x")
            elif op == "transfer" and leaders:
                net.core(leaders[0]).transfer_leadership(NodeId(b))
                net.stabilize()
            elif op == "conf" and leaders:
                kind = list(ConfChangeKind)[b]
                net.core(leaders[0]).propose_conf_change(ConfChange(kind, NodeId(a)))
                net.stabilize()
            elif op == "restart":
                net.restart(a)
        except (NotLeaderError, ProposalDroppedError, ConfChangeError):
            pass
    net.recover()
    net.tick_all(30)
