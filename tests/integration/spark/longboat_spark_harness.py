"""Shared by the Spark tests: one real local cluster (3 controllers, 3 brokers) and one
local[2] SparkSession, both started once per module (Spark's cold start is ~15 s)."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from api.node.localcluster import Brokers, Quorum, wait_for
from metalog.client import ControllerClient
from metalog.commands import CreatePartitions, CreateTopic


class LocalCluster:
    def __init__(self, root: Path) -> None:
        self.quorum = Quorum(root, 3)
        # Retention checked every 200 ms (Kafka's default is 5 minutes), so a test can watch
        # it delete segments under a reader.
        self.brokers = Brokers(
            root, self.quorum, 3, extra_args=["--override", "log_retention_check_interval_ms=200"]
        )

    @property
    def bootstrap(self) -> str:
        return ",".join(self.brokers.url(b) for b in self.brokers.ids)

    def start(self) -> None:
        self.quorum.start_all()
        self.brokers.start_all()
        self.brokers.wait_ready(timeout_s=60)

    def stop(self) -> None:
        self.brokers.stop_all()
        self.quorum.stop_all()

    def create_topic(
        self, name: str, partitions: int, rf: int = 3, configs: dict[str, str] | None = None
    ) -> None:
        # The tests' records carry 2023 timestamps (fixed, so reads by timestamp are exact),
        # which the default retention.ms (7 days) would delete at the next retention check.
        self._execute(
            CreateTopic(
                name=name,
                num_partitions=partitions,
                replication_factor=rf,
                configs={"retention.ms": "-1", **(configs or {})},
            )
        )
        self._wait_leaders(name, partitions)

    def grow_topic(self, name: str, partitions: int) -> None:
        self._execute(CreatePartitions(name=name, total_count=partitions))
        self._wait_leaders(name, partitions)

    def _execute(self, command: Any) -> None:
        async def go() -> None:
            async with ControllerClient(self.quorum.urls, timeout_s=20) as cc:
                await cc.execute(command)

        asyncio.run(go())

    def _wait_leaders(self, name: str, partitions: int) -> None:

        def leaders_everywhere() -> bool:
            for b in self.brokers.ids:
                md = self.brokers.metadata(b)
                t = next((t for t in md["topics"] if t["name"] == name), None)
                if (
                    t is None
                    or len(t["partitions"]) != partitions
                    or any(p["leader"] < 0 for p in t["partitions"])
                ):
                    return False
            return True

        wait_for(f"topic {name} with leaders on every broker", leaders_everywhere, 30)


def cluster(root: Path) -> Iterator[LocalCluster]:
    c = LocalCluster(root)
    c.start()
    try:
        yield c
    finally:
        c.stop()


def spark_session(tmp: Path) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    import spark as longboat_spark

    s = (
        SparkSession.builder.master("local[2]")
        .appName("longboat-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.warehouse.dir", str(tmp / "warehouse"))
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    s.sparkContext.setLogLevel("ERROR")
    longboat_spark.register(s)
    return s
