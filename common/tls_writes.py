"""Big writes to a TLS transport go to it in slices.

Python's TLS (``ssl.SSLObject`` over memory BIOs, under both asyncio's and uvloop's SSL
transports) encrypts all that one ``write`` hands it into one outgoing memory buffer before
any of it reaches the socket. OpenSSL grows that buffer with ``BUF_MEM_grow_clean``, which
copies and wipes it at every growth, so a 1 MiB body costs several copies of itself before
the first byte is sent, and the receiver can start decrypting only once the whole body is
encrypted. Handed over in slices of ``SLICE`` bytes, the buffer stays small and each slice is
on the wire while the next is encrypted.

Measured on this project's VMs (aiohttp on uvloop, 1 MiB bodies, client and server in one
process, CPU per request; plaintext beside it): a TLS response 3.0 ms whole against 1.4 ms in
256 KiB slices (plaintext 0.6 and 0.5), a TLS request body 3.6 against 1.6 ms (plaintext 0.9
and 0.6). A produce request and a follower's fetch answer are such bodies, each on the
critical path of an ``acks=all`` produce, so TLS's cost there is mostly this buffer.

``sliced(transport)`` wraps a TLS transport (anything else is returned as it is); the
listener (``api.node.listener``) wraps each server connection, `SlicingConnector` (what
``common.netbind.connector`` makes) each client connection.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterable
from typing import Any

import aiohttp
from aiohttp.client_proto import ResponseHandler

SLICE = 256 * 1024
"""Bytes handed to the TLS transport at a time (64 KiB measured 1.9 ms for the 1 MiB
response above, 256 KiB 1.4 ms; a TLS record is 16 KiB, so either fills whole records)."""


class SlicedWrites:
    """A TLS transport whose writes above ``SLICE`` bytes are handed to it slice by slice;
    everything else is the transport's own (``__getattr__``)."""

    __slots__ = ("transport",)

    def __init__(self, transport: asyncio.BaseTransport) -> None:
        self.transport: Any = transport

    def write(self, data: Any) -> None:
        mv = memoryview(data)
        n = mv.nbytes
        if n <= SLICE or mv.itemsize != 1 or not mv.c_contiguous:
            self.transport.write(data)
            return
        # The transport may keep a slice in its backlog (while a handshake runs): slices of
        # immutable bytes can be kept as views; anything else is copied, so the caller may
        # reuse its buffer once write returns, as with the transport itself.
        keep = isinstance(data, bytes)
        for i in range(0, n, SLICE):
            piece = mv[i : i + SLICE]
            self.transport.write(piece if keep else piece.tobytes())

    def writelines(self, chunks: Iterable[Any]) -> None:
        # Small chunks (headers, a short body) go together, as the transport's own
        # writelines would send them; a big one goes in slices.
        group: list[Any] = []
        size = 0
        for c in chunks:
            n = memoryview(c).nbytes
            if n > SLICE:
                if group:
                    self.transport.writelines(group)
                    group, size = [], 0
                self.write(c)
                continue
            group.append(c)
            size += n
            if size >= SLICE:
                self.transport.writelines(group)
                group, size = [], 0
        if group:
            self.transport.writelines(group)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


def sliced(transport: Any) -> Any:
    """``transport`` wrapped in `SlicedWrites` if it speaks TLS, else ``transport``."""
    if transport.get_extra_info("ssl_object") is None:
        return transport
    return SlicedWrites(transport)


class SlicingResponseHandler(ResponseHandler):
    """aiohttp's client protocol over a `sliced` transport: request bodies (a produce, a
    forwarded batch) reach a TLS connection in slices."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(sliced(transport))


class SlicingConnector(aiohttp.TCPConnector):
    """``aiohttp.TCPConnector`` whose connections are `SlicingResponseHandler`s. (aiohttp has
    no public hook for the protocol; ``_factory`` is the one its connector builds each
    connection's protocol with, since 3.0. tests/unit/common/test_tls_writes.py fails if
    that changes.)"""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        factory: Any = functools.partial(SlicingResponseHandler, loop=self._loop)
        self._factory = factory
