"""Replica placement and leadership over HTTP: reassignments (KIP-455), leader elections,
DeleteRecords.

Reassignment paths are the Confluent REST Proxy's (``GET .../topics/-/partitions/-/
reassignment``, ``.../topics/{t}/partitions/-/reassignment``, ``.../partitions/{p}/
reassignment``, kind ``KafkaReassignment``), with the writes Kafka's admin client has:

* ``PATCH .../topics/{t}/partitions/{p}/reassignment`` ``{"replicas": [3, 1, 2]}`` starts (or
  replaces) the move of one partition to those replicas (the first is the preferred leader);
* ``DELETE`` on the same path cancels it (back to the original replicas);
* ``POST .../topics/-/partitions/-/reassignment`` takes kafka-reassign-partitions' JSON
  (``{"version": 1, "partitions": [{"topic", "partition", "replicas"}]}``, ``replicas`` null
  to cancel) and answers each partition on its own.

``GET/PUT/DELETE .../reassignment-throttle`` ``{"rate_bytes_per_s": N}`` reads, sets or
removes the cluster-wide ``follower.replication.throttled.rate`` (the broker config default,
a ``ConfigRecord``), which limits the fetches of replicas being added (``broker.throttle``).

``POST .../elections`` ``{"election_type": "PREFERRED"|"UNCLEAN", "partitions":
[{"topic_name", "partition_id"}]}`` (no ``partitions``: every partition) runs Kafka's
ElectLeaders; ``POST .../topics/{t}/partitions/{p}/records:delete`` ``{"offset": N}`` (-1:
the high watermark) runs DeleteRecords on the partition's leader and answers its low
watermark.

Writes go to the active controller (the first two) or the partition leader (DeleteRecords);
the answers of controller writes wait until this broker's image shows them. Reads first
catch up with the controller (``HttpContext.sync_metadata``) and describe the image.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from api.http.context import (
    HttpContext,
    base_url,
    ctx_of,
    int_param,
    json_body,
    json_response,
    path_int,
)
from api.http.errors import HttpError, bad_request, kafka_error, unprocessable
from api.http.v3 import ADMIN_WAIT_S, _admin
from broker.replica_manager import ReplicaError
from broker.throttle import THROTTLE_RATE_CONFIG
from metalog.commands import (
    AlterConfigs,
    AlterPartitionReassignments,
    ElectionType,
    ElectLeaders,
    ReplicaReassignment,
)
from metalog.image import MetadataImage, PartitionRegistration
from metalog.records import BrokerId, ConfigResourceType
from metalog.responses import AlterPartitionReassignmentsResponse, ElectLeadersResponse

DELETE_RECORDS_TIMEOUT_MS = 30_000


def reassignment_json(
    request: web.Request, ctx: HttpContext, topic: str, p: int, reg: PartitionRegistration
) -> dict[str, Any]:
    """Confluent's ``ReassignmentData``, with the replicas themselves for curl users."""
    path = f"/v3/clusters/{ctx.cluster_id}/topics/{topic}/partitions/{p}"
    return {
        "kind": "KafkaReassignment",
        "metadata": {
            "self": f"{base_url(request)}{path}/reassignment",
            "resource_name": f"crn:///kafka={ctx.cluster_id}/topic={topic}/partition={p}",
        },
        "cluster_id": ctx.cluster_id,
        "topic_name": topic,
        "partition_id": p,
        "adding_replicas": [int(b) for b in reg.adding],
        "removing_replicas": [int(b) for b in reg.removing],
        "replicas": [int(b) for b in reg.replicas],
        "target_replicas": [int(b) for b in reg.target_replicas],
        "isr": [int(b) for b in reg.isr],
        "leader_id": int(reg.leader),
        "partition": {"related": f"{base_url(request)}{path}"},
    }


def _ongoing(
    image: MetadataImage, topic: str | None
) -> list[tuple[str, int, PartitionRegistration]]:
    out = []
    for t, p, reg in image.topics.partitions():
        if reg.is_reassigning and (topic is None or t.name == topic):
            out.append((t.name, p, reg))
    return sorted(out, key=lambda x: (x[0], x[1]))


def _list(request: web.Request, data: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "kind": "KafkaReassignmentList",
        "metadata": {"self": f"{base_url(request)}{request.path}", "next": None},
        "data": data,
    }


