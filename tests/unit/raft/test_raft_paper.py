"""One test per rule of the Raft paper (Ongaro & Ousterhout 2014), after etcd's
raft_paper_test.go. Section numbers cite the paper. Pre-vote is turned off where a rule is
about the plain election, so the messages are those of §5.2.
"""

from __future__ import annotations

import pytest
from raft_harness import Network, lone_core

from raft.messages import (
    AppendEntries,
    AppendEntriesResponse,
    Heartbeat,
    RequestVote,
    RequestVoteResponse,
)
from raft.types import NO_NODE, Entry, LogIndex, NodeId, Role, Term

N1, N2, N3 = NodeId(1), NodeId(2), NodeId(3)


def votes_for(core_msgs: list[object]) -> list[RequestVote]:
    return [m for m in core_msgs if isinstance(m, RequestVote)]


# ---------------------------------------------------------------------------- §5.1 terms
def test_servers_start_as_followers() -> None:
    n = lone_core()
    assert n.core.role.role is Role.FOLLOWER
    assert n.core.term == 0


@pytest.mark.parametrize("role", ["follower", "candidate", "leader"])
def test_any_server_seeing_a_higher_term_becomes_follower_in_that_term(role: str) -> None:
    n = lone_core(pre_vote=False)
    c = n.core
    if role in ("candidate", "leader"):
        c.campaign()
    if role == "leader":
        c.step(RequestVoteResponse(N2, N1, c.term, True))
        assert c.is_leader
    c.step(AppendEntries(N2, N1, Term(5), LogIndex(0), Term(0), (), LogIndex(0)))
    assert c.role.role is Role.FOLLOWER
    assert c.term == 5
    assert c.leader == N2


def test_messages_with_a_stale_term_are_ignored() -> None:
    n = lone_core(term=3)
    c = n.core
    n.process_ready()
    c.step(
        AppendEntries(
            N2, N1, Term(2), LogIndex(0), Term(0), (Entry(LogIndex(1), Term(2)),), LogIndex(1)
        )
    )
    assert c.term == 3
    assert c.log.last_index() == 0
    assert c.leader == NO_NODE


# ---------------------------------------------------------------------------- §5.2 election
def test_leader_sends_heartbeats_every_heartbeat_interval() -> None:
    net = Network([1, 2, 3], heartbeat_interval_ticks=2)
    net.elect(1)
    net.drop(lambda m: True)
    before = len(net.dropped)
    net.tick(1)
    assert len(net.dropped) == before
    net.tick(1)
    beats = [m for m in net.dropped[before:] if isinstance(m, Heartbeat)]
    assert {m.dst for m in beats} == {N2, N3}


def test_follower_election_timeout_starts_an_election_for_the_next_term() -> None:
    n = lone_core(pre_vote=False)
    c = n.core
    for _ in range(2 * c.cfg.election_timeout_ticks):
        c.tick()
    assert c.role.role is Role.CANDIDATE
    assert c.term == 1
    assert c.vote == N1
    reqs = votes_for(n.process_ready())
    assert {m.dst for m in reqs} == {N2, N3}
    assert all(m.term == 1 and not m.pre_vote for m in reqs)


def test_candidate_election_timeout_starts_a_new_election() -> None:
    n = lone_core(pre_vote=False)
    c = n.core
    c.campaign()
    assert c.term == 1
    for _ in range(2 * c.cfg.election_timeout_ticks):
        c.tick()
    assert c.role.role is Role.CANDIDATE
    assert c.term == 2


@pytest.mark.parametrize(
    ("size", "granted", "rejected", "role"),
    [
        (1, set(), set(), Role.LEADER),
        (3, {2, 3}, set(), Role.LEADER),
        (3, {2}, set(), Role.LEADER),
        (5, {2, 3, 4, 5}, set(), Role.LEADER),
        (5, {2, 3}, set(), Role.LEADER),
        (3, set(), set(), Role.CANDIDATE),
        (5, {2}, set(), Role.CANDIDATE),
        (5, {2}, {3, 4}, Role.CANDIDATE),
        (3, set(), {2, 3}, Role.FOLLOWER),
        (5, {2}, {3, 4, 5}, Role.FOLLOWER),
    ],
)
def test_candidate_wins_with_a_majority_of_votes_and_loses_with_a_majority_of_rejections(
    size: int, granted: set[int], rejected: set[int], role: Role
) -> None:
    n = lone_core(voters=range(1, size + 1), pre_vote=False)
    c = n.core
    c.campaign()
    for v in granted:
        c.step(RequestVoteResponse(NodeId(v), N1, c.term, True))
    for v in rejected:
        c.step(RequestVoteResponse(NodeId(v), N1, c.term, False))
    assert c.role.role is role


