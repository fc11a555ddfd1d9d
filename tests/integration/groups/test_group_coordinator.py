"""The group coordinator on real brokers, driven over its wire protocol (msgpack over HTTP).

One controller and three broker processes; ``__consumer_offsets`` has 3 partitions with
replication factor 3. Groups join, sync, heartbeat, commit and are described, listed,
lagged, reset and deleted through ``POST /internal/broker/v1/group/<op>``
(docs/consumer-groups.md, "The coordinator on a broker: wire protocol"). The last two tests
move the coordinator: a controlled shutdown (a parked join is answered NOT_COORDINATOR) and
a SIGKILL (the new leader of the offsets partition serves the group with its offsets).

Short timings through ``--override``: no initial rebalance delay beyond 300 ms, sessions down
to 500 ms, brokers fenced 3 s after their last heartbeat.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import msgpack
import pytest

from api.client import AsyncProducer
from api.node.localcluster import Brokers, Quorum, running_cluster, wait_for
from broker.group_coordinator import partition_for
from metalog.client import ControllerClient
from metalog.commands import CreateTopic

pytestmark = pytest.mark.slow

OFFSETS_PARTITIONS = 3
TOPIC = "orders"
TOPIC_PARTITIONS = 4
ALL_TPS = [[TOPIC, p] for p in range(TOPIC_PARTITIONS)]
RETRY = {"NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE"}
TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Quorum, Brokers]]:
    root: Path = tmp_path_factory.mktemp("groups-cluster")
    with running_cluster(
        root,
        controllers=1,
        brokers=3,
        controller_args=["--override", "broker_session_timeout_ms=3000"],
        broker_args=[
            "--override",
            "broker_heartbeat_interval_ms=500",
            "--override",
            f"offsets_topic_num_partitions={OFFSETS_PARTITIONS}",
            "--override",
            "group_initial_rebalance_delay_ms=300",
            "--override",
            "group_min_session_timeout_ms=500",
        ],
    ) as (q, b):

        async def create() -> None:
            async with ControllerClient(q.urls, timeout_s=20) as cc:
                await cc.execute(
                    CreateTopic(name=TOPIC, num_partitions=TOPIC_PARTITIONS, replication_factor=2)
                )

        asyncio.run(create())
        for x in b.ids:  # every coordinator must know the topic to assign it
            wait_for(
                f"broker {x} sees {TOPIC} with leaders",
                lambda x=x: (
                    all(p["leader"] >= 0 for p in topic_partitions(b, x, TOPIC))
                    and topic_partitions(b, x, TOPIC)
                ),
                30,
            )
        yield q, b


def topic_partitions(b: Brokers, via: int, topic: str) -> list[dict[str, Any]]:
    for t in b.metadata(via)["topics"]:
        if t["name"] == topic:
            return list(t["partitions"])
    return []


class Wire:
    """The coordinator's wire protocol from a test: raw calls to one broker, and group calls
    that find the coordinator and retry while it moves or loads, as a client does."""

    def __init__(self, session: aiohttp.ClientSession, b: Brokers) -> None:
        self.session = session
        self.b = b

    def urls(self) -> list[str]:
        return [self.b.url(x) for x in self.b.ids if x in self.b.procs]

    async def raw(self, url: str, op: str, body: dict[str, Any]) -> dict[str, Any]:
        async with self.session.post(
            f"{url}/internal/broker/v1/group/{op}",
            data=msgpack.packb(body, use_bin_type=True),
            headers={"Content-Type": "application/msgpack"},
        ) as r:
            assert r.status == 200
            out = msgpack.unpackb(await r.read(), raw=False)
        assert isinstance(out, dict) and "error" in out, out
        return out

    async def find(self, group: str, *, exclude: int | None = None) -> dict[str, Any]:
        deadline = time.monotonic() + TIMEOUT_S
        last: Any = None
        while time.monotonic() < deadline:
            for url in self.urls():
                try:
                    out = await self.raw(url, "find_coordinator", {"group": group})
                except aiohttp.ClientError as e:
                    last = e
                    continue
                last = out
                if out["error"] == "NONE" and out["coordinator_id"] != exclude:
                    return out
            await asyncio.sleep(0.1)
        raise AssertionError(f"no coordinator for {group!r} within {TIMEOUT_S} s: {last}")

    async def call(self, group: str, op: str, body: dict[str, Any]) -> dict[str, Any]:
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            info = await self.find(group)
            try:
                out = await self.raw(info["url"], op, {"group": group, **body})
            except aiohttp.ClientError:
                out = {"error": "NOT_COORDINATOR"}
            if out["error"] not in RETRY:
                return out
            assert time.monotonic() < deadline, f"{op} of {group!r} kept failing: {out}"
            await asyncio.sleep(0.1)

    async def join(
        self,
        group: str,
        member_id: str = "",
        *,
        protocol: str = "eager",
        assignor: str = "range",
        session_timeout_ms: int = 10_000,
        rebalance_timeout_ms: int = 30_000,
        owned: list[list[Any]] | None = None,
        client_id: str = "test",
    ) -> dict[str, Any]:
        return await self.call(
            group,
            "join",
            {
                "member_id": member_id,
                "topics": [TOPIC],
                "protocol": protocol,
                "assignor": assignor,
                "client_id": client_id,
                "session_timeout_ms": session_timeout_ms,
                "rebalance_timeout_ms": rebalance_timeout_ms,
                "owned": owned,
            },
        )

    async def sync(self, group: str, joined: dict[str, Any]) -> dict[str, Any]:
        return await self.call(
            group, "sync", {"member_id": joined["member_id"], "generation": joined["generation"]}
        )

    async def heartbeat(self, group: str, member_id: str, generation: int) -> str:
        out = await self.call(
            group, "heartbeat", {"member_id": member_id, "generation": generation}
        )
        return str(out["error"])


def run(b: Brokers, fn: Callable[[Wire], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=TIMEOUT_S, sock_connect=2)
        ) as s:
            return await fn(Wire(s, b))

    return asyncio.run(main())


async def eventually(
    what: str, fn: Callable[[], Awaitable[Any]], timeout_s: float = TIMEOUT_S
) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = await fn()
        if last:
            return last
        await asyncio.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout_s} s (last: {last!r})")


async def join_two(w: Wire, group: str, **kw: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two new members in one join phase (both within the initial rebalance delay)."""
    a, b = await asyncio.gather(
        w.join(group, client_id="a", **kw), w.join(group, client_id="b", **kw)
    )
    assert a["error"] == b["error"] == "NONE", (a, b)
    assert a["generation"] == b["generation"] >= 1
    assert sorted(a["members"]) == sorted(b["members"]) == sorted([a["member_id"], b["member_id"]])
    assert a["leader"] == b["leader"] in a["members"]
    return a, b


