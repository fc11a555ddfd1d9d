"""Corrupt bytes on disk: a CRC failure below the recovery point is corruption (found at
start-up and on read, never served), a torn tail above it is still cut, and damaged index and
checkpoint files are rebuilt or replaced by the safe choice, never trusted."""

from __future__ import annotations

import os

import pytest
from storage_harness import batch, offsets, open_log

from storage import checkpoint
from storage.batch import iter_batches
from storage.errors import CorruptRecordError, CorruptSegmentError
from storage.fileio import LazyFileLayer, RealFileLayer
from storage.log import PartitionLog
from storage.segment import INDEX_SUFFIX

BATCH = len(batch(2))


def flip(path: str, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0x10]))


def flushed_log(path, batches: int = 5, **kafka: str) -> tuple[PartitionLog, str]:
    """A log of ``batches`` batches of 2, fsynced and its recovery point checkpointed, then
    abandoned (no clean shutdown: the next open runs recovery)."""
    log = open_log(path, **kafka)
    for _ in range(batches):
        log.append(batch(2), leader_epoch=0)
    log.flush()
    assert log.checkpoint_recovery_point()
    seg = log.active_segment.log_path
    log.abandon()
    return log, seg


# --------------------------------------------------------------------------- at start-up


def test_a_bit_flip_in_the_last_fsynced_batch_is_corruption_not_a_torn_tail(tmp_path) -> None:
    """Before the recovery point counted, this batch was cut silently as a torn write."""
    _, seg = flushed_log(tmp_path)
    flip(seg, 4 * BATCH + 70)  # inside the last batch's body
    with pytest.raises(CorruptSegmentError) as ei:
        open_log(tmp_path)
    e = ei.value
    assert (e.path, e.position, e.offset) == (seg, 4 * BATCH, 8)
    assert "below the recovery point 10" in str(e) and e.code == "KAFKA_STORAGE_ERROR"
    assert os.path.getsize(seg) == 5 * BATCH  # nothing cut


def test_a_replica_that_will_refetch_may_cut_corruption_and_is_told_what_it_lost(tmp_path) -> None:
    _, seg = flushed_log(tmp_path)
    flip(seg, BATCH + 70)  # the second batch
    log = PartitionLog.open(str(tmp_path), allow_truncate_corrupt=True)
    report = log.recovery
    assert report.corruption is not None and report.corruption.offset == 2
    assert report.lost_end_offset == 10
    # The log ends before the corruption, not at the recovery point past it.
    assert log.log_end_offset == 2 and offsets(log) == [0, 1]
    assert any("must be fetched again" in p for p in report.problems())
    assert os.path.getsize(seg) == BATCH


def test_a_torn_tail_above_the_recovery_point_is_still_cut_and_reported(tmp_path) -> None:
    log = open_log(tmp_path)
    for _ in range(3):
        log.append(batch(2), leader_epoch=0)
    log.flush()
    log.checkpoint_recovery_point()
    log.append(batch(2), leader_epoch=0)  # never fsynced
    seg = log.active_segment.log_path
    log.abandon()
    with open(seg, "r+b") as f:
        f.truncate(3 * BATCH + 20)
    log = open_log(tmp_path)
    assert log.log_end_offset == 6
    assert log.recovery.torn_tail == (seg, 3 * BATCH, 20)


def test_a_damaged_recovery_point_is_reported_and_never_moves_the_log_end(tmp_path) -> None:
    flushed_log(tmp_path)
    rp = tmp_path / checkpoint.RECOVERY_POINT_NAME
    rp.write_bytes(rp.read_bytes().replace(b"\n10\n", b"\n90\n"))  # still parses
    log = open_log(tmp_path)
    assert log.log_end_offset == 10 and offsets(log) == list(range(10))
    assert [e.path for e in log.recovery.checkpoint_errors] == [str(rp)]
    assert (
        checkpoint.read_offset(RealFileLayer(), str(tmp_path), checkpoint.RECOVERY_POINT_NAME) == 10
    )  # rewritten


def test_a_damaged_log_start_checkpoint_falls_back_to_the_first_segment(tmp_path) -> None:
    log = open_log(tmp_path)
    for _ in range(5):
        log.append(batch(2), leader_epoch=0)
    log.delete_records_before(3)
    log.flush()
    log.abandon()
    lso = tmp_path / checkpoint.LOG_START_OFFSET_NAME
    lso.write_bytes(lso.read_bytes().replace(b"\n3\n", b"\n99\n"))
    log = open_log(tmp_path)
    # Deleted records may show again (nothing is lost); the log is not emptied.
    assert log.log_start_offset == 0 and log.log_end_offset == 10
    assert log.recovery.checkpoint_errors[0].path == str(lso)


def test_a_damaged_epoch_cache_is_rebuilt_from_the_batch_headers(tmp_path) -> None:
    log = open_log(tmp_path, **{"segment.bytes": "300"})
    for epoch in (0, 0, 2, 2, 5, 7, 7):
        log.append(batch(2), leader_epoch=epoch)
    want = log.leader_epoch_cache.entries
    log.close()
    cache = tmp_path / "leader-epoch-checkpoint"
    cache.write_bytes(cache.read_bytes().replace(b"2 4", b"2 5"))
    log = open_log(tmp_path, **{"segment.bytes": "300"})  # clean shutdown: no scan, still
    assert log.recovery.epoch_cache_rebuilt
    assert log.leader_epoch_cache.entries == want == [(0, 0), (2, 4), (5, 8), (7, 10)]


