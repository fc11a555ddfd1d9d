"""Three real controllers and three real brokers replicating one partition (RF 3,
min.insync.replicas=2) through the brokers' internal data routes: acks=all produce, followers
fetching, every replica holding the same batches, the leader SIGKILLed, a new leader elected
by the controller, more produce, every acknowledged batch read back exactly once in order,
and the old leader returning as a follower that catches up and rejoins the ISR.

Default timeouts (heartbeat 2 s, session 9 s): the failover takes ~10 s.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from api.node.localcluster import Brokers, Quorum, running_cluster, wait_for
from metalog.client import ControllerClient
from metalog.commands import CreateTopic, DeleteTopic
from storage.batch import decode_records, encode_batch, iter_batches

pytestmark = pytest.mark.slow

TOPIC = "replicated"


class Cluster:
    def __init__(self, quorum: Quorum, brokers: Brokers) -> None:
        self.quorum = quorum
        self.brokers = brokers

    def call(self, b: int, route: str, body: dict[str, Any], timeout_s: float = 35) -> Any:
        req = urllib.request.Request(
            f"{self.brokers.url(b)}/internal/broker/v1/{route}",
            data=msgpack.packb(body, use_bin_type=True),
            headers={"Content-Type": "application/msgpack"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return msgpack.unpackb(r.read(), raw=False)

    def replica(self, b: int) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(
                f"{self.brokers.url(b)}/internal/broker/v1/replicas", timeout=2
            ) as r:
                reps = json.loads(r.read())
        except (OSError, urllib.error.URLError):
            return None
        return next((x for x in reps if x["topic"] == TOPIC and x["partition"] == 0), None)

    def produce(self, b: int, value: bytes, acks: int = -1, timeout_ms: int = 10_000) -> Any:
        batch = encode_batch([(None, value, int(time.time() * 1000), ())])
        return self.call(
            b,
            "produce",
            {
                "topic": TOPIC,
                "partition": 0,
                "acks": acks,
                "timeout_ms": timeout_ms,
                "batch": batch,
            },
        )

    def read_all(self, b: int, replica_id: int) -> tuple[list[bytes | None], dict[str, Any]]:
        """Every record value of broker ``b``'s log from offset 0 (consumer: below the HW)."""
        values: list[bytes | None] = []
        offset = 0
        last: dict[str, Any] = {}
        while True:
            last = self.call(
                b,
                "fetch",
                {
                    "topic": TOPIC,
                    "partition": 0,
                    "replica_id": replica_id,
                    "fetch_offset": offset,
                    "max_bytes": 1 << 20,
                    "max_wait_ms": 0,
                },
            )
            assert not last.get("error"), last
            data = last["records"]
            if not data:
                return values, last
            for pos, h in iter_batches(data):
                values += [r.value for r in decode_records(data[pos : pos + h.size])]
                offset = h.next_offset

    def wait_for(self, what: str, cond: Any, timeout_s: float) -> Any:
        return wait_for(
            what,
            cond,
            timeout_s,
            context=lambda: "\n".join(
                f"--- broker {b}\n{self.brokers.log_tail(b, 15)}" for b in self.brokers.ids
            ),
        )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root: Path = tmp_path_factory.mktemp("replication-cluster")
    with running_cluster(root) as (q, brokers):
        yield Cluster(q, brokers)


def _create_topic(c: Cluster) -> None:
    async def go() -> None:
        async with ControllerClient(c.quorum.urls, timeout_s=20) as cc:
            await cc.execute(
                CreateTopic(
                    name=TOPIC,
                    num_partitions=1,
                    replication_factor=3,
                    configs={"min.insync.replicas": "2"},
                )
            )

    asyncio.run(go())


