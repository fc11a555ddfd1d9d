"""The Kafka listener: an asyncio server in the broker process; it moves frames, nothing else.

Responses leave a connection in the order its requests came, and each request but Produce is
served alone, after everything before it was answered, as Kafka's broker serves every
request (it mutes a connection while a request is in flight). Produce requests are
pipelined, up to ``PIPELINE_DEPTH`` of them: the next request is read and started once the
previous Produce's batches are in the log (``ReplicaManager.produce``'s ``appended``), not
once its acks=all wait is over, so a producer's batches still reach the log in the order it
sent them while the replication rounds of several requests overlap. Kafka's clients keep up
to five requests in flight on a connection; served one at a time, a connection moved one
request per acks=all round trip. A frame is ``int32 size`` then the request
(``api.kafka.protocol``).

What closes a connection, as Kafka does: a size below the header or above
``request_bytes_max`` (Kafka's ``socket.request.max.bytes``), a header or body that does not
parse, an API or version this listener does not serve (there is no response format to
answer it in; ApiVersions is the exception, answered per KIP-511), and a Produce v0-2 (see
``api.kafka.protocol``). Produce with ``acks=0`` gets no response, as in Kafka, and a failed
one (a partition not led here, a topic not writable by the principal) closes the connection.

Zero copy (``api.kafka.zerocopy``): on a plaintext listener a Fetch answer's stored Kafka
batches go from the segment files to the socket with ``os.sendfile`` (uvloop, which the
broker runs on, has no ``loop.sendfile``). The bytes before a range are written to the
transport, the transport is let drain empty, then the range is sent straight into the socket
through a duplicate of its descriptor (the transport's own may be closed, and its number
reused, if the connection is lost meanwhile; the loop also refuses a second watcher on it),
waiting for room as the client reads; so the bytes keep their order, and the next request is
read only after the last range went out. A range whose file shrank under it (a truncation
below what was promised) cannot be completed: the connection is closed, as Kafka does, and
the client fetches again. TLS listeners copy: the bytes must pass through OpenSSL.

Security (issue 18; ``api.kafka.security``): an SSL or SASL_SSL listener speaks TLS; a
plaintext client's bytes fail its handshake and the connection closes. On SSL the principal
is the client certificate's mapped subject (``User:ANONYMOUS`` without one where the
listener allows it, else the connection is closed). On SASL_PLAINTEXT and SASL_SSL a
connection must authenticate first, as with Kafka's SaslServerAuthenticator:

=================  ======================================================================
state              what is served
=================  ======================================================================
handshake          ApiVersions; SaslHandshake (v1: an offered mechanism starts the
                   exchange, another one is answered UNSUPPORTED_SASL_MECHANISM and the
                   connection closed; v0: the same, then raw SASL tokens follow without
                   request headers, as Kafka 0.10 clients send them). Anything else closes
                   the connection.
authenticating     SaslAuthenticate, one step of the exchange each (``api.kafka.sasl``).
                   A failure is answered SASL_AUTHENTICATION_FAILED (58) with a message that
                   names no secret, counted and logged with the claimed principal and the
                   source address, and the connection closed; the source's later attempts
                   wait first (the HTTP listeners' per-source throttle).
authenticated      every API, each checked against the ACLs by its handler.
=================  ======================================================================
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import datetime
import logging
import os
import secrets
import ssl
import struct
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from api.kafka.admin import ADMIN_HANDLERS
from api.kafka.handlers import HANDLERS, PRODUCE_APPENDED, AcksZeroFailedError, KafkaContext
from api.kafka.protocol import (
    API_VERSIONS,
    PRODUCE,
    PRODUCE_SERVED_MIN,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    MalformedRequestError,
    RequestHeader,
    api_versions_body,
    build,
    decode_request,
    encode_response,
    is_flexible,
    parse_header,
    response_module,
    supports,
    unsupported_api_versions_frame,
)
from api.kafka.sasl import Exchange, SaslFailedError, new_exchange
from api.kafka.security import PLAINTEXT, SESSION, ListenerSecurity, Session
from api.kafka.security_admin import SECURITY_ADMIN_HANDLERS
from api.kafka.zerocopy import Part, PlannedResponse, splice
from common import netbind
from common.tls_writes import sliced
from storage.log import FileRange

log = logging.getLogger(__name__)

_HANDLERS = {**HANDLERS, **ADMIN_HANDLERS, **SECURITY_ADMIN_HANDLERS}

_SIZE = struct.Struct(">i")
_API_KEY = struct.Struct(">h")
_Answer = bytes | list[Part] | asyncio.Task[bytes | list[Part] | None]
"""What the responder writes next, in request order: a frame, a planned fetch answer, or a
pipelined produce request's task."""
REQUEST_BYTES_MAX = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
PIPELINE_DEPTH = 5
"""Produce requests of one connection in flight at once, by default (Kafka's clients send at
most five: ``max.in.flight.requests.per.connection``); one more is read only when the first
is answered. Broker config ``kafka_produce_pipeline_depth``."""
ANSWERS_GRACE_S = 1.0
"""How long a connection the peer closed waits for the answers it had asked for (they are
dropped, but a failed one still says why the connection ended)."""
UNAUTHENTICATED_BYTES_MAX = 512 * 1024
"""A frame before authentication is a SASL token or ApiVersions: Kafka bounds it likewise
(``sasl.server.max.receive.size``), so an unauthenticated peer cannot make it buffer 100 MB."""


