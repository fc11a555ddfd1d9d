"""A producer's metadata with one topic ``t`` of one partition, for tests that stand in for
the cluster: ``leader_url`` names a fixed leader, ``refresh`` only counts."""

from __future__ import annotations

from typing import Any

from api.client.transport import PartitionInfo


class OneTopicMetadata:
    def __init__(self) -> None:
        self.current = type(
            "Cache", (), {"topics": {"t": {0: PartitionInfo(0, 1, 0, (1,), (1,))}}}
        )()
        self.refreshes = 0

    async def partitions(self, topic: str, *, timeout_s: float = 10.0) -> dict[int, Any]:
        return dict(self.current.topics[topic])

    async def leader_url(self, topic: str, partition: int, *, timeout_s: float = 10.0) -> str:
        return "http://leader"

    async def refresh(self, *, timeout_s: float = 10.0) -> None:
        self.refreshes += 1
