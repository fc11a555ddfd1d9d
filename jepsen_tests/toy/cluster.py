"""`ToyCluster`: N toy log servers as real processes, and their client.

Key ``k<i>`` is led by node ``i % N`` for the whole run (no failover: a dead leader makes its
keys unavailable, which is what a kill should look like for a toy). ``mode`` selects the
server's behaviour (`jepsen_tests.toy.server`): ``correct`` or the planted ``ack-before-sync``.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from pathlib import Path
from typing import Any

from jepsen_tests.cluster import (
    Cluster,
    DefiniteError,
    Dial,
    EnvFor,
    IndefiniteError,
    MetadataClient,
    NodeSpec,
    QueueClient,
    Wrap,
)
from jepsen_tests.nemesis.net import node_address
from jepsen_tests.nemesis.process import NodeProcess


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class ToyCluster(Cluster):
    def __init__(
        self,
        n_nodes: int = 3,
        n_keys: int = 6,
        mode: str = "correct",
        sync_interval_ms: float = 1000,
        base_port: int = 19100,
    ) -> None:
        self.mode = mode
        self.sync_interval_ms = sync_interval_ms
        self.keys = [f"k{i}" for i in range(n_keys)]
        names = [f"n{i + 1}" for i in range(n_nodes)]
        self.owner = {k: names[i % n_nodes] for i, k in enumerate(self.keys)}
        # Fixed ports: each node has its own address, so one port number serves all.
        self.nodes = [
            NodeSpec(n, node_address(i + 1), base_port, Path(), ("broker",))
            for i, n in enumerate(names)
        ]
        self.processes = {}
        self.controller = names[0]
        self._wrap: Wrap = lambda argv: argv

    def setup(self, run_dir: Path, env_for: EnvFor, wrap: Wrap) -> None:
        self._wrap = wrap
        self.nodes = [
            NodeSpec(n.name, n.host, n.port, run_dir / "data" / n.name, n.roles) for n in self.nodes
        ]
        for n in self.nodes:
            keys = ",".join(k for k, o in self.owner.items() if o == n.name)
            argv = [
                sys.executable,
                "-m",
                "jepsen_tests.toy.server",
                "--name",
                n.name,
                "--host",
                n.host,
                "--port",
                str(n.port),
                "--data-dir",
                str(n.data_dir),
                "--keys",
                keys,
                "--mode",
                self.mode,
                "--sync-interval-ms",
                str(self.sync_interval_ms),
            ]
            if n.name == self.controller:
                argv.append("--controller")
            self.processes[n.name] = NodeProcess(
                n.name, wrap(argv), run_dir / "logs" / f"{n.name}.log", env_for(n.name)
            )

    def ready(self) -> bool:
        probe = self._wrap(
            [sys.executable, "-c", _PING, json.dumps([[n.host, n.port] for n in self.nodes])]
        )
        import subprocess  # local: only readiness probing shells out

        r = subprocess.run(probe, capture_output=True, timeout=10)
        return r.returncode == 0

    def leaders(self) -> dict[str, str]:
        return dict(self.owner)

    def active_controller(self) -> str | None:
        return self.controller

    def client(self, name: str, host: str, dial: Dial) -> QueueClient:
        return self._client(name, host, dial)

    def metadata_client(self, name: str, host: str, dial: Dial) -> MetadataClient:
        return self._client(name, host, dial)

    def _client(self, name: str, host: str, dial: Dial) -> ToyClient:
        return ToyClient(
            name,
            host,
            {n.name: dial(name, n.name) for n in self.nodes},
            dict(self.owner),
            controller=self.controller,
        )


# Run inside the namespace: exit 0 iff every node answers a ping.
_PING = """
import json, socket, sys
for host, port in json.loads(sys.argv[1]):
    try:
        with socket.create_connection((host, port), timeout=0.5) as s:
            s.sendall(b'{"op": "ping"}\\n')
            if not s.makefile().readline():
                sys.exit(1)
    except OSError:
        sys.exit(1)
"""


class ToyClient:
    """One connection per node, opened lazily; any error drops it."""

    def __init__(
        self,
        name: str,
        host: str,
        addresses: dict[str, tuple[str, int]],
        owner: dict[str, str],
        timeout_s: float = 1.0,
        controller: str | None = None,
    ) -> None:
        self.controller = controller
        self.name = name
        self.host = host
        self.addresses = addresses
        self.owner = owner
        self.timeout_s = timeout_s
        self.conns: dict[str, tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}

    async def _conn(self, node: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        c = self.conns.get(node)
        if c is not None:
            return c
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation
            # (a Ctrl-C'd run's workers would go on to the time limit)
            async with asyncio.timeout(self.timeout_s):
                c = await asyncio.open_connection(*self.addresses[node], local_addr=(self.host, 0))
        except (OSError, TimeoutError) as e:
            # nothing was sent: the op certainly did not happen
            raise DefiniteError(f"connect {node}: {e!r}") from e
        self.conns[node] = c
        return c

    def _drop(self, node: str) -> None:
        c = self.conns.pop(node, None)
        if c is not None:
            c[1].transport.abort()

    async def _call(self, key: str, req: dict[str, Any]) -> dict[str, Any]:
        return await self._call_node(self.owner[key], req)

    async def _call_node(self, node: str, req: dict[str, Any]) -> dict[str, Any]:
        r, w = await self._conn(node)
        try:
            w.write((json.dumps(req) + "\n").encode())
            async with asyncio.timeout(self.timeout_s):
                line = await r.readline()
            if not line:
                raise ConnectionResetError("closed")
            resp: dict[str, Any] = json.loads(line)
        except (OSError, TimeoutError, json.JSONDecodeError) as e:
            self._drop(node)
            raise IndefiniteError(f"{req['op']} to {node}: {e!r}") from e
        if not resp.get("ok"):
            raise DefiniteError(str(resp.get("error")))
        return resp

    async def send(self, key: str, value: int) -> tuple[int, str | None]:
        resp = await self._call(key, {"op": "send", "key": key, "value": value})
        return int(resp["offset"]), resp.get("node")

    async def poll(self, key: str, offset: int, max_records: int) -> list[tuple[int, Any]]:
        resp = await self._call(
            key, {"op": "poll", "key": key, "offset": offset, "max": max_records}
        )
        return [(int(o), v) for o, v in resp["records"]]

    async def _meta(self, req: dict[str, Any]) -> dict[str, Any]:
        if self.controller is None:
            raise DefiniteError("no controller")
        return await self._call_node(self.controller, req)

    async def create_topic(self, topic: str, definition: dict[str, Any]) -> bool:
        resp = await self._meta({"op": "create_topic", "topic": topic, "definition": definition})
        return bool(resp["created"])

    async def delete_topic(self, topic: str) -> bool:
        return bool((await self._meta({"op": "delete_topic", "topic": topic}))["deleted"])

    async def describe_topic(self, topic: str) -> dict[str, Any] | None:
        d = (await self._meta({"op": "describe_topic", "topic": topic}))["definition"]
        return dict(d) if d is not None else None

    async def close(self) -> None:
        for node in list(self.conns):
            self._drop(node)
