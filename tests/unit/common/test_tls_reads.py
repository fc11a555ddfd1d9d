"""TLS reads come out many records at a time (common.tls_reads): the read's rules on a pair of
TLS objects over memory BIOs, then real TLS connections on asyncio's and uvloop's loops, whose
bytes must arrive whole and in order, and the contexts the nodes and the client build."""

from __future__ import annotations

import asyncio
import hashlib
import os
import ssl
from collections.abc import Callable
from typing import Any

import pytest
import uvloop

from api.client import ClientSecurity
from api.node.secure_setup import SecureSetup
from common.tls_reads import BATCH_FROM, BatchedReads, batched_reads

RECORD = 16 * 1024  # TLS's largest record


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> SecureSetup:
    return SecureSetup.create(tmp_path_factory.mktemp("tls"), [1])


def _contexts(setup: SecureSetup, batched: bool) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(setup.nodes[1].cert, setup.nodes[1].key)
    client = ssl.create_default_context(cafile=str(setup.ca.cert))
    client.check_hostname = False
    if batched:
        batched_reads(server)
    return server, client


class Pair:
    """A client and a server TLS object joined by memory BIOs, handshaken."""

    def __init__(self, setup: SecureSetup, batched: bool = True) -> None:
        server_ctx, client_ctx = _contexts(setup, batched)
        self.s_in, self.s_out, self.c_in, self.c_out = (ssl.MemoryBIO() for _ in range(4))
        self.server = server_ctx.wrap_bio(self.s_in, self.s_out, server_side=True)
        self.client = client_ctx.wrap_bio(self.c_in, self.c_out)
        for _ in range(10):
            for obj in (self.client, self.server):
                try:
                    obj.do_handshake()
                except ssl.SSLWantReadError:
                    pass
            self.s_in.write(self.c_out.read())
            self.c_in.write(self.s_out.read())

    def send(self, data: bytes) -> None:
        """``data`` from the client, as it reaches the server's incoming BIO."""
        self.client.write(data)
        self.s_in.write(self.c_out.read())


def test_one_big_read_returns_every_record_that_arrived(setup: SecureSetup) -> None:
    p = Pair(setup)
    assert isinstance(p.server, BatchedReads)
    data = os.urandom(10 * RECORD + 100)  # 11 records
    p.send(data)
    assert p.server.read(256 * 1024) == data
    with pytest.raises(ssl.SSLWantReadError):
        p.server.read(256 * 1024)


def test_the_default_read_returns_one_record_which_is_what_batching_changes(
    setup: SecureSetup,
) -> None:
    p = Pair(setup, batched=False)
    p.send(os.urandom(10 * RECORD))
    assert len(p.server.read(256 * 1024)) == RECORD


def test_a_read_returns_no_more_than_asked_and_the_rest_comes_next(setup: SecureSetup) -> None:
    p = Pair(setup)
    data = os.urandom(5 * RECORD)
    p.send(data)
    first = p.server.read(BATCH_FROM + 1)  # ends inside the fifth record
    assert first == data[: BATCH_FROM + 1]
    assert p.server.read(256 * 1024) == data[BATCH_FROM + 1 :]


def test_small_reads_and_reads_into_a_buffer_keep_the_default_path(setup: SecureSetup) -> None:
    p = Pair(setup)
    data = os.urandom(3 * RECORD)
    p.send(data)
    assert p.server.read(100) == data[:100]  # small: one record's worth at most
    buf = bytearray(256 * 1024)
    n: Any = p.server.read(256 * 1024, buf)  # into a buffer: one record at a time, as before
    assert buf[:n] == data[100:RECORD]


def test_a_close_after_data_gives_the_data_then_the_end(setup: SecureSetup) -> None:
    p = Pair(setup)
    data = os.urandom(2 * RECORD + 7)
    p.client.write(data)
    try:
        p.client.unwrap()  # close_notify
    except ssl.SSLWantReadError:
        pass
    p.s_in.write(p.c_out.read())
    assert p.server.read(256 * 1024) == data
    assert p.server.read(256 * 1024) == b""


async def _echo_digest(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext) -> tuple[str, str]:
    """A 3 MiB body through a TLS echo server and back; the digests of what was sent and
    what came back, and the server's TLS object's class."""
    body = os.urandom(3 * 1024 * 1024 + 321)
    kinds: list[str] = []

    async def echo(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        kinds.append(type(w.get_extra_info("ssl_object")).__name__)
        w.write(await r.readexactly(len(body)))
        await w.drain()
        w.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    try:
        r, w = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx)
        w.write(body)
        await w.drain()
        back = await r.readexactly(len(body))
        w.close()
    finally:
        server.close()
        await server.wait_closed()
    assert kinds == ["BatchedReads"]
    return hashlib.sha256(back).hexdigest(), hashlib.sha256(body).hexdigest()


@pytest.mark.parametrize("run", [asyncio.run, uvloop.run], ids=["asyncio", "uvloop"])
def test_bytes_cross_real_tls_connections_whole_on_both_loops(
    setup: SecureSetup, run: Callable[..., tuple[str, str]]
) -> None:
    server_ctx, client_ctx = _contexts(setup, batched=True)
    batched_reads(client_ctx)
    got, want = run(_echo_digest(server_ctx, client_ctx))
    assert got == want


def test_the_contexts_nodes_and_the_client_build_batch_their_reads(setup: SecureSetup) -> None:
    assert setup.client_ssl().sslobject_class is BatchedReads
    ctx = ClientSecurity(ssl_cafile=str(setup.ca.cert)).ssl_context()
    assert ctx is not None and ctx.sslobject_class is BatchedReads
