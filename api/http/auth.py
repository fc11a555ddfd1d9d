"""Authentication on a listener (issue 18): who is asking, or 401.

The node layer tells each request which listener it came in on (``request[LISTENER_AUTH]``,
a ``ListenerAuth``); ``auth_middleware`` then decides its principal (``request[PRINCIPAL]``):

1. An ``Authorization`` header, on a listener that takes HTTP credentials (SASL_PLAINTEXT,
   SASL_SSL):
   * ``Basic`` user:password, checked against the user's SCRAM credentials in the metadata
     log (``Credentials``; KIP-554), SCRAM-SHA-512 first: ``User:<user>``;
   * ``Bearer`` a JWT signed by the configured issuer key (PEM file or JWKS file, chosen by
     ``kid``), ``exp`` required and checked with ``nbf``, ``iss`` and ``aud`` when configured:
     ``User:<claim>`` (``jwt_principal_claim``, ``sub`` by default).
   Bad credentials are never silently downgraded to anonymous.
2. Else a verified client certificate (SSL, SASL_SSL): ``User:`` + the subject mapped by the
   listener's ``ssl_principal_mapping_rules``.
3. Else ``User:ANONYMOUS`` where the listener allows it (PLAINTEXT by default).
4. Else 401 ``{"error_code": 40101}``.

A failure is counted (``AuthState.failed_logins``), logged with the principal it claimed and
the source address (never the password or token), and slows that source down
(``api.http.principals.LoginThrottle``: its later attempts wait before they are checked).

SCRAM verification is PBKDF2 with thousands of iterations, on purpose slow; a successful
Basic login is remembered as an HMAC of user and password under a key random per process
(never the password), bound to the credential it matched, so a keep-alive client pays once
and a changed or removed credential takes effect at once.

The liveness and readiness probes (``/v3/health``, ``/v3/health/ready``) need no credentials.

Principal propagation: a broker forwarding a request sends the user's principal in
``Longboat-Principal``; it is believed only from a node principal (a super user), and becomes
the request's principal (``request[VIA]`` keeps the node's); from anybody else it is ignored.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import jwt
from aiohttp import web

from api.http.errors import JSON
from api.http.principals import LoginThrottle, PrincipalMapper, PrincipalMappingError, subject_dn
from common.principal import CURRENT_PRINCIPAL, PRINCIPAL_HEADER
from metalog.image import MetadataImage
from metalog.security import ANONYMOUS, AclBinding, ResourceType, ScramCredential

log = logging.getLogger(__name__)

EXEMPT_PATHS = frozenset({"/v3/health", "/v3/health/ready"})
SCRAM_ORDER = ("SCRAM-SHA-512", "SCRAM-SHA-256")
JWT_ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"]
"""Asymmetric only: an HMAC algorithm would let the public key sign tokens."""
VERIFIED_CACHE_MAX = 4096


class Credentials(Protocol):
    """Where users' SCRAM credentials are (the metadata image's ScramImage, once wired)."""

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None: ...


class AclSource(Protocol):
    """The ACL bindings in force (the metadata image's AclsImage, once wired)."""

    def acls_for(self, resource_type: ResourceType) -> Iterable[AclBinding]:
        """The bindings that can match a resource of ``resource_type``."""
        ...

    def acls_on(self, resource_type: ResourceType, name: str) -> Iterable[AclBinding]:
        """The bindings that can match the resource ``name`` of ``resource_type`` (a subset
        of ``acls_for``: what one decision needs to look at)."""
        ...


@dataclass
class StaticCredentials:
    """Credentials held in memory: tests, and a node before the metadata log is wired."""

    users: dict[tuple[str, str], ScramCredential] = field(default_factory=dict)

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.users.get((user, mechanism))


@dataclass
class StaticAcls:
    bindings: list[AclBinding] = field(default_factory=list)

    def acls_for(self, resource_type: ResourceType) -> Iterable[AclBinding]:
        return [b for b in self.bindings if b.resource_type is resource_type]

    def acls_on(self, resource_type: ResourceType, name: str) -> Iterable[AclBinding]:
        return [b for b in self.bindings if b.matches_resource(resource_type, name)]


class AuthenticationError(Exception):
    def __init__(self, message: str, claimed: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.claimed = claimed


class CredentialsNotCurrentError(Exception):
    """A user this node does not know yet, asked before its metadata first caught up with
    the controller's: the user may be in the log it has not read. Answered 503 (retriable),
    not 401, as Kafka's broker serves no client before its initial catch-up."""


@dataclass(frozen=True)
class JwtSettings:
    keys: dict[str | None, Any]
    """``kid`` -> key; the ``None`` entry is the key for tokens without a ``kid``."""
    issuer: str | None
    audience: str | None
    principal_claim: str

    @classmethod
    def load(
        cls,
        public_key_file: Path | None,
        jwks_file: Path | None,
        issuer: str | None,
        audience: str | None,
        principal_claim: str,
    ) -> JwtSettings:
        keys: dict[str | None, Any] = {}
        if public_key_file is not None:
            keys[None] = public_key_file.read_text()
        if jwks_file is not None:
            for k in jwt.PyJWKSet.from_json(jwks_file.read_text()).keys:
                keys[k.key_id] = k.key
                keys.setdefault(None, k.key)
        return cls(keys, issuer, audience, principal_claim)

    def principal(self, token: str) -> str:
        try:
            kid = jwt.get_unverified_header(token).get("kid")
            key = self.keys.get(kid)
            if key is None:
                raise AuthenticationError(f"token signed with an unknown key id {kid!r:.40}")
            claims = jwt.decode(
                token,
                key,
                algorithms=JWT_ALGORITHMS,
                issuer=self.issuer,
                audience=self.audience,
                options={"require": ["exp"], "verify_aud": self.audience is not None},
            )
        except jwt.PyJWTError as e:
            raise AuthenticationError(f"bearer token refused: {e}") from None
        name = claims.get(self.principal_claim)
        if not isinstance(name, str) or not name:
            raise AuthenticationError(f"bearer token has no {self.principal_claim!r} claim")
        return f"User:{name}"


@dataclass(frozen=True)
class ListenerAuth:
    """What authentication one listener does (built by ``api.node.listeners``)."""

    name: str
    kinds: frozenset[str]
    """``client``, ``broker``, ``controller``."""
    tls: bool
    http_auth: bool
    mechanisms: tuple[str, ...]
    anonymous: bool
    mapper: PrincipalMapper
    jwt: JwtSettings | None = None


LISTENER_AUTH: web.RequestKey[ListenerAuth] = web.RequestKey("listener_auth", ListenerAuth)
PRINCIPAL: web.RequestKey[str] = web.RequestKey("principal", str)
VIA: web.RequestKey[str] = web.RequestKey("via", str)
"""The node principal a propagated request came through."""


class AuthState:
    """One process's authentication state: sources, throttle, counters, verified cache."""

    def __init__(
        self,
        credentials: Credentials,
        *,
        super_users: frozenset[str] = frozenset(),
        throttle: LoginThrottle | None = None,
        clock_ms: Callable[[], int] = lambda: int(time.monotonic() * 1000),
    ) -> None:
        self.credentials = credentials
        self.super_users = super_users
        self.metadata_caught_up: Callable[[], bool] | None = None
        """Whether this node's metadata has caught up with the controller's (set by the
        broker); until it first has, an unknown user is not refused but told to retry."""
        self._caught_up_once = False
        self.throttle = throttle or LoginThrottle()
        self.clock_ms = clock_ms
        self.failed_logins: dict[str, int] = {}
        """Failures by listener name (``longboat_failed_logins`` on /metrics)."""
        self._key = secrets.token_bytes(32)
        self._verified: OrderedDict[bytes, ScramCredential] = OrderedDict()

    def basic_principal(self, user: str, password: str) -> str:
        creds = [
            c for m in SCRAM_ORDER if (c := self.credentials.scram_credential(user, m)) is not None
        ]
        if not creds:
            if not self._credentials_current():
                raise CredentialsNotCurrentError(
                    "this broker is still catching up with the metadata log and cannot "
                    "check the user yet; retry"
                )
            raise AuthenticationError("unknown user or wrong password", f"User:{user}")
        tag = hmac.new(self._key, f"{user}\0{password}".encode(), hashlib.sha256).digest()
        seen = self._verified.get(tag)
        if seen is not None and seen in creds:
            self._verified.move_to_end(tag)
            return f"User:{user}"
        for c in creds:
            if c.verify(password):
                self._verified[tag] = c
                while len(self._verified) > VERIFIED_CACHE_MAX:
                    self._verified.popitem(last=False)
                return f"User:{user}"
        raise AuthenticationError("unknown user or wrong password", f"User:{user}")

    def _credentials_current(self) -> bool:
        if self._caught_up_once or self.metadata_caught_up is None:
            return True
        self._caught_up_once = self.metadata_caught_up()
        return self._caught_up_once

    def note_failure(self, listener: str, source: str, claimed: str, why: str) -> None:
        self.failed_logins[listener] = self.failed_logins.get(listener, 0) + 1
        n = self.throttle.on_failure(source, self.clock_ms())
        log.warning(
            "authentication failed on listener %s from %s (principal %s, failure %d in a "
            "row from there): %s",
            listener,
            source,
            claimed or "none given",
            n,
            why,
        )


def failed_login_gauges(state: AuthState) -> Callable[[], list[tuple[str, str, float, Any]]]:
    """``longboat_failed_logins`` by listener, for ``BrokerMetrics.add_gauges``."""

    def gauges() -> list[tuple[str, str, float, Any]]:
        return [
            (
                "longboat_failed_logins",
                "Requests refused 401 since the process started, by listener",
                float(n),
                {"listener": name},
            )
            for name, n in sorted(state.failed_logins.items())
        ]

    return gauges


AUTH_STATE_KEY: web.AppKey[AuthState] = web.AppKey("auth_state", AuthState)


def _unauthorized(message: str, listener: ListenerAuth) -> web.Response:
    challenge = ", ".join(
        {"basic": 'Basic realm="longboat"', "bearer": 'Bearer realm="longboat"'}[m]
        for m in listener.mechanisms
        if listener.http_auth
    )
    headers = {"WWW-Authenticate": challenge} if challenge else {}
    return web.Response(
        status=401,
        body=b'{"error_code":40101,"message":' + _json_str(message) + b"}",
        content_type=JSON,
        headers=headers,
    )


def _json_str(s: str) -> bytes:
    import orjson

    return orjson.dumps(s)


def _peer_principal(request: web.Request, listener: ListenerAuth) -> str | None:
    if not listener.tls or request.transport is None:
        return None
    cert = request.transport.get_extra_info("peercert")
    if not cert:
        return None  # none sent, or not verified (ssl_client_auth none)
    dn = subject_dn(cert.get("subject"))
    try:
        return f"User:{listener.mapper.name(dn)}"
    except PrincipalMappingError as e:
        raise AuthenticationError(str(e), dn) from None


def _authenticate(request: web.Request, listener: ListenerAuth, state: AuthState) -> str:
    header = request.headers.get("Authorization")
    if header is not None:
        if not listener.http_auth:
            raise AuthenticationError(
                f"listener {listener.name} takes no HTTP credentials (it is not SASL_*)"
            )
        scheme, _, value = header.strip().partition(" ")
        scheme = scheme.lower()
        if scheme not in listener.mechanisms:
            raise AuthenticationError(
                f"{scheme or 'empty'} credentials are not accepted here (only "
                f"{', '.join(listener.mechanisms)})"
            )
        if scheme == "basic":
            try:
                user, sep, password = base64.b64decode(value, validate=True).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                raise AuthenticationError("malformed Basic credentials") from None
            if not sep or not user:
                raise AuthenticationError("malformed Basic credentials")
            return state.basic_principal(user, password)
        if listener.jwt is None:
            raise AuthenticationError("no bearer token issuer is configured")
        return listener.jwt.principal(value.strip())
    peer = _peer_principal(request, listener)
    if peer is not None:
        return peer
    if listener.anonymous:
        return ANONYMOUS
    raise AuthenticationError("credentials required")


def _source(request: web.Request) -> str:
    peer = request.transport.get_extra_info("peername") if request.transport else None
    return str(peer[0]) if peer else "unknown"


@web.middleware
async def auth_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    listener: ListenerAuth | None = request.get(LISTENER_AUTH)
    state = request.app.get(AUTH_STATE_KEY)
    if listener is None or state is None:
        request[PRINCIPAL] = ANONYMOUS  # not through a listener of ours (in-process tests)
        return await handler(request)
    if request.path in EXEMPT_PATHS:
        request[PRINCIPAL] = ANONYMOUS
        return await handler(request)
    source = _source(request)
    delay_ms = state.throttle.delay_ms(source, state.clock_ms())
    if delay_ms:
        await asyncio.sleep(delay_ms / 1000)
    try:
        principal = _authenticate(request, listener, state)
    except AuthenticationError as e:
        state.note_failure(listener.name, source, e.claimed, e.message)
        return _unauthorized(e.message, listener)
    except CredentialsNotCurrentError as e:
        return web.Response(
            status=503,
            body=b'{"error_code":50302,"message":' + _json_str(str(e)) + b"}",
            content_type=JSON,
            headers={"Retry-After": "1"},
        )
    if request.headers.get("Authorization") is not None:
        state.throttle.on_success(source)
    propagated = request.headers.get(PRINCIPAL_HEADER)
    if propagated is not None and principal in state.super_users:
        # From anybody else it is ignored: the request keeps its own principal, never more
        # than it had (and a plaintext cluster's ANONYMOUS forwarding keeps working).
        request[VIA] = principal
        principal = propagated
    request[PRINCIPAL] = principal
    token = CURRENT_PRINCIPAL.set(principal)
    try:
        return await handler(request)
    finally:
        CURRENT_PRINCIPAL.reset(token)


def principal_of(request: web.Request) -> str:
    principal: str = request.get(PRINCIPAL, ANONYMOUS)
    return principal


class ImageSecurity:
    """Users and ACLs from the broker's (or controller's) current metadata image: the
    ``ScramImage`` and ``AclsImage`` the metadata log's SCRAM and ACL records build (issue 18),
    so every node checks the same users and a change reaches all of them through the log."""

    def __init__(self, image: Callable[[], MetadataImage]) -> None:
        self.image = image

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.image().scram.get(user, mechanism)

    def acls_for(self, resource_type: ResourceType) -> Iterable[AclBinding]:
        return self.image().acls.for_type(resource_type)

    def acls_on(self, resource_type: ResourceType, name: str) -> Iterable[AclBinding]:
        return self.image().acls.on_resource(resource_type, name)
