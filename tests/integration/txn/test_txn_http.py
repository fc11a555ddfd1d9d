"""The HTTP transactional produce (``POST /v3/clusters/{id}/transactions``) against real
processes (1 controller, 3 brokers):

* a request over two topics and several partitions is visible whole at read_committed, each
  record at the offset the answer gave;
* a request with one bad record (unknown partition, unknown topic, bad value) fails whole
  and leaves nothing readable at read_committed, and the id still works afterwards;
* the same request id retried (on the same broker and on another) is answered from the
  first commit and writes nothing more;
* a producer of the same id elsewhere (the Python client) fences the broker's: 409, and the
  next request takes the id back;
* requests without an id run concurrently on the internal ids.
"""

from __future__ import annotations

import asyncio
import json
import signal
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from api.client import AsyncProducer, ProducerFencedError
from api.node.localcluster import running_cluster, wait_for
from metalog.client import ControllerClient
from metalog.commands import CreateTopic
from tests.integration.txn.test_txn_processes import STATE_PARTITIONS, Cluster, read

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root: Path = tmp_path_factory.mktemp("txn-http")
    with running_cluster(
        root,
        controllers=1,
        broker_args=[
            "--override",
            f"transaction_state_log_num_partitions={STATE_PARTITIONS}",
        ],
    ) as (q, b):
        c = Cluster(q, b)
        c.create_topic("orders", 3)
        c.create_topic("payments", 2)
        yield c


def cluster_id(c: Cluster, b: int) -> str:
    with urllib.request.urlopen(f"{c.brokers.url(b)}/v3/clusters", timeout=10) as r:
        return str(json.loads(r.read())["data"][0]["cluster_id"])


