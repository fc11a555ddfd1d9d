"""One segment: append, locate, read, scan with CRCs, truncate, index files."""

from __future__ import annotations

import pytest
from storage_harness import batch

from storage.batch import iter_batches, parse_header
from storage.errors import CorruptRecordError
from storage.fileio import RealFileLayer
from storage.segment import Segment, parse_segment_name, segment_name


def _segment(tmp_path, n: int = 6, interval: int = 0) -> Segment:
    seg = Segment.create(str(tmp_path), 100, RealFileLayer())
    for i in range(n):
        b = bytearray(batch(2, ts=10 * i))
        b[0:8] = (100 + 2 * i).to_bytes(8, "big")
        seg.append([bytes(b)], parse_header(b), interval)
    return seg


def test_names_are_twenty_digit_base_offsets() -> None:
    assert segment_name(42) == "00000000000000000042"
    assert parse_segment_name("00000000000000000042.log") == 42
    assert parse_segment_name("00000000000000000042.index") is None
    assert parse_segment_name("42.log") is None


def test_append_locate_and_read_whole_batches(tmp_path) -> None:
    seg = _segment(tmp_path)
    size = len(batch(2))
    assert (seg.next_offset, seg.size_bytes, seg.max_timestamp) == (112, 6 * size, 51)
    assert seg.locate(105) == (2 * size, size, 104)
    assert seg.locate(112) is None
    data = seg.read_from(2 * size, size, 2 * size, None)
    assert [h.base_offset for _, h in iter_batches(data)] == [104, 106]
    assert seg.read_from(2 * size, size, 10 * size, max_offset=108) == data


def test_scan_reports_a_crc_mismatch_with_path_and_position(tmp_path) -> None:
    seg = _segment(tmp_path)
    size = len(batch(2))
    seg.close()
    with open(seg.log_path, "r+b") as f:
        f.seek(3 * size + 65)
        f.write(b"\xff")
    seg = Segment.open_existing(str(tmp_path), 100, RealFileLayer())
    with pytest.raises(CorruptRecordError) as ei:
        list(seg.scan(0, verify=True))
    assert (ei.value.path, ei.value.position) == (seg.log_path, 3 * size)
    assert len(list(seg.scan(0, verify=False))) == 6
    headers, error = seg.recover(4096)
    assert len(headers) == 3 and error is not None and seg.size_bytes == 3 * size


def test_truncate_to_position_and_index_files_round_trip(tmp_path) -> None:
    seg = _segment(tmp_path, interval=1)
    size = len(batch(2))
    seg.truncate_to_position(4 * size, 108)
    assert (seg.next_offset, seg.size_bytes, seg.max_timestamp) == (108, 4 * size, 31)
    assert list(seg.index.offsets) == [100, 102, 104, 106]
    seg.write_indexes()
    seg.close()
    again = Segment.open_existing(str(tmp_path), 100, RealFileLayer())
    assert again.load_indexes(None)
    assert list(again.index.positions) == [0, size, 2 * size, 3 * size]
    assert (again.next_offset, again.max_timestamp) == (108, 31)
