"""An in-process cluster of RaftNodes on 127.0.0.1 ports, each with its own aiohttp server
and data directory: what the integration tests drive."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web

from api.node.localcluster import free_ports
from raft.aio.node import RaftNode, RaftNodeConfig
from raft.types import Entry, EntryKind, Role
from storage.fileio import FileLayer

TICK_MS = 20


class Cluster:
    def __init__(
        self,
        root: Path,
        voters: list[int],
        observers: list[int] = (),  # type: ignore[assignment]
        extra: list[int] = (),  # type: ignore[assignment]
        **node_kw: object,
    ) -> None:
        ids = [*voters, *observers, *extra]
        self.root = root
        self.urls = {
            i: f"http://127.0.0.1:{p}" for i, p in zip(ids, free_ports(len(ids)), strict=True)
        }
        self.voters = voters
        self.observers = list(observers)
        self.extra = list(extra)
        self.node_kw = node_kw
        self.nodes: dict[int, RaftNode] = {}
        self.runners: dict[int, web.AppRunner] = {}
        self.applied: dict[int, list[Entry]] = {i: [] for i in ids}

    def config(self, i: int, **kw: object) -> RaftNodeConfig:
        args: dict[str, object] = dict(
            node_id=i,
            data_dir=str(self.root / f"node-{i}"),
            voters={v: self.urls[v] for v in self.voters},
            observers={o: self.urls[o] for o in self.observers},
            peers={e: self.urls[e] for e in self.extra},
            tick_ms=TICK_MS,
            seed=i,
        )
        args.update(self.node_kw)
        args.update(kw)
        return RaftNodeConfig(**args)  # type: ignore[arg-type]

    async def start(
        self,
        i: int,
        file_layer: FileLayer | None = None,
        on_commit: Callable[[list[Entry]], Awaitable[None] | None] | None = None,
        **kw: object,
    ) -> RaftNode:
        """``on_commit``: called before the entries are recorded in ``applied``."""
        self.applied[i] = []  # a restarted node replays from its snapshot (none here) on
        record = self.applied[i].extend
        if on_commit is not None:
            hook = on_commit

            async def record_after(entries: list[Entry]) -> None:
                maybe = hook(entries)
                if maybe is not None:
                    await maybe
                record(entries)

        node = RaftNode(
            self.config(i, **kw),
            on_commit=record if on_commit is None else record_after,
            file_layer=file_layer,
        )
        app = web.Application()
        node.add_routes(app)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        port = int(self.urls[i].rsplit(":", 1)[1])
        await web.TCPSite(runner, "127.0.0.1", port).start()
        await node.start()
        self.nodes[i] = node
        self.runners[i] = runner
        return node

    async def start_all(self) -> None:
        for i in [*self.voters, *self.observers]:
            await self.start(i)

    async def stop(self, i: int) -> None:
        node = self.nodes.pop(i)
        runner = self.runners.pop(i)
        await runner.cleanup()
        await node.stop()

    async def crash_all(self) -> None:
        """Every node stops at once, as in a power cut: no flush, no clean shutdown.

        All node tasks are cancelled before any of them runs again, so no Ready is
        half-handled after the "cut" except a persist already running in its worker thread
        (whose writes are then lost or kept by the file layer's ``crash``, as a disk would).
        """
        nodes, runners = dict(self.nodes), dict(self.runners)
        self.nodes.clear()
        self.runners.clear()
        for node in nodes.values():
            node._stopping = True
            if node._task is not None:
                node._task.cancel()
        for i, node in nodes.items():
            await runners[i].cleanup()
            await node.transport.close()
        await asyncio.sleep(0.1)  # let a persist in a worker thread finish its writes
        for node in nodes.values():
            if node.durable.plog is not None:
                node.durable.plog.abandon()

    async def stop_all(self) -> None:
        for i in list(self.nodes):
            await self.stop(i)

    async def leader(self, timeout_s: float = 10.0, exclude: int | None = None) -> RaftNode:
        """The one node that is leader (of the highest term), once every running node agrees."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            leaders = [n for i, n in self.nodes.items() if n.role is Role.LEADER and i != exclude]
            if len(leaders) == 1:
                lead = leaders[0]
                if all(n.leader_id == lead.id for n in self.nodes.values()):
                    return lead
            await asyncio.sleep(0.01)
        raise AssertionError(
            f"no single leader within {timeout_s} s: "
            f"{[(i, n.role, n.leader_id) for i, n in self.nodes.items()]}"
        )

    async def wait_for(
        self, cond: Callable[[], bool], timeout_s: float = 10.0, what: str = "condition"
    ) -> None:
        deadline = time.monotonic() + timeout_s
        while not cond():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            await asyncio.sleep(0.01)

    def data(self, i: int) -> list[bytes]:
        """Applied NORMAL entries with data (the leaders' no-ops left out)."""
        return [e.data for e in self.applied[i] if e.kind is EntryKind.NORMAL and e.data]
