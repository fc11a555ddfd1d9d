"""Read-index reads, leadership transfer, membership (voters one at a time, observers),
snapshots and log compaction, flow control and batching."""

from __future__ import annotations

import pytest
from raft_harness import Network, ids, lone_core

from raft.core import ConfChangeError, InvalidMessageError, NotLeaderError, ProposalDroppedError
from raft.messages import (
    AppendEntries,
    AppendEntriesResponse,
    Heartbeat,
    HeartbeatResponse,
    InstallSnapshot,
    InstallSnapshotResponse,
    RequestVote,
    TimeoutNow,
)
from raft.tracker import ProgressState
from raft.types import (
    ConfChange,
    ConfChangeKind,
    ConfState,
    Entry,
    EntryKind,
    LogIndex,
    NodeId,
    Role,
    Term,
)

N1, N2, N3, N4 = NodeId(1), NodeId(2), NodeId(3), NodeId(4)


# ---------------------------------------------------------------------------- read index
def test_leader_read_index_waits_for_a_heartbeat_quorum() -> None:
    net = Network([1, 2, 3])
    c = net.elect(1)
    net.propose(1, b"x")
    net.drop(lambda m: isinstance(m, HeartbeatResponse))
    c.read_index(b"r1")
    net.stabilize()
    assert net[1].read_states == []
    net.drop_filters.clear()
    c.read_index(b"r2")
    net.stabilize()
    # One quorum round confirms the earlier read too.
    assert [(rs.context, rs.index) for rs in net[1].read_states] == [
        (b"r1", c.log.committed),
        (b"r2", c.log.committed),
    ]


def test_read_index_is_not_served_before_the_leader_commits_in_its_term() -> None:
    net = Network([1, 2, 3])
    net.drop(lambda m: isinstance(m, AppendEntries | AppendEntriesResponse))
    c = net.elect(1)
    c.read_index(b"r")
    net.stabilize()
    assert net[1].read_states == []
    net.drop_filters.clear()
    net.tick(1, 2)  # heartbeats trigger the no-op's replication, which commits it
    assert c.log.term(c.log.committed) == c.term
    net.tick(1, 2)
    assert [rs.context for rs in net[1].read_states] == [b"r"]


def test_partitioned_leader_cannot_serve_a_read_index_read() -> None:
    net = Network([1, 2, 3])
    c = net.elect(1)
    net.isolate(1)
    c.read_index(b"r")
    net.tick(1, 3)
    assert net[1].read_states == []


def test_follower_read_index_goes_through_the_leader() -> None:
    net = Network([1, 2, 3])
    net.elect(1)
    net.propose(1, b"x")
    net.core(2).read_index(b"f")
    net.stabilize()
    assert [(rs.context, rs.index) for rs in net[2].read_states] == [
        (b"f", net.core(1).log.committed)
    ]


def test_read_index_without_a_known_leader_raises() -> None:
    net = Network([1, 2, 3])
    with pytest.raises(NotLeaderError):
        net.core(2).read_index(b"x")


def test_single_voter_leader_serves_read_index_at_once() -> None:
    net = Network([1])
    c = net.elect(1)
    c.read_index(b"r")
    net.stabilize()
    assert [rs.context for rs in net[1].read_states] == [b"r"]


# ---------------------------------------------------------------------------- transfer
def test_leadership_transfer_to_an_up_to_date_voter() -> None:
    net = Network([1, 2, 3])
    net.elect(1)
    net.propose(1, b"x")
    net.core(1).transfer_leadership(N2)
    net.stabilize()
    assert net.leaders() == [N2]
    assert net.core(2).term == 2
    assert net.core(1).role.role is Role.FOLLOWER


def test_leadership_transfer_catches_the_transferee_up_first() -> None:
    net = Network([1, 2, 3])
    c = net.elect(1)
    net.isolate(3)
    net.propose(1, b"a")
    net.propose(1, b"b")
    net.recover()
    net.drop(lambda m: isinstance(m, TimeoutNow))
    c.transfer_leadership(N3)
    net.stabilize()
    assert net.core(3).log.last_index() == c.log.last_index()
    sent = [m for m in net.dropped if isinstance(m, TimeoutNow)]
    assert [m.dst for m in sent] == [N3]


def test_leader_refuses_proposals_while_transferring() -> None:
    net = Network([1, 2, 3])
    c = net.elect(1)
    net.isolate(2)
    c.transfer_leadership(N2)
    with pytest.raises(ProposalDroppedError):
        c.propose(b"x")


