"""storage.txn: the control record layout of a transaction marker (Kafka's) and the
read_committed view of a run of batches."""

from __future__ import annotations

import struct

import pytest

from storage.batch import (
    MAGIC_KAFKA,
    as_kafka_batch,
    decode_records,
    encode_batch,
    iter_batches,
    stamp,
    verify_batch,
)
from storage.errors import CorruptRecordError
from storage.txn import (
    AbortedTxn,
    ControlMarker,
    decode_marker,
    encode_marker_batch,
    read_committed_view,
)


def test_marker_batch_has_kafkas_control_record_layout() -> None:
    batch = encode_marker_batch(9, 3, ControlMarker(True, 42), timestamp_ms=1000)
    h = verify_batch(batch)
    assert h.is_control and h.is_transactional
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (9, 3, -1)
    (r,) = decode_records(batch)
    assert r.key == struct.pack(">hh", 0, 1)
    assert r.value == struct.pack(">hi", 0, 42)
    assert decode_marker(batch) == ControlMarker(True, 42)
    abort = encode_marker_batch(9, 3, ControlMarker(False, 0), timestamp_ms=1000)
    assert decode_marker(abort) == ControlMarker(False, 0)
    # A Kafka client reads the same record from the re-encoded batch.
    kb = as_kafka_batch(batch)
    assert verify_batch(kb).magic == MAGIC_KAFKA
    assert decode_marker(kb) == ControlMarker(True, 42)


def test_a_control_batch_that_is_no_marker_is_corrupt() -> None:
    bad = encode_batch([(b"\x00\x00\x00\x07", b"", 0, ())], control=True)
    with pytest.raises(CorruptRecordError):
        decode_marker(bad)


def _batch(offset: int, pid: int, *, transactional: bool, n: int = 2) -> bytes:
    b = bytearray(
        encode_batch(
            [(None, f"{pid}-{offset + i}".encode(), 0, ()) for i in range(n)],
            producer_id=pid,
            producer_epoch=0 if pid >= 0 else -1,
            base_sequence=0 if pid >= 0 else -1,
            transactional=transactional,
        )
    )
    stamp(b, offset, 0)
    return bytes(b)


def test_read_committed_view_empties_aborted_batches_and_keeps_offsets() -> None:
    data = (
        _batch(0, 5, transactional=True)  # 0-1 aborted
        + _batch(2, -1, transactional=False)  # 2-3
        + _batch(4, 6, transactional=True)  # 4-5 committed
        + _batch(6, 5, transactional=False)  # 6-7: producer 5, not in the transaction
    )
    view = read_committed_view(data, [AbortedTxn(5, 0, 8, 9)])
    got = [(h.base_offset, h.next_offset, h.record_count) for _, h in iter_batches(view)]
    assert got == [(0, 2, 0), (2, 4, 2), (4, 6, 2), (6, 8, 2)]
    assert read_committed_view(data, []) is data
    assert read_committed_view(data, [AbortedTxn(5, 100, 101, 102)]) == data


def test_log_dump_shows_a_marker_as_kafka_dump_log_does() -> None:
    from storage.dump import format_record

    (r,) = decode_records(encode_marker_batch(9, 3, ControlMarker(False, 7), timestamp_ms=5))
    line = format_record(r, control=True)
    assert line.endswith("keySize: 4 valueSize: 6 endTxnMarker: ABORT coordinatorEpoch: 7")
    (bad,) = decode_records(encode_batch([(b"\x00", b"", 0, ())], control=True))
    assert "control record:" in format_record(bad, control=True)
