"""A follower whose segment lost its tail while it was down (fault-injection finding 8), with
real processes: it opens at its real log end, fetches the lost range again from the leader,
and leads with every acknowledged record once the leader is killed.

Before the fix it reopened with its log end at the recovery point over a hole, rejoined the
ISR without fetching the hole, and served the lost range as empty once it led.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from api.client import AsyncConsumer, AsyncProducer, TopicPartition
from api.node.localcluster import Brokers, Quorum, wait_for
from metalog.client import ControllerClient
from metalog.commands import CreateTopic
from storage.batch import parse_header

pytestmark = pytest.mark.slow

N = 300


def _partition(q: Quorum) -> dict[str, Any] | None:
    for t in q.metadata(q.wait_active_leader())["topics"]:
        if t["name"] == "lt":
            return dict(t["partitions"][0])
    return None


async def _produce(bootstrap: list[str], values: list[bytes]) -> None:
    async with AsyncProducer(bootstrap, linger_ms=1, request_timeout_ms=30_000) as p:
        for i, v in enumerate(values):
            await p.send("lt", v, partition=0)
            if i % 30 == 29:
                await p.flush()  # batches of at most 30: boundaries to cut at
        await p.flush()


async def _read_all(bootstrap: list[str], n: int) -> list[bytes]:
    """What the partition serves from offset 0 until ``n`` records or 15 s: a hole shows as
    fewer records."""
    out: list[bytes] = []
    async with AsyncConsumer(bootstrap, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition("lt", 0)])
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(15):
                while len(out) < n:
                    out += [r.value for r in await c.poll(2000) if r.value is not None]
    return out


def test_a_follower_that_lost_its_tail_refetches_it_and_leads_with_every_record(
    tmp_path: Path,
) -> None:
    q = Quorum(tmp_path, 1)
    b = Brokers(tmp_path, q, 2)
    q.start_all()
    b.start_all()
    try:
        b.wait_ready(timeout_s=60)

        async def create() -> None:
            async with ControllerClient(q.urls, timeout_s=20) as c:
                await c.execute(CreateTopic(name="lt", assignments={0: (101, 102)}))

        asyncio.run(create())
        wait_for("ISR of 2", lambda: len((_partition(q) or {}).get("isr", [])) == 2, 30)
        values = [b"r%d" % i for i in range(N)]
        asyncio.run(_produce([b.url(101)], values))  # acks=all: 102 holds every record
        assert b.kill(102, signal.SIGTERM) == 0  # a clean stop: the recovery point is N

        seg = tmp_path / "broker-102/data/lt-0/00000000000000000000.log"
        data = seg.read_bytes()
        starts, pos = [], 0
        while pos < len(data):
            starts.append(pos)
            pos += parse_header(data, pos).size
        assert len(starts) > 4, len(starts)
        cut = starts[len(starts) // 2]
        lost_from = parse_header(data, cut).base_offset
        os.truncate(seg, cut)  # the disk loses the second half of the follower's segment

        b.start(102)
        wait_for("102 back in the ISR", lambda: len((_partition(q) or {}).get("isr", [])) == 2, 60)
        assert b.kill(101) == -signal.SIGKILL  # the only other copy goes
        wait_for("102 leads", lambda: (_partition(q) or {}).get("leader") == 102, 30)
        got = asyncio.run(_read_all([b.url(102)], N))
        assert got == values
        log = b.log_tail(102, 400)
        assert "lost its tail" in log and f"offsets {lost_from}..{N - 1} are missing" in log, log
    finally:
        b.stop_all()
        q.stop_all()
