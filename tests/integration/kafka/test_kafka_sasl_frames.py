"""The Kafka listener's SASL states byte by byte (api.kafka.server), on a real socket, without
a cluster: what librdkafka never sends (SaslHandshake v0 and its bare tokens, a mechanism
that is not enabled, SaslAuthenticate before SaslHandshake, a handshake on a listener without
SASL) is answered as Kafka's SaslServerAuthenticator answers it."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable

from api.kafka.security import ListenerSecurity
from api.kafka.server import KafkaListener
from metalog.security import ScramCredential

CRED = ScramCredential.derive("SCRAM-SHA-512", "pw", b"salt", 4096)


class Users:
    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return CRED if (user, mechanism) == ("alice", "SCRAM-SHA-512") else None

    def plain_principal(self, user: str, password: str) -> str | None:
        return f"User:{user}" if user == "alice" and CRED.verify(password) else None

    def bearer_principal(self, token: str) -> str | None:
        return None


class Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.cid = reader, writer, 0

    async def call(self, api_key: int, version: int, body: bytes = b"") -> bytes:
        """Send one request (header v1: none of these versions is flexible); the answer
        after its correlation id."""
        self.cid += 1
        header = struct.pack(">hhih", api_key, version, self.cid, 1) + b"t"
        self.writer.write(struct.pack(">i", len(header) + len(body)) + header + body)
        answer = await self.raw_answer()
        assert struct.unpack_from(">i", answer)[0] == self.cid
        return answer[4:]

    async def raw(self, token: bytes) -> bytes:
        self.writer.write(struct.pack(">i", len(token)) + token)
        return await self.raw_answer()

    async def raw_answer(self) -> bytes:
        (size,) = struct.unpack(">i", await self.reader.readexactly(4))
        return await self.reader.readexactly(size)

    async def closed(self) -> bool:
        return await self.reader.read(1) == b""


def string(s: str) -> bytes:
    return struct.pack(">h", len(s)) + s.encode()


def handshake_error(answer: bytes) -> int:
    return int(struct.unpack_from(">h", answer)[0])


async def listener(protocol: str) -> KafkaListener:
    sec = ListenerSecurity(
        "KAFKA", protocol, mechanisms=("PLAIN", "SCRAM-SHA-512"), users=Users(), anonymous=True
    )
    lst = KafkaListener(None, security=sec)  # type: ignore[arg-type]  # no API reaches ctx
    await lst.start("127.0.0.1", 0)
    return lst


def on_listener(
    protocol: str = "SASL_PLAINTEXT",
) -> Callable[[Callable[[KafkaListener], Awaitable[None]]], Callable[[], None]]:
    """Run the test body against a fresh listener of ``protocol`` in its own event loop."""

    def wrap(body: Callable[[KafkaListener], Awaitable[None]]) -> Callable[[], None]:
        def test() -> None:
            async def run() -> None:
                lst = await listener(protocol)
                try:
                    async with asyncio.timeout(30):
                        await body(lst)
                finally:
                    await lst.close()

            asyncio.run(run())

        # Not functools.wraps: pytest would read the body's parameters as fixtures.
        test.__name__, test.__doc__ = body.__name__, body.__doc__
        return test

    return wrap


async def connect(lst: KafkaListener) -> Conn:
    return Conn(*await asyncio.open_connection("127.0.0.1", lst.port))


@on_listener()
async def test_handshake_v0_then_a_bare_plain_token(sasl: KafkaListener) -> None:
    c = await connect(sasl)
    assert handshake_error(await c.call(17, 0, string("PLAIN"))) == 0
    assert await c.raw(b"\0alice\0pw") == b""  # authenticated: an empty token back
    answer = await c.call(18, 0)  # then ordinary requests
    assert struct.unpack_from(">h", answer)[0] == 0


@on_listener()
async def test_handshake_v0_wrong_password_closes(sasl: KafkaListener) -> None:
    c = await connect(sasl)
    assert handshake_error(await c.call(17, 0, string("PLAIN"))) == 0
    c.writer.write(struct.pack(">i", 9) + b"\0alice\0no")
    assert await c.closed()


@on_listener()
async def test_a_mechanism_not_enabled_is_refused_and_closed(sasl: KafkaListener) -> None:
    c = await connect(sasl)
    answer = await c.call(17, 1, string("GSSAPI"))
    assert handshake_error(answer) == 33  # UNSUPPORTED_SASL_MECHANISM, with what is enabled
    assert b"PLAIN" in answer and b"SCRAM-SHA-512" in answer
    assert await c.closed()


@on_listener()
async def test_authenticate_before_handshake_is_illegal(sasl: KafkaListener) -> None:
    c = await connect(sasl)
    answer = await c.call(36, 0, struct.pack(">i", 0))
    assert handshake_error(answer) == 34  # ILLEGAL_SASL_STATE
    assert await c.closed()


@on_listener()
async def test_plain_over_sasl_authenticate_then_a_failure_is_58(sasl: KafkaListener) -> None:
    good = await connect(sasl)
    assert handshake_error(await good.call(17, 1, string("PLAIN"))) == 0
    token = b"\0alice\0pw"
    answer = await good.call(36, 1, struct.pack(">i", len(token)) + token)
    assert handshake_error(answer) == 0
    bad = await connect(sasl)
    await bad.call(17, 1, string("PLAIN"))
    token = b"\0alice\0secret-guess"
    answer = await bad.call(36, 1, struct.pack(">i", len(token)) + token)
    assert handshake_error(answer) == 58  # SASL_AUTHENTICATION_FAILED
    assert b"secret-guess" not in answer and b"invalid credentials" in answer
    assert await bad.closed()


@on_listener("PLAINTEXT")
async def test_a_handshake_without_sasl_is_illegal_but_harmless(lst: KafkaListener) -> None:
    c = await connect(lst)
    assert handshake_error(await c.call(17, 1, string("PLAIN"))) == 34
    answer = await c.call(18, 0)  # the connection goes on
    assert struct.unpack_from(">h", answer)[0] == 0
