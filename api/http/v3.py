"""The v3 HTTP API (Confluent REST Proxy v3 shapes), on every broker.

Paths under ``/v3/clusters/{cluster_id}``: the cluster and its brokers; topics (list, create,
get, delete, add partitions), their configs (list, get, set, reset, ``configs:alter``);
partitions (list, get, earliest/latest offsets and the offset for a timestamp); produce
(``POST .../records``: one record, several records in one body or a chunked stream, one
delivery report per record in order; ``.../records:batch`` with ``entries``; the binary
batch form in msgpack); and the stateless read ``GET .../partitions/{p}/records``.

Topic administration goes to the controller quorum (``ControllerClient``), which alone decides
whether a topic exists; the answer waits until this broker's metadata image shows the change,
so a client that created a topic can produce to it at once. Admin reads (topics, configs,
partitions) first wait for this broker's image to catch up with what the active controller
had applied (``HttpContext.sync_metadata``), so they see an admin write another broker
answered; the data path reads the image as it is.

The produce routes here are HTTP only: parameters, the body's framing (whole, a chunked
stream, msgpack), the status and the answer's shape. Each hands the body to one function of
``api.http.produce``, which runs the produce (its docstring draws the flow).
"""

from __future__ import annotations

import base64
import logging
import secrets
import time
from datetime import UTC, datetime
from typing import Any

import msgpack
import orjson
from aiohttp import web

from api.http.context import (
    JSON,
    MSGPACK,
    MSGPACK_TYPES,
    HttpContext,
    base_url,
    ctx_of,
    int_param,
    json_body,
    json_response,
    media_type,
    parse_acks,
    path_int,
    read_body,
)
from api.http.embedded import SCHEMA_FORMATS
from api.http.errors import HttpError, bad_request, kafka_error, topic_not_found, unprocessable
from api.http.produce import (
    PRODUCE_TIMEOUT_MS_DEFAULT,
    produce_batch_bytes,
    produce_json,
    produce_stream_chunk,
    produce_values,
    writable_topic_or_404,
)
from api.http.records import (
    Delivered,
    JsonStream,
    ParsedRecord,
    parse_msgpack_record,
    parse_partition,
    render_records,
    report_json,
)
from broker.replica_manager import ReplicaError
from metalog.client import ControllerUnavailableError
from metalog.commands import AlterConfigs, CreatePartitions, CreateTopic, DeleteTopic, LookupTopic
from metalog.errors import (
    MetadataError,
    TopicExistsError,
    TopicIdRetiredError,
    UnknownTopicOrPartitionError,
)
from metalog.image import TOPIC_CONFIG_DEFAULTS, MetadataImage, TopicImage
from metalog.records import BrokerId, ConfigResourceType, TopicId

log = logging.getLogger(__name__)

ADMIN_WAIT_S = 15.0
READ_TIMEOUT_MS_MAX = 30_000
READ_BYTES_MAX = 16 << 20
ARROW_STREAM = "application/vnd.apache.arrow.stream"
NDJSON = "application/x-ndjson"


# --------------------------------------------------------------------------- shapes


def _meta(request: web.Request, path: str, crn: str) -> dict[str, Any]:
    return {"self": f"{base_url(request)}{path}", "resource_name": crn}


def _cpath(ctx: HttpContext) -> str:
    return f"/v3/clusters/{ctx.cluster_id}"


def broker_json(request: web.Request, ctx: HttpContext, b: Any) -> dict[str, Any]:
    ep = b.endpoints[0] if b.endpoints else None
    return {
        "kind": "KafkaBroker",
        "metadata": _meta(
            request,
            f"{_cpath(ctx)}/brokers/{b.broker_id}",
            f"crn:///kafka={ctx.cluster_id}/broker={b.broker_id}",
        ),
        "cluster_id": ctx.cluster_id,
        "broker_id": int(b.broker_id),
        "host": ep.host if ep else None,
        "port": ep.port if ep else None,
        "rack": b.rack,
        "fenced": b.fenced,
        "in_controlled_shutdown": b.in_controlled_shutdown,
        "broker_epoch": int(b.broker_epoch),
    }


def topic_json(request: web.Request, ctx: HttpContext, t: TopicImage) -> dict[str, Any]:
    path = f"{_cpath(ctx)}/topics/{t.name}"
    rf = max((len(reg.replicas) for reg in t.partitions.values()), default=0)
    return {
        "kind": "KafkaTopic",
        "metadata": _meta(request, path, f"crn:///kafka={ctx.cluster_id}/topic={t.name}"),
        "cluster_id": ctx.cluster_id,
        "topic_name": t.name,
        "topic_id": str(t.topic_id),
        "is_internal": t.name.startswith("__"),
        "replication_factor": rf,
        "partitions_count": len(t.partitions),
        "partitions": {"related": f"{base_url(request)}{path}/partitions"},
        "configs": {"related": f"{base_url(request)}{path}/configs"},
    }


