"""Transactions end to end with real processes (3 controllers, 3 brokers): the transactional
producer of ``api.client``, the coordinator on the brokers, markers on the partitions, and
read_committed reads through the brokers' fetch route.

* a committed transaction over several topics and partitions is read whole at
  read_committed; an aborted one is never read, and neither are open ones;
* a zombie (an older producer of the same transactional id) is fenced: its open transaction
  is aborted, its commit and its sends refused;
* a transaction past its timeout is aborted by the coordinator, and its producer fenced;
* the coordinator killed between PrepareCommit and CompleteCommit (the markers cannot be
  written: the data partition's only broker is paused): the new coordinator completes it;
* consumer offsets sent with a transaction count only if it commits, and a new group
  coordinator rebuilds them from the log.
"""

from __future__ import annotations

import asyncio
import signal
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import orjson
import pytest

from api.client import AsyncProducer, Producer, ProducerFencedError
from api.client.coordinator import CoordinatorClient
from api.client.transport import Transport
from api.node.localcluster import Brokers, Quorum, running_cluster, wait_for
from broker.group_coordinator import partition_for
from metalog.client import ControllerClient
from metalog.commands import CreateTopic
from storage.batch import decode_records, iter_batches

pytestmark = pytest.mark.slow

STATE_PARTITIONS = 6


