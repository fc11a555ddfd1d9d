"""RaftNode on real sockets and real files: three nodes in one process on 127.0.0.1."""

from __future__ import annotations

import asyncio
import random

import pytest
from raft_node_harness import Cluster

from raft.aio.node import NotLeaderError
from raft.messages import RequestVote, RequestVoteResponse
from raft.types import Entry, LogIndex, NodeId, Role, Term
from storage.fileio import LazyFileLayer


def run(coro):  # type: ignore[no-untyped-def]
    async def limited():  # type: ignore[no-untyped-def]
        async with asyncio.timeout(30):
            return await coro

    return asyncio.run(limited())


def test_three_nodes_elect_one_leader_and_commit_proposals(tmp_path) -> None:
    async def main() -> None:
        c = Cluster(tmp_path, [1, 2, 3])
        await c.start_all()
        try:
            lead = await c.leader()
            idx = await lead.propose(b"first")
            indexes = await lead.propose_many([b"p%d" % i for i in range(300)])
            assert indexes == list(range(idx + 1, idx + 301))
            want = [b"first", *(b"p%d" % i for i in range(300))]
            assert c.data(lead.id) == want  # applied before propose returned
            await c.wait_for(
                lambda: all(c.data(i) == want for i in (1, 2, 3)),
                what="followers to apply everything",
            )
            st = lead.status()
            assert st.role == "leader" and st.commit >= indexes[-1]
            assert {f.node_id for f in st.followers} == {1, 2, 3} - {lead.id}
            assert all(f.match >= indexes[-1] - 300 for f in st.followers)
            follower = c.nodes[next(i for i in (1, 2, 3) if i != lead.id)]
            with pytest.raises(NotLeaderError) as ei:
                await follower.propose(b"nope")
            assert ei.value.leader_id == lead.id
            assert ei.value.leader_url == c.urls[lead.id]
            # a linearizable read on a follower sees everything committed before it
            ri = await follower.read_index()
            assert ri >= indexes[-1] and follower.applied >= ri
        finally:
            await c.stop_all()

    run(main())


def test_new_leader_commits_after_the_leader_stops_and_the_old_one_catches_up(tmp_path) -> None:
    async def main() -> None:
        c = Cluster(tmp_path, [1, 2, 3])
        await c.start_all()
        try:
            lead = await c.leader()
            old_id, old_term = lead.id, lead.status().term
            await lead.propose_many([b"a%d" % i for i in range(50)])
            await c.stop(old_id)
            new = await c.leader(exclude=old_id)
            assert new.id != old_id and new.status().term > old_term
            await new.propose(b"after-failover")
            await c.start(old_id)  # from disk
            want = [*(b"a%d" % i for i in range(50)), b"after-failover"]
            await c.wait_for(lambda: c.data(old_id) == want, what="restarted node to catch up")
            assert c.nodes[old_id].role is Role.FOLLOWER
            assert c.nodes[old_id].status().term == new.status().term
            # the configuration survived the restart: it can still vote and be elected
            assert c.nodes[old_id].status().voters == (1, 2, 3)
        finally:
            await c.stop_all()

    run(main())


def test_restarted_node_keeps_its_term_and_vote_and_does_not_vote_twice(tmp_path) -> None:
    async def main() -> None:
        c = Cluster(tmp_path, [1, 2, 3])
        await c.start_all()
        try:
            lead = await c.leader()
            await lead.propose(b"x")
            # The leader voted for itself in its term (Raft §5.2). After a restart it must
            # still remember that vote, so it cannot vote for anyone else in that term
            # (KRaft's "Resigned" state on restart).
            voter = lead.id
            st = c.nodes[voter].status()
            term, vote = st.term, st.vote
            assert vote == voter
            # stop everything so nobody moves the term on, then restart only ``voter``
            await c.stop_all()
            node = await c.start(voter)
            assert (node.status().term, node.status().vote) == (term, vote)
            # A third node asks for its vote in the same term with a log as good as any:
            # it must refuse (Raft §5.2: one vote per term, remembered across restarts).
            other = next(i for i in (1, 2, 3) if i != voter)
            sent: list[object] = []
            orig = node.transport.send
            node.transport.send = lambda to, m: sent.append(m) or orig(to, m)  # type: ignore[method-assign]
            node._on_messages(
                other,
                [
                    RequestVote(
                        NodeId(other), NodeId(voter), Term(term), LogIndex(10**9), Term(term)
                    ).to_wire()
                ],
            )
            await c.wait_for(
                lambda: any(m["type"] == "RequestVoteResponse" for m in sent),
                what="a vote response",
            )
            resp = next(m for m in sent if m["type"] == "RequestVoteResponse")
            assert resp["granted"] is False and resp["term"] == term
            assert isinstance(RequestVoteResponse.from_wire(resp), RequestVoteResponse)
            assert node.status().vote == vote
        finally:
            await c.stop_all()

    run(main())


