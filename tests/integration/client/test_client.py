"""The Python client and the console commands against a real cluster of processes
(3 controllers, 3 brokers): produce and consume round trips, key placement, seeks, the sync
twins, ``longboat produce``/``consume``, and acks=all produce through a SIGKILLed leader.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from client_cluster import ClientCluster

from api.client import (
    AsyncConsumer,
    AsyncProducer,
    ClientError,
    Consumer,
    NoOffsetError,
    Producer,
    TopicPartition,
)
from api.client.partitioner import partition_for_key
from api.node.localcluster import running_cluster, wait_for

pytestmark = pytest.mark.slow


class Cluster(ClientCluster):
    def leader_of(self, topic: str, partition: int) -> int | None:
        for b in self.brokers.ids:
            if b not in self.brokers.procs:
                continue
            try:
                md = self.brokers.metadata(b)
            except OSError:
                continue
            for t in md["topics"]:
                if t["name"] == topic:
                    p = t["partitions"][partition]
                    if p["leader"] >= 0 and len(p["isr"]) == len(p["replicas"]):
                        return int(p["leader"])
        return None


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root: Path = tmp_path_factory.mktemp("client-cluster")
    with running_cluster(root) as (q, brokers):
        yield Cluster(q, brokers)


def test_async_round_trip_keys_headers_and_bulk(cluster: Cluster) -> None:
    cluster.create_topic("rt", 3)

    async def go() -> None:
        async with AsyncProducer(cluster.bootstrap, linger_ms=2) as p:
            assert p.producer_id >= 0  # idempotent by default
            keyed = [
                await p.send(
                    "rt",
                    f"k{i}".encode(),
                    key=f"key-{i % 17}".encode(),
                    headers=[("n", str(i).encode())],
                )
                for i in range(500)
            ]
            loose = [await p.send("rt", f"n{i}".encode()) for i in range(500)]
            bulk = await p.send_batch("rt", [f"b{i}".encode() for i in range(3000)], partition=1)
            reports = [await f for f in keyed + loose]
            deliveries = await bulk
        # Keys land where Kafka's murmur2 partitioner puts them.
        for i, md in enumerate(reports[:500]):
            assert md.partition == partition_for_key(f"key-{i % 17}".encode(), 3)
        assert sum(d.record_count for d in deliveries) == 3000
        assert all(d.partition == 1 for d in deliveries)
        # Null keys are sticky: whole batches to one partition, not one record per partition.
        assert len({md.partition for md in reports[500:]}) < 500 // 10
        expected = {(md.partition, md.offset): md for md in reports}
        async with AsyncConsumer(cluster.bootstrap, auto_offset_reset="earliest") as c:
            c.assign([TopicPartition("rt", p) for p in range(3)])
            got = []
            while len(got) < 4000:
                recs = await c.poll(5000)
                assert recs, f"stalled after {len(got)} records"
                got += recs
            assert await c.poll(300) == []
        by_part: dict[int, list[int]] = {}
        for r in got:
            by_part.setdefault(r.partition, []).append(r.offset)
            md = expected.get((r.partition, r.offset))
            if md is not None:
                assert md.timestamp == r.timestamp
                i = int(r.value[1:]) if r.value else -1  # type: ignore[index]
                if r.value and r.value.startswith(b"k"):
                    assert r.key == f"key-{i % 17}".encode()
                    assert r.headers == (("n", str(i).encode()),)
        for offsets in by_part.values():
            assert offsets == list(range(len(offsets)))  # every offset once, in order
        bulk_values = [r.value for r in got if r.value and r.value.startswith(b"b")]
        assert bulk_values == [f"b{i}".encode() for i in range(3000)]

    asyncio.run(go())


def test_sync_clients_seek_timestamps_and_errors(cluster: Cluster) -> None:
    cluster.create_topic("sync", 1)
    tp = TopicPartition("sync", 0)
    base = int(time.time() * 1000)
    with Producer(cluster.bootstrap[0], linger_ms=0) as p:
        futs = [p.send("sync", f"v{i}".encode(), timestamp_ms=base + i * 10) for i in range(100)]
        p.flush()
        offsets = [f.result(5).offset for f in futs]
    assert offsets == list(range(100))
    with Consumer(cluster.bootstrap, auto_offset_reset="none") as c:
        c.assign([tp])
        assert c.beginning_offsets([tp]) == {tp: 0}
        assert c.end_offsets([tp]) == {tp: 100}
        assert c.offsets_for_times({tp: base + 505}) == {tp: 51}
        assert c.offsets_for_times({tp: base + 10_000}) == {tp: None}
        with pytest.raises(NoOffsetError):
            c.poll(100)  # no position and auto_offset_reset='none'
        c.seek(tp, 42)
        recs = c.poll(5000, max_records=5)
        assert [r.offset for r in recs] == [42, 43, 44, 45, 46]
        assert recs[0].value == b"v42" and recs[0].timestamp == base + 420
        assert c.position(tp) == 47
        c.seek(tp, 1000)  # past the end: out of range, and no reset allowed
        with pytest.raises(ClientError) as e:
            c.poll(5000)
        assert e.value.code == "OFFSET_OUT_OF_RANGE"
        assert c.partitions_for("sync") == [0]
    with pytest.raises(ClientError) as e2:
        with Producer(cluster.bootstrap, request_timeout_ms=1500) as p:
            p.send("no-such-topic", b"x").result(10)
    assert e2.value.code == "UNKNOWN_TOPIC_OR_PARTITION"
    with pytest.raises(ValueError, match="idempotence"):
        Producer(cluster.bootstrap, acks=1)


def _longboat(
    args: list[str], stdin: bytes | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "api", *args],
        input=stdin,
        capture_output=True,
        timeout=timeout,
        env={**os.environ, "LONGBOAT_CLUSTER_FILE": "/nonexistent"},
    )


def test_console_produce_and_consume(cluster: Cluster) -> None:
    cluster.create_topic("console", 2)
    boot = ",".join(cluster.bootstrap)
    lines = b"".join(f"user{i % 3}:event {i}\n".encode() for i in range(50)) + b"last:no newline"
    r = _longboat(["produce", "console", "--bootstrap", boot, "--key-separator", ":"], lines)
    assert r.returncode == 0, r.stderr.decode()
    assert b"produced 51 record(s)" in r.stderr
    r = _longboat(
        [
            "consume",
            "console",
            "--bootstrap",
            boot,
            "--from-beginning",
            "--max-messages",
            "51",
            "--print-key",
        ]
    )
    assert r.returncode == 0, r.stderr.decode()
    out = r.stdout.decode().splitlines()
    assert sorted(out) == sorted(
        [f"user{i % 3}\tevent {i}" for i in range(50)] + ["last\tno newline"]
    )
    # Per key (one partition each), the order of production is kept.
    user0 = [line for line in out if line.startswith("user0\t")]
    assert user0 == [f"user0\tevent {i}" for i in range(0, 50, 3)]
    r = _longboat(
        ["produce", "console", "--bootstrap", boot, "--key-separator", ":"], b"no separator here\n"
    )
    assert r.returncode != 0 and b"no key separator" in r.stderr
    r = _longboat(["consume", "console"])
    assert r.returncode != 0 and b"--bootstrap" in r.stderr
    r = _longboat(["consume", "console", "--bootstrap", boot, "--timeout-ms", "500"])
    assert r.returncode == 0 and r.stdout == b""  # nothing new: exits after the idle time


def test_console_jsonl_headers_kcat_formats_offsets_times_and_exit(cluster: Cluster) -> None:
    import json

    cluster.create_topic("kcat", 2)
    boot = ",".join(cluster.bootstrap)
    b = ["--bootstrap", boot]
    lines = b"""{"key": "a", "value": "v0", "headers": {"h": "1"}, "timestamp": 1700000000000, "partition": 0}
{"key": null, "value": {"n": 1}, "partition": 0, "headers": [["x", "y"], ["bin", {"base64": "AAE="}]]}

