"""Kafka's security admin APIs on the Kafka listener (issue 18): DescribeAcls, CreateAcls,
DeleteAcls, DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554), so
``kafka-acls``, ``kafka-configs --entity-type users`` and an AdminClient administer the same
bindings and users as the HTTP API's ``/v3/clusters/{id}/acls`` and ``.../users``.

Describing reads the broker's metadata image (``AclsImage.matching``, ``ScramImage``);
changes go to the controller as ``CreateAcls``/``DeleteAcls``/``AlterUserScramCredentials``
commands (all or nothing, as the HTTP routes send them), and the answer waits, briefly,
until this broker's image shows the change. Kafka's rules: describing needs DESCRIBE on the
CLUSTER, changing ALTER (CLUSTER_AUTHORIZATION_FAILED otherwise); without an authorizer the
ACL APIs answer SECURITY_DISABLED, as Kafka does (users can be administered either way).

A SCRAM upsertion carries the salted password (``Hi(password, salt, i)``), never the
password, as KIP-554 sends it; the broker derives the stored and server keys from it.

On the wire the enums are Kafka's numbers (``AclResourceType``, ``PatternType``,
``AclOperation``, ``AclPermissionType``, ``ScramMechanism``); Longboat's model has the
resource types, operations and permissions Kafka's authorizer checks on these resources (no
DELEGATION_TOKEN or USER resources, no token operations): a binding naming another is
answered INVALID_REQUEST.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from api.kafka.handlers import ZERO_MS, KafkaContext
from api.kafka.protocol import build, error_code, response_module
from api.kafka.security import SESSION, allowed_on_cluster
from metalog.commands import (
    AlterUserScramCredentials,
    CreateAcls,
    DeleteAcls,
    ScramDeletion,
    ScramUpsertion,
)
from metalog.errors import MetadataError
from metalog.image import MetadataImage
from metalog.security import (
    SCRAM_MECHANISMS,
    SCRAM_MIN_ITERATIONS,
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    ScramCredential,
)

IMAGE_WAIT_S = 5.0

ANY, MATCH = 1, 2
RESOURCE_TYPES = {2: ResourceType.TOPIC, 3: ResourceType.GROUP, 4: ResourceType.CLUSTER}
RESOURCE_TYPES[5] = ResourceType.TRANSACTIONAL_ID
PATTERN_TYPES = {3: PatternType.LITERAL, 4: PatternType.PREFIXED}
OPERATIONS = {
    2: Operation.ALL,
    3: Operation.READ,
    4: Operation.WRITE,
    5: Operation.CREATE,
    6: Operation.DELETE,
    7: Operation.ALTER,
    8: Operation.DESCRIBE,
    9: Operation.CLUSTER_ACTION,
    10: Operation.DESCRIBE_CONFIGS,
    11: Operation.ALTER_CONFIGS,
    12: Operation.IDEMPOTENT_WRITE,
}
PERMISSIONS = {2: Permission.DENY, 3: Permission.ALLOW}


def _wire(table: dict[int, Any], value: Any) -> i8:
    return i8(next(k for k, v in table.items() if v == value))


class _Invalid(Exception):
    pass


def _one(table: dict[int, Any], code: int, what: str, *, any_ok: bool) -> Any:
    """A filter field (None for ANY) or a binding field; ``_Invalid`` for what Longboat's
    model has not."""
    if any_ok and code == ANY:
        return None
    if code in table:
        return table[code]
    raise _Invalid(f"{what} {code} is not supported")


def _refusal() -> ErrorCode | None:
    s = SESSION.get()
    if s is not None and s.authorizer is None:
        return ErrorCode.security_disabled
    return None


async def _wait(ctx: KafkaContext, cond: Callable[[MetadataImage], bool]) -> None:
    deadline = time.monotonic() + IMAGE_WAIT_S
    while not cond(ctx.image) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)


async def _execute(ctx: KafkaContext, command: Any) -> tuple[Any, ErrorCode, str | None]:
    try:
        return await ctx.execute(command), ErrorCode.none, None
    except MetadataError as e:
        return None, error_code(e.code), str(e)
    except Exception as e:  # no controller answered in time
        return None, ErrorCode.request_timed_out, f"no controller answered: {e}"


def _filter(req: Any) -> AclBindingFilter:
    pattern = int(req.pattern_type_filter)
    if pattern in (ANY, MATCH):
        pattern_name = "ANY" if pattern == ANY else "MATCH"
    else:
        pattern_name = str(_one(PATTERN_TYPES, pattern, "pattern type", any_ok=False))
    return AclBindingFilter(
        principal=req.principal_filter,
        host=req.host_filter,
        resource_type=_one(
            RESOURCE_TYPES, int(req.resource_type_filter), "resource type", any_ok=True
        ),
        resource_name=req.resource_name_filter,
        pattern_type=pattern_name,
        operation=_one(OPERATIONS, int(req.operation), "operation", any_ok=True),
        permission=_one(PERMISSIONS, int(req.permission_type), "permission", any_ok=True),
    )


async def handle_describe_acls(ctx: KafkaContext, version: int, req: Any) -> Any:
    mod = response_module(29, version)

    def answer(err: ErrorCode, msg: str | None = None, resources: tuple[Any, ...] = ()) -> Any:
        return build(
            mod,
            "DescribeAclsResponse",
            throttle_time=ZERO_MS,
            error_code=err,
            error_message=msg,
            resources=resources,
        )

    refusal = _refusal()
    if refusal is not None:
        return answer(refusal, "no authorizer is configured")
    if not allowed_on_cluster(Operation.DESCRIBE):
        return answer(ErrorCode.cluster_authorization_failed)
    try:
        flt = _filter(req)
    except _Invalid as e:
        return answer(ErrorCode.invalid_request, str(e))
    by_resource: dict[tuple[ResourceType, str, PatternType], list[AclBinding]] = {}
    for _id, b in ctx.image.acls.matching(flt):
        by_resource.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(b)
    resources = tuple(
        build(
            mod,
            "DescribeAclsResource",
            resource_type=_wire(RESOURCE_TYPES, rtype),
            resource_name=name,
            pattern_type=_wire(PATTERN_TYPES, pattern),
            acls=tuple(
                build(
                    mod,
                    "AclDescription",
                    principal=b.principal,
                    host=b.host,
                    operation=_wire(OPERATIONS, b.operation),
                    permission_type=_wire(PERMISSIONS, b.permission),
                )
                for b in bindings
            ),
        )
        for (rtype, name, pattern), bindings in sorted(by_resource.items())
    )
    return answer(ErrorCode.none, None, resources)


def _gone(ids: set[str]) -> Callable[[MetadataImage], bool]:
    def cond(image: MetadataImage) -> bool:
        return not any(i in image.acls.by_id for i in ids)

    return cond


def _binding(c: Any) -> AclBinding:
    return AclBinding(
        principal=c.principal,
        host=c.host,
        resource_type=_one(RESOURCE_TYPES, int(c.resource_type), "resource type", any_ok=False),
        resource_name=c.resource_name,
        pattern_type=_one(
            PATTERN_TYPES, int(c.resource_pattern_type), "pattern type", any_ok=False
        ),
        operation=_one(OPERATIONS, int(c.operation), "operation", any_ok=False),
        permission=_one(PERMISSIONS, int(c.permission_type), "permission", any_ok=False),
    )


async def handle_create_acls(ctx: KafkaContext, version: int, req: Any) -> Any:
    """All the valid creations in one controller command (all or nothing among them); an
    invalid one is answered alone, as Kafka validates each before it creates any."""
    mod = response_module(30, version)
    n = len(req.creations)
    results: list[tuple[ErrorCode, str | None]] = [(ErrorCode.none, None)] * n
    refusal = _refusal()
    if refusal is None and not allowed_on_cluster(Operation.ALTER):
        refusal = ErrorCode.cluster_authorization_failed
    bindings: list[tuple[int, AclBinding]] = []
    for i, c in enumerate(req.creations):
        if refusal is not None:
            results[i] = (refusal, None)
            continue
        try:
            bindings.append((i, _binding(c)))
        except _Invalid as e:
            results[i] = (ErrorCode.invalid_request, str(e))
    if bindings:
        resp, err, msg = await _execute(ctx, CreateAcls(bindings=tuple(b for _, b in bindings)))
        for i, _b in bindings:
            results[i] = (err, msg)
        if resp is not None:
            ids = {e.id for e in resp.entries}
            await _wait(ctx, lambda im: all(i in im.acls.by_id for i in ids))
    return build(
        mod,
        "CreateAclsResponse",
        throttle_time=ZERO_MS,
        results=tuple(
            build(mod, "AclCreationResult", error_code=e, error_message=m) for e, m in results
        ),
    )


async def handle_delete_acls(ctx: KafkaContext, version: int, req: Any) -> Any:
    mod = response_module(31, version)
    refusal = _refusal()
    if refusal is None and not allowed_on_cluster(Operation.ALTER):
        refusal = ErrorCode.cluster_authorization_failed
    out = []
    for f in req.filters:
        err, msg, matched = refusal or ErrorCode.none, None, ()
        if refusal is None:
            try:
                flt = _filter(f)
            except _Invalid as e:
                err, msg = ErrorCode.invalid_request, str(e)
            else:
                resp, err, msg = await _execute(ctx, DeleteAcls(filters=(flt,)))
                if resp is not None:
                    await _wait(ctx, _gone({e.id for e in resp.deleted}))
                    matched = tuple(
                        build(
                            mod,
                            "DeleteAclsMatchingAcl",
                            error_code=ErrorCode.none,
                            error_message=None,
                            resource_type=_wire(RESOURCE_TYPES, e.binding.resource_type),
                            resource_name=e.binding.resource_name,
                            pattern_type=_wire(PATTERN_TYPES, e.binding.pattern_type),
                            principal=e.binding.principal,
                            host=e.binding.host,
                            operation=_wire(OPERATIONS, e.binding.operation),
                            permission_type=_wire(PERMISSIONS, e.binding.permission),
                        )
                        for e in resp.deleted
                    )
        out.append(
            build(
                mod,
                "DeleteAclsFilterResult",
                error_code=err,
                error_message=msg,
                matching_acls=matched,
            )
        )
    return build(mod, "DeleteAclsResponse", throttle_time=ZERO_MS, filter_results=tuple(out))


# ------------------------------------------------------------------------ SCRAM users

SCRAM_WIRE = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
"""Kafka's ``ScramMechanism`` ids."""
SCRAM_ITERATIONS_MAX = 16384
"""Kafka's bound (``ScramMechanism.maxIterations``), also the HTTP API's."""


