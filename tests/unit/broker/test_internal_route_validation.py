"""The broker's internal msgpack routes read every field before they act: a good body reaches
the router, coordinator or producer-id manager with typed values; a bad one (wrong type, out
of range, missing, not a map, not msgpack) is answered 400 INVALID_REQUEST naming the field,
and nothing behind the route is called.

The routes run in a real aiohttp app; what is behind them is a recording stub.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgpack
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from broker.data_routes import ROUTER_KEY, add_data_routes
from broker.group_routes import add_group_routes
from broker.groups.group import (
    HeartbeatRequest,
    JoinRequest,
    JoinResponse,
    OffsetCommitRequest,
    SyncRequest,
    SyncResponse,
)
from broker.groups.types import ErrorCode, RebalanceProtocol, TopicPartition
from broker.producer_ids import add_producer_id_routes
from broker.request_fields import (
    INT32_MAX,
    REQUIRED,
    InvalidRequestError,
    body_or_raise,
    bool_field,
    choice_field,
    int_field,
    list_field,
    str_field,
    topic_field,
)

P = "/internal/broker/v1"


class Recorder:
    """Every call, as (name, args, kwargs); answers ``{}`` (or what a group op returns)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.mgr = self

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)

        def call(*args: Any, **kw: Any) -> Any:
            self.calls.append((name, args, kw))
            answers: dict[str, Any] = {
                "join": JoinResponse(ErrorCode.NONE, "m-1", 1),
                "sync": SyncResponse(ErrorCode.NONE, frozenset()),
                "heartbeat": ErrorCode.NONE,
                "commit": ErrorCode.NONE,
                "next_id": 7,
            }
            out = answers.get(name, {})
            if name == "offsets_for_leader_epoch":
                return {"leader_epoch": 1, "end_offset": 2}

            async def coro() -> Any:
                return out

            return coro()

        return call


def _app(stub: Recorder) -> web.Application:
    app = web.Application()
    add_data_routes(app, stub)  # type: ignore[arg-type]
    app[ROUTER_KEY] = stub  # type: ignore[misc]
    add_group_routes(app, stub)  # type: ignore[arg-type]
    add_producer_id_routes(app, stub)  # type: ignore[arg-type]
    return app


def _post_all(requests: list[tuple[str, Any]]) -> tuple[list[tuple[int, Any]], Recorder]:
    stub = Recorder()

    async def run() -> list[tuple[int, Any]]:
        out = []
        async with TestClient(TestServer(_app(stub))) as c:
            for route, body in requests:
                data = body if isinstance(body, bytes) else msgpack.packb(body)
                r = await c.post(
                    f"{P}/{route}", data=data, headers={"Content-Type": "application/msgpack"}
                )
                out.append((r.status, msgpack.unpackb(await r.read(), raw=False)))
        return out

    return asyncio.run(run()), stub


GOOD: dict[str, dict[str, Any]] = {
    "produce": {"topic": "t", "partition": 0, "acks": 1, "timeout_ms": 500, "batch": b"x"},
    "fetch": {"topic": "t", "partition": 1, "fetch_offset": 5, "max_bytes": 100},
    "offsets_for_leader_epoch": {"topic": "t", "partition": 0, "epoch": 3},
    "list_offsets": {"topic": "t", "partition": 0, "timestamp": -2},
    "group/join": {"group": "g", "topics": ["t"], "protocol": "cooperative", "owned": [["t", 0]]},
    "group/sync": {"group": "g", "member_id": "m-1", "generation": 1},
    "group/heartbeat": {"group": "g", "member_id": "m-1", "generation": 1},
    "group/commit": {"group": "g", "offsets": [["t", 0, 10, "meta"], ["t", 1, 11]]},
    "init_producer_id": {},
}


