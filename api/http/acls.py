"""ACL and SCRAM user administration over HTTP (issue 18).

ACLs, as the Confluent REST Proxy v3 has them, under ``/v3/clusters/{cluster_id}``:

* ``GET .../acls?resource_type=&resource_name=&pattern_type=&principal=&host=&operation=&permission=``
  searches (every parameter optional; absent is ANY; ``pattern_type=MATCH`` finds the bindings
  that apply to a resource of that name, as Kafka's ``AclBindingFilter``);
* ``POST .../acls`` creates one binding (a JSON object with all seven fields), ``POST
  .../acls:batch`` several (``{"data": [...]}``), all or nothing; 201, no body;
* ``DELETE .../acls?...`` deletes every binding the filter matches and answers them. As in the
  REST Proxy, ``resource_type``, ``pattern_type``, ``operation`` and ``permission`` must be
  given (``ANY`` is a value), so a bare DELETE cannot wipe every ACL by accident.

SCRAM users (Longboat's own routes; Kafka does this with ``kafka-configs --alter
--add-config SCRAM-SHA-256=[password=...]``):

* ``GET .../users`` and ``GET .../users/{user}``: names, mechanisms and iteration counts,
  never salts or keys;
* ``POST .../users`` ``{"user_name", "password", "mechanism"?, "iterations"?}`` sets (or
  replaces) a credential. The broker salts the password (``os.urandom``) and derives the keys
  (``ScramCredential.derive``, off the event loop: PBKDF2 is slow on purpose); only salt,
  iterations and keys go to the controller and the log. The password is read from the body
  only, never from a query string (which servers and proxies log), and never logged;
* ``DELETE .../users/{user}?mechanism=``: one mechanism, or every one the user has.

Every change goes to the active controller (``ControllerClient``) and the answer waits until
this broker's image shows it, so a read after it, here, sees it; reads first catch up with
the controller (``HttpContext.sync_metadata``). Which principal may call these routes is the
listener's business (Kafka asks ALTER on the CLUSTER to change ACLs and credentials,
DESCRIBE to read them).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from api.http.context import HttpContext, base_url, ctx_of, json_body, json_response
from api.http.errors import HttpError, bad_request, kafka_error, unprocessable
from metalog.client import ControllerUnavailableError
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
    PATTERN_FILTERS,
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

ADMIN_WAIT_S = 15.0
SCRAM_ITERATIONS_DEFAULT = SCRAM_MIN_ITERATIONS
"""kafka-configs' default (4096, RFC 7677's floor)."""
SCRAM_ITERATIONS_MAX = 16_384
"""Kafka's ``ScramMechanism.maxIterations`` (the controller refuses more too)."""
SCRAM_MECHANISM_DEFAULT = "SCRAM-SHA-256"
SALT_BYTES = 32
PASSWORD_CHARS_MAX = 1024

FIELDS = (
    "resource_type",
    "resource_name",
    "pattern_type",
    "principal",
    "host",
    "operation",
    "permission",
)

# Controller refusals of this module's commands -> (status, REST Proxy style code).
_ERRORS: dict[str, tuple[int, int]] = {
    "INVALID_REQUEST": (400, 40002),
    "RESOURCE_NOT_FOUND": (404, 40406),
    "DUPLICATE_RESOURCE": (400, 40002),
    "UNSUPPORTED_SASL_MECHANISM": (400, 40002),
    "UNACCEPTABLE_CREDENTIAL": (400, 40002),
}


async def _execute(ctx: HttpContext, command: Any) -> Any:
    try:
        return await ctx.controllers.execute(command)
    except MetadataError as e:
        status_code = _ERRORS.get(e.code)
        if status_code is None:
            raise kafka_error(e.code, str(e)) from None
        raise HttpError(status_code[0], f"{e.code}: {e}", status_code[1]) from None
    except ControllerUnavailableError as e:
        raise HttpError(503, f"No active controller: {e}", 50302) from None


async def _wait(ctx: HttpContext, cond: Callable[[MetadataImage], bool]) -> None:
    if not await ctx.wait_image(cond, ADMIN_WAIT_S):
        raise HttpError(
            504, "The change was committed but this broker has not applied it yet.", 50400
        )


# --------------------------------------------------------------------------- ACLs


def _enum(cls: Any, field: str, value: object) -> Any:
    if not isinstance(value, str) or value.upper() not in cls.__members__:
        raise bad_request(
            f"'{field}' must be one of {', '.join(cls.__members__)}, got {value!r}.", 40002
        )
    return cls[value.upper()]


