"""The security model every layer shares (issue 18): ACL bindings, SCRAM credentials, decisions.

Kafka's model, kept in the metadata log so every broker decides the same way:

* An ACL binding says that a principal (``User:alice``), connecting from a host (``*`` for any),
  may (``ALLOW``) or may not (``DENY``) do an operation on resources of a type whose names match
  a pattern: ``LITERAL`` (that name, or every name when it is ``*``) or ``PREFIXED`` (every name
  starting with it).
* ``authorize`` is Kafka's ``StandardAuthorizer`` rule: super users may do everything; any
  matching DENY wins over every ALLOW; an ALLOW of an operation also allows the operations it
  implies (READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS;
  ALL implies every operation); when no binding matches the resource at all, the answer is
  ``allow_if_no_acl`` (Kafka's ``allow.everyone.if.no.acl.found``, off by default).
* A SCRAM credential is what KIP-554 stores for a user and mechanism: salt, iteration count and
  the two keys of RFC 5802 derived from the salted password. The password itself is never kept;
  ``ScramCredential.verify`` checks a plaintext password (HTTP Basic) against the stored key.

Pure: no I/O, no clock, no global random (the salt is an argument).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum


class ResourceType(StrEnum):
    TOPIC = "TOPIC"
    GROUP = "GROUP"
    CLUSTER = "CLUSTER"
    TRANSACTIONAL_ID = "TRANSACTIONAL_ID"


class PatternType(StrEnum):
    LITERAL = "LITERAL"
    PREFIXED = "PREFIXED"


class Operation(StrEnum):
    ALL = "ALL"
    READ = "READ"
    WRITE = "WRITE"
    CREATE = "CREATE"
    DELETE = "DELETE"
    ALTER = "ALTER"
    DESCRIBE = "DESCRIBE"
    CLUSTER_ACTION = "CLUSTER_ACTION"
    DESCRIBE_CONFIGS = "DESCRIBE_CONFIGS"
    ALTER_CONFIGS = "ALTER_CONFIGS"
    IDEMPOTENT_WRITE = "IDEMPOTENT_WRITE"


class Permission(StrEnum):
    ALLOW = "ALLOW"
    DENY = "DENY"


WILDCARD = "*"
"""As a resource name (LITERAL) every resource of the type; as a host, every host."""

CLUSTER_NAME = "kafka-cluster"
"""The one CLUSTER resource's name, as Kafka names it."""

ANONYMOUS = "User:ANONYMOUS"

# What an ALLOW of an operation also allows (Kafka's AclEntry.supportedOperations rules).
_IMPLIED: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset(
        {Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}
    ),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}),
}


@dataclass(frozen=True, slots=True)
class AclBinding:
    principal: str
    """``User:name`` (or ``User:*`` for every principal)."""
    host: str
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    operation: Operation
    permission: Permission

    def matches_resource(self, resource_type: ResourceType, name: str) -> bool:
        if self.resource_type is not resource_type:
            return False
        if self.pattern_type is PatternType.PREFIXED:
            return name.startswith(self.resource_name)
        return self.resource_name in (WILDCARD, name)

    def matches_who(self, principal: str, host: str) -> bool:
        return self.principal in (principal, "User:*") and self.host in (WILDCARD, host)


PATTERN_FILTERS = ("LITERAL", "PREFIXED", "ANY", "MATCH")
"""A filter's pattern types (Kafka's ``PatternType`` in a ``ResourcePatternFilter``): ANY
takes bindings of either pattern type with exactly the filter's name; MATCH takes every
binding that applies to a resource of that name (the LITERAL one, the LITERAL ``*`` and
every PREFIXED one it starts with)."""


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Kafka's ``AclBindingFilter``: None (ANY) for a field matches every value of it."""

    principal: str | None = None
    host: str | None = None
    resource_type: ResourceType | None = None
    resource_name: str | None = None
    pattern_type: str = "ANY"
    """One of ``PATTERN_FILTERS``."""
    operation: Operation | None = None
    permission: Permission | None = None

    def matches(self, acl: AclBinding) -> bool:
        if self.principal is not None and acl.principal != self.principal:
            return False
        if self.host is not None and acl.host != self.host:
            return False
        if self.resource_type is not None and acl.resource_type != self.resource_type:
            return False
        if self.operation is not None and acl.operation != self.operation:
            return False
        if self.permission is not None and acl.permission != self.permission:
            return False
        return self._matches_pattern(acl)

    def _matches_pattern(self, acl: AclBinding) -> bool:
        name, pattern = self.resource_name, self.pattern_type
        if pattern == "MATCH":
            if name is None:
                return True
            if acl.pattern_type is PatternType.PREFIXED:
                return name.startswith(acl.resource_name)
            return acl.resource_name in (WILDCARD, name)
        if pattern != "ANY" and acl.pattern_type != pattern:
            return False
        return name is None or acl.resource_name == name


def _grants(binding_op: Operation, requested: Operation) -> bool:
    """Whether a binding for ``binding_op`` covers a request for ``requested``."""
    if binding_op is Operation.ALL or binding_op is requested:
        return True
    return binding_op in _IMPLIED.get(requested, frozenset())


def authorize(
    acls: Iterable[AclBinding],
    principal: str,
    host: str,
    operation: Operation,
    resource_type: ResourceType,
    resource_name: str,
    *,
    super_users: frozenset[str] = frozenset(),
    allow_if_no_acl: bool = False,
) -> bool:
    """Kafka's decision for one action (see the module docstring for the rules)."""
    if principal in super_users:
        return True
    any_for_resource = False
    allowed = False
    for acl in acls:
        if not acl.matches_resource(resource_type, resource_name):
            continue
        any_for_resource = True
        if not acl.matches_who(principal, host):
            continue
        if acl.permission is Permission.DENY:
            # A DENY of ALL, or of exactly this operation, wins; DENY does not use implication
            # (denying READ does not deny DESCRIBE), as in Kafka.
            if acl.operation in (Operation.ALL, operation):
                return False
        elif _grants(acl.operation, operation):
            allowed = True
    if not any_for_resource:
        return allow_if_no_acl
    return allowed


SCRAM_MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
SCRAM_MIN_ITERATIONS = 4096
"""RFC 7677's floor, and Kafka's."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @classmethod
    def derive(cls, mechanism: str, password: str, salt: bytes, iterations: int) -> ScramCredential:
        """The credential for ``password`` (RFC 5802 section 3)."""
        digest = _digest(mechanism)
        if iterations < SCRAM_MIN_ITERATIONS:
            raise ValueError(f"iterations must be at least {SCRAM_MIN_ITERATIONS}")
        salted = hashlib.pbkdf2_hmac(digest, password.encode(), salt, iterations)
        client_key = hmac.new(salted, b"Client Key", digest).digest()
        stored_key = hashlib.new(digest, client_key).digest()
        server_key = hmac.new(salted, b"Server Key", digest).digest()
        return cls(mechanism, salt, iterations, stored_key, server_key)

    def verify(self, password: str) -> bool:
        """Whether ``password`` is the one this credential was derived from (constant time)."""
        other = ScramCredential.derive(self.mechanism, password, self.salt, self.iterations)
        return hmac.compare_digest(other.stored_key, self.stored_key)


def _digest(mechanism: str) -> str:
    try:
        return SCRAM_MECHANISMS[mechanism]
    except KeyError:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r}") from None
