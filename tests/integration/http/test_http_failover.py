"""Produce through a broker that does not lead, while the leader is SIGKILLed: each request is
forwarded, retried through the leader change within its time budget, and acknowledged; every
acknowledged record reads back once, in order. Then the errors only a dead broker can cause:
NOT_ENOUGH_REPLICAS (ISR below min.insync.replicas) and REQUEST_TIMED_OUT (no leader within
the budget). Default session timeout (9 s): about 20 s in all.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from http_cluster_support import HttpCluster, http_cluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def c(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpCluster]:
    root: Path = tmp_path_factory.mktemp("http-failover")
    with http_cluster(root) as cl:
        yield cl


def test_produce_rides_through_a_leader_kill(c: HttpCluster) -> None:
    c.create_topic("fo", partitions=1, rf=3, configs={"min.insync.replicas": "2"})
    c.create_topic("strict", partitions=1, rf=3, configs={"min.insync.replicas": "3"})
    leader = c.leader_index("fo", 0)
    lid = c.brokers.ids[leader]
    st, _, _ = c.call(
        "POST", f"{c.v3()}/topics", {"topic_name": "solo", "replicas_assignments": {"0": [lid]}}
    )
    assert st == 201
    via = (leader + 1) % 3
    other = (leader + 2) % 3
    acked: list[int] = []
    errors: list[object] = []
    stop = threading.Event()

    def producer() -> None:
        n = 0
        while not stop.is_set():
            st, _, rep = c.call(
                "POST",
                f"{c.v3(via)}/topics/fo/records?timeout_ms=40000",
                {"value": {"data": n}},
                timeout_s=60,
            )
            if st == 200:
                assert rep["offset"] == len(acked), rep
                acked.append(n)
            else:
                errors.append(rep)
            n += 1
            time.sleep(0.02)

    t = threading.Thread(target=producer)
    t.start()
    try:
        time.sleep(0.5)
        before = len(acked)
        assert before > 0
        c.brokers.kill(lid, signal.SIGKILL)
        # A read through a live broker waits for the new leader too.
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            _, _, p = c.call("GET", f"{c.v3(via)}/topics/fo/partitions/0")
            if p["leader_id"] not in (lid, -1) and len(acked) > before + 5:
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"no new leader taking writes: {p}, {len(acked)} acked")
    finally:
        stop.set()
        t.join(timeout=60)
    assert not errors, errors[:3]
    recs = c.read_all("fo", 0, i=other, fmt="json")
    assert [r["value"] for r in recs] == acked

    # ISR now 2 < min.insync.replicas=3: acks=all is refused before the append.
    deadline = time.monotonic() + 20
    while True:
        st, _, err = c.call("POST", f"{c.v3(via)}/topics/strict/records", {"value": {"data": 1}})
        if st == 503 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert st == 503 and "NOT_ENOUGH_REPLICAS" in err["message"] and err["error_code"] == 50003
    st, _, rep = c.call("POST", f"{c.v3(via)}/topics/strict/records?acks=1", {"value": {"data": 1}})
    assert st == 200, rep
    # The only replica of "solo" is dead: no leader within the budget.
    t0 = time.monotonic()
    st, _, err = c.call(
        "POST", f"{c.v3(via)}/topics/solo/records?timeout_ms=1500", {"value": {"data": 1}}
    )
    assert st == 408 and err["error_code"] == 40801 and "REQUEST_TIMED_OUT" in err["message"]
    assert time.monotonic() - t0 < 5
    st, _, err = c.call(
        "GET", f"{c.v3(via)}/topics/solo/partitions/0/records?offset=0&timeout_ms=500"
    )
    assert st == 408, err
    # The new leader counts an under-replicated partition and the ISR shrink.
    new_leader = c.leader_index("fo", 0)
    _, _, text = c.call("GET", f"{c.urls[new_leader]}/metrics")
    lines = dict(
        line.rsplit(" ", 1)
        for line in text.decode().splitlines()
        if line and not line.startswith("#")
    )
    assert float(lines["longboat_under_replicated_partitions"]) >= 1
    assert float(lines["longboat_isr_shrinks_total"]) >= 1
    # The broker that forwarded the produces stamped them with producer ids (so a retry of
    # a batch the old leader had appended was answered as a duplicate, not appended again).
    _, _, text = c.call("GET", f"{c.urls[via]}/metrics")
    lines = dict(
        line.rsplit(" ", 1)
        for line in text.decode().splitlines()
        if line and not line.startswith("#")
    )
    assert float(lines["longboat_produce_lanes_created_total"]) >= 1
    assert float(lines["longboat_produce_batches_without_producer_id_total"]) == 0
