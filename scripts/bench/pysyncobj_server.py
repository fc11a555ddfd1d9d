#!/usr/bin/env python3
"""One PySyncObj node for scripts/bench/raft_node.py: the baseline the Longboat raft node is
compared with. A per-process server, not a benchmark.

A replicated counter (count and bytes of every proposal) in a ``SyncObj`` with PySyncObj's
default configuration; its journal stays in memory (``journalFile`` unset; with a file it
is mmap-ed and never fsynced either), so nothing here is durable. Beside it, an aiohttp
server exposing the same client endpoints as ``raft_server.py``:

* ``POST /propose``: body msgpack list of byte strings; each becomes one replicated call
  (one Raft entry); answers 200 ``{"n": k}`` once all are committed and applied, or 421
  ``{"leader": url}`` when this node is not the leader.
* ``GET /status``: JSON ``{"id", "leader": bool, "leader_url", "term", "commit"}``.

Usage: pysyncobj_server.py ID RAFT_PORTS HTTP_PORTS   (comma-separated, same order)
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import msgpack
from aiohttp import web
from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated


class Counter(SyncObj):  # type: ignore[misc]
    def __init__(self, self_addr: str, partners: list[str], conf: SyncObjConf) -> None:
        super().__init__(self_addr, partners, conf)
        self.count = 0
        self.bytes = 0

    @replicated  # type: ignore[misc]
    def add(self, data: bytes) -> int:
        self.count += 1
        self.bytes += len(data)
        return self.count


def main() -> None:
    node_id = int(sys.argv[1])
    raft_ports = [int(p) for p in sys.argv[2].split(",")]
    http_ports = [int(p) for p in sys.argv[3].split(",")]
    addrs = [f"127.0.0.1:{p}" for p in raft_ports]
    me = addrs[node_id - 1]
    http_by_addr = {a: f"http://127.0.0.1:{h}" for a, h in zip(addrs, http_ports, strict=True)}
    obj = Counter(me, [a for a in addrs if a != me], SyncObjConf())

    async def propose(request: web.Request) -> web.Response:
        if not obj._isLeader():
            leader = obj._getLeader()
            url = http_by_addr.get(str(leader)) if leader is not None else None
            return web.json_response({"leader": url}, status=421)
        items = msgpack.unpackb(await request.read())
        loop = asyncio.get_running_loop()
        futs: list[asyncio.Future[Any]] = []

        def done(fut: asyncio.Future[Any], err: Any) -> None:
            if not fut.done():
                if err == FAIL_REASON.SUCCESS:
                    fut.set_result(None)
                else:
                    fut.set_exception(RuntimeError(f"pysyncobj failure {err}"))

        for item in items:
            fut = loop.create_future()
            futs.append(fut)
            obj.add(
                item,
                callback=lambda _res, err, f=fut: loop.call_soon_threadsafe(done, f, err),
            )
        try:
            await asyncio.gather(*futs)
        except RuntimeError as e:
            return web.json_response({"error": str(e)}, status=503)
        return web.json_response({"n": len(items)})

    async def status(_request: web.Request) -> web.Response:
        st = obj.getStatus()
        leader = st.get("leader")
        return web.json_response(
            {
                "id": node_id,
                "leader": obj._isLeader(),
                "leader_url": http_by_addr.get(str(leader)) if leader is not None else None,
                "term": st.get("raft_term"),
                "commit": st.get("commit_idx"),
            }
        )

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/propose", propose)
    app.router.add_get("/status", status)
    web.run_app(app, host="127.0.0.1", port=http_ports[node_id - 1], print=None, access_log=None)


if __name__ == "__main__":
    main()
