"""The broker shell in one process, fast: one controller and two brokers on one event loop
(real HTTP on 127.0.0.1). A topic with RF 2 and min.insync.replicas=2: acks=all completes once
the follower fetched, both logs hold the same batches, the follower's HW follows the leader's,
and a follower's fetch past the end of its last fetched epoch is answered with that end."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path
from typing import Any

import aiohttp
import msgpack
from inprocess_brokers import two_brokers, wait

from broker.producer_state import ProducerStateConfig
from broker.replica_manager import (
    PRODUCER_SNAPSHOT_NAME,
    load_producer_state,
)
from metalog.records import BrokerId
from storage.batch import decode_records, encode_batch, iter_batches
from storage.log import PartitionLog


async def _call(url: str, route: str, body: dict[str, Any]) -> Any:
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"{url}/internal/broker/v1/{route}", data=msgpack.packb(body)) as r,
    ):
        return msgpack.unpackb(await r.read(), raw=False)


def _values(log: PartitionLog) -> list[bytes | None]:
    out: list[bytes | None] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:  # a read stays within one segment
        data = log.read(offset, 1 << 20).data
        for pos, h in iter_batches(data):
            out += [r.value for r in decode_records(data[pos : pos + h.size])]
            offset = h.next_offset
    return out


def test_two_brokers_replicate_a_partition_in_process(tmp_path: Path) -> None:
    async def go() -> None:
        async with two_brokers(tmp_path) as tb:
            mgrs, urls, lid, fid = tb.mgrs, tb.urls, tb.leader, tb.follower
            sent = []
            ts0 = int(time.time() * 1000)
            for i in range(10):
                v = f"v{i}".encode()
                batch = encode_batch([(None, v, ts0 + i, ())])
                ans = await _call(
                    urls[lid],
                    "produce",
                    {"topic": "t", "partition": 0, "acks": -1, "timeout_ms": 5_000, "batch": batch},
                )
                assert not ans.get("error") and ans["base_offset"] == i, ans
                sent.append(v)
            frep = mgrs[fid].by_name[("t", 0)]
            lrep = mgrs[lid].by_name[("t", 0)]
            assert frep.log.log_end_offset == 10  # acks=all: the follower has it
            assert lrep.high_watermark == 10
            await wait("the follower's HW", lambda: frep.high_watermark == 10)
            for rep in (frep, lrep):
                assert _values(rep.log) == sent

            # A follower whose log of the leader's epoch goes past where the leader's ends
            # diverges there (and its state is not updated).
            ans = await _call(
                urls[lid],
                "fetch",
                {
                    "topic": "t",
                    "partition": 0,
                    "replica_id": fid,
                    "fetch_offset": 12,
                    "leader_epoch": lrep.registration.leader_epoch,
                    "last_fetched_epoch": lrep.registration.leader_epoch,
                    "max_wait_ms": 0,
                },
            )
            assert ans["diverging_epoch"] == [lrep.registration.leader_epoch, 10], ans
            assert lrep.leader is not None
            progress = lrep.leader.follower(BrokerId(fid))
            assert progress is not None and progress.log_end_offset == 10
            # Consumers see the HW; a non-leader forwards to the leader, and refuses (naming
            # the leader) a request another broker already forwarded.
            ans = await _call(
                urls[fid], "list_offsets", {"topic": "t", "partition": 0, "timestamp": -1}
            )
            assert ans["offset"] == 10, ans
            ans = await _call(
                urls[fid],
                "list_offsets",
                {"topic": "t", "partition": 0, "timestamp": -1, "forwarded": True},
            )
            assert ans["error"] == "NOT_LEADER_OR_FOLLOWER" and ans["leader_id"] == lid
            ans = await _call(
                urls[lid], "list_offsets", {"topic": "t", "partition": 0, "timestamp": ts0 + 5}
            )
            assert ans["offset"] == 5

            # ISR shrink by lag, by the leader (replica.lag.time.max.ms made short here: the
            # controller knows no such topic config): the follower's fetches stop, the
            # leader proposes the ISR without it, the controller commits it; acks=all is then
            # refused below min.insync.replicas; the fetches resume and the leader adds
            # the follower back.
            assert lrep.leader is not None
            lrep.leader.config = dataclasses.replace(
                lrep.leader.config, replica_lag_time_ms_max=300
            )
            # The follower loses its way to the leader (its fetcher retries, unanswered).
            fmgr: Any = mgrs[fid]
            fmgr.leader_url = lambda broker_id: None
            # A follower at the leader's LEO is in sync however long ago it fetched: the log
            # must grow past it.
            ans = await _call(
                urls[lid],
                "produce",
                {
                    "topic": "t",
                    "partition": 0,
                    "acks": 1,
                    "timeout_ms": 5_000,
                    "batch": encode_batch([(None, b"acks1", ts0, ())]),
                },
            )
            assert not ans.get("error"), ans
            await wait(
                "the ISR shrunk by the leader",
                lambda: (
                    lrep.leader is not None
                    and lrep.leader.isr == (lid,)
                    and lrep.leader.pending is None
                ),
            )
            ans = await _call(
                urls[lid],
                "produce",
                {
                    "topic": "t",
                    "partition": 0,
                    "acks": -1,
                    "timeout_ms": 5_000,
                    "batch": encode_batch([(None, b"refused", ts0, ())]),
                },
            )
            assert ans["error"] == "NOT_ENOUGH_REPLICAS", ans
            assert lrep.high_watermark == 10  # KIP-966: no HW progress below min ISR
            del fmgr.leader_url
            await wait(
                "the follower back in the ISR",
                lambda: lrep.leader is not None and sorted(lrep.leader.isr) == sorted((lid, fid)),
            )
            await wait("the HW past the acks=1 batch", lambda: lrep.high_watermark == 11)
            assert _values(frep.log) == [*sent, b"acks1"]

            # A clean shutdown snapshots producer state; the next open loads it (and the
            # headers after it) instead of rebuilding, and the result is the same.
            ans = await _call(
                urls[lid],
                "produce",
                {
                    "topic": "t",
                    "partition": 0,
                    "acks": 1,
                    "timeout_ms": 5_000,
                    "batch": encode_batch(
                        [(None, b"idem", ts0, ())],
                        producer_id=77,
                        producer_epoch=3,
                        base_sequence=0,
                    ),
                },
            )
            assert not ans.get("error"), ans
            ldir = lrep.log.dir_path
            await mgrs[lid].stop()
            snap = Path(ldir) / PRODUCER_SNAPSHOT_NAME
            assert snap.exists()
            plog = PartitionLog.open(ldir)
            try:
                loaded = load_producer_state(plog, ProducerStateConfig())
                assert not snap.exists()
                rebuilt = load_producer_state(plog, ProducerStateConfig())
                entry = loaded.get(77)
                assert entry is not None and entry.producer_epoch == 3
                assert loaded.producers == rebuilt.producers
                assert loaded.end_offset == rebuilt.end_offset == plog.log_end_offset
            finally:
                plog.close()

    asyncio.run(go())
