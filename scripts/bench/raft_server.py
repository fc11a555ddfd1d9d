#!/usr/bin/env python3
"""One Longboat Raft node for scripts/bench/raft_node.py: a per-process server, not a benchmark.

Runs a ``raft.aio.RaftNode`` (fsync on) with a trivial state machine (a count and a byte
total of applied entries) on its own aiohttp server, which carries both the internal Raft
route and the client endpoints shared with ``pysyncobj_server.py``:

* ``POST /propose``: body msgpack list of byte strings; each becomes one Raft entry; answers
  200 ``{"n": k, "last_index": i}`` once all are committed, or 421 ``{"leader": url}``
  when this node is not the leader.
* ``GET /status``: JSON of ``RaftNode.status()`` plus ``"leader": bool``.

Usage: python raft_server.py ID HTTP_PORTS DATA_DIR [TICK_MS]
(HTTP_PORTS comma-separated; node i listens on the i-th)
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import sys

import msgpack
import uvloop
from aiohttp import web

from raft.aio.node import NotLeaderError, RaftNode, RaftNodeConfig
from raft.types import Entry, Snapshot

SNAPSHOT_EVERY_ENTRIES = 50_000
"""Snapshot (and compact the log) this often, as KRaft does every 20 MiB of records: it
bounds the in-memory mirror of the log and restart time."""


class Counter:
    def __init__(self) -> None:
        self.count = 0
        self.bytes = 0
        self.node: RaftNode | None = None
        self.snapshot_index = 0
        self.snapshotting = False

    def apply(self, entries: list[Entry]) -> None:
        for e in entries:
            self.count += 1
            self.bytes += len(e.data)
        last = entries[-1].index
        if last - self.snapshot_index >= SNAPSHOT_EVERY_ENTRIES and not self.snapshotting:
            # Not awaited here: take_snapshot needs the node task, which is calling us.
            self.snapshotting = True
            data = msgpack.packb([self.count, self.bytes])
            asyncio.get_running_loop().create_task(self._snapshot(data, last))

    async def _snapshot(self, data: bytes, index: int) -> None:
        assert self.node is not None
        try:
            await self.node.take_snapshot(data, index)
            self.snapshot_index = index
        finally:
            self.snapshotting = False

    def restore(self, snap: Snapshot) -> None:
        self.count, self.bytes = msgpack.unpackb(snap.data)
        self.snapshot_index = snap.index


async def serve(node_id: int, http_ports: list[int], data_dir: str, tick_ms: int) -> None:
    urls = {i + 1: f"http://127.0.0.1:{p}" for i, p in enumerate(http_ports)}
    sm = Counter()
    app = web.Application(client_max_size=64 * 1024 * 1024)
    node = RaftNode(
        RaftNodeConfig(
            node_id=node_id, voters=urls, data_dir=data_dir, tick_ms=tick_ms, fsync=True
        ),
        on_commit=sm.apply,
        on_snapshot=sm.restore,
    )
    sm.node = node
    node.add_routes(app)

    async def propose(request: web.Request) -> web.Response:
        items = msgpack.unpackb(await request.read())
        try:
            indexes = await node.propose_many(items)
        except NotLeaderError as e:
            return web.json_response({"leader": e.leader_url}, status=421)
        return web.json_response({"n": len(items), "last_index": indexes[-1] if indexes else 0})

    async def status(_request: web.Request) -> web.Response:
        st = node.status()
        return web.json_response(
            dict(
                st.to_json(),
                leader=st.role == "leader",
                applied_count=sm.count,
                task=repr(node._task),
                transport=node.transport.stats(),
            )
        )

    app.router.add_post("/propose", propose)
    app.router.add_get("/status", status)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", http_ports[node_id - 1]).start()
    await node.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await node.stop()
    await runner.cleanup()


def main() -> None:
    node_id = int(sys.argv[1])
    http_ports = [int(p) for p in sys.argv[2].split(",")]
    tick_ms = int(sys.argv[4]) if len(sys.argv) > 4 else 50
    # Fewer, cheaper collections: the node keeps many small long-lived objects (the log
    # mirror); the default thresholds spend much of a busy leader's time in the GC.
    gc.set_threshold(100_000, 50, 100)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    profile_to = os.environ.get("LONGBOAT_RAFT_PROFILE")  # a directory: cProfile per node
    if profile_to:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
        try:
            uvloop.run(serve(node_id, http_ports, sys.argv[3], tick_ms))
        finally:
            prof.disable()
            prof.dump_stats(os.path.join(profile_to, f"node-{node_id}.prof"))
        return
    uvloop.run(serve(node_id, http_ports, sys.argv[3], tick_ms))


if __name__ == "__main__":
    main()
