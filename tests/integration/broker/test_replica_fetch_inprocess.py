"""The leader's multi-partition follower fetch (``POST /internal/broker/v1/replica_fetch``),
in one process (one controller, two brokers, real HTTP): a body naming a partition twice is
refused and changes nothing; one partition's error (unknown partition, unknown leader epoch) is that
partition's answer while the others are served; idle partitions are left out and the request
long-polls until data arrives on any partition, or until max wait. On the follower, one
partition that cannot be appended backs off alone while acks=all on the others completes;
a leader without ``replica_fetch`` (an older version) is fetched from through ``fetch``."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp
import msgpack
from inprocess_brokers import two_brokers, wait

from broker import fetcher
from broker.fetch_plan import RECORDS_APART, decode_records_apart
from broker.fetch_session import FetchSessionCache
from metalog.commands import CreateTopic
from storage.batch import encode_batch


async def _post(url: str, route: str, body: dict[str, Any]) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"{url}/internal/broker/v1/{route}", data=msgpack.packb(body)) as r,
    ):
        return r.status, msgpack.unpackb(await r.read(), raw=False)


def test_replica_fetch_serves_each_partition_on_its_own(tmp_path: Path) -> None:
    async def go() -> None:
        async with two_brokers(tmp_path) as tb:
            lid, fid, url = tb.leader, tb.follower, tb.urls[tb.leader]
            lmgr = tb.mgrs[lid]
            await lmgr.controller.execute(
                CreateTopic(name="m", num_partitions=4, replication_factor=2)
            )

            def led() -> list[int]:
                ps = []
                for p in range(4):
                    rep = lmgr.by_name.get(("m", p))
                    if rep is not None and rep.leader is not None and rep.leader.is_leader:
                        ps.append(p)
                return ps

            await wait("a partition of m led by the leader of t", led)
            parts = [("t", 0)] + [("m", p) for p in led()]

            def entry(topic: str, p: int, **kw: Any) -> dict[str, Any]:
                rep = lmgr.by_name[(topic, p)]
                assert rep.leader is not None
                e = {
                    "topic": topic,
                    "partition": p,
                    "fetch_offset": rep.log.log_end_offset,
                    "leader_epoch": rep.leader.leader_epoch,
                    "last_fetched_epoch": rep.log.latest_epoch,
                    "high_watermark": rep.leader.high_watermark,
                    "log_start_offset": rep.log.log_start_offset,
                    "max_bytes": 1 << 20,
                }
                return e | kw

            def body(entries: list[dict[str, Any]], max_wait_ms: int) -> dict[str, Any]:
                return {"replica_id": fid, "max_wait_ms": max_wait_ms, "partitions": entries}

            # Each partition at most once: refused whole, with a clear message.
            status, ans = await _post(url, "replica_fetch", body([entry("t", 0), entry("t", 0)], 0))
            assert status == 400 and ans["error"] == "INVALID_REQUEST", ans
            assert "t-0 twice" in ans["message"]

            # Nothing new anywhere: held for max wait, and every partition left out.
            t0 = time.monotonic()
            status, ans = await _post(
                url, "replica_fetch", body([entry(t, p) for t, p in parts], 400)
            )
            took = time.monotonic() - t0
            assert status == 200 and ans == {"partitions": []}, ans
            assert took >= 0.35, took

            # Only a newer HW to bring back: held for the HW delay, in case data comes to
            # carry it (one exchange per replicated write instead of two), then answered.
            pa = await _produce(url, "t", 0, b"hw")
            assert not pa.get("error"), pa
            hw = lmgr.by_name[("t", 0)].high_watermark
            lmgr.follower_hw_delay_s = 0.3
            t0 = time.monotonic()
            status, ans = await _post(
                url, "replica_fetch", body([entry("t", 0, high_watermark=hw - 1)], 10_000)
            )
            took = time.monotonic() - t0
            lmgr.follower_hw_delay_s = 0.0
            assert status == 200 and 0.25 <= took < 5, (took, ans)
            [e] = ans["partitions"]
            assert (e["high_watermark"], len(e["records"])) == (hw, 0), ans

            # A partition this broker does not have, and one named in a leader epoch the
            # leader does not know: their own errors, answered at once; the others are
            # served (left out here: nothing new).
            newer = lmgr.by_name[parts[-1]].registration.leader_epoch + 1
            entries = [
                entry("t", 0),
                {**entry("t", 0), "topic": "nope"},
                entry(*parts[-1], leader_epoch=newer),
            ]
            t0 = time.monotonic()
            status, ans = await _post(url, "replica_fetch", body(entries, 10_000))
            assert time.monotonic() - t0 < 5
            by = {(e["topic"], e["partition"]): e for e in ans["partitions"]}
            assert by[("nope", 0)]["error"] == "UNKNOWN_TOPIC_OR_PARTITION", ans
            assert by[parts[-1]]["error"] == "UNKNOWN_LEADER_EPOCH", ans
            assert ("t", 0) not in by

            # A long poll over every partition wakes on data in any one of them, and answers
            # with that partition only.
            target = parts[-1]
            fetch = asyncio.create_task(
                _post(url, "replica_fetch", body([entry(t, p) for t, p in parts], 20_000))
            )
            await asyncio.sleep(0.3)
            assert not fetch.done()
            t0 = time.monotonic()
            batch = encode_batch([(None, b"wake", int(time.time() * 1000), ())])
            pa = await _post(
                url,
                "produce",
                {"topic": target[0], "partition": target[1], "acks": 1, "batch": batch},
            )
            assert not pa[1].get("error"), pa
            status, ans = await fetch
            assert time.monotonic() - t0 < 5
            got = [(e["topic"], e["partition"]) for e in ans["partitions"]]
            assert got == [target], ans
            assert len(ans["partitions"][0]["records"]) == len(batch)

            # Asked for with records_apart, the same answer comes with its records after the
            # map (what followers ask for): the same bytes, the same fields.
            again = body([entry(*target, fetch_offset=0), {**entry("t", 0), "topic": "nope"}], 0)
            async with (
                aiohttp.ClientSession() as s,
                s.post(
                    f"{url}/internal/broker/v1/replica_fetch",
                    data=msgpack.packb(again | {"records_apart": True}),
                ) as r,
            ):
                assert r.content_type == RECORDS_APART
                apart = decode_records_apart(await r.read())
            _, whole = await _post(url, "replica_fetch", again)
            assert [bytes(e.get("records", b"")) for e in apart["partitions"]] == [
                e.get("records", b"") for e in whole["partitions"]
            ]
            stored = lmgr.by_name[target].log.read(0, 1 << 20).data
            [served] = [e for e in apart["partitions"] if e["topic"] == target[0]]
            assert bytes(served["records"]) == stored and stored
            strip = [{k: v for k, v in e.items() if k != "records"} for e in apart["partitions"]]
            assert strip == [
                {k: v for k, v in e.items() if k != "records"} for e in whole["partitions"]
            ]

    asyncio.run(go())


async def _produce(url: str, topic: str, partition: int, value: bytes) -> dict[str, Any]:
    batch = encode_batch([(None, value, int(time.time() * 1000), ())])
    body = {"topic": topic, "partition": partition, "acks": -1, "timeout_ms": 5_000}
    ans: dict[str, Any] = (await _post(url, "produce", body | {"batch": batch}))[1]
    return ans


def test_one_partition_failing_on_the_follower_does_not_stall_the_others(tmp_path: Path) -> None:
    async def go() -> None:
        async with two_brokers(tmp_path) as tb:
            lid, fid, url = tb.leader, tb.follower, tb.urls[tb.leader]
            fmgr: Any = tb.mgrs[fid]
            await tb.mgrs[lid].controller.execute(
                CreateTopic(name="m", num_partitions=6, replication_factor=2)
            )

            def led() -> list[int]:
                m = tb.mgrs[lid]
                return [
                    p
                    for p in range(6)
                    if (r := m.by_name.get(("m", p))) is not None
                    and r.leader is not None
                    and r.leader.is_leader
                ]

            ps = await wait("two partitions of m led by the leader of t", lambda: led()[1:])
            ps = led()
            sick, well = ps[0], ps[1:]
            # The follower cannot append what it fetches of one partition (as a bad disk
            # would make it): that partition backs off, alone.
            real = fmgr.append_as_follower

            def append(rep: Any, fs: Any, data: bytes, hw: int) -> None:
                if rep.name == f"m-{sick}" and data:
                    raise OSError("injected: cannot append")
                real(rep, fs, data, hw)

            fmgr.append_as_follower = append
            t0 = time.monotonic()
            sick_ack = asyncio.create_task(_produce(url, "m", sick, b"stuck"))
            for p in well:
                ans = await _produce(url, "m", p, b"ok")
                assert not ans.get("error"), ans
            assert time.monotonic() - t0 < 5
            assert not sick_ack.done()
            assert tb.mgrs[fid].by_name[("m", sick)].log.log_end_offset == 0
            # Healed, it catches up and the held acks=all completes.
            del fmgr.append_as_follower
            async with asyncio.timeout(10):
                ans = await sick_ack
            assert not ans.get("error"), ans
            assert tb.mgrs[fid].by_name[("m", sick)].log.log_end_offset == 1

    asyncio.run(go())


def test_a_leader_without_replica_fetch_is_fetched_from_partition_by_partition(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A leader of an older version (a rolling upgrade) answers ``replica_fetch`` with 404:
    the follower fetches through the single-partition ``fetch`` route instead."""
    real = fetcher.call
    asked: list[str] = []

    async def call(session: Any, url: str, route: str, body: dict[str, Any]) -> Any:
        asked.append(route)
        if route == "replica_fetch":
            raise fetcher.FetchError("UNSUPPORTED_VERSION", "no such route")
        return await real(session, url, route, body)

    monkeypatch.setattr(fetcher, "call", call)

    async def go() -> None:
        async with two_brokers(tmp_path) as tb:
            for i in range(3):
                ans = await _produce(tb.urls[tb.leader], "t", 0, f"v{i}".encode())
                assert not ans.get("error") and ans["base_offset"] == i, ans
            frep = tb.mgrs[tb.follower].by_name[("t", 0)]
            assert frep.log.log_end_offset == 3
            assert "fetch" in asked and asked.count("replica_fetch") == 1

    asyncio.run(go())