def test_replicate_fail_over_and_rejoin(cluster: Cluster) -> None:
    c = cluster
    ids = c.brokers.ids
    _create_topic(c)

    def leader_with_full_isr() -> int | None:
        reps = {b: c.replica(b) for b in ids}
        for b, r in reps.items():
            if r is not None and r["role"] == "leader" and len(r["isr"]) == 3:
                return b
        return None

    leader = c.wait_for("a leader with ISR of 3", leader_with_full_isr, 30)
    followers = [b for b in ids if b != leader]
    # A follower does not serve a produce another broker forwarded: it names the leader.
    ans = c.call(
        followers[0],
        "produce",
        {
            "topic": TOPIC,
            "partition": 0,
            "acks": -1,
            "timeout_ms": 10_000,
            "forwarded": True,
            "batch": encode_batch([(None, b"nope", int(time.time() * 1000), ())]),
        },
    )
    assert ans["error"] == "NOT_LEADER_OR_FOLLOWER" and ans["leader_id"] == leader

    acked: list[bytes | None] = []
    for i in range(30):
        v = f"before-{i}".encode()
        ans = c.produce(leader, v)
        assert not ans.get("error"), ans
        assert ans["base_offset"] == i
        acked.append(v)
    # acks=1 and acks=0 are served too
    for acks in (1, 0):
        v = f"acks{acks}".encode()
        ans = c.produce(leader, v, acks=acks)
        assert not ans.get("error"), ans
        acked.append(v)

    n = len(acked)
    c.wait_for(
        "every replica at the same log end and HW",
        lambda: all(
            (r := c.replica(b)) is not None
            and r["log_end_offset"] == n
            and r["high_watermark"] == n
            for b in ids
        ),
        20,
    )
    for b in ids:
        values, _ = c.read_all(b, replica_id=-2)
        assert values == acked, f"broker {b}"
    consumer, last = c.read_all(leader, replica_id=-1)
    assert consumer == acked and last["high_watermark"] == n
    off = c.call(leader, "list_offsets", {"topic": TOPIC, "partition": 0, "timestamp": -1})
    assert off["offset"] == n
    old_epoch = c.replica(leader)["leader_epoch"]  # type: ignore[index]

    # An unreplicated tail: with both followers paused (briefly: not long enough to be
    # fenced or dropped from the ISR) the leader takes acks=1 batches nobody fetches, then
    # dies. They were never committed; the old leader must cut them when it returns.
    for b in followers:
        c.brokers.send_signal(b, signal.SIGSTOP)
    try:
        # A fetch parked on the leader answers within its max wait (500 ms) into the paused
        # follower's socket: let those expire empty first, or the follower gets the batches.
        time.sleep(1.0)
        for i in range(3):
            ans = c.produce(leader, f"lost-{i}".encode(), acks=1)
            assert not ans.get("error"), ans
        assert c.replica(leader)["log_end_offset"] == n + 3  # type: ignore[index]
        # SIGKILL the leader: the controller fences it after the session timeout and elects
        # another member of the ISR.
        c.brokers.kill(leader, signal.SIGKILL)
    finally:
        for b in followers:
            c.brokers.send_signal(b, signal.SIGCONT)

    def new_leader() -> int | None:
        for b in followers:
            r = c.replica(b)
            if r is not None and r["role"] == "leader" and r["leader_epoch"] > old_epoch:
                return b
        return None

    leader2 = c.wait_for("a new leader", new_leader, 40)
    for i in range(20):
        v = f"after-{i}".encode()
        for _ in range(50):  # the ISR may still be shrinking away from the dead broker
            ans = c.produce(leader2, v)
            if ans.get("error") in (None, "NOT_ENOUGH_REPLICAS"):
                if not ans.get("error"):
                    break
                time.sleep(0.2)
                continue
            raise AssertionError(ans)
        assert not ans.get("error"), ans
        acked.append(v)
    consumer, _ = c.read_all(leader2, replica_id=-1)
    assert consumer == acked  # every acknowledged batch, once, in order

    # The old leader returns as a follower, cuts its unreplicated tail (KIP-101/279:
    # OffsetsForLeaderEpoch of its last epoch), catches up and rejoins the ISR. (Once back
    # in the ISR, the controller may make it leader again: it is the preferred replica.)
    c.brokers.start(leader)
    n = len(acked)
    c.wait_for(
        "the old leader caught up and back in the ISR",
        lambda: (
            (o := c.replica(leader)) is not None
            and leader in o["isr"]
            and o["log_end_offset"] == n
            and len(o["isr"]) == 3
        ),
        40,
    )
    assert "truncated to" in c.brokers.log_tail(leader, 200)
    for b in ids:
        values, _ = c.read_all(b, replica_id=-2)
        assert values == acked, f"broker {b}"


