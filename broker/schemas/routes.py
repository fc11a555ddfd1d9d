"""The registry's internal route: writes forwarded to the single writer (msgpack bodies).

``POST /internal/broker/v1/schemas/write``, body ``{"op", "args", "timeout_ms"}`` (an op of
``registry.OPS``), always HTTP 200, answer:

* ``{"response": ..., "offset": N}``: done and committed; ``N`` is the offset after its
  records (the caller's broker waits for its own tail to reach it before answering);
* ``{"error_code": C, "message": ...}``: the registry refused (``RegistryError``);
* ``{"not_writer": true, "message": ...}``: this broker does not lead ``_schemas``-0 now
  (the caller retries with the leader it learns from its metadata);
* ``{"error": "INVALID_REQUEST", "message": ...}``: a malformed body.

Never forwarded again: a broker that is not the writer says so.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import msgpack
from aiohttp import web

from broker.router import MSGPACK
from broker.schemas.registry import WRITE_PATH, NotWriterError, SchemaRegistry
from broker.schemas.state import RegistryError

log = logging.getLogger(__name__)

REGISTRY_KEY: web.AppKey[SchemaRegistry] = web.AppKey("schema_registry", SchemaRegistry)

TIMEOUT_MS_MAX = 120_000


def _pack(data: dict[str, Any]) -> web.Response:
    return web.Response(body=msgpack.packb(data, use_bin_type=True), content_type=MSGPACK)


async def handle_write(request: web.Request) -> web.Response:
    registry = request.app[REGISTRY_KEY]
    try:
        body = msgpack.unpackb(await request.read(), raw=False)
        if not isinstance(body, dict) or not isinstance(body.get("args"), dict):
            raise ValueError("body must be a msgpack map with 'op' and 'args'")
        timeout_ms = min(max(int(body.get("timeout_ms", 10_000)), 1), TIMEOUT_MS_MAX)
        response, offset = await registry.write_local(
            str(body["op"]), body["args"], time.monotonic() + timeout_ms / 1000
        )
        return _pack({"response": response, "offset": offset})
    except RegistryError as e:
        return _pack({"error_code": e.error_code, "message": e.message})
    except NotWriterError as e:
        return _pack({"not_writer": True, "message": str(e)})
    except (KeyError, TypeError, ValueError, msgpack.UnpackException) as e:
        return _pack({"error": "INVALID_REQUEST", "message": repr(e)})


def add_registry_routes(app: web.Application, registry: SchemaRegistry) -> None:
    app[REGISTRY_KEY] = registry
    app.router.add_post(WRITE_PATH, handle_write)
