"""``longboat acls``' flag expansion, as ``kafka-acls`` does it (no cluster)."""

from __future__ import annotations

import click
import pytest

from api.cli.acls import _operation, expand_bindings
from metalog.security import CLUSTER_NAME, Operation, PatternType, Permission, ResourceType

T, G, C, X = (
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.CLUSTER,
    ResourceType.TRANSACTIONAL_ID,
)
WHO = [("User:a", "*", Permission.ALLOW)]


def ops(bindings: list) -> set[tuple[ResourceType, str, Operation]]:  # type: ignore[type-arg]
    return {(b.resource_type, b.resource_name, b.operation) for b in bindings}


def test_producer_expands_as_kafka_acls() -> None:
    got = expand_bindings(
        [(T, "t"), (X, "tx")], WHO, [], PatternType.LITERAL, producer=True, idempotent=True
    )
    assert ops(got) == {
        (T, "t", Operation.WRITE),
        (T, "t", Operation.DESCRIBE),
        (T, "t", Operation.CREATE),
        (X, "tx", Operation.WRITE),
        (X, "tx", Operation.DESCRIBE),
        (C, CLUSTER_NAME, Operation.IDEMPOTENT_WRITE),
    }


def test_consumer_expands_as_kafka_acls_and_prefixes_apply_to_topics_and_groups() -> None:
    got = expand_bindings([(T, "t-"), (G, "g-")], WHO, [], PatternType.PREFIXED, consumer=True)
    assert ops(got) == {
        (T, "t-", Operation.READ),
        (T, "t-", Operation.DESCRIBE),
        (G, "g-", Operation.READ),
    }
    assert {b.pattern_type for b in got} == {PatternType.PREFIXED}


def test_every_principal_host_and_operation_on_every_resource() -> None:
    who = [
        ("User:a", "h1", Permission.ALLOW),
        ("User:a", "h2", Permission.ALLOW),
        ("User:b", "*", Permission.DENY),
    ]
    got = expand_bindings(
        [(T, "t"), (C, CLUSTER_NAME)],
        who,
        [Operation.ALTER, Operation.DESCRIBE],
        PatternType.PREFIXED,
    )
    assert len(got) == 2 * 3 * 2
    # The cluster stays LITERAL whatever pattern was asked.
    assert {b.pattern_type for b in got if b.resource_type is C} == {PatternType.LITERAL}
    assert expand_bindings([(T, "t")], WHO, [], PatternType.LITERAL)[0].operation is Operation.ALL


@pytest.mark.parametrize(
    ("text", "op"),
    [
        ("Read", Operation.READ),
        ("DescribeConfigs", Operation.DESCRIBE_CONFIGS),
        ("IdempotentWrite", Operation.IDEMPOTENT_WRITE),
        ("CLUSTER_ACTION", Operation.CLUSTER_ACTION),
        ("all", Operation.ALL),
    ],
)
def test_operations_as_kafka_acls_spells_them(text: str, op: Operation) -> None:
    assert _operation(text) is op


def test_an_unknown_operation_is_a_usage_error() -> None:
    with pytest.raises(click.BadParameter):
        _operation("Fly")
