"""``PartitionLog.read_range``: where a fetch's Kafka batches lie, for ``os.sendfile``.

Pinned: the range names exactly the bytes ``read`` returns (same batches, same cut at a
high watermark, whole batches only), it ends before a msgpack batch and is refused (None) when
the first batch is one, or when there would be too many small batches; and its descriptor
keeps the bytes after retention deletes the segment and the log reuses descriptor numbers.
"""

from __future__ import annotations

import os

import pytest
from storage_harness import open_log

from storage.batch import as_kafka_batch, encode_batch, iter_batches
from storage.errors import OffsetOutOfRangeError
from storage.log import FileRange


def kafka_batch(n: int, value_bytes: int = 10, tag: bytes = b"v") -> bytes:
    return as_kafka_batch(
        encode_batch([(b"k%d" % i, tag * value_bytes, 1000 + i, [("h", b"1")]) for i in range(n)])
    )


def sent(rng: FileRange) -> bytes:
    """What ``os.sendfile`` would send from the range."""
    return os.pread(rng.fd, rng.size_bytes, rng.position)


def test_range_names_the_bytes_read_returns(tmp_path) -> None:
    log = open_log(tmp_path, **{"index.interval.bytes": "0"})
    for _ in range(6):
        log.append(kafka_batch(3), leader_epoch=0)
    size = len(kafka_batch(3))
    with log.read_range(7, 2 * size) as rng:
        assert rng is not None
        assert sent(rng) == log.read(7, 2 * size).data
        assert (rng.records, rng.next_offset) == (6, 12)  # batches 6-8 and 9-11
        assert (rng.log_start_offset, rng.log_end_offset) == (0, 18)
    assert log.read_range(18, 100) is None  # the log end
    with pytest.raises(OffsetOutOfRangeError):
        log.read_range(19, 100)
    log.close()


def test_range_stops_below_the_high_watermark_as_read_does(tmp_path) -> None:
    log = open_log(tmp_path)
    for _ in range(5):
        log.append(kafka_batch(4), leader_epoch=0)
    for hw in (5, 8, 13, 20):
        with log.read_range(0, 1 << 20, max_offset=hw) as rng:
            assert sent(rng) == log.read(0, 1 << 20, max_offset=hw).data
            assert rng.next_offset == hw // 4 * 4
    # The first batch reaches the high watermark: nothing to send (read sends nothing too).
    assert log.read_range(0, 1 << 20, max_offset=3) is None
    assert log.read(0, 1 << 20, max_offset=3).data == b""
    log.close()


def test_range_is_the_first_batch_even_when_larger_than_max_bytes(tmp_path) -> None:
    log = open_log(tmp_path)
    log.append(kafka_batch(2, value_bytes=5000), leader_epoch=0)
    log.append(kafka_batch(1), leader_epoch=0)
    with log.read_range(0, 10) as rng:
        assert rng.size_bytes == len(kafka_batch(2, value_bytes=5000))
        assert rng.next_offset == 2
    log.close()


def test_range_ends_before_a_msgpack_batch_and_refuses_one_first(tmp_path) -> None:
    log = open_log(tmp_path)
    log.append(kafka_batch(2), leader_epoch=0)
    log.append(encode_batch([(b"m", b"msgpack", 5, [])]), leader_epoch=0)
    log.append(kafka_batch(2), leader_epoch=0)
    with log.read_range(0, 1 << 20) as rng:
        assert sent(rng) == kafka_batch_at(log, 0)
        assert rng.next_offset == 2
    assert log.read_range(2, 1 << 20) is None  # needs converting: the caller reads it
    with log.read_range(3, 1 << 20) as rng:
        assert rng.next_offset == 5
    log.close()


def kafka_batch_at(log, offset: int) -> bytes:
    data = log.read(offset, 1 << 20).data
    pos, h = next(iter(iter_batches(data)))
    return data[pos : pos + h.size]


def test_range_of_too_many_small_batches_is_refused(tmp_path) -> None:
    log = open_log(tmp_path)
    for _ in range(10):
        log.append(kafka_batch(1), leader_epoch=0)
    assert log.read_range(0, 1 << 20, batches_max=9) is None
    with log.read_range(0, 1 << 20, batches_max=10) as rng:
        assert rng.records == 10
    log.close()


def test_range_keeps_its_bytes_after_retention_deletes_the_segment(tmp_path) -> None:
    log = open_log(tmp_path, **{"segment.bytes": "2000"})
    for i in range(12):
        log.append(kafka_batch(3, value_bytes=100, tag=b"%d" % (i % 10)), leader_epoch=0)
    expected = log.read(0, 1 << 20).data
    rng = log.read_range(0, 1 << 20)
    assert rng is not None and sent(rng) == expected
    first_segment = sorted(n for n in os.listdir(tmp_path) if n.endswith(".log"))[0]
    log.delete_records_before(log.log_end_offset)  # every closed segment goes
    log.maybe_apply_retention(now_ms=0)  # closes the retired segments' own descriptors
    assert first_segment not in os.listdir(tmp_path)
    # New files take the freed descriptor numbers; the range's own still names the old file.
    others = [os.open(os.path.join(tmp_path, f"junk{i}"), os.O_CREAT | os.O_RDWR) for i in range(4)]
    try:
        for fd in others:
            os.write(fd, b"x" * 5000)
        assert sent(rng) == expected
    finally:
        for fd in others:
            os.close(fd)
        rng.close()
    log.close()