def test_leadership_transfer_is_aborted_after_an_election_timeout() -> None:
    net = Network([1, 2, 3])
    c = net.elect(1)
    net.isolate(2)
    c.transfer_leadership(N2)
    assert c.transferee == N2
    net.tick(1, c.cfg.election_timeout_ticks)
    assert c.transferee == NodeId(0)
    assert c.is_leader  # node 3 still answers heartbeats, so check-quorum keeps it
    c.propose(b"x")


def test_transfer_campaign_ignores_the_leader_lease() -> None:
    net = Network([1, 2, 3])
    net.elect(1)
    net.core(1).transfer_leadership(N3)
    net.stabilize()
    votes = [m for m in net.delivered if isinstance(m, RequestVote) and m.src == N3]
    assert votes and all(m.transfer and not m.pre_vote for m in votes)
    assert net.leaders() == [N3]


def test_transfer_to_an_observer_is_ignored() -> None:
    net = Network([1, 2], observers=[3])
    c = net.elect(1)
    c.transfer_leadership(N3)
    assert c.transferee == NodeId(0)


def test_follower_forwards_a_transfer_request_to_the_leader() -> None:
    net = Network([1, 2, 3])
    net.elect(1)
    net.core(3).transfer_leadership(N2)
    net.stabilize()
    assert net.leaders() == [N2]


# ---------------------------------------------------------------------------- membership
def _wait_committed(net: Network, leader: int) -> None:
    net.tick(leader, 2)


def test_add_voter_takes_effect_when_appended_and_the_new_voter_catches_up() -> None:
    net = Network([1, 2, 3], extra=[4])
    c = net.elect(1)
    net.propose(1, b"before")
    idx = c.propose_conf_change(ConfChange(ConfChangeKind.ADD_VOTER, N4))
    assert c.conf.voters == ids(1, 2, 3, 4)  # effective at once, before commit
    assert c.log.committed < idx
    net.stabilize()
    _wait_committed(net, 1)
    assert c.log.committed >= idx
    c4 = net.core(4)
    assert c4.conf.voters == ids(1, 2, 3, 4)
    assert net[4].applied_data() == [b"before"]


def test_only_one_conf_change_may_be_pending() -> None:
    net = Network([1, 2, 3], extra=[4, 5])
    c = net.elect(1)
    net.isolate(2)
    net.isolate(3)
    c.propose_conf_change(ConfChange(ConfChangeKind.ADD_VOTER, N4))
    with pytest.raises(ConfChangeError, match="pending"):
        c.propose_conf_change(ConfChange(ConfChangeKind.ADD_VOTER, NodeId(5)))


def test_no_conf_change_before_the_leader_commits_in_its_term() -> None:
    net = Network([1, 2, 3], extra=[4])
    net.drop(lambda m: isinstance(m, AppendEntries | AppendEntriesResponse))
    c = net.elect(1)
    with pytest.raises(ConfChangeError, match="committed an entry in its term"):
        c.propose_conf_change(ConfChange(ConfChangeKind.ADD_VOTER, N4))


def test_removing_the_last_voter_is_refused() -> None:
    net = Network([1])
    c = net.elect(1)
    with pytest.raises(ConfChangeError):
        c.propose_conf_change(ConfChange(ConfChangeKind.REMOVE_NODE, N1))


def test_remove_voter_shrinks_the_quorum() -> None:
    net = Network([1, 2, 3])
    c = net.elect(1)
    c.propose_conf_change(ConfChange(ConfChangeKind.REMOVE_NODE, N3))
    net.stabilize()
    _wait_committed(net, 1)
    net.isolate(3)
    net.isolate(2)
    # With voters {1, 2}, node 1 alone is not a majority...
    idx = net.propose(1, b"x")
    assert c.log.committed < idx
    net.recover()
    net.isolate(3)
    net.tick(1, 2)
    # ... and node 3 no longer counts toward one.
    assert c.log.committed >= idx
    assert c.conf.voters == ids(1, 2)


def test_a_leader_that_removes_itself_steps_down_once_the_change_commits() -> None:
    net = Network([1, 2, 3])
    c = net.elect(1)
    c.propose_conf_change(ConfChange(ConfChangeKind.REMOVE_NODE, N1))
    assert c.is_leader  # still leads the new configuration until it commits
    net.stabilize()
    net.tick(1)
    assert not c.is_leader
    net.tick_all(3 * c.cfg.election_timeout_ticks)
    leaders = net.leaders()
    assert len(leaders) == 1 and leaders[0] in (N2, N3)
    assert not c.promotable()


