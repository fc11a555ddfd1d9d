"""Big writes reach a TLS transport in slices (common.tls_writes): the wrapper's rules on a
recording transport, then real TLS connections through the node listener and the nodes'
client connector, whose bodies must arrive whole and whose transports must be the wrapper."""

from __future__ import annotations

import asyncio
import hashlib
import os
import ssl
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from api.node.listener import GuardedSite, ListenerLimits, app_runner
from api.node.secure_setup import SecureSetup
from common import netbind
from common.tls_writes import (
    SLICE,
    SlicedWrites,
    SlicingConnector,
    SlicingResponseHandler,
    sliced,
)


class Recording:
    """A transport that keeps what it is handed, call by call."""

    def __init__(self, tls: bool = True) -> None:
        self.calls: list[tuple[str, list[bytes]]] = []
        self.tls = tls

    def write(self, data: Any) -> None:
        self.calls.append(("write", [bytes(data)]))

    def writelines(self, chunks: Any) -> None:
        self.calls.append(("writelines", [bytes(c) for c in chunks]))

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return object() if name == "ssl_object" and self.tls else default

    def is_closing(self) -> bool:
        return False


def test_a_big_write_goes_in_slices_and_a_small_one_whole() -> None:
    t = Recording()
    w = SlicedWrites(t)  # type: ignore[arg-type]
    big = os.urandom(3 * SLICE + 17)
    w.write(big)
    w.write(b"small")
    assert [len(c[1][0]) for c in t.calls] == [SLICE, SLICE, SLICE, 17, 5]
    assert b"".join(c[1][0] for c in t.calls[:4]) == big


def test_a_mutable_buffer_is_copied_so_the_caller_may_reuse_it() -> None:
    kept: list[Any] = []

    class Keeping(Recording):
        def write(self, data: Any) -> None:
            kept.append(data)  # as a transport's backlog would, during a handshake

    w = SlicedWrites(Keeping())  # type: ignore[arg-type]
    buf = bytearray(b"a" * (2 * SLICE))
    w.write(buf)
    buf[:] = b"b" * len(buf)
    assert b"".join(bytes(k) for k in kept) == b"a" * (2 * SLICE)


def test_writelines_groups_small_chunks_and_slices_big_ones() -> None:
    t = Recording()
    w = SlicedWrites(t)  # type: ignore[arg-type]
    head, body = b"HTTP/1.1 200 OK\r\n\r\n", os.urandom(2 * SLICE + 1)
    w.writelines([head, body, b"tail"])
    assert [(kind, [len(c) for c in chunks]) for kind, chunks in t.calls] == [
        ("writelines", [len(head)]),
        ("write", [SLICE]),
        ("write", [SLICE]),
        ("write", [1]),
        ("writelines", [4]),
    ]
    assert b"".join(b"".join(c) for _, c in t.calls) == head + body + b"tail"


def test_only_tls_transports_are_wrapped_and_the_rest_is_forwarded() -> None:
    plain = Recording(tls=False)
    assert sliced(plain) is plain
    tls = Recording()
    w = sliced(tls)
    assert isinstance(w, SlicedWrites)
    assert w.is_closing() is False  # forwarded
    assert w.get_extra_info("ssl_object") is not None


async def _round_trip(root: Path) -> tuple[str, str, list[str], list[str]]:
    setup = SecureSetup.create(root, [1])
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(setup.nodes[1].cert, setup.nodes[1].key)
    body = os.urandom(3 * SLICE + 12345)
    seen: list[str] = []

    async def echo(request: web.Request) -> web.Response:
        got = await request.read()
        seen.append(type(request.transport).__name__)
        return web.Response(body=got[::-1])  # the answer is as big, and different

    app = web.Application(client_max_size=16 << 20)
    app.router.add_post("/echo", echo)
    limits = ListenerLimits()
    runner = await app_runner(app, limits)
    site = GuardedSite(runner, "127.0.0.1", 0, limits, ssl_context=server_ctx)
    await site.start()
    protocols: list[str] = []
    try:
        client_ctx = ssl.create_default_context(cafile=str(setup.ca.cert))
        client_ctx.check_hostname = False
        conn = netbind.connector(ssl=client_ctx)
        assert isinstance(conn, SlicingConnector)
        async with aiohttp.ClientSession(connector=conn) as s:
            for _ in range(2):
                async with s.post(f"https://127.0.0.1:{site.port}/echo", data=body) as r:
                    assert r.connection is not None  # held until the body is read
                    protocols.append(type(r.connection.protocol).__name__)
                    assert isinstance(r.connection.protocol, SlicingResponseHandler)
                    assert isinstance(r.connection.protocol.transport, SlicedWrites)
                    answer = await r.read()
    finally:
        await runner.cleanup()
    return (
        hashlib.sha256(answer).hexdigest(),
        hashlib.sha256(body[::-1]).hexdigest(),
        seen,
        protocols,
    )


def test_bodies_cross_a_real_tls_connection_whole_both_ways(tmp_path: Path) -> None:
    got, want, server_side, client_side = asyncio.run(_round_trip(tmp_path))
    assert got == want
    assert server_side == ["SlicedWrites", "SlicedWrites"]
    assert client_side == ["SlicingResponseHandler", "SlicingResponseHandler"]