def test_followers_fetch_in_sessions_sending_only_what_changed(tmp_path: Path) -> None:
    """KIP-227: once its session is open, a follower's fetches carry the partitions whose
    fetch state changed (here the one being produced to), the leader serves every partition
    of the session, and acks=all works throughout; when the leader loses its sessions (as
    on a restart) the follower opens a new one at once. A request naming a session the leader
    does not hold is refused with FETCH_SESSION_ID_NOT_FOUND."""

    async def go() -> None:
        async with two_brokers(tmp_path) as tb:
            lid, fid, url = tb.leader, tb.follower, tb.urls[tb.leader]
            lmgr: Any = tb.mgrs[lid]
            await lmgr.controller.execute(
                CreateTopic(name="s", num_partitions=16, replication_factor=2)
            )

            def led() -> list[int]:
                return [
                    p
                    for p in range(16)
                    if (r := lmgr.by_name.get(("s", p))) is not None
                    and r.leader is not None
                    and r.leader.is_leader
                    and fid in r.leader.isr
                ]

            await wait("four partitions of s led by the leader, ISR full", lambda: led()[3:])
            hot = led()[0]
            for i in range(20):
                ans = await _produce(url, "s", hot, b"v%d" % i)
                assert not ans.get("error"), ans
            counts = lmgr.fetch_sessions.counts
            assert counts.opened >= 1 and counts.incremental >= 20, counts
            followed = len(
                [r for r in lmgr.by_name.values() if r.leader is not None and r.leader.is_leader]
            )
            # Served for every followed partition, sent only the few that changed.
            assert counts.partitions_served / counts.incremental >= followed - 1, counts
            assert counts.partitions_sent / counts.incremental <= 3, counts
            assert tb.mgrs[fid].by_name[("s", hot)].log.log_end_offset == 20

            # The leader forgets every session: the follower's next fetch is refused, it opens
            # a new session at once, and acks=all goes on.
            lmgr.fetch_sessions = FetchSessionCache()
            for i in range(5):
                ans = await _produce(url, "s", hot, b"w%d" % i)
                assert not ans.get("error"), ans
            assert lmgr.fetch_sessions.counts.opened == 1
            assert tb.mgrs[fid].by_name[("s", hot)].log.log_end_offset == 25

            status, ans = await _post(
                url,
                "replica_fetch",
                {
                    "replica_id": fid,
                    "max_wait_ms": 0,
                    "session_id": 12345,
                    "session_epoch": 3,
                    "partitions": [],
                },
            )
            assert ans["error"] == "FETCH_SESSION_ID_NOT_FOUND", (status, ans)

    asyncio.run(go())