@pytest.mark.parametrize(
    ("vote", "candidate", "grant"), [(0, 2, True), (2, 2, True), (3, 2, False)]
)
def test_follower_grants_at_most_one_vote_per_term_first_come_first_served(
    vote: int, candidate: int, grant: bool
) -> None:
    n = lone_core(term=1, vote=vote)
    c = n.core
    c.step(RequestVote(NodeId(candidate), N1, Term(1), LogIndex(0), Term(0)))
    resp = [m for m in n.process_ready() if isinstance(m, RequestVoteResponse)]
    assert len(resp) == 1 and resp[0].granted is grant
    assert c.vote == (candidate if grant else vote)


def test_candidate_falls_back_to_follower_on_append_entries_from_a_leader_of_its_term() -> None:
    n = lone_core(pre_vote=False)
    c = n.core
    c.campaign()
    c.step(AppendEntries(N2, N1, c.term, LogIndex(0), Term(0), (), LogIndex(0)))
    assert c.role.role is Role.FOLLOWER
    assert c.leader == N2
    assert c.term == 1


def test_election_timeouts_are_randomized_within_one_to_two_election_timeouts() -> None:
    seen = set()
    for seed in range(50):
        n = lone_core(seed=seed, pre_vote=False)
        c = n.core
        ticks = 0
        while c.role.role is Role.FOLLOWER:
            c.tick()
            ticks += 1
        et = c.cfg.election_timeout_ticks
        assert et <= ticks < 2 * et
        seen.add(ticks)
    assert len(seen) > 3, "timeouts are not randomized"


def test_randomized_timeouts_usually_elect_a_leader_in_one_round() -> None:
    one_round = 0
    for seed in range(100):
        net = Network([1, 2, 3], seed=seed, pre_vote=False)
        while not net.leaders():
            net.tick_all()
        terms = {net.core(n).term for n in (1, 2, 3)}
        one_round += terms == {1}
    assert one_round >= 80


# ---------------------------------------------------------------------------- §5.3 replication
def test_leader_replicates_a_proposal_with_prev_index_and_term() -> None:
    net = Network([1, 2, 3])
    c = net.elect(1)
    net.drop(lambda m: isinstance(m, AppendEntries))
    before = len(net.dropped)
    idx = net.propose(1, b"x")
    apps = [m for m in net.dropped[before:] if isinstance(m, AppendEntries)]
    assert {m.dst for m in apps} == {N2, N3}
    for m in apps:
        assert (m.prev_log_index, m.prev_log_term) == (idx - 1, c.term)
        assert [e.data for e in m.entries] == [b"x"]


def test_leader_commits_an_entry_once_a_majority_stored_it() -> None:
    net = Network([1, 2, 3, 4, 5])
    c = net.elect(1)
    net.isolate(4)
    net.isolate(5)
    idx = net.propose(1, b"x")
    assert c.log.committed == idx
    assert net[1].applied_data() == [b"x"]


def test_leader_does_not_commit_without_a_majority() -> None:
    net = Network([1, 2, 3, 4, 5])
    c = net.elect(1)
    net.isolate(3)
    net.isolate(4)
    net.isolate(5)
    idx = net.propose(1, b"x")
    assert c.log.committed == idx - 1
    assert net[1].applied_data() == []


def test_committing_an_entry_commits_all_preceding_entries() -> None:
    net = Network([1, 2, 3])
    c = net.elect(1)
    net.isolate(2)
    net.isolate(3)
    net.propose(1, b"a")
    net.propose(1, b"b")
    assert net[1].applied_data() == []
    net.recover()
    idx = net.propose(1, b"c")
    assert c.log.committed == idx
    assert net[1].applied_data() == [b"a", b"b", b"c"]


def test_followers_apply_entries_once_they_learn_the_commit_index() -> None:
    net = Network([1, 2, 3])
    net.elect(1)
    net.propose(1, b"x")
    net.tick(1)  # a heartbeat carries the commit index
    for n in (2, 3):
        assert net[n].applied_data() == [b"x"]


@pytest.mark.parametrize(
    ("prev_term", "prev_index", "reject"),
    [(0, 0, False), (1, 1, False), (2, 2, False), (1, 2, True), (3, 3, True)],
)
def test_follower_rejects_append_entries_that_fail_the_consistency_check(
    prev_term: int, prev_index: int, reject: bool
) -> None:
    n = lone_core(terms=[1, 2])
    c = n.core
    c.step(AppendEntries(N2, N1, Term(2), LogIndex(prev_index), Term(prev_term), (), LogIndex(0)))
    resp = [m for m in n.process_ready() if isinstance(m, AppendEntriesResponse)]
    assert len(resp) == 1 and resp[0].reject is reject


@pytest.mark.parametrize(
    ("prev", "ents", "want"),
    [
        ((2, 2), [(3, 3)], [1, 2, 3]),
        ((1, 1), [(2, 3), (3, 4)], [1, 3, 4]),
        ((0, 0), [(1, 1)], [1, 2]),
        ((0, 0), [(1, 3)], [3]),
    ],
)
def test_follower_deletes_conflicting_entries_and_appends_new_ones(
    prev: tuple[int, int], ents: list[tuple[int, int]], want: list[int]
) -> None:
    n = lone_core(terms=[1, 2])
    c = n.core
    entries = tuple(Entry(LogIndex(i), Term(t)) for i, t in ents)
    c.step(AppendEntries(N2, N1, Term(4), LogIndex(prev[0]), Term(prev[1]), entries, LogIndex(0)))
    n.process_ready()
    got = [c.log.term(LogIndex(i)) for i in range(1, c.log.last_index() + 1)]
    assert got == want


