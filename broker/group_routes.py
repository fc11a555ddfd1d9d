"""The consumer-group coordinator's internal routes (msgpack bodies), served by ``GroupCoordinator``.

``POST /internal/broker/v1/group/<op>`` (and the client's public twin ``/binary/v1/group/<op>``),
body and answer msgpack maps, HTTP 200 unless the body is malformed.
docs/consumer-groups.md ("The coordinator on a broker: wire protocol") is the contract; this
module only translates between it and ``broker.group_coordinator``:

* a refusal of the whole request is ``{"error": NAME, "message": ...}``, plus
  ``"coordinator_id"`` with NOT_COORDINATOR (-1 when this broker knows none);
* every other answer carries ``"error"``: ``"NONE"`` or the group-level ``ErrorCode``;
* topic-partitions are ``[topic, partition]`` pairs, sorted.

A malformed body (``broker.request_fields``: a field missing, of the wrong type or out of
range; a topic name Kafka would refuse; offset metadata over 4096 characters) is answered
HTTP 400 ``INVALID_REQUEST`` before the coordinator sees it; an unexpected exception is
logged and answered ``UNKNOWN_SERVER_ERROR``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

import msgpack
from aiohttp import web

from broker.group_coordinator import NOT_COORDINATOR, CoordinatorError, GroupCoordinator
from broker.groups.group import (
    NO_GENERATION,
    UNKNOWN_MEMBER_ID,
    HeartbeatRequest,
    JoinRequest,
    JoinResponse,
    LeaveRequest,
    OffsetAndMetadata,
    OffsetCommitRequest,
    SyncRequest,
    TxnOffsetCommitRequest,
)
from broker.groups.types import RebalanceProtocol, TopicPartition
from broker.request_fields import (
    INT32_MAX,
    INT64_MAX,
    REQUIRED,
    InvalidRequestError,
    body_or_raise,
    bool_field,
    int_field,
    int_value,
    list_field,
    partition_value,
    str_field,
    str_value,
    topic_value,
)
from broker.router import INTERNAL_PREFIX, MSGPACK, PUBLIC_PREFIX

log = logging.getLogger(__name__)

GROUPS_KEY: web.AppKey[GroupCoordinator] = web.AppKey("group_coordinator", GroupCoordinator)

Body = dict[str, Any]


def pack(data: Body, status: int = 200) -> web.Response:
    return web.Response(
        body=msgpack.packb(data, use_bin_type=True), content_type=MSGPACK, status=status
    )


C = TypeVar("C")


def coordinator_handler(
    key: web.AppKey[C], what: str, fn: Callable[[C, Body], Awaitable[Body]]
) -> Callable[[web.Request], Awaitable[web.Response]]:
    """A coordinator's route (the group's here, the transactions' in ``broker.txn_routes``):
    ``fn(coordinator, body)``'s answer with ``error`` NONE, or its refusal as an ``error``
    (400 for a bad field: every field is read before the coordinator is called, so nothing
    was done; NOT_COORDINATOR names the coordinator it knows of)."""

    async def handle(request: web.Request) -> web.Response:
        coordinator = request.app[key]
        try:
            out = await fn(coordinator, body_or_raise(await request.read()))
            out.setdefault("error", "NONE")
            return pack(out)
        except InvalidRequestError as e:
            return pack({"error": e.code, "message": f"{request.path}: {e}"}, 400)
        except CoordinatorError as e:
            err: Body = {"error": e.code, "message": str(e)}
            if e.code == NOT_COORDINATOR:
                err["coordinator_id"] = e.coordinator_id
            return pack(err)
        except Exception as e:
            log.exception("%s %s failed", what, request.path)
            return pack({"error": "UNKNOWN_SERVER_ERROR", "message": repr(e)})

    return handle


def _handler(
    fn: Callable[[GroupCoordinator, Body], Awaitable[Body]],
) -> Callable[[web.Request], Awaitable[web.Response]]:
    return coordinator_handler(GROUPS_KEY, "group", fn)


# ---------------------------------------------------------------- field codecs

OFFSET_METADATA_CHARS_MAX = 4096
"""Kafka's ``offset.metadata.max.bytes``: the metadata string committed with an offset."""


def _group(b: Body) -> str:
    return str_field(b, "group")


def _tp(x: Any, where: str) -> TopicPartition:
    if type(x) is not list or len(x) != 2:
        raise InvalidRequestError(f"{where!r} must be [topic, partition], got {x!r:.60}")
    return TopicPartition(topic_value(f"{where}[0]", x[0]), partition_value(f"{where}[1]", x[1]))


