"""Metadata record codec: every record round-trips; garbage and unknown types/versions are
refused with a MetadataRecordError, never accepted silently or crashing otherwise; and the
encoder refuses exactly the records the decoder would refuse or read back different, so no
record that a node cannot replay is ever committed."""

from __future__ import annotations

import dataclasses
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metalog.records import (
    RECORD_TYPES,
    AccessControlEntryRecord,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    ConfigResourceType,
    CorruptMetadataRecordError,
    Endpoint,
    FeatureLevelRecord,
    FenceBrokerRecord,
    InvalidMetadataRecordError,
    LeaderRecoveryState,
    MetadataRecord,
    MetadataRecordError,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RecordVersionError,
    RegisterBrokerRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    RetiredTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnknownRecordTypeError,
    UnregisterBrokerRecord,
    UnsupportedRecordVersionError,
    UserScramCredentialRecord,
    decode_record,
    decode_records,
    encode_record,
    encode_records,
    wire_fields,
)
from metalog.security import Operation, PatternType, Permission, ResourceType

ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)
small = st.integers(min_value=-2, max_value=10_000)
text = st.text(max_size=20)
id_tuple = st.lists(small, max_size=5).map(tuple)
opt_ids = st.none() | id_tuple
endpoints = st.lists(
    st.builds(Endpoint, text, text, st.integers(min_value=0, max_value=65535)), max_size=3
).map(tuple)

records = st.one_of(
    st.builds(
        RegisterBrokerRecord,
        broker_id=small,
        incarnation_id=text,
        broker_epoch=ints,
        endpoints=endpoints,
        rack=st.none() | text,
        fenced=st.booleans(),
        in_controlled_shutdown=st.booleans(),
    ),
    st.builds(UnregisterBrokerRecord, broker_id=small, broker_epoch=ints),
    st.builds(TopicRecord, name=text, topic_id=text),
    st.builds(
        PartitionRecord,
        topic_id=text,
        partition=small,
        replicas=id_tuple,
        isr=id_tuple,
        leader=small,
        leader_epoch=ints,
        partition_epoch=ints,
        leader_recovery_state=st.sampled_from([0, 1]),
        eligible_leader_replicas=opt_ids,
        last_known_elr=opt_ids,
    ),
    st.builds(
        ConfigRecord,
        resource_type=st.sampled_from([2, 4, 16]),
        resource_name=text,
        name=text,
        value=st.none() | text,
    ),
    st.builds(
        PartitionChangeRecord,
        topic_id=text,
        partition=small,
        isr=opt_ids,
        leader=small,
        replicas=opt_ids,
        leader_recovery_state=st.none() | st.sampled_from([0, 1]),
        eligible_leader_replicas=opt_ids,
        last_known_elr=opt_ids,
    ),
    st.builds(FenceBrokerRecord, broker_id=small, broker_epoch=ints),
    st.builds(UnfenceBrokerRecord, broker_id=small, broker_epoch=ints),
    st.builds(RemoveTopicRecord, topic_id=text),
    st.builds(FeatureLevelRecord, name=text, feature_level=small),
    st.builds(ProducerIdsRecord, broker_id=small, broker_epoch=ints, next_producer_id=ints),
    st.builds(
        BrokerRegistrationChangeRecord,
        broker_id=small,
        broker_epoch=ints,
        fenced=st.none() | st.booleans(),
        in_controlled_shutdown=st.none() | st.booleans(),
    ),
    st.just(NoOpRecord()),
    st.builds(RetiredTopicRecord, topic_id=text, deleted_at=ints),
    st.builds(
        UserScramCredentialRecord,
        name=text,
        mechanism=text,
        salt=st.binary(max_size=32),
        stored_key=st.binary(max_size=64),
        server_key=st.binary(max_size=64),
        iterations=ints,
    ),
    st.builds(RemoveUserScramCredentialRecord, name=text, mechanism=text),
    st.builds(
        AccessControlEntryRecord,
        id=text,
        # A member, or its name as a plain str: both encode the same and decode to the member.
        resource_type=st.sampled_from([*ResourceType, *(str(t) for t in ResourceType)]),
        resource_name=text,
        pattern_type=st.sampled_from(PatternType),
        principal=text,
        host=text,
        operation=st.sampled_from(Operation),
        permission=st.sampled_from(Permission),
    ),
    st.builds(RemoveAccessControlEntryRecord, id=text),
)


@given(records)
def test_every_record_round_trips(rec: object) -> None:
    assert decode_record(encode_record(rec)) == rec  # type: ignore[arg-type]


@given(st.lists(records, max_size=20))
def test_record_lists_round_trip(recs: list[object]) -> None:
    assert decode_records(encode_records(recs)) == recs  # type: ignore[arg-type]