class RangeCutShortError(Exception):
    """A file range shrank before it was all sent (its file was truncated under it): the
    response cannot be completed, so the connection is closed."""


class ConnectionRefusedByPolicy(Exception):
    """Close the connection (after sending ``frame``, when there is one)."""

    def __init__(self, why: str, frame: bytes | None = None) -> None:
        super().__init__(why)
        self.frame = frame


@dataclass
class _Conn:
    """One connection's SASL state (see the module docstring's table)."""

    session: Session
    source: str
    exchange: Exchange | None = None
    raw_tokens: bool = False
    """After SaslHandshake v0: the next frames are bare SASL tokens."""
    mechanism: str = ""
    delayed: bool = False


class KafkaListener:
    """``start(host, port)`` binds; ``close()`` stops accepting and ends every connection."""

    def __init__(
        self,
        ctx: KafkaContext,
        *,
        request_bytes_max: int = REQUEST_BYTES_MAX,
        connections_max: int = 1024,
        security: ListenerSecurity = PLAINTEXT,
        fetch_zero_copy: bool = True,
        pipeline_depth: int = PIPELINE_DEPTH,
    ) -> None:
        # TLS cannot sendfile (the bytes must be encrypted in the process): copy there.
        if fetch_zero_copy and security.ssl_context is None and ctx is not None:
            ctx = dataclasses.replace(ctx, fetch_zero_copy=True)
        self.ctx = ctx
        self.pipeline_depth = pipeline_depth
        self.request_bytes_max = request_bytes_max
        self.connections_max = connections_max
        self.security = security
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.Task[None]] = set()
        self.requests = 0
        self.sendfile_responses = 0
        """Responses sent with at least one range by ``os.sendfile``."""
        self.sendfile_bytes = 0
        """Record bytes those responses sent from segment files."""

    async def start(self, host: str, port: int) -> None:
        # The stream's buffer limit is its flow control: a produce request of 1 MiB would
        # pause and resume the transport every 128 KiB at asyncio's 64 KiB default
        # (common.netbind.READ_BUFSIZE says what that costs).
        self._server = await asyncio.start_server(
            self._accept,
            host,
            port,
            reuse_address=True,
            ssl=self.security.ssl_context,
            limit=netbind.READ_BUFSIZE,
        )

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
            conn = self._open(writer)
            SESSION.set(conn.session)  # this task's own context: one session per connection
            await self._serve(reader, writer, conn)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        except MalformedRequestError as e:
            log.info("kafka listener %s: closing %s: %s", self.security.name, peer, e)
        except RangeCutShortError as e:
            log.warning("kafka listener %s: closing %s: %s", self.security.name, peer, e)
        except AcksZeroFailedError as e:
            log.info(
                "kafka listener %s: closing %s after acks=0 errors: %s", self.security.name, peer, e
            )
        except ConnectionRefusedByPolicy as e:
            log.info("kafka listener %s: closing %s: %s", self.security.name, peer, e)
            if e.frame is not None:
                try:
                    writer.write(e.frame)
                    async with asyncio.timeout(5):
                        await writer.drain()
                except (ConnectionError, TimeoutError, ssl.SSLError):
                    pass
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("kafka listener: closing %s after an unexpected error", peer)
        finally:
            self._conns.discard(task)
            writer.close()

    def _open(self, writer: asyncio.StreamWriter) -> _Conn:
        sec = self.security
        peer = writer.get_extra_info("peername")
        source = str(peer[0]) if peer else "unknown"
        session = Session(host=source, authorizer=sec.authorizer, authenticated=not sec.sasl)
        if sec.protocol == "SSL":
            cert = writer.get_extra_info("peercert")
            if cert and sec.cert_principal is not None:
                try:
                    session.principal = sec.cert_principal(cert)
                except ValueError as e:
                    self._failed(source, "", f"client certificate: {e}")
                    raise ConnectionRefusedByPolicy(
                        "certificate subject maps to no principal"
                    ) from None
            elif not sec.anonymous:
                self._failed(source, "", "no client certificate")
                raise ConnectionRefusedByPolicy("a client certificate is required")
        return _Conn(session, source)

    def _failed(self, source: str, claimed: str, why: str) -> None:
        if self.security.logins is not None:
            self.security.logins.note_failure(self.security.name, source, claimed, why)
        else:
            log.warning(
                "kafka listener %s: authentication failed from %s (principal %s): %s",
                self.security.name,
                source,
                claimed or "none given",
                why,
            )

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn: _Conn
    ) -> None:
        # Answers in request order: frames, or tasks (pipelined produce requests) whose result
        # is the frame. The responder writes them; a failed task ends the connection.
        answers: asyncio.Queue[_Answer] = asyncio.Queue()
        room = asyncio.Semaphore(self.pipeline_depth)
        responder = asyncio.get_running_loop().create_task(self._respond(answers, room, writer))

        serving = asyncio.current_task()
        assert serving is not None

        def on_respond_end(t: asyncio.Task[None]) -> None:
            # A failed answer (an acks=0 produce refused, a broken fetch range) ends the
            # connection: stop reading, wherever the reader waits; its error is raised below.
            if not t.cancelled() and t.exception() is not None:
                writer.transport.abort()
                serving.cancel()

        responder.add_done_callback(on_respond_end)
        try:
            await self._read_requests(reader, conn, answers, room)
        except (
            ConnectionError,
            asyncio.IncompleteReadError,
            ssl.SSLError,
            asyncio.CancelledError,
        ) as e:
            if not isinstance(e, asyncio.CancelledError) and not responder.done():
                # The peer went away (an acks=0 producer closes once its bytes are out):
                # let what it asked for finish briefly, so that a refusal is still logged
                # as the reason the connection ended.
                drained = asyncio.get_running_loop().create_task(answers.join())
                try:
                    await asyncio.wait(
                        {responder, drained},
                        timeout=ANSWERS_GRACE_S,
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                except asyncio.CancelledError:
                    pass  # the responder failed meanwhile: its callback cancelled us
                finally:
                    drained.cancel()
            if responder.done() and not responder.cancelled():
                failed = responder.exception()
                if failed is not None:
                    if serving.cancelling():
                        serving.uncancel()
                    raise failed from None
            raise
        finally:
            responder.cancel()
            while not answers.empty():
                left = answers.get_nowait()
                if isinstance(left, asyncio.Task):
                    left.cancel()
                elif isinstance(left, list):
                    _close_ranges(left)

    async def _read_requests(
        self,
        reader: asyncio.StreamReader,
        conn: _Conn,
        answers: asyncio.Queue[_Answer],
        room: asyncio.Semaphore,
    ) -> None:
        loop = asyncio.get_running_loop()
        while True:
            (size,) = _SIZE.unpack(await reader.readexactly(4))
            limit = (
                self.request_bytes_max
                if conn.session.authenticated
                else min(self.request_bytes_max, UNAUTHENTICATED_BYTES_MAX)
            )
            if size < (0 if conn.raw_tokens else 8) or size > limit:
                raise MalformedRequestError(f"request size {size} outside [8, {limit}]")
            frame = await reader.readexactly(size)
            if (
                not conn.raw_tokens
                and conn.session.authenticated
                and len(frame) >= 2
                and _API_KEY.unpack_from(frame)[0] == PRODUCE
            ):
                await room.acquire()
                # The next request waits until this one's batches are in the log, or it
                # ended without (refused, failed): appends keep the order they were sent in.
                appended: asyncio.Future[None] = loop.create_future()

                def settle(*_: object, fut: asyncio.Future[None] = appended) -> None:
                    if not fut.done():
                        fut.set_result(None)

                context = contextvars.copy_context()
                context.run(PRODUCE_APPENDED.set, settle)
                task = loop.create_task(self.handle_frame(frame, conn), context=context)
                task.add_done_callback(settle)
                answers.put_nowait(task)
                await appended
                continue
            # Anything else is served alone, once every answer before it is out.
            await answers.join()
            out = (
                await self._raw_token(conn, frame)
                if conn.raw_tokens
                else await self.handle_frame(frame, conn)
            )
            if out is not None:
                answers.put_nowait(out)
                await answers.join()

    async def _respond(
        self,
        answers: asyncio.Queue[_Answer],
        room: asyncio.Semaphore,
        writer: asyncio.StreamWriter,
    ) -> None:
        # A fetch answer reaches a TLS connection in slices (common.tls_writes).
        send = sliced(writer.transport).write
        while True:
            item = await answers.get()
            try:
                if isinstance(item, asyncio.Task):
                    try:
                        out = await item
                    finally:
                        room.release()
                else:
                    out = item
                if isinstance(out, list):
                    await self._send_parts(writer, out)
                elif out is not None:
                    send(out)
                    await writer.drain()
            finally:
                answers.task_done()

    async def _send_parts(self, writer: asyncio.StreamWriter, parts: list[Part]) -> None:
        sent = await send_parts(writer, parts)
        self.sendfile_responses += 1
        self.sendfile_bytes += sent

    async def handle_frame(
        self, frame: bytes, conn: _Conn | None = None
    ) -> bytes | list[Part] | None:
        """The response frame for one request frame; None when none is due (acks=0). A
        Fetch answer with file ranges is a list of parts (``api.kafka.zerocopy.splice``)
        whose ranges the caller sends and closes."""
        header = parse_header(frame)
        self.requests += 1
        key, version = header.api_key, header.api_version
        if key == API_VERSIONS and not supports(key, version):
            return unsupported_api_versions_frame(header.correlation_id)
        if not supports(key, version) or (key == PRODUCE and version < PRODUCE_SERVED_MIN):
            raise MalformedRequestError(
                f"api {key} v{version} is not served (client {header.client_id!r})"
            )
        if (
            conn is not None
            and not conn.session.authenticated
            and key not in (API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE)
        ):
            # Kafka's SaslServerAuthenticator: an illegal request during the handshake.
            raise ConnectionRefusedByPolicy(
                f"api {key} before SASL authentication (client {header.client_id!r})"
            )
        req = decode_request(header, frame)
        if key == API_VERSIONS:
            body = api_versions_body(version)
        elif key == SASL_HANDSHAKE:
            return self._handshake(header, req, conn)
        elif key == SASL_AUTHENTICATE:
            return await self._authenticate(header, req, conn)
        else:
            if conn is not None:
                # Decisions are kept for one request only: an ACL change applies to the
                # connection's next request, as in Kafka.
                conn.session.cache.clear()
            body = await _HANDLERS[key](self.ctx, version, req)
            if body is None:
                return None
            if isinstance(body, PlannedResponse):
                try:
                    frame_out = encode_response(key, version, header.correlation_id, body.body)
                    return splice(frame_out, body.ranges, is_flexible(key, version))
                except BaseException:
                    body.close()
                    raise
        return encode_response(key, version, header.correlation_id, body)

    # ---------------------------------------------------------------- SASL

    def _handshake(self, header: RequestHeader, req: Any, conn: _Conn | None) -> bytes:
        version = header.api_version
        mod = response_module(SASL_HANDSHAKE, version)
        offered = self.security.mechanisms if self.security.sasl else ()

        def answer(err: ErrorCode) -> bytes:
            body = build(mod, "SaslHandshakeResponse", error_code=err, mechanisms=offered)
            return encode_response(SASL_HANDSHAKE, version, header.correlation_id, body)

        if conn is None or not self.security.sasl or conn.session.authenticated:
            # Kafka: a handshake on a listener without SASL, or a second one (no re-
            # authentication is offered: session lifetimes are 0).
            return answer(ErrorCode.illegal_sasl_state)
        if conn.exchange is not None:
            raise ConnectionRefusedByPolicy(
                "a second SaslHandshake", answer(ErrorCode.illegal_sasl_state)
            )
        mechanism = str(req.mechanism)
        if mechanism not in offered:
            raise ConnectionRefusedByPolicy(
                f"SASL mechanism {mechanism[:40]!r} is not enabled",
                answer(ErrorCode.unsupported_sasl_mechanism),
            )
        assert self.security.users is not None
        conn.mechanism = mechanism
        conn.exchange = new_exchange(mechanism, self.security.users, _nonce)
        conn.raw_tokens = version == 0
        return answer(ErrorCode.none)

    async def _step(self, conn: _Conn, token: bytes) -> bytes:
        """One step of the exchange; ``SaslFailedError`` is counted and logged here."""
        assert conn.exchange is not None
        logins = self.security.logins
        if logins is not None and not conn.delayed:
            conn.delayed = True  # once per connection: its exchange's first step
            delay_ms = logins.delay_ms(conn.source)
            if delay_ms:
                await asyncio.sleep(delay_ms / 1000)
        try:
            out = conn.exchange.step(token)
        except SaslFailedError as e:
            self._failed(conn.source, e.claimed, f"{conn.mechanism}: {e}")
            raise
        if conn.exchange.principal is not None:
            conn.session.principal = conn.exchange.principal
            conn.session.authenticated = True
            conn.raw_tokens = False
            if logins is not None:
                logins.on_success(conn.source)
            log.debug(
                "kafka listener %s: %s authenticated %s from %s",
                self.security.name,
                conn.mechanism,
                conn.session.principal,
                conn.source,
            )
        return out

    async def _authenticate(self, header: RequestHeader, req: Any, conn: _Conn | None) -> bytes:
        version = header.api_version
        mod = response_module(SASL_AUTHENTICATE, version)

        def answer(err: ErrorCode, message: str | None = None, data: bytes = b"") -> bytes:
            body = build(
                mod,
                "SaslAuthenticateResponse",
                error_code=err,
                error_message=message,
                auth_bytes=data,
                session_lifetime=_ZERO,
            )
            return encode_response(SASL_AUTHENTICATE, version, header.correlation_id, body)

        if conn is None or conn.exchange is None or conn.session.authenticated:
            if conn is not None and not conn.session.authenticated:
                raise ConnectionRefusedByPolicy(
                    "SaslAuthenticate before SaslHandshake",
                    answer(ErrorCode.illegal_sasl_state, "SaslHandshake first"),
                )
            return answer(ErrorCode.illegal_sasl_state, "no SASL exchange is in progress")
        try:
            out = await self._step(conn, bytes(req.auth_bytes))
        except SaslFailedError as e:
            raise ConnectionRefusedByPolicy(
                "SASL authentication failed",
                answer(ErrorCode.sasl_authentication_failed, str(e)),
            ) from None
        return answer(ErrorCode.none, None, out)

    async def _raw_token(self, conn: _Conn, token: bytes) -> bytes:
        """SaslHandshake v0's framing: a bare token in, a bare token out (size-prefixed)."""
        try:
            out = await self._step(conn, token)
        except SaslFailedError:
            raise ConnectionRefusedByPolicy("SASL authentication failed") from None
        if conn.session.authenticated and not out:
            return _SIZE.pack(0)
        return _SIZE.pack(len(out)) + out


def _close_ranges(parts: list[Part]) -> None:
    for part in parts:
        if isinstance(part, FileRange):
            part.close()


async def send_parts(writer: asyncio.StreamWriter, parts: list[Part]) -> int:
    """One response of bytes and file ranges, in order, on a plaintext connection; the
    record bytes sent by ``sendfile``. The ranges are closed whatever happens."""
    try:
        transport = writer.transport
        if transport.is_closing():
            raise ConnectionResetError("the connection closed before a fetch answer")
        # A descriptor of our own for the socket: the transport closes its own when the
        # connection is lost, and that number could then name another file or connection.
        # (The loop also refuses a second watcher on the transport's own.)
        sock_fd = os.dup(transport.get_extra_info("socket").fileno())
        try:
            sent = 0
            for part in parts:
                if isinstance(part, FileRange):
                    await _drained(writer)
                    await _sendfile(sock_fd, part)
                    sent += part.size_bytes
                else:
                    transport.write(part)
        finally:
            os.close(sock_fd)
        await writer.drain()
        return sent
    finally:
        for part in parts:
            if isinstance(part, FileRange):
                part.close()


async def _drained(writer: asyncio.StreamWriter) -> None:
    """Until the transport has written everything it holds (a range is sent past it)."""
    transport = writer.transport
    if not transport.get_write_buffer_size():
        return
    low, high = transport.get_write_buffer_limits()
    # With a high-water mark of 0, any byte held pauses the writer and ``drain`` returns
    # only once the buffer is empty (resume at a low-water mark of 0).
    transport.set_write_buffer_limits(high=0, low=0)
    try:
        while transport.get_write_buffer_size():
            await writer.drain()
            if transport.is_closing():
                raise ConnectionResetError("the connection closed during a fetch answer")
    finally:
        transport.set_write_buffer_limits(high=high, low=low)


async def _sendfile(sock_fd: int, rng: FileRange) -> None:
    """All of ``rng`` into the (non-blocking) socket ``sock_fd``, a descriptor no transport
    watches; ``RangeCutShortError`` if its file ends first."""
    loop = asyncio.get_running_loop()
    offset, left = rng.position, rng.size_bytes
    while left:
        try:
            n = os.sendfile(sock_fd, rng.fd, offset, left)
        except BlockingIOError:
            await _writable(loop, sock_fd)
            continue
        if n == 0:
            raise RangeCutShortError(
                f"a segment file ended at {offset}, {left} bytes before the range it "
                "was to send (truncated meanwhile)"
            )
        offset += n
        left -= n


async def _writable(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    fut: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not fut.done():
            fut.set_result(None)

    loop.add_writer(fd, ready)
    try:
        await fut
    finally:
        loop.remove_writer(fd)


def _nonce() -> str:
    return secrets.token_urlsafe(24)


_ZERO = datetime.timedelta(0)