def _tps_in(x: list[Any], key: str) -> frozenset[TopicPartition]:
    return frozenset(_tp(e, f"{key}[{i}]") for i, e in enumerate(x))


def _offset_entries(b: Body, with_metadata: bool) -> list[tuple[TopicPartition, int, str]]:
    """``offsets``: ``[[topic, partition, offset, metadata?], ...]`` (commit) or
    ``[[topic, partition, offset], ...]`` (reset)."""
    out = []
    shape = (
        "[topic, partition, offset, metadata?]" if with_metadata else "[topic, partition, offset]"
    )
    for i, e in enumerate(list_field(b, "offsets", default=[])):
        where = f"offsets[{i}]"
        if type(e) is not list or not (len(e) == 3 or (with_metadata and len(e) == 4)):
            raise InvalidRequestError(f"{where!r} must be {shape}, got {e!r:.60}")
        tp = _tp(e[:2], where)
        offset = int_value(f"{where}[2]", e[2], 0, INT64_MAX)
        metadata = (
            ""
            if len(e) == 3 or e[3] is None
            else str_value(f"{where}[3]", e[3], OFFSET_METADATA_CHARS_MAX)
        )
        out.append((tp, offset, metadata))
    return out


def _tps_out(tps: Iterable[TopicPartition]) -> list[list[Any]]:
    return [[tp.topic, tp.partition] for tp in sorted(tps)]


def _join_out(r: JoinResponse) -> Body:
    return {
        "error": r.error.value,
        "member_id": r.member_id,
        "generation": r.generation,
        "protocol": None if r.protocol is None else r.protocol.value,
        "assignor": r.assignor,
        "leader": r.leader,
        "members": list(r.members),
    }


# ---------------------------------------------------------------- ops


async def _find_coordinator(c: GroupCoordinator, b: Body) -> Body:
    info = await c.find_coordinator(_group(b))
    return {"coordinator_id": info.coordinator_id, "url": info.url, "partition": info.partition}


_PROTOCOLS = {p.value: p for p in RebalanceProtocol}


async def _join(c: GroupCoordinator, b: Body) -> Body:
    topics = list_field(b, "topics", default=[])
    owned = list_field(b, "owned", default=None)
    defaults = JoinRequest("", "", frozenset())
    protocol = str_field(b, "protocol", default=defaults.protocol.value)
    if protocol not in _PROTOCOLS:
        raise InvalidRequestError(
            f"'protocol' must be one of {sorted(_PROTOCOLS)}, got {protocol!r:.60}"
        )
    req = JoinRequest(
        group=_group(b),
        member_id=str_field(b, "member_id", default=UNKNOWN_MEMBER_ID),
        topics=frozenset(topic_value(f"topics[{i}]", t) for i, t in enumerate(topics)),
        protocol=_PROTOCOLS[protocol],
        assignor=str_field(b, "assignor", default=defaults.assignor),
        client_id=str_field(b, "client_id", default=""),
        session_timeout_ms=int_field(
            b, "session_timeout_ms", 0, INT32_MAX, default=defaults.session_timeout_ms
        ),
        rebalance_timeout_ms=int_field(
            b, "rebalance_timeout_ms", 0, INT32_MAX, default=defaults.rebalance_timeout_ms
        ),
        owned=None if owned is None else _tps_in(owned, "owned"),
    )
    return _join_out(await c.join(req))


def _generation(b: Body, default: int = REQUIRED) -> int:
    return int_field(b, "generation", NO_GENERATION, INT32_MAX, default=default)


async def _sync(c: GroupCoordinator, b: Body) -> Body:
    r = await c.sync(SyncRequest(_group(b), str_field(b, "member_id"), _generation(b)))
    return {
        "error": r.error.value,
        "assignment": _tps_out(r.assignment),
        "revoked": _tps_out(r.revoked),
        "rejoin": r.rejoin,
    }


async def _heartbeat(c: GroupCoordinator, b: Body) -> Body:
    e = await c.heartbeat(HeartbeatRequest(_group(b), str_field(b, "member_id"), _generation(b)))
    return {"error": e.value}


async def _leave(c: GroupCoordinator, b: Body) -> Body:
    e = await c.leave(LeaveRequest(_group(b), str_field(b, "member_id")))
    return {"error": e.value}


