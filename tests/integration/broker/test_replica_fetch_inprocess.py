"""The leader's multi-partition follower fetch (``POST /internal/broker/v1/replica_fetch``),
in one process (one controller, two brokers, real HTTP): a body naming a partition twice is
refused and changes nothing; one partition's error (unknown partition, unknown leader epoch) is that
partition's answer while the others are served; idle partitions are left out and the request
long-polls until data arrives on any partition, or until max wait."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp
import msgpack
from inprocess_brokers import two_brokers, wait

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

    asyncio.run(go())
