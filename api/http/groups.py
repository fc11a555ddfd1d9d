"""v3 consumer groups (Confluent REST Proxy v3 shapes), read-only, on every broker.

Paths under ``/v3/clusters/{cluster_id}``: ``/consumer-groups`` (every group of the
cluster), ``/consumer-groups/{group}``, ``.../consumers``, ``.../consumers/{consumer}``,
``.../consumers/{consumer}/assignments``, ``.../lags``, ``.../lags/{topic}/partitions/{p}``
and ``.../lag-summary``, read-only as in the REST Proxy. Two additions for curl users, which
the REST Proxy lacks: ``POST .../consumer-groups/{group}/offsets:reset`` (the plan of
``kafka-consumer-groups --reset-offsets``, applied with ``"execute": true``; planned by
``api.client.offset_reset``, as ``longboat groups reset-offsets`` plans it) and
``POST .../consumer-groups/{group}/offsets:delete`` (OffsetDelete, KIP-496).

The data comes from the groups' coordinators through ``api.client.coordinator`` (``list``
on every broker, ``describe`` and ``lag`` at the group's coordinator), over the same
internal routes every client uses: this module holds no group state. A group the
coordinator describes as DEAD (never seen, or deleted) is 404/40405, the REST Proxy's
"consumer group not found".

``GroupAccess`` (one per broker app, under ``GROUPS_KEY``) owns the client transport and
metadata cache these calls go through; the v2 consumer instances (``api.http.v2_consumers``)
use it too, for the offsets of manually assigned consumers.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from typing import Any

from aiohttp import web

from api.client.consumer import AsyncConsumer
from api.client.coordinator import CoordinatorClient, list_groups
from api.client.errors import ClientError
from api.client.offset_reset import (
    SPECS,
    ResetError,
    ResetSpec,
    execute_reset,
    parse_duration_ms,
    parse_scope,
    parse_time_ms,
    plan_reset,
)
from api.client.transport import MetadataCache, Transport
from api.client.types import TopicPartition
from api.http.authz import read_topics_or_raise, request_allows
from api.http.context import HttpContext, base_url, ctx_of, json_body, json_response, path_int
from api.http.errors import HttpError, bad_request, kafka_error
from metalog.security import Operation, ResourceType

COORDINATOR_RETRY_S = 15.0
"""How long a request keeps looking for a group's coordinator (failover, the offsets topic
being created) before it is answered 503."""

CLIENTS_MAX = 1024
"""Coordinator clients kept (each remembers where its group's coordinator is)."""

DESCRIBE_CONCURRENCY = 16


class GroupAccess:
    """The broker's own client of the group coordinators: one transport, one metadata
    cache (bootstrapped from this broker), and a bounded cache of ``CoordinatorClient``s."""

    def __init__(
        self, bootstrap: list[str], *, retry_timeout_s: float = COORDINATOR_RETRY_S
    ) -> None:
        self.bootstrap = list(bootstrap)
        self.transport = Transport(request_timeout_s=30.0)
        self.metadata = MetadataCache(self.transport, bootstrap)
        self.retry_timeout_s = retry_timeout_s
        self._clients: OrderedDict[str, CoordinatorClient] = OrderedDict()

    def client(self, group: str) -> CoordinatorClient:
        c = self._clients.get(group)
        if c is None:
            c = CoordinatorClient(
                self.transport, self.metadata, group, retry_timeout_s=self.retry_timeout_s
            )
            self._clients[group] = c
            while len(self._clients) > CLIENTS_MAX:
                self._clients.popitem(last=False)
        else:
            self._clients.move_to_end(group)
        return c

    async def call(self, group: str, op: str, body: dict[str, Any]) -> dict[str, Any]:
        """``op`` at the group's coordinator; coordinator trouble becomes an ``HttpError``.
        Group-level outcomes stay in the answer's ``error`` for the caller."""
        try:
            return await self.client(group).call(op, body)
        except ClientError as e:
            raise coordinator_error(e) from None

    async def list(self) -> list[dict[str, Any]]:
        try:
            return await list_groups(
                self.transport, self.metadata, retry_timeout_s=self.retry_timeout_s
            )
        except ClientError as e:
            raise coordinator_error(e) from None

    def coordinator_id(self, group: str) -> int | None:
        return self.client(group).coordinator_id

    async def close(self) -> None:
        await self.transport.close()


GROUPS_KEY: web.AppKey[GroupAccess] = web.AppKey("group_access", GroupAccess)

_UNAVAILABLE = frozenset(
    {
        "COORDINATOR_NOT_AVAILABLE",
        "NOT_COORDINATOR",
        "COORDINATOR_LOAD_IN_PROGRESS",
        "NETWORK_EXCEPTION",
        "BROKER_NOT_AVAILABLE",
    }
)


def coordinator_error(e: ClientError) -> HttpError:
    """A coordinator that stayed out of reach is the server's trouble, retriable: 503."""
    if e.code in _UNAVAILABLE:
        return HttpError(503, f"The group coordinator is not available: {e}", 50003)
    if e.code == "REQUEST_TIMED_OUT":
        return HttpError(408, f"REQUEST_TIMED_OUT: {e.message}", 40801)
    return kafka_error(e.code, e.message)


def group_not_found(group: str) -> HttpError:
    return HttpError(404, f"Consumer group '{group}' not found.", 40405)


# --------------------------------------------------------------------------- shapes


def _cpath(ctx: HttpContext) -> str:
    return f"/v3/clusters/{ctx.cluster_id}"


def _link(request: web.Request, path: str) -> dict[str, str]:
    return {"related": f"{base_url(request)}{path}"}


def _crn(ctx: HttpContext, *parts: str) -> str:
    return "/".join([f"crn:///kafka={ctx.cluster_id}", *parts])


def group_json(
    request: web.Request, ctx: HttpContext, desc: dict[str, Any], coordinator_id: int | None
) -> dict[str, Any]:
    g = str(desc["group"])
    path = f"{_cpath(ctx)}/consumer-groups/{g}"
    return {
        "kind": "KafkaConsumerGroup",
        "metadata": {
            "self": f"{base_url(request)}{path}",
            "resource_name": _crn(ctx, f"consumer-group={g}"),
        },
        "cluster_id": ctx.cluster_id,
        "consumer_group_id": g,
        "is_simple": bool(desc.get("is_simple")),
        # Longboat's assignor names ("range", "cooperative-sticky"), not Java class names.
        "partition_assignor": desc.get("assignor") or "",
        "state": str(desc.get("state") or "UNKNOWN"),
        "type": "CLASSIC",
        "is_mixed_consumer_group": False,
        "generation": desc.get("generation"),
        "protocol": desc.get("protocol"),
        "coordinator": None
        if coordinator_id is None
        else _link(request, f"{_cpath(ctx)}/brokers/{coordinator_id}"),
        "consumers": _link(request, f"{path}/consumers"),
        "lag_summary": _link(request, f"{path}/lag-summary"),
    }


def consumer_json(
    request: web.Request, ctx: HttpContext, group: str, m: dict[str, Any]
) -> dict[str, Any]:
    mid = str(m["member_id"])
    path = f"{_cpath(ctx)}/consumer-groups/{group}/consumers/{mid}"
    return {
        "kind": "KafkaConsumer",
        "metadata": {
            "self": f"{base_url(request)}{path}",
            "resource_name": _crn(ctx, f"consumer-group={group}", f"consumer={mid}"),
        },
        "cluster_id": ctx.cluster_id,
        "consumer_group_id": group,
        "consumer_id": mid,
        "instance_id": None,  # static membership (KIP-345) is not supported
        "client_id": m.get("client_id"),
        "assignments": _link(request, f"{path}/assignments"),
    }


def assignment_json(
    request: web.Request, ctx: HttpContext, group: str, member: str, topic: str, p: int
) -> dict[str, Any]:
    c = _cpath(ctx)
    path = f"{c}/consumer-groups/{group}/consumers/{member}/assignments/{topic}/partitions/{p}"
    return {
        "kind": "KafkaConsumerAssignment",
        "metadata": {
            "self": f"{base_url(request)}{path}",
            "resource_name": _crn(
                ctx,
                f"consumer-group={group}",
                f"consumer={member}",
                f"assignment={topic}",
                f"partition={p}",
            ),
        },
        "cluster_id": ctx.cluster_id,
        "consumer_group_id": group,
        "consumer_id": member,
        "topic_name": topic,
        "partition_id": p,
        "partition": _link(request, f"{c}/topics/{topic}/partitions/{p}"),
        "lag": _link(request, f"{c}/consumer-groups/{group}/lags/{topic}/partitions/{p}"),
    }


def lag_json(
    request: web.Request, ctx: HttpContext, group: str, row: list[Any], clients: dict[str, Any]
) -> dict[str, Any]:
    topic, p, current, leo, lag, member = row
    path = f"{_cpath(ctx)}/consumer-groups/{group}/lags/{topic}/partitions/{p}"
    return {
        "kind": "KafkaConsumerLag",
        "metadata": {
            "self": f"{base_url(request)}{path}",
            "resource_name": _crn(ctx, f"consumer-group={group}", f"lag={topic}", f"partition={p}"),
        },
        "cluster_id": ctx.cluster_id,
        "consumer_group_id": group,
        "topic_name": topic,
        "partition_id": int(p),
        # null where the group has no commit for the partition (kafka-consumer-groups: "-")
        "current_offset": current,
        "log_end_offset": leo,
        "lag": lag,
        "consumer_id": member,
        "instance_id": None,
        "client_id": clients.get(member) if member is not None else None,
    }


def _list(request: web.Request, kind: str, data: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "kind": kind,
        "metadata": {"self": f"{base_url(request)}{request.path}", "next": None},
        "data": data,
    }


# --------------------------------------------------------------------------- handlers


async def _describe_or_404(ga: GroupAccess, group: str) -> dict[str, Any]:
    desc = await ga.call(group, "describe", {})
    if str(desc.get("state")) == "DEAD":
        raise group_not_found(group)
    return desc


async def _lag_rows(ga: GroupAccess, group: str) -> list[list[Any]]:
    ans = await ga.call(group, "lag", {})
    rows = [list(r) for r in ans.get("partitions") or []]
    rows.sort(key=lambda r: (str(r[0]), int(r[1])))
    return rows


async def list_consumer_groups(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    ga = request.app[GROUPS_KEY]
    # Kafka's ListGroups and DescribeGroups: a group the principal may not DESCRIBE is left
    # out (its description would be GROUP_AUTHORIZATION_FAILED).
    groups = [
        g
        for g in await ga.list()
        if request_allows(request, Operation.DESCRIBE, ResourceType.GROUP, str(g["group"]))
    ]
    sem = asyncio.Semaphore(DESCRIBE_CONCURRENCY)

    async def one(g: dict[str, Any]) -> dict[str, Any] | None:
        async with sem:
            desc = await ga.call(str(g["group"]), "describe", {})
        if str(desc.get("state")) == "DEAD":
            return None  # deleted between the list and the describe
        return group_json(request, ctx, desc, ga.coordinator_id(str(g["group"])))

    data = [d for d in await asyncio.gather(*(one(g) for g in groups)) if d is not None]
    return json_response(_list(request, "KafkaConsumerGroupList", data))


async def get_consumer_group(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    ga = request.app[GROUPS_KEY]
    group = request.match_info["group"]
    desc = await _describe_or_404(ga, group)
    return json_response(group_json(request, ctx, desc, ga.coordinator_id(group)))


async def list_consumers(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    group = request.match_info["group"]
    desc = await _describe_or_404(request.app[GROUPS_KEY], group)
    members = sorted(desc.get("members") or [], key=lambda m: str(m["member_id"]))
    return json_response(
        _list(
            request, "KafkaConsumerList", [consumer_json(request, ctx, group, m) for m in members]
        )
    )


def _member_or_404(desc: dict[str, Any], group: str, consumer: str) -> dict[str, Any]:
    for m in desc.get("members") or []:
        if str(m["member_id"]) == consumer:
            return dict(m)
    raise HttpError(404, f"Consumer '{consumer}' not found in consumer group '{group}'.", 40403)


async def get_consumer(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    group, consumer = request.match_info["group"], request.match_info["consumer"]
    desc = await _describe_or_404(request.app[GROUPS_KEY], group)
    return json_response(consumer_json(request, ctx, group, _member_or_404(desc, group, consumer)))


async def list_consumer_assignments(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    group, consumer = request.match_info["group"], request.match_info["consumer"]
    desc = await _describe_or_404(request.app[GROUPS_KEY], group)
    m = _member_or_404(desc, group, consumer)
    tps = sorted((str(t), int(p)) for t, p in m.get("assignment") or [])
    return json_response(
        _list(
            request,
            "KafkaConsumerAssignmentList",
            [assignment_json(request, ctx, group, consumer, t, p) for t, p in tps],
        )
    )


def _clients(desc: dict[str, Any]) -> dict[str, Any]:
    return {str(m["member_id"]): m.get("client_id") for m in desc.get("members") or []}


async def _group_lags(request: web.Request) -> tuple[str, dict[str, Any], list[list[Any]]]:
    """(group, member id -> client id, lag rows) of the request's group; 404 if unknown."""
    ga = request.app[GROUPS_KEY]
    group = request.match_info["group"]
    desc = await _describe_or_404(ga, group)
    return group, _clients(desc), await _lag_rows(ga, group)


async def list_lags(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    group, clients, rows = await _group_lags(request)
    return json_response(
        _list(
            request,
            "KafkaConsumerLagList",
            [lag_json(request, ctx, group, r, clients) for r in rows],
        )
    )


async def get_lag(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    topic = request.match_info["topic"]
    p = path_int(request, "partition")
    group, clients, rows = await _group_lags(request)
    for r in rows:
        if str(r[0]) == topic and int(r[1]) == p:
            return json_response(lag_json(request, ctx, group, r, clients))
    raise HttpError(
        404,
        f"Consumer group '{group}' has no offset or assignment for "
        f"partition {p} of topic '{topic}'.",
        40403,
    )


async def get_lag_summary(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    group, clients, rows = await _group_lags(request)
    # Partitions without a commit have no lag (None); they count in neither figure.
    lagging = [r for r in rows if r[4] is not None]
    top = max(lagging, key=lambda r: int(r[4]), default=None)
    c = _cpath(ctx)
    path = f"{c}/consumer-groups/{group}/lag-summary"
    member = None if top is None else top[5]
    return json_response(
        {
            "kind": "KafkaConsumerGroupLagSummary",
            "metadata": {
                "self": f"{base_url(request)}{path}",
                "resource_name": _crn(ctx, f"consumer-group={group}", "lag-summary"),
            },
            "cluster_id": ctx.cluster_id,
            "consumer_group_id": group,
            "max_lag_consumer_id": member,
            "max_lag_instance_id": None,
            "max_lag_client_id": clients.get(member) if member is not None else None,
            "max_lag_topic_name": None if top is None else top[0],
            "max_lag_partition_id": None if top is None else int(top[1]),
            "max_lag": 0 if top is None else int(top[4]),
            "total_lag": sum(int(r[4]) for r in lagging),
            "max_lag_consumer": None
            if member is None
            else _link(request, f"{c}/consumer-groups/{group}/consumers/{member}"),
            "max_lag_partition": None
            if top is None
            else _link(request, f"{c}/topics/{top[0]}/partitions/{int(top[1])}"),
        }
    )


RESET_TARGETS = (*(t for t in SPECS if t != "file"), "offsets")
"""``"to"`` of a reset request: kafka-consumer-groups' targets; ``offsets`` is its
``--from-file``, the offsets given in the body."""


def _reset_http_error(e: ResetError) -> HttpError:
    if e.kind == "not_empty":
        return HttpError(409, e.message, 40901)
    if e.kind == "not_found":
        return HttpError(404, e.message, 40401)
    if e.kind == "no_partition":
        return HttpError(404, e.message, 40402)
    if e.kind == "refused":
        return HttpError(409, e.message, 40902)
    return bad_request(e.message)


def _reset_spec(body: dict[str, Any]) -> ResetSpec:
    """``{"to": ..., "value": ...}`` as a ``ResetSpec`` (400 naming the field if wrong)."""
    to = body.get("to")
    if to not in RESET_TARGETS:
        raise bad_request(f"'to' must be one of {', '.join(RESET_TARGETS)}; got {to!r}.")
    value = body.get("value")
    try:
        if to in ("earliest", "latest", "current"):
            return ResetSpec(str(to))
        if to in ("offset", "shift-by"):
            if (
                not isinstance(value, int)
                or isinstance(value, bool)
                or (to == "offset" and value < 0)
            ):
                raise bad_request(
                    f"'value' of '{to}' must be an integer" + (" >= 0." if to == "offset" else ".")
                )
            return ResetSpec(str(to), value)
        if to == "datetime":
            if isinstance(value, int) and not isinstance(value, bool):
                return ResetSpec("datetime", value)
            return ResetSpec("datetime", parse_time_ms(str(value)))
        if to == "by-duration":
            return ResetSpec("by-duration", parse_duration_ms(str(value)))
    except ResetError as e:
        raise bad_request(f"'value': {e.message}") from None
    offsets: dict[TopicPartition, int] = {}
    if not isinstance(value, list) or not value:
        raise bad_request(
            '\'value\' of \'offsets\' must be a non-empty list of {"topic", "partition", "offset"}.'
        )
    for i, o in enumerate(value):
        ok = (
            isinstance(o, dict)
            and isinstance(o.get("topic"), str)
            and o["topic"]
            and all(
                isinstance(o.get(k), int) and not isinstance(o[k], bool) and o[k] >= 0
                for k in ("partition", "offset")
            )
        )
        if not ok:
            raise bad_request(
                f'\'value[{i}]\' must be {{"topic": str, "partition": int >= 0, '
                f'"offset": int >= 0}}.'
            )
        offsets[TopicPartition(o["topic"], o["partition"])] = o["offset"]
    return ResetSpec("file", offsets)


def _scopes_of(body: dict[str, Any]) -> list[tuple[str, list[int] | None]]:
    topics = body.get("topics", [])
    if not isinstance(topics, list) or not all(isinstance(t, str) for t in topics):
        raise bad_request('\'topics\' must be a list of "TOPIC" or "TOPIC:P,P" strings.')
    try:
        return [parse_scope(t) for t in topics]
    except ResetError as e:
        raise bad_request(e.message) from None


async def reset_offsets(request: web.Request) -> web.Response:
    """Plan (and with ``"execute": true`` apply) a reset of an empty group's offsets."""
    ctx_of(request)
    ga = request.app[GROUPS_KEY]
    group = request.match_info["group"]
    body = await json_body(request)
    if not isinstance(body, dict):
        raise bad_request("The body must be a JSON object.")
    spec = _reset_spec(body)
    scopes = _scopes_of(body)
    all_topics = body.get("all_topics", False)
    execute = body.get("execute", False)
    if not isinstance(all_topics, bool) or not isinstance(execute, bool):
        raise bad_request("'all_topics' and 'execute' must be true or false.")
    if spec.how != "file" and bool(scopes) == all_topics:
        raise bad_request("Give 'topics' or \"all_topics\": true (one of them).")

    async def call(op: str, b: dict[str, Any]) -> dict[str, Any]:
        return await ga.call(group, op, b)

    # A client of its own for the list_offsets calls (the leaders' range and times).
    src = AsyncConsumer(ga.bootstrap, request_timeout_ms=int(ga.retry_timeout_s * 1000))
    try:
        await src.start()
        plan = await plan_reset(
            src,
            call,
            group,
            spec,
            scopes=scopes,
            all_topics=all_topics,
            now_ms=int(time.time() * 1000),
        )
        if execute:
            read_topics_or_raise(request, (r["topic"] for r in plan["plan"]), "offset reset")
            await execute_reset(call, plan)
    except ResetError as e:
        raise _reset_http_error(e) from None
    except ClientError as e:
        raise coordinator_error(e) from None
    finally:
        await src.close()
    return json_response(
        {
            "kind": "KafkaConsumerGroupOffsetReset",
            "group": group,
            "executed": execute,
            "partitions": plan["plan"],
        }
    )


async def delete_offsets(request: web.Request) -> web.Response:
    """OffsetDelete (KIP-496) of ``{"topics": ["t", "t:0,1"]}``: the partitions named, or
    every partition of a bare topic the group has an offset for."""
    ctx_of(request)
    ga = request.app[GROUPS_KEY]
    group = request.match_info["group"]
    body = await json_body(request)
    if not isinstance(body, dict):
        raise bad_request("The body must be a JSON object.")
    scopes = _scopes_of(body)
    if not scopes:
        raise bad_request("'topics' must name at least one topic.")
    read_topics_or_raise(request, (t for t, _ in scopes), "offset deletion")
    await _describe_or_404(ga, group)
    committed = (await ga.call(group, "fetch_offsets", {})).get("offsets") or []
    have = {(str(r[0]), int(r[1])) for r in committed if r[2] is not None and r[2] >= 0}
    doomed = []
    for topic, parts in scopes:
        doomed += [
            [topic, p]
            for p in (parts if parts is not None else sorted(p for t, p in have if t == topic))
        ]
    ans = await ga.call(group, "delete_offsets", {"partitions": doomed})
    err = str(ans.get("error") or "NONE")
    if err == "GROUP_ID_NOT_FOUND":
        raise group_not_found(group)
    if err == "GROUP_SUBSCRIBED_TO_TOPIC":
        raise HttpError(
            409,
            f"A live member of consumer group '{group}' subscribes to a topic named; "
            "nothing was deleted (GROUP_SUBSCRIBED_TO_TOPIC).",
            40903,
        )
    if err != "NONE":
        raise kafka_error(err, str(ans.get("message") or err))
    return json_response(
        {
            "kind": "KafkaConsumerGroupOffsetDelete",
            "group": group,
            "partitions": [
                {"topic": t, "partition": p, "had_offset": (t, p) in have} for t, p in doomed
            ],
        }
    )


def add_group_routes(app: web.Application, bootstrap: list[str]) -> GroupAccess:
    """Registers the v3 consumer-group routes and the ``GroupAccess`` they (and the v2
    consumer instances) share; its transport closes with the app."""
    ga = GroupAccess(bootstrap)
    app[GROUPS_KEY] = ga
    r = app.router
    g = "/v3/clusters/{cluster_id}/consumer-groups"
    r.add_get(g, list_consumer_groups)
    r.add_get(g + "/{group}", get_consumer_group)
    r.add_get(g + "/{group}/consumers", list_consumers)
    r.add_get(g + "/{group}/consumers/{consumer}", get_consumer)
    r.add_get(g + "/{group}/consumers/{consumer}/assignments", list_consumer_assignments)
    r.add_get(g + "/{group}/lags", list_lags)
    r.add_get(g + "/{group}/lags/{topic}/partitions/{partition}", get_lag)
    r.add_get(g + "/{group}/lag-summary", get_lag_summary)
    r.add_post(g + "/{group}/offsets:reset", reset_offsets)
    r.add_post(g + "/{group}/offsets:delete", delete_offsets)

    async def close(app: web.Application) -> None:
        await ga.close()

    app.on_cleanup.append(close)
    return ga