def test_removed_leader_without_quorum_still_campaigns_until_its_removal_commits() -> None:
    """Thesis §4.2.2: a server outside C_new may still be needed while C_new is uncommitted."""
    net = Network([1, 2])
    c = net.elect(1)
    net.isolate(2)
    c.propose_conf_change(ConfChange(ConfChangeKind.REMOVE_NODE, N1))
    assert c.conf.voters == ids(2)
    assert c.promotable()  # a voter of the previous configuration, C_new uncommitted
    net.tick(1, c.cfg.election_timeout_ticks + 1)  # check-quorum: node 2 is silent
    assert not c.is_leader
    net.recover()
    net.tick_all(6 * c.cfg.election_timeout_ticks)
    assert net.leaders() == [N2]
    assert net.core(2).conf.voters == ids(2)


def test_observer_replicates_but_never_votes_or_counts() -> None:
    net = Network([1, 2, 3], observers=[4])
    c = net.elect(1)
    assert not [m for m in net.delivered if isinstance(m, RequestVote) and m.dst == N4]
    net.isolate(2)
    net.isolate(3)
    idx = net.propose(1, b"x")
    assert c.log.committed < idx  # node 4's copy does not make a majority
    assert net.core(4).log.last_index() == idx
    net.tick(4, 100)
    assert net.core(4).role.role is Role.FOLLOWER and net.core(4).term == c.term


def test_observer_can_be_promoted_to_voter() -> None:
    net = Network([1, 2, 3], observers=[4])
    c = net.elect(1)
    net.propose(1, b"x")
    c.propose_conf_change(ConfChange(ConfChangeKind.ADD_VOTER, N4))
    net.stabilize()
    _wait_committed(net, 1)
    assert net.core(4).conf == ConfState(ids(1, 2, 3, 4), frozenset())
    assert net.core(4).promotable()
    net.core(1).transfer_leadership(N4)
    net.stabilize()
    assert net.leaders() == [N4]


def test_conf_change_entry_carries_the_whole_configuration() -> None:
    net = Network([1, 2, 3], extra=[4])
    c = net.elect(1)
    idx = c.propose_conf_change(ConfChange(ConfChangeKind.ADD_OBSERVER, N4))
    e = c.log.slice(idx, LogIndex(idx + 1), None)[0]
    assert e.kind is EntryKind.CONF_CHANGE
    assert ConfState.from_bytes(e.data) == ConfState(ids(1, 2, 3), ids(4))


def test_follower_reverts_to_the_previous_configuration_when_the_entry_is_truncated() -> None:
    n = lone_core(node_id=2, terms=[1])
    c = n.core
    new = ConfState(ids(1, 2, 3, 4))
    cc = Entry(LogIndex(2), Term(1), EntryKind.CONF_CHANGE, new.to_bytes())
    c.step(AppendEntries(N1, N2, Term(1), LogIndex(1), Term(1), (cc,), LogIndex(1)))
    assert c.conf == new and c.conf_index == 2  # effective when appended
    # A leader of term 2 never had it and overwrites index 2.
    other = Entry(LogIndex(2), Term(2), EntryKind.NORMAL, b"x")
    c.step(AppendEntries(N3, N2, Term(2), LogIndex(1), Term(1), (other,), LogIndex(1)))
    assert c.conf == ConfState(ids(1, 2, 3))
    assert c.conf_index == 0


def test_restart_recovers_the_configuration_from_the_log() -> None:
    net = Network([1, 2, 3], extra=[4])
    c = net.elect(1)
    c.propose_conf_change(ConfChange(ConfChangeKind.ADD_VOTER, N4))
    net.stabilize()
    c2 = net.restart(2).core
    assert c2.conf.voters == ids(1, 2, 3, 4)


# ---------------------------------------------------------------------------- snapshots
def _compact(net: Network, n: int) -> None:
    node = net[n]
    c = node.core
    node.storage.create_snapshot(c.log.applied, c.applied_conf, b"state@%d" % c.log.applied)
    node.storage.compact(c.log.applied)


