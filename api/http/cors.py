"""CORS for the broker's public HTTP API, so browser tools that speak the REST Proxy API can
call Longboat from another origin (the Fetch standard's CORS protocol).

Off unless the node config ``http_cors_allowed_origins`` names origins (``https://ui.example``,
or ``*`` for any). Then, on the public routes only (never ``/internal/...``, the node-to-node
API):

* a preflight (``OPTIONS`` with ``Access-Control-Request-Method``) from an allowed origin is
  answered 204 with the methods and the headers it asked for (``Max-Age`` lets the browser
  keep the answer); from another origin, 403 in the API's error shape, so whoever reads the
  browser's network log sees why;
* every response to a request with an allowed ``Origin``, errors and streamed bodies
  included, carries ``Access-Control-Allow-Origin`` (set in ``on_response_prepare``, which
  runs before the headers of a streamed response leave) and ``Vary: Origin``.

A request from an origin not allowed is served as before, without CORS headers: the browser
then withholds the answer from the page, and tools that are not browsers are unaffected.
No credentials mode (``Access-Control-Allow-Credentials``): the API has no cookies.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

from aiohttp import web

from api.http.errors import error_response

ALLOWED_METHODS = "GET, POST, PUT, PATCH, DELETE"
ALLOWED_HEADERS_DEFAULT = "Content-Type, Accept, Authorization"
PREFLIGHT_MAX_AGE_S = 600
EXPOSED_HEADERS = "Content-Type, Content-Length"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class CorsPolicy:
    """Which origins may read the public API's answers."""

    def __init__(self, origins: Iterable[str]) -> None:
        self.origins = frozenset(o.strip().rstrip("/") for o in origins if o.strip())
        self.any = "*" in self.origins

    def allows(self, origin: str | None) -> bool:
        return origin is not None and (self.any or origin.rstrip("/") in self.origins)

    def allow_origin_value(self, origin: str) -> str:
        # "*" answers "*": a cache may then share the answer across origins.
        return "*" if self.any else origin


def _public(request: web.Request) -> bool:
    return not request.path.startswith("/internal")


def add_cors(app: web.Application, origins: Iterable[str]) -> CorsPolicy | None:
    """Registers the preflight middleware (outermost, so it answers before routing refuses
    ``OPTIONS`` with 405) and the response hook; nothing when ``origins`` is empty."""
    policy = CorsPolicy(origins)
    if not policy.origins:
        return None

    @web.middleware
    async def preflight(request: web.Request, handler: Handler) -> web.StreamResponse:
        if (
            request.method != "OPTIONS"
            or "Access-Control-Request-Method" not in request.headers
            or not _public(request)
        ):
            return await handler(request)
        origin = request.headers.get("Origin")
        if not policy.allows(origin):
            return error_response(
                403, f"Origin {origin!r} is not allowed (http_cors_allowed_origins).", 40301
            )
        assert origin is not None
        return web.Response(
            status=204,
            headers={
                "Access-Control-Allow-Origin": policy.allow_origin_value(origin),
                "Access-Control-Allow-Methods": ALLOWED_METHODS,
                "Access-Control-Allow-Headers": request.headers.get(
                    "Access-Control-Request-Headers", ALLOWED_HEADERS_DEFAULT
                ),
                "Access-Control-Max-Age": str(PREFLIGHT_MAX_AGE_S),
                "Vary": "Origin, Access-Control-Request-Method, Access-Control-Request-Headers",
            },
        )

    async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
        origin = request.headers.get("Origin")
        if request.method == "OPTIONS" or not _public(request) or not policy.allows(origin):
            return
        assert origin is not None
        response.headers["Access-Control-Allow-Origin"] = policy.allow_origin_value(origin)
        response.headers["Access-Control-Expose-Headers"] = EXPOSED_HEADERS
        vary = response.headers.get("Vary")
        response.headers["Vary"] = f"{vary}, Origin" if vary else "Origin"

    app.middlewares.insert(0, preflight)
    app.on_response_prepare.append(on_prepare)
    return policy
