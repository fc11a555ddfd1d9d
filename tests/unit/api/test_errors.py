from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from api.http.errors import error_middleware, topic_not_found


def _app() -> web.Application:
    app = web.Application(middlewares=[error_middleware], client_max_size=1024)

    async def missing(request: web.Request) -> web.Response:
        raise topic_not_found("t1")

    async def boom(request: web.Request) -> web.Response:
        raise RuntimeError("secret internals")

    async def echo(request: web.Request) -> web.Response:
        return web.Response(body=await request.read())

    app.router.add_get("/missing", missing)
    app.router.add_get("/boom", boom)
    app.router.add_post("/echo", echo)
    return app


def test_every_error_is_json_with_error_code_and_message() -> None:
    async def run() -> None:
        async with TestClient(TestServer(_app())) as c:
            cases: list[tuple[aiohttp.ClientResponse, int, int]] = [
                (await c.get("/missing"), 404, 40401),
                (await c.get("/nope"), 404, 404),
                (await c.put("/missing"), 405, 405),
                (await c.post("/echo", data=b"x" * 5000), 413, 413),
                (await c.get("/boom"), 500, 50001),
            ]
            for resp, status, code in cases:
                assert resp.status == status
                assert resp.content_type == "application/json"
                body = await resp.json()
                assert body["error_code"] == code
                assert isinstance(body["message"], str) and body["message"]
                assert "secret" not in body["message"]

    asyncio.run(run())
