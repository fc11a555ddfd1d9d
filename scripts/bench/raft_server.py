#!/usr/bin/env python3
"""One Longboat Raft node for scripts/bench/raft.py: a per-process server, not a benchmark.

Runs a ``raft.aio.RaftNode`` (fsync on) with a trivial state machine (a count and a byte
total of applied entries) on its own aiohttp server, which carries both the internal Raft
route and the client endpoints shared with ``pysyncobj_server.py``:

* ``POST /propose``: body msgpack list of byte strings; each becomes one Raft entry; answers
  200 ``{"n": k, "last_index": i}`` once all are committed, or 421 ``{"leader": url}``
  when this node is not the leader.
* ``GET /status``: JSON of ``RaftNode.status()`` plus ``"leader": bool``.

Usage: python -P raft_server.py ID HTTP_PORTS DATA_DIR [TICK_MS]
(``-P``: without it scripts/bench/raft.py, the benchmark, shadows the ``raft`` package.)   (HTTP_PORTS comma-separated; node
i listens on the i-th)
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

import msgpack
import uvloop
from aiohttp import web

from raft.aio.node import NotLeaderError, RaftNode, RaftNodeConfig
from raft.types import Entry


class Counter:
    def __init__(self) -> None:
        self.count = 0
        self.bytes = 0

    def apply(self, entries: list[Entry]) -> None:
        for e in entries:
            self.count += 1
            self.bytes += len(e.data)


async def serve(node_id: int, http_ports: list[int], data_dir: str, tick_ms: int) -> None:
    urls = {i + 1: f"http://127.0.0.1:{p}" for i, p in enumerate(http_ports)}
    sm = Counter()
    app = web.Application(client_max_size=64 * 1024 * 1024)
    node = RaftNode(
        RaftNodeConfig(node_id=node_id, voters=urls, data_dir=data_dir, tick_ms=tick_ms,
                       fsync=True),
        on_commit=sm.apply,
    )
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
        return web.json_response(dict(st.to_json(), leader=st.role == "leader",
                                      applied_count=sm.count,
                                      task=repr(node._task), transport=node.transport.stats()))

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
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    uvloop.run(serve(node_id, http_ports, sys.argv[3], tick_ms))


if __name__ == "__main__":
    main()
