"""Recovery tells damage from what the log did on purpose (fault-injection findings 8 and 9).

Data missing below the recovery point, or from a closed segment whose index names it, is
damage: ``open`` refuses with the segment named, or (``allow_truncate_corrupt``) opens at the
real end. A compaction gap is not. A leader epoch that decreases along the log or exceeds
``leader-epoch-checkpoint`` is damage too (it lies outside the CRC).
"""

from __future__ import annotations

import os

import pytest
from storage_harness import batch, offsets, open_log

from storage.batch import LEADER_EPOCH_OFFSET, encode_batch, parse_header
from storage.errors import CorruptSegmentError
from storage.fileio import RealFileLayer
from storage.log import PartitionLog
from storage.segment import Segment

SMALL = {"segment.bytes": "300"}
COMPACT = {"cleanup.policy": "compact", "segment.bytes": "400", "delete.retention.ms": "1000"}


def _batch_starts(path: str) -> list[int]:
    """Byte positions of the batches in a segment file."""
    with open(path, "rb") as f:
        data = f.read()
    out, pos = [], 0
    while pos < len(data):
        out.append(pos)
        pos += parse_header(data, pos).size
    return out


def _unclean_reopen(path, **kafka: str) -> None:
    """Open once without closing: the recovery point is checkpointed at the log end and no
    clean-shutdown marker is left, as after a crash that lost nothing."""
    open_log(path, **kafka)


def test_an_active_segment_cut_below_the_recovery_point_is_refused_not_taken_for_a_gap(
    tmp_path,
) -> None:
    # Finding 8's reproduction: this opened with log end 10 over a segment ending at 5.
    log = open_log(tmp_path)
    for i in range(10):
        log.append(encode_batch([(None, b"v%d" % i, 0, [])]), leader_epoch=0)
    log.flush()
    _unclean_reopen(tmp_path)
    seg = os.path.join(tmp_path, "00000000000000000000.log")
    cut = _batch_starts(seg)[5]
    os.truncate(seg, cut)  # the disk loses the segment's second half, at a batch boundary
    with pytest.raises(CorruptSegmentError, match=r"lost its tail; offsets 5\.\.9") as e:
        open_log(tmp_path)
    assert e.value.path == seg and e.value.position == cut and e.value.offset == 5


def test_a_refetching_replica_opens_a_cut_log_at_its_real_end(tmp_path) -> None:
    log = open_log(tmp_path)
    for epoch in (0, 0, 1, 1, 2, 2):
        log.append(batch(), leader_epoch=epoch)
    log.flush()
    _unclean_reopen(tmp_path)
    seg = os.path.join(tmp_path, "00000000000000000000.log")
    os.truncate(seg, _batch_starts(seg)[3])
    log = PartitionLog.open(str(tmp_path), allow_truncate_corrupt=True)
    assert log.log_end_offset == 3 and offsets(log) == [0, 1, 2]
    # Never counted as holding what it lost: epoch 2 (offsets 4, 5) is gone from its cache,
    # so OffsetsForLeaderEpoch answers from its real log.
    assert log.leader_epoch_cache.entries == [(0, 0), (1, 2)]
    assert log.recovery.corruption is not None and log.recovery.lost_end_offset == 6
    log.close()
    assert open_log(tmp_path).log_end_offset == 3  # the cut is durable, and no longer damage


def test_a_closed_segment_cut_at_a_batch_boundary_is_refused(tmp_path) -> None:
    log = open_log(tmp_path, **SMALL)
    for _ in range(12):
        log.append(batch(), leader_epoch=0)
    log.flush()
    first, second = log.segments[0], log.segments[1]
    assert len(log.segments) >= 3
    _unclean_reopen(tmp_path, **SMALL)
    starts = _batch_starts(first.log_path)
    os.truncate(first.log_path, starts[-2])  # two whole batches gone, below everything
    with pytest.raises(CorruptSegmentError, match="lost its tail") as e:
        open_log(tmp_path, **SMALL)
    lost_from = first.base_offset + len(starts) - 2
    assert e.value.path == first.log_path and e.value.offset == lost_from
    assert f"{lost_from}..{second.base_offset - 1} are missing" in str(e.value)
    # A follower opens at the real end instead and fetches the rest again.
    log = PartitionLog.open(str(tmp_path), allow_truncate_corrupt=True)
    assert log.log_end_offset == lost_from and len(log.segments) == 1
    assert offsets(log) == list(range(lost_from))


def test_a_compacted_segment_ending_in_a_gap_still_opens(tmp_path) -> None:
    log = open_log(tmp_path, **COMPACT)
    keys = [b"a", b"b", b"c"] * 10  # every closed segment's last record is superseded later
    for i, k in enumerate(keys):
        log.append(encode_batch([(k, b"v%d" % i, 0, [])]), leader_epoch=0)
    assert log.maybe_compact(now_ms=0)
    gaps = [
        (s.next_offset, n.base_offset)
        for s, n in zip(log.segments, log.segments[1:], strict=False)
        if s.next_offset < n.base_offset
    ]
    assert gaps, "compaction left a closed segment ending below the next one's base"
    kept = offsets(log)
    log.flush()
    _unclean_reopen(tmp_path, **COMPACT)
    reopened = open_log(tmp_path, **COMPACT)
    assert offsets(reopened) == kept and reopened.log_end_offset == 30