def partition_json(
    request: web.Request, ctx: HttpContext, topic: str, p: int, reg: Any
) -> dict[str, Any]:
    path = f"{_cpath(ctx)}/topics/{topic}/partitions/{p}"
    isr = {int(b) for b in reg.isr}
    return {
        "kind": "KafkaPartition",
        "metadata": _meta(
            request, path, f"crn:///kafka={ctx.cluster_id}/topic={topic}/partition={p}"
        ),
        "cluster_id": ctx.cluster_id,
        "topic_name": topic,
        "partition_id": p,
        "leader": None
        if int(reg.leader) < 0
        else {"related": f"{base_url(request)}{_cpath(ctx)}/brokers/{int(reg.leader)}"},
        "leader_id": int(reg.leader),
        "leader_epoch": int(reg.leader_epoch),
        "replicas": [
            {"broker_id": int(b), "is_leader": int(b) == int(reg.leader), "in_sync": int(b) in isr}
            for b in reg.replicas
        ],
        "isr": [int(b) for b in reg.isr],
        # KIP-966 (Kafka's DescribeTopicPartitions): replicas that may lead while the ISR
        # is empty, and those an unclean recovery waits for.
        "eligible_leader_replicas": [int(b) for b in reg.elr],
        "last_known_elr": [int(b) for b in reg.last_known_elr],
        # KIP-455: a reassignment in progress (api.http.reassign has the rest of it).
        "adding_replicas": [int(b) for b in reg.adding],
        "removing_replicas": [int(b) for b in reg.removing],
    }


def config_json(
    request: web.Request, ctx: HttpContext, topic: str, name: str, image: MetadataImage
) -> dict[str, Any]:
    overrides = image.configs.get(ConfigResourceType.TOPIC, topic)
    value = image.configs.topic_config(topic, name)
    is_default = name not in overrides
    return {
        "kind": "KafkaTopicConfig",
        "metadata": _meta(
            request,
            f"{_cpath(ctx)}/topics/{topic}/configs/{name}",
            f"crn:///kafka={ctx.cluster_id}/topic={topic}/config={name}",
        ),
        "cluster_id": ctx.cluster_id,
        "topic_name": topic,
        "name": name,
        "value": value,
        "is_default": is_default,
        "is_read_only": False,
        "is_sensitive": False,
        "source": "DEFAULT_CONFIG" if is_default else "DYNAMIC_TOPIC_CONFIG",
        "synonyms": [],
    }


def _list(request: web.Request, kind: str, data: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "kind": kind,
        "metadata": {"self": f"{base_url(request)}{request.path}", "next": None},
        "data": data,
    }


def metadata_error(e: MetadataError, topic: str | None = None) -> HttpError:
    code = str(getattr(e, "code", "UNKNOWN_SERVER_ERROR"))
    if code == "TOPIC_ALREADY_EXISTS":
        return HttpError(400, f"{e}", 40002)
    if code == "UNKNOWN_TOPIC_OR_PARTITION" and topic is not None:
        return topic_not_found(topic)
    return kafka_error(code, str(e))


async def _admin(ctx: HttpContext, command: Any, topic: str | None = None) -> Any:
    """A command for the active controller. It, not this broker's image, decides whether the
    topic exists: the image may lag a change another broker made a moment ago."""
    try:
        return await ctx.controllers.execute(command)
    except TopicIdRetiredError:
        raise  # not a refusal: the create took effect earlier (see create_topic)
    except MetadataError as e:
        if e.after_uncertain_attempt and isinstance(
            e, TopicExistsError | UnknownTopicOrPartitionError
        ):
            # An earlier attempt may have taken effect and this refusal be its own trace (a
            # delete finding its topic gone): say that the outcome is unknown, not "no".
            raise HttpError(
                504,
                f"The outcome is unknown: an earlier attempt may have taken "
                f"effect before the controller answered this one ({e}).",
                50400,
            ) from None
        raise metadata_error(e, topic) from None
    except ControllerUnavailableError as e:
        raise HttpError(503, f"No active controller: {e}", 50302) from None


# --------------------------------------------------------------------------- cluster


