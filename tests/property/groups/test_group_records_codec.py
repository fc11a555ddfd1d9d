"""The __consumer_offsets codec: every record round-trips; garbage is CorruptRecordError only."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.groups.records import (
    GroupMetadataRecord,
    GroupTombstoneRecord,
    MemberMetadata,
    OffsetCommitRecord,
    OffsetTombstoneRecord,
    decode_record,
    encode_record,
)
from broker.groups.types import RebalanceProtocol, TopicPartition
from storage.errors import CorruptRecordError

FAST = settings(max_examples=200)
names = st.text(max_size=12)
ints = st.integers(-(2**63), 2**63 - 1)
partitions = st.builds(TopicPartition, names, st.integers(0, 2**31 - 1))
members = st.builds(
    MemberMetadata,
    names,
    names,
    st.sampled_from(list(RebalanceProtocol)),
    st.frozensets(names, max_size=3),
    st.frozensets(partitions, max_size=5),
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**31 - 1),
)
records = st.one_of(
    st.builds(OffsetCommitRecord, names, names, st.integers(0, 2**31 - 1), ints, names, ints),
    st.builds(OffsetTombstoneRecord, names, names, st.integers(0, 2**31 - 1)),
    st.builds(
        GroupMetadataRecord,
        names,
        st.integers(0, 2**31 - 1),
        st.none() | st.sampled_from(list(RebalanceProtocol)),
        st.none() | names,
        st.none() | names,
        ints,
        st.lists(members, max_size=4).map(tuple),
    ),
    st.builds(GroupTombstoneRecord, names),
)


@FAST
@given(records)
def test_every_record_round_trips(record) -> None:
    key, value = encode_record(record)
    assert decode_record(key, value) == record


@FAST
@given(records, st.data())
def test_a_flipped_byte_decodes_to_some_record_or_raises_corrupt_record_error(record, data) -> None:
    key, value = encode_record(record)
    target = data.draw(st.sampled_from(["key", "value"] if value else ["key"]))
    raw = bytearray(key if target == "key" else value)  # type: ignore[arg-type]
    i = data.draw(st.integers(0, len(raw) - 1))
    raw[i] ^= data.draw(st.integers(1, 255))
    try:
        if target == "key":
            decode_record(bytes(raw), value)
        else:
            decode_record(key, bytes(raw))
    except CorruptRecordError:
        pass


@FAST
@given(st.binary(max_size=40), st.none() | st.binary(max_size=60))
def test_random_bytes_never_raise_anything_but_corrupt_record_error(key, value) -> None:
    try:
        decode_record(key, value)
    except CorruptRecordError:
        pass
