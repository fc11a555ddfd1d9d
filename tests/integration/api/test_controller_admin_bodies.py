"""The controller's JSON admin routes (peers, membership) refuse bad bodies with a 400 that
says why, change nothing, and the node serves on (issue 17); a damaged peers file refuses the
start with its name."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from api.node.config import ConfigError, load_config
from api.node.controller_app import PEERS_FILE, build_controller, load_peers
from api.node.localcluster import free_ports

BAD = [
    ("/internal/controller/v1/peers", b"not json", "not JSON"),
    ("/internal/controller/v1/peers", b"[1, 2]", "JSON object"),
    ("/internal/controller/v1/peers", b'{"node_id": "7", "url": "http://h:1"}', "node_id"),
    ("/internal/controller/v1/peers", b'{"node_id": true, "url": "http://h:1"}', "node_id"),
    ("/internal/controller/v1/peers", b'{"node_id": 7, "url": "file:///etc/passwd"}', "url"),
    ("/internal/controller/v1/peers", b'{"node_id": 7, "url": "http://h"}', "url"),
    ("/internal/controller/v1/peers", b'{"node_id": 7, "url": "http://h:99999"}', "url"),
    ("/internal/controller/v1/membership", b'{"op": "add-voter", "node_id": 0}', "node_id"),
    ("/internal/controller/v1/membership", b'{"op": "grow", "node_id": 2}', "op"),
    (
        "/internal/controller/v1/membership",
        b'{"op": "add-voter", "node_id": 2, "url": "http://h:1", "timeout_s": 1e308}',
        "timeout_s",
    ),
    ("/internal/controller/v1/membership", b'"add-voter"', "JSON object"),
]


async def _post_all(tmp: Path, port: int) -> tuple[list[tuple[int, dict[str, Any]]], Any, Any]:
    cfg = load_config(
        None,
        {
            "node_id": 1,
            "roles": ["controller"],
            "listen": f"127.0.0.1:{port}",
            "data_dir": str(tmp),
            "controller_quorum": f"1@127.0.0.1:{port}",
        },
    )
    app, svc = build_controller(cfg)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as s:
            out = []
            for path, body, _ in BAD:
                async with s.post(
                    base + path, data=body, headers={"Content-Type": "application/json"}
                ) as r:
                    out.append((r.status, await r.json()))
            async with s.get(base + "/v3/health") as r:
                health = r.status
        return out, health, dict(svc.node.addresses)
    finally:
        await runner.cleanup()


def test_bad_admin_bodies_get_400s_naming_the_problem_and_change_nothing(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    answers, health, addresses = asyncio.run(_post_all(tmp_path, port))
    for (path, body, word), (status, err) in zip(BAD, answers, strict=True):
        assert status == 400, (path, body, status, err)
        assert word in err["message"], (path, body, err)
    assert health == 200
    assert set(addresses) == {1}  # no peer was learned
    assert not (tmp_path / PEERS_FILE).exists()


def test_a_damaged_peers_file_refuses_the_start_with_its_name(tmp_path: Path) -> None:
    (tmp_path / PEERS_FILE).write_bytes(orjson.dumps({"2": "http://h:1", "x": 3}))
    with pytest.raises(ConfigError, match=PEERS_FILE):
        load_peers(tmp_path)
    (tmp_path / PEERS_FILE).write_bytes(orjson.dumps({"2": "http://127.0.0.1:9302/"}))
    assert load_peers(tmp_path) == {2: "http://127.0.0.1:9302"}