def test_a_paused_follower_leaves_the_isr_and_returns(cluster: Cluster) -> None:
    """SIGSTOP a follower: acks=all waits for it (it is in the ISR) until the controller fences
    it (session timeout) and takes it out of the ISR, then completes with the other two; on
    SIGCONT it catches up and the leader adds it back (AlterPartition expand)."""
    c = cluster
    ids = c.brokers.ids

    def leader_with_full_isr() -> int | None:
        for b in ids:
            r = c.replica(b)
            if r is not None and r["role"] == "leader" and len(r["isr"]) == 3:
                return b
        return None

    leader = c.wait_for("a leader with ISR of 3", leader_with_full_isr, 40)
    paused = next(b for b in ids if b != leader)
    base, _ = c.read_all(leader, replica_id=-1)
    c.brokers.send_signal(paused, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        ans = c.produce(leader, b"while-paused", acks=-1, timeout_ms=30_000)
        waited = time.monotonic() - t0
        assert not ans.get("error"), ans
        r = c.replica(leader)
        assert r is not None and paused not in r["isr"] and len(r["isr"]) == 2
        assert waited > 1.0  # it had to wait for the ISR to shrink
    finally:
        c.brokers.send_signal(paused, signal.SIGCONT)
    c.wait_for(
        "the paused follower back in the ISR",
        lambda: (r := c.replica(leader)) is not None and len(r["isr"]) == 3,
        40,
    )
    expected = [*base, b"while-paused"]
    for b in ids:
        c.wait_for(
            f"broker {b} caught up", lambda b=b: c.read_all(b, replica_id=-2)[0] == expected, 20
        )


def test_idempotent_retries_offsets_long_poll_and_topic_deletion(cluster: Cluster) -> None:
    c = cluster
    ids = c.brokers.ids

    def current_leader() -> int | None:
        for b in ids:
            r = c.replica(b)
            if r is not None and r["role"] == "leader" and len(r["isr"]) >= 2:
                return b
        return None

    leader = c.wait_for("a leader", current_leader, 40)
    hw = c.replica(leader)["high_watermark"]  # type: ignore[index]

    # An idempotent producer's retry is answered with the original offsets, not appended.
    ts = int(time.time() * 1000)
    batch = encode_batch(
        [(None, b"idem-0", ts, ()), (None, b"idem-1", ts, ())],
        producer_id=4242,
        producer_epoch=0,
        base_sequence=0,
    )
    body = {"topic": TOPIC, "partition": 0, "acks": -1, "timeout_ms": 10_000, "batch": batch}
    first = c.call(leader, "produce", body)
    again = c.call(leader, "produce", body)
    assert not first.get("error") and not again.get("error"), (first, again)
    assert first["base_offset"] == hw and not first["duplicate"]
    assert (again["base_offset"], again["last_offset"]) == (hw, hw + 1) and again["duplicate"]
    gap = encode_batch(
        [(None, b"gap", ts, ())], producer_id=4242, producer_epoch=0, base_sequence=7
    )
    ans = c.call(leader, "produce", {**body, "batch": gap})
    assert ans["error"] == "OUT_OF_ORDER_SEQUENCE_NUMBER"
    corrupt = bytearray(batch)
    corrupt[-1] ^= 0xFF
    ans = c.call(leader, "produce", {**body, "batch": bytes(corrupt)})
    assert ans["error"] == "CORRUPT_MESSAGE"

    def offsets(timestamp: int) -> int:
        a = c.call(leader, "list_offsets", {"topic": TOPIC, "partition": 0, "timestamp": timestamp})
        assert not a.get("error"), a
        return int(a["offset"])

    assert offsets(-2) == 0
    assert offsets(-1) == hw + 2
    assert offsets(ts) <= hw  # the first record at or after ts
    assert offsets(ts + 3_600_000) == -1

    # A consumer fetch at the HW long-polls, then gets what a producer writes meanwhile.
    t0 = time.monotonic()
    a = c.call(
        leader,
        "fetch",
        {
            "topic": TOPIC,
            "partition": 0,
            "replica_id": -1,
            "fetch_offset": hw + 2,
            "max_wait_ms": 300,
        },
    )
    assert a["records"] == b"" and time.monotonic() - t0 >= 0.25

    # An epoch-fenced fetch is refused.
    a = c.call(
        leader,
        "fetch",
        {
            "topic": TOPIC,
            "partition": 0,
            "replica_id": -1,
            "fetch_offset": 0,
            "leader_epoch": 0,
            "max_wait_ms": 0,
        },
    )
    epoch = c.replica(leader)["leader_epoch"]  # type: ignore[index]
    assert (a.get("error") == "FENCED_LEADER_EPOCH") == (epoch > 0)

    # Deleting the topic deletes every replica's log.
    async def delete() -> None:
        async with ControllerClient(c.quorum.urls, timeout_s=20) as cc:
            await cc.execute(DeleteTopic(name=TOPIC))

    asyncio.run(delete())
    c.wait_for(
        "every replica deleted",
        lambda: all(
            c.replica(b) is None
            and not (c.brokers.root / f"broker-{b}" / "data" / f"{TOPIC}-0").exists()
            for b in ids
        ),
        20,
    )