{"value": {"base64": "/w=="}, "partition": 1, "timestamp": 1700000005000}
"""
    r = _longboat(["produce", "kcat", *b, "--jsonl"], lines)
    assert r.returncode == 0 and b"produced 3 record(s)" in r.stderr, r.stderr
    r = _longboat(
        [
            "produce",
            "kcat",
            *b,
            "-p",
            "1",
            "-H",
            "env=prod",
            "--parse-headers",
            "--key-separator",
            ":",
        ],
        b"h1:v1,h2:v2\tk:val\n",
    )
    assert r.returncode == 0, r.stderr

    # kcat's -f, from the start, exiting at the ends (no --timeout-ms needed).
    r = _longboat(
        ["consume", "kcat", *b, "-o", "earliest", "-e", "-f", "%t|%p|%o|%k|%K|%S|%T|%h\\n"]
    )
    assert r.returncode == 0, r.stderr
    got = sorted(r.stdout.split(b"\n")[:-1])
    assert got[0] == b"kcat|0|0|a|1|2|1700000000000|h=1"
    assert got[1].startswith(b"kcat|0|1||-1|7|") and got[1].endswith(b"|x=y,bin=\x00\x01")
    assert got[2] == b"kcat|1|0||-1|1|1700000005000|"
    assert got[3].startswith(b"kcat|1|1|k|1|3|") and got[3].endswith(b"|env=prod,h1=v1,h2=v2")
    assert len(got) == 4 and b"Processed a total of 4 messages" in r.stderr

    # -N from the end; a time; the console consumer's timestamp and headers columns.
    r = _longboat(["consume", "kcat", *b, "--offset", "-1", "--exit", "-f", "%p:%o\\n"])
    assert sorted(r.stdout.split()) == [b"0:1", b"1:1"], r.stderr
    r = _longboat(["consume", "kcat", *b, "--from-time", "1700000004000", "-e", "-f", "%p:%o "])
    # (0:1 had no timestamp of its own: the producer stamped it with its send time.)
    assert sorted(r.stdout.split()) == [b"0:1", b"1:0", b"1:1"], r.stderr
    r = _longboat(["consume", "kcat", *b, "--from-time", "2023-11-14T22:13:20Z", "-e", "-p", "0"])
    assert r.stdout.decode().splitlines() == ["v0", '{"n":1}'], r.stderr
    r = _longboat(
        [
            *("consume", "kcat", *b, "-p", "1", "-o", "1", "-e"),
            *("--print-timestamp", "--print-headers", "--print-key"),
        ]
    )
    (line,) = r.stdout.decode().splitlines()
    ts, hdrs, key, value = line.split("\t")
    assert ts.startswith("CreateTime:") and int(ts[11:]) > 1700000005000
    assert (hdrs, key, value) == ("env:prod,h1:v1,h2:v2", "k", "val")
    r = _longboat(["consume", "kcat", *b, "-p", "0", "-o", "0", "-e", "--print-headers"])
    assert r.stdout.decode().splitlines()[0] == "h:1\tv0"

    # consume --json is produce --jsonl's input: a copy keeps keys, values, headers, times.
    cluster.create_topic("kcat-copy", 2)
    dump = _longboat(["consume", "kcat", *b, "-o", "earliest", "-e", "--json"])
    r = _longboat(["produce", "kcat-copy", *b, "--jsonl"], dump.stdout)
    assert r.returncode == 0 and b"produced 4 record(s)" in r.stderr, r.stderr
    copy = _longboat(["consume", "kcat-copy", *b, "-o", "earliest", "-e", "--json"])

    def rows(out: bytes) -> list[tuple[object, ...]]:
        recs = [json.loads(x) for x in out.splitlines()]
        return sorted(
            (
                r["partition"],
                r["offset"],
                r["key"],
                json.dumps(r["value"]),
                r["timestamp"],
                json.dumps(r["headers"]),
            )
            for r in recs
        )

    assert rows(copy.stdout) == rows(dump.stdout) and len(rows(dump.stdout)) == 4

    # An empty topic with --exit ends at once; bad words are refused with the fix.
    cluster.create_topic("kcat-empty", 1)
    r = _longboat(["consume", "kcat-empty", *b, "-e"], timeout=30)
    assert r.returncode == 0 and r.stdout == b"", r.stderr
    for args, says in [
        (["-f", "%x"], b"unknown %x"),
        (["--offset", "soon"], b"expected earliest, latest, -N"),
        (["--from-time", "yesterday"], b"ISO-8601"),
        (["--offset", "1", "--from-beginning"], b"give one of"),
        (["-p", "9", "-e"], b"no partition(s) [9]"),
    ]:
        r = _longboat(["consume", "kcat", *b, *args], timeout=30)
        assert r.returncode != 0 and says in r.stderr, (args, r.stderr)
    r = _longboat(["produce", "kcat", *b, "--jsonl"], b'{"value": "ok"}\nnot json\n')
    assert r.returncode != 0 and b"line 2 is not JSON" in r.stderr, r.stderr
    r = _longboat(["produce", "kcat", *b, "--parse-headers"], b"no tab here\n")
    assert r.returncode != 0 and b"line 1 has no tab" in r.stderr, r.stderr


def test_acks_all_through_a_sigkilled_leader_every_ack_once_in_order(cluster: Cluster) -> None:
    """Produce with acks=all (RF 3, min.insync.replicas=2, idempotent, retries) while the
    partition leader is SIGKILLed: every acknowledged record is read back exactly once, and
    the log holds the records in the order they were sent."""
    c = cluster
    c.create_topic("failover", 1, configs={"min.insync.replicas": "2"})
    leader = wait_for("a leader with a full ISR", lambda: c.leader_of("failover", 0), 30)
    total = 1500

    async def produce() -> tuple[list[int], list[int]]:
        acked: list[int] = []
        failed: list[int] = []
        async with AsyncProducer(
            c.bootstrap, linger_ms=1, request_timeout_ms=5000, delivery_timeout_ms=60_000
        ) as p:
            futs = []
            for i in range(total):
                futs.append(await p.send("failover", str(i).encode()))
                if i == total // 3:
                    await asyncio.gather(*futs)  # the first third is acknowledged ...
                    c.brokers.kill(leader)  # ... then the leader dies mid-stream
                await asyncio.sleep(0.002)
            for i, f in enumerate(futs):
                try:
                    await f
                    acked.append(i)
                except ClientError:
                    failed.append(i)
        return acked, failed

    acked, failed = asyncio.run(produce())
    c.brokers.start(leader)
    assert len(acked) > total // 2, f"only {len(acked)} acked, {len(failed)} failed"

    async def read_all() -> list[int]:
        async with AsyncConsumer(c.bootstrap, auto_offset_reset="earliest") as cons:
            tp = TopicPartition("failover", 0)
            cons.assign([tp])
            end = (await cons.end_offsets([tp]))[tp]
            out: list[int] = []
            while await cons.position(tp) < end:
                out += [int(r.value or b"-1") for r in await cons.poll(5000)]
            return out

    values = asyncio.run(read_all())
    assert len(values) == len(set(values)), "a record was stored twice"
    missing = set(acked) - set(values)
    assert not missing, f"acknowledged records lost: {sorted(missing)[:20]}"
    assert values == sorted(values), "records out of send order"
    wait_for("the old leader back in the ISR", lambda: c.leader_of("failover", 0), 60)
