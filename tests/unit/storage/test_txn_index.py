"""The per-segment aborted-transaction index (``.txnindex``, Kafka's ``TransactionIndex``):
its byte layout, entries written as abort markers are appended, reads across segments,
truncation, deletion with the segment, compaction, and recovery: loaded after a clean
shutdown, rebuilt after a crash, and rebuilt (and reported) when missing or corrupt."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from storage_harness import open_log

from storage.batch import encode_batch, parse_header
from storage.errors import CorruptSegmentError
from storage.fileio import LazyFileLayer
from storage.log import PartitionLog
from storage.txn import AbortedTxn, ControlMarker, encode_marker_batch
from storage.txn_index import (
    ENTRY_BYTES,
    AbortTracker,
    TxnIndexError,
    encode_entries,
    parse_entries,
)

SMALL = {"segment.bytes": "400"}


class Writer:
    """Appends as a partition leader does: the log, then the producer state's entry for
    an abort marker (here ``AbortTracker``, the same rule) to ``append_aborted_txn``."""

    def __init__(self, log: PartitionLog) -> None:
        self.log = log
        self.tracker = AbortTracker()
        self.entries: list[AbortedTxn] = []

    def data(self, pid: int = -1, n: int = 1, pad: int = 10) -> int:
        batch = encode_batch(
            [(b"k", b"v" * pad, 1000, []) for _ in range(n)],
            producer_id=pid,
            producer_epoch=0 if pid >= 0 else -1,
            base_sequence=0 if pid >= 0 else -1,
            transactional=pid >= 0,
        )
        return self._append(batch, None)

    def end(self, pid: int, commit: bool) -> int:
        marker = ControlMarker(commit, 0)
        return self._append(encode_marker_batch(pid, 0, marker, timestamp_ms=1000), marker)

    def _append(self, batch: bytes, marker: ControlMarker | None) -> int:
        base, _ = self.log.append(batch, leader_epoch=0)
        entry = self.tracker.on_batch(parse_header(batch)._replace(base_offset=base), marker)
        if entry is not None:
            self.log.append_aborted_txn(entry)
            self.entries.append(entry)
        return base


def txnindex_files(path: str) -> list[str]:
    return sorted(n for n in os.listdir(path) if n.endswith(".txnindex"))


def a_log_with_aborts_over_segments(tmp_path) -> tuple[PartitionLog, Writer]:
    """Producer 1's transaction spans three segments and aborts; 2 commits; 3 aborts at once;
    4 stays open."""
    log = open_log(tmp_path, **SMALL)
    w = Writer(log)
    w.data(pid=1)  # 0
    w.data(pid=2)  # 1
    for _ in range(6):
        w.data(pad=100)  # 2..7 (rolls)
    w.data(pid=1)  # 8
    w.end(2, commit=True)  # 9
    for _ in range(6):
        w.data(pad=100)  # 10..15
    w.data(pid=3)  # 16
    w.data(pid=4)  # 17
    w.end(1, commit=False)  # 18
    w.end(3, commit=False)  # 19
    w.data()  # 20
    assert len(log.segments) >= 3
    return log, w


def test_an_entry_is_kafkas_34_bytes() -> None:
    raw = encode_entries([AbortedTxn(7, 3, 9, 4)])
    assert len(raw) == ENTRY_BYTES == 34
    assert raw == (
        (0).to_bytes(2, "big")
        + (7).to_bytes(8, "big")
        + (3).to_bytes(8, "big")
        + (9).to_bytes(8, "big")
        + (4).to_bytes(8, "big")
    )
    assert parse_entries(raw, 0, 10) == [AbortedTxn(7, 3, 9, 4)]


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (encode_entries([AbortedTxn(7, 3, 9, 4)])[:-1], "whole number"),
        (b"\x00\x01" + encode_entries([AbortedTxn(7, 3, 9, 4)])[2:], "version"),
        (encode_entries([AbortedTxn(7, 9, 3, 4)]), "after the marker"),
        (encode_entries([AbortedTxn(7, 3, 12, 4)]), "outside the segment"),
        (encode_entries([AbortedTxn(7, 3, 9, 4), AbortedTxn(8, 3, 9, 4)]), "does not follow"),
        (encode_entries([AbortedTxn(7, 3, 9, 11)]), "past the marker"),
        (encode_entries([AbortedTxn(-7, 3, 9, 4)]), "negative"),
    ],
)
def test_a_file_that_fails_a_check_is_refused(raw: bytes, why: str) -> None:
    with pytest.raises(TxnIndexError, match=why):
        parse_entries(raw, 0, 10)


def test_entries_go_to_the_segment_of_their_marker_and_reads_cross_segments(tmp_path) -> None:
    log, w = a_log_with_aborts_over_segments(tmp_path)
    assert w.entries == [AbortedTxn(1, 0, 18, 16), AbortedTxn(3, 16, 19, 17)]
    # Producer 1's data at offset 0 is in the first segment, its marker in a later one.
    assert log.aborted_txns_in(0, 2) == [AbortedTxn(1, 0, 18, 16)]
    assert log.aborted_txns_in(10, 16) == [AbortedTxn(1, 0, 18, 16)]
    assert log.aborted_txns_in(16, 21) == w.entries
    assert log.aborted_txns_in(19, 21) == [AbortedTxn(3, 16, 19, 17)]
    assert log.aborted_txns_in(20, 21) == []
    # Closed segments keep theirs in files; only the active one's are in memory.
    assert all(s.txn_entries is None for s in log.segments[:-1])


def test_a_clean_restart_loads_the_files_and_rebuilds_nothing(tmp_path) -> None:
    log, w = a_log_with_aborts_over_segments(tmp_path)
    log.roll()  # the markers' segment closes: its entries go to its file
    w.data()
    log.close()
    again = open_log(tmp_path, **SMALL)
    assert again.recovery.clean and again.recovery.txn_indexes_rebuilt == []
    assert again.aborted_txns_in(0, again.log_end_offset) == w.entries
    # Every closed segment has its file; the active one gets one with its first entry.
    assert len(txnindex_files(str(tmp_path))) == len(again.segments) - 1


def test_after_a_kill_the_active_segments_file_is_checked_and_kept(tmp_path) -> None:
    log, w = a_log_with_aborts_over_segments(tmp_path)
    log.abandon()  # killed: what was written (not fsynced) is still in the page cache
    again = open_log(tmp_path, **SMALL)
    assert not again.recovery.clean
    assert again.recovery.txn_index_walk_segments == 0  # it names every abort marker
    assert again.aborted_txns_in(0, again.log_end_offset) == w.entries


def test_after_a_power_loss_a_lost_entry_is_rebuilt_from_the_log(tmp_path) -> None:
    files = LazyFileLayer()
    log = open_log(tmp_path, files, **SMALL)
    w = Writer(log)
    w.data(pid=1)  # 0
    for _ in range(6):
        w.data(pad=100)  # rolls
    w.data(pid=2)  # 7
    w.end(1, commit=False)  # 8: the transaction began in the first segment
    w.end(2, commit=False)  # 9
    log.flush()  # the batches are durable, the active segment's .txnindex is not
    log.abandon()
    files.crash()
    again = open_log(tmp_path, files, **SMALL)
    assert again.recovery.txn_indexes_rebuilt == []  # a crash is no damage
    assert again.recovery.txn_index_walk_segments == len(again.segments) > 1
    assert again.aborted_txns_in(0, again.log_end_offset) == w.entries
    assert [a.producer_id for a in w.entries] == [1, 2]


def test_a_log_without_transactions_never_walks_after_a_crash(tmp_path) -> None:
    files = LazyFileLayer()
    log = open_log(tmp_path, files, **SMALL)
    for _ in range(20):
        Writer(log).data(pad=100)
    log.flush()
    log.abandon()
    files.crash()
    again = open_log(tmp_path, files, **SMALL)
    assert len(again.segments) > 1 and again.recovery.txn_index_walk_segments == 0


def test_a_missing_or_corrupt_file_is_reported_rebuilt_and_never_served(tmp_path) -> None:
    log, w = a_log_with_aborts_over_segments(tmp_path)
    log.roll()
    log.close()
    holder = next(
        s for s in PartitionLog.open(str(tmp_path)).segments if s.base_offset <= 18 < s.next_offset
    )
    path = Path(holder.txnindex_path)
    good = path.read_bytes()
    assert len(good) == 2 * ENTRY_BYTES
    # A flipped bit in the producer id still parses: only the marker check catches it.
    bad = bytearray(good)
    bad[9] ^= 1
    path.write_bytes(bytes(bad))
    again = open_log(tmp_path, **SMALL)
    assert len(again.recovery.txn_indexes_rebuilt) == 1
    assert "not its marker" in again.recovery.txn_indexes_rebuilt[0]
    assert again.aborted_txns_in(0, again.log_end_offset) == w.entries
    assert path.read_bytes() == good
    again.close()
    path.unlink()
    third = open_log(tmp_path, **SMALL)
    assert [p.endswith("(missing)") for p in third.recovery.txn_indexes_rebuilt] == [True]
    assert third.aborted_txns_in(0, third.log_end_offset) == w.entries
    # Damaged after open: refused, not served.
    path.write_bytes(good[:-3])
    with pytest.raises(CorruptSegmentError, match="aborted transaction index"):
        third.aborted_txns_in(16, 21)


def test_truncation_drops_the_entries_of_the_markers_cut(tmp_path) -> None:
    log, _ = a_log_with_aborts_over_segments(tmp_path)
    log.truncate_to(19)  # producer 3's abort marker goes
    assert log.aborted_txns_in(0, log.log_end_offset) == [AbortedTxn(1, 0, 18, 16)]
    log.truncate_to(12)  # into a closed segment: producer 1's marker goes too
    assert log.aborted_txns_in(0, log.log_end_offset) == []
    log.close()
    again = open_log(tmp_path, **SMALL)
    assert again.recovery.txn_indexes_rebuilt == []
    assert again.aborted_txns_in(0, again.log_end_offset) == []


def test_a_deleted_segment_takes_its_file_along(tmp_path) -> None:
    log, w = a_log_with_aborts_over_segments(tmp_path)
    before = txnindex_files(str(tmp_path))
    log.delete_records_before(10)
    after = txnindex_files(str(tmp_path))
    assert len(after) < len(before) and set(after) <= set(before)
    assert log.aborted_txns_in(10, log.log_end_offset) == w.entries


def test_compaction_keeps_an_entry_exactly_while_it_keeps_the_marker(tmp_path) -> None:
    cfg = {"cleanup.policy": "compact", "segment.bytes": "1000", "delete.retention.ms": "1000"}
    log = open_log(tmp_path, **cfg)
    w = Writer(log)
    w.data(pid=7)  # 0: aborted
    w.end(7, commit=False)  # 1
    w.data(pid=7)  # 2: committed, producer 7's last batch
    w.end(7, commit=True)  # 3
    w.data(pid=8)  # 4: aborted, producer 8's last batch (kept empty for its state)
    w.end(8, commit=False)  # 5
    for _ in range(8):
        w.data(pad=100)
    assert log.segments[0].next_offset > 5
    first, second = w.entries
    # (Batches are stamped 1000: at 1500 they are cleanable, the markers not yet removable.)
    assert log.maybe_compact(now_ms=1_500, uncleanable_offset=log.log_end_offset)
    assert log.aborted_txns_in(0, 6) == [first, second]  # delete.retention.ms not passed
    # Then producer 7's marker goes (none of its batches is left); 8's stays (one is).
    assert log.maybe_compact(now_ms=5_000, uncleanable_offset=log.log_end_offset)
    assert log.aborted_txns_in(0, 6) == [second]
    log.close()
    again = open_log(tmp_path, **cfg)
    assert again.recovery.txn_indexes_rebuilt == []
    assert again.aborted_txns_in(0, 6) == [second]
