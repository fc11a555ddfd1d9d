"""api.client.arrow: raw batches -> Arrow rows with Spark's Kafka schema, checked against decode_records.

The reference for every row is ``storage.batch.decode_records``; the logs drawn here have
several batches, every codec, and batches that compaction thinned (``rebuild_batch``), so
offsets have gaps inside and between batches.
"""

from __future__ import annotations

import datetime as dt

import msgpack
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.client.arrow import (
    ARROW_STREAM,
    HIGH_WATERMARK_HEADER,
    NEXT_OFFSET_HEADER,
    arrow_response_headers,
    kafka_schema,
    records_to_arrow,
    records_to_arrow_ipc,
)
from storage.batch import (
    HEADER,
    HEADER_SIZE,
    MAGIC_KAFKA,
    MAGIC_MSGPACK,
    Record,
    _assemble,
    decode_records,
    encode_batch,
    iter_batches,
    parse_header,
    rebuild_batch,
    stamp,
)
from storage.compression import Compression
from storage.errors import CorruptRecordError

keys = st.one_of(st.none(), st.binary(max_size=12))
values = st.one_of(st.none(), st.binary(max_size=64))
# No lone surrogates: a Kafka batch's header names are UTF-8 on the wire.
headers = st.lists(
    st.tuples(
        st.text(st.characters(exclude_categories=("Cs",)), max_size=6),
        st.one_of(st.none(), st.binary(max_size=6)),
    ),
    max_size=3,
)
records = st.lists(st.tuples(keys, values, st.integers(0, 2**42), headers), min_size=1, max_size=12)


@st.composite
def logs(draw: st.DrawFn) -> bytes:
    """Whole batches back to back with increasing offsets, some thinned by compaction, some
    in Kafka's record encoding (magic 2, as a Kafka client's produce stores them)."""
    out = bytearray()
    offset = draw(st.integers(0, 1000))
    for _ in range(draw(st.integers(0, 5))):
        recs = draw(records)
        codec = draw(st.sampled_from(list(Compression)))
        magic = draw(st.sampled_from([MAGIC_MSGPACK, MAGIC_KAFKA]))
        b = bytearray(encode_batch(recs, compression=codec, magic=magic))
        stamp(b, offset, 0)
        if draw(st.booleans()):
            kept = [r for r in decode_records(b) if draw(st.booleans())]
            b = bytearray(rebuild_batch(parse_header(b), kept))
        out += b
        offset += len(recs) + draw(st.integers(0, 3))
    return bytes(out)


def _expected(log: bytes, lo: int, hi: int | None) -> list[Record]:
    mv = memoryview(log)
    return [
        r
        for pos, h in iter_batches(mv)
        for r in decode_records(mv[pos : pos + h.size])
        if r.offset >= lo and (hi is None or r.offset < hi)
    ]


def _rows(batch: pa.RecordBatch) -> list[tuple[object, ...]]:
    d = batch.to_pydict()
    micros = batch.column("timestamp").cast(pa.int64()).to_pylist()
    assert all(us % 1000 == 0 for us in micros)
    return list(
        zip(
            d["offset"],
            d["key"],
            d["value"],
            [us // 1000 for us in micros],
            d.get("headers", [None] * batch.num_rows),
            strict=True,
        )
    )


@settings(max_examples=150)
@given(logs(), st.integers(0, 1100), st.one_of(st.none(), st.integers(0, 1200)), st.booleans())
def test_rows_equal_decode_records_between_the_cuts(log, lo, span, with_headers) -> None:
    hi = None if span is None else lo + span
    got = records_to_arrow(
        log, topic="t", partition=7, include_headers=with_headers, min_offset=lo, max_offset=hi
    )
    want = _expected(log, lo, hi)
    assert got.batch.schema.equals(kafka_schema(with_headers))
    assert _rows(got.batch) == [
        (
            r.offset,
            r.key,
            r.value,
            r.timestamp,
            [{"key": n, "value": v} for n, v in r.headers] if with_headers else None,
        )
        for r in want
    ]
    assert set(got.batch.column("topic").to_pylist()) <= {"t"}
    assert set(got.batch.column("partition").to_pylist()) <= {7}
    assert set(got.batch.column("timestampType").to_pylist()) <= {0}
    # The next fetch starts past every batch seen (gaps included), never past the cut.
    ends = [h.next_offset for _, h in iter_batches(log)]
    want_next = max([lo, *ends])
    if hi is not None:
        want_next = min(want_next, hi)
    if want:
        assert got.next_offset > want[-1].offset
    assert got.next_offset == want_next or (hi is not None and got.next_offset == hi)


@settings(max_examples=30)
@given(logs(), st.booleans())
def test_ipc_stream_reads_back_as_the_same_rows(log, with_headers) -> None:
    ipc = records_to_arrow_ipc(log, topic="x", partition=0, include_headers=with_headers)
    table = pa.ipc.open_stream(ipc).read_all()
    assert table.schema.equals(kafka_schema(with_headers))
    direct = records_to_arrow(log, topic="x", partition=0, include_headers=with_headers)
    assert table.to_pylist() == direct.batch.to_pylist()


def test_timestamps_are_utc_microseconds_from_the_record_milliseconds() -> None:
    b = bytearray(encode_batch([(b"k", b"v", 1_700_000_000_123, [])]))
    stamp(b, 0, 0)
    col = records_to_arrow(b, topic="t", partition=0, include_headers=False).batch["timestamp"]
    assert col.type == pa.timestamp("us", tz="UTC")
    assert col.cast(pa.int64()).to_pylist() == [1_700_000_000_123_000]
    assert col[0].as_py() == dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=dt.UTC)


