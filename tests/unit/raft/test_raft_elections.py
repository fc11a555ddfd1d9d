"""Pre-vote (thesis §9.6), check-quorum and the leader lease (thesis §6.2, §4.2.3), and
restart behaviour of term and vote."""

from __future__ import annotations

from raft_harness import Network, lone_core

from raft.core import RaftCore
from raft.messages import AppendEntries, AppendEntriesResponse, RequestVote, RequestVoteResponse
from raft.types import NO_NODE, HardState, LogIndex, NodeId, Role, Term

N1, N2, N3 = NodeId(1), NodeId(2), NodeId(3)


# ---------------------------------------------------------------------------- pre-vote
def test_pre_vote_is_on_by_default_and_does_not_bump_the_term() -> None:
    n = lone_core()
    c = n.core
    assert c.cfg.pre_vote and c.cfg.check_quorum
    c.campaign()
    assert c.role.role is Role.PRE_CANDIDATE
    assert c.term == 0 and c.vote == NO_NODE
    reqs = [m for m in n.process_ready() if isinstance(m, RequestVote)]
    assert {m.dst for m in reqs} == {N2, N3}
    assert all(m.pre_vote and m.term == 1 for m in reqs)


def test_pre_candidate_becomes_candidate_only_after_a_pre_vote_majority() -> None:
    n = lone_core()
    c = n.core
    c.campaign()
    c.step(RequestVoteResponse(N2, N1, Term(1), True, pre_vote=True))
    assert c.role.role is Role.CANDIDATE
    assert c.term == 1 and c.vote == N1


def test_partitioned_node_does_not_inflate_its_term_with_pre_vote() -> None:
    net = Network([1, 2, 3])
    net.elect(1)
    net.isolate(3)
    net.tick(3, 100)
    assert net.core(3).term == 1
    net.recover()
    net.tick_all(5)
    # Node 3 rejoins without disrupting the leader.
    assert net.leaders() == [N1]
    assert net.core(1).term == 1


def test_without_pre_vote_a_rejoining_node_disrupts_the_leader() -> None:
    net = Network([1, 2, 3], pre_vote=False, check_quorum=False)
    net.elect(1)
    net.isolate(3)
    net.tick(3, 100)
    assert net.core(3).term > 1
    net.recover()
    net.tick_all(30)
    assert net.core(1).term > 1  # the contrast that motivates pre-vote


def test_voter_grants_pre_vote_without_recording_a_vote() -> None:
    n = lone_core(node_id=2)
    c = n.core
    c.step(RequestVote(N1, NodeId(2), Term(1), LogIndex(0), Term(0), pre_vote=True))
    resp = [m for m in n.process_ready() if isinstance(m, RequestVoteResponse)]
    assert resp[0].granted and resp[0].pre_vote and resp[0].term == 1
    assert c.term == 0 and c.vote == NO_NODE


# ---------------------------------------------------------------------------- check-quorum
def test_leader_steps_down_without_hearing_from_a_majority_for_an_election_timeout() -> None:
    net = Network([1, 2, 3])
    c = net.elect(1)
    net.isolate(1)
    net.tick(1, c.cfg.election_timeout_ticks - 1)
    assert c.is_leader
    net.tick(1, c.cfg.election_timeout_ticks)
    assert c.role.role is Role.FOLLOWER
    assert c.leader == NO_NODE


def test_leader_with_a_live_majority_stays_leader() -> None:
    net = Network([1, 2, 3, 4, 5])
    c = net.elect(1)
    net.isolate(4)
    net.isolate(5)
    net.tick_all(10 * c.cfg.election_timeout_ticks)
    assert c.is_leader and c.term == 1


def test_follower_in_lease_ignores_a_vote_request_of_a_higher_term() -> None:
    net = Network([1, 2, 3])
    net.elect(1)
    c2 = net.core(2)
    c2.step(RequestVote(N3, NodeId(2), Term(5), LogIndex(10), Term(5)))
    assert c2.term == 1 and c2.vote == N1
    assert not [m for m in net[2].process_ready() if isinstance(m, RequestVoteResponse)]


def test_follower_grants_votes_again_once_the_leader_is_silent_for_an_election_timeout() -> None:
    net = Network([1, 2, 3])
    net.elect(1)
    c2 = net.core(2)
    for _ in range(c2.cfg.election_timeout_ticks):
        c2.tick()
    c2.step(RequestVote(N3, NodeId(2), Term(5), LogIndex(10), Term(5)))
    assert c2.term == 5 and c2.vote == N3


def test_isolated_leader_is_replaced_and_steps_down_when_it_returns() -> None:
    net = Network([1, 2, 3], seed=3)
    old = net.elect(1)
    net.isolate(1)
    for _ in range(5 * old.cfg.election_timeout_ticks):
        net.tick_all()
        if any(net.core(n).is_leader for n in (2, 3)):
            break
    new_leaders = [n for n in (2, 3) if net.core(n).is_leader]
    assert len(new_leaders) == 1
    assert not old.is_leader  # stepped down by check-quorum meanwhile
    net.recover()
    net.tick_all(3)
    assert old.term == net.core(new_leaders[0]).term


def test_stale_leader_learns_the_higher_term_from_a_follower_answer() -> None:
    n = lone_core(node_id=2, term=5)
    c = n.core
    c.step(AppendEntries(N1, NodeId(2), Term(3), LogIndex(0), Term(0), (), LogIndex(0)))
    resp = [m for m in n.process_ready() if isinstance(m, AppendEntriesResponse)]
    assert resp and resp[0].term == 5


# ---------------------------------------------------------------------------- restarts
def test_term_and_vote_survive_a_restart_so_a_node_cannot_vote_twice_in_a_term() -> None:
    net = Network([1, 2, 3])
    net.elect(1)
    assert net.core(2).vote == N1
    c2 = net.restart(2).core
    assert (c2.term, c2.vote) == (1, N1)
    c2.step(RequestVote(N3, NodeId(2), Term(1), LogIndex(5), Term(1)))
    resp = [m for m in net[2].process_ready() if isinstance(m, RequestVoteResponse)]
    assert resp and not resp[0].granted


def test_a_restarted_leader_comes_back_as_follower_that_voted_for_itself() -> None:
    net = Network([1, 2, 3])
    net.elect(1)
    c1 = net.restart(1).core
    assert c1.role.role is Role.FOLLOWER
    assert (c1.term, c1.vote) == (1, N1)


def test_vote_change_requires_sync_before_the_response_is_sent() -> None:
    n = lone_core(node_id=2)
    n.core.step(RequestVote(N1, NodeId(2), Term(1), LogIndex(0), Term(0)))
    rd = n.core.ready()
    assert rd.must_sync
    assert rd.hard_state is not None and rd.hard_state.vote == N1
    assert any(isinstance(m, RequestVoteResponse) and m.granted for m in rd.messages)


def test_restart_after_a_torn_write_keeps_term_at_least_the_last_log_term() -> None:
    # Entries of term 3 reached the disk, the hard state of the same Ready did not.
    n = lone_core(terms=[1, 3])
    n.storage.set_hard_state(HardState(Term(2), N3))
    c = RaftCore(n.core.cfg, n.storage, n.core.rng)
    assert (c.term, c.vote) == (3, NO_NODE)
    rd = c.ready()
    assert rd.hard_state is not None and rd.hard_state.term == 3 and rd.must_sync