async def handle_describe_user_scram_credentials(ctx: KafkaContext, version: int, req: Any) -> Any:
    mod = response_module(50, version)

    def answer(err: ErrorCode, msg: str | None = None, results: tuple[Any, ...] = ()) -> Any:
        return build(
            mod,
            "DescribeUserScramCredentialsResponse",
            throttle_time=ZERO_MS,
            error_code=err,
            error_message=msg,
            results=results,
        )

    if not allowed_on_cluster(Operation.DESCRIBE):
        return answer(ErrorCode.cluster_authorization_failed)
    users = ctx.image.scram.users()
    names = sorted(users) if req.users is None else [u.name for u in req.users]
    results = []
    for name in names:
        err, msg, creds = ErrorCode.none, None, users.get(name, [])
        if names.count(name) > 1:
            err, msg, creds = ErrorCode.duplicate_resource, "user named twice", []
        elif not creds:
            err, msg = ErrorCode.resource_not_found, f"no credentials for user {name}"
        results.append(
            build(
                mod,
                "DescribeUserScramCredentialsResult",
                user=name,
                error_code=err,
                error_message=msg,
                credential_infos=tuple(
                    build(
                        mod,
                        "CredentialInfo",
                        mechanism=_wire(SCRAM_WIRE, c.mechanism),
                        iterations=c.iterations,
                    )
                    for c in creds
                ),
            )
        )
    return answer(ErrorCode.none, None, tuple(results))


