"""A replica whose log is damaged below its recovery point, with no leader to fetch the rest
from, tells an unclean recovery where its valid data ends instead of leaving the partition
waiting for it (fault-injection finding 17).

Every broker of a partition is killed (an unclean shutdown: each leaves every ISR and ELR, so
the partition waits for an unclean recovery, KIP-966), one replica's segment gets a bit flip
in a batch with whole batches after it (damage, not a torn write), and all restart. The
damaged replica refuses to open its log (no one to refetch from); before the fix it also
never reported a log end, and the balanced recovery waited for it up to
``unclean_recovery_timeout_ms`` (300 s by default). Now it reports the end of its valid data,
ranked below every whole log, and the recovery elects a whole replica at once: every
acknowledged record is read back."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from api.client import AsyncConsumer, AsyncProducer, TopicPartition
from api.node.localcluster import running_cluster, wait_for
from metalog.client import ControllerClient
from metalog.commands import CreateTopic
from storage.batch import parse_header

pytestmark = pytest.mark.slow

TOPIC = "damaged"
RECORDS = 12


def _batch_starts(path: Path) -> list[int]:
    data = path.read_bytes()
    out, pos = [], 0
    while pos < len(data):
        out.append(pos)
        pos += parse_header(data, pos).size
    return out


def test_a_damaged_replica_reports_where_its_data_ends_to_the_unclean_recovery(
    tmp_path: Path,
) -> None:
    with running_cluster(tmp_path, controllers=1, brokers=3) as (q, b):

        async def setup() -> None:
            async with ControllerClient(q.urls, timeout_s=20) as c:
                await c.execute(
                    CreateTopic(
                        name=TOPIC,
                        num_partitions=1,
                        replication_factor=3,
                        configs={"min.insync.replicas": "3"},  # every replica has each record
                    )
                )
            async with AsyncProducer([b.url(i) for i in b.ids], linger_ms=0) as p:
                for i in range(RECORDS):  # one batch each
                    await p.send_and_wait(TOPIC, b"v%d" % i, partition=0)

        asyncio.run(setup())
        damaged = b.ids[0]
        for i in b.ids:
            b.kill(i)
        seg = tmp_path / f"broker-{damaged}" / "data" / f"{TOPIC}-0" / "00000000000000000000.log"
        at = _batch_starts(seg)[RECORDS // 2]
        with open(seg, "r+b") as f:  # a bit of the record bytes, under the CRC
            f.seek(at + os.path.getsize(seg) // RECORDS - 3)
            byte = f.read(1)
            f.seek(f.tell() - 1)
            f.write(bytes([byte[0] ^ 0x10]))

        def controller_leader() -> int:
            md = q.metadata(q.wait_active_leader())
            [t] = [t for t in md["topics"] if t["name"] == TOPIC]
            return int(t["partitions"][0]["leader"])

        # Every broker fenced (their sessions ran out): the partition has no leader.
        wait_for("every broker fenced", lambda: controller_leader() < 0, 60)
        # The damaged replica first: a live replica the recovery must hear from, whose log
        # cannot open while the partition has no leader.
        b.start(damaged)
        wait_for(
            "the damaged replica refuses its log",
            lambda: "cannot open" in b.log_tail(damaged, 400),
            60,
        )
        for i in b.ids[1:]:
            b.start(i)

        def leader() -> int:
            for i in b.ids[1:]:
                try:
                    md = b.metadata(i)
                except OSError:
                    continue
                for t in md.get("topics", []):
                    if t["name"] == TOPIC:
                        return int(t["partitions"][0]["leader"])
            return -1

        # Well inside the 300 s the recovery would otherwise wait for the damaged replica.
        wait_for("the partition has a leader again", lambda: leader() >= 0, 60)
        assert leader() != damaged
        assert "tells an unclean recovery that its valid data ends at offset" in b.log_tail(
            damaged, 400
        )

        async def read_all() -> list[bytes]:
            tp = TopicPartition(TOPIC, 0)
            async with AsyncConsumer(
                [b.url(i) for i in b.ids[1:]], auto_offset_reset="earliest"
            ) as c:
                c.assign([tp])
                got: list[bytes] = []
                for _ in range(50):
                    got += [r.value for r in await c.poll(500) if r.value is not None]
                    if len(got) >= RECORDS:
                        break
                return got

        assert asyncio.run(read_all()) == [b"v%d" % i for i in range(RECORDS)]