class Cluster:
    def __init__(self, quorum: Quorum, brokers: Brokers) -> None:
        self.quorum = quorum
        self.brokers = brokers

    @property
    def bootstrap(self) -> list[str]:
        return [self.brokers.url(b) for b in self.brokers.ids if b in self.brokers.procs]

    def create_topic(self, name: str, partitions: int, rf: int = 3) -> None:
        async def go() -> None:
            async with ControllerClient(self.quorum.urls, timeout_s=20) as cc:
                await cc.execute(
                    CreateTopic(name=name, num_partitions=partitions, replication_factor=rf)
                )

        asyncio.run(go())
        wait_for(
            f"{name} led on every broker's metadata",
            lambda: all(
                all(p["leader"] >= 0 for p in self.partitions(name, b)) and self.partitions(name, b)
                for b in self.brokers.procs
            ),
            30,
        )

    def metadata(self, b: int) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.brokers.url(b)}/v3/broker/metadata", timeout=10) as r:
            out: dict[str, Any] = orjson.loads(r.read())
            return out

    def partitions(self, topic: str, b: int) -> list[dict[str, Any]]:
        for t in self.metadata(b)["topics"]:
            if t["name"] == topic:
                return list(t["partitions"])
        return []

    def txn(self, b: int, op: str, body: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(
            f"{self.brokers.url(b)}/internal/broker/v1/txn/{op}",
            data=msgpack.packb(body),
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=15) as r:
            out: dict[str, Any] = msgpack.unpackb(r.read())
            return out

    def any_broker(self) -> int:
        return next(iter(sorted(self.brokers.procs)))

    def coordinator_of(self, tid: str) -> int:
        ans = self.txn(self.any_broker(), "find_coordinator", {"transactional_id": tid})
        assert ans["error"] == "NONE", ans
        return int(ans["coordinator_id"])

    def describe(self, tid: str) -> dict[str, Any]:
        def ask() -> dict[str, Any] | None:
            for b in sorted(self.brokers.procs):
                try:
                    ans = self.txn(b, "describe", {"transactional_id": tid})
                except OSError:
                    continue
                if ans["error"] == "NONE":
                    return ans
            return None

        out: list[dict[str, Any]] = []
        wait_for(f"{tid} described", lambda: (a := ask()) is not None and not out.append(a), 30)
        return out[0]


async def read(
    bootstrap: list[str], topic: str, partition: int, isolation: str
) -> tuple[list[bytes], int]:
    """Every record value of the partition readable at ``isolation`` (control batches and
    aborted batches left out) and the offset the read stopped at (LSO or HW)."""
    t = Transport()
    try:
        values: list[bytes] = []
        offset = 0
        while True:
            ans: dict[str, Any] = {}
            for url in bootstrap:
                try:
                    ans = await t.call(
                        url,
                        "fetch",
                        {
                            "topic": topic,
                            "partition": partition,
                            "fetch_offset": offset,
                            "max_wait_ms": 0,
                            "isolation_level": isolation,
                        },
                    )
                    break
                except Exception:
                    continue
            data = ans["records"]
            end = (
                ans["last_stable_offset"]
                if isolation == "read_committed"
                else ans["high_watermark"]
            )
            for pos, h in iter_batches(data):
                if not h.is_control:
                    for r in decode_records(data[pos : pos + h.size]):
                        if r.value is not None:
                            values.append(bytes(r.value))
                offset = h.next_offset
            if not data or offset >= end:
                return values, end
    finally:
        await t.close()


def committed_values(c: Cluster, topic: str, partitions: int) -> list[bytes]:
    out: list[bytes] = []
    for p in range(partitions):
        out += asyncio.run(read(c.bootstrap, topic, p, "read_committed"))[0]
    return sorted(out)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root: Path = tmp_path_factory.mktemp("txn-procs")
    with running_cluster(
        root,
        broker_args=[
            "--override",
            f"transaction_state_log_num_partitions={STATE_PARTITIONS}",
            "--override",
            "transaction_abort_timed_out_transaction_cleanup_interval_ms=200",
        ],
    ) as (q, b):
        yield Cluster(q, b)


def test_committed_is_read_whole_and_aborted_never(cluster: Cluster) -> None:
    cluster.create_topic("t-out-a", 2)
    cluster.create_topic("t-out-b", 1)

    async def go() -> None:
        async with AsyncProducer(cluster.bootstrap, transactional_id="tx-commit", linger_ms=1) as p:
            await p.init_transactions()
            async with p.transaction():
                for i in range(10):
                    await p.send("t-out-a", f"c{i}".encode(), partition=i % 2)
                await p.send("t-out-b", b"c-b")
            p.begin_transaction()
            for i in range(5):
                await p.send("t-out-a", f"x{i}".encode(), partition=i % 2)
            await p.send("t-out-b", b"x-b")
            await p.flush()
            # Written but not committed: read_uncommitted sees it, read_committed does not.
            assert b"x-b" in (await read(cluster.bootstrap, "t-out-b", 0, "read_uncommitted"))[0]
            assert b"x-b" not in (await read(cluster.bootstrap, "t-out-b", 0, "read_committed"))[0]
            await p.abort_transaction()
            with pytest.raises(RuntimeError):
                async with p.transaction():
                    await p.send("t-out-b", b"y-b")
                    raise RuntimeError("the context manager aborts")
            async with p.transaction():
                await p.send("t-out-b", b"z-b")

    asyncio.run(go())
    want_a = sorted(f"c{i}".encode() for i in range(10))

    def settled() -> bool:
        return committed_values(cluster, "t-out-a", 2) == want_a and committed_values(
            cluster, "t-out-b", 1
        ) == [b"c-b", b"z-b"]

    wait_for("the committed transactions visible at read_committed", settled, 30)
    assert cluster.describe("tx-commit")["state"] == "CompleteCommit"


def test_a_zombie_is_fenced_and_its_open_transaction_aborted(cluster: Cluster) -> None:
    cluster.create_topic("t-zombie", 1)

    async def go() -> None:
        zombie = AsyncProducer(cluster.bootstrap, transactional_id="tx-zombie", linger_ms=1)
        await zombie.init_transactions()
        zombie.begin_transaction()
        await zombie.send_and_wait("t-zombie", b"zombie-1")
        async with AsyncProducer(
            cluster.bootstrap, transactional_id="tx-zombie", linger_ms=1
        ) as fresh:
            await fresh.init_transactions()  # fences the zombie, aborts its transaction
            assert fresh.producer_epoch > zombie.producer_epoch
            with pytest.raises(ProducerFencedError):
                await zombie.commit_transaction()
            with pytest.raises(ProducerFencedError):
                await zombie.send("t-zombie", b"zombie-2")
            async with fresh.transaction():
                await fresh.send("t-zombie", b"fresh-1")
        await zombie.close()

    asyncio.run(go())
    wait_for(
        "only the fresh producer's record committed",
        lambda: committed_values(cluster, "t-zombie", 1) == [b"fresh-1"],
        30,
    )


def test_a_transaction_past_its_timeout_is_aborted(cluster: Cluster) -> None:
    cluster.create_topic("t-timeout", 1)

    async def go() -> None:
        async with AsyncProducer(
            cluster.bootstrap,
            transactional_id="tx-timeout",
            transaction_timeout_ms=1000,
            linger_ms=1,
        ) as p:
            await p.init_transactions()
            p.begin_transaction()
            await p.send_and_wait("t-timeout", b"late")
            await asyncio.sleep(0.2)
            # Open: the LSO holds back at the transaction's first offset.
            assert (await read(cluster.bootstrap, "t-timeout", 0, "read_committed"))[1] == 0
            await asyncio.sleep(3)
            with pytest.raises(ProducerFencedError):
                await p.commit_transaction()

    asyncio.run(go())
    values, lso = asyncio.run(read(cluster.bootstrap, "t-timeout", 0, "read_committed"))
    assert values == [] and lso >= 2  # the record and the abort marker, both stable
    assert cluster.describe("tx-timeout")["state"] == "CompleteAbort"


def test_the_new_coordinator_completes_a_commit_the_old_one_prepared(cluster: Cluster) -> None:
    # The data partition lives on one broker only, which we pause: no marker can be written
    # while the transaction is decided, so the coordinator is killed mid-commit.
    cluster.create_topic("t-failover", 1, rf=1)
    data_broker = cluster.partitions("t-failover", cluster.any_broker())[0]["leader"]
    tid = next(
        f"tx-failover-{i}"
        for i in range(1000)
        if cluster.coordinator_of(f"tx-failover-{i}") != data_broker
    )
    coordinator = cluster.coordinator_of(tid)

    async def prepare() -> None:
        p = AsyncProducer(cluster.bootstrap, transactional_id=tid, linger_ms=1)
        await p.init_transactions()
        p.begin_transaction()
        for i in range(3):
            await p.send_and_wait("t-failover", f"f{i}".encode())
        cluster.brokers.send_signal(data_broker, signal.SIGSTOP)
        try:
            async with asyncio.timeout(30):
                await p.commit_transaction()
        finally:
            await p.transport.close()

    try:
        asyncio.run(prepare())
        assert cluster.describe(tid)["state"] == "PrepareCommit"
        cluster.brokers.kill(coordinator)
    finally:
        cluster.brokers.send_signal(data_broker, signal.SIGCONT)
    try:
        wait_for(
            "the new coordinator completed the commit",
            lambda: cluster.describe(tid)["state"] == "CompleteCommit",
            90,
        )
        assert committed_values(cluster, "t-failover", 1) == [b"f0", b"f1", b"f2"]
    finally:
        cluster.brokers.start(coordinator)
        cluster.brokers.wait_ready(timeout_s=60)


def test_offsets_commit_atomically_with_the_outputs(cluster: Cluster) -> None:
    cluster.create_topic("t-eos-in", 1)
    cluster.create_topic("t-eos-out", 1)
    group = "g-eos"

    async def committed_offset() -> int | None:
        p = AsyncProducer(cluster.bootstrap)
        await p.metadata.refresh()
        try:
            c = CoordinatorClient(p.transport, p.metadata, group)
            ans = await c.call("fetch_offsets", {"partitions": [["t-eos-in", 0]]})
            offsets = {(o[0], o[1]): o[2] for o in ans.get("offsets") or []}
            return offsets.get(("t-eos-in", 0))
        finally:
            await p.transport.close()

    async def go() -> None:
        async with AsyncProducer(cluster.bootstrap, linger_ms=1) as plain:
            for i in range(10):
                await plain.send_and_wait("t-eos-in", f"in{i}".encode())
        async with AsyncProducer(cluster.bootstrap, transactional_id="tx-eos", linger_ms=1) as p:
            await p.init_transactions()
            # Records 0..4 processed: outputs and the input offset in one transaction.
            async with p.transaction():
                for i in range(5):
                    await p.send("t-eos-out", f"out{i}".encode())
                await p.send_offsets_to_transaction({("t-eos-in", 0): 5}, group)
            # Records 5..9: processed, then aborted: neither outputs nor offset count.
            p.begin_transaction()
            for i in range(5, 10):
                await p.send("t-eos-out", f"out{i}".encode())
            await p.send_offsets_to_transaction({("t-eos-in", 0): 10}, group)
            await p.flush()
            assert await committed_offset() == 5  # pending until the commit marker
            await p.abort_transaction()

    asyncio.run(go())
    wait_for(
        "the committed outputs visible",
        lambda: committed_values(cluster, "t-eos-out", 1) == [f"out{i}".encode() for i in range(5)],
        30,
    )
    assert asyncio.run(committed_offset()) == 5
    # A new group coordinator rebuilds the same from the log: the transactional batches and
    # their markers.
    offsets_parts = cluster.partitions("__consumer_offsets", cluster.any_broker())
    coordinator = offsets_parts[partition_for(group, len(offsets_parts))]["leader"]
    cluster.brokers.kill(coordinator)
    try:
        wait_for(
            "the offsets reloaded by the new coordinator",
            lambda: asyncio.run(committed_offset()) == 5,
            60,
        )
    finally:
        cluster.brokers.start(coordinator)
        cluster.brokers.wait_ready(timeout_s=60)


def test_the_sync_producer_runs_transactions_too(cluster: Cluster) -> None:
    cluster.create_topic("t-sync", 1)
    with Producer(cluster.bootstrap, transactional_id="tx-sync", linger_ms=1) as p:
        p.init_transactions()
        with p.transaction():
            p.send("t-sync", b"s1")
            p.send("t-sync", b"s2")
        with pytest.raises(KeyError), p.transaction():
            p.send("t-sync", b"never")
            raise KeyError("aborts")
        p.begin_transaction()
        p.send("t-sync", b"s3")
        p.commit_transaction()
    wait_for(
        "the sync producer's committed records",
        lambda: committed_values(cluster, "t-sync", 1) == [b"s1", b"s2", b"s3"],
        30,
    )
