"""Confluent REST Proxy v2 compatibility: metadata reads and produce, as scripts expect them.

``GET /topics``, ``GET /topics/{topic}``, ``GET /topics/{topic}/partitions``,
``GET /topics/{topic}/partitions/{p}``, ``GET /topics/{topic}/partitions/{p}/offsets``,
``GET /brokers``; ``POST /topics/{topic}`` and ``POST /topics/{topic}/partitions/{p}`` with
``{"records": [{"key", "value", "partition"}]}`` in ``application/vnd.kafka.json.v2+json``
(values are JSON) or ``application/vnd.kafka.binary.v2+json`` (values are base64), answered
``{"key_schema_id": null, "value_schema_id": null, "offsets": [{"partition", "offset",
"error_code", "error"}]}`` with per-record errors in ``offsets[i]``. With
``application/vnd.kafka.avro.v2+json`` or ``...jsonschema.v2+json`` the body also names the
schemas (``value_schema`` text or ``value_schema_id``, and ``key_schema``/``key_schema_id`` when
records have keys: 422 with 42202 or 42201 without them); each value is checked against its
schema and written in the registry's wire format through the broker's own Schema Registry
(``api.http.embedded``), and the answer gives the ids. Protobuf is refused (the registry does
not take it). The records are produced as v3's are, by ``api.http.produce``.
"""

from __future__ import annotations

import base64
import time
from typing import Any

from aiohttp import web

from api.http.context import ctx_of, json_body, json_response, media_type, parse_acks, path_int
from api.http.embedded import EmbeddedCodec
from api.http.errors import HttpError, unprocessable, unsupported_media_type
from api.http.produce import PRODUCE_TIMEOUT_MS_DEFAULT, produce_values
from api.http.records import parse_v2_record
from metalog.records import ConfigResourceType

SCHEMA_FORMATS = ("avro", "jsonschema")


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
    for f in (*SCHEMA_FORMATS, "protobuf"):
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
    ids: dict[str, int | None] = {"key": None, "value": None}
    if fmt in (*SCHEMA_FORMATS, "protobuf"):
        has_key = any(isinstance(r, dict) and r.get("key") is not None for r in recs)
        if has_key and body.get("key_schema") is None and body.get("key_schema_id") is None:
            raise unprocessable("Request includes keys but does not include key schema", 42201)
        if body.get("value_schema") is None and body.get("value_schema_id") is None:
            raise unprocessable("Request includes values but does not include value schema", 42202)
    if fmt == "protobuf":
        raise unprocessable(
            "The protobuf format is not supported: the schema registry takes AVRO and JSON "
            "schemas; use application/vnd.kafka.avro.v2+json or ...jsonschema.v2+json.",
            42207,
        )
    if fmt in SCHEMA_FORMATS:
        recs = await _encode_with_schemas(request, topic, fmt, body, recs, ids)
        fmt = "binary"
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
    return json_response(
        {"key_schema_id": ids["key"], "value_schema_id": ids["value"], "offsets": offsets}
    )


def codec_of(request: web.Request) -> EmbeddedCodec:
    codec = ctx_of(request).embedded
    if codec is None:
        raise HttpError(
            501, "This node has no schema registry: the schema formats are not served.", 501
        )
    return codec


async def _encode_with_schemas(
    request: web.Request,
    topic: str,
    fmt: str,
    body: dict[str, Any],
    recs: list[Any],
    ids: dict[str, int | None],
) -> list[Any]:
    """The records with their keys and values in the wire format (base64, as binary ones),
    the schemas' ids in ``ids``."""
    has_key = any(isinstance(r, dict) and r.get("key") is not None for r in recs)
    codec = codec_of(request)
    for part in ("key", "value") if has_key else ("value",):
        ids[part] = await codec.schema_id(
            topic,
            fmt,
            is_key=part == "key",
            schema=body.get(f"{part}_schema"),
            schema_id=body.get(f"{part}_schema_id"),
        )
    out: list[Any] = []
    for i, r in enumerate(recs):
        if not isinstance(r, dict):
            out.append(r)  # parse_v2_record refuses it with the usual message
            continue
        r = dict(r)
        for part in ("key", "value"):
            sid = ids[part]
            if r.get(part) is not None and sid is not None:
                raw = await codec.encode(sid, r[part], f"records[{i}].{part}")
                r[part] = base64.b64encode(raw).decode()
        out.append(r)
    return out


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