# Figure 7 of the paper: a leader of term 8 with log terms [1,1,1,4,4,5,5,6,6,6] brings
# every follower (a)-(f) to its log.
FIG7_LEADER = [1, 1, 1, 4, 4, 5, 5, 6, 6, 6]
FIG7_FOLLOWERS = {
    "a": [1, 1, 1, 4, 4, 5, 5, 6, 6],
    "b": [1, 1, 1, 4],
    "c": [1, 1, 1, 4, 4, 5, 5, 6, 6, 6, 6],
    "d": [1, 1, 1, 4, 4, 5, 5, 6, 6, 6, 7, 7],
    "e": [1, 1, 1, 4, 4, 4, 4],
    "f": [1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 3],
}


@pytest.mark.parametrize("case", sorted(FIG7_FOLLOWERS))
def test_leader_brings_any_follower_log_into_agreement_with_its_own(case: str) -> None:
    # A third voter with the leader's log lets the leader win; then the follower converges.
    net = Network(
        [1, 2, 3],
        logs={1: FIG7_LEADER, 2: FIG7_FOLLOWERS[case], 3: FIG7_LEADER},
        terms={1: 7},
        pre_vote=False,
    )
    net.elect(1)
    net.propose(1, b"x")
    net.tick_all(3)
    assert net.log_of(2) == net.log_of(1)


# ---------------------------------------------------------------------------- §5.4 safety
def test_request_vote_carries_the_candidates_last_log_index_and_term() -> None:
    n = lone_core(terms=[1, 1, 2], pre_vote=False)
    n.core.campaign()
    reqs = votes_for(n.process_ready())
    assert all((m.last_log_index, m.last_log_term) == (3, 2) for m in reqs)


@pytest.mark.parametrize(
    ("cand_index", "cand_term", "grant"),
    [
        (2, 1, True),  # same last term, same length
        (3, 1, True),  # same last term, longer
        (1, 1, False),  # same last term, shorter
        (1, 2, True),  # higher last term wins whatever the length
        (3, 0, False),  # lower last term loses whatever the length
    ],
)
def test_voter_grants_only_to_candidates_whose_log_is_at_least_as_up_to_date(
    cand_index: int, cand_term: int, grant: bool
) -> None:
    n = lone_core(terms=[1, 1])
    c = n.core
    c.step(RequestVote(N2, N1, Term(3), LogIndex(cand_index), Term(cand_term)))
    resp = [m for m in n.process_ready() if isinstance(m, RequestVoteResponse)]
    assert len(resp) == 1 and resp[0].granted is grant


def test_leader_commits_only_entries_from_current_term() -> None:
    """§5.4.2 / Figure 8: counting replicas never commits an entry of an older term."""
    # Node 1 led term 2 and wrote index 2 (term 2) on itself only.
    net = Network([1, 2, 3], logs={1: [1, 2], 2: [1], 3: [1]}, terms={1: 3}, pre_vote=False)
    c = net.core(1)
    # Node 1 wins term 4 but its no-op (index 3, term 4) does not reach anyone.
    net.drop(
        lambda m: isinstance(m, AppendEntries) and len(m.entries) > 0 and m.entries[-1].term == 4
    )
    net.elect(1)
    net.drop_filters.clear()
    # Now index 2 (term 2) reaches node 2: a majority holds it, but it must not commit...
    p2 = c.progress(N2)
    assert p2 is not None
    c.step(AppendEntriesResponse(N2, N1, c.term, LogIndex(2)))
    assert c.log.committed < 2
    # ... until an entry of the current term is on a majority, which commits both.
    c.step(AppendEntriesResponse(N2, N1, c.term, LogIndex(3)))
    assert c.log.committed == 3


def test_leader_appends_a_noop_entry_at_the_start_of_its_term() -> None:
    net = Network([1, 2, 3], logs={1: [1], 2: [1], 3: [1]})
    c = net.elect(1)
    last = c.log.slice(c.log.last_index(), LogIndex(c.log.last_index() + 1), None)[0]
    assert (last.term, last.data) == (c.term, b"")
    # The no-op commits the previous term's entry along with it.
    assert c.log.committed == last.index


def test_candidate_ignores_append_entries_of_an_older_term_and_keeps_campaigning() -> None:
    n = lone_core(term=2, pre_vote=False)
    c = n.core
    c.campaign()
    c.step(AppendEntries(N2, N1, Term(2), LogIndex(0), Term(0), (), LogIndex(0)))
    assert c.role.role is Role.CANDIDATE
    assert c.term == 3
