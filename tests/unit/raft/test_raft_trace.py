"""The core's trace: every role change, term change, vote, leadership transfer,
configuration switch, snapshot restore and log truncation reaches the injected tracer as a
``TraceEvent`` with the node, its term and the fields that explain it."""

from __future__ import annotations

import logging

import pytest
from raft_harness import Network, ids, lone_core

from raft.core import RaftCore
from raft.messages import AppendEntries, RequestVote, RequestVoteResponse
from raft.types import (
    ConfChange,
    ConfChangeKind,
    ConfState,
    Entry,
    HardState,
    LogIndex,
    NodeId,
    Term,
    TraceEvent,
    TraceKind,
)

N1, N2, N3, N4 = NodeId(1), NodeId(2), NodeId(3), NodeId(4)
ROLE_KINDS = {
    TraceKind.BECAME_FOLLOWER,
    TraceKind.BECAME_PRE_CANDIDATE,
    TraceKind.BECAME_CANDIDATE,
    TraceKind.BECAME_LEADER,
}


def of(events: list[TraceEvent], node: int, *kinds: TraceKind) -> list[TraceEvent]:
    return [e for e in events if e.node == node and (not kinds or e.kind in kinds)]


def test_a_new_core_traces_its_configuration_and_that_it_starts_as_follower() -> None:
    n = lone_core(term=4)
    assert [(e.kind, e.term, dict(e.detail)) for e in n.events] == [
        (TraceKind.CONF_CHANGED, 4, {"voters": (1, 2, 3), "observers": (), "index": 0}),
        (TraceKind.BECAME_FOLLOWER, 4, {"leader": 0, "why": "start"}),
    ]


def test_an_election_traces_pre_vote_term_change_candidacy_votes_and_leadership() -> None:
    net = Network([1, 2, 3])
    net.events.clear()
    net.elect(1)
    assert [(e.kind, e.term) for e in of(net.events, 1)] == [
        (TraceKind.BECAME_PRE_CANDIDATE, 0),
        (TraceKind.VOTE_RECEIVED, 0),  # its own pre-vote
        (TraceKind.VOTE_RECEIVED, 0),  # node 2's: a majority
        (TraceKind.TERM_CHANGED, 1),
        (TraceKind.BECAME_CANDIDATE, 1),
        (TraceKind.VOTE_RECEIVED, 1),
        (TraceKind.VOTE_RECEIVED, 1),
        (TraceKind.BECAME_LEADER, 1),
    ]
    voter = of(net.events, 2)
    assert [e.kind for e in voter] == [
        TraceKind.VOTE_GRANTED,  # the pre-vote: no term change
        TraceKind.TERM_CHANGED,
        TraceKind.BECAME_FOLLOWER,
        TraceKind.VOTE_GRANTED,
    ]
    assert [dict(e.detail) for e in voter] == [
        {"to": 1, "pre_vote": True},
        {"prev": 0},
        {"leader": 0, "why": "higher-term", "src": 1},
        {"to": 1, "pre_vote": False},
    ]
    assert of(net.events, 1, TraceKind.BECAME_LEADER)[0].detail == {"noop": 1}


def test_event_str_is_one_log_line_with_node_term_and_fields() -> None:
    ev = TraceEvent(N2, Term(3), TraceKind.VOTE_GRANTED, {"to": 1, "pre_vote": False})
    assert str(ev) == "2 granted vote [term=3 to=1 pre_vote=False]"
    ev = TraceEvent(N1, Term(1), TraceKind.CONF_CHANGED, {"voters": (1, 2), "observers": ()})
    assert str(ev) == "1 switched configuration [term=1 voters=(1 2) observers=()]"


@pytest.mark.parametrize(
    ("vote", "log_terms", "why"),
    [(3, [], "voted-3"), (0, [1, 2], "log-behind")],
)
def test_a_rejected_vote_is_traced_with_its_reason(
    vote: int, log_terms: list[int], why: str
) -> None:
    n = lone_core(node_id=2, terms=log_terms, term=2, vote=vote)
    n.events.clear()
    n.core.step(RequestVote(N1, N2, Term(2), LogIndex(1), Term(1)))
    assert [(e.kind, dict(e.detail)) for e in n.events] == [
        (TraceKind.VOTE_REJECTED, {"to": 1, "pre_vote": False, "why": why})
    ]