def tps(out: dict[str, Any], key: str = "assignment") -> set[tuple[str, int]]:
    return {(t, p) for t, p in out[key]}


# ---------------------------------------------------------------- tests


def test_find_coordinator_creates_the_compacted_offsets_topic(
    cluster: tuple[Quorum, Brokers],
) -> None:
    _, b = cluster
    info = run(b, lambda w: w.find("billing"))
    assert info["partition"] == partition_for("billing", OFFSETS_PARTITIONS)
    parts = topic_partitions(b, b.ids[0], "__consumer_offsets")
    assert len(parts) == OFFSETS_PARTITIONS
    assert all(len(p["replicas"]) == 3 for p in parts)  # min(3, usable brokers)
    assert info["coordinator_id"] == parts[info["partition"]]["leader"]
    assert info["url"] == b.url(info["coordinator_id"])
    with urllib.request.urlopen(b.url(b.ids[0]) + "/v3/clusters", timeout=5) as r:
        cid = json.loads(r.read())["data"][0]["cluster_id"]
    with urllib.request.urlopen(
        f"{b.url(b.ids[0])}/v3/clusters/{cid}/topics/__consumer_offsets/configs/cleanup.policy",
        timeout=5,
    ) as r:
        assert json.loads(r.read())["value"] == "compact"
    # Every broker answers, and the same.
    for x in b.ids:
        again = run(b, lambda w, x=x: w.raw(b.url(x), "find_coordinator", {"group": "billing"}))
        assert again == info


