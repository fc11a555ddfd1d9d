"""A node's named listeners (issue 18): one TLS-capable site each, serving only its routes.

Every route of a process is registered on one aiohttp app; each listener of the node config
(``NodeConfig.listener_specs``) is a ``GuardedSite`` of that app with its own TLS context.
``listener_middleware`` answers 404 for a route that is not of the listener's kind, exactly
as for a route that does not exist, so a client listener gives no sign that node routes are
there:

================  ==============================================================
kind              routes
================  ==============================================================
controller        ``/internal/raft/*``, ``/internal/controller/*``
broker            ``/internal/broker/*`` (replica fetch, forwarding, group and
                  schema writes between brokers)
client            everything else: the public HTTP API and the client library's
                  binary routes (``/binary/v1/*``)
schema_registry   the Schema Registry's ``/subjects``, ``/schemas``,
                  ``/compatibility``, ``/config``, ``/mode``; client listeners
                  serve them too. ``schema_registry_listen`` adds a listener of
                  this kind alone (named ``SCHEMA_REGISTRY``, with the security
                  of the first client listener), as Confluent's registry on a
                  port of its own
every listener    ``/v3/health``, ``/v3/health/ready``, ``/metrics``,
                  ``/v3/quorum/status``, ``/v3/quorum/metadata`` (operators and
                  probes reach any process on whatever it listens on)
================  ==============================================================

The legacy single ``listen`` address is one PLAINTEXT listener of every kind.

Which listener a request came in on is known from its connection: each site keeps the set of
its open transports (``GuardedSite.connections``), looked up by the middleware.

Outgoing node-to-node connections (``common.netbind.connector``) use a TLS context built
from the node's own listener settings: the CA bundle it trusts and the certificate it
presents (Kafka uses a listener's keystore both ways).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web

from api.http.auth import (
    AUTH_STATE_KEY,
    LISTENER_AUTH,
    AclSource,
    AuthState,
    Credentials,
    JwtSettings,
    ListenerAuth,
    StaticAcls,
    StaticCredentials,
    auth_middleware,
)
from api.http.authz import AUTHORIZER_KEY, Authorizer, authz_middleware
from api.http.principals import PrincipalMapper, PrincipalMappingError
from api.node.config import ConfigError, ListenerKind, ListenerSettings, ListenerSpec, NodeConfig
from api.node.listener import GuardedSite, ListenerLimits, app_runner, limits_of
from common.tls_reads import batched_reads

log = logging.getLogger(__name__)

ANY_LISTENER_PATHS = frozenset(
    {"/v3/health", "/v3/health/ready", "/metrics", "/v3/quorum/status", "/v3/quorum/metadata"}
)

_KIND_PREFIXES = (
    ("/internal/raft/", ListenerKind.CONTROLLER),
    ("/internal/controller/", ListenerKind.CONTROLLER),
    ("/internal/broker/", ListenerKind.BROKER),
)


_REGISTRY_ROOTS = frozenset({"subjects", "schemas", "compatibility", "config", "mode"})
"""The first path segments of the Schema Registry's routes (``api.http.schemas``)."""


def route_kind(path: str) -> ListenerKind | None:
    """The kind of listener ``path`` is served on; None: every listener. The registry's
    routes are ``SCHEMA_REGISTRY`` ones, which client listeners serve too (``serves``)."""
    if path in ANY_LISTENER_PATHS:
        return None
    for prefix, kind in _KIND_PREFIXES:
        if path.startswith(prefix):
            return kind
    if path.lstrip("/").split("/", 1)[0] in _REGISTRY_ROOTS:
        return ListenerKind.SCHEMA_REGISTRY
    return ListenerKind.CLIENT


def serves(spec: ListenerSpec, kind: ListenerKind | None) -> bool:
    """Whether listener ``spec`` answers routes of ``kind`` (``route_kind``)."""
    if kind is None or kind in spec.kinds:
        return True
    # Confluent's clients pointed at a broker's client listener keep finding the registry.
    return kind is ListenerKind.SCHEMA_REGISTRY and ListenerKind.CLIENT in spec.kinds


