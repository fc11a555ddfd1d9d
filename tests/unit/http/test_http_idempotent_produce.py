"""A JSON produce whose batch reached the leader but whose answer was lost is appended once.

The router retries a produce after a connection broke (``broker.router``); the first attempt
may already be in the leader's log, and in the new leader's once replicated. The batches the
HTTP layer builds carry a producer id and sequence (``broker.produce_lanes``), so the leader's
producer state (the real ``ProducerState`` here) answers the retry as a duplicate with the
original offsets. Seen in CI before: a record acknowledged at offset 22 whose copy sat at 21.
Both produce paths (the fast one and the general one) are checked, and without lanes the same
retry appends twice (what the test would catch).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from api.http.context import HttpContext
from api.http.errors import HttpError
from api.http.metrics import BrokerMetrics
from api.http.v3 import produce_body
from broker.produce_lanes import ProduceLanes
from broker.producer_state import Duplicate, ProducerState
from broker.replica_manager import ReplicaError
from storage.batch import decode_records, parse_header

TOPIC = "orders"


@dataclass
class Leader:
    """One partition's leader: a log of batches and the producer state it keeps."""

    state: ProducerState = field(default_factory=ProducerState)
    log: list[tuple[int, bytes]] = field(default_factory=list)
    end: int = 0

    def append(self, batch: bytes) -> dict[str, Any]:
        h = parse_header(batch)
        plan = self.state.check_and_plan(h)
        if isinstance(plan, Duplicate):
            return {
                "base_offset": plan.base_offset,
                "last_offset": plan.last_offset,
                "duplicate": True,
            }
        base = self.end
        self.log.append((base, batch))
        self.state.on_append(h, base)
        self.end = base + h.last_offset_delta + 1
        return {"base_offset": base, "last_offset": self.end - 1}


@dataclass
class LosingRouter:
    """Every ``lose``-th produce reaches the leader, loses its answer and is retried, as
    ``PartitionRouter`` retries after a connection error; ``refuse``: refused outright."""

    lose: int = 2
    refuse: bool = False
    leader: Leader = field(default_factory=Leader)
    calls: int = 0

    async def produce(
        self, topic: str, p: int, acks: int, timeout_ms: int, batch: bytes
    ) -> dict[str, Any]:
        await asyncio.sleep(0)
        if self.refuse:
            raise ReplicaError("NOT_ENOUGH_REPLICAS", "1 in sync, 2 needed")
        self.calls += 1
        if self.calls % self.lose == 0:
            self.leader.append(batch)  # the answer to this attempt is lost
        return self.leader.append(batch)


def context(router: LosingRouter, lanes: ProduceLanes | None) -> HttpContext:
    image = SimpleNamespace(
        topics={TOPIC: SimpleNamespace(partitions=dict.fromkeys(range(1)))},
        configs=SimpleNamespace(topic_config=lambda topic, key: None),
    )
    return HttpContext(
        broker_id=1,
        cluster_id="c",
        image_fn=lambda: image,
        router=router,  # type: ignore[arg-type]
        controllers=None,
        metrics=BrokerMetrics(),  # type: ignore[arg-type]
        lanes=lanes,
    )


def lanes() -> ProduceLanes:
    n = iter(range(5000, 6000))

    async def next_id() -> int:
        return next(n)

    return ProduceLanes(next_id)


def produce(ctx: HttpContext, values: list[int], *, fast: bool, acks: int = -1) -> list[Any]:
    raw = b"\n".join(orjson.dumps({"value": {"type": "JSON", "data": v}}) for v in values)
    resp = asyncio.run(produce_body(ctx, TOPIC, raw, acks=acks, timeout_ms=1000, fast=fast))
    return [orjson.loads(line) for line in resp.body.splitlines()]


def stored(leader: Leader) -> list[Any]:
    return [orjson.loads(r.value) for _, b in leader.log for r in decode_records(b)]


@pytest.mark.parametrize("fast", [True, False])
def test_a_retried_batch_is_stored_once_and_answered_with_its_offsets(fast: bool) -> None:
    router = LosingRouter(lose=2)
    ctx = context(router, lanes())
    reports = []
    for i in range(6):
        reports += produce(ctx, [3 * i, 3 * i + 1, 3 * i + 2], fast=fast)
    assert stored(router.leader) == list(range(18))
    assert [r["offset"] for r in reports] == list(range(18))
    assert all(r["error_code"] == 200 for r in reports)
    # One request at a time: one lane, its sequence moved on by each batch.
    assert ctx.lanes is not None and ctx.lanes.created == 1
    pids = {parse_header(b).producer_id for _, b in router.leader.log}
    seqs = [parse_header(b).base_sequence for _, b in router.leader.log]
    assert len(pids) == 1 and seqs == [0, 3, 6, 9, 12, 15]


def test_without_lanes_the_same_retry_stores_twice() -> None:
    router = LosingRouter(lose=2)
    ctx = context(router, None)
    for i in range(2):
        produce(ctx, [i], fast=True)
    assert stored(router.leader) == [0, 1, 1]


def test_acks_1_batches_go_without_a_producer_id() -> None:
    router = LosingRouter(lose=1000)
    ctx = context(router, lanes())
    produce(ctx, [1, 2], fast=True, acks=1)
    produce(ctx, [3], fast=False, acks=1)
    assert [parse_header(b).producer_id for _, b in router.leader.log] == [-1, -1]
    assert ctx.lanes is not None and ctx.lanes.created == 0


def test_a_refused_batch_drops_its_lane_and_the_next_takes_a_new_producer_id() -> None:
    router = LosingRouter(lose=1000)
    ctx = context(router, lanes())
    produce(ctx, [1], fast=True)
    router.refuse = True
    with pytest.raises(HttpError) as e:  # one record: its error is the answer
        produce(ctx, [2], fast=True)
    assert e.value.error_code == 50003, e.value
    router.refuse = False
    produce(ctx, [3], fast=False)
    first, second = (parse_header(b) for _, b in router.leader.log)
    assert first.producer_id != second.producer_id and second.base_sequence == 0
    assert ctx.lanes is not None and (ctx.lanes.created, ctx.lanes.dropped) == (2, 1)


def test_concurrent_requests_to_one_partition_take_separate_lanes() -> None:
    router = LosingRouter(lose=3)
    ctx = context(router, lanes())

    async def go() -> None:
        raws = [orjson.dumps({"value": {"type": "JSON", "data": v}}) for v in range(8)]
        await asyncio.gather(
            *(produce_body(ctx, TOPIC, raw, acks=-1, timeout_ms=1000, fast=True) for raw in raws)
        )

    asyncio.run(go())
    assert sorted(stored(router.leader)) == list(range(8))
    assert ctx.lanes is not None and ctx.lanes.created == 8
