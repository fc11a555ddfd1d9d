"""HTTP errors in the Confluent REST Proxy's shape: ``{"error_code": int, "message": str}``.

Every error a route raises, and every error aiohttp raises on its own (unknown path, wrong
method, body too large), leaves the server as that JSON body with the matching status, so a
curl user never sees an HTML page or a stack trace. ``error_code`` is the HTTP status or a
five-digit code that starts with it, as the REST Proxy uses them (``40401`` topic not found,
``40402`` partition not found, ``42206`` empty payload, ...; table in docs/http-api.md).
An exception that is not an ``HttpError`` is a bug: it is logged with its traceback and
answered 500 with code 50001 and no internals in the message.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import orjson
from aiohttp import web

log = logging.getLogger(__name__)

JSON = "application/json"


class HttpError(Exception):
    """An error answered to the client. ``error_code`` defaults to the status."""

    def __init__(self, status: int, message: str, error_code: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_code = error_code if error_code is not None else status


# Codes from the REST Proxy (confluentinc/rest-utils, kafka-rest Errors.java).
def bad_request(message: str, code: int = 400) -> HttpError:
    return HttpError(400, message, code)


def topic_not_found(topic: str) -> HttpError:
    return HttpError(404, f"Topic '{topic}' not found.", 40401)


def partition_not_found(topic: str, partition: int) -> HttpError:
    return HttpError(404, f"Partition {partition} of topic '{topic}' not found.", 40402)


def unprocessable(message: str, code: int = 42206) -> HttpError:
    return HttpError(422, message, code)


def error_response(status: int, message: str, error_code: int | None = None) -> web.Response:
    return web.Response(
        status=status,
        body=orjson.dumps({"error_code": error_code or status, "message": message}),
        content_type=JSON,
    )


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except HttpError as e:
        return error_response(e.status, e.message, e.error_code)
    except web.HTTPException as e:
        if e.status < 400:
            raise  # redirects and 2xx raised as exceptions pass through untouched
        message = e.text if e.text and not e.text.startswith("<") else e.reason
        message = message.removeprefix(f"{e.status}: ")  # aiohttp's default text repeats it
        return error_response(e.status, f"HTTP {e.status} {message}".strip())
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        return error_response(500, "Internal server error.", 50001)