def test_a_truncation_into_a_compaction_gap_survives_a_crash(tmp_path) -> None:
    log = open_log(tmp_path, **COMPACT)
    for i, k in enumerate([b"a", b"b", b"c"] * 10):
        log.append(encode_batch([(k, b"v%d" % i, 0, [])]), leader_epoch=0)
    assert log.maybe_compact(now_ms=0)
    end, next_base = next(
        (s.next_offset, n.base_offset)
        for s, n in zip(log.segments, log.segments[1:], strict=False)
        if s.next_offset < n.base_offset
    )
    log.truncate_to(end + 1)  # inside the gap: the log end is not where the data ends
    assert log.log_end_offset == end + 1 < next_base
    log.flush()
    log.abandon()  # a crash: no clean-shutdown marker
    reopened = open_log(tmp_path, **COMPACT)
    assert reopened.log_end_offset == end + 1  # not taken for lost data, nor reused


def _flip(path: str, at: int, bit: int) -> None:
    """Flip bit ``bit`` of the byte at ``at``."""
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ (1 << bit)]))


def _flip_epoch(path: str, start: int, bit: int) -> None:
    _flip(path, start + LEADER_EPOCH_OFFSET, bit)


def test_a_leader_epoch_above_the_checkpoint_is_corruption(tmp_path) -> None:
    # Finding 9's reproduction: bit 2 of the epoch's first byte, 2 read as 67108866.
    log = open_log(tmp_path)
    for _ in range(5):
        log.append(batch(), leader_epoch=2)
    log.flush()
    _unclean_reopen(tmp_path)
    seg = os.path.join(tmp_path, "00000000000000000000.log")
    at = _batch_starts(seg)[2]
    _flip_epoch(seg, at, 2)
    with pytest.raises(CorruptSegmentError, match=r"epoch 67108866 .* above the latest") as e:
        open_log(tmp_path)
    assert (e.value.path, e.value.position, e.value.offset) == (seg, at, 2)


def test_a_leader_epoch_that_decreases_along_the_log_is_corruption(tmp_path) -> None:
    log = open_log(tmp_path)
    for epoch in (0, 1, 2, 2, 3):
        log.append(batch(), leader_epoch=epoch)
    log.flush()
    _unclean_reopen(tmp_path)
    seg = os.path.join(tmp_path, "00000000000000000000.log")
    at = _batch_starts(seg)[3]
    _flip_epoch(seg, at + 3, 1)  # the low byte (big-endian): epoch 2 read as 0
    with pytest.raises(CorruptSegmentError, match=r"epoch 0 .* below the epoch 2") as e:
        open_log(tmp_path)
    assert (e.value.position, e.value.offset) == (at, 3)
    # Even in the last batch, above the recovery point (never a torn write: its CRC holds).
    log = PartitionLog.open(str(tmp_path), allow_truncate_corrupt=True)
    assert log.log_end_offset == 3 and log.latest_epoch == 2


def test_epochs_are_bounded_only_by_a_checkpoint_that_was_read(tmp_path) -> None:
    # A damaged or missing leader-epoch-checkpoint is rebuilt from the headers: no bound.
    log = open_log(tmp_path)
    for epoch in (0, 1, 2):
        log.append(batch(), leader_epoch=epoch)
    log.flush()
    _unclean_reopen(tmp_path)
    os.unlink(os.path.join(tmp_path, "leader-epoch-checkpoint"))
    reopened = open_log(tmp_path)
    assert reopened.log_end_offset == 3 and reopened.latest_epoch == 2


def test_a_closed_segment_index_names_its_last_batch(tmp_path) -> None:
    log = open_log(tmp_path, **SMALL)
    for _ in range(12):
        log.append(batch(), leader_epoch=0)
    closed = log.segments[0]
    starts = _batch_starts(closed.log_path)
    assert closed.index.positions[-1] == starts[-1]
    again = Segment.open_existing(str(tmp_path), closed.base_offset, RealFileLayer())
    assert again.load_indexes(None) and again.next_offset == log.segments[1].base_offset
    again.close()


def _flip_base_offset_bit(path: str, start: int, bit: int) -> None:
    """Flip bit ``bit`` of a batch's base offset (big-endian, the header's first 8 bytes)."""
    _flip(path, start + 7 - bit // 8, bit % 8)


def test_a_base_offset_that_jumps_and_is_followed_back_is_the_damaged_batch(tmp_path) -> None:
    # The sweep run of finding 16: bit 19 of the second batch's base offset, offset 1 read as
    # 524289. Recovery blamed the third batch ("base offset 2 does not follow 524289"), kept
    # the damaged one and opened the log at 524290, which then won an unclean election.
    log = open_log(tmp_path)
    for _ in range(6):
        log.append(batch(), leader_epoch=0)
    log.flush()
    _unclean_reopen(tmp_path)
    seg = os.path.join(tmp_path, "00000000000000000000.log")
    at = _batch_starts(seg)[1]
    _flip_base_offset_bit(seg, at, 19)
    with pytest.raises(CorruptSegmentError, match=r"base offset 524289 jumps past offset 0") as e:
        open_log(tmp_path)
    assert (e.value.path, e.value.position, e.value.offset) == (seg, at, 1)
    log = PartitionLog.open(str(tmp_path), allow_truncate_corrupt=True)
    assert log.log_end_offset == 1 and offsets(log) == [0]  # refetches 1.. from its leader
    assert log.recovery.lost_end_offset == 6


def test_a_base_offset_flipped_down_is_still_blamed_on_its_own_batch(tmp_path) -> None:
    # The other direction: the damaged batch itself goes back (offset 4 read as 0).
    log = open_log(tmp_path)
    for _ in range(6):
        log.append(batch(), leader_epoch=0)
    log.flush()
    _unclean_reopen(tmp_path)
    seg = os.path.join(tmp_path, "00000000000000000000.log")
    at = _batch_starts(seg)[4]
    _flip_base_offset_bit(seg, at, 2)
    with pytest.raises(CorruptSegmentError, match=r"base offset 0 does not follow offset 3") as e:
        open_log(tmp_path)
    assert (e.value.position, e.value.offset) == (at, 4)
