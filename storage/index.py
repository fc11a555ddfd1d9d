"""Sparse offset and time indexes of one segment, in memory, with their file encodings.

Offset index (``.index``): one entry per ``index.interval.bytes`` of log, 8 bytes each,
big-endian ``relative_offset: u32`` (batch base offset minus the segment's base offset) and
``position: u32`` (byte position of that batch in the ``.log``). Time index
(``.timeindex``): 12 bytes each, ``timestamp: i64`` (the largest batch max timestamp in the
segment so far) and ``relative_offset: u32`` of the batch at which it was recorded. These
are Kafka's layouts. Both indexes are kept in memory (arrays) and written whole when a
segment is closed or rolled; a segment whose index files are missing or fail the checks
below is re-indexed from its ``.log``.

Pure: no I/O.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_right

OFFSET_ENTRY = struct.Struct(">II")
TIME_ENTRY = struct.Struct(">qI")
OFFSET_ENTRY_SIZE = OFFSET_ENTRY.size  # 8
TIME_ENTRY_SIZE = TIME_ENTRY.size  # 12


class IndexFormatError(ValueError):
    """An index file that cannot describe its segment: rebuild it from the log."""


class OffsetIndex:
    """Absolute batch base offset -> file position, sparse and increasing in both.

    Invariant: ``offsets`` and ``positions`` are strictly increasing and of equal length.
    """

    __slots__ = ("base_offset", "offsets", "positions")

    def __init__(self, base_offset: int):
        self.base_offset = base_offset
        self.offsets = array("q")
        self.positions = array("q")

    def __len__(self) -> int:
        return len(self.offsets)

    def append(self, offset: int, position: int) -> None:
        if self.offsets and (offset <= self.offsets[-1] or position <= self.positions[-1]):
            raise ValueError(f"index entry ({offset}, {position}) does not increase")
        self.offsets.append(offset)
        self.positions.append(position)

    def lookup(self, offset: int) -> int:
        """Position of the last indexed batch starting at or before ``offset`` (else 0)."""
        i = bisect_right(self.offsets, offset)
        return self.positions[i - 1] if i else 0

    def truncate_from_position(self, position: int) -> None:
        """Drop entries for batches at ``position`` and after."""
        i = bisect_right(self.positions, position - 1)
        del self.offsets[i:]
        del self.positions[i:]

    def to_bytes(self) -> bytes:
        out = bytearray(len(self.offsets) * OFFSET_ENTRY_SIZE)
        base = self.base_offset
        for i, (o, p) in enumerate(zip(self.offsets, self.positions, strict=True)):
            OFFSET_ENTRY.pack_into(out, i * OFFSET_ENTRY_SIZE, o - base, p)
        return bytes(out)

    @classmethod
    def from_bytes(cls, base_offset: int, data: bytes, log_size_bytes: int) -> OffsetIndex:
        """Parse and check an index file against its log's size."""
        if len(data) % OFFSET_ENTRY_SIZE:
            raise IndexFormatError(f"offset index of {len(data)} bytes is not whole entries")
        idx = cls(base_offset)
        for rel, pos in OFFSET_ENTRY.iter_unpack(data):
            if pos >= log_size_bytes:
                raise IndexFormatError(f"position {pos} beyond the log's {log_size_bytes} bytes")
            try:
                idx.append(base_offset + rel, pos)
            except ValueError as e:
                raise IndexFormatError(str(e)) from None
        return idx


class TimeIndex:
    """Largest timestamp so far -> base offset of the batch where it was recorded.

    Invariant: ``timestamps`` never decrease and ``offsets`` strictly increase.
    """

    __slots__ = ("base_offset", "offsets", "timestamps")

    def __init__(self, base_offset: int):
        self.base_offset = base_offset
        self.timestamps = array("q")
        self.offsets = array("q")

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def last_timestamp(self) -> int:
        return self.timestamps[-1] if self.timestamps else -1

    def maybe_append(self, timestamp: int, offset: int) -> bool:
        """Record ``(timestamp, offset)`` if it moves the timestamp forward."""
        if self.timestamps and (timestamp <= self.timestamps[-1] or offset <= self.offsets[-1]):
            return False
        self.timestamps.append(timestamp)
        self.offsets.append(offset)
        return True

    def lookup(self, timestamp: int) -> int:
        """An offset to start scanning from for the first batch whose max timestamp is at
        least ``timestamp``: every batch before it has a smaller max timestamp."""
        i = bisect_right(self.timestamps, timestamp - 1)
        return self.offsets[i - 1] if i else self.base_offset

    def truncate_from_offset(self, offset: int) -> None:
        i = bisect_right(self.offsets, offset - 1)
        del self.offsets[i:]
        del self.timestamps[i:]

    def to_bytes(self) -> bytes:
        out = bytearray(len(self.offsets) * TIME_ENTRY_SIZE)
        base = self.base_offset
        for i, (t, o) in enumerate(zip(self.timestamps, self.offsets, strict=True)):
            TIME_ENTRY.pack_into(out, i * TIME_ENTRY_SIZE, t, o - base)
        return bytes(out)

    @classmethod
    def from_bytes(cls, base_offset: int, data: bytes) -> TimeIndex:
        if len(data) % TIME_ENTRY_SIZE:
            raise IndexFormatError(f"time index of {len(data)} bytes is not whole entries")
        idx = cls(base_offset)
        for ts, rel in TIME_ENTRY.iter_unpack(data):
            if not idx.maybe_append(ts, base_offset + rel):
                raise IndexFormatError(f"time index entry ({ts}, {rel}) does not increase")
        return idx