def test_not_coordinator_names_the_coordinator(cluster: tuple[Quorum, Brokers]) -> None:
    _, b = cluster

    async def scenario(w: Wire) -> None:
        info = await w.find("audit")
        for x in b.ids:
            if x == info["coordinator_id"]:
                continue
            for op, body in [
                ("describe", {}),
                ("heartbeat", {"member_id": "m", "generation": 1}),
                ("fetch_offsets", {"partitions": None}),
            ]:
                out = await w.raw(b.url(x), op, {"group": "audit", **body})
                assert out["error"] == "NOT_COORDINATOR", out
                assert out["coordinator_id"] == info["coordinator_id"], out
                assert out["message"]

    run(b, scenario)


def test_eager_group_joins_syncs_commits_and_fences_a_stale_generation(
    cluster: tuple[Quorum, Brokers],
) -> None:
    _, b = cluster
    g = "eager-group"

    async def scenario(w: Wire) -> None:
        ja, jb = await join_two(w, g)
        sa, sb = await w.sync(g, ja), await w.sync(g, jb)
        assert sa["error"] == sb["error"] == "NONE"
        assert not tps(sa) & tps(sb) and tps(sa) | tps(sb) == {(TOPIC, p) for p in range(4)}
        assert len(tps(sa)) == len(tps(sb)) == 2  # range over 4 partitions
        gen = ja["generation"]
        assert await w.heartbeat(g, ja["member_id"], gen) == "NONE"
        assert await w.heartbeat(g, jb["member_id"], gen) == "NONE"
        commit = [[t, p, 10 + p, f"by-a-{p}"] for t, p in sorted(tps(sa))]
        out = await w.call(
            g, "commit", {"member_id": ja["member_id"], "generation": gen, "offsets": commit}
        )
        assert out == {"error": "NONE"}
        got = await w.call(g, "fetch_offsets", {"partitions": None})
        assert [o[:4] for o in got["offsets"]] == commit
        assert all(isinstance(o[4], int) and o[4] > 0 for o in got["offsets"])

        # b leaves: a hears of the rebalance, rejoins alone into the next generation.
        assert (await w.call(g, "leave", {"member_id": jb["member_id"]}))["error"] == "NONE"
        assert await w.heartbeat(g, ja["member_id"], gen) == "REBALANCE_IN_PROGRESS"
        ja2 = await w.join(g, ja["member_id"], client_id="a")
        assert ja2["error"] == "NONE" and ja2["generation"] == gen + 1
        assert ja2["members"] == [ja["member_id"]]
        sa2 = await w.sync(g, ja2)
        assert tps(sa2) == {(TOPIC, p) for p in range(4)}
        # A commit from the previous generation is refused (Kafka's validateOffsetCommit).
        stale = await w.call(
            g,
            "commit",
            {"member_id": ja["member_id"], "generation": gen, "offsets": [[TOPIC, 0, 99, ""]]},
        )
        assert stale["error"] == "ILLEGAL_GENERATION"
        gone = await w.call(
            g,
            "commit",
            {"member_id": jb["member_id"], "generation": gen + 1, "offsets": [[TOPIC, 0, 99, ""]]},
        )
        assert gone["error"] == "UNKNOWN_MEMBER_ID"
        got = await w.call(g, "fetch_offsets", {"partitions": [[TOPIC, 0]]})
        assert got["offsets"][0][:3] == [TOPIC, 0, 10]
        assert await w.heartbeat(g, jb["member_id"], gen) == "UNKNOWN_MEMBER_ID"

    run(b, scenario)