def test_good_bodies_reach_what_is_behind_the_route_with_typed_values() -> None:
    answers, stub = _post_all(list(GOOD.items()))
    assert [s for s, _ in answers] == [200] * len(GOOD), answers
    calls = {name: (args, kw) for name, args, kw in stub.calls}
    assert calls["produce"] == (
        ("t", 0, 1, 500, b"x"),
        {"forwarded": False, "transactional_id": None},
    )
    assert calls["fetch"] == (
        ("t", 1, 5),
        {
            "max_bytes": 100,
            "max_wait_ms": 0,
            "min_bytes": 1,
            "timeout_ms": 30_000,
            "forwarded": False,
            "leader_epoch": -1,
            "isolation_level": "read_uncommitted",
        },
    )
    assert calls["offsets_for_leader_epoch"] == (("t", 0, -1, 3), {})
    assert calls["list_offsets"] == (
        ("t", 0, -2),
        {"timeout_ms": 10_000, "forwarded": False, "isolation_level": "read_uncommitted"},
    )
    (join,), _ = calls["join"]
    assert isinstance(join, JoinRequest)
    assert (join.group, join.topics, join.protocol, join.owned) == (
        "g",
        frozenset({"t"}),
        RebalanceProtocol.COOPERATIVE,
        frozenset({TopicPartition("t", 0)}),
    )
    assert calls["sync"] == ((SyncRequest("g", "m-1", 1),), {})
    assert calls["heartbeat"] == ((HeartbeatRequest("g", "m-1", 1),), {})
    (commit,), _ = calls["commit"]
    assert isinstance(commit, OffsetCommitRequest)
    assert {tp: (o.offset, o.metadata) for tp, o in commit.offsets.items()} == {
        TopicPartition("t", 0): (10, "meta"),
        TopicPartition("t", 1): (11, ""),
    }
    assert answers[-1][1] == {"producer_id": 7, "producer_epoch": 0}


def _with(route: str, **change: Any) -> tuple[str, dict[str, Any]]:
    body: dict[str, Any] = {**GOOD[route], **change}
    return route, {k: v for k, v in body.items() if v is not DROP}


DROP: Any = object()

BAD: list[tuple[tuple[str, Any], str]] = [
    (("produce", b"\xc1"), "the body is not msgpack"),
    (("produce", [1, 2]), "the body must be a msgpack map, got list"),
    (("fetch", b"\x01\x02"), "the body is not msgpack"),  # trailing bytes
    (_with("produce", topic=DROP), "'topic' is required"),
    (_with("produce", topic="a/b"), "'topic' must be a topic name"),
    (_with("produce", topic="x" * 250), "'topic' must be a topic name"),
    (_with("produce", partition=-1), "'partition' must be an integer in [0, 2147483647]"),
    (_with("produce", partition=True), "'partition' must be an integer"),
    (_with("produce", partition="0"), "'partition' must be an integer"),
    (_with("produce", acks=2), "'acks' must be one of -1, 0, 1, got 2"),
    (_with("produce", timeout_ms=float("inf")), "'timeout_ms' must be an integer"),
    (_with("produce", timeout_ms=2**31), "'timeout_ms' must be an integer"),
    (_with("produce", batch=10**9), "'batch' must be bytes, got 1000000000"),
    (_with("produce", batch=[1, 2]), "'batch' must be bytes"),
    (_with("produce", forwarded="false"), "'forwarded' must be true or false"),
    (_with("fetch", fetch_offset=DROP), "'fetch_offset' is required"),
    (_with("fetch", fetch_offset=-1), "'fetch_offset' must be an integer in [0,"),
    (_with("fetch", fetch_offset=2**63), "'fetch_offset' must be an integer"),
    (_with("fetch", replica_id=-3), "'replica_id' must be an integer in [-2,"),
    (_with("fetch", max_bytes=-1), "'max_bytes' must be an integer in [0,"),
    (_with("fetch", max_wait_ms=1.5), "'max_wait_ms' must be an integer"),
    (_with("fetch", leader_epoch=-2), "'leader_epoch' must be an integer in [-1,"),
    (_with("fetch", high_watermark="x"), "'high_watermark' must be an integer"),
    (_with("fetch", isolation_level="dirty"), "'isolation_level' must be one of read_unc"),
    (_with("fetch", isolation_level=1), "'isolation_level' must be a string"),
    (_with("list_offsets", isolation_level="x"), "'isolation_level' must be one of"),
    (_with("produce", transactional_id=5), "'transactional_id' must be a string"),
    (("write_txn_markers", {"markers": [1]}), "'markers[0]' must be a map, got int"),
    (("write_txn_markers", {"markers": [{"topic": "t"}]}), "'partition' is required"),
    (
        ("write_txn_markers", {"markers": [{"topic": "t", "partition": 0, "producer_id": 1}]}),
        "'producer_epoch' is required",
    ),
    (_with("offsets_for_leader_epoch", epoch=-1), "'epoch' must be an integer in [0,"),
    (_with("list_offsets", timestamp=-3), "'timestamp' must be an integer in [-2,"),
    (_with("group/join", group=5), "'group' must be a string"),
    (_with("group/join", group="g" * 40_000), "'group' must be a string of at most 32767"),
    (_with("group/join", topics="t"), "'topics' must be a list"),
    (_with("group/join", topics=["ok", 3]), "'topics[1]' must be a topic name"),
    (_with("group/join", protocol="lazy"), "'protocol' must be one of ['cooperative', 'eager']"),
    (_with("group/join", owned=[["t"]]), "'owned[0]' must be [topic, partition]"),
    (_with("group/join", owned=[["t", -1]]), "'owned[0][1]' must be an integer"),
    (_with("group/join", session_timeout_ms=-5), "'session_timeout_ms' must be an integer"),
    (_with("group/sync", generation=DROP), "'generation' is required"),
    (_with("group/sync", generation=-2), "'generation' must be an integer in [-1,"),
    (_with("group/heartbeat", member_id=b"m"), "'member_id' must be a string"),
    (_with("group/commit", offsets=[["t", 0]]), "'offsets[0]' must be [topic, partition, offset"),
    (_with("group/commit", offsets=[["t", 0, -5]]), "'offsets[0][2]' must be an integer in [0,"),
    (
        _with("group/commit", offsets=[["t", 0, 1, "m" * 4097]]),
        "'offsets[0][3]' must be a string of at most 4096",
    ),
    (_with("group/commit", offsets={"t": 1}), "'offsets' must be a list"),
    (
        ("group/reset_offsets", {"group": "g", "offsets": [["t", 0, 1, "m"]]}),
        "'offsets[0]' must be [topic, partition, offset]",
    ),
    (
        ("group/fetch_offsets", {"group": "g", "partitions": [["t", "0"]]}),
        "'partitions[0][1]' must be an integer",
    ),
    (("init_producer_id", b"\xc1"), "the body is not msgpack"),
    (("init_producer_id", "x"), "the body must be a msgpack map, got str"),
]


