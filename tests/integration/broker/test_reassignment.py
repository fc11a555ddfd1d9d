"""Replica placement and leadership with real processes: a throttled reassignment under
acks=all load with the partition's leader SIGKILLed mid-move (no acknowledged record lost),
draining a broker, a preferred-leader election, DeleteRecords, through the ``longboat`` CLI
and the REST routes.

One controller and four brokers; short sessions (4 s) so a killed leader is replaced fast.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from api.cli.main import main
from api.client import AsyncConsumer, AsyncProducer, TopicPartition
from api.node.localcluster import Brokers, Quorum, running_cluster, wait_for
from metalog.client import ControllerClient
from metalog.commands import CreateTopic
from metalog.records import BrokerId

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Quorum, Brokers]]:
    root: Path = tmp_path_factory.mktemp("reassign-cluster")
    with running_cluster(
        root,
        controllers=1,
        brokers=4,
        controller_args=["--override", "broker_session_timeout_ms=4000"],
        broker_args=["--override", "broker_heartbeat_interval_ms=500"],
    ) as c:
        yield c


def create(q: Quorum, name: str, assignments: dict[int, tuple[int, ...]], **configs: str) -> None:
    async def go() -> None:
        async with ControllerClient(q.urls, timeout_s=20) as cc:
            await cc.execute(
                CreateTopic(
                    name=name,
                    assignments={p: tuple(BrokerId(b) for b in r) for p, r in assignments.items()},
                    configs=configs,
                )
            )

    asyncio.run(go())


def partition(b: Brokers, via: int, topic: str, p: int = 0) -> dict[str, Any]:
    for t in b.metadata(via)["topics"]:
        if t["name"] == topic:
            for part in t["partitions"]:
                if part["partition"] == p:
                    return dict(part)
    raise AssertionError(f"no {topic}-{p}")


def cli(b: Brokers, *args: str) -> str:
    boot = ",".join(b.url(x) for x in sorted(b.procs))
    res = CliRunner().invoke(main, [*args, "--bootstrap", boot], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.output


def http(b: Brokers, via: int, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    cid = b.get(via, "/v3/clusters")["data"][0]["cluster_id"]
    req = urllib.request.Request(
        f"{b.url(via)}/v3/clusters/{cid}{path}",
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            raw = r.read()
            return r.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def read_all(b: Brokers, topic: str, n: int) -> list[tuple[int, bytes | None]]:
    boot = [b.url(x) for x in sorted(b.procs)]

    async def go() -> list[tuple[int, bytes | None]]:
        async with AsyncConsumer(boot, auto_offset_reset="earliest") as c:
            c.assign([TopicPartition(topic, 0)])
            out: list[tuple[int, bytes | None]] = []
            deadline = time.monotonic() + 60
            while len(out) < n and time.monotonic() < deadline:
                out += [(r.offset, r.value) for r in await c.poll(2000)]
            return out

    return asyncio.run(go())


def test_throttled_move_with_the_leader_killed_mid_move_loses_no_acknowledged_record(
    cluster: tuple[Quorum, Brokers], tmp_path: Path
) -> None:
    q, b = cluster
    topic = "moving"
    create(q, topic, {0: (101, 102)})
    watcher = 104
    wait_for("a leader", lambda: partition(b, watcher, topic)["leader"] == 101, 30)
    boot = [b.url(x) for x in b.ids]
    value = b"x" * 1000
    preload = 1500  # ~1.5 MB to move

    async def load() -> None:
        async with AsyncProducer(boot, linger_ms=5) as p:
            futs = [await p.send(topic, value, partition=0) for _ in range(preload)]
            for f in futs:
                await f

    asyncio.run(load())
    rate = 300_000
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [103, 104]}]}
        )
    )
    acked: dict[int, bytes] = {}

    async def produce_during_move() -> None:
        async with AsyncProducer(boot, linger_ms=1, request_timeout_ms=5000) as p:
            t0 = time.monotonic()
            out = cli(
                b,
                "partitions",
                "reassign",
                "--execute",
                "--reassignment-json-file",
                str(plan),
                "--throttle",
                str(rate),
            )
            assert "Successfully started" in out
            killed = False
            i = 0
            pending = []
            while True:
                v = f"during-{i}".encode()
                pending.append((v, await p.send(topic, v, partition=0)))
                i += 1
                await asyncio.sleep(0.01)
                if not killed and time.monotonic() - t0 > 1.5:
                    # Mid-move: the adding replicas are far from caught up (throttled).
                    part = partition(b, watcher, topic)
                    assert part["leader"] == 101, part
                    status, moving = http(
                        b, watcher, "GET", f"/topics/{topic}/partitions/0/reassignment"
                    )
                    assert status == 200 and moving["adding_replicas"] == [103, 104], moving
                    b.kill(101)
                    killed = True
                if killed and i % 20 == 0:
                    part = partition(b, watcher, topic)
                    if sorted(part["replicas"]) == [103, 104]:
                        break
                assert time.monotonic() - t0 < 120, "the move did not complete"
            for v, f in pending:
                try:
                    acked[(await f).offset] = v
                except Exception:
                    pass  # not acknowledged: may or may not be there

    asyncio.run(produce_during_move())
    final = partition(b, watcher, topic)
    assert final["leader"] in (103, 104) and sorted(final["isr"]) == [103, 104], final
    assert len(acked) > 50
    # Offsets count from the preload on: every offset up to the last acknowledged one
    got = dict(read_all(b, topic, max(acked) + 1))
    lost = {o: v for o, v in acked.items() if got.get(o) != v}
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {sorted(lost)[:5]}"
    assert all(got[o] == value for o in range(preload))
    out = cli(b, "partitions", "reassign", "--verify", "--reassignment-json-file", str(plan))
    assert f"Reassignment of partition {topic}-0 is completed." in out
    assert "Clearing broker-level throttles" in out
    assert http(b, watcher, "GET", "/reassignment-throttle")[1]["rate_bytes_per_s"] is None
    b.start(101)
    b.wait_ready([101], 60)


def test_drain_moves_every_replica_off_the_broker(cluster: tuple[Quorum, Brokers]) -> None:
    q, b = cluster
    topic = "drained"
    create(q, topic, {0: (102, 103), 1: (103, 104), 2: (104, 102)})
    out = cli(b, "brokers", "drain", "103", "--wait", "60")
    assert "broker 103 is drained" in out, out
    for p in range(3):
        part = partition(b, 102, topic, p)
        assert 103 not in part["replicas"] and 103 not in part["isr"], part
        assert len(part["replicas"]) == 2
    # Nothing of the topic is left on broker 103's disk.
    reps = b.get(103, "/internal/broker/v1/replicas")
    assert not [r for r in reps if r["topic"] == topic], reps


def test_reorder_then_preferred_election_moves_the_leader(
    cluster: tuple[Quorum, Brokers],
) -> None:
    q, b = cluster
    topic = "elect"
    create(q, topic, {0: (102, 104)})
    wait_for("a leader", lambda: partition(b, 102, topic)["leader"] == 102, 30)
    wait_for("a full ISR", lambda: sorted(partition(b, 102, topic)["isr"]) == [102, 104], 30)
    # A reordering completes at once and leaves the leader where it is.
    status, body = http(
        b, 102, "PATCH", f"/topics/{topic}/partitions/0/reassignment", {"replicas": [104, 102]}
    )
    assert status == 200, body
    part = partition(b, 102, topic)
    assert part["replicas"] == [104, 102] and part["leader"] == 102
    assert http(b, 102, "GET", f"/topics/{topic}/partitions/0/reassignment")[0] == 404
    out = cli(b, "leaders", "elect", "--type", "preferred", "--topic", topic, "--partition", "0")
    assert "elected" in out, out
    assert partition(b, 102, topic)["leader"] == 104
    # Again: nothing to do, said so, nothing changes.
    out = cli(b, "leaders", "elect", "--type", "preferred", "--topic", topic, "--partition", "0")
    assert "ELECTION_NOT_NEEDED" in out, out


def test_delete_records_moves_the_log_start_on_every_in_sync_replica(
    cluster: tuple[Quorum, Brokers], tmp_path: Path
) -> None:
    q, b = cluster
    topic = "trimmed"
    create(q, topic, {0: (102, 103, 104)})
    wait_for("a full ISR", lambda: len(partition(b, 102, topic)["isr"]) == 3, 30)
    boot = [b.url(x) for x in sorted(b.procs)]

    async def load() -> None:
        async with AsyncProducer(boot, linger_ms=1) as p:
            for i in range(100):
                await (await p.send(topic, str(i).encode(), partition=0))

    asyncio.run(load())
    # Beyond the high watermark: refused, nothing changes.
    status, body = http(
        b, 103, "POST", f"/topics/{topic}/partitions/0/records:delete", {"offset": 101}
    )
    assert status == 416 and "OFFSET_OUT_OF_RANGE" in body["message"], body
    offsets = tmp_path / "offsets.json"
    offsets.write_text(
        json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "offset": 40}]})
    )
    out = cli(b, "records", "delete", "--offset-json-file", str(offsets), "--yes")
    assert "low_watermark: 40" in out, out
    status, off = http(b, 103, "GET", f"/topics/{topic}/partitions/0/offset")
    assert status == 200 and off["earliest_offset"] == 40, off
    # The answer came once every in-sync replica had moved its own log start.
    for x in (102, 103, 104):
        (rep,) = [r for r in b.get(x, "/internal/broker/v1/replicas") if r["topic"] == topic]
        assert rep["log_start_offset"] == 40, (x, rep)
    got = read_all(b, topic, 60)
    assert [o for o, _ in got] == list(range(40, 100))


def test_the_throttle_holds_a_move_to_its_rate(cluster: tuple[Quorum, Brokers]) -> None:
    q, b = cluster
    topic = "throttled"
    create(q, topic, {0: (102,)})
    boot = [b.url(x) for x in sorted(b.procs)]
    size = 1_200_000

    async def load() -> None:
        async with AsyncProducer(boot, linger_ms=5) as p:
            futs = [await p.send(topic, b"y" * 1000, partition=0) for _ in range(size // 1000)]
            for f in futs:
                await f

    asyncio.run(load())
    rate = 300_000
    assert http(b, 102, "PUT", "/reassignment-throttle", {"rate_bytes_per_s": rate})[0] == 200
    t0 = time.monotonic()
    status, body = http(
        b, 102, "PATCH", f"/topics/{topic}/partitions/0/reassignment", {"replicas": [104]}
    )
    assert status == 200 and body["adding_replicas"] == [104], body
    wait_for("the move", lambda: partition(b, 102, topic)["replicas"] == [104], 60)
    took = time.monotonic() - t0
    assert http(b, 102, "DELETE", "/reassignment-throttle")[0] == 204
    # 1.2 MB at 300 kB/s, a second's burst: no faster than ~3 s (a lower bound only: a
    # loaded machine may be slower, never faster).
    assert took >= size / rate - 1.0, took


def test_bad_requests_are_refused_clearly_and_change_nothing(
    cluster: tuple[Quorum, Brokers],
) -> None:
    q, b = cluster
    topic = "refusals"
    create(q, topic, {0: (102, 104)})
    via = 102
    wait_for("a leader", lambda: partition(b, via, topic)["leader"] == 102, 30)
    before = partition(b, via, topic)
    one = f"/topics/{topic}/partitions/0/reassignment"
    cases: list[tuple[str, str, Any, int, str]] = [
        ("PATCH", one, {"replicas": []}, 422, "non-empty list"),
        ("PATCH", one, {"replicas": [102, "x"]}, 422, "non-empty list"),
        ("PATCH", one, {"nope": 1}, 422, "replicas"),
        ("PATCH", one, {"replicas": [102, 102]}, 400, "INVALID_REPLICA_ASSIGNMENT"),
        ("PATCH", one, {"replicas": [999]}, 400, "not registered"),
        ("PATCH", "/topics/nosuch/partitions/0/reassignment", {"replicas": [102]}, 404, ""),
        ("PATCH", f"/topics/{topic}/partitions/7/reassignment", {"replicas": [102]}, 404, ""),
        ("DELETE", one, None, 404, "No reassignment"),
        ("GET", one, None, 404, "No reassignment"),
        ("POST", "/topics/-/partitions/-/reassignment", {"partitions": []}, 422, "version"),
        ("POST", "/elections", {"election_type": "DIRTY"}, 400, "PREFERRED or UNCLEAN"),
        ("POST", "/elections", {"partitions": [{"topic_name": 1}]}, 422, "topic_name"),
        ("POST", f"/topics/{topic}/partitions/0/records:delete", {"offset": -5}, 422, "offset"),
        ("POST", f"/topics/{topic}/partitions/0/records:delete", {}, 422, "offset"),
        ("PUT", "/reassignment-throttle", {"rate_bytes_per_s": 0}, 422, "N > 0"),
    ]
    for method, path, body, status, words in cases:
        got, answer = http(b, via, method, path, body)
        assert got == status, (method, path, body, got, answer)
        assert isinstance(answer, dict) and {"error_code", "message"} <= answer.keys(), answer
        assert words in answer["message"], (method, path, answer)
    # A plan with one bad partition: answered per partition, the good one goes ahead.
    status, ans = http(
        b,
        via,
        "POST",
        "/topics/-/partitions/-/reassignment",
        {
            "version": 1,
            "partitions": [
                {"topic": topic, "partition": 5, "replicas": [101]},
                {"topic": topic, "partition": 0, "replicas": [104, 102]},
            ],
        },
    )
    assert status == 200, ans
    assert [r["error_code"] for r in ans["data"]] == ["UNKNOWN_TOPIC_OR_PARTITION", None], ans
    after = partition(b, via, topic)
    assert after["replicas"] == [104, 102] and after["leader"] == before["leader"]
    assert http(b, via, "GET", "/reassignment-throttle")[1]["rate_bytes_per_s"] is None