def test_leader_sends_a_snapshot_to_a_follower_behind_its_first_index() -> None:
    net = Network([1, 2, 3])
    c = net.elect(1)
    net.isolate(3)
    for i in range(5):
        net.propose(1, b"%d" % i)
    _compact(net, 1)
    net.recover()
    net.tick(1, 2)
    snaps = [m for m in net.delivered if isinstance(m, InstallSnapshot)]
    assert [m.dst for m in snaps] == [N3]
    node3 = net[3]
    assert node3.snapshots
    assert node3.snapshots[-1].data == b"state@%d" % (c.log.first_index() - 1)
    assert node3.core.log.committed == c.log.committed
    assert node3.core.log.last_index() == c.log.last_index()
    net.propose(1, b"after")
    net.tick(1, 2)
    assert node3.applied_data()[-1:] == [b"after"]
    pr = c.progress(N3)
    assert pr is not None and pr.state is ProgressState.REPLICATE


def test_follower_installs_the_snapshot_and_takes_its_configuration() -> None:
    net = Network([1, 2, 3], extra=[4])
    c = net.elect(1)
    net.isolate(4)
    c.propose_conf_change(ConfChange(ConfChangeKind.ADD_OBSERVER, N4))
    net.stabilize()
    net.tick(1, 2)
    for i in range(3):
        net.propose(1, b"%d" % i)
    _compact(net, 1)
    net.recover()
    net.tick(1, 4)
    c4 = net.core(4)
    assert net[4].snapshots, "node 4 got no snapshot"
    assert c4.conf == ConfState(ids(1, 2, 3), ids(4))
    assert c4.log.first_index() == net[4].snapshots[-1].index + 1


def test_lost_snapshot_is_resent_after_an_election_timeout() -> None:
    net = Network([1, 2, 3])
    c = net.elect(1)
    net.isolate(3)
    for i in range(3):
        net.propose(1, b"%d" % i)
    _compact(net, 1)
    net.recover()
    net.drop(lambda m: isinstance(m, InstallSnapshot))
    net.tick(1, 2)
    pr = c.progress(N3)
    assert pr is not None and pr.state is ProgressState.SNAPSHOT
    net.drop_filters.clear()
    net.tick(1, c.cfg.election_timeout_ticks + 2)
    assert net.core(3).log.last_index() == c.log.last_index()


def test_restart_from_a_snapshot_replays_only_the_suffix() -> None:
    net = Network([1, 2, 3])
    net.elect(1)
    for i in range(4):
        net.propose(1, b"%d" % i)
    net.tick(1, 2)
    _compact(net, 2)
    node = net.restart(2)
    assert node.core.log.applied == node.storage.snapshot().index
    net.propose(1, b"z")
    net.tick(1, 2)
    assert node.applied_data() == [b"z"]


# ---------------------------------------------------------------------------- flow control
def test_probe_state_sends_one_append_until_answered() -> None:
    net = Network([1, 2, 3])
    c = net.elect(1)
    net.isolate(2)
    pr = c.progress(N2)
    assert pr is not None
    pr.become_probe()
    before = len(net.dropped)
    for i in range(3):
        net.propose(1, b"%d" % i)
    to2 = [m for m in net.dropped[before:] if isinstance(m, AppendEntries) and m.dst == N2]
    assert len(to2) == 1


def test_replicate_state_bounds_appends_in_flight() -> None:
    net = Network([1, 2, 3], max_inflight_msgs=3)
    c = net.elect(1)
    net.isolate(2)
    pr = c.progress(N2)
    assert pr is not None and pr.state is ProgressState.REPLICATE
    before = len(net.dropped)
    for i in range(10):
        net.propose(1, b"%d" % i)
    # (Empty appends that only carry the commit index do not occupy the window.)
    to2 = [
        m
        for m in net.dropped[before:]
        if isinstance(m, AppendEntries) and m.dst == N2 and m.entries
    ]
    assert len(to2) == 3
    assert pr.is_paused()


def test_heartbeat_response_unsticks_a_window_full_of_lost_appends() -> None:
    net = Network([1, 2, 3], max_inflight_msgs=2)
    c = net.elect(1)
    net.drop(lambda m: isinstance(m, AppendEntries) and m.dst == N2)
    for i in range(5):
        net.propose(1, b"%d" % i)
    net.drop_filters.clear()
    net.tick(1, 6)
    assert net.core(2).log.last_index() == c.log.last_index()


