"""The Kafka listener's SASL exchanges (api.kafka.sasl) against an independent client: the
SCRAM client of kafka-python, and PLAIN and OAUTHBEARER messages as RFC 4616/7628 write
them. Nothing here sends a password anywhere an error message could carry it."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from api.kafka.sasl import (
    MECHANISMS,
    SaslFailedError,
    ScramExchange,
    new_exchange,
)
from metalog.security import ScramCredential

scram = pytest.importorskip("kafka.net.sasl.scram")


@dataclass
class Users:
    creds: dict[tuple[str, str], ScramCredential] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)

    def add(self, user: str, password: str, mechanism: str) -> None:
        self.creds[(user, mechanism)] = ScramCredential.derive(
            mechanism, password, b"salt-" + user.encode(), 4096
        )

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.creds.get((user, mechanism))

    def plain_principal(self, user: str, password: str) -> str | None:
        c = self.creds.get((user, "SCRAM-SHA-512"))
        return f"User:{user}" if c is not None and c.verify(password) else None

    def bearer_principal(self, token: str) -> str | None:
        if token not in self.tokens:
            raise SaslFailedError("bearer token refused")
        return self.tokens[token]


@pytest.fixture
def users() -> Users:
    u = Users(tokens={"good-token": "User:tok"})
    for m in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        u.add("alice", "s3cret", m)
        u.add("we,ird=name", "pw", m)
    return u


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_exchange_with_kafka_pythons_client(users: Users, mechanism: str) -> None:
    client = scram.ScramClient("alice", "s3cret", mechanism)
    ex = new_exchange(mechanism, users, lambda: "servernonce")
    server_first = ex.step(client.first_message())
    assert ex.principal is None
    client.process_server_first_message(server_first)
    server_final = ex.step(client.final_message())
    client.process_server_final_message(server_final)  # raises on a wrong server signature
    assert ex.principal == "User:alice"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_wrong_password_fails_without_naming_it(users: Users, mechanism: str) -> None:
    client = scram.ScramClient("alice", "guess", mechanism)
    ex = new_exchange(mechanism, users, lambda: "n")
    client.process_server_first_message(ex.step(client.first_message()))
    with pytest.raises(SaslFailedError) as e:
        ex.step(client.final_message())
    assert e.value.claimed == "User:alice"
    assert "guess" not in str(e.value) and ex.principal is None


def test_scram_unknown_user_and_wrong_mechanism_fail_at_once(users: Users) -> None:
    with pytest.raises(SaslFailedError):
        new_exchange("SCRAM-SHA-256", users, lambda: "n").step(b"n,,n=mallory,r=abc")
    users.creds.pop(("alice", "SCRAM-SHA-512"))
    with pytest.raises(SaslFailedError):  # alice has no SHA-512 credential any more
        new_exchange("SCRAM-SHA-512", users, lambda: "n").step(b"n,,n=alice,r=abc")


def test_scram_escaped_names_and_tampered_nonce(users: Users) -> None:
    ex = ScramExchange("SCRAM-SHA-256", users, "srv")
    first = ex.step(b"n,,n=we=2Cird=3Dname,r=abc").decode()
    assert first.startswith("r=abcsrv,")
    with pytest.raises(SaslFailedError, match="nonce"):
        ex.step(b"c=biws,r=abcXXX,p=AAAA")
    with pytest.raises(SaslFailedError, match="user name"):
        ScramExchange("SCRAM-SHA-256", users, "s").step(b"n,,n=bad=name,r=abc")
    with pytest.raises(SaslFailedError, match="extensions"):  # delegation tokens: not served
        ScramExchange("SCRAM-SHA-256", users, "s").step(b"n,,n=alice,r=abc,tokenauth=true")


def test_plain(users: Users) -> None:
    ok = new_exchange("PLAIN", users, lambda: "")
    assert ok.step(b"\0alice\0s3cret") == b"" and ok.principal == "User:alice"
    same = new_exchange("PLAIN", users, lambda: "")
    same.step(b"alice\0alice\0s3cret")
    assert same.principal == "User:alice"
    for bad in (b"\0alice\0nope", b"bob\0alice\0s3cret", b"alice", b"\0\0x"):
        with pytest.raises(SaslFailedError) as e:
            new_exchange("PLAIN", users, lambda: "").step(bad)
        assert "s3cret" not in str(e.value) and "nope" not in str(e.value)


def test_oauthbearer(users: Users) -> None:
    ex = new_exchange("OAUTHBEARER", users, lambda: "")
    ex.step(b"n,,\x01auth=Bearer good-token\x01\x01")
    assert ex.principal == "User:tok"
    for bad in (b"n,,\x01auth=Bearer nope\x01\x01", b"n,,\x01\x01", b"garbage"):
        with pytest.raises(SaslFailedError):
            new_exchange("OAUTHBEARER", users, lambda: "").step(bad)


def test_every_mechanism_has_an_exchange(users: Users) -> None:
    for m in MECHANISMS:
        assert new_exchange(m, users, lambda: "n").principal is None
    with pytest.raises(ValueError):
        new_exchange("GSSAPI", users, lambda: "n")


def test_scram_refuses_the_client_nonce_sent_twice(users: Users) -> None:
    """librdkafka before 2.6.1 sends ``r=<client nonce><whole nonce>`` (librdkafka#4895);
    Kafka 4 refuses it since CVE-2024-56128 (RFC 5802: the nonce must be the server's)."""
    client = scram.ScramClient("alice", "s3cret", "SCRAM-SHA-256")
    ex = new_exchange("SCRAM-SHA-256", users, lambda: "srv")
    client.process_server_first_message(ex.step(client.first_message()))
    final = client.final_message().replace(b"r=", b"r=" + client.nonce[: -len(b"srv")], 1)
    with pytest.raises(SaslFailedError, match="nonce"):
        ex.step(final)
