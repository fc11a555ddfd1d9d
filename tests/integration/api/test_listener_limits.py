"""The node listener's bounds (issue 17): connections per listener, header and body sizes.

Real sockets on 127.0.0.1 against ``api.node.listener.start_listener`` with the nodes'
``error_middleware``, as both node processes serve.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time

from aiohttp import web

from api.http.errors import error_middleware
from api.node.listener import ListenerLimits, start_listener


async def _hello(request: web.Request) -> web.Response:
    await request.read()
    return web.json_response({"ok": True})


def _app(body_max: int = 1 << 20) -> web.Application:
    app = web.Application(middlewares=[error_middleware], client_max_size=body_max)
    app.router.add_route("*", "/hello", _hello)
    return app


def _request(port: int, raw: bytes, timeout_s: float = 5.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.sendall(raw)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
            if b"\r\n\r\n" in out and out.split(b"\r\n\r\n", 1)[1].endswith(b"}"):
                break
        return out


def _status_and_json(resp: bytes) -> tuple[int, dict[str, object]]:
    head, _, body = resp.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


async def _run_connection_cap() -> tuple[bytes, bytes, int, int]:
    runner, site = await start_listener(_app(), "127.0.0.1", 0, ListenerLimits(connections_max=2))
    try:
        loop = asyncio.get_running_loop()
        held = [socket.create_connection(("127.0.0.1", site.port)) for _ in range(2)]
        t0 = time.monotonic()
        while len(site.connections) < 2 and time.monotonic() - t0 < 5:
            await asyncio.sleep(0.01)
        extra = socket.create_connection(("127.0.0.1", site.port))
        extra.settimeout(5)
        refused = await loop.run_in_executor(None, extra.recv, 1)  # b"": closed at once
        extra.close()
        for s in held:
            s.close()
        while site.connections and time.monotonic() - t0 < 5:
            await asyncio.sleep(0.01)
        again = await loop.run_in_executor(
            None,
            _request,
            site.port,
            b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        return refused, again, site.refused, len(site.connections)
    finally:
        await runner.cleanup()


def test_a_connection_beyond_the_limit_is_closed_at_once_and_the_listener_serves_on() -> None:
    refused, again, count, _ = asyncio.run(_run_connection_cap())
    assert refused == b""
    assert count == 1
    assert _status_and_json(again) == (200, {"ok": True})


async def _run_sizes() -> tuple[bytes, bytes, bytes]:
    runner, site = await start_listener(
        _app(body_max=1 << 20), "127.0.0.1", 0, ListenerLimits(header_bytes_max=2048)
    )
    loop = asyncio.get_running_loop()
    try:
        big_header = (
            b"GET /hello HTTP/1.1\r\nHost: x\r\nX-Big: "
            + b"a" * 4096
            + b"\r\nConnection: close\r\n\r\n"
        )
        header_resp = await loop.run_in_executor(None, _request, site.port, big_header)
        body = b"x" * ((1 << 20) + 1)
        big_body = (
            b"POST /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        body_resp = await loop.run_in_executor(None, _request, site.port, big_body)
        ok = await loop.run_in_executor(
            None,
            _request,
            site.port,
            b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        return header_resp, body_resp, ok
    finally:
        await runner.cleanup()


def test_oversized_headers_and_bodies_are_refused_and_the_listener_serves_on() -> None:
    header_resp, body_resp, ok = asyncio.run(_run_sizes())
    assert header_resp.split()[1] in (b"400", b"431"), header_resp[:200]
    status, err = _status_and_json(body_resp)
    assert status == 413 and err["error_code"] == 413, err
    assert _status_and_json(ok) == (200, {"ok": True})
