"""The record batch: Longboat's unit of produce, append, replication, fetch and indexing.

Layout (big-endian; byte-by-byte in docs/storage-format.md). The fixed 61-byte header is
Kafka's record batch v2 header; the magic byte names the body encoding: ours is a msgpack
body (``MAGIC_MSGPACK``), and a Kafka client's batch (``MAGIC_KAFKA``, 2) keeps Kafka's
varint records (``storage.kafka_records``), stored as it arrived. Both live side by side in
one log; ``decode_body`` gives the same rows for both::

    off  size  field
      0     8  base_offset         set by the leader at append; outside the CRC
      8     4  batch_length        bytes after this field
     12     4  leader_epoch        set by the leader at append; outside the CRC
     16     1  magic               MAGIC_MSGPACK or MAGIC_KAFKA
     17     4  crc                 CRC-32C of bytes [21, end)
     21     2  attributes          bits 0-2 codec, bit 3 LogAppendTime (Kafka's),
                                   bit 4 transactional, bit 5 control
     23     4  last_offset_delta
     27     8  first_timestamp     ms
     35     8  max_timestamp       ms
     43     8  producer_id         -1 if none
     51     2  producer_epoch      -1 if none
     53     4  base_sequence       -1 if none
     57     4  record_count
     61     *  body                msgpack array of records, compressed as one block
                                   (magic 2: Kafka's varint records, compressed as Kafka's
                                   clients compress them)

    record = [offset_delta, timestamp_delta, key, value, headers]
    headers = [[name: str, value: bytes | nil], ...]

Because ``base_offset`` and ``leader_epoch`` sit outside the CRC, a leader stores a batch
verbatim and patches those two fields in place (``stamp``); followers and the fetch path
move batches as opaque bytes and never decode records.

Pure: no I/O, no clock, no global random.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from itertools import chain
from typing import Any, NamedTuple

import crc32c
import msgpack

from storage.compression import CODEC_MASK, Compression, compress, decompress
from storage.errors import CorruptRecordError
from storage.kafka_records import MAGIC_KAFKA, decode_rows, encode_rows

MAGIC_MSGPACK = 0x4C
"""'L'. Distinct from Kafka's magics 0-2 so a Kafka batch is never mistaken for ours."""
MAGICS = (MAGIC_MSGPACK, MAGIC_KAFKA)
"""The body encodings a log may hold, side by side."""

