"""The partition side of transactions through the broker's node routes, in one process: one
controller and two brokers (RF 2, min.insync.replicas 2) on one event loop, real HTTP on
127.0.0.1. Transactional produce with the KIP-890 verifier hook, write_txn_markers (commit,
abort, fencing), the LSO, read_committed fetch and list_offsets, the follower's producer
state, and producer state after a restart."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import aiohttp
import msgpack
from inprocess_brokers import two_brokers, wait

from broker.producer_state import ProducerStateConfig
from broker.replica_manager import load_producer_state
from storage.batch import decode_records, encode_batch, iter_batches
from storage.log import PartitionLog
from storage.txn import AbortedTxn


async def _call(url: str, route: str, body: dict[str, Any]) -> Any:
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"{url}/internal/broker/v1/{route}", data=msgpack.packb(body)) as r,
    ):
        return msgpack.unpackb(await r.read(), raw=False)


def _values(data: bytes) -> list[bytes | None]:
    out: list[bytes | None] = []
    for pos, h in iter_batches(data):
        if not h.is_control:
            out += [r.value for r in decode_records(data[pos : pos + h.size])]
    return out


def test_transactions_on_the_partition_side(tmp_path: Path) -> None:
    async def go() -> None:
        async with two_brokers(tmp_path) as tb:
            mgrs, urls, lid, fid = tb.mgrs, tb.urls, tb.leader, tb.follower
            lurl, lmgr = urls[lid], mgrs[lid]
            lrep = lmgr.by_name[("t", 0)]
            frep = mgrs[fid].by_name[("t", 0)]
            asked: list[tuple[str, int, int, str, int]] = []
            refuse: set[int] = set()

            slow: dict[int, asyncio.Event] = {}

            async def verifier(tid: str, pid: int, epoch: int, topic: str, p: int) -> str | None:
                asked.append((tid, pid, epoch, topic, p))
                if pid in slow:
                    await slow[pid].wait()
                return "INVALID_TXN_STATE" if pid in refuse else None

            lmgr.txn_verifier = verifier
            ts = int(time.time() * 1000)

            async def produce(values: list[bytes], pid: int = -1, seq: int = -1, **kw: Any) -> Any:
                batch = encode_batch(
                    [(None, v, ts, ()) for v in values],
                    producer_id=pid,
                    producer_epoch=0 if pid >= 0 else -1,
                    base_sequence=seq,
                    transactional=pid >= 0,
                )
                body = {"topic": "t", "partition": 0, "acks": -1, "batch": batch, **kw}
                return await _call(lurl, "produce", body)

            async def markers(*ms: dict[str, Any]) -> list[Any]:
                full = [{"topic": "t", "partition": 0, "producer_epoch": 0, **m} for m in ms]
                ans = await _call(lurl, "write_txn_markers", {"markers": full})
                return [r["error"] for r in ans["results"]]

            async def fetch(level: str, offset: int = 0) -> Any:
                return await _call(
                    urls[fid],  # forwarded to the leader
                    "fetch",
                    {
                        "topic": "t",
                        "partition": 0,
                        "fetch_offset": offset,
                        "isolation_level": level,
                    },
                )

            async def latest(level: str) -> int:
                ans = await _call(
                    urls[fid],
                    "list_offsets",
                    {"topic": "t", "partition": 0, "timestamp": -1, "isolation_level": level},
                )
                return int(ans["offset"])

            # A transactional batch without its transactional id cannot be verified.
            ans = await produce([b"x"], pid=100, seq=0)
            assert ans["error"] == "INVALID_TXN_STATE", ans
            # The coordinator's refusal reaches the producer; nothing is appended.
            refuse.add(100)
            ans = await produce([b"x"], pid=100, seq=0, transactional_id="tx-a")
            assert ans["error"] == "INVALID_TXN_STATE" and lrep.log.log_end_offset == 0, ans
            refuse.clear()
            asked.clear()
            assert (await produce([b"a0", b"a1"], pid=100, seq=0, transactional_id="tx-a"))[
                "base_offset"
            ] == 0
            assert (await produce([b"a2"], pid=100, seq=2, transactional_id="tx-a"))[
                "base_offset"
            ] == 2
            assert asked == [("tx-a", 100, 0, "t", 0)]  # only the batch that opened it
            assert (await produce([b"plain"]))["base_offset"] == 3
            assert (await produce([b"b0"], pid=200, seq=0, transactional_id="tx-b"))[
                "base_offset"
            ] == 4
            assert lrep.high_watermark == 5 and lrep.last_stable_offset == 0
            assert await latest("read_committed") == 0
            assert await latest("read_uncommitted") == 5
            ans = await fetch("read_committed")
            assert ans["records"] == b"" and ans["last_stable_offset"] == 0, ans
            ans = await fetch("read_uncommitted")
            assert _values(ans["records"]) == [b"a0", b"a1", b"a2", b"plain", b"b0"]

            # Abort tx-a, commit tx-b: one request, both markers, answered after the HW.
            assert await markers(
                {"producer_id": 100, "commit": False, "coordinator_epoch": 1},
                {"producer_id": 200, "commit": True, "coordinator_epoch": 1, "partition": 0},
            ) == [None, None]
            assert lrep.high_watermark == 7 and lrep.last_stable_offset == 7
            assert frep.log.log_end_offset == 7  # acks=all: the follower has both
            assert lrep.log.aborted_txns_in(0, 7) == [AbortedTxn(100, 0, 5, 4)]
            await wait("the follower's state", lambda: frep.high_watermark == 7)
            assert frep.log.aborted_txns_in(0, 7) == lrep.log.aborted_txns_in(0, 7)
            assert frep.producers.first_unstable_offset is None
            ans = await fetch("read_committed")
            assert _values(ans["records"]) == [b"plain", b"b0"]
            assert ans["aborted_transactions"] == [[100, 0]]
            offsets = [(h.base_offset, h.record_count) for _, h in iter_batches(ans["records"])]
            assert offsets[0] == (0, 0)  # emptied, not dropped: the position moves past it
            assert await latest("read_committed") == 7

            # Fencing: an older coordinator epoch, an older producer epoch, a non-leader.
            assert await markers({"producer_id": 200, "commit": False, "coordinator_epoch": 0}) == [
                "TRANSACTION_COORDINATOR_FENCED"
            ]
            assert await markers(  # an abort with a bumped epoch (InitProducerId) fences epoch 0
                {"producer_id": 100, "commit": False, "coordinator_epoch": 1, "producer_epoch": 1},
            ) == [None]
            assert await markers(
                {"producer_id": 100, "commit": True, "coordinator_epoch": 1, "producer_epoch": 0},
            ) == ["INVALID_PRODUCER_EPOCH"]
            ans = await produce([b"zombie"], pid=100, seq=3, transactional_id="tx-a")
            assert ans["error"] == "INVALID_PRODUCER_EPOCH", ans
            ans = await _call(
                urls[fid],
                "write_txn_markers",
                {
                    "markers": [
                        {
                            "topic": "t",
                            "partition": 0,
                            "producer_id": 1,
                            "producer_epoch": 0,
                            "commit": True,
                            "coordinator_epoch": 0,
                        }
                    ]
                },
            )
            assert ans["results"][0]["error"] == "NOT_LEADER_OR_FOLLOWER", ans
            ans = await _call(lurl, "write_txn_markers", {"markers": [{"topic": "t"}]})
            assert ans["error"] == "INVALID_REQUEST", ans

            # Two batches of one producer in flight, both verified: both are appended.
            slow[300] = asyncio.Event()
            first = asyncio.ensure_future(produce([b"c0"], pid=300, seq=0, transactional_id="c"))
            second = asyncio.ensure_future(produce([b"c1"], pid=300, seq=1, transactional_id="c"))
            await wait("both asking", lambda: sum(a[1] == 300 for a in asked) == 2)
            slow[300].set()
            a1, a2 = await first, await second
            assert not a1.get("error") and not a2.get("error"), (a1, a2)
            assert a2["base_offset"] == a1["base_offset"] + 1
            # A marker written while a batch is being verified: the batch cannot open a
            # transaction the coordinator has just ended (KIP-890's verification guard).
            slow[400] = asyncio.Event()
            late = asyncio.ensure_future(produce([b"d0"], pid=400, seq=0, transactional_id="d"))
            await wait("asking", lambda: any(a[1] == 400 for a in asked))
            assert await markers({"producer_id": 400, "commit": False, "coordinator_epoch": 1}) == [
                None
            ]
            slow[400].set()
            ans = await late
            assert ans["error"] == "INVALID_TXN_STATE", ans
            assert lrep.producers.get(400) is not None
            assert not lrep.producers.get(400).in_transaction  # type: ignore[union-attr]
            assert await markers({"producer_id": 300, "commit": True, "coordinator_epoch": 1}) == [
                None
            ]

            # The coordinator's announcement (sent once its ONGOING record is committed)
            # answers the verification ahead: that epoch's first batch here opens the
            # transaction without asking. A follower ignores it; a marker ends it; a late
            # one, older than the producer's last marker here, opens nothing.
            async def added(url: str, pid: int, epoch: int) -> Any:
                body = {"producer_id": pid, "producer_epoch": epoch, "partitions": [["t", 0]]}
                return await _call(url, "txn_partitions_added", body)

            async def produce_e(value: bytes, pid: int, epoch: int, seq: int) -> Any:
                batch = encode_batch(
                    [(None, value, ts, ())],
                    producer_id=pid,
                    producer_epoch=epoch,
                    base_sequence=seq,
                    transactional=True,
                )
                body = {"topic": "t", "partition": 0, "acks": -1, "batch": batch}
                return await _call(lurl, "produce", {**body, "transactional_id": "e"})

            assert (await added(urls[fid], 500, 1)).get("error") in (None, "NONE")
            assert frep.txn_added == {}
            await added(lurl, 500, 1)
            asked.clear()
            ans = await produce_e(b"e0", 500, 1, 0)
            assert not ans.get("error") and asked == [], (ans, asked)
            assert lrep.producers.get(500).in_transaction  # type: ignore[union-attr]
            assert await markers(
                {"producer_id": 500, "commit": True, "coordinator_epoch": 1, "producer_epoch": 2}
            ) == [None]
            assert 500 not in lrep.txn_added
            await added(lurl, 500, 1)  # late: its transaction has ended here
            assert 500 not in lrep.txn_added
            ans = await produce_e(b"late", 500, 1, 1)
            assert ans["error"] == "INVALID_PRODUCER_EPOCH", ans
            await added(lurl, 500, 2)  # the next transaction's
            ans = await produce_e(b"e1", 500, 2, 0)
            assert not ans.get("error") and asked == [], (ans, asked)
            assert await markers(
                {"producer_id": 500, "commit": False, "coordinator_epoch": 1, "producer_epoch": 3}
            ) == [None]
            # An announcement that arrives while the batch is being verified answers it.
            slow[600] = asyncio.Event()
            first = asyncio.ensure_future(produce_e(b"f0", 600, 1, 0))
            await wait("asking", lambda: any(a[1] == 600 for a in asked))
            await added(lurl, 600, 1)
            async with asyncio.timeout(10):  # not waiting for the held question
                ans = await first
            assert not ans.get("error"), ans
            slow[600].set()
            assert await markers(
                {"producer_id": 600, "commit": True, "coordinator_epoch": 1, "producer_epoch": 2}
            ) == [None]
            ans = await _call(
                lurl,
                "txn_partitions_added",
                {"producer_id": 1, "producer_epoch": 0, "partitions": [["t"]]},
            )
            assert ans["error"] == "INVALID_REQUEST", ans

            # Producer state survives a restart, snapshot or not.
            end = lrep.log.log_end_offset
            ldir = lrep.log.dir_path
            want_aborted = lrep.log.aborted_txns_in(0, end)
            assert want_aborted
            await lmgr.stop()
            plog = PartitionLog.open(ldir)
            try:
                assert plog.recovery.clean and plog.recovery.txn_indexes_rebuilt == []
                assert plog.aborted_txns_in(0, end) == want_aborted
                for _ in range(2):  # from the snapshot, then rebuilt from the log
                    st = load_producer_state(plog, ProducerStateConfig())
                    assert st.end_offset == end and st.first_unstable_offset is None
            finally:
                plog.close()
            # Without the .txnindex files (a log from before them): rebuilt on open.
            for name in os.listdir(ldir):
                if name.endswith(".txnindex"):
                    os.unlink(os.path.join(ldir, name))
            plog = PartitionLog.open(ldir)
            try:
                assert plog.recovery.txn_indexes_rebuilt
                assert plog.aborted_txns_in(0, end) == want_aborted
            finally:
                plog.close()

    asyncio.run(go())
