"""The group consumer against a real cluster: one controller and three broker processes with
the group coordinator (``__consumer_offsets`` with 3 partitions).

In-process ``AsyncGroupConsumer`` members share 6-partition topics: every record is
consumed, committed offsets resume after a member closes, a cooperative member keeps (and
reads) its partitions while another joins, an eager rebalance revokes everything; the sync
twin, ``list_groups`` and ``longboat consume --group``.

Short timings through ``--override``: a 300 ms initial rebalance delay, sessions down to
500 ms, brokers fenced 3 s after their last heartbeat.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
from client_cluster import ClientCluster
from group_consumer_support import Member, assigned_together, until

from api.client import AsyncGroupConsumer, AsyncProducer, GroupConsumer, TopicPartition
from api.client.coordinator import CoordinatorClient, list_groups
from api.client.transport import MetadataCache, Transport, normalize_bootstrap
from api.node.localcluster import Brokers, running_cluster, wait_for

pytestmark = pytest.mark.slow

TIMEOUT_S = 60.0
OPTS: dict[str, Any] = dict(
    heartbeat_interval_ms=200,
    session_timeout_ms=6000,
    auto_commit_interval_ms=200,
    max_wait_ms=200,
    max_poll_interval_ms=30_000,
    request_timeout_ms=15_000,
    auto_offset_reset="earliest",
)


class Cluster(ClientCluster):
    def create_topic(
        self, name: str, partitions: int, rf: int = 2, configs: dict[str, str] | None = None
    ) -> set[TopicPartition]:
        tps = super().create_topic(name, partitions, rf, configs)
        for b in self.brokers.ids:  # every coordinator must know the topic to assign it
            wait_for(
                f"broker {b} to see {name} with leaders",
                lambda b=b: self._has_leaders(b, name, partitions),
                30,
            )
        return tps

    def _has_leaders(self, b: int, name: str, partitions: int) -> bool:
        for t in self.brokers.metadata(b)["topics"]:
            if t["name"] == name:
                return len(t["partitions"]) == partitions and all(
                    p["leader"] >= 0 for p in t["partitions"]
                )
        return False


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root: Path = tmp_path_factory.mktemp("client-groups-cluster")
    with running_cluster(
        root,
        controllers=1,
        brokers=3,
        controller_args=["--override", "broker_session_timeout_ms=3000"],
        broker_args=[
            "--override",
            "broker_heartbeat_interval_ms=500",
            "--override",
            "offsets_topic_num_partitions=3",
            "--override",
            "group_initial_rebalance_delay_ms=300",
            "--override",
            "group_min_session_timeout_ms=500",
        ],
    ) as (q, b):
        yield Cluster(q, b)


def run(coro: Coroutine[Any, Any, None], timeout_s: float = 180) -> None:
    async def go() -> None:
        async with asyncio.timeout(timeout_s):
            await coro

    asyncio.run(go())


async def produce(
    bootstrap: list[str], topic: str, partitions: int, per_partition: int, tag: str
) -> set[bytes]:
    sent: set[bytes] = set()
    async with AsyncProducer(bootstrap, linger_ms=2) as p:
        futs = []
        for part in range(partitions):
            values = [f"{tag}-{part}-{i}".encode() for i in range(per_partition)]
            futs.append(await p.send_batch(topic, values, partition=part))
            sent.update(values)
        for f in futs:
            await f
    return sent


async def committed_offsets(
    bootstrap: list[str], group: str, tps: set[TopicPartition]
) -> dict[TopicPartition, int | None]:
    probe = AsyncGroupConsumer(bootstrap, group_id=group, **OPTS)
    async with probe:
        return await probe.committed(tps)


async def end_offsets(bootstrap: list[str], tps: set[TopicPartition]) -> dict[TopicPartition, int]:
    probe = AsyncGroupConsumer(bootstrap, group_id="unused", **OPTS)
    async with probe:
        return await probe.end_offsets(tps)


def test_three_members_share_six_partitions_and_read_every_record(cluster: Cluster) -> None:
    tps = cluster.create_topic("shared", 6)

    async def go() -> None:
        sent = await produce(cluster.bootstrap, "shared", 6, 100, "before")
        ms = [
            await Member(cluster.bootstrap, "sharers", n, topics=["shared"], **OPTS).start()
            for n in ("a", "b", "c")
        ]
        await until(lambda: assigned_together(ms, tps), "three members to share", TIMEOUT_S)
        sent |= await produce(cluster.bootstrap, "shared", 6, 20, "after")
        await until(
            lambda: set().union(*(m.seen() for m in ms)) >= sent, "every record consumed", TIMEOUT_S
        )
        assert sorted(len(m.c.assignment()) for m in ms) == [2, 2, 2]
        assert len({m.c.generation for m in ms}) == 1
        t = Transport()
        try:
            groups = await list_groups(t, MetadataCache(t, normalize_bootstrap(cluster.bootstrap)))
        finally:
            await t.close()
        assert {"group": "sharers", "state": "STABLE", "is_simple": False} in groups
        for m in ms:
            await m.close()
        # Every member committed what it read before leaving: the group is at the end.
        ends = await end_offsets(cluster.bootstrap, tps)
        assert await committed_offsets(cluster.bootstrap, "sharers", tps) == ends

    run(go())


def test_committed_offsets_resume_after_a_member_closes(cluster: Cluster) -> None:
    tps = cluster.create_topic("resume", 6)

    async def go() -> None:
        old = await produce(cluster.bootstrap, "resume", 6, 10, "old")
        a = await Member(cluster.bootstrap, "resumers", "a", topics=["resume"], **OPTS).start()
        b = await Member(cluster.bootstrap, "resumers", "b", topics=["resume"], **OPTS).start()
        await until(lambda: a.seen() | b.seen() >= old, "the old records", TIMEOUT_S)
        await until(lambda: assigned_together([a, b], tps), "a and b to share", TIMEOUT_S)
        a_held = a.c.assignment()
        # a closes: it commits the positions of everything it returned and leaves; b takes
        # a's partitions over from there and reads none of a's records again.
        await a.close()
        await until(lambda: b.c.assignment() == tps, "b to take everything", TIMEOUT_S)
        new = await produce(cluster.bootstrap, "resume", 6, 5, "new")
        await until(lambda: b.seen() >= new, "the new records", TIMEOUT_S)
        from_a = {
            r.value
            for r in b.records
            if TopicPartition(r.topic, r.partition) in a_held and r.value in old
        }
        assert not from_a & a.seen()
        await b.close()
        # A new member of the group starts from the commits, not from auto_offset_reset.
        c = await Member(cluster.bootstrap, "resumers", "c", topics=["resume"], **OPTS).start()
        await until(lambda: c.c.assignment() == tps, "c to own everything", TIMEOUT_S)
        newest = await produce(cluster.bootstrap, "resume", 6, 2, "newest")
        await until(lambda: c.seen() >= newest, "the newest records", TIMEOUT_S)
        assert c.seen() == newest
        await c.close()

    run(go())


def test_cooperative_member_keeps_reading_its_partitions_while_another_joins(
    cluster: Cluster,
) -> None:
    tps = cluster.create_topic("coop", 6)

    async def go() -> None:
        stop = asyncio.Event()

        async def keep_producing() -> None:
            async with AsyncProducer(cluster.bootstrap, linger_ms=1) as p:
                i = 0
                while not stop.is_set():
                    for part in range(6):
                        await p.send("coop", f"live-{part}-{i}".encode(), partition=part)
                    i += 1
                    await asyncio.sleep(0.02)

        producer = asyncio.get_running_loop().create_task(keep_producing())
        coop = "cooperative-sticky"
        a = await Member(
            cluster.bootstrap, "coopers", "a", coop, topics=["coop"], with_lost=True, **OPTS
        ).start()
        b = await Member(
            cluster.bootstrap, "coopers", "b", coop, topics=["coop"], with_lost=True, **OPTS
        ).start()
        await until(lambda: assigned_together([a, b], tps), "a and b to share", TIMEOUT_S)
        before = {m.name: m.c.assignment() for m in (a, b)}
        events_before = {m.name: len(m.events) for m in (a, b)}
        # c heartbeats rarely, so the follow-up join phase (where it gets its partitions)
        # waits a while for it: a wide window in which a and b must keep reading.
        t_join = time.monotonic()
        c = await Member(
            cluster.bootstrap,
            "coopers",
            "c",
            coop,
            topics=["coop"],
            **{**OPTS, "heartbeat_interval_ms": 1500, "session_timeout_ms": 10_000},
        ).start()
        await until(lambda: assigned_together([a, b, c], tps), "the hand-over to c", TIMEOUT_S)
        t_done = time.monotonic()
        stop.set()
        await producer
        for m in (a, b):
            kept = m.c.assignment()
            assert kept < before[m.name] and len(kept) == 2
            new_events = m.events[events_before[m.name] :]
            # Only the moved partition was revoked; what stayed was never given up.
            assert all(kind != "lost" for kind, _ in new_events), new_events
            assert (
                set().union(*(tps_ for kind, tps_ in new_events if kind == "revoked"))
                == before[m.name] - kept
            )
            # ... and was read all through the rebalance.
            during = {
                TopicPartition(r.topic, r.partition) for t, r in m.arrivals if t_join < t < t_done
            }
            assert kept <= during, (m.name, kept, during, t_done - t_join)
        for m in (a, b, c):
            await m.close()

    run(go())


def test_eager_rebalance_revokes_everything(cluster: Cluster) -> None:
    tps = cluster.create_topic("eager", 6)

    async def go() -> None:
        a = await Member(
            cluster.bootstrap, "eagers", "a", "range", topics=["eager"], **OPTS
        ).start()
        b = await Member(
            cluster.bootstrap, "eagers", "b", "range", topics=["eager"], **OPTS
        ).start()
        await until(lambda: assigned_together([a, b], tps), "a and b to share", TIMEOUT_S)
        before = {m.name: (m.c.assignment(), len(m.events)) for m in (a, b)}
        c = await Member(
            cluster.bootstrap, "eagers", "c", "range", topics=["eager"], **OPTS
        ).start()
        await until(lambda: assigned_together([a, b, c], tps), "three members", TIMEOUT_S)
        for m in (a, b):
            held, n = before[m.name]
            first, second = m.events[n], m.events[n + 1]
            assert first == ("revoked", frozenset(held))  # everything, before the plan
            assert second == ("assigned", frozenset(m.c.assignment()))
        for m in (a, b, c):
            await m.close()

    run(go())


def test_sync_group_consumer_commits_and_resumes(cluster: Cluster) -> None:
    tps = cluster.create_topic("synced", 3)
    sent = asyncio.run(produce(cluster.bootstrap, "synced", 3, 10, "s"))
    opts = {k: v for k, v in OPTS.items() if k != "auto_commit_interval_ms"}
    got: list[bytes | None] = []
    revoked: list[set[TopicPartition]] = []
    with GroupConsumer(
        cluster.bootstrap, group_id="syncers", enable_auto_commit=False, **opts
    ) as c:

        def on_revoked(tps_: set[TopicPartition]) -> None:
            c.commit()  # calling back into the consumer from its callback
            revoked.append(tps_)

        c.subscribe(["synced"], on_revoked=on_revoked)
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < 20 and time.monotonic() < deadline:
            got += [r.value for r in c.poll(200, max_records=20 - len(got))]
        assert len(got) == 20 and c.assignment() == tps and c.member_id
    assert revoked == [tps]
    with GroupConsumer(cluster.bootstrap, group_id="syncers", **opts) as c:
        c.subscribe(["synced"])
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < 30 and time.monotonic() < deadline:
            got += [r.value for r in c.poll(200)]
        assert sorted(got, key=str) == sorted(sent, key=str)  # resumed: nothing twice
        c.commit()
        assert c.committed(tps) == {tp: 10 for tp in tps}


def _longboat(args: list[str], timeout: float = 90) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "api", *args],
        capture_output=True,
        timeout=timeout,
        env={**os.environ, "LONGBOAT_CLUSTER_FILE": "/nonexistent"},
    )


def test_console_consume_with_a_group_resumes_where_the_group_stopped(cluster: Cluster) -> None:
    cluster.create_topic("cli-group", 3)
    sent = asyncio.run(produce(cluster.bootstrap, "cli-group", 3, 10, "line"))
    boot = ",".join(cluster.bootstrap)
    r = _longboat(
        [
            "consume",
            "cli-group",
            "--bootstrap",
            boot,
            "--group",
            "console",
            "--from-beginning",
            "--max-messages",
            "20",
        ]
    )
    assert r.returncode == 0, r.stderr.decode()
    first = r.stdout.decode().splitlines()
    assert len(first) == 20 and b"Processed a total of 20 messages" in r.stderr
    # The group committed exactly what was printed: the next run prints the other ten.
    r = _longboat(
        [
            "consume",
            "cli-group",
            "--bootstrap",
            boot,
            "--group",
            "console",
            "--from-beginning",
            "--timeout-ms",
            "3000",
        ]
    )
    assert r.returncode == 0, r.stderr.decode()
    rest = r.stdout.decode().splitlines()
    assert sorted(first + rest) == sorted(v.decode() for v in sent)
    r = _longboat(
        ["consume", "cli-group", "--bootstrap", boot, "--group", "console", "--partition", "0"]
    )
    assert r.returncode != 0 and b"--group" in r.stderr


def test_a_thread_per_member_sync_group(cluster: Cluster) -> None:
    """Two sync members on their own threads share a topic and read it all once."""
    tps = cluster.create_topic("threads", 6)
    sent = asyncio.run(produce(cluster.bootstrap, "threads", 6, 20, "th"))
    got: dict[str, list[bytes | None]] = {"a": [], "b": []}
    held: dict[str, set[TopicPartition]] = {}
    stop = threading.Event()

    def member(name: str) -> None:
        with GroupConsumer(cluster.bootstrap, group_id="threaders", client_id=name, **OPTS) as c:
            c.subscribe(["threads"])
            while not stop.is_set():
                got[name] += [r.value for r in c.poll(100)]
                held[name] = c.assignment()

    threads = [threading.Thread(target=member, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    wait_for(
        "both threads to read everything",
        lambda: (
            set(got["a"]) | set(got["b"]) >= sent
            and len(held.get("a", ())) == 3
            and len(held.get("b", ())) == 3
        ),
        TIMEOUT_S,
    )
    stop.set()
    for t in threads:
        t.join(30)
    assert held["a"] | held["b"] == tps and not held["a"] & held["b"]


def _offsets_topic_in_sync(b: Brokers) -> bool:
    for t in b.metadata(b.ids[0])["topics"]:
        if t["name"] == "__consumer_offsets":
            return bool(t["partitions"]) and all(
                p["leader"] >= 0 and len(p["isr"]) == len(p["replicas"]) for p in t["partitions"]
            )
    return False


def test_members_carry_on_through_a_sigkilled_coordinator(cluster: Cluster) -> None:
    """Last in the module: it kills a broker (and starts it again at the end)."""
    tps = cluster.create_topic("through-failover", 6, rf=3)
    group = "survivors"
    victim = -1

    async def go() -> None:
        nonlocal victim
        sent = await produce(cluster.bootstrap, "through-failover", 6, 30, "pre")
        a = await Member(
            cluster.bootstrap, group, "a", "cooperative-sticky", topics=["through-failover"], **OPTS
        ).start()
        b = await Member(
            cluster.bootstrap, group, "b", "cooperative-sticky", topics=["through-failover"], **OPTS
        ).start()
        await until(lambda: assigned_together([a, b], tps), "a and b to share", TIMEOUT_S)
        await until(lambda: a.seen() | b.seen() >= sent, "the first records", TIMEOUT_S)
        wait_for(
            "__consumer_offsets in sync", lambda: _offsets_topic_in_sync(cluster.brokers), TIMEOUT_S
        )
        t = Transport()
        try:
            cc = CoordinatorClient(
                t, MetadataCache(t, normalize_bootstrap(cluster.bootstrap)), group
            )
            await cc.call("describe", {})
            assert cc.coordinator_id is not None
            victim = cc.coordinator_id
        finally:
            await t.close()
        await asyncio.to_thread(cluster.brokers.kill, victim, signal.SIGKILL)
        # The members find the new coordinator (heartbeats, commits) and keep consuming,
        # including partitions whose leader died with the coordinator.
        sent |= await produce(cluster.bootstrap, "through-failover", 6, 30, "post")
        await until(lambda: a.seen() | b.seen() >= sent, "every record after the failover", 90)
        await until(lambda: assigned_together([a, b], tps), "a and b still sharing", TIMEOUT_S)
        for m in (a, b):
            await m.close()
        ends = await end_offsets(cluster.bootstrap, tps)
        assert await committed_offsets(cluster.bootstrap, group, tps) == ends

    try:
        run(go())
    finally:
        if victim >= 0:
            cluster.brokers.start(victim)
            cluster.brokers.wait_ready([victim], timeout_s=60)