@settings(max_examples=300)
@given(records, st.data())
def test_any_corruption_decodes_or_raises_metadata_record_error(
    rec: object, data: st.DataObject
) -> None:
    raw = bytearray(encode_record(rec))  # type: ignore[arg-type]
    i = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
    raw[i] ^= data.draw(st.integers(min_value=1, max_value=255))
    cut = data.draw(st.integers(min_value=0, max_value=len(raw)))
    for blob in (bytes(raw), bytes(raw[:cut])):
        try:
            out = decode_record(blob)
        except MetadataRecordError:
            continue
        # Whatever decodes is a well-typed record of a known type, and encodes back.
        assert type(out) in RECORD_TYPES
        assert decode_record(encode_record(out)) == out


def test_unknown_type_id_is_refused() -> None:
    with pytest.raises(UnknownRecordTypeError):
        decode_record(msgpack.packb([99, 0]))


def test_unknown_version_is_refused() -> None:
    with pytest.raises(UnsupportedRecordVersionError, match="TopicRecord version 7"):
        decode_record(msgpack.packb([2, 7, "t", "id"]))


def test_bool_where_int_belongs_is_corrupt() -> None:
    with pytest.raises(CorruptMetadataRecordError):
        decode_record(msgpack.packb([7, 0, True, 5]))


@pytest.mark.parametrize(
    "items",
    [
        [2, 0, b"t", "id"],  # bytes where a str belongs
        [2, 0, 5, "id"],  # int where a str belongs
        [7, 0, 1.0, 5],  # float where an int belongs
        [7, 0, 2**64 - 1, None],  # None where an int belongs
        [17, 0, 1, 5, 1, None],  # int where a bool belongs
        [3, 1, "t", 0, [1, True], [1], 1, 0, 0, 0, None],  # bool in an array of int
        [3, 1, "t", 0, [1], 1, 1, 0, 0, 0, None],  # int where an array belongs
        [0, 0, 1, "i", -1, [["http", "h"]], None, True, False],  # endpoint of 2 fields
        [0, 0, 1, "i", -1, [["http", "h", "80"]], None, True, False],  # port not an int
        [0, 0, 1, "i", -1, ["http"], None, True, False],  # endpoint not an array
    ],
)
def test_a_wire_value_of_the_wrong_type_is_corrupt(items: list[object]) -> None:
    with pytest.raises(CorruptMetadataRecordError, match="expected"):
        decode_record(msgpack.packb(items, use_bin_type=True))


def test_wrong_arity_is_corrupt() -> None:
    with pytest.raises(CorruptMetadataRecordError, match="fields"):
        decode_record(msgpack.packb([2, 0, "t"]))


def test_old_version_decodes_with_defaults() -> None:
    v0 = msgpack.packb([3, 0, "tid", 0, [1, 2], [1], 1, 0, 0, 0])
    rec = decode_record(v0)
    assert isinstance(rec, PartitionRecord)
    assert rec.version == 0 and rec.eligible_leader_replicas is None
    v1 = msgpack.packb([5, 1, "tid", 0, None, -2, None, None, [2]])
    change = decode_record(v1)
    assert isinstance(change, PartitionChangeRecord)
    assert change.eligible_leader_replicas == (2,) and change.last_known_elr is None


def test_encoding_at_a_version_that_would_lose_a_field_is_refused() -> None:
    rec = PartitionRecord(
        topic_id="t",
        partition=0,
        replicas=(1,),
        isr=(1,),
        leader=1,
        eligible_leader_replicas=(1,),
        version=0,
    )
    with pytest.raises(RecordVersionError):
        encode_record(rec)
    with pytest.raises(RecordVersionError):
        encode_record(
            PartitionChangeRecord(topic_id="t", partition=0, last_known_elr=(1,), version=1)
        )


def test_type_ids_are_stable() -> None:
    # These numbers are on disk forever; they follow Kafka's metadata record ids.
    assert {t.__name__: t.TYPE_ID for t in RECORD_TYPES} == {
        "RegisterBrokerRecord": 0,
        "UnregisterBrokerRecord": 1,
        "TopicRecord": 2,
        "PartitionRecord": 3,
        "ConfigRecord": 4,
        "PartitionChangeRecord": 5,
        "FenceBrokerRecord": 7,
        "UnfenceBrokerRecord": 8,
        "RemoveTopicRecord": 9,
        "FeatureLevelRecord": 12,
        "ProducerIdsRecord": 15,
        "BrokerRegistrationChangeRecord": 17,
        "NoOpRecord": 20,
        "RetiredTopicRecord": 21,
        "UserScramCredentialRecord": 11,
        "RemoveUserScramCredentialRecord": 22,
        "AccessControlEntryRecord": 23,
        "RemoveAccessControlEntryRecord": 24,
    }


# --------------------------------------------------------------------------- encoder = decoder

junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**65), max_value=2**65),
    st.sampled_from([2**63 - 1, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1]),  # msgpack's edges
    st.floats(allow_nan=False),
    text,
    st.sampled_from(["\ud800", "a\udfff"]),  # not UTF-8: msgpack cannot carry them
    st.binary(max_size=4),
    st.sampled_from([*LeaderRecoveryState, *ConfigResourceType]),
    st.sampled_from([*ResourceType, *PatternType, *Operation, *Permission, "TOPIC", "READ"]),
    st.sampled_from([bytearray(b"ab"), b""]),  # a bytearray where bytes belong
    st.lists(small, max_size=3),  # a list where a tuple belongs
    id_tuple,
    st.tuples(st.booleans()),
    st.tuples(small, st.booleans()),
    st.tuples(st.floats(allow_nan=False)),
    endpoints,
    st.tuples(st.tuples(text, text, small)),  # endpoints as plain tuples
    st.tuples(st.tuples(text, text, st.booleans())),
    st.tuples(st.tuples(text, small)),
)
"""Values of every shape, a few of them right for any given field."""


