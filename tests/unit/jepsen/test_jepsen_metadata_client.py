"""The metadata workload's client must not call a request "definitely not done" when one of
its attempts was sent: aiohttp resends an idempotent request once over a new connection when
a pooled keep-alive connection drops, and if that resend is refused, the refusal is the only
error the caller sees (finding 5 of docs/fault-injection.md: a DELETE that reached a broker
SIGKILLed mid-request was recorded as refused, yet the topic was deleted)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from jepsen_tests.cluster import DefiniteError, IndefiniteError
from jepsen_tests.longboat_client import LongboatMetadataClient


class _DyingBroker:
    """Answers GETs with keep-alive; on a DELETE it stops listening, then drops the
    connection without an answer, as a broker SIGKILLed while handling it."""

    def __init__(self) -> None:
        self.deletes = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if head.startswith(b"DELETE"):
                    self.deletes += 1
                    assert self.server is not None
                    self.server.close()  # the port now refuses connections
                    writer.transport.abort()
                    return
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 2\r\n\r\n{}"
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


def _client(port: int) -> LongboatMetadataClient:
    cluster = SimpleNamespace(
        brokers=["b1"], url=lambda _name: f"http://127.0.0.1:{port}", client_security=None
    )
    return LongboatMetadataClient(cluster, "p0", "127.0.0.1", timeout_s=5.0)  # type: ignore[arg-type]


async def _sent_then_refused() -> None:
    broker = _DyingBroker()
    port = await broker.start()
    client = _client(port)
    try:
        base = f"http://127.0.0.1:{port}"
        assert (await client._request("GET", base, "/v3/clusters"))[0] == 200  # pools it
        with pytest.raises(IndefiniteError, match="sent, then the resend could not connect"):
            await client._request("DELETE", base, "/v3/clusters/c/topics/t")
        assert broker.deletes == 1
    finally:
        await client.close()


async def _refused_unsent() -> None:
    broker = _DyingBroker()
    port = await broker.start()
    assert broker.server is not None
    broker.server.close()
    await broker.server.wait_closed()
    client = _client(port)
    try:
        with pytest.raises(DefiniteError, match="connect"):
            await client._request("DELETE", f"http://127.0.0.1:{port}", "/v3/clusters/c/topics/t")
        assert broker.deletes == 0
    finally:
        await client.close()


def test_a_delete_sent_then_refused_on_resend_is_indefinite() -> None:
    asyncio.run(_sent_then_refused())


def test_a_refused_connection_with_nothing_sent_is_definite() -> None:
    asyncio.run(_refused_unsent())