@pytest.mark.parametrize(
    ("request_", "says"), BAD, ids=[f"{r[0]}-{i}" for i, (r, _) in enumerate(BAD)]
)
def test_bad_bodies_get_400_naming_the_field_and_reach_nothing(
    request_: tuple[str, Any], says: str
) -> None:
    ((status, answer),), stub = _post_all([request_])
    assert status == 400, answer
    assert answer["error"] == "INVALID_REQUEST"
    assert says in answer["message"], answer["message"]
    assert answer["message"].startswith(f"{P}/{request_[0]}: ")
    assert stub.calls == []


# ------------------------------------------------------------------ the readers themselves


def test_a_missing_or_nil_field_takes_its_default_and_a_required_one_is_refused() -> None:
    b = {"a": None}
    assert int_field(b, "a", default=3) == 3
    assert int_field({}, "a", 0, 9, default=-1) == -1  # a default may sit outside the range
    with pytest.raises(InvalidRequestError, match="'a' must be an integer in \\[0, 9\\]"):
        int_field({"a": -1}, "a", 0, 9, default=-1)  # ... but a value sent may not
    assert choice_field({}, "acks", (-1, 0, 1), default=-1) == -1
    assert bool_field(b, "a", default=True) is True
    assert str_field(b, "a", default="x") == "x"
    assert list_field(b, "a", default=None) is None
    for read in (
        lambda: int_field(b, "a"),
        lambda: str_field({}, "a"),
        lambda: topic_field({}),
        lambda: int_field({}, "a", default=REQUIRED),
    ):
        with pytest.raises(InvalidRequestError, match=r"'a' is required|'topic' is required"):
            read()


def test_integers_are_ints_not_bools_floats_or_strings() -> None:
    for v in (True, False, 1.0, "1", b"1", [1], {"1": 1}):
        with pytest.raises(InvalidRequestError, match="must be an integer"):
            int_field({"n": v}, "n", 0, INT32_MAX)
    assert int_field({"n": INT32_MAX}, "n", 0, INT32_MAX) == INT32_MAX


def test_a_body_must_be_a_msgpack_map() -> None:
    assert body_or_raise(msgpack.packb({"a": 1})) == {"a": 1}
    for raw in (
        b"",
        b"\xc1",
        msgpack.packb(1),
        msgpack.packb({"a": 1}) + b"\x00",
        msgpack.packb([{"a": 1}]),
    ):
        with pytest.raises(InvalidRequestError):
            body_or_raise(raw)


def test_a_fetch_asking_for_more_than_a_broker_gives_is_clamped_not_refused() -> None:
    from broker.data_routes import FETCH_RESPONSE_BYTES_MAX, FETCH_WAIT_MS_MAX

    body = {
        "topic": "t",
        "partition": 0,
        "fetch_offset": 0,
        "max_bytes": 2**31 - 1,
        "max_wait_ms": 2**31 - 1,
    }
    answers, stub = _post_all([("fetch", body)])
    assert answers[0][0] == 200
    ((_, _args, kw),) = [c for c in stub.calls if c[0] == "fetch"]
    assert kw["max_bytes"] == FETCH_RESPONSE_BYTES_MAX
    assert kw["max_wait_ms"] == FETCH_WAIT_MS_MAX
