"""The Confluent Schema Registry REST API (v1), on every broker's HTTP listener.

Served at the root paths Confluent's clients use with the broker's URL as the registry's
(``SchemaRegistryClient({"url": "http://broker:port"})``); none of them clashes with the v2
REST Proxy routes (``/topics``, ``/consumers``, ``/brokers``) or ``/v3``:

* ``GET /subjects``, ``GET /subjects/{s}/versions``, ``POST /subjects/{s}/versions``
  (register), ``GET|DELETE /subjects/{s}/versions/{v}`` (+ ``/schema``, ``/referencedby``),
  ``POST /subjects/{s}`` (look up), ``DELETE /subjects/{s}``;
* ``GET /schemas``, ``GET /schemas/ids/{id}`` (+ ``/schema``, ``/versions``, ``/subjects``),
  ``GET /schemas/types``;
* ``POST /compatibility/subjects/{s}/versions/{v}`` and ``.../versions`` (all);
* ``GET|PUT|DELETE /config`` and ``/config/{s}``, ``GET|PUT /mode``, ``GET|PUT|DELETE
  /mode/{s}``.

Answers are ``application/vnd.schemaregistry.v1+json``; request bodies may be that,
``application/vnd.schemaregistry+json``, ``application/json`` or ``application/octet-stream``
(as Confluent's registry takes). Errors are ``{"error_code", "message"}`` with the registry's
codes (``broker.schemas.state``). Reads are answered from this broker's copy of ``_schemas``
after it has caught up with the partition's high watermark; writes run on the single writer
(``broker.schemas.registry``). docs/schemas.md has the API with curl examples.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from api.http.context import CONTEXT_KEY, media_type, read_body
from api.http.errors import HttpError, bad_request, unsupported_media_type
from broker.schemas.parse import SCHEMA_TYPES, InvalidSchemaError, Reference, SchemaText, text_of
from broker.schemas.registry import SchemaRegistry, register_args
from broker.schemas.routes import REGISTRY_KEY
from broker.schemas.state import (
    INVALID_SCHEMA,
    SCHEMA_NOT_FOUND,
    RegistryError,
    RegistryState,
    parse_version,
)
from common.principal import CURRENT_PRINCIPAL

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
BODY_TYPES = frozenset(
    {
        "",
        CONTENT_TYPE,
        "application/vnd.schemaregistry+json",
        "application/json",
        "application/octet-stream",
    }
)

Handler = Callable[[web.Request], Awaitable[web.Response]]


def _answer(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type=CONTENT_TYPE)


def _raw(text: str) -> web.Response:
    """``.../schema``: the schema itself as the body."""
    return web.Response(text=text, content_type=CONTENT_TYPE)


def _registry(request: web.Request) -> SchemaRegistry:
    return request.app[REGISTRY_KEY]


def _flag(request: web.Request, name: str) -> bool:
    """Confluent's clients send ``True``/``False`` (Python) as well as ``true``/``false``."""
    return request.query.get(name, "false").strip().lower() in ("true", "1", "yes")


def _subject(request: web.Request) -> str:
    return request.match_info["subject"]


def _version(request: web.Request) -> int:
    return parse_version(request.match_info["version"])


def _schema_id(request: web.Request) -> int:
    raw = request.match_info["id"]
    try:
        return int(raw)
    except ValueError:
        raise HttpError(404, "Schema not found", SCHEMA_NOT_FOUND) from None


async def _body(request: web.Request) -> dict[str, Any]:
    mt = media_type(request)
    if mt not in BODY_TYPES:
        raise unsupported_media_type(mt)
    raw = await read_body(request)
    try:
        body = orjson.loads(raw) if raw.strip() else {}
    except orjson.JSONDecodeError as e:
        raise bad_request(f"Malformed JSON: {e}", 50005) from None
    if not isinstance(body, dict):
        raise HttpError(422, "The request body must be a JSON object.", 422)
    return body


def _schema_text(body: dict[str, Any]) -> SchemaText:
    schema = body.get("schema")
    if not isinstance(schema, str) or not schema.strip():
        raise HttpError(422, "Empty schema", INVALID_SCHEMA)
    st = body.get("schemaType")
    if st is not None and not isinstance(st, str):
        raise HttpError(422, "Invalid schema type", INVALID_SCHEMA)
    refs_in = body.get("references") or []
    refs = []
    if not isinstance(refs_in, list):
        raise HttpError(422, "Invalid references: a list expected", INVALID_SCHEMA)
    for r in refs_in:
        if not (
            isinstance(r, dict)
            and isinstance(r.get("name"), str)
            and isinstance(r.get("subject"), str)
            and isinstance(r.get("version"), int)
        ):
            raise HttpError(
                422, f"Invalid reference {r!r}: name, subject and version needed", INVALID_SCHEMA
            )
        refs.append(Reference(r["name"], r["subject"], int(r["version"])))
    try:
        return text_of(st, schema, tuple(refs))
    except InvalidSchemaError as e:
        raise HttpError(422, str(e), INVALID_SCHEMA) from None