def binding_of(body: object) -> AclBinding:
    """An ACL binding from the REST Proxy's JSON shape (``CreateAclRequest``)."""
    if not isinstance(body, dict):
        raise unprocessable("An ACL is a JSON object with " + ", ".join(FIELDS) + ".")
    missing = [f for f in FIELDS if f not in body and f != "host"]
    if missing:
        raise unprocessable(f"Missing ACL field(s): {', '.join(missing)}.")
    for f in ("resource_name", "principal", "host"):
        if f in body and not isinstance(body[f], str):
            raise unprocessable(f"'{f}' must be a string.")
    return AclBinding(
        principal=body["principal"],
        host=body.get("host", "*"),
        resource_type=_enum(ResourceType, "resource_type", body["resource_type"]),
        resource_name=body["resource_name"],
        pattern_type=_enum(PatternType, "pattern_type", body["pattern_type"]),
        operation=_enum(Operation, "operation", body["operation"]),
        permission=_enum(Permission, "permission", body["permission"]),
    )


def filter_of(request: web.Request, *, required: tuple[str, ...] = ()) -> AclBindingFilter:
    """An ``AclBindingFilter`` from the query string: absent or ``ANY`` matches anything."""
    q = request.query
    for name in q:
        if name not in FIELDS:
            raise bad_request(f"Unknown query parameter '{name}'.")
    for name in required:
        if name not in q:
            raise bad_request(f"Query parameter '{name}' is required (ANY matches every value).")

    def opt_enum(cls: Any, name: str) -> Any:
        v = q.get(name)
        if v is None or v.upper() == "ANY":
            return None
        return _enum(cls, name, v)

    pattern = q.get("pattern_type", "ANY").upper()
    if pattern not in PATTERN_FILTERS:
        raise bad_request(
            f"'pattern_type' must be one of {', '.join(PATTERN_FILTERS)}, got {pattern!r}.",
            40002,
        )
    return AclBindingFilter(
        principal=q.get("principal"),
        host=q.get("host"),
        resource_type=opt_enum(ResourceType, "resource_type"),
        resource_name=q.get("resource_name"),
        pattern_type=pattern,
        operation=opt_enum(Operation, "operation"),
        permission=opt_enum(Permission, "permission"),
    )


def sort_key(acl: AclBinding) -> tuple[str, ...]:
    """Resource first, then who, then what: how people read a list of ACLs."""
    return (
        acl.resource_type,
        acl.resource_name,
        acl.pattern_type,
        acl.principal,
        acl.host,
        acl.operation,
        acl.permission,
    )


def acl_json(request: web.Request, ctx: HttpContext, acl: AclBinding) -> dict[str, Any]:
    fields = {
        "resource_type": str(acl.resource_type),
        "resource_name": acl.resource_name,
        "pattern_type": str(acl.pattern_type),
        "principal": acl.principal,
        "host": acl.host,
        "operation": str(acl.operation),
        "permission": str(acl.permission),
    }
    return {
        "kind": "KafkaAcl",
        "metadata": {
            "self": f"{base_url(request)}/v3/clusters/{ctx.cluster_id}/acls?{urlencode(fields)}"
        },
        "cluster_id": ctx.cluster_id,
        **fields,
    }


def _acl_list(request: web.Request, ctx: HttpContext, acls: list[AclBinding]) -> dict[str, Any]:
    return {
        "kind": "KafkaAclList",
        "metadata": {"self": f"{base_url(request)}{request.path_qs}"},
        "data": [acl_json(request, ctx, a) for a in acls],
    }