def test_cooperative_group_hands_over_only_after_the_owner_gave_up(
    cluster: tuple[Quorum, Brokers],
) -> None:
    _, b = cluster
    g = "coop-group"
    kw: dict[str, Any] = {"protocol": "cooperative", "assignor": "cooperative-sticky"}

    async def scenario(w: Wire) -> None:
        ja = await w.join(g, client_id="a", **kw)
        sa = await w.sync(g, ja)
        assert tps(sa) == {(TOPIC, p) for p in range(4)}
        # b joins and is parked until a rejoins; a learns it from its heartbeat.
        b_join = asyncio.create_task(w.join(g, client_id="b", **kw))
        await eventually("a told to rejoin", lambda: _rebalancing(w, g, ja))
        ja2, jb2 = await asyncio.gather(w.join(g, ja["member_id"], client_id="a", **kw), b_join)
        assert ja2["generation"] == jb2["generation"] == ja["generation"] + 1
        assert ja2["protocol"] == "cooperative"
        sa2, sb2 = await w.sync(g, ja2), await w.sync(g, jb2)
        # a keeps two, revokes two and must rejoin; b gets nothing yet: a still owns them.
        assert len(tps(sa2)) == 2 and len(tps(sa2, "revoked")) == 2 and sa2["rejoin"]
        assert tps(sa2) | tps(sa2, "revoked") == tps(sa)
        assert tps(sb2) == set()
        # The follow-up rebalance hands the revoked partitions to b.
        a_join = asyncio.create_task(
            w.join(
                g, ja["member_id"], client_id="a", owned=sorted([list(x) for x in tps(sa2)]), **kw
            )
        )
        await eventually("b told to rejoin", lambda: _rebalancing(w, g, jb2))
        ja3, jb3 = await asyncio.gather(a_join, w.join(g, jb2["member_id"], client_id="b", **kw))
        assert ja3["generation"] == jb3["generation"] == ja2["generation"] + 1
        sa3, sb3 = await w.sync(g, ja3), await w.sync(g, jb3)
        assert tps(sa3) == tps(sa2) and tps(sa3, "revoked") == set() and not sa3["rejoin"]
        assert tps(sb3) == tps(sa2, "revoked")
        d = await w.call(g, "describe", {})
        assert d["state"] == "STABLE" and d["protocol"] == "cooperative"
        assert d["assignor"] == "cooperative-sticky"

    run(b, scenario)


async def _rebalancing(w: Wire, g: str, joined: dict[str, Any]) -> bool:
    return await w.heartbeat(g, joined["member_id"], joined["generation"]) == (
        "REBALANCE_IN_PROGRESS"
    )


def test_member_silent_past_its_session_timeout_is_removed(cluster: tuple[Quorum, Brokers]) -> None:
    _, b = cluster
    g = "expiry-group"

    async def scenario(w: Wire) -> None:
        ja, jb = await asyncio.gather(
            w.join(g, client_id="a", session_timeout_ms=10_000),
            w.join(g, client_id="b", session_timeout_ms=1_000),
        )
        assert ja["generation"] == jb["generation"]
        await w.sync(g, ja)
        await w.sync(g, jb)
        started = time.monotonic()
        # a heartbeats; b stays silent and is removed once its 1 s session runs out.
        await eventually("a told to rejoin", lambda: _rebalancing(w, g, ja))
        assert time.monotonic() - started >= 0.5
        ja2 = await w.join(g, ja["member_id"], client_id="a", session_timeout_ms=10_000)
        assert ja2["members"] == [ja["member_id"]]
        assert ja2["generation"] == ja["generation"] + 1
        d = await w.call(g, "describe", {})
        assert [m["member_id"] for m in d["members"]] == [ja["member_id"]]
        assert await w.heartbeat(g, jb["member_id"], jb["generation"]) == "UNKNOWN_MEMBER_ID"

    run(b, scenario)