async def _commit(c: GroupCoordinator, b: Body) -> Body:
    offsets = {
        tp: OffsetAndMetadata(offset, metadata)
        for tp, offset, metadata in _offset_entries(b, with_metadata=True)
    }
    e = await c.commit(
        OffsetCommitRequest(
            _group(b),
            offsets,
            member_id=str_field(b, "member_id", default=UNKNOWN_MEMBER_ID),
            generation=_generation(b, NO_GENERATION),
        )
    )
    return {"error": e.value}


async def _txn_commit(c: GroupCoordinator, b: Body) -> Body:
    """TxnOffsetCommit (docs/transactions.md): offsets of a transaction, pending until its
    commit marker reaches the group's offsets partition."""
    offsets = {
        tp: OffsetAndMetadata(offset, metadata)
        for tp, offset, metadata in _offset_entries(b, with_metadata=True)
    }
    tid = str_field(b, "transactional_id")
    if not tid:
        raise InvalidRequestError("'transactional_id' must not be empty")
    e = await c.txn_commit(
        TxnOffsetCommitRequest(
            _group(b),
            producer_id=int_field(b, "producer_id", 0, INT64_MAX),
            producer_epoch=int_field(b, "producer_epoch", 0, 32767),
            offsets=offsets,
            member_id=str_field(b, "member_id", default=UNKNOWN_MEMBER_ID),
            generation=_generation(b, NO_GENERATION),
        ),
        tid,
    )
    return {"error": e.value}


async def _fetch_offsets(c: GroupCoordinator, b: Body) -> Body:
    raw = list_field(b, "partitions", default=None)
    got = await c.fetch_offsets(
        _group(b),
        None if raw is None else _tps_in(raw, "partitions"),
        require_stable=bool_field(b, "require_stable", default=False),
    )
    return {
        "offsets": [
            [tp.topic, tp.partition, o.offset, o.metadata, o.commit_ts_ms]
            for tp, o in sorted(got.items())
        ]
    }


async def _describe(c: GroupCoordinator, b: Body) -> Body:
    d = await c.describe(_group(b))
    return {
        "group": d.group,
        "state": d.state.value,
        "generation": d.generation,
        "protocol": None if d.protocol is None else d.protocol.value,
        "assignor": d.assignor,
        "leader": d.leader,
        "is_simple": d.is_simple,
        "members": [
            {
                "member_id": m.member_id,
                "client_id": m.client_id,
                "protocol": m.protocol.value,
                "topics": sorted(m.topics),
                "assignment": _tps_out(m.assignment),
            }
            for m in d.members
        ],
    }


async def _lag(c: GroupCoordinator, b: Body) -> Body:
    lags = await c.lag(_group(b))
    return {
        "partitions": [
            [tp.topic, tp.partition, x.current_offset, x.log_end_offset, x.lag, x.member_id]
            for tp, x in sorted(lags.items())
        ]
    }


async def _list(c: GroupCoordinator, b: Body) -> Body:
    return {
        "groups": [
            {"group": g.group, "state": g.state.value, "is_simple": g.is_simple}
            for g in await c.list_groups()
        ]
    }


async def _reset_offsets(c: GroupCoordinator, b: Body) -> Body:
    offsets = {tp: offset for tp, offset, _ in _offset_entries(b, with_metadata=False)}
    e = await c.reset_offsets(_group(b), offsets)
    return {"error": e.value}


async def _delete_offsets(c: GroupCoordinator, b: Body) -> Body:
    partitions = _tps_in(list_field(b, "partitions"), "partitions")
    return {"error": (await c.delete_offsets(_group(b), partitions)).value}


async def _delete(c: GroupCoordinator, b: Body) -> Body:
    return {"error": (await c.delete_group(_group(b))).value}


OPS: dict[str, Callable[[GroupCoordinator, Body], Awaitable[Body]]] = {
    "find_coordinator": _find_coordinator,
    "join": _join,
    "sync": _sync,
    "heartbeat": _heartbeat,
    "leave": _leave,
    "commit": _commit,
    "txn_commit": _txn_commit,
    "fetch_offsets": _fetch_offsets,
    "describe": _describe,
    "lag": _lag,
    "list": _list,
    "reset_offsets": _reset_offsets,
    "delete": _delete,
    "delete_offsets": _delete_offsets,
}


def add_group_routes(app: web.Application, coordinator: GroupCoordinator) -> None:
    app[GROUPS_KEY] = coordinator
    for op, fn in OPS.items():
        app.router.add_post(f"{INTERNAL_PREFIX}/group/{op}", _handler(fn))
        app.router.add_post(f"{PUBLIC_PREFIX}/group/{op}", _handler(fn))