@dataclass
class BoundListener:
    spec: ListenerSpec
    site: GuardedSite

    @property
    def port(self) -> int:
        port = self.site._bound_port
        assert port is not None
        return int(port)


@dataclass
class Listeners:
    """The sites of one app, filled in as they bind, and how each authenticates."""

    auth: dict[str, ListenerAuth] = field(default_factory=dict)
    bound: list[BoundListener] = field(default_factory=list)

    def of_transport(self, transport: object) -> ListenerSpec | None:
        for b in self.bound:
            if transport in b.site.connections:
                return b.spec
        return None


def principal_sources(
    label: str, spec: ListenerSpec, bearer: str | None
) -> tuple[PrincipalMapper, JwtSettings | None]:
    """A listener's certificate-to-principal mapper and, when ``bearer`` says why it takes
    bearer tokens (None: it does not), their keys; ``ConfigError`` naming ``label`` for
    rules or key files that do not load. Shared by the HTTP and the Kafka listeners."""
    st = spec.settings
    try:
        mapper = PrincipalMapper(st.ssl_principal_mapping_rules)
    except PrincipalMappingError as e:
        raise ConfigError(f"{label}: {e}") from None
    if bearer is None:
        return mapper, None
    if st.jwt_public_key_file is None and st.jwt_jwks_file is None:
        raise ConfigError(f"{label} {bearer}: it needs jwt_public_key_file or jwt_jwks_file")
    try:
        jwt = JwtSettings.load(
            st.jwt_public_key_file,
            st.jwt_jwks_file,
            st.jwt_issuer,
            st.jwt_audience,
            st.jwt_principal_claim,
        )
    except (OSError, ValueError) as e:
        raise ConfigError(f"{label}: bearer token keys: {e}") from None
    return mapper, jwt


def listener_auth(spec: ListenerSpec) -> ListenerAuth:
    """The authentication settings of a listener; ``ConfigError`` for rules or key files
    that do not load."""
    st = spec.settings
    mapper, jwt = principal_sources(
        f"listener {spec.name}",
        spec,
        "accepts bearer tokens"
        if spec.protocol.http_auth and "bearer" in st.http_auth_mechanisms
        else None,
    )
    return ListenerAuth(
        name=spec.name,
        kinds=frozenset(str(k) for k in spec.kinds),
        tls=spec.protocol.tls,
        http_auth=spec.protocol.http_auth,
        mechanisms=tuple(st.http_auth_mechanisms) if spec.protocol.http_auth else (),
        anonymous=spec.anonymous_allowed,
        mapper=mapper,
        jwt=jwt,
    )


LISTENERS_KEY: web.AppKey[Listeners] = web.AppKey("listeners", Listeners)
LISTENER_SPEC_KEY: web.RequestKey[ListenerSpec] = web.RequestKey("listener", ListenerSpec)
"""``request[LISTENER_SPEC_KEY]``: the ``ListenerSpec`` the request came in on."""


def not_found(request: web.Request) -> web.Response:
    # The same answer as aiohttp's own for an unknown path (error_middleware shapes it).
    raise web.HTTPNotFound()


@web.middleware
async def listener_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    listeners = request.app.get(LISTENERS_KEY)
    spec = None if listeners is None else listeners.of_transport(request.transport)
    if listeners is None or spec is None:
        # Not through a site of ours (aiohttp's test client): one listener of every kind.
        return await handler(request)
    request[LISTENER_SPEC_KEY] = spec
    request[LISTENER_AUTH] = listeners.auth[spec.name]
    if not serves(spec, route_kind(request.path)):
        return not_found(request)
    return await handler(request)


