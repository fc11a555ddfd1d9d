"""Compaction with transactions (Kafka's LogCleaner with transaction metadata): aborted records
go, an aborted record never shadows a committed one, abort markers go once their data is gone
and delete.retention.ms has passed, nothing at or above the LSO is cleaned."""

from __future__ import annotations

from storage_harness import open_log

from storage.batch import Record, decode_records, encode_batch, iter_batches
from storage.txn import ControlMarker, encode_marker_batch

COMPACT = {"cleanup.policy": "compact", "segment.bytes": "300", "delete.retention.ms": "1000"}


def _put(log, k: bytes, v: bytes, *, pid: int = -1, seq: int = -1, ts: int = 0) -> int:
    base, _ = log.append(
        encode_batch(
            [(k, v, ts, [])],
            producer_id=pid,
            producer_epoch=0 if pid >= 0 else -1,
            base_sequence=seq,
            transactional=pid >= 0,
        ),
        leader_epoch=0,
    )
    return base


def _end(log, pid: int, commit: bool, ts: int = 0) -> int:
    base, _ = log.append(
        encode_marker_batch(pid, 0, ControlMarker(commit, 0), timestamp_ms=ts), leader_epoch=0
    )
    return base


def _scan(log) -> tuple[list[Record], list[int]]:
    """Data records, and the offsets of control batches."""
    recs: list[Record] = []
    controls: list[int] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).data
        for pos, h in iter_batches(data):
            if h.is_control:
                controls.append(h.base_offset)
            else:
                recs += decode_records(data[pos : pos + h.size])
            offset = h.next_offset
    return recs, controls


def _roll(log, n: int = 6) -> None:
    for i in range(n):
        _put(log, b"pad%d" % i, b"x" * 200)


def test_aborted_records_go_and_never_shadow_committed_ones(tmp_path) -> None:
    log = open_log(tmp_path, **COMPACT)
    _put(log, b"k", b"committed")  # 0
    _put(log, b"k", b"aborted", pid=7, seq=0)  # 1
    _put(log, b"j", b"aborted", pid=7, seq=1)  # 2
    abort_at = _end(log, 7, commit=False)  # 3
    _put(log, b"m", b"old")  # 4
    _put(log, b"m", b"txn", pid=8, seq=0)  # 5
    _end(log, 8, commit=True)  # 6
    _roll(log)
    assert log.maybe_compact(now_ms=0, uncleanable_offset=log.log_end_offset)
    recs, controls = _scan(log)
    kv = [(r.key, r.value) for r in recs if not r.key.startswith(b"pad")]
    assert kv == [(b"k", b"committed"), (b"m", b"txn")]
    assert abort_at in controls  # delete.retention.ms has not passed
    # The producer's last batch stays, empty, for its producer state.
    data = log.read(2, 1 << 20).data
    first = next(h for _, h in iter_batches(data))
    assert (first.base_offset, first.record_count, first.producer_id) == (2, 0, 7)
    # Later: the marker goes... but not while a batch of its transaction is left.
    log.maybe_compact(now_ms=10_000, uncleanable_offset=log.log_end_offset)
    assert abort_at in _scan(log)[1]


def test_abort_marker_goes_once_its_data_is_gone_and_delete_retention_passed(tmp_path) -> None:
    log = open_log(tmp_path, **COMPACT)
    _put(log, b"a", b"1", pid=7, seq=0)  # 0 aborted
    abort_at = _end(log, 7, commit=False, ts=0)  # 1
    _put(log, b"a", b"2", pid=7, seq=1)  # 2: the producer's last batch, committed
    _end(log, 7, commit=True)  # 3
    _roll(log)
    assert log.maybe_compact(now_ms=0, uncleanable_offset=log.log_end_offset)
    assert abort_at in _scan(log)[1]
    assert log.maybe_compact(now_ms=5_000, uncleanable_offset=log.log_end_offset)
    recs, controls = _scan(log)
    assert abort_at not in controls
    assert [(r.key, r.value) for r in recs if r.key == b"a"] == [(b"a", b"2")]


def test_nothing_at_or_above_the_lso_is_cleaned(tmp_path) -> None:
    log = open_log(tmp_path, **COMPACT)
    _put(log, b"k", b"1")  # 0
    _put(log, b"k", b"2", pid=7, seq=0)  # 1: open transaction
    _roll(log)
    _put(log, b"k", b"3")
    assert not log.maybe_compact(now_ms=0, uncleanable_offset=1)
    assert [r.value for r in _scan(log)[0] if r.key == b"k"] == [b"1", b"2", b"3"]


def test_a_transaction_whose_marker_is_beyond_the_range_is_copied_as_is(tmp_path) -> None:
    log = open_log(tmp_path, **COMPACT)
    _put(log, b"k", b"1")  # 0
    _put(log, b"k", b"2", pid=7, seq=0)  # 1
    _put(log, b"k", b"3")  # 2: shadows 0 but not the undecided 1
    _roll(log)
    marker = _end(log, 7, commit=False)
    assert log.active_segment.base_offset <= marker  # not in the cleaned range
    assert log.maybe_compact(now_ms=0, uncleanable_offset=log.log_end_offset)
    assert [r.value for r in _scan(log)[0] if r.key == b"k"] == [b"2", b"3"]
