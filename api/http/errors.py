"""HTTP errors in the Confluent REST Proxy's shape: ``{"error_code": int, "message": str}``.

Every error a route raises, and every error aiohttp raises on its own (unknown path, wrong
method, body too large), leaves the server as that JSON body with the matching status, so a
curl user never sees an HTML page or a stack trace. ``error_code`` is the HTTP status or a
five-digit code that starts with it, as the REST Proxy uses them (``40401`` topic not found,
``40402`` partition not found, ``42206`` empty payload, ...; table in docs/http-api.md).
``kafka_error`` turns a Kafka error name from the data path or the controller into the
matching status and code (``KAFKA_ERRORS``).
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


def cluster_not_found(cluster_id: str) -> HttpError:
    return HttpError(404, f"Cluster '{cluster_id}' not found.", 404)


def not_acceptable(message: str) -> HttpError:
    return HttpError(406, message, 40601)


def unsupported_media_type(content_type: str) -> HttpError:
    return HttpError(415, f"HTTP 415 Unsupported Media Type: {content_type}", 415)


# Kafka's error names (data path and controller) -> (HTTP status, REST Proxy code). A name not
# here is a server-side Kafka error: 500/50002 as the REST Proxy answers one.
KAFKA_ERRORS: dict[str, tuple[int, int]] = {
    "UNKNOWN_TOPIC_OR_PARTITION": (404, 40403),
    "LEADER_NOT_AVAILABLE": (503, 40404),
    "NOT_LEADER_OR_FOLLOWER": (503, 50003),
    "BROKER_NOT_AVAILABLE": (503, 50302),
    "OFFSET_OUT_OF_RANGE": (416, 416),
    "OFFSET_NOT_AVAILABLE": (503, 50003),
    "MESSAGE_TOO_LARGE": (413, 413),
    "RECORD_LIST_TOO_LARGE": (413, 413),
    "CORRUPT_MESSAGE": (400, 400),
    "INVALID_RECORD": (400, 400),
    "INVALID_REQUEST": (400, 400),
    "INVALID_REQUIRED_ACKS": (400, 400),
    "THROTTLING_QUOTA_EXCEEDED": (429, 42902),
    "NOT_ENOUGH_REPLICAS": (503, 50003),
    "NOT_ENOUGH_REPLICAS_AFTER_APPEND": (503, 50003),
    "REQUEST_TIMED_OUT": (408, 40801),
    "OUT_OF_ORDER_SEQUENCE_NUMBER": (409, 409),
    "INVALID_PRODUCER_EPOCH": (409, 409),
    "KAFKA_STORAGE_ERROR": (507, 50701),  # HTTP 507 Insufficient Storage: a disk error
    # controller (topic administration)
    "TOPIC_ALREADY_EXISTS": (400, 40002),
    "INVALID_TOPIC_EXCEPTION": (400, 40002),
    "INVALID_PARTITIONS": (400, 40002),
    "INVALID_REPLICATION_FACTOR": (400, 40002),
    "INVALID_REPLICA_ASSIGNMENT": (400, 40002),
    "INVALID_CONFIG": (400, 40002),
    "NOT_CONTROLLER": (503, 50003),
    # issue 18: a user's right refused further in (a group's coordinator refusing topics of
    # a commit the user asked through the HTTP API), as the REST Proxy answers 403.
    "TOPIC_AUTHORIZATION_FAILED": (403, 40301),
    "GROUP_AUTHORIZATION_FAILED": (403, 40301),
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED": (403, 40301),
    "CLUSTER_AUTHORIZATION_FAILED": (403, 40301),
}


def kafka_error(code: str, message: str) -> HttpError:
    """An ``HttpError`` for a Kafka error name; the message names the Kafka error, so a
    client can tell NOT_ENOUGH_REPLICAS from REQUEST_TIMED_OUT without a table."""
    status, rest_code = KAFKA_ERRORS.get(code, (500, 50002))
    text = message if message.startswith(code) else f"{code}: {message}" if message else code
    return HttpError(status, text, rest_code)


def error_body(status: int, message: str, error_code: int | None = None) -> bytes:
    return orjson.dumps({"error_code": error_code or status, "message": message})


def error_response(status: int, message: str, error_code: int | None = None) -> web.Response:
    return web.Response(
        status=status,
        body=orjson.dumps({"error_code": error_code or status, "message": message}),
        content_type=JSON,
    )


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

ERROR_HOOK_KEY: web.AppKey[Callable[[int, int], None]] = web.AppKey("error_hook")
"""Optional: called with (status, error_code) for every error answered (metrics)."""


def _answer(
    request: web.Request, status: int, message: str, error_code: int | None = None
) -> web.Response:
    hook = request.app.get(ERROR_HOOK_KEY)
    if hook is not None:
        hook(status, error_code or status)
    return error_response(status, message, error_code)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except HttpError as e:
        return _answer(request, e.status, e.message, e.error_code)
    except web.HTTPException as e:
        if e.status < 400:
            raise  # redirects and 2xx raised as exceptions pass through untouched
        message = e.text if e.text and not e.text.startswith("<") else e.reason
        message = message.removeprefix(f"{e.status}: ")  # aiohttp's default text repeats it
        return _answer(request, e.status, f"HTTP {e.status} {message}".strip())
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        return _answer(request, 500, "Internal server error.", 50001)
