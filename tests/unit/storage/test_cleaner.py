"""Compaction: latest per key, tombstones, keyless records, offsets kept, atomic swap."""

from __future__ import annotations

import os

from storage_harness import open_log, read_all

from storage.batch import encode_batch
from storage.fileio import LazyFileLayer

COMPACT = {"cleanup.policy": "compact", "segment.bytes": "400", "delete.retention.ms": "1000"}


def _fill(log, items: list[tuple[bytes | None, bytes | None]], ts: int = 0) -> None:
    for k, v in items:
        log.append(encode_batch([(k, v, ts, [])]), leader_epoch=0)


def test_compaction_keeps_the_latest_record_of_each_key_with_its_offset(tmp_path) -> None:
    log = open_log(tmp_path, **COMPACT)
    items = [(b"k%d" % (i % 3), b"v%d" % i) for i in range(30)]
    _fill(log, items)
    closed_end = log.active_segment.base_offset
    assert log.maybe_compact(now_ms=0)
    recs = read_all(log, 0)
    latest = {}
    for off, (k, _) in enumerate(items[:closed_end]):
        latest[k] = off
    expect = sorted(latest.values()) + list(range(closed_end, 30))
    assert [r.offset for r in recs] == expect
    assert all(r.value == b"v%d" % r.offset for r in recs)
    assert log.log_end_offset == 30
    assert not log.maybe_compact(now_ms=0)  # nothing more to do


def test_tombstones_stay_until_delete_retention_then_go(tmp_path) -> None:
    log = open_log(tmp_path, **COMPACT)
    _fill(log, [(b"a", b"1"), (b"b", b"1"), (b"a", None)], ts=5000)
    _fill(log, [(b"c", b"x" * 300)] * 3, ts=5000)  # push them into closed segments
    assert log.maybe_compact(now_ms=5000)
    assert [(r.key, r.value) for r in read_all(log, 0)][:2] == [(b"b", b"1"), (b"a", None)]
    assert log.maybe_compact(now_ms=7000)  # tombstone older than delete.retention.ms
    assert (b"a", None) not in [(r.key, r.value) for r in read_all(log, 0)]


def test_records_without_a_key_are_kept(tmp_path) -> None:
    log = open_log(tmp_path, **COMPACT)
    _fill(log, [(None, b"n1"), (b"a", b"1"), (None, b"n2"), (b"a", b"2")] * 5)
    assert log.maybe_compact(now_ms=0)
    values = [r.value for r in read_all(log, 0)]
    assert values.count(b"n1") == 5 and values.count(b"n2") == 5


def test_min_compaction_lag_protects_recent_segments(tmp_path) -> None:
    log = open_log(tmp_path, **{**COMPACT, "min.compaction.lag.ms": "1000"})
    _fill(log, [(b"a", b"%d" % i) for i in range(20)], ts=10_000)
    assert not log.maybe_compact(now_ms=10_500)
    assert log.maybe_compact(now_ms=11_000)


def test_a_reader_holding_the_old_segment_keeps_reading(tmp_path) -> None:
    log = open_log(tmp_path, LazyFileLayer(), **COMPACT)
    _fill(log, [(b"a", b"%d" % i) for i in range(20)])
    old = log.segments[0]
    before = old.log.pread(old.size_bytes, 0)
    assert log.maybe_compact(now_ms=0)
    assert old.retired and old.log.pread(old.size_bytes, 0) == before
    assert log.segments[0] is not old


def test_compacted_log_reopens_and_leftover_cleaned_files_are_removed(tmp_path) -> None:
    log = open_log(tmp_path, **COMPACT)
    _fill(log, [(b"k%d" % (i % 2), b"%d" % i) for i in range(20)])
    log.maybe_compact(now_ms=0)
    expect = [(r.offset, r.value) for r in read_all(log, 0)]
    log.abandon()
    (tmp_path / "00000000000000000000.log.cleaned").write_bytes(b"half a compaction")
    log = open_log(tmp_path, **COMPACT)
    assert [(r.offset, r.value) for r in read_all(log, 0)] == expect
    assert not any(n.endswith(".cleaned") for n in os.listdir(tmp_path))


def test_compact_delete_does_both(tmp_path) -> None:
    log = open_log(
        tmp_path, **{**COMPACT, "cleanup.policy": "compact,delete", "retention.ms": "100"}
    )
    _fill(log, [(b"a", b"%d" % i) for i in range(20)], ts=0)
    assert log.maybe_compact(now_ms=50)
    assert log.maybe_apply_retention(now_ms=1000)
    assert len(log.segments) == 1


def test_compaction_in_a_thread_never_blocks_appends_or_reads(tmp_path) -> None:
    import threading

    log = open_log(tmp_path, LazyFileLayer(), **COMPACT)
    _fill(log, [(b"k%d" % (i % 5), b"%d" % i) for i in range(300)])
    results = []
    t = threading.Thread(target=lambda: results.append(log.maybe_compact(now_ms=0)))
    t.start()
    appended = 0
    while t.is_alive() or appended < 50:
        _fill(log, [(b"live", b"%d" % appended)])
        appended += 1
        recs = read_all(log, 0)
        assert [r.offset for r in recs] == sorted(r.offset for r in recs)
        assert recs[-1].offset == log.log_end_offset - 1
    t.join()
    assert results == [True]
    vals = {r.key: r.value for r in read_all(log, 0)}
    assert vals[b"live"] == b"%d" % (appended - 1)
    assert vals[b"k4"] == b"299"
