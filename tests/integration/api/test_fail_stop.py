"""Fail-stop (issue 17): a controller whose Raft node loop dies stops serving as healthy and
exits non-zero, naming the task and the reason; restarted on the same log it does so again,
loudly, instead of answering 200 with a dead quorum behind it.

The fault is a committed metadata entry that cannot be applied (an unknown record type),
proposed straight to the Raft node, below the command route's validation: what a bug in a
record codec would commit.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import msgpack
from aiohttp import web

from api.node.config import load_config
from api.node.controller_app import ESSENTIALS_KEY, SERVICE_KEY, build_controller
from api.node.localcluster import free_ports
from api.node.signals import stop_signal_or_failure

POISON = msgpack.packb([msgpack.packb([0xBAD, 0])])  # an entry of one record of no known type


async def _get(session: aiohttp.ClientSession, url: str) -> tuple[int, Any]:
    async with session.get(url) as r:
        return r.status, await r.json()


async def _poison_a_running_controller(data_dir: Path, port: int) -> dict[str, Any]:
    cfg = load_config(
        None,
        {
            "node_id": 1,
            "roles": ["controller"],
            "listen": f"127.0.0.1:{port}",
            "data_dir": str(data_dir),
            "controller_quorum": f"1@127.0.0.1:{port}",
        },
    )
    app, _ = build_controller(cfg)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    seen: dict[str, Any] = {}
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as s:
            async with asyncio.timeout(20):
                while (await _get(s, base + "/v3/health/ready"))[0] != 200:
                    await asyncio.sleep(0.1)
            seen["health_before"] = await _get(s, base + "/v3/health")
            waiter = asyncio.ensure_future(stop_signal_or_failure(app[ESSENTIALS_KEY]))
            proposal = asyncio.ensure_future(app[SERVICE_KEY].node.propose(POISON))
            async with asyncio.timeout(10):
                seen["failure"] = await waiter
            seen["health_after"] = await _get(s, base + "/v3/health")
            seen["ready_after"] = await _get(s, base + "/v3/health/ready")
    finally:
        await runner.cleanup()
    # Never answered with an index: the node failed the waiter when it stopped.
    (outcome,) = await asyncio.gather(proposal, return_exceptions=True)
    seen["proposal"] = type(outcome).__name__
    return seen


def test_a_controller_whose_raft_loop_dies_turns_unhealthy_and_its_process_exits_70(
    tmp_path: Path,
) -> None:
    (port,) = free_ports(1)
    seen = asyncio.run(_poison_a_running_controller(tmp_path, port))
    assert seen["health_before"] == (200, {"status": "ok"})
    assert seen["proposal"] == "NodeStoppedError", seen
    assert seen["failure"].startswith("raft node loop: MetadataApplyError: committed Raft entry"), (
        seen
    )
    assert "does not decode: UnknownRecordTypeError" in seen["failure"], seen
    status, body = seen["health_after"]
    assert status == 503 and body["status"] == "failed", seen
    assert body["failure"] == seen["failure"]
    status, body = seen["ready_after"]
    assert status == 503 and body["reasons"][0] == f"failed: {seen['failure']}", seen

    # The entry is committed: a real process started on this log applies it again at once,
    # and exits with status 70 saying which task died and why (it never serves as healthy).
    (port,) = free_ports(1)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "api",
            "controller",
            "start",
            "--node-id",
            "1",
            "--listen",
            f"127.0.0.1:{port}",
            "--data-dir",
            str(tmp_path),
            "--controller-quorum",
            f"1@127.0.0.1:{port}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 70, proc.stderr[-3000:]
    assert (
        "essential task raft node loop died: MetadataApplyError: committed Raft entry"
        in proc.stderr
    )
    assert "does not decode: UnknownRecordTypeError" in proc.stderr
    assert "longboat: node failed: controller 1: raft node loop" in proc.stderr