def test_a_clean_shutdown_marker_with_a_flipped_digit_is_not_trusted(tmp_path) -> None:
    log = open_log(tmp_path)
    for _ in range(3):
        log.append(batch(2), leader_epoch=0)
    log.close()
    marker = tmp_path / "clean-shutdown"
    marker.write_bytes(marker.read_bytes().replace(b'"log_end_offset": 6', b'"log_end_offset": 7'))
    log = open_log(tmp_path)
    assert not log.recovery.clean and log.log_end_offset == 6


def test_a_version_0_checkpoint_without_a_checksum_still_loads(tmp_path) -> None:
    (tmp_path / checkpoint.RECOVERY_POINT_NAME).write_text("0\n42\n")
    assert (
        checkpoint.read_offset(RealFileLayer(), str(tmp_path), checkpoint.RECOVERY_POINT_NAME) == 42
    )


# --------------------------------------------------------------------------- indexes


def test_an_index_entry_pointing_into_a_batch_is_found_on_read_and_rebuilt(tmp_path) -> None:
    kafka = {"segment.bytes": "400", "index.interval.bytes": "1"}
    log = open_log(tmp_path, **kafka)
    for _ in range(6):
        log.append(batch(2), leader_epoch=0)
    log.close()
    index = tmp_path / ("00000000000000000000" + INDEX_SUFFIX)
    raw = bytearray(index.read_bytes())
    assert raw[8:16] == bytes([0, 0, 0, 2, 0, 0, 0, BATCH])  # (offset 2, second batch)
    raw[15] = BATCH + 9  # still increasing and inside the file: loads, but points mid-batch
    index.write_bytes(bytes(raw))
    log = open_log(tmp_path, **kafka)
    assert log.recovery.clean and not log.recovery.indexes_rebuilt
    data = log.read(2, BATCH).data
    assert [h.base_offset for _, h in iter_batches(data)] == [2]
    assert log.segments[0].index.positions[1] == BATCH  # rebuilt from the .log
    assert offsets(log) == list(range(log.log_end_offset))
    assert log.corruption is None


def test_index_files_that_fail_their_checks_are_rebuilt_and_reported(tmp_path) -> None:
    kafka = {"segment.bytes": "300", "index.interval.bytes": "50"}
    log = open_log(tmp_path, **kafka)
    for _ in range(8):
        log.append(batch(2), leader_epoch=0)
    log.close()
    index = tmp_path / ("00000000000000000000" + INDEX_SUFFIX)
    index.write_bytes(index.read_bytes()[::-1])  # not increasing
    log = open_log(tmp_path, **kafka)
    assert log.recovery.indexes_rebuilt == [str(tmp_path / "00000000000000000000.log")]
    assert offsets(log) == list(range(16))


# --------------------------------------------------------------------------- on read


def test_a_corrupt_batch_is_never_served_and_is_reported_once(tmp_path) -> None:
    files = LazyFileLayer()
    kafka = {"index.interval.bytes": "1"}
    log = open_log(tmp_path, files, **kafka)
    for _ in range(5):
        log.append(batch(2), leader_epoch=0)
    log.flush()
    found: list[CorruptSegmentError] = []
    log.log_dir.add_corruption_listener(found.append)
    files.flip_bit(log.active_segment.log_path, 2 * BATCH + 70)  # bit rot in batch 3
    # A read from before it stops before it; one at it raises; later batches still serve.
    assert [h.base_offset for _, h in iter_batches(log.read(0, 10_000).data)] == [0, 2]
    for at in (4, 5):
        with pytest.raises(CorruptSegmentError) as ei:
            log.read(at, 10_000)
        assert ei.value.offset == 4 and ei.value.position == 2 * BATCH
    assert [h.base_offset for _, h in iter_batches(log.read(6, 10_000).data)] == [6, 8]
    assert len(found) == 1 and log.corruption is found[0]
    # Nothing unverified leaves through the high-watermark path either.
    with pytest.raises(CorruptSegmentError):
        log.read(4, 10_000, max_offset=10)
    # Tools may still look at the raw bytes.
    assert log.read(4, 1, verify=False).data


def test_a_flipped_base_offset_outside_the_crc_is_not_served(tmp_path) -> None:
    files = LazyFileLayer()
    log = open_log(tmp_path, files, **{"index.interval.bytes": "1"})
    for _ in range(3):
        log.append(batch(2), leader_epoch=0)
    files.flip_bit(log.active_segment.log_path, BATCH + 7, bit=3)  # base offset 2 -> 10
    with pytest.raises(CorruptRecordError):
        log.read(2, 10_000)
    assert [h.base_offset for _, h in iter_batches(log.read(0, 10_000).data)] == [0]


def test_a_torn_append_over_deleted_offsets_is_a_torn_tail_not_corruption(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Found by the log model: records 0-1 fsynced, records below 1 deleted, the log
    truncated to 1 (the batch of 0-1 goes; that truncation is not fsynced) and one record
    appended at byte 0; the power fails and part of the new batch lands over the old one.
    The recovery point (1) is not above any offset the log still holds: the bad batch at byte
    0 is a torn write, cut, not fsynced data lost."""
    import random

    files = LazyFileLayer()
    log = open_log(tmp_path, files)
    log.append(batch(2), leader_epoch=0)
    log.flush()
    assert log.delete_records_before(1) == 1
    log.truncate_to(1)
    log.append(batch(1), leader_epoch=0)
    log.abandon()
    files.crash(random.Random(0))
    log = open_log(tmp_path, LazyFileLayer())
    assert log.recovery.corruption is None
    assert (log.log_start_offset, log.log_end_offset) == (1, 1)
    assert offsets(log) == []
