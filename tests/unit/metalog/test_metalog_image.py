"""MetadataImage and MetadataDelta: structural sharing, change sets, queries, snapshots."""

from __future__ import annotations

import pytest

from common.invariant import InvariantError
from metalog.delta import MetadataDelta, decode_snapshot, encode_snapshot
from metalog.image import MetadataImage
from metalog.records import (
    ConfigRecord,
    ConfigResourceType,
    CorruptMetadataRecordError,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
)


def big_image(topics: int = 200, partitions: int = 50) -> MetadataImage:
    d = MetadataDelta(MetadataImage.EMPTY)
    off = 0
    for b in range(3):
        off += 1
        d.replay(RegisterBrokerRecord(broker_id=b, incarnation_id="x", fenced=False), off)
    for t in range(topics):
        off += 1
        d.replay(TopicRecord(name=f"t{t}", topic_id=f"id{t}"), off)
        for p in range(partitions):
            r = (t + p) % 3
            off += 1
            d.replay(
                PartitionRecord(
                    topic_id=f"id{t}",
                    partition=p,
                    replicas=(r, (r + 1) % 3),
                    isr=(r, (r + 1) % 3),
                    leader=r,
                ),
                off,
            )
    return d.apply()


def test_small_delta_shares_everything_it_did_not_change() -> None:
    image = big_image()
    d = MetadataDelta(image)
    d.replay(
        PartitionChangeRecord(
            topic_id="id7", partition=3, isr=(image.topics.by_id["id7"].partitions[3].leader,)
        ),
        image.offset + 1,
    )
    new = d.apply()
    assert new.brokers is image.brokers and new.configs is image.configs
    changed = sum(new.topics.by_id[t] is not image.topics.by_id[t] for t in image.topics.by_id)
    assert changed == 1
    old_parts, new_parts = image.topics.by_id["id7"].partitions, new.topics.by_id["id7"].partitions
    same = sum(new_parts[p] is old_parts[p] for p in old_parts)
    assert same == len(old_parts) - 1
    assert (
        new_parts[3].partition_epoch == 1
        and image.topics.by_id["id7"].partitions[3].partition_epoch == 0
    )


def test_delta_reports_what_changed_for_a_broker() -> None:
    image = big_image(topics=2, partitions=3)
    d = MetadataDelta(image)
    off = image.offset
    d.replay(RemoveTopicRecord(topic_id="id0"), off + 1)
    d.replay(TopicRecord(name="new", topic_id="idn"), off + 2)
    d.replay(
        PartitionRecord(topic_id="idn", partition=0, replicas=(1, 2), isr=(1, 2), leader=1), off + 3
    )
    d.replay(
        PartitionChangeRecord(topic_id="id1", partition=0, replicas=(0, 2), isr=(0, 2), leader=0),
        off + 4,
    )
    assert d.created_topics == {"idn": "new"} and d.deleted_topics == {"id0": "t0"}
    assert set(d.changed_partitions) == {("idn", 0), ("id1", 0)}
    ch = d.local_changes(1)
    assert set(ch.leaders) == {("idn", 0)}
    # Broker 1 had replicas of every partition of t0 and of t1-0 ((1, 2)); all go.
    assert ("id1", 0) in ch.deletes and {("id0", p) for p in range(3)} & ch.deletes
    ch2 = d.local_changes(2)
    assert set(ch2.followers) == {("idn", 0), ("id1", 0)}


def test_images_answer_broker_queries() -> None:
    image = big_image(topics=2, partitions=3)
    led = image.topics.partitions_led_by(0)
    assert led == sorted((t.topic_id, p) for t, p, r in image.topics.partitions() if r.leader == 0)
    assert len(image.topics.partitions_replicated_by(0)) == 4


def test_replay_refuses_impossible_records() -> None:
    d = MetadataDelta(MetadataImage.EMPTY)
    with pytest.raises(InvariantError):
        d.replay(
            PartitionRecord(topic_id="nope", partition=0, replicas=(1,), isr=(1,), leader=1), 1
        )
    d.replay(TopicRecord(name="t", topic_id="id"), 2)
    with pytest.raises(InvariantError, match="leader"):
        d.replay(
            PartitionRecord(topic_id="id", partition=0, replicas=(1, 2), isr=(1,), leader=2), 3
        )
    with pytest.raises(InvariantError, match="already exists"):
        d.replay(TopicRecord(name="t", topic_id="other"), 4)
    with pytest.raises(InvariantError, match="offset"):
        d.replay(TopicRecord(name="u", topic_id="u"), 1)


def test_deleting_a_topic_removes_its_configs_and_frees_its_name() -> None:
    d = MetadataDelta(MetadataImage.EMPTY)
    d.replay(TopicRecord(name="t", topic_id="a"), 1)
    d.replay(
        ConfigRecord(
            resource_type=ConfigResourceType.TOPIC,
            resource_name="t",
            name="retention.ms",
            value="1",
        ),
        2,
    )
    image = d.apply()
    d = MetadataDelta(image)
    d.replay(RemoveTopicRecord(topic_id="a"), 3)
    d.replay(TopicRecord(name="t", topic_id="b"), 4)
    image2 = d.apply()
    assert image2.topics.by_name.to_dict() == {"t": "b"}
    assert image2.configs.topic_config("t", "retention.ms") == "604800000"
    assert image.configs.topic_config("t", "retention.ms") == "1"


def test_snapshot_round_trip_and_corruption() -> None:
    image = big_image(topics=5, partitions=4)
    data = encode_snapshot(image)
    assert decode_snapshot(data) == image
    assert encode_snapshot(decode_snapshot(data)) == data
    with pytest.raises(CorruptMetadataRecordError):
        decode_snapshot(data[: len(data) // 2])
    with pytest.raises(CorruptMetadataRecordError):
        decode_snapshot(b"\x93\x01\x02\x03")