def test_a_vote_request_ignored_for_the_lease_or_a_stale_term_is_traced() -> None:
    net = Network([1, 2, 3])
    net.elect(1)
    net.events.clear()
    c2 = net.core(2)
    c2.step(RequestVote(N3, N2, Term(5), LogIndex(9), Term(5)))  # within the leader's lease
    c2.step(RequestVote(N3, N2, Term(0), LogIndex(9), Term(5)))  # older than our term
    assert [(e.kind, e.detail["why"]) for e in of(net.events, 2)] == [
        (TraceKind.VOTE_IGNORED, "lease"),
        (TraceKind.VOTE_IGNORED, "stale-term"),
    ]
    assert c2.term == 1


def test_a_lost_election_is_traced() -> None:
    n = lone_core(pre_vote=False)
    n.core.campaign()
    n.events.clear()
    for v in (N2, N3):
        n.core.step(RequestVoteResponse(v, N1, Term(1), False))
    assert [e.kind for e in n.events][-1] is TraceKind.BECAME_FOLLOWER
    assert n.events[-1].detail["why"] == "election-lost"
    assert [e.detail["rejected_total"] for e in of(n.events, 1, TraceKind.VOTE_RECEIVED)] == [1, 2]


def test_check_quorum_step_down_is_traced_with_its_reason() -> None:
    net = Network([1, 2, 3])
    c = net.elect(1)
    net.isolate(1)
    net.events.clear()
    net.tick(1, c.cfg.election_timeout_ticks)
    assert [(e.kind, e.detail["why"]) for e in of(net.events, 1, *ROLE_KINDS)] == [
        (TraceKind.BECAME_FOLLOWER, "check-quorum")
    ]


def test_leadership_transfer_traces_start_timeout_now_and_the_new_leader() -> None:
    net = Network([1, 2, 3])
    c = net.elect(1)
    net.events.clear()
    c.transfer_leadership(N3)
    net.stabilize()
    assert [
        (e.node, e.kind) for e in net.events if e.kind.name.startswith(("TRANSFER", "TIME"))
    ] == [
        (N1, TraceKind.TRANSFER_STARTED),
        (N1, TraceKind.TIMEOUT_NOW_SENT),
    ]
    cand = of(net.events, 3, TraceKind.BECAME_CANDIDATE)
    assert len(cand) == 1 and cand[0].detail["transfer"] is True
    assert of(net.events, 3, TraceKind.BECAME_LEADER)


def test_an_unfinished_transfer_is_traced_as_aborted() -> None:
    net = Network([1, 2, 3])
    c = net.elect(1)
    net.isolate(3)
    net.events.clear()
    c.transfer_leadership(N3)
    net.tick(1, c.cfg.election_timeout_ticks)
    aborted = of(net.events, 1, TraceKind.TRANSFER_ABORTED)
    assert [dict(e.detail) for e in aborted] == [{"to": 3, "why": "timeout"}]


def test_membership_change_is_traced_on_the_leader_and_the_followers() -> None:
    net = Network([1, 2, 3], extra=[4])
    c = net.elect(1)
    net.events.clear()
    idx = c.propose_conf_change(ConfChange(ConfChangeKind.ADD_VOTER, N4))
    net.stabilize()
    switched = {e.node: dict(e.detail) for e in net.events if e.kind is TraceKind.CONF_CHANGED}
    assert switched == {
        n: {"voters": (1, 2, 3, 4), "observers": (), "index": idx} for n in (N1, N2, N3, N4)
    }


