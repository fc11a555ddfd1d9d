"""The __consumer_offsets records: keys for compaction, values, tombstones, corruption."""

from __future__ import annotations

import msgpack
import pytest
from groups_harness import tps

from broker.groups.records import (
    GroupMetadataRecord,
    GroupTombstoneRecord,
    MemberMetadata,
    OffsetCommitRecord,
    OffsetTombstoneRecord,
    decode_record,
    encode_record,
)
from broker.groups.types import RebalanceProtocol
from storage.errors import CorruptRecordError

META = GroupMetadataRecord(
    group="g",
    generation=7,
    protocol=RebalanceProtocol.COOPERATIVE,
    assignor="cooperative-sticky",
    leader="a",
    state_ts_ms=123,
    members=(
        MemberMetadata(
            "a",
            "client-a",
            RebalanceProtocol.COOPERATIVE,
            frozenset({"t"}),
            tps("t-0"),
            45_000,
            300_000,
        ),
    ),
)

RECORDS = [
    OffsetCommitRecord("g", "t", 3, 42, "meta", 99),
    OffsetTombstoneRecord("g", "t", 3),
    META,
    GroupMetadataRecord("g", 8, None, "range", None, 5, ()),
    GroupTombstoneRecord("g"),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_round_trip(record) -> None:
    key, value = encode_record(record)
    assert decode_record(key, value) == record


def test_a_tombstone_shares_its_key_with_the_record_it_deletes() -> None:
    assert encode_record(RECORDS[0])[0] == encode_record(RECORDS[1])[0]
    assert encode_record(RECORDS[1])[1] is None
    assert encode_record(META)[0] == encode_record(GroupTombstoneRecord("g"))[0]
    assert encode_record(GroupTombstoneRecord("g"))[1] is None


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (b"\xc1", None),  # not msgpack
        (msgpack.packb(["what", "g"]), None),
        (msgpack.packb([]), None),
        (msgpack.packb(["offset", "g", "t", "x"]), None),
        (msgpack.packb(["offset", "g", "t", 0]), msgpack.packb([9, 1, "", 0])),  # version
        (msgpack.packb(["offset", "g", "t", 0]), msgpack.packb([0, "one", "", 0])),
        (msgpack.packb(["group", "g"]), msgpack.packb([0, 1])),
        (msgpack.packb(["group", "g"]), msgpack.packb([0, 1, "sideways", None, None, 0, []])),
        (msgpack.packb(["group", "g"]), msgpack.packb([0, 1, None, None, None, 0, [["a"]]])),
    ],
)
def test_malformed_records_raise_corrupt_record_error(key: bytes, value: bytes | None) -> None:
    with pytest.raises(CorruptRecordError):
        decode_record(key, value)