def _guard(fn: Handler) -> Handler:
    """A ``RegistryError`` (from the core or the writer) as the registry's error body."""

    async def handle(request: web.Request) -> web.Response:
        try:
            return await fn(request)
        except RegistryError as e:
            raise HttpError(e.status, e.message, e.error_code) from None

    return handle


async def _registry_read(request: web.Request, fn: Callable[[RegistryState], Any]) -> Any:
    """``fn`` over the registry once this broker's metadata is current (a read index against
    the active controller, as the v3 admin reads do), then synced with ``_schemas``: a broker
    restarted a moment ago answered a read from its empty state in 5 ms, a 404 for a schema id
    acknowledged long before (the schemas workload of jepsen_tests), because its image did not
    yet show the topic its state comes from."""
    ctx = request.app.get(CONTEXT_KEY)
    if ctx is not None:
        await ctx.sync_metadata()
    # The sync asks the leader of _schemas for its high watermark: the broker's own
    # bookkeeping, as the node (the route checked the user's right). Asked as the user, who
    # may not DESCRIBE _schemas, the leader hid the topic, and a user's read on any other
    # broker of a secure cluster waited out read_sync_timeout_ms, then answered unsynced.
    token = CURRENT_PRINCIPAL.set(None)
    try:
        return await _registry(request).read(fn)
    finally:
        CURRENT_PRINCIPAL.reset(token)


async def _read(request: web.Request, fn: Callable[[RegistryState], Any]) -> web.Response:
    return _answer(await _registry_read(request, fn))


# ---------------------------------------------------------------- subjects


async def list_subjects(request: web.Request) -> web.Response:
    prefix = request.query.get("subjectPrefix", "")
    deleted = _flag(request, "deleted")
    return await _read(request, lambda st: st.list_subjects(prefix, deleted))


async def list_versions(request: web.Request) -> web.Response:
    s, deleted = _subject(request), _flag(request, "deleted")
    return await _read(request, lambda st: st.list_versions(s, deleted))