def test_an_incomplete_tail_is_ignored_and_not_counted_in_next_offset() -> None:
    a = bytearray(encode_batch([(None, b"a", 1, [])]))
    b = bytearray(encode_batch([(None, b"b", 2, [])]))
    stamp(a, 10, 0)
    stamp(b, 11, 0)
    got = records_to_arrow(
        bytes(a) + bytes(b)[:-1], topic="t", partition=0, include_headers=False, min_offset=10
    )
    assert got.batch.column("value").to_pylist() == [b"a"]
    assert got.next_offset == 11


def test_no_data_returns_an_empty_batch_and_the_start_offset() -> None:
    got = records_to_arrow(b"", topic="t", partition=0, include_headers=True, min_offset=42)
    assert got.batch.num_rows == 0 and got.next_offset == 42
    assert got.batch.schema.equals(kafka_schema(True))


def test_control_batches_are_skipped_but_move_next_offset() -> None:
    ctl = bytearray(encode_batch([(b"\x00\x00\x00\x00", b"", 5, [])], control=True))
    data = bytearray(encode_batch([(None, b"user", 6, [])]))
    stamp(ctl, 0, 0)
    stamp(data, 1, 0)
    got = records_to_arrow(bytes(ctl) + bytes(data), topic="t", partition=0, include_headers=False)
    assert got.batch.column("offset").to_pylist() == [1]
    assert got.next_offset == 2


def test_a_flipped_body_byte_is_corruption() -> None:
    b = bytearray(encode_batch([(b"k", b"value", 1, [])]))
    b[-2] ^= 0x40
    with pytest.raises(CorruptRecordError):
        records_to_arrow(b, topic="t", partition=0, include_headers=False)


def test_a_record_with_the_wrong_arity_is_corruption() -> None:
    # A well-formed batch (good CRC) whose body holds a 4-field record.
    b = _assemble(
        [[0, 0, None, b"v"]],
        base_offset=0,
        leader_epoch=0,
        compression=Compression.NONE,
        last_offset_delta=0,
        first_timestamp=0,
        max_timestamp=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        transactional=False,
        control=False,
    )
    with pytest.raises(CorruptRecordError):
        records_to_arrow(b, topic="t", partition=0, include_headers=False)


def test_a_key_of_the_wrong_type_is_corruption() -> None:
    b = _assemble(
        [[0, 0, 12, b"v", []]],
        base_offset=0,
        leader_epoch=0,
        compression=Compression.NONE,
        last_offset_delta=0,
        first_timestamp=0,
        max_timestamp=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        transactional=False,
        control=False,
    )
    assert HEADER.unpack_from(b)[3] == MAGIC_MSGPACK and len(b) > HEADER_SIZE
    assert msgpack.unpackb(b[HEADER_SIZE:]) == [[0, 0, 12, b"v", []]]
    with pytest.raises(CorruptRecordError):
        records_to_arrow(b, topic="t", partition=0, include_headers=False)


def test_max_offset_below_min_offset_is_refused() -> None:
    with pytest.raises(ValueError, match="below"):
        records_to_arrow(
            b"", topic="t", partition=0, include_headers=False, min_offset=5, max_offset=4
        )


def test_response_headers_carry_the_contract() -> None:
    h = arrow_response_headers(next_offset=12, high_watermark=20, log_start_offset=3)
    assert h["Content-Type"] == ARROW_STREAM
    assert h[NEXT_OFFSET_HEADER] == "12" and h[HIGH_WATERMARK_HEADER] == "20"


@pytest.mark.parametrize("with_headers", [False, True])
def test_the_arrow_schema_is_exactly_what_spark_derives_from_the_source_schema(
    with_headers: bool,
) -> None:
    from pyspark.sql.pandas.types import to_arrow_schema

    from spark.schema import kafka_struct

    # PySpark >= 4.2 refuses record batches whose schema differs in any way (binary vs
    # large_binary, list item names, nullability): the comparison it makes, made here.
    assert to_arrow_schema(kafka_struct(with_headers), timezone="UTC").equals(
        kafka_schema(with_headers)
    )
