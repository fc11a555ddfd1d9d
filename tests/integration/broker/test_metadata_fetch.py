"""The observers' metadata fetch against an in-process controller that snapshots often: a
broker that starts after a snapshot loads it, then follows the records after it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiohttp import web

from api.node.config import NodeConfig
from api.node.controller_app import build_controller, image_summary
from api.node.localcluster import free_ports
from broker.metadata_follower import MetadataFollower, MetadataUpdate
from metalog.client import ControllerClient
from metalog.commands import BrokerHeartbeat, CreateTopic, RegisterBroker
from metalog.records import Endpoint
from metalog.service import ControllerService


async def _controller(
    tmp_path: Path, snapshot_records: int
) -> tuple[web.AppRunner, str, ControllerService]:
    port = free_ports(1)[0]
    cfg = NodeConfig(
        node_id=1,
        roles=("controller",),
        listen=f"127.0.0.1:{port}",
        controller_quorum=f"1@127.0.0.1:{port}",
        data_dir=tmp_path / "c1",
    )
    app, svc = build_controller(cfg, snapshot_records=snapshot_records)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, cfg.url, svc


def test_a_follower_starting_after_a_snapshot_loads_it_then_follows_the_log(tmp_path: Path) -> None:
    async def go() -> None:
        runner, url, svc = await _controller(tmp_path, snapshot_records=20)
        try:
            async with ControllerClient([url], timeout_s=20) as c:
                reg = await c.execute(
                    RegisterBroker(
                        broker_id=7, incarnation_id="x", endpoints=(Endpoint("http", "h", 1),)
                    )
                )
                await c.execute(
                    BrokerHeartbeat(
                        broker_id=7, broker_epoch=reg.broker_epoch, current_metadata_offset=10**9
                    )
                )
                for i in range(25):
                    await c.execute(
                        CreateTopic(name=f"t{i}", num_partitions=1, replication_factor=1)
                    )
                for _ in range(100):  # the service snapshots on its next poll
                    if svc._snapshot is not None:
                        break
                    await asyncio.sleep(0.05)
                snap_offset = svc._snapshot[0]
                assert snap_offset >= 19  # 20 records: offsets 0..19

                resp = await c.fetch_metadata(url, 0, max_wait_ms=0, broker_id=7)
                assert resp.snapshot is not None and resp.snapshot_offset == snap_offset
                assert all(b.base_offset + b.count > snap_offset for b in resp.batches)

                # A dead controller first: the follower rotates to the live one.
                f = MetadataFollower(
                    ["http://127.0.0.1:9", url], broker_id=8, max_wait_ms=200, retry_backoff_s=0.05
                )
                updates: list[MetadataUpdate] = []

                async def listen(u: MetadataUpdate) -> None:
                    updates.append(u)

                f.subscribe(listen)
                await f.start()
                try:
                    await f.wait_for_offset(snap_offset, timeout_s=10)
                    await c.execute(
                        CreateTopic(name="after", num_partitions=2, replication_factor=1)
                    )
                    target = svc.metadata_offset
                    await f.wait_for_offset(target, timeout_s=10)
                finally:
                    await f.stop()
                assert f.errors >= 1
                first = updates[0]
                assert first.is_snapshot and first.delta is not None
                assert {f"t{i}" for i in range(25)} <= set(first.delta.created_topics.values())
                later = [
                    u
                    for u in updates[1:]
                    if u.delta is not None and "after" in u.delta.created_topics.values()
                ]
                assert len(later) == 1 and not later[0].is_snapshot
                assert len(later[0].delta.local_changes(7).leaders) == 2
                mine = image_summary(f.image)
                theirs = image_summary(svc.controller.image)
                assert mine["topics"] == theirs["topics"]
                assert mine["brokers"] == theirs["brokers"]
                # Offsets are dense and the same on both sides: epochs agree.
                assert f.image.brokers.brokers[7].broker_epoch == reg.broker_epoch
        finally:
            await runner.cleanup()

    asyncio.run(go())
