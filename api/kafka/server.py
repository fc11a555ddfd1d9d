"""The Kafka listener: an asyncio server in the broker process; it moves frames, nothing else.

Each connection is served one request at a time, in order, as Kafka's broker does (it mutes
a connection while a request is in flight), so responses can never overtake each other and
a pipelining client (librdkafka sends several requests before reading) is simply read
behind. A frame is ``int32 size`` then the request (``api.kafka.protocol``).

What closes a connection, as Kafka does: a size below the header or above
``request_bytes_max`` (Kafka's ``socket.request.max.bytes``), a header or body that does not
parse, an API or version this listener does not serve (there is no response format to
answer it in; ApiVersions is the exception, answered per KIP-511), and a Produce v0-2 (see
``api.kafka.protocol``). Produce with ``acks=0`` gets no response, as in Kafka.
"""

from __future__ import annotations

import asyncio
import logging
import struct

from api.kafka.admin import ADMIN_HANDLERS
from api.kafka.handlers import HANDLERS, KafkaContext
from api.kafka.protocol import (
    API_VERSIONS,
    PRODUCE,
    PRODUCE_SERVED_MIN,
    MalformedRequestError,
    api_versions_body,
    decode_request,
    encode_response,
    parse_header,
    supports,
    unsupported_api_versions_frame,
)

log = logging.getLogger(__name__)

_HANDLERS = {**HANDLERS, **ADMIN_HANDLERS}

_SIZE = struct.Struct(">i")
REQUEST_BYTES_MAX = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes default


class KafkaListener:
    """``start(host, port)`` binds; ``close()`` stops accepting and ends every connection."""

    def __init__(
        self,
        ctx: KafkaContext,
        *,
        request_bytes_max: int = REQUEST_BYTES_MAX,
        connections_max: int = 1024,
    ) -> None:
        self.ctx = ctx
        self.request_bytes_max = request_bytes_max
        self.connections_max = connections_max
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.Task[None]] = set()
        self.requests = 0

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._accept, host, port, reuse_address=True)

    @property
    def port(self) -> int:
        assert self._server is not None and self._server.sockets
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._conns):
            t.cancel()
        await asyncio.gather(*self._conns, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._conns) >= self.connections_max:
            writer.close()
            return
        self._conns.add(task)
        peer = writer.get_extra_info("peername")
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except MalformedRequestError as e:
            log.info("kafka listener: closing %s: %s", peer, e)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("kafka listener: closing %s after an unexpected error", peer)
        finally:
            self._conns.discard(task)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            (size,) = _SIZE.unpack(await reader.readexactly(4))
            if size < 8 or size > self.request_bytes_max:
                raise MalformedRequestError(
                    f"request size {size} outside [8, {self.request_bytes_max}]"
                )
            frame = await reader.readexactly(size)
            out = await self.handle_frame(frame)
            if out is not None:
                writer.write(out)
                await writer.drain()

    async def handle_frame(self, frame: bytes) -> bytes | None:
        """The response frame for one request frame; None when none is due (acks=0)."""
        header = parse_header(frame)
        self.requests += 1
        key, version = header.api_key, header.api_version
        if key == API_VERSIONS and not supports(key, version):
            return unsupported_api_versions_frame(header.correlation_id)
        if not supports(key, version) or (key == PRODUCE and version < PRODUCE_SERVED_MIN):
            raise MalformedRequestError(
                f"api {key} v{version} is not served (client {header.client_id!r})"
            )
        req = decode_request(header, frame)
        if key == API_VERSIONS:
            body = api_versions_body(version)
        else:
            body = await _HANDLERS[key](self.ctx, version, req)
            if body is None:
                return None
        return encode_response(key, version, header.correlation_id, body)
