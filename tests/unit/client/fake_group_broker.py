"""An in-process fake broker for the group client's tests: one aiohttp app on 127.0.0.1.

It serves what ``AsyncGroupConsumer`` talks to, and no more:

* ``GET /v3/broker/metadata``: this one broker leads every partition;
* the data routes ``fetch`` (long-polling) and ``list_offsets``, over in-memory logs of
  Longboat batches (``storage.batch.encode_batch``);
* the coordinator's wire protocol (docs/consumer-groups.md) on the pure core
  ``broker.groups.group.GroupCoordinatorState``: joins park until their phase completes, a
  timer task calls ``poll``; records are "durable" at once (nothing is persisted).

Fault knobs: ``refuse_next`` (answer the next group calls with a coordinator error),
``sync_delay_s`` (answer syncs late), ``hold_joins`` (keep completed join answers until released, so a test can look at the
members in the middle of a rebalance), ``kick(member)`` (remove a member as a session
expiry would). ``calls`` records every group call, for assertions.

Test helper, not product code: the real coordinator is ``broker/group_coordinator.py``.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import defaultdict
from typing import Any

import msgpack
from aiohttp import web

from broker.groups.group import (
    GroupConfig,
    GroupCoordinatorState,
    HeartbeatRequest,
    JoinRequest,
    JoinResponse,
    LeaveRequest,
    OffsetAndMetadata,
    OffsetCommitRequest,
    Outcome,
    SyncRequest,
)
from broker.groups.records import GroupMetadataRecord
from broker.groups.types import RebalanceProtocol, TopicPartition
from storage.batch import encode_batch

MSGPACK = "application/msgpack"


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


def _pairs(tps: Any) -> list[list[Any]]:
    return [[tp.topic, tp.partition] for tp in sorted(tps)]


class FakeGroupBroker:
    def __init__(
        self,
        topics: dict[str, int],
        *,
        initial_rebalance_delay_ms: int = 0,
        session_timeout_ms_min: int = 100,
    ) -> None:
        self.topics = dict(topics)
        self.logs: dict[tuple[str, int], list[tuple[int, bytes]]] = defaultdict(list)
        self.ends: dict[tuple[str, int], int] = defaultdict(int)
        self.metadata_offset = 1
        ids = itertools.count(1)
        self.state = GroupCoordinatorState(
            GroupConfig(
                session_timeout_ms_min=session_timeout_ms_min,
                initial_rebalance_delay_ms=initial_rebalance_delay_ms,
            ),
            new_member_id=lambda client: f"{client}-{next(ids)}",
            partitions_per_topic=self.topics,
        )
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.refuse_next: list[str] = []
        """Coordinator errors to answer the next group calls with, one per call."""
        self.hold_joins = False
        self.sync_delay_s = 0.0
        """Answer syncs this much later (the member is then joined but not yet synced)."""
        self.commit_gate: asyncio.Event | None = None
        """When set to an Event, commits wait for it before they are looked at (a commit in
        flight across a coordinator failover), then are judged by the group as it is then."""
        self._held: dict[tuple[str, str], JoinResponse] = {}
        self._parked: dict[tuple[str, str], list[asyncio.Future[JoinResponse]]] = defaultdict(list)
        self._appended = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self._timer: asyncio.Task[None] | None = None
        self.url = ""

    # ------------------------------------------------------------ life cycle

    async def start(self) -> str:
        app = web.Application()
        app.router.add_get("/v3/broker/metadata", self._metadata)
        app.router.add_post("/binary/v1/fetch", self._fetch)
        app.router.add_post("/binary/v1/list_offsets", self._list_offsets)
        app.router.add_post("/binary/v1/group/{op}", self._group)
        # Handlers still running at stop (a delayed sync, a long poll) are not waited for.
        self._runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{port}"
        self._timer = asyncio.get_running_loop().create_task(self._tick())
        return self.url

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for futs in self._parked.values():
            for f in futs:
                f.cancel()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(0.01)
            self._deliver(self.state.poll(_now_ms()))

    # ------------------------------------------------------------ data

    def create_topic(self, name: str, partitions: int) -> None:
        self.topics[name] = partitions
        self.metadata_offset += 1
        self._deliver(self.state.update_topics(self.topics, _now_ms()))

    async def append(self, topic: str, partition: int, values: list[bytes]) -> int:
        """Append records; the base offset they got."""
        key = (topic, partition)
        base = self.ends[key]
        ts = int(time.time() * 1000)
        batch = encode_batch([(None, v, ts, ()) for v in values], base_offset=base)
        self.logs[key].append((base, batch))
        self.ends[key] = base + len(values)
        async with self._appended:
            self._appended.notify_all()
        return base

    async def append_everywhere(self, topic: str, per_partition: int, tag: str = "") -> None:
        for p in range(self.topics[topic]):
            await self.append(
                topic, p, [f"{tag}{topic}-{p}-{i}".encode() for i in range(per_partition)]
            )

    # ------------------------------------------------------------ groups, for tests

    def members(self, group: str) -> dict[str, set[TopicPartition]]:
        return {m.member_id: set(m.assignment) for m in self.state.describe(group).members}

    def kick(self, group: str, member_id: str) -> None:
        """Remove a member as the coordinator does when its session expires."""
        self._deliver(self.state.handle_leave(LeaveRequest(group, member_id), _now_ms()))

    def release_joins(self) -> None:
        self.hold_joins = False
        held, self._held = self._held, {}
        for key, resp in held.items():
            self._answer(key, resp)

    def parked_members(self) -> set[str]:
        return {mid for (_, mid), futs in self._parked.items() if futs} | {
            mid for (_, mid) in self._held
        }

    def ops(self, op: str) -> list[dict[str, Any]]:
        return [b for o, b in self.calls if o == op]

    # ------------------------------------------------------------ routes

    async def _metadata(self, request: web.Request) -> web.Response:
        host, port = self.url.split("://")[1].split(":")
        return web.json_response(
            {
                "offset": self.metadata_offset,
                "brokers": [
                    {"broker_id": 1, "endpoints": [["http", host, int(port)]], "fenced": False}
                ],
                "topics": [
                    {
                        "name": t,
                        "partitions": [
                            {
                                "partition": p,
                                "leader": 1,
                                "leader_epoch": 0,
                                "replicas": [1],
                                "isr": [1],
                            }
                            for p in range(n)
                        ],
                    }
                    for t, n in sorted(self.topics.items())
                ],
            }
        )

    async def _fetch(self, request: web.Request) -> web.Response:
        b = msgpack.unpackb(await request.read(), raw=False)
        key = (str(b["topic"]), int(b["partition"]))
        offset = int(b["fetch_offset"])
        deadline = time.monotonic() + int(b.get("max_wait_ms", 0)) / 1000
        while True:
            end = self.ends[key]
            if offset > end or key[0] not in self.topics:
                return _pack(
                    {
                        "error": "OFFSET_OUT_OF_RANGE"
                        if key[0] in self.topics
                        else "UNKNOWN_TOPIC_OR_PARTITION",
                        "message": "",
                        "leader_id": 1,
                    }
                )
            data = b"".join(
                batch for base, batch in self.logs[key] if base + _count(batch) > offset
            )
            left = deadline - time.monotonic()
            if data or left <= 0:
                return _pack({"records": data, "high_watermark": end})
            async with self._appended:
                try:
                    async with asyncio.timeout(left):
                        await self._appended.wait()
                except TimeoutError:
                    pass

    async def _list_offsets(self, request: web.Request) -> web.Response:
        b = msgpack.unpackb(await request.read(), raw=False)
        key = (str(b["topic"]), int(b["partition"]))
        ts = int(b["timestamp"])
        return _pack({"offset": 0 if ts == -2 else self.ends[key]})

    async def _group(self, request: web.Request) -> web.Response:
        op = request.match_info["op"]
        b = msgpack.unpackb(await request.read(), raw=False)
        self.calls.append((op, b))
        if self.refuse_next and op != "list":
            code = self.refuse_next.pop(0)
            return _pack({"error": code, "message": "fake refusal", "coordinator_id": -1})
        handler = getattr(self, f"_op_{op}", None)
        if handler is None:
            return _pack({"error": "INVALID_REQUEST", "message": f"no op {op}"})
        return _pack(await handler(b))

    async def _op_find_coordinator(self, b: dict[str, Any]) -> dict[str, Any]:
        return {"coordinator_id": 1, "url": self.url, "partition": 0}

    async def _op_join(self, b: dict[str, Any]) -> dict[str, Any]:
        owned = b.get("owned")
        req = JoinRequest(
            str(b["group"]),
            str(b.get("member_id") or ""),
            frozenset(b["topics"]),
            RebalanceProtocol(b.get("protocol", "eager")),
            str(b.get("assignor", "range")),
            str(b.get("client_id", "")),
            int(b["session_timeout_ms"]),
            int(b["rebalance_timeout_ms"]),
            None,
            None if owned is None else frozenset(TopicPartition(t, p) for t, p in owned),
        )
        out = self.state.handle_join(req, _now_ms())
        fut: asyncio.Future[JoinResponse] | None = None
        if out.response is None:
            assert out.parked is not None
            fut = asyncio.get_running_loop().create_future()
            self._parked[out.parked].append(fut)
        elif self.hold_joins and any(isinstance(r, GroupMetadataRecord) for r in out.records):
            # The last member to join completes the phase and is answered at once: hold it
            # like the others.
            key = (req.group, out.response.member_id)
            fut = asyncio.get_running_loop().create_future()
            self._parked[key].append(fut)
            self._held[key] = out.response
        self._deliver(out)
        resp = out.response if fut is None else await fut
        assert resp is not None
        return {
            "error": str(resp.error),
            "member_id": resp.member_id,
            "generation": resp.generation,
            "protocol": None if resp.protocol is None else str(resp.protocol),
            "assignor": resp.assignor,
            "leader": resp.leader,
            "members": list(resp.members),
        }

    async def _op_sync(self, b: dict[str, Any]) -> dict[str, Any]:
        if self.sync_delay_s:
            await asyncio.sleep(self.sync_delay_s)
        out = self.state.handle_sync(
            SyncRequest(str(b["group"]), str(b["member_id"]), int(b["generation"])), _now_ms()
        )
        self._deliver(out)
        r = out.response
        assert r is not None
        return {
            "error": str(r.error),
            "assignment": _pairs(r.assignment),
            "revoked": _pairs(r.revoked),
            "rejoin": r.rejoin,
        }

    async def _op_heartbeat(self, b: dict[str, Any]) -> dict[str, Any]:
        out = self.state.handle_heartbeat(
            HeartbeatRequest(str(b["group"]), str(b["member_id"]), int(b["generation"])), _now_ms()
        )
        self._deliver(out)
        return {"error": str(out.response)}

    async def _op_leave(self, b: dict[str, Any]) -> dict[str, Any]:
        out = self.state.handle_leave(LeaveRequest(str(b["group"]), str(b["member_id"])), _now_ms())
        self._deliver(out)
        return {"error": str(out.response)}

    async def _op_commit(self, b: dict[str, Any]) -> dict[str, Any]:
        if self.commit_gate is not None:
            await self.commit_gate.wait()
        offsets = {
            TopicPartition(str(t), int(p)): OffsetAndMetadata(int(o), str(md or ""))
            for t, p, o, md in b["offsets"]
        }
        out = self.state.handle_offset_commit(
            OffsetCommitRequest(
                str(b["group"]),
                offsets,
                str(b.get("member_id") or ""),
                int(b.get("generation", -1)),
            ),
            _now_ms(),
        )
        self._deliver(out)
        return {"error": str(out.response)}

    async def _op_fetch_offsets(self, b: dict[str, Any]) -> dict[str, Any]:
        parts = b.get("partitions")
        got = self.state.fetch_offsets(
            str(b["group"]),
            None if parts is None else [TopicPartition(str(t), int(p)) for t, p in parts],
        )
        return {
            "offsets": [
                [tp.topic, tp.partition, c.offset, c.metadata, c.commit_ts_ms]
                for tp, c in got.items()
            ]
        }

    async def _op_list(self, b: dict[str, Any]) -> dict[str, Any]:
        return {
            "groups": [
                {
                    "group": g,
                    "state": str(self.state.describe(g).state),
                    "is_simple": self.state.describe(g).is_simple,
                }
                for g in sorted(self.state.groups)
            ]
        }

    # ------------------------------------------------------------ outcomes

    def _deliver(self, out: Outcome[Any]) -> None:
        for key, resp in out.joins_completed.items():
            if self.hold_joins:
                self._held[key] = resp
            else:
                self._answer(key, resp)

    def _answer(self, key: tuple[str, str], resp: JoinResponse) -> None:
        for f in self._parked.pop(key, []):
            if not f.done():
                f.set_result(resp)


def _count(batch: bytes) -> int:
    from storage.batch import parse_header

    return parse_header(batch).record_count


def _pack(d: dict[str, Any]) -> web.Response:
    return web.Response(body=msgpack.packb(d, use_bin_type=True), content_type=MSGPACK)
