"""The consumer-group coordinator's internal routes (msgpack bodies), served by ``GroupCoordinator``.

``POST /internal/broker/v1/group/<op>``, body and answer msgpack maps, always HTTP 200.
docs/consumer-groups.md ("The coordinator on a broker: wire protocol") is the contract; this
module only translates between it and ``broker.group_coordinator``:

* a refusal of the whole request is ``{"error": NAME, "message": ...}``, plus
  ``"coordinator_id"`` with NOT_COORDINATOR (-1 when this broker knows none);
* every other answer carries ``"error"``: ``"NONE"`` or the group-level ``ErrorCode``;
* topic-partitions are ``[topic, partition]`` pairs, sorted.

A malformed body is ``INVALID_REQUEST``; an unexpected exception is logged and answered
``UNKNOWN_SERVER_ERROR``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

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
)
from broker.groups.types import RebalanceProtocol, TopicPartition
from broker.router import INTERNAL_PREFIX, MSGPACK

log = logging.getLogger(__name__)

GROUPS_KEY: web.AppKey[GroupCoordinator] = web.AppKey("group_coordinator", GroupCoordinator)

Body = dict[str, Any]


def _pack(data: Body) -> web.Response:
    return web.Response(body=msgpack.packb(data, use_bin_type=True), content_type=MSGPACK)


def _handler(fn: Callable[[GroupCoordinator, Body], Awaitable[Body]]
             ) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        coordinator = request.app[GROUPS_KEY]
        try:
            body = msgpack.unpackb(await request.read(), raw=False)
            if not isinstance(body, dict):
                raise ValueError("body must be a msgpack map")
            out = await fn(coordinator, body)
            out.setdefault("error", "NONE")
            return _pack(out)
        except CoordinatorError as e:
            err: Body = {"error": e.code, "message": str(e)}
            if e.code == NOT_COORDINATOR:
                err["coordinator_id"] = e.coordinator_id
            return _pack(err)
        except (KeyError, TypeError, ValueError, msgpack.UnpackException) as e:
            return _pack({"error": "INVALID_REQUEST", "message": repr(e)})
        except Exception as e:
            log.exception("group %s failed", request.path)
            return _pack({"error": "UNKNOWN_SERVER_ERROR", "message": repr(e)})

    return handle


# ---------------------------------------------------------------- field codecs


def _str(b: Body, key: str, default: str | None = None) -> str:
    v = b.get(key, default)
    if not isinstance(v, str):
        raise TypeError(f"{key!r} must be a string")
    return v


def _int(b: Body, key: str, default: int | None = None) -> int:
    v = b.get(key, default)
    if not isinstance(v, int) or isinstance(v, bool):
        raise TypeError(f"{key!r} must be an integer")
    return v


def _tp(x: Any) -> TopicPartition:
    t, p = x
    if not isinstance(t, str) or not isinstance(p, int) or isinstance(p, bool):
        raise TypeError(f"bad topic-partition {x!r}: expected [topic, partition]")
    return TopicPartition(t, p)


def _tps_in(x: Any) -> frozenset[TopicPartition]:
    return frozenset(_tp(e) for e in x)


def _tps_out(tps: Iterable[TopicPartition]) -> list[list[Any]]:
    return [[tp.topic, tp.partition] for tp in sorted(tps)]


def _join_out(r: JoinResponse) -> Body:
    return {"error": r.error.value, "member_id": r.member_id, "generation": r.generation,
            "protocol": None if r.protocol is None else r.protocol.value,
            "assignor": r.assignor, "leader": r.leader, "members": list(r.members)}


# ---------------------------------------------------------------- ops


async def _find_coordinator(c: GroupCoordinator, b: Body) -> Body:
    info = await c.find_coordinator(_str(b, "group"))
    return {"coordinator_id": info.coordinator_id, "url": info.url, "partition": info.partition}


async def _join(c: GroupCoordinator, b: Body) -> Body:
    topics = b.get("topics") or []
    if not isinstance(topics, list) or not all(isinstance(t, str) for t in topics):
        raise TypeError("'topics' must be a list of strings")
    owned = b.get("owned")
    defaults = JoinRequest("", "", frozenset())
    req = JoinRequest(
        group=_str(b, "group"),
        member_id=_str(b, "member_id", UNKNOWN_MEMBER_ID),
        topics=frozenset(topics),
        protocol=RebalanceProtocol(_str(b, "protocol", defaults.protocol.value)),
        assignor=_str(b, "assignor", defaults.assignor),
        client_id=_str(b, "client_id", ""),
        session_timeout_ms=_int(b, "session_timeout_ms", defaults.session_timeout_ms),
        rebalance_timeout_ms=_int(b, "rebalance_timeout_ms", defaults.rebalance_timeout_ms),
        owned=None if owned is None else _tps_in(owned),
    )
    return _join_out(await c.join(req))


async def _sync(c: GroupCoordinator, b: Body) -> Body:
    r = await c.sync(SyncRequest(_str(b, "group"), _str(b, "member_id"), _int(b, "generation")))
    return {"error": r.error.value, "assignment": _tps_out(r.assignment),
            "revoked": _tps_out(r.revoked), "rejoin": r.rejoin}


async def _heartbeat(c: GroupCoordinator, b: Body) -> Body:
    e = await c.heartbeat(HeartbeatRequest(_str(b, "group"), _str(b, "member_id"),
                                           _int(b, "generation")))
    return {"error": e.value}


async def _leave(c: GroupCoordinator, b: Body) -> Body:
    e = await c.leave(LeaveRequest(_str(b, "group"), _str(b, "member_id")))
    return {"error": e.value}


async def _commit(c: GroupCoordinator, b: Body) -> Body:
    offsets: dict[TopicPartition, OffsetAndMetadata] = {}
    for entry in b.get("offsets") or []:
        t, p, offset, *rest = entry
        metadata = rest[0] if rest and rest[0] is not None else ""
        if not isinstance(offset, int) or isinstance(offset, bool) or not isinstance(metadata,
                                                                                     str):
            raise TypeError(f"bad offset entry {entry!r}: expected [t, p, offset, metadata]")
        offsets[_tp((t, p))] = OffsetAndMetadata(offset, metadata)
    e = await c.commit(OffsetCommitRequest(
        _str(b, "group"), offsets, member_id=_str(b, "member_id", UNKNOWN_MEMBER_ID),
        generation=_int(b, "generation", NO_GENERATION)))
    return {"error": e.value}


async def _fetch_offsets(c: GroupCoordinator, b: Body) -> Body:
    raw = b.get("partitions")
    got = await c.fetch_offsets(_str(b, "group"), None if raw is None else _tps_in(raw))
    return {"offsets": [[tp.topic, tp.partition, o.offset, o.metadata, o.commit_ts_ms]
                        for tp, o in sorted(got.items())]}


async def _describe(c: GroupCoordinator, b: Body) -> Body:
    d = await c.describe(_str(b, "group"))
    return {
        "group": d.group, "state": d.state.value, "generation": d.generation,
        "protocol": None if d.protocol is None else d.protocol.value,
        "assignor": d.assignor, "leader": d.leader, "is_simple": d.is_simple,
        "members": [{"member_id": m.member_id, "client_id": m.client_id,
                     "protocol": m.protocol.value, "topics": sorted(m.topics),
                     "assignment": _tps_out(m.assignment)} for m in d.members],
    }


async def _lag(c: GroupCoordinator, b: Body) -> Body:
    lags = await c.lag(_str(b, "group"))
    return {"partitions": [[tp.topic, tp.partition, x.current_offset, x.log_end_offset, x.lag,
                            x.member_id] for tp, x in sorted(lags.items())]}


async def _list(c: GroupCoordinator, b: Body) -> Body:
    return {"groups": [{"group": g.group, "state": g.state.value, "is_simple": g.is_simple}
                       for g in await c.list_groups()]}


async def _reset_offsets(c: GroupCoordinator, b: Body) -> Body:
    offsets: dict[TopicPartition, int] = {}
    for entry in b.get("offsets") or []:
        t, p, offset = entry
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise TypeError(f"bad offset entry {entry!r}: expected [t, p, offset]")
        offsets[_tp((t, p))] = offset
    e = await c.reset_offsets(_str(b, "group"), offsets)
    return {"error": e.value}


async def _delete(c: GroupCoordinator, b: Body) -> Body:
    return {"error": (await c.delete_group(_str(b, "group"))).value}


OPS: dict[str, Callable[[GroupCoordinator, Body], Awaitable[Body]]] = {
    "find_coordinator": _find_coordinator,
    "join": _join,
    "sync": _sync,
    "heartbeat": _heartbeat,
    "leave": _leave,
    "commit": _commit,
    "fetch_offsets": _fetch_offsets,
    "describe": _describe,
    "lag": _lag,
    "list": _list,
    "reset_offsets": _reset_offsets,
    "delete": _delete,
}


def add_group_routes(app: web.Application, coordinator: GroupCoordinator) -> None:
    app[GROUPS_KEY] = coordinator
    for op, fn in OPS.items():
        app.router.add_post(f"{INTERNAL_PREFIX}/group/{op}", _handler(fn))
