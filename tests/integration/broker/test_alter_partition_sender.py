"""The AlterPartition sender of a real ``ReplicaManager`` (its logs in a temporary directory,
its own timer and sender tasks) leading 60 partitions, against a ``QuorumController`` in the
same process that stands in for the controller route (``execute`` as the HTTP client has
it): the ISR changes of many partitions reach the controller in a few requests, one at a
time, and a request that got no answer is sent again after the back-off (finding 13 in
docs/fault-injection.md: one request per partition swamped the controller)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from broker.metadata_follower import MetadataUpdate
from broker.replica_manager import ReplicaManager
from metalog.client import ControllerUnavailableError
from metalog.commands import AlterPartition, Command, CreateTopic
from metalog.records import BrokerId
from tests.unit.metalog.metalog_harness import Harness

PARTITIONS = 60
REQUESTS_MAX = PARTITIONS // 6
"""Per phase; one request per partition (the sender before finding 13's fix) would be 60."""
LAG_MS = 1_000
"""``replica.lag.time.max.ms`` of the leader: followers that never fetch leave the ISR
after this."""


class InProcessController:
    """``ControllerClient.execute`` answered by a ``Harness`` (handle, commit, answer), after
    ``delay_s``, as the controller route would; it records every AlterPartition."""

    def __init__(self, h: Harness, delay_s: float) -> None:
        self.h = h
        self.delay_s = delay_s
        self.requests: list[AlterPartition] = []
        """Every AlterPartition answered, in order."""
        self.unanswered = 0
        """Requests to drop, as if the controller never answered (``ControllerUnavailableError``)."""
        self.in_flight = 0
        self.in_flight_max = 0

    async def execute(self, command: Command) -> Any:
        self.in_flight += 1
        self.in_flight_max = max(self.in_flight_max, self.in_flight)
        try:
            await asyncio.sleep(self.delay_s)
            if self.unanswered:
                self.unanswered -= 1
                raise ControllerUnavailableError("no active controller answered (test)")
            resp = self.h.run(command)
            if isinstance(command, AlterPartition):
                self.requests.append(command)
            return resp
        finally:
            self.in_flight -= 1

    async def close(self) -> None:
        pass


def isrs(h: Harness) -> set[tuple[int, ...]]:
    t = h.image.topics.get("t")
    assert t is not None
    return {tuple(reg.isr) for reg in t.partitions.values()}


async def wait(what: str, cond: Any, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s} s")
        await asyncio.sleep(0.05)


def test_isr_changes_of_many_partitions_share_one_request_at_a_time(tmp_path: Path) -> None:
    h = Harness()
    h.add_brokers(1, 2, 3)
    h.run(
        CreateTopic(
            name="t",
            assignments={p: (BrokerId(1), BrokerId(2), BrokerId(3)) for p in range(PARTITIONS)},
        )
    )
    # Each answer takes 0.5 s: changes proposed meanwhile queue behind the request in
    # flight, so the number of requests is bounded by how far apart the changes come (the
    # replicas become leaders one after another; on a loaded machine that spreads them over
    # seconds), not by the number of partitions.
    ctl = InProcessController(h, delay_s=0.5)

    async def go() -> None:
        rm = ReplicaManager(
            broker_id=1,
            data_dir=tmp_path,
            controller_urls=["http://127.0.0.1:9"],
            broker_epoch=lambda: h.epochs[BrokerId(1)],
            replica_lag_time_max_ms=LAG_MS,
        )
        await rm.controller.close()
        rm.controller = ctl  # type: ignore[assignment]
        await rm.start()
        try:
            await rm.on_metadata(MetadataUpdate(None, h.image))
            assert sum(1 for r in rm.replicas.values() if r.leader is not None) == PARTITIONS

            # Shrink: followers 2 and 3 never fetch, so every ISR loses them once the lag
            # has passed (the replicas became leaders a moment apart: the first change may
            # go alone while the others queue). The first request gets no answer: its
            # changes are sent again after the back-off.
            ctl.unanswered = 1
            t0 = time.monotonic()
            await wait("every ISR shrunk to the leader", lambda: isrs(h) == {(1,)})
            assert time.monotonic() - t0 >= (LAG_MS + 500) / 1000  # the lag, then the back-off
            assert len(ctl.requests) <= REQUESTS_MAX, [len(r.partitions) for r in ctl.requests]
            shrunk = [(c.topic_id, c.partition) for r in ctl.requests for c in r.partitions]
            assert sorted(shrunk) == sorted(rm.replicas)  # each partition's change, once
            for rep in rm.replicas.values():
                assert rep.leader is not None and rep.leader.pending is None
                assert rep.leader.isr == (1,)  # the answer was applied, not only committed
            await rm.on_metadata(MetadataUpdate(None, h.image))

            # Expand: follower 2 fetches every partition at the log end; each fetch proposes
            # its expansion. They queue behind whatever is in flight and go together.
            ctl.requests.clear()
            for p in range(PARTITIONS):
                ans = await rm.fetch(
                    topic="t",
                    partition=p,
                    replica_id=2,
                    fetch_offset=0,
                    leader_epoch=0,
                    last_fetched_epoch=-1,
                    max_bytes=1 << 10,
                    max_wait_ms=0,
                    min_bytes=1,
                    high_watermark=0,
                    broker_epoch=h.epochs[BrokerId(2)],
                )
                assert not ans.get("error"), ans
            await wait(
                "follower 2 back in every ISR",
                lambda: sum(len(r.partitions) for r in ctl.requests) >= PARTITIONS,
            )
            assert len(ctl.requests) <= REQUESTS_MAX, [len(r.partitions) for r in ctl.requests]
            added = [c for r in ctl.requests for c in r.partitions]
            assert sorted(c.partition for c in added) == list(range(PARTITIONS))
            assert all(tuple(m.broker_id for m in c.new_isr) == (1, 2) for c in added)
            assert ctl.in_flight_max == 1
        finally:
            await rm.stop()

    asyncio.run(go())
