"""The queue workload's group member (`LongboatGroupMember`) against a scripted coordinator:
every request leaves from the client's own address (so partitions can cut it off), its
assignment changes reach the history's recorder, and commit outcomes are classified
honestly (refused before sending: fail; anything after sending: unknown)."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import msgpack
import pytest
from aiohttp import web

from api.client import ClientError
from jepsen_tests.cluster import DefiniteError, IndefiniteError
from jepsen_tests.longboat_client import LongboatGroupMember

SOURCE = "127.0.0.123"  # a harness client's address (127.0.0.100+)


class _Coordinator:
    """One broker that is also the group's coordinator; answers as docs/consumer-groups.md
    says, with a commit answer the test chooses."""

    def __init__(self) -> None:
        self.remotes: set[str | None] = set()
        self.calls: list[str] = []
        self.commit_error = "NONE"
        self.url = ""

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v3/broker/metadata", self.metadata)
        app.router.add_post("/binary/v1/group/{op}", self.group)
        return app

    async def metadata(self, request: web.Request) -> web.Response:
        self.remotes.add(request.remote)
        port = int(self.url.rsplit(":", 1)[1])
        return web.json_response(
            {
                "brokers": [{"broker_id": 101, "endpoints": [["http", "127.0.0.1", port]]}],
                "topics": [
                    {
                        "name": "jepsen",
                        "partitions": [
                            {
                                "partition": p,
                                "leader": 101,
                                "leader_epoch": 0,
                                "replicas": [101],
                                "isr": [101],
                            }
                            for p in (0, 1)
                        ],
                    }
                ],
                "offset": 1,
            }
        )

    async def group(self, request: web.Request) -> web.Response:
        self.remotes.add(request.remote)
        op = request.match_info["op"]
        self.calls.append(op)
        answers: dict[str, dict[str, Any]] = {
            "find_coordinator": {"error": "NONE", "coordinator_id": 101, "url": self.url},
            "join": {"error": "NONE", "member_id": "m-1", "generation": 1},
            "sync": {"error": "NONE", "assignment": [["jepsen", 0]]},
            "fetch_offsets": {"error": "NONE", "offsets": [["jepsen", 0, 3, "", 0]]},
            "commit": {"error": self.commit_error},
        }
        body = msgpack.packb(answers.get(op, {"error": "NONE"}), use_bin_type=True)
        return web.Response(body=body, content_type="application/msgpack")


def _cluster(url: str) -> Any:
    return SimpleNamespace(
        topic="jepsen",
        keys=["k0", "k1"],
        broker_urls=lambda: [url],
        key_partition=lambda k: int(k[1:]),
        client_security=None,
    )


async def _wait_for(cond: Any, what: str, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def _member_against_a_scripted_coordinator() -> None:
    coord = _Coordinator()
    runner = web.AppRunner(coord.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    coord.url = f"http://127.0.0.1:{port}"
    events: list[tuple[str, list[str]]] = []
    member = LongboatGroupMember(
        _cluster(coord.url),
        "c0-m0.1",
        SOURCE,
        group="g",
        assignor="range",
        on_rebalance=lambda e, keys: events.append((e, keys)),
    )
    try:
        await member.start()
        await _wait_for(lambda: events, "the first assignment")
        assert events == [("assigned", ["k0"])]

        await member.commit({"k0": 4})  # answered NONE: committed

        # A refusal after sending is not proof that nothing was applied: unknown.
        coord.commit_error = "ILLEGAL_GENERATION"
        with pytest.raises(IndefiniteError):
            await member.commit({"k0": 5})
        # The member was fenced: in no generation, it refuses before sending anything.
        commits = coord.calls.count("commit")
        with pytest.raises(DefiniteError, match="nothing sent"):
            await member.commit({"k0": 5})
        assert coord.calls.count("commit") == commits

        # Fenced: k0 was lost, then the member rejoined and got it back.
        await _wait_for(lambda: len(events) >= 3, "the loss and the new assignment")
        assert events[:3] == [("assigned", ["k0"]), ("lost", ["k0"]), ("assigned", ["k0"])]
    finally:
        await member.close()
        await runner.cleanup()
    assert {"join", "sync", "fetch_offsets", "commit"} <= set(coord.calls)
    assert coord.remotes == {SOURCE}, coord.remotes


def test_member_binds_its_source_host_reports_assignments_and_classifies_commits() -> None:
    asyncio.run(_member_against_a_scripted_coordinator())


class _FailingConsumer:
    generation = 1
    member_id = "m-1"

    async def poll(self, timeout_ms: int, max_records: int) -> list[Any]:
        raise ClientError("NOT_LEADER_OR_FOLLOWER", "the leader moved")

    async def commit(self, offsets: dict[Any, int]) -> None:
        raise ClientError("REQUEST_TIMED_OUT", "commit")


def test_a_failed_poll_is_definite_and_a_failed_commit_is_not() -> None:
    async def go() -> None:
        member = LongboatGroupMember(
            _cluster("http://127.0.0.1:1"),
            "c0-m0.1",
            SOURCE,
            group="g",
            assignor="range",
            on_rebalance=lambda e, keys: None,
            consumer=_FailingConsumer(),
        )  # type: ignore[arg-type]
        with pytest.raises(DefiniteError):
            await member.poll(10)
        with pytest.raises(IndefiniteError):
            await member.commit({"k0": 1})

    asyncio.run(go())