def test_describe_list_lag_reset_and_delete(cluster: tuple[Quorum, Brokers]) -> None:
    _, b = cluster
    g = "admin-group"

    async def produce() -> None:
        async with AsyncProducer([b.url(x) for x in b.ids], linger_ms=1) as p:
            futs = [
                await p.send(TOPIC, f"v{i}".encode(), partition=i % TOPIC_PARTITIONS)
                for i in range(40)
            ]
            for f in futs:
                await f

    async def scenario(w: Wire) -> None:
        before = {tuple(x[:2]): x[3] for x in (await w.call(g, "lag", {}))["partitions"]}
        assert before == {}  # no offsets, no members: nothing to show
        ja = await w.join(g, client_id="admin-a")
        sa = await w.sync(g, ja)
        assert tps(sa) == {(TOPIC, p) for p in range(4)}
        await produce()
        out = await w.call(
            g,
            "commit",
            {
                "member_id": ja["member_id"],
                "generation": ja["generation"],
                "offsets": [[TOPIC, 0, 3, ""], [TOPIC, 1, 5, "x"]],
            },
        )
        assert out["error"] == "NONE"

        # Lag: every assigned partition; the log end is the high watermark.
        async def lag_settled() -> Any:
            rows = (await w.call(g, "lag", {}))["partitions"]
            return rows if rows and all(r[3] >= 10 for r in rows) else None

        rows = await eventually("lag with every record", lag_settled)
        ends = {r[1]: r[3] for r in rows}
        assert [r[:2] for r in rows] == ALL_TPS
        assert all(r[5] == ja["member_id"] for r in rows)
        assert rows[0][2] == 3 and rows[0][4] == ends[0] - 3
        assert rows[1][2] == 5 and rows[1][4] == ends[1] - 5
        assert rows[2][2] is None and rows[2][4] is None  # no commit: no lag ("-")

        d = await w.call(g, "describe", {})
        assert d["state"] == "STABLE" and not d["is_simple"]
        assert d["generation"] == ja["generation"] and d["leader"] == ja["member_id"]
        assert d["members"] == [
            {
                "member_id": ja["member_id"],
                "client_id": "admin-a",
                "protocol": "eager",
                "topics": [TOPIC],
                "assignment": ALL_TPS,
            }
        ]

        # list: only the coordinator of the group lists it; callers ask every broker.
        info = await w.find(g)
        listed = {}
        for x in b.ids:
            out = await w.raw(b.url(x), "list", {})
            assert out["error"] == "NONE"
            for e in out["groups"]:
                listed.setdefault(e["group"], []).append((x, e["state"], e["is_simple"]))
        assert listed[g] == [(info["coordinator_id"], "STABLE", False)]

        # Resets and deletes need an empty group.
        reset = {"offsets": [[TOPIC, 0, 0]]}
        assert (await w.call(g, "reset_offsets", reset))["error"] == "NON_EMPTY_GROUP"
        assert (await w.call(g, "delete", {}))["error"] == "NON_EMPTY_GROUP"
        assert (await w.call(g, "leave", {"member_id": ja["member_id"]}))["error"] == "NONE"
        assert (await w.call(g, "describe", {}))["state"] == "EMPTY"
        assert (await w.call(g, "reset_offsets", reset))["error"] == "NONE"
        got = await w.call(g, "fetch_offsets", {"partitions": None})
        assert [o[:3] for o in got["offsets"]] == [[TOPIC, 0, 0], [TOPIC, 1, 5]]
        rows = (await w.call(g, "lag", {}))["partitions"]
        assert [(r[1], r[2], r[5]) for r in rows] == [(0, 0, None), (1, 5, None)]

        assert (await w.call(g, "delete", {}))["error"] == "NONE"
        d = await w.call(g, "describe", {})
        assert d["state"] == "DEAD" and d["members"] == []
        assert (await w.call(g, "fetch_offsets", {"partitions": None}))["offsets"] == []
        assert (await w.call(g, "delete", {}))["error"] == "GROUP_ID_NOT_FOUND"

        # A commit without a member creates a simple group.
        simple = await w.call(
            "simple-group",
            "commit",
            {"member_id": "", "generation": -1, "offsets": [[TOPIC, 2, 7, ""]]},
        )
        assert simple["error"] == "NONE"
        d = await w.call("simple-group", "describe", {})
        assert d["is_simple"] and d["state"] == "EMPTY"

    run(b, scenario)