def test_observer_replicates_but_does_not_vote(tmp_path) -> None:
    async def main() -> None:
        c = Cluster(tmp_path, [1, 2], observers=[3])
        await c.start_all()
        try:
            lead = await c.leader()
            await lead.propose_many([b"o%d" % i for i in range(20)])
            want = [b"o%d" % i for i in range(20)]
            await c.wait_for(lambda: c.data(3) == want, what="observer to apply")
            obs = c.nodes[3]
            assert obs.status().observers == (3,) and 3 not in obs.status().voters
            assert [f.is_observer for f in lead.status().followers if f.node_id == 3] == [True]
            # With the other voter gone, one voter and one observer cannot elect anyone.
            other = 2 if lead.id == 1 else 1
            await c.stop(lead.id)
            await asyncio.sleep(1.0)  # > 2 election timeouts at 20 ms ticks
            assert obs.role is Role.FOLLOWER and c.nodes[other].role is not Role.LEADER
            assert obs.status().term == 0 or obs.status().vote in (0, 1, 2)
        finally:
            await c.stop_all()

    run(main())


def test_add_observer_then_promote_it_to_voter(tmp_path) -> None:
    async def main() -> None:
        c = Cluster(tmp_path, [1, 2, 3], extra=[4])
        await c.start_all()
        try:
            lead = await c.leader()
            await lead.propose_many([b"m%d" % i for i in range(10)])
            await c.start(4, join=True)
            await lead.add_observer(4, c.urls[4])
            await c.wait_for(lambda: len(c.data(4)) == 10, what="new observer to catch up")
            await lead.add_voter(4, c.urls[4])
            assert lead.status().voters == (1, 2, 3, 4)
            await lead.propose(b"five")
            await c.wait_for(lambda: c.data(4)[-1:] == [b"five"], what="node 4 to apply")
            await lead.remove_voter(4)
            assert lead.status().voters == (1, 2, 3)
        finally:
            await c.stop_all()

    run(main())


def test_snapshot_moves_log_start_and_restart_and_new_node_recover_from_it(tmp_path) -> None:
    async def main() -> None:
        c = Cluster(tmp_path, [1, 2, 3], extra=[4])
        await c.start_all()
        try:
            lead = await c.leader()
            await lead.propose_many([b"s%d" % i for i in range(100)])
            snap = await lead.take_snapshot(b"state-after-%d" % lead.applied)
            st = lead.status()
            assert st.snapshot_index == snap.index and st.first_index == snap.index + 1
            files = list((tmp_path / f"node-{lead.id}" / "snapshots").iterdir())
            assert f"{snap.index:020d}-{snap.term:010d}.checkpoint" in [f.name for f in files]
            # The log is kept from the previous snapshot (the bootstrap one, at 0) on, so
            # that one still backs the state if the new file is found corrupt on open.
            assert lead.durable.log_start_offset() == 0
            await lead.propose(b"after-snap")
            # a node joining now is below the leader's first index: it gets the snapshot
            restored: list[bytes] = []
            node4 = await c.start(4, join=True)
            node4._on_snapshot = lambda s: restored.append(s.data)  # type: ignore[assignment]
            await lead.add_observer(4, c.urls[4])
            await c.wait_for(lambda: node4.applied >= lead.applied, what="node 4 to catch up")
            assert restored == [snap.data]
            assert node4.status().snapshot_index == snap.index
            # the leader restarts from its snapshot + log
            lid = lead.id
            await c.stop(lid)
            new = await c.leader(exclude=lid)
            restarted = await c.start(lid)
            assert restarted.status().snapshot_index == snap.index
            await new.propose(b"later")
            await c.wait_for(lambda: c.data(lid)[-1:] == [b"later"], what="restarted leader")
        finally:
            await c.stop_all()

    run(main())


