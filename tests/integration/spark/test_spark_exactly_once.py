"""The exactly-once stream writer (issue 19) against a real cluster of processes, in a real
local[2] SparkSession: a micro-batch Spark runs again is not written twice, a failed task
leaves nothing a read_committed reader can see, and a zombie attempt is fenced.

One cluster (1 controller, 2 brokers) and one session for the module; the session starts
only for the Spark queries (extended tier).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from longboat_spark_harness import spark_session

from api.client import AsyncProducer, ClientError, Consumer, Producer, TopicPartition
from api.node.localcluster import Brokers, Quorum, running_cluster, wait_for
from spark.exactly_once import BatchTask, write
from spark.options import parse_sink_options

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Quorum, Brokers]]:
    root = tmp_path_factory.mktemp("spark-eos")
    with running_cluster(
        root,
        controllers=1,
        brokers=2,
        broker_args=[
            "--override",
            "transaction_state_log_num_partitions=4",
            "--override",
            "offsets_topic_num_partitions=4",
        ],
    ) as qb:
        yield qb


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    s = spark_session(tmp_path_factory.mktemp("spark"))
    yield s
    s.stop()


def bootstrap(b: Brokers) -> str:
    return ",".join(b.url(i) for i in b.ids)


def create_topic(b: Brokers, name: str, partitions: int) -> None:
    import json
    import urllib.request

    url = b.url(b.ids[0])
    with urllib.request.urlopen(url + "/v3/clusters") as r:
        cid = json.loads(r.read())["data"][0]["cluster_id"]
    body = {"topic_name": name, "partitions_count": partitions, "replication_factor": 2}
    req = urllib.request.Request(
        f"{url}/v3/clusters/{cid}/topics",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req) as r:
        assert r.status in (200, 201)
    tps = [TopicPartition(name, p) for p in range(partitions)]

    def ready() -> bool:
        try:
            with Consumer(bootstrap(b), request_timeout_ms=2000) as c:
                c.end_offsets(tps)
            return True
        except Exception:
            return False

    wait_for(f"topic {name} with leaders", ready, 30)


def values(b: Brokers, topic: str, partitions: int, isolation: str) -> list[str]:
    """Every record of ``topic`` up to its end at ``isolation`` (the LSO at read_committed)."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    out: list[str] = []
    with Consumer(bootstrap(b), isolation_level=isolation) as c:
        end = c.end_offsets(tps)
        c.assign(tps)
        c.seek_to_beginning(*tps)
        for _ in range(200):
            if all(c.position(tp) >= end[tp] for tp in tps):
                break
            out += [bytes(r.value or b"").decode() for r in c.poll(timeout_ms=200)]
    return sorted(out)


def settled(b: Brokers, topic: str, partitions: int, n: int) -> list[str]:
    """read_committed values once ``n`` are visible (markers follow the commit's answer)."""
    got: list[str] = []

    def enough() -> bool:
        nonlocal got
        got = values(b, topic, partitions, "read_committed")
        return len(got) >= n

    wait_for(f"{n} committed records in {topic}", enough, 30)
    return got


