"""One controller and two brokers on one event loop, real HTTP on 127.0.0.1: the harness of
the in-process replication and transaction tests. ``two_brokers`` starts them, creates topic
``t`` (1 partition, RF 2, min.insync.replicas 2), waits for its leader, and stops everything
on exit."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from api.node.broker_app import build_broker
from api.node.config import NodeConfig
from api.node.controller_app import build_controller
from api.node.localcluster import free_ports
from broker.replica_manager import ReplicaManager
from metalog.client import ControllerClient
from metalog.commands import CreateTopic


async def serve(app: web.Application, port: int) -> web.AppRunner:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


async def wait(what: str, cond: Any, timeout_s: float = 15) -> Any:
    """``cond()``'s first true value, polled every 50 ms."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        await asyncio.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout_s} s")


@dataclass
class TwoBrokers:
    mgrs: dict[int, ReplicaManager]
    urls: dict[int, str]
    leader: int
    """The broker leading ``t``-0."""
    follower: int


@asynccontextmanager
async def two_brokers(tmp_path: Path) -> AsyncIterator[TwoBrokers]:
    cport, p1, p2 = free_ports(3)
    quorum = f"1@127.0.0.1:{cport}"
    ccfg = NodeConfig(
        node_id=1,
        roles=("controller",),
        listen=f"127.0.0.1:{cport}",
        controller_quorum=quorum,
        data_dir=tmp_path / "c1",
    )
    capp, _ = build_controller(ccfg)
    runners = [await serve(capp, cport)]
    mgrs: dict[int, ReplicaManager] = {}
    urls: dict[int, str] = {}
    try:
        for bid, port in ((11, p1), (12, p2)):
            cfg = NodeConfig(
                node_id=bid,
                listen=f"127.0.0.1:{port}",
                controller_quorum=quorum,
                data_dir=tmp_path / f"b{bid}",
            )
            app, srv = build_broker(cfg, heartbeat_interval_s=0.2)
            runners.append(await serve(app, port))
            mgrs[bid] = srv.replicas
            urls[bid] = f"http://127.0.0.1:{port}"
        await wait(
            "both brokers registered",
            lambda: all(
                m.image is not None
                and len(m.image.brokers) == 2
                and not any(b.fenced for b in m.image.brokers.brokers.values())
                for m in mgrs.values()
            ),
        )
        async with ControllerClient([ccfg.url], timeout_s=10) as c:
            await c.execute(
                CreateTopic(
                    name="t",
                    num_partitions=1,
                    replication_factor=2,
                    configs={"min.insync.replicas": "2"},
                )
            )

        def leader() -> int | None:
            for bid, m in mgrs.items():
                rep = m.by_name.get(("t", 0))
                if rep is not None and rep.leader is not None and rep.leader.is_leader:
                    return bid
            return None

        lid = await wait("a leader", leader)
        yield TwoBrokers(mgrs, urls, lid, next(b for b in mgrs if b != lid))
    finally:
        for r in reversed(runners):
            await r.cleanup()
