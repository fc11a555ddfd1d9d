"""Three RaftNodes as real child processes (scripts/bench/raft_server.py, fsync on): SIGKILL
the leader, a new one commits, the killed node restarts from disk and catches up."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import msgpack
from raft_node_harness import free_ports

ROOT = Path(__file__).resolve().parents[3]
SERVER = ROOT / "scripts" / "bench" / "raft_server.py"
TICK_MS = "20"


def test_sigkilled_leader_is_replaced_and_restarts_from_disk(tmp_path) -> None:
    ports = free_ports(3)
    urls = {i: f"http://127.0.0.1:{p}" for i, p in zip((1, 2, 3), ports, strict=True)}
    procs: dict[int, subprocess.Popen[bytes]] = {}
    env = dict(os.environ, PYTHONPATH=str(ROOT))

    def start(i: int) -> None:
        log = open(tmp_path / f"node-{i}.log", "ab")  # noqa: SIM115
        procs[i] = subprocess.Popen(
            [
                sys.executable,
                "-P",
                str(SERVER),
                str(i),
                ",".join(map(str, ports)),
                str(tmp_path / f"node-{i}"),
                TICK_MS,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
        )
        log.close()

    async def status(s: aiohttp.ClientSession, i: int) -> dict | None:
        try:
            async with s.get(urls[i] + "/status", timeout=aiohttp.ClientTimeout(total=0.5)) as r:
                return await r.json()  # type: ignore[no-any-return]
        except (aiohttp.ClientError, TimeoutError):
            return None

    async def leader(s: aiohttp.ClientSession, alive: list[int]) -> int:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            for i in alive:
                st = await status(s, i)
                if st and st["leader"]:
                    return i
            await asyncio.sleep(0.02)
        raise AssertionError("no leader")

    async def propose(s: aiohttp.ClientSession, i: int, items: list[bytes]) -> int:
        async with s.post(urls[i] + "/propose", data=msgpack.packb(items)) as r:
            assert r.status == 200, await r.text()
            return int((await r.json())["last_index"])

    async def main() -> None:
        async with aiohttp.ClientSession() as s:
            lead = await leader(s, [1, 2, 3])
            await propose(s, lead, [b"a%d" % i for i in range(500)])
            t0 = time.monotonic()
            procs[lead].send_signal(signal.SIGKILL)
            procs[lead].wait()
            alive = [i for i in (1, 2, 3) if i != lead]
            new = await leader(s, alive)
            last = await propose(s, new, [b"after"])
            assert time.monotonic() - t0 < 5
            st_new = await status(s, new)
            assert st_new is not None
            start(lead)
            deadline = time.monotonic() + 20
            while True:
                st = await status(s, lead)
                if st and st["applied"] >= last:
                    break
                assert time.monotonic() < deadline, f"restarted node stuck: {st}"
                await asyncio.sleep(0.05)
            assert st["role"] == "follower" and st["leader_id"] == new
            assert st["term"] == st_new["term"] and st["voters"] == [1, 2, 3]

    for i in (1, 2, 3):
        start(i)
    try:

        async def limited() -> None:
            async with asyncio.timeout(60):
                await main()

        asyncio.run(limited())
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.terminate()
        for p in procs.values():
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