def stream(spark: Any, b: Brokers, src: str, dst: str, ckpt: Path, *, exactly_once: bool) -> None:
    """One availableNow run of the query ``src`` -> ``dst`` from checkpoint ``ckpt``."""
    q = (
        spark.readStream.format("longboat")
        .option("bootstrap", bootstrap(b))
        .option("subscribe", src)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("key", "value")
        .writeStream.format("longboat")
        .option("bootstrap", bootstrap(b))
        .option("topic", dst)
        .option("exactlyOnce", str(exactly_once).lower())
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(120)
    assert q.exception() is None, q.exception()


def forget_last_commit(ckpt: Path) -> int:
    """What a crash after the sink wrote a batch, before Spark recorded it done, leaves: the
    batch's offsets are in the checkpoint and its commit is not. Returns the batch id."""
    commits = sorted(int(p.name) for p in (ckpt / "commits").iterdir() if p.name.isdigit())
    last = commits[-1]
    (ckpt / "commits" / str(last)).unlink()
    with contextlib.suppress(FileNotFoundError):
        (ckpt / "commits" / f".{last}.crc").unlink()
    return last


def _produce(b: Brokers, topic: str, first: int, last: int) -> list[str]:
    with Producer(bootstrap(b)) as p:
        for i in range(first, last):
            p.send(topic, f"r{i}".encode(), key=f"k{i}".encode())
        p.flush()
    return sorted(f"r{i}" for i in range(first, last))


@pytest.mark.extended  # ~60-90 s of Spark on a loaded 2-core box; the fast tier keeps the
# task body's tests below (a retry, a failed task, a zombie) on the same cluster.
def test_a_batch_run_again_after_a_crash_is_not_written_twice(
    spark: Any, cluster: tuple[Quorum, Brokers], tmp_path: Path
) -> None:
    _q, b = cluster
    create_topic(b, "eo-in", 2)
    create_topic(b, "eo-out", 2)
    want = _produce(b, "eo-in", 0, 30)
    ckpt = tmp_path / "eo-ckpt"
    stream(spark, b, "eo-in", "eo-out", ckpt, exactly_once=True)
    assert settled(b, "eo-out", 2, 30) == want
    # The query "crashes" between the sink's commit and Spark's; restarted, Spark runs the
    # last batch again with the same offsets (and records it done again) ...
    last = forget_last_commit(ckpt)
    stream(spark, b, "eo-in", "eo-out", ckpt, exactly_once=True)
    assert (ckpt / "commits" / str(last)).exists()
    # ... and the sink found the batch id committed and wrote nothing: no duplicate, not even
    # an aborted one.
    assert values(b, "eo-out", 2, "read_committed") == want
    assert values(b, "eo-out", 2, "read_uncommitted") == want


@pytest.mark.extended
def test_the_at_least_once_sink_writes_a_replayed_batch_twice_and_eo_carries_on(
    spark: Any, cluster: tuple[Quorum, Brokers], tmp_path: Path
) -> None:
    """The control of the test above (Spark's Kafka sink behaves like ours without
    exactlyOnce), and an exactly-once query that goes on after a replayed batch."""
    _q, b = cluster
    create_topic(b, "alo-in", 2)
    create_topic(b, "alo-out", 2)
    create_topic(b, "eo2-out", 2)
    want = _produce(b, "alo-in", 0, 30)
    alo, eo = tmp_path / "alo-ckpt", tmp_path / "eo2-ckpt"
    stream(spark, b, "alo-in", "alo-out", alo, exactly_once=False)
    stream(spark, b, "alo-in", "eo2-out", eo, exactly_once=True)
    assert values(b, "alo-out", 2, "read_committed") == want
    forget_last_commit(alo)
    forget_last_commit(eo)
    stream(spark, b, "alo-in", "alo-out", alo, exactly_once=False)
    stream(spark, b, "alo-in", "eo2-out", eo, exactly_once=True)
    assert values(b, "alo-out", 2, "read_committed") == sorted(want * 2)
    assert values(b, "eo2-out", 2, "read_committed") == want
    more = _produce(b, "alo-in", 30, 40)
    stream(spark, b, "alo-in", "eo2-out", eo, exactly_once=True)
    assert settled(b, "eo2-out", 2, 40) == sorted(want + more)


def _rows(tag: str, n: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"value": [f"{tag}{i}".encode() for i in range(n)]})


def test_a_failed_task_leaves_nothing_visible_and_its_retry_writes_once(
    cluster: tuple[Quorum, Brokers],
) -> None:
    # The task body itself (what write() runs in an executor), called as Spark would call
    # it for attempts of one partition of one batch.
    _q, b = cluster
    create_topic(b, "eo-direct", 1)
    sink = parse_sink_options(
        {"bootstrap": bootstrap(b), "topic": "eo-direct", "exactlyOnce": "true"}
    )
    task = BatchTask("query-direct", 7, 0)

    def failing() -> Iterator[pa.RecordBatch]:
        yield _rows("a", 10)
        raise RuntimeError("the task dies half way")

    with pytest.raises(RuntimeError, match="half way"):
        write(sink, failing(), task)
    # Its records reached the log, and are aborted.
    assert len(values(b, "eo-direct", 1, "read_uncommitted")) == 10
    assert values(b, "eo-direct", 1, "read_committed") == []

    first = write(sink, iter([_rows("a", 10), _rows("b", 5)]), task)
    again = write(sink, iter([_rows("a", 10), _rows("b", 5)]), task)
    assert (first.records, first.skipped, again.records, again.skipped) == (15, False, 0, True)
    nxt = write(sink, iter([_rows("c", 3)]), BatchTask("query-direct", 8, 0))
    assert (nxt.records, nxt.skipped) == (3, False)
    want = sorted([f"a{i}" for i in range(10)] + [f"b{i}" for i in range(5)] + ["c0", "c1", "c2"])
    assert settled(b, "eo-direct", 1, len(want)) == want


def test_a_zombie_attempt_is_fenced_and_its_rows_never_visible(
    cluster: tuple[Quorum, Brokers],
) -> None:
    _q, b = cluster
    create_topic(b, "eo-zombie", 1)
    sink = parse_sink_options(
        {"bootstrap": bootstrap(b), "topic": "eo-zombie", "exactlyOnce": "true"}
    )
    task = BatchTask("query-zombie", 3, 0)

    async def go() -> None:
        # An older attempt of the same task, still running: it took the id and wrote.
        async with AsyncProducer(
            bootstrap(b), transactional_id=task.transactional_id(sink)
        ) as zombie:
            await zombie.init_transactions()
            zombie.begin_transaction()
            await zombie.send_and_wait("eo-zombie", b"zombie")
            # The new attempt runs to the end meanwhile.
            done = await asyncio.to_thread(write, sink, iter([_rows("new", 4)]), task)
            assert (done.records, done.skipped) == (4, False)
            # Its next send, or its commit, is refused as fenced.
            with pytest.raises(ClientError) as e:
                await zombie.send_and_wait("eo-zombie", b"zombie-2")
                await zombie.commit_transaction()
            assert e.value.code in ("PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"), e.value

    asyncio.run(go())
    assert settled(b, "eo-zombie", 1, 4) == [f"new{i}" for i in range(4)]
