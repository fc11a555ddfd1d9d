"""A running local cluster as the client tests see it: the brokers' URLs to bootstrap from
and topics created through the controller quorum (``running_cluster`` starts it)."""

from __future__ import annotations

import asyncio

from api.client import TopicPartition
from api.node.localcluster import Brokers, Quorum
from metalog.client import ControllerClient
from metalog.commands import CreateTopic


class ClientCluster:
    def __init__(self, quorum: Quorum, brokers: Brokers) -> None:
        self.quorum = quorum
        self.brokers = brokers

    @property
    def bootstrap(self) -> list[str]:
        return [self.brokers.url(b) for b in self.brokers.ids]

    def create_topic(
        self, name: str, partitions: int, rf: int = 3, configs: dict[str, str] | None = None
    ) -> set[TopicPartition]:
        """Create topic ``name`` (committed by the controller; brokers learn of it later)."""

        async def go() -> None:
            async with ControllerClient(self.quorum.urls, timeout_s=20) as cc:
                await cc.execute(
                    CreateTopic(
                        name=name,
                        num_partitions=partitions,
                        replication_factor=rf,
                        configs=configs or {},
                    )
                )

        asyncio.run(go())
        return {TopicPartition(name, p) for p in range(partitions)}
