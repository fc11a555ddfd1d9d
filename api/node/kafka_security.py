"""A broker's Kafka protocol listeners and their security (issues 18 and 20).

Each Kafka listener of the node config (``NodeConfig.kafka_listener_specs``) becomes one
``api.kafka.server.KafkaListener`` with a ``ListenerSecurity`` built from the same pieces as
the HTTP listeners (``api.node.listeners``): the TLS context of its ``listener_settings``,
the certificate-subject mapping rules, the users' SCRAM credentials in the metadata log (the
HTTP listeners' ``AuthState``, whose failed-login counter and per-source throttle both front
doors share), the JWT settings for OAUTHBEARER, and the node's ACL authorizer (None when
``authorizer_enable`` is off). Each listener answers Metadata with its own endpoints
(``api.kafka.handlers.kafka_endpoint_name``).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any

from api.http.auth import AuthenticationError, AuthState, JwtSettings
from api.http.authz import Authorizer
from api.http.principals import PrincipalMappingError, subject_dn
from api.kafka.handlers import KafkaContext, kafka_endpoint_name
from api.kafka.sasl import OAUTHBEARER, SaslFailedError
from api.kafka.security import ListenerSecurity
from api.kafka.server import KafkaListener
from api.node.config import ListenerSpec, NodeConfig
from api.node.listeners import principal_sources, server_ssl_context
from metalog.security import ScramCredential

log = logging.getLogger(__name__)


@dataclass
class _Users:
    """``api.kafka.sasl.Users`` over the HTTP listeners' authentication state."""

    auth: AuthState
    jwt: JwtSettings | None

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.auth.credentials.scram_credential(user, mechanism)

    def plain_principal(self, user: str, password: str) -> str | None:
        try:
            return self.auth.basic_principal(user, password)
        except AuthenticationError:
            return None

    def bearer_principal(self, token: str) -> str | None:
        if self.jwt is None:
            return None
        try:
            return self.jwt.principal(token)
        except AuthenticationError as e:
            raise SaslFailedError(e.message, e.claimed) from None


@dataclass
class _Logins:
    """``api.kafka.security.FailedLogins`` over the same ``AuthState``."""

    auth: AuthState

    def note_failure(self, listener: str, source: str, claimed: str, why: str) -> None:
        self.auth.note_failure(listener, source, claimed, why)

    def delay_ms(self, source: str) -> int:
        return self.auth.throttle.delay_ms(source, self.auth.clock_ms())

    def on_success(self, source: str) -> None:
        self.auth.throttle.on_success(source)


def listener_security(
    spec: ListenerSpec, auth: AuthState, authorizer: Authorizer | None
) -> ListenerSecurity:
    """The security of one Kafka listener; ``ConfigError`` for settings that do not load."""
    st = spec.settings
    mapper, jwt = principal_sources(
        f"Kafka listener {spec.name}",
        spec,
        "enables OAUTHBEARER"
        if spec.protocol.http_auth and OAUTHBEARER in st.sasl_enabled_mechanisms
        else None,
    )

    def cert_principal(cert: dict[str, Any]) -> str:
        try:
            return f"User:{mapper.name(subject_dn(cert.get('subject')))}"
        except PrincipalMappingError as e:
            raise ValueError(str(e)) from None

    return ListenerSecurity(
        name=spec.name,
        protocol=str(spec.protocol),
        ssl_context=server_ssl_context(spec),
        mechanisms=tuple(st.sasl_enabled_mechanisms) if spec.protocol.http_auth else (),
        users=_Users(auth, jwt),
        cert_principal=cert_principal,
        logins=_Logins(auth),
        authorizer=authorizer,
        anonymous=spec.anonymous_allowed,
    )


@dataclass
class KafkaListeners:
    """The broker's Kafka listeners, bound and closed together."""

    config: NodeConfig
    listeners: list[tuple[ListenerSpec, KafkaListener]] = field(default_factory=list)

    async def start(self) -> None:
        try:
            for spec, listener in self.listeners:
                await listener.start(spec.host, spec.port)
                log.info(
                    "broker %d: Kafka listener %s (%s) on %s:%d",
                    self.config.node_id,
                    spec.name,
                    spec.protocol,
                    spec.host,
                    spec.port,
                )
        except OSError:
            await self.close()
            raise

    async def close(self) -> None:
        for _spec, listener in self.listeners:
            await listener.close()

    def sendfile_stats(self) -> tuple[int, int]:
        """Zero-copy Fetch answers and their record bytes, over every listener."""
        return (
            sum(lst.sendfile_responses for _, lst in self.listeners),
            sum(lst.sendfile_bytes for _, lst in self.listeners),
        )

    @property
    def ports(self) -> dict[str, int]:
        return {spec.name: listener.port for spec, listener in self.listeners}


def kafka_listeners(
    config: NodeConfig, ctx: KafkaContext, auth: AuthState, authorizer: Authorizer | None
) -> KafkaListeners | None:
    """One ``KafkaListener`` per Kafka listener of ``config``; None when it has none."""
    specs = config.kafka_listener_specs()
    if not specs:
        return None
    out = KafkaListeners(config)
    for i, spec in enumerate(specs):
        # One context per listener for its endpoint name; the members' metadata is shared,
        # so a group joined over two listeners still has every member's.
        lctx = dataclasses.replace(ctx, endpoint=kafka_endpoint_name(spec.name, i == 0))
        lctx.group_metadata = ctx.group_metadata
        out.listeners.append(
            (
                spec,
                KafkaListener(
                    lctx,
                    request_bytes_max=config.kafka_request_bytes_max,
                    fetch_zero_copy=config.kafka_fetch_zero_copy,
                    pipeline_depth=config.kafka_produce_pipeline_depth,
                    connections_max=config.http_connections_max,
                    security=listener_security(spec, auth, authorizer),
                ),
            )
        )
    return out
