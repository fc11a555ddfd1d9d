"""Kafka's record encoding (record batch v2, magic 2): the body of a Kafka client's batch.

A Kafka batch shares the 61-byte header with Longboat's own (``storage.batch``); only the
body differs. Each record is (Kafka ``docs/implementation.html`` §5.3, ``DefaultRecord``)::

    length          varint   bytes of the rest of the record
    attributes      int8     unused (0)
    timestampDelta  varlong  from the batch's base (first) timestamp
    offsetDelta     varint   from the batch's base offset
    keyLength       varint   -1 for a null key
    key             bytes
    valueLength     varint   -1 for a null value
    value           bytes
    headerCount     varint
    headers         [keyLength varint, key (UTF-8), valueLength varint (-1 null), value]

Every varint is zig-zag encoded (``ByteUtils.writeVarint``), the count too. The records
follow one another, compressed as one block when the batch's codec says so.

``decode_rows`` yields the same row shape as a msgpack body (``[offset_delta,
timestamp_delta, key, value, headers]``, headers ``[[name, value], ...]``), so every reader
past ``storage.batch.decode_body`` handles both encodings alike. ``encode_rows`` is its
inverse, for compaction (which rewrites a Kafka batch as a Kafka batch) and for the Kafka
fetch path (which serves Longboat's msgpack batches to Kafka clients as magic 2).

Pure: no I/O, no clock, no global random.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from storage.errors import CorruptRecordError

MAGIC_KAFKA = 2
"""Kafka's record batch v2. Magics 0 and 1 (message sets) are not read: Kafka 4 dropped them
too, and every client that speaks Produce v3+ writes magic 2."""

_VARINT_BITS_MAX = 64


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """A zig-zag varint (or varlong) at ``pos``: ``(value, next_pos)``."""
    b = buf[pos]
    pos += 1
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos
    result = b & 0x7F
    shift = 7
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift >= _VARINT_BITS_MAX:
            raise CorruptRecordError(f"varint longer than {_VARINT_BITS_MAX} bits at {pos}")


def decode_rows(raw: bytes, record_count: int) -> list[list[Any]]:
    """The records of an uncompressed Kafka body as rows ``[offset_delta, timestamp_delta,
    key, value, headers]``; ``CorruptRecordError`` if the bytes do not hold exactly
    ``record_count`` well-formed records."""
    rows: list[list[Any]] = []
    pos = 0
    end = len(raw)
    rv = _read_varint
    try:
        for _ in range(record_count):
            length, pos = rv(raw, pos)
            stop = pos + length
            if length < 6 or stop > end:  # 6: the smallest record (attributes + 5 varints)
                raise CorruptRecordError(f"record length {length} at {pos} runs past the body")
            pos += 1  # attributes: unused in v2
            td, pos = rv(raw, pos)
            od, pos = rv(raw, pos)
            n, pos = rv(raw, pos)
            key = None if n < 0 else raw[pos : pos + n]
            pos += max(n, 0)
            n, pos = rv(raw, pos)
            value = None if n < 0 else raw[pos : pos + n]
            pos += max(n, 0)
            nh, pos = rv(raw, pos)
            headers: list[list[Any]] = []
            for _h in range(nh):
                n, pos = rv(raw, pos)
                if n < 0:
                    raise CorruptRecordError("a record header has a null key")
                # Kafka's clients decode header keys as UTF-8 (Java's String); "replace"
                # so one bad key cannot make a whole partition unreadable.
                name = raw[pos : pos + n].decode("utf-8", "replace")
                pos += n
                n, pos = rv(raw, pos)
                hv = None if n < 0 else raw[pos : pos + n]
                pos += max(n, 0)
                headers.append([name, hv])
            if pos != stop:
                raise CorruptRecordError(
                    f"record declares {length} bytes but its fields end {pos - stop:+d} away"
                )
            rows.append([od, td, key, value, headers])
    except IndexError:
        raise CorruptRecordError("a record runs past the end of the body") from None
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes after the last of {record_count} records")
    return rows


def _varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    if z < 0x80:
        return _SMALL[z]
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


_SMALL = [bytes((i,)) for i in range(0x80)]


def _field(b: bytes | None) -> bytes:
    if b is None:
        return b"\x01"  # zig-zag -1
    return _varint(len(b)) + b


def encode_rows(rows: Iterable[Sequence[Any]]) -> bytes:
    """Kafka record bytes for rows ``(offset_delta, timestamp_delta, key, value, headers)``,
    headers ``[(name: str, value: bytes | None), ...]``; uncompressed."""
    out: list[bytes] = []
    for od, td, key, value, headers in rows:
        parts = [
            b"\x00",
            _varint(td),
            _varint(od),
            _field(key),
            _field(value),
            _varint(len(headers)),
        ]
        for name, hv in headers:
            parts.append(_field(name.encode()))
            parts.append(_field(hv))
        body = b"".join(parts)
        out.append(_varint(len(body)))
        out.append(body)
    return b"".join(out)