async def list_clusters(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    return json_response(_list(request, "KafkaClusterList", [await _cluster(request, ctx)]))


async def get_cluster(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    return json_response(await _cluster(request, ctx))


async def _cluster(request: web.Request, ctx: HttpContext) -> dict[str, Any]:
    controller: dict[str, Any] | None = None
    try:
        st = await ctx.controllers.get_json("/v3/quorum/status")
        lid = int(st.get("leader_id", -1))
        if lid >= 0:
            controller = {"controller_id": lid, "url": st.get("leader_url"), "term": st.get("term")}
    except ControllerUnavailableError:
        controller = None
    path = _cpath(ctx)
    bu = base_url(request)
    image = ctx.image
    return {
        "kind": "KafkaCluster",
        "metadata": _meta(request, path, f"crn:///kafka={ctx.cluster_id}"),
        "cluster_id": ctx.cluster_id,
        "controller": controller,
        "metadata_offset": image.offset,
        "brokers": [broker_json(request, ctx, b) for _, b in sorted(image.brokers.brokers.items())],
        "brokers_link": {"related": f"{bu}{path}/brokers"},
        "topics": {"related": f"{bu}{path}/topics"},
    }


async def list_brokers(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    return json_response(
        _list(
            request,
            "KafkaBrokerList",
            [broker_json(request, ctx, b) for _, b in sorted(ctx.image.brokers.brokers.items())],
        )
    )


async def get_broker(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    bid = path_int(request, "broker_id")
    b = ctx.image.brokers.get(BrokerId(bid))
    if b is None:
        raise HttpError(404, f"Broker {bid} not found.", 404)
    return json_response(broker_json(request, ctx, b))


# --------------------------------------------------------------------------- topics


async def list_topics(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    await ctx.sync_metadata()
    image = ctx.image
    topics = sorted(image.topics.by_id.values(), key=lambda t: t.name)
    return json_response(
        _list(request, "KafkaTopicList", [topic_json(request, ctx, t) for t in topics])
    )


def _opt_int(body: dict[str, Any], name: str, lo: int) -> int | None:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise unprocessable(f"'{name}' must be an integer, got {v!r}.")
    if v < lo:
        raise HttpError(400, f"'{name}' must be at least {lo}.", 40002)
    return v


def _configs_list(v: Any) -> dict[str, str]:
    if v is None:
        return {}
    if not isinstance(v, list):
        raise unprocessable('\'configs\' must be a list of {"name", "value"}.')
    out = {}
    for c in v:
        if (
            not isinstance(c, dict)
            or not isinstance(c.get("name"), str)
            or not isinstance(c.get("value"), str | int | float | bool)
        ):
            raise unprocessable('each config must be {"name": string, "value": string}.')
        val = c["value"]
        out[c["name"]] = str(val).lower() if isinstance(val, bool) else str(val)
    return out


async def create_topic(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    body = await json_body(request)
    if not isinstance(body, dict):
        raise unprocessable("The body must be a JSON object.")
    name = body.get("topic_name")
    if not isinstance(name, str):
        raise unprocessable("'topic_name' (string) is required.")
    partitions = _opt_int(body, "partitions_count", 1)
    rf = _opt_int(body, "replication_factor", 1)
    configs = _configs_list(body.get("configs"))
    validate_only = body.get("validate_only", False)
    if not isinstance(validate_only, bool):
        raise unprocessable("'validate_only' must be a boolean.")
    assignments = None
    ra = body.get("replicas_assignments")
    if ra is not None:
        try:
            assignments = {int(k): tuple(BrokerId(int(b)) for b in v) for k, v in ra.items()}
        except (AttributeError, TypeError, ValueError):
            raise unprocessable(
                "'replicas_assignments' must map partition ids to lists of broker ids."
            ) from None
    try:
        # The id is chosen here so the create is idempotent: if the controller client's
        # retry finds the topic its lost first attempt made, it is answered as created, not
        # TOPIC_ALREADY_EXISTS (found by the metadata workload of jepsen_tests).
        await _admin(
            ctx,
            CreateTopic(
                name=name,
                num_partitions=partitions,
                replication_factor=rf,
                assignments=assignments,
                configs=configs,
                validate_only=validate_only,
                topic_id=None if validate_only else random_topic_id(),
            ),
        )
    except TopicIdRetiredError:
        # This request's id was used: an earlier attempt created the topic, and it has been
        # deleted since. The create happened; answering "exists" or creating it a second
        # time would both be wrong (finding 4 of docs/fault-injection.md).
        return json_response(
            {"topic_name": name, "message": "created; deleted since by another request"}, 202
        )
    except HttpError as e:
        if e.error_code == 40002 and "already exists" in e.message:
            # The controller also refuses a name whose create is proposed but not yet
            # committed; say so only once that create is visible here, so a describe after
            # this answer finds the topic (found by the metadata workload of jepsen_tests).
            await ctx.wait_image(lambda im: im.topics.get(name) is not None, ADMIN_WAIT_S)
        raise
    if validate_only:
        return json_response(
            {
                "topic_name": name,
                "validate_only": True,
                "partitions_count": partitions,
                "replication_factor": rf,
            },
            200,
        )

    def created(image: MetadataImage) -> bool:
        t = image.topics.get(name)
        return (
            t is not None
            and len(t.partitions) > 0
            and all(int(r.leader) >= 0 for r in t.partitions.values())
        )

    await ctx.wait_image(created, ADMIN_WAIT_S)
    t = ctx.image.topics.get(name)
    if t is None:
        return json_response({"topic_name": name, "message": "created; not yet visible"}, 202)
    return json_response(topic_json(request, ctx, t), 201)


def random_topic_id() -> TopicId:
    """A Kafka-style topic id: 22 characters of URL-safe base64 of 128 random bits, never
    starting with '-' (Kafka's ``Uuid.randomUuid`` redraws those too)."""
    while True:
        tid = base64.urlsafe_b64encode(secrets.token_bytes(16)).rstrip(b"=").decode()
        if not tid.startswith("-"):
            return TopicId(tid)


async def get_topic(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    await ctx.sync_metadata()
    return json_response(topic_json(request, ctx, ctx.topic_or_404(request.match_info["topic"])))


async def delete_topic(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    name = request.match_info["topic"]
    # Delete the incarnation that exists now, by id: the controller client's retry of a
    # delete by name whose first attempt took effect would delete a topic of the same name
    # created meanwhile (found by the metadata workload of jepsen_tests). If that incarnation
    # is gone by the time the delete arrives (another client deleted it), look again.
    for _ in range(10):
        try:
            found = await _admin(ctx, LookupTopic(name=name), name)
        except HttpError as e:
            if e.error_code == 40401:
                # The controller's latest image may hold a delete not yet committed: answer
                # once the deletion is visible here, so a describe after this answer agrees.
                await ctx.wait_image(lambda im: im.topics.get(name) is None, ADMIN_WAIT_S)
            raise
        tid = found.topic_id
        try:
            await _admin(ctx, DeleteTopic(topic_id=tid), name)
            break
        except HttpError as e:
            if e.error_code != 40401:
                raise
    else:
        raise HttpError(503, f"Topic '{name}' kept being replaced; try again.", 50301)

    def deleted(im: MetadataImage) -> bool:
        t = im.topics.get(name)
        return t is None or t.topic_id != tid

    await ctx.wait_image(deleted, ADMIN_WAIT_S)
    return web.Response(status=204)


async def patch_topic(request: web.Request) -> web.Response:
    """Add partitions: ``{"partitions_count": N}``."""
    ctx = ctx_of(request)
    name = request.match_info["topic"]
    body = await json_body(request)
    if not isinstance(body, dict):
        raise unprocessable("The body must be a JSON object.")
    n = _opt_int(body, "partitions_count", 1)
    if n is None:
        raise unprocessable("'partitions_count' is required.")
    await _admin(ctx, CreatePartitions(name=name, total_count=n), name)

    def grown(image: MetadataImage) -> bool:
        t = image.topics.get(name)
        return t is not None and len(t.partitions) >= n

    await ctx.wait_image(grown, ADMIN_WAIT_S)
    return json_response(topic_json(request, ctx, ctx.topic_or_404(name)))


# --------------------------------------------------------------------------- configs


def _config_names(image: MetadataImage, topic: str) -> list[str]:
    return sorted(
        set(TOPIC_CONFIG_DEFAULTS) | set(image.configs.get(ConfigResourceType.TOPIC, topic))
    )


async def list_configs(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    await ctx.sync_metadata()
    topic = request.match_info["topic"]
    ctx.topic_or_404(topic)
    image = ctx.image
    return json_response(
        _list(
            request,
            "KafkaTopicConfigList",
            [config_json(request, ctx, topic, n, image) for n in _config_names(image, topic)],
        )
    )


async def get_config(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    await ctx.sync_metadata()
    topic, name = request.match_info["topic"], request.match_info["name"]
    ctx.topic_or_404(topic)
    image = ctx.image
    if name not in _config_names(image, topic):
        raise HttpError(404, f"Config '{name}' not found.", 404)
    return json_response(config_json(request, ctx, topic, name, image))


async def _alter(ctx: HttpContext, topic: str, ops: dict[str, str | None]) -> None:
    await _admin(
        ctx,
        AlterConfigs(resource_type=ConfigResourceType.TOPIC, resource_name=topic, ops=ops),
        topic,
    )

    def applied(image: MetadataImage) -> bool:
        cur = image.configs.get(ConfigResourceType.TOPIC, topic)
        return all(cur.get(k) == v for k, v in ops.items())

    await ctx.wait_image(applied, ADMIN_WAIT_S)


async def put_config(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    topic, name = request.match_info["topic"], request.match_info["name"]
    body = await json_body(request)
    if not isinstance(body, dict) or not isinstance(body.get("value"), str):
        raise unprocessable('The body must be {"value": string}.')
    await _alter(ctx, topic, {name: body["value"]})
    return web.Response(status=204)


async def reset_config(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    topic, name = request.match_info["topic"], request.match_info["name"]
    await _alter(ctx, topic, {name: None})
    return web.Response(status=204)


async def alter_configs(request: web.Request) -> web.Response:
    """``{"data": [{"name", "value", "operation": "SET"|"DELETE"}]}``, applied atomically."""
    ctx = ctx_of(request)
    topic = request.match_info["topic"]
    body = await json_body(request)
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list) or not data:
        raise unprocessable('The body must be {"data": [{"name", "value", "operation"}]}.')
    ops: dict[str, str | None] = {}
    for c in data:
        if not isinstance(c, dict) or not isinstance(c.get("name"), str):
            raise unprocessable("each entry needs a 'name'.")
        op = str(c.get("operation", "SET")).upper()
        if op == "DELETE":
            ops[c["name"]] = None
        elif op == "SET":
            if not isinstance(c.get("value"), str):
                raise unprocessable(f"config '{c['name']}': SET needs a string 'value'.")
            ops[c["name"]] = c["value"]
        else:
            raise unprocessable(f"unknown operation {op!r} (SET or DELETE).")
    await _alter(ctx, topic, ops)
    return web.Response(status=204)


# --------------------------------------------------------------------------- partitions


async def list_partitions(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    await ctx.sync_metadata()
    topic = request.match_info["topic"]
    t = ctx.topic_or_404(topic)
    return json_response(
        _list(
            request,
            "KafkaPartitionList",
            [
                partition_json(request, ctx, topic, p, reg)
                for p, reg in sorted(t.partitions.items())
            ],
        )
    )


async def get_partition(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    topic, p = request.match_info["topic"], path_int(request, "partition")
    return json_response(partition_json(request, ctx, topic, p, ctx.partition_or_404(topic, p)))


def _timestamp_param(v: str) -> int:
    try:
        return int(v)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        raise bad_request(
            f"'timestamp' must be ms since the epoch or ISO-8601, got {v!r}."
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


async def get_offsets(request: web.Request) -> web.Response:
    """``{earliest_offset, latest_offset}``; with ``?timestamp=`` also ``offset``: the first
    offset whose timestamp is at or after it (-1 if none)."""
    ctx = ctx_of(request)
    topic, p = request.match_info["topic"], path_int(request, "partition")
    ctx.partition_or_404(topic, p)
    out: dict[str, Any] = {
        "cluster_id": ctx.cluster_id,
        "topic_name": topic,
        "partition_id": p,
        "earliest_offset": await ctx.list_offset(topic, p, -2),
        "latest_offset": await ctx.list_offset(topic, p, -1),
    }
    ts = request.query.get("timestamp")
    if ts is not None:
        t = _timestamp_param(ts)
        if t < 0:
            raise bad_request("'timestamp' must be >= 0.")
        out["timestamp"] = t
        out["offset"] = await ctx.list_offset(topic, p, t)
    return json_response(out)


# --------------------------------------------------------------------------- produce


def _is_streaming(request: web.Request) -> bool:
    return "chunked" in request.headers.get("Transfer-Encoding", "").lower()


def _produce_target(request: web.Request) -> tuple[HttpContext, str, int, int]:
    """What every produce route reads first: the context, a topic that takes writes (404
    otherwise), ``acks`` and ``timeout_ms``."""
    ctx = ctx_of(request)
    topic = request.match_info["topic"]
    writable_topic_or_404(ctx, topic)
    acks = parse_acks(request)
    timeout_ms = int_param(request, "timeout_ms", PRODUCE_TIMEOUT_MS_DEFAULT, lo=1, hi=300_000)
    return ctx, topic, acks, timeout_ms


async def produce(request: web.Request) -> web.StreamResponse:
    t0 = time.monotonic()
    ctx, topic, acks, timeout_ms = _produce_target(request)
    mt = media_type(request)
    if mt in MSGPACK_TYPES:
        resp = await _produce_binary(request, ctx, topic, acks, timeout_ms)
        ctx.metrics.produce_latency.labels("binary").observe(time.monotonic() - t0)
        return resp
    # curl -d sends application/x-www-form-urlencoded unless told otherwise: read it as
    # JSON rather than refuse the commonest first try.
    if mt not in (
        "",
        JSON,
        "application/vnd.kafka.v3+json",
        "text/plain",
        NDJSON,
        "application/x-www-form-urlencoded",
    ):
        from api.http.errors import unsupported_media_type

        raise unsupported_media_type(mt)
    ctx.metrics.produce_requests.labels("v3").inc()
    if _is_streaming(request):
        stream = await _produce_stream(request, ctx, topic, acks, timeout_ms)
        ctx.metrics.produce_latency.labels("stream").observe(time.monotonic() - t0)
        return stream
    raw = await read_body(request)
    if not raw.strip():
        raise HttpError(422, "Request body is empty. Data is required.", 42206)
    try:
        return await produce_body(ctx, topic, raw, acks=acks, timeout_ms=timeout_ms)
    finally:
        ctx.metrics.produce_latency.labels("v3").observe(time.monotonic() - t0)


async def produce_body(
    ctx: HttpContext, topic: str, raw: bytes, *, acks: int, timeout_ms: int, fast: bool = True
) -> web.Response:
    """A whole (non-streamed) JSON body (``api.http.produce.produce_json``): one record
    answered alone (or its error raised), several as NDJSON. ``fast=False`` (tests) skips
    the fast path."""
    reports = await produce_json(ctx, topic, raw, acks=acks, timeout_ms=timeout_ms, fast=fast)
    if reports.count != 1:
        return web.Response(body=reports.lines, content_type=NDJSON)
    if reports.error is not None:
        raise reports.error
    return web.Response(body=reports.lines[:-1], content_type=JSON)  # as json_response


async def _produce_stream(
    request: web.Request, ctx: HttpContext, topic: str, acks: int, timeout_ms: int
) -> web.StreamResponse:
    """Reports are written as their records complete; each chunk read is produced as one
    group, so a fast stream forms batches and a slow one still gets prompt reports."""
    import asyncio

    resp = web.StreamResponse(status=200)
    resp.content_type = NDJSON
    await resp.prepare(request)
    stream = JsonStream(ctx.record_bytes_max)
    final = False
    try:
        while not final:
            try:
                async with asyncio.timeout(ctx.stream_idle_s_max):
                    chunk = await request.content.readany()
            except TimeoutError:
                await resp.write(
                    orjson.dumps(
                        {
                            "error_code": 40801,
                            "message": f"No data for {ctx.stream_idle_s_max:.0f} s; stream ended.",
                        }
                    )
                    + b"\n"
                )
                break
            final = not chunk
            objs = stream.feed(chunk, final=final)
            if not objs:
                continue
            await resp.write(
                await produce_stream_chunk(ctx, topic, objs, acks=acks, timeout_ms=timeout_ms)
            )
        await resp.write_eof()
    except ConnectionResetError as e:  # aiohttp's ClientConnectionResetError is one
        # The client went away: what was produced stays produced; nobody is left to tell.
        log.info("produce stream to %s ended by the client: %s", topic, str(e) or type(e).__name__)
    return resp


async def _produce_binary(
    request: web.Request, ctx: HttpContext, topic: str, acks: int, timeout_ms: int
) -> web.Response:
    """msgpack ``{"partition_id"?, "batch": bytes}`` (one encoded batch, handed on whole) or
    ``{"partition_id"?, "records": [[key, value, timestamp_ms, [[name, value], ...]], ...]}``."""
    ctx.metrics.produce_requests.labels("binary").inc()
    raw = await read_body(request)
    try:
        body = msgpack.unpackb(raw, raw=False)
    except (msgpack.UnpackException, ValueError) as e:
        raise bad_request(f"Malformed msgpack: {e}") from None
    if not isinstance(body, dict):
        raise bad_request("The msgpack body must be a map.")
    try:
        partition = parse_partition(body.get("partition_id"))
    except HttpError:
        raise
    if isinstance(body.get("batch"), bytes):
        out = await produce_batch_bytes(
            ctx, topic, partition, body["batch"], acks=acks, timeout_ms=timeout_ms
        )
        return web.Response(body=msgpack.packb(out), content_type=MSGPACK)
    recs = body.get("records")
    if not isinstance(recs, list) or not recs:
        raise unprocessable("The msgpack body needs 'batch' (bytes) or 'records' (a list).")
    _, outcomes = await produce_values(
        ctx,
        topic,
        recs,
        acks=acks,
        timeout_ms=timeout_ms,
        parse=lambda obj, ts: parse_msgpack_record(obj, ts, partition),
    )
    reports: list[dict[str, Any]] = []
    for o in outcomes:
        if isinstance(o, Delivered):
            reports.append(
                {
                    "error_code": 200,
                    "partition_id": o.partition,
                    "offset": o.offset,
                    "timestamp": o.timestamp_ms,
                }
            )
        else:
            reports.append({"error_code": o.error_code, "message": o.message})
    return web.Response(body=msgpack.packb({"reports": reports}), content_type=MSGPACK)


async def produce_batch(request: web.Request) -> web.Response:
    """``POST .../records:batch`` ``{"entries": [{"id", ...record}]}`` -> 207 with
    ``successes`` and ``failures`` (by id)."""
    t0 = time.monotonic()
    ctx, topic, acks, timeout_ms = _produce_target(request)
    ctx.metrics.produce_requests.labels("batch").inc()
    body = await json_body(request)
    entries = body.get("entries") if isinstance(body, dict) else None
    if not isinstance(entries, list) or not entries:
        raise unprocessable('The body must be {"entries": [...]}, not empty.', 42208)
    if len(entries) > ctx.batch_entries_max:
        raise unprocessable(f"At most {ctx.batch_entries_max} entries per batch.", 42208)
    ids: list[str] = []
    for i, e in enumerate(entries):
        eid = e.get("id") if isinstance(e, dict) else None
        ids.append(str(eid) if eid is not None else str(i))
    if len(set(ids)) != len(ids):
        raise unprocessable("Entry ids must be distinct.", 42208)
    parsed, outcomes = await produce_values(ctx, topic, entries, acks=acks, timeout_ms=timeout_ms)
    successes: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    for eid, r, o in zip(ids, parsed, outcomes, strict=True):
        rep = report_json(ctx.cluster_id, topic, r if isinstance(r, ParsedRecord) else None, o)
        rep["id"] = eid
        (failures if isinstance(o, HttpError) else successes).append(rep)
    ctx.metrics.produce_latency.labels("batch").observe(time.monotonic() - t0)
    return json_response({"successes": successes, "failures": failures}, 207)


# --------------------------------------------------------------------------- read


async def read_records(request: web.Request) -> web.Response:
    """``GET .../partitions/{p}/records?offset=&max_bytes=&timeout_ms=&format=&key_format=
    &isolation_level=``.

    ``offset``: a number, ``earliest`` or ``latest``. Long-polls up to ``timeout_ms`` when
    there is nothing at ``offset`` yet. ``Accept`` picks JSON (default), msgpack (whole
    batches) or an Arrow IPC stream (``api.client.arrow``). ``isolation_level``:
    ``read_uncommitted`` (default) or ``read_committed`` (up to the last stable offset,
    aborted transactions' records left out; ``latest`` is then the LSO)."""
    ctx = ctx_of(request)
    topic, p = request.match_info["topic"], path_int(request, "partition")
    t0 = time.monotonic()
    ctx.partition_or_404(topic, p)
    ctx.metrics.fetch_requests.inc()
    isolation = request.query.get("isolation_level", "read_uncommitted")
    if isolation not in ("read_uncommitted", "read_committed"):
        raise bad_request(
            f"isolation_level must be read_uncommitted or read_committed, got {isolation!r}."
        )
    ov = request.query.get("offset", "earliest")
    if ov == "earliest":
        offset = await ctx.list_offset(topic, p, -2)
    elif ov == "latest":
        offset = await ctx.list_offset(topic, p, -1, isolation)
    else:
        offset = int_param(request, "offset", lo=0)
    max_bytes = int_param(request, "max_bytes", 1 << 20, lo=1, hi=READ_BYTES_MAX)
    timeout_ms = int_param(request, "timeout_ms", 1000, lo=0, hi=READ_TIMEOUT_MS_MAX)
    fmt = request.query.get("format", "binary").lower()
    key_fmt = request.query.get("key_format", fmt).lower()
    for f in (fmt, key_fmt):
        if f not in ("binary", "json", "string", *SCHEMA_FORMATS):
            raise bad_request(
                f"format must be binary, json, string, avro or jsonschema, got {f!r}."
            )
    accept = request.headers.get("Accept", "")
    try:
        ans = await ctx.router.fetch(
            topic,
            p,
            offset,
            max_bytes=max_bytes,
            max_wait_ms=timeout_ms,
            timeout_ms=timeout_ms + 10_000,
            isolation_level=isolation,
        )
    except ReplicaError as e:
        raise kafka_error(e.error_code, str(e)) from None
    data = bytes(ans["records"])
    ctx.metrics.bytes_out.inc(len(data))
    hw, lso = int(ans["high_watermark"]), int(ans["log_start_offset"])
    stable = int(ans.get("last_stable_offset", hw))
    try:
        if ARROW_STREAM in accept:
            from api.client.arrow import arrow_response_headers, records_to_arrow_ipc

            mo = request.query.get("max_offset")
            body = records_to_arrow_ipc(
                data,
                topic=topic,
                partition=p,
                include_headers=request.query.get("include_headers", "false") == "true",
                min_offset=offset,
                max_offset=int(mo) if mo is not None else None,
            )
            from api.http.records import next_offset_of

            nxt = next_offset_of(data, offset)
            return web.Response(
                body=body,
                headers=arrow_response_headers(
                    next_offset=nxt, high_watermark=hw, log_start_offset=lso
                ),
            )
        if any(m in accept for m in MSGPACK_TYPES):
            from api.http.records import next_offset_of

            return web.Response(
                body=msgpack.packb(
                    {
                        "records": data,
                        "high_watermark": hw,
                        "last_stable_offset": stable,
                        "log_start_offset": lso,
                        "next_offset": next_offset_of(data, offset),
                    },
                    use_bin_type=True,
                ),
                content_type=MSGPACK,
            )
        # The schema formats need the registry (I/O): rendered as binary here, then decoded.
        records, nxt = render_records(
            data,
            from_offset=offset,
            fmt="binary" if fmt in SCHEMA_FORMATS else fmt,
            key_fmt="binary" if key_fmt in SCHEMA_FORMATS else key_fmt,
        )
        if fmt in SCHEMA_FORMATS or key_fmt in SCHEMA_FORMATS:
            await _decode_schema_values(ctx, records, fmt, key_fmt, f"{topic}-{p}")
    finally:
        ctx.metrics.fetch_latency.observe(time.monotonic() - t0)
    ctx.metrics.fetch_records.inc(len(records))
    for r in records:
        r["partition_id"] = p
    return json_response(
        {
            "cluster_id": ctx.cluster_id,
            "topic_name": topic,
            "partition_id": p,
            "records": records,
            "next_offset": nxt,
            "high_watermark": hw,
            "last_stable_offset": stable,
            "log_start_offset": lso,
        }
    )


async def _decode_schema_values(
    ctx: HttpContext, records: list[dict[str, Any]], fmt: str, key_fmt: str, where: str
) -> None:
    """Keys and values read as binary (base64), decoded in place by the schema each carries."""
    if ctx.embedded is None:
        raise HttpError(
            501, "This node has no schema registry: the schema formats are not served.", 501
        )
    codec = ctx.embedded
    parts = [part for part, f in (("key", key_fmt), ("value", fmt)) if f in SCHEMA_FORMATS]
    raw = {
        (i, part): base64.b64decode(r[part])
        for i, r in enumerate(records)
        for part in parts
        if r[part] is not None
    }
    await codec.preload(raw.values())
    for (i, part), v in raw.items():
        records[i][part] = codec.decode(
            v, f"The {part} at offset {records[i]['offset']} of {where}"
        )


def add_v3_routes(app: web.Application) -> None:
    r = app.router
    c = "/v3/clusters/{cluster_id}"
    t = c + "/topics/{topic}"
    r.add_get("/v3/clusters", list_clusters)
    r.add_get(c, get_cluster)
    r.add_get(c + "/brokers", list_brokers)
    r.add_get(c + "/brokers/{broker_id}", get_broker)
    r.add_get(c + "/topics", list_topics)
    r.add_post(c + "/topics", create_topic)
    r.add_get(t, get_topic)
    r.add_delete(t, delete_topic)
    r.add_patch(t, patch_topic)
    r.add_get(t + "/configs", list_configs)
    r.add_post(t + "/configs:alter", alter_configs)
    r.add_get(t + "/configs/{name}", get_config)
    r.add_put(t + "/configs/{name}", put_config)
    r.add_delete(t + "/configs/{name}", reset_config)
    r.add_get(t + "/partitions", list_partitions)
    r.add_get(t + "/partitions/{partition}", get_partition)
    r.add_get(t + "/partitions/{partition}/offset", get_offsets)
    r.add_get(t + "/partitions/{partition}/records", read_records)
    r.add_post(t + "/records", produce)
    r.add_post(t + "/records:batch", produce_batch)