def test_a_follower_fetch_that_moves_nothing_wakes_no_waiter(tmp_path: Path) -> None:
    """Every partition of a fetch session is in every follower fetch; on an idle one (the
    follower at the log end, nothing above the HW) the fetch counts the follower as caught up
    and wakes nobody. A fetch that moves the follower's log start (DeleteRecords waits on
    that) still wakes the partition's waiters."""

    async def go() -> None:
        async with two_brokers(tmp_path) as tb:
            lmgr: Any = tb.mgrs[tb.leader]
            ans = await _produce(tb.urls[tb.leader], "t", 0, b"v")
            assert not ans.get("error"), ans
            rep = lmgr.by_name[("t", 0)]
            leader = rep.leader
            assert leader.high_watermark == rep.log.log_end_offset == 1
            progress = leader.follower(tb.follower)
            # No await from here on: the leader's own timer cannot notify in between.
            woken = rep.changed

            def fetch(log_start: int) -> None:
                div = lmgr._follower_position(
                    rep,
                    leader,
                    tb.follower,
                    rep.log.log_end_offset,
                    rep.log.latest_epoch,
                    -1,
                    log_start,
                )
                assert div is None

            fetch(progress.log_start_offset)
            assert rep.changed is woken and not woken.is_set()
            assert progress.log_end_offset == 1  # counted all the same
            start = progress.log_start_offset
            fetch(start + 1)
            assert woken.is_set() and rep.changed is not woken
            fetch(start)

    asyncio.run(go())
