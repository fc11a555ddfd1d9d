"""Fetch responses whose records go out by ``os.sendfile`` from the segment files: pure.

A Kafka client's batches are stored as it sent them (magic 2, ``storage.batch``), so a
Fetch answer can carry them as they lie on disk, as Kafka's broker does (``FileRecords``,
``transferTo``): the kernel moves them from the page cache to the socket, and they never
enter the process. Here a response is *planned*: the handler puts a ``FileRange``
(``storage.log.read_range``) where a partition's records go; ``placeholders`` swaps each for
a sentinel of 16 random bytes so kio encodes the rest as usual; ``splice`` then cuts the
encoded frame at the sentinels and gives each range its real length. The frame's size and
every records length are therefore known before the first byte is sent, and the
listener's shell (``api.kafka.server``) writes the byte parts to the transport and the
ranges with ``os.sendfile``, in order.

The records field is Kafka's ``RECORDS`` type: ``int32`` length then the bytes up to Fetch
v11, ``uvarint(length + 1)`` then the bytes from v12 (flexible versions).

Must not: do I/O (the shell sends), decode or change the bytes of a range.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from typing import Any

from storage.log import FileRange

SENTINEL_BYTES = 16
_I32 = struct.Struct(">i")
_SIZE = struct.Struct(">i")

Part = bytes | FileRange
"""A piece of a response frame: bytes to write, or a range to send from its file."""


@dataclass
class PlannedResponse:
    """A response body whose records fields hold sentinels, and the range each stands for.
    The holder closes the ranges (``close``) once sent or dropped."""

    body: Any
    ranges: dict[bytes, FileRange] = field(default_factory=dict)

    def close(self) -> None:
        for r in self.ranges.values():
            r.close()


def new_sentinel() -> bytes:
    """Random, so no topic name, message or copied record in the same frame holds it."""
    return os.urandom(SENTINEL_BYTES)


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _length_prefix(size: int, flexible: bool) -> bytes:
    return _uvarint(size + 1) if flexible else _I32.pack(size)


def splice(frame: bytes, ranges: dict[bytes, FileRange], flexible: bool) -> list[Part]:
    """``frame`` (a response frame, size prefix included, encoded with each range's
    sentinel as its records) as parts: the frame's bytes with each sentinel and its length
    prefix replaced by the range's length prefix and the range itself, and the frame's size
    prefix counting the ranges' bytes. ``ValueError`` if a sentinel is not found once,
    behind the length prefix its 16 bytes get (the frame was not encoded from them)."""
    sentinel_prefix = _length_prefix(SENTINEL_BYTES, flexible)
    at: list[tuple[int, bytes, FileRange]] = []
    for s, r in ranges.items():
        i = frame.find(s)
        if i < 0 or frame.find(s, i + 1) >= 0:
            raise ValueError("a records sentinel is missing from the frame, or there twice")
        start = i - len(sentinel_prefix)
        if frame[start:i] != sentinel_prefix:
            raise ValueError("a records sentinel is not where a records field starts")
        at.append((start, s, r))
    at.sort(key=lambda x: x[0])
    parts: list[Part] = []
    size = len(frame) - 4
    pos = 0
    for start, s, r in at:
        prefix = _length_prefix(r.size_bytes, flexible)
        parts.append(frame[pos:start] + prefix)
        parts.append(r)
        pos = start + len(sentinel_prefix) + len(s)
        size += len(prefix) + r.size_bytes - len(sentinel_prefix) - len(s)
    parts.append(frame[pos:])
    head = bytearray(parts[0])  # type: ignore[arg-type]  # the first part is bytes
    _SIZE.pack_into(head, 0, size)
    parts[0] = bytes(head)
    return [p for p in parts if not isinstance(p, bytes) or p]


def frame_size(parts: list[Part]) -> int:
    """Bytes the parts put on the wire."""
    return sum(len(p) for p in parts)