async def list_all_reassignments(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    await ctx.sync_metadata()
    found = _ongoing(ctx.image, None)
    return json_response(
        _list(request, [reassignment_json(request, ctx, t, p, r) for t, p, r in found])
    )


async def list_topic_reassignments(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    await ctx.sync_metadata()
    topic = request.match_info["topic"]
    ctx.topic_or_404(topic)
    found = _ongoing(ctx.image, topic)
    return json_response(
        _list(request, [reassignment_json(request, ctx, t, p, r) for t, p, r in found])
    )


def _no_reassignment(topic: str, p: int) -> HttpError:
    return HttpError(
        404, f"No reassignment of partition {p} of topic '{topic}' is in progress.", 40403
    )


async def get_reassignment(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    await ctx.sync_metadata()
    topic, p = request.match_info["topic"], path_int(request, "partition")
    reg = ctx.partition_or_404(topic, p)
    if not reg.is_reassigning:
        raise _no_reassignment(topic, p)
    return json_response(reassignment_json(request, ctx, topic, p, reg))


def _replicas_or_400(value: Any, where: str) -> tuple[BrokerId, ...]:
    if (
        not isinstance(value, list)
        or not value
        or not all(type(b) is int and 0 <= b < 2**31 for b in value)
    ):
        raise unprocessable(f"{where}: 'replicas' must be a non-empty list of broker ids.", 42206)
    return tuple(BrokerId(b) for b in value)


async def _alter(
    ctx: HttpContext, items: tuple[ReplicaReassignment, ...]
) -> AlterPartitionReassignmentsResponse:
    resp: AlterPartitionReassignmentsResponse = await _admin(
        ctx, AlterPartitionReassignments(reassignments=items)
    )
    await ctx.sync_metadata(ADMIN_WAIT_S)
    return resp


def _one_result_or_raise(resp: AlterPartitionReassignmentsResponse) -> None:
    (r,) = resp.results
    if r.error is None:
        return
    code = str(getattr(r.error, "code", "UNKNOWN_SERVER_ERROR"))
    if code == "NO_REASSIGNMENT_IN_PROGRESS":
        raise _no_reassignment(r.topic, r.partition)
    raise kafka_error(code, str(r.error))


async def patch_reassignment(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    topic, p = request.match_info["topic"], path_int(request, "partition")
    body = await json_body(request)
    if not isinstance(body, dict) or "replicas" not in body:
        raise unprocessable('Body must be {"replicas": [broker ids]}.', 42206)
    replicas = _replicas_or_400(body["replicas"], f"{topic}-{p}")
    ctx.partition_or_404(topic, p)
    _one_result_or_raise(await _alter(ctx, (ReplicaReassignment(topic, p, replicas),)))
    reg = ctx.partition_or_404(topic, p)
    return json_response(reassignment_json(request, ctx, topic, p, reg))


async def cancel_reassignment(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    topic, p = request.match_info["topic"], path_int(request, "partition")
    ctx.partition_or_404(topic, p)
    _one_result_or_raise(await _alter(ctx, (ReplicaReassignment(topic, p, None),)))
    return web.Response(status=204)


async def alter_reassignments(request: web.Request) -> web.Response:
    """kafka-reassign-partitions' JSON in, one result per partition out."""
    ctx = ctx_of(request)
    body = await json_body(request)
    parts = body.get("partitions") if isinstance(body, dict) else None
    if not isinstance(parts, list) or not parts:
        raise unprocessable(
            'Body must be {"version": 1, "partitions": [{"topic", "partition", "replicas"}]}.',
            42206,
        )
    items = []
    for i, e in enumerate(parts):
        if (
            not isinstance(e, dict)
            or not isinstance(e.get("topic"), str)
            or type(e.get("partition")) is not int
            or e["partition"] < 0
        ):
            raise unprocessable(f"partitions[{i}] needs a 'topic' and a 'partition' >= 0.", 42206)
        reps = e.get("replicas")
        items.append(
            ReplicaReassignment(
                e["topic"],
                e["partition"],
                None if reps is None else _replicas_or_400(reps, f"partitions[{i}]"),
            )
        )
    if len({(r.topic, r.partition) for r in items}) != len(items):
        raise bad_request("A partition appears more than once.")
    resp = await _alter(ctx, tuple(items))
    return json_response(
        {
            "kind": "KafkaReassignmentResultList",
            "data": [
                {
                    "topic_name": r.topic,
                    "partition_id": r.partition,
                    "error_code": None if r.error is None else str(r.error.code),
                    "message": None if r.error is None else str(r.error),
                }
                for r in resp.results
            ],
        }
    )


# --------------------------------------------------------------------------- elections


async def elect_leaders(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    body = await json_body(request, required=False)
    if not isinstance(body, dict):
        raise unprocessable("Body must be a JSON object.", 42206)
    kind = str(body.get("election_type", "PREFERRED")).upper()
    try:
        election = ElectionType[kind]
    except KeyError:
        raise bad_request(f"'election_type' must be PREFERRED or UNCLEAN, got {kind!r}.") from None
    parts = body.get("partitions")
    partitions: tuple[tuple[str, int], ...] | None = None
    if parts is not None:
        if not isinstance(parts, list):
            raise unprocessable("'partitions' must be a list.", 42206)
        out = []
        for i, e in enumerate(parts):
            if (
                not isinstance(e, dict)
                or not isinstance(e.get("topic_name"), str)
                or type(e.get("partition_id")) is not int
                or e["partition_id"] < 0
            ):
                raise unprocessable(
                    f"partitions[{i}] needs a 'topic_name' and a 'partition_id' >= 0.", 42206
                )
            out.append((e["topic_name"], e["partition_id"]))
        partitions = tuple(out)
    resp: ElectLeadersResponse = await _admin(
        ctx, ElectLeaders(election=election, partitions=partitions)
    )
    await ctx.sync_metadata(ADMIN_WAIT_S)
    return json_response(
        {
            "kind": "KafkaElectionResultList",
            "election_type": election.name,
            "data": [
                {
                    "topic_name": r.topic,
                    "partition_id": r.partition,
                    "leader_id": int(r.leader),
                    "error_code": None if r.error is None else str(r.error.code),
                    "message": None if r.error is None else str(r.error),
                }
                for r in resp.results
            ],
        }
    )


# --------------------------------------------------------------------------- DeleteRecords


async def delete_records(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    topic, p = request.match_info["topic"], path_int(request, "partition")
    body = await json_body(request)
    offset = body.get("offset") if isinstance(body, dict) else None
    if type(offset) is not int or offset < -1 or offset >= 2**63:
        raise unprocessable(
            'Body must be {"offset": N} with N >= 0, or -1 for the high watermark.', 42206
        )
    ctx.partition_or_404(topic, p)
    timeout_ms = int_param(request, "timeout_ms", DELETE_RECORDS_TIMEOUT_MS, lo=1, hi=300_000)
    try:
        ans = await ctx.router.delete_records(topic, p, offset, timeout_ms=timeout_ms)
    except ReplicaError as e:
        raise kafka_error(e.error_code, str(e)) from None
    return json_response(
        {
            "cluster_id": ctx.cluster_id,
            "topic_name": topic,
            "partition_id": p,
            "low_watermark": int(ans["low_watermark"]),
        }
    )


# --------------------------------------------------------------------------- throttle


async def _throttle(ctx: HttpContext, value: str | None) -> None:
    await _admin(
        ctx,
        AlterConfigs(
            resource_type=ConfigResourceType.BROKER,
            resource_name="",
            ops={THROTTLE_RATE_CONFIG: value},
        ),
    )
    await ctx.sync_metadata(ADMIN_WAIT_S)


async def put_throttle(request: web.Request) -> web.Response:
    """The cluster-wide ``follower.replication.throttled.rate`` (broker config default)."""
    ctx = ctx_of(request)
    body = await json_body(request)
    rate = body.get("rate_bytes_per_s") if isinstance(body, dict) else None
    if type(rate) is not int or not 0 < rate < 2**63:
        raise unprocessable('Body must be {"rate_bytes_per_s": N} with N > 0.', 42206)
    await _throttle(ctx, str(rate))
    return json_response({"cluster_id": ctx.cluster_id, "rate_bytes_per_s": rate})


async def delete_throttle(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    await _throttle(ctx, None)
    return web.Response(status=204)


async def get_throttle(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    await ctx.sync_metadata()
    v = ctx.image.configs.get(ConfigResourceType.BROKER, "").get(THROTTLE_RATE_CONFIG)
    return json_response(
        {"cluster_id": ctx.cluster_id, "rate_bytes_per_s": None if v is None else int(v)}
    )


def add_reassign_routes(app: web.Application) -> None:
    r = app.router
    c = "/v3/clusters/{cluster_id}"
    r.add_get(c + "/topics/-/partitions/-/reassignment", list_all_reassignments)
    r.add_post(c + "/topics/-/partitions/-/reassignment", alter_reassignments)
    r.add_get(c + "/topics/{topic}/partitions/-/reassignment", list_topic_reassignments)
    one = c + "/topics/{topic}/partitions/{partition}/reassignment"
    r.add_get(one, get_reassignment)
    r.add_patch(one, patch_reassignment)
    r.add_delete(one, cancel_reassignment)
    r.add_get(c + "/reassignment-throttle", get_throttle)
    r.add_put(c + "/reassignment-throttle", put_throttle)
    r.add_delete(c + "/reassignment-throttle", delete_throttle)
    r.add_post(c + "/elections", elect_leaders)
    r.add_post(c + "/topics/{topic}/partitions/{partition}/records:delete", delete_records)