def _credential(mechanism: str, salt: bytes, iterations: int, salted: bytes) -> ScramCredential:
    """RFC 5802's keys from the salted password the client sent (KIP-554)."""
    digest = SCRAM_MECHANISMS[mechanism]
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    return ScramCredential(
        mechanism,
        salt,
        iterations,
        hashlib.new(digest, client_key).digest(),
        hmac.new(salted, b"Server Key", digest).digest(),
    )


async def handle_alter_user_scram_credentials(ctx: KafkaContext, version: int, req: Any) -> Any:
    """Each user's changes are checked as Kafka checks them; the valid ones go to the
    controller in one command."""
    mod = response_module(51, version)
    changes = [(d.name, "delete", d) for d in req.deletions]
    changes += [(u.name, "upsert", u) for u in req.upsertions]
    errors: dict[str, tuple[ErrorCode, str | None]] = {}
    order = list(dict.fromkeys(name for name, _, _ in changes))
    if not allowed_on_cluster(Operation.ALTER):
        errors = {n: (ErrorCode.cluster_authorization_failed, None) for n in order}
    upsertions: list[ScramUpsertion] = []
    deletions: list[ScramDeletion] = []
    seen: set[tuple[str, int]] = set()
    for name, kind, c in changes:
        if name in errors:
            continue
        mechanism = SCRAM_WIRE.get(int(c.mechanism))
        if not name:
            errors[name] = (ErrorCode.unacceptable_credential, "empty user name")
        elif mechanism is None:
            errors[name] = (ErrorCode.unsupported_sasl_mechanism, f"mechanism {c.mechanism}")
        elif (name, int(c.mechanism)) in seen:
            errors[name] = (ErrorCode.duplicate_resource, "a mechanism of the user named twice")
        elif kind == "delete":
            if ctx.image.scram.get(name, mechanism) is None:
                errors[name] = (ErrorCode.resource_not_found, f"no {mechanism} credential")
            else:
                deletions.append(ScramDeletion(name, mechanism))
        elif not SCRAM_MIN_ITERATIONS <= int(c.iterations) <= SCRAM_ITERATIONS_MAX:
            errors[name] = (
                ErrorCode.unacceptable_credential,
                f"iterations must be {SCRAM_MIN_ITERATIONS} to {SCRAM_ITERATIONS_MAX}",
            )
        elif not c.salt or not c.salted_password:
            errors[name] = (ErrorCode.unacceptable_credential, "empty salt or salted password")
        else:
            cred = _credential(
                mechanism, bytes(c.salt), int(c.iterations), bytes(c.salted_password)
            )
            upsertions.append(
                ScramUpsertion(
                    name, mechanism, cred.salt, cred.iterations, cred.stored_key, cred.server_key
                )
            )
        seen.add((name, int(c.mechanism)))
    upsertions = [u for u in upsertions if u.name not in errors]
    deletions = [d for d in deletions if d.name not in errors]
    if upsertions or deletions:
        command = AlterUserScramCredentials(
            upsertions=tuple(upsertions), deletions=tuple(deletions)
        )
        _resp, err, msg = await _execute(ctx, command)
        for name in {u.name for u in upsertions} | {d.name for d in deletions}:
            errors[name] = (err, msg)
        if err == ErrorCode.none:
            await _wait(ctx, _scram_applied(upsertions, deletions))
    return build(
        mod,
        "AlterUserScramCredentialsResponse",
        throttle_time=ZERO_MS,
        results=tuple(
            build(
                mod,
                "AlterUserScramCredentialsResult",
                user=name,
                error_code=errors.get(name, (ErrorCode.none, None))[0],
                error_message=errors.get(name, (ErrorCode.none, None))[1],
            )
            for name in order
        ),
    )


def _scram_applied(
    upsertions: list[ScramUpsertion], deletions: list[ScramDeletion]
) -> Callable[[MetadataImage], bool]:
    def cond(image: MetadataImage) -> bool:
        return all(
            (c := image.scram.get(u.name, u.mechanism)) is not None and c.stored_key == u.stored_key
            for u in upsertions
        ) and all(image.scram.get(d.name, d.mechanism) is None for d in deletions)

    return cond


SECURITY_ADMIN_HANDLERS: dict[int, Callable[[KafkaContext, int, Any], Awaitable[Any]]] = {
    29: handle_describe_acls,
    30: handle_create_acls,
    31: handle_delete_acls,
    50: handle_describe_user_scram_credentials,
    51: handle_alter_user_scram_credentials,
}
"""Merged into the listener's handlers; versions in ``api.kafka.protocol.SUPPORTED``."""
