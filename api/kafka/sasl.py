"""SASL exchanges of the Kafka listener (issue 18): PLAIN, SCRAM-SHA-256/512, OAUTHBEARER.

Pure: no I/O, no clock. ``new_exchange(mechanism, users)`` starts a server-side exchange;
``step(client_bytes)`` answers each client message until ``principal`` is set (success) or
``SaslFailedError`` is raised (the listener then answers SASL_AUTHENTICATION_FAILED and
closes the connection, as Kafka does). ``SaslFailedError.claimed`` is the user the client
claimed, for the log; no message of this module ever carries a password, proof or token.

* PLAIN (RFC 4616): one message ``authzid NUL user NUL password``; an authzid other than
  empty or the user is refused, as Kafka's PlainSaslServer does. The password is checked by
  ``Users.plain_principal`` against the user's SCRAM credentials (the HTTP Basic path).
* SCRAM-SHA-256/512 (RFC 5802, RFC 7677), against the ``ScramCredential`` records of the
  metadata log (KIP-554), the same users HTTP Basic checks:

      client-first  n,,n=user,r=<client nonce>
      server-first  r=<client nonce><server nonce>,s=<salt>,i=<iterations>
      client-final  c=biws,r=<nonce>,p=<proof>
      server-final  v=<server signature>

  The proof is checked as the RFC says: ``H(proof XOR HMAC(StoredKey, AuthMessage)) ==
  StoredKey``. SCRAM extensions (Kafka's ``tokenauth`` for delegation tokens) are refused:
  delegation tokens are not served.
* OAUTHBEARER (RFC 7628, KIP-255): ``n,,\\x01auth=Bearer <jwt>\\x01\\x01``, validated by the
  listener's JWT settings (the HTTP listener's Bearer check); refused where none are set.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from metalog.security import SCRAM_MECHANISMS, ScramCredential

PLAIN = "PLAIN"
OAUTHBEARER = "OAUTHBEARER"
MECHANISMS = (PLAIN, "SCRAM-SHA-256", "SCRAM-SHA-512", OAUTHBEARER)


class SaslFailedError(Exception):
    """Authentication failed. ``str()`` is safe to send to the client and to log."""

    def __init__(self, message: str, claimed: str = "") -> None:
        super().__init__(message)
        self.claimed = claimed


class Users(Protocol):
    """Where the listener checks credentials (built by ``api.node.kafka_security``)."""

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None: ...

    def plain_principal(self, user: str, password: str) -> str | None:
        """``User:<user>`` when ``password`` is the user's, else None."""
        ...

    def bearer_principal(self, token: str) -> str | None:
        """The principal of a valid token; None when bearer tokens are not configured.
        Raises ``SaslFailedError`` for a token that does not validate."""
        ...


class Exchange(Protocol):
    principal: str | None

    def step(self, data: bytes) -> bytes: ...


@dataclass
class PlainExchange:
    users: Users
    principal: str | None = None

    def step(self, data: bytes) -> bytes:
        parts = data.split(b"\0")
        if len(parts) != 3:
            raise SaslFailedError("malformed PLAIN message")
        try:
            authzid, user, password = (p.decode() for p in parts)
        except UnicodeDecodeError:
            raise SaslFailedError("malformed PLAIN message") from None
        if not user:
            raise SaslFailedError("PLAIN message without a user name")
        if authzid and authzid != user:
            raise SaslFailedError("authorization id differs from the user name", f"User:{user}")
        principal = self.users.plain_principal(user, password)
        if principal is None:
            raise SaslFailedError(_INVALID.format(PLAIN), f"User:{user}")
        self.principal = principal
        return b""


_INVALID = "Authentication failed: invalid credentials with SASL mechanism {}"