def test_log_truncation_on_a_follower_is_traced() -> None:
    n = lone_core(node_id=2, terms=[1, 1, 1])
    n.events.clear()
    ent = Entry(LogIndex(2), Term(2), data=b"x")
    n.core.step(AppendEntries(N3, N2, Term(2), LogIndex(1), Term(1), (ent,), LogIndex(1)))
    assert (TraceKind.LOG_TRUNCATED, {"index": 2, "last": 3}) in [
        (e.kind, dict(e.detail)) for e in n.events
    ]
    # Appending new entries at the end is not a truncation.
    n.events.clear()
    ent = Entry(LogIndex(3), Term(2), data=b"y")
    n.core.step(AppendEntries(N3, N2, Term(2), LogIndex(2), Term(2), (ent,), LogIndex(1)))
    assert not of(n.events, 2, TraceKind.LOG_TRUNCATED)


def test_snapshot_install_is_traced_with_the_new_configuration() -> None:
    net = Network([1, 2, 3])
    c = net.elect(1)
    net.isolate(3)
    for i in range(3):
        net.propose(1, b"%d" % i)
    node = net[1]
    node.storage.create_snapshot(c.log.applied, c.applied_conf, b"s")
    node.storage.compact(c.log.applied)
    net.recover()
    net.events.clear()
    net.tick(1, 2)
    kinds = [(e.kind, dict(e.detail)) for e in of(net.events, 3)]
    assert kinds[:2] == [
        (TraceKind.SNAPSHOT_RESTORED, {"index": c.log.applied, "snap_term": 1}),
        (TraceKind.CONF_CHANGED, {"voters": (1, 2, 3), "observers": (), "index": c.log.applied}),
    ]


def test_a_restart_after_a_torn_write_traces_the_term_raise() -> None:
    n = lone_core(terms=[1, 3])
    n.storage.set_hard_state(HardState(Term(2), N3))
    events: list[TraceEvent] = []
    RaftCore(n.core.cfg, n.storage, n.core.rng, trace=events.append)
    assert (TraceKind.TERM_CHANGED, 3, {"prev": 2, "why": "last-log-term"}) in [
        (e.kind, e.term, dict(e.detail)) for e in events
    ]


def test_a_removed_leader_traces_why_it_stepped_down() -> None:
    net = Network([1, 2, 3])
    c = net.elect(1)
    net.propose(1, b"x")
    net.events.clear()
    c.propose_conf_change(ConfChange(ConfChangeKind.REMOVE_NODE, N1))
    net.stabilize()
    net.tick(1)
    assert [e.detail.get("why") for e in of(net.events, 1, TraceKind.BECAME_FOLLOWER)] == [
        "removed"
    ]
    assert of(net.events, 1, TraceKind.TIMEOUT_NOW_SENT)
    assert ConfState(ids(2, 3)) == c.conf


def test_the_node_shell_logs_each_transition_on_the_raft_core_logger(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from raft.aio import node

    ev = TraceEvent(N1, Term(2), TraceKind.BECAME_LEADER, {"noop": 5})
    with caplog.at_level(logging.INFO, logger="raft.core"):
        node._log_transition(ev)
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        ("raft.core", logging.INFO, "1 became leader [term=2 noop=5]")
    ]


def test_a_pre_vote_of_a_stale_term_is_traced_as_rejected() -> None:
    n = lone_core(node_id=2, term=5)
    n.events.clear()
    n.core.step(RequestVote(N1, N2, Term(3), LogIndex(9), Term(3), pre_vote=True))
    assert [(e.kind, dict(e.detail)) for e in n.events] == [
        (TraceKind.VOTE_REJECTED, {"to": 1, "pre_vote": True, "why": "stale-term"})
    ]


def test_a_candidate_that_hears_from_the_leader_of_its_term_traces_becoming_follower() -> None:
    n = lone_core(pre_vote=False)
    n.core.campaign()
    n.events.clear()
    n.core.step(AppendEntries(N2, N1, Term(1), LogIndex(0), Term(0), (), LogIndex(0)))
    assert [(e.kind, dict(e.detail)) for e in n.events] == [
        (TraceKind.BECAME_FOLLOWER, {"leader": 2, "why": "leader-of-term"})
    ]