def test_leadership_transfer_moves_the_leader_and_it_commits(tmp_path) -> None:
    async def main() -> None:
        c = Cluster(tmp_path, [1, 2, 3])
        await c.start_all()
        try:
            lead = await c.leader()
            await lead.propose(b"before")
            to = next(i for i in (1, 2, 3) if i != lead.id)
            await lead.transfer_leadership(to)
            new = await c.leader()
            assert new.id == to
            await new.propose(b"after")
            ri = await new.read_index()
            assert ri >= new.applied - 0 and c.data(to)[-1] == b"after"
            await c.wait_for(
                lambda: all(c.data(i)[-2:] == [b"before", b"after"] for i in (1, 2, 3)),
                what="all to apply",
            )
        finally:
            await c.stop_all()

    run(main())


def test_power_cut_keeps_every_acknowledged_entry_and_every_term_and_vote(tmp_path) -> None:
    """LazyFileLayer loses every byte not fsynced (keeping a random, possibly torn, prefix
    of the rest): whatever a proposer was told is committed must survive a cut of all
    three nodes at once, and so must each node's term and vote (Raft §5.1, §5.2)."""

    async def main() -> None:
        layers = {i: LazyFileLayer() for i in (1, 2, 3)}
        c = Cluster(tmp_path, [1, 2, 3])
        for i in (1, 2, 3):
            await c.start(i, file_layer=layers[i])
        lead = await c.leader()
        acked: list[bytes] = []
        for k in range(10):
            batch = [b"k%d-%d" % (k, j) for j in range(30)]
            await lead.propose_many(batch)
            acked += batch
        # More proposals in flight at the cut: these may or may not survive.
        unacked = [asyncio.ensure_future(lead.propose_many([b"late%d" % j])) for j in range(20)]
        await asyncio.sleep(0)
        before = {i: (n.status().term, n.status().vote) for i, n in c.nodes.items()}
        await c.crash_all()
        for f in unacked:
            f.cancel()
        for seed, layer in enumerate(layers.values()):
            assert layer.unsynced_bytes() >= 0
            layer.crash(random.Random(seed))
        try:
            for i in (1, 2, 3):
                node = await c.start(i)
                st = node.status()
                assert (st.term, st.vote) == before[i], f"node {i} forgot its term or vote"
            new = await c.leader()
            await new.propose(b"after-cut")
            await c.wait_for(
                lambda: all(b"after-cut" in c.data(i) for i in (1, 2, 3)),
                what="every node to apply after the cut",
            )
            for i in (1, 2, 3):
                data = c.data(i)
                assert data[: len(acked)] == acked, f"node {i} lost acknowledged entries"
        finally:
            await c.stop_all()

    run(main())


def test_a_slow_apply_on_the_followers_holds_up_neither_heartbeats_nor_commits(tmp_path) -> None:
    """Finding 13: on_commit ran inside the node task, so a follower applying a big entry
    answered nothing until it was done, and the leader lost its quorum (check-quorum). The
    apply task now applies while the node task goes on: here the followers take 3 s (15
    election timeouts) to apply one entry, and meanwhile the leader keeps its term and
    commits more."""
    slow_s = 3.0
    applying: set[int] = set()

    async def main() -> None:
        c = Cluster(tmp_path, [1, 2, 3])

        def hook(i: int):  # type: ignore[no-untyped-def]
            async def on_commit(entries: list[Entry]) -> None:
                if any(e.data == b"slow" for e in entries) and c.nodes[i].role is Role.FOLLOWER:
                    applying.add(i)
                    await asyncio.sleep(slow_s)
                    applying.discard(i)

            return on_commit

        for i in (1, 2, 3):
            await c.start(i, on_commit=hook(i))
        try:
            lead = await c.leader()
            term = lead.status().term
            await lead.propose(b"slow")
            await c.wait_for(lambda: len(applying) == 2, what="followers applying")
            t0 = asyncio.get_running_loop().time()
            await lead.propose(b"after")  # needs a follower's append response to commit
            took = asyncio.get_running_loop().time() - t0
            assert len(applying) == 2, "the followers finished applying before the commit"
            assert took < slow_s / 2, f"commit took {took:.2f} s"
            await c.wait_for(lambda: not applying, what="followers done", timeout_s=slow_s * 3)
            assert lead.role is Role.LEADER and lead.status().term == term
            await c.wait_for(
                lambda: all(c.data(i) == [b"slow", b"after"] for i in (1, 2, 3)),
                what="every node to apply both, in order",
            )
        finally:
            await c.stop_all()

    run(main())
