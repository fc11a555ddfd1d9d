"""Metadata record codec: every record round-trips; garbage and unknown types/versions are
refused with a MetadataRecordError, never accepted silently or crashing otherwise."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metalog.records import (
    RECORD_TYPES,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    CorruptMetadataRecordError,
    Endpoint,
    FeatureLevelRecord,
    FenceBrokerRecord,
    MetadataRecordError,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RecordVersionError,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    RetiredTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnknownRecordTypeError,
    UnregisterBrokerRecord,
    UnsupportedRecordVersionError,
    decode_record,
    decode_records,
    encode_record,
    encode_records,
)

ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)
small = st.integers(min_value=-2, max_value=10_000)
text = st.text(max_size=20)
id_tuple = st.lists(small, max_size=5).map(tuple)
opt_ids = st.none() | id_tuple
endpoints = st.lists(
    st.builds(Endpoint, text, text, st.integers(min_value=0, max_value=65535)), max_size=3
).map(tuple)

records = st.one_of(
    st.builds(RegisterBrokerRecord, broker_id=small, incarnation_id=text, broker_epoch=ints,
              endpoints=endpoints, rack=st.none() | text, fenced=st.booleans(),
              in_controlled_shutdown=st.booleans()),
    st.builds(UnregisterBrokerRecord, broker_id=small, broker_epoch=ints),
    st.builds(TopicRecord, name=text, topic_id=text),
    st.builds(PartitionRecord, topic_id=text, partition=small, replicas=id_tuple, isr=id_tuple,
              leader=small, leader_epoch=ints, partition_epoch=ints,
              leader_recovery_state=st.sampled_from([0, 1]), eligible_leader_replicas=opt_ids),
    st.builds(ConfigRecord, resource_type=st.sampled_from([2, 4, 16]), resource_name=text,
              name=text, value=st.none() | text),
    st.builds(PartitionChangeRecord, topic_id=text, partition=small, isr=opt_ids, leader=small,
              replicas=opt_ids, leader_recovery_state=st.none() | st.sampled_from([0, 1]),
              eligible_leader_replicas=opt_ids),
    st.builds(FenceBrokerRecord, broker_id=small, broker_epoch=ints),
    st.builds(UnfenceBrokerRecord, broker_id=small, broker_epoch=ints),
    st.builds(RemoveTopicRecord, topic_id=text),
    st.builds(FeatureLevelRecord, name=text, feature_level=small),
    st.builds(ProducerIdsRecord, broker_id=small, broker_epoch=ints, next_producer_id=ints),
    st.builds(BrokerRegistrationChangeRecord, broker_id=small, broker_epoch=ints,
              fenced=st.none() | st.booleans(), in_controlled_shutdown=st.none() | st.booleans()),
    st.just(NoOpRecord()),
    st.builds(RetiredTopicRecord, topic_id=text, deleted_at=ints),
)


@given(records)
def test_every_record_round_trips(rec: object) -> None:
    assert decode_record(encode_record(rec)) == rec  # type: ignore[arg-type]


@given(st.lists(records, max_size=20))
def test_record_lists_round_trip(recs: list[object]) -> None:
    assert decode_records(encode_records(recs)) == recs  # type: ignore[arg-type]


@settings(max_examples=300)
@given(records, st.data())
def test_any_corruption_decodes_or_raises_metadata_record_error(rec: object, data: st.DataObject) -> None:
    raw = bytearray(encode_record(rec))  # type: ignore[arg-type]
    i = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
    raw[i] ^= data.draw(st.integers(min_value=1, max_value=255))
    cut = data.draw(st.integers(min_value=0, max_value=len(raw)))
    for blob in (bytes(raw), bytes(raw[:cut])):
        try:
            out = decode_record(blob)
        except MetadataRecordError:
            continue
        # Whatever decodes is a well-typed record of a known type.
        assert type(out) in RECORD_TYPES


def test_unknown_type_id_is_refused() -> None:
    with pytest.raises(UnknownRecordTypeError):
        decode_record(msgpack.packb([99, 0]))


def test_unknown_version_is_refused() -> None:
    with pytest.raises(UnsupportedRecordVersionError, match="TopicRecord version 7"):
        decode_record(msgpack.packb([2, 7, "t", "id"]))


def test_bool_where_int_belongs_is_corrupt() -> None:
    with pytest.raises(CorruptMetadataRecordError):
        decode_record(msgpack.packb([7, 0, True, 5]))


def test_wrong_arity_is_corrupt() -> None:
    with pytest.raises(CorruptMetadataRecordError, match="fields"):
        decode_record(msgpack.packb([2, 0, "t"]))


def test_old_version_decodes_with_defaults() -> None:
    v0 = msgpack.packb([3, 0, "tid", 0, [1, 2], [1], 1, 0, 0, 0])
    rec = decode_record(v0)
    assert isinstance(rec, PartitionRecord)
    assert rec.version == 0 and rec.eligible_leader_replicas is None


def test_encoding_at_a_version_that_would_lose_a_field_is_refused() -> None:
    rec = PartitionRecord(topic_id="t", partition=0, replicas=(1,), isr=(1,), leader=1,
                          eligible_leader_replicas=(1,), version=0)
    with pytest.raises(RecordVersionError):
        encode_record(rec)


def test_type_ids_are_stable() -> None:
    # These numbers are on disk forever; they follow Kafka's metadata record ids.
    assert {t.__name__: t.TYPE_ID for t in RECORD_TYPES} == {
        "RegisterBrokerRecord": 0, "UnregisterBrokerRecord": 1, "TopicRecord": 2,
        "PartitionRecord": 3, "ConfigRecord": 4, "PartitionChangeRecord": 5,
        "FenceBrokerRecord": 7, "UnfenceBrokerRecord": 8, "RemoveTopicRecord": 9,
        "FeatureLevelRecord": 12, "ProducerIdsRecord": 15,
        "BrokerRegistrationChangeRecord": 17, "NoOpRecord": 20, "RetiredTopicRecord": 21,
    }
