"""Example tests of the batch codec; the property tests live in tests/property/storage."""

from __future__ import annotations

import pytest

from storage.batch import (
    HEADER_SIZE,
    decode_records,
    encode_batch,
    iter_batches,
    parse_header,
    stamp,
    verify_batch,
)
from storage.compression import Compression
from storage.errors import CorruptRecordError


def test_header_is_61_bytes_like_kafka_record_batch_v2() -> None:
    assert HEADER_SIZE == 61


@pytest.mark.parametrize("codec", list(Compression))
def test_round_trip_with_every_codec(codec: Compression) -> None:
    recs = [(b"k%d" % i, b"v" * i, 1000 + i, [("h", b"x"), ("n", None)]) for i in range(50)]
    b = encode_batch(recs, compression=codec, producer_id=7, producer_epoch=1, base_sequence=3)
    h = verify_batch(b)
    assert h.compression == codec
    assert (h.record_count, h.last_offset_delta, h.first_timestamp, h.max_timestamp) == (
        50,
        49,
        1000,
        1049,
    )
    out = decode_records(b)
    assert [(r.key, r.value, r.timestamp, list(r.headers)) for r in out] == [
        (k, v, t, hs) for k, v, t, hs in recs
    ]
    assert [r.offset for r in out] == list(range(50))


def test_stamping_base_offset_and_epoch_keeps_the_crc_valid() -> None:
    b = bytearray(encode_batch([(None, b"v", 5, [])]))
    stamp(b, 1234, 9)
    h = verify_batch(b)
    assert (h.base_offset, h.leader_epoch) == (1234, 9)
    assert decode_records(b)[0].offset == 1234


def test_flipped_body_byte_is_a_crc_mismatch() -> None:
    b = bytearray(encode_batch([(b"k", b"value", 5, [])]))
    b[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="crc mismatch"):
        verify_batch(b)


def test_iter_batches_stops_at_a_torn_tail_and_locates_corruption() -> None:
    one = encode_batch([(b"a", b"b", 1, [])])
    buf = one + one + one[:-3]
    assert [p for p, _ in iter_batches(buf)] == [0, len(one)]
    bad = bytearray(one + one)
    bad[len(one) + HEADER_SIZE] ^= 1
    with pytest.raises(CorruptRecordError) as ei:
        list(iter_batches(bad))
    assert ei.value.position == len(one)


def test_unknown_magic_is_corrupt() -> None:
    b = bytearray(encode_batch([(b"a", b"b", 1, [])]))
    b[16] = 1  # Kafka's message set v1: not read (2, Kafka's batch v2, is)
    with pytest.raises(CorruptRecordError, match="magic"):
        parse_header(b)
