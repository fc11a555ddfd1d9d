"""v2 consumer instances and v3 consumer groups against a real local cluster (3 controllers,
3 brokers as processes), with curl-like HTTP calls: the instance lifecycle, two instances
sharing a group's partitions, manual assignment and seeks, commits (offset + 1), expiry of an
idle instance, concurrent polls on one instance, the error codes, and the v3 group, member
and lag resources. One cluster for the module; each test uses its own topics and groups.
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from consumer_groups_support import Consumers, cluster_with_groups, group, produce, wait_group
from http_cluster_support import HttpCluster

pytestmark = pytest.mark.slow

INSTANCE_TIMEOUT_MS = 6_000


@pytest.fixture(scope="module")
def c(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpCluster]:
    root: Path = tmp_path_factory.mktemp("http-groups")
    with cluster_with_groups(root, INSTANCE_TIMEOUT_MS) as cl:
        yield cl


def _records(n: int, start: int = 0, partitions: int = 3) -> list[dict[str, Any]]:
    return [
        {
            "partition_id": i % partitions,
            "key": {"type": "STRING", "data": f"k{i}"},
            "value": {"type": "JSON", "data": {"n": i}},
            "headers": [{"name": "h", "value": base64.b64encode(b"v").decode()}],
        }
        for i in range(start, start + n)
    ]


def _ends(c: HttpCluster, topic: str, partitions: int = 3) -> dict[int, int]:
    out = {}
    for p in range(partitions):
        _, _, o = c.call("GET", f"{c.v3()}/topics/{topic}/partitions/{p}/offset")
        out[p] = o["latest_offset"]
    return out


# --------------------------------------------------------------------------- v2 lifecycle


def test_instance_lifecycle_subscribe_poll_commit_share_and_delete(c: HttpCluster) -> None:
    c.create_topic("v2-orders", partitions=3, rf=3)
    produce(c, "v2-orders", _records(30))
    v2 = Consumers(c)
    st, created = v2.create(
        "billing",
        "c1",
        format="json",
        **{"auto.offset.reset": "earliest", "auto.commit.enable": "false"},
    )
    assert st == 200, created
    assert created == {
        "instance_id": "c1",
        "base_uri": f"{c.urls[0]}/consumers/billing/instances/c1",
    }
    st, err = v2.create("billing", "c1")
    assert st == 409 and err["error_code"] == 40902

    assert v2.call("POST", "billing", "c1", "/subscription", {"topics": ["v2-orders"]})[0] == 204
    assert v2.call("GET", "billing", "c1", "/subscription") == (200, {"topics": ["v2-orders"]})
    recs = v2.poll_until("billing", "c1", 30)
    assert len(recs) == 30
    assert sorted(r["value"]["n"] for r in recs) == list(range(30))
    r0 = next(r for r in recs if r["value"]["n"] == 0)
    assert r0["topic"] == "v2-orders" and r0["key"] == "k0" and r0["partition"] == 0
    assert r0["offset"] == 0 and isinstance(r0["timestamp"], int)
    assert r0["headers"] == [{"name": "h", "value": base64.b64encode(b"v").decode()}]
    st, err = v2.records("billing", "c1", fmt="binary")
    assert st == 406 and err["error_code"] == 40601

    # A named offset is the last record processed: the commit is the next one (+1).
    st, body = v2.call(
        "POST",
        "billing",
        "c1",
        "/offsets",
        {"offsets": [{"topic": "v2-orders", "partition": 0, "offset": 3}]},
    )
    assert st == 200 and body == []
    parts = {"partitions": [{"topic": "v2-orders", "partition": p} for p in range(3)]}
    st, got = v2.call("GET", "billing", "c1", "/offsets", parts)
    assert st == 200
    assert got["offsets"] == [{"topic": "v2-orders", "partition": 0, "offset": 4, "metadata": ""}]
    # No body: everything consumed.
    assert v2.call("POST", "billing", "c1", "/offsets")[0] == 200
    st, got = v2.call("GET", "billing", "c1", "/offsets", parts)
    assert {o["partition"]: o["offset"] for o in got["offsets"]} == {0: 10, 1: 10, 2: 10}

    g = wait_group(c, "billing", lambda g: g["state"] == "STABLE")
    assert g["partition_assignor"] == "range" and g["is_simple"] is False
    st, members = group(c, "billing", "/consumers")
    assert [m["client_id"] for m in members["data"]] == ["c1"]

    # A second instance, on another broker, shares the partitions once both have polled
    # through the rebalance.
    v2b = Consumers(c, 1)
    assert v2b.create("billing", "c2", format="json")[0] == 200
    assert v2b.call("POST", "billing", "c2", "/subscription", {"topics": ["v2-orders"]})[0] == 204
    deadline = time.monotonic() + 40
    while True:
        v2.records("billing", "c1", timeout_ms=300)
        v2b.records("billing", "c2", timeout_ms=300)
        a1, a2 = v2.assignment("billing", "c1"), v2b.assignment("billing", "c2")
        if a1 and a2 and not a1 & a2 and len(a1 | a2) == 3:
            break
        assert time.monotonic() < deadline, (a1, a2)
    produce(c, "v2-orders", _records(30, start=30))
    got1: list[dict[str, Any]] = []
    got2: list[dict[str, Any]] = []
    deadline = time.monotonic() + 30
    while len(got1) + len(got2) < 30:
        assert time.monotonic() < deadline, (len(got1), len(got2))
        got1 += v2.records("billing", "c1", timeout_ms=500)[1]
        got2 += v2b.records("billing", "c2", timeout_ms=500)[1]
    assert sorted(r["value"]["n"] for r in got1 + got2) == list(range(30, 60))
    assert {("v2-orders", r["partition"]) for r in got1} <= a1
    assert {("v2-orders", r["partition"]) for r in got2} <= a2

    assert v2b.call("DELETE", "billing", "c2")[0] == 204
    st, err = v2b.records("billing", "c2")
    assert (st, err) == (404, {"error_code": 40403, "message": "Consumer instance not found."})
    assert v2.call("DELETE", "billing", "c1")[0] == 204
    # Deleting leaves the group at once (no session timeout to wait out).
    g = wait_group(c, "billing", lambda g: g["state"] == "EMPTY", timeout_s=10)
    assert group(c, "billing", "/consumers")[1]["data"] == []


def test_first_poll_waits_through_the_join_instead_of_answering_empty(c: HttpCluster) -> None:
    c.create_topic("v2-first", partitions=2, rf=3)
    produce(c, "v2-first", _records(4, partitions=2))
    v2 = Consumers(c, 2)
    assert v2.create("first", "f1", format="json", **{"auto.offset.reset": "earliest"})[0] == 200
    assert v2.call("POST", "first", "f1", "/subscription", {"topics": ["v2-first"]})[0] == 204
    t0 = time.monotonic()
    st, recs = v2.records("first", "f1", timeout_ms=20_000)
    assert st == 200 and recs, "the first poll answered [] during the join (kafka-rest#725)"
    assert time.monotonic() - t0 < 20
    v2.call("DELETE", "first", "f1")


def test_manual_assignment_seeks_and_simple_commits_resume(c: HttpCluster) -> None:
    c.create_topic("v2-assign", partitions=3, rf=3)
    produce(c, "v2-assign", _records(30))
    v2 = Consumers(c)
    assert (
        v2.create("manual", "a1", **{"auto.offset.reset": "earliest", "auto.commit.enable": False})[
            0
        ]
        == 200
    )
    two = {"partitions": [{"topic": "v2-assign", "partition": p} for p in (0, 1)]}
    assert v2.call("POST", "manual", "a1", "/assignments", two)[0] == 204
    assert v2.call("GET", "manual", "a1", "/assignments") == (200, two)
    st, err = v2.call("POST", "manual", "a1", "/subscription", {"topics": ["v2-assign"]})
    assert st == 409 and err["error_code"] == 40901

    recs = v2.poll_until("manual", "a1", 20, fmt="binary")
    assert {r["partition"] for r in recs} == {0, 1} and len(recs) == 20
    assert base64.b64decode(recs[0]["value"]).startswith(b'{"n":')

    seek = {"offsets": [{"topic": "v2-assign", "partition": 0, "offset": 5}]}
    assert v2.call("POST", "manual", "a1", "/positions", seek)[0] == 204
    recs = v2.poll_until("manual", "a1", 5, fmt="binary")
    assert [r["offset"] for r in recs] == [5, 6, 7, 8, 9]
    assert (
        v2.call(
            "POST",
            "manual",
            "a1",
            "/positions/beginning",
            {"partitions": [{"topic": "v2-assign", "partition": 1}]},
        )[0]
        == 204
    )
    recs = v2.poll_until("manual", "a1", 10, fmt="binary")
    assert [(r["partition"], r["offset"]) for r in recs] == [(1, o) for o in range(10)]
    assert v2.call("POST", "manual", "a1", "/positions/end", two)[0] == 204
    assert v2.records("manual", "a1", "binary", timeout_ms=200) == (200, [])
    stamps = {
        "timestamps": [{"topic": "v2-assign", "partition": 0, "timestamp": "2000-01-01T00:00:00Z"}]
    }
    assert v2.call("POST", "manual", "a1", "/positions", stamps)[0] == 204
    recs = v2.poll_until("manual", "a1", 10, fmt="binary")
    assert [r["offset"] for r in recs] == list(range(10))

    st, err = v2.call(
        "POST",
        "manual",
        "a1",
        "/positions",
        {"offsets": [{"topic": "v2-assign", "partition": 2, "offset": 0}]},
    )
    assert st == 409 and err["error_code"] == 40903

    # max_bytes cuts an answer; what was cut is answered next, nothing is skipped.
    assert v2.call("POST", "manual", "a1", "/positions/beginning", two)[0] == 204
    seen: list[tuple[int, int]] = []
    deadline = time.monotonic() + 30
    while len(seen) < 20:
        assert time.monotonic() < deadline
        st, recs = v2.records("manual", "a1", "binary", timeout_ms=500, max_bytes=20)
        assert st == 200 and len(recs) <= 2, recs
        seen += [(r["partition"], r["offset"]) for r in recs]
    assert sorted(seen) == [(p, o) for p in (0, 1) for o in range(10)]

    # Simple-consumer commits (the group has no members); a new instance resumes there.
    assert (
        v2.call(
            "POST",
            "manual",
            "a1",
            "/offsets",
            {"offsets": [{"topic": "v2-assign", "partition": 0, "offset": 7}]},
        )[0]
        == 200
    )
    assert v2.call("DELETE", "manual", "a1")[0] == 204
    g = wait_group(c, "manual", lambda g: True)
    assert g["is_simple"] is True and g["state"] == "EMPTY"
    assert v2.create("manual", "a2", format="json")[0] == 200
    assert (
        v2.call(
            "POST",
            "manual",
            "a2",
            "/assignments",
            {"partitions": [{"topic": "v2-assign", "partition": 0}]},
        )[0]
        == 204
    )
    recs = v2.poll_until("manual", "a2", 2)
    assert recs[0]["offset"] == 8
    v2.call("DELETE", "manual", "a2")


def test_auto_commit_commits_what_was_consumed(c: HttpCluster) -> None:
    c.create_topic("v2-auto", partitions=2, rf=3)
    produce(c, "v2-auto", _records(10, partitions=2))
    v2 = Consumers(c)
    # A member (subscribe) and a simple consumer (assign): with auto.commit.enable (the
    # default) both commit what the answers handed out, at the latest when deleted.
    for grp, how, body in [
        ("auto-sub", "/subscription", {"topics": ["v2-auto"]}),
        (
            "auto-asg",
            "/assignments",
            {"partitions": [{"topic": "v2-auto", "partition": p} for p in (0, 1)]},
        ),
    ]:
        assert v2.create(grp, "a", format="json", **{"auto.offset.reset": "earliest"})[0] == 200
        assert v2.call("POST", grp, "a", how, body)[0] == 204
        # A max_bytes cut: the records not answered are not committed.
        got: list[dict[str, Any]] = []
        while len(got) < 4:
            got += v2.records(grp, "a", timeout_ms=1000, max_bytes=20)[1]
        st, own = v2.call("GET", grp, "a", "/offsets")  # no body: the assignment
        assert st == 200 and isinstance(own["offsets"], list)
        assert v2.call("DELETE", grp, "a")[0] == 204
        expect = {
            p: 1 + max((r["offset"] for r in got if r["partition"] == p), default=-1)
            for p in (0, 1)
        }
        st, lags = group(c, grp, "/lags")
        assert st == 200, lags
        committed = {x["partition_id"]: x["current_offset"] for x in lags["data"]}
        for p in (0, 1):
            # A partition nothing was read from may have no commit, or one at its start.
            assert committed.get(p) == expect[p] or (expect[p] == 0 and not committed.get(p))


def test_pattern_subscription_and_unsubscribe(c: HttpCluster) -> None:
    for t in ("v2pat-a", "v2pat-b"):
        c.create_topic(t, partitions=1, rf=3)
        produce(c, t, _records(2, partitions=1))
    v2 = Consumers(c)
    assert v2.create("pat", "p1", format="json", **{"auto.offset.reset": "earliest"})[0] == 200
    assert v2.call("POST", "pat", "p1", "/subscription", {"topic_pattern": "v2pat-.*"})[0] == 204
    recs = v2.poll_until("pat", "p1", 4)
    assert {r["topic"] for r in recs} == {"v2pat-a", "v2pat-b"}
    assert v2.call("GET", "pat", "p1", "/subscription") == (200, {"topics": ["v2pat-a", "v2pat-b"]})
    st, err = v2.call("POST", "pat", "p1", "/subscription", {"topics": ["v2pat-a"]})
    assert st == 409 and err["error_code"] == 40901
    assert (
        v2.call(
            "POST",
            "pat",
            "p1",
            "/assignments",
            {"partitions": [{"topic": "v2pat-a", "partition": 0}]},
        )[0]
        == 409
    )
    assert v2.call("DELETE", "pat", "p1", "/subscription")[0] == 204
    assert v2.call("GET", "pat", "p1", "/subscription") == (200, {"topics": []})
    wait_group(c, "pat", lambda g: g["state"] == "EMPTY", timeout_s=10)
    # Unsubscribed, the instance may assign instead.
    assert (
        v2.call(
            "POST",
            "pat",
            "p1",
            "/assignments",
            {"partitions": [{"topic": "v2pat-a", "partition": 0}]},
        )[0]
        == 204
    )
    v2.call("DELETE", "pat", "p1")


def test_idle_instance_expires_and_leaves_its_group(c: HttpCluster) -> None:
    c.create_topic("v2-idle", partitions=1, rf=3)
    v2 = Consumers(c)
    assert v2.create("idle", "i1")[0] == 200
    assert v2.call("POST", "idle", "i1", "/subscription", {"topics": ["v2-idle"]})[0] == 204
    deadline = time.monotonic() + 30
    while not v2.assignment("idle", "i1"):
        assert time.monotonic() < deadline
        v2.records("idle", "i1", "binary", timeout_ms=300)
    wait_group(c, "idle", lambda g: g["state"] == "STABLE")
    t0 = time.monotonic()
    time.sleep(INSTANCE_TIMEOUT_MS / 1000 + 2)
    st, err = v2.records("idle", "i1", "binary", timeout_ms=0)
    assert (st, err["error_code"]) == (404, 40403)
    # It left the group (well before the 45 s session timeout would have dropped it).
    wait_group(c, "idle", lambda g: g["state"] == "EMPTY", timeout_s=5)
    assert time.monotonic() - t0 < 20
    # An instance in use does not expire: a request every 2 s keeps it.
    assert v2.create("idle", "i2")[0] == 200
    for _ in range(5):
        time.sleep(INSTANCE_TIMEOUT_MS / 3000)
        assert v2.call("GET", "idle", "i2", "/subscription")[0] == 200
    v2.call("DELETE", "idle", "i2")


def _concurrently(n: int, fn: Any) -> None:
    threads = [threading.Thread(target=fn) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)


def test_concurrent_requests_on_one_instance_are_serialized(c: HttpCluster) -> None:
    c.create_topic("v2-conc", partitions=3, rf=3)
    produce(c, "v2-conc", _records(300))
    v2 = Consumers(c)
    assert v2.create("conc", "x", format="json", **{"auto.offset.reset": "earliest"})[0] == 200
    assert v2.call("POST", "conc", "x", "/subscription", {"topics": ["v2-conc"]})[0] == 204
    got: list[dict[str, Any]] = []
    statuses: list[int] = []
    lock = threading.Lock()

    def poller() -> None:
        for _ in range(60):
            st, recs = v2.records("conc", "x", timeout_ms=200, max_bytes=200)
            with lock:
                statuses.append(st)
                if st == 200:
                    got.extend(recs)
                if len(got) >= 300:
                    return

    _concurrently(8, poller)
    assert set(statuses) == {200}
    seen = [(r["partition"], r["offset"]) for r in got]
    assert len(seen) == len(set(seen)), "a record was handed out twice"
    assert sorted(r["value"]["n"] for r in got) == list(range(300))

    # A request waits for the poll in progress: a seek sent during a long poll at the end
    # of the log applies after that poll has answered (nothing), not in the middle of it.
    done: dict[str, tuple[float, Any]] = {}

    def long_poll() -> None:
        done["poll"] = (time.monotonic(), v2.records("conc", "x", timeout_ms=2500))

    t = threading.Thread(target=long_poll)
    t.start()
    time.sleep(0.5)
    st, _ = v2.call(
        "POST",
        "conc",
        "x",
        "/positions/beginning",
        {"partitions": [{"topic": "v2-conc", "partition": p} for p in range(3)]},
    )
    done["seek"] = (time.monotonic(), st)
    t.join(30)
    assert done["poll"][1] == (200, [])
    assert done["seek"][1] == 204 and done["seek"][0] >= done["poll"][0] - 0.05
    assert len(v2.poll_until("conc", "x", 300)) == 300
    v2.call("DELETE", "conc", "x")


def test_v2_errors(c: HttpCluster) -> None:
    v2 = Consumers(c)
    parts: dict[str, Any] = {"partitions": []}
    calls: list[tuple[str, str, Any]] = [
        ("GET", "/records", None),
        ("POST", "/subscription", {"topics": ["x"]}),
        ("GET", "/subscription", None),
        ("DELETE", "/subscription", None),
        ("POST", "/assignments", parts),
        ("GET", "/assignments", None),
        ("POST", "/positions", {"offsets": []}),
        ("POST", "/positions/beginning", parts),
        ("POST", "/positions/end", parts),
        ("POST", "/offsets", None),
        ("GET", "/offsets", None),
        ("DELETE", "", None),
    ]
    for method, path, body in calls:
        st, err = v2.call(method, "nogroup", "nobody", path, body)
        assert (st, err) == (
            404,
            {"error_code": 40403, "message": "Consumer instance not found."},
        ), (method, path)
    st, err = v2.create("errs", "e1", format="protobuf")
    assert st == 422 and err["error_code"] == 42204
    st, err = v2.create("errs", "e1", **{"auto.offset.reset": "sometimes"})
    assert st == 422 and err["error_code"] == 42204
    assert v2.create("errs", "e1", format="string")[0] == 200
    st, err = v2.records("errs", "e1", "string")
    assert st == 409 and err["error_code"] == 40903  # neither subscribed nor assigned
    st, err = v2.call(
        "POST", "errs", "e1", "/subscription", {"topics": ["a"], "topic_pattern": "b"}
    )
    assert st == 422
    st, err = v2.call(
        "POST",
        "errs",
        "e1",
        "/assignments",
        {"partitions": [{"topic": "no-such-topic", "partition": 0}]},
    )
    assert st == 404 and err["error_code"] == 40401
    st, err = v2.records("errs", "e1", "json")
    assert st == 406 and err["error_code"] == 40601
    # Without an embedded format in Accept, the instance's own format is used.
    c.create_topic("v2-err", partitions=1, rf=3)
    produce(
        c,
        "v2-err",
        [{"value": {"type": "BINARY", "data": base64.b64encode(b"\xff not json").decode()}}],
    )
    assert (
        v2.call(
            "POST",
            "errs",
            "e1",
            "/assignments",
            {"partitions": [{"topic": "v2-err", "partition": 0}]},
        )[0]
        == 204
    )
    assert (
        v2.call(
            "POST",
            "errs",
            "e1",
            "/positions/beginning",
            {"partitions": [{"topic": "v2-err", "partition": 0}]},
        )[0]
        == 204
    )
    st, hdrs, recs = c.call("GET", v2.inst("errs", "e1") + "/records?timeout=5000")
    assert st == 200 and len(recs) == 1, recs
    assert hdrs["content-type"].startswith("application/vnd.kafka.string.v2+json")
    # A json instance meeting a record that is not JSON answers 42203 and consumes nothing.
    assert v2.create("errs", "j1", format="json")[0] == 200
    assert (
        v2.call(
            "POST",
            "errs",
            "j1",
            "/assignments",
            {"partitions": [{"topic": "v2-err", "partition": 0}]},
        )[0]
        == 204
    )
    assert (
        v2.call(
            "POST",
            "errs",
            "j1",
            "/positions/beginning",
            {"partitions": [{"topic": "v2-err", "partition": 0}]},
        )[0]
        == 204
    )
    for _ in range(2):
        st, err = v2.records("errs", "j1", "json", timeout_ms=5000)
        assert st == 422 and err["error_code"] == 42203, err
    assert (
        v2.call(
            "POST",
            "errs",
            "j1",
            "/positions",
            {"offsets": [{"topic": "v2-err", "partition": 0, "offset": 1}]},
        )[0]
        == 204
    )
    assert v2.records("errs", "j1", "json", timeout_ms=100) == (200, [])
    for n in ("e1", "j1"):
        v2.call("DELETE", "errs", n)


# --------------------------------------------------------------------------- v3


def test_v3_consumer_groups_describe_members_and_lags(c: HttpCluster) -> None:
    c.create_topic("v3-lag", partitions=3, rf=3)
    produce(c, "v3-lag", _records(30))
    v2 = Consumers(c)
    v2.committed_member("lagging", "m1", "v3-lag", 30, {0: 4, 1: 9})

    st, lst = c.call("GET", f"{c.v3(1)}/consumer-groups")[::2]
    assert st == 200 and lst["kind"] == "KafkaConsumerGroupList"
    mine = [g for g in lst["data"] if g["consumer_group_id"] == "lagging"]
    assert len(mine) == 1 and mine[0]["state"] == "STABLE"

    st, g = group(c, "lagging", i=2)
    assert st == 200
    assert g["kind"] == "KafkaConsumerGroup" and g["consumer_group_id"] == "lagging"
    assert g["metadata"]["self"] == f"{c.v3(2)}/consumer-groups/lagging"
    assert g["metadata"]["resource_name"] == f"crn:///kafka={c.cluster_id}/consumer-group=lagging"
    assert g["cluster_id"] == c.cluster_id and g["is_simple"] is False
    assert g["partition_assignor"] == "range" and g["state"] == "STABLE"
    assert g["coordinator"]["related"].startswith(f"{c.v3(2)}/brokers/")
    assert g["consumers"]["related"] == f"{c.v3(2)}/consumer-groups/lagging/consumers"
    assert g["lag_summary"]["related"] == f"{c.v3(2)}/consumer-groups/lagging/lag-summary"

    st, members = group(c, "lagging", "/consumers")
    assert st == 200 and members["kind"] == "KafkaConsumerList"
    (m,) = members["data"]
    assert m["kind"] == "KafkaConsumer" and m["client_id"] == "m1"
    cid = m["consumer_id"]
    st, one = group(c, "lagging", f"/consumers/{cid}")
    assert st == 200 and one["consumer_id"] == cid
    st, asg = group(c, "lagging", f"/consumers/{cid}/assignments")
    assert st == 200 and sorted(a["partition_id"] for a in asg["data"]) == [0, 1, 2]
    st, err = group(c, "lagging", "/consumers/nobody")
    assert st == 404 and err["error_code"] == 40403

    st, lags = group(c, "lagging", "/lags")
    assert st == 200 and lags["kind"] == "KafkaConsumerLagList"
    by_p = {x["partition_id"]: x for x in lags["data"]}
    assert by_p[0]["current_offset"] == 5 and by_p[0]["log_end_offset"] == 10
    assert by_p[0]["lag"] == 5 and by_p[0]["consumer_id"] == cid
    assert by_p[0]["client_id"] == "m1" and by_p[0]["topic_name"] == "v3-lag"
    assert by_p[1]["lag"] == 0
    assert by_p[2]["current_offset"] is None and by_p[2]["lag"] is None  # no commit yet
    st, one_lag = group(c, "lagging", "/lags/v3-lag/partitions/0")
    assert st == 200 and one_lag["kind"] == "KafkaConsumerLag" and one_lag["lag"] == 5
    st, summary = group(c, "lagging", "/lag-summary")
    assert st == 200 and summary["kind"] == "KafkaConsumerGroupLagSummary"
    assert summary["max_lag"] == 5 and summary["total_lag"] == 5
    assert summary["max_lag_topic_name"] == "v3-lag" and summary["max_lag_partition_id"] == 0
    assert summary["max_lag_consumer_id"] == cid and summary["max_lag_client_id"] == "m1"

    for path in ("", "/consumers", "/lags", "/lag-summary", "/lags/v3-lag/partitions/0"):
        st, err = group(c, "no-such-group", path)
        assert (st, err["error_code"]) == (404, 40405), path
    st, _, err = c.call("GET", f"{c.urls[0]}/v3/clusters/other/consumer-groups")
    assert st == 404
    v2.call("DELETE", "lagging", "m1")


# --------------------------------------------------------------------------- internal topic


def test_clients_cannot_append_to_the_offsets_topic(c: HttpCluster) -> None:
    # A group's first use creates __consumer_offsets; then every produce form is refused
    # as Kafka refuses appends to internal topics, and nothing lands in its partitions.
    cons = Consumers(c)
    assert cons.create("internal-g", "i1", format="json")[0] == 200
    assert cons.call("POST", "internal-g", "i1", "/subscription", {"topics": ["internal-src"]})[
        0
    ] in (200, 204)
    deadline = time.monotonic() + 30
    while c.call("GET", f"{c.v3()}/topics/__consumer_offsets")[0] != 200:
        cons.records("internal-g", "i1", timeout_ms=200)
        assert time.monotonic() < deadline, "__consumer_offsets never appeared"
    topic = f"{c.v3()}/topics/__consumer_offsets"
    st, _, err = c.call("POST", f"{topic}/records", {"value": {"data": 1}})
    assert st == 400 and err["error_code"] == 40002, (st, err)
    assert "internal topic" in err["message"]
    st, _, err = c.call("POST", f"{topic}/records", [{"value": {"data": i}} for i in range(3)])
    assert st == 400 and err["error_code"] == 40002, (st, err)
    st, _, err = c.call(
        "POST",
        f"{c.urls[0]}/topics/__consumer_offsets",
        {"records": [{"value": {"a": 1}}]},
        headers={"Content-Type": "application/vnd.kafka.json.v2+json"},
    )
    assert st == 400 and err["error_code"] == 40002, (st, err)
    import msgpack

    from storage.batch import encode_batch

    batch = encode_batch([(None, b"x", 0, ())])
    st, _, err = c.call(
        "POST",
        f"{topic}/records",
        raw=msgpack.packb({"partition_id": 0, "batch": batch}),
        headers={"Content-Type": "application/msgpack"},
    )
    assert st == 400 and err["error_code"] == 40002, (st, err)
    assert cons.call("DELETE", "internal-g", "i1")[0] == 204


# --------------------------------------------------------------------------- resets over HTTP


def test_offsets_reset_plans_then_executes_and_offsets_delete_over_http(c: HttpCluster) -> None:
    c.create_topic("v3-reset", partitions=2, rf=3)
    produce(c, "v3-reset", _records(20, partitions=2))
    v2 = Consumers(c)
    v2.committed_member("resetg", "m", "v3-reset", 20, {0: 4, 1: 6})  # v2 commits offset + 1
    url = f"{c.v3(1)}/consumer-groups/resetg"

    def lags() -> dict[int, int]:
        _, _, body = c.call("GET", f"{url}/lags")
        return {r["partition_id"]: r["current_offset"] for r in body["data"]}

    # A group with a live member is refused (409) and keeps its offsets.
    st, _, err = c.call("POST", f"{url}/offsets:reset", {"topics": ["v3-reset"], "to": "earliest"})
    assert (st, err["error_code"]) == (409, 40901) and "1 active member(s)" in err["message"]
    st, _, err = c.call("POST", f"{url}/offsets:delete", {"topics": ["v3-reset:0"]})
    assert (st, err["error_code"]) == (409, 40903), err
    assert v2.call("DELETE", "resetg", "m")[0] == 204
    wait_group(c, "resetg", lambda g: g["state"] == "EMPTY")

    # Without "execute" a plan only; with it, applied.
    st, _, plan = c.call(
        "POST", f"{url}/offsets:reset", {"topics": ["v3-reset:1"], "to": "shift-by", "value": -2}
    )
    assert st == 200 and plan["executed"] is False, plan
    assert [(r["partition"], r["current_offset"], r["new_offset"]) for r in plan["partitions"]] == [
        (1, 7, 5)
    ]
    assert lags() == {0: 5, 1: 7}
    body = {"all_topics": True, "to": "offset", "value": 99, "execute": True}
    st, _, plan = c.call("POST", f"{url}/offsets:reset", body)
    assert st == 200 and all(r["clamped"] and r["new_offset"] == 10 for r in plan["partitions"])
    assert lags() == {0: 10, 1: 10}
    offsets = [{"topic": "v3-reset", "partition": 0, "offset": 3}]
    st, _, plan = c.call(
        "POST", f"{url}/offsets:reset", {"to": "offsets", "value": offsets, "execute": True}
    )
    assert st == 200 and lags() == {0: 3, 1: 10}

    for bad, code in [
        ({"topics": ["v3-reset"], "to": "yesterday"}, 400),
        ({"topics": ["v3-reset"], "to": "by-duration", "value": "1h"}, 400),
        ({"topics": ["v3-reset:x"], "to": "latest"}, 400),
        ({"to": "latest"}, 400),
        ({"topics": ["no-such"], "to": "latest"}, 40401),
        ({"topics": ["v3-reset:7"], "to": "latest"}, 40402),
    ]:
        st, _, err = c.call("POST", f"{url}/offsets:reset", bad)
        assert st == int(str(code)[:3]) and err["error_code"] == code, (bad, st, err)
        assert err["message"]
    assert lags() == {0: 3, 1: 10}

    st, _, out = c.call("POST", f"{url}/offsets:delete", {"topics": ["v3-reset:1"]})
    assert st == 200 and out["partitions"] == [
        {"topic": "v3-reset", "partition": 1, "had_offset": True}
    ]
    assert lags() == {0: 3}
    assert c.call("POST", f"{url}/offsets:delete", {"topics": ["v3-reset"]})[0] == 200
    assert group(c, "resetg")[0] == 404