def test_appends_are_batched_up_to_max_entries_bytes_per_msg() -> None:
    net = Network([1, 2, 3], max_entries_bytes_per_msg=100)
    c = net.elect(1)
    net.isolate(2)
    for _ in range(10):
        net.propose(1, b"x" * 20)
    net.recover()
    before = len(net.delivered)
    net.tick(1, 2)
    apps = [
        m
        for m in net.delivered[before:]
        if isinstance(m, AppendEntries) and m.dst == N2 and m.entries
    ]
    assert apps
    assert all(sum(e.size_bytes() for e in m.entries) <= 100 or len(m.entries) == 1 for m in apps)
    assert max(len(m.entries) for m in apps) >= 2
    assert net.core(2).log.last_index() == c.log.last_index()


def test_fast_back_off_skips_a_whole_divergent_term_per_round_trip() -> None:
    # Follower 2 holds 20 entries of term 2 that the leader (term 3 log) never had.
    leader_log = [1, 1, 1, 3]
    net = Network(
        [1, 2, 3], logs={1: leader_log, 2: [1, 1, 1] + [2] * 20, 3: leader_log}, pre_vote=False
    )
    net.elect(1)
    net.tick(1, 2)
    rejects = [
        m
        for m in net.delivered
        if isinstance(m, AppendEntriesResponse) and m.src == N2 and m.reject
    ]
    assert len(rejects) <= 2
    assert net.log_of(2) == net.log_of(1)


def test_heartbeat_carries_commit_no_higher_than_the_followers_match() -> None:
    net = Network([1, 2, 3])
    c = net.elect(1)
    net.isolate(3)
    net.propose(1, b"x")
    net.recover()
    net.drop(lambda m: isinstance(m, AppendEntries))
    before = len(net.dropped) + len(net.delivered)
    net.tick(1, 2)
    beats = [m for m in net.delivered if isinstance(m, Heartbeat) and m.dst == N3]
    assert beats and beats[-1].commit < c.log.committed
    assert before  # the run produced traffic


# ---------------------------------------------------------------------------- refused input
def _state(c: object) -> tuple[object, ...]:
    return (c.term, c.vote, c.role, c.log.committed, c.log.last_index(), c.conf)  # type: ignore[attr-defined]


def test_a_heartbeat_committing_beyond_the_followers_log_is_refused_and_changes_nothing() -> None:
    # The leader commits on a follower only what it acknowledged holding; a heartbeat that
    # says otherwise tripped commit_to's invariant and ended the node task (issue 17).
    net = Network([1, 2, 3])
    c1 = net.elect(1)
    net.propose(1, b"x")
    f = net.core(2)
    before = _state(f)
    bad = Heartbeat(N1, N2, c1.term, LogIndex(f.log.last_index() + 1))
    with pytest.raises(InvalidMessageError, match="beyond the last index"):
        f.check_message(bad)
    with pytest.raises(InvalidMessageError, match="commits 3, beyond the last index 2 of node 2"):
        f.step(bad)
    assert _state(f) == before and not f.has_ready()
    # From a newer term too (it would first have made the node follow that term).
    with pytest.raises(InvalidMessageError):
        f.step(Heartbeat(N3, N2, Term(c1.term + 5), LogIndex(f.log.last_index() + 1)))
    assert _state(f) == before
    # A stale leader's heartbeat only gets our term back: its commit is not used.
    f.step(Heartbeat(N3, N2, Term(0), LogIndex(10**6)))
    f.step(Heartbeat(N1, N2, c1.term, LogIndex(f.log.last_index())))  # honest: fine


def test_a_response_matching_beyond_the_leaders_log_is_refused_and_changes_nothing() -> None:
    # Accepted, it set match past the log's end and the next append found no term to send:
    # "entries compacted but no snapshot to send" ended the node task.
    net = Network([1, 2, 3])
    c1 = net.elect(1)
    net.propose(1, b"x")
    last = c1.log.last_index()
    before = _state(c1)
    for bad in (
        AppendEntriesResponse(N2, N1, c1.term, LogIndex(last + 1)),
        InstallSnapshotResponse(N2, N1, c1.term, LogIndex(last + 7)),
    ):
        with pytest.raises(InvalidMessageError, match=f"beyond the last index {last}"):
            c1.step(bad)
    assert _state(c1) == before and c1.progress(N2).match == last  # type: ignore[union-attr]
    # A rejection names the index refused, which may be anything: not checked.
    c1.step(AppendEntriesResponse(N2, N1, c1.term, LogIndex(last + 9), reject=True))
    # Not the leader's term: ignored or followed, never applied to progress.
    net.core(3).step(AppendEntriesResponse(N2, N3, c1.term, LogIndex(last + 1)))
