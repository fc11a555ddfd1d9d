"""Who a Kafka connection is and what it may do (issue 18): the listener's security settings
and the per-connection session the handlers ask.

``ListenerSecurity`` is one Kafka listener's protocol (PLAINTEXT, SSL, SASL_PLAINTEXT,
SASL_SSL), TLS context, SASL mechanisms, where users are checked (``sasl.Users``), how a
client certificate maps to a principal, the failed-login accounting, and the authorizer. The
node builds it from the same settings and sources as its HTTP listeners
(``api.node.kafka_security``), so both front doors share users, ACLs, principal mapping and
the per-source login throttle.

Every connection is served by its own task (``api.kafka.server``), which sets ``SESSION`` to
its ``Session`` before it calls a handler; a handler asks ``allowed(op, type, name)``.
Without an authorizer (``authorizer_enable`` off) everything is allowed, as in Kafka.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from api.kafka.sasl import Users
from metalog.security import ANONYMOUS, CLUSTER_NAME, Operation, ResourceType


class Authorizer(Protocol):
    """The node's ACL authorizer (the one the HTTP routes use)."""

    def allows(
        self, principal: str, host: str, op: Operation, rtype: ResourceType, name: str
    ) -> bool: ...

    def writes_some_topic(self, principal: str, host: str) -> bool: ...


class FailedLogins(Protocol):
    """Counting, logging and slowing down failed logins (the HTTP listeners' ``AuthState``)."""

    def note_failure(self, listener: str, source: str, claimed: str, why: str) -> None: ...

    def delay_ms(self, source: str) -> int: ...

    def on_success(self, source: str) -> None: ...


@dataclass(frozen=True)
class ListenerSecurity:
    name: str
    """The listener's name (``KAFKA``), as in logs and the failed-login gauge."""
    protocol: str = "PLAINTEXT"
    ssl_context: Any = None
    """An ``ssl.SSLContext`` for SSL and SASL_SSL; None otherwise."""
    mechanisms: tuple[str, ...] = ()
    """The SASL mechanisms offered (SASL_* only)."""
    users: Users | None = None
    cert_principal: Callable[[dict[str, Any]], str] | None = None
    """A verified peer certificate (``getpeercert()``) -> ``User:...``; raises ValueError
    when the listener's mapping rules do not match it."""
    logins: FailedLogins | None = None
    authorizer: Authorizer | None = None
    anonymous: bool = True
    """Whether an SSL connection without a client certificate acts as ``User:ANONYMOUS``."""

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")


PLAINTEXT = ListenerSecurity("KAFKA")


@dataclass
class Session:
    principal: str = ANONYMOUS
    host: str = "*"
    authorizer: Authorizer | None = None
    authenticated: bool = True
    """False on a SASL listener until the exchange succeeds."""
    cache: dict[tuple[Operation, ResourceType, str], bool] = field(default_factory=dict)
    """Decisions within the request being served (a produce to many partitions of one
    topic asks once); cleared before each request so ACL changes apply at once."""


SESSION: contextvars.ContextVar[Session | None] = contextvars.ContextVar(
    "kafka_session", default=None
)


def allowed(op: Operation, rtype: ResourceType, name: str) -> bool:
    """Whether the current connection's principal may do ``op`` on the resource."""
    s = SESSION.get()
    if s is None or s.authorizer is None:
        return True
    key = (op, rtype, name)
    ok = s.cache.get(key)
    if ok is None:
        ok = s.authorizer.allows(s.principal, s.host, op, rtype, name)
        if len(s.cache) < 4096:
            s.cache[key] = ok
    return ok


def allowed_on_cluster(op: Operation) -> bool:
    return allowed(op, ResourceType.CLUSTER, CLUSTER_NAME)


def may_create_topic(name: str) -> bool:
    """Kafka: CREATE on the CLUSTER, or on the topic itself."""
    return allowed_on_cluster(Operation.CREATE) or allowed(
        Operation.CREATE, ResourceType.TOPIC, name
    )


def may_get_producer_id() -> bool:
    """Kafka (KIP-679): IDEMPOTENT_WRITE on the CLUSTER, or WRITE on some topic."""
    s = SESSION.get()
    if s is None or s.authorizer is None:
        return True
    return allowed_on_cluster(Operation.IDEMPOTENT_WRITE) or s.authorizer.writes_some_topic(
        s.principal, s.host
    )
