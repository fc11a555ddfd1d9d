"""The Raft route refuses what no peer sends: three RaftNodes on real sockets are handed
malformed and impossible bodies (those that ended a node task before issue 17: a non-map
message, a string term, a commit beyond the log) and answer each with 400 and the reason,
queue nothing, and keep their term, leader and log; the cluster then commits as before."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import msgpack
from raft_node_harness import Cluster

from raft.aio.transport import CONTENT_TYPE, ROUTE
from raft.messages import AppendEntries, Heartbeat
from raft.types import LogIndex, NodeId, Term


def run(coro):  # type: ignore[no-untyped-def]
    async def limited():  # type: ignore[no-untyped-def]
        async with asyncio.timeout(60):
            return await coro

    return asyncio.run(limited())


async def post(session: aiohttp.ClientSession, url: str, body: Any) -> tuple[int, str]:
    data = body if isinstance(body, bytes) else msgpack.packb(body, use_bin_type=True)
    async with session.post(url + ROUTE, data=data, headers={"Content-Type": CONTENT_TYPE}) as r:
        return r.status, await r.text()


def test_bad_raft_bodies_get_400_and_leave_every_node_serving(tmp_path) -> None:
    async def main() -> None:
        c = Cluster(tmp_path, [1, 2, 3])
        await c.start_all()
        try:
            lead = await c.leader()
            await lead.propose_many([b"a", b"b"])
            f = next(n for i, n in c.nodes.items() if i != lead.id)
            await c.wait_for(lambda: f.applied >= lead.status().commit, what="follower")
            st = f.status()
            term, last = Term(st.term), st.last_index
            honest_hb = Heartbeat(lead.id, f.id, term, LogIndex(last)).to_wire()
            ae = AppendEntries(
                lead.id, f.id, term, LogIndex(last), term, (), LogIndex(last)
            ).to_wire()
            cases: list[tuple[Any, str]] = [
                (b"\xc1", "not msgpack"),
                ([1, 2], "expected a map"),
                ({"msgs": []}, "'from' must be a node id"),
                ({"from": "1", "msgs": []}, "'from' must be a node id"),
                ({"from": lead.id, "msgs": {}}, "'msgs' must be a list"),
                ({"from": 99, "msgs": []}, f"node {f.id} does not know node 99"),
                ({"from": lead.id, "msgs": [[1, 2]]}, "message 0: a message must be a map"),
                (
                    {"from": lead.id, "msgs": [{**ae, "term": str(term)}]},
                    "message 0: term must be a term",
                ),
                (
                    {"from": lead.id, "msgs": [{**ae, "entries": [{"data": b"x"}]}]},
                    "entries[0] must be [index, term, kind, data]",
                ),
                (
                    {"from": lead.id, "msgs": [honest_hb, {**honest_hb, "commit": last + 1000}]},
                    f"message 1: Heartbeat from {lead.id} commits {last + 1000}, beyond the last"
                    f" index {last}",
                ),
                (
                    {"from": lead.id, "msgs": [{**honest_hb, "src": NodeId(99)}]},
                    f"a message from 99 to {f.id} in a POST from {lead.id}",
                ),
                (
                    {"from": lead.id, "msgs": [{**honest_hb, "dst": lead.id}]},
                    "dst must be another node than src",
                ),
            ]
            async with aiohttp.ClientSession() as s:
                for body, says in cases:
                    status, text = await post(s, c.urls[f.id], body)
                    assert (status, says in text) == (400, True), (body, status, text)
                # An honest message still passes.
                assert (await post(s, c.urls[f.id], {"from": lead.id, "msgs": [honest_hb]}))[
                    0
                ] == 204
            await asyncio.sleep(0.2)  # anything queued would have been stepped by now
            for n in c.nodes.values():
                assert n.task is not None and not n.task.done(), n.id
            after = f.status()
            assert (after.term, after.leader_id, after.last_index) == (term, lead.id, last)
            await lead.propose(b"c")
            await c.wait_for(
                lambda: all(c.data(i)[-1:] == [b"c"] for i in c.nodes),
                what="every node to apply a proposal after the bad bodies",
            )
        finally:
            await c.stop_all()

    run(main())
