"""The source address of a node's outgoing connections.

A node listening on its own loopback address (``127.0.0.2``, ``127.0.0.3``, ...) must also
*send* from it: otherwise the kernel picks ``127.0.0.1`` as the source of every connection on
``lo``, and firewall rules between loopback addresses (the fault-injection suite's partitions,
nftables ``ip saddr A ip daddr B drop``) cannot tell which node is talking.

The node's entry point calls `set_source_host` once with its configured listen host; every
place that opens an ``aiohttp.ClientSession`` to other nodes passes ``connector=connector()``.
Only a specific loopback address other than 127.0.0.1 is bound: binding ``0.0.0.0``, a name,
or a routable address would gain nothing here and could fail (a remote peer is not reachable
from ``127.0.0.N``), and 127.0.0.1 is what the kernel picks anyway.

Clients that want the same (the fault-injection harness's clients on 127.0.0.100+) pass their
host explicitly: ``connector(host="127.0.0.101")``.

`port_free` is the one "could a node listen here now?" probe (``longboat dev up`` checks its
ports with it before starting anything).
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
from typing import Any

import aiohttp

from common.tls_writes import SlicingConnector

READ_BUFSIZE = 1 << 20
"""The read buffer of every aiohttp session and server of a node and of the client (aiohttp's
``read_bufsize``, 64 KiB by default). A body bigger than twice the buffer pauses and resumes
the transport at every step of that size; produce requests, follower fetch answers and
consumer fetches are such bodies. Measured on this project's VMs (aiohttp 3.14 on uvloop, one
process, CPU per 1 MiB request answered with 1 MiB): plaintext 1.85 ms with 64 KiB buffers,
0.73 ms with 1 MiB (the server's buffer decides); TLS 5.39 ms and 2.59 ms (the client's
decides); 4 MiB gained nothing more. A connection holds up to twice this before it stops
reading, and every body that size is read whole anyway."""

_source_host: str | None = None
_client_ssl: ssl.SSLContext | None = None


def port_free(host: str, port: int) -> bool:
    """Whether a node could listen on ``host:port`` now: the probe every "is this port taken?"
    check uses. With SO_REUSEADDR, as the nodes bind (aiohttp's ``reuse_address=True``):
    without it the TIME_WAIT sockets a stopped cluster leaves for a minute count as "in use",
    and a cluster could not be restarted at once."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def bindable(host: str | None) -> str | None:
    """``host`` if outgoing sockets should bind it: a loopback IPv4 address but 127.0.0.1."""
    if not host:
        return None
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return None  # a name such as "localhost": leave the choice to the kernel
    if addr.version != 4 or not addr.is_loopback or str(addr) == "127.0.0.1":
        return None
    return str(addr)


def set_source_host(host: str | None) -> None:
    """Process-wide: bind outgoing node-to-node connections to ``host`` where `bindable`."""
    global _source_host
    _source_host = bindable(host)


def set_client_ssl(ctx: ssl.SSLContext | None) -> None:
    """Process-wide: the TLS context node-to-node connections to ``https`` URLs use (the CA
    bundle the node trusts, the certificate it authenticates with; issue 18)."""
    global _client_ssl
    _client_ssl = ctx


def source_host() -> str | None:
    return _source_host


def local_addr(host: str | None = None) -> tuple[str, int] | None:
    """``(host, 0)`` for ``TCPConnector(local_addr=...)`` / ``open_connection``, or None."""
    h = bindable(host) if host is not None else _source_host
    return (h, 0) if h is not None else None


def connector(host: str | None = None, **kwargs: Any) -> aiohttp.TCPConnector | None:
    """A ``TCPConnector`` (with ``kwargs``) whose sockets bind the source host, if any; None
    (the session builds its default connector, as without this module) when there is nothing
    to bind and no ``kwargs``. Call it where the session is made: inside the event loop.
    """
    addr = local_addr(host)
    if addr is not None:
        kwargs["local_addr"] = addr
    if _client_ssl is not None and "ssl" not in kwargs:
        kwargs["ssl"] = _client_ssl  # aiohttp uses it for https URLs only
    # Slicing: big request bodies reach a TLS connection in slices (common.tls_writes).
    return SlicingConnector(**kwargs) if kwargs else None


class LazySession:
    """An ``aiohttp.ClientSession`` made on first use (on the running loop, from the bound
    source address) and made again if it was closed: what a node component that forwards
    requests to other nodes holds (the router, the schema registry)."""

    def __init__(self, *, limit: int, connect_timeout_s: float) -> None:
        self._limit = limit
        self._connect_timeout_s = connect_timeout_s
        self._session: aiohttp.ClientSession | None = None

    def get(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=connector(limit=self._limit),
                read_bufsize=READ_BUFSIZE,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._connect_timeout_s),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
