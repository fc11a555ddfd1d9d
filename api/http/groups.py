"""v3 consumer groups (Confluent REST Proxy v3 shapes), read-only, on every broker.

Paths under ``/v3/clusters/{cluster_id}``: ``/consumer-groups`` (every group of the
cluster), ``/consumer-groups/{group}``, ``.../consumers``, ``.../consumers/{consumer}``,
``.../consumers/{consumer}/assignments``, ``.../lags``, ``.../lags/{topic}/partitions/{p}``
and ``.../lag-summary``. As in the REST Proxy, v3 groups are read-only: resets and deletes
are ``longboat groups`` (``api.cli.groups``), which speaks the coordinator protocol.

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
from collections import OrderedDict
from typing import Any

from aiohttp import web

from api.client.coordinator import CoordinatorClient, list_groups
from api.client.errors import ClientError
from api.client.transport import MetadataCache, Transport
from api.http.context import HttpContext, base_url, ctx_of, json_response, path_int
from api.http.errors import HttpError, kafka_error

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
    groups = await ga.list()
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

    async def close(app: web.Application) -> None:
        await ga.close()

    app.on_cleanup.append(close)
    return ga
