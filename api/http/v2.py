"""Confluent REST Proxy v2 compatibility: metadata reads and produce, as scripts expect them.

``GET /topics``, ``GET /topics/{topic}``, ``GET /topics/{topic}/partitions``,
``GET /topics/{topic}/partitions/{p}``, ``GET /topics/{topic}/partitions/{p}/offsets``,
``GET /brokers``; ``POST /topics/{topic}`` and ``POST /topics/{topic}/partitions/{p}`` with
``{"records": [{"key", "value", "partition"}]}`` in ``application/vnd.kafka.json.v2+json``
(values are JSON) or ``application/vnd.kafka.binary.v2+json`` (values are base64), answered
``{"key_schema_id": null, "value_schema_id": null, "offsets": [{"partition", "offset",
"error_code", "error"}]}`` with per-record errors in ``offsets[i]``. The embedded formats that
need a schema registry (avro, jsonschema, protobuf) are refused: 422 with 42201 (key schema
missing) or 42202 (value schema missing) as the REST Proxy answers a record without its
schema; Longboat has no registry to give one. The records are produced as v3's are, by
``api.http.produce``.
"""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from api.http.context import ctx_of, json_body, json_response, media_type, parse_acks, path_int
from api.http.errors import HttpError, unprocessable, unsupported_media_type
from api.http.produce import PRODUCE_TIMEOUT_MS_DEFAULT, produce_values
from api.http.records import parse_v2_record
from metalog.records import ConfigResourceType

SCHEMA_FORMATS = ("avro", "jsonschema", "protobuf")


def _format(request: web.Request) -> str:
    mt = media_type(request)
    if mt in (
        "",
        "application/json",
        "application/vnd.kafka.v2+json",
        "application/vnd.kafka.json.v2+json",
    ):
        return "json"
    if mt == "application/vnd.kafka.binary.v2+json":
        return "binary"
    for f in SCHEMA_FORMATS:
        if mt == f"application/vnd.kafka.{f}.v2+json":
            return f
    raise unsupported_media_type(mt)


async def list_topics(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    await ctx.sync_metadata()
    return json_response(sorted(t.name for t in ctx.image.topics.by_id.values()))


async def get_topic(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    await ctx.sync_metadata()
    name = request.match_info["topic"]
    t = ctx.topic_or_404(name)
    image = ctx.image
    overrides = image.configs.get(ConfigResourceType.TOPIC, name)
    return json_response(
        {
            "name": name,
            "configs": dict(overrides),
            "partitions": [_partition(p, reg) for p, reg in sorted(t.partitions.items())],
        }
    )


def _partition(p: int, reg: Any) -> dict[str, Any]:
    isr = {int(b) for b in reg.isr}
    return {
        "partition": p,
        "leader": int(reg.leader),
        "replicas": [
            {"broker": int(b), "leader": int(b) == int(reg.leader), "in_sync": int(b) in isr}
            for b in reg.replicas
        ],
    }


async def list_partitions(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    t = ctx.topic_or_404(request.match_info["topic"])
    return json_response([_partition(p, reg) for p, reg in sorted(t.partitions.items())])


async def get_partition(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    topic, p = request.match_info["topic"], path_int(request, "partition")
    return json_response(_partition(p, ctx.partition_or_404(topic, p)))


async def get_offsets(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    topic, p = request.match_info["topic"], path_int(request, "partition")
    ctx.partition_or_404(topic, p)
    return json_response(
        {
            "beginning_offset": await ctx.list_offset(topic, p, -2),
            "end_offset": await ctx.list_offset(topic, p, -1),
        }
    )


async def list_brokers(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    return json_response({"brokers": sorted(int(b) for b in ctx.image.brokers.brokers)})


async def produce(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    topic = request.match_info["topic"]
    t0 = time.monotonic()
    partition = path_int(request, "partition") if "partition" in request.match_info else None
    ctx.topic_or_404(topic)
    if partition is not None:
        ctx.partition_or_404(topic, partition)
    fmt = _format(request)
    ctx.metrics.produce_requests.labels("v2").inc()
    body = await json_body(request)
    recs = body.get("records") if isinstance(body, dict) else None
    if not isinstance(recs, list) or not recs:
        raise unprocessable("Request body is empty. Data is required.", 42206)
    if fmt in SCHEMA_FORMATS:
        has_key = any(isinstance(r, dict) and r.get("key") is not None for r in recs)
        if has_key and body.get("key_schema") is None and body.get("key_schema_id") is None:
            raise unprocessable("Request includes keys but does not include key schema", 42201)
        if body.get("value_schema") is None and body.get("value_schema_id") is None:
            raise unprocessable("Request includes values but does not include value schema", 42202)
        raise unprocessable(
            f"The {fmt} format needs a schema registry, which Longboat does "
            "not have; use application/vnd.kafka.json.v2+json or "
            "application/vnd.kafka.binary.v2+json.",
            42207,
        )
    _, outcomes = await produce_values(
        ctx,
        topic,
        recs,
        acks=parse_acks(request),
        timeout_ms=PRODUCE_TIMEOUT_MS_DEFAULT,
        parse=lambda obj, ts: parse_v2_record(obj, fmt, ts, partition),
    )
    offsets = []
    for o in outcomes:
        if isinstance(o, HttpError):
            offsets.append(
                {"partition": None, "offset": None, "error_code": o.error_code, "error": o.message}
            )
        else:
            offsets.append(
                {"partition": o.partition, "offset": o.offset, "error_code": None, "error": None}
            )
    ctx.metrics.produce_latency.labels("v2").observe(time.monotonic() - t0)
    return json_response({"key_schema_id": None, "value_schema_id": None, "offsets": offsets})


def add_v2_routes(app: web.Application) -> None:
    r = app.router
    r.add_get("/topics", list_topics)
    r.add_get("/topics/{topic}", get_topic)
    r.add_post("/topics/{topic}", produce)
    r.add_get("/topics/{topic}/partitions", list_partitions)
    r.add_get("/topics/{topic}/partitions/{partition}", get_partition)
    r.add_post("/topics/{topic}/partitions/{partition}", produce)
    r.add_get("/topics/{topic}/partitions/{partition}/offsets", get_offsets)
    r.add_get("/brokers", list_brokers)
