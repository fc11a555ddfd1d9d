"""One Longboat cluster with Kafka listeners (1 controller, 3 brokers) shared by the test
modules of this package that ask for ``kafka_listener_cluster`` (KafkaJS, Spark's connector):
a cluster's start and stop cost about as much as either module's own check, so the fast suite
pays for one. Each module uses topics and groups of its own names."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from api.node.localcluster import Brokers, running_cluster


@pytest.fixture(scope="package")
def kafka_listener_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Brokers]:
    root = tmp_path_factory.mktemp("kafka-listener-cluster")
    with running_cluster(root, controllers=1, brokers=3, kafka=True) as (_, brokers):
        yield brokers