HEADER = struct.Struct(">qiiBIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # base_offset + batch_length: the prefix needed to find the next batch
BATCH_LENGTH_OFFSET = 8
LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
PRODUCER_ID_OFFSET = 43
_PREFIX = struct.Struct(">qi")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")

ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20

MAX_BATCH_BYTES = 1 << 30
"""Hard sanity bound on batch_length: anything larger is a corrupt length field."""

Header = tuple[str, bytes | None]


class Record(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes of the whole batch, header included."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & CODEC_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


def encode_batch(
    records: Sequence[tuple[bytes | None, bytes | None, int, Sequence[Header]]],
    *,
    base_offset: int = 0,
    leader_epoch: int = -1,
    compression: Compression = Compression.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
    magic: int = MAGIC_MSGPACK,
) -> bytes:
    """Build a batch from ``(key, value, timestamp_ms, headers)`` tuples, offsets 0..n-1;
    ``magic=MAGIC_KAFKA`` for Kafka's record encoding."""
    if not records:
        raise ValueError("a batch holds at least one record")
    # The one per-record pass there must be (per-record Python work is the cost: a loop
    # that touches each record runs at ~4 M records/s at best). Tuples pack as msgpack
    # arrays, byte for byte as lists, and build faster.
    stamps = [r[2] for r in records]
    first_ts = min(stamps)
    body = [
        (i, ts - first_ts, k, v, [list(h) for h in hs] if hs else ())
        for i, ((k, v, _, hs), ts) in enumerate(zip(records, stamps, strict=True))
    ]
    return _assemble(
        body,
        base_offset=base_offset,
        leader_epoch=leader_epoch,
        compression=compression,
        last_offset_delta=len(records) - 1,
        first_timestamp=first_ts,
        max_timestamp=max(stamps),
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        transactional=transactional,
        control=control,
        magic=magic,
    )


def rebuild_batch(header: BatchHeader, records: Sequence[Record]) -> bytes:
    """A batch holding a subset of ``header``'s records, as compaction writes them.

    Keeps base offset, last offset delta, leader epoch, producer id/epoch/sequence and codec,
    so offsets and idempotent-producer state survive compaction (as in Kafka, where a
    compacted batch keeps its last offset delta even when its last record is gone).
    ``records`` may be empty: the batch is kept for its producer state. The body keeps the
    batch's encoding (a Kafka client's batch stays one).
    """
    base = header.base_offset
    if records:
        first_ts = min(r.timestamp for r in records)
        max_ts = max(r.timestamp for r in records)
    else:
        first_ts = max_ts = header.max_timestamp
    body = [
        [r.offset - base, r.timestamp - first_ts, r.key, r.value, [list(h) for h in r.headers]]
        for r in records
    ]
    return _assemble(
        body,
        base_offset=base,
        leader_epoch=header.leader_epoch,
        compression=header.compression,
        last_offset_delta=header.last_offset_delta,
        first_timestamp=first_ts,
        max_timestamp=max_ts,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        transactional=header.is_transactional,
        control=header.is_control,
        magic=header.magic,
    )


def as_kafka_batch(batch: bytes | bytearray | memoryview) -> bytes:
    """``batch`` as a Kafka client can read it: a Kafka batch as it is; a msgpack batch
    re-encoded as magic 2 with the same header fields (offsets, epoch, producer state,
    timestamps, codec, flags), so a Kafka consumer sees the same records at the same offsets.
    The CRC is not checked here (the log checked it on append)."""
    h = parse_header(batch)
    if h.magic == MAGIC_KAFKA:
        return bytes(batch)
    _, rows = decode_body(batch, verify=False)
    return _assemble_packed(
        encode_rows(rows),
        h.record_count,
        base_offset=h.base_offset,
        leader_epoch=h.leader_epoch,
        compression=h.compression,
        last_offset_delta=h.last_offset_delta,
        first_timestamp=h.first_timestamp,
        max_timestamp=h.max_timestamp,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
        transactional=h.is_transactional,
        control=h.is_control,
        magic=MAGIC_KAFKA,
    )


class _BinHeaders(dict[int, bytes]):
    """msgpack ``bin`` headers by length, made on first use of each length."""

    def __missing__(self, n: int) -> bytes:
        if n < 256:
            h = b"\xc4" + bytes((n,))
        elif n < 65536:
            h = b"\xc5" + n.to_bytes(2, "big")
        else:
            h = b"\xc6" + n.to_bytes(4, "big")
        self[n] = h
        return h


_BIN_HEADERS = _BinHeaders()
_ROW_STARTS: list[bytes] = []
"""For row ``i``: the previous row's end (its empty headers array, ``fixarray(0)``; none
for row 0), then ``fixarray(5)`` and the packed offset delta ``i``. Grown on demand."""
_KEYLESS_ROW_STARTS: list[bytes] = []
"""``_ROW_STARTS[i]`` + timestamp delta 0 + nil key: a keyless row is this, then its value's
``bin`` header and bytes (three pieces to join a record, not five)."""


def _array_header(n: int) -> bytes:
    if n < 16:
        return bytes((0x90 | n,))
    if n < 65536:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def encode_values(
    values: Sequence[bytes],
    *,
    timestamp: int,
    keys: Sequence[bytes | None] | None = None,
    base_offset: int = 0,
    leader_epoch: int = -1,
    compression: Compression = Compression.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
) -> bytes:
    """``encode_batch`` for the bulk case: non-null values, one timestamp, no headers.

    Byte for byte the batch ``encode_batch`` builds from ``(key, value, timestamp, ())``
    tuples, but the msgpack body is joined from pre-packed pieces by C-level iterators
    (``map``/``zip``/``join``), with no Python tuple or call per record: the producer's bulk
    path (``send_batch``) encodes several times faster this way.
    """
    n = len(values)
    if n == 0:
        raise ValueError("a batch holds at least one record")
    if keys is not None and len(keys) != n:
        raise ValueError("keys and values differ in length")
    if len(_ROW_STARTS) < n:
        fresh = [
            (b"\x90" if i else b"") + b"\x95" + msgpack.packb(i) for i in range(len(_ROW_STARTS), n)
        ]
        _ROW_STARTS.extend(fresh)
        _KEYLESS_ROW_STARTS.extend(r + b"\x00\xc0" for r in fresh)
    vhdrs = map(_BIN_HEADERS.__getitem__, map(len, values))
    # row: fixarray(5), offset delta, timestamp delta 0, key, bin value, [] headers
    parts: Iterator[tuple[bytes, ...]]
    if keys is None:
        parts = zip(_KEYLESS_ROW_STARTS, vhdrs, values, strict=False)  # tables run longer
    else:
        khdrs = (b"\x00\xc0" if k is None else b"\x00" + _BIN_HEADERS[len(k)] for k in keys)
        kbytes = (b"" if k is None else k for k in keys)
        parts = zip(_ROW_STARTS, khdrs, kbytes, vhdrs, values, strict=False)
    raw = _array_header(n) + b"".join(chain.from_iterable(parts)) + b"\x90"
    return _assemble_packed(
        raw,
        n,
        base_offset=base_offset,
        leader_epoch=leader_epoch,
        compression=compression,
        last_offset_delta=n - 1,
        first_timestamp=timestamp,
        max_timestamp=timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        transactional=transactional,
        control=False,
    )


def _assemble(
    body_records: Sequence[Sequence[object]],
    *,
    base_offset: int,
    leader_epoch: int,
    compression: Compression,
    last_offset_delta: int,
    first_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    transactional: bool,
    control: bool,
    magic: int = MAGIC_MSGPACK,
) -> bytes:
    raw = (
        encode_rows(body_records)
        if magic == MAGIC_KAFKA
        else msgpack.packb(body_records, use_bin_type=True)
    )
    return _assemble_packed(
        raw,
        len(body_records),
        base_offset=base_offset,
        leader_epoch=leader_epoch,
        compression=compression,
        last_offset_delta=last_offset_delta,
        first_timestamp=first_timestamp,
        max_timestamp=max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        transactional=transactional,
        control=control,
        magic=magic,
    )


def _assemble_packed(
    raw_body: bytes,
    record_count: int,
    *,
    base_offset: int,
    leader_epoch: int,
    compression: Compression,
    last_offset_delta: int,
    first_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    transactional: bool,
    control: bool,
    magic: int = MAGIC_MSGPACK,
) -> bytes:
    body = compress(compression, raw_body, kafka=magic == MAGIC_KAFKA)
    attributes = int(compression) & CODEC_MASK
    if transactional:
        attributes |= ATTR_TRANSACTIONAL
    if control:
        attributes |= ATTR_CONTROL
    head = bytearray(HEADER_SIZE)
    HEADER.pack_into(
        head,
        0,
        base_offset,
        HEADER_SIZE + len(body) - LOG_OVERHEAD,
        leader_epoch,
        magic,
        0,
        attributes,
        last_offset_delta,
        first_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        record_count,
    )
    # CRC over header tail then body, continued, so the body is copied once (the concat).
    crc = crc32c.crc32c(body, crc32c.crc32c(memoryview(head)[ATTRIBUTES_OFFSET:]))
    _U32.pack_into(head, CRC_OFFSET, crc)
    return bytes(head) + body


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """The header of the batch at ``pos``; checks shape, not the CRC.

    Raises ``CorruptRecordError`` for a short buffer, a bad magic or impossible fields.
    """
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError(f"need {HEADER_SIZE} header bytes, have {len(buf) - pos}")
    h = BatchHeader._make(HEADER.unpack_from(buf, pos))
    if h.magic != MAGIC_MSGPACK and h.magic != MAGIC_KAFKA:
        raise CorruptRecordError(f"unknown magic {h.magic:#x}")
    if not (HEADER_SIZE - LOG_OVERHEAD <= h.batch_length <= MAX_BATCH_BYTES):
        raise CorruptRecordError(f"impossible batch_length {h.batch_length}")
    if h.base_offset < 0 or h.last_offset_delta < 0 or h.record_count < 0:
        raise CorruptRecordError(
            f"negative base_offset/last_offset_delta/record_count in {tuple(h)[:13]}"
        )
    if h.record_count > h.last_offset_delta + 1:
        raise CorruptRecordError(
            f"record_count {h.record_count} exceeds last_offset_delta+1 {h.last_offset_delta + 1}"
        )
    if h.attributes & CODEC_MASK > Compression.ZSTD:
        raise CorruptRecordError(f"unknown compression codec {h.attributes & CODEC_MASK}")
    return h


def peek_prefix(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """``(base_offset, batch_size)`` from the first 12 bytes, to walk a buffer quickly."""
    base_offset, length = _PREFIX.unpack_from(buf, pos)
    return base_offset, length + LOG_OVERHEAD


def compute_crc(batch: bytes | bytearray | memoryview) -> int:
    return crc32c.crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:])


def verify_batch(batch: bytes | bytearray | memoryview) -> BatchHeader:
    """Header of a whole batch after checking its length and CRC, else ``CorruptRecordError``."""
    h = parse_header(batch)
    if len(batch) != h.size:
        raise CorruptRecordError(f"batch is {len(batch)} bytes, header says {h.size}")
    actual = compute_crc(batch)
    if actual != h.crc:
        raise CorruptRecordError(f"crc mismatch: stored {h.crc:#010x}, computed {actual:#010x}")
    return h


def iter_batches(
    buf: bytes | bytearray | memoryview, *, verify: bool = True
) -> Iterator[tuple[int, BatchHeader]]:
    """``(position, header)`` for each whole batch in ``buf``, a concatenation of batches.

    Stops silently at an incomplete tail (a short read or a torn write); raises
    ``CorruptRecordError`` (with ``position``) for a corrupt batch, CRC included when
    ``verify``.
    """
    mv = memoryview(buf)
    pos = 0
    end = len(mv)
    while end - pos >= HEADER_SIZE:
        try:
            h = parse_header(mv, pos)
        except CorruptRecordError as e:
            raise CorruptRecordError(e.reason, position=pos) from None
        if pos + h.size > end:
            return
        if verify:
            actual = compute_crc(mv[pos : pos + h.size])
            if actual != h.crc:
                raise CorruptRecordError(
                    f"crc mismatch: stored {h.crc:#010x}, computed {actual:#010x}", position=pos
                )
        yield pos, h
        pos += h.size


def decode_body(
    batch: bytes | bytearray | memoryview, *, verify: bool = True
) -> tuple[BatchHeader, list[list[Any]]]:
    """The header and the raw record rows ``[offset_delta, timestamp_delta, key, value,
    headers]`` of one whole batch: for readers that build their own record objects without
    an intermediate ``Record`` per record (the client's consumer, the Arrow converter).
    Both encodings give the same rows; a Kafka batch's headers are ``[name, value]`` lists
    as msgpack's are, and with LogAppendTime every record has the batch's max timestamp."""
    h = verify_batch(batch) if verify else parse_header(batch)
    if h.magic == MAGIC_KAFKA:
        raw = decompress(h.compression, memoryview(batch)[HEADER_SIZE : h.size], kafka=True)
        rows = decode_rows(raw, h.record_count)
        if h.attributes & ATTR_LOG_APPEND_TIME:
            td = h.max_timestamp - h.first_timestamp
            for row in rows:
                row[1] = td
        return h, rows
    raw = decompress(h.compression, memoryview(batch)[HEADER_SIZE : h.size])
    try:
        body = msgpack.unpackb(raw, use_list=True, raw=False)
    except Exception as e:
        raise CorruptRecordError(f"body does not decode as msgpack: {e}") from e
    if not isinstance(body, list) or len(body) != h.record_count:
        raise CorruptRecordError(
            f"body holds {len(body) if isinstance(body, list) else type(body).__name__} "
            f"records, header says {h.record_count}"
        )
    return h, body


def decode_records(batch: bytes | bytearray | memoryview, *, verify: bool = True) -> list[Record]:
    """The records of one whole batch, with absolute offsets and timestamps."""
    h, body = decode_body(batch, verify=verify)
    base = h.base_offset
    ts0 = h.first_timestamp
    try:
        # map(tuple, hs) rather than a generator per record: this loop is the consumer's
        # per-record cost.
        return [
            Record(base + od, ts0 + td, k, v, tuple(map(tuple, hs)) if hs else ())
            for od, td, k, v, hs in body
        ]
    except (TypeError, ValueError) as e:
        raise CorruptRecordError(f"malformed record in body: {e}") from e


def stamp(batch: bytearray | memoryview, base_offset: int, leader_epoch: int) -> None:
    """Patch base offset and leader epoch in place; both are outside the CRC."""
    _I64.pack_into(batch, 0, base_offset)
    _I32.pack_into(batch, LEADER_EPOCH_OFFSET, leader_epoch)