def _attributes(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise SaslFailedError("malformed SCRAM message")
        out.setdefault(key, value)
    return out


def _scram_name(raw: str) -> str:
    # RFC 5802 §5.1: ',' and '=' in a name are sent as =2C and =3D; any other '=' is invalid.
    if "=" in raw.replace("=2C", "").replace("=3D", ""):
        raise SaslFailedError("malformed SCRAM user name")
    return raw.replace("=2C", ",").replace("=3D", "=")


@dataclass
class ScramExchange:
    mechanism: str
    users: Users
    server_nonce: str
    principal: str | None = None
    _state: str = "first"
    _client_first_bare: str = ""
    _server_first: str = ""
    _nonce: str = ""
    _gs2: str = ""
    _user: str = ""
    _cred: ScramCredential | None = None

    def step(self, data: bytes) -> bytes:
        try:
            text = data.decode()
        except UnicodeDecodeError:
            raise SaslFailedError("malformed SCRAM message") from None
        if self._state == "first":
            return self._first(text)
        if self._state == "final":
            return self._final(text)
        raise SaslFailedError("SCRAM exchange already complete")

    def _first(self, text: str) -> bytes:
        # gs2-header: channel binding flag, authzid, then the bare message.
        flag, sep1, rest = text.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not (sep1 and sep2) or flag not in ("n", "y"):
            raise SaslFailedError("malformed SCRAM client-first message (no channel binding)")
        attrs = _attributes(bare)
        user = _scram_name(attrs.get("n", ""))
        nonce = attrs.get("r", "")
        if not user or not nonce:
            raise SaslFailedError("SCRAM client-first message without a user or nonce")
        if authzid and _scram_name(authzid.removeprefix("a=")) != user:
            raise SaslFailedError("authorization id differs from the user name", f"User:{user}")
        if set(attrs) - {"n", "r"}:
            raise SaslFailedError("SCRAM extensions are not supported", f"User:{user}")
        cred = self.users.scram_credential(user, self.mechanism)
        if cred is None:
            raise SaslFailedError(_INVALID.format(self.mechanism), f"User:{user}")
        self._user, self._cred, self._gs2 = user, cred, f"{flag},{authzid},"
        self._client_first_bare = bare
        self._nonce = nonce + self.server_nonce
        salt = base64.b64encode(cred.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={cred.iterations}"
        self._state = "final"
        return self._server_first.encode()

    def _final(self, text: str) -> bytes:
        assert self._cred is not None
        claimed = f"User:{self._user}"
        self._state = "done"
        without_proof, sep, proof_attr = text.rpartition(",p=")
        if not sep:
            raise SaslFailedError("SCRAM client-final message without a proof", claimed)
        attrs = _attributes(without_proof)
        try:
            binding = base64.b64decode(attrs.get("c", ""), validate=True).decode()
            proof = base64.b64decode(proof_attr, validate=True)
        except (binascii.Error, UnicodeDecodeError):
            raise SaslFailedError("malformed SCRAM client-final message", claimed) from None
        if binding != self._gs2 or attrs.get("r") != self._nonce:
            raise SaslFailedError("SCRAM channel binding or nonce mismatch", claimed)
        digest = SCRAM_MECHANISMS[self.mechanism]
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac.new(self._cred.stored_key, auth_message, digest).digest()
        if len(proof) != len(signature):
            raise SaslFailedError(_INVALID.format(self.mechanism), claimed)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(digest, client_key).digest(), self._cred.stored_key):
            raise SaslFailedError(_INVALID.format(self.mechanism), claimed)
        self.principal = claimed
        server_sig = hmac.new(self._cred.server_key, auth_message, digest).digest()
        return b"v=" + base64.b64encode(server_sig)


@dataclass
class OAuthBearerExchange:
    users: Users
    principal: str | None = None

    def step(self, data: bytes) -> bytes:
        try:
            text = data.decode()
        except UnicodeDecodeError:
            raise SaslFailedError("malformed OAUTHBEARER message") from None
        gs2, sep, rest = text.partition("\x01")
        if not sep or not gs2.startswith(("n,", "y,")):
            raise SaslFailedError("malformed OAUTHBEARER message")
        token = None
        for kv in rest.split("\x01"):
            key, _, value = kv.partition("=")
            if key == "auth" and value.lower().startswith("bearer "):
                token = value[7:].strip()
        if not token:
            raise SaslFailedError("OAUTHBEARER message without a bearer token")
        principal = self.users.bearer_principal(token)
        if principal is None:
            raise SaslFailedError("no bearer token issuer is configured on this listener")
        self.principal = principal
        return b""


def new_exchange(mechanism: str, users: Users, nonce: Callable[[], str]) -> Exchange:
    """A server-side exchange of ``mechanism`` (one of ``MECHANISMS``); ``nonce`` gives the
    server's SCRAM nonce (random printable characters without ',')."""
    if mechanism == PLAIN:
        return PlainExchange(users)
    if mechanism in SCRAM_MECHANISMS:
        return ScramExchange(mechanism, users, nonce())
    if mechanism == OAUTHBEARER:
        return OAuthBearerExchange(users)
    raise ValueError(f"unknown SASL mechanism {mechanism!r}")