async def search_acls(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    flt = filter_of(request)
    await ctx.sync_metadata()
    found = sorted((a for _, a in ctx.image.acls.matching(flt)), key=sort_key)
    return json_response(_acl_list(request, ctx, found))


async def _create(ctx: HttpContext, bindings: tuple[AclBinding, ...]) -> web.Response:
    resp = await _execute(ctx, CreateAcls(bindings=bindings))
    ids = {e.id for e in resp.entries}
    await _wait(ctx, lambda im: all(i in im.acls.by_id for i in ids))
    return web.Response(status=201)


async def create_acl(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    return await _create(ctx, (binding_of(await json_body(request)),))


async def create_acls_batch(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    body = await json_body(request)
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list) or not data:
        raise unprocessable('The body must be {"data": [ACL, ...]} with at least one ACL.')
    return await _create(ctx, tuple(binding_of(b) for b in data))


async def delete_acls(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    flt = filter_of(request, required=("resource_type", "pattern_type", "operation", "permission"))
    resp = await _execute(ctx, DeleteAcls(filters=(flt,)))
    ids = {e.id for e in resp.deleted}
    await _wait(ctx, lambda im: not any(i in im.acls.by_id for i in ids))
    deleted = sorted((e.binding for e in resp.deleted), key=sort_key)
    return json_response(_acl_list(request, ctx, deleted))


# --------------------------------------------------------------------------- SCRAM users


def user_json(
    request: web.Request, ctx: HttpContext, user: str, creds: list[ScramCredential]
) -> dict[str, Any]:
    return {
        "kind": "KafkaUser",
        "metadata": {"self": f"{base_url(request)}/v3/clusters/{ctx.cluster_id}/users/{user}"},
        "cluster_id": ctx.cluster_id,
        "user_name": user,
        "principal": f"User:{user}",
        "credentials": [{"mechanism": c.mechanism, "iterations": c.iterations} for c in creds],
    }


async def list_users(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    await ctx.sync_metadata()
    users = ctx.image.scram.users()
    return json_response(
        {
            "kind": "KafkaUserList",
            "metadata": {"self": f"{base_url(request)}{request.path}"},
            "data": [user_json(request, ctx, u, c) for u, c in users.items()],
        }
    )


def _user_not_found(user: str) -> HttpError:
    return HttpError(404, f"User '{user}' has no SCRAM credentials.", 40406)


async def get_user(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    user = request.match_info["user"]
    await ctx.sync_metadata()
    creds = ctx.image.scram.users().get(user)
    if not creds:
        raise _user_not_found(user)
    return json_response(user_json(request, ctx, user, creds))


def _mechanism(value: object) -> str:
    if value not in SCRAM_MECHANISMS:
        raise bad_request(
            f"'mechanism' must be one of {', '.join(SCRAM_MECHANISMS)}, got {value!r}.", 40002
        )
    assert isinstance(value, str)
    return value


async def upsert_user(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    body = await json_body(request)
    if not isinstance(body, dict):
        raise unprocessable('The body must be {"user_name", "password", "mechanism"?}.')
    user, password = body.get("user_name"), body.get("password")
    if not isinstance(user, str) or not user:
        raise unprocessable("'user_name' (a non-empty string) is required.")
    if not isinstance(password, str) or not password:
        raise unprocessable("'password' (a non-empty string) is required.")
    if len(password) > PASSWORD_CHARS_MAX:
        raise unprocessable(f"'password' is at most {PASSWORD_CHARS_MAX} characters.")
    mechanism = _mechanism(body.get("mechanism", SCRAM_MECHANISM_DEFAULT))
    iterations = body.get("iterations", SCRAM_ITERATIONS_DEFAULT)
    if type(iterations) is not int:
        raise unprocessable("'iterations' must be an integer.")
    if iterations < SCRAM_MIN_ITERATIONS:
        # Checked here too: derive() would refuse, and the controller only sees the keys.
        raise bad_request(f"'iterations' must be at least {SCRAM_MIN_ITERATIONS}.", 40002)
    if iterations > SCRAM_ITERATIONS_MAX:
        raise bad_request(f"'iterations' must be at most {SCRAM_ITERATIONS_MAX}.", 40002)
    salt = os.urandom(SALT_BYTES)
    # PBKDF2 takes milliseconds on purpose: not on the event loop.
    cred = await asyncio.to_thread(ScramCredential.derive, mechanism, password, salt, iterations)
    await _execute(
        ctx,
        AlterUserScramCredentials(
            upsertions=(
                ScramUpsertion(
                    user, mechanism, cred.salt, cred.iterations, cred.stored_key, cred.server_key
                ),
            )
        ),
    )
    await _wait(ctx, lambda im: im.scram.get(user, mechanism) == cred)
    creds = ctx.image.scram.users().get(user, [])
    return json_response(user_json(request, ctx, user, creds), 200)


async def delete_user(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    user = request.match_info["user"]
    for name in request.query:
        if name != "mechanism":
            raise bad_request(f"Unknown query parameter '{name}'.")
    if "mechanism" in request.query:
        mechanisms = [_mechanism(request.query["mechanism"])]
    else:
        await ctx.sync_metadata()
        mechanisms = [c.mechanism for c in ctx.image.scram.users().get(user, [])]
        if not mechanisms:
            raise _user_not_found(user)
    await _execute(
        ctx,
        AlterUserScramCredentials(deletions=tuple(ScramDeletion(user, m) for m in mechanisms)),
    )
    await _wait(ctx, lambda im: all(im.scram.get(user, m) is None for m in mechanisms))
    return web.Response(status=204)


def add_acl_routes(app: web.Application) -> None:
    r = app.router
    c = "/v3/clusters/{cluster_id}"
    r.add_get(c + "/acls", search_acls)
    r.add_post(c + "/acls", create_acl)
    r.add_delete(c + "/acls", delete_acls)
    r.add_post(c + "/acls:batch", create_acls_batch)
    r.add_get(c + "/users", list_users)
    r.add_post(c + "/users", upsert_user)
    r.add_get(c + "/users/{user}", get_user)
    r.add_delete(c + "/users/{user}", delete_user)