def post(c: Cluster, b: int, body: Any, timeout_s: float = 60) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(
        f"{c.brokers.url(b)}/v3/clusters/{cluster_id(c, b)}/transactions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def committed(c: Cluster, topic: str, partitions: int) -> list[bytes]:
    out: list[bytes] = []
    for p in range(partitions):
        out += asyncio.run(read(c.bootstrap, topic, p, "read_committed"))[0]
    return sorted(out)


def rec(topic: str, value: str, partition: int | None = None) -> dict[str, Any]:
    r: dict[str, Any] = {"topic": topic, "value": {"type": "STRING", "data": value}}
    if partition is not None:
        r["partition_id"] = partition
    return r


def test_a_request_over_topics_and_partitions_is_read_whole_at_read_committed(
    cluster: Cluster,
) -> None:
    body = {
        "transactional_id": "http-a",
        "records": [
            rec("orders", "a-o0", 0),
            rec("orders", "a-o1", 1),
            rec("payments", "a-p0", 0),
            rec("orders", "a-o2", 2),
            {"topic": "payments", "key": {"type": "STRING", "data": "k"}, "value": None},
            rec("orders", "a-o0b", 0),
        ],
    }
    status, ans = post(cluster, cluster.any_broker(), body)
    assert status == 200, ans
    assert ans["duplicate"] is False
    placed = [(r["topic_name"], r["partition_id"], r["offset"]) for r in ans["records"]]
    assert [(t, p) for t, p, _ in placed][:4] == [
        ("orders", 0),
        ("orders", 1),
        ("payments", 0),
        ("orders", 2),
    ]
    # Same partition, same transaction: consecutive offsets in request order.
    assert placed[5][2] == placed[0][2] + 1
    assert {b"a-o0", b"a-o1", b"a-o2", b"a-o0b"} <= set(committed(cluster, "orders", 3))
    assert b"a-p0" in committed(cluster, "payments", 2)


def test_one_bad_record_fails_the_whole_request_and_nothing_is_visible(cluster: Cluster) -> None:
    b = cluster.any_broker()
    bad_bodies = [
        ([rec("orders", "bad1-a", 0), rec("orders", "bad1-b", 7)], 404),  # no partition 7
        ([rec("orders", "bad2-a", 0), rec("nosuchtopic", "bad2-b")], 404),
        ([rec("orders", "bad3-a", 1), {"topic": "payments", "value": {"type": "NOPE"}}], 422),
        ([rec("orders", "bad4-a", 2), {"value": {"type": "STRING", "data": "x"}}], 422),
    ]
    for records, want in bad_bodies:
        status, ans = post(cluster, b, {"transactional_id": "http-bad", "records": records})
        assert status == want, ans
        assert set(ans) == {"error_code", "message"}
        assert "records[1]" in ans["message"], ans
    for body in ({"records": []}, {"records": "x"}, [1], {"records": [rec("orders", "x")], "y": 1}):
        status, ans = post(cluster, b, body)
        assert status == 422, (body, ans)
    # Nothing of them at either level (refused before anything was sent) ...
    values = committed(cluster, "orders", 3) + committed(cluster, "payments", 2)
    assert not [v for v in values if v.startswith(b"bad")]
    for p in range(3):
        seen = asyncio.run(read(cluster.bootstrap, "orders", p, "read_uncommitted"))[0]
        assert not [v for v in seen if v.startswith(b"bad")]
    # ... and the id still works.
    status, ans = post(
        cluster, b, {"transactional_id": "http-bad", "records": [rec("orders", "bad-ok", 0)]}
    )
    assert status == 200, ans
    assert b"bad-ok" in committed(cluster, "orders", 3)


def test_a_retried_request_id_is_answered_from_the_first_commit_and_writes_once(
    cluster: Cluster,
) -> None:
    b1, b2 = sorted(cluster.brokers.procs)[:2]
    body = {
        "transactional_id": "http-retry",
        "request_id": "req-1",
        "records": [rec("orders", "r1-a", 0), rec("payments", "r1-b", 1)],
    }
    status, first = post(cluster, b1, body)
    assert status == 200 and first["duplicate"] is False, first
    status, again = post(cluster, b1, body)
    assert status == 200 and again["duplicate"] is True, again
    assert again["records"] == first["records"]
    # Another broker: its producer takes the id over (fencing the first) and still finds
    # the request committed.
    status, elsewhere = post(cluster, b2, body)
    assert status == 200 and elsewhere["duplicate"] is True, elsewhere
    assert elsewhere["records"] == first["records"]
    # A new request id writes.
    status, nxt = post(cluster, b2, {**body, "request_id": "req-2"})
    assert status == 200 and nxt["duplicate"] is False, nxt
    # The first broker's producer was fenced by the second: 409, then it takes the id back
    # and recognises req-2.
    status, fenced = post(cluster, b1, {**body, "request_id": "req-3"})
    assert status == 409, fenced
    status, back = post(cluster, b1, {**body, "request_id": "req-2"})
    assert status == 200 and back["duplicate"] is True, back
    values = committed(cluster, "orders", 3) + committed(cluster, "payments", 2)
    assert values.count(b"r1-a") == 2 and values.count(b"r1-b") == 2  # req-1 and req-2 only
    status, ans = post(cluster, b1, {"request_id": "x", "records": [rec("orders", "x")]})
    assert status == 422, ans


def test_a_newer_producer_of_the_id_fences_the_broker_and_the_next_request_takes_it_back(
    cluster: Cluster,
) -> None:
    b = cluster.any_broker()

    def send(value: str) -> tuple[int, dict[str, Any]]:
        return post(
            cluster, b, {"transactional_id": "http-fence", "records": [rec("orders", value, 0)]}
        )

    async def go() -> None:
        assert (await asyncio.to_thread(send, "f-1"))[0] == 200
        async with AsyncProducer(cluster.bootstrap, transactional_id="http-fence") as p:
            await p.init_transactions()  # fences the broker's producer of the id
            async with p.transaction():
                await (await p.send("orders", b"f-client", partition=1))
            status, ans = await asyncio.to_thread(send, "f-2")
            assert status == 409 and ans["error_code"] == 40901, ans
            assert "PRODUCER_FENCED" in ans["message"]
            status, ans = await asyncio.to_thread(send, "f-3")  # takes the id back
            assert status == 200, ans
            with pytest.raises(ProducerFencedError):
                async with p.transaction():
                    await (await p.send("orders", b"f-zombie", partition=1))

    asyncio.run(go())
    values = committed(cluster, "orders", 3)
    assert {b"f-1", b"f-client", b"f-3"} <= set(values)
    assert b"f-2" not in values and b"f-zombie" not in values


def test_requests_without_an_id_run_concurrently(cluster: Cluster) -> None:
    b = cluster.any_broker()

    def one(i: int) -> tuple[int, dict[str, Any]]:
        return post(cluster, b, {"records": [rec("orders", f"anon-{i}-{k}") for k in range(5)]})

    async def go() -> list[tuple[int, dict[str, Any]]]:
        return await asyncio.gather(*(asyncio.to_thread(one, i) for i in range(12)))

    results = asyncio.run(go())
    assert all(s == 200 for s, _ in results), results
    values = committed(cluster, "orders", 3)
    assert sum(v.startswith(b"anon-") for v in values) == 60


def test_a_send_refused_mid_transaction_aborts_what_was_already_written(cluster: Cluster) -> None:
    # Each record fits the topic's max.message.bytes (the request is accepted), but the
    # producer batches two of them to one partition and the leader refuses the batch, after
    # the record to another topic was appended: the transaction is aborted, so that record
    # is in the log and never visible at read_committed.
    async def create() -> None:
        async with ControllerClient(cluster.quorum.urls, timeout_s=20) as cc:
            await cc.execute(
                CreateTopic(
                    name="small",
                    num_partitions=1,
                    replication_factor=3,
                    configs={"max.message.bytes": "1000"},
                )
            )

    asyncio.run(create())
    wait_for(
        "small led everywhere",
        lambda: all(
            cluster.partitions("small", b) and cluster.partitions("small", b)[0]["leader"] >= 0
            for b in cluster.brokers.procs
        ),
        30,
    )
    body = {
        "transactional_id": "http-mid",
        "records": [
            rec("orders", "mid-first", 0),
            rec("small", "m" * 600, 0),
            rec("small", "n" * 600, 0),
        ],
    }
    status, ans = post(cluster, cluster.any_broker(), body)
    assert status == 413, ans
    assert "nothing of this request is visible" in ans["message"], ans
    assert b"mid-first" not in committed(cluster, "orders", 3)
    assert not committed(cluster, "small", 1)
    # It was written, and aborted.
    seen = asyncio.run(read(cluster.bootstrap, "orders", 0, "read_uncommitted"))[0]
    assert b"mid-first" in seen


def test_a_request_queued_behind_a_fenced_one_gets_a_new_producer(cluster: Cluster) -> None:
    b = cluster.any_broker()

    def send(value: str) -> tuple[int, dict[str, Any]]:
        body = {"transactional_id": "http-queue", "records": [rec("orders", value, 0)]}
        return post(cluster, b, body)

    async def go() -> list[int]:
        assert (await asyncio.to_thread(send, "q-0"))[0] == 200
        async with AsyncProducer(cluster.bootstrap, transactional_id="http-queue") as p:
            await p.init_transactions()  # fences the broker's producer
        # Both wait on the id's lock: the first finds the producer fenced (409), the second
        # must not be handed the fenced, closed producer (it was: 409 twice).
        answers = await asyncio.gather(
            asyncio.to_thread(send, "q-1"), asyncio.to_thread(send, "q-2")
        )
        return sorted(s for s, _ in answers)

    assert asyncio.run(go()) == [200, 409]
    values = committed(cluster, "orders", 3)
    assert b"q-0" in values and (b"q-1" in values) != (b"q-2" in values)


def test_with_two_brokers_of_three_paused_the_request_fails_and_nothing_is_visible(
    cluster: Cluster,
) -> None:
    # Last in the module: it pauses brokers. __transaction_state has min.insync.replicas 2,
    # so with two of three brokers stopped no coordinator can write: the request is answered
    # 503 (or 504 when its own deadline comes first), and nothing of it is ever visible.
    b, *others = sorted(cluster.brokers.procs)
    body = {"transactional_id": "http-down", "records": [rec("orders", "down-1", 0)]}
    for o in others:
        cluster.brokers.send_signal(o, signal.SIGSTOP)
    try:
        status, ans = post(cluster, b, body, timeout_s=90)
    finally:
        for o in others:
            cluster.brokers.send_signal(o, signal.SIGCONT)
    assert status in (503, 504), ans
    assert "nothing of this request is visible" in ans["message"], ans
    cluster.brokers.wait_ready(timeout_s=60)
    status, ans = post(cluster, b, {**body, "records": [rec("orders", "down-2", 0)]})
    assert status == 200, ans
    values = committed(cluster, "orders", 3)
    assert b"down-2" in values and b"down-1" not in values
