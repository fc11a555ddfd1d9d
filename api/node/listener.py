"""A node's HTTP listener, with the bounds a client cannot push past (issue 17).

aiohttp bounds a request's body (``client_max_size``, set from ``http_request_bytes_max``), its
request line and each header field (``max_line_size``/``max_field_size``, from
``http_header_bytes_max``), the number of headers, and the time a connection may sit without a
complete request (``keepalive_timeout``: its clock starts when a connection opens and partial
headers do not restart it, so a slowloris is closed too; tests/integration/http/
test_http_slow_clients.py). Request bodies have their own read bound (``read_body``).

It does not bound how many connections a listener holds: thousands of idle or slow clients
would hold the node's sockets and memory. ``GuardedSite`` adds ``connections_max``: a
connection accepted beyond it is closed at once and counted (``refused``), as Kafka's
``max.connections``; established connections are not disturbed. Each accepted connection is
wrapped in a ``_Counted`` protocol that forwards everything to aiohttp's ``RequestHandler``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from api.node.config import NodeConfig
from common import netbind
from common.tls_writes import sliced

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ListenerLimits:
    """The bounds of one listener (``api.node.config`` names them ``http_*``)."""

    connections_max: int = 1024
    header_bytes_max: int = 8190
    """The request line and each header field, in bytes (aiohttp's own default)."""
    headers_max: int = 128
    keepalive_timeout_s: float = 75.0


class _Counted(asyncio.Protocol):
    """Forwards one connection to aiohttp's handler, unless the listener is full."""

    def __init__(self, site: GuardedSite, inner: Any) -> None:
        self.site = site
        self.inner = inner
        self.transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if len(self.site.connections) >= self.site.limits.connections_max:
            self.site.refuse(transport)
            return
        # Responses (a follower's fetch, a consumer's) reach a TLS connection in slices
        # (common.tls_writes); the wrapper is what aiohttp and Listeners.of_transport see.
        self.transport = sliced(transport)
        self.site.connections.add(self.transport)
        self.inner.connection_made(self.transport)

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        result: bool | None = self.inner.eof_received()
        return result

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is not None:
            self.site.connections.discard(self.transport)
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class GuardedSite(web.TCPSite):
    """``web.TCPSite`` that holds at most ``limits.connections_max`` connections."""

    def __init__(
        self, runner: web.BaseRunner, host: str, port: int, limits: ListenerLimits, **kwargs: Any
    ) -> None:
        super().__init__(runner, host, port, **kwargs)
        self.limits = limits
        self.connections: set[asyncio.BaseTransport] = set()
        self.refused = 0
        self._last_refusal_log = 0.0

    async def start(self) -> None:
        # TCPSite.start with the protocol factory wrapped; BaseSite.start registers the site.
        await web.BaseSite.start(self)
        server = self._runner.server
        assert server is not None
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _Counted(self, server()),
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
        )
        self._bound_port = self._server.sockets[0].getsockname()[1]

    def refuse(self, transport: asyncio.BaseTransport) -> None:
        self.refused += 1
        assert isinstance(transport, asyncio.Transport)
        transport.abort()
        now = time.monotonic()
        if now - self._last_refusal_log >= 10.0:  # one line per 10 s under a flood
            self._last_refusal_log = now
            log.warning(
                "refusing connections on %s: %d open is the limit "
                "(http_connections_max); %d refused so far",
                self.name,
                len(self.connections),
                self.refused,
            )


def limits_of(config: NodeConfig) -> ListenerLimits:
    return ListenerLimits(
        connections_max=config.http_connections_max,
        header_bytes_max=config.http_header_bytes_max,
        headers_max=config.http_headers_max,
        keepalive_timeout_s=config.http_keepalive_timeout_ms / 1000,
    )


async def app_runner(app: web.Application, limits: ListenerLimits) -> web.AppRunner:
    """``app`` set up with the request bounds of ``limits`` (every listener of a node shares
    them; the connection bound is each site's)."""
    runner = web.AppRunner(
        app,
        access_log=None,
        handle_signals=False,
        keepalive_timeout=limits.keepalive_timeout_s,
        max_line_size=limits.header_bytes_max,
        max_field_size=limits.header_bytes_max,
        max_headers=limits.headers_max,
        read_bufsize=netbind.READ_BUFSIZE,
    )
    await runner.setup()
    return runner


async def start_listener(
    app: web.Application, host: str, port: int, limits: ListenerLimits
) -> tuple[web.AppRunner, GuardedSite]:
    """Set ``app`` up and listen on ``host:port`` within ``limits``. If the port cannot be
    bound, the runner is cleaned up and the ``OSError`` raised."""
    runner = await app_runner(app, limits)
    site = GuardedSite(runner, host, port, limits, reuse_address=True)
    try:
        await site.start()
    except OSError:
        await runner.cleanup()
        raise
    return runner, site
