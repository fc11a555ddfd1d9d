"""Kafka's record batch v2 (magic 2) beside Longboat's msgpack batches.

The reference encoder is kafka-python's ``DefaultRecordBatchBuilder`` (its producer's own
batch writer, with every codec Kafka uses): what it builds must verify and decode to the
records it was given, through the same ``decode_records``/``decode_body`` every read path
uses. The other direction (``as_kafka_batch``, compaction's ``rebuild_batch``) is checked
with kafka-python's reader, so neither side is judged only by our own code.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.batch import (
    MAGIC_KAFKA,
    MAGIC_MSGPACK,
    Record,
    as_kafka_batch,
    decode_records,
    encode_batch,
    iter_batches,
    rebuild_batch,
    verify_batch,
)
from storage.compression import Compression, decompress
from storage.errors import CorruptRecordError

kafka_record = pytest.importorskip("kafka.record.default_records")
pytest.importorskip("snappy")  # kafka-python's snappy codec

keys = st.one_of(st.none(), st.binary(max_size=40))
values = st.one_of(st.none(), st.binary(max_size=300))
names = st.text(st.characters(exclude_categories=("Cs",)), max_size=8)
headers = st.lists(st.tuples(names, st.one_of(st.none(), st.binary(max_size=8))), max_size=3)
records = st.lists(st.tuples(keys, values, st.integers(0, 2**41), headers), min_size=1, max_size=30)
codecs = st.sampled_from(list(Compression))


def reference_batch(
    recs: list, codec: Compression, *, pid: int = -1, pepoch: int = -1, seq: int = -1
) -> bytes:
    b = kafka_record.DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=False,
        producer_id=pid,
        producer_epoch=pepoch,
        base_sequence=seq,
        batch_size=1 << 30,
    )
    for i, (k, v, ts, hs) in enumerate(recs):
        assert b.append(i, timestamp=ts, key=k, value=v, headers=list(hs)) is not None
    return bytes(b.build())


def read_with_reference(batch: bytes) -> list[tuple]:
    rb = kafka_record.DefaultRecordBatch(bytearray(batch))
    assert rb.validate_crc()
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in rb]


@settings(max_examples=150, deadline=None)
@given(records, codecs, st.integers(-1, 2**40), st.integers(0, 2**31 - 1))
def test_a_kafka_clients_batch_decodes_to_its_records(recs, codec, pid, seq) -> None:
    raw = reference_batch(
        recs, codec, pid=pid, pepoch=0 if pid >= 0 else -1, seq=seq if pid >= 0 else -1
    )
    h = verify_batch(raw)
    assert (h.magic, h.record_count, h.producer_id) == (MAGIC_KAFKA, len(recs), pid)
    # kafka-python sends a batch uncompressed when compressing would grow it.
    assert h.compression in (codec, Compression.NONE)
    out = decode_records(raw)
    assert [(r.offset, r.key, r.value, r.timestamp, list(r.headers)) for r in out] == [
        (i, k, v, ts, [tuple(x) for x in hs]) for i, (k, v, ts, hs) in enumerate(recs)
    ]


@settings(max_examples=100, deadline=None)
@given(records, codecs, st.integers(0, 2**40), st.integers(-1, 2**20))
def test_a_msgpack_batch_served_to_kafka_reads_the_same(recs, codec, base, epoch) -> None:
    ours = encode_batch(recs, base_offset=base, leader_epoch=epoch, compression=codec)
    kb = as_kafka_batch(ours)
    h = verify_batch(kb)
    assert (h.magic, h.base_offset, h.leader_epoch, h.compression) == (
        MAGIC_KAFKA,
        base,
        epoch,
        codec,
    )
    assert read_with_reference(kb) == [
        (base + i, ts, k, v, list(hs)) for i, (k, v, ts, hs) in enumerate(recs)
    ]
    assert decode_records(kb) == decode_records(ours)


@settings(max_examples=50, deadline=None)
@given(records, codecs, st.data())
def test_compaction_keeps_a_kafka_batch_a_kafka_batch(recs, codec, data) -> None:
    raw = reference_batch(recs, codec)
    kept = [r for r in decode_records(raw) if data.draw(st.booleans())]
    rebuilt = rebuild_batch(verify_batch(raw), kept)
    h = verify_batch(rebuilt)
    assert h.magic == MAGIC_KAFKA and h.last_offset_delta == len(recs) - 1
    assert decode_records(rebuilt) == kept
    if kept:
        assert [r[0] for r in read_with_reference(rebuilt)] == [r.offset for r in kept]


def test_both_encodings_walk_in_one_buffer() -> None:
    a = encode_batch([(b"k", b"v", 5, ())], base_offset=0)
    b = bytearray(reference_batch([(None, b"w", 6, [("h", b"x")])], Compression.GZIP))
    b[:8] = (1).to_bytes(8, "big")
    got = [(h.magic, h.base_offset) for _, h in iter_batches(a + bytes(b))]
    assert got == [(MAGIC_MSGPACK, 0), (MAGIC_KAFKA, 1)]
    assert decode_records(bytes(b)) == [Record(1, 6, None, b"w", (("h", b"x"),))]


def test_encode_batch_writes_kafka_records_when_asked() -> None:
    b = encode_batch(
        [(b"k", None, 7, [("a", None)])], magic=MAGIC_KAFKA, compression=Compression.SNAPPY
    )
    assert read_with_reference(b) == [(0, 7, b"k", None, [("a", None)])]


def test_snappy_reads_both_the_xerial_frame_and_a_raw_block() -> None:
    import cramjam
    from kafka.codec import snappy_encode

    payload = b"abc" * 50_000  # more than one 32 KiB xerial block
    assert decompress(Compression.SNAPPY, snappy_encode(payload), kafka=True) == payload
    raw = bytes(cramjam.snappy.compress_raw(payload))
    assert decompress(Compression.SNAPPY, raw, kafka=True) == payload


def test_zstd_frames_without_a_content_size_decode() -> None:
    import zstandard

    payload = b"xyz" * 1000
    c = zstandard.ZstdCompressor(write_content_size=False)
    assert decompress(Compression.ZSTD, c.compress(payload), kafka=True) == payload


def test_a_record_whose_length_lies_is_corrupt() -> None:
    raw = bytearray(reference_batch([(b"k", b"v", 1, [])], Compression.NONE))
    raw[61] = 0x7E  # record length varint: 63, past the body
    with pytest.raises(CorruptRecordError):
        decode_records(bytes(raw), verify=False)
