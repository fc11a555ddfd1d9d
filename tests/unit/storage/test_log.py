"""PartitionLog: append, read, roll, truncate, retention, timestamps, recovery."""

from __future__ import annotations

import os

import pytest
from storage_harness import batch, offsets, open_log, read_all

from storage.batch import encode_batch, iter_batches, parse_header, stamp
from storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, PartitionLog
from storage.segment import parse_segment_name


def _log_files(path: str) -> list[str]:
    return sorted(n for n in os.listdir(path) if parse_segment_name(n) is not None)


def test_leader_append_assigns_offsets_from_the_log_end_and_stamps_the_epoch(tmp_path) -> None:
    log = open_log(tmp_path)
    assert log.append(batch(3), leader_epoch=0) == (0, 2)
    assert log.append(batch(2), leader_epoch=4) == (3, 4)
    assert log.log_end_offset == 5
    data = log.read(3, 1 << 20).data
    ((_pos, h),) = list(iter_batches(data))
    assert (h.base_offset, h.leader_epoch, h.last_offset) == (3, 4, 4)


def test_append_refuses_a_corrupt_batch_and_an_oversized_one(tmp_path) -> None:
    log = open_log(tmp_path, **{"max.message.bytes": "200"})
    bad = bytearray(batch())
    bad[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        log.append(bytes(bad), leader_epoch=0)
    with pytest.raises(RecordTooLargeError):
        log.append(batch(value_bytes=300), leader_epoch=0)
    assert log.log_end_offset == 0


def test_read_returns_whole_batches_from_the_one_holding_the_offset(tmp_path) -> None:
    # A dense index: reads end at indexed batch boundaries (a sparse one may return less).
    log = open_log(tmp_path, **{"index.interval.bytes": "0"})
    for _ in range(10):
        log.append(batch(5), leader_epoch=0)
    size = len(batch(5))
    r = log.read(12, 2 * size + 3)
    assert [h.base_offset for _, h in iter_batches(r.data)] == [10, 15]
    assert len(r.data) == 2 * size
    assert (r.log_start_offset, r.log_end_offset) == (0, 50)


def test_read_returns_one_whole_batch_even_when_larger_than_max_bytes(tmp_path) -> None:
    log = open_log(tmp_path)
    log.append(batch(1, value_bytes=5000), leader_epoch=0)
    r = log.read(0, 10)
    assert len(r.data) == len(batch(1, value_bytes=5000))


def test_read_at_the_log_end_is_empty_and_beyond_it_out_of_range(tmp_path) -> None:
    log = open_log(tmp_path)
    log.append(batch(2), leader_epoch=0)
    assert log.read(2, 100).data == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(3, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)


def test_read_stops_before_batches_at_or_above_max_offset(tmp_path) -> None:
    log = open_log(tmp_path)
    for _ in range(4):
        log.append(batch(2), leader_epoch=0)
    r = log.read(0, 1 << 20, max_offset=4)
    assert [h.base_offset for _, h in iter_batches(r.data)] == [0, 2]
    assert log.read(4, 1 << 20, max_offset=4).data == b""


def test_roll_by_segment_bytes_names_segments_by_base_offset(tmp_path) -> None:
    size = len(batch(2))
    log = open_log(tmp_path, **{"segment.bytes": str(3 * size)})
    for _ in range(7):
        log.append(batch(2), leader_epoch=0)
    assert [s.base_offset for s in log.segments] == [0, 6, 12]
    assert _log_files(str(tmp_path)) == [
        "00000000000000000000.log",
        "00000000000000000006.log",
        "00000000000000000012.log",
    ]
    # Rolling made the closed segments durable.
    assert log.flushed_offset >= 12
    assert [r.offset for r in read_all(log)] == list(range(14))


def test_roll_by_segment_ms_counts_from_the_first_batch_timestamp(tmp_path) -> None:
    log = open_log(tmp_path, **{"segment.ms": "1000"})
    log.append(batch(ts=5000), leader_epoch=0, now_ms=5000)
    log.append(batch(ts=5500), leader_epoch=0, now_ms=5999)
    assert len(log.segments) == 1
    log.append(batch(ts=6000), leader_epoch=0, now_ms=6000)
    assert [s.base_offset for s in log.segments] == [0, 2]
    assert not log.maybe_roll(6500)
    assert log.maybe_roll(7000)
    assert len(log.segments) == 3


def test_roll_by_segment_ms_measures_old_timestamps_against_each_other_not_now(tmp_path) -> None:
    # Kafka's LogSegment.timeWaitedForRoll: the incoming batch's max timestamp minus the
    # first batch's. Records from 1970 appended now (a mirror keeping the source's
    # timestamps) fill one segment; measured against the clock, each rolled a new segment.
    log = open_log(tmp_path, **{"segment.ms": "1000"})
    now = 1_800_000_000_000
    for ts in (1000, 1500, 1999):
        log.append(batch(ts=ts), leader_epoch=0, now_ms=now)
    assert len(log.segments) == 1
    log.append(batch(ts=2000), leader_epoch=0, now_ms=now)
    assert [s.base_offset for s in log.segments] == [0, 3]
    # The periodic check has no incoming batch: it still measures against the clock.
    assert log.maybe_roll(now)
    # A follower's append measures the same way.
    (tmp_path / "follower").mkdir()
    follower = open_log(tmp_path / "follower", **{"segment.ms": "1000"})
    for i, ts in enumerate((1000, 1999, 2000)):
        b = bytearray(batch(ts=ts))
        stamp(b, i, 0)
        follower.append_as_follower(bytes(b), now_ms=now)
    assert [s.base_offset for s in follower.segments] == [0, 2]


def test_offset_for_timestamp_finds_the_first_record_at_or_after(tmp_path) -> None:
    log = open_log(tmp_path, **{"segment.bytes": "400", "index.interval.bytes": "100"})
    for i in range(30):
        log.append(batch(3, ts=1000 + 10 * i), leader_epoch=0)
    assert len(log.segments) > 3
    assert log.offset_for_timestamp(0) == 0
    assert log.offset_for_timestamp(1000) == 0
    assert log.offset_for_timestamp(1001) == 1
    assert log.offset_for_timestamp(1003) == 3  # the next batch starts at ts 1010
    assert log.offset_for_timestamp(1152) == 15 * 3 + 2
    assert log.offset_for_timestamp(1292) == 89
    assert log.offset_for_timestamp(1293) is None
    assert log.offset_for_timestamp(EARLIEST_TIMESTAMP) == 0
    assert log.offset_for_timestamp(LATEST_TIMESTAMP) == 90


def test_offset_for_timestamp_with_out_of_order_timestamps(tmp_path) -> None:
    log = open_log(tmp_path, **{"index.interval.bytes": "0"})
    for ts in (100, 500, 200, 300, 900):
        log.append(batch(ts=ts), leader_epoch=0)
    assert log.offset_for_timestamp(250) == 1  # offset 1 (ts 500) is the first >= 250
    assert log.offset_for_timestamp(600) == 4


def test_truncate_to_across_segments_cuts_at_batch_boundaries(tmp_path) -> None:
    size = len(batch(2))
    log = open_log(tmp_path, **{"segment.bytes": str(2 * size)})
    for e in range(8):
        log.append(batch(2), leader_epoch=e // 2)
    assert len(log.segments) == 4
    log.truncate_to(9)  # inside the batch 8..9
    assert log.log_end_offset == 8
    assert offsets(log) == list(range(8))
    assert [s.base_offset for s in log.segments] == [0, 4, 8]  # 8 is now empty
    assert log.leader_epoch_cache.entries == [(0, 0), (1, 4)]
    log.append(batch(1), leader_epoch=7)
    assert log.log_end_offset == 9
    assert log.leader_epoch_cache.entries == [(0, 0), (1, 4), (7, 8)]


def test_truncate_survives_reopen_and_below_start_truncates_fully(tmp_path) -> None:
    log = open_log(tmp_path, **{"segment.bytes": "300"})
    for _ in range(10):
        log.append(batch(3), leader_epoch=1)
    log.truncate_to(7)
    log.abandon()  # no clean shutdown: recovery must not resurrect 7..
    log = open_log(tmp_path, **{"segment.bytes": "300"})
    assert log.log_end_offset == 6
    assert offsets(log) == list(range(6))
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset) == (100, 100)
    assert log.append(batch(), leader_epoch=2) == (100, 100)
    log.close()
    log = open_log(tmp_path, **{"segment.bytes": "300"})
    assert (log.log_start_offset, log.log_end_offset) == (100, 101)


def test_follower_append_keeps_offsets_and_refuses_going_back(tmp_path) -> None:
    leader = open_log(tmp_path / "leader")
    for e in range(3):
        leader.append(batch(2), leader_epoch=e)
    data = leader.read(0, 1 << 20).data
    follower = open_log(tmp_path / "follower")
    assert follower.append_as_follower(data) == (0, 5)
    assert follower.leader_epoch_cache.entries == [(0, 0), (1, 2), (2, 4)]
    assert follower.read(0, 1 << 20).data == data
    with pytest.raises(InvalidRecordError, match="does not follow"):
        follower.append_as_follower(data)
    with pytest.raises(InvalidRecordError, match="after the last whole batch"):
        follower.append_as_follower(data[:-1])
    bad = bytearray(leader.read(4, 1).data)
    bad[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        follower.append_as_follower(bytes(bad))
    assert follower.log_end_offset == 6


def test_follower_append_accepts_gaps_left_by_compaction(tmp_path) -> None:
    b = bytearray(batch(2))
    stamp(b, 10, 3)
    log = open_log(tmp_path)
    assert log.append_as_follower(bytes(b)) == (10, 11)
    assert log.log_end_offset == 12
    assert [r.offset for r in read_all(log, 0)] == [10, 11]


def test_delete_records_before_moves_the_log_start_and_deletes_whole_segments(tmp_path) -> None:
    log = open_log(tmp_path, **{"segment.bytes": "300"})
    for _ in range(12):
        log.append(batch(3), leader_epoch=0)
    bases = [s.base_offset for s in log.segments]
    assert log.delete_records_before(bases[2] + 1) == bases[2] + 1
    assert log.segments[0].base_offset == bases[2]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(bases[2], 10)
    assert read_all(log)[0].offset == bases[2]  # the batch holding the start is served whole
    log.close()
    log = open_log(tmp_path, **{"segment.bytes": "300"})
    assert log.log_start_offset == bases[2] + 1


def test_retention_by_time_deletes_old_closed_segments_never_the_active(tmp_path) -> None:
    log = open_log(tmp_path, **{"segment.bytes": "300", "retention.ms": "1000"})
    for i in range(12):
        log.append(batch(3, ts=1000 * i), leader_epoch=0)
    n = len(log.segments)
    assert not log.maybe_apply_retention(now_ms=0)
    assert log.maybe_apply_retention(now_ms=5000)
    assert all(s.max_timestamp >= 4000 for s in log.segments[:-1])
    assert log.log_start_offset == log.segments[0].base_offset
    assert log.maybe_apply_retention(now_ms=10**9)
    assert len(log.segments) == 1 < n
    assert log.log_start_offset == log.segments[0].base_offset


def test_retention_never_deletes_a_segment_holding_offsets_at_or_above_the_hw(tmp_path) -> None:
    # Kafka's deletableSegments: a segment goes only once the next one's base offset is at or
    # below the high watermark, so the log start never passes uncommitted records.
    log = open_log(tmp_path, **{"segment.bytes": "300", "retention.ms": "1000"})
    for i in range(12):
        log.append(batch(3, ts=1000 * i), leader_epoch=0)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 4
    hw = bases[2]  # the first two segments hold only committed records
    assert log.maybe_apply_retention(now_ms=10**9, high_watermark=hw)
    assert log.log_start_offset == hw == log.segments[0].base_offset
    assert not log.maybe_apply_retention(now_ms=10**9, high_watermark=hw + 1)
    assert log.log_start_offset == hw  # the segment holding hw stays while hw is inside it
    assert not log.maybe_apply_retention(now_ms=10**9, high_watermark=0)
    assert log.maybe_apply_retention(now_ms=10**9, high_watermark=log.log_end_offset)
    assert len(log.segments) == 1


def test_retention_by_bytes_keeps_the_newest_segments_within_the_limit(tmp_path) -> None:
    log = open_log(tmp_path, **{"segment.bytes": "300", "retention.bytes": "600"})
    for _ in range(20):
        log.append(batch(3), leader_epoch=0)
    assert log.maybe_apply_retention(now_ms=0)
    assert log.size_bytes <= 600 + log.segments[0].size_bytes
    assert sum(s.size_bytes for s in log.segments[1:]) < 600


def test_clean_reopen_loads_indexes_without_scanning(tmp_path, monkeypatch) -> None:
    log = open_log(tmp_path, **{"segment.bytes": "500"})
    for _ in range(20):
        log.append(batch(3), leader_epoch=0)
    log.close()
    assert os.path.exists(tmp_path / "clean-shutdown")
    from storage.segment import Segment

    def no_recover(*a, **k):  # pragma: no cover - fails the test if reached
        raise AssertionError("a clean open must not scan")

    monkeypatch.setattr(Segment, "recover", no_recover)
    log = open_log(tmp_path, **{"segment.bytes": "500"})
    assert log.log_end_offset == 60
    assert not os.path.exists(tmp_path / "clean-shutdown")  # removed before any append
    assert offsets(log) == list(range(60))


def _crashed(tmp_path, batches: int) -> str:
    """A log of ``batches`` batches of two records, left without a clean shutdown: the path
    of its active segment, for the test to damage before recovery."""
    log = open_log(tmp_path)
    for _ in range(batches):
        log.append(batch(2), leader_epoch=0)
    path = log.active_segment.log_path
    log.abandon()
    return path


def test_recovery_cuts_a_torn_tail_of_the_active_segment(tmp_path) -> None:
    path = _crashed(tmp_path, 5)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 7)
    log = open_log(tmp_path)
    assert log.log_end_offset == 8
    assert os.path.getsize(path) == 4 * len(batch(2))
    assert log.append(batch(), leader_epoch=0) == (8, 8)


def test_recovery_cuts_a_zero_filled_tail(tmp_path) -> None:
    path = _crashed(tmp_path, 3)
    with open(path, "ab") as f:
        f.write(bytes(500))
    log = open_log(tmp_path)
    assert log.log_end_offset == 6


def test_mid_log_corruption_is_reported_with_file_and_position(tmp_path) -> None:
    path = _crashed(tmp_path, 5)
    size = len(batch(2))
    with open(path, "r+b") as f:
        f.seek(2 * size + 70)
        byte = f.read(1)
        f.seek(2 * size + 70)
        f.write(bytes([byte[0] ^ 0x40]))
    with pytest.raises(CorruptRecordError) as ei:
        open_log(tmp_path)
    assert ei.value.path == path and ei.value.position == 2 * size
    # An operator may cut the log there instead.
    log = PartitionLog.open(str(tmp_path), allow_truncate_corrupt=True)
    assert log.log_end_offset == 4


def test_corrupt_length_field_followed_by_valid_data_is_corruption(tmp_path) -> None:
    path = _crashed(tmp_path, 4)
    size = len(batch(2))
    with open(path, "r+b") as f:
        f.seek(size + 8)
        f.write(b"\x00\x00\x00\x01")  # batch_length impossible
    with pytest.raises(CorruptRecordError) as ei:
        open_log(tmp_path)
    assert ei.value.position == size


def test_corruption_in_a_closed_segment_is_reported_even_at_its_end(tmp_path) -> None:
    log = open_log(tmp_path, **{"segment.bytes": "300"})
    for _ in range(10):
        log.append(batch(3), leader_epoch=0)
    first = log.segments[0]
    path, end = first.log_path, first.size_bytes
    log.abandon()
    os.unlink(os.path.join(tmp_path, "recovery-point-offset-checkpoint"))  # scan everything
    with open(path, "r+b") as f:
        f.truncate(end - 3)
    with pytest.raises(CorruptRecordError) as ei:
        open_log(tmp_path, **{"segment.bytes": "300"})
    assert ei.value.path == path


def test_lost_index_files_are_rebuilt(tmp_path) -> None:
    log = open_log(tmp_path, **{"segment.bytes": "300", "index.interval.bytes": "50"})
    for i in range(12):
        log.append(batch(3, ts=i * 10), leader_epoch=0)
    log.close()
    for n in os.listdir(tmp_path):
        if n.endswith((".index", ".timeindex")):
            with open(tmp_path / n, "ab") as f:
                f.write(b"junk")
    log = open_log(tmp_path, **{"segment.bytes": "300", "index.interval.bytes": "50"})
    assert offsets(log) == list(range(36))
    assert log.offset_for_timestamp(55) == 18


def test_epoch_cache_is_persisted_and_trimmed_to_the_recovered_log(tmp_path) -> None:
    log = open_log(tmp_path)
    log.append(batch(2), leader_epoch=1)
    log.append(batch(2), leader_epoch=3)
    log.flush()
    log.append(batch(2), leader_epoch=5)  # not flushed
    path = log.active_segment.log_path
    log.abandon()
    with open(path, "r+b") as f:
        f.truncate(2 * len(batch(2)) + 10)  # the epoch-5 batch is torn
    log = open_log(tmp_path)
    assert log.leader_epoch_cache.entries == [(1, 0), (3, 2)]
    assert log.end_offset_for_epoch(3) == (3, 4)
    assert log.end_offset_for_epoch(2) == (1, 2)


def test_segment_header_fields_stay_valid_after_stamp(tmp_path) -> None:
    log = open_log(tmp_path)
    raw = encode_batch([(b"a", b"b", 1, [])], base_offset=999, leader_epoch=42)
    log.append(raw, leader_epoch=2)
    h = parse_header(log.read(0, 100).data)
    assert (h.base_offset, h.leader_epoch) == (0, 2)