def test_parked_join_is_answered_not_coordinator_when_leadership_moves(
    cluster: tuple[Quorum, Brokers],
) -> None:
    _, b = cluster
    g = "moving-group"

    async def scenario(w: Wire) -> int:
        ja = await w.join(g, client_id="a")
        await w.sync(g, ja)
        info = await w.find(g)
        url = info["url"]
        # b's join waits for a to rejoin, which it never does (rebalance timeout 30 s).
        b_join = asyncio.create_task(
            w.raw(
                url,
                "join",
                {
                    "group": g,
                    "member_id": "",
                    "topics": [TOPIC],
                    "protocol": "eager",
                    "assignor": "range",
                    "client_id": "b",
                    "session_timeout_ms": 10_000,
                    "rebalance_timeout_ms": 30_000,
                    "owned": None,
                },
            )
        )
        await eventually("a told to rejoin", lambda: _rebalancing(w, g, ja))
        assert not b_join.done()
        # A controlled shutdown moves the leadership of the offsets partition away.
        b.send_signal(info["coordinator_id"], signal.SIGTERM)
        async with asyncio.timeout(TIMEOUT_S):
            out = await b_join
        assert out["error"] == "NOT_COORDINATOR", out
        # The new coordinator has the group as it was last written: a, generation 1.
        moved = await w.find(g, exclude=info["coordinator_id"])
        d = await w.call(g, "describe", {})
        assert d["generation"] == ja["generation"]
        assert [m["member_id"] for m in d["members"]] == [ja["member_id"]]
        assert moved["coordinator_id"] != info["coordinator_id"]
        return int(info["coordinator_id"])

    stopped = run(b, scenario)
    assert b.procs[stopped].wait(timeout=60) == 0
    del b.procs[stopped]
    b.start(stopped)
    b.wait_ready([stopped], timeout_s=60)


def test_coordinator_failover_keeps_committed_offsets(cluster: tuple[Quorum, Brokers]) -> None:
    _, b = cluster
    g = "failover-group"

    async def before(w: Wire) -> tuple[dict[str, Any], dict[str, Any], list[Any], int]:
        # Every replica of the offsets partitions in sync, so any of them may take over.
        await eventually("full ISRs of __consumer_offsets", lambda: _full_isrs(b))
        ja, jb = await join_two(w, g)
        await w.sync(g, ja)
        await w.sync(g, jb)
        commit = [[TOPIC, p, 100 + p, f"m{p}"] for p in range(TOPIC_PARTITIONS)]
        out = await w.call(
            g,
            "commit",
            {"member_id": ja["member_id"], "generation": ja["generation"], "offsets": commit},
        )
        assert out["error"] == "NONE"
        info = await w.find(g)
        return ja, jb, commit, int(info["coordinator_id"])

    ja, jb, commit, victim = run(b, before)
    b.kill(victim, signal.SIGKILL)

    async def after(w: Wire) -> None:
        moved = await w.find(g, exclude=victim)
        assert moved["coordinator_id"] != victim
        got = await w.call(g, "fetch_offsets", {"partitions": None})
        assert [o[:4] for o in got["offsets"]] == commit
        d = await w.call(g, "describe", {})
        assert d["state"] == "STABLE" and d["generation"] == ja["generation"]
        assert sorted(m["member_id"] for m in d["members"]) == sorted(
            [ja["member_id"], jb["member_id"]]
        )
        # The members carry on with the new coordinator, in the same generation.
        assert await w.heartbeat(g, ja["member_id"], ja["generation"]) == "NONE"
        out = await w.call(
            g,
            "commit",
            {
                "member_id": jb["member_id"],
                "generation": jb["generation"],
                "offsets": [[TOPIC, 0, 200, ""]],
            },
        )
        assert out["error"] == "NONE"
        got = await w.call(g, "fetch_offsets", {"partitions": [[TOPIC, 0]]})
        assert got["offsets"][0][2] == 200

    run(b, after)


async def _full_isrs(b: Brokers) -> bool:
    parts = await asyncio.to_thread(topic_partitions, b, b.ids[0], "__consumer_offsets")
    return bool(parts) and all(len(p["isr"]) == 3 and p["leader"] >= 0 for p in parts)
