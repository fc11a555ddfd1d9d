"""The pure parts of the Kafka admin handlers (api.kafka.admin): a topic's config entries
with Kafka's precedence and sources, and KIP-339's incremental operations as overrides."""

from __future__ import annotations

from types import SimpleNamespace

from kio.schema.errors import ErrorCode

from api.kafka.admin import (
    OP_APPEND,
    OP_DELETE,
    OP_SET,
    OP_SUBTRACT,
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    SOURCE_DEFAULT,
    SOURCE_DYNAMIC_DEFAULT_BROKER,
    SOURCE_TOPIC,
    _incremental_ops,
    _topic_config_entries,
)
from metalog.delta import MetadataDelta
from metalog.image import TOPIC_CONFIG_DEFAULTS, MetadataImage
from metalog.records import ConfigRecord, ConfigResourceType, TopicId, TopicRecord


def image(topic: dict[str, str], cluster: dict[str, str] | None = None) -> MetadataImage:
    d = MetadataDelta(MetadataImage.EMPTY)
    d.replay(TopicRecord(name="t", topic_id=TopicId("tid")), 1)
    off = 1
    for rtype, name, kv in (
        (ConfigResourceType.TOPIC, "t", topic),
        (ConfigResourceType.CLUSTER, "", cluster or {}),
    ):
        for k, v in kv.items():
            off += 1
            d.replay(ConfigRecord(resource_type=rtype, resource_name=name, name=k, value=v), off)
    return d.apply()


def op(name: str, operation: int, value: str | None = None) -> SimpleNamespace:
    return SimpleNamespace(name=name, config_operation=operation, value=value)


def test_topic_entries_take_the_topic_then_the_cluster_then_the_default() -> None:
    im = image({"retention.ms": "1000"}, {"retention.ms": "2000", "segment.ms": "3000"})
    entries = {e[0]: e for e in _topic_config_entries(im, "t", None, synonyms=True)}
    assert set(entries) == set(TOPIC_CONFIG_DEFAULTS)
    _name, value, source, chain = entries["retention.ms"]
    assert (value, source) == ("1000", SOURCE_TOPIC)
    assert [(v, s) for _, v, s in chain] == [
        ("1000", SOURCE_TOPIC),
        ("2000", SOURCE_DYNAMIC_DEFAULT_BROKER),
        (TOPIC_CONFIG_DEFAULTS["retention.ms"], SOURCE_DEFAULT),
    ]
    assert entries["segment.ms"][1:3] == ("3000", SOURCE_DYNAMIC_DEFAULT_BROKER)
    assert entries["cleanup.policy"][1:3] == ("delete", SOURCE_DEFAULT)


def test_topic_entries_keep_only_the_asked_keys_and_no_synonyms_unless_asked() -> None:
    im = image({"retention.ms": "1000"})
    entries = _topic_config_entries(im, "t", {"retention.ms", "no.such"}, synonyms=False)
    assert entries == [("retention.ms", "1000", SOURCE_TOPIC, [])]


def test_incremental_set_delete_append_subtract() -> None:
    im = image({"cleanup.policy": "compact"})
    ops = _incremental_ops(
        im,
        RESOURCE_TOPIC,
        "t",
        [
            op("retention.ms", OP_SET, "5"),
            op("segment.ms", OP_DELETE),
            op("cleanup.policy", OP_APPEND, "delete,compact"),
        ],
    )
    assert ops == {"retention.ms": "5", "segment.ms": None, "cleanup.policy": "compact,delete"}
    ops = _incremental_ops(im, RESOURCE_TOPIC, "t", [op("cleanup.policy", OP_SUBTRACT, "compact")])
    assert ops == {"cleanup.policy": ""}


def test_append_on_a_default_list_starts_from_the_default() -> None:
    ops = _incremental_ops(
        image({}), RESOURCE_TOPIC, "t", [op("cleanup.policy", OP_APPEND, "compact")]
    )
    assert ops == {"cleanup.policy": "delete,compact"}


def test_append_or_subtract_on_a_scalar_or_a_broker_and_unknown_operations_are_refused() -> None:
    im = image({})
    assert _incremental_ops(im, RESOURCE_TOPIC, "t", [op("retention.ms", OP_APPEND, "1")]) == (
        ErrorCode.invalid_config
    )
    assert _incremental_ops(im, RESOURCE_BROKER, "1", [op("cleanup.policy", OP_SUBTRACT, "x")]) == (
        ErrorCode.invalid_config
    )
    assert _incremental_ops(im, RESOURCE_TOPIC, "t", [op("retention.ms", 9, "1")]) == (
        ErrorCode.invalid_request
    )
