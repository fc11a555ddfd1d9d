"""Sparse offset and time indexes, and their file encodings."""

from __future__ import annotations

import pytest

from storage.index import IndexFormatError, OffsetIndex, TimeIndex


def test_offset_index_finds_the_last_entry_at_or_before() -> None:
    idx = OffsetIndex(100)
    for off, pos in ((100, 0), (110, 4096), (125, 8200)):
        idx.append(off, pos)
    assert [idx.lookup(o) for o in (99, 100, 109, 110, 124, 125, 10**9)] == [
        0,
        0,
        0,
        4096,
        4096,
        8200,
        8200,
    ]
    with pytest.raises(ValueError):
        idx.append(125, 9000)
    idx.truncate_from_position(4096)
    assert list(idx.offsets) == [100]


def test_offset_index_round_trips_as_relative_u32_pairs() -> None:
    idx = OffsetIndex(1 << 40)
    idx.append((1 << 40) + 0, 0)
    idx.append((1 << 40) + 7, 999)
    data = idx.to_bytes()
    assert data == bytes.fromhex("00000000 00000000 00000007 000003e7".replace(" ", ""))
    back = OffsetIndex.from_bytes(1 << 40, data, log_size_bytes=1000)
    assert list(back.offsets) == list(idx.offsets) and list(back.positions) == [0, 999]
    with pytest.raises(IndexFormatError):
        OffsetIndex.from_bytes(1 << 40, data, log_size_bytes=999)
    with pytest.raises(IndexFormatError):
        OffsetIndex.from_bytes(0, data[:-1], log_size_bytes=1000)
    with pytest.raises(IndexFormatError):
        OffsetIndex.from_bytes(0, data[8:] + data[:8], log_size_bytes=1000)


def test_time_index_lookup_skips_only_batches_entirely_older() -> None:
    t = TimeIndex(0)
    assert t.maybe_append(100, 0)
    assert not t.maybe_append(100, 5)  # timestamp must move forward
    assert t.maybe_append(300, 10)
    assert t.maybe_append(400, 20)
    assert [t.lookup(ts) for ts in (50, 100, 101, 300, 301, 401)] == [0, 0, 0, 0, 10, 20]
    back = TimeIndex.from_bytes(0, t.to_bytes())
    assert list(back.timestamps) == [100, 300, 400] and list(back.offsets) == [0, 10, 20]
    t.truncate_from_offset(10)
    assert list(t.offsets) == [0]