def _newest(cls: type[MetadataRecord]) -> int:
    return next(f.default for f in dataclasses.fields(cls) if f.name == "version")  # type: ignore[no-any-return]


def _with_junk(rec: MetadataRecord, data: st.DataObject) -> MetadataRecord:
    """``rec`` at a drawn version, with up to two fields (or the version) replaced by junk."""
    cls = type(rec)
    changes: dict[str, Any] = {"version": data.draw(st.integers(0, _newest(cls)))}
    names = [f.name for f in dataclasses.fields(rec)]
    for _ in range(data.draw(st.integers(0, 2))):
        changes[data.draw(st.sampled_from(names))] = data.draw(junk)
    return dataclasses.replace(rec, **changes)


def _plain_bytes(rec: MetadataRecord) -> bytes | None:
    """The record laid out as the wire format says, by msgpack alone (None: it cannot pack)."""
    version = rec.version
    try:
        names = wire_fields(type(rec), version)
        return msgpack.packb(  # type: ignore[no-any-return]
            [rec.TYPE_ID, version, *(getattr(rec, n) for n in names)], use_bin_type=True
        )
    except (IndexError, TypeError, OverflowError, ValueError):
        return None


@settings(max_examples=500)
@given(records, st.data())
def test_the_encoder_refuses_exactly_the_records_the_decoder_would_not_give_back(
    rec: MetadataRecord, data: st.DataObject
) -> None:
    rec = _with_junk(rec, data)
    plain = _plain_bytes(rec)
    try:
        gives_back = plain is not None and decode_record(plain) == rec
    except MetadataRecordError:
        gives_back = False
    try:
        encoded = encode_record(rec)
    except MetadataRecordError:
        assert not gives_back, f"the encoder refused {rec!r}, which the decoder reads back"
    else:
        assert gives_back, f"the encoder took {rec!r}, which the decoder would not give back"
        assert encoded == plain


@settings(max_examples=500)
@given(records, st.data())
def test_whatever_the_decoder_accepts_encodes_and_round_trips(
    rec: MetadataRecord, data: st.DataObject
) -> None:
    plain = _plain_bytes(_with_junk(rec, data))
    if plain is None:
        return
    try:
        out = decode_record(plain)
    except MetadataRecordError:
        return
    assert decode_record(encode_record(out)) == out


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (
            RegisterBrokerRecord(broker_id=1, incarnation_id=12345),  # type: ignore[arg-type]
            "RegisterBrokerRecord.incarnation_id: expected str, got 12345",
        ),
        (
            PartitionRecord(topic_id="t", partition=0, replicas=[1, 2], isr=(1,), leader=1),  # type: ignore[arg-type]
            "PartitionRecord.replicas: expected array of int, got [1, 2]",
        ),
        (
            PartitionRecord(topic_id="t", partition=0, replicas=(1, True), isr=(1,), leader=1),  # type: ignore[arg-type]
            "PartitionRecord.replicas: expected array of int, got (1, True)",
        ),
        (
            FenceBrokerRecord(broker_id=1, broker_epoch=True),  # type: ignore[arg-type]
            "FenceBrokerRecord.broker_epoch: expected int, got True",
        ),
        (
            FenceBrokerRecord(broker_id=1, broker_epoch=2**64),  # type: ignore[arg-type]
            "FenceBrokerRecord.broker_epoch: Integer value out of range",
        ),
        (
            TopicRecord(name="a\ud800", topic_id="t"),  # type: ignore[arg-type]
            "TopicRecord.name: 'utf-8' codec can't encode",
        ),
        (
            RegisterBrokerRecord(
                broker_id=1,
                incarnation_id="i",  # type: ignore[arg-type]
                endpoints=(("http", "h", "80"),),
            ),  # type: ignore[arg-type]
            "RegisterBrokerRecord.endpoints: expected int, got '80'",
        ),
    ],
)
def test_an_ill_typed_field_is_refused_by_the_encoder_naming_it(
    record: MetadataRecord, message: str
) -> None:
    with pytest.raises(InvalidMetadataRecordError) as e:
        encode_record(record)
    assert str(e.value).startswith(message), str(e.value)


def test_an_int_enum_encodes_as_its_int() -> None:
    as_enum = ConfigRecord(
        resource_type=ConfigResourceType.TOPIC, resource_name="t", name="k", value=None
    )
    as_int = dataclasses.replace(as_enum, resource_type=2)
    assert encode_record(as_enum) == encode_record(as_int)
    assert decode_record(encode_record(as_enum)) == as_enum
