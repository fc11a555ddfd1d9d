"""Authentication and authorization on a real socket, with in-memory users and ACLs (the
metadata image feeds the same protocols in a node): Basic against SCRAM credentials, 401,
403, hidden topics, the failed-login throttle, and a forged principal header."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
from aiohttp import web

from api.http.auth import AUTH_STATE_KEY, StaticAcls, StaticCredentials
from api.http.errors import error_middleware
from api.node import listeners
from api.node.config import load_config
from api.node.localcluster import free_ports
from metalog.security import (
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    ScramCredential,
)


def _cred(password: str) -> ScramCredential:
    return ScramCredential.derive("SCRAM-SHA-256", password, b"salt-salt-salt", 4096)


def _allow(principal: str, op: Operation, topic: str) -> AclBinding:
    return AclBinding(
        principal, "*", ResourceType.TOPIC, topic, PatternType.LITERAL, op, Permission.ALLOW
    )


class Node:
    def __init__(self, url: str, creds: StaticCredentials, acls: StaticAcls, app: web.Application):
        self.url, self.creds, self.acls, self.app = url, creds, acls, app


def run(tmp_path: Path, body: Callable[[Node], Awaitable[None]]) -> None:
    async def main() -> None:
        async with serve(tmp_path) as node:
            await body(node)

    asyncio.run(main())


@asynccontextmanager
async def serve(tmp_path: Path) -> AsyncIterator[Node]:
    (port,) = free_ports(1)
    config = load_config(
        None,
        {
            "node_id": 101,
            "data_dir": str(tmp_path),
            "controller_quorum": "1@127.0.0.1:1",
            "listeners": f"CLIENT://127.0.0.1:{port}",
            "listener_security_protocol_map": "CLIENT:SASL_PLAINTEXT",
            "super_users": "User:admin",
            "authorizer_enable": True,
        },
    )
    creds = StaticCredentials({("alice", "SCRAM-SHA-256"): _cred("wonderland")})
    acls = StaticAcls([_allow("User:alice", Operation.DESCRIBE, "orders")])
    app = web.Application(middlewares=[error_middleware])
    listeners.install(app, config, credentials=creds, acls=acls)

    async def ok(request: web.Request) -> web.Response:
        return web.json_response({"ok": request.match_info.get("topic")})

    app.router.add_get("/v3/clusters/{cluster_id}/topics/{topic}", ok)
    app.router.add_post("/topics/{topic}", ok)
    runner, _ = await listeners.start_listeners(app, config)
    try:
        yield Node(f"http://127.0.0.1:{port}", creds, acls, app)
    finally:
        await runner.cleanup()


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


async def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, object]]:
    async with aiohttp.ClientSession() as s, s.get(url, headers=headers or {}) as r:
        return r.status, await r.json()


async def _post(url: str, headers: dict[str, str]) -> tuple[int, dict[str, object]]:
    async with aiohttp.ClientSession() as s, s.post(url, headers=headers, json={}) as r:
        return r.status, await r.json()


async def _basic_login_and_acls(node: Node) -> None:
    t = f"{node.url}/v3/clusters/c/topics"
    assert (await _get(f"{t}/orders", _basic("alice", "wonderland")))[0] == 200
    status, body = await _get(f"{t}/orders")
    assert (status, body["error_code"]) == (401, 40101)
    status, body = await _get(f"{t}/orders", _basic("alice", "wrong"))
    assert (status, body["error_code"]) == (401, 40101)
    # DESCRIBE but not WRITE: 403; no DESCRIBE at all: the answer of a missing topic.
    status, body = await _post(f"{node.url}/topics/orders", _basic("alice", "wonderland"))
    assert (status, body["error_code"]) == (403, 40301), body
    status, body = await _post(f"{node.url}/topics/payroll", _basic("alice", "wonderland"))
    assert (status, body["error_code"]) == (404, 40401), body
    node.acls.bindings.append(_allow("User:alice", Operation.WRITE, "orders"))
    status, _ = await _post(f"{node.url}/topics/orders", _basic("alice", "wonderland"))
    assert status == 200


async def _a_changed_password_takes_effect_at_once(node: Node) -> None:
    url = f"{node.url}/v3/clusters/c/topics/orders"
    assert (await _get(url, _basic("alice", "wonderland")))[0] == 200  # remembered now
    node.creds.users[("alice", "SCRAM-SHA-256")] = _cred("looking-glass")
    assert (await _get(url, _basic("alice", "wonderland")))[0] == 401
    assert (await _get(url, _basic("alice", "looking-glass")))[0] == 200


async def _failed_logins_are_counted_and_slow_the_source(node: Node) -> None:
    state = node.app[AUTH_STATE_KEY]
    url = f"{node.url}/v3/clusters/c/topics/orders"
    for _ in range(state.throttle.free_failures + 1):
        assert (await _get(url, _basic("alice", "guess")))[0] == 401
    assert state.failed_logins["CLIENT"] == state.throttle.free_failures + 1
    assert state.throttle.delay_ms("127.0.0.1", state.clock_ms()) > 0
    # A success from the source forgets its failures.
    assert (await _get(url, _basic("alice", "wonderland")))[0] == 200
    assert state.throttle.delay_ms("127.0.0.1", state.clock_ms()) == 0


async def _a_client_cannot_claim_another_principal(node: Node) -> None:
    headers = {**_basic("alice", "wonderland"), "Longboat-Principal": "User:admin"}
    status, _ = await _post(f"{node.url}/topics/payroll", headers)
    assert status == 404  # still alice, who cannot see payroll


def test_basic_login_and_acls(tmp_path: Path) -> None:
    run(tmp_path, _basic_login_and_acls)


def test_a_changed_password_takes_effect_at_once(tmp_path: Path) -> None:
    run(tmp_path, _a_changed_password_takes_effect_at_once)


def test_failed_logins_are_counted_and_slow_the_source(tmp_path: Path) -> None:
    run(tmp_path, _failed_logins_are_counted_and_slow_the_source)


def test_a_client_cannot_claim_another_principal(tmp_path: Path) -> None:
    run(tmp_path, _a_client_cannot_claim_another_principal)
