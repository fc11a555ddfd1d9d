"""A small driver for GroupCoordinatorState: a clock, id factory, and the records it emits."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

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
    SyncResponse,
)
from broker.groups.records import GroupRecord
from broker.groups.types import ErrorCode, GroupState, RebalanceProtocol, TopicPartition

EAGER = RebalanceProtocol.EAGER
COOP = RebalanceProtocol.COOPERATIVE
G = "g"


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


def tps(*names: str) -> frozenset[TopicPartition]:
    """``tps("t-0", "t-1")``."""
    return frozenset(TopicPartition(n.rsplit("-", 1)[0], int(n.rsplit("-", 1)[1])) for n in names)


class Harness:
    def __init__(
        self,
        topics: dict[str, int] | None = None,
        *,
        initial_rebalance_delay_ms: int = 100,
        retention_minutes: int = 1,
        group_size_max: int = 100,
    ):
        counter = itertools.count()
        self.config = GroupConfig(
            session_timeout_ms_min=10,
            session_timeout_ms_max=100_000,
            initial_rebalance_delay_ms=initial_rebalance_delay_ms,
            offsets_retention_minutes=retention_minutes,
            group_size_max=group_size_max,
        )
        self.st = GroupCoordinatorState(
            self.config,
            new_member_id=lambda client: f"{client or 'm'}-{next(counter)}",
            partitions_per_topic={"t": 4} if topics is None else topics,
        )
        self.now = 0
        self.records: list[GroupRecord] = []
        self.completed: dict[str, JoinResponse] = {}
        self.last_parked = ""

    def _take(self, out: Outcome[Any]) -> Outcome[Any]:
        self.records.extend(out.records)
        for (_, mid), resp in out.joins_completed.items():
            self.completed[mid] = resp
        return out

    def join(
        self,
        member_id: str = "",
        *,
        client: str = "",
        protocol: RebalanceProtocol = EAGER,
        assignor: str = "range",
        topics: Iterable[str] = ("t",),
        session_ms: int = 1_000,
        rebalance_ms: int = 5_000,
        poll_ms: int | None = None,
        owned: frozenset[TopicPartition] | None = None,
        group: str = G,
    ) -> Outcome[JoinResponse]:
        req = JoinRequest(
            group,
            member_id,
            frozenset(topics),
            protocol,
            assignor,
            client,
            session_ms,
            rebalance_ms,
            poll_ms,
            owned,
        )
        out = self._take(self.st.handle_join(req, self.now))
        if out.response is not None:
            self.completed[out.response.member_id or member_id] = out.response
        if out.parked is not None:
            self.last_parked = out.parked[1]
        return out

    def sync(self, member_id: str, generation: int, group: str = G) -> Outcome[SyncResponse]:
        return self._take(self.st.handle_sync(SyncRequest(group, member_id, generation), self.now))

    def heartbeat(self, member_id: str, generation: int, group: str = G) -> ErrorCode:
        out = self._take(
            self.st.handle_heartbeat(HeartbeatRequest(group, member_id, generation), self.now)
        )
        assert out.response is not None
        return out.response

    def leave(self, member_id: str, group: str = G) -> ErrorCode:
        out = self._take(self.st.handle_leave(LeaveRequest(group, member_id), self.now))
        assert out.response is not None
        return out.response

    def commit(
        self,
        offsets: dict[TopicPartition, int],
        member_id: str = "",
        generation: int = -1,
        group: str = G,
    ) -> ErrorCode:
        req = OffsetCommitRequest(
            group,
            {k: OffsetAndMetadata(v, f"md{v}") for k, v in offsets.items()},
            member_id,
            generation,
        )
        out = self._take(self.st.handle_offset_commit(req, self.now))
        assert out.response is not None
        return out.response

    def advance(self, ms: int) -> Outcome[None]:
        self.now += ms
        return self._take(self.st.poll(self.now))

    def state(self, group: str = G) -> GroupState:
        return self.st.describe(group).state

    def generation(self, group: str = G) -> int:
        return self.st.describe(group).generation

    def assignment(self, member_id: str, group: str = G) -> frozenset[TopicPartition]:
        return next(
            m.assignment for m in self.st.describe(group).members if m.member_id == member_id
        )

    def stable_group(
        self, n: int, *, protocol: RebalanceProtocol = EAGER, assignor: str = "range"
    ) -> list[str]:
        """n members joined together (within the initial delay) and synced: STABLE, gen 1."""
        ids = []
        for i in range(n):
            out = self.join(client=f"c{i}", protocol=protocol, assignor=assignor)
            assert out.response is None  # parked until the initial delay passes
            ids.append(self.last_parked)
        self.advance(self.config.initial_rebalance_delay_ms)
        assert all(self.completed[m].error == ErrorCode.NONE for m in ids)
        gen = self.completed[ids[0]].generation
        for m in ids:
            out = self.sync(m, gen)
            assert out.response is not None and out.response.error == ErrorCode.NONE
        assert self.state() == GroupState.STABLE
        return ids

    def rejoin_all(
        self, ids: Iterable[str], *, protocol: RebalanceProtocol = EAGER, assignor: str = "range"
    ) -> int:
        """Every member in ``ids`` rejoins; returns the new generation."""
        for m in ids:
            self.join(m, protocol=protocol, assignor=assignor)
        gens = {self.completed[m].generation for m in ids}
        assert len(gens) == 1, gens
        return gens.pop()
