"""A toy partitioned-log server, to exercise the harness before Longboat's brokers exist.

Each node process leads a fixed set of keys (partitions) and keeps one file per key, a line
per record. Newline-delimited JSON over TCP:

    {"op": "send", "key": k, "value": v}     -> {"ok": true, "offset": o, "node": name}
    {"op": "poll", "key": k, "offset": o, "max": n}
                                              -> {"ok": true, "records": [[o, v], ...]}
    {"op": "ping"}                            -> {"ok": true, "node": name, "keys": [...]}
    a key this node does not lead             -> {"ok": false, "error": "not_leader"}

The node started with ``--controller`` also keeps topic metadata, as an event log replayed at
start (the metadata workload):

    {"op": "create_topic", "topic": t, "definition": d}  -> {"ok": true, "created": bool}
    {"op": "delete_topic", "topic": t}                   -> {"ok": true, "deleted": bool}
    {"op": "describe_topic", "topic": t}  -> {"ok": true, "definition": d + topic_id | null}

Topic ids are ``<node>-<event number>``: a controller that lost events hands an id out again.

Modes (``--mode``):

* ``correct``          append, fsync, then acknowledge.
* ``ack-before-sync``  append and acknowledge at once; fsync every ``--sync-interval-ms``.
  The planted bug: an acknowledged record is not durable until the next fsync.

``LONGBOAT_LAZYFS=1`` in the environment emulates storage's `LazyFileLayer`: bytes not yet
fsynced are kept in process memory, so a SIGKILL loses them (without it, the page cache keeps
them and a kill loses nothing). Recovery drops a torn last line.

Not a server package: it stands in for a cluster in tests and imports nothing from Longboat.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path
from typing import Any


class KeyLog:
    def __init__(self, path: Path, lazy: bool) -> None:
        self.path = path
        self.lazy = lazy
        self.records: list[Any] = []
        self.pending = bytearray()  # lazy mode: written but not fsynced, in memory only
        if path.exists():
            data = path.read_bytes()
            if data and not data.endswith(b"\n"):
                data = data[: data.rfind(b"\n") + 1]  # torn tail
                path.write_bytes(data)
            self.records = [json.loads(line) for line in data.splitlines() if line]
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.dirty = False

    def append(self, value: Any) -> int:
        line = (json.dumps(value) + "\n").encode()
        if self.lazy:
            self.pending += line
        else:
            os.write(self.fd, line)
        self.records.append(value)
        self.dirty = True
        return len(self.records) - 1

    def fsync(self) -> None:
        if self.pending:
            os.write(self.fd, bytes(self.pending))
            self.pending.clear()
        if self.dirty:
            os.fsync(self.fd)
            self.dirty = False


class Node:
    def __init__(
        self,
        name: str,
        data_dir: Path,
        keys: list[str],
        mode: str,
        sync_interval_s: float,
        controller: bool = False,
    ) -> None:
        self.name = name
        self.mode = mode
        self.sync_interval_s = sync_interval_s
        lazy = os.environ.get("LONGBOAT_LAZYFS") == "1"
        data_dir.mkdir(parents=True, exist_ok=True)
        self.logs = {k: KeyLog(data_dir / f"{k}.log", lazy) for k in keys}
        self.meta: KeyLog | None = None
        self.topics: dict[str, dict[str, Any]] = {}
        if controller:
            self.meta = KeyLog(data_dir / "__topics.log", lazy)
            for i, ev in enumerate(self.meta.records):
                self._replay(i, ev)

    def _replay(self, i: int, ev: dict[str, Any]) -> None:
        if ev["op"] == "create":
            self.topics[ev["topic"]] = {**ev["definition"], "topic_id": f"{self.name}-{i}"}
        else:
            self.topics.pop(ev["topic"], None)

    def handle_meta(self, op: str, req: dict[str, Any]) -> dict[str, Any]:
        if self.meta is None:
            return {"ok": False, "error": "not_controller"}
        topic = str(req.get("topic"))
        if op == "describe_topic":
            return {"ok": True, "definition": self.topics.get(topic)}
        if op == "create_topic":
            if topic in self.topics:
                return {"ok": True, "created": False}
            ev = {"op": "create", "topic": topic, "definition": req.get("definition") or {}}
        elif op == "delete_topic":
            if topic not in self.topics:
                return {"ok": True, "deleted": False}
            ev = {"op": "delete", "topic": topic}
        else:
            return {"ok": False, "error": f"unknown op {op!r}"}
        i = self.meta.append(ev)
        if self.mode == "correct":
            self.meta.fsync()
        self._replay(i, ev)
        return {"ok": True, "created" if op == "create_topic" else "deleted": True}

    async def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req.get("op")
        if op == "ping":
            return {"ok": True, "node": self.name, "keys": sorted(self.logs)}
        if op in ("create_topic", "delete_topic", "describe_topic"):
            return self.handle_meta(op, req)
        log = self.logs.get(str(req.get("key")))
        if log is None:
            return {"ok": False, "error": "not_leader"}
        if op == "send":
            off = log.append(req["value"])
            if self.mode == "correct":
                log.fsync()
            return {"ok": True, "offset": off, "node": self.name}
        if op == "poll":
            start = int(req.get("offset", 0))
            n = int(req.get("max", 100))
            recs = [[o, log.records[o]] for o in range(start, min(len(log.records), start + n))]
            return {"ok": True, "records": recs}
        return {"ok": False, "error": f"unknown op {op!r}"}

    async def serve_conn(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while True:
                line = await r.readline()
                if not line:
                    break
                resp = await self.handle(json.loads(line))
                w.write((json.dumps(resp) + "\n").encode())
                await w.drain()
        except (ConnectionError, json.JSONDecodeError):
            pass
        finally:
            w.close()

    async def syncer(self) -> None:
        while True:
            await asyncio.sleep(self.sync_interval_s)
            for log in [*self.logs.values(), *([self.meta] if self.meta else [])]:
                log.fsync()


async def main_async(args: argparse.Namespace) -> None:
    node = Node(
        args.name,
        Path(args.data_dir),
        args.keys.split(",") if args.keys else [],
        args.mode,
        args.sync_interval_ms / 1000,
        args.controller,
    )
    server = await asyncio.start_server(node.serve_conn, args.host, args.port)
    sync_task = asyncio.ensure_future(node.syncer())
    print(
        f"toy node {args.name} ({args.mode}) on {args.host}:{args.port}, "
        f"keys {sorted(node.logs)}, lazyfs={os.environ.get('LONGBOAT_LAZYFS') == '1'}",
        flush=True,
    )
    try:
        async with server:
            await server.serve_forever()
    finally:
        sync_task.cancel()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--name", required=True)
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--data-dir", required=True)
    p.add_argument("--keys", default="")
    p.add_argument("--mode", choices=["correct", "ack-before-sync"], default="correct")
    p.add_argument("--sync-interval-ms", type=float, default=1000)
    p.add_argument("--controller", action="store_true", help="also keep topic metadata")
    args = p.parse_args()
    try:
        asyncio.run(main_async(args))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