def server_ssl_context(spec: ListenerSpec) -> ssl.SSLContext | None:
    """The TLS context of a listener, None for PLAINTEXT/SASL_PLAINTEXT."""
    if not spec.protocol.tls:
        return None
    st = spec.settings
    assert st.ssl_certfile is not None and st.ssl_keyfile is not None  # config validated
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(st.ssl_certfile, st.ssl_keyfile)
    if st.ssl_cafile is not None:
        ctx.load_verify_locations(cafile=str(st.ssl_cafile))
    ctx.verify_mode = {
        "none": ssl.CERT_NONE,
        "requested": ssl.CERT_OPTIONAL,
        "required": ssl.CERT_REQUIRED,
    }[st.ssl_client_auth]
    return batched_reads(ctx)


def client_ssl_context(settings: ListenerSettings) -> ssl.SSLContext:
    """What a node (or a client) uses to dial a TLS listener: trust ``ssl_cafile`` (the
    system CAs without one), present ``ssl_certfile`` when there is one."""
    ctx = ssl.create_default_context(
        cafile=None if settings.ssl_cafile is None else str(settings.ssl_cafile)
    )
    if settings.ssl_certfile is not None and settings.ssl_keyfile is not None:
        ctx.load_cert_chain(settings.ssl_certfile, settings.ssl_keyfile)
    return batched_reads(ctx)


def node_client_ssl_context(config: NodeConfig) -> ssl.SSLContext | None:
    """The context for this node's outgoing connections to other nodes: from the settings
    of the listener it dials most (inter-broker for a broker, controller for a controller),
    else of any TLS listener it has. None when the node dials no TLS listener."""
    names: list[str] = []
    if "broker" in config.roles:
        broker = config.listener_of(ListenerKind.BROKER)
        if broker is not None:
            names.append(broker.name)
    names += config.controller_names()
    names += [s.name for s in config.listener_specs()]
    protocols = config.protocol_map()
    for name in names:
        st = config.dial_settings(name)
        proto = protocols.get(name)
        if proto is not None and proto.tls and st.ssl_cafile is not None:
            return client_ssl_context(st)
    return None


async def start_listeners(
    app: web.Application, config: NodeConfig, limits: ListenerLimits | None = None
) -> tuple[web.AppRunner, Listeners]:
    """Set ``app`` up and bind every listener of ``config``. If one cannot be bound, the
    runner is cleaned up and the ``OSError`` raised."""
    limits = limits or limits_of(config)
    listeners = app[LISTENERS_KEY]
    runner = await app_runner(app, limits)
    try:
        for spec in config.listener_specs():
            site = GuardedSite(
                runner,
                spec.host,
                spec.port,
                limits,
                reuse_address=True,
                ssl_context=server_ssl_context(spec),
            )
            await site.start()
            listeners.bound.append(BoundListener(spec, site))
            log.info(
                "node %d: listener %s (%s, %s) on %s:%d",
                config.node_id,
                spec.name,
                spec.protocol,
                "/".join(sorted(spec.kinds)),
                spec.host,
                spec.port,
            )
    except (OSError, ssl.SSLError):
        await runner.cleanup()
        raise
    return runner, listeners


def install(
    app: web.Application,
    config: NodeConfig,
    credentials: Credentials | None = None,
    acls: AclSource | None = None,
) -> AuthState:
    """Add the listener, authentication and (with ``authorizer_enable``) authorization
    middlewares to ``app`` (before it is frozen), after the error middleware so their
    answers have the shape of any other. ``credentials``: the users' SCRAM credentials,
    ``acls``: the ACL bindings (none known without either)."""
    app[LISTENERS_KEY] = Listeners({s.name: listener_auth(s) for s in config.listener_specs()})
    supers = super_users(config)
    state = app[AUTH_STATE_KEY] = AuthState(credentials or StaticCredentials(), super_users=supers)
    app.middlewares.append(listener_middleware)
    app.middlewares.append(auth_middleware)
    if config.authorizer_enable:
        app[AUTHORIZER_KEY] = Authorizer(
            acls or StaticAcls(), supers, config.allow_everyone_if_no_acl_found
        )
        app.middlewares.append(authz_middleware)
    return state


def super_users(config: NodeConfig) -> frozenset[str]:
    return frozenset(u.strip() for u in config.super_users.split(";") if u.strip())