async def register(request: web.Request) -> web.Response:
    s = _subject(request)
    body = await _body(request)
    text = _schema_text(body)
    sid, ver = body.get("id"), body.get("version")
    for name, v in (("id", sid), ("version", ver)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
            raise HttpError(422, f"'{name}' must be an integer", INVALID_SCHEMA)
    if ver is not None and ver <= 0:
        ver = None  # Confluent's clients send version 0 / -1 for "the next one"
    if sid is not None and sid <= 0:
        sid = None
    out = await _registry(request).write(
        "register",
        register_args(s, text, normalize=_flag(request, "normalize"), schema_id=sid, version=ver),
    )
    return _answer(out)


async def get_version(request: web.Request) -> web.Response:
    s, v, deleted = _subject(request), _version(request), _flag(request, "deleted")
    return await _read(request, lambda st: st.get_version(s, v, deleted))


async def get_version_schema(request: web.Request) -> web.Response:
    s, v, deleted = _subject(request), _version(request), _flag(request, "deleted")
    out = await _registry_read(request, lambda st: st.get_version(s, v, deleted))
    return _raw(out["schema"])


async def referenced_by(request: web.Request) -> web.Response:
    s, v = _subject(request), _version(request)
    return await _read(request, lambda st: st.referenced_by(s, v))


async def delete_version(request: web.Request) -> web.Response:
    s, v = _subject(request), _version(request)
    out = await _registry(request).write(
        "delete_version", {"subject": s, "version": v, "permanent": _flag(request, "permanent")}
    )
    return _answer(out)


async def lookup(request: web.Request) -> web.Response:
    s = _subject(request)
    text = _schema_text(await _body(request))
    normalize, deleted = _flag(request, "normalize"), _flag(request, "deleted")
    return await _read(request, lambda st: st.lookup(s, text, normalize, deleted))


async def delete_subject(request: web.Request) -> web.Response:
    out = await _registry(request).write(
        "delete_subject", {"subject": _subject(request), "permanent": _flag(request, "permanent")}
    )
    return _answer(out)


# ---------------------------------------------------------------- schemas by id


async def list_schemas(request: web.Request) -> web.Response:
    prefix = request.query.get("subjectPrefix", "")
    deleted, latest = _flag(request, "deleted"), _flag(request, "latestOnly")
    return await _read(request, lambda st: st.list_schemas(prefix, deleted, latest))


async def get_schema(request: web.Request) -> web.Response:
    sid = _schema_id(request)
    return await _read(request, lambda st: st.get_schema(sid))


async def get_schema_text(request: web.Request) -> web.Response:
    sid = _schema_id(request)
    out = await _registry_read(request, lambda st: st.get_schema(sid))
    return _raw(out["schema"])


async def schema_versions(request: web.Request) -> web.Response:
    sid, deleted = _schema_id(request), _flag(request, "deleted")
    return await _read(request, lambda st: st.versions_of_id(sid, deleted))


async def schema_subjects(request: web.Request) -> web.Response:
    sid, deleted = _schema_id(request), _flag(request, "deleted")
    return await _read(request, lambda st: st.subjects_of_id(sid, deleted))


async def schema_types(request: web.Request) -> web.Response:
    return _answer(list(SCHEMA_TYPES))


# ---------------------------------------------------------------- compatibility


async def _compatibility(request: web.Request, version: int | None) -> web.Response:
    s = _subject(request)
    text = _schema_text(await _body(request))
    normalize = _flag(request, "normalize")

    def check(st: RegistryState) -> list[str]:
        if version is None and not st.versions_of(s):
            return []  # nothing to be incompatible with
        return st.compatibility(s, text, version, normalize)

    problems = await _registry_read(request, check)
    out: dict[str, Any] = {"is_compatible": not problems}
    if _flag(request, "verbose"):
        out["messages"] = problems
    return _answer(out)


async def compatibility_version(request: web.Request) -> web.Response:
    return await _compatibility(request, _version(request))


async def compatibility_all(request: web.Request) -> web.Response:
    return await _compatibility(request, None)


# ---------------------------------------------------------------- config and mode


def _maybe_subject(request: web.Request) -> str | None:
    return request.match_info.get("subject")


async def get_config(request: web.Request) -> web.Response:
    s, dflt = _maybe_subject(request), _flag(request, "defaultToGlobal")
    return await _read(request, lambda st: st.get_config(s, dflt))


async def put_config(request: web.Request) -> web.Response:
    body = await _body(request)
    level = body.get("compatibility", body.get("compatibilityLevel"))
    return _answer(
        await _registry(request).write(
            "set_config", {"subject": _maybe_subject(request), "level": level}
        )
    )


async def delete_config(request: web.Request) -> web.Response:
    return _answer(
        await _registry(request).write("delete_config", {"subject": _maybe_subject(request)})
    )


async def get_mode(request: web.Request) -> web.Response:
    s, dflt = _maybe_subject(request), _flag(request, "defaultToGlobal")
    return await _read(request, lambda st: st.get_mode(s, dflt))


async def put_mode(request: web.Request) -> web.Response:
    body = await _body(request)
    return _answer(
        await _registry(request).write(
            "set_mode",
            {
                "subject": _maybe_subject(request),
                "mode": body.get("mode"),
                "force": _flag(request, "force"),
            },
        )
    )


async def delete_mode(request: web.Request) -> web.Response:
    return _answer(await _registry(request).write("delete_mode", {"subject": _subject(request)}))


def add_schema_registry_routes(app: web.Application) -> None:
    """The public routes; the registry itself is on the app already (``REGISTRY_KEY``,
    ``broker.schemas.routes.add_registry_routes``)."""
    r = app.router
    for method, path, fn in (
        ("GET", "/subjects", list_subjects),
        ("GET", "/subjects/{subject}/versions", list_versions),
        ("POST", "/subjects/{subject}/versions", register),
        ("GET", "/subjects/{subject}/versions/{version}", get_version),
        ("GET", "/subjects/{subject}/versions/{version}/schema", get_version_schema),
        ("GET", "/subjects/{subject}/versions/{version}/referencedby", referenced_by),
        ("DELETE", "/subjects/{subject}/versions/{version}", delete_version),
        ("POST", "/subjects/{subject}", lookup),
        ("DELETE", "/subjects/{subject}", delete_subject),
        ("GET", "/schemas", list_schemas),
        ("GET", "/schemas/types", schema_types),
        ("GET", "/schemas/ids/{id}", get_schema),
        ("GET", "/schemas/ids/{id}/schema", get_schema_text),
        ("GET", "/schemas/ids/{id}/versions", schema_versions),
        ("GET", "/schemas/ids/{id}/subjects", schema_subjects),
        ("POST", "/compatibility/subjects/{subject}/versions/{version}", compatibility_version),
        ("POST", "/compatibility/subjects/{subject}/versions", compatibility_all),
        ("GET", "/config", get_config),
        ("PUT", "/config", put_config),
        ("DELETE", "/config", delete_config),
        ("GET", "/config/{subject}", get_config),
        ("PUT", "/config/{subject}", put_config),
        ("DELETE", "/config/{subject}", delete_config),
        ("GET", "/mode", get_mode),
        ("PUT", "/mode", put_mode),
        ("GET", "/mode/{subject}", get_mode),
        ("PUT", "/mode/{subject}", put_mode),
        ("DELETE", "/mode/{subject}", delete_mode),
    ):
        r.add_route(method, path, _guard(fn))
